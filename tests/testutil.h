/* SPDX-License-Identifier: MIT */
/* Helpers shared by the Check unit tests. They abort the test on failure. */
#ifndef PLACEFS_TESTUTIL_H
#define PLACEFS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"

/* Creates a fresh directory under $TMPDIR (or /tmp); returns a malloc'd path. */
char *tu_mkdtemp(void);
/* Removes a directory tree (best effort). */
void tu_rmtree(const char *path);
/* Joins dir and name into a malloc'd path. */
char *tu_path(const char *dir, const char *name);
/* Writes len bytes to path (created/truncated). */
void tu_write_file(const char *path, const void *data, size_t len);
/* Writes a text file. */
void tu_write_text(const char *path, const char *text);
/*
 * Builds a raw safetensors image: 8-byte LE length of `json`, `json`
 * itself (not padded), then `data_len` bytes of pattern (byte i = i * 31 + 7).
 * Returns a malloc'd buffer and its size in *len.
 */
uint8_t *tu_st_image(const char *json, uint64_t data_len, size_t *len);
/* Same, written to a file. */
void tu_st_write(const char *path, const char *json, uint64_t data_len);
/* The device spec (lib/device.h grammar) as a value; fails the test if it does not parse. */
struct placefs_device tu_device(const char *spec);
/* Reads a whole file into a malloc'd buffer; *len gets its size. */
uint8_t *tu_read_file(const char *path, size_t *len);

/*
 * Lists the entries of dir whose names end in suffix (and are longer than
 * it), sorted by name. *out gets a malloc'd array of malloc'd names; returns
 * how many.
 */
size_t tu_list_dir(const char *dir, const char *suffix, char ***out);

/*
 * A corpus's EXPECTED.tsv (written by tests/corpus/make-corpus.py): one
 * "file<TAB>fragment" line per bad file; the fragment must appear in the
 * message the file is refused with. Lines starting with '#' are comments.
 */
struct tu_expect {
	char *buf; /* the file's text; free() it when done */
	size_t n;
	char *file[256];
	char *frag[256];
};

void tu_expect_load(struct tu_expect *ex, const char *dir);
/* The fragment for file; fails the test when the file has no line. */
const char *tu_expect_for(const struct tu_expect *ex, const char *file);

#endif
