/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/dtype.h"
#include "format/safetensors.h"
#include "common/strbuf.h"
#include "testutil.h"

#define FILE_NAME "x.safetensors"

/* ---- helpers ------------------------------------------------------------- */

static int parse_raw(const uint8_t *buf, size_t len, struct placefs_st_header **h,
                     struct placefs_error *err)
{
	placefs_error_clear(err);
	return placefs_st_parse_buffer(FILE_NAME, buf, len, h, err);
}

static int parse_img(const char *json, uint64_t data_len, struct placefs_st_header **h,
                     struct placefs_error *err)
{
	size_t len;
	uint8_t *buf = tu_st_image(json, data_len, &len);
	int rc = parse_raw(buf, len, h, err);

	free(buf);
	return rc;
}

static struct placefs_st_header *st_ok(const char *json, uint64_t data_len)
{
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	int rc = parse_img(json, data_len, &h, &err);

	ck_assert_msg(rc == 0, "expected success for <%s>: %s", json, err.msg);
	ck_assert_ptr_nonnull(h);
	return h;
}

static void check_refused(int rc, struct placefs_st_header *h, const struct placefs_error *err,
                          const char *needle)
{
	ck_assert_msg(rc == -EINVAL, "expected -EINVAL, got %d (%s)", rc, err->msg);
	ck_assert_ptr_null(h);
	ck_assert_int_eq(err->code, -EINVAL);
	ck_assert_int_eq(err->kind, PLACEFS_E_FORMAT);
	ck_assert_msg(strncmp(err->msg, FILE_NAME ": ", strlen(FILE_NAME) + 2) == 0,
	              "message does not name the file: %s", err->msg);
	ck_assert_msg(strstr(err->msg, needle), "message <%s> lacks <%s>", err->msg, needle);
}

static void st_bad(const char *json, uint64_t data_len, const char *needle)
{
	struct placefs_st_header *h = (struct placefs_st_header *)0x1;
	struct placefs_error err;
	int rc = parse_img(json, data_len, &h, &err);

	check_refused(rc, h, &err, needle);
}

static void st_bad_raw(const void *buf, size_t len, const char *needle)
{
	struct placefs_st_header *h = (struct placefs_st_header *)0x1;
	struct placefs_error err;
	uint8_t *copy = malloc(len ? len : 1);
	int rc;

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, buf, len);
	rc = parse_raw(copy, len, &h, &err);
	free(copy);
	check_refused(rc, h, &err, needle);
}

/* An image whose 8-byte prefix says n, followed by `rest` (len bytes). */
static void st_bad_len(uint64_t n, const char *rest, size_t len, const char *needle)
{
	uint8_t *buf = malloc(8 + len);

	ck_assert_ptr_nonnull(buf);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)(n >> (8 * i));
	memcpy(buf + 8, rest, len);
	st_bad_raw(buf, 8 + len, needle);
	free(buf);
}

static const struct placefs_st_tensor *tensor(const struct placefs_st_header *h, size_t i)
{
	const struct placefs_st_tensor *t = placefs_st_header_tensor(h, i);

	ck_assert_ptr_nonnull(t);
	return t;
}

/* One tensor "w" with the given dtype, shape and offsets text. */
static void one(char *buf, size_t size, const char *dtype, const char *shape, const char *offs)
{
	snprintf(buf, size, "{\"w\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":%s}}", dtype,
	         shape, offs);
}

static void one_bad(const char *dtype, const char *shape, const char *offs, uint64_t data_len,
                    const char *needle)
{
	char json[512];

	one(json, sizeof(json), dtype, shape, offs);
	st_bad(json, data_len, needle);
}

static struct placefs_st_header *one_ok(const char *dtype, const char *shape, const char *offs,
                                        uint64_t data_len)
{
	char json[512];

	one(json, sizeof(json), dtype, shape, offs);
	return st_ok(json, data_len);
}

/* ---- valid files --------------------------------------------------------- */

START_TEST(test_basic)
{
	const char *json = "{\"b\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
	                   "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
	struct placefs_st_header *h = st_ok(json, 28);
	const struct placefs_st_tensor *t;
	uint64_t n = strlen(json);

	ck_assert_uint_eq(placefs_st_header_json_len(h), n);
	ck_assert_uint_eq(placefs_st_header_data_start(h), 8 + n);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 2);
	ck_assert_int_eq(placefs_st_header_has_meta(h), 0);
	ck_assert_uint_eq(placefs_st_header_meta_count(h), 0);
	/* Sorted by offset, not by document order. */
	t = tensor(h, 0);
	ck_assert_str_eq(t->name, "a");
	ck_assert_int_eq(t->dtype, PLACEFS_DT_F32);
	ck_assert_uint_eq(t->ndim, 1);
	ck_assert_uint_eq(t->shape[0], 4);
	ck_assert_uint_eq(t->begin, 0);
	ck_assert_uint_eq(t->end, 16);
	ck_assert_uint_eq(t->nbytes, 16);
	ck_assert_uint_eq(t->offset, 8 + n);
	t = tensor(h, 1);
	ck_assert_str_eq(t->name, "b");
	ck_assert_int_eq(t->dtype, PLACEFS_DT_F16);
	ck_assert_uint_eq(t->ndim, 2);
	ck_assert_uint_eq(t->shape[0], 2);
	ck_assert_uint_eq(t->shape[1], 3);
	ck_assert_uint_eq(t->begin, 16);
	ck_assert_uint_eq(t->end, 28);
	ck_assert_uint_eq(t->nbytes, 12);
	ck_assert_uint_eq(t->offset, 8 + n + 16);
	ck_assert_ptr_null(placefs_st_header_tensor(h, 2));
	ck_assert_ptr_null(placefs_st_header_meta(h, 0));
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_free_null)
{
	placefs_st_header_free(NULL);
}
END_TEST

START_TEST(test_empty_header)
{
	struct placefs_st_header *h = st_ok("{}", 0);

	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 0);
	ck_assert_uint_eq(placefs_st_header_data_start(h), 10);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_scalar)
{
	struct placefs_st_header *h = one_ok("F32", "[]", "[0,4]", 4);
	const struct placefs_st_tensor *t = tensor(h, 0);

	ck_assert_uint_eq(t->ndim, 0);
	ck_assert_ptr_null(t->shape);
	ck_assert_uint_eq(t->nbytes, 4);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_zero_size)
{
	const char *json = "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
	                   "\"y\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[4,4]},"
	                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	                   "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
	struct placefs_st_header *h = st_ok(json, 4);

	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 4);
	/* Ties between zero-size tensors are broken by name. */
	ck_assert_str_eq(tensor(h, 0)->name, "e");
	ck_assert_str_eq(tensor(h, 1)->name, "a");
	ck_assert_str_eq(tensor(h, 2)->name, "y");
	ck_assert_str_eq(tensor(h, 3)->name, "z");
	ck_assert_uint_eq(tensor(h, 3)->nbytes, 0);
	ck_assert_uint_eq(tensor(h, 3)->ndim, 2);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_zero_dim_with_max)
{
	/* A left fold from 1: 0 * (2^64-1) = 0, no overflow. */
	struct placefs_st_header *h = one_ok("F32", "[0,18446744073709551615]", "[0,0]", 0);

	ck_assert_uint_eq(tensor(h, 0)->shape[1], UINT64_MAX);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_only_zero_size_file)
{
	struct placefs_st_header *h = one_ok("I64", "[5,0]", "[0,0]", 0);

	ck_assert_uint_eq(tensor(h, 0)->nbytes, 0);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_metadata_null)
{
	struct placefs_st_header *h =
	        st_ok("{\"__metadata__\":null,\"w\":{\"dtype\":\"U8\",\"shape\":[2],"
	              "\"data_offsets\":[0,2]}}",
	              2);

	ck_assert_int_eq(placefs_st_header_has_meta(h), 0);
	ck_assert_uint_eq(placefs_st_header_meta_count(h), 0);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 1);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_metadata_empty)
{
	struct placefs_st_header *h = st_ok("{\"__metadata__\":{}}", 0);

	ck_assert_int_eq(placefs_st_header_has_meta(h), 1);
	ck_assert_uint_eq(placefs_st_header_meta_count(h), 0);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 0);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_metadata_map)
{
	struct placefs_st_header *h =
	        st_ok("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
	              "\"__metadata__\":{\"format\":\"pt\",\"b\":\"\",\"a\":\"x\\u00e9\"}}",
	              1);

	ck_assert_int_eq(placefs_st_header_has_meta(h), 1);
	ck_assert_uint_eq(placefs_st_header_meta_count(h), 3);
	/* File order, not sorted. */
	ck_assert_str_eq(placefs_st_header_meta(h, 0)->key, "format");
	ck_assert_str_eq(placefs_st_header_meta(h, 0)->value, "pt");
	ck_assert_str_eq(placefs_st_header_meta(h, 1)->key, "b");
	ck_assert_str_eq(placefs_st_header_meta(h, 1)->value, "");
	ck_assert_str_eq(placefs_st_header_meta(h, 2)->key, "a");
	ck_assert_str_eq(placefs_st_header_meta(h, 2)->value, "x\xc3\xa9");
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 1);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_unknown_field_ignored)
{
	struct placefs_st_header *h =
	        st_ok("{\"w\":{\"extra\":[1,{\"x\":null}],\"dtype\":\"U8\",\"shape\":[1],"
	              "\"data_offsets\":[0,1],\"more\":-1.5}}",
	              1);

	ck_assert_uint_eq(tensor(h, 0)->nbytes, 1);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_whitespace_around_header)
{
	struct placefs_st_header *h =
	        st_ok("\t\n\r {\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}    "
	              "    ",
	              1);

	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 1);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_empty_name)
{
	/* The parser accepts ""; the plan refuses it as a file name. */
	struct placefs_st_header *h =
	        st_ok("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);

	ck_assert_str_eq(tensor(h, 0)->name, "");
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_escaped_control_name)
{
	struct placefs_st_header *h =
	        st_ok("{\"a\\u0001b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);

	ck_assert_str_eq(tensor(h, 0)->name, "a\001b");
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_unicode_name)
{
	struct placefs_st_header *h = st_ok(
	        "{\"\xe6\x9d\x83\\u91cd\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	        1);

	ck_assert_str_eq(tensor(h, 0)->name, "\xe6\x9d\x83\xe9\x87\x8d");
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_exact_big_numbers)
{
	/* 2^53 + 1 elements: a double would round it; the exact value is kept. */
	struct placefs_error err;
	struct placefs_st_header *h = NULL;

	ck_assert_int_eq(parse_img("{\"w\":{\"dtype\":\"U8\",\"shape\":[9007199254740993],"
	                           "\"data_offsets\":[0,0]}}",
	                           0, &h, &err),
	                 -EINVAL);
	ck_assert_ptr_null(h);
	ck_assert_msg(strstr(err.msg, "U8 [9007199254740993] needs 9007199254740993"), "%s",
	              err.msg);
}
END_TEST

/* ---- dtypes -------------------------------------------------------------- */

START_TEST(test_dtype_table)
{
	static const struct {
		const char *name;
		enum placefs_dtype dt;
		unsigned bits;
	} all[] = {
	        {"BOOL", PLACEFS_DT_BOOL, 8},
	        {"U8", PLACEFS_DT_U8, 8},
	        {"I8", PLACEFS_DT_I8, 8},
	        {"F8_E5M2", PLACEFS_DT_F8_E5M2, 8},
	        {"F8_E4M3", PLACEFS_DT_F8_E4M3, 8},
	        {"F8_E8M0", PLACEFS_DT_F8_E8M0, 8},
	        {"F8_E4M3FNUZ", PLACEFS_DT_F8_E4M3FNUZ, 8},
	        {"F8_E5M2FNUZ", PLACEFS_DT_F8_E5M2FNUZ, 8},
	        {"F4", PLACEFS_DT_F4, 4},
	        {"F6_E2M3", PLACEFS_DT_F6_E2M3, 6},
	        {"F6_E3M2", PLACEFS_DT_F6_E3M2, 6},
	        {"I16", PLACEFS_DT_I16, 16},
	        {"U16", PLACEFS_DT_U16, 16},
	        {"F16", PLACEFS_DT_F16, 16},
	        {"BF16", PLACEFS_DT_BF16, 16},
	        {"I32", PLACEFS_DT_I32, 32},
	        {"U32", PLACEFS_DT_U32, 32},
	        {"F32", PLACEFS_DT_F32, 32},
	        {"C64", PLACEFS_DT_C64, 64},
	        {"F64", PLACEFS_DT_F64, 64},
	        {"I64", PLACEFS_DT_I64, 64},
	        {"U64", PLACEFS_DT_U64, 64},
	};

	ck_assert_uint_eq(sizeof(all) / sizeof(all[0]), PLACEFS_DT_COUNT - 1);
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		ck_assert_int_eq(placefs_dtype_from_name(all[i].name, strlen(all[i].name)),
		                 all[i].dt);
		ck_assert_str_eq(placefs_dtype_name(all[i].dt), all[i].name);
		ck_assert_uint_eq(placefs_dtype_bits(all[i].dt), all[i].bits);
	}
	ck_assert_str_eq(placefs_dtype_name(PLACEFS_DT_INVALID), "INVALID");
	ck_assert_str_eq(placefs_dtype_name(PLACEFS_DT_COUNT), "INVALID");
	ck_assert_uint_eq(placefs_dtype_bits(PLACEFS_DT_INVALID), 0);
	ck_assert_uint_eq(placefs_dtype_bits(PLACEFS_DT_COUNT), 0);
}
END_TEST

START_TEST(test_dtype_unknown_names)
{
	static const char *const bad[] = {"f32", "F32 ", " F32",    "F",    "F128",      "I4", "U4",
	                                  "STR", "",     "INVALID", "bf16", "F8_E4M3FN", "f4"};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(placefs_dtype_from_name(bad[i], strlen(bad[i])),
		                 PLACEFS_DT_INVALID);
	/* Exactly len bytes are compared. */
	ck_assert_int_eq(placefs_dtype_from_name("F32x", 3), PLACEFS_DT_F32);
	ck_assert_int_eq(placefs_dtype_from_name("F3", 2), PLACEFS_DT_INVALID);
	ck_assert_int_eq(placefs_dtype_from_name(NULL, 0), PLACEFS_DT_INVALID);
}
END_TEST

START_TEST(test_every_dtype_in_file)
{
	/* Eight elements of each dtype: bits bytes each, packed back to back. */
	struct placefs_strbuf sb;
	uint64_t off = 0;
	struct placefs_st_header *h;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{"), 0);
	for (int dt = PLACEFS_DT_INVALID + 1; dt < PLACEFS_DT_COUNT; dt++) {
		unsigned bytes = placefs_dtype_bits(dt);

		ck_assert_int_eq(
		        placefs_strbuf_addf(&sb,
		                            "%s\"t%02d\":{\"dtype\":\"%s\",\"shape\":[2,4],"
		                            "\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
		                            dt > 1 ? "," : "", dt, placefs_dtype_name(dt), off,
		                            off + bytes),
		        0);
		off += bytes;
	}
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "}"), 0);
	h = st_ok(sb.buf, off);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), PLACEFS_DT_COUNT - 1);
	for (size_t i = 0; i < PLACEFS_DT_COUNT - 1; i++) {
		const struct placefs_st_tensor *t = tensor(h, i);

		ck_assert_int_eq(t->dtype, (int)i + 1);
		ck_assert_uint_eq(t->nbytes, placefs_dtype_bits(t->dtype));
	}
	placefs_st_header_free(h);
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_subbyte_whole_bytes)
{
	struct placefs_st_header *h;

	h = one_ok("F4", "[2]", "[0,1]", 1);
	placefs_st_header_free(h);
	h = one_ok("F6_E2M3", "[4]", "[0,3]", 3);
	placefs_st_header_free(h);
	h = one_ok("F6_E3M2", "[2,2]", "[0,3]", 3);
	placefs_st_header_free(h);
}
END_TEST

START_TEST(test_subbyte_misaligned)
{
	one_bad("F4", "[3]", "[0,2]", 2,
	        "F4 [3] is 12 bits, not a whole number of bytes "
	        "(misaligned slice)");
	one_bad("F4", "[1]", "[0,1]", 1, "misaligned slice");
	one_bad("F6_E2M3", "[3]", "[0,3]", 3, "F6_E2M3 [3] is 18 bits");
	one_bad("F6_E3M2", "[1,1]", "[0,1]", 1, "misaligned slice");
}
END_TEST

START_TEST(test_dtype_errors)
{
	one_bad("f32", "[1]", "[0,4]", 4,
	        "invalid JSON in header: tensor \"w\": unknown dtype \"f32\"");
	one_bad("F128", "[1]", "[0,16]", 16, "unknown dtype \"F128\"");
	st_bad("{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	       "tensor \"w\": dtype is a number, not a string");
	st_bad("{\"w\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	       "dtype is null, not a string");
}
END_TEST

/* ---- header length (checks 1-3) and wrong files --------------------------- */

START_TEST(test_too_small)
{
	st_bad_raw("", 0, "header too small: the file is 0 bytes");
	st_bad_raw("\x02", 1, "header too small");
	st_bad_raw("\x02\0\0\0\0\0\0", 7, "header too small: the file is 7 bytes");
}
END_TEST

START_TEST(test_too_large)
{
	st_bad_len(100000001, "{}", 2, "header too large: the header length is 100000001 bytes");
	st_bad_len(UINT64_MAX, "{}", 2, "header too large");
	st_bad_len(UINT64_MAX - 7, "{}", 2, "header too large");
	/* Checked before the end-of-file check: 8 bytes alone suffice. */
	st_bad_len(200000000, "", 0, "header too large");
}
END_TEST

START_TEST(test_invalid_header_length)
{
	/* The cap itself is allowed; the file is simply too short for it. */
	st_bad_len(100000000, "{}", 2,
	           "invalid header length: a 100000000-byte header needs a "
	           "file of at least 100000008 bytes, but the file is 10 bytes");
	st_bad_len(3, "{}", 2, "invalid header length");
	/* N = file size - 7. */
	st_bad_len(10 - 7, "{}", 2, "invalid header length");
}
END_TEST

START_TEST(test_header_cut)
{
	/* The header fills the whole file but is not complete JSON. */
	st_bad_len(5, "{\"w\":", 5, "invalid JSON in header: syntax error");
}
END_TEST

START_TEST(test_empty_json)
{
	st_bad_len(0, "", 0, "invalid JSON in header: empty header");
	st_bad_len(4, "    ", 4, "empty header");
}
END_TEST

START_TEST(test_lfs_pointer)
{
	const char *lfs =
	        "version https://git-lfs.github.com/spec/v1\n"
	        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
	        "size 12345\n";

	st_bad_raw(lfs, strlen(lfs),
	           FILE_NAME ": a Git LFS pointer, not safetensors data; run `git "
	                     "lfs pull`");
}
END_TEST

START_TEST(test_html)
{
	const char *a = "<!DOCTYPE html>\n<html><body>404</body></html>\n";
	const char *b = "\n\n  <HTML lang=\"en\"><head></head></HTML>";
	const char *c = "<html>";

	st_bad_raw(a, strlen(a),
	           FILE_NAME ": an HTML page, not safetensors data (a failed "
	                     "download?)");
	st_bad_raw(b, strlen(b), "an HTML page");
	st_bad_raw(c, strlen(c), "an HTML page");
	st_bad_raw("<!doctype", 9, "an HTML page");
}
END_TEST

START_TEST(test_not_html)
{
	/* Plain text that is neither: the length prefix gives it away. */
	st_bad_raw("<xml version=1>", 15, "header too large");
	st_bad_raw("<htm", 4, "header too small");
}
END_TEST

START_TEST(test_header_length_api)
{
	struct placefs_error err;
	uint8_t pre[8] = {2, 0, 0, 0, 0, 0, 0, 0};
	uint64_t n = 0;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_st_header_length("f", pre, 8, 10, &n, &err), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(placefs_st_header_length("f", pre, 8, 9, &n, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "f: invalid header length: a 2-byte header needs a file of at "
	                          "least 10 bytes, but the file is 9 bytes");
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_st_header_length("f", pre, 4, 100, &n, &err), -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_USAGE);
}
END_TEST

START_TEST(test_header_parse_api)
{
	const char *json = "{\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
	size_t n = strlen(json);
	char *copy = malloc(n);
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	memcpy(copy, json, n);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_st_header_parse("f", copy, n, 8 + n + 3, &h, &err), 0);
	ck_assert_uint_eq(tensor(h, 0)->offset, 8 + n);
	placefs_st_header_free(h);
	ck_assert_int_eq(placefs_st_header_parse("f", copy, n, 8 + n + 4, &h, &err), -EINVAL);
	ck_assert_ptr_null(h);
	ck_assert_str_eq(err.msg, "f: 1 trailing byte after the last tensor: expected 64 bytes, "
	                          "the file is 65 (incomplete metadata, file not fully covered)");
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_st_header_parse("f", copy, n, n, &h, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "invalid header length"), "%s", err.msg);
	free(copy);
}
END_TEST

/* ---- JSON structure (checks 4-5) ----------------------------------------- */

START_TEST(test_invalid_utf8)
{
	st_bad("{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       "invalid UTF-8 in header: bad byte 0xff at byte 3");
}
END_TEST

START_TEST(test_bom)
{
	st_bad("\xef\xbb\xbf{}", 0, "invalid JSON in header: byte-order mark");
}
END_TEST

START_TEST(test_trailing_nul_padding)
{
	st_bad_len(6, "{}\0\0\0\0", 6, "invalid JSON in header: NUL byte at byte 2");
}
END_TEST

START_TEST(test_top_level_array)
{
	st_bad("[]", 0, "the top-level value is not an object");
}
END_TEST

START_TEST(test_tensor_not_object)
{
	st_bad("{\"w\":1}", 0, "tensor \"w\" is a number, not an object");
	st_bad("{\"w\":[]}", 0, "tensor \"w\" is an array, not an object");
	st_bad("{\"w\":null}", 0, "tensor \"w\" is null, not an object");
	st_bad("{\"w\":\"F32\"}", 0, "tensor \"w\" is a string, not an object");
}
END_TEST

START_TEST(test_missing_fields)
{
	st_bad("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       "tensor \"w\": missing field \"dtype\"");
	st_bad("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1,
	       "tensor \"w\": missing field \"shape\"");
	st_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1,
	       "tensor \"w\": missing field \"data_offsets\"");
	st_bad("{\"w\":{}}", 0, "missing field \"dtype\"");
	/* Field names are case-sensitive. */
	st_bad("{\"w\":{\"DTYPE\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       "missing field \"dtype\"");
}
END_TEST

START_TEST(test_shape_types)
{
	one_bad("U8", "null", "[0,1]", 1, "tensor \"w\": shape is null, not an array");
	one_bad("U8", "1", "[0,1]", 1, "shape is a number, not an array");
	one_bad("U8", "{}", "[0,1]", 1, "shape is an object, not an array");
	one_bad("U8", "[\"1\"]", "[0,1]", 1, "shape[0] is a string, not a non-negative integer");
	one_bad("U8", "[1,null]", "[0,1]", 1, "shape[1] is null");
	one_bad("U8", "[[1]]", "[0,1]", 1, "shape[0] is an array");
}
END_TEST

START_TEST(test_shape_numbers)
{
	one_bad("U8", "[-1]", "[0,1]", 1, "shape[0] is a negative or fractional number");
	one_bad("U8", "[1.5]", "[0,1]", 1, "shape[0] is a negative or fractional number");
	one_bad("U8", "[1.0]", "[0,1]", 1, "shape[0] is a negative or fractional number");
	one_bad("U8", "[1e0]", "[0,1]", 1, "shape[0] is a negative or fractional number");
	one_bad("U8", "[1e300]", "[0,1]", 1, "shape[0] is a negative or fractional number");
	one_bad("U8", "[-0]", "[0,0]", 0, "shape[0] is a negative or fractional number");
	one_bad("U8", "[1,18446744073709551616]", "[0,1]", 1, "shape[1] does not fit in 64 bits");
	one_bad("U8", "[01]", "[0,1]", 1, "leading zero");
}
END_TEST

START_TEST(test_offsets_arity)
{
	one_bad("U8", "[1]", "[]", 1, "data_offsets has 0 elements; it must have exactly 2");
	one_bad("U8", "[1]", "[0]", 1, "data_offsets has 1 element;");
	one_bad("U8", "[1]", "[0,1,2]", 1, "data_offsets has 3 elements");
	one_bad("U8", "[1]", "{\"0\":0,\"1\":1}", 1, "data_offsets is an object, not an array");
	one_bad("U8", "[1]", "null", 1, "data_offsets is null, not an array");
	one_bad("U8", "[1]", "\"0,1\"", 1, "data_offsets is a string, not an array");
}
END_TEST

START_TEST(test_offsets_numbers)
{
	one_bad("U8", "[8]", "[0,8.0]", 8, "data_offsets[1] is a negative or fractional number");
	one_bad("U8", "[8]", "[0,8e0]", 8, "data_offsets[1] is a negative or fractional number");
	one_bad("U8", "[8]", "[-1,7]", 8, "data_offsets[0] is a negative or fractional number");
	one_bad("U8", "[8]", "[0,18446744073709551616]", 8,
	        "data_offsets[1] does not fit in 64 bits");
	one_bad("U8", "[8]", "[0,\"8\"]", 8, "data_offsets[1] is a string");
}
END_TEST

START_TEST(test_metadata_bad)
{
	st_bad("{\"__metadata__\":{\"a\":1}}", 0,
	       "\"__metadata__\" value of \"a\" is a number, not a string");
	st_bad("{\"__metadata__\":{\"a\":null}}", 0, "value of \"a\" is null, not a string");
	st_bad("{\"__metadata__\":{\"a\":{}}}", 0, "value of \"a\" is an object, not a string");
	st_bad("{\"__metadata__\":[]}", 0,
	       "\"__metadata__\" is an array; it must be an object of strings or null");
	st_bad("{\"__metadata__\":\"x\"}", 0, "\"__metadata__\" is a string");
	st_bad("{\"__metadata__\":0}", 0, "\"__metadata__\" is a number");
}
END_TEST

START_TEST(test_metadata_duplicate)
{
	st_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key \"__metadata__\"");
	st_bad("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "duplicate key \"k\"");
}
END_TEST

START_TEST(test_metadata_as_tensor)
{
	/* The writer bug of huggingface/safetensors#849: never read as a tensor. */
	st_bad("{\"__metadata__\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       "\"__metadata__\" value of \"shape\" is an array, not a string");
}
END_TEST

START_TEST(test_dup_tensor_different)
{
	st_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
	       "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
	       2, "invalid JSON in header: duplicate key \"w\"");
}
END_TEST

START_TEST(test_dup_tensor_identical)
{
	/* The reference reader accepts this (last wins); placefs refuses it. */
	st_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
	       "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	       1, "duplicate key \"w\"");
}
END_TEST

START_TEST(test_dup_field)
{
	st_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       "duplicate key \"shape\"");
}
END_TEST

START_TEST(test_name_nul_escape)
{
	st_bad("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       "\\u0000 in a string at byte 3");
}
END_TEST

START_TEST(test_name_raw_control)
{
	st_bad("{\"a\x01"
	       "b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	       1, "raw control byte 0x01 in a string");
}
END_TEST

START_TEST(test_name_quoted_in_message)
{
	st_bad("{\"a\\\"b\\u0002\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       "tensor \"a\\\"b\\x02\": unknown dtype \"X\"");
}
END_TEST

/* ---- offsets and sizes (check 6) ----------------------------------------- */

START_TEST(test_first_not_at_zero)
{
	one_bad("U8", "[4]", "[4,8]", 8,
	        "tensor \"w\": data_offsets [4, 8]: the first tensor must "
	        "start at 0 (invalid offset for tensor)");
}
END_TEST

START_TEST(test_gap)
{
	st_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
	       12,
	       "tensor \"b\": data_offsets [8, 12] leave a gap after tensor \"a\", which ends "
	       "at 4 (invalid offset for tensor)");
}
END_TEST

START_TEST(test_overlap)
{
	st_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
	       12,
	       "tensor \"b\": data_offsets [4, 12] overlap tensor \"a\", which ends at 8 "
	       "(invalid offset for tensor)");
}
END_TEST

START_TEST(test_aliased)
{
	/* Two names for the same bytes: every byte has one owner. */
	st_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
	       4, "tensor \"b\": data_offsets [0, 4] overlap tensor \"a\"");
}
END_TEST

START_TEST(test_contained)
{
	st_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
	       8, "overlap tensor \"a\"");
}
END_TEST

START_TEST(test_end_before_begin)
{
	one_bad("U8", "[0]", "[8,4]", 8,
	        "tensor \"w\": data_offsets [8, 4] end before they begin "
	        "(invalid offset for tensor)");
	st_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}",
	       4, "tensor \"b\": data_offsets [4, 0] end before they begin");
}
END_TEST

START_TEST(test_size_mismatch_exact_message)
{
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	ck_assert_int_eq(parse_img("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],"
	                           "\"data_offsets\":[0,10]}}",
	                           10, &h, &err),
	                 -EINVAL);
	ck_assert_str_eq(err.msg, FILE_NAME ": tensor \"w\": data_offsets [0, 10] hold 10 bytes "
	                                    "but F32 [3] needs 12 (invalid shape, data type, or "
	                                    "offset for tensor)");
}
END_TEST

START_TEST(test_size_off_by_one)
{
	one_bad("F32", "[3]", "[0,11]", 11, "hold 11 bytes but F32 [3] needs 12");
	one_bad("F32", "[3]", "[0,13]", 13, "hold 13 bytes but F32 [3] needs 12");
	one_bad("F32", "[]", "[0,0]", 0, "hold 0 bytes but F32 [] needs 4");
	one_bad("BF16", "[0]", "[0,2]", 2, "hold 2 bytes but BF16 [0] needs 0");
}
END_TEST

START_TEST(test_overflow_2p32_squared)
{
	one_bad("F32", "[4294967296,4294967296]", "[0,0]", 0,
	        "tensor \"w\": F32 [4294967296, 4294967296]: overflow computing buffer size from "
	        "shape and/or element type");
}
END_TEST

START_TEST(test_overflow_2p63_times_2)
{
	one_bad("U8", "[9223372036854775808,2]", "[0,0]", 0, "overflow computing buffer size");
}
END_TEST

START_TEST(test_overflow_no_zero_shortcut)
{
	/* The product overflows before the 0 is reached: still an error. */
	one_bad("U8", "[4294967296,4294967296,0]", "[0,0]", 0, "overflow computing buffer size");
}
END_TEST

START_TEST(test_overflow_bits)
{
	/* 2^61 elements fit, but 2^61 x 64 bits do not. */
	one_bad("C64", "[2305843009213693952]", "[0,0]", 0,
	        "C64 [2305843009213693952]: overflow computing");
	one_bad("U8", "[2305843009213693952,8]", "[0,0]", 0, "overflow computing");
	/* 2^60 F4 elements are 2^62 bits: no overflow, but the size is wrong. */
	one_bad("F4", "[1152921504606846976]", "[0,0]", 0,
	        "needs 576460752303423488 (invalid shape");
}
END_TEST

START_TEST(test_overflow_many_dims)
{
	one_bad("U8", "[65536,65536,65536,65536,65536]", "[0,0]", 0, "overflow computing");
}
END_TEST

START_TEST(test_shape_message_cut)
{
	one_bad("U8", "[1,1,1,1,1,1,1,1,1,1,1,1]", "[0,0]", 0,
	        "U8 [1, 1, 1, 1, 1, 1, 1, 1, ...] needs 1");
}
END_TEST

/* ---- coverage (check 7) --------------------------------------------------- */

START_TEST(test_trailing_one_byte)
{
	char json[256];
	char want[256];
	uint64_t n;

	one(json, sizeof(json), "U8", "[4]", "[0,4]");
	n = strlen(json);
	snprintf(want, sizeof(want),
	         "1 trailing byte after the last tensor: expected %" PRIu64
	         " bytes, the file is %" PRIu64 " (incomplete metadata",
	         8 + n + 4, 8 + n + 5);
	st_bad(json, 5, want);
}
END_TEST

START_TEST(test_trailing_4k)
{
	one_bad("U8", "[4]", "[0,4]", 4 + 4096, "4096 trailing bytes after the last tensor");
}
END_TEST

START_TEST(test_trailing_after_empty)
{
	st_bad("{}", 1, "1 trailing byte");
	st_bad("{\"__metadata__\":{}}", 3, "3 trailing bytes");
}
END_TEST

START_TEST(test_truncated_one_byte)
{
	char json[256];
	char want[256];
	uint64_t n;

	one(json, sizeof(json), "U8", "[4]", "[0,4]");
	n = strlen(json);
	snprintf(want, sizeof(want),
	         "truncated: the header and tensors need %" PRIu64 " bytes but the file is %" PRIu64
	         " bytes, 1 short (incomplete metadata, file not fully covered)",
	         8 + n + 4, 8 + n + 3);
	st_bad(json, 3, want);
}
END_TEST

START_TEST(test_truncated_all_data)
{
	one_bad("F32", "[1024]", "[0,4096]", 0, "4096 short");
}
END_TEST

START_TEST(test_offsets_beyond_file)
{
	/* A 1 TB tensor announced in a tiny file: refused without allocating it. */
	one_bad("U8", "[1000000000000]", "[0,1000000000000]", 16,
	        "truncated: the header and "
	        "tensors need");
}
END_TEST

START_TEST(test_offsets_past_2p64)
{
	/*
	 * One tensor holds at most 2^61 - 1 bytes (its size in bits must fit in
	 * 64 bits), so nine back-to-back tensors are needed to end at 2^64 - 1,
	 * where adding 8 + N wraps.
	 */
	const uint64_t big = (1ULL << 61) - 1;
	struct placefs_strbuf sb;
	uint64_t off = 0;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{"), 0);
	for (uint64_t i = 0; i < 9; i++) {
		uint64_t size = i == 8 ? 7 : big;

		ck_assert_int_eq(placefs_strbuf_addf(
		                         &sb,
		                         "%s\"t%" PRIu64 "\":{\"dtype\":\"U8\",\"shape\":[%" PRIu64
		                         "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
		                         i ? "," : "", i, size, off, off + size),
		                 0);
		off += size;
	}
	ck_assert_uint_eq(off, UINT64_MAX);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "}"), 0);
	st_bad(sb.buf, 0, "the tensors end past 2^64 bytes");
	placefs_strbuf_release(&sb);
}
END_TEST

/* ---- order of checks (first failure wins) -------------------------------- */

START_TEST(test_order_too_large_before_eof)
{
	st_bad_len(100000001, "", 0, "header too large");
}
END_TEST

START_TEST(test_order_utf8_before_json)
{
	st_bad("{\"a\":1, \"a\":\xff}", 0, "invalid UTF-8");
}
END_TEST

START_TEST(test_order_types_before_offsets)
{
	/* "a" has a bad offset, the later "b" a bad type: the type error comes first. */
	st_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}",
	       6, "tensor \"b\": data_offsets[1] is a negative or fractional number");
}
END_TEST

START_TEST(test_order_offset_before_size)
{
	one_bad("F32", "[3]", "[4,5]", 5, "the first tensor must start at 0");
}
END_TEST

START_TEST(test_order_by_offset_not_document)
{
	/* Document order b, a; offset order a, b: a's size error is found first. */
	st_bad("{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,9]},"
	       "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,4]}}",
	       9, "tensor \"a\": data_offsets [0, 4] hold 4 bytes but U8 [3] needs 3");
}
END_TEST

START_TEST(test_order_size_before_coverage)
{
	one_bad("F32", "[3]", "[0,8]", 100, "hold 8 bytes but F32 [3] needs 12");
}
END_TEST

START_TEST(test_order_overflow_before_misaligned)
{
	one_bad("F4", "[4294967296,4294967296,3]", "[0,0]", 0, "overflow computing");
}
END_TEST

START_TEST(test_order_sniff_first)
{
	st_bad_raw("version https://git-lfs", 23, "Git LFS pointer");
}
END_TEST

/* ---- scale ----------------------------------------------------------------- */

START_TEST(test_100k_tensors)
{
	const int count = 100000;
	struct placefs_strbuf sb;
	struct placefs_st_header *h;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{\"__metadata__\":{\"format\":\"pt\"}"), 0);
	/* Written in reverse offset order so that the sort has work to do. */
	for (int i = count - 1; i >= 0; i--)
		ck_assert_int_eq(placefs_strbuf_addf(&sb,
		                                     ",\"model.layers.%d.weight\":{\"dtype\":"
		                                     "\"BF16\",\"shape\":[2],\"data_offsets\":[%d,"
		                                     "%d]}",
		                                     i, 4 * i, 4 * i + 4),
		                 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "}"), 0);
	h = st_ok(sb.buf, 4 * (uint64_t)count);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), (size_t)count);
	for (int i = 0; i < count; i++) {
		const struct placefs_st_tensor *t = tensor(h, (size_t)i);

		ck_assert_uint_eq(t->begin, 4 * (uint64_t)i);
	}
	ck_assert_str_eq(tensor(h, 0)->name, "model.layers.0.weight");
	ck_assert_str_eq(tensor(h, (size_t)count - 1)->name, "model.layers.99999.weight");
	placefs_st_header_free(h);
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_100k_tensors_dup_last)
{
	const int count = 100000;
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{"), 0);
	for (int i = 0; i < count; i++)
		ck_assert_int_eq(placefs_strbuf_addf(&sb,
		                                     "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[1],"
		                                     "\"data_offsets\":[%d,%d]}",
		                                     i ? "," : "", i, i, i + 1),
		                 0);
	ck_assert_int_eq(placefs_strbuf_addf(&sb,
	                                     ",\"t77777\":{\"dtype\":\"U8\",\"shape\":[1],"
	                                     "\"data_offsets\":[%d,%d]}}",
	                                     count, count + 1),
	                 0);
	st_bad(sb.buf, (uint64_t)count + 1, "duplicate key \"t77777\"");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_many_dims)
{
	struct placefs_strbuf sb;
	struct placefs_st_header *h;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1"), 0);
	for (int i = 1; i < 900; i++)
		ck_assert_int_eq(placefs_strbuf_adds(&sb, ",1"), 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "],\"data_offsets\":[0,1]}}"), 0);
	h = st_ok(sb.buf, 1);
	ck_assert_uint_eq(tensor(h, 0)->ndim, 900);
	placefs_st_header_free(h);
	placefs_strbuf_release(&sb);
}
END_TEST

/* Dimensions and arrays are capped at PLACEFS_ST_NDIM_MAX, before the tree is built. */
START_TEST(test_dims_cap)
{
	struct placefs_strbuf sb;
	struct placefs_st_header *h;

	for (int n = PLACEFS_ST_NDIM_MAX; n <= PLACEFS_ST_NDIM_MAX + 1; n++) {
		placefs_strbuf_init(&sb);
		ck_assert_int_eq(
		        placefs_strbuf_adds(&sb, "{\"big\":{\"dtype\":\"U8\",\"shape\":[1"), 0);
		for (int i = 1; i < n; i++)
			ck_assert_int_eq(placefs_strbuf_adds(&sb, ",1"), 0);
		ck_assert_int_eq(placefs_strbuf_adds(&sb, "],\"data_offsets\":[0,1]}}"), 0);
		if (n == PLACEFS_ST_NDIM_MAX) {
			h = st_ok(sb.buf, 1);
			ck_assert_uint_eq(tensor(h, 0)->ndim, PLACEFS_ST_NDIM_MAX);
			placefs_st_header_free(h);
		} else {
			/* The message names the tensor, the field and the rule. */
			st_bad(sb.buf, 1, "tensor \"big\": \"shape\" has more than 1024 elements");
			st_bad(sb.buf, 1, "at most 1024 dimensions per tensor");
		}
		placefs_strbuf_release(&sb);
	}
	/* Any array, also in a field the reader otherwise ignores. */
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
	                                          "\"data_offsets\":[0,1],\"junk\":[0"),
	                 0);
	for (int i = 0; i < PLACEFS_ST_NDIM_MAX; i++)
		ck_assert_int_eq(placefs_strbuf_adds(&sb, ",0"), 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "]}}"), 0);
	st_bad(sb.buf, 1, "tensor \"t\": \"junk\" has more than 1024 elements");
	placefs_strbuf_release(&sb);
}
END_TEST

/* At most one value or name per 4 bytes of header (plus 4096): memory follows the bytes. */
START_TEST(test_token_budget)
{
	struct placefs_strbuf sb;
	struct placefs_st_header *h;
	size_t fields = 8192;

	/* An ignored field of 64 arrays of 1000 zeros: a value per 2 bytes, refused. */
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
	                                          "\"data_offsets\":[0,1],\"junk\":["),
	                 0);
	for (int i = 0; i < 64; i++) {
		ck_assert_int_eq(placefs_strbuf_adds(&sb, i ? ",[0" : "[0"), 0);
		for (int j = 1; j < 1000; j++)
			ck_assert_int_eq(placefs_strbuf_adds(&sb, ",0"), 0);
		ck_assert_int_eq(placefs_strbuf_adds(&sb, "]"), 0);
	}
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "]}}"), 0);
	st_bad(sb.buf, 1, "values and names (at most one per 4 bytes of the header, plus 4096)");
	placefs_strbuf_release(&sb);

	/* 8192 ignored fields with long names (two tokens per 29 bytes): accepted. */
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
	                                          "\"data_offsets\":[0,1]"),
	                 0);
	for (size_t i = 0; i < fields; i++) {
		char f[64];

		snprintf(f, sizeof(f), ",\"an_unknown_field_%08zx\":0", i);
		ck_assert_int_eq(placefs_strbuf_adds(&sb, f), 0);
	}
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "}}"), 0);
	h = st_ok(sb.buf, 1);
	placefs_st_header_free(h);
	placefs_strbuf_release(&sb);
}
END_TEST

/* Another file's first bytes are not echoed as a header length. */
START_TEST(test_foreign_bytes_not_echoed)
{
	struct placefs_st_header *h = (struct placefs_st_header *)0x1;
	struct placefs_error err;
	const char *text = "root:$6$abcdefgh:19000:0:99999:7:::\n";
	int rc = parse_raw((const uint8_t *)text, strlen(text), &h, &err);

	check_refused(rc, h, &err, "not a safetensors file");
	ck_assert_ptr_nonnull(strstr(err.msg, "header too large"));
	ck_assert_ptr_null(strstr(err.msg, "2609312867587944306"));
	ck_assert_ptr_null(strstr(err.msg, "header length is"));
}
END_TEST

/* ---- placefs_st_read_fd on real files ----------------------------------- */

static char *tmpdir;

static void fd_setup(void)
{
	tmpdir = tu_mkdtemp();
}

static void fd_teardown(void)
{
	tu_rmtree(tmpdir);
	free(tmpdir);
	tmpdir = NULL;
}

/* Opens path and parses it with its real size; returns rc. */
static int read_file(const char *path, const char *name, struct placefs_st_header **h,
                     struct placefs_error *err)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc;

	ck_assert_msg(fd >= 0, "open %s", path);
	ck_assert_int_eq(fstat(fd, &st), 0);
	placefs_error_clear(err);
	rc = placefs_st_read_fd(name, fd, (uint64_t)st.st_size, h, err);
	close(fd);
	return rc;
}

static void write_st(const char *name, const char *json, uint64_t data_len, char **path)
{
	*path = tu_path(tmpdir, name);
	tu_st_write(*path, json, data_len);
}

static const char *two_json = "{\"__metadata__\":{\"format\":\"pt\"},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                              "\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[16,19]}}";

START_TEST(test_fd_valid)
{
	char *path;
	struct placefs_st_header *h = NULL, *h2 = NULL;
	struct placefs_error err;
	size_t len;
	uint8_t *img;

	write_st("ok.safetensors", two_json, 19, &path);
	ck_assert_int_eq(read_file(path, "ok.safetensors", &h, &err), 0);
	img = tu_read_file(path, &len);
	ck_assert_int_eq(placefs_st_parse_buffer("ok.safetensors", img, len, &h2, &err), 0);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 2);
	ck_assert_uint_eq(placefs_st_header_json_len(h), strlen(two_json));
	for (size_t i = 0; i < 2; i++) {
		const struct placefs_st_tensor *a = tensor(h, i), *b = tensor(h2, i);

		ck_assert_str_eq(a->name, b->name);
		ck_assert_uint_eq(a->offset, b->offset);
		ck_assert_uint_eq(a->nbytes, b->nbytes);
	}
	/* The tensor bytes are where the header says. */
	ck_assert_uint_eq(img[tensor(h, 1)->offset], (uint8_t)(16 * 31 + 7));
	ck_assert_str_eq(placefs_st_header_meta(h, 0)->value, "pt");
	placefs_st_header_free(h);
	placefs_st_header_free(h2);
	free(img);
	free(path);
}
END_TEST

START_TEST(test_fd_offset_unchanged)
{
	char *path;
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	struct stat st;
	int fd;

	write_st("pos.safetensors", two_json, 19, &path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(lseek(fd, 5, SEEK_SET), 5);
	ck_assert_int_eq(placefs_st_read_fd("pos", fd, (uint64_t)st.st_size, &h, &err), 0);
	ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 5);
	close(fd);
	placefs_st_header_free(h);
	free(path);
}
END_TEST

START_TEST(test_fd_truncated)
{
	char *path;
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	uint64_t n = strlen(two_json);
	char want[256];

	write_st("cut.safetensors", two_json, 12, &path);
	ck_assert_int_eq(read_file(path, "cut.safetensors", &h, &err), -EINVAL);
	ck_assert_ptr_null(h);
	snprintf(want, sizeof(want),
	         "cut.safetensors: truncated: the header and tensors need %" PRIu64
	         " bytes but the file is %" PRIu64 " bytes, 7 short",
	         8 + n + 19, 8 + n + 12);
	ck_assert_msg(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
	free(path);
}
END_TEST

START_TEST(test_fd_trailing)
{
	char *path;
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	write_st("tail.safetensors", two_json, 19 + 100, &path);
	ck_assert_int_eq(read_file(path, "tail.safetensors", &h, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "tail.safetensors: 100 trailing bytes after the last tensor"),
	              "%s", err.msg);
	free(path);
}
END_TEST

START_TEST(test_fd_cut_in_header)
{
	char *path = tu_path(tmpdir, "hcut.safetensors");
	size_t len;
	uint8_t *img = tu_st_image(two_json, 19, &len);
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	tu_write_file(path, img, 8 + 20);
	ck_assert_int_eq(read_file(path, "hcut.safetensors", &h, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "hcut.safetensors: invalid header length"), "%s", err.msg);
	free(img);
	free(path);
}
END_TEST

START_TEST(test_fd_empty_file)
{
	char *path = tu_path(tmpdir, "empty.safetensors");
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	tu_write_file(path, "", 0);
	ck_assert_int_eq(read_file(path, "empty.safetensors", &h, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "empty.safetensors: header too small: the file is 0 bytes, "
	                          "shorter than the 8-byte header length");
	free(path);
}
END_TEST

START_TEST(test_fd_lfs)
{
	char *path = tu_path(tmpdir, "lfs.safetensors");
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	tu_write_text(path, "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n");
	ck_assert_int_eq(read_file(path, "lfs.safetensors", &h, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "lfs.safetensors: a Git LFS pointer, not safetensors data; run "
	                          "`git lfs pull`");
	free(path);
}
END_TEST

START_TEST(test_fd_html)
{
	char *path = tu_path(tmpdir, "page.safetensors");
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	tu_write_text(path, "\n<!doctype html><title>Not found</title>");
	ck_assert_int_eq(read_file(path, "page.safetensors", &h, &err), -EINVAL);
	ck_assert_str_eq(
	        err.msg,
	        "page.safetensors: an HTML page, not safetensors data (a failed download?)");
	free(path);
}
END_TEST

START_TEST(test_fd_size_lies)
{
	/*
	 * The caller's size is larger than the file (it shrank after fstat): the
	 * header length fits the claimed size, but pread hits the real end first.
	 */
	char *path = tu_path(tmpdir, "shrunk.safetensors");
	uint8_t img[64] = {0x40, 0x42, 0x0f, 0, 0, 0, 0, 0, '{'}; /* N = 10^6 */
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	int fd;

	tu_write_file(path, img, sizeof(img));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_st_read_fd("shrunk", fd, 2000000, &h, &err), -EIO);
	ck_assert_ptr_null(h);
	ck_assert_int_eq(err.kind, PLACEFS_E_IO);
	ck_assert_str_eq(err.msg, "shrunk: unexpected end of file at byte 64 while reading the "
	                          "header (did the file change?)");
	close(fd);
	free(path);
}
END_TEST

START_TEST(test_fd_bad_fd)
{
	struct placefs_st_header *h = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_st_read_fd("x", -1, 100, &h, &err), -EBADF);
	placefs_error_clear(&err);
	/* A closed descriptor: pread fails with EBADF. */
	{
		int fd = open("/dev/null", O_RDONLY);

		close(fd);
		ck_assert_int_eq(placefs_st_read_fd("x", fd, 100, &h, &err), -EBADF);
		ck_assert_int_eq(err.kind, PLACEFS_E_IO);
	}
}
END_TEST

/* ---- corpus replay ------------------------------------------------------- */

/*
 * One corpus file through placefs_st_read_fd(). A refused file must return
 * no header, and the whole-buffer entry (the fuzz target) must refuse it too.
 */
static int corpus_parse(const char *path, const char *name, struct placefs_error *err, void *ctx)
{
	struct placefs_st_header *h = NULL;
	int rc = read_file(path, name, &h, err);

	(void)ctx;
	if (rc == 0) {
		placefs_st_header_free(h);
	} else {
		struct placefs_error err2;
		size_t len;
		uint8_t *img;

		ck_assert_ptr_null(h);
		img = tu_read_file(path, &len);
		placefs_error_clear(&err2);
		ck_assert_msg(placefs_st_parse_buffer(name, img, len, &h, &err2) < 0,
		              "%s was accepted by parse_buffer", name);
		free(img);
	}
	return rc;
}

START_TEST(test_corpus_bad)
{
	tu_corpus_replay(TEST_SRCDIR "/corpus/bad-safetensors", ".safetensors", 30, TU_CORPUS_BAD,
	                 corpus_parse, NULL);
}
END_TEST

START_TEST(test_corpus_good)
{
	tu_corpus_replay(TEST_SRCDIR "/corpus/good-safetensors", ".safetensors", 5, TU_CORPUS_GOOD,
	                 corpus_parse, NULL);
}
END_TEST

static Suite *safetensors_suite(void)
{
	Suite *s = suite_create("safetensors");
	TCase *tc;

	tc = tcase_create("valid");
	tcase_add_test(tc, test_basic);
	tcase_add_test(tc, test_free_null);
	tcase_add_test(tc, test_empty_header);
	tcase_add_test(tc, test_scalar);
	tcase_add_test(tc, test_zero_size);
	tcase_add_test(tc, test_zero_dim_with_max);
	tcase_add_test(tc, test_only_zero_size_file);
	tcase_add_test(tc, test_metadata_null);
	tcase_add_test(tc, test_metadata_empty);
	tcase_add_test(tc, test_metadata_map);
	tcase_add_test(tc, test_unknown_field_ignored);
	tcase_add_test(tc, test_whitespace_around_header);
	tcase_add_test(tc, test_empty_name);
	tcase_add_test(tc, test_escaped_control_name);
	tcase_add_test(tc, test_unicode_name);
	tcase_add_test(tc, test_exact_big_numbers);
	suite_add_tcase(s, tc);

	tc = tcase_create("dtype");
	tcase_add_test(tc, test_dtype_table);
	tcase_add_test(tc, test_dtype_unknown_names);
	tcase_add_test(tc, test_every_dtype_in_file);
	tcase_add_test(tc, test_subbyte_whole_bytes);
	tcase_add_test(tc, test_subbyte_misaligned);
	tcase_add_test(tc, test_dtype_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("header_length");
	tcase_add_test(tc, test_too_small);
	tcase_add_test(tc, test_too_large);
	tcase_add_test(tc, test_invalid_header_length);
	tcase_add_test(tc, test_header_cut);
	tcase_add_test(tc, test_empty_json);
	tcase_add_test(tc, test_lfs_pointer);
	tcase_add_test(tc, test_html);
	tcase_add_test(tc, test_not_html);
	tcase_add_test(tc, test_header_length_api);
	tcase_add_test(tc, test_header_parse_api);
	suite_add_tcase(s, tc);

	tc = tcase_create("json");
	tcase_add_test(tc, test_invalid_utf8);
	tcase_add_test(tc, test_bom);
	tcase_add_test(tc, test_trailing_nul_padding);
	tcase_add_test(tc, test_top_level_array);
	tcase_add_test(tc, test_tensor_not_object);
	tcase_add_test(tc, test_missing_fields);
	tcase_add_test(tc, test_shape_types);
	tcase_add_test(tc, test_shape_numbers);
	tcase_add_test(tc, test_offsets_arity);
	tcase_add_test(tc, test_offsets_numbers);
	tcase_add_test(tc, test_metadata_bad);
	tcase_add_test(tc, test_metadata_duplicate);
	tcase_add_test(tc, test_metadata_as_tensor);
	tcase_add_test(tc, test_dup_tensor_different);
	tcase_add_test(tc, test_dup_tensor_identical);
	tcase_add_test(tc, test_dup_field);
	tcase_add_test(tc, test_name_nul_escape);
	tcase_add_test(tc, test_name_raw_control);
	tcase_add_test(tc, test_name_quoted_in_message);
	suite_add_tcase(s, tc);

	tc = tcase_create("offsets");
	tcase_add_test(tc, test_first_not_at_zero);
	tcase_add_test(tc, test_gap);
	tcase_add_test(tc, test_overlap);
	tcase_add_test(tc, test_aliased);
	tcase_add_test(tc, test_contained);
	tcase_add_test(tc, test_end_before_begin);
	tcase_add_test(tc, test_size_mismatch_exact_message);
	tcase_add_test(tc, test_size_off_by_one);
	tcase_add_test(tc, test_overflow_2p32_squared);
	tcase_add_test(tc, test_overflow_2p63_times_2);
	tcase_add_test(tc, test_overflow_no_zero_shortcut);
	tcase_add_test(tc, test_overflow_bits);
	tcase_add_test(tc, test_overflow_many_dims);
	tcase_add_test(tc, test_shape_message_cut);
	suite_add_tcase(s, tc);

	tc = tcase_create("coverage");
	tcase_add_test(tc, test_trailing_one_byte);
	tcase_add_test(tc, test_trailing_4k);
	tcase_add_test(tc, test_trailing_after_empty);
	tcase_add_test(tc, test_truncated_one_byte);
	tcase_add_test(tc, test_truncated_all_data);
	tcase_add_test(tc, test_offsets_beyond_file);
	tcase_add_test(tc, test_offsets_past_2p64);
	suite_add_tcase(s, tc);

	tc = tcase_create("order");
	tcase_add_test(tc, test_order_too_large_before_eof);
	tcase_add_test(tc, test_order_utf8_before_json);
	tcase_add_test(tc, test_order_types_before_offsets);
	tcase_add_test(tc, test_order_offset_before_size);
	tcase_add_test(tc, test_order_by_offset_not_document);
	tcase_add_test(tc, test_order_size_before_coverage);
	tcase_add_test(tc, test_order_overflow_before_misaligned);
	tcase_add_test(tc, test_order_sniff_first);
	suite_add_tcase(s, tc);

	tc = tcase_create("scale");
	tcase_add_test(tc, test_100k_tensors);
	tcase_add_test(tc, test_100k_tensors_dup_last);
	tcase_add_test(tc, test_many_dims);
	tcase_add_test(tc, test_dims_cap);
	tcase_add_test(tc, test_token_budget);
	tcase_add_test(tc, test_foreign_bytes_not_echoed);
	suite_add_tcase(s, tc);

	tc = tcase_create("read_fd");
	tcase_add_checked_fixture(tc, fd_setup, fd_teardown);
	tcase_add_test(tc, test_fd_valid);
	tcase_add_test(tc, test_fd_offset_unchanged);
	tcase_add_test(tc, test_fd_truncated);
	tcase_add_test(tc, test_fd_trailing);
	tcase_add_test(tc, test_fd_cut_in_header);
	tcase_add_test(tc, test_fd_empty_file);
	tcase_add_test(tc, test_fd_lfs);
	tcase_add_test(tc, test_fd_html);
	tcase_add_test(tc, test_fd_size_lies);
	tcase_add_test(tc, test_fd_bad_fd);
	suite_add_tcase(s, tc);

	tc = tcase_create("corpus");
	tcase_add_test(tc, test_corpus_bad);
	tcase_add_test(tc, test_corpus_good);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(safetensors_suite());
}
