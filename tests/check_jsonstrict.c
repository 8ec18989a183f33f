/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/jsonstrict_i.h"
#include "common/strbuf.h"
#include "testutil.h"

/*
 * Every input is copied into an exact-size heap buffer with no NUL after it,
 * so valgrind or ASan catch any read past the length.
 */
static int parse_k(const char *text, size_t len, enum placefs_errkind kind,
                   struct placefs_json **out, struct placefs_error *err)
{
	char *copy = malloc(len ? len : 1);
	int rc;

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, text, len);
	placefs_error_clear(err);
	rc = placefs_json_parse("t.json", len ? copy : NULL, len, kind, out, err);
	free(copy);
	return rc;
}

static struct placefs_json *ok_n(const char *text, size_t len)
{
	struct placefs_json *js = NULL;
	struct placefs_error err;
	int rc = parse_k(text, len, PLACEFS_E_FORMAT, &js, &err);

	ck_assert_msg(rc == 0, "expected success for <%s>, got %d: %s", text, rc, err.msg);
	ck_assert_ptr_nonnull(js);
	ck_assert_ptr_nonnull(placefs_json_root(js));
	return js;
}

static struct placefs_json *ok(const char *text)
{
	return ok_n(text, strlen(text));
}

static void bad_n(const char *text, size_t len, const char *needle)
{
	struct placefs_json *js = (struct placefs_json *)0x1;
	struct placefs_error err;
	int rc = parse_k(text, len, PLACEFS_E_FORMAT, &js, &err);

	ck_assert_msg(rc == -EINVAL, "expected -EINVAL for <%.*s>, got %d", (int)len, text, rc);
	ck_assert_ptr_null(js);
	ck_assert_int_eq(err.code, -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_FORMAT);
	ck_assert_msg(strncmp(err.msg, "t.json: ", 8) == 0, "message does not name the file: %s",
	              err.msg);
	ck_assert_msg(strstr(err.msg, needle), "message <%s> lacks <%s>", err.msg, needle);
}

static void bad(const char *text, const char *needle)
{
	bad_n(text, strlen(text), needle);
}

static const cJSON *member(const struct placefs_json *js, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(placefs_json_root(js), key);

	ck_assert_msg(v != NULL, "no member %s", key);
	return v;
}

/* ---- valid documents ---------------------------------------------------- */

START_TEST(test_valid_object)
{
	struct placefs_json *js =
	        ok("{\"a\": 1, \"b\": \"x\", \"c\": [true, false, null], \"d\": {}}");
	uint64_t v = 0;

	ck_assert_int_eq(placefs_json_u64(js, member(js, "a"), &v), 0);
	ck_assert_uint_eq(v, 1);
	ck_assert_str_eq(member(js, "b")->valuestring, "x");
	ck_assert(cJSON_IsArray(member(js, "c")));
	ck_assert(cJSON_IsObject(member(js, "d")));
	placefs_json_free(js);
}
END_TEST

START_TEST(test_empty_object)
{
	struct placefs_json *js = ok("{}");

	ck_assert_ptr_null(placefs_json_root(js)->child);
	placefs_json_free(js);
}
END_TEST

START_TEST(test_free_null)
{
	placefs_json_free(NULL);
	ck_assert_ptr_null(placefs_json_root(NULL));
}
END_TEST

START_TEST(test_whitespace_allowed)
{
	placefs_json_free(ok(" \t\r\n{ \"a\" \t:\r\n 1 \n} \t\r\n"));
	placefs_json_free(ok("{\"a\":[ 1 , 2 ]}        "));
}
END_TEST

/* ---- whitespace and stray bytes ------------------------------------------ */

START_TEST(test_bom_rejected)
{
	bad("\xef\xbb\xbf{}", "byte-order mark");
}
END_TEST

START_TEST(test_bom_in_string_ok)
{
	placefs_json_free(ok("{\"\xef\xbb\xbf\": \"\xef\xbb\xbf\"}"));
}
END_TEST

START_TEST(test_nul_before_value)
{
	bad_n("\0{}", 3, "NUL byte at byte 0");
}
END_TEST

START_TEST(test_ctrl_before_value)
{
	bad("\x01{}", "control byte 0x01 outside a string at byte 0");
}
END_TEST

START_TEST(test_vt_ff_not_whitespace)
{
	bad("\x0b{}", "control byte 0x0b");
	bad("{}\x0c", "control byte 0x0c");
}
END_TEST

START_TEST(test_trailing_nul)
{
	bad_n("{}\0\0\0", 5, "NUL byte at byte 2");
}
END_TEST

START_TEST(test_trailing_garbage)
{
	bad("{} x", "unexpected character 'x' at byte 3");
	bad("{}{}", "unexpected data after the top-level value at byte 2");
	bad("{} 1", "unexpected data after the top-level value at byte 3");
}
END_TEST

START_TEST(test_empty_document)
{
	bad_n("", 0, "empty header");
	bad(" \n\t ", "empty header");
}
END_TEST

/* ---- top-level value ------------------------------------------------------ */

START_TEST(test_top_level_not_object)
{
	bad("[]", "not an object");
	bad("\"x\"", "not an object");
	bad("1", "not an object");
	bad("null", "not an object");
	bad("true", "not an object");
}
END_TEST

/* ---- strings ------------------------------------------------------------- */

START_TEST(test_raw_control_in_string)
{
	bad("{\"a\x01\": 1}", "raw control byte 0x01 in a string at byte 3");
	bad("{\"a\": \"x\x1f\"}", "raw control byte 0x1f");
	bad("{\"a\": \"x\ty\"}", "raw control byte 0x09");
	bad("{\"a\": \"x\ny\"}", "raw control byte 0x0a");
}
END_TEST

START_TEST(test_raw_nul_in_string)
{
	bad_n("{\"a\0b\": 1}", 10, "raw control byte 0x00");
}
END_TEST

START_TEST(test_escaped_nul_rejected)
{
	bad("{\"a\\u0000b\": 1}", "\\u0000 in a string at byte 3");
	bad("{\"a\": \"x\\u0000\"}", "\\u0000");
}
END_TEST

START_TEST(test_escaped_control_ok)
{
	struct placefs_json *js = ok("{\"a\\u0001b\": \"\\t\\n\\\"\\\\\\/\\b\\f\\r\"}");
	const cJSON *m = placefs_json_root(js)->child;

	ck_assert_str_eq(m->string, "a\001b");
	ck_assert_str_eq(m->valuestring, "\t\n\"\\/\b\f\r");
	placefs_json_free(js);
}
END_TEST

START_TEST(test_invalid_escapes)
{
	bad("{\"a\\x\": 1}", "invalid escape \\x");
	bad("{\"a\\u12\": 1}", "invalid \\u escape");
	bad("{\"a\\u00zz\": 1}", "invalid \\u escape");
	bad("{\"a\\", "unterminated string");
}
END_TEST

START_TEST(test_surrogates)
{
	struct placefs_json *js = ok("{\"\\ud83d\\ude00\": 1}");

	ck_assert_str_eq(placefs_json_root(js)->child->string, "\xf0\x9f\x98\x80");
	placefs_json_free(js);
	bad("{\"\\ud83d\": 1}", "unpaired high surrogate");
	bad("{\"\\ud83dx\": 1}", "unpaired high surrogate");
	bad("{\"\\ud83d\\u0041\": 1}", "unpaired high surrogate");
	bad("{\"\\ude00\": 1}", "unpaired low surrogate");
}
END_TEST

START_TEST(test_unterminated)
{
	bad("{\"abc", "unterminated string starting at byte 1");
	bad("{\"a\": 1", "syntax error");
	bad("{", "syntax error");
	bad("{\"a\": }", "syntax error");
	bad("{\"a\" 1}", "syntax error");
	bad("{\"a\": 1,}", "syntax error");
	bad("{1: 2}", "syntax error");
}
END_TEST

START_TEST(test_literals)
{
	bad("{\"a\": tru}", "invalid literal");
	bad("{\"a\": True}", "unexpected character 'T'");
	bad("{\"a\": nul}", "invalid literal");
	bad("{\"a\": nan}", "invalid literal");
	bad("{\"a\": Infinity}", "unexpected character 'I'");
}
END_TEST

/* ---- UTF-8 --------------------------------------------------------------- */

START_TEST(test_utf8_invalid)
{
	bad("{\"\xc0\x80\": 1}", "invalid UTF-8 in header: bad byte 0xc0 at byte 2");
	bad("{\"\xed\xa0\x80\": 1}", "invalid UTF-8");     /* surrogate */
	bad("{\"\xf4\x90\x80\x80\": 1}", "invalid UTF-8"); /* > U+10FFFF */
	bad("{\"\xf5\x80\x80\x80\": 1}", "invalid UTF-8");
	bad("{\"\xe2\x82\": 1}", "invalid UTF-8");         /* truncated */
	bad("{\"\x80\": 1}", "invalid UTF-8");             /* lone continuation */
	bad("{\"\xe0\x80\xaf\": 1}", "invalid UTF-8");     /* overlong 3-byte */
	bad("{\"\xf0\x80\x80\xaf\": 1}", "invalid UTF-8"); /* overlong 4-byte */
	bad("{\"\xff\": 1}", "invalid UTF-8");
	bad_n("{\"a\": \"\xe2", 8, "invalid UTF-8"); /* cut at the very end */
}
END_TEST

START_TEST(test_utf8_valid)
{
	struct placefs_json *js =
	        ok("{\"\xc3\xa9\": \"\xe2\x82\xac\", \"\xf0\x9f\x98\x80\": \"\xf4\x8f\xbf\xbf\"}");

	ck_assert_str_eq(placefs_json_root(js)->child->string, "\xc3\xa9");
	placefs_json_free(js);
}
END_TEST

START_TEST(test_utf8_outside_string)
{
	bad("{\"a\": 1}\xc3\xa9", "unexpected byte 0xc3");
}
END_TEST

START_TEST(test_utf8_function)
{
	ck_assert_int_eq(placefs_utf8_valid("", 0), 1);
	ck_assert_int_eq(placefs_utf8_valid(NULL, 0), 1);
	ck_assert_int_eq(placefs_utf8_valid("abc", 3), 1);
	ck_assert_int_eq(placefs_utf8_valid("\xc3\xa9", 2), 1);
	ck_assert_int_eq(placefs_utf8_valid("\xc3", 1), 0);
	ck_assert_int_eq(placefs_utf8_valid("\xc1\xbf", 2), 0);
	ck_assert_int_eq(placefs_utf8_valid("\xed\x9f\xbf", 3), 1); /* U+D7FF */
	ck_assert_int_eq(placefs_utf8_valid("\xed\xbf\xbf", 3), 0); /* U+DFFF */
	ck_assert_int_eq(placefs_utf8_valid("\xef\xbf\xbf", 3), 1); /* U+FFFF */
	ck_assert_int_eq(placefs_utf8_valid("\xf0\x90\x80\x80", 4), 1);
	ck_assert_int_eq(placefs_utf8_valid("a\0b", 3), 1); /* NUL is valid UTF-8 */
}
END_TEST

/* ---- numbers ------------------------------------------------------------- */

static int u64_of(const char *text, uint64_t *v)
{
	struct placefs_json *js = ok(text);
	int rc = placefs_json_u64(js, member(js, "n"), v);

	placefs_json_free(js);
	return rc;
}

START_TEST(test_u64_exact)
{
	uint64_t v = 0;

	ck_assert_int_eq(u64_of("{\"n\": 0}", &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(u64_of("{\"n\": 18446744073709551615}", &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	/* 2^53 + 1 is not representable as a double: the token text is used. */
	ck_assert_int_eq(u64_of("{\"n\": 9007199254740993}", &v), 0);
	ck_assert_uint_eq(v, 9007199254740993ULL);
	ck_assert_int_eq(u64_of("{\"n\": 4294967296}", &v), 0);
	ck_assert_uint_eq(v, 4294967296ULL);
}
END_TEST

START_TEST(test_u64_range)
{
	uint64_t v = 7;

	ck_assert_int_eq(u64_of("{\"n\": 18446744073709551616}", &v), -ERANGE);
	ck_assert_int_eq(u64_of("{\"n\": 99999999999999999999999999}", &v), -ERANGE);
	ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(test_u64_not_plain)
{
	uint64_t v;

	ck_assert_int_eq(u64_of("{\"n\": 8.0}", &v), -EINVAL);
	ck_assert_int_eq(u64_of("{\"n\": 8e0}", &v), -EINVAL);
	ck_assert_int_eq(u64_of("{\"n\": 8E+0}", &v), -EINVAL);
	ck_assert_int_eq(u64_of("{\"n\": -1}", &v), -EINVAL);
	ck_assert_int_eq(u64_of("{\"n\": -0}", &v), -EINVAL);
	ck_assert_int_eq(u64_of("{\"n\": 1.5}", &v), -EINVAL);
	ck_assert_int_eq(u64_of("{\"n\": 1e300}", &v), -EINVAL);
	ck_assert_int_eq(u64_of("{\"n\": 1.8e19}", &v), -EINVAL);
}
END_TEST

START_TEST(test_u64_not_number)
{
	struct placefs_json *js = ok("{\"s\": \"1\", \"o\": {}, \"t\": true}");
	uint64_t v;

	ck_assert_int_eq(placefs_json_u64(js, member(js, "s"), &v), -EINVAL);
	ck_assert_int_eq(placefs_json_u64(js, member(js, "o"), &v), -EINVAL);
	ck_assert_int_eq(placefs_json_u64(js, member(js, "t"), &v), -EINVAL);
	ck_assert_int_eq(placefs_json_u64(js, NULL, &v), -EINVAL);
	ck_assert_int_eq(placefs_json_u64(NULL, member(js, "s"), &v), -EINVAL);
	placefs_json_free(js);
}
END_TEST

START_TEST(test_u64_other_document)
{
	struct placefs_json *a = ok("{\"n\": 5}");
	struct placefs_json *b = ok("{\"m\": 1, \"n\": 6}");
	uint64_t v;

	/* a's node has token index 0, which in b is a different node. */
	ck_assert_int_eq(placefs_json_u64(b, member(a, "n"), &v), -EINVAL);
	ck_assert_int_eq(placefs_json_u64(b, member(b, "n"), &v), 0);
	ck_assert_uint_eq(v, 6);
	placefs_json_free(a);
	placefs_json_free(b);
}
END_TEST

static uint64_t u64_ok(const struct placefs_json *js, const cJSON *node)
{
	uint64_t v = 0;

	ck_assert_ptr_nonnull(node);
	ck_assert_int_eq(placefs_json_u64(js, node, &v), 0);
	return v;
}

START_TEST(test_u64_document_order)
{
	/* Numbers at every nesting level: each node must get its own token. */
	struct placefs_json *js = ok("{\"a\": [1, [2, 3], {\"b\": 4, \"x\": -9}], \"c\": 5, "
	                             "\"d\": {\"e\": [6, 18446744073709551615, 7.5]}, \"f\": 8}");
	const cJSON *a = member(js, "a");
	const cJSON *a1 = cJSON_GetArrayItem(a, 1), *a2 = cJSON_GetArrayItem(a, 2);
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(member(js, "d"), "e");
	uint64_t v;

	ck_assert_uint_eq(u64_ok(js, cJSON_GetArrayItem(a, 0)), 1);
	ck_assert_uint_eq(u64_ok(js, cJSON_GetArrayItem(a1, 0)), 2);
	ck_assert_uint_eq(u64_ok(js, cJSON_GetArrayItem(a1, 1)), 3);
	ck_assert_uint_eq(u64_ok(js, cJSON_GetObjectItemCaseSensitive(a2, "b")), 4);
	ck_assert_int_eq(placefs_json_u64(js, cJSON_GetObjectItemCaseSensitive(a2, "x"), &v),
	                 -EINVAL);
	ck_assert_uint_eq(u64_ok(js, member(js, "c")), 5);
	ck_assert_uint_eq(u64_ok(js, cJSON_GetArrayItem(e, 0)), 6);
	ck_assert_uint_eq(u64_ok(js, cJSON_GetArrayItem(e, 1)), UINT64_MAX);
	ck_assert_int_eq(placefs_json_u64(js, cJSON_GetArrayItem(e, 2), &v), -EINVAL);
	ck_assert_uint_eq(u64_ok(js, member(js, "f")), 8);
	placefs_json_free(js);
}
END_TEST

START_TEST(test_number_syntax)
{
	bad("{\"n\": 08}", "leading zero");
	bad("{\"n\": -08}", "leading zero");
	bad("{\"n\": 00}", "leading zero");
	bad("{\"n\": +1}", "unexpected character '+'");
	bad("{\"n\": .5}", "unexpected character '.'");
	bad("{\"n\": 1.}", "invalid number");
	bad("{\"n\": 1e}", "invalid number");
	bad("{\"n\": 1e+}", "invalid number");
	bad("{\"n\": -}", "invalid number");
	bad("{\"n\": 0x10}", "unexpected character 'x'");
	bad("{\"n\": 1-2}", "syntax error");
}
END_TEST

START_TEST(test_number_too_long)
{
	char buf[128];

	snprintf(buf, sizeof(buf), "{\"n\": 1%063d}", 0);
	bad(buf, "number longer than 63 characters at byte 6");
}
END_TEST

/* ---- duplicate keys ------------------------------------------------------ */

START_TEST(test_dup_key_different)
{
	bad("{\"a.weight\": 1, \"a.weight\": 2}", "duplicate key \"a.weight\"");
}
END_TEST

START_TEST(test_dup_key_identical)
{
	bad("{\"a\": {\"x\": 1}, \"a\": {\"x\": 1}}", "duplicate key \"a\"");
}
END_TEST

START_TEST(test_dup_key_nested)
{
	bad("{\"t\": {\"dtype\": \"F32\", \"dtype\": \"F16\"}}", "duplicate key \"dtype\"");
	bad("{\"t\": [{\"k\": 1, \"k\": 1}]}", "duplicate key \"k\"");
}
END_TEST

START_TEST(test_dup_key_escaped)
{
	/* serde compares decoded keys: "a" and "\u0061" are the same key. */
	bad("{\"a\": 1, \"\\u0061\": 2}", "duplicate key \"a\"");
}
END_TEST

START_TEST(test_dup_key_case_differs)
{
	struct placefs_json *js = ok("{\"a\": 1, \"A\": 2, \"\": 3}");
	uint64_t v;

	ck_assert_int_eq(placefs_json_u64(js, member(js, "A"), &v), 0);
	ck_assert_uint_eq(v, 2);
	ck_assert_int_eq(placefs_json_u64(js, member(js, ""), &v), 0);
	ck_assert_uint_eq(v, 3);
	placefs_json_free(js);
}
END_TEST

START_TEST(test_dup_key_first_in_document)
{
	/* Both "b" and "a" repeat; "b" repeats first in document order. */
	bad("{\"b\": 1, \"a\": 1, \"b\": 2, \"a\": 2}", "duplicate key \"b\"");
}
END_TEST

START_TEST(test_dup_key_empty)
{
	bad("{\"\": 1, \"\": 2}", "duplicate key \"\"");
}
END_TEST

START_TEST(test_dup_key_many)
{
	struct placefs_strbuf sb;
	struct placefs_json *js;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{"), 0);
	for (int i = 0; i < 20000; i++)
		ck_assert_int_eq(placefs_strbuf_addf(&sb, "%s\"k%d\": %d", i ? ", " : "", i, i), 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "}"), 0);
	js = ok_n(sb.buf, sb.len);
	placefs_json_free(js);
	sb.len--;
	ck_assert_int_eq(placefs_strbuf_adds(&sb, ", \"k12345\": 0}"), 0);
	bad_n(sb.buf, sb.len, "duplicate key \"k12345\"");
	placefs_strbuf_release(&sb);
}
END_TEST

/* ---- nesting and messages ------------------------------------------------ */

static void nested(struct placefs_strbuf *sb, int depth)
{
	placefs_strbuf_reset(sb);
	ck_assert_int_eq(placefs_strbuf_adds(sb, "{\"a\": "), 0);
	for (int i = 0; i < depth; i++)
		ck_assert_int_eq(placefs_strbuf_adds(sb, "["), 0);
	ck_assert_int_eq(placefs_strbuf_adds(sb, "1"), 0);
	for (int i = 0; i < depth; i++)
		ck_assert_int_eq(placefs_strbuf_adds(sb, "]"), 0);
	ck_assert_int_eq(placefs_strbuf_adds(sb, "}"), 0);
}

START_TEST(test_nesting)
{
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	nested(&sb, 500);
	placefs_json_free(ok_n(sb.buf, sb.len));
	nested(&sb, 2000);
	bad_n(sb.buf, sb.len, "nested deeper than 1000 levels");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_kind_index_message)
{
	struct placefs_json *js = NULL;
	struct placefs_error err;
	int rc = parse_k("{\"a\": 1, \"a\": 1}", 16, PLACEFS_E_INDEX, &js, &err);

	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_INDEX);
	ck_assert_str_eq(err.msg, "t.json: invalid JSON in index: duplicate key \"a\"");
}
END_TEST

START_TEST(test_message_exact)
{
	struct placefs_json *js = NULL;
	struct placefs_error err;

	ck_assert_int_eq(parse_k("{\"a\": 01}", 9, PLACEFS_E_FORMAT, &js, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "t.json: invalid JSON in header: number with a leading zero "
	                          "at byte 6");
}
END_TEST

START_TEST(test_null_error_ok)
{
	struct placefs_json *js = NULL;

	ck_assert_int_eq(placefs_json_parse("t.json", "{,}", 3, PLACEFS_E_FORMAT, &js, NULL),
	                 -EINVAL);
	ck_assert_int_eq(placefs_json_parse("t.json", "{}", 2, PLACEFS_E_FORMAT, &js, NULL), 0);
	placefs_json_free(js);
}
END_TEST

/* ---- quoting ------------------------------------------------------------- */

START_TEST(test_quote)
{
	char buf[PLACEFS_JSON_QUOTE_MAX];
	char small[16];

	ck_assert_str_eq(placefs_json_quote(buf, sizeof(buf), "a.weight"), "\"a.weight\"");
	ck_assert_str_eq(placefs_json_quote(buf, sizeof(buf), ""), "\"\"");
	ck_assert_str_eq(placefs_json_quote(buf, sizeof(buf), "a\"b\\c\001\x7f"),
	                 "\"a\\\"b\\\\c\\x01\\x7f\"");
	ck_assert_str_eq(placefs_json_quote(buf, sizeof(buf), "\xc3\xa9"), "\"\xc3\xa9\"");
	ck_assert_str_eq(placefs_json_quote(small, sizeof(small), "abcdefghijklmnopqrstuvwxyz"),
	                 "\"abcdefghij...\"");
	/* Never cut inside a multi-byte character. */
	ck_assert_str_eq(placefs_json_quote(small, sizeof(small), "abcdefghi\xe2\x82\xac"),
	                 "\"abcdefghi...\"");
	ck_assert(placefs_utf8_valid(small, strlen(small)));
}
END_TEST

START_TEST(test_quote_long)
{
	char name[1000];
	char buf[PLACEFS_JSON_QUOTE_MAX];

	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	placefs_json_quote(buf, sizeof(buf), name);
	ck_assert_uint_lt(strlen(buf), sizeof(buf));
	ck_assert_str_eq(buf + strlen(buf) - 4, "...\"");
}
END_TEST

static Suite *jsonstrict_suite(void)
{
	Suite *s = suite_create("jsonstrict");
	TCase *tc;

	tc = tcase_create("valid");
	tcase_add_test(tc, test_valid_object);
	tcase_add_test(tc, test_empty_object);
	tcase_add_test(tc, test_free_null);
	tcase_add_test(tc, test_whitespace_allowed);
	suite_add_tcase(s, tc);

	tc = tcase_create("whitespace");
	tcase_add_test(tc, test_bom_rejected);
	tcase_add_test(tc, test_bom_in_string_ok);
	tcase_add_test(tc, test_nul_before_value);
	tcase_add_test(tc, test_ctrl_before_value);
	tcase_add_test(tc, test_vt_ff_not_whitespace);
	tcase_add_test(tc, test_trailing_nul);
	tcase_add_test(tc, test_trailing_garbage);
	tcase_add_test(tc, test_empty_document);
	tcase_add_test(tc, test_top_level_not_object);
	suite_add_tcase(s, tc);

	tc = tcase_create("strings");
	tcase_add_test(tc, test_raw_control_in_string);
	tcase_add_test(tc, test_raw_nul_in_string);
	tcase_add_test(tc, test_escaped_nul_rejected);
	tcase_add_test(tc, test_escaped_control_ok);
	tcase_add_test(tc, test_invalid_escapes);
	tcase_add_test(tc, test_surrogates);
	tcase_add_test(tc, test_unterminated);
	tcase_add_test(tc, test_literals);
	suite_add_tcase(s, tc);

	tc = tcase_create("utf8");
	tcase_add_test(tc, test_utf8_invalid);
	tcase_add_test(tc, test_utf8_valid);
	tcase_add_test(tc, test_utf8_outside_string);
	tcase_add_test(tc, test_utf8_function);
	suite_add_tcase(s, tc);

	tc = tcase_create("numbers");
	tcase_add_test(tc, test_u64_exact);
	tcase_add_test(tc, test_u64_range);
	tcase_add_test(tc, test_u64_not_plain);
	tcase_add_test(tc, test_u64_not_number);
	tcase_add_test(tc, test_u64_other_document);
	tcase_add_test(tc, test_u64_document_order);
	tcase_add_test(tc, test_number_syntax);
	tcase_add_test(tc, test_number_too_long);
	suite_add_tcase(s, tc);

	tc = tcase_create("duplicates");
	tcase_add_test(tc, test_dup_key_different);
	tcase_add_test(tc, test_dup_key_identical);
	tcase_add_test(tc, test_dup_key_nested);
	tcase_add_test(tc, test_dup_key_escaped);
	tcase_add_test(tc, test_dup_key_case_differs);
	tcase_add_test(tc, test_dup_key_first_in_document);
	tcase_add_test(tc, test_dup_key_empty);
	tcase_add_test(tc, test_dup_key_many);
	suite_add_tcase(s, tc);

	tc = tcase_create("misc");
	tcase_add_test(tc, test_nesting);
	tcase_add_test(tc, test_kind_index_message);
	tcase_add_test(tc, test_message_exact);
	tcase_add_test(tc, test_null_error_ok);
	tcase_add_test(tc, test_quote);
	tcase_add_test(tc, test_quote_long);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(jsonstrict_suite());
}
