/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/size.h"
#include "testutil.h"

#define ENV "INSTANTTENSOR_BUFFER_SIZE"
#define GRAMMAR                                                                                    \
	"(digits with an optional suffix: K, M, G, T, KiB, MiB, GiB, TiB (powers of 1024) or KB, " \
	"MB, GB, TB (powers of 1000))"

static uint64_t parse_ok(const char *text)
{
	struct placefs_error err;
	uint64_t v = 0;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_size_parse(text, ENV, &v, &err);
	ck_assert_msg(rc == 0, "\"%s\" should parse, got %d: %s", text, rc, err.msg);
	ck_assert_int_eq(err.code, 0);
	return v;
}

/*
 * Expects `text` to fail with `code`; checks the common message rules (the
 * origin, the quoted value, the kind) and returns the message for more checks.
 */
static const char *parse_bad(const char *text, int code, const char *origin)
{
	static struct placefs_error err;
	uint64_t v = 12345;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_size_parse(text, origin, &v, &err);
	ck_assert_msg(rc == code, "\"%s\": want %d, got %d (%s)", text, code, rc, err.msg);
	ck_assert_int_eq(err.code, code);
	ck_assert_int_eq(err.kind, PLACEFS_E_LIMIT);
	ck_assert_msg(v == 12345, "\"%s\": output written on failure", text);
	ck_assert_msg(strncmp(err.msg, origin, strlen(origin)) == 0, "origin missing: %s", err.msg);
	ck_assert_msg(strchr(err.msg, '\n') == NULL, "multi-line message: %s", err.msg);
	return err.msg;
}

/* Section 5.2 of the seed semantics, row by row. */
START_TEST(test_seed_table)
{
	/* "" */
	ck_assert_str_eq(parse_bad("", -EINVAL, ENV), ENV "=\"\": empty value " GRAMMAR);
	/* 0 and -5 */
	ck_assert_str_eq(parse_bad("0", -EINVAL, ENV), ENV "=\"0\": must be greater than zero");
	ck_assert_str_eq(parse_bad("-5", -EINVAL, ENV), ENV "=\"-5\": must be greater than zero");
	/* 8M and 8MiB are 8 x 2^20 here (the vLLM fork refuses them). */
	ck_assert_uint_eq(parse_ok("8M"), 8ULL << 20);
	ck_assert_uint_eq(parse_ok("8MiB"), 8ULL << 20);
	/* 1e6, 8.0, 0x10 */
	ck_assert_str_eq(parse_bad("1e6", -EINVAL, ENV),
	                 ENV "=\"1e6\": not a whole number of bytes " GRAMMAR);
	ck_assert_str_eq(parse_bad("8.0", -EINVAL, ENV),
	                 ENV "=\"8.0\": not a whole number of bytes " GRAMMAR);
	ck_assert_str_eq(parse_bad("0x10", -EINVAL, ENV),
	                 ENV "=\"0x10\": not a whole number of bytes " GRAMMAR);
	/* What Python's int() accepts and placefs does not. */
	ck_assert_str_eq(parse_bad(" 8 ", -EINVAL, ENV),
	                 ENV "=\" 8 \": not a whole number of bytes " GRAMMAR);
	ck_assert_str_eq(parse_bad("+8", -EINVAL, ENV),
	                 ENV "=\"+8\": not a whole number of bytes " GRAMMAR);
	ck_assert_str_eq(parse_bad("8_388_608", -EINVAL, ENV),
	                 ENV "=\"8_388_608\": not a whole number of bytes " GRAMMAR);
	/* Fullwidth 8 (U+FF18) and Arabic-Indic 8 (U+0668). */
	parse_bad("\xef\xbc\x98", -EINVAL, ENV);
	parse_bad("\xd9\xa8", -EINVAL, ENV);
	parse_bad("8\xd9\xa8", -EINVAL, ENV);
	/* The seed's own value. */
	ck_assert_uint_eq(parse_ok("8388608"), 8388608);
}
END_TEST

START_TEST(test_suffixes)
{
	ck_assert_uint_eq(parse_ok("1"), 1);
	ck_assert_uint_eq(parse_ok("007"), 7);
	ck_assert_uint_eq(parse_ok("3K"), 3ULL << 10);
	ck_assert_uint_eq(parse_ok("3KiB"), 3ULL << 10);
	ck_assert_uint_eq(parse_ok("5M"), 5ULL << 20);
	ck_assert_uint_eq(parse_ok("5MiB"), 5ULL << 20);
	ck_assert_uint_eq(parse_ok("7G"), 7ULL << 30);
	ck_assert_uint_eq(parse_ok("7GiB"), 7ULL << 30);
	ck_assert_uint_eq(parse_ok("2T"), 2ULL << 40);
	ck_assert_uint_eq(parse_ok("2TiB"), 2ULL << 40);
	ck_assert_uint_eq(parse_ok("1024K"), 1ULL << 20);
}
END_TEST

/* KB/MB/GB/TB are powers of 1000, as Hugging Face writes max_shard_size. */
START_TEST(test_si_suffixes)
{
	ck_assert_uint_eq(parse_ok("64MB"), 64000000);
	ck_assert_uint_eq(parse_ok("5GB"), 5000000000ULL);
	ck_assert_uint_eq(parse_ok("1KB"), 1000);
	ck_assert_uint_eq(parse_ok("3TB"), 3000000000000ULL);
	ck_assert_uint_eq(parse_ok("1000KB"), parse_ok("1MB"));
	/* The binary forms stay binary, beside them. */
	ck_assert_uint_eq(parse_ok("64M"), 64ULL << 20);
	ck_assert_uint_eq(parse_ok("64MiB"), 64ULL << 20);
	ck_assert_uint_ne(parse_ok("64MB"), parse_ok("64M"));
	/* Zero and range after scaling by a power of ten. */
	parse_bad("0MB", -EINVAL, ENV);
	parse_bad("0TB", -EINVAL, ENV);
	ck_assert_uint_eq(parse_ok("18446744073709551KB"), 18446744073709551000ULL);
	parse_bad("18446744073709552KB", -ERANGE, ENV);
	ck_assert_uint_eq(parse_ok("18446744TB"), 18446744000000000000ULL);
	parse_bad("18446745TB", -ERANGE, ENV);
	ck_assert_uint_eq(parse_ok("18446744073GB"), 18446744073000000000ULL);
	parse_bad("18446744074GB", -ERANGE, ENV);
	/* Garbage still wins over range. */
	parse_bad("99999999999999999999999MB", -ERANGE, ENV);
	parse_bad("99999999999999999999999MBx", -EINVAL, ENV);
}
END_TEST

/* The message of a bad suffix lists every accepted one. */
START_TEST(test_suffix_list)
{
	static const char *const all[] = {"K,",    " M,",   " G,",  " T,",  " KiB,", " MiB,",
	                                  " GiB,", " TiB ", " KB,", " MB,", " GB,",  " TB "};
	const char *msg = parse_bad("8XB", -EINVAL, "-o buffer_size");
	size_t i;

	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ck_assert_msg(strstr(msg, all[i]) != NULL, "\"%s\" missing in: %s", all[i], msg);
	ck_assert_ptr_nonnull(strstr(msg, "1024"));
	ck_assert_ptr_nonnull(strstr(msg, "1000"));
}
END_TEST

START_TEST(test_unknown_suffix)
{
	ck_assert_str_eq(parse_bad("8mB", -EINVAL, ENV),
	                 ENV "=\"8mB\": unknown suffix \"mB\" " GRAMMAR);
	ck_assert_str_eq(parse_bad("8m", -EINVAL, ENV),
	                 ENV "=\"8m\": unknown suffix \"m\" " GRAMMAR);
	ck_assert_str_eq(parse_bad("8 MiB", -EINVAL, ENV),
	                 ENV "=\"8 MiB\": unknown suffix \" MiB\" " GRAMMAR);
	parse_bad("8k", -EINVAL, ENV);
	parse_bad("8mib", -EINVAL, ENV);
	parse_bad("8Ki", -EINVAL, ENV);
	parse_bad("8kB", -EINVAL, ENV);
	parse_bad("8kb", -EINVAL, ENV);
	parse_bad("8Kb", -EINVAL, ENV);
	parse_bad("8Mb", -EINVAL, ENV);
	parse_bad("8PB", -EINVAL, ENV);
	parse_bad("8KiBB", -EINVAL, ENV);
	parse_bad("8MBi", -EINVAL, ENV);
	parse_bad("8MB ", -EINVAL, ENV);
	parse_bad("8B", -EINVAL, ENV);
	parse_bad("8P", -EINVAL, ENV);
	parse_bad("8PiB", -EINVAL, ENV);
	parse_bad("8KiBx", -EINVAL, ENV);
	parse_bad("8MM", -EINVAL, ENV);
	parse_bad("8M ", -EINVAL, ENV);
	parse_bad("8\n", -EINVAL, ENV);
	/* A suffix without digits, and other garbage. */
	parse_bad("K", -EINVAL, ENV);
	parse_bad("MiB", -EINVAL, ENV);
	parse_bad("abc", -EINVAL, ENV);
	parse_bad("-", -EINVAL, ENV);
	parse_bad("8,5", -EINVAL, ENV);
	parse_bad("8.5M", -EINVAL, ENV);
	parse_bad("1E6", -EINVAL, ENV);
	parse_bad("0X10", -EINVAL, ENV);
}
END_TEST

START_TEST(test_zero_forms)
{
	parse_bad("00", -EINVAL, ENV);
	parse_bad("0K", -EINVAL, ENV);
	parse_bad("0TiB", -EINVAL, ENV);
	parse_bad("-0", -EINVAL, ENV);
	parse_bad("-8M", -EINVAL, ENV);
}
END_TEST

START_TEST(test_boundaries)
{
	const char *msg;

	ck_assert_uint_eq(parse_ok("18446744073709551615"), UINT64_MAX);
	ck_assert_uint_eq(parse_ok("000018446744073709551615"), UINT64_MAX);
	msg = parse_bad("18446744073709551616", -ERANGE, ENV);
	ck_assert_str_eq(msg, ENV "=\"18446744073709551616\": too large (the most is "
	                          "18446744073709551615 bytes)");
	parse_bad("99999999999999999999999999", -ERANGE, ENV);
	/* 2^24 TiB = 2^64: one past the top after scaling. */
	ck_assert_uint_eq(parse_ok("16777215T"), 16777215ULL << 40);
	parse_bad("16777216T", -ERANGE, ENV);
	parse_bad("16777216TiB", -ERANGE, ENV);
	ck_assert_uint_eq(parse_ok("17179869183G"), 17179869183ULL << 30);
	parse_bad("17179869184G", -ERANGE, ENV);
	ck_assert_uint_eq(parse_ok("18014398509481983K"), 18014398509481983ULL << 10);
	parse_bad("18014398509481984K", -ERANGE, ENV);
	/* Garbage wins over range: a huge number with a bad tail is -EINVAL. */
	parse_bad("99999999999999999999999.5", -EINVAL, ENV);
	parse_bad("99999999999999999999999MiBs", -EINVAL, ENV);
}
END_TEST

START_TEST(test_message_content)
{
	const char *msg;

	/* The origin is whatever the caller names. */
	msg = parse_bad("8.0", -EINVAL, "--buffer-size");
	ck_assert_str_eq(msg, "--buffer-size=\"8.0\": not a whole number of bytes " GRAMMAR);
	msg = parse_bad("lots", -EINVAL, "-o buffer_size");
	ck_assert_ptr_nonnull(strstr(msg, "\"lots\""));
	/* Control bytes and quotes in the value are escaped, never printed raw. */
	msg = parse_bad("8\x01\"\\", -EINVAL, ENV);
	ck_assert_ptr_null(strchr(msg, '\x01'));
	ck_assert_ptr_nonnull(strstr(msg, "\"8\\x01\\\"\\\\\""));
	/* A long value is shortened. */
	{
		char longv[400];

		memset(longv, '9', sizeof(longv) - 2);
		longv[sizeof(longv) - 2] = 'x';
		longv[sizeof(longv) - 1] = '\0';
		msg = parse_bad(longv, -EINVAL, ENV);
		ck_assert_ptr_nonnull(strstr(msg, "...\""));
		ck_assert_uint_lt(strlen(msg), 300);
	}
}
END_TEST

START_TEST(test_null_arguments)
{
	uint64_t v = 0;

	/* No error struct and no origin still work. */
	ck_assert_int_eq(placefs_size_parse("8K", NULL, &v, NULL), 0);
	ck_assert_uint_eq(v, 8192);
	ck_assert_int_eq(placefs_size_parse("x", NULL, &v, NULL), -EINVAL);
	{
		struct placefs_error err;

		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_size_parse(NULL, NULL, &v, &err), -EINVAL);
		ck_assert_int_eq(err.kind, PLACEFS_E_LIMIT);
		ck_assert_str_eq(err.msg, "size=\"\": empty value " GRAMMAR);
	}
}
END_TEST

static void fmt_is(uint64_t bytes, const char *want)
{
	char buf[64];

	memset(buf, 'Z', sizeof(buf));
	placefs_size_format(bytes, buf, sizeof(buf));
	ck_assert_msg(strcmp(buf, want) == 0, "%llu: want \"%s\", got \"%s\"",
	              (unsigned long long)bytes, want, buf);
}

START_TEST(test_format)
{
	fmt_is(0, "0 B");
	fmt_is(1, "1 B");
	fmt_is(512, "512 B");
	fmt_is(1023, "1023 B");
	fmt_is(1024, "1 KiB");
	fmt_is(1536, "1.5 KiB");
	fmt_is(1280, "1.25 KiB");
	fmt_is(8ULL << 20, "8 MiB");
	fmt_is(9ULL << 20, "9 MiB");
	fmt_is((2ULL << 30) + (1ULL << 28), "2.25 GiB");
	fmt_is(1ULL << 40, "1 TiB");
	fmt_is(3ULL << 50, "3 PiB");
	fmt_is(1ULL << 60, "1 EiB");
	fmt_is(1000000, "976.56 KiB");
	/* Inexact values that round to a whole number keep their decimals. */
	fmt_is(1025, "1.00 KiB");
	fmt_is((1ULL << 20) - 1, "1024.00 KiB");
	fmt_is(UINT64_MAX, "16.00 EiB");
}
END_TEST

START_TEST(test_format_truncates)
{
	char buf[5];

	placefs_size_format(8ULL << 20, buf, sizeof(buf));
	ck_assert_str_eq(buf, "8 Mi");
	/* A zero-length buffer is left alone. */
	buf[0] = 'k';
	placefs_size_format(1, buf, 0);
	ck_assert_int_eq(buf[0], 'k');
}
END_TEST

static Suite *size_suite(void)
{
	Suite *s = suite_create("size");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_seed_table);
	tcase_add_test(tc, test_suffixes);
	tcase_add_test(tc, test_si_suffixes);
	tcase_add_test(tc, test_suffix_list);
	tcase_add_test(tc, test_unknown_suffix);
	tcase_add_test(tc, test_zero_forms);
	tcase_add_test(tc, test_boundaries);
	tcase_add_test(tc, test_message_content);
	tcase_add_test(tc, test_null_arguments);
	tcase_add_test(tc, test_format);
	tcase_add_test(tc, test_format_truncates);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(size_suite());
}
