/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "testutil.h"

START_TEST(test_init_empty)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_ptr_null(sb.buf);
	ck_assert_uint_eq(sb.len, 0);
	ck_assert_uint_eq(sb.alloc, 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "");
	/* Reset and release of a never-used buffer are harmless. */
	placefs_strbuf_reset(&sb);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "");
	placefs_strbuf_release(&sb);
	placefs_strbuf_release(NULL);
	ck_assert_ptr_null(sb.buf);
}
END_TEST

START_TEST(test_add_and_grow)
{
	struct placefs_strbuf sb;
	char big[1000];

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_add(&sb, "abc", 3), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "abc");
	ck_assert_uint_eq(sb.len, 3);
	ck_assert_uint_ge(sb.alloc, 4);
	/* Adding zero bytes changes nothing but stays terminated. */
	ck_assert_int_eq(placefs_strbuf_add(&sb, "zzz", 0), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "abc");
	/* Binary data with an embedded NUL is copied as is. */
	ck_assert_int_eq(placefs_strbuf_add(&sb, "x\0y", 3), 0);
	ck_assert_uint_eq(sb.len, 6);
	ck_assert_int_eq(memcmp(sb.buf, "abcx\0y", 7), 0);
	placefs_strbuf_reset(&sb);
	/* Growth across many reallocations keeps earlier content. */
	memset(big, 'q', sizeof(big));
	for (int i = 0; i < 50; i++)
		ck_assert_int_eq(placefs_strbuf_add(&sb, big, sizeof(big)), 0);
	ck_assert_uint_eq(sb.len, 50000);
	ck_assert_uint_eq(strlen(sb.buf), 50000);
	for (size_t i = 0; i < sb.len; i++)
		ck_assert_int_eq(sb.buf[i], 'q');
	ck_assert_uint_gt(sb.alloc, sb.len);
	placefs_strbuf_release(&sb);
	ck_assert_ptr_null(sb.buf);
	ck_assert_uint_eq(sb.len, 0);
}
END_TEST

START_TEST(test_add_zero_on_empty_allocates)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_add(&sb, "", 0), 0);
	ck_assert_ptr_nonnull(sb.buf);
	ck_assert_str_eq(sb.buf, "");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_adds_addf)
{
	struct placefs_strbuf sb;
	char *longs;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "hello"), 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, ""), 0);
	ck_assert_int_eq(placefs_strbuf_addf(&sb, ", %s %d %05.1f%%", "world", -42, 3.5), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "hello, world -42 003.5%");
	ck_assert_uint_eq(sb.len, strlen("hello, world -42 003.5%"));
	/* An empty format result keeps the buffer valid. */
	ck_assert_int_eq(placefs_strbuf_addf(&sb, "%s", ""), 0);
	ck_assert_uint_eq(sb.len, strlen("hello, world -42 003.5%"));
	placefs_strbuf_reset(&sb);
	/* A formatted string longer than the first allocation. */
	longs = malloc(5001);
	ck_assert_ptr_nonnull(longs);
	memset(longs, 'L', 5000);
	longs[5000] = '\0';
	ck_assert_int_eq(placefs_strbuf_addf(&sb, "<%s>", longs), 0);
	ck_assert_uint_eq(sb.len, 5002);
	ck_assert_int_eq(sb.buf[0], '<');
	ck_assert_int_eq(sb.buf[5001], '>');
	ck_assert_int_eq(sb.buf[5002], '\0');
	free(longs);
	placefs_strbuf_release(&sb);
}
END_TEST

/* add_u64: every digit count, both ends of the range, a separator, a too-long one. */
START_TEST(test_add_u64)
{
	struct placefs_strbuf sb;
	char want[64];
	uint64_t v = 1;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_add_u64(&sb, "", 0), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "0");
	for (int d = 1; d <= 20; d++, v = v * 10 + (uint64_t)d % 10) {
		placefs_strbuf_reset(&sb);
		ck_assert_int_eq(placefs_strbuf_add_u64(&sb, ", ", v), 0);
		snprintf(want, sizeof(want), ", %" PRIu64, v);
		ck_assert_str_eq(placefs_strbuf_cstr(&sb), want);
	}
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_strbuf_add_u64(&sb, "12345678", UINT64_MAX), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "1234567818446744073709551615");
	ck_assert_int_eq(placefs_strbuf_add_u64(&sb, "123456789", 1), -EINVAL);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "1234567818446744073709551615");
	placefs_strbuf_release(&sb);
}
END_TEST

/* u64_width: every digit count and both ends, against printf. */
START_TEST(test_u64_width)
{
	char tmp[32];
	uint64_t v = 0;

	for (int d = 0; d <= 20; d++, v = v * 10 + 9)
		ck_assert_uint_eq(placefs_strbuf_u64_width(v),
		                  (size_t)snprintf(tmp, sizeof(tmp), "%" PRIu64, v));
	ck_assert_uint_eq(placefs_strbuf_u64_width(UINT64_MAX), 20);
	ck_assert_uint_eq(placefs_strbuf_u64_width(10), 2);
	ck_assert_uint_eq(placefs_strbuf_u64_width(1), 1);
}
END_TEST

/*
 * addf formats in one pass into the room already there: a result that fits
 * exactly, one byte too long (the NUL), and far too long, each appended to
 * what the buffer holds.
 */
START_TEST(test_addf_room)
{
	struct placefs_strbuf sb;
	char want[300];
	size_t room;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_grow(&sb, 100), 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "ab"), 0);
	room = sb.alloc - sb.len; /* bytes for the text and its NUL */
	memset(want, 'x', sizeof(want));
	ck_assert_int_eq(placefs_strbuf_addf(&sb, "%.*s", (int)(room - 1), want), 0);
	ck_assert_uint_eq(sb.len, 2 + room - 1);
	ck_assert_uint_eq(strlen(sb.buf), sb.len);
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "ab"), 0);
	room = sb.alloc - sb.len;
	ck_assert_int_eq(placefs_strbuf_addf(&sb, "%.*s|", (int)(room - 1), want), 0);
	ck_assert_uint_eq(sb.len, 2 + room);
	ck_assert_int_eq(sb.buf[sb.len - 1], '|');
	ck_assert_int_eq(sb.buf[sb.len], '\0');
	ck_assert_int_eq(sb.buf[1], 'b');
	ck_assert_int_eq(placefs_strbuf_addf(&sb, "[%d:%s]", 42, "y"), 0);
	ck_assert_str_eq(sb.buf + 2 + room, "[42:y]");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_addf_on_fresh_buffer)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_addf(&sb, "%s", ""), 0);
	ck_assert_ptr_nonnull(sb.buf);
	ck_assert_str_eq(sb.buf, "");
	ck_assert_int_eq(placefs_strbuf_addf(&sb, "%u", 7u), 0);
	ck_assert_str_eq(sb.buf, "7");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_reset_keeps_allocation)
{
	struct placefs_strbuf sb;
	size_t alloc;
	char *buf;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "some text"), 0);
	alloc = sb.alloc;
	buf = sb.buf;
	placefs_strbuf_reset(&sb);
	ck_assert_uint_eq(sb.len, 0);
	ck_assert_ptr_eq(sb.buf, buf);
	ck_assert_uint_eq(sb.alloc, alloc);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "");
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "x"), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "x");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_grow)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_grow(&sb, 100), 0);
	ck_assert_uint_ge(sb.alloc, 101);
	ck_assert_uint_eq(sb.len, 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "");
	/* Room already there: nothing moves. */
	{
		char *before = sb.buf;

		ck_assert_int_eq(placefs_strbuf_grow(&sb, 50), 0);
		ck_assert_ptr_eq(sb.buf, before);
	}
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_grow_overflow_keeps_contents)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "abc"), 0);
	ck_assert_int_eq(placefs_strbuf_grow(&sb, SIZE_MAX), -EOVERFLOW);
	ck_assert_int_eq(placefs_strbuf_grow(&sb, SIZE_MAX - 3), -EOVERFLOW);
	ck_assert_int_eq(placefs_strbuf_add(&sb, "x", SIZE_MAX - 1), -EOVERFLOW);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "abc");
	ck_assert_uint_eq(sb.len, 3);
	placefs_strbuf_release(&sb);
}
END_TEST

static void check_json(const char *in, const char *want)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_add_json_string(&sb, in), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), want);
	ck_assert_uint_eq(sb.len, strlen(want));
	placefs_strbuf_release(&sb);
}

START_TEST(test_json_string)
{
	check_json("", "\"\"");
	check_json("plain.name_0", "\"plain.name_0\"");
	check_json("a\"b", "\"a\\\"b\"");
	check_json("back\\slash", "\"back\\\\slash\"");
	check_json("\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"");
	check_json("\x01", "\"\\u0001\"");
	check_json("\x1f", "\"\\u001f\"");
	check_json("a\x7f", "\"a\\u007f\"");
	/* '/' needs no escape, and a space or a tilde is printable. */
	check_json("a/b ~", "\"a/b ~\"");
	/* Runs of plain bytes between escapes, at both ends and in the middle. */
	check_json("\"ab\\cd\x01"
	           "ef\x7f",
	           "\"\\\"ab\\\\cd\\u0001ef\\u007f\"");
	check_json("x\ny\tz", "\"x\\ny\\tz\"");
	/* UTF-8 (2, 3 and 4 byte sequences) passes through untouched. */
	check_json("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80",
	           "\"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80\"");
}
END_TEST

START_TEST(test_json_string_appends)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{\"k\": "), 0);
	ck_assert_int_eq(placefs_strbuf_add_json_string(&sb, "v"), 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "}"), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "{\"k\": \"v\"}");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_json_u64_array)
{
	struct placefs_strbuf sb;
	const uint64_t v[] = {1, 0, 4096, UINT64_MAX};

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_add_json_u64_array(&sb, NULL, 0), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "[]");
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_strbuf_add_json_u64_array(&sb, v, 1), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "[1]");
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_strbuf_add_json_u64_array(&sb, v, 4), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "[1, 0, 4096, 18446744073709551615]");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_detach)
{
	struct placefs_strbuf sb;
	size_t len = 99;
	char *s;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "payload"), 0);
	s = placefs_strbuf_detach(&sb, &len);
	ck_assert_str_eq(s, "payload");
	ck_assert_uint_eq(len, 7);
	ck_assert_ptr_null(sb.buf);
	ck_assert_uint_eq(sb.len, 0);
	ck_assert_uint_eq(sb.alloc, 0);
	free(s);
	/* Detaching an empty buffer still returns an allocated "". */
	len = 99;
	s = placefs_strbuf_detach(&sb, &len);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, "");
	ck_assert_uint_eq(len, 0);
	free(s);
	/* len may be NULL, and the buffer is reusable afterwards. */
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "again"), 0);
	s = placefs_strbuf_detach(&sb, NULL);
	ck_assert_str_eq(s, "again");
	free(s);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "");
	placefs_strbuf_release(&sb);
}
END_TEST

static Suite *strbuf_suite(void)
{
	Suite *s = suite_create("strbuf");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_init_empty);
	tcase_add_test(tc, test_add_and_grow);
	tcase_add_test(tc, test_add_zero_on_empty_allocates);
	tcase_add_test(tc, test_adds_addf);
	tcase_add_test(tc, test_add_u64);
	tcase_add_test(tc, test_u64_width);
	tcase_add_test(tc, test_addf_room);
	tcase_add_test(tc, test_addf_on_fresh_buffer);
	tcase_add_test(tc, test_reset_keeps_allocation);
	tcase_add_test(tc, test_grow);
	tcase_add_test(tc, test_grow_overflow_keeps_contents);
	tcase_add_test(tc, test_json_string);
	tcase_add_test(tc, test_json_string_appends);
	tcase_add_test(tc, test_json_u64_array);
	tcase_add_test(tc, test_detach);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(strbuf_suite());
}
