/* SPDX-License-Identifier: MIT */
/*
 * fuzz: what the fuzz targets share. Each tests/fuzz/fuzz_<target>.c defines
 * LLVMFuzzerTestOneInput(); `make fuzz` links it with libFuzzer and `make
 * check` links it with tests/fuzz/replay.c, which feeds it the corpora.
 *
 * FUZZ_CHECK() is an assertion that survives NDEBUG: a broken invariant must
 * stop the run with a message in every build, so that libFuzzer records the
 * input as a crash and the replay test fails.
 */
#ifndef PLACEFS_FUZZ_H
#define PLACEFS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

#define FUZZ_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__,       \
			        #cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/*
 * What every failing lib/ call must leave behind: the code it returned, a
 * kind, and a non-empty message on one line (a hostile input must not be
 * able to forge log lines).
 */
static inline void fuzz_check_error(const struct placefs_error *err, int rc)
{
	FUZZ_CHECK(rc < 0);
	FUZZ_CHECK(err->code == rc);
	FUZZ_CHECK(err->kind != PLACEFS_E_NONE);
	FUZZ_CHECK(memchr(err->msg, '\0', sizeof(err->msg)) != NULL);
	FUZZ_CHECK(err->msg[0] != '\0');
	FUZZ_CHECK(strchr(err->msg, '\n') == NULL);
	FUZZ_CHECK(strchr(err->msg, '\r') == NULL);
}

/* A NUL-terminated heap copy of the input, exactly len + 1 bytes so ASan sees overreads. */
static inline char *fuzz_strdup(const uint8_t *data, size_t len)
{
	char *s = malloc(len + 1);

	FUZZ_CHECK(s != NULL);
	if (len)
		memcpy(s, data, len);
	s[len] = '\0';
	return s;
}

#endif
