/* SPDX-License-Identifier: MIT */
#include "config.h"

/*
 * Fuzz target: tensor name <-> file name (lib/common/name.h). The input is used both
 * as a tensor name and as a file name: encoding is checked against the
 * contract byte by byte, decode(encode(x)) must give x back, and a file name
 * that decodes must be exactly what the encoder writes for the result (the
 * mapping is a bijection on what it accepts, so one tensor has one file name).
 */

#include <errno.h>

#include "fuzz.h"
#include "common/name.h"

/*
 * The encoding of lib/common/name.h, written again from the contract. Returns 0, or
 * the refusals that apply: ORACLE_EINVAL (empty, control character) and/or
 * ORACLE_ETOOLONG (encoded length over PLACEFS_NAME_MAX). When both apply the
 * contract does not say which errno wins, so either is accepted.
 */
#define ORACLE_EINVAL   1
#define ORACLE_ETOOLONG 2

/*
 * The UTF-8 length of a hidden character at p, 0 if none: a C1 control
 * (U+0080..U+009F) or a Bidi_Control character (U+061C, U+200E, U+200F,
 * U+202A..U+202E, U+2066..U+2069). The encoder writes each of its bytes as %XX.
 */
static size_t oracle_hidden(const unsigned char *p)
{
	static const struct {
		unsigned cp_lo, cp_hi;
	} ranges[] = {
	        {0x80, 0x9f}, {0x61c, 0x61c}, {0x200e, 0x200f}, {0x202a, 0x202e}, {0x2066, 0x2069}};
	unsigned cp;
	size_t n;

	if (p[0] >= 0xc2 && p[0] <= 0xdf && (p[1] & 0xc0) == 0x80) {
		cp = ((p[0] & 0x1fu) << 6) | (p[1] & 0x3fu);
		n = 2;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef && (p[1] & 0xc0) == 0x80 && (p[2] & 0xc0) == 0x80 &&
	           (p[0] != 0xe0 || p[1] >= 0xa0)) {
		/* E0 followed by less than A0 is an overlong form, not a character. */
		cp = ((p[0] & 0x0fu) << 12) | ((p[1] & 0x3fu) << 6) | (p[2] & 0x3fu);
		n = 3;
	} else {
		return 0;
	}
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		if (cp >= ranges[i].cp_lo && cp <= ranges[i].cp_hi)
			return n;
	return 0;
}

static int oracle_encode(const char *name, char out[PLACEFS_NAME_MAX + 1])
{
	size_t o = 0;
	int why = 0;

	if (!*name)
		return ORACLE_EINVAL;
	for (const char *p = name; *p; p++) {
		unsigned char c = (unsigned char)*p;
		const char *rep = c == '%' ? "%25" : c == '/' ? "%2F" : NULL;
		size_t rl, hl = oracle_hidden((const unsigned char *)p);

		if (hl) {
			for (size_t k = 0; k < hl; k++) {
				if (o + 3 > PLACEFS_NAME_MAX) {
					why |= ORACLE_ETOOLONG;
					break;
				}
				snprintf(out + o, 4, "%%%02X", (unsigned char)p[k]);
				o += 3;
			}
			p += hl - 1;
			continue;
		}

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
