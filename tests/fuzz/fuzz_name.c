/* SPDX-License-Identifier: MIT */
#include "config.h"

/*
 * Fuzz target: tensor name <-> file name (lib/name.h). The input is used both
 * as a tensor name and as a file name: encoding is checked against the
 * contract byte by byte, decode(encode(x)) must give x back, and a file name
 * that decodes must be exactly what the encoder writes for the result (the
 * mapping is a bijection on what it accepts, so one tensor has one file name).
 */

#include <errno.h>

#include "fuzz.h"
#include "name.h"

/*
 * The encoding of lib/name.h, written again from the contract. Returns 0, or
 * the refusals that apply: ORACLE_EINVAL (empty, control character) and/or
 * ORACLE_ETOOLONG (encoded length over PLACEFS_NAME_MAX). When both apply the
 * contract does not say which errno wins, so either is accepted.
 */
#define ORACLE_EINVAL   1
#define ORACLE_ETOOLONG 2

static int oracle_encode(const char *name, char out[PLACEFS_NAME_MAX + 1])
{
	size_t o = 0;
	int why = 0;

	if (!*name)
		return ORACLE_EINVAL;
	for (const char *p = name; *p; p++) {
		unsigned char c = (unsigned char)*p;
		const char *rep = c == '%' ? "%25" : c == '/' ? "%2F" : NULL;
		size_t rl;

		if (c == '.' && p == name)
			rep = "%2E";
		if ((c >= 0x01 && c <= 0x1f) || c == 0x7f)
			why |= ORACLE_EINVAL;
		rl = rep ? 3 : 1;
		if (o + rl > PLACEFS_NAME_MAX) {
			why |= ORACLE_ETOOLONG;
			continue;
		}
		memcpy(out + o, rep ? rep : p, rl);
		o += rl;
	}
	out[o] = '\0';
	return why;
}

static void check_encode(const char *name)
{
	char *enc = malloc(PLACEFS_NAME_MAX + 1), want[PLACEFS_NAME_MAX + 1];
	struct placefs_error err;
	int rc, orc;

	FUZZ_CHECK(enc != NULL);
	placefs_error_clear(&err);
	rc = placefs_name_encode(name, enc, &err);
	orc = oracle_encode(name, want);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG);
	FUZZ_CHECK((rc == 0) == (orc == 0));
	FUZZ_CHECK(rc != -EINVAL || (orc & ORACLE_EINVAL));
	FUZZ_CHECK(rc != -ENAMETOOLONG || (orc & ORACLE_ETOOLONG));
	if (rc) {
		fuzz_check_error(&err, rc);
		FUZZ_CHECK(err.kind == PLACEFS_E_NAME);
	} else {
		size_t elen = strlen(enc);
		char *dec = malloc(elen + 1);

		FUZZ_CHECK(dec != NULL);
		FUZZ_CHECK(err.code == 0);
		FUZZ_CHECK(strcmp(enc, want) == 0);
		FUZZ_CHECK(elen > 0 && elen <= PLACEFS_NAME_MAX);
		FUZZ_CHECK(strchr(enc, '/') == NULL && enc[0] != '.');
		/* The decoder needs no more than strlen(fname) + 1 bytes. */
		FUZZ_CHECK(placefs_name_decode(enc, dec, elen + 1) == 0);
		FUZZ_CHECK(strcmp(dec, name) == 0);
		free(dec);
	}
	free(enc);
}

static void check_decode(const char *fname)
{
	size_t flen = strlen(fname);
	char *dec = malloc(flen + 1), *enc = malloc(PLACEFS_NAME_MAX + 1);

	FUZZ_CHECK(dec != NULL && enc != NULL);
	if (placefs_name_decode(fname, dec, flen + 1) == 0) {
		FUZZ_CHECK(strlen(dec) <= flen);
		FUZZ_CHECK(placefs_name_encode(dec, enc, NULL) == 0);
		FUZZ_CHECK(strcmp(enc, fname) == 0);
	}
	/* A buffer one byte short must be refused, never overrun. */
	if (flen > 0) {
		char *small = malloc(flen);

		FUZZ_CHECK(small != NULL);
		if (placefs_name_decode(fname, small, flen) == 0)
			FUZZ_CHECK(strlen(small) < flen);
		free(small);
	}
	free(enc);
	free(dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	char *s = fuzz_strdup(data, len);

	check_encode(s);
	check_decode(s);
	free(s);
	return 0;
}
