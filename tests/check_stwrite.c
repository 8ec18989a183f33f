/* SPDX-License-Identifier: MIT */
/* Unit tests for lib/format/stwrite.c: the synthetic safetensors writer. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/safetensors.h"
#include "format/stwrite.h"
#include "testutil.h"

static char *tmpdir;

static void setup(void)
{
	tmpdir = tu_mkdtemp();
}

static void teardown(void)
{
	tu_rmtree(tmpdir);
	free(tmpdir);
	tmpdir = NULL;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static int exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static const uint64_t shape_2x2[] = {2, 2};
static const uint64_t shape_3[] = {3};
static const uint64_t shape_0x3[] = {0, 3};

/* The header is compact JSON in the given order, __metadata__ first, space-padded to 8. */
START_TEST(test_header_exact_text)
{
	const struct placefs_stwrite_tensor t[] = {
	        {"b", PLACEFS_DT_F32, 2, shape_2x2},
	        {"a", PLACEFS_DT_BF16, 1, shape_3},
	        {"s", PLACEFS_DT_F64, 0, NULL},
	};
	const char *meta[] = {"format", "pt"};
	const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
	                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
	                   "\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
	                   "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[22,30]}}";
	struct placefs_error err;
	char *path = tu_path(tmpdir, "x.safetensors");
	size_t len, wl = strlen(want);
	uint8_t *buf;
	uint64_t n;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, t, 3, meta, 1, 1, &err), 0);
	buf = tu_read_file(path, &len);
	n = le64(buf);
	ck_assert_uint_eq(n % 8, 0);
	ck_assert_uint_ge(n, wl);
	ck_assert_uint_lt(n, wl + 8);
	ck_assert_int_eq(memcmp(buf + 8, want, wl), 0);
	for (uint64_t i = wl; i < n; i++)
		ck_assert_int_eq(buf[8 + i], ' ');
	ck_assert_uint_eq(len, 8 + n + 30);
	free(buf);
	free(path);
}
END_TEST

/* Whatever the name lengths, the header length is a multiple of 8 padded with spaces. */
START_TEST(test_padding_all_lengths)
{
	char name[32];
	char *path = tu_path(tmpdir, "p.safetensors");

	for (int l = 1; l < 24; l++) {
		struct placefs_stwrite_tensor t = {name, PLACEFS_DT_U8, 1, shape_3};
		struct placefs_error err;
		size_t len;
		uint8_t *buf;
		uint64_t n;

		memset(name, 'n', (size_t)l);
		name[l] = '\0';
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stwrite_file(path, &t, 1, NULL, 0, 1, &err), 0);
		buf = tu_read_file(path, &len);
		n = le64(buf);
		ck_assert_msg(n % 8 == 0, "name length %d: header %llu", l, (unsigned long long)n);
		ck_assert_uint_eq(len, 8 + n + 3);
		/* The JSON ends at the last '}', then only spaces. */
		uint64_t end = n;
		while (end > 0 && buf[8 + end - 1] == ' ')
			end--;
		ck_assert_int_eq(buf[8 + end - 1], '}');
		ck_assert_uint_lt(n - end, 8);
		free(buf);
	}
	free(path);
}
END_TEST

/* No tensors: "{}" alone; with an empty metadata list: an empty __metadata__ map. */
START_TEST(test_empty_file)
{
	const char *meta[] = {NULL};
	struct placefs_error err;
	char *path = tu_path(tmpdir, "e.safetensors");
	size_t len;
	uint8_t *buf;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, NULL, 0, NULL, 0, 1, &err), 0);
	buf = tu_read_file(path, &len);
	ck_assert_uint_eq(len, 16);
	ck_assert_uint_eq(le64(buf), 8);
	ck_assert_int_eq(memcmp(buf + 8, "{}      ", 8), 0);
	free(buf);

	ck_assert_int_eq(placefs_stwrite_file(path, NULL, 0, meta, 0, 1, &err), 0);
	buf = tu_read_file(path, &len);
	ck_assert_int_eq(memcmp(buf + 8, "{\"__metadata__\":{}}", 19), 0);
	free(buf);
	free(path);
}
END_TEST

/* What is written parses back through the strict reader, names and all. */
START_TEST(test_roundtrip_parse)
{
	static const char *names[] = {
	        "model.layers.0.weight",
	        "quote\"back\\slash",
	        "new\nline",
	        "caf\xc3\xa9",
	        "",
	        "x:y/z",
	        "\xf0\x9f\x98\x80",
	};
	static const enum placefs_dtype dts[] = {
	        PLACEFS_DT_BF16, PLACEFS_DT_F4,  PLACEFS_DT_F6_E2M3, PLACEFS_DT_C64,
	        PLACEFS_DT_BOOL, PLACEFS_DT_I64, PLACEFS_DT_F8_E4M3,
	};
	static const uint64_t shapes[][2] = {{4, 8}, {3, 2}, {1, 4}, {5, 1},
	                                     {0, 3}, {2, 2}, {7, 1}};
	struct placefs_stwrite_tensor t[7];
	const char *meta[] = {"format", "pt", "note", "tab\there"};
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	char *path = tu_path(tmpdir, "r.safetensors");
	uint64_t off = 0;
	size_t len;
	uint8_t *buf;

	for (int i = 0; i < 7; i++) {
		t[i].name = names[i];
		t[i].dtype = dts[i];
		t[i].ndim = 2;
		t[i].shape = shapes[i];
	}
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, t, 7, meta, 2, 42, &err), 0);
	buf = tu_read_file(path, &len);
	ck_assert_msg(placefs_st_parse_buffer("r", buf, len, &h, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 7);
	ck_assert_uint_eq(placefs_st_header_data_start(h), 8 + le64(buf));
	ck_assert_int_eq(placefs_st_header_has_meta(h), 1);
	ck_assert_uint_eq(placefs_st_header_meta_count(h), 2);
	ck_assert_str_eq(placefs_st_header_meta(h, 1)->key, "note");
	ck_assert_str_eq(placefs_st_header_meta(h, 1)->value, "tab\there");
	/* Tensors come out in offset order, which is the given order. */
	for (int i = 0; i < 7; i++) {
		const struct placefs_st_tensor *pt = placefs_st_header_tensor(h, (size_t)i);
		uint64_t nb;

		ck_assert_int_eq(placefs_stwrite_nbytes(dts[i], 2, shapes[i], &nb), 0);
		ck_assert_str_eq(pt->name, names[i]);
		ck_assert_int_eq(pt->dtype, dts[i]);
		ck_assert_uint_eq(pt->ndim, 2);
		ck_assert_uint_eq(pt->shape[0], shapes[i][0]);
		ck_assert_uint_eq(pt->shape[1], shapes[i][1]);
		ck_assert_uint_eq(pt->begin, off);
		ck_assert_uint_eq(pt->nbytes, nb);
		off += nb;
	}
	ck_assert_uint_eq(len, placefs_st_header_data_start(h) + off);
	placefs_st_header_free(h);
	free(buf);
	free(path);
}
END_TEST

/* The same file read through placefs_st_read_fd, as the checkpoint model reads it. */
START_TEST(test_roundtrip_read_fd)
{
	const struct placefs_stwrite_tensor t[] = {
	        {"w", PLACEFS_DT_F16, 2, shape_2x2},
	        {"e", PLACEFS_DT_F32, 2, shape_0x3},
	};
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	char *path = tu_path(tmpdir, "f.safetensors");
	struct stat st;
	int fd;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, t, 2, NULL, 0, 3, &err), 0);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_msg(placefs_st_read_fd("f", fd, (uint64_t)st.st_size, &h, &err) == 0, "%s",
	              err.msg);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), 2);
	ck_assert_int_eq(placefs_st_header_has_meta(h), 0);
	ck_assert_str_eq(placefs_st_header_tensor(h, 0)->name, "w");
	ck_assert_uint_eq(placefs_st_header_tensor(h, 0)->nbytes, 8);
	ck_assert_uint_eq(placefs_st_header_tensor(h, 1)->nbytes, 0);
	placefs_st_header_free(h);
	close(fd);
	free(path);
}
END_TEST

/* Payload bytes in the file are exactly placefs_stwrite_fill of each tensor. */
START_TEST(test_payload_is_fill)
{
	static const uint64_t s1[] = {1000}, s2[] = {333}, s3[] = {7, 9};
	const struct placefs_stwrite_tensor t[] = {
	        {"one", PLACEFS_DT_BF16, 1, s1},
	        {"two", PLACEFS_DT_U8, 1, s2},
	        {"three", PLACEFS_DT_F64, 2, s3},
	};
	struct placefs_error err;
	char *path = tu_path(tmpdir, "d.safetensors");
	size_t len, off;
	uint8_t *buf, *want;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, t, 3, NULL, 0, 99, &err), 0);
	buf = tu_read_file(path, &len);
	off = 8 + (size_t)le64(buf);
	ck_assert_uint_eq(len, off + 2000 + 333 + 504);
	want = malloc(2000);
	placefs_stwrite_fill(99, "one", PLACEFS_DT_BF16, 0, want, 2000);
	ck_assert_int_eq(memcmp(buf + off, want, 2000), 0);
	placefs_stwrite_fill(99, "two", PLACEFS_DT_U8, 0, want, 333);
	ck_assert_int_eq(memcmp(buf + off + 2000, want, 333), 0);
	placefs_stwrite_fill(99, "three", PLACEFS_DT_F64, 0, want, 504);
	ck_assert_int_eq(memcmp(buf + off + 2333, want, 504), 0);
	free(want);
	free(buf);
	free(path);
}
END_TEST

/* Same inputs, same bytes; another seed or name gives other bytes. */
START_TEST(test_fill_deterministic)
{
	uint8_t a[256], b[256], c[256], d[256];

	placefs_stwrite_fill(5, "t", PLACEFS_DT_U8, 0, a, sizeof(a));
	placefs_stwrite_fill(5, "t", PLACEFS_DT_U8, 0, b, sizeof(b));
	placefs_stwrite_fill(6, "t", PLACEFS_DT_U8, 0, c, sizeof(c));
	placefs_stwrite_fill(5, "u", PLACEFS_DT_U8, 0, d, sizeof(d));
	ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
	ck_assert_int_ne(memcmp(a, c, sizeof(a)), 0);
	ck_assert_int_ne(memcmp(a, d, sizeof(a)), 0);
	/* Not a constant pattern: many distinct byte values. */
	int seen[256] = {0}, distinct = 0;
	for (size_t i = 0; i < sizeof(a); i++)
		distinct += !seen[a[i]]++;
	ck_assert_int_gt(distinct, 100);
}
END_TEST

/* fill of [pos, pos+len) equals the same slice of a fill from 0, at every alignment. */
START_TEST(test_fill_random_access)
{
	enum placefs_dtype dt = _i % 2 ? PLACEFS_DT_BF16 : PLACEFS_DT_F32;
	uint8_t full[1024], part[128];

	placefs_stwrite_fill(11, "ra", dt, 0, full, sizeof(full));
	for (size_t pos = 0; pos < 80; pos++) {
		for (size_t len = 0; len <= 90; len++) {
			memset(part, 0xee, sizeof(part));
			placefs_stwrite_fill(11, "ra", dt, pos, part, len);
			ck_assert_msg(memcmp(part, full + pos, len) == 0, "pos %zu len %zu", pos,
			              len);
			/* Nothing past len is touched. */
			for (size_t k = len; k < sizeof(part); k++)
				ck_assert_int_eq(part[k], 0xee);
		}
	}
	/* Far offsets too: a slice at 2^40 + 3 equals two pieces that meet there. */
	uint64_t far = (1ULL << 40) + 3;
	uint8_t whole[64];
	placefs_stwrite_fill(11, "ra", dt, far, whole, sizeof(whole));
	placefs_stwrite_fill(11, "ra", dt, far, part, 13);
	placefs_stwrite_fill(11, "ra", dt, far + 13, part + 13, 51);
	ck_assert_int_eq(memcmp(whole, part, sizeof(whole)), 0);
}
END_TEST

static double half_to_double(uint16_t h)
{
	unsigned e = (h >> 10) & 31, m = h & 1023;
	double v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp(m, -24);
	else
		v = ldexp(m + 1024, (int)e - 25);
	return (h & 0x8000) ? -v : v;
}

static double bf16_to_double(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* Every float element of 16 bits and more decodes to a finite value. */
START_TEST(test_fill_finite_floats)
{
	static const enum placefs_dtype dts[] = {PLACEFS_DT_F16, PLACEFS_DT_BF16, PLACEFS_DT_F32,
	                                         PLACEFS_DT_F64, PLACEFS_DT_C64};
	const size_t n = 1 << 16;
	uint8_t *buf = malloc(n);

	for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
		unsigned nonzero = 0;

		placefs_stwrite_fill(7, "float", dts[d], 0, buf, n);
		for (size_t i = 0; i < n;) {
			double v;

			switch (dts[d]) {
			case PLACEFS_DT_F16:
			case PLACEFS_DT_BF16: {
				uint16_t h = (uint16_t)(buf[i] | buf[i + 1] << 8);

				v = dts[d] == PLACEFS_DT_F16 ? half_to_double(h)
				                             : bf16_to_double(h);
				i += 2;
				break;
			}
			case PLACEFS_DT_F32:
			case PLACEFS_DT_C64: {
				float f;

				memcpy(&f, buf + i, 4);
				v = f;
				i += 4;
				break;
			}
			default: memcpy(&v, buf + i, 8); i += 8;
			}
			ck_assert_msg(isfinite(v), "%s element at byte %zu is not finite",
			              placefs_dtype_name(dts[d]), i);
			nonzero += v != 0;
		}
		ck_assert_uint_gt(nonzero, 100);
	}
	free(buf);
}
END_TEST

/* The 8-bit float formats avoid their NaN/Inf encodings too. */
START_TEST(test_fill_finite_f8)
{
	uint8_t buf[4096];

	placefs_stwrite_fill(3, "f8", PLACEFS_DT_F8_E5M2, 0, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		ck_assert_uint_ne((buf[i] >> 2) & 31, 31); /* exponent all ones: Inf/NaN */
	placefs_stwrite_fill(3, "f8", PLACEFS_DT_F8_E4M3, 0, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		ck_assert_uint_ne(buf[i] & 0x7f, 0x7f);
	placefs_stwrite_fill(3, "f8", PLACEFS_DT_F8_E8M0, 0, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		ck_assert_uint_ne(buf[i], 0xff);
	placefs_stwrite_fill(3, "f8", PLACEFS_DT_F8_E4M3FNUZ, 0, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		ck_assert_uint_ne(buf[i], 0x80);
}
END_TEST

/* Sub-byte dtypes must fill whole bytes: F4 x 3 is refused naming the tensor, no file left. */
START_TEST(test_subbyte_refused)
{
	static const uint64_t three[] = {3}, four[] = {4}, six[] = {2, 3};
	struct placefs_stwrite_tensor t = {"odd.f4", PLACEFS_DT_F4, 1, three};
	struct placefs_error err;
	char *path = tu_path(tmpdir, "s.safetensors");
	char *tmp = tu_path(tmpdir, "s.safetensors.tmp");
	uint64_t nb;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, &t, 1, NULL, 0, 1, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "odd.f4"));
	ck_assert_ptr_nonnull(strstr(err.msg, "whole bytes"));
	ck_assert(!exists(path));
	ck_assert(!exists(tmp));
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_F4, 1, three, &nb), -EINVAL);
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_F6_E3M2, 1, three, &nb), -EINVAL);
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_F6_E3M2, 1, four, &nb), 0);
	ck_assert_uint_eq(nb, 3);
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_F4, 2, six, &nb), 0);
	ck_assert_uint_eq(nb, 3);
	/* A whole-byte F4 tensor is written. */
	t.shape = four;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, &t, 1, NULL, 0, 1, &err), 0);
	free(tmp);
	free(path);
}
END_TEST

/* Shape products, bit counts and offsets that pass 2^64 are refused. */
START_TEST(test_overflow_refused)
{
	static const uint64_t huge2[] = {1ULL << 32, 1ULL << 32};
	static const uint64_t bits_of[] = {1ULL << 62};
	static const uint64_t zero_big[] = {0, UINT64_MAX};
	static const uint64_t big_zero[] = {1ULL << 32, 1ULL << 32, 0};
	/* The largest U8 tensor whose bit count fits: 2^61 - 1 bytes. */
	static const uint64_t most[] = {(1ULL << 61) - 1};
	static const char *names[] = {"h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"};
	struct placefs_stwrite_tensor a = {"huge", PLACEFS_DT_F32, 2, huge2};
	struct placefs_stwrite_tensor many[9];
	struct placefs_error err;
	char *path = tu_path(tmpdir, "o.safetensors");
	uint64_t nb;

	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_U8, 2, huge2, &nb), -EOVERFLOW);
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_F64, 1, bits_of, &nb), -EOVERFLOW);
	/* The reference folds left from 1: a 0 after the overflow does not save it. */
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_U8, 3, big_zero, &nb), -EOVERFLOW);
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_U8, 2, zero_big, &nb), 0);
	ck_assert_uint_eq(nb, 0);
	ck_assert_int_eq(placefs_stwrite_nbytes(PLACEFS_DT_U8, 1, most, &nb), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, &a, 1, NULL, 0, 1, &err), -EOVERFLOW);
	ck_assert_ptr_nonnull(strstr(err.msg, "huge"));
	for (int i = 0; i < 9; i++) {
		many[i].name = names[i];
		many[i].dtype = PLACEFS_DT_U8;
		many[i].ndim = 1;
		many[i].shape = most;
	}
	/* Nine: the ninth tensor's end offset passes 2^64. */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, many, 9, NULL, 0, 1, &err), -EOVERFLOW);
	ck_assert_ptr_nonnull(strstr(err.msg, "\"h8\""));
	/* Eight: the offsets fit (2^64 - 8), the file with its header in front does not. */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, many, 8, NULL, 0, 1, &err), -EOVERFLOW);
	ck_assert_ptr_nonnull(strstr(err.msg, "file size"));
	ck_assert(!exists(path));
	free(path);
}
END_TEST

/* Inputs the reader would refuse are refused before anything is written. */
START_TEST(test_unreadable_inputs_refused)
{
	const struct placefs_stwrite_tensor dup[] = {
	        {"same", PLACEFS_DT_U8, 1, shape_3},
	        {"other", PLACEFS_DT_U8, 1, shape_3},
	        {"same", PLACEFS_DT_U8, 1, shape_3},
	};
	const struct placefs_stwrite_tensor meta_name = {"__metadata__", PLACEFS_DT_U8, 1, shape_3};
	const struct placefs_stwrite_tensor bad_utf8 = {"bad\xff", PLACEFS_DT_U8, 1, shape_3};
	const struct placefs_stwrite_tensor bad_dt = {"bad", PLACEFS_DT_INVALID, 1, shape_3};
	const char *dup_meta[] = {"k", "1", "k", "2"};
	struct placefs_error err;
	char *path = tu_path(tmpdir, "u.safetensors");

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, dup, 3, NULL, 0, 1, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "same"));
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, &meta_name, 1, NULL, 0, 1, &err), -EINVAL);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, &bad_utf8, 1, NULL, 0, 1, &err), -EINVAL);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, &bad_dt, 1, NULL, 0, 1, &err), -EINVAL);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, dup, 2, dup_meta, 2, 1, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "\"k\""));
	ck_assert(!exists(path));
	free(path);
}
END_TEST

/*
 * A write that fails half-way (file size limit) leaves the previous file
 * untouched and no temporary behind.
 */
START_TEST(test_failed_write_leaves_nothing)
{
	static const uint64_t big[] = {1 << 20};
	const struct placefs_stwrite_tensor t = {"big", PLACEFS_DT_U8, 1, big};
	struct placefs_error err;
	char *path = tu_path(tmpdir, "keep.safetensors");
	char *tmp = tu_path(tmpdir, "keep.safetensors.tmp");
	struct rlimit old, lim;
	void (*oldh)(int);
	size_t len;
	uint8_t *buf;
	int rc;

	tu_write_text(path, "previous contents");
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 4096;
	oldh = signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	placefs_error_clear(&err);
	rc = placefs_stwrite_file(path, &t, 1, NULL, 0, 1, &err);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, oldh);
	ck_assert_int_eq(rc, -EFBIG);
	ck_assert_int_eq(err.kind, PLACEFS_E_IO);
	ck_assert(!exists(tmp));
	buf = tu_read_file(path, &len);
	ck_assert_uint_eq(len, 17);
	ck_assert_int_eq(memcmp(buf, "previous contents", 17), 0);
	free(buf);

	/* A directory that does not exist: an error naming the path. */
	char *nodir = tu_path(tmpdir, "missing/x.safetensors");
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(nodir, &t, 1, NULL, 0, 1, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "missing/x.safetensors"));
	free(nodir);
	free(tmp);
	free(path);
}
END_TEST

/* Payloads larger than the write buffer cross buffer boundaries correctly. */
START_TEST(test_large_payload_crosses_buffer)
{
	static const uint64_t s1[] = {5 << 20}, s2[] = {3 << 20}, s3[] = {1 << 20};
	const struct placefs_stwrite_tensor t[] = {
	        {"l1", PLACEFS_DT_BF16, 1, s1}, /* 10 MiB */
	        {"l2", PLACEFS_DT_U8, 1, s2},
	        {"l3", PLACEFS_DT_F32, 1, s3},
	};
	const size_t sz[] = {10 << 20, 3 << 20, 4 << 20};
	struct placefs_error err;
	char *path = tu_path(tmpdir, "l.safetensors");
	size_t len, off;
	uint8_t *buf, *want = malloc(10 << 20);

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stwrite_file(path, t, 3, NULL, 0, 8, &err), 0);
	buf = tu_read_file(path, &len);
	off = 8 + (size_t)le64(buf);
	ck_assert_uint_eq(len, off + sz[0] + sz[1] + sz[2]);
	for (int i = 0; i < 3; i++) {
		placefs_stwrite_fill(8, t[i].name, t[i].dtype, 0, want, sz[i]);
		ck_assert_msg(memcmp(buf + off, want, sz[i]) == 0, "tensor %s", t[i].name);
		off += sz[i];
	}
	free(want);
	free(buf);
	free(path);
}
END_TEST

/*
 * The quantized layouts placefs-mkckpt writes (--quant fp8 and gptq): tens
 * of thousands of tiny tensors, among them 4-byte F32 scalars, in one file.
 * Each parses back with its dtype, shape and contiguous offsets, and each
 * payload is placefs_stwrite_fill's.
 */
START_TEST(test_many_tiny_quant_tensors)
{
	/* One linear of 256 -> 128 features, as fp8 and as gptq (group 128). */
	static const uint64_t w[] = {128, 256}, ws[] = {128, 1}, is[] = {1};
	static const uint64_t qw[] = {32, 128}, qz[] = {2, 16}, sc[] = {2, 128}, gi[] = {256};
	static const struct {
		const char *suffix;
		enum placefs_dtype dtype;
		uint32_t ndim;
		const uint64_t *shape;
		uint64_t nbytes;
	} kind[] = {
	        {"weight", PLACEFS_DT_F8_E4M3, 2, w, 32768},
	        {"weight_scale", PLACEFS_DT_F32, 2, ws, 512},
	        {"input_scale", PLACEFS_DT_F32, 1, is, 4},
	        {"qweight", PLACEFS_DT_I32, 2, qw, 16384},
	        {"qzeros", PLACEFS_DT_I32, 2, qz, 128},
	        {"scales", PLACEFS_DT_F16, 2, sc, 512},
	        {"g_idx", PLACEFS_DT_I32, 1, gi, 1024},
	};
	enum { NK = sizeof(kind) / sizeof(kind[0]), NLIN = 3000, N = NLIN * NK };
	struct placefs_stwrite_tensor *t = calloc(N, sizeof(*t));
	char **names = calloc(N, sizeof(*names));
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	char *path = tu_path(tmpdir, "q.safetensors");
	uint8_t *buf, *want = malloc(32768);
	uint64_t off = 0;
	size_t len;

	ck_assert_ptr_nonnull(t);
	ck_assert_ptr_nonnull(names);
	ck_assert_ptr_nonnull(want);
	for (size_t i = 0; i < N; i++) {
		ck_assert_int_ge(asprintf(&names[i],
		                          "model.layers.%zu.mlp.experts.%zu.down_proj.%s",
		                          i / NK / 100, i / NK % 100, kind[i % NK].suffix),
		                 0);
		t[i].name = names[i];
		t[i].dtype = kind[i % NK].dtype;
		t[i].ndim = kind[i % NK].ndim;
		t[i].shape = kind[i % NK].shape;
	}
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stwrite_file(path, t, N, NULL, 0, 5, &err) == 0, "%s", err.msg);
	buf = tu_read_file(path, &len);
	ck_assert_msg(placefs_st_parse_buffer("q", buf, len, &h, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(placefs_st_header_tensor_count(h), N);
	for (size_t i = 0; i < N; i++) {
		const struct placefs_st_tensor *pt = placefs_st_header_tensor(h, i);
		uint64_t nb;

		ck_assert_int_eq(placefs_stwrite_nbytes(t[i].dtype, t[i].ndim, t[i].shape, &nb), 0);
		ck_assert_uint_eq(nb, kind[i % NK].nbytes);
		ck_assert_str_eq(pt->name, names[i]);
		ck_assert_int_eq(pt->dtype, t[i].dtype);
		ck_assert_uint_eq(pt->ndim, t[i].ndim);
		for (uint32_t d = 0; d < pt->ndim; d++)
			ck_assert_uint_eq(pt->shape[d], t[i].shape[d]);
		ck_assert_uint_eq(pt->begin, off);
		ck_assert_uint_eq(pt->nbytes, nb);
		placefs_stwrite_fill(5, names[i], t[i].dtype, 0, want, (size_t)nb);
		ck_assert_msg(memcmp(buf + placefs_st_header_data_start(h) + off, want, nb) == 0,
		              "tensor %s", names[i]);
		off += nb;
	}
	ck_assert_uint_eq(len, placefs_st_header_data_start(h) + off);
	placefs_st_header_free(h);
	for (size_t i = 0; i < N; i++)
		free(names[i]);
	free(names);
	free(t);
	free(want);
	free(buf);
	free(path);
}
END_TEST

static Suite *stwrite_suite(void)
{
	Suite *s = suite_create("stwrite");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_header_exact_text);
	tcase_add_test(tc, test_padding_all_lengths);
	tcase_add_test(tc, test_empty_file);
	tcase_add_test(tc, test_roundtrip_parse);
	tcase_add_test(tc, test_roundtrip_read_fd);
	tcase_add_test(tc, test_payload_is_fill);
	tcase_add_test(tc, test_fill_deterministic);
	tcase_add_loop_test(tc, test_fill_random_access, 0, 2);
	tcase_add_test(tc, test_fill_finite_floats);
	tcase_add_test(tc, test_fill_finite_f8);
	tcase_add_test(tc, test_subbyte_refused);
	tcase_add_test(tc, test_overflow_refused);
	tcase_add_test(tc, test_unreadable_inputs_refused);
	tcase_add_test(tc, test_failed_write_leaves_nothing);
	tcase_add_test(tc, test_large_payload_crosses_buffer);
	tcase_add_test(tc, test_many_tiny_quant_tensors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(stwrite_suite());
}
