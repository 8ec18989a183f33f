/* SPDX-License-Identifier: MIT */
/*
 * stats: the .placefs/stats document as data.
 *
 * Each counter is one row of a table: its path in the document, the kind of
 * its storage, and where it is. A dot in the path nests objects: the rows
 * "bytes_read.gpu" and "bytes_read.cpu" write `"bytes_read": {"gpu": N,
 * "cpu": M}`. placefs_stats_table() writes the rows in order, opening and
 * closing the nested objects as the paths change, so rows that share an
 * object must be adjacent. A row's value lives at `offset` in one of the
 * table's bases (a table may read several structs: the stager's snapshot
 * and the daemon's own atomics, say); PLACEFS_STAT() spells a row in one line.
 * Adding a counter to the document is adding its row: the writer and, with
 * placefs_stats_table_zero(), its initialization follow from the table.
 *
 * Values that are not counters (strings, durations, arrays, computed numbers,
 * a member that is null) are written with the placefs_stats_*() calls, which
 * a table's rows and other calls may be interleaved with.
 *
 * The format is what tests and loaders parse: `{"key": value, "obj": {...},
 * "list": ["a", "b"]}`, members and elements separated by ", ", a key and
 * its value by ": "; integers in decimal, durations in seconds with three
 * decimals. Nesting is at most PLACEFS_STATS_DEPTH deep.
 *
 * Errors are sticky: after the first (-ENOMEM from the buffer, or -EINVAL
 * for nesting deeper than allowed or an end without a begin) nothing more is
 * written and placefs_stats_finish() returns it. A writer is used by one
 * thread; it reads each counter with one atomic load, so a document is a
 * snapshot of each counter, not of all of them at one instant.
 */
#ifndef PLACEFS_FS_STATS_H
#define PLACEFS_FS_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"

#define PLACEFS_STATS_DEPTH 8

/* How a row's value is stored. */
enum placefs_stat_kind {
	PLACEFS_STAT_ATOMIC_U64, /* atomic_uint_fast64_t, written unsigned */
	PLACEFS_STAT_ATOMIC_I64, /* atomic_int_fast64_t, written signed (a gauge) */
	PLACEFS_STAT_U64,        /* uint64_t (a snapshot filled by its owner) */
	PLACEFS_STAT_UINT,       /* unsigned int */
};

struct placefs_stat {
	const char *path;            /* "key" or "object.key"; see above */
	enum placefs_stat_kind kind; /* how the value is stored */
	unsigned base;               /* index into the bases given with the table */
	size_t offset;               /* the value's offset in that base */
};

/* One row: `member` of `type`, which is base number `base` of the table. */
#define PLACEFS_STAT(path, kind, base, type, member)                                               \
	{                                                                                          \
		(path), PLACEFS_STAT_##kind, (base), offsetof(type, member)                        \
	}

/* The number of rows of a table that is an array. */
#define PLACEFS_STATS_ROWS(table) (sizeof(table) / sizeof((table)[0]))

struct placefs_stats {
	struct placefs_strbuf *sb;
	int rc;                            /* the first error, or 0 */
	unsigned depth;                    /* objects and arrays open */
	char close[PLACEFS_STATS_DEPTH];   /* '}' or ']' for each */
	bool members[PLACEFS_STATS_DEPTH]; /* whether each has a member yet */
};

/* Starts a document that is appended to sb (which the caller owns). Writes nothing. */
void placefs_stats_init(struct placefs_stats *w, struct placefs_strbuf *sb);

/*
 * Opens an object, or an array with _begin_array(), as member `key` of the
 * object open now; key is NULL for the document itself and for an element
 * of the array open now. _end() closes the innermost one.
 */
void placefs_stats_begin(struct placefs_stats *w, const char *key);
void placefs_stats_begin_array(struct placefs_stats *w, const char *key);
void placefs_stats_end(struct placefs_stats *w);

/* One member (or, with key NULL, one array element). s is JSON-escaped. */
void placefs_stats_u64(struct placefs_stats *w, const char *key, uint64_t v);
void placefs_stats_i64(struct placefs_stats *w, const char *key, int64_t v);
void placefs_stats_seconds(struct placefs_stats *w, const char *key, double s);
void placefs_stats_string(struct placefs_stats *w, const char *key, const char *s);
void placefs_stats_null(struct placefs_stats *w, const char *key);

/*
 * Writes the n rows of `rows` as members of the object open now, reading
 * each from bases[row.base] + row.offset.
 */
void placefs_stats_table(struct placefs_stats *w, const struct placefs_stat *rows, size_t n,
                         const void *const *bases);

/* Initializes to 0 every atomic counter that the n rows name (atomic_init). */
void placefs_stats_table_zero(const struct placefs_stat *rows, size_t n, void *const *bases);

/* 0, or the first error; every object and array must be closed by then (else -EINVAL). */
int placefs_stats_finish(const struct placefs_stats *w);

#endif
