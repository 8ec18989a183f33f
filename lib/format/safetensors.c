/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "format/jsonstrict_i.h"
#include "format/safetensors.h"

/*
 * The checks run in the reference reader's order and the first failure wins
 * (doc/FORMAT.md lists them): header length, UTF-8, JSON and field types,
 * then per tensor in offset order: offsets contiguous from 0, shape x dtype
 * without overflow, whole bytes, size matching the offsets; finally the
 * tensors must end exactly at the end of the file. Each message ends with the
 * reference reader's wording in parentheses so the two can be compared.
 */

#define META_KEY     "__metadata__"
#define STR_(x)      #x
#define STR(x)       STR_(x)
#define NDIM_MAX_STR STR(PLACEFS_ST_NDIM_MAX)
#define SNIFF_MAX    64
#define LFS_MAGIC    "version https://git-lfs"
#define TRIM_MIN     (1u << 20) /* header bytes from which the tree's pages are returned */

struct placefs_st_header {
	uint64_t n;
	uint64_t file_size;
	struct placefs_st_tensor *tensors;
	size_t count;
	uint64_t *shapes;
	char *strings;
	int has_meta;
	struct placefs_st_meta *meta;
	size_t meta_count;
};

static int fmt_fail(struct placefs_error *err, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static int fmt_fail(struct placefs_error *err, const char *fmt, ...)
{
	char msg[PLACEFS_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT, "%s", msg);
}

static int nomem(struct placefs_error *err, const char *file)
{
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM,
	                         "%s: out of memory reading the safetensors header", file);
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static bool ascii_prefix_nocase(const uint8_t *p, size_t len, const char *lit)
{
	size_t n = strlen(lit);

	if (len < n)
		return false;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];

		if (c >= 'A' && c <= 'Z')
			c = (uint8_t)(c - 'A' + 'a');
		if (c != (uint8_t)lit[i])
			return false;
	}
	return true;
}

/*
 * Common wrong files: a Git LFS pointer (the repository was cloned without
 * LFS) and an HTML page (an error page saved as the file). Their first 8
 * bytes read as a header length far above the cap, so recognising them first
 * never hides a real header.
 */
static int sniff(const char *file, const uint8_t *p, size_t len, struct placefs_error *err)
{
	size_t i = 0;

	if (!p)
		return 0;
	if (len >= strlen(LFS_MAGIC) && memcmp(p, LFS_MAGIC, strlen(LFS_MAGIC)) == 0)
		return fmt_fail(err,
		                "%s: a Git LFS pointer, not safetensors data; run `git lfs pull`",
		                file);
	while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n' ||
	                   p[i] == '\f' || p[i] == '\v'))
		i++;
	if (ascii_prefix_nocase(p + i, len - i, "<!doctype") ||
	    ascii_prefix_nocase(p + i, len - i, "<html"))
		return fmt_fail(err, "%s: an HTML page, not safetensors data (a failed download?)",
		                file);
	return 0;
}

int placefs_st_header_length(const char *file, const uint8_t *prefix, size_t prefix_len,
                             uint64_t file_size, uint64_t *n, struct placefs_error *err)
{
	uint64_t len;
	int rc;

	if (!file)
		file = "(unknown)";
	if (prefix_len > file_size)
		prefix_len = (size_t)file_size;
	rc = sniff(file, prefix, prefix_len, err);
	if (rc)
		return rc;
	if (file_size < 8)
		return fmt_fail(err,
		                "%s: header too small: the file is %" PRIu64
		                " bytes, shorter than the 8-byte header length",
		                file, file_size);
	if (!prefix || prefix_len < 8)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: placefs_st_header_length needs the first 8 bytes",
		                         file);
	len = le64(prefix);
	/*
	 * No writer makes a header of 4 GiB or more: such a "length" is some other
	 * file's first bytes (text, a secret behind a link), never echoed.
	 */
	if (len >> 32)
		return fmt_fail(err,
		                "%s: not a safetensors file: its first 8 bytes are not a header "
		                "length (header too large)",
		                file);
	if (len > PLACEFS_ST_HEADER_MAX)
		return fmt_fail(err,
		                "%s: header too large: the header length is %" PRIu64
		                " bytes, more than the limit of %llu",
		                file, len, PLACEFS_ST_HEADER_MAX);
	/* len <= 1e8, so 8 + len cannot overflow. */
	if (8 + len > file_size)
		return fmt_fail(err,
		                "%s: invalid header length: a %" PRIu64
		                "-byte header needs a file of at least %" PRIu64
		                " bytes, but the file is %" PRIu64 " bytes",
		                file, len, 8 + len, file_size);
	*n = len;
	return 0;
}

/* "[3, 4]", cut with ", ..." when long. */
static const char *fmt_shape(char *buf, size_t size, const uint64_t *shape, uint32_t ndim)
{
	size_t o = 0;

	o += (size_t)snprintf(buf, size, "[");
	for (uint32_t i = 0; i < ndim; i++) {
		char num[32];
		int w = snprintf(num, sizeof(num), "%s%" PRIu64, i ? ", " : "", shape[i]);

		if (i >= 8 || o + (size_t)w + 6 >= size) {
			o += (size_t)snprintf(buf + o, size - o, "%s...", i ? ", " : "");
			break;
		}
		memcpy(buf + o, num, (size_t)w + 1);
		o += (size_t)w;
	}
	snprintf(buf + o, size - o, "]");
	return buf;
}

struct parse_state {
	const char *file;
	struct placefs_error *err;
	const struct placefs_json *js;
	struct placefs_st_header *h;
	char *str_next;
	uint64_t *shape_next;
};

static int hdr_fail(struct parse_state *s, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* A wrong type or value in the JSON: the reference reports InvalidHeaderDeserialization. */
static int hdr_fail(struct parse_state *s, const char *fmt, ...)
{
	char msg[PLACEFS_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return placefs_error_set(s->err, -EINVAL, PLACEFS_E_FORMAT,
	                         "%s: invalid JSON in header: %s", s->file, msg);
}

static const char *pool_copy(struct parse_state *s, const char *str)
{
	size_t n = strlen(str) + 1;
	char *d = s->str_next;

	memcpy(d, str, n);
	s->str_next += n;
	return d;
}

static int parse_meta(struct parse_state *s, const cJSON *v)
{
	char q[PLACEFS_JSON_QUOTE_MAX];

	if (cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsObject(v))
		return hdr_fail(s,
		                "\"" META_KEY "\" is %s; it must be an object of strings or null",
		                placefs_json_type_name(v));
	s->h->has_meta = 1;
	for (const cJSON *m = v->child; m; m = m->next) {
		struct placefs_st_meta *e = &s->h->meta[s->h->meta_count];

		if (!cJSON_IsString(m))
			return hdr_fail(s, "\"" META_KEY "\" value of %s is %s, not a string",
			                placefs_json_quote(q, sizeof(q), m->string),
			                placefs_json_type_name(m));
		e->key = pool_copy(s, m->string);
		e->value = pool_copy(s, m->valuestring);
		s->h->meta_count++;
	}
	return 0;
}

/* Reads a plain non-negative integer; `what` names it for the message. */
static int get_u64(struct parse_state *s, const char *qname, const cJSON *v, const char *what,
                   size_t i, uint64_t *out)
{
	int rc = placefs_json_u64(s->js, v, out);

	if (rc == -ERANGE)
		return hdr_fail(s, "tensor %s: %s[%zu] does not fit in 64 bits", qname, what, i);
	if (rc)
		return hdr_fail(s, "tensor %s: %s[%zu] is %s, not a non-negative integer", qname,
		                what, i,
		                cJSON_IsNumber(v) ? "a negative or fractional number"
		                                  : placefs_json_type_name(v));
	return 0;
}

static int parse_tensor(struct parse_state *s, const cJSON *v, struct placefs_st_tensor *t)
{
	char q[PLACEFS_JSON_QUOTE_MAX];
	const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
	int rc;

	placefs_json_quote(q, sizeof(q), v->string);
	if (!cJSON_IsObject(v))
		return hdr_fail(s, "tensor %s is %s, not an object", q, placefs_json_type_name(v));
	/* Fields are checked in document order, as the reference reader does. */
	for (const cJSON *f = v->child; f; f = f->next) {
		if (strcmp(f->string, "dtype") == 0) {
			char qd[PLACEFS_JSON_QUOTE_MAX];

			dtype = f;
			if (!cJSON_IsString(f))
				return hdr_fail(s, "tensor %s: dtype is %s, not a string", q,
				                placefs_json_type_name(f));
			t->dtype = placefs_dtype_from_name(f->valuestring, strlen(f->valuestring));
			if (t->dtype == PLACEFS_DT_INVALID)
				return hdr_fail(s, "tensor %s: unknown dtype %s", q,
				                placefs_json_quote(qd, sizeof(qd), f->valuestring));
		} else if (strcmp(f->string, "shape") == 0) {
			size_t nd = 0;

			shape = f;
			if (!cJSON_IsArray(f))
				return hdr_fail(s, "tensor %s: shape is %s, not an array", q,
				                placefs_json_type_name(f));
			for (const cJSON *d = f->child; d; d = d->next)
				nd++;
			if (nd > PLACEFS_ST_NDIM_MAX)
				return hdr_fail(
				        s,
				        "tensor %s: shape has %zu dimensions, more than the "
				        "limit of %d",
				        q, nd, PLACEFS_ST_NDIM_MAX);
			t->ndim = (uint32_t)nd;
			t->shape = nd ? s->shape_next : NULL;
			nd = 0;
			for (const cJSON *d = f->child; d; d = d->next, nd++) {
				rc = get_u64(s, q, d, "shape", nd, &s->shape_next[nd]);
				if (rc)
					return rc;
			}
			s->shape_next += nd;
		} else if (strcmp(f->string, "data_offsets") == 0) {
			const cJSON *b, *e;

			offs = f;
			if (!cJSON_IsArray(f))
				return hdr_fail(s, "tensor %s: data_offsets is %s, not an array", q,
				                placefs_json_type_name(f));
			b = f->child;
			e = b ? b->next : NULL;
			if (!b || !e || e->next) {
				size_t n = 0;

				for (const cJSON *d = f->child; d; d = d->next)
					n++;
				return hdr_fail(
				        s,
				        "tensor %s: data_offsets has %zu element%s; it must "
				        "have exactly 2",
				        q, n, n == 1 ? "" : "s");
			}
			rc = get_u64(s, q, b, "data_offsets", 0, &t->begin);
			if (!rc)
				rc = get_u64(s, q, e, "data_offsets", 1, &t->end);
			if (rc)
				return rc;
		}
		/* Other fields are accepted and ignored, as by the reference reader. */
	}
	if (!dtype)
		return hdr_fail(s, "tensor %s: missing field \"dtype\"", q);
	if (!shape)
		return hdr_fail(s, "tensor %s: missing field \"shape\"", q);
	if (!offs)
		return hdr_fail(s, "tensor %s: missing field \"data_offsets\"", q);
	t->name = pool_copy(s, v->string);
	return 0;
}

static int tensor_cmp(const void *a, const void *b)
{
	const struct placefs_st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	/* Only zero-size tensors can tie in a valid file; name order keeps it stable. */
	return strcmp(x->name, y->name);
}

static int check_offsets(const char *file, struct placefs_st_header *h, struct placefs_error *err)
{
	uint64_t start = 0, total;
	char q[PLACEFS_JSON_QUOTE_MAX], q2[PLACEFS_JSON_QUOTE_MAX];
	const char *prev = NULL;

	for (size_t i = 0; i < h->count; i++) {
		struct placefs_st_tensor *t = &h->tensors[i];
		unsigned bits = placefs_dtype_bits(t->dtype);
		uint64_t elems = 1, nbits;
		bool ovf = false;
		char shp[160];

		placefs_json_quote(q, sizeof(q), t->name);
		if (t->end < t->begin)
			return fmt_fail(err,
			                "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
			                "] end before they begin (invalid offset for tensor)",
			                file, q, t->begin, t->end);
		if (t->begin != start) {
			if (!prev)
				return fmt_fail(err,
				                "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
				                "]: the first tensor must start at 0 (invalid "
				                "offset for tensor)",
				                file, q, t->begin, t->end);
			placefs_json_quote(q2, sizeof(q2), prev);
			if (t->begin > start)
				return fmt_fail(err,
				                "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
				                "] leave a gap after tensor %s, which ends at "
				                "%" PRIu64 " (invalid offset for tensor)",
				                file, q, t->begin, t->end, q2, start);
			return fmt_fail(err,
			                "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
			                "] overlap tensor %s, which ends at %" PRIu64
			                " (invalid offset for tensor)",
			                file, q, t->begin, t->end, q2, start);
		}
		start = t->end;
		prev = t->name;
		/* A left fold from 1 with no shortcut on 0, exactly as the reference. */
		for (uint32_t d = 0; d < t->ndim; d++) {
			if (!ovf && __builtin_mul_overflow(elems, t->shape[d], &elems))
				ovf = true;
		}
		if (ovf || __builtin_mul_overflow(elems, (uint64_t)bits, &nbits))
			return fmt_fail(err,
			                "%s: tensor %s: %s %s: overflow computing buffer size from "
			                "shape and/or element type",
			                file, q, placefs_dtype_name(t->dtype),
			                fmt_shape(shp, sizeof(shp), t->shape, t->ndim));
		if (nbits % 8 != 0)
			return fmt_fail(err,
			                "%s: tensor %s: %s %s is %" PRIu64
			                " bits, not a whole number of bytes (misaligned slice)",
			                file, q, placefs_dtype_name(t->dtype),
			                fmt_shape(shp, sizeof(shp), t->shape, t->ndim), nbits);
		if (t->end - t->begin != nbits / 8)
			return fmt_fail(err,
			                "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
			                "] hold %" PRIu64 " bytes but %s %s needs %" PRIu64
			                " (invalid shape, data type, or offset for tensor)",
			                file, q, t->begin, t->end, t->end - t->begin,
			                placefs_dtype_name(t->dtype),
			                fmt_shape(shp, sizeof(shp), t->shape, t->ndim), nbits / 8);
		t->nbytes = t->end - t->begin;
	}
	if (__builtin_add_overflow(8 + h->n, start, &total))
		return fmt_fail(err,
		                "%s: the tensors end past 2^64 bytes but the file is %" PRIu64
		                " bytes (incomplete metadata, file not fully covered)",
		                file, h->file_size);
	if (total > h->file_size)
		return fmt_fail(err,
		                "%s: truncated: the header and tensors need %" PRIu64
		                " bytes but the file is %" PRIu64 " bytes, %" PRIu64
		                " short (incomplete metadata, file not fully covered)",
		                file, total, h->file_size, total - h->file_size);
	if (total < h->file_size)
		return fmt_fail(err,
		                "%s: %" PRIu64
		                " trailing byte%s after the last tensor: expected %" PRIu64
		                " bytes, the file is %" PRIu64
		                " (incomplete metadata, file not fully covered)",
		                file, h->file_size - total, h->file_size - total == 1 ? "" : "s",
		                total, h->file_size);
	for (size_t i = 0; i < h->count; i++)
		h->tensors[i].offset = 8 + h->n + h->tensors[i].begin;
	return 0;
}

int placefs_st_header_parse(const char *file, const char *json, size_t n, uint64_t file_size,
                            struct placefs_st_header **out, struct placefs_error *err)
{
	static const struct placefs_json_limits limits = {
	        .array_max = PLACEFS_ST_NDIM_MAX,
	        .array_owner = "tensor",
	        .array_rule = "placefs accepts at most " NDIM_MAX_STR " dimensions per tensor",
	        .bytes_per_token = PLACEFS_ST_BYTES_PER_TOKEN,
	        .tokens_extra = PLACEFS_ST_TOKENS_EXTRA,
	};
	struct placefs_json *js = NULL;
	struct placefs_st_header *h = NULL;
	struct parse_state s = {0};
	const cJSON *root;
	size_t ntensors = 0, nmeta = 0, nshape = 0, nstr = 0;
	int rc;

	if (!file)
		file = "(unknown)";
	*out = NULL;
	/* The length checks are repeated for callers that skip header_length. */
	if (n > PLACEFS_ST_HEADER_MAX)
		return fmt_fail(err,
		                "%s: header too large: the header length is %zu bytes, more than "
		                "the limit of %llu",
		                file, n, PLACEFS_ST_HEADER_MAX);
	if (file_size < 8 || n > file_size - 8)
		return fmt_fail(err,
		                "%s: invalid header length: a %zu-byte header does not fit in a "
		                "file of %" PRIu64 " bytes",
		                file, n, file_size);

	rc = placefs_json_parse_limited(file, json, n, PLACEFS_E_FORMAT, &limits, &js, err);
	if (rc)
		return rc;
	root = placefs_json_root(js);

	/* Pass 1: sizes, so that everything is allocated once. */
	for (const cJSON *m = root->child; m; m = m->next) {
		if (strcmp(m->string, META_KEY) == 0) {
			if (!cJSON_IsObject(m))
				continue;
			for (const cJSON *e = m->child; e; e = e->next) {
				nmeta++;
				nstr += strlen(e->string) + 1;
				if (cJSON_IsString(e))
					nstr += strlen(e->valuestring) + 1;
			}
			continue;
		}
		ntensors++;
		nstr += strlen(m->string) + 1;
		if (!cJSON_IsObject(m))
			continue;
		for (const cJSON *f = m->child; f; f = f->next) {
			if (strcmp(f->string, "shape") == 0 && cJSON_IsArray(f)) {
				for (const cJSON *d = f->child; d; d = d->next)
					nshape++;
			}
		}
	}

	h = calloc(1, sizeof(*h));
	if (!h)
		goto nomem;
	h->n = n;
	h->file_size = file_size;
	h->tensors = calloc(ntensors ? ntensors : 1, sizeof(*h->tensors));
	h->meta = calloc(nmeta ? nmeta : 1, sizeof(*h->meta));
	h->shapes = calloc(nshape ? nshape : 1, sizeof(*h->shapes));
	h->strings = malloc(nstr ? nstr : 1);
	if (!h->tensors || !h->meta || !h->shapes || !h->strings)
		goto nomem;

	/* Pass 2: types and values, in document order. */
	s.file = file;
	s.err = err;
	s.js = js;
	s.h = h;
	s.str_next = h->strings;
	s.shape_next = h->shapes;
	for (const cJSON *m = root->child; m; m = m->next) {
		if (strcmp(m->string, META_KEY) == 0)
			rc = parse_meta(&s, m);
		else
			rc = parse_tensor(&s, m, &h->tensors[h->count++]);
		if (rc)
			goto fail;
	}
	placefs_json_free(js);
	js = NULL;
	/*
	 * The tree of a large header is many small blocks that malloc keeps for
	 * reuse; give their pages back, or a mount would hold them for its life.
	 */
	if (n >= TRIM_MIN)
		malloc_trim(0);

	qsort(h->tensors, h->count, sizeof(*h->tensors), tensor_cmp);
	rc = check_offsets(file, h, err);
	if (rc)
		goto fail;
	*out = h;
	return 0;

nomem:
	rc = nomem(err, file);
fail:
	placefs_json_free(js);
	placefs_st_header_free(h);
	return rc;
}

int placefs_st_parse_buffer(const char *file, const uint8_t *data, size_t len,
                            struct placefs_st_header **out, struct placefs_error *err)
{
	uint64_t n;
	int rc;

	*out = NULL;
	rc = placefs_st_header_length(file, data, len < SNIFF_MAX ? len : SNIFF_MAX, len, &n, err);
	if (rc)
		return rc;
	return placefs_st_header_parse(file, (const char *)data + 8, (size_t)n, len, out, err);
}

static int read_fail(struct placefs_error *err, const char *file, ssize_t r, uint64_t off)
{
	if (r < 0)
		return placefs_error_set(err, (int)r, PLACEFS_E_IO,
		                         "%s: cannot read the safetensors header: %s", file,
		                         strerror((int)-r));
	return placefs_error_set(err, -EIO, PLACEFS_E_IO,
	                         "%s: unexpected end of file at byte %" PRIu64
	                         " while reading the header (did the file change?)",
	                         file, off + (uint64_t)r);
}

int placefs_st_read_fd(const char *file, int fd, uint64_t file_size, struct placefs_st_header **out,
                       struct placefs_error *err)
{
	uint8_t prefix[SNIFF_MAX];
	size_t want = file_size < SNIFF_MAX ? (size_t)file_size : SNIFF_MAX;
	char *buf = NULL;
	uint64_t n;
	ssize_t r;
	int rc;

	if (!file)
		file = "(unknown)";
	*out = NULL;
	if (fd < 0)
		return placefs_error_set(err, -EBADF, PLACEFS_E_USAGE,
		                         "%s: placefs_st_read_fd: bad file descriptor", file);
	r = placefs_io_pread_full(fd, prefix, want, 0);
	if (r < 0 || (size_t)r < want)
		return read_fail(err, file, r, 0);
	rc = placefs_st_header_length(file, prefix, want, file_size, &n, err);
	if (rc)
		return rc;
	/* n is now at most PLACEFS_ST_HEADER_MAX and fits in the file. */
	buf = malloc(n ? (size_t)n : 1);
	if (!buf)
		return nomem(err, file);
	r = placefs_io_pread_full(fd, buf, (size_t)n, 8);
	if (r < 0 || (uint64_t)r < n) {
		rc = read_fail(err, file, r, 8);
		goto out;
	}
	rc = placefs_st_header_parse(file, buf, (size_t)n, file_size, out, err);
out:
	free(buf);
	return rc;
}

void placefs_st_header_free(struct placefs_st_header *h)
{
	if (!h)
		return;
	free(h->tensors);
	free(h->meta);
	free(h->shapes);
	free(h->strings);
	free(h);
}

uint64_t placefs_st_header_json_len(const struct placefs_st_header *h)
{
	return h->n;
}

uint64_t placefs_st_header_data_start(const struct placefs_st_header *h)
{
	return 8 + h->n;
}

size_t placefs_st_header_tensor_count(const struct placefs_st_header *h)
{
	return h->count;
}

const struct placefs_st_tensor *placefs_st_header_tensor(const struct placefs_st_header *h,
                                                         size_t i)
{
	if (i >= h->count)
		return NULL;
	return &h->tensors[i];
}

int placefs_st_header_has_meta(const struct placefs_st_header *h)
{
	return h->has_meta;
}

size_t placefs_st_header_meta_count(const struct placefs_st_header *h)
{
	return h->meta_count;
}

const struct placefs_st_meta *placefs_st_header_meta(const struct placefs_st_header *h, size_t i)
{
	if (i >= h->meta_count)
		return NULL;
	return &h->meta[i];
}
