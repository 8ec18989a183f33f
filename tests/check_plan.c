/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/name.h"
#include "model/plan.h"
#include "testutil.h"

#define MiB (1ULL << 20)

/*
 * Most tests build U8 vectors by hand: shape = [nbytes], offsets contiguous.
 * The shape points at the tensor's own nbytes, so the array must stay put.
 */
static void as_u8(struct placefs_tensor *t, size_t n)
{
	uint64_t off = 0;

	for (size_t i = 0; i < n; i++) {
		t[i].dtype = PLACEFS_DT_U8;
		t[i].ndim = 1;
		t[i].shape = &t[i].nbytes;
		t[i].offset = off;
		if (!t[i].file)
			t[i].file = "model.safetensors";
		off += t[i].nbytes;
	}
}

static struct placefs_plan *plan_ok(const struct placefs_tensor *t, size_t n,
                                    const char *const *prefixes, size_t np, int has_limit,
                                    uint64_t limit)
{
	struct placefs_plan_options opt = {prefixes, np, has_limit, limit};
	struct placefs_plan *plan = NULL;
	struct placefs_error err;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_plan_create(t, n, &opt, &plan, &err);
	ck_assert_msg(rc == 0, "plan failed: %d %s", rc, err.msg);
	ck_assert_ptr_nonnull(plan);
	return plan;
}

static const char *plan_bad(const struct placefs_tensor *t, size_t n, const char *const *prefixes,
                            size_t np, int has_limit, uint64_t limit, enum placefs_errkind kind)
{
	static struct placefs_error err;
	struct placefs_plan_options opt = {prefixes, np, has_limit, limit};
	struct placefs_plan *plan = (struct placefs_plan *)&err; /* must be reset */
	int rc;

	placefs_error_clear(&err);
	rc = placefs_plan_create(t, n, &opt, &plan, &err);
	ck_assert_msg(rc == -EINVAL, "want -EINVAL, got %d (%s)", rc, err.msg);
	ck_assert_ptr_null(plan);
	ck_assert_int_eq(err.code, -EINVAL);
	ck_assert_msg(err.kind == kind, "want kind %s, got %s: %s", placefs_errkind_name(kind),
	              placefs_errkind_name(err.kind), err.msg);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
	return err.msg;
}

static enum placefs_placement place_of(const struct placefs_plan *p, size_t i)
{
	return placefs_plan_entry(p, i)->placement;
}

/* The seed's CUDA test, plus a tensor exactly at the limit. */
static const uint64_t shape_small[] = {262144}; /* 1 MiB of F32 */
static const uint64_t shape_big[] = {2359296};  /* 9 MiB of F32 */
static const uint64_t shape_edge[] = {2097152}; /* 8 MiB of F32 */
static const struct placefs_tensor seed_tensors[] = {
        {"small", 0, "model.safetensors", PLACEFS_DT_F32, 1, shape_small, 1 * MiB, 0},
        {"big", 0, "model.safetensors", PLACEFS_DT_F32, 1, shape_big, 9 * MiB, 1 * MiB},
        {"edge", 0, "model.safetensors", PLACEFS_DT_F32, 1, shape_edge, 8 * MiB, 10 * MiB},
};

START_TEST(test_seed_8mib)
{
	struct placefs_plan *p = plan_ok(seed_tensors, 3, NULL, 0, 1, 8388608);
	struct placefs_plan_totals t;

	ck_assert_uint_eq(placefs_plan_count(p), 3);
	ck_assert_str_eq(placefs_plan_entry(p, 0)->tensor->name, "small");
	ck_assert_int_eq(place_of(p, 0), PLACEFS_PLACE_GPU);
	ck_assert_str_eq(placefs_plan_entry(p, 1)->tensor->name, "big");
	ck_assert_int_eq(place_of(p, 1), PLACEFS_PLACE_CPU);
	ck_assert_str_eq(placefs_plan_entry(p, 2)->tensor->name, "edge");
	ck_assert_int_eq(place_of(p, 2), PLACEFS_PLACE_GPU);
	ck_assert_ptr_eq(placefs_plan_entry(p, 1)->tensor, &seed_tensors[1]);
	ck_assert_ptr_null(placefs_plan_entry(p, 3));
	ck_assert_int_eq(placefs_plan_has_limit(p), 1);
	ck_assert_uint_eq(placefs_plan_limit(p), 8388608);
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), 8388608);
	placefs_plan_totals(p, &t);
	ck_assert_uint_eq(t.count[PLACEFS_PLACE_GPU], 2);
	ck_assert_uint_eq(t.bytes[PLACEFS_PLACE_GPU], 9 * MiB);
	ck_assert_uint_eq(t.largest[PLACEFS_PLACE_GPU], 8 * MiB);
	ck_assert_uint_eq(t.count[PLACEFS_PLACE_CPU], 1);
	ck_assert_uint_eq(t.bytes[PLACEFS_PLACE_CPU], 9 * MiB);
	ck_assert_uint_eq(t.largest[PLACEFS_PLACE_CPU], 9 * MiB);
	placefs_plan_free(p);

	/* One byte less and the edge tensor falls back to the CPU. */
	p = plan_ok(seed_tensors, 3, NULL, 0, 1, 8388607);
	ck_assert_int_eq(place_of(p, 0), PLACEFS_PLACE_GPU);
	ck_assert_int_eq(place_of(p, 1), PLACEFS_PLACE_CPU);
	ck_assert_int_eq(place_of(p, 2), PLACEFS_PLACE_CPU);
	placefs_plan_free(p);
}
END_TEST

START_TEST(test_oversize_routing)
{
	static const uint64_t s8[] = {8}, s2[] = {2};
	const struct placefs_tensor t[] = {
	        {"large", 0, "m.safetensors", PLACEFS_DT_F32, 1, s8, 32, 0},
	        {"small", 0, "m.safetensors", PLACEFS_DT_F32, 1, s2, 8, 32},
	};
	struct placefs_plan *p = plan_ok(t, 2, NULL, 0, 1, 16);
	struct placefs_plan_totals tt;

	ck_assert_int_eq(place_of(p, 0), PLACEFS_PLACE_CPU);
	ck_assert_int_eq(place_of(p, 1), PLACEFS_PLACE_GPU);
	placefs_plan_totals(p, &tt);
	ck_assert_uint_eq(tt.count[PLACEFS_PLACE_CPU], 1);
	ck_assert_uint_eq(tt.count[PLACEFS_PLACE_GPU], 1);
	placefs_plan_free(p);
}
END_TEST

START_TEST(test_order_kept)
{
	struct placefs_tensor t[] = {{.name = "a", .nbytes = 8},
	                             {.name = "b", .nbytes = 32},
	                             {.name = "c", .nbytes = 8}};
	struct placefs_plan_totals tt;
	struct placefs_plan *p;

	as_u8(t, 3);
	p = plan_ok(t, 3, NULL, 0, 1, 16);
	ck_assert_uint_eq(placefs_plan_count(p), 3);
	for (size_t i = 0; i < 3; i++)
		ck_assert_ptr_eq(placefs_plan_entry(p, i)->tensor, &t[i]);
	ck_assert_int_eq(place_of(p, 0), PLACEFS_PLACE_GPU);
	ck_assert_int_eq(place_of(p, 1), PLACEFS_PLACE_CPU);
	ck_assert_int_eq(place_of(p, 2), PLACEFS_PLACE_GPU);
	placefs_plan_free(p);

	/* Limit 1: everything on the CPU, in the same order, nothing staged. */
	p = plan_ok(t, 3, NULL, 0, 1, 1);
	for (size_t i = 0; i < 3; i++) {
		ck_assert_ptr_eq(placefs_plan_entry(p, i)->tensor, &t[i]);
		ck_assert_int_eq(place_of(p, i), PLACEFS_PLACE_CPU);
	}
	placefs_plan_totals(p, &tt);
	ck_assert_uint_eq(tt.count[PLACEFS_PLACE_GPU], 0);
	ck_assert_uint_eq(tt.bytes[PLACEFS_PLACE_GPU], 0);
	ck_assert_uint_eq(tt.count[PLACEFS_PLACE_CPU], 3);
	ck_assert_uint_eq(tt.bytes[PLACEFS_PLACE_CPU], 48);
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), 1);
	placefs_plan_free(p);
}
END_TEST

START_TEST(test_zero_bytes_gpu)
{
	static const uint64_t s03[] = {0, 3};
	const struct placefs_tensor t[] = {
	        {"empty", 0, "m.safetensors", PLACEFS_DT_F32, 2, s03, 0, 0},
	        {"one", 0, "m.safetensors", PLACEFS_DT_U8, 0, NULL, 1, 0},
	        {"two", 0, "m.safetensors", PLACEFS_DT_U8, 0, NULL, 2, 1},
	};
	struct placefs_plan *p = plan_ok(t, 3, NULL, 0, 1, 1);

	ck_assert_int_eq(place_of(p, 0), PLACEFS_PLACE_GPU);
	ck_assert_int_eq(place_of(p, 1), PLACEFS_PLACE_GPU);
	ck_assert_int_eq(place_of(p, 2), PLACEFS_PLACE_CPU);
	placefs_plan_free(p);
}
END_TEST

START_TEST(test_no_limit_all_gpu)
{
	struct placefs_plan *p = plan_ok(seed_tensors, 3, NULL, 0, 0, 12345);
	struct placefs_plan_totals t;

	for (size_t i = 0; i < 3; i++)
		ck_assert_int_eq(place_of(p, i), PLACEFS_PLACE_GPU);
	ck_assert_int_eq(placefs_plan_has_limit(p), 0);
	ck_assert_uint_eq(placefs_plan_limit(p), 0);
	placefs_plan_totals(p, &t);
	ck_assert_uint_eq(t.count[PLACEFS_PLACE_GPU], 3);
	ck_assert_uint_eq(t.bytes[PLACEFS_PLACE_GPU], 18 * MiB);
	ck_assert_uint_eq(t.count[PLACEFS_PLACE_CPU], 0);
	ck_assert_uint_eq(t.largest[PLACEFS_PLACE_CPU], 0);
	placefs_plan_free(p);

	/* NULL options: no prefixes and no limit. */
	{
		struct placefs_plan *q = NULL;

		ck_assert_int_eq(placefs_plan_create(seed_tensors, 3, NULL, &q, NULL), 0);
		ck_assert_uint_eq(placefs_plan_count(q), 3);
		ck_assert_int_eq(placefs_plan_has_limit(q), 0);
		placefs_plan_free(q);
	}
}
END_TEST

START_TEST(test_prefixes)
{
	struct placefs_tensor t[] = {
	        {.name = "model.a.w", .nbytes = 1}, {.name = "lm_head.weight", .nbytes = 2},
	        {.name = "model.b.w", .nbytes = 3}, {.name = "Model.a.x", .nbytes = 4},
	        {.name = "model.a.v", .nbytes = 5},
	};
	static const char *const two[] = {"lm_", "model.a."};
	static const char *const upper[] = {"Model."};
	static const char *const all[] = {""};
	static const char *const longer[] = {"model.a.w.more"};
	static const char *const caps[] = {"MODEL", "LM_"};
	struct placefs_plan *p;

	as_u8(t, 5);
	/* Several prefixes: union, in checkpoint order (not prefix order). */
	p = plan_ok(t, 5, two, 2, 0, 0);
	ck_assert_uint_eq(placefs_plan_count(p), 3);
	ck_assert_str_eq(placefs_plan_entry(p, 0)->tensor->name, "model.a.w");
	ck_assert_str_eq(placefs_plan_entry(p, 1)->tensor->name, "lm_head.weight");
	ck_assert_str_eq(placefs_plan_entry(p, 2)->tensor->name, "model.a.v");
	ck_assert_int_eq(placefs_plan_find(p, "model.b.w"), -1);
	placefs_plan_free(p);
	/* Case-sensitive. */
	p = plan_ok(t, 5, upper, 1, 0, 0);
	ck_assert_uint_eq(placefs_plan_count(p), 1);
	ck_assert_str_eq(placefs_plan_entry(p, 0)->tensor->name, "Model.a.x");
	placefs_plan_free(p);
	plan_bad(t, 5, caps, 2, 0, 0, PLACEFS_E_EMPTY);
	/* No prefix, or the empty prefix: everything. */
	p = plan_ok(t, 5, NULL, 0, 0, 0);
	ck_assert_uint_eq(placefs_plan_count(p), 5);
	placefs_plan_free(p);
	p = plan_ok(t, 5, all, 1, 0, 0);
	ck_assert_uint_eq(placefs_plan_count(p), 5);
	placefs_plan_free(p);
	/* A prefix longer than the name does not match it. */
	plan_bad(t, 5, longer, 1, 0, 0, PLACEFS_E_EMPTY);
	/* Prefixes filter before placement and before the totals. */
	{
		struct placefs_plan_totals tt;

		p = plan_ok(t, 5, two, 2, 1, 2);
		placefs_plan_totals(p, &tt);
		ck_assert_uint_eq(tt.count[PLACEFS_PLACE_GPU], 2);
		ck_assert_uint_eq(tt.bytes[PLACEFS_PLACE_GPU], 3);
		ck_assert_uint_eq(tt.count[PLACEFS_PLACE_CPU], 1);
		ck_assert_uint_eq(tt.bytes[PLACEFS_PLACE_CPU], 5);
		placefs_plan_free(p);
	}
}
END_TEST

START_TEST(test_dup_cpu)
{
	struct placefs_tensor t[] = {
	        {.name = "a", .file = "x.safetensors", .nbytes = 100},
	        {.name = "b", .file = "x.safetensors", .nbytes = 100},
	        {.name = "a", .file = "y.safetensors", .nbytes = 100},
	};

	as_u8(t, 3);
	ck_assert_str_eq(plan_bad(t, 3, NULL, 0, 1, 10, PLACEFS_E_DUP_CPU),
	                 "duplicate tensor names among CPU-placed tensors: \"a\" (x.safetensors "
	                 "and y.safetensors)");
}
END_TEST

START_TEST(test_dup_gpu)
{
	struct placefs_tensor t[] = {
	        {.name = "a", .file = "x.safetensors", .nbytes = 100},
	        {.name = "b", .file = "x.safetensors", .nbytes = 100},
	        {.name = "a", .file = "y.safetensors", .nbytes = 100},
	};

	as_u8(t, 3);
	ck_assert_str_eq(plan_bad(t, 3, NULL, 0, 0, 0, PLACEFS_E_DUP_GPU),
	                 "duplicate tensor names among GPU-placed tensors: \"a\" (x.safetensors "
	                 "and y.safetensors)");
	ck_assert_str_eq(plan_bad(t, 3, NULL, 0, 1, 100, PLACEFS_E_DUP_GPU),
	                 "duplicate tensor names among GPU-placed tensors: \"a\" (x.safetensors "
	                 "and y.safetensors)");
}
END_TEST

START_TEST(test_dup_lists)
{
	struct placefs_tensor three[] = {
	        {.name = "n", .file = "z", .nbytes = 1},
	        {.name = "n", .file = "x", .nbytes = 1},
	        {.name = "n", .file = "y", .nbytes = 1},
	};
	struct placefs_tensor four[] = {
	        {.name = "n", .file = "w", .nbytes = 1},
	        {.name = "n", .file = "x", .nbytes = 1},
	        {.name = "n", .file = "y", .nbytes = 1},
	        {.name = "n", .file = "z", .nbytes = 1},
	};
	/* Four duplicated names (listed sorted), one of them with a quote. */
	struct placefs_tensor many[] = {
	        {.name = "d", .file = "1", .nbytes = 1},
	        {.name = "c", .file = "1", .nbytes = 1},
	        {.name = "b\"", .file = "1", .nbytes = 1},
	        {.name = "a", .file = "1", .nbytes = 1},
	        {.name = "a", .file = "2", .nbytes = 1},
	        {.name = "b\"", .file = "2", .nbytes = 1},
	        {.name = "c", .file = "2", .nbytes = 1},
	        {.name = "d", .file = "2", .nbytes = 1},
	        {.name = "e", .file = "2", .nbytes = 1},
	};

	as_u8(three, 3);
	as_u8(four, 4);
	as_u8(many, 9);
	/* Files in checkpoint order, not sorted. */
	ck_assert_str_eq(plan_bad(three, 3, NULL, 0, 0, 0, PLACEFS_E_DUP_GPU),
	                 "duplicate tensor names among GPU-placed tensors: \"n\" (z, x and y)");
	ck_assert_str_eq(plan_bad(four, 4, NULL, 0, 0, 0, PLACEFS_E_DUP_GPU),
	                 "duplicate tensor names among GPU-placed tensors: \"n\" (w, x, y and 1 "
	                 "more)");
	ck_assert_str_eq(plan_bad(many, 9, NULL, 0, 0, 0, PLACEFS_E_DUP_GPU),
	                 "duplicate tensor names among GPU-placed tensors: \"a\" (1 and 2), "
	                 "\"b\\\"\" (1 and 2), \"c\" (1 and 2), and 1 more");
}
END_TEST

START_TEST(test_check_order)
{
	/* CPU duplicates win over GPU duplicates. */
	struct placefs_tensor both[] = {
	        {.name = "g", .file = "x", .nbytes = 1},
	        {.name = "g", .file = "y", .nbytes = 1},
	        {.name = "c", .file = "x", .nbytes = 100},
	        {.name = "c", .file = "y", .nbytes = 100},
	};
	/* GPU duplicates win over an overlap. */
	struct placefs_tensor gdup_overlap[] = {
	        {.name = "g", .file = "x", .nbytes = 1},
	        {.name = "g", .file = "y", .nbytes = 1},
	        {.name = "o", .file = "x", .nbytes = 1},
	        {.name = "o", .file = "y", .nbytes = 100},
	};
	/* An overlap wins over a bad name. */
	struct placefs_tensor overlap_name[] = {
	        {.name = "bad\x01", .file = "x", .nbytes = 1},
	        {.name = "o", .file = "x", .nbytes = 1},
	        {.name = "o", .file = "y", .nbytes = 100},
	};
	/* A bad name outside the selection is never looked at. */
	struct placefs_tensor filtered[] = {
	        {.name = "\x01hidden", .file = "x", .nbytes = 1},
	        {.name = "keep.me", .file = "x", .nbytes = 1},
	};
	static const char *const keep[] = {"keep."};
	struct placefs_plan *p;

	as_u8(both, 4);
	as_u8(gdup_overlap, 4);
	as_u8(overlap_name, 3);
	as_u8(filtered, 2);
	plan_bad(both, 4, NULL, 0, 1, 10, PLACEFS_E_DUP_CPU);
	plan_bad(gdup_overlap, 4, NULL, 0, 1, 10, PLACEFS_E_DUP_GPU);
	plan_bad(overlap_name, 3, NULL, 0, 1, 10, PLACEFS_E_OVERLAP);
	plan_bad(overlap_name, 3, NULL, 0, 0, 0, PLACEFS_E_DUP_GPU);
	plan_bad(filtered, 2, NULL, 0, 0, 0, PLACEFS_E_NAME);
	p = plan_ok(filtered, 2, keep, 1, 0, 0);
	ck_assert_uint_eq(placefs_plan_count(p), 1);
	placefs_plan_free(p);
}
END_TEST

START_TEST(test_overlap)
{
	struct placefs_tensor t[] = {
	        {.name = "a", .file = "x.safetensors", .nbytes = 100},
	        {.name = "a", .file = "y.safetensors", .nbytes = 1},
	};
	struct placefs_tensor many[] = {
	        {.name = "d", .file = "1", .nbytes = 1}, {.name = "c", .file = "1", .nbytes = 1},
	        {.name = "b", .file = "1", .nbytes = 1}, {.name = "a", .file = "1", .nbytes = 1},
	        {.name = "a", .file = "2", .nbytes = 9}, {.name = "b", .file = "2", .nbytes = 9},
	        {.name = "c", .file = "2", .nbytes = 9}, {.name = "d", .file = "2", .nbytes = 9},
	        {.name = "e", .file = "2", .nbytes = 9},
	};

	as_u8(t, 2);
	as_u8(many, 9);
	ck_assert_str_eq(plan_bad(t, 2, NULL, 0, 1, 10, PLACEFS_E_OVERLAP),
	                 "tensor names placed both on gpu and cpu: \"a\" (gpu: y.safetensors, "
	                 "cpu: x.safetensors)");
	ck_assert_str_eq(plan_bad(many, 9, NULL, 0, 1, 5, PLACEFS_E_OVERLAP),
	                 "tensor names placed both on gpu and cpu: \"a\" (gpu: 1, cpu: 2), \"b\" "
	                 "(gpu: 1, cpu: 2), \"c\" (gpu: 1, cpu: 2), and 1 more");
}
END_TEST

START_TEST(test_empty)
{
	struct placefs_tensor t[] = {{.name = "model.x", .nbytes = 1}};
	static const char *const ab[] = {"a.", "b.\"q"};

	as_u8(t, 1);
	ck_assert_str_eq(plan_bad(t, 1, ab, 2, 0, 0, PLACEFS_E_EMPTY),
	                 "the selection matched no tensors (prefixes: \"a.\", \"b.\\\"q\")");
	ck_assert_str_eq(plan_bad(t, 0, NULL, 0, 0, 0, PLACEFS_E_EMPTY),
	                 "the selection matched no tensors (no prefixes; the checkpoint has no "
	                 "tensors)");
	ck_assert_str_eq(plan_bad(NULL, 0, NULL, 0, 1, 8, PLACEFS_E_EMPTY),
	                 "the selection matched no tensors (no prefixes; the checkpoint has no "
	                 "tensors)");
	ck_assert_str_eq(plan_bad(NULL, 0, ab, 1, 0, 0, PLACEFS_E_EMPTY),
	                 "the selection matched no tensors (prefixes: \"a.\")");
}
END_TEST

START_TEST(test_bad_names)
{
	struct placefs_tensor ctl[] = {
	        {.name = "ok", .file = "x.safetensors", .nbytes = 1},
	        {.name = "bad\x01", .file = "x.safetensors", .nbytes = 1},
	};
	struct placefs_tensor empty[] = {{.name = "", .file = "e.safetensors", .nbytes = 1}};
	char longname[300];
	struct placefs_tensor toolong[] = {{.name = longname, .file = "l.safetensors"}};
	const char *msg;

	as_u8(ctl, 2);
	as_u8(empty, 1);
	as_u8(toolong, 1);
	ck_assert_str_eq(plan_bad(ctl, 2, NULL, 0, 0, 0, PLACEFS_E_NAME),
	                 "x.safetensors: tensor \"bad\\x01\": name contains control character "
	                 "\\x01, which cannot be in a file name");
	msg = plan_bad(empty, 1, NULL, 0, 0, 0, PLACEFS_E_NAME);
	ck_assert_ptr_nonnull(strstr(msg, "e.safetensors: tensor \"\""));
	/* Too long after encoding: still -EINVAL from the plan (checked in plan_bad). */
	memset(longname, '/', 100);
	longname[100] = '\0';
	msg = plan_bad(toolong, 1, NULL, 0, 0, 0, PLACEFS_E_NAME);
	ck_assert_ptr_nonnull(strstr(msg, "l.safetensors: tensor \"///"));
	ck_assert_ptr_nonnull(strstr(msg, "300 bytes"));
}
END_TEST

START_TEST(test_bad_arguments)
{
	struct placefs_tensor t[] = {{.name = "a", .nbytes = 1}, {.name = NULL, .nbytes = 1}};
	static const char *const nullp[] = {NULL};
	struct placefs_plan_options opt = {0};
	struct placefs_plan *p = NULL;
	struct placefs_error err;

	as_u8(t, 2);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_plan_create(t, 1, &opt, NULL, &err), -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_USAGE);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_plan_create(NULL, 1, &opt, &p, &err), -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_USAGE);
	plan_bad(t, 2, NULL, 0, 0, 0, PLACEFS_E_USAGE);
	plan_bad(t, 1, nullp, 1, 0, 0, PLACEFS_E_USAGE);
	plan_bad(t, 1, NULL, 1, 0, 0, PLACEFS_E_USAGE);
	/* A zero limit is an invalid limit, not "no limit". */
	ck_assert_str_eq(plan_bad(t, 1, NULL, 0, 1, 0, PLACEFS_E_LIMIT),
	                 "the staging limit must be greater than zero");
	/* No error struct: the code alone. */
	ck_assert_int_eq(placefs_plan_create(t, 0, &opt, &p, NULL), -EINVAL);
	ck_assert_ptr_null(p);
	placefs_plan_free(NULL);
}
END_TEST

static uint64_t ring_of(const uint64_t *sizes, size_t n, int has_limit, uint64_t limit)
{
	struct placefs_tensor t[8];
	struct placefs_plan *p;
	uint64_t r;
	char names[8][4];

	ck_assert_uint_le(n, 8);
	memset(t, 0, sizeof(t));
	for (size_t i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "t%zu", i);
		t[i].name = names[i];
		t[i].nbytes = sizes[i];
	}
	as_u8(t, n);
	p = plan_ok(t, n, NULL, 0, has_limit, limit);
	r = placefs_plan_ring_bytes(p);
	placefs_plan_free(p);
	return r;
}

START_TEST(test_ring_sizing)
{
	const uint64_t tiny[] = {10};
	const uint64_t zeros[] = {0, 0};
	const uint64_t three1[] = {MiB, MiB, MiB};
	const uint64_t one9[] = {MiB, 9 * MiB};
	const uint64_t odd[] = {5000};
	const uint64_t large[] = {300 * MiB, MiB};
	const uint64_t two200[] = {200 * MiB, 200 * MiB};
	const uint64_t many[] = {100 * MiB, 100 * MiB, 100 * MiB, 1};
	const uint64_t unaligned[] = {300 * MiB + 1};

	/* With a limit: exactly the limit, not rounded. */
	ck_assert_uint_eq(ring_of(one9, 2, 1, 1000), 1000);
	ck_assert_uint_eq(ring_of(one9, 2, 1, 8 * MiB), 8 * MiB);
	ck_assert_uint_eq(ring_of(one9, 2, 1, 64 * MiB), 64 * MiB);
	/* Without: max(largest, min(total, 256 MiB)), rounded up to 4096, >= 4096. */
	ck_assert_uint_eq(ring_of(tiny, 1, 0, 0), 4096);
	ck_assert_uint_eq(ring_of(zeros, 2, 0, 0), 4096);
	ck_assert_uint_eq(ring_of(three1, 3, 0, 0), 3 * MiB);
	ck_assert_uint_eq(ring_of(one9, 2, 0, 0), 10 * MiB);
	ck_assert_uint_eq(ring_of(odd, 1, 0, 0), 8192);
	ck_assert_uint_eq(ring_of(large, 2, 0, 0), 300 * MiB);
	ck_assert_uint_eq(ring_of(two200, 2, 0, 0), 256 * MiB);
	ck_assert_uint_eq(ring_of(many, 4, 0, 0), 256 * MiB);
	ck_assert_uint_eq(ring_of(unaligned, 1, 0, 0), 300 * MiB + 4096);
}
END_TEST

START_TEST(test_size_overflows)
{
	struct placefs_tensor huge[] = {{.name = "h", .nbytes = UINT64_MAX - 10}};
	struct placefs_tensor sum[] = {{.name = "a", .nbytes = UINT64_MAX / 2 + 1},
	                               {.name = "b", .nbytes = UINT64_MAX / 2 + 1}};
	struct placefs_plan *p;

	as_u8(huge, 1);
	as_u8(sum, 2);
	/* A ring cannot be rounded up past 2^64. */
	plan_bad(huge, 1, NULL, 0, 0, 0, PLACEFS_E_LIMIT);
	/* With a limit the ring is the limit and the tensor goes to the CPU. */
	p = plan_ok(huge, 1, NULL, 0, 1, 4096);
	ck_assert_int_eq(place_of(p, 0), PLACEFS_PLACE_CPU);
	placefs_plan_free(p);
	plan_bad(sum, 2, NULL, 0, 0, 0, PLACEFS_E_USAGE);
}
END_TEST

START_TEST(test_json_exact)
{
	static const uint64_t s23[] = {2, 3}, s100[] = {100};
	const struct placefs_tensor t[] = {
	        {"w.0", 0, "model-00001-of-00002.safetensors", PLACEFS_DT_F32, 2, s23, 24, 80},
	        {"s\"q\\", 1, "model-00002-of-00002.safetensors", PLACEFS_DT_BF16, 0, NULL, 2, 72},
	        {"big/x", 1, "model-00002-of-00002.safetensors", PLACEFS_DT_U8, 1, s100, 100, 74},
	};
	struct placefs_strbuf sb;
	struct placefs_plan *p;

	placefs_strbuf_init(&sb);
	p = plan_ok(t, 3, NULL, 0, 1, 50);
	ck_assert_int_eq(placefs_plan_format_json(p, "/ck/pt \"x\"", &sb), 0);
	ck_assert_str_eq(
	        placefs_strbuf_cstr(&sb),
	        "{\"source\": \"/ck/pt \\\"x\\\"\", \"buffer_size\": 50, \"ring_bytes\": 50, "
	        "\"tensors\": [{\"name\": \"w.0\", \"filename\": \"w.0\", \"file\": "
	        "\"model-00001-of-00002.safetensors\", \"dtype\": \"F32\", \"shape\": [2, 3], "
	        "\"nbytes\": 24, \"offset\": 80, \"placement\": \"gpu\"}, {\"name\": "
	        "\"s\\\"q\\\\\", \"filename\": \"s\\\"q\\\\\", \"file\": "
	        "\"model-00002-of-00002.safetensors\", \"dtype\": \"BF16\", \"shape\": [], "
	        "\"nbytes\": 2, \"offset\": 72, \"placement\": \"gpu\"}, {\"name\": \"big/x\", "
	        "\"filename\": \"big%2Fx\", "
	        "\"file\": \"model-00002-of-00002.safetensors\", \"dtype\": \"U8\", \"shape\": "
	        "[100], \"nbytes\": 100, \"offset\": 74, \"placement\": \"cpu\"}], \"totals\": "
	        "{\"gpu\": {\"count\": 2, \"bytes\": 26}, \"cpu\": {\"count\": 1, \"bytes\": "
	        "100}}}\n");
	placefs_plan_free(p);

	/* No limit: null, an automatic ring, and appending keeps what was there. */
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "X"), 0);
	p = plan_ok(t, 1, NULL, 0, 0, 0);
	ck_assert_int_eq(placefs_plan_format_json(p, "m", &sb), 0);
	ck_assert_str_eq(
	        placefs_strbuf_cstr(&sb),
	        "X{\"source\": \"m\", \"buffer_size\": null, \"ring_bytes\": 4096, "
	        "\"tensors\": [{\"name\": \"w.0\", \"filename\": \"w.0\", \"file\": "
	        "\"model-00001-of-00002.safetensors\", \"dtype\": \"F32\", \"shape\": [2, "
	        "3], \"nbytes\": 24, \"offset\": 80, \"placement\": \"gpu\"}], \"totals\": "
	        "{\"gpu\": {\"count\": 1, \"bytes\": 24}, \"cpu\": {\"count\": 0, "
	        "\"bytes\": 0}}}\n");
	placefs_plan_free(p);
	placefs_strbuf_release(&sb);
}
END_TEST

/*
 * The plan in columns: each shard and dtype once in its table, in the order
 * the entries first name them; "filename" only where the name was encoded;
 * one placement character per entry; each entry's offset in its placement's
 * packed layout; the same header and totals as the JSON plan; appending
 * keeps what was there.
 */
START_TEST(test_columns_exact)
{
	static const uint64_t s23[] = {2, 3}, s100[] = {100};
	const struct placefs_tensor t[] = {
	        {"w.0", 1, "model-00002-of-00002.safetensors", PLACEFS_DT_F32, 2, s23, 24, 80},
	        {"s\"q\\", 0, "model-00001-of-00002.safetensors", PLACEFS_DT_BF16, 0, NULL, 2, 72},
	        {"big/x", 1, "model-00002-of-00002.safetensors", PLACEFS_DT_F32, 1, s100, 400, 104},
	        {".e", 0, "model-00001-of-00002.safetensors", PLACEFS_DT_U8, 1, s100, 100, 74},
	};
	struct placefs_strbuf sb;
	struct placefs_plan *p;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "X"), 0);
	p = plan_ok(t, 4, NULL, 0, 1, 100);
	ck_assert_int_eq(placefs_plan_format_columns(p, "/ck", &sb), 0);
	ck_assert_str_eq(
	        placefs_strbuf_cstr(&sb),
	        "X{\"source\": \"/ck\", \"buffer_size\": 100, \"ring_bytes\": 100, "
	        "\"version\": 1, \"count\": 4, \"files\": [\"model-00002-of-00002.safetensors\", "
	        "\"model-00001-of-00002.safetensors\"], \"dtypes\": [\"F32\", \"BF16\", \"U8\"], "
	        "\"name\": [\"w.0\", \"s\\\"q\\\\\", \"big/x\", \".e\"], "
	        "\"filename\": {\"2\": \"big%2Fx\", \"3\": \"%2Ee\"}, \"file\": [0, 1, 0, 1], "
	        "\"dtype\": [0, 1, 0, 2], \"shape\": [[2, 3], [], [100], [100]], "
	        "\"nbytes\": [24, 2, 400, 100], \"offset\": [80, 72, 104, 74], "
	        "\"packed\": [0, 256, 0, 258], \"placement\": \"ggcg\", \"totals\": {\"gpu\": "
	        "{\"count\": 3, \"bytes\": 126}, "
	        "\"cpu\": {\"count\": 1, \"bytes\": 400}}}\n");
	/*
	 * In chunks of 3: a header line, then entries [0, 3) and [3, 4), each
	 * with tables of its own and "filename" keyed by position in the chunk.
	 */
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_format_column_chunks(p, 0, &sb), -EINVAL);
	ck_assert_int_eq(placefs_plan_format_column_chunks(p, 3, &sb), 0);
	ck_assert_str_eq(
	        placefs_strbuf_cstr(&sb),
	        "{\"version\": 1, \"count\": 4, \"chunk\": 3, \"chunks\": 2}\n"
	        "{\"first\": 0, \"count\": 3, \"files\": [\"model-00002-of-00002.safetensors\", "
	        "\"model-00001-of-00002.safetensors\"], \"dtypes\": [\"F32\", \"BF16\"], "
	        "\"name\": [\"w.0\", \"s\\\"q\\\\\", \"big/x\"], \"filename\": {\"2\": "
	        "\"big%2Fx\"}, "
	        "\"file\": [0, 1, 0], \"dtype\": [0, 1, 0], \"shape\": [[2, 3], [], [100]], "
	        "\"nbytes\": [24, 2, 400], \"offset\": [80, 72, 104], \"packed\": [0, 256, 0], "
	        "\"placement\": \"ggc\"}\n"
	        "{\"first\": 3, \"count\": 1, \"files\": [\"model-00001-of-00002.safetensors\"], "
	        "\"dtypes\": [\"U8\"], \"name\": [\".e\"], \"filename\": {\"0\": \"%2Ee\"}, "
	        "\"file\": [0], \"dtype\": [0], \"shape\": [[100]], \"nbytes\": [100], "
	        "\"offset\": [74], \"packed\": [258], \"placement\": \"g\"}\n");
	/* One chunk of all, or more room than entries: the same single line. */
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_format_column_chunks(p, 4, &sb), 0);
	ck_assert_ptr_nonnull(strstr(placefs_strbuf_cstr(&sb), "\"chunk\": 4, \"chunks\": 1}\n"
	                                                       "{\"first\": 0, \"count\": 4, "));
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_format_column_chunks(p, 1000, &sb), 0);
	ck_assert_ptr_nonnull(
	        strstr(placefs_strbuf_cstr(&sb), "\"chunks\": 1}\n{\"first\": 0, \"count\": 4, "));
	placefs_plan_free(p);

	/* No limit, no encoded name: null and an empty object. */
	placefs_strbuf_reset(&sb);
	p = plan_ok(t, 1, NULL, 0, 0, 0);
	ck_assert_int_eq(placefs_plan_format_columns(p, NULL, &sb), 0);
	ck_assert_str_eq(
	        placefs_strbuf_cstr(&sb),
	        "{\"source\": null, \"buffer_size\": null, \"ring_bytes\": 4096, "
	        "\"version\": 1, \"count\": 1, \"files\": "
	        "[\"model-00002-of-00002.safetensors\"], \"dtypes\": [\"F32\"], "
	        "\"name\": [\"w.0\"], \"filename\": {}, \"file\": [0], \"dtype\": [0], "
	        "\"shape\": [[2, 3]], \"nbytes\": [24], \"offset\": [80], \"packed\": [0], "
	        "\"placement\": \"g\", \"totals\": {\"gpu\": {\"count\": 1, "
	        "\"bytes\": 24}, \"cpu\": {\"count\": 0, \"bytes\": 0}}}\n");
	placefs_plan_free(p);
	placefs_strbuf_release(&sb);
}
END_TEST

/*
 * Packed layouts: each placement's tensors in plan order, at the next
 * multiple of 256 where they are not neighbours in their shard; layout.json
 * gives their sizes and the first file name.
 */
START_TEST(test_layout_packed)
{
	static const uint64_t s1[] = {1};
	const struct placefs_tensor t[] = {
	        {".a", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 300, 8},
	        {"b", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 1000, 308},
	        {"c", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 0, 1308},
	        {"d", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 256, 1308},
	        {"e", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 2000, 1564},
	        {"f", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 1, 3564},
	};
	/* gpu (<= 300): .a 0, c 512, d 512, f 768; cpu: b 0, e 1024 */
	static const uint64_t want[] = {0, 0, 512, 512, 1024, 768};
	struct placefs_plan_totals tot;
	struct placefs_strbuf sb;
	struct placefs_plan *p;

	p = plan_ok(t, 6, NULL, 0, 1, 300);
	for (size_t i = 0; i < 6; i++)
		ck_assert_uint_eq(placefs_plan_entry(p, i)->packed, want[i]);
	placefs_plan_totals(p, &tot);
	ck_assert_uint_eq(tot.packed[PLACEFS_PLACE_GPU], 769);
	ck_assert_uint_eq(tot.packed[PLACEFS_PLACE_CPU], 3024);
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_plan_format_layout(p, &sb), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb),
	                 "{\"align\": 256, \"pack\": \"runs\", \"first\": \"%2Ea\", \"gpu\": "
	                 "{\"count\": 4, \"bytes\": 557, \"packed\": 769}, \"cpu\": {\"count\": 2, "
	                 "\"bytes\": 3000, \"packed\": 3024}}\n");
	placefs_plan_free(p);
	placefs_strbuf_release(&sb);
}
END_TEST

/*
 * Neighbours in a shard stay neighbours in the packed layout while the
 * offset keeps their elements aligned: a run of them is one range of the
 * shard's bytes. A gap in the shard, another shard, a cpu-placed tensor
 * between them or a misaligned element starts at the next multiple of 256.
 */
START_TEST(test_layout_packed_runs)
{
	static const uint64_t s1[] = {1};
	const struct placefs_tensor t[] = {
	        {"a", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 1000, 8},
	        {"b", 0, "m.safetensors", PLACEFS_DT_F32, 1, s1, 12, 1008},  /* joins: 1000 % 4 */
	        {"c", 0, "m.safetensors", PLACEFS_DT_F32, 1, s1, 4, 1020},   /* joins */
	        {"d", 0, "m.safetensors", PLACEFS_DT_BF16, 1, s1, 6, 1024},  /* joins: 1016 % 2 */
	        {"e", 0, "m.safetensors", PLACEFS_DT_F32, 1, s1, 8, 1030},   /* 1022 % 4: 1024 */
	        {"f", 0, "m.safetensors", PLACEFS_DT_U8, 1, s1, 3, 1038},    /* joins */
	        {"g", 0, "m.safetensors", PLACEFS_DT_F64, 1, s1, 8, 1041},   /* 1035 % 8: 1280 */
	        {"h", 1, "n.safetensors", PLACEFS_DT_U8, 1, s1, 1, 1049},    /* other shard: 1536 */
	        {"i", 1, "n.safetensors", PLACEFS_DT_U8, 1, s1, 5000, 1050}, /* cpu */
	        {"j", 1, "n.safetensors", PLACEFS_DT_U8, 1, s1, 2, 6050},    /* after a cpu: 1792 */
	        {"k", 1, "n.safetensors", PLACEFS_DT_U8, 1, s1, 2, 6060},    /* a gap: 2048 */
	};
	static const uint64_t want[] = {0, 1000, 1012, 1016, 1024, 1032, 1280, 1536, 0, 1792, 2048};
	struct placefs_plan_totals tot;
	struct placefs_plan *p;

	p = plan_ok(t, 11, NULL, 0, 1, 4096);
	for (size_t i = 0; i < 11; i++)
		ck_assert_uint_eq(placefs_plan_entry(p, i)->packed, want[i]);
	placefs_plan_totals(p, &tot);
	ck_assert_uint_eq(tot.packed[PLACEFS_PLACE_GPU], 2050);
	ck_assert_uint_eq(tot.packed[PLACEFS_PLACE_CPU], 5000);
	placefs_plan_free(p);
}
END_TEST

/*
 * packed.tsv: the header line, then one line per entry in plan order: its
 * placement, its offset in that placement's packed layout (neighbours
 * joined, as test_layout_packed_runs), nbytes, dtype, the shape with commas
 * (empty for a scalar) and the encoded file name; appending keeps what was
 * there.
 */
START_TEST(test_packed_exact)
{
	static const uint64_t s300[] = {300}, s23[] = {2, 3}, s2500[] = {2500}, s48[] = {4, 8};
	const struct placefs_tensor t[] = {
	        {".a", 0, "m.safetensors", PLACEFS_DT_U8, 1, s300, 300, 8},
	        {"b/c", 0, "m.safetensors", PLACEFS_DT_F32, 2, s23, 24, 308},      /* joins */
	        {"scale", 0, "m.safetensors", PLACEFS_DT_F32, 0, NULL, 4, 332},    /* joins */
	        {"big", 0, "m.safetensors", PLACEFS_DT_BF16, 1, s2500, 5000, 336}, /* cpu */
	        {"w", 1, "n.safetensors", PLACEFS_DT_F8_E4M3, 2, s48, 32, 8},      /* 512 */
	        {"50%", 1, "n.safetensors", PLACEFS_DT_U8, 1, s300, 300, 40},      /* joins */
	};
	struct placefs_strbuf sb;
	struct placefs_plan *p;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "X"), 0);
	p = plan_ok(t, 6, NULL, 0, 1, 4096);
	ck_assert_int_eq(placefs_plan_format_packed(p, &sb), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb),
	                 "X# placement\tpacked\tnbytes\tdtype\tshape\tfile\n"
	                 "gpu\t0\t300\tU8\t300\t%2Ea\n"
	                 "gpu\t300\t24\tF32\t2,3\tb%2Fc\n"
	                 "gpu\t324\t4\tF32\t\tscale\n"
	                 "cpu\t0\t5000\tBF16\t2500\tbig\n"
	                 "gpu\t512\t32\tF8_E4M3\t4,8\tw\n"
	                 "gpu\t544\t300\tU8\t300\t50%25\n");
	for (size_t i = 0; i < 6; i++) {
		char want[64];

		snprintf(want, sizeof(want), "\n%s\t%llu\t",
		         placefs_placement_name(placefs_plan_entry(p, i)->placement),
		         (unsigned long long)placefs_plan_entry(p, i)->packed);
		ck_assert_msg(strstr(placefs_strbuf_cstr(&sb), want), "entry %zu: no %s", i, want);
	}
	placefs_plan_free(p);

	/* One tensor, no limit: gpu at 0. */
	placefs_strbuf_reset(&sb);
	p = plan_ok(t + 4, 1, NULL, 0, 0, 0);
	ck_assert_int_eq(placefs_plan_format_packed(p, &sb), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb),
	                 PLACEFS_PLAN_PACKED_HEAD "gpu\t0\t32\tF8_E4M3\t4,8\tw\n");
	placefs_plan_free(p);
	placefs_strbuf_release(&sb);
}
END_TEST

/*
 * Each tensor's "filename" is its file's name in the mount, encoded as
 * lib/common/name.h says, so that a client never encodes a name itself.
 */
START_TEST(test_json_filename)
{
	struct placefs_tensor t[] = {
	        {.name = "plain.w", .nbytes = 1}, {.name = "a/b/c", .nbytes = 2},
	        {.name = "50%", .nbytes = 3},     {.name = ".hidden", .nbytes = 4},
	        {.name = "..x/.y%", .nbytes = 5}, {.name = "q\"/", .nbytes = 6},
	};
	static const char *const want[] = {
	        "plain.w", "a%2Fb%2Fc", "50%25", "%2Ehidden", "%2E.x%2F.y%25", "q\"%2F",
	};
	/* The same names as JSON string literals. */
	static const char *const want_json[] = {
	        "\"plain.w\"",   "\"a%2Fb%2Fc\"",     "\"50%25\"",
	        "\"%2Ehidden\"", "\"%2E.x%2F.y%25\"", "\"q\\\"%2F\"",
	};
	struct placefs_strbuf sb;
	struct placefs_plan *p;
	const char *at;

	as_u8(t, 6);
	p = plan_ok(t, 6, NULL, 0, 1, 3);
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_plan_format_json(p, "src", &sb), 0);
	at = placefs_strbuf_cstr(&sb);
	for (size_t i = 0; i < 6; i++) {
		char enc[PLACEFS_NAME_MAX + 1], key[600];
		struct placefs_error err;

		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_name_encode(t[i].name, enc, &err), 0);
		ck_assert_str_eq(enc, want[i]);
		ck_assert_str_eq(placefs_plan_entry(p, i)->fname, want[i]);
		ck_assert_int_eq(placefs_plan_find(p, want[i]), (long)i);
		/* In checkpoint order, right after the tensor's own name. */
		snprintf(key, sizeof(key), "\"filename\": %s, \"file\": \"model.safetensors\"",
		         want_json[i]);
		at = strstr(at, key);
		ck_assert_msg(at != NULL, "no %s in order in %s", key, placefs_strbuf_cstr(&sb));
	}
	placefs_plan_free(p);
	placefs_strbuf_release(&sb);
}
END_TEST

/* Resolves the staging limit and expects success. */
static void limit_ok(const char *text, const char *origin, int want_has, uint64_t want,
                     const char *want_origin)
{
	struct placefs_error err;
	const char *from = "untouched";
	uint64_t limit = 77;
	int has = 77;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_plan_limit_parse(text, origin, &has, &limit, &from, &err) == 0,
	              "limit_parse(%s): %s", text ? text : "NULL", err.msg);
	ck_assert_int_eq(has, want_has);
	ck_assert_uint_eq(limit, want);
	if (want_origin)
		ck_assert_str_eq(from, want_origin);
	else
		ck_assert_ptr_null(from);
}

/* Resolves the staging limit and expects a refusal; returns the message. */
static const char *limit_bad(const char *text, const char *origin, int want_rc)
{
	static struct placefs_error err;
	const char *from = "untouched";
	uint64_t limit = 77;
	int has = 77;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_plan_limit_parse(text, origin, &has, &limit, &from, &err),
	                 want_rc);
	ck_assert_int_eq(err.code, want_rc);
	ck_assert_int_eq(err.kind, PLACEFS_E_LIMIT);
	/* Nothing is written on failure. */
	ck_assert_int_eq(has, 77);
	ck_assert_uint_eq(limit, 77);
	ck_assert_str_eq(from, "untouched");
	return err.msg;
}

/* The option wins over $INSTANTTENSOR_BUFFER_SIZE; each is named in its own messages. */
START_TEST(test_limit_parse)
{
	const char *msg;

	ck_assert_str_eq(PLACEFS_PLAN_ENV_LIMIT, "INSTANTTENSOR_BUFFER_SIZE");
	ck_assert_int_eq(unsetenv(PLACEFS_PLAN_ENV_LIMIT), 0);
	limit_ok(NULL, "--buffer-size", 0, 0, NULL);
	limit_ok("8M", "--buffer-size", 1, 8 * MiB, "--buffer-size");
	msg = limit_bad("8.5M", "-o buffer_size", -EINVAL);
	ck_assert_msg(strstr(msg, "-o buffer_size") && strstr(msg, "8.5M"), "%s", msg);

	ck_assert_int_eq(setenv(PLACEFS_PLAN_ENV_LIMIT, "16KiB", 1), 0);
	limit_ok(NULL, "--buffer-size", 1, 16384, PLACEFS_PLAN_ENV_LIMIT);
	limit_ok("1", "-o buffer_size", 1, 1, "-o buffer_size");
	{
		/* The origin is optional. */
		uint64_t limit = 0;
		int has = 0;

		ck_assert_int_eq(placefs_plan_limit_parse(NULL, "x", &has, &limit, NULL, NULL), 0);
		ck_assert_int_eq(has, 1);
		ck_assert_uint_eq(limit, 16384);
	}
	/* A bad variable is not even read when the option is given. */
	ck_assert_int_eq(setenv(PLACEFS_PLAN_ENV_LIMIT, "garbage", 1), 0);
	limit_ok("4K", "--buffer-size", 1, 4096, "--buffer-size");
	msg = limit_bad(NULL, "--buffer-size", -EINVAL);
	ck_assert_msg(strstr(msg, PLACEFS_PLAN_ENV_LIMIT) && strstr(msg, "garbage") &&
	                      !strstr(msg, "--buffer-size"),
	              "%s", msg);
	/* Set but empty is an error, not "no limit". */
	ck_assert_int_eq(setenv(PLACEFS_PLAN_ENV_LIMIT, "", 1), 0);
	limit_bad(NULL, "--buffer-size", -EINVAL);
	ck_assert_int_eq(setenv(PLACEFS_PLAN_ENV_LIMIT, "99999999999999999999", 1), 0);
	limit_bad(NULL, "--buffer-size", -ERANGE);
	ck_assert_int_eq(unsetenv(PLACEFS_PLAN_ENV_LIMIT), 0);
}
END_TEST

/*
 * Names in messages are quoted (placefs_strbuf_add_quoted): quotes and
 * backslashes escaped, control bytes as \xNN, at most 120 bytes and "...".
 */
START_TEST(test_quoted_names)
{
	char longname[131], want[300];
	struct placefs_tensor t[] = {
	        {.name = "c\x01\x7f\\", .file = "1", .nbytes = 1},
	        {.name = "c\x01\x7f\\", .file = "2", .nbytes = 1},
	        {.name = longname, .file = "1", .nbytes = 1},
	        {.name = longname, .file = "2", .nbytes = 1},
	};
	static const char *const pfx[] = {"p\\\t"};
	struct placefs_strbuf sb;

	memset(longname, 'n', 130);
	longname[130] = '\0';
	as_u8(t, 4);
	snprintf(want, sizeof(want),
	         "duplicate tensor names among GPU-placed tensors: \"c\\x01\\x7f\\\\\" (1 and 2), "
	         "\"%.120s...\" (1 and 2)",
	         longname);
	ck_assert_str_eq(plan_bad(t, 4, NULL, 0, 0, 0, PLACEFS_E_DUP_GPU), want);
	ck_assert_str_eq(plan_bad(t, 1, pfx, 1, 0, 0, PLACEFS_E_EMPTY),
	                 "the selection matched no tensors (prefixes: \"p\\\\\\x09\")");

	/* Appended after what is there; exactly max bytes is not cut. */
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "x="), 0);
	ck_assert_int_eq(placefs_strbuf_add_quoted(&sb, "abc", 3), 0);
	ck_assert_int_eq(placefs_strbuf_add_quoted(&sb, "abcd", 3), 0);
	ck_assert_int_eq(placefs_strbuf_add_quoted(&sb, "", 3), 0);
	ck_assert_int_eq(placefs_strbuf_add_quoted(&sb, "\n\"", 0), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "x=\"abc\"\"abc...\"\"\"\"...\"");
	ck_assert_uint_eq(sb.len, strlen(sb.buf));
	placefs_strbuf_release(&sb);
}
END_TEST

/* Sets the ring and expects a refusal; returns the message. */
static const char *set_ring_bad(struct placefs_plan *p, uint64_t bytes, const char *origin)
{
	static struct placefs_error err;
	uint64_t before = placefs_plan_ring_bytes(p);
	int rc;

	placefs_error_clear(&err);
	rc = placefs_plan_set_ring_bytes(p, bytes, origin, &err);
	ck_assert_msg(rc == -EINVAL, "want -EINVAL, got %d (%s)", rc, err.msg);
	ck_assert_int_eq(err.code, -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_USAGE);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
	/* A refusal leaves the plan as it was. */
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), before);
	return err.msg;
}

static void set_ring_ok(struct placefs_plan *p, uint64_t bytes, const char *origin, uint64_t want)
{
	struct placefs_error err;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_plan_set_ring_bytes(p, bytes, origin, &err);
	ck_assert_msg(rc == 0, "set_ring_bytes(%llu) failed: %d %s", (unsigned long long)bytes, rc,
	              err.msg);
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), want);
}

START_TEST(test_set_ring_bytes)
{
	struct placefs_plan *p = plan_ok(seed_tensors, 3, NULL, 0, 1, 8 * MiB);
	struct placefs_strbuf sb;
	const char *msg, *s;

	placefs_strbuf_init(&sb);
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), 8 * MiB);
	/* Below the limit: refused, naming the origin, the value, the minimum and why. */
	msg = set_ring_bad(p, 8 * MiB - 1, "-o ring_size");
	ck_assert_str_eq(msg, "-o ring_size: 8388607 bytes (8.00 MiB) is below the 8388608-byte "
	                      "(8 MiB) staging limit: every gpu tensor up to the limit must fit "
	                      "the ring");
	msg = set_ring_bad(p, 4096, "--ring-size");
	ck_assert_msg(strncmp(msg, "--ring-size: 4096 bytes (4 KiB) is below", 40) == 0, "%s", msg);
	msg = set_ring_bad(p, 0, NULL);
	ck_assert_msg(strncmp(msg, "the ring size: 0 bytes", 22) == 0, "%s", msg);
	/* Equal: accepted, unchanged; larger: accepted and rounded up to 4 KiB. */
	set_ring_ok(p, 8 * MiB, "-o ring_size", 8 * MiB);
	set_ring_ok(p, 24 * MiB + 1, "-o ring_size", 24 * MiB + 4096);
	set_ring_ok(p, 24 * MiB, "-o ring_size", 24 * MiB);
	/* Each call is checked against the computed ring, not the last one set. */
	set_ring_ok(p, 16 * MiB, "-o ring_size", 16 * MiB);
	set_ring_bad(p, 8 * MiB - 4096, "-o ring_size");
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), 16 * MiB);
	/* Rounding up past 2^64 is refused; the last multiple of 4096 is fine. */
	msg = set_ring_bad(p, UINT64_MAX, "-o ring_size");
	ck_assert_msg(strstr(msg, "18446744073709551615 bytes") &&
	                      strstr(msg, "cannot be rounded up to a multiple of 4096 bytes"),
	              "%s", msg);
	set_ring_bad(p, UINT64_MAX - 4094, "-o ring_size");
	set_ring_ok(p, UINT64_MAX - 4095, "-o ring_size", UINT64_MAX - 4095);
	set_ring_ok(p, UINT64_MAX - 8190, "-o ring_size", UINT64_MAX - 4095);

	/* JSON and text report the new size; the text says who set it. */
	set_ring_ok(p, 24 * MiB, "-o ring_size", 24 * MiB);
	ck_assert_int_eq(placefs_plan_format_json(p, "m", &sb), 0);
	ck_assert_ptr_nonnull(strstr(placefs_strbuf_cstr(&sb),
	                             "{\"source\": \"m\", \"buffer_size\": 8388608, "
	                             "\"ring_bytes\": 25165824, \"tensors\": ["));
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_format_summary(p, &sb), 0);
	s = placefs_strbuf_cstr(&sb);
	ck_assert_msg(strstr(s, "staging limit: 8388608 bytes (8 MiB): larger tensors are read "
	                        "on the cpu\n"
	                        "ring: 25165824 bytes (24 MiB), set by -o ring_size (at least "
	                        "8 MiB, the staging limit)\n"),
	              "%s", s);
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_format_text(p, "m", &sb), 0);
	ck_assert_ptr_nonnull(strstr(placefs_strbuf_cstr(&sb), "set by -o ring_size"));
	placefs_plan_free(p);

	/* A limit that is not a multiple of 4 KiB: equal is accepted, then rounded. */
	p = plan_ok(seed_tensors, 3, NULL, 0, 1, 1000);
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), 1000);
	set_ring_bad(p, 999, "-o ring_size");
	set_ring_ok(p, 1000, "-o ring_size", 4096);
	placefs_plan_free(p);

	/* No limit: the minimum is the automatic ring (18 MiB here). */
	p = plan_ok(seed_tensors, 3, NULL, 0, 0, 0);
	ck_assert_uint_eq(placefs_plan_ring_bytes(p), 18 * MiB);
	msg = set_ring_bad(p, 9 * MiB, "--ring-size");
	ck_assert_str_eq(msg, "--ring-size: 9437184 bytes (9 MiB) is below the 18874368-byte "
	                      "(18 MiB) automatic ring (there is no staging limit): the ring is "
	                      "never smaller than max(largest gpu tensor, min(gpu total, "
	                      "256 MiB)), rounded up to 4096 bytes");
	set_ring_ok(p, 36 * MiB, "--ring-size", 36 * MiB);
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_format_summary(p, &sb), 0);
	ck_assert_ptr_nonnull(strstr(placefs_strbuf_cstr(&sb),
	                             "\nring: 37748736 bytes (36 MiB), set by --ring-size (at "
	                             "least 18 MiB, the automatic size)\n"));
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_format_json(p, "m", &sb), 0);
	ck_assert_ptr_nonnull(strstr(placefs_strbuf_cstr(&sb),
	                             "\"buffer_size\": null, \"ring_bytes\": 37748736, "));
	placefs_plan_free(p);

	/* A NULL plan is an API misuse. */
	ck_assert_int_eq(placefs_plan_set_ring_bytes(NULL, MiB, "x", NULL), -EINVAL);
	placefs_strbuf_release(&sb);
}
END_TEST

/* Collapses runs of two or more spaces into '|' so that columns can be compared. */
static void columns(const char *line, size_t len, char *out, size_t outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 1 < outlen; i++) {
		if (line[i] == ' ' && i + 1 < len && line[i + 1] == ' ') {
			while (i + 1 < len && line[i + 1] == ' ')
				i++;
			out[o++] = '|';
		} else {
			out[o++] = line[i];
		}
	}
	out[o] = '\0';
}

/* Returns the 0-based line `want` of text in columns form, or NULL. */
static const char *find_line(const char *text, const char *want, size_t *col_of_name,
                             const char *name)
{
	static char buf[1024];
	const char *p = text;

	while (*p) {
		const char *e = strchr(p, '\n');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		columns(p, len, buf, sizeof(buf));
		if (strcmp(buf, want) == 0) {
			if (col_of_name) {
				/* Where the name starts on the raw line. */
				*col_of_name = len - strlen(name);
			}
			return p;
		}
		if (!e)
			break;
		p = e + 1;
	}
	return NULL;
}

START_TEST(test_text)
{
	static const uint64_t s44[] = {4096, 4096};
	const struct placefs_tensor t[] = {
	        {"small", 0, "model.safetensors", PLACEFS_DT_F32, 1, shape_small, 1 * MiB, 0},
	        {"big", 0, "model.safetensors", PLACEFS_DT_F32, 1, shape_big, 9 * MiB, 1 * MiB},
	        {"layers.0.w q", 1, "other.safetensors", PLACEFS_DT_BF16, 2, s44, 32 * MiB, 0},
	        {"scalar", 1, "other.safetensors", PLACEFS_DT_I64, 0, NULL, 8, 32 * MiB},
	};
	static const char *const summary =
	        "gpu: 2 tensors, 1048584 bytes (1.00 MiB), largest 1048576 bytes (1 MiB)\n"
	        "cpu: 2 tensors, 42991616 bytes (41 MiB), largest 33554432 bytes (32 MiB)\n"
	        "staging limit: 8388608 bytes (8 MiB): larger tensors are read on the cpu\n"
	        "ring: 8388608 bytes (8 MiB), sized to the staging limit\n";
	struct placefs_strbuf sb, sum;
	struct placefs_plan *p;
	size_t c0, c1, c2, c3, hdr;
	const char *s;

	placefs_strbuf_init(&sb);
	placefs_strbuf_init(&sum);
	p = plan_ok(t, 4, NULL, 0, 1, 8 * MiB);
	ck_assert_int_eq(placefs_plan_format_text(p, "/models/m", &sb), 0);
	s = placefs_strbuf_cstr(&sb);
	ck_assert_msg(strncmp(s, "source: /models/m\nselected: 4 tensors\n", 38) == 0, "%s", s);
	ck_assert_ptr_nonnull(find_line(s, "PLACE|BYTES|DTYPE|SHAPE|FILE|NAME", &hdr, "NAME"));
	ck_assert_ptr_nonnull(
	        find_line(s, "gpu|1048576|F32|[262144]|model.safetensors|small", &c0, "small"));
	ck_assert_ptr_nonnull(
	        find_line(s, "cpu|9437184|F32|[2359296]|model.safetensors|big", &c1, "big"));
	ck_assert_ptr_nonnull(find_line(s,
	                                "cpu|33554432|BF16|[4096, 4096]|other.safetensors|"
	                                "layers.0.w q",
	                                &c2, "layers.0.w q"));
	ck_assert_ptr_nonnull(find_line(s, "gpu|8|I64|[]|other.safetensors|scalar", &c3, "scalar"));
	/* Aligned: every name starts in the NAME column. */
	ck_assert_uint_eq(c0, hdr);
	ck_assert_uint_eq(c1, hdr);
	ck_assert_uint_eq(c2, hdr);
	ck_assert_uint_eq(c3, hdr);
	/* The summary closes the text plan, and is what format_summary prints. */
	ck_assert_uint_ge(sb.len, strlen(summary));
	ck_assert_str_eq(s + sb.len - strlen(summary), summary);
	ck_assert_int_eq(placefs_plan_format_summary(p, &sum), 0);
	ck_assert_str_eq(placefs_strbuf_cstr(&sum), summary);
	placefs_plan_free(p);

	/* Without a limit: the automatic ring is explained. */
	placefs_strbuf_reset(&sum);
	p = plan_ok(t, 1, NULL, 0, 0, 0);
	ck_assert_int_eq(placefs_plan_format_summary(p, &sum), 0);
	ck_assert_str_eq(
	        placefs_strbuf_cstr(&sum),
	        "gpu: 1 tensor, 1048576 bytes (1 MiB), largest 1048576 bytes (1 MiB)\n"
	        "cpu: 0 tensors, 0 bytes (0 B), largest 0 bytes (0 B)\n"
	        "staging limit: none: every selected tensor is staged on the gpu\n"
	        "ring: 1048576 bytes (1 MiB), sized automatically: max(largest gpu tensor, "
	        "min(gpu total, 256 MiB)), rounded up to 4096 bytes\n");
	placefs_plan_free(p);
	placefs_strbuf_release(&sum);
	placefs_strbuf_release(&sb);
}
END_TEST

/* Checks that the sweep table has exactly the given rows, in columns form. */
static void sweep_is(const char *text, const char *const *rows, size_t n)
{
	const char *p = text;
	char buf[512];
	size_t i = 0;

	while (*p) {
		const char *e = strchr(p, '\n');

		ck_assert_ptr_nonnull(e);
		columns(p, (size_t)(e - p), buf, sizeof(buf));
		ck_assert_uint_lt(i, n);
		ck_assert_str_eq(buf, rows[i]);
		i++;
		p = e + 1;
	}
	ck_assert_uint_eq(i, n);
}

START_TEST(test_sweep_default)
{
	static const char *const rows[] = {
	        "limit|gpu tensors|gpu bytes|cpu tensors|cpu bytes|ring bytes",
	        "1 MiB|1|1 MiB|2|17 MiB|1 MiB",
	        "2 MiB|1|1 MiB|2|17 MiB|2 MiB",
	        "4 MiB|1|1 MiB|2|17 MiB|4 MiB",
	        "8 MiB|2|9 MiB|1|9 MiB|8 MiB",
	        "16 MiB|3|18 MiB|0|0 B|16 MiB",
	        "none|3|18 MiB|0|0 B|18 MiB",
	};
	struct placefs_strbuf sb;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_plan_sweep(seed_tensors, 3, NULL, 0, NULL, 0, &sb, NULL), 0);
	sweep_is(placefs_strbuf_cstr(&sb), rows, 7);
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_sweep_small_and_prefixes)
{
	struct placefs_tensor t[] = {{.name = "a", .nbytes = 8},
	                             {.name = "b", .nbytes = 32},
	                             {.name = "c", .nbytes = 8}};
	static const char *const rows_small[] = {
	        "limit|gpu tensors|gpu bytes|cpu tensors|cpu bytes|ring bytes",
	        "1 MiB|3|48 B|0|0 B|1 MiB",
	        "none|3|48 B|0|0 B|4 KiB",
	};
	static const char *const rows_list[] = {
	        "limit|gpu tensors|gpu bytes|cpu tensors|cpu bytes|ring bytes",
	        "16 B|2|16 B|1|32 B|16 B",
	        "1 B|0|0 B|3|48 B|1 B",
	        "none|3|48 B|0|0 B|4 KiB",
	};
	static const char *const rows_prefix[] = {
	        "limit|gpu tensors|gpu bytes|cpu tensors|cpu bytes|ring bytes",
	        "16 B|0|0 B|1|32 B|16 B",
	        "1 B|0|0 B|1|32 B|1 B",
	        "none|1|32 B|0|0 B|4 KiB",
	};
	static const char *const pb[] = {"b"};
	const uint64_t limits[] = {16, 1};
	struct placefs_strbuf sb;

	as_u8(t, 3);
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_plan_sweep(t, 3, NULL, 0, NULL, 0, &sb, NULL), 0);
	sweep_is(placefs_strbuf_cstr(&sb), rows_small, 3);
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_sweep(t, 3, NULL, 0, limits, 2, &sb, NULL), 0);
	sweep_is(placefs_strbuf_cstr(&sb), rows_list, 4);
	placefs_strbuf_reset(&sb);
	ck_assert_int_eq(placefs_plan_sweep(t, 3, pb, 1, limits, 2, &sb, NULL), 0);
	sweep_is(placefs_strbuf_cstr(&sb), rows_prefix, 4);
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_sweep_errors)
{
	struct placefs_tensor t[] = {{.name = "a", .nbytes = 8}, {.name = "a", .nbytes = 32}};
	static const char *const px[] = {"x."};
	const uint64_t zero[] = {16, 0};
	struct placefs_strbuf sb;
	struct placefs_error err;

	as_u8(t, 2);
	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "keep"), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_plan_sweep(t, 2, px, 1, NULL, 0, &sb, &err), -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_EMPTY);
	ck_assert_str_eq(err.msg, "the selection matched no tensors (prefixes: \"x.\")");
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_plan_sweep(t, 2, NULL, 0, NULL, 0, &sb, &err), -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_DUP_GPU);
	ck_assert_str_eq(err.msg, "duplicate tensor names among GPU-placed tensors: \"a\" "
	                          "(model.safetensors and model.safetensors)");
	/* A failing candidate is named. */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_plan_sweep(t, 1, NULL, 0, zero, 2, &sb, &err), -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_LIMIT);
	ck_assert_str_eq(err.msg, "with a staging limit of 0 B: the staging limit must be "
	                          "greater than zero");
	/* Failures leave the buffer as it was. */
	ck_assert_str_eq(placefs_strbuf_cstr(&sb), "keep");
	placefs_strbuf_release(&sb);
}
END_TEST

START_TEST(test_find)
{
	struct placefs_tensor t[] = {
	        {.name = "a/b", .nbytes = 1},   {.name = ".hidden", .nbytes = 1},
	        {.name = "a%2Fb", .nbytes = 1}, {.name = "plain", .nbytes = 1},
	        {.name = "zz", .nbytes = 1},    {.name = "0", .nbytes = 1},
	};
	struct placefs_plan *p;

	as_u8(t, 6);
	p = plan_ok(t, 6, NULL, 0, 0, 0);
	ck_assert_str_eq(placefs_plan_entry(p, 0)->fname, "a%2Fb");
	ck_assert_str_eq(placefs_plan_entry(p, 1)->fname, "%2Ehidden");
	ck_assert_str_eq(placefs_plan_entry(p, 2)->fname, "a%252Fb");
	ck_assert_str_eq(placefs_plan_entry(p, 3)->fname, "plain");
	for (size_t i = 0; i < 6; i++)
		ck_assert_int_eq(placefs_plan_find(p, placefs_plan_entry(p, i)->fname), (long)i);
	/* Lookups are by encoded file name, never by tensor name. */
	ck_assert_int_eq(placefs_plan_find(p, "a/b"), -1);
	ck_assert_int_eq(placefs_plan_find(p, ".hidden"), -1);
	ck_assert_int_eq(placefs_plan_find(p, "missing"), -1);
	ck_assert_int_eq(placefs_plan_find(p, ""), -1);
	ck_assert_int_eq(placefs_plan_find(p, "plai"), -1);
	ck_assert_int_eq(placefs_plan_find(p, "plainx"), -1);
	ck_assert_int_eq(placefs_plan_find(p, NULL), -1);
	placefs_plan_free(p);
	ck_assert_str_eq(placefs_placement_name(PLACEFS_PLACE_GPU), "gpu");
	ck_assert_str_eq(placefs_placement_name(PLACEFS_PLACE_CPU), "cpu");
}
END_TEST

#define BIG_N 100000

/* 100,000 tensors: placement, duplicate checks and lookups stay O(n log n). */
START_TEST(test_large)
{
	struct placefs_tensor *t = calloc(BIG_N, sizeof(*t));
	char(*names)[32] = calloc(BIG_N, sizeof(*names));
	struct placefs_plan_totals tt;
	struct placefs_plan *p;
	uint64_t gpu = 0, cpu = 0, state = 12345;
	double t0;

	ck_assert_ptr_nonnull(t);
	ck_assert_ptr_nonnull(names);
	for (size_t i = 0; i < BIG_N; i++) {
		/* Names in an order unrelated to their sort order. */
		snprintf(names[i], sizeof(names[i]), "layers.%zu.w/%zu", (i * 7919) % BIG_N, i % 7);
		t[i].name = names[i];
		state = state * 6364136223846793005ULL + 1442695040888963407ULL;
		t[i].nbytes = (state >> 33) % 20000;
		if (t[i].nbytes <= 10000)
			gpu++;
		else
			cpu++;
	}
	as_u8(t, BIG_N);
	t0 = placefs_clock_s();
	p = plan_ok(t, BIG_N, NULL, 0, 1, 10000);
	placefs_plan_totals(p, &tt);
	ck_assert_uint_eq(tt.count[PLACEFS_PLACE_GPU], gpu);
	ck_assert_uint_eq(tt.count[PLACEFS_PLACE_CPU], cpu);
	for (size_t i = 0; i < BIG_N; i++)
		ck_assert_int_eq(placefs_plan_find(p, placefs_plan_entry(p, i)->fname), (long)i);
	placefs_plan_free(p);
	/* The same checkpoint with the last name repeated from the first. */
	t[BIG_N - 1].name = names[0];
	t[BIG_N - 1].nbytes = t[0].nbytes;
	plan_bad(t, BIG_N, NULL, 0, 1, 10000,
	         t[0].nbytes <= 10000 ? PLACEFS_E_DUP_GPU : PLACEFS_E_DUP_CPU);
	/* Generous even under valgrind; a quadratic check would take minutes. */
	ck_assert_msg(placefs_clock_s() - t0 < 30.0, "took %.1f s", placefs_clock_s() - t0);
	free(names);
	free(t);
}
END_TEST

static Suite *plan_suite(void)
{
	Suite *s = suite_create("plan");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_seed_8mib);
	tcase_add_test(tc, test_oversize_routing);
	tcase_add_test(tc, test_order_kept);
	tcase_add_test(tc, test_zero_bytes_gpu);
	tcase_add_test(tc, test_no_limit_all_gpu);
	tcase_add_test(tc, test_prefixes);
	tcase_add_test(tc, test_dup_cpu);
	tcase_add_test(tc, test_dup_gpu);
	tcase_add_test(tc, test_dup_lists);
	tcase_add_test(tc, test_check_order);
	tcase_add_test(tc, test_overlap);
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_bad_names);
	tcase_add_test(tc, test_bad_arguments);
	tcase_add_test(tc, test_ring_sizing);
	tcase_add_test(tc, test_size_overflows);
	tcase_add_test(tc, test_json_exact);
	tcase_add_test(tc, test_columns_exact);
	tcase_add_test(tc, test_layout_packed);
	tcase_add_test(tc, test_layout_packed_runs);
	tcase_add_test(tc, test_packed_exact);
	tcase_add_test(tc, test_json_filename);
	tcase_add_test(tc, test_limit_parse);
	tcase_add_test(tc, test_quoted_names);
	tcase_add_test(tc, test_text);
	tcase_add_test(tc, test_set_ring_bytes);
	tcase_add_test(tc, test_sweep_default);
	tcase_add_test(tc, test_sweep_small_and_prefixes);
	tcase_add_test(tc, test_sweep_errors);
	tcase_add_test(tc, test_find);
	tcase_add_test(tc, test_large);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(plan_suite());
}
