/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for lib/common/slice.c: slice layouts against a naive bit-level
 * reference, exhaustively over small shapes and every element width, and
 * the hand-built layout checks.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/slice.h"
#include "testutil.h"

/*
 * The reference: the slice's elements in row-major order, each mapped to
 * its source element, then bit by bit. Returns 1 and fills map[b] (source
 * byte of slice byte b) when every slice byte is 8 consecutive source bits
 * starting on a byte boundary (and the slice a whole number of bytes), 0
 * when the slice cannot be expressed in bytes, -1 when the request is
 * invalid (dim, len 0, out of range, ndim).
 */
static int ref_map(unsigned bits, uint32_t ndim, const uint64_t *shape, uint32_t dim,
                   uint64_t start, uint64_t len, uint64_t *map, uint64_t *nbytes)
{
	uint64_t outer = 1, inner = 1, d, nel = 0, j, b;
	uint64_t *el;
	uint32_t i;

	if (dim > 1 || ndim <= dim || len == 0 || start + len > shape[dim])
		return -1;
	for (i = 0; i < dim; i++)
		outer *= shape[i];
	for (i = dim + 1; i < ndim; i++)
		inner *= shape[i];
	d = shape[dim];
	el = malloc(sizeof(*el) * (outer * len * inner + 1));
	for (uint64_t o = 0; o < outer; o++)
		for (uint64_t c = start; c < start + len; c++)
			for (uint64_t k = 0; k < inner; k++)
				el[nel++] = (o * d + c) * inner + k;
	*nbytes = 0;
	if (nel * bits % 8 != 0) {
		free(el);
		return 0;
	}
	*nbytes = nel * bits / 8;
	for (b = 0; b < *nbytes; b++) {
		uint64_t first = 0;

		for (j = 0; j < 8; j++) {
			uint64_t sb = 8 * b + j; /* slice bit */
			uint64_t src = el[sb / bits] * bits + sb % bits;

			if (j == 0)
				first = src;
			if (src != first + j || first % 8 != 0) {
				free(el);
				return 0;
			}
		}
		map[b] = first / 8;
	}
	free(el);
	return 1;
}

START_TEST(test_exhaustive_small)
{
	static const enum placefs_dtype dts[] = {PLACEFS_DT_F4,  PLACEFS_DT_F6_E2M3,
	                                         PLACEFS_DT_U8,  PLACEFS_DT_BF16,
	                                         PLACEFS_DT_F32, PLACEFS_DT_F64};
	uint64_t map[64 * 8], shape[3];
	unsigned long cases = 0, ok = 0, refused = 0;
	size_t t;

	for (t = 0; t < sizeof(dts) / sizeof(dts[0]); t++) {
		unsigned bits = placefs_dtype_bits(dts[t]);

		for (uint32_t ndim = 1; ndim <= 3; ndim++) {
			uint64_t nshapes = 1;

			for (uint32_t i = 0; i < ndim; i++)
				nshapes *= 5;
			for (uint64_t si = 0; si < nshapes; si++) {
				uint64_t v = si, total = 1;

				for (uint32_t i = 0; i < ndim; i++) {
					shape[i] = v % 5;
					v /= 5;
					total *= shape[i];
				}
				if (total * bits % 8 != 0)
					continue; /* not a valid tensor: the parser refuses it */
				for (uint32_t dim = 0; dim <= 2; dim++) {
					for (uint64_t start = 0; start <= 5; start++) {
						for (uint64_t len = 0; len <= 5; len++) {
							struct placefs_slice s = {dim, start, len};
							struct placefs_slice_layout l;
							struct placefs_error err;
							uint64_t nb = 0, b;
							int want = ref_map(bits, ndim, shape, dim,
							                   start, len, map, &nb);
							int rc;

							placefs_error_clear(&err);
							rc = placefs_slice_layout(
							        "t", dts[t], ndim, shape,
							        total * bits / 8, &s, &l, &err);
							cases++;
							if (want <= 0) {
								ck_assert_msg(
								        rc == -EINVAL,
								        "bits %u ndim %u shape "
								        "%llu,%llu,%llu dim %u "
								        "[%llu,+%llu) accepted",
								        bits, ndim,
								        (unsigned long long)
								                shape[0],
								        (unsigned long long)(ndim > 1
								                                     ? shape[1]
								                                     : 0),
								        (unsigned long long)(ndim > 2
								                                     ? shape[2]
								                                     : 0),
								        dim,
								        (unsigned long long)start,
								        (unsigned long long)len);
								ck_assert_int_eq(err.kind,
								                 PLACEFS_E_USAGE);
								ck_assert_ptr_nonnull(strstr(
								        err.msg, "tensor \"t\""));
								refused++;
								continue;
							}
							ck_assert_msg(rc == 0, "refused: %s",
							              err.msg);
							ck_assert_uint_eq(l.nbytes, nb);
							ck_assert_int_eq(placefs_slice_check(
							                         "t", &l,
							                         total * bits / 8,
							                         NULL),
							                 0);
							if (nb == 0) {
								ck_assert_uint_eq(l.rows, 0);
								ck_assert_uint_eq(l.seg_bytes, 0);
								ck_assert_uint_eq(l.offset, 0);
							}
							for (b = 0; b < nb;) {
								uint64_t run,
								        src = placefs_slice_src(
								                &l, b, &run);

								ck_assert_uint_ge(run, 1);
								for (uint64_t r = 0;
								     r < run && b < nb; r++, b++)
									ck_assert_uint_eq(src + r,
									                  map[b]);
							}
							/* Normalised: contiguous means one segment. */
							if (nb > 0) {
								int contig = 1;

								for (b = 1; b < nb; b++)
									if (map[b] !=
									    map[b - 1] + 1)
										contig = 0;
								ck_assert_int_eq(
								        placefs_slice_contiguous(
								                &l),
								        contig);
								ck_assert_uint_eq(
								        l.rows * l.seg_bytes,
								        l.nbytes);
							}
							ok++;
						}
					}
				}
			}
		}
	}
	/* The sweep covers both outcomes, and sub-byte refusals among them. */
	ck_assert_uint_gt(ok, 5000);
	ck_assert_uint_gt(refused, 5000);
	ck_assert_uint_eq(ok + refused, cases);
}
END_TEST

START_TEST(test_examples)
{
	/* A [4096, 11008] BF16 weight, 8 ranks. */
	const uint64_t shape[2] = {4096, 11008};
	const uint64_t tb = 4096ULL * 11008 * 2;
	struct placefs_slice s = {0, 512 * 3, 512};
	struct placefs_slice_layout l;
	struct placefs_error err;

	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_BF16, 2, shape, tb, &s, &l, NULL), 0);
	ck_assert_uint_eq(l.rows, 1);
	ck_assert_uint_eq(l.offset, 1536ULL * 11008 * 2);
	ck_assert_uint_eq(l.nbytes, 512ULL * 11008 * 2);
	s = (struct placefs_slice){1, 1376 * 5, 1376};
	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_BF16, 2, shape, tb, &s, &l, NULL), 0);
	ck_assert_uint_eq(l.rows, 4096);
	ck_assert_uint_eq(l.seg_bytes, 1376 * 2);
	ck_assert_uint_eq(l.stride, 11008 * 2);
	ck_assert_uint_eq(l.offset, 1376 * 5 * 2);
	ck_assert_uint_eq(l.nbytes, tb / 8);
	/* Every column: contiguous, the whole tensor. */
	s = (struct placefs_slice){1, 0, 11008};
	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_BF16, 2, shape, tb, &s, &l, NULL), 0);
	ck_assert_uint_eq(l.rows, 1);
	ck_assert_uint_eq(l.nbytes, tb);

	/* Refusals name the tensor and the rule. */
	placefs_error_clear(&err);
	s = (struct placefs_slice){1, 11000, 9};
	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_BF16, 2, shape, tb, &s, &l, &err),
	                 -EINVAL);
	ck_assert_str_eq(err.msg, "tensor \"w\": slice dim 1 [11000, +9): it ends past dimension 1 "
	                          "of size 11008");
	placefs_error_clear(&err);
	s = (struct placefs_slice){2, 0, 1};
	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_BF16, 2, shape, tb, &s, &l, &err),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "only dimension 0 (rows) or 1 (columns)"));
	placefs_error_clear(&err);
	s = (struct placefs_slice){1, 0, 1};
	ck_assert_int_eq(
	        placefs_slice_layout("v", PLACEFS_DT_BF16, 1, shape, 4096 * 2, &s, &l, &err),
	        -EINVAL);
	ck_assert_str_eq(err.msg, "tensor \"v\": slice dim 1 of a tensor of 1 dimension");
	placefs_error_clear(&err);
	s = (struct placefs_slice){0, 0, 1};
	ck_assert_int_eq(placefs_slice_layout("x", PLACEFS_DT_BF16, 0, NULL, 2, &s, &l, &err),
	                 -EINVAL);
	s = (struct placefs_slice){0, UINT64_MAX, 2};
	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_BF16, 2, shape, tb, &s, &l, NULL),
	                 -EINVAL);
	/* The shape must agree with the bytes. */
	s = (struct placefs_slice){0, 0, 1};
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_BF16, 2, shape, tb - 2, &s, &l, &err),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "not the"));
	ck_assert_int_eq(placefs_slice_layout("w", PLACEFS_DT_INVALID, 2, shape, tb, &s, &l, NULL),
	                 -EINVAL);
	/* A product that overflows 64 bits. */
	{
		const uint64_t huge[3] = {1ULL << 40, 1ULL << 30, 4};

		placefs_error_clear(&err);
		ck_assert_int_eq(
		        placefs_slice_layout("h", PLACEFS_DT_F64, 3, huge, 0, &s, &l, &err),
		        -EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "overflows"));
	}
	/* F4: a column range of odd width in a row of odd width cannot be bytes. */
	{
		const uint64_t f4[2] = {2, 6};

		s = (struct placefs_slice){1, 1, 2};
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_slice_layout("q", PLACEFS_DT_F4, 2, f4, 6, &s, &l, &err),
		                 -EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "sub-byte"));
		s = (struct placefs_slice){1, 2, 4};
		ck_assert_int_eq(placefs_slice_layout("q", PLACEFS_DT_F4, 2, f4, 6, &s, &l, NULL),
		                 0);
		ck_assert_uint_eq(l.rows, 2);
		ck_assert_uint_eq(l.seg_bytes, 2);
		ck_assert_uint_eq(l.stride, 3);
		ck_assert_uint_eq(l.offset, 1);
	}
}
END_TEST

START_TEST(test_check_and_whole)
{
	struct placefs_slice_layout l;
	struct placefs_error err;
	uint64_t run;

	placefs_slice_whole(100, &l);
	ck_assert_uint_eq(l.rows, 1);
	ck_assert_uint_eq(l.seg_bytes, 100);
	ck_assert_uint_eq(l.nbytes, 100);
	ck_assert_int_eq(placefs_slice_check("t", &l, 100, NULL), 0);
	ck_assert_int_eq(placefs_slice_check("t", &l, 99, NULL), -EINVAL);
	ck_assert_uint_eq(placefs_slice_src(&l, 37, &run), 37);
	ck_assert_uint_eq(run, 63);
	placefs_slice_whole(0, &l);
	ck_assert_uint_eq(l.rows, 0);
	ck_assert_int_eq(placefs_slice_check("t", &l, 0, NULL), 0);

	/* rows x seg must be nbytes. */
	l = (struct placefs_slice_layout){0, 3, 4, 10, 11};
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_slice_check("t", &l, 100, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor \"t\": slice layout"));
	/* Stride below the segment. */
	l = (struct placefs_slice_layout){0, 3, 4, 3, 12};
	ck_assert_int_eq(placefs_slice_check("t", &l, 100, NULL), -EINVAL);
	/* The last segment ends exactly at the end, or one byte past it. */
	l = (struct placefs_slice_layout){2, 3, 4, 10, 12};
	ck_assert_int_eq(placefs_slice_check("t", &l, 26, NULL), 0);
	ck_assert_int_eq(placefs_slice_check("t", &l, 25, NULL), -EINVAL);
	ck_assert_uint_eq(placefs_slice_src(&l, 5, &run), 2 + 10 + 1);
	ck_assert_uint_eq(run, 3);
	/* Overflow in the extent. */
	l = (struct placefs_slice_layout){0, 2, 1, UINT64_MAX, 2};
	ck_assert_int_eq(placefs_slice_check("t", &l, UINT64_MAX, NULL), -EINVAL);
	l = (struct placefs_slice_layout){UINT64_MAX, 1, 1, 1, 1};
	ck_assert_int_eq(placefs_slice_check("t", &l, UINT64_MAX, NULL), -EINVAL);
	l = (struct placefs_slice_layout){0, UINT64_MAX, 2, 2, 0};
	ck_assert_int_eq(placefs_slice_check("t", &l, UINT64_MAX, NULL), -EINVAL);
	/* An empty layout is all zero. */
	l = (struct placefs_slice_layout){0, 1, 0, 0, 0};
	ck_assert_int_eq(placefs_slice_check("t", &l, 10, NULL), -EINVAL);
}
END_TEST

static Suite *slice_suite(void)
{
	Suite *s = suite_create("slice");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_exhaustive_small);
	tcase_add_test(tc, test_examples);
	tcase_add_test(tc, test_check_and_whole);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(slice_suite());
}
