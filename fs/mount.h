/* SPDX-License-Identifier: MIT */
/*
 * mount: the state of one mount, which the FUSE operations (fs/ops.c), the
 * page-cache pusher (fs/push.c) and the staging glue (fs/ioctl.c) share.
 *
 * main() fills it in two steps: placefs_mount_init() before the FUSE
 * session is created (shard health, read-only mappings, counters), and
 * placefs_mount_make_tree() last before mounting, once the stager exists
 * (its "staging:" line ends .placefs/plan), so that the inode table is
 * complete when it is made. The struct is the session's userdata; every
 * request reaches it through placefs_mount_of(req). Everything in it is
 * fixed once the session loop starts, except the counters (C11 atomics)
 * and the shards' health (atomics, and a lock taken only to log), so the
 * callbacks need no lock to serve bytes.
 *
 * Shard health, as the requests on a shard's tensors find it: OK; CHANGED,
 * when its last check (placefs_ckpt_shard_check) failed because it was
 * replaced, rewritten or shrunk, until a check passes again; or failing
 * reads, when reading it failed (an I/O error, a short read, a faulting
 * reply from its mapping) although the check passed. A passing check does
 * not end that, only a successful read a second (PLACEFS_SHARD_QUIET_NS)
 * after the last failure does, so that a source failing every other request
 * is not logged as recovering every other request. A reply from a shard's
 * mapping that faults makes the shard be served with pread from then on.
 *
 * Log lines about one shard: a burst of PLACEFS_SHARD_LOG_BURST, then at
 * most one per PLACEFS_SHARD_LOG_NS; the rest are counted, the next line
 * logged says how many were held back, and placefs_mount_release() tells
 * those still held back. A shard flapping at any request rate therefore
 * costs about one line a second.
 */
#ifndef PLACEFS_FS_MOUNT_H
#define PLACEFS_FS_MOUNT_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_lowlevel.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/ckpt.h"
#include "common/error.h"
#include "common/perm.h"
#include "opts.h"
#include "model/plan.h"
#include "model/view.h"
#include "vtree.h"

#define PLACEFS_SHARD_QUIET_NS  (1000ULL * 1000 * 1000)
#define PLACEFS_SHARD_LOG_NS    (1000ULL * 1000 * 1000)
#define PLACEFS_SHARD_LOG_BURST 5ULL

/*
 * The mount's counters, written into .placefs/stats by the table in
 * fs/mount.c (a new counter is a member here and one row there).
 */
struct placefs_counters {
	atomic_uint_fast64_t reads;          /* READ requests served on tensor files */
	atomic_uint_fast64_t bytes[2];       /* tensor bytes served, by enum placefs_placement */
	atomic_uint_fast64_t read_errors;    /* tensor READs answered with an error */
	atomic_uint_fast64_t opens;          /* successful tensor opens */
	atomic_int_fast64_t open_files;      /* tensor files open now */
	atomic_uint_fast64_t stale_refusals; /* opens and reads refused because a shard changed */
	atomic_uint_fast64_t xattr_requests; /* GETXATTR and LISTXATTR requests, any inode */
	atomic_uint_fast64_t xattr_formats;  /* tensor xattr sets formatted: one per inode asked */
	atomic_uint_fast64_t client_errors;  /* staging requests refused or failed (not timeouts) */
	atomic_uint_fast64_t log_suppressed; /* log lines about client errors held back */
	atomic_uint_fast64_t view_reads;     /* READ requests served on .placefs/views files */
	atomic_uint_fast64_t view_bytes;     /* bytes they served */
};

/* At most this many aux files are shown in the views (one descriptor each). */
#define PLACEFS_AUX_MAX 4096

/*
 * An aux file of the views (lib/model/view.h: a top-level file of the source
 * that is no shard or index), opened at mount beneath the source directory
 * as shards are (placefs_ckpt_open_file()), validated as a regular file.
 */
struct placefs_aux_file {
	char *name;     /* as the views show it */
	char *path;     /* source directory joined with its name, for the staleness check */
	int fd;         /* read-only, for the life of the mount */
	struct stat st; /* as validated at mount: its size is the file's in the views */
	atomic_int bad; /* 1 once a check failed (logged once) */
	struct placefs_perm perm; /* who may read it, as at mount (its own owner, mode, ACL) */
	/* The file the descriptor holds now: st's, or the same file after a remount. */
	atomic_uint_fast64_t dev, ino, ctime_ns;
	atomic_uint_fast64_t reopen_ns; /* CLOCK_MONOTONIC of the last look for a remount */
};

struct placefs_shard_health; /* per shard, private to fs/mount.c */
struct placefs_push;         /* fs/push.h */
struct placefs_ioctl;        /* fs/ioctl.h */
struct placefs_stats;        /* fs/stats.h */
struct placefs_xattr_set;    /* one tensor's xattr values, private to fs/ops.c */
struct placefs_host_reserve; /* lib/staging/backend.h */

struct placefs_mount {
	const struct placefs_opts *opts;
	struct placefs_ckpt *ckpt;
	struct placefs_plan *plan;
	struct placefs_vtree *vt; /* NULL until placefs_mount_make_tree() */
	struct fuse_session *se;  /* set by main() once created */
	uint64_t started_ns;      /* CLOCK_MONOTONIC at start, for uptime */

	size_t nshards;
	struct placefs_shard_health *health; /* per shard: use the functions below */
	/*
	 * Per shard: who may read it (owner, group, mode, access ACL), read at
	 * mount (lib/common/perm.h). The daemon's own checks (fs/ioctl_access.c)
	 * decide with it, and the tree shows it to the kernel (fs/vtree.h).
	 */
	struct placefs_perm *perms;
	/* read_mode=mmap: per shard PROT_READ mapping, or NULL; use placefs_mount_shard_map() */
	const uint8_t **maps;
	size_t *map_len;

	/*
	 * 1 (default): every tensor READ first verifies its shard. 0 only when
	 * the environment sets PLACEFS_TEST_SKIP_READ_CHECK, so that the tests
	 * can reach the short-read and faulting-writev paths deterministically.
	 */
	int check_reads;

	/*
	 * The mount's backing device ("major:minor", from mountinfo, set by
	 * main()) and whether its readahead was tuned: that has to wait for the
	 * first request after INIT, as the INIT reply itself lowers readahead to
	 * what the kernel offered.
	 */
	char bdi[32];
	atomic_int bdi_tuned;

	/*
	 * -o device=host: the ring reserved while the checkpoint was read
	 * (placefs_host_reserve_start(), set by main()), taken by the stager;
	 * NULL otherwise. main() frees it.
	 */
	struct placefs_host_reserve *host_reserve;
	/*
	 * Whether the ioctls start the storage client's fetches of the shards
	 * after the one they read (lib/staging/lookahead.h): -o lookahead, or
	 * by default shards on s3fs. Set by main().
	 */
	bool lookahead;
	/*
	 * Whether the shards' descriptors read with O_DIRECT
	 * (placefs_ckpt_shard_set_direct()): -o direct_reads, or by default
	 * shards on s3fs. Set by main().
	 */
	bool direct_reads;

	struct placefs_counters ctr;

	atomic_uint_fast64_t next_fh; /* the last tensor file handle number given out */

	/*
	 * Per plan entry: its xattr values, formatted by fs/ops.c on the first
	 * GETXATTR of the tensor and kept (one malloc each, published with a
	 * compare-and-swap), so that a header with a tensor of millions of
	 * dimensions costs one formatting, not one per request. Allocated by
	 * placefs_mount_make_tree(), freed by placefs_mount_release().
	 */
	struct placefs_xattr_set *_Atomic *xattrs;
	size_t nxattrs;

	/* The views (lib/model/view.h) and their aux files, made by placefs_mount_init(). */
	struct placefs_view *views[PLACEFS_VIEW_KINDS];
	struct placefs_aux_file *aux; /* naux, sorted by name */
	size_t naux;

	struct placefs_push *push;   /* page-cache pusher (fs/push.h), or NULL: off */
	struct placefs_ioctl *stage; /* the staging glue (fs/ioctl.h), set by main() */
};

/* The mount a request belongs to (the session's userdata). The one way a callback reaches it. */
struct placefs_mount *placefs_mount_of(fuse_req_t req);

/*
 * Fills m (zeroed by the caller) for an open checkpoint and its plan: shard
 * health, counters and, for read_mode=mmap, a read-only mapping of every
 * shard (a shard that cannot be mapped is logged and served with pread);
 * then the three views and their aux files (a top-level entry that is not
 * a regular file, or a link that leads out of the source, is skipped; what
 * cannot be opened is logged and skipped). Takes no ownership of opts, ckpt
 * or plan. Returns 0 or a negative errno with a message (-ENOMEM; the
 * errors of placefs_view_create() and placefs_view_read_index()).
 */
int placefs_mount_init(struct placefs_mount *m, const struct placefs_opts *opts,
                       struct placefs_ckpt *ckpt, struct placefs_plan *plan,
                       struct placefs_error *err);

/*
 * Builds the inode table (fs/vtree.h) once, before the mount goes live;
 * `plan_note` (NULL or "") is appended to .placefs/plan. Returns 0 or the
 * negative errno of placefs_vtree_create() with its message.
 */
int placefs_mount_make_tree(struct placefs_mount *m, const char *plan_note,
                            struct placefs_error *err);

/*
 * Releases what placefs_mount_init() and _make_tree() created, first logging
 * for each shard how many lines about it the rate limit held back; safe on a
 * zeroed struct. The pusher and the staging glue are freed by their owners.
 */
void placefs_mount_release(struct placefs_mount *m);

/*
 * Verifies shard i against what was validated at mount (2 system calls), as
 * every READ does, and records the result in its health (logging a change).
 * Returns 0, -ESTALE or -EIO. A passing check ends CHANGED, not failing reads.
 */
int placefs_mount_shard_ok(struct placefs_mount *m, uint32_t i);

/*
 * Verifies aux file j as shards are verified (fstat of its descriptor, stat
 * of its path: device, inode, size, mtime and ctime as validated; an aux
 * file has no header to compare, so any change counts). Returns 0, -EIO
 * (it shrank) or -ESTALE; the first failure is logged. After a failure, at
 * most once a second, a file at its path on another file system (the
 * source's file system mounted again) with the size and mtime validated and
 * the same bytes (where the old descriptor still reads) is taken in its
 * place, as placefs_ckpt_shard_reopen() takes a shard.
 */
int placefs_mount_aux_ok(struct placefs_mount *m, size_t j);

/* Whether shard i is OK as far as the last requests found (one relaxed load, no check). */
bool placefs_mount_shard_healthy(const struct placefs_mount *m, uint32_t i);

/*
 * Shard i's read-only mapping, when READs of it are served from there:
 * read_mode=mmap, the shard could be mapped and no reply from the mapping
 * has faulted. Otherwise NULL: read it with pread.
 */
const uint8_t *placefs_mount_shard_map(const struct placefs_mount *m, uint32_t i);

/*
 * A READ of shard i succeeded: a shard with failing reads is OK again once
 * it has had none for PLACEFS_SHARD_QUIET_NS. One relaxed load when healthy.
 */
void placefs_mount_shard_read_ok(struct placefs_mount *m, uint32_t i);

/*
 * pread of shard i failed at byte `pos` with errno `errnum`, or with 0: it
 * returned fewer bytes than asked (the shard shrank). The shard now has
 * failing reads; its READs answer EIO.
 */
void placefs_mount_shard_read_failed(struct placefs_mount *m, uint32_t i, uint64_t pos, int errnum);

/*
 * The reply to a READ from shard i's mapping at byte `pos` failed with rc.
 * -EFAULT means the kernel's copy from the mapping faulted (the shard shrank,
 * or its file system could not read the pages in): the shard has failing
 * reads and is served with pread from now on (logged once). Any other rc
 * (-ENOENT: the request was interrupted) is not the shard's fault: nothing
 * is recorded.
 */
void placefs_mount_shard_map_failed(struct placefs_mount *m, uint32_t i, uint64_t pos, int rc);

/*
 * Sets this mount's readahead (-o readahead=) through sysfs, once, on the
 * first request after INIT; later calls cost one relaxed load. Root only;
 * otherwise the kernel default stays (logged).
 */
void placefs_mount_tune_readahead(struct placefs_mount *m);

/*
 * Writes the mount's own members of .placefs/stats into the object open in
 * w: the counters, the tensors per placement, read_mode, uptime_s and
 * stale_shards (the shards not OK now).
 */
void placefs_mount_stats(const struct placefs_mount *m, struct placefs_stats *w);

#endif
