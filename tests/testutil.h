/* SPDX-License-Identifier: MIT */
/* Helpers shared by the Check unit tests. They abort the test on failure. */
#ifndef PLACEFS_TESTUTIL_H
#define PLACEFS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

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
/* Reads a whole file into a malloc'd buffer; *len gets its size. */
uint8_t *tu_read_file(const char *path, size_t *len);

#endif
