/* SPDX-License-Identifier: MIT */
/*
 * ops: the FUSE low-level operations and the per-mount state they share.
 *
 * The state is created by main() before the session and handed to
 * fuse_session_new() as userdata; every callback reaches it through one
 * accessor (placefs_mount_of(req)). Everything in it is fixed once the
 * session loop starts, except the counters (C11 atomics) and the per-shard
 * health (atomics, and a lock taken only to log), so the callbacks need no
 * lock to serve bytes.
 *
 * The GPU staging code (fs/stage.c) keeps its state in `stage`, appends its
 * members to the .placefs/stats JSON object through `stats_hook`, serves
 * the ioctl operation and ends a file handle's leases at its release. Each
 * open of a tensor file gets its own file handle number (`next_fh`), which
 * owns the leases taken through it.
 */
#ifndef PLACEFS_FS_OPS_H
#define PLACEFS_FS_OPS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "ckpt.h"
#include "error.h"
#include "opts.h"
#include "plan.h"
#include "strbuf.h"
#include "vtree.h"

/* Entry and attribute timeouts, seconds: nothing in a placefs mount ever changes. */
#define PLACEFS_TIMEOUT 86400.0

struct placefs_counters {
	atomic_uint_fast64_t reads;          /* READ requests served on tensor files */
	atomic_uint_fast64_t bytes[2];       /* tensor bytes served, by enum placefs_placement */
	atomic_uint_fast64_t read_errors;    /* tensor READs answered with an error */
	atomic_uint_fast64_t opens;          /* successful tensor opens */
	atomic_int_fast64_t open_files;      /* tensor files open now */
	atomic_uint_fast64_t stale_refusals; /* opens and reads refused because a shard changed */
	atomic_uint_fast64_t xattr_requests; /* GETXATTR and LISTXATTR requests, any inode */
};

/*
 * A shard's health, as the requests on its tensors find it. CHANGED: its
 * last check (placefs_ckpt_shard_check) failed: it was replaced, rewritten
 * or shrunk; the next check that passes makes it OK again. IOERR: reading it
 * failed (an I/O error, a short read, a faulting reply from its mapping)
 * although the check passed; a passing check does not clear that, only a
 * successful read a second (PLACEFS_SHARD_QUIET_NS) after the last failure
 * does, so that a source failing every other request is not logged as
 * recovering every other request.
 */
enum placefs_shard_state {
	PLACEFS_SHARD_OK = 0,
	PLACEFS_SHARD_CHANGED,
	PLACEFS_SHARD_IOERR,
};

#define PLACEFS_SHARD_QUIET_NS (1000ULL * 1000 * 1000)
/*
 * Log lines about one shard: a burst of PLACEFS_SHARD_LOG_BURST, then at most
 * one per PLACEFS_SHARD_LOG_NS; the rest are counted and summarized.
 */
#define PLACEFS_SHARD_LOG_NS    (1000ULL * 1000 * 1000)
#define PLACEFS_SHARD_LOG_BURST 5ULL

struct placefs_shard_health {
	atomic_int state;             /* enum placefs_shard_state */
	atomic_int no_map;            /* 1 once a reply from its mapping faulted: pread since */
	atomic_uint_fast64_t fail_ns; /* CLOCK_MONOTONIC of its last failed read */
	atomic_uint_fast64_t fails;   /* requests failed since it was last OK */
	pthread_mutex_t log_lock;     /* the two fields below */
	uint64_t log_ns;              /* the rate limiter's clock (see shard_log()) */
	uint64_t suppressed;          /* lines not logged since then */
};

struct placefs_mount;
struct placefs_push;

/*
 * Appends zero or more JSON object members, each written as `, "key": value`,
 * to the stats document being generated. Returns 0 or a negative errno.
 */
typedef int (*placefs_stats_hook)(const struct placefs_mount *m, struct placefs_strbuf *sb);

struct placefs_mount {
	const struct placefs_opts *opts;
	struct placefs_ckpt *ckpt;
	struct placefs_plan *plan;
	struct placefs_vtree *vt;
	struct fuse_session *se; /* set by main() once created */
	struct timespec started; /* CLOCK_MONOTONIC at start, for uptime */

	size_t nshards;
	struct placefs_shard_health *health; /* per shard */
	const uint8_t **maps; /* read_mode=mmap: per shard PROT_READ mapping, or NULL */
	size_t *map_len;

	/*
	 * 1 (default): every tensor READ first verifies its shard. 0 only when
	 * the environment sets PLACEFS_TEST_SKIP_READ_CHECK, so that the tests
	 * can reach the short-read and faulting-writev paths deterministically.
	 */
	int check_reads;

	/*
	 * The mount's backing device ("major:minor", from mountinfo) and whether
	 * its readahead was tuned: that has to wait for the first request after
	 * INIT, as the INIT reply itself lowers readahead to what the kernel
	 * offered.
	 */
	char bdi[32];
	atomic_int bdi_tuned;

	struct placefs_counters ctr;

	atomic_uint_fast64_t next_fh; /* the last tensor file handle number given out */

	struct placefs_push *push;     /* page-cache pusher (fs/push.c), or NULL: off */
	void *stage;                   /* GPU staging state (fs/stage.c) */
	placefs_stats_hook stats_hook; /* NULL, or the staging code's members */
};

/*
 * Fills m (zeroed by the caller) for an open checkpoint and its plan: builds
 * the vtree and, for read_mode=mmap, maps every shard read-only. Takes no
 * ownership of opts, ckpt or plan. Returns 0 or a negative errno with a message.
 */
int placefs_mount_init(struct placefs_mount *m, const struct placefs_opts *opts,
                       struct placefs_ckpt *ckpt, struct placefs_plan *plan,
                       struct placefs_error *err);
/*
 * Releases what placefs_mount_init() created, first logging for each shard
 * how many lines about it the rate limit held back; safe on a zeroed struct.
 */
void placefs_mount_release(struct placefs_mount *m);

/* The operations table and its size, for fuse_session_new(). */
const struct fuse_lowlevel_ops *placefs_ops_table(size_t *size);

/*
 * Verifies shard i against what was validated at mount, as every READ does
 * (logging a change of its health, at most once a second per shard).
 * Returns 0, -ESTALE or -EIO.
 */
int placefs_mount_shard_ok(struct placefs_mount *m, uint32_t i);

/* Generates the .placefs/stats document (one JSON object and "\n"). */
int placefs_stats_format(const struct placefs_mount *m, struct placefs_strbuf *sb);

#endif
