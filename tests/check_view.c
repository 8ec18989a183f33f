/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for lib/model/view.c: views over synthetic checkpoints (lib/stwrite),
 * every generated file validated with the project's reference-rules parser
 * (lib/safetensors, the file's size included) and compared byte for byte
 * with the source; the segment maps, padding, metadata, the index, empty
 * views, a file source, prefix filters, alignment and the aux-file rules.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/ckpt.h"
#include "format/index.h"
#include "common/io.h"
#include "model/plan.h"
#include "format/safetensors.h"
#include "common/strbuf.h"
#include "format/stwrite.h"
#include "testutil.h"
#include "model/view.h"

static char *tmpdir;

static void setup(void)
{
	char *raw = tu_mkdtemp();

	tmpdir = realpath(raw, NULL);
	ck_assert_ptr_nonnull(tmpdir);
	free(raw);
}

static void teardown(void)
{
	tu_rmtree(tmpdir);
	free(tmpdir);
	tmpdir = NULL;
}

static char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *at(const char *fmt, ...)
{
	char *rel, *p;
	va_list ap;

	va_start(ap, fmt);
	ck_assert(vasprintf(&rel, fmt, ap) > 0);
	va_end(ap);
	p = tu_path(tmpdir, rel);
	free(rel);
	return p;
}

/* A tensor of a synthetic shard: "name:DTYPE:d0xd1" ("" shape: a scalar). */
struct spec {
	const char *name;
	enum placefs_dtype dtype;
	uint32_t ndim;
	uint64_t shape[3];
};

static void write_shard(const char *rel, const struct spec *s, size_t n, const char *const *meta,
                        size_t nmeta)
{
	struct placefs_stwrite_tensor t[64];
	struct placefs_error err;
	char *p = at("%s", rel);

	ck_assert(n <= 64);
	for (size_t i = 0; i < n; i++)
		t[i] = (struct placefs_stwrite_tensor){s[i].name, s[i].dtype, s[i].ndim,
		                                       s[i].shape};
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stwrite_file(p, t, n, meta, nmeta, 7, &err) == 0, "%s", err.msg);
	free(p);
}

static void mkdir_at(const char *rel)
{
	char *p = at("%s", rel);

	ck_assert_int_eq(mkdir(p, 0755), 0);
	free(p);
}

static void text_at(const char *rel, const char *text)
{
	char *p = at("%s", rel);

	tu_write_text(p, text);
	free(p);
}

struct fixture {
	struct placefs_ckpt *ck;
	struct placefs_plan *plan;
	struct placefs_view *v[PLACEFS_VIEW_KINDS];
	char *index_text;
	size_t index_len;
};

static void open_fixture(struct fixture *fx, const char *source, const char *const *prefixes,
                         size_t np, int has_limit, uint64_t limit)
{
	struct placefs_plan_options opt = {prefixes, np, has_limit, limit};
	struct placefs_error err;
	char *src = at("%s", source);

	memset(fx, 0, sizeof(*fx));
	placefs_error_clear(&err);
	ck_assert_msg(placefs_ckpt_open(src, NULL, &fx->ck, &err) == 0, "%s", err.msg);
	ck_assert_msg(placefs_plan_create(placefs_ckpt_tensors(fx->ck),
	                                  placefs_ckpt_tensor_count(fx->ck), &opt, &fx->plan,
	                                  &err) == 0,
	              "%s", err.msg);
	ck_assert_msg(placefs_view_read_index(fx->ck, &fx->index_text, &fx->index_len, &err) == 0,
	              "%s", err.msg);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++)
		ck_assert_msg(placefs_view_create(fx->ck, fx->plan, (enum placefs_view_kind)k,
		                                  fx->index_text, fx->index_len, &fx->v[k],
		                                  &err) == 0,
		              "%s", err.msg);
	free(src);
}

static void close_fixture(struct fixture *fx)
{
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++)
		placefs_view_free(fx->v[k]);
	free(fx->index_text);
	placefs_plan_free(fx->plan);
	placefs_ckpt_free(fx->ck);
}

static int in_view(enum placefs_view_kind k, const struct placefs_plan_entry *e)
{
	return k == PLACEFS_VIEW_ALL ||
	       e->placement == (k == PLACEFS_VIEW_CPU ? PLACEFS_PLACE_CPU : PLACEFS_PLACE_GPU);
}

static unsigned align_of(enum placefs_dtype dt)
{
	unsigned b = placefs_dtype_bits(dt) / 8;

	return b == 0 ? 1 : b > 8 ? 8 : b;
}

/*
 * The whole of view file i, built independently of placefs_view_map(): the
 * generated header, then each of the file's tensors' bytes pread from the
 * source shard in the file's order.
 */
static uint8_t *expected_image(const struct fixture *fx, const struct placefs_view *v, size_t i,
                               size_t *len)
{
	const struct placefs_shard *sh = placefs_ckpt_shard(fx->ck, placefs_view_file_shard(v, i));
	uint64_t size = placefs_view_file_size(v, i), hdr = placefs_view_file_header_size(v, i);
	const uint8_t *h = placefs_view_header(v, i, NULL);
	uint8_t *img = malloc(size ? size : 1);
	uint64_t at_ = hdr;

	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_nonnull(img);
	memcpy(img, h, hdr);
	for (size_t j = 0; j < placefs_view_file_tensor_count(v, i); j++) {
		const struct placefs_tensor *t =
		        placefs_plan_entry(fx->plan, placefs_view_file_tensor(v, i, j))->tensor;

		ck_assert(at_ + t->nbytes <= size);
		ck_assert_int_eq(placefs_io_pread_full(sh->fd, img + at_, t->nbytes, t->offset),
		                 (ssize_t)t->nbytes);
		at_ += t->nbytes;
	}
	ck_assert_uint_eq(at_, size);
	*len = size;
	return img;
}

/* Bytes [off, off + size) of view file i through placefs_view_map(), `max` pieces per call. */
static size_t mapped_bytes(const struct fixture *fx, const struct placefs_view *v, size_t i,
                           uint64_t off, uint64_t size, size_t max, uint8_t *out)
{
	const struct placefs_shard *sh = placefs_ckpt_shard(fx->ck, placefs_view_file_shard(v, i));
	const uint8_t *h = placefs_view_header(v, i, NULL);
	struct placefs_view_piece pc[64];
	size_t got = 0;

	ck_assert(max <= 64);
	for (;;) {
		uint64_t mapped = 0, sum = 0;
		size_t n = placefs_view_map(v, i, off + got, size - got, pc, max, &mapped);

		if (n == 0) {
			ck_assert_uint_eq(mapped, 0);
			break;
		}
		ck_assert(n <= max);
		for (size_t k = 0; k < n; k++) {
			ck_assert(pc[k].len > 0);
			if (pc[k].src == PLACEFS_VIEW_SRC_HEADER) {
				ck_assert(pc[k].off + pc[k].len <=
				          placefs_view_file_header_size(v, i));
				memcpy(out + got + sum, h + pc[k].off, pc[k].len);
			} else {
				ck_assert_int_eq(placefs_io_pread_full(sh->fd, out + got + sum,
				                                       pc[k].len, pc[k].off),
				                 (ssize_t)pc[k].len);
			}
			sum += pc[k].len;
		}
		ck_assert_uint_eq(sum, mapped);
		got += mapped;
		if (got == size)
			break;
	}
	return got;
}

/*
 * Checks view k of fx completely: every file parses under the reference
 * rules with its own size, holds exactly the view's tensors of its shard
 * (names, dtypes, shapes, the source's bytes), aligned, with the source's
 * __metadata__, padded with spaces; the segment map gives the same bytes
 * for every range tried; the view's totals add up.
 */
static void check_view_full(const struct fixture *fx, enum placefs_view_kind k)
{
	const struct placefs_view *v = fx->v[k];
	size_t nfiles = placefs_view_file_count(v), seen = 0;
	uint64_t total = 0;

	ck_assert_int_eq(placefs_view_kind(v), k);
	for (size_t i = 0; i < nfiles; i++) {
		uint32_t s = placefs_view_file_shard(v, i);
		const struct placefs_shard *sh = placefs_ckpt_shard(fx->ck, s);
		struct placefs_st_header *h = NULL;
		struct placefs_error err;
		size_t len, want = 0;
		uint8_t *img = expected_image(fx, v, i, &len), *buf;
		uint64_t n = 0, hdr = placefs_view_file_header_size(v, i);

		/* Named as its shard, found by that name, files in shard order. */
		ck_assert_str_eq(placefs_view_file_name(v, i), sh->file);
		ck_assert_int_eq(placefs_view_file_find(v, sh->file), (long)i);
		if (i)
			ck_assert_uint_lt(placefs_view_file_shard(v, i - 1), s);
		/* The 8-byte length, JSON, spaces up to a multiple of 8. */
		ck_assert_uint_eq(hdr % 8, 0);
		for (int b = 0; b < 8; b++)
			n |= (uint64_t)img[b] << (8 * b);
		ck_assert_uint_eq(8 + n, hdr);
		{
			uint64_t e = hdr;

			while (e > 8 && img[e - 1] == ' ')
				e--;
			ck_assert_uint_eq(img[e - 1], '}');
			ck_assert_uint_lt(hdr - e, 8);
			ck_assert_uint_eq(img[8], '{');
		}
		placefs_error_clear(&err);
		ck_assert_msg(placefs_st_parse_buffer(sh->file, img, len, &h, &err) == 0,
		              "view %s, %s: %s", placefs_view_kind_name(k), sh->file, err.msg);
		ck_assert_uint_eq(placefs_st_header_data_start(h), hdr);
		ck_assert_uint_eq(placefs_st_header_tensor_count(h),
		                  placefs_view_file_tensor_count(v, i));
		/* The tensors, in the file's order (the parser sorts by offset). */
		for (size_t j = 0; j < placefs_st_header_tensor_count(h); j++) {
			const struct placefs_st_tensor *vt = placefs_st_header_tensor(h, j);
			const struct placefs_plan_entry *e =
			        placefs_plan_entry(fx->plan, placefs_view_file_tensor(v, i, j));
			const struct placefs_tensor *t = e->tensor;
			uint8_t *src = malloc(t->nbytes ? t->nbytes : 1);

			ck_assert(in_view(k, e));
			ck_assert_uint_eq(t->shard, s);
			ck_assert_str_eq(vt->name, t->name);
			ck_assert_int_eq(vt->dtype, t->dtype);
			ck_assert_uint_eq(vt->ndim, t->ndim);
			for (uint32_t d = 0; d < t->ndim; d++)
				ck_assert_uint_eq(vt->shape[d], t->shape[d]);
			ck_assert_uint_eq(vt->nbytes, t->nbytes);
			ck_assert_uint_eq(vt->begin % align_of(vt->dtype), 0);
			ck_assert_int_eq(placefs_io_pread_full(sh->fd, src, t->nbytes, t->offset),
			                 (ssize_t)t->nbytes);
			ck_assert(memcmp(img + vt->offset, src, t->nbytes) == 0);
			free(src);
			total += t->nbytes;
		}
		/* __metadata__ as the source shard has it (or not). */
		ck_assert_int_eq(placefs_st_header_has_meta(h),
		                 placefs_st_header_has_meta(sh->header));
		ck_assert_uint_eq(placefs_st_header_meta_count(h),
		                  placefs_st_header_meta_count(sh->header));
		for (size_t j = 0; j < placefs_st_header_meta_count(h); j++) {
			ck_assert_str_eq(placefs_st_header_meta(h, j)->key,
			                 placefs_st_header_meta(sh->header, j)->key);
			ck_assert_str_eq(placefs_st_header_meta(h, j)->value,
			                 placefs_st_header_meta(sh->header, j)->value);
		}
		/* Segment maps: the whole file, ranges across every boundary, 1 to 64 pieces. */
		buf = malloc(len + 16);
		ck_assert_ptr_nonnull(buf);
		for (size_t max = 1; max <= 64; max *= 4) {
			memset(buf, 0xee, len + 16);
			ck_assert_uint_eq(mapped_bytes(fx, v, i, 0, len + 16, max, buf), len);
			ck_assert(memcmp(buf, img, len) == 0);
			for (uint64_t off = 0; off < len; off += 1 + off / 3) {
				for (uint64_t sz = 1; sz < len + 2; sz = sz * 3 + 1) {
					size_t expect = off + sz > len ? len - off : sz;

					ck_assert_uint_eq(mapped_bytes(fx, v, i, off, sz, max, buf),
					                  expect);
					ck_assert(memcmp(buf, img + off, expect) == 0);
				}
			}
		}
		{
			struct placefs_view_piece pc[2];
			uint64_t mapped = 1;

			ck_assert_uint_eq(placefs_view_map(v, i, len, 10, pc, 2, &mapped), 0);
			ck_assert_uint_eq(mapped, 0);
		}
		free(buf);
		/* Every entry of the view's shard is in its file. */
		for (size_t e = 0; e < placefs_plan_count(fx->plan); e++) {
			const struct placefs_plan_entry *pe = placefs_plan_entry(fx->plan, e);

			want += pe->tensor->shard == s && in_view(k, pe);
		}
		ck_assert_uint_eq(want, placefs_view_file_tensor_count(v, i));
		seen += want;
		placefs_st_header_free(h);
		free(img);
	}
	ck_assert_uint_eq(seen, placefs_view_tensor_count(v));
	ck_assert_uint_eq(total, placefs_view_total_bytes(v));
	/* Shards without tensors of the view have no file. */
	for (size_t e = 0; e < placefs_plan_count(fx->plan); e++) {
		const struct placefs_plan_entry *pe = placefs_plan_entry(fx->plan, e);

		if (in_view(k, pe))
			ck_assert_int_ge(
			        placefs_view_file_find(
			                v, placefs_ckpt_shard(fx->ck, pe->tensor->shard)->file),
			        0);
	}
	ck_assert_uint_eq(placefs_view_map(v, nfiles, 0, 1, NULL, 0, &total), 0);
}

/* The view's index: strict, weight_map exactly the view's tensors, total_size right. */
static const char *check_index(const struct fixture *fx, enum placefs_view_kind k)
{
	const struct placefs_view *v = fx->v[k];
	struct placefs_index *idx = NULL;
	struct placefs_error err;
	const char *text = placefs_view_index(v, &err);
	char want[64];

	ck_assert_int_eq(placefs_view_has_index(v), 1);
	ck_assert_ptr_nonnull(text);
	ck_assert_ptr_eq(placefs_view_index(v, &err), text); /* kept */
	ck_assert_uint_eq(strlen(text), placefs_view_index_size(v));
	ck_assert_uint_eq(text[strlen(text) - 1], '\n');
	placefs_error_clear(&err);
	ck_assert_msg(placefs_index_parse("view index", text, strlen(text), &idx, &err) == 0,
	              "%s: %s", err.msg, text);
	ck_assert_uint_eq(placefs_index_count(idx), placefs_view_tensor_count(v));
	for (size_t i = 0; i < placefs_view_file_count(v); i++) {
		for (size_t j = 0; j < placefs_view_file_tensor_count(v, i); j++) {
			const char *name =
			        placefs_plan_entry(fx->plan, placefs_view_file_tensor(v, i, j))
			                ->tensor->name;
			const char *f = placefs_index_lookup(idx, name);

			ck_assert_ptr_nonnull(f);
			ck_assert_str_eq(f, placefs_view_file_name(v, i));
		}
	}
	/* One entry a line, sorted by name (raw keys; the test names sort the same escaped). */
	{
		const char *p = strstr(text, "\"weight_map\": {");
		char prev[256] = "";
		size_t lines = 0;

		ck_assert_ptr_nonnull(p);
		while ((p = strstr(p, "\n    \"")) != NULL) {
			const char *q = p + 6, *e = strstr(q, "\": \"");
			char key[256];

			ck_assert_ptr_nonnull(e);
			ck_assert((size_t)(e - q) < sizeof(key));
			memcpy(key, q, (size_t)(e - q));
			key[e - q] = '\0';
			ck_assert_msg(strcmp(prev, key) < 0, "%s before %s", prev, key);
			strcpy(prev, key);
			lines++;
			p = e;
		}
		ck_assert_uint_eq(lines, placefs_view_tensor_count(v));
	}
	snprintf(want, sizeof(want), "\"total_size\": %" PRIu64 "", placefs_view_total_bytes(v));
	ck_assert_msg(strstr(text, want) != NULL, "no %s in %s", want, text);
	placefs_index_free(idx);
	return text;
}

static const char *const META[] = {"format", "pt", "note", "a \"quoted\"\nline \\ é"};

/* Three shards with an index; cpu/gpu split by a limit; the index has other metadata. */
static void three_shards(void)
{
	static const struct spec a[] = {
	        {"model.embed.weight", PLACEFS_DT_BF16, 2, {64, 32}},
	        {"model.layers.0.norm", PLACEFS_DT_F32, 1, {32}},
	        {"model.layers.0.attn \"q\"", PLACEFS_DT_F16, 2, {32, 32}},
	        {"scalar", PLACEFS_DT_F64, 0, {0}},
	};
	static const struct spec b[] = {
	        {"model.layers.1.norm", PLACEFS_DT_F32, 1, {32}},
	        {"model.layers.1.mlp", PLACEFS_DT_BF16, 2, {128, 32}},
	        {"empty", PLACEFS_DT_F32, 2, {0, 3}},
	        {"unicode.é.张量", PLACEFS_DT_I32, 1, {4}},
	};
	static const struct spec c[] = {
	        {"lm_head.weight", PLACEFS_DT_BF16, 2, {64, 32}},
	};

	mkdir_at("m");
	write_shard("m/model-00001-of-00003.safetensors", a, 4, META, 2);
	write_shard("m/model-00002-of-00003.safetensors", b, 4, META, 1);
	write_shard("m/model-00003-of-00003.safetensors", c, 1, NULL, 0);
	text_at("m/model.safetensors.index.json",
	        "{\"metadata\": {\"total_parameters\": 12345, \"total_size\": 1, \"x\": "
	        "{\"nested\": [1, {\"a\": \"}\"}]}}, \"weight_map\": {"
	        "\"model.embed.weight\": \"model-00001-of-00003.safetensors\","
	        "\"model.layers.0.norm\": \"model-00001-of-00003.safetensors\","
	        "\"model.layers.0.attn \\\"q\\\"\": \"model-00001-of-00003.safetensors\","
	        "\"scalar\": \"model-00001-of-00003.safetensors\","
	        "\"model.layers.1.norm\": \"model-00002-of-00003.safetensors\","
	        "\"model.layers.1.mlp\": \"model-00002-of-00003.safetensors\","
	        "\"empty\": \"model-00002-of-00003.safetensors\","
	        "\"unicode.\\u00e9.张量\": \"model-00002-of-00003.safetensors\","
	        "\"lm_head.weight\": \"model-00003-of-00003.safetensors\"}}");
}

START_TEST(test_index_and_split)
{
	struct fixture fx;
	const char *t;

	three_shards();
	/* 2 KiB: the norms, the scalar, empty and the I32 are gpu; the rest cpu. */
	open_fixture(&fx, "m", NULL, 0, 1, 2048);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		check_view_full(&fx, (enum placefs_view_kind)k);
		t = check_index(&fx, (enum placefs_view_kind)k);
		/* The other metadata kept as written, total_size replaced where it was. */
		ck_assert_ptr_nonnull(
		        strstr(t, "\"total_parameters\": 12345,\n    \"total_size\": "));
		ck_assert_ptr_nonnull(strstr(t, "\"x\": {\"nested\": [1, {\"a\": \"}\"}]}"));
		ck_assert_ptr_null(strstr(t, "\"total_size\": 1,"));
		ck_assert_str_eq(placefs_view_index_name(fx.v[k]), "model.safetensors.index.json");
	}
	/* all = the selection; gpu + cpu = all, by placement. */
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_ALL]), 9);
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_GPU]) +
	                          placefs_view_tensor_count(fx.v[PLACEFS_VIEW_CPU]),
	                  9);
	ck_assert_uint_eq(placefs_view_total_bytes(fx.v[PLACEFS_VIEW_GPU]) +
	                          placefs_view_total_bytes(fx.v[PLACEFS_VIEW_CPU]),
	                  placefs_view_total_bytes(fx.v[PLACEFS_VIEW_ALL]));
	/* Shard 3 has only a cpu tensor: no gpu file for it. */
	ck_assert_int_eq(
	        placefs_view_file_find(fx.v[PLACEFS_VIEW_GPU], "model-00003-of-00003.safetensors"),
	        -1);
	ck_assert_int_eq(placefs_view_file_count(fx.v[PLACEFS_VIEW_ALL]), 3);
	/* No __metadata__ in shard 3's source: none in its view files. */
	{
		long i = placefs_view_file_find(fx.v[PLACEFS_VIEW_CPU],
		                                "model-00003-of-00003.safetensors");
		const uint8_t *h = placefs_view_header(fx.v[PLACEFS_VIEW_CPU], (size_t)i, NULL);

		ck_assert_int_ge(i, 0);
		ck_assert(memmem(h,
		                 placefs_view_file_header_size(fx.v[PLACEFS_VIEW_CPU], (size_t)i),
		                 "__metadata__", 12) == NULL);
	}
	close_fixture(&fx);
}
END_TEST

/* The all view of a shard whose tensors are all selected is the source file itself. */
START_TEST(test_all_is_source)
{
	static const struct spec a[] = {
	        {"a", PLACEFS_DT_F64, 1, {3}},
	        {"b", PLACEFS_DT_F32, 2, {5, 3}},
	        {"c", PLACEFS_DT_BF16, 1, {7}},
	        {"d", PLACEFS_DT_U8, 1, {9}},
	};
	struct fixture fx;
	size_t len, slen;
	uint8_t *img, *src;
	char *p;

	write_shard("one.safetensors", a, 4, META, 2);
	open_fixture(&fx, "one.safetensors", NULL, 0, 0, 0);
	check_view_full(&fx, PLACEFS_VIEW_ALL);
	check_view_full(&fx, PLACEFS_VIEW_GPU);
	check_view_full(&fx, PLACEFS_VIEW_CPU);
	img = expected_image(&fx, fx.v[PLACEFS_VIEW_ALL], 0, &len);
	p = at("one.safetensors");
	src = tu_read_file(p, &slen);
	ck_assert_uint_eq(len, slen);
	ck_assert(memcmp(img, src, len) == 0);
	/* A file source: no index, no aux files; no limit: everything gpu, cpu empty. */
	ck_assert_int_eq(placefs_view_has_index(fx.v[PLACEFS_VIEW_ALL]), 0);
	ck_assert_ptr_null(placefs_view_index_name(fx.v[PLACEFS_VIEW_ALL]));
	ck_assert_ptr_null(placefs_view_index(fx.v[PLACEFS_VIEW_ALL], NULL));
	ck_assert_uint_eq(placefs_view_file_count(fx.v[PLACEFS_VIEW_CPU]), 0);
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_CPU]), 0);
	ck_assert_uint_eq(placefs_view_file_count(fx.v[PLACEFS_VIEW_GPU]), 1);
	{
		char out[PLACEFS_NAME_MAX + 1];

		ck_assert_int_eq(placefs_view_aux_name(fx.ck, "config.json", out), 0);
	}
	free(src);
	free(p);
	free(img);
	close_fixture(&fx);
}
END_TEST

/* Empty views: every tensor on one side; the index of the empty one is still valid. */
START_TEST(test_empty_views)
{
	struct fixture fx;
	const char *t;

	three_shards();
	open_fixture(&fx, "m", NULL, 0, 1, 1); /* 1 byte: nothing non-empty is gpu */
	check_view_full(&fx, PLACEFS_VIEW_CPU);
	check_view_full(&fx, PLACEFS_VIEW_GPU);
	close_fixture(&fx);

	open_fixture(&fx, "m", NULL, 0, 0, 0); /* no limit: cpu is empty */
	ck_assert_uint_eq(placefs_view_file_count(fx.v[PLACEFS_VIEW_CPU]), 0);
	t = check_index(&fx, PLACEFS_VIEW_CPU);
	ck_assert_ptr_nonnull(strstr(t, "\"weight_map\": {}\n}\n"));
	ck_assert_ptr_nonnull(strstr(t, "\"total_size\": 0"));
	check_view_full(&fx, PLACEFS_VIEW_GPU);
	check_index(&fx, PLACEFS_VIEW_GPU);
	close_fixture(&fx);
}
END_TEST

/* Prefix filters: all is the selection; shards with nothing selected have no file. */
START_TEST(test_prefix)
{
	static const char *const pre[] = {"model.layers.1."};
	struct fixture fx;

	three_shards();
	open_fixture(&fx, "m", pre, 1, 1, 200);
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_ALL]), 2);
	ck_assert_uint_eq(placefs_view_file_count(fx.v[PLACEFS_VIEW_ALL]), 1);
	ck_assert_str_eq(placefs_view_file_name(fx.v[PLACEFS_VIEW_ALL], 0),
	                 "model-00002-of-00003.safetensors");
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_GPU]), 1);
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_CPU]), 1);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		check_view_full(&fx, (enum placefs_view_kind)k);
		check_index(&fx, (enum placefs_view_kind)k);
	}
	close_fixture(&fx);
}
END_TEST

/*
 * A source not sorted by alignment: left out, a 1-byte tensor would put the
 * F32 after it at an odd offset; the view sorts by element size instead.
 * Kept in source order where that is aligned.
 */
START_TEST(test_alignment)
{
	static const struct spec a[] = {
	        {"u8", PLACEFS_DT_U8, 1, {3}},     /* 3 bytes: gpu */
	        {"big8", PLACEFS_DT_U8, 1, {401}}, /* cpu */
	        {"f32", PLACEFS_DT_F32, 1, {3}},   /* gpu; 404 in the source: aligned */
	        {"f64", PLACEFS_DT_F64, 1, {2}},   /* gpu */
	};
	struct fixture fx;
	const struct placefs_view *g;

	mkdir_at("d");
	write_shard("d/x.safetensors", a, 4, NULL, 0);
	open_fixture(&fx, "d", NULL, 0, 1, 100);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++)
		check_view_full(&fx, (enum placefs_view_kind)k);
	g = fx.v[PLACEFS_VIEW_GPU];
	ck_assert_uint_eq(placefs_view_file_tensor_count(g, 0), 3);
	ck_assert_str_eq(
	        placefs_plan_entry(fx.plan, placefs_view_file_tensor(g, 0, 0))->tensor->name,
	        "f64");
	ck_assert_str_eq(
	        placefs_plan_entry(fx.plan, placefs_view_file_tensor(g, 0, 1))->tensor->name,
	        "f32");
	ck_assert_str_eq(
	        placefs_plan_entry(fx.plan, placefs_view_file_tensor(g, 0, 2))->tensor->name, "u8");
	/* A directory without an index: no index in the views. */
	ck_assert_int_eq(placefs_view_has_index(g), 0);
	close_fixture(&fx);
}
END_TEST

/*
 * An index that names only some of a shard's tensors: they are the selection, and
 * every view holds exactly them (all is not the source file, which has more).
 */
START_TEST(test_index_filter)
{
	static const struct spec a[] = {
	        {"a", PLACEFS_DT_F32, 1, {64}},
	        {"b", PLACEFS_DT_F32, 1, {8}},
	        {"c", PLACEFS_DT_BF16, 2, {4, 8}},
	        {"d", PLACEFS_DT_U8, 1, {5}},
	};
	struct fixture fx;
	const char *t;

	mkdir_at("f");
	write_shard("f/x.safetensors", a, 4, META, 2);
	text_at("f/model.safetensors.index.json",
	        "{\"weight_map\": {\"a\": \"x.safetensors\", \"c\": \"x.safetensors\", "
	        "\"d\": \"x.safetensors\"}}");
	open_fixture(&fx, "f", NULL, 0, 1, 64); /* a (256 bytes) cpu, c and d gpu */
	ck_assert_uint_eq(placefs_plan_count(fx.plan), 3);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		check_view_full(&fx, (enum placefs_view_kind)k);
		t = check_index(&fx, (enum placefs_view_kind)k);
		ck_assert_ptr_null(strstr(t, "\"b\""));
	}
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_ALL]), 3);
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_GPU]), 2);
	ck_assert_uint_eq(placefs_view_tensor_count(fx.v[PLACEFS_VIEW_CPU]), 1);
	ck_assert_uint_eq(placefs_view_total_bytes(fx.v[PLACEFS_VIEW_ALL]), 256 + 64 + 5);
	{
		const uint8_t *h = placefs_view_header(fx.v[PLACEFS_VIEW_ALL], 0, NULL);

		ck_assert_ptr_nonnull(h);
		ck_assert(memmem(h, placefs_view_file_header_size(fx.v[PLACEFS_VIEW_ALL], 0),
		                 "\"b\"", 3) == NULL);
	}
	close_fixture(&fx);
}
END_TEST

/* A shard in a subdirectory: its view file name is encoded, the weight_map follows it. */
START_TEST(test_nested_shard)
{
	static const struct spec a[] = {{"w", PLACEFS_DT_F32, 1, {4}}};
	static const struct spec b[] = {{"v", PLACEFS_DT_F32, 1, {4}}};
	struct fixture fx;
	const char *t;

	mkdir_at("n");
	mkdir_at("n/sub");
	write_shard("n/sub/x.safetensors", a, 1, META, 1);
	write_shard("n/y.safetensors", b, 1, META, 1);
	text_at("n/model.safetensors.index.json",
	        "{\"weight_map\": {\"w\": \"sub/x.safetensors\", \"v\": \"y.safetensors\"}}");
	open_fixture(&fx, "n", NULL, 0, 0, 0);
	ck_assert_uint_eq(placefs_view_file_count(fx.v[PLACEFS_VIEW_ALL]), 2);
	ck_assert_str_eq(placefs_view_file_name(fx.v[PLACEFS_VIEW_ALL], 0), "sub%2Fx.safetensors");
	t = check_index(&fx, PLACEFS_VIEW_ALL);
	ck_assert_ptr_nonnull(strstr(t, "\"w\": \"sub%2Fx.safetensors\""));
	/* No metadata in the source index: the view's has total_size alone. */
	ck_assert_ptr_nonnull(strstr(t, "{\n  \"metadata\": {\n    \"total_size\": 32\n  },\n"));
	close_fixture(&fx);
}
END_TEST

/* A nested shard path too long for a file name of the views: refused, naming it. */
START_TEST(test_name_too_long)
{
	static const struct spec a[] = {{"w", PLACEFS_DT_F32, 1, {4}}};
	struct placefs_plan_options opt = {NULL, 0, 0, 0};
	struct placefs_ckpt *ck = NULL;
	struct placefs_plan *plan = NULL;
	struct placefs_view *v = (struct placefs_view *)&opt;
	struct placefs_error err;
	char d[201], rel[400], text[600];
	char *src = at("long");

	memset(d, 'd', 200);
	d[200] = '\0';
	mkdir_at("long");
	snprintf(rel, sizeof(rel), "long/%s", d);
	mkdir_at(rel);
	snprintf(rel, sizeof(rel), "long/%s/%s.safetensors", d,
	         "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");
	write_shard(rel, a, 1, NULL, 0);
	snprintf(text, sizeof(text), "{\"weight_map\": {\"w\": \"%s\"}}", rel + 5);
	text_at("long/model.safetensors.index.json", text);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_ckpt_open(src, NULL, &ck, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(placefs_plan_create(placefs_ckpt_tensors(ck),
	                                     placefs_ckpt_tensor_count(ck), &opt, &plan, &err),
	                 0);
	ck_assert_int_eq(placefs_view_create(ck, plan, PLACEFS_VIEW_GPU, NULL, 0, &v, &err),
	                 -ENAMETOOLONG);
	ck_assert_ptr_null(v);
	ck_assert_int_eq(err.kind, PLACEFS_E_NAME);
	ck_assert_ptr_nonnull(strstr(err.msg, "view gpu: shard ddd"));
	ck_assert_ptr_nonnull(strstr(err.msg, "longer than 255 bytes"));
	placefs_plan_free(plan);
	placefs_ckpt_free(ck);
	free(src);
}
END_TEST

/* Which top-level names are aux files, and as what. */
START_TEST(test_aux_names)
{
	struct fixture fx;
	char out[PLACEFS_NAME_MAX + 1];

	three_shards();
	open_fixture(&fx, "m", NULL, 0, 0, 0);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "config.json", out), 1);
	ck_assert_str_eq(out, "config.json");
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "tokenizer.model", out), 1);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "100%.txt", out), 1);
	ck_assert_str_eq(out, "100%25.txt");
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, ".hidden", out), 0);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "model-00001-of-00003.safetensors", out), 0);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "stale.safetensors", out), 0);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "model.safetensors.index.json", out), 0);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "x.safetensors.index.json", out), 0);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "bad\nname", out), 0);
	ck_assert_int_eq(placefs_view_aux_name(fx.ck, "", out), 0);
	close_fixture(&fx);
}
END_TEST

/* A hundred shards of many small tensors: sizes agree with the bytes, maps with the images. */
START_TEST(test_many)
{
	struct placefs_strbuf idx;
	struct fixture fx;

	placefs_strbuf_init(&idx);
	mkdir_at("many");
	ck_assert_int_eq(placefs_strbuf_adds(&idx, "{\"weight_map\": {"), 0);
	for (int s = 0; s < 20; s++) {
		struct spec t[40];
		char names[40][32], rel[64];

		for (int i = 0; i < 40; i++) {
			snprintf(names[i], sizeof(names[i]), "s%d.t%d", s, i);
			t[i] = (struct spec){names[i],
			                     (enum placefs_dtype)(1 + (s * 40 + i) % 22),
			                     1,
			                     {(uint64_t)(8 * (1 + (i * 7 + s) % 13))}};
			ck_assert_int_eq(placefs_strbuf_addf(&idx,
			                                     "%s\"%s\": \"s%02d.safetensors\"",
			                                     s || i ? ", " : "", names[i], s),
			                 0);
		}
		snprintf(rel, sizeof(rel), "many/s%02d.safetensors", s);
		write_shard(rel, t, 40, META, 2);
	}
	ck_assert_int_eq(placefs_strbuf_adds(&idx, "}}"), 0);
	text_at("many/model.safetensors.index.json", placefs_strbuf_cstr(&idx));
	placefs_strbuf_release(&idx);
	open_fixture(&fx, "many", NULL, 0, 1, 40);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		check_view_full(&fx, (enum placefs_view_kind)k);
		check_index(&fx, (enum placefs_view_kind)k);
	}
	close_fixture(&fx);
}
END_TEST

static Suite *view_suite(void)
{
	Suite *s = suite_create("view");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_index_and_split);
	tcase_add_test(tc, test_all_is_source);
	tcase_add_test(tc, test_empty_views);
	tcase_add_test(tc, test_prefix);
	tcase_add_test(tc, test_alignment);
	tcase_add_test(tc, test_index_filter);
	tcase_add_test(tc, test_nested_shard);
	tcase_add_test(tc, test_name_too_long);
	tcase_add_test(tc, test_aux_names);
	tcase_add_test(tc, test_many);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(view_suite());
}
