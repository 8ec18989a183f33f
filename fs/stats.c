/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "stats.h"

/* The longest path segment a table row may have (an object's or a member's key). */
#define SEG_MAX 64

void placefs_stats_init(struct placefs_stats *w, struct placefs_strbuf *sb)
{
	memset(w, 0, sizeof(*w));
	w->sb = sb;
}

static void fail(struct placefs_stats *w, int rc)
{
	if (w->rc == 0)
		w->rc = rc;
}

static void add(struct placefs_stats *w, const char *s)
{
	int rc;

	if (w->rc == 0 && (rc = placefs_strbuf_adds(w->sb, s)) < 0)
		fail(w, rc);
}

/*
 * Starts the next value in the container open now: the separator, then
 * `"key": ` in an object. A key belongs in an object, none in an array or
 * at the top. Returns false once an error happened.
 */
static bool start(struct placefs_stats *w, const char *key)
{
	bool in_object = w->depth > 0 && w->close[w->depth - 1] == '}';
	int rc;

	if (w->rc)
		return false;
	if ((key != NULL) != in_object) {
		fail(w, -EINVAL);
		return false;
	}
	if (w->depth > 0) {
		if (w->members[w->depth - 1])
			add(w, ", ");
		w->members[w->depth - 1] = true;
	}
	if (key) {
		if (w->rc == 0 && (rc = placefs_strbuf_add_json_string(w->sb, key)) < 0)
			fail(w, rc);
		add(w, ": ");
	}
	return w->rc == 0;
}

static void open_container(struct placefs_stats *w, const char *key, char open, char close)
{
	char s[2] = {open, '\0'};

	if (w->rc == 0 && w->depth == PLACEFS_STATS_DEPTH) {
		fail(w, -EINVAL);
		return;
	}
	if (!start(w, key))
		return;
	add(w, s);
	w->close[w->depth] = close;
	w->members[w->depth] = false;
	w->depth++;
}

void placefs_stats_begin(struct placefs_stats *w, const char *key)
{
	open_container(w, key, '{', '}');
}

void placefs_stats_begin_array(struct placefs_stats *w, const char *key)
{
	open_container(w, key, '[', ']');
}

void placefs_stats_end(struct placefs_stats *w)
{
	char s[2] = {'\0', '\0'};

	if (w->rc)
		return;
	if (w->depth == 0) {
		fail(w, -EINVAL);
		return;
	}
	s[0] = w->close[--w->depth];
	add(w, s);
}

static void addf_value(struct placefs_stats *w, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void addf_value(struct placefs_stats *w, const char *key, const char *fmt, ...)
{
	char buf[64];
	va_list ap;

	if (!start(w, key))
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	add(w, buf);
}

void placefs_stats_u64(struct placefs_stats *w, const char *key, uint64_t v)
{
	addf_value(w, key, "%llu", (unsigned long long)v);
}

void placefs_stats_i64(struct placefs_stats *w, const char *key, int64_t v)
{
	addf_value(w, key, "%lld", (long long)v);
}

void placefs_stats_seconds(struct placefs_stats *w, const char *key, double s)
{
	addf_value(w, key, "%.3f", s);
}

void placefs_stats_string(struct placefs_stats *w, const char *key, const char *s)
{
	int rc;

	if (start(w, key) && (rc = placefs_strbuf_add_json_string(w->sb, s)) < 0)
		fail(w, rc);
}

void placefs_stats_null(struct placefs_stats *w, const char *key)
{
	if (start(w, key))
		add(w, "null");
}

/* The length of the path segment that starts at p (up to the next '.' or the end). */
static size_t seg_len(const char *p)
{
	return strcspn(p, ".");
}

/* Copies the segment at p into buf (SEG_MAX bytes) as a C string; false if too long. */
static bool seg_copy(const char *p, char *buf)
{
	size_t len = seg_len(p);

	if (len >= SEG_MAX)
		return false;
	memcpy(buf, p, len);
	buf[len] = '\0';
	return true;
}

static void row_value(struct placefs_stats *w, const struct placefs_stat *r, const char *key,
                      const void *const *bases)
{
	const char *p = (const char *)bases[r->base] + r->offset;

	switch (r->kind) {
	case PLACEFS_STAT_ATOMIC_U64:
		placefs_stats_u64(w, key,
		                  atomic_load((const atomic_uint_fast64_t *)(const void *)p));
		return;
	case PLACEFS_STAT_ATOMIC_I64:
		placefs_stats_i64(w, key,
		                  atomic_load((const atomic_int_fast64_t *)(const void *)p));
		return;
	case PLACEFS_STAT_U64: {
		uint64_t v;

		memcpy(&v, p, sizeof(v));
		placefs_stats_u64(w, key, v);
		return;
	}
	case PLACEFS_STAT_UINT: {
		unsigned v;

		memcpy(&v, p, sizeof(v));
		placefs_stats_u64(w, key, v);
		return;
	}
	}
	fail(w, -EINVAL);
}

void placefs_stats_table(struct placefs_stats *w, const struct placefs_stat *rows, size_t n,
                         const void *const *bases)
{
	const char *prev = NULL; /* the previous row's path */
	unsigned open = 0;       /* the objects opened for it */
	char seg[SEG_MAX];
	size_t i;

	for (i = 0; i < n && w->rc == 0; i++) {
		const char *p = rows[i].path, *q = prev;
		unsigned common = 0;

		/* The objects this row shares with the previous one stay open. */
		while (common < open) {
			size_t lp = seg_len(p), lq = seg_len(q);

			if (p[lp] != '.' || lp != lq || memcmp(p, q, lp) != 0)
				break;
			p += lp + 1;
			q += lq + 1;
			common++;
		}
		for (; open > common; open--)
			placefs_stats_end(w);
		/* Then the rest of its path: objects, and last its own key. */
		for (; p[seg_len(p)] == '.'; p += seg_len(p) + 1, open++) {
			if (!seg_copy(p, seg)) {
				fail(w, -EINVAL);
				return;
			}
			placefs_stats_begin(w, seg);
		}
		if (!seg_copy(p, seg)) {
			fail(w, -EINVAL);
			return;
		}
		row_value(w, &rows[i], seg, bases);
		prev = rows[i].path;
	}
	for (; open > 0; open--)
		placefs_stats_end(w);
}

void placefs_stats_table_zero(const struct placefs_stat *rows, size_t n, void *const *bases)
{
	size_t i;

	for (i = 0; i < n; i++) {
		void *p = (char *)bases[rows[i].base] + rows[i].offset;

		if (rows[i].kind == PLACEFS_STAT_ATOMIC_U64)
			atomic_init((atomic_uint_fast64_t *)p, 0);
		else if (rows[i].kind == PLACEFS_STAT_ATOMIC_I64)
			atomic_init((atomic_int_fast64_t *)p, 0);
	}
}

int placefs_stats_finish(const struct placefs_stats *w)
{
	if (w->rc)
		return w->rc;
	return w->depth == 0 ? 0 : -EINVAL;
}
