/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/name.h"
#include "testutil.h"

static void enc_is(const char *name, const char *want)
{
	char out[PLACEFS_NAME_MAX + 1];
	char back[PLACEFS_NAME_MAX + 1];
	struct placefs_error err;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_name_encode(name, out, &err);
	ck_assert_msg(rc == 0, "encode \"%s\": %d %s", name, rc, err.msg);
	ck_assert_str_eq(out, want);
	/* Every encoding decodes back to the name. */
	ck_assert_int_eq(placefs_name_decode(out, back, sizeof(back)), 0);
	ck_assert_str_eq(back, name);
}

static const char *enc_bad(const char *name, int code)
{
	static struct placefs_error err;
	char out[PLACEFS_NAME_MAX + 1];
	int rc;

	placefs_error_clear(&err);
	memset(out, 'Z', sizeof(out));
	rc = placefs_name_encode(name, out, &err);
	ck_assert_int_eq(rc, code);
	ck_assert_int_eq(err.code, code);
	ck_assert_int_eq(err.kind, PLACEFS_E_NAME);
	ck_assert_msg(strncmp(err.msg, "tensor \"", 8) == 0, "message: %s", err.msg);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
	return err.msg;
}

static int dec(const char *fname, char *out, size_t outlen)
{
	return placefs_name_decode(fname, out, outlen);
}

START_TEST(test_plain_names_unchanged)
{
	enc_is("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight");
	enc_is("lm_head.weight", "lm_head.weight");
	enc_is("a", "a");
	/* Only a leading dot is special; spaces, colons, backslashes stay. */
	enc_is("a.", "a.");
	enc_is("a b:c\\d", "a b:c\\d");
	enc_is("2E", "2E");
	/* UTF-8 and any byte >= 0x80 are kept as they are. */
	enc_is("caf\xc3\xa9.\xe6\x97\xa5", "caf\xc3\xa9.\xe6\x97\xa5");
	enc_is("\x80\xff", "\x80\xff");
}
END_TEST

START_TEST(test_escapes)
{
	enc_is("%", "%25");
	enc_is("/", "%2F");
	enc_is(".", "%2E");
	enc_is("..", "%2E.");
	enc_is("...", "%2E..");
	enc_is(".hidden", "%2Ehidden");
	enc_is("./x", "%2E%2Fx");
	enc_is("a/b", "a%2Fb");
	enc_is("a//b", "a%2F%2Fb");
	enc_is("/leading", "%2Fleading");
	enc_is("100%", "100%25");
	enc_is("%2F", "%252F");
	enc_is("%2E", "%252E");
	enc_is("%25", "%2525");
	enc_is("a.b/c%d", "a.b%2Fc%25d");
}
END_TEST

START_TEST(test_injective_pairs)
{
	char x[PLACEFS_NAME_MAX + 1], y[PLACEFS_NAME_MAX + 1];
	static const char *const pairs[][2] = {
	        {"a/b", "a%2Fb"}, {".", "%2E"}, {"%", "%25"}, {".a", "%2Ea"}, {"a.", "a%2E"},
	};

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		ck_assert_int_eq(placefs_name_encode(pairs[i][0], x, NULL), 0);
		ck_assert_int_eq(placefs_name_encode(pairs[i][1], y, NULL), 0);
		ck_assert_msg(strcmp(x, y) != 0, "\"%s\" and \"%s\" collide", pairs[i][0],
		              pairs[i][1]);
	}
}
END_TEST

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Exhaustive over a small alphabet rich in the special bytes: all names of up
 * to 4 bytes get distinct encodings, each decodes back, and every string that
 * decodes at all is exactly what the encoder produces for its decoding.
 */
START_TEST(test_exhaustive_small_alphabet)
{
	static const char alpha[] = "a./%2EF5";
	const size_t k = sizeof(alpha) - 1;
	size_t total = 0, n = 0, len;
	char **encs;

	for (len = 1, total = 0; len <= 4; len++) {
		size_t c = 1;

		for (size_t i = 0; i < len; i++)
			c *= k;
		total += c;
	}
	encs = calloc(total, sizeof(*encs));
	ck_assert_ptr_nonnull(encs);
	for (len = 1; len <= 4; len++) {
		size_t count = 1;

		for (size_t i = 0; i < len; i++)
			count *= k;
		for (size_t idx = 0; idx < count; idx++) {
			char s[5], out[PLACEFS_NAME_MAX + 1], back[PLACEFS_NAME_MAX + 1];
			size_t v = idx;

			for (size_t i = 0; i < len; i++) {
				s[i] = alpha[v % k];
				v /= k;
			}
			s[len] = '\0';
			ck_assert_int_eq(placefs_name_encode(s, out, NULL), 0);
			encs[n++] = strdup(out);
			ck_assert_int_eq(dec(out, back, sizeof(back)), 0);
			ck_assert_str_eq(back, s);
			/* Read as a file name, s decodes only if it is a canonical encoding. */
			if (dec(s, back, sizeof(back)) == 0) {
				ck_assert_int_eq(placefs_name_encode(back, out, NULL), 0);
				ck_assert_msg(strcmp(out, s) == 0,
				              "\"%s\" decodes but is not canonical", s);
			}
		}
	}
	ck_assert_uint_eq(n, total);
	qsort(encs, n, sizeof(*encs), cmp_str);
	for (size_t i = 1; i < n; i++)
		ck_assert_msg(strcmp(encs[i - 1], encs[i]) != 0, "collision on \"%s\"", encs[i]);
	for (size_t i = 0; i < n; i++)
		free(encs[i]);
	free(encs);
}
END_TEST

START_TEST(test_empty_refused)
{
	ck_assert_str_eq(enc_bad("", -EINVAL), "tensor \"\": an empty name cannot be a file name");
	{
		char out[PLACEFS_NAME_MAX + 1];

		ck_assert_int_eq(placefs_name_encode(NULL, out, NULL), -EINVAL);
	}
}
END_TEST

START_TEST(test_control_refused)
{
	const char *msg;
	char name[4];

	msg = enc_bad("a\x01z", -EINVAL);
	ck_assert_str_eq(msg, "tensor \"a\\x01z\": name contains control character \\x01, which "
	                      "cannot be in a file name");
	ck_assert_ptr_null(strchr(msg, '\x01'));
	msg = enc_bad("tab\there", -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "\"tab\\x09here\""));
	msg = enc_bad("nl\n", -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "\\x0a"));
	ck_assert_ptr_null(strchr(msg, '\n'));
	msg = enc_bad("del\x7f", -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "\\x7f"));
	/* Every control byte, at the start and in the middle. */
	for (int c = 1; c < 0x20; c++) {
		name[0] = 'x';
		name[1] = (char)c;
		name[2] = '\0';
		enc_bad(name, -EINVAL);
		name[0] = (char)c;
		name[1] = '\0';
		enc_bad(name, -EINVAL);
	}
	/* A quote in a refused name is escaped in the message. */
	msg = enc_bad("q\"\x02", -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "\"q\\\"\\x02\""));
}
END_TEST

START_TEST(test_length_boundary)
{
	char name[1024];
	char want[PLACEFS_NAME_MAX + 1];
	const char *msg;

	/* 255 plain bytes fit, 256 do not. */
	memset(name, 'a', 255);
	name[255] = '\0';
	enc_is(name, name);
	name[255] = 'a';
	name[256] = '\0';
	msg = enc_bad(name, -ENAMETOOLONG);
	ck_assert_ptr_nonnull(strstr(msg, "encoded file name is 256 bytes, more than 255"));
	/* The limit is on the encoded name: 252 + "%2F" = 255 fits, 253 + 3 does not. */
	memset(name, 'a', 252);
	name[252] = '/';
	name[253] = '\0';
	memset(want, 'a', 252);
	memcpy(want + 252, "%2F", 4);
	enc_is(name, want);
	memset(name, 'a', 253);
	name[253] = '/';
	name[254] = '\0';
	msg = enc_bad(name, -ENAMETOOLONG);
	ck_assert_ptr_nonnull(strstr(msg, "256 bytes"));
	/* A leading dot costs 3 bytes too. */
	name[0] = '.';
	memset(name + 1, 'b', 252);
	name[253] = '\0';
	ck_assert_int_eq(placefs_name_encode(name, want, NULL), 0);
	ck_assert_uint_eq(strlen(want), 255);
	name[253] = 'b';
	name[254] = '\0';
	enc_bad(name, -ENAMETOOLONG);
	/* 85 '%' encode to exactly 255 bytes, 86 to 258. */
	memset(name, '%', 85);
	name[85] = '\0';
	ck_assert_int_eq(placefs_name_encode(name, want, NULL), 0);
	ck_assert_uint_eq(strlen(want), 255);
	name[85] = '%';
	name[86] = '\0';
	msg = enc_bad(name, -ENAMETOOLONG);
	ck_assert_ptr_nonnull(strstr(msg, "258 bytes"));
	/* A very long name is shortened in the message. */
	memset(name, 'n', 1000);
	name[1000] = '\0';
	msg = enc_bad(name, -ENAMETOOLONG);
	ck_assert_ptr_nonnull(strstr(msg, "...\""));
	ck_assert_ptr_nonnull(strstr(msg, "1000 bytes"));
}
END_TEST

START_TEST(test_decode_rejects)
{
	static const char *const bad[] = {
	        "",    "%",     "%2",   "%2f",   "%2e",  "%25%", "a%",   "a%2", "%41",
	        "%20", "%3F",   "%2G",  "a%2Eb", "a%2E", ".",    ".a",   "..",  "a/b",
	        "/",   "a\x01", "\x7f", "\tx",   "%%25", "x%2e", "%2 F",
	};
	char out[PLACEFS_NAME_MAX + 1];
	char longf[300];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(dec(bad[i], out, sizeof(out)) == -EINVAL, "\"%s\" decoded", bad[i]);
	ck_assert_int_eq(dec(NULL, out, sizeof(out)), -EINVAL);
	/* Longer than any encoding can be. */
	memset(longf, 'a', 256);
	longf[256] = '\0';
	ck_assert_int_eq(dec(longf, out, sizeof(out)), -EINVAL);
	longf[255] = '\0';
	ck_assert_int_eq(dec(longf, out, sizeof(out)), 0);
}
END_TEST

/*
 * C1 controls and bidirectional formatting characters would make a listing
 * show another name (U+202E reverses what follows): each of their bytes is
 * escaped as %XX. Their neighbours in the same UTF-8 blocks stay as they are.
 */
START_TEST(test_hidden_characters_escaped)
{
	char out[PLACEFS_NAME_MAX + 1];

	enc_is("a\xe2\x80\xae"
	       "txt.exe",
	       "a%E2%80%AEtxt.exe");      /* U+202E RLO */
	enc_is("\xc2\x80", "%C2%80");     /* U+0080 */
	enc_is("x\xc2\x9fy", "x%C2%9Fy"); /* U+009F */
	enc_is("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad",
	       "%E2%80%AA%E2%80%AB%E2%80%AC%E2%80%AD");                         /* U+202A..U+202D */
	enc_is("\xe2\x81\xa6\xe2\x81\xa9", "%E2%81%A6%E2%81%A9");               /* U+2066, U+2069 */
	enc_is("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c", "%E2%80%8E%E2%80%8F%D8%9C"); /* LRM RLM ALM */
	/* Neighbours: U+00A0, U+2029, U+202F, U+2065, U+206A, U+061B are kept. */
	enc_is("\xc2\xa0\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa\xd8\x9b",
	       "\xc2\xa0\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa\xd8\x9b");
	/* No file name carries one raw, and the escapes stay unambiguous. */
	ck_assert_int_eq(dec("a\xe2\x80\xae", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(dec("\xc2\x85", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(dec("%E2%80%A9", out, sizeof(out)), -EINVAL); /* never emitted */
	ck_assert_int_eq(dec("%C3%A9", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(dec("%e2%80%ae", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(dec("%E2%80", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(dec("%C2%8", out, sizeof(out)), -EINVAL);
	/* The length limit counts the escapes: 28 x U+202E is 252 bytes, 29 too many. */
	char name[29 * 3 + 1];
	for (int i = 0; i < 29; i++)
		memcpy(name + 3 * i, "\xe2\x80\xae", 3);
	name[28 * 3] = '\0';
	ck_assert_int_eq(placefs_name_encode(name, out, NULL), 0);
	ck_assert_uint_eq(strlen(out), 28 * 9);
	name[28 * 3] = '\xe2';
	name[29 * 3] = '\0';
	ck_assert_int_eq(placefs_name_encode(name, out, NULL), -ENAMETOOLONG);
}
END_TEST

START_TEST(test_decode_outlen)
{
	char out[8];

	/* strlen(fname) + 1 is always enough; less than the decoded size is refused. */
	ck_assert_int_eq(dec("%2Fab", out, 6), 0);
	ck_assert_str_eq(out, "/ab");
	ck_assert_int_eq(dec("%2Fab", out, 4), 0);
	ck_assert_int_eq(dec("%2Fab", out, 3), -EINVAL);
	ck_assert_int_eq(dec("abc", out, 3), -EINVAL);
	ck_assert_int_eq(dec("abc", out, 0), -EINVAL);
}
END_TEST

static Suite *name_suite(void)
{
	Suite *s = suite_create("name");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_plain_names_unchanged);
	tcase_add_test(tc, test_escapes);
	tcase_add_test(tc, test_injective_pairs);
	tcase_add_test(tc, test_exhaustive_small_alphabet);
	tcase_add_test(tc, test_empty_refused);
	tcase_add_test(tc, test_control_refused);
	tcase_add_test(tc, test_length_boundary);
	tcase_add_test(tc, test_decode_rejects);
	tcase_add_test(tc, test_decode_outlen);
	tcase_add_test(tc, test_hidden_characters_escaped);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(name_suite());
}
