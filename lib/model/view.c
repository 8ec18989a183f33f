/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/index.h"
#include "common/io.h"
#include "common/name.h"
#include "format/safetensors.h"
#include "model/view.h"

#define META_KEY "__metadata__"

/* A maximal byte range of a view file that is one byte range of its shard. */
struct run {
	uint64_t voff; /* absolute offset in the view file */
	uint64_t src;  /* absolute offset in the shard */
	uint64_t len;
};

struct vfile {
	char *name;               /* encoded shard path */
	uint32_t shard;           /* ckpt shard index */
	size_t first;             /* first tensor in v->order */
	size_t count;             /* tensors */
	uint64_t hdr;             /* 8 + N */
	uint64_t size;            /* hdr + payload */
	size_t run0;              /* first run in v->runs */
	size_t nruns;             /* runs */
	uint64_t jsonlen;         /* JSON bytes before padding */
	_Atomic(uint8_t *) bytes; /* the header, once formatted */
};

/* A member of the source index's "metadata" object, as written (raw JSON text). */
struct meta_member {
	const char *key; /* with its quotes */
	size_t keylen;
	const char *val;
	size_t vallen;
	int total_size; /* the key is "total_size" */
};

struct placefs_view {
	enum placefs_view_kind kind;
	const struct placefs_ckpt *ck;
	const struct placefs_plan *plan;
	struct vfile *files;
	size_t nfiles;
	size_t *order;   /* plan entry indexes, file after file, in each file's order */
	uint64_t *begin; /* per order entry: its offset in its file's data buffer */
	size_t ntensors;
	struct run *runs;
	size_t nruns;
	uint64_t total;
	/* the index */
	int has_index;
	const char *index_name;
	char *meta_text; /* a copy of the source index's metadata members */
	struct meta_member *meta;
	size_t nmeta;
	uint64_t index_len;
	_Atomic(char *) index_bytes;
};

static int nomem(struct placefs_error *err)
{
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
}

const char *placefs_view_kind_name(enum placefs_view_kind kind)
{
	switch (kind) {
	case PLACEFS_VIEW_ALL: return "all";
	case PLACEFS_VIEW_GPU: return "gpu";
	case PLACEFS_VIEW_CPU: return "cpu";
	}
	return "?";
}

/* ---- the formatter: one code path counts and writes ----------------------------- */

/* With buf NULL it only counts; with buf it writes (buf holds what the count said). */
struct emit {
	char *buf;
	size_t len;
};

static void put(struct emit *e, const void *p, size_t n)
{
	if (e->buf)
		memcpy(e->buf + e->len, p, n);
	e->len += n;
}

static void puts_(struct emit *e, const char *s)
{
	put(e, s, strlen(s));
}

static void put_u64(struct emit *e, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(e, tmp + i, sizeof(tmp) - i);
}

/* A JSON string literal (RFC 8259): '"', '\\' and control bytes escaped, other bytes kept. */
static void put_jstr(struct emit *e, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s, *run = p;

	put(e, "\"", 1);
	for (;;) {
		char esc[6];
		size_t n = 2;

		while (*p >= 0x20 && *p != '"' && *p != '\\')
			p++;
		if (!*p)
			break;
		put(e, run, (size_t)(p - run));
		run = p + 1;
		esc[0] = '\\';
		switch (*p) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[*p >> 4];
			esc[5] = hex[*p & 15];
			n = 6;
		}
		put(e, esc, n);
		p++;
	}
	put(e, run, (size_t)(p - run));
	put(e, "\"", 1);
}

/* The header JSON of file f (unpadded): __metadata__ first, as the reference writer puts it. */
static void emit_header_json(const struct placefs_view *v, const struct vfile *f, struct emit *e)
{
	const struct placefs_st_header *h = placefs_ckpt_shard(v->ck, f->shard)->header;
	int first = 1;

	put(e, "{", 1);
	if (placefs_st_header_has_meta(h)) {
		size_t nm = placefs_st_header_meta_count(h);

		puts_(e, "\"" META_KEY "\":{");
		for (size_t j = 0; j < nm; j++) {
			const struct placefs_st_meta *m = placefs_st_header_meta(h, j);

			if (j)
				put(e, ",", 1);
			put_jstr(e, m->key);
			put(e, ":", 1);
			put_jstr(e, m->value);
		}
		put(e, "}", 1);
		first = 0;
	}
	for (size_t j = 0; j < f->count; j++) {
		const struct placefs_tensor *t =
		        placefs_plan_entry(v->plan, v->order[f->first + j])->tensor;
		uint64_t b = v->begin[f->first + j];

		if (!first)
			put(e, ",", 1);
		first = 0;
		put_jstr(e, t->name);
		puts_(e, ":{\"dtype\":\"");
		puts_(e, placefs_dtype_name(t->dtype));
		puts_(e, "\",\"shape\":[");
		for (uint32_t d = 0; d < t->ndim; d++) {
			if (d)
				put(e, ",", 1);
			put_u64(e, t->shape[d]);
		}
		puts_(e, "],\"data_offsets\":[");
		put_u64(e, b);
		put(e, ",", 1);
		put_u64(e, b + t->nbytes);
		puts_(e, "]}");
	}
	put(e, "}", 1);
}

/* The index; `sorted` (NULL: view order, for counting) lists the order entries by name. */
static void emit_index(const struct placefs_view *v, const size_t *sorted, struct emit *e)
{
	int have_total = 0;

	puts_(e, "{\n  \"metadata\": {\n    ");
	for (size_t i = 0; i < v->nmeta; i++)
		have_total |= v->meta[i].total_size;
	if (!have_total) {
		puts_(e, "\"total_size\": ");
		put_u64(e, v->total);
	}
	for (size_t i = 0; i < v->nmeta; i++) {
		const struct meta_member *m = &v->meta[i];

		if (i || !have_total)
			puts_(e, ",\n    ");
		put(e, m->key, m->keylen);
		puts_(e, ": ");
		if (m->total_size)
			put_u64(e, v->total);
		else
			put(e, m->val, m->vallen);
	}
	puts_(e, "\n  },\n  \"weight_map\": {");
	if (!sorted) {
		/* Counting: the length does not depend on the order; file after file. */
		for (size_t fi = 0; fi < v->nfiles; fi++) {
			const struct vfile *f = &v->files[fi];
			struct emit fe = {NULL, 0};

			put_jstr(&fe, f->name);
			for (size_t j = 0; j < f->count; j++) {
				put_jstr(e, placefs_plan_entry(v->plan, v->order[f->first + j])
				                    ->tensor->name);
				puts_(e, ",\n    : ");
			}
			e->len += f->count * fe.len;
		}
		/* One ",\n    " too many counted (the first entry has "\n    "). */
		if (v->ntensors)
			e->len -= 1;
		puts_(e, v->ntensors ? "\n  }\n}\n" : "}\n}\n");
		return;
	}
	for (size_t i = 0; i < v->ntensors; i++) {
		size_t k = sorted[i];
		const struct placefs_plan_entry *pe = placefs_plan_entry(v->plan, v->order[k]);
		size_t lo = 0, hi = v->nfiles;

		/* The file holding order entry k: the last one starting at or before it. */
		while (hi - lo > 1) {
			size_t mid = lo + (hi - lo) / 2;

			if (v->files[mid].first <= k)
				lo = mid;
			else
				hi = mid;
		}
		puts_(e, i ? ",\n    " : "\n    ");
		put_jstr(e, pe->tensor->name);
		puts_(e, ": ");
		put_jstr(e, v->files[lo].name);
	}
	puts_(e, v->ntensors ? "\n  }\n}\n" : "}\n}\n");
}

/* ---- the source index's metadata, from its validated text ----------------------- */

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* p at '"': returns the byte after the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *end)
{
	for (p++; p < end;) {
		const char *q = memchr(p, '"', (size_t)(end - p));
		const char *b;

		if (!q)
			return NULL;
		/* Escaped when an odd number of backslashes precede it. */
		for (b = q; b > p && b[-1] == '\\'; b--)
			;
		if ((q - b) % 2 == 0)
			return q + 1;
		p = q + 1;
	}
	return NULL;
}

/* Skips one JSON value (the text is valid JSON: lib/index accepted it). NULL if cut short. */
static const char *skip_value(const char *p, const char *end)
{
	size_t depth = 0;

	if (p >= end)
		return NULL;
	if (*p == '"')
		return skip_string(p, end);
	if (*p != '{' && *p != '[') {
		while (p < end && !strchr(",}] \t\r\n", *p))
			p++;
		return p;
	}
	while (p < end) {
		if (*p == '"') {
			p = skip_string(p, end);
			if (!p)
				return NULL;
			continue;
		}
		if (*p == '{' || *p == '[')
			depth++;
		else if ((*p == '}' || *p == ']') && --depth == 0)
			return p + 1;
		p++;
	}
	return NULL;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Whether the string literal [p, q) (quotes included) decodes to the ASCII `lit`. */
static int key_is(const char *p, const char *q, const char *lit)
{
	for (p++, q--; p < q; p++, lit++) {
		int c = (unsigned char)*p;

		if (c == '\\' && p + 1 < q) {
			p++;
			switch (*p) {
			case 'u':
				if (p + 4 >= q)
					return 0;
				c = 0;
				for (int k = 1; k <= 4; k++) {
					int h = hexval(p[k]);

					if (h < 0)
						return 0;
					c = c * 16 + h;
				}
				p += 4;
				break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			default: c = (unsigned char)*p;
			}
		}
		if (!*lit || c != (unsigned char)*lit)
			return 0;
	}
	return *lit == '\0';
}

/*
 * Whether `obj` (len bytes) is a JSON object by lib/index's strict rules
 * (UTF-8, no duplicate keys...): it is parsed as the metadata of an index
 * with an empty weight_map.
 */
static int strict_object(const char *obj, size_t len, const char *disp, struct placefs_error *err)
{
	static const char pre[] = "{\"weight_map\": {}, \"metadata\": ";
	struct placefs_index *idx = NULL;
	char *doc = malloc(sizeof(pre) + len + 2);
	int rc;

	if (!doc)
		return nomem(err);
	memcpy(doc, pre, sizeof(pre) - 1);
	memcpy(doc + sizeof(pre) - 1, obj, len);
	memcpy(doc + sizeof(pre) - 1 + len, "}", 2);
	rc = placefs_index_parse(disp, doc, sizeof(pre) + len, &idx, err);
	placefs_index_free(idx);
	free(doc);
	return rc;
}

/*
 * Copies the members of the top-level "metadata" object of the index text
 * into v->meta_text / v->meta. The scan stays within the text whatever it
 * holds; the object found is validated with the strict rules before it is
 * used (the whole index was validated by lib/ckpt when it was opened:
 * parsing 100,000 names again per view would cost more than the views).
 */
static int take_metadata(struct placefs_view *v, const char *text, size_t len, const char *disp,
                         struct placefs_error *err)
{
	const char *end = text + len, *p, *ms = NULL, *me = NULL;
	size_t n = 0;
	int rc;

	p = skip_ws(text, end);
	if (p >= end || *p != '{')
		goto bad;
	p = skip_ws(p + 1, end);
	while (p < end && *p == '"') {
		const char *k = p, *ke = skip_string(p, end), *vs, *ve;

		if (!ke)
			goto bad;
		p = skip_ws(ke, end);
		if (p >= end || *p != ':')
			goto bad;
		vs = skip_ws(p + 1, end);
		ve = skip_value(vs, end);
		if (!ve)
			goto bad;
		if (key_is(k, ke, "metadata") && *vs == '{') {
			ms = vs;
			me = ve;
		}
		p = skip_ws(ve, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	if (!ms)
		return 0; /* absent or null */
	rc = strict_object(ms, (size_t)(me - ms), disp, err);
	if (rc)
		return rc;
	v->meta_text = strndup(ms, (size_t)(me - ms));
	if (!v->meta_text)
		return nomem(err);
	/* Members: at most one per ':' in the text, a bound for the array. */
	for (p = v->meta_text; *p; p++)
		n += *p == ':';
	v->meta = calloc(n ? n : 1, sizeof(*v->meta));
	if (!v->meta)
		return nomem(err);
	end = v->meta_text + (me - ms);
	p = skip_ws(v->meta_text + 1, end);
	while (p < end && *p == '"') {
		struct meta_member *m;
		const char *ke = skip_string(p, end), *vs, *ve;

		if (!ke || v->nmeta >= n)
			goto bad;
		m = &v->meta[v->nmeta++];
		m->key = p;
		m->keylen = (size_t)(ke - p);
		m->total_size = key_is(p, ke, "total_size");
		p = skip_ws(ke, end);
		if (p >= end || *p != ':')
			goto bad;
		vs = skip_ws(p + 1, end);
		ve = skip_value(vs, end);
		if (!ve)
			goto bad;
		m->val = vs;
		m->vallen = (size_t)(ve - vs);
		p = skip_ws(ve, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	return 0;
bad:
	return placefs_error_set(err, -EINVAL, PLACEFS_E_INDEX,
	                         "%s: cannot find the members of \"metadata\" again", disp);
}

/* ---- building a view ----------------------------------------------------------------- */

static unsigned align_of(enum placefs_dtype dt)
{
	unsigned b = placefs_dtype_bits(dt) / 8;

	return b == 0 ? 1 : b > 8 ? 8 : b;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Sorts file f's tensors by element size, largest first, keeping their
 * order otherwise: each key is (8 - size) above the position. 0 or -ENOMEM.
 */
static int sort_by_align(struct placefs_view *v, struct vfile *f)
{
	uint64_t *key = malloc(f->count * sizeof(*key));
	size_t *tmp = malloc(f->count * sizeof(*tmp));

	if (!key || !tmp) {
		free(key);
		free(tmp);
		return -ENOMEM;
	}
	for (size_t j = 0; j < f->count; j++) {
		size_t e = v->order[f->first + j];

		tmp[j] = e;
		key[j] = (uint64_t)(8 - align_of(placefs_plan_entry(v->plan, e)->tensor->dtype))
		                 << 56 |
		         (uint64_t)j;
	}
	qsort(key, f->count, sizeof(*key), cmp_u64);
	for (size_t j = 0; j < f->count; j++)
		v->order[f->first + j] = tmp[key[j] & ((1ULL << 56) - 1)];
	free(key);
	free(tmp);
	return 0;
}

static int cmp_offset(const void *a, const void *b, void *ctx)
{
	const struct placefs_plan *plan = ctx;
	const struct placefs_tensor *x = placefs_plan_entry(plan, *(const size_t *)a)->tensor;
	const struct placefs_tensor *y = placefs_plan_entry(plan, *(const size_t *)b)->tensor;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* Lays out file f's tensors: offsets, alignment, runs counted. 0 or -EOVERFLOW. */
static int layout(struct placefs_view *v, struct vfile *f, int *aligned)
{
	uint64_t off = 0;

	*aligned = 1;
	for (size_t j = 0; j < f->count; j++) {
		const struct placefs_tensor *t =
		        placefs_plan_entry(v->plan, v->order[f->first + j])->tensor;

		if (off % align_of(t->dtype))
			*aligned = 0;
		v->begin[f->first + j] = off;
		if (__builtin_add_overflow(off, t->nbytes, &off))
			return -EOVERFLOW;
	}
	return 0;
}

static int in_view(const struct placefs_view *v, const struct placefs_plan_entry *e)
{
	if (v->kind == PLACEFS_VIEW_ALL)
		return 1;
	return e->placement ==
	       (v->kind == PLACEFS_VIEW_CPU ? PLACEFS_PLACE_CPU : PLACEFS_PLACE_GPU);
}

static int build_files(struct placefs_view *v, struct placefs_error *err)
{
	size_t ns = placefs_ckpt_shard_count(v->ck), np = placefs_plan_count(v->plan);
	size_t *cnt = NULL, *pos = NULL, k = 0;
	int rc = 0;

	cnt = calloc(ns + 1, sizeof(*cnt));
	pos = calloc(ns + 1, sizeof(*pos));
	if (!cnt || !pos) {
		rc = nomem(err);
		goto out;
	}
	for (size_t i = 0; i < np; i++) {
		const struct placefs_plan_entry *e = placefs_plan_entry(v->plan, i);

		if (!in_view(v, e) || e->tensor->shard >= ns)
			continue;
		cnt[e->tensor->shard]++;
		v->ntensors++;
	}
	for (size_t s = 0; s < ns; s++)
		v->nfiles += cnt[s] != 0;
	v->order = calloc(v->ntensors ? v->ntensors : 1, sizeof(*v->order));
	v->begin = calloc(v->ntensors ? v->ntensors : 1, sizeof(*v->begin));
	v->files = calloc(v->nfiles ? v->nfiles : 1, sizeof(*v->files));
	if (!v->order || !v->begin || !v->files) {
		rc = nomem(err);
		goto out;
	}
	/* A counting sort by shard: each file's entries in plan (checkpoint) order. */
	for (size_t s = 0, at = 0; s < ns; s++) {
		pos[s] = at;
		at += cnt[s];
		if (!cnt[s])
			continue;
		v->files[k].shard = (uint32_t)s;
		v->files[k].first = pos[s];
		v->files[k].count = cnt[s];
		k++;
	}
	for (size_t i = 0; i < np; i++) {
		const struct placefs_plan_entry *e = placefs_plan_entry(v->plan, i);

		if (in_view(v, e) && e->tensor->shard < ns)
			v->order[pos[e->tensor->shard]++] = i;
	}
	for (size_t fi = 0; fi < v->nfiles; fi++) {
		struct vfile *f = &v->files[fi];
		const struct placefs_shard *sh = placefs_ckpt_shard(v->ck, f->shard);
		char name[PLACEFS_NAME_MAX + 1];
		struct placefs_error nerr;
		int aligned, sorted = 1;

		placefs_error_clear(&nerr);
		rc = placefs_name_encode(sh->file, name, &nerr);
		if (rc) {
			rc = placefs_error_set(
			        err, rc, PLACEFS_E_NAME,
			        "view %s: shard %s cannot be a file name in the views: %s",
			        placefs_view_kind_name(v->kind), sh->file,
			        rc == -ENAMETOOLONG ? "encoded, it is longer than 255 bytes"
			                            : "it holds a control character");
			goto out;
		}
		f->name = strdup(name);
		if (!f->name) {
			rc = nomem(err);
			goto out;
		}
		/* By source offset (the plan gives that order; made sure of here). */
		for (size_t j = 1; j < f->count && sorted; j++)
			sorted =
			        placefs_plan_entry(v->plan, v->order[f->first + j - 1])
			                ->tensor->offset <=
			        placefs_plan_entry(v->plan, v->order[f->first + j])->tensor->offset;
		if (!sorted) {
			qsort_r(v->order + f->first, f->count, sizeof(*v->order), cmp_offset,
			        (void *)v->plan);
		}
		if (layout(v, f, &aligned) == 0 && !aligned && sort_by_align(v, f) != 0) {
			rc = nomem(err);
			goto out;
		}
		if (layout(v, f, &aligned) != 0) {
			rc = placefs_error_set(err, -EOVERFLOW, PLACEFS_E_FORMAT,
			                       "view %s: shard %s: payload size overflows",
			                       placefs_view_kind_name(v->kind), sh->file);
			goto out;
		}
	}
out:
	free(cnt);
	free(pos);
	return rc;
}

/* Runs of each file, then its header size and file size. */
static int build_runs(struct placefs_view *v, struct placefs_error *err)
{
	size_t cap = v->ntensors ? v->ntensors : 1;

	v->runs = calloc(cap, sizeof(*v->runs));
	if (!v->runs)
		return nomem(err);
	for (size_t fi = 0; fi < v->nfiles; fi++) {
		struct vfile *f = &v->files[fi];
		struct emit e = {NULL, 0};
		uint64_t n, payload = 0;

		emit_header_json(v, f, &e);
		f->jsonlen = e.len;
		n = (e.len + 7) / 8 * 8;
		if (n > PLACEFS_ST_HEADER_MAX)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
			                         "view %s: shard %s: the header would be %" PRIu64
			                         " bytes, over the limit of %llu",
			                         placefs_view_kind_name(v->kind),
			                         placefs_ckpt_shard(v->ck, f->shard)->file, n,
			                         PLACEFS_ST_HEADER_MAX);
		f->hdr = 8 + n;
		f->run0 = v->nruns;
		for (size_t j = 0; j < f->count; j++) {
			const struct placefs_tensor *t =
			        placefs_plan_entry(v->plan, v->order[f->first + j])->tensor;
			struct run *last = f->nruns ? &v->runs[v->nruns - 1] : NULL;
			uint64_t voff;

			if (t->nbytes == 0)
				continue;
			voff = f->hdr + v->begin[f->first + j];
			if (last && last->src + last->len == t->offset &&
			    last->voff + last->len == voff) {
				last->len += t->nbytes;
			} else {
				v->runs[v->nruns++] = (struct run){voff, t->offset, t->nbytes};
				f->nruns++;
			}
			payload += t->nbytes;
		}
		if (__builtin_add_overflow(f->hdr, payload, &f->size) ||
		    __builtin_add_overflow(v->total, payload, &v->total))
			return placefs_error_set(err, -EOVERFLOW, PLACEFS_E_FORMAT,
			                         "view %s: sizes overflow",
			                         placefs_view_kind_name(v->kind));
	}
	return 0;
}

int placefs_view_create(const struct placefs_ckpt *ck, const struct placefs_plan *plan,
                        enum placefs_view_kind kind, const char *index_text, size_t index_len,
                        struct placefs_view **out, struct placefs_error *err)
{
	struct placefs_view *v;
	const char *idx;
	int rc;

	*out = NULL;
	if (kind != PLACEFS_VIEW_ALL && kind != PLACEFS_VIEW_GPU && kind != PLACEFS_VIEW_CPU)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "view: no kind %d",
		                         (int)kind);
	v = calloc(1, sizeof(*v));
	if (!v)
		return nomem(err);
	v->kind = kind;
	v->ck = ck;
	v->plan = plan;
	atomic_init(&v->index_bytes, NULL);
	rc = build_files(v, err);
	if (rc == 0)
		rc = build_runs(v, err);
	if (rc)
		goto fail;
	for (size_t i = 0; i < v->nfiles; i++)
		atomic_init(&v->files[i].bytes, NULL);
	idx = placefs_ckpt_index(ck);
	if (idx) {
		struct emit e = {NULL, 0};

		v->has_index = 1;
		v->index_name = strchr(idx, '/') ? PLACEFS_VIEW_INDEX_NAME : idx;
		if (index_text) {
			rc = take_metadata(v, index_text, index_len, idx, err);
			if (rc)
				goto fail;
		}
		emit_index(v, NULL, &e);
		v->index_len = e.len;
	}
	*out = v;
	return 0;
fail:
	placefs_view_free(v);
	return rc;
}

void placefs_view_free(struct placefs_view *v)
{
	if (!v)
		return;
	for (size_t i = 0; v->files && i < v->nfiles; i++) {
		free(v->files[i].name);
		free(atomic_load(&v->files[i].bytes));
	}
	free(atomic_load(&v->index_bytes));
	free(v->files);
	free(v->order);
	free(v->begin);
	free(v->runs);
	free(v->meta);
	free(v->meta_text);
	free(v);
}

/* ---- accessors -------------------------------------------------------------------- */

enum placefs_view_kind placefs_view_kind(const struct placefs_view *v)
{
	return v->kind;
}

size_t placefs_view_file_count(const struct placefs_view *v)
{
	return v->nfiles;
}

const char *placefs_view_file_name(const struct placefs_view *v, size_t i)
{
	return i < v->nfiles ? v->files[i].name : NULL;
}

uint32_t placefs_view_file_shard(const struct placefs_view *v, size_t i)
{
	return i < v->nfiles ? v->files[i].shard : UINT32_MAX;
}

uint64_t placefs_view_file_size(const struct placefs_view *v, size_t i)
{
	return i < v->nfiles ? v->files[i].size : 0;
}

uint64_t placefs_view_file_header_size(const struct placefs_view *v, size_t i)
{
	return i < v->nfiles ? v->files[i].hdr : 0;
}

size_t placefs_view_file_tensor_count(const struct placefs_view *v, size_t i)
{
	return i < v->nfiles ? v->files[i].count : 0;
}

size_t placefs_view_file_tensor(const struct placefs_view *v, size_t i, size_t j)
{
	return v->order[v->files[i].first + j];
}

long placefs_view_file_find(const struct placefs_view *v, const char *name)
{
	for (size_t i = 0; i < v->nfiles; i++)
		if (strcmp(v->files[i].name, name) == 0)
			return (long)i;
	return -1;
}

size_t placefs_view_tensor_count(const struct placefs_view *v)
{
	return v->ntensors;
}

uint64_t placefs_view_total_bytes(const struct placefs_view *v)
{
	return v->total;
}

int placefs_view_has_index(const struct placefs_view *v)
{
	return v->has_index;
}

const char *placefs_view_index_name(const struct placefs_view *v)
{
	return v->has_index ? v->index_name : NULL;
}

uint64_t placefs_view_index_size(const struct placefs_view *v)
{
	return v->index_len;
}

const uint8_t *placefs_view_header(const struct placefs_view *v, size_t i,
                                   struct placefs_error *err)
{
	struct vfile *f;
	uint8_t *b, *expect = NULL;
	struct emit e;
	uint64_t n;

	if (i >= v->nfiles) {
		placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "view: no file %zu", i);
		return NULL;
	}
	f = (struct vfile *)&v->files[i];
	b = atomic_load_explicit(&f->bytes, memory_order_acquire);
	if (b)
		return b;
	b = malloc((size_t)f->hdr);
	if (!b) {
		nomem(err);
		return NULL;
	}
	n = f->hdr - 8;
	for (int k = 0; k < 8; k++)
		b[k] = (uint8_t)(n >> (8 * k));
	e.buf = (char *)b + 8;
	e.len = 0;
	emit_header_json(v, f, &e);
	/* The counting pass and this one are the same code: the lengths agree. */
	memset(b + 8 + e.len, ' ', (size_t)(f->hdr - 8 - e.len));
	if (!atomic_compare_exchange_strong_explicit(&f->bytes, &expect, b, memory_order_acq_rel,
	                                             memory_order_acquire)) {
		free(b);
		b = expect;
	}
	return b;
}

/* For the weight_map's order: tensor names, byte order. */
static int cmp_name(const void *a, const void *b, void *ctx)
{
	const struct placefs_view *v = ctx;
	const char *x = placefs_plan_entry(v->plan, v->order[*(const size_t *)a])->tensor->name;
	const char *y = placefs_plan_entry(v->plan, v->order[*(const size_t *)b])->tensor->name;

	return strcmp(x, y);
}

const char *placefs_view_index(const struct placefs_view *v, struct placefs_error *err)
{
	char *b, *expect = NULL;
	size_t *sorted;
	struct emit e;

	if (!v->has_index)
		return NULL;
	b = atomic_load_explicit(&((struct placefs_view *)v)->index_bytes, memory_order_acquire);
	if (b)
		return b;
	sorted = malloc((v->ntensors ? v->ntensors : 1) * sizeof(*sorted));
	b = malloc((size_t)v->index_len + 1);
	if (!sorted || !b) {
		free(sorted);
		free(b);
		nomem(err);
		return NULL;
	}
	for (size_t i = 0; i < v->ntensors; i++)
		sorted[i] = i;
	qsort_r(sorted, v->ntensors, sizeof(*sorted), cmp_name, (void *)v);
	e.buf = b;
	e.len = 0;
	emit_index(v, sorted, &e);
	b[e.len] = '\0';
	free(sorted);
	if (!atomic_compare_exchange_strong_explicit(&((struct placefs_view *)v)->index_bytes,
	                                             &expect, b, memory_order_acq_rel,
	                                             memory_order_acquire)) {
		free(b);
		b = expect;
	}
	return b;
}

size_t placefs_view_map(const struct placefs_view *v, size_t i, uint64_t off, uint64_t size,
                        struct placefs_view_piece *out, size_t max, uint64_t *mapped)
{
	const struct vfile *f;
	uint64_t end, done = 0;
	size_t n = 0, lo, hi;

	*mapped = 0;
	if (i >= v->nfiles)
		return 0;
	f = &v->files[i];
	if (off >= f->size || size == 0 || max == 0)
		return 0;
	end = size > f->size - off ? f->size : off + size;
	if (off < f->hdr) {
		uint64_t len = (end < f->hdr ? end : f->hdr) - off;

		out[n++] = (struct placefs_view_piece){PLACEFS_VIEW_SRC_HEADER, off, len};
		done += len;
		off += len;
	}
	/* The run holding `off`: the last one starting at or before it. */
	lo = 0;
	hi = f->nruns;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v->runs[f->run0 + mid].voff <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t r = lo ? lo - 1 : 0; off < end && r < f->nruns && n < max; r++) {
		const struct run *ru = &v->runs[f->run0 + r];
		uint64_t skip, len;

		if (off < ru->voff || off >= ru->voff + ru->len)
			continue;
		skip = off - ru->voff;
		len = ru->len - skip;
		if (len > end - off)
			len = end - off;
		out[n++] = (struct placefs_view_piece){PLACEFS_VIEW_SRC_SHARD, ru->src + skip, len};
		done += len;
		off += len;
	}
	*mapped = done;
	return n;
}

/* ---- the source index ------------------------------------------------------------- */

int placefs_view_read_index(const struct placefs_ckpt *ck, char **text, size_t *len,
                            struct placefs_error *err)
{
	const char *idx = placefs_ckpt_index(ck);
	char *path = NULL, *buf = NULL;
	struct stat st;
	ssize_t got;
	int fd = -1, rc = 0;

	*text = NULL;
	*len = 0;
	if (!idx)
		return 0;
	if (idx[0] == '/')
		path = strdup(idx);
	else if (asprintf(&path, "%s/%s", placefs_ckpt_dir(ck), idx) < 0)
		path = NULL;
	if (!path)
		return nomem(err);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "%s: cannot open the index: %s",
		                       path, strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > PLACEFS_INDEX_MAX) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_INDEX,
		                       "%s: the index is no longer a regular file of at most %llu "
		                       "bytes",
		                       path, PLACEFS_INDEX_MAX);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = nomem(err);
		goto out;
	}
	got = placefs_io_pread_full(fd, buf, (size_t)st.st_size, 0);
	if (got < 0 || (size_t)got != (size_t)st.st_size) {
		rc = placefs_error_set(err, got < 0 ? (int)got : -EIO, PLACEFS_E_IO,
		                       "%s: cannot read the index again: %s", path,
		                       got < 0 ? strerror((int)-got) : "it shrank");
		goto out;
	}
	buf[got] = '\0';
	*text = buf;
	*len = (size_t)got;
	buf = NULL;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

/* ---- aux files ---------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

int placefs_view_aux_name(const struct placefs_ckpt *ck, const char *name,
                          char out[PLACEFS_NAME_MAX + 1])
{
	const char *idx = placefs_ckpt_index(ck);
	struct placefs_error err;

	/* A file source: one shard, named as given, and no directory of its own. */
	if (!placefs_ckpt_is_dir(ck))
		return 0;
	if (!name[0] || name[0] == '.' || ends_with(name, ".safetensors") ||
	    ends_with(name, ".safetensors.index.json") ||
	    strcmp(name, PLACEFS_VIEW_INDEX_NAME) == 0)
		return 0;
	if (idx && strcmp(idx, name) == 0)
		return 0;
	for (size_t i = 0; i < placefs_ckpt_shard_count(ck); i++)
		if (strcmp(placefs_ckpt_shard(ck, i)->file, name) == 0)
			return 0;
	placefs_error_clear(&err);
	return placefs_name_encode(name, out, &err) == 0;
}
