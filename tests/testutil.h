/* SPDX-License-Identifier: MIT */
/* Helpers shared by the Check unit tests. They abort the test on failure. */
#ifndef PLACEFS_TESTUTIL_H
#define PLACEFS_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "common/device.h"
#include "common/error.h"

/*
 * The whole of a Check program's main(): runs every test of s in a new
 * runner (verbosity from $CK_VERBOSITY, CK_NORMAL when it is unset; fork
 * mode from $CK_FORK as Check always does), frees the runner and returns
 * the process's exit status: EXIT_SUCCESS when no test failed or errored,
 * EXIT_FAILURE otherwise. A program with nothing else to do in main() is
 *
 *	int main(void)
 *	{
 *		return tu_run_suite(foo_suite());
 *	}
 */
int tu_run_suite(Suite *s);

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
/* The device spec (lib/common/device.h grammar) as a value; fails the test if it does not parse. */
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
 * Parses one corpus file for tu_corpus_replay(): path is where it lies, name
 * its name in the corpus (the name its message must start with). Returns the
 * parser's result, 0 or -errno, with err filled on failure (the function
 * clears err first). It makes the format's own assertions: on success on
 * what was parsed (then frees it), on failure that nothing was returned.
 */
typedef int (*tu_corpus_parse_fn)(const char *path, const char *name, struct placefs_error *err,
                                  void *ctx);

enum tu_corpus_want {
	TU_CORPUS_GOOD, /* every file is accepted */
	TU_CORPUS_BAD,  /* every file is refused, for the reason EXPECTED.tsv gives */
};

/*
 * Replays the corpus in dir (tests/corpus/<good|bad>-<format>/, written by
 * tests/corpus/make-corpus.py): every entry whose name ends in suffix, in
 * name order, goes through parse(path, name, &err, ctx). Fails the test when
 * dir holds fewer than min such files, and:
 *
 * TU_CORPUS_GOOD: when parse refuses a file (the message is shown).
 * TU_CORPUS_BAD: when parse accepts a file, when its message does not start
 * with "name:", or when it lacks the file's fragment from dir/EXPECTED.tsv
 * (one "file<TAB>fragment" line per file, exactly one per file, '#' lines
 * are comments).
 *
 * Returns how many files were replayed.
 */
size_t tu_corpus_replay(const char *dir, const char *suffix, size_t min, enum tu_corpus_want want,
                        tu_corpus_parse_fn parse, void *ctx);

#endif
