/* SPDX-License-Identifier: MIT */
/*
 * ioctl_i: what the parts of the staging glue share (fs/ioctl.h is its
 * public face). The module is split by concern, each part a file:
 *
 *   ioctl.c         the protocol dispatch (placefs_ioctl_op), the checks of
 *                   every request's fields, cancellation, prefetch hints,
 *                   RING_INFO and RELEASE, create/shutdown/free;
 *   ioctl_access.c  the access policy: who may read a shard and borrow the
 *                   ring, each user's ring share and leases;
 *   ioctl_stage.c   STAGE: one tensor, on the FUSE worker or a thread of
 *                   its own;
 *   ioctl_batch.c   STAGE_BATCH: the batch queue and its pool of workers;
 *   ioctl_stats.c   the "staging" rows of .placefs/stats.
 *
 * Only these files include this header (scripts/check-includes).
 */
#ifndef PLACEFS_FS_IOCTL_I_H
#define PLACEFS_FS_IOCTL_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/perm.h"
#include "common/slice.h"
#include "ioctl.h"
#include "log.h"
#include "placefs/ioctl.h"
#include "staging/backend.h"
#include "staging/fill.h"
#include "staging/gate.h"
#include "staging/stagers.h"

/* GPU tensors handed to the prefetcher after each stage, and when to hand on more. */
#define HINT_WINDOW PLACEFS_STAGE_PREFETCH_MAX
/* No prefetch hints this long after a sliced stage (ioctl_hint_sliced()). */
#define SLICED_QUIET_NS (2ULL * 1000 * 1000 * 1000)
/* How often the watcher looks whether the session is ending. */
#define WATCH_NS (100ULL * 1000 * 1000)
/* Every this many looks it drops the cached copy destinations nobody can use. */
#define SWEEP_TICKS 10
/* A timeout longer than this (about 100 years) is no timeout. */
#define TIMEOUT_MAX_NS (3155760000ULL * 1000000000ULL)
/* Buckets of the lease table (leases of users whose ring share is ioctl_capped). */
#define LEASE_BUCKETS 256
/* (uid, gid) pairs whose answers are remembered (struct perm_entry). */
#define PERM_CACHE 64
/* Callers' group lists whose right to borrow is remembered (struct perm_groups). */
#define PERM_GROUPS_CACHE 16
/* Supplementary groups a struct ioctl_who holds without the heap. */
#define WHO_GROUPS 32

/* What one user has now (fs->lock). */
struct user_use {
	uid_t uid;
	uint64_t bytes;   /* capped: of leases held and stages in progress */
	unsigned waiting; /* capped: stages on threads of their own */
	unsigned ring;    /* stages and batch runs through the ring in progress */
	unsigned slots;   /* not root nor the daemon's: worker slots held (ioctl_slot_get()) */
};

/* A lease of a capped user: its bytes count against the user until it ends. */
struct lease_rec {
	struct lease_rec *next;
	uint64_t lease;
	uint64_t fh;
	uid_t uid;
	uint64_t bytes;
};

/*
 * Who asks: the request's uid and gid (FUSE passes the caller's fsuid and
 * fsgid, what the kernel checks) and, when a decision about them depends
 * on it, the caller's supplementary groups (ioctl_who_get()).
 */
struct ioctl_who {
	uid_t uid;
	gid_t gid;
	int ngroups;   /* -1: not known (not needed, or they could not be read) */
	gid_t *groups; /* ngroups of them: small[] or the heap */
	gid_t small[WHO_GROUPS];
};

/*
 * What (uid, gid) may do, as far as it is known without the supplementary
 * groups (lib/common/perm.h's placefs_perm_reads_primary()); fs->lock.
 */
struct perm_entry {
	uid_t uid;
	gid_t gid;
	bool groups; /* some shard's answer depends on the supplementary groups */
	enum placefs_perm_answer borrow; /* DEPENDS: decided with the groups */
};

/* A caller's right to borrow with its group list (fs->lock). */
struct perm_groups {
	uid_t uid;
	gid_t gid;
	size_t ngroups;
	gid_t *groups; /* sorted */
	bool ok;
};

/* One STAGE request while it runs (on a FUSE worker's stack or on the heap). */
struct sreq {
	struct sreq *prev;
	struct sreq *next;
	struct placefs_ioctl *fs;
	fuse_req_t req;
	int cancel; /* set by an interrupt or by shutdown; polled by the ring */
	uint64_t fh;
	size_t entry;
	uid_t uid;
	pid_t pid;         /* the caller's thread, 0 if not visible in our PID namespace */
	uint64_t reserved; /* bytes counted against uid's ring share; 0: not capped */
	bool ring;         /* counted in the ring's users (ioctl_ring_enter()) */
	bool slot;         /* holds a worker slot (ioctl_slot_get()) */
	bool slot_user;    /* ... counted against uid's slots too */
	bool thread;       /* runs on a thread of its own (counted in the user's waiting) */
	bool sliced;       /* io.flags has PLACEFS_IOC_STAGE_SLICE: `lay` is the slice */
	unsigned pos;      /* the stager (position in the device list) that serves it */
	struct placefs_slice_layout lay;
	struct placefs_ioc_stage io;
};

/* One tensor of a STAGE_BATCH request as it runs: an entry, or a tensor of a range. */
struct bitem {
	uint64_t tensor;      /* plan index */
	uint64_t dest_offset; /* in the batch's destination */
	uint64_t nbytes;      /* out: its payload bytes */
	int32_t error;        /* out: 0 or a positive errno */
	uint32_t out_flags;   /* out: PLACEFS_IOC_STAGED_* */
	unsigned from;        /* the request's entry it belongs to */
};

/* One STAGE_BATCH request while it runs: its items go to the batch pool. */
struct bjob {
	struct sreq r;                      /* cancel flag, the in-flight list, the caller's ids */
	struct ioctl_who who;               /* the caller, for each entry's permission */
	struct placefs_ioc_stage_batch *io; /* in and out */
	int dfd;                            /* read mode: the destination shm object */
	unsigned pos;                       /* copy mode: the stager of the destination's device */
	bool direct;                        /* copy mode: that stager copies direct (no ring) */
	struct bitem *items;                /* the entries, or the ranges' tensors */
	size_t nitems;
	struct {
		size_t first, count;
	} * runs; /* items moved as one range (batch_runs()), nitems at most */
	size_t nruns;
	size_t next;          /* the next run to start (fs->block) */
	size_t inflight;      /* runs in progress (fs->block) */
	size_t done;          /* items that succeeded (fs->block) */
	pthread_cond_t ended; /* inflight reached 0 with no entry left */
	struct bjob *next_job;
};

/* Threads that run batch entries besides the request's own: online CPUs in [2, 8]. */
#define BATCH_THREADS 8

/* The staging glue of one mount. */
struct placefs_ioctl {
	struct placefs_mount *m;
	struct placefs_stagers *ss;  /* one stager per device; NULL: staging disabled */
	unsigned nst;                /* placefs_stagers_count(ss) */
	struct placefs_filler *fill; /* READ mode: shard -> caller's shm, no ring */
	struct placefs_gate *gate;   /* the stagers' disk reads; NULL: -o disk_streams=0 */
	/* The next shards' fetches (lib/staging/lookahead.h); NULL: -o lookahead off. */
	struct placefs_lookahead *lookahead;

	/* The batch pool (STAGE_BATCH): its threads run entries of the oldest job. */
	pthread_mutex_t block;
	pthread_cond_t bwork;
	struct bjob *bjobs;
	bool bstop;
	unsigned nbthreads, nbwant;
	pthread_t bthreads[BATCH_THREADS];
	atomic_uint_fast64_t batches;       /* STAGE_BATCH requests answered */
	atomic_uint_fast64_t batch_entries; /* their entries */
	atomic_uint_fast64_t batch_failed;  /* entries that failed */
	atomic_uint_fast64_t batch_moves;   /* ranges read or staged for them (runs) */
	struct placefs_backend_info info;   /* stager 0's (every ring has the same size) */
	struct placefs_backend_info infos[PLACEFS_DEVICES_MAX]; /* per position */
	uint64_t align;
	/* For the log and stats: "none", "host (/placefs-1-0)", "host:0,host:1", ... */
	char device[PLACEFS_DEVICES_NAME_MAX + 160];
	char log_line[1024];  /* what placefs_ioctl_log() says */
	char share_line[256]; /* and who may borrow (the host ring's audience), or "" */
	char plan_line[1024]; /* what placefs_ioctl_plan_line() gives */

	/* GPU-placed plan entries in checkpoint order, and each entry's position there. */
	size_t ngpu;
	size_t *gpu;
	size_t *gpu_pos; /* SIZE_MAX for cpu-placed entries */

	pthread_mutex_t hint_lock;
	struct {
		bool hinted;
		size_t hint_lo; /* the hint list is gpu[hint_lo, hint_hi) */
		size_t hint_hi;
		size_t last_pos;      /* the GPU position staged last */
		uint64_t sliced_ns;   /* placefs_clock_ns() of the last sliced stage, 0: none */
	} hints[PLACEFS_DEVICES_MAX]; /* per stager: each device's loader walks its own way */

	pthread_mutex_t lock; /* the in-flight list, `detached`, `closing` */
	pthread_cond_t cond;  /* detached threads ended; the watcher's clock */
	struct sreq *inflight;
	unsigned detached;
	bool closing;
	bool watch_stop;
	bool watcher_started;
	pthread_t watcher;

	atomic_uint inline_busy; /* worker slots held: stages on workers and batches */
	unsigned inline_max;
	unsigned user_inline_max;        /* of those, per user other than root and the daemon's */
	atomic_uint_fast64_t refused;    /* requests refused before reaching the stager */
	atomic_uint_fast64_t threads;    /* stages that ran on a thread of their own */
	atomic_uint_fast64_t busy;       /* stages refused: no thread slot or ring share left */
	atomic_uint_fast64_t denied;     /* borrows refused: the caller may not read every shard */
	atomic_uint_fast64_t share_over; /* grants beyond a capped user's ring share, alone */

	/* Shared-host limits (fs/opts.h); the tables below are under `lock`. */
	struct placefs_log_limit loglim; /* lines about client errors */
	uid_t self_uid;                  /* the daemon's own: never capped */
	uint64_t default_timeout_ns;     /* for stages that give none; 0: none */
	unsigned max_waiting;            /* stages on threads of their own at once */
	unsigned user_waiting_max;       /* of those, per capped user */
	uint64_t share_bytes;            /* ring bytes per capped user */
	unsigned ring_busy;              /* stages and batch runs through the ring in progress */
	struct user_use *users;
	size_t nusers;
	struct lease_rec *leases[LEASE_BUCKETS];
	struct perm_entry pcache[PERM_CACHE];
	size_t npcache;
	struct perm_groups gcache[PERM_GROUPS_CACHE];
	size_t ngcache, gnext;
	/*
	 * Who may open the host rings (their shm objects' owner, group and mode,
	 * as ioctl_ring_share() set them): a borrow or a ring handle goes only to
	 * a caller who may (ring_host). CUDA rings: anyone who reads every shard.
	 */
	bool ring_host;
	struct placefs_perm ring_perm;
};

/* ---- ioctl.c: helpers, request checks, cancellation, hints ---- */

bool ioctl_all_zero(const void *p, size_t n);
const char *ioctl_fname_of(struct placefs_mount *m, size_t entry);
/* Logs why a request is refused before it reaches the stager, and answers it. */
void ioctl_refuse(fuse_req_t req, struct placefs_ioctl *fs, int e, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Writes why a request is malformed and returns EINVAL. */
int ioctl_bad(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Every field of a request; 0 or the errno, with a message in why. */
int ioctl_check_dest(uint32_t mode, uint32_t kind, uint32_t hbytes, const uint8_t *handle,
                     char *why, size_t len);
int ioctl_check_stage(const struct placefs_ioc_stage *s, char *why, size_t len);
int ioctl_check_batch(const struct placefs_ioc_stage_batch *b, char *why, size_t len);
/* The request's interrupt callback: sets r->cancel and wakes the stagers. */
void ioctl_on_interrupt(fuse_req_t req, void *data);
/* The in-flight list that shutdown cancels (fs->lock). */
void ioctl_inflight_add(struct placefs_ioctl *fs, struct sreq *r);
void ioctl_inflight_del(struct placefs_ioctl *fs, struct sreq *r);
/* Prefetch hints after a whole-tensor stage and after a sliced one. */
void ioctl_hint_after(struct placefs_ioctl *fs, unsigned spos, size_t entry);
void ioctl_hint_sliced(struct placefs_ioctl *fs, unsigned spos);
/* Whether a copy-mode stage on stager pos goes direct (takes no ring space). */
bool ioctl_copies_direct(const struct placefs_ioctl *fs, unsigned pos);

/* ---- ioctl_access.c: the access policy ---- */

/* Whether uid is root or the daemon's own: trusted, never bound per user. */
bool ioctl_trusted(const struct placefs_ioctl *fs, uid_t uid);
/* Whether uid's ring share and waiting stages are capped: anyone but root and the daemon's uid. */
bool ioctl_capped(const struct placefs_ioctl *fs, uid_t uid);
/* uid's entry, added if new; NULL when out of memory. Under fs->lock. */
struct user_use *ioctl_user_get(struct placefs_ioctl *fs, uid_t uid);
/* Gives back `bytes` of uid's share (and a waiting slot when `thread`). */
void ioctl_share_put(struct placefs_ioctl *fs, uid_t uid, uint64_t bytes, bool thread);
/*
 * A stage or batch run of uid that takes `need` bytes of ring space begins:
 * it counts among the ring's users until ioctl_ring_leave(). A capped user
 * reserves `need` of its share (*reserved; 0 when not capped); beyond its
 * share only while no other user's stage or run through the ring is in
 * progress (work-conserving), else -EBUSY. 0, -EBUSY or -ENOMEM.
 */
int ioctl_ring_enter(struct placefs_ioctl *fs, uid_t uid, uint64_t need, uint64_t *reserved);
/* The request of ioctl_ring_enter() ended; `bytes` of its reservation go back (0: a lease keeps them). */
void ioctl_ring_leave(struct placefs_ioctl *fs, uid_t uid, uint64_t bytes);
/*
 * Takes one of the workers' slots (-o max_threads / 2) for r, a stage to run
 * on its FUSE worker or a batch: false when they are all held, or when r's
 * user (not root nor the daemon's) holds half of them already.
 */
bool ioctl_slot_get(struct placefs_ioctl *fs, struct sreq *r);
/* Gives r's slot back, if it holds one: before its reply goes out. */
void ioctl_slot_put(struct placefs_ioctl *fs, struct sreq *r);
/* Records a capped user's new lease; false when out of memory. Under fs->lock. */
bool ioctl_lease_add(struct placefs_ioctl *fs, const struct sreq *r, uint64_t lease);
/* Lease `lease` ended, or every lease of file handle fh: their bytes no longer count. */
void ioctl_lease_end(struct placefs_ioctl *fs, uint64_t lease);
void ioctl_lease_end_owner(struct placefs_ioctl *fs, uint64_t fh);
/*
 * Fills w for request req: its uid and gid, and its supplementary groups
 * when some decision for (uid, gid) depends on them (read from /proc by
 * fuse_req_getgroups(); ngroups -1 when it cannot say). Release with
 * ioctl_who_release().
 */
void ioctl_who_get(struct placefs_ioctl *fs, fuse_req_t req, struct ioctl_who *w);
void ioctl_who_release(struct ioctl_who *w);
/*
 * Whether w may read shard i, as the kernel would let it open the shard
 * (lib/common/perm.h); with its groups unknown, only what no group list
 * could refuse. Root reads everything.
 */
bool ioctl_perm_reads(struct placefs_ioctl *fs, const struct ioctl_who *w, uint32_t shard);
/*
 * Whether w may borrow: read every shard (a lease lends the whole ring)
 * and, for host rings, open the ring's shm object (ioctl_ring_share()).
 * Root and the daemon's uid may.
 */
bool ioctl_may_borrow(struct placefs_ioctl *fs, const struct ioctl_who *w);
/* The host rings' owner, group and mode before ioctl_ring_share(): the daemon's, 0600. */
int ioctl_perms_init(struct placefs_ioctl *fs);
/*
 * Once the stagers exist: lets the widest audience that reads every shard
 * (everyone, or one group) open the host rings read-only, and records it in
 * ring_perm; logged. A ring that cannot be shared stays the daemon's alone.
 */
void ioctl_ring_share(struct placefs_ioctl *fs);

/* ---- ioctl_stage.c: STAGE ---- */

const char *ioctl_mode_name(uint32_t mode);
void ioctl_do_stage(fuse_req_t req, struct placefs_ioctl *fs, size_t entry, uint64_t fh,
                    const struct placefs_ioc_stage *in);

/* ---- ioctl_batch.c: STAGE_BATCH ---- */

void ioctl_do_batch(fuse_req_t req, struct placefs_ioctl *fs, uint64_t fh,
                    const struct placefs_ioc_stage_batch *in);
/* A thread of the batch pool (fs->bthreads). */
void *ioctl_batch_main(void *arg);

/* ---- ioctl_stats.c: the "staging" rows ---- */

/* Zeroes the counters this module owns (its rows of base 1), at create. */
void ioctl_stats_zero(struct placefs_ioctl *fs);

#endif /* PLACEFS_FS_IOCTL_I_H */
