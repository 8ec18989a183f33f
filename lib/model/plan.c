/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/name.h"
#include "model/plan.h"
#include "common/size.h"

/* Most names (and files per name) a duplicate or overlap message lists. */
#define LIST_MAX 3
/* Longest part of one name quoted in a message. */
#define QUOTE_MAX  120
#define RING_ALIGN 4096ULL

struct placefs_plan {
	struct placefs_plan_entry *entries;
	size_t n;
	char *names; /* the encoded file names, NUL-separated */
	const struct placefs_plan_entry **by_fname;
	int has_limit;
	uint64_t limit;
	uint64_t ring;
	uint64_t ring_min;    /* the ring compute_ring() chose: the least ring allowed */
	char ring_origin[64]; /* who set the ring (placefs_plan_set_ring_bytes), or "" */
	struct placefs_plan_totals totals;
};

static const char *tfile(const struct placefs_tensor *t)
{
	return t->file ? t->file : "(unknown file)";
}

/*
 * Appends tensor t to a packed layout whose last tensor is *prev (NULL: none)
 * and which ends at *end: *at is where t starts, *end moves past it and
 * *prev becomes t. t follows *prev directly when it follows it directly in
 * their shard too and the offset keeps t's elements aligned (a multiple of
 * its element size), so neighbours in a shard stay neighbours in the layout
 * and move as one range; otherwise at the next multiple of
 * PLACEFS_PLAN_PACK_ALIGN. -EOVERFLOW past UINT64_MAX.
 */
static int pack(const struct placefs_tensor **prev, uint64_t *end, const struct placefs_tensor *t,
                uint64_t *at)
{
	const struct placefs_tensor *p = *prev;
	unsigned bits = placefs_dtype_bits(t->dtype);
	uint64_t elem = bits >= 8 ? bits / 8 : 1, a;

	if (p && p->shard == t->shard && t->offset >= p->offset &&
	    t->offset - p->offset == p->nbytes && *end % elem == 0) {
		a = *end;
	} else {
		if (__builtin_add_overflow(*end, PLACEFS_PLAN_PACK_ALIGN - 1, &a))
			return -EOVERFLOW;
		a &= ~(uint64_t)(PLACEFS_PLAN_PACK_ALIGN - 1);
	}
	if (__builtin_add_overflow(a, t->nbytes, end))
		return -EOVERFLOW;
	*at = a;
	*prev = t;
	return 0;
}

/* Sort order for duplicate detection: by name, then checkpoint order. */
static int cmp_entry_name(const void *a, const void *b)
{
	const struct placefs_plan_entry *x = *(const struct placefs_plan_entry *const *)a;
	const struct placefs_plan_entry *y = *(const struct placefs_plan_entry *const *)b;
	int c = strcmp(x->tensor->name, y->tensor->name);

	if (c)
		return c;
	return (x > y) - (x < y);
}

static int cmp_entry_fname(const void *a, const void *b)
{
	const struct placefs_plan_entry *x = *(const struct placefs_plan_entry *const *)a;
	const struct placefs_plan_entry *y = *(const struct placefs_plan_entry *const *)b;

	return strcmp(x->fname, y->fname);
}

static int cmp_key_fname(const void *key, const void *elem)
{
	const struct placefs_plan_entry *e = *(const struct placefs_plan_entry *const *)elem;

	return strcmp((const char *)key, e->fname);
}

/*
 * Finds names that occur more than once in the sorted list `v` and reports
 * the first LIST_MAX of them with the files they come from. Returns 0 when
 * every name is unique.
 */
static int check_dups(const struct placefs_plan_entry **v, size_t n, const char *what,
                      enum placefs_errkind kind, struct placefs_error *err)
{
	struct placefs_strbuf sb;
	size_t shown = 0, more = 0, i = 0;
	int rc = 0;

	placefs_strbuf_init(&sb);
	while (i < n) {
		size_t j = i + 1;

		while (j < n && strcmp(v[i]->tensor->name, v[j]->tensor->name) == 0)
			j++;
		if (j - i < 2) {
			i = j;
			continue;
		}
		if (shown == LIST_MAX) {
			more++;
			i = j;
			continue;
		}
		if (shown == 0)
			rc = placefs_strbuf_addf(&sb,
			                         "duplicate tensor names among %s tensors: ", what);
		else
			rc = placefs_strbuf_adds(&sb, ", ");
		if (!rc)
			rc = placefs_strbuf_add_quoted(&sb, v[i]->tensor->name, QUOTE_MAX);
		if (!rc)
			rc = placefs_strbuf_adds(&sb, " (");
		for (size_t k = i; rc == 0 && k < j && k < i + LIST_MAX; k++) {
			const char *sep = k == i ? "" : (k + 1 == j ? " and " : ", ");

			rc = placefs_strbuf_addf(&sb, "%s%s", sep, tfile(v[k]->tensor));
		}
		if (!rc && j - i > LIST_MAX)
			rc = placefs_strbuf_addf(&sb, " and %zu more", j - i - LIST_MAX);
		if (!rc)
			rc = placefs_strbuf_adds(&sb, ")");
		if (rc)
			break;
		shown++;
		i = j;
	}
	if (!rc && more)
		rc = placefs_strbuf_addf(&sb, ", and %zu more", more);
	if (rc)
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	else if (shown)
		rc = placefs_error_set(err, -EINVAL, kind, "%s", placefs_strbuf_cstr(&sb));
	placefs_strbuf_release(&sb);
	return rc;
}

/* Finds names present in both sorted lists (by a merge walk). */
static int check_overlap(const struct placefs_plan_entry **gpu, size_t ng,
                         const struct placefs_plan_entry **cpu, size_t nc,
                         struct placefs_error *err)
{
	struct placefs_strbuf sb;
	size_t i = 0, j = 0, shown = 0, more = 0;
	int rc = 0;

	placefs_strbuf_init(&sb);
	while (rc == 0 && i < ng && j < nc) {
		int c = strcmp(gpu[i]->tensor->name, cpu[j]->tensor->name);

		if (c < 0) {
			i++;
			continue;
		}
		if (c > 0) {
			j++;
			continue;
		}
		if (shown == LIST_MAX) {
			more++;
		} else {
			const char *sep =
			        shown ? ", " : "tensor names placed both on gpu and cpu: ";

			rc = placefs_strbuf_adds(&sb, sep);
			if (!rc)
				rc = placefs_strbuf_add_quoted(&sb, gpu[i]->tensor->name,
				                               QUOTE_MAX);
			if (!rc)
				rc = placefs_strbuf_addf(&sb, " (gpu: %s, cpu: %s)",
				                         tfile(gpu[i]->tensor),
				                         tfile(cpu[j]->tensor));
			shown++;
		}
		/* Both lists are free of duplicates by now: step past the pair. */
		i++;
		j++;
	}
	if (!rc && more)
		rc = placefs_strbuf_addf(&sb, ", and %zu more", more);
	if (rc)
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	else if (shown)
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_OVERLAP, "%s",
		                       placefs_strbuf_cstr(&sb));
	placefs_strbuf_release(&sb);
	return rc;
}

static int report_empty(const struct placefs_plan_options *opt, struct placefs_error *err)
{
	struct placefs_strbuf sb;
	int rc;

	placefs_strbuf_init(&sb);
	if (opt->nprefixes == 0) {
		rc = placefs_strbuf_adds(&sb, "the selection matched no tensors (no prefixes; the "
		                              "checkpoint has no tensors)");
	} else {
		rc = placefs_strbuf_adds(&sb, "the selection matched no tensors (prefixes: ");
		for (size_t i = 0; rc == 0 && i < opt->nprefixes; i++) {
			if (i)
				rc = placefs_strbuf_adds(&sb, ", ");
			if (!rc)
				rc = placefs_strbuf_add_quoted(&sb, opt->prefixes[i], QUOTE_MAX);
		}
		if (!rc)
			rc = placefs_strbuf_adds(&sb, ")");
	}
	if (rc)
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	else
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_EMPTY, "%s",
		                       placefs_strbuf_cstr(&sb));
	placefs_strbuf_release(&sb);
	return rc;
}

static int selected(const char *name, const struct placefs_plan_options *opt)
{
	if (opt->nprefixes == 0)
		return 1;
	for (size_t i = 0; i < opt->nprefixes; i++) {
		if (strncmp(name, opt->prefixes[i], strlen(opt->prefixes[i])) == 0)
			return 1;
	}
	return 0;
}

/* Encodes every selected name into one allocation and indexes it by file name. */
static int encode_names(struct placefs_plan *plan, struct placefs_error *err)
{
	struct placefs_strbuf sb;
	size_t *off = NULL;
	int rc = -ENOMEM;

	placefs_strbuf_init(&sb);
	off = calloc(plan->n, sizeof(*off));
	plan->by_fname = calloc(plan->n, sizeof(*plan->by_fname));
	if (!off || !plan->by_fname)
		goto nomem;
	for (size_t i = 0; i < plan->n; i++) {
		const struct placefs_tensor *t = plan->entries[i].tensor;
		char fname[PLACEFS_NAME_MAX + 1];
		struct placefs_error nerr;

		placefs_error_clear(&nerr);
		rc = placefs_name_encode(t->name, fname, &nerr);
		if (rc) {
			/* The encoder names the tensor; add the shard it lives in. */
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_NAME, "%s: %s", tfile(t),
			                       nerr.msg);
			goto out;
		}
		off[i] = sb.len;
		rc = placefs_strbuf_add(&sb, fname, strlen(fname) + 1);
		if (rc)
			goto nomem;
	}
	/* Pointers are fixed only now: the buffer moved while it grew. */
	plan->names = placefs_strbuf_detach(&sb, NULL);
	if (!plan->names)
		goto nomem;
	for (size_t i = 0; i < plan->n; i++) {
		plan->entries[i].fname = plan->names + off[i];
		plan->by_fname[i] = &plan->entries[i];
	}
	qsort(plan->by_fname, plan->n, sizeof(*plan->by_fname), cmp_entry_fname);
	rc = 0;
	goto out;
nomem:
	rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory building the plan");
out:
	placefs_strbuf_release(&sb);
	free(off);
	return rc;
}

static int compute_ring(struct placefs_plan *plan, struct placefs_error *err)
{
	const struct placefs_plan_totals *t = &plan->totals;
	uint64_t r;

	if (plan->has_limit) {
		plan->ring = plan->limit;
		plan->ring_min = plan->ring;
		return 0;
	}
	/* Room for the largest tensor, and for several small ones in flight. */
	r = t->bytes[PLACEFS_PLACE_GPU] < PLACEFS_PLAN_AUTO_RING ? t->bytes[PLACEFS_PLACE_GPU]
	                                                         : PLACEFS_PLAN_AUTO_RING;
	if (t->largest[PLACEFS_PLACE_GPU] > r)
		r = t->largest[PLACEFS_PLACE_GPU];
	if (__builtin_add_overflow(r, RING_ALIGN - 1, &r))
		return placefs_error_set(err, -EINVAL, PLACEFS_E_LIMIT,
		                         "a %" PRIu64
		                         "-byte tensor is too large for a staging ring",
		                         t->largest[PLACEFS_PLACE_GPU]);
	r &= ~(RING_ALIGN - 1);
	plan->ring = r < RING_ALIGN ? RING_ALIGN : r;
	plan->ring_min = plan->ring;
	return 0;
}

int placefs_plan_limit_parse(const char *text, const char *origin, int *has_limit, uint64_t *limit,
                             const char **limit_origin, struct placefs_error *err)
{
	const char *from = origin;
	uint64_t v;
	int rc;

	if (!text) {
		text = getenv(PLACEFS_PLAN_ENV_LIMIT);
		from = PLACEFS_PLAN_ENV_LIMIT;
	}
	if (!text) {
		*has_limit = 0;
		*limit = 0;
		if (limit_origin)
			*limit_origin = NULL;
		return 0;
	}
	rc = placefs_size_parse(text, from, &v, err);
	if (rc)
		return rc;
	*has_limit = 1;
	*limit = v;
	if (limit_origin)
		*limit_origin = from;
	return 0;
}

int placefs_plan_create(const struct placefs_tensor *tensors, size_t n,
                        const struct placefs_plan_options *opt, struct placefs_plan **out,
                        struct placefs_error *err)
{
	static const struct placefs_plan_options none = {0};
	const struct placefs_plan_entry **byp[2] = {NULL, NULL};
	const struct placefs_tensor *last[2] = {NULL, NULL}; /* per placement: packed last */
	size_t nby[2] = {0, 0};
	struct placefs_plan *plan = NULL;
	int rc;

	if (out)
		*out = NULL;
	if (!opt)
		opt = &none;
	if (!out || (n && !tensors) || (opt->nprefixes && !opt->prefixes))
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "placefs_plan_create: invalid arguments");
	for (size_t i = 0; i < opt->nprefixes; i++) {
		if (!opt->prefixes[i])
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "placefs_plan_create: prefix %zu is NULL", i);
	}
	if (opt->has_limit && opt->limit == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_LIMIT,
		                         "the staging limit must be greater than zero");

	plan = calloc(1, sizeof(*plan));
	if (!plan)
		goto nomem;
	plan->has_limit = opt->has_limit;
	plan->limit = opt->has_limit ? opt->limit : 0;
	plan->entries = calloc(n ? n : 1, sizeof(*plan->entries));
	byp[0] = calloc(n ? n : 1, sizeof(*byp[0]));
	byp[1] = calloc(n ? n : 1, sizeof(*byp[1]));
	if (!plan->entries || !byp[0] || !byp[1])
		goto nomem;

	for (size_t i = 0; i < n; i++) {
		const struct placefs_tensor *t = &tensors[i];
		struct placefs_plan_entry *e;
		enum placefs_placement p;

		if (!t->name) {
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                       "placefs_plan_create: tensor %zu has no name", i);
			goto fail;
		}
		if (!selected(t->name, opt))
			continue;
		p = (!opt->has_limit || t->nbytes <= opt->limit) ? PLACEFS_PLACE_GPU
		                                                 : PLACEFS_PLACE_CPU;
		e = &plan->entries[plan->n++];
		e->tensor = t;
		e->placement = p;
		e->fname = NULL;
		plan->totals.count[p]++;
		if (__builtin_add_overflow(plan->totals.bytes[p], t->nbytes,
		                           &plan->totals.bytes[p])) {
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                       "the selected tensors total more than %" PRIu64
			                       " bytes",
			                       UINT64_MAX);
			goto fail;
		}
		if (t->nbytes > plan->totals.largest[p])
			plan->totals.largest[p] = t->nbytes;
		rc = pack(&last[p], &plan->totals.packed[p], t, &e->packed);
		if (rc) {
			rc = placefs_error_set(
			        err, rc, PLACEFS_E_USAGE,
			        "the %s-placed tensors, packed, take more than %" PRIu64 " bytes",
			        placefs_placement_name(p), UINT64_MAX);
			goto fail;
		}
	}
	for (size_t i = 0; i < plan->n; i++) {
		enum placefs_placement p = plan->entries[i].placement;

		byp[p][nby[p]++] = &plan->entries[i];
	}
	for (int p = 0; p < 2; p++)
		qsort(byp[p], nby[p], sizeof(*byp[p]), cmp_entry_name);

	rc = check_dups(byp[PLACEFS_PLACE_CPU], nby[PLACEFS_PLACE_CPU], "CPU-placed",
	                PLACEFS_E_DUP_CPU, err);
	if (!rc)
		rc = check_dups(byp[PLACEFS_PLACE_GPU], nby[PLACEFS_PLACE_GPU], "GPU-placed",
		                PLACEFS_E_DUP_GPU, err);
	if (!rc)
		rc = check_overlap(byp[PLACEFS_PLACE_GPU], nby[PLACEFS_PLACE_GPU],
		                   byp[PLACEFS_PLACE_CPU], nby[PLACEFS_PLACE_CPU], err);
	if (!rc && plan->n == 0)
		rc = report_empty(opt, err);
	if (!rc)
		rc = encode_names(plan, err);
	if (!rc)
		rc = compute_ring(plan, err);
	if (rc)
		goto fail;
	free(byp[0]);
	free(byp[1]);
	*out = plan;
	return 0;

nomem:
	rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory building the plan");
fail:
	free(byp[0]);
	free(byp[1]);
	placefs_plan_free(plan);
	return rc;
}

void placefs_plan_free(struct placefs_plan *plan)
{
	if (!plan)
		return;
	free(plan->by_fname);
	free(plan->names);
	free(plan->entries);
	free(plan);
}

size_t placefs_plan_count(const struct placefs_plan *plan)
{
	return plan->n;
}

const struct placefs_plan_entry *placefs_plan_entry(const struct placefs_plan *plan, size_t i)
{
	return i < plan->n ? &plan->entries[i] : NULL;
}

long placefs_plan_find(const struct placefs_plan *plan, const char *fname)
{
	const struct placefs_plan_entry *const *hit;

	if (!fname || plan->n == 0)
		return -1;
	hit = bsearch(fname, plan->by_fname, plan->n, sizeof(*plan->by_fname), cmp_key_fname);
	return hit ? (long)(*hit - plan->entries) : -1;
}

int placefs_plan_has_limit(const struct placefs_plan *plan)
{
	return plan->has_limit;
}

uint64_t placefs_plan_limit(const struct placefs_plan *plan)
{
	return plan->limit;
}

uint64_t placefs_plan_ring_bytes(const struct placefs_plan *plan)
{
	return plan->ring;
}

int placefs_plan_set_ring_bytes(struct placefs_plan *plan, uint64_t bytes, const char *origin,
                                struct placefs_error *err)
{
	char hgiven[32], hmin[32], hauto[32];
	uint64_t r;

	if (!origin || !origin[0])
		origin = "the ring size";
	if (!plan)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "placefs_plan_set_ring_bytes: invalid arguments");
	placefs_size_format(bytes, hgiven, sizeof(hgiven));
	placefs_size_format(plan->ring_min, hmin, sizeof(hmin));
	if (bytes < plan->ring_min && plan->has_limit)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: %" PRIu64 " bytes (%s) is below the %" PRIu64
		                         "-byte (%s) staging limit: every gpu tensor up to the "
		                         "limit must fit the ring",
		                         origin, bytes, hgiven, plan->ring_min, hmin);
	if (bytes < plan->ring_min) {
		placefs_size_format(PLACEFS_PLAN_AUTO_RING, hauto, sizeof(hauto));
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: %" PRIu64 " bytes (%s) is below the %" PRIu64
		                         "-byte (%s) automatic ring (there is no staging limit): "
		                         "the ring is never smaller than max(largest gpu tensor, "
		                         "min(gpu total, %s)), rounded up to %llu bytes",
		                         origin, bytes, hgiven, plan->ring_min, hmin, hauto,
		                         RING_ALIGN);
	}
	if (__builtin_add_overflow(bytes, RING_ALIGN - 1, &r))
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: %" PRIu64 " bytes (%s) cannot be rounded up to a "
		                         "multiple of %llu bytes",
		                         origin, bytes, hgiven, RING_ALIGN);
	plan->ring = r & ~(RING_ALIGN - 1);
	snprintf(plan->ring_origin, sizeof(plan->ring_origin), "%s", origin);
	return 0;
}

void placefs_plan_totals(const struct placefs_plan *plan, struct placefs_plan_totals *t)
{
	*t = plan->totals;
}

const char *placefs_placement_name(enum placefs_placement p)
{
	return p == PLACEFS_PLACE_CPU ? "cpu" : "gpu";
}

/* Undoes a partial format so that a failed call leaves sb as it was. */
static int rollback(struct placefs_strbuf *sb, size_t len, int rc)
{
	if (rc && sb->buf) {
		sb->len = len;
		sb->buf[len] = '\0';
	}
	return rc;
}

/* {"source": S, "buffer_size": N|null, "ring_bytes": N, then `more` */
static int add_head(const struct placefs_plan *plan, const char *source, const char *more,
                    struct placefs_strbuf *sb)
{
	int rc = placefs_strbuf_adds(sb, "{\"source\": ");

	if (!rc)
		rc = source ? placefs_strbuf_add_json_string(sb, source)
		            : placefs_strbuf_adds(sb, "null");
	if (!rc)
		rc = plan->has_limit
		             ? placefs_strbuf_addf(sb, ", \"buffer_size\": %" PRIu64, plan->limit)
		             : placefs_strbuf_adds(sb, ", \"buffer_size\": null");
	if (!rc)
		rc = placefs_strbuf_addf(sb, ", \"ring_bytes\": %" PRIu64 "%s", plan->ring, more);
	return rc;
}

/* `before`"totals": {...}}\n, the end of both JSON plans. */
static int add_totals(const struct placefs_plan *plan, const char *before,
                      struct placefs_strbuf *sb)
{
	const struct placefs_plan_totals *t = &plan->totals;

	return placefs_strbuf_addf(sb,
	                           "%s\"totals\": {\"gpu\": {\"count\": %" PRIu64
	                           ", \"bytes\": %" PRIu64 "}, \"cpu\": {\"count\": %" PRIu64
	                           ", \"bytes\": %" PRIu64 "}}}\n",
	                           before, t->count[PLACEFS_PLACE_GPU], t->bytes[PLACEFS_PLACE_GPU],
	                           t->count[PLACEFS_PLACE_CPU], t->bytes[PLACEFS_PLACE_CPU]);
}

/*
 * Room for the entries of a plan format at `per_entry` bytes each besides
 * their names (twice: name and file name), in one allocation: a plan of
 * 100,000 tensors is megabytes, grown by doubling it is copied and faulted
 * in several times over. Only a hint: the adders grow sb as they need.
 */
static void reserve(const struct placefs_plan *plan, size_t per_entry, struct placefs_strbuf *sb)
{
	size_t need = 0;

	for (size_t i = 0; i < plan->n; i++)
		need += 2 * strlen(plan->entries[i].tensor->name) + per_entry;
	(void)placefs_strbuf_grow(sb, need);
}

int placefs_plan_format_json(const struct placefs_plan *plan, const char *source,
                             struct placefs_strbuf *sb)
{
	size_t start = sb->len;
	int rc;

	reserve(plan, 192, sb);
	rc = add_head(plan, source, ", \"tensors\": [", sb);
	for (size_t i = 0; rc == 0 && i < plan->n; i++) {
		const struct placefs_plan_entry *e = &plan->entries[i];
		const struct placefs_tensor *ts = e->tensor;

		rc = placefs_strbuf_adds(sb, i ? ", {\"name\": " : "{\"name\": ");
		if (!rc)
			rc = placefs_strbuf_add_json_string(sb, ts->name);
		if (!rc)
			rc = placefs_strbuf_adds(sb, ", \"filename\": ");
		if (!rc)
			rc = placefs_strbuf_add_json_string(sb, e->fname);
		if (!rc)
			rc = placefs_strbuf_adds(sb, ", \"file\": ");
		if (!rc)
			rc = placefs_strbuf_add_json_string(sb, ts->file ? ts->file : "");
		if (!rc)
			rc = placefs_strbuf_adds(sb, ", \"dtype\": ");
		if (!rc)
			rc = placefs_strbuf_add_json_string(sb, placefs_dtype_name(ts->dtype));
		if (!rc)
			rc = placefs_strbuf_adds(sb, ", \"shape\": ");
		if (!rc)
			rc = placefs_strbuf_add_json_u64_array(sb, ts->shape, ts->ndim);
		/* Numbers without printf: a plan may have a million entries. */
		if (!rc)
			rc = placefs_strbuf_adds(sb, ", \"nbytes\": ");
		if (!rc)
			rc = placefs_strbuf_add_u64(sb, "", ts->nbytes);
		if (!rc)
			rc = placefs_strbuf_adds(sb, ", \"offset\": ");
		if (!rc)
			rc = placefs_strbuf_add_u64(sb, "", ts->offset);
		if (!rc)
			rc = placefs_strbuf_adds(sb, ", \"placement\": \"");
		if (!rc)
			rc = placefs_strbuf_adds(sb, placefs_placement_name(e->placement));
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\"}");
	}
	if (!rc)
		rc = add_totals(plan, "], ", sb);
	return rollback(sb, start, rc);
}

/* The columns of one kind of integer, from a plan entry. */
enum column { COL_FILE, COL_DTYPE, COL_NBYTES, COL_OFFSET, COL_PACKED };

/* Entries [lo, hi) of a plan: what one columns object holds. */
struct span {
	size_t lo, hi;
};

/*
 * , "key": [v0, v1, ...]. COL_FILE and COL_DTYPE are positions in the
 * tables that add_tables() wrote: pos[] maps a shard index or a dtype to it.
 */
static int add_u64_column(const struct placefs_plan *plan, struct span sp, const char *key,
                          enum column c, const uint32_t *pos, struct placefs_strbuf *sb)
{
	int rc = placefs_strbuf_addf(sb, ", \"%s\": [", key);

	for (size_t i = sp.lo; rc == 0 && i < sp.hi; i++) {
		const struct placefs_tensor *ts = plan->entries[i].tensor;
		uint64_t v = c == COL_FILE     ? pos[ts->shard]
		             : c == COL_DTYPE  ? pos[ts->dtype]
		             : c == COL_NBYTES ? ts->nbytes
		             : c == COL_OFFSET ? ts->offset
		                               : plan->entries[i].packed;

		rc = placefs_strbuf_add_u64(sb, i > sp.lo ? ", " : "", v);
	}
	return rc ? rc : placefs_strbuf_adds(sb, "]");
}

/*
 * , "files": [...], "dtypes": [...]: each shard and dtype once, in the order
 * the span's entries first name them; fills shard_pos[shard] (sized for
 * every entry's shard, all UINT32_MAX on entry) and dtype_pos[dtype] (the
 * same).
 */
static int add_tables(const struct placefs_plan *plan, struct span sp, uint32_t *shard_pos,
                      uint32_t *dtype_pos, struct placefs_strbuf *sb)
{
	uint32_t nf = 0, nd = 0;
	int rc = placefs_strbuf_adds(sb, ", \"files\": [");

	for (size_t i = sp.lo; rc == 0 && i < sp.hi; i++) {
		const struct placefs_tensor *ts = plan->entries[i].tensor;

		if (shard_pos[ts->shard] != UINT32_MAX)
			continue;
		shard_pos[ts->shard] = nf;
		rc = placefs_strbuf_adds(sb, nf++ ? ", " : "");
		if (!rc)
			rc = placefs_strbuf_add_json_string(sb, ts->file ? ts->file : "");
	}
	if (!rc)
		rc = placefs_strbuf_adds(sb, "], \"dtypes\": [");
	for (size_t i = sp.lo; rc == 0 && i < sp.hi; i++) {
		const struct placefs_tensor *ts = plan->entries[i].tensor;

		if ((unsigned)ts->dtype >= PLACEFS_DT_COUNT || dtype_pos[ts->dtype] != UINT32_MAX)
			continue;
		dtype_pos[ts->dtype] = nd;
		rc = placefs_strbuf_addf(sb, "%s\"%s\"", nd++ ? ", " : "",
		                         placefs_dtype_name(ts->dtype));
	}
	return rc ? rc : placefs_strbuf_adds(sb, "]");
}

/*
 * , "name": [...], "filename": {"i": S, ...} (only names that were encoded,
 * keyed by the entry's position in the span)
 */
static int add_names(const struct placefs_plan *plan, struct span sp, struct placefs_strbuf *sb)
{
	int rc = placefs_strbuf_adds(sb, ", \"name\": [");
	bool first = true;

	for (size_t i = sp.lo; rc == 0 && i < sp.hi; i++) {
		rc = placefs_strbuf_adds(sb, i > sp.lo ? ", " : "");
		if (!rc)
			rc = placefs_strbuf_add_json_string(sb, plan->entries[i].tensor->name);
	}
	if (!rc)
		rc = placefs_strbuf_adds(sb, "], \"filename\": {");
	for (size_t i = sp.lo; rc == 0 && i < sp.hi; i++) {
		const struct placefs_plan_entry *e = &plan->entries[i];

		if (strcmp(e->fname, e->tensor->name) == 0)
			continue;
		rc = placefs_strbuf_addf(sb, "%s\"%zu\": ", first ? "" : ", ", i - sp.lo);
		if (!rc)
			rc = placefs_strbuf_add_json_string(sb, e->fname);
		first = false;
	}
	return rc ? rc : placefs_strbuf_adds(sb, "}");
}

/*
 * The span's columns, from , "files" to the "placement" string's closing
 * quote. shard_pos has nshard slots; both tables are reset here.
 */
static int add_columns(const struct placefs_plan *plan, struct span sp, uint32_t *shard_pos,
                       size_t nshard, struct placefs_strbuf *sb)
{
	uint32_t dtype_pos[PLACEFS_DT_COUNT];
	int rc;

	memset(shard_pos, 0xff, (nshard ? nshard : 1) * sizeof(*shard_pos));
	memset(dtype_pos, 0xff, sizeof(dtype_pos));
	rc = add_tables(plan, sp, shard_pos, dtype_pos, sb);
	if (!rc)
		rc = add_names(plan, sp, sb);
	if (!rc)
		rc = add_u64_column(plan, sp, "file", COL_FILE, shard_pos, sb);
	if (!rc)
		rc = add_u64_column(plan, sp, "dtype", COL_DTYPE, dtype_pos, sb);
	if (!rc)
		rc = placefs_strbuf_adds(sb, ", \"shape\": [");
	for (size_t i = sp.lo; rc == 0 && i < sp.hi; i++) {
		const struct placefs_tensor *ts = plan->entries[i].tensor;

		rc = placefs_strbuf_adds(sb, i > sp.lo ? ", " : "");
		if (!rc)
			rc = placefs_strbuf_add_json_u64_array(sb, ts->shape, ts->ndim);
	}
	if (!rc)
		rc = placefs_strbuf_adds(sb, "]");
	if (!rc)
		rc = add_u64_column(plan, sp, "nbytes", COL_NBYTES, NULL, sb);
	if (!rc)
		rc = add_u64_column(plan, sp, "offset", COL_OFFSET, NULL, sb);
	if (!rc)
		rc = add_u64_column(plan, sp, "packed", COL_PACKED, NULL, sb);
	if (!rc)
		rc = placefs_strbuf_adds(sb, ", \"placement\": \"");
	for (size_t i = sp.lo; rc == 0 && i < sp.hi; i++)
		rc = placefs_strbuf_add(
		        sb, plan->entries[i].placement == PLACEFS_PLACE_CPU ? "c" : "g", 1);
	return rc ? rc : placefs_strbuf_adds(sb, "\"");
}

/* A table of one slot per shard the plan names, for add_columns(); NULL when out of memory. */
static uint32_t *shard_table(const struct placefs_plan *plan, size_t *nshard)
{
	*nshard = 0;
	for (size_t i = 0; i < plan->n; i++)
		if (plan->entries[i].tensor->shard >= *nshard)
			*nshard = (size_t)plan->entries[i].tensor->shard + 1;
	return malloc((*nshard ? *nshard : 1) * sizeof(uint32_t));
}

int placefs_plan_format_layout(const struct placefs_plan *plan, struct placefs_strbuf *sb)
{
	const struct placefs_plan_totals *t = &plan->totals;
	size_t start = sb->len;
	int rc;

	rc = placefs_strbuf_addf(sb, "{\"align\": %d, \"pack\": \"%s\", \"first\": ",
	                         PLACEFS_PLAN_PACK_ALIGN, PLACEFS_PLAN_PACK_RULE);
	if (!rc)
		rc = plan->n ? placefs_strbuf_add_json_string(sb, plan->entries[0].fname)
		             : placefs_strbuf_adds(sb, "null");
	for (int p = 0; rc == 0 && p < 2; p++)
		rc = placefs_strbuf_addf(sb,
		                         ", \"%s\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64
		                         ", \"packed\": %" PRIu64 "}",
		                         placefs_placement_name((enum placefs_placement)p),
		                         t->count[p], t->bytes[p], t->packed[p]);
	if (!rc)
		rc = placefs_strbuf_adds(sb, "}\n");
	return rollback(sb, start, rc);
}

int placefs_plan_format_packed(const struct placefs_plan *plan, struct placefs_strbuf *sb)
{
	size_t start = sb->len;
	int rc;

	/* A line: its file name and some 64 bytes of numbers (reserve() counts two names). */
	reserve(plan, 64, sb);
	rc = placefs_strbuf_adds(sb, PLACEFS_PLAN_PACKED_HEAD);
	for (size_t i = 0; rc == 0 && i < plan->n; i++) {
		const struct placefs_plan_entry *e = &plan->entries[i];
		const struct placefs_tensor *ts = e->tensor;

		/* Numbers without printf, as in format_json: a plan may have a million entries. */
		rc = placefs_strbuf_adds(sb, placefs_placement_name(e->placement));
		if (!rc)
			rc = placefs_strbuf_add_u64(sb, "\t", e->packed);
		if (!rc)
			rc = placefs_strbuf_add_u64(sb, "\t", ts->nbytes);
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\t");
		if (!rc)
			rc = placefs_strbuf_adds(sb, placefs_dtype_name(ts->dtype));
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\t");
		for (uint32_t d = 0; rc == 0 && d < ts->ndim; d++)
			rc = placefs_strbuf_add_u64(sb, d ? "," : "", ts->shape[d]);
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\t");
		if (!rc)
			rc = placefs_strbuf_adds(sb, e->fname);
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\n");
	}
	return rollback(sb, start, rc);
}

int placefs_plan_format_columns(const struct placefs_plan *plan, const char *source,
                                struct placefs_strbuf *sb)
{
	size_t start = sb->len, nshard;
	uint32_t *shard_pos = shard_table(plan, &nshard);
	int rc;

	if (!shard_pos)
		return -ENOMEM;
	rc = add_head(plan, source, "", sb);
	if (!rc)
		rc = placefs_strbuf_addf(sb, ", \"version\": 1, \"count\": %zu", plan->n);
	if (!rc)
		rc = add_columns(plan, (struct span){0, plan->n}, shard_pos, nshard, sb);
	if (!rc)
		rc = add_totals(plan, ", ", sb);
	free(shard_pos);
	return rollback(sb, start, rc);
}

int placefs_plan_format_column_chunks(const struct placefs_plan *plan, size_t chunk,
                                      struct placefs_strbuf *sb)
{
	size_t start = sb->len, nshard, chunks;
	uint32_t *shard_pos;
	int rc;

	if (chunk == 0)
		return -EINVAL;
	shard_pos = shard_table(plan, &nshard);
	if (!shard_pos)
		return -ENOMEM;
	chunks = plan->n / chunk + (plan->n % chunk != 0);
	rc = placefs_strbuf_addf(sb,
	                         "{\"version\": 1, \"count\": %zu, \"chunk\": %zu, "
	                         "\"chunks\": %zu}\n",
	                         plan->n, chunk, chunks);
	for (size_t lo = 0; rc == 0 && lo < plan->n; lo += chunk) {
		struct span sp = {lo, plan->n - lo < chunk ? plan->n : lo + chunk};

		rc = placefs_strbuf_addf(sb, "{\"first\": %zu, \"count\": %zu", sp.lo,
		                         sp.hi - sp.lo);
		if (!rc)
			rc = add_columns(plan, sp, shard_pos, nshard, sb);
		if (!rc)
			rc = placefs_strbuf_adds(sb, "}\n");
	}
	free(shard_pos);
	return rollback(sb, start, rc);
}

/* [d0, d1, ...]: the shape as the text plan shows it (the JSON array form). */
static int add_shape(struct placefs_strbuf *sb, const struct placefs_tensor *t)
{
	return placefs_strbuf_add_json_u64_array(sb, t->shape, t->ndim);
}

static size_t shape_width(const struct placefs_tensor *t)
{
	size_t w = 2;

	for (uint32_t d = 0; d < t->ndim; d++) {
		w += placefs_strbuf_u64_width(t->shape[d]);
		if (d)
			w += 2;
	}
	return w;
}

static int add_pad(struct placefs_strbuf *sb, size_t n)
{
	static const char spaces[] = "                                ";
	int rc = 0;

	while (rc == 0 && n > 0) {
		size_t k = n < sizeof(spaces) - 1 ? n : sizeof(spaces) - 1;

		rc = placefs_strbuf_add(sb, spaces, k);
		n -= k;
	}
	return rc;
}

static int add_summary(const struct placefs_plan *plan, struct placefs_strbuf *sb)
{
	const struct placefs_plan_totals *t = &plan->totals;
	char h1[32], h2[32];
	int rc = 0;

	for (int p = 0; rc == 0 && p < 2; p++) {
		placefs_size_format(t->bytes[p], h1, sizeof(h1));
		placefs_size_format(t->largest[p], h2, sizeof(h2));
		rc = placefs_strbuf_addf(sb,
		                         "%s: %" PRIu64 " tensor%s, %" PRIu64
		                         " bytes (%s), largest %" PRIu64 " bytes (%s)\n",
		                         placefs_placement_name((enum placefs_placement)p),
		                         t->count[p], t->count[p] == 1 ? "" : "s", t->bytes[p], h1,
		                         t->largest[p], h2);
	}
	if (rc)
		return rc;
	if (plan->has_limit) {
		placefs_size_format(plan->limit, h1, sizeof(h1));
		rc = placefs_strbuf_addf(sb,
		                         "staging limit: %" PRIu64
		                         " bytes (%s): larger tensors are read on the cpu\n",
		                         plan->limit, h1);
	} else {
		rc = placefs_strbuf_adds(sb, "staging limit: none: every selected tensor is "
		                             "staged on the gpu\n");
	}
	if (rc)
		return rc;
	placefs_size_format(plan->ring, h1, sizeof(h1));
	if (plan->ring_origin[0]) {
		char h3[32];

		placefs_size_format(plan->ring_min, h3, sizeof(h3));
		rc = placefs_strbuf_addf(sb,
		                         "ring: %" PRIu64 " bytes (%s), set by %s (at least %s, "
		                         "the %s)\n",
		                         plan->ring, h1, plan->ring_origin, h3,
		                         plan->has_limit ? "staging limit" : "automatic size");
	} else if (plan->has_limit) {
		rc = placefs_strbuf_addf(
		        sb, "ring: %" PRIu64 " bytes (%s), sized to the staging limit\n",
		        plan->ring, h1);
	} else {
		char h3[32];

		placefs_size_format(PLACEFS_PLAN_AUTO_RING, h3, sizeof(h3));
		rc = placefs_strbuf_addf(sb,
		                         "ring: %" PRIu64 " bytes (%s), sized automatically: "
		                         "max(largest gpu tensor, min(gpu total, %s)), "
		                         "rounded up to %llu bytes\n",
		                         plan->ring, h1, h3, RING_ALIGN);
	}
	return rc;
}

int placefs_plan_format_summary(const struct placefs_plan *plan, struct placefs_strbuf *sb)
{
	size_t start = sb->len;

	return rollback(sb, start, add_summary(plan, sb));
}

int placefs_plan_format_text(const struct placefs_plan *plan, const char *source,
                             struct placefs_strbuf *sb)
{
	size_t start = sb->len;
	size_t wb = strlen("BYTES"), wd = strlen("DTYPE"), ws = strlen("SHAPE"),
	       wf = strlen("FILE");
	int rc;

	for (size_t i = 0; i < plan->n; i++) {
		const struct placefs_tensor *t = plan->entries[i].tensor;
		size_t w;

		w = placefs_strbuf_u64_width(t->nbytes);
		wb = w > wb ? w : wb;
		w = strlen(placefs_dtype_name(t->dtype));
		wd = w > wd ? w : wd;
		w = shape_width(t);
		ws = w > ws ? w : ws;
		w = strlen(tfile(t));
		wf = w > wf ? w : wf;
	}
	reserve(plan, wb + wd + ws + wf + 20, sb);
	rc = placefs_strbuf_addf(sb, "source: %s\nselected: %zu tensor%s\n\n",
	                         source ? source : "(unknown)", plan->n, plan->n == 1 ? "" : "s");
	if (!rc)
		rc = placefs_strbuf_addf(sb, "PLACE  %*s  %-*s  %-*s  %-*s  NAME\n", (int)wb,
		                         "BYTES", (int)wd, "DTYPE", (int)ws, "SHAPE", (int)wf,
		                         "FILE");
	for (size_t i = 0; rc == 0 && i < plan->n; i++) {
		const struct placefs_plan_entry *e = &plan->entries[i];
		const struct placefs_tensor *t = e->tensor;

		const char *pl = placefs_placement_name(e->placement),
		           *dt = placefs_dtype_name(t->dtype), *f = tfile(t);

		/* "%-5s  %*llu  %-*s  SHAPE  %-*s  %s\n", without printf. */
		rc = placefs_strbuf_adds(sb, pl);
		if (!rc)
			rc = add_pad(sb,
			             5 - strlen(pl) + 2 + wb - placefs_strbuf_u64_width(t->nbytes));
		if (!rc)
			rc = placefs_strbuf_add_u64(sb, "", t->nbytes);
		if (!rc)
			rc = add_pad(sb, 2);
		if (!rc)
			rc = placefs_strbuf_adds(sb, dt);
		if (!rc)
			rc = add_pad(sb, wd - strlen(dt) + 2);
		if (!rc)
			rc = add_shape(sb, t);
		if (!rc)
			rc = add_pad(sb, ws - shape_width(t) + 2);
		if (!rc)
			rc = placefs_strbuf_adds(sb, f);
		if (!rc)
			rc = add_pad(sb, wf - strlen(f) + 2);
		if (!rc)
			rc = placefs_strbuf_adds(sb, t->name);
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\n");
	}
	if (!rc)
		rc = placefs_strbuf_adds(sb, "\n");
	if (!rc)
		rc = add_summary(plan, sb);
	return rollback(sb, start, rc);
}

/* One row of the sweep table, as text cells. */
struct sweep_row {
	char cell[6][32];
};

static int sweep_row(const struct placefs_tensor *tensors, size_t n,
                     const struct placefs_plan_options *opt, struct sweep_row *row,
                     uint64_t *largest, struct placefs_error *err)
{
	struct placefs_plan_totals t;
	struct placefs_plan *plan = NULL;
	struct placefs_error perr;
	char h[32];
	int rc;

	placefs_error_clear(&perr);
	rc = placefs_plan_create(tensors, n, opt, &plan, &perr);
	if (rc) {
		/* Say which candidate failed, unless it is the plain no-limit plan. */
		if (opt->has_limit) {
			placefs_size_format(opt->limit, h, sizeof(h));
			placefs_error_prefix(&perr, "with a staging limit of %s", h);
		}
		return placefs_error_set(err, rc, perr.kind, "%s", perr.msg);
	}
	placefs_plan_totals(plan, &t);
	if (opt->has_limit)
		placefs_size_format(opt->limit, row->cell[0], sizeof(row->cell[0]));
	else
		snprintf(row->cell[0], sizeof(row->cell[0]), "none");
	snprintf(row->cell[1], sizeof(row->cell[1]), "%" PRIu64, t.count[PLACEFS_PLACE_GPU]);
	placefs_size_format(t.bytes[PLACEFS_PLACE_GPU], row->cell[2], sizeof(row->cell[2]));
	snprintf(row->cell[3], sizeof(row->cell[3]), "%" PRIu64, t.count[PLACEFS_PLACE_CPU]);
	placefs_size_format(t.bytes[PLACEFS_PLACE_CPU], row->cell[4], sizeof(row->cell[4]));
	placefs_size_format(placefs_plan_ring_bytes(plan), row->cell[5], sizeof(row->cell[5]));
	if (largest)
		*largest = t.largest[PLACEFS_PLACE_GPU];
	placefs_plan_free(plan);
	return 0;
}

int placefs_plan_sweep(const struct placefs_tensor *tensors, size_t n, const char *const *prefixes,
                       size_t nprefixes, const uint64_t *limits, size_t nlimits,
                       struct placefs_strbuf *sb, struct placefs_error *err)
{
	static const char *const head[6] = {"limit",       "gpu tensors", "gpu bytes",
	                                    "cpu tensors", "cpu bytes",   "ring bytes"};
	struct placefs_plan_options opt = {.prefixes = prefixes, .nprefixes = nprefixes};
	struct sweep_row *rows = NULL, none;
	size_t nrows = 0, cap, start = sb ? sb->len : 0;
	size_t w[6];
	uint64_t largest = 0;
	int rc;

	if (!sb || (nlimits && !limits))
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "placefs_plan_sweep: invalid arguments");
	/* The no-limit plan comes first: it validates the selection and sizes the candidates. */
	rc = sweep_row(tensors, n, &opt, &none, &largest, err);
	if (rc)
		return rc;
	if (nlimits) {
		cap = nlimits;
	} else {
		/* Powers of two from 1 MiB to the first one >= the largest tensor: at most 44. */
		cap = 64;
	}
	rows = calloc(cap + 1, sizeof(*rows));
	if (!rows)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	opt.has_limit = 1;
	if (nlimits) {
		for (size_t i = 0; rc == 0 && i < nlimits; i++) {
			opt.limit = limits[i];
			rc = sweep_row(tensors, n, &opt, &rows[nrows++], NULL, err);
		}
	} else {
		for (uint64_t lim = 1ULL << 20; rc == 0; lim <<= 1) {
			opt.limit = lim;
			rc = sweep_row(tensors, n, &opt, &rows[nrows++], NULL, err);
			if (lim >= largest || lim == 1ULL << 63)
				break;
		}
	}
	if (rc)
		goto out;
	rows[nrows++] = none;

	for (int c = 0; c < 6; c++) {
		w[c] = strlen(head[c]);
		for (size_t r = 0; r < nrows; r++) {
			size_t l = strlen(rows[r].cell[c]);

			w[c] = l > w[c] ? l : w[c];
		}
	}
	rc = placefs_strbuf_addf(sb, "%-*s", (int)w[0], head[0]);
	for (int c = 1; rc == 0 && c < 6; c++)
		rc = placefs_strbuf_addf(sb, "  %*s", (int)w[c], head[c]);
	if (!rc)
		rc = placefs_strbuf_adds(sb, "\n");
	for (size_t r = 0; rc == 0 && r < nrows; r++) {
		rc = placefs_strbuf_addf(sb, "%-*s", (int)w[0], rows[r].cell[0]);
		for (int c = 1; rc == 0 && c < 6; c++)
			rc = placefs_strbuf_addf(sb, "  %*s", (int)w[c], rows[r].cell[c]);
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\n");
	}
	if (rc)
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
out:
	free(rows);
	return rollback(sb, start, rc);
}
