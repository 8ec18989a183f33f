/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "staging/backend.h"
#include "common/clock.h"
#include "staging/fill.h"
#include "staging/gate.h"
#include "ioctl.h"
#include "log.h"
#include "common/size.h"
#include "common/slice.h"
#include "staging/stage.h"
#include "staging/stagers.h"
#include "stats.h"

/* GPU tensors handed to the prefetcher after each stage, and when to hand on more. */
#define HINT_WINDOW PLACEFS_STAGE_PREFETCH_MAX
/* No prefetch hints this long after a sliced stage (hint_sliced()). */
#define SLICED_QUIET_NS (2ULL * 1000 * 1000 * 1000)
/* How often the watcher looks whether the session is ending. */
#define WATCH_NS (100ULL * 1000 * 1000)
/* Every this many looks it drops the cached copy destinations nobody can use. */
#define SWEEP_TICKS 10
/* A timeout longer than this (about 100 years) is no timeout. */
#define TIMEOUT_MAX_NS (3155760000ULL * 1000000000ULL)
/* Buckets of the lease table (leases of users whose ring share is capped). */
#define LEASE_BUCKETS 256
/* (uid, gid) pairs whose right to borrow is remembered. */
#define PERM_CACHE 64

/* What one user whose ring share is capped has now (fs->lock). */
struct user_use {
	uid_t uid;
	uint64_t bytes;   /* of leases held and stages in progress */
	unsigned waiting; /* stages on threads of their own */
};

/* A lease of a capped user: its bytes count against the user until it ends. */
struct lease_rec {
	struct lease_rec *next;
	uint64_t lease;
	uint64_t fh;
	uid_t uid;
	uint64_t bytes;
};

/* What decides who may read a shard, as it was at mount. */
struct shard_perm {
	uid_t uid;
	gid_t gid;
	mode_t mode;
	bool acl; /* it has an access ACL: only its owner bits are trusted */
};

struct perm_entry {
	uid_t uid;
	gid_t gid;
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
	struct sreq r; /* cancel flag, the in-flight list, the caller's ids */
	gid_t gid;
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

	atomic_uint inline_busy;
	unsigned inline_max;
	atomic_uint_fast64_t refused; /* requests refused before reaching the stager */
	atomic_uint_fast64_t threads; /* stages that ran on a thread of their own */
	atomic_uint_fast64_t busy;    /* stages refused: no thread slot or ring share left */
	atomic_uint_fast64_t denied;  /* borrows refused: the caller may not read every shard */

	/* Shared-host limits (fs/opts.h); the tables below are under `lock`. */
	struct placefs_log_limit loglim; /* lines about client errors */
	uid_t self_uid;                  /* the daemon's own: never capped */
	uint64_t default_timeout_ns;     /* for stages that give none; 0: none */
	unsigned max_waiting;            /* stages on threads of their own at once */
	unsigned user_waiting_max;       /* of those, per capped user */
	uint64_t share_bytes;            /* ring bytes per capped user */
	struct user_use *users;
	size_t nusers;
	struct lease_rec *leases[LEASE_BUCKETS];
	struct shard_perm *perms; /* per shard */
	size_t nperms;
	struct perm_entry pcache[PERM_CACHE];
	size_t npcache;
};

/* ---- helpers ------------------------------------------------------------------- */

static bool all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static const char *fname_of(struct placefs_mount *m, size_t entry)
{
	return placefs_plan_entry(m->plan, entry)->fname;
}

/* Logs why a request is refused before it reaches the stager, and answers it. */
static void refuse(fuse_req_t req, struct placefs_ioctl *fs, int e, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void refuse(fuse_req_t req, struct placefs_ioctl *fs, int e, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add_explicit(&placefs_mount_of(req)->ctr.client_errors, 1,
	                          memory_order_relaxed);
	if (fs) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		/* Any client can send these at will: a burst, then one line a second. */
		placefs_log_limited(&fs->loglim, e == EFBIG ? LOG_NOTICE : LOG_WARNING,
		                    "staging: %s (%s)", msg, strerror(e));
	} else {
		placefs_log(e == EFBIG ? LOG_NOTICE : LOG_WARNING, "staging: %s (%s)", msg,
		            strerror(e));
	}
	fuse_reply_err(req, e);
}

/* ---- cancellation ------------------------------------------------------------ */

static void on_interrupt(fuse_req_t req, void *data)
{
	struct sreq *r = data;

	(void)req;
	__atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
	if (r->fs->ss) /* a read-mode request on a mount without staging */
		placefs_stagers_wake(r->fs->ss);
}

/* Ends every wait and refuses new stages: the session is ending. */
static void cancel_all(struct placefs_ioctl *fs)
{
	struct sreq *r;

	pthread_mutex_lock(&fs->lock);
	fs->closing = true;
	for (r = fs->inflight; r; r = r->next)
		__atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&fs->lock);
	if (fs->ss)
		placefs_stagers_wake(fs->ss);
}

static void inflight_add(struct placefs_ioctl *fs, struct sreq *r)
{
	pthread_mutex_lock(&fs->lock);
	r->prev = NULL;
	r->next = fs->inflight;
	if (fs->inflight)
		fs->inflight->prev = r;
	fs->inflight = r;
	/* Registered before this check, so cancel_all() cannot miss it. */
	if (fs->closing)
		r->cancel = 1;
	pthread_mutex_unlock(&fs->lock);
}

static void inflight_del(struct placefs_ioctl *fs, struct sreq *r)
{
	pthread_mutex_lock(&fs->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		fs->inflight = r->next;
	if (r->next)
		r->next->prev = r->prev;
	pthread_mutex_unlock(&fs->lock);
}

/*
 * libfuse ends the session loop by joining its workers, and a worker waiting
 * for ring space would keep it from ever returning (SIGTERM with a lease
 * held elsewhere). This thread notices the session's end and cancels the
 * waits; a stage already past its wait finishes its I/O normally.
 */
static void *watch_main(void *arg)
{
	struct placefs_ioctl *fs = arg;
	unsigned ticks = 0;

	pthread_mutex_lock(&fs->lock);
	while (!fs->watch_stop) {
		if (fs->m->se && fuse_session_exited(fs->m->se)) {
			pthread_mutex_unlock(&fs->lock);
			cancel_all(fs);
			pthread_mutex_lock(&fs->lock);
			break;
		}
		/*
		 * Copy destinations whose clients unlinked them or exited stay
		 * mapped (their pages allocated) until this drops them.
		 */
		if (++ticks % SWEEP_TICKS == 0) {
			pthread_mutex_unlock(&fs->lock);
			placefs_stagers_sweep(fs->ss);
			pthread_mutex_lock(&fs->lock);
			continue;
		}
		placefs_clock_cond_wait_ns(&fs->cond, &fs->lock, WATCH_NS);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

/* ---- prefetch hints -------------------------------------------------------------- */

/*
 * After a stage of GPU tensor `entry`, makes sure the prefetcher knows the
 * GPU tensors that follow it. A loader walking the plan moves the stager's
 * cursor along the current list by itself; a new list (the next HINT_WINDOW
 * tensors) is handed over only when the loader has used half of it or did
 * not ask for the tensor after the last one (it started again or jumped),
 * so the cost stays O(1) per stage.
 */
static void hint_after(struct placefs_ioctl *fs, unsigned spos, size_t entry)
{
	struct placefs_prefetch_item *items;
	struct placefs_error err;
	size_t pos = fs->gpu_pos[entry], lo, hi, i;

	if (pos == SIZE_MAX || !fs->m->opts->prefetch || spos >= fs->nst)
		return;
	pthread_mutex_lock(&fs->hint_lock);
	if (fs->hints[spos].sliced_ns &&
	    placefs_clock_ns() - fs->hints[spos].sliced_ns < SLICED_QUIET_NS) {
		/* A tensor-parallel loader: see hint_sliced(). */
		pthread_mutex_unlock(&fs->hint_lock);
		return;
	}
	if (fs->hints[spos].hinted && pos == fs->hints[spos].last_pos + 1 &&
	    pos < fs->hints[spos].hint_lo + HINT_WINDOW / 2 && pos < fs->hints[spos].hint_hi) {
		fs->hints[spos].last_pos = pos;
		pthread_mutex_unlock(&fs->hint_lock);
		return;
	}
	fs->hints[spos].last_pos = pos;
	lo = pos + 1;
	hi = fs->ngpu - lo > HINT_WINDOW ? lo + HINT_WINDOW : fs->ngpu;
	items = calloc(hi > lo ? hi - lo : 1, sizeof(*items));
	if (!items) {
		pthread_mutex_unlock(&fs->hint_lock);
		return;
	}
	for (i = lo; i < hi; i++) {
		const struct placefs_tensor *t =
		        placefs_plan_entry(fs->m->plan, fs->gpu[i])->tensor;

		items[i - lo].fd = placefs_ckpt_shard(fs->m->ckpt, t->shard)->fd;
		items[i - lo].offset = t->offset;
		items[i - lo].nbytes = t->nbytes;
		items[i - lo].key = fs->gpu[i] + 1;
	}
	placefs_error_clear(&err);
	if (placefs_stager_prefetch(placefs_stagers_at(fs->ss, spos), items, hi - lo, &err) == 0) {
		fs->hints[spos].hinted = true;
		fs->hints[spos].hint_lo = lo;
		fs->hints[spos].hint_hi = hi;
	}
	pthread_mutex_unlock(&fs->hint_lock);
	free(items);
}

/*
 * A sliced stage on stager spos: its loader keeps a part of each tensor, so
 * the whole tensors the prefetcher would stage after a neighbour are bytes
 * nobody asks for (rank 0 of 8 read 4.6 GB beside its 2.2 GB). The hint
 * list is dropped and no new one is given for SLICED_QUIET_NS after the
 * last sliced stage; whole-tensor loads hint again after that.
 */
static void hint_sliced(struct placefs_ioctl *fs, unsigned spos)
{
	struct placefs_error err;
	bool had;

	if (!fs->m->opts->prefetch || spos >= fs->nst)
		return;
	pthread_mutex_lock(&fs->hint_lock);
	had = fs->hints[spos].hinted;
	fs->hints[spos].hinted = false;
	fs->hints[spos].sliced_ns = placefs_clock_ns();
	if (had) {
		placefs_error_clear(&err);
		(void)placefs_stager_prefetch(placefs_stagers_at(fs->ss, spos), NULL, 0, &err);
	}
	pthread_mutex_unlock(&fs->hint_lock);
}

/* ---- shared-host limits ------------------------------------------------------------ */

/* Whether a copy-mode stage on stager pos goes direct (takes no ring space). */
static bool copies_direct(const struct placefs_ioctl *fs, unsigned pos)
{
	return placefs_stager_is_direct(placefs_stagers_at(fs->ss, pos));
}

/* Whether uid's ring share and waiting stages are capped: anyone but root and the daemon's uid. */
static bool capped(const struct placefs_ioctl *fs, uid_t uid)
{
	return uid != 0 && uid != fs->self_uid && fs->share_bytes != UINT64_MAX;
}

/* uid's entry, added if new; NULL when out of memory. Under fs->lock. */
static struct user_use *user_get(struct placefs_ioctl *fs, uid_t uid)
{
	struct user_use *u;
	size_t i;

	for (i = 0; i < fs->nusers; i++)
		if (fs->users[i].uid == uid)
			return &fs->users[i];
	u = realloc(fs->users, (fs->nusers + 1) * sizeof(*u));
	if (!u)
		return NULL;
	fs->users = u;
	u = &fs->users[fs->nusers++];
	memset(u, 0, sizeof(*u));
	u->uid = uid;
	return u;
}

/* Gives back `bytes` of uid's share (and a waiting slot when `thread`). */
static void share_put(struct placefs_ioctl *fs, uid_t uid, uint64_t bytes, bool thread)
{
	struct user_use *u;

	if (!bytes && !thread)
		return;
	pthread_mutex_lock(&fs->lock);
	u = user_get(fs, uid);
	if (u) {
		u->bytes -= bytes < u->bytes ? bytes : u->bytes;
		if (thread && u->waiting)
			u->waiting--;
	}
	pthread_mutex_unlock(&fs->lock);
}

static size_t lease_bucket(uint64_t lease)
{
	return (size_t)((lease * 0x9E3779B97F4A7C15ULL) >> 56) % LEASE_BUCKETS;
}

/* Records a capped user's new lease; false when out of memory. Under fs->lock. */
static bool lease_add(struct placefs_ioctl *fs, const struct sreq *r, uint64_t lease)
{
	struct lease_rec *l = malloc(sizeof(*l));
	size_t b = lease_bucket(lease);

	if (!l)
		return false;
	l->lease = lease;
	l->fh = r->fh;
	l->uid = r->uid;
	l->bytes = r->reserved;
	l->next = fs->leases[b];
	fs->leases[b] = l;
	return true;
}

/* Lease `lease` ended: its bytes no longer count against its user. */
static void lease_end(struct placefs_ioctl *fs, uint64_t lease)
{
	struct lease_rec **p, *l = NULL;
	struct user_use *u;

	pthread_mutex_lock(&fs->lock);
	for (p = &fs->leases[lease_bucket(lease)]; *p; p = &(*p)->next) {
		if ((*p)->lease == lease) {
			l = *p;
			*p = l->next;
			break;
		}
	}
	if (l && (u = user_get(fs, l->uid)) != NULL)
		u->bytes -= l->bytes < u->bytes ? l->bytes : u->bytes;
	pthread_mutex_unlock(&fs->lock);
	free(l);
}

/* Every lease of file handle fh ended (it was closed). */
static void lease_end_owner(struct placefs_ioctl *fs, uint64_t fh)
{
	struct lease_rec **p, *l;
	struct user_use *u;
	size_t b;

	pthread_mutex_lock(&fs->lock);
	for (b = 0; b < LEASE_BUCKETS; b++) {
		p = &fs->leases[b];
		while ((l = *p) != NULL) {
			if (l->fh != fh) {
				p = &l->next;
				continue;
			}
			*p = l->next;
			if ((u = user_get(fs, l->uid)) != NULL)
				u->bytes -= l->bytes < u->bytes ? l->bytes : u->bytes;
			free(l);
		}
	}
	pthread_mutex_unlock(&fs->lock);
}

/*
 * Whether shard permission p lets (uid, gid) read by its mode bits, as
 * the kernel decides for a process whose only group is gid: owner bits
 * for the owner, else group bits for the group, else other bits. With an
 * access ACL, whose group bits are its mask and whose named entries could
 * say anything, only the owner is trusted.
 */
static bool perm_reads(const struct shard_perm *p, uid_t uid, gid_t gid)
{
	if (p->uid == uid)
		return p->mode & S_IRUSR;
	if (p->acl)
		return false;
	if (p->gid == gid)
		return p->mode & S_IRGRP;
	return p->mode & S_IROTH;
}

/*
 * Borrowing lends a mapping (host) or IPC handle (CUDA) of the whole ring,
 * which holds tensors of every shard that other clients stage: only a
 * caller who may read every shard may borrow (root, the daemon's uid, or a
 * uid whose mode bits, with its primary group, read every shard). Copy
 * mode writes only the caller's own tensor and stays open to everyone who
 * may open the file. Decided once per (uid, gid), from the shards' modes
 * at mount (which the tree's modes are made from).
 */
static bool may_borrow(struct placefs_ioctl *fs, uid_t uid, gid_t gid)
{
	bool ok = true;
	size_t i;

	if (uid == 0 || uid == fs->self_uid)
		return true;
	pthread_mutex_lock(&fs->lock);
	for (i = 0; i < fs->npcache; i++) {
		if (fs->pcache[i].uid == uid && fs->pcache[i].gid == gid) {
			ok = fs->pcache[i].ok;
			pthread_mutex_unlock(&fs->lock);
			return ok;
		}
	}
	for (i = 0; ok && i < fs->nperms; i++)
		ok = perm_reads(&fs->perms[i], uid, gid);
	/* A full cache stays as it is: the answer is recomputed, O(shards). */
	if (fs->npcache < PERM_CACHE)
		fs->pcache[fs->npcache++] = (struct perm_entry){uid, gid, ok};
	pthread_mutex_unlock(&fs->lock);
	return ok;
}

/* Reads every shard's owner, group, mode and whether it has an ACL; -ENOMEM or 0. */
static int perms_init(struct placefs_ioctl *fs)
{
	size_t i, n = fs->m->nshards;
	struct stat st;

	fs->perms = calloc(n ? n : 1, sizeof(*fs->perms));
	if (!fs->perms)
		return -ENOMEM;
	fs->nperms = n;
	for (i = 0; i < n; i++) {
		int fd = placefs_ckpt_shard(fs->m->ckpt, i)->fd;
		struct shard_perm *p = &fs->perms[i];

		if (fstat(fd, &st) != 0) {
			/* Unknown: nobody but root and the daemon's uid may borrow. */
			p->uid = 0;
			p->mode = 0;
			p->acl = true;
			continue;
		}
		p->uid = st.st_uid;
		p->gid = st.st_gid;
		p->mode = st.st_mode;
		p->acl = fgetxattr(fd, "system.posix_acl_access", NULL, 0) > 0;
	}
	return 0;
}

/* ---- STAGE -------------------------------------------------------------------------- */

static const char *mode_name(uint32_t mode)
{
	return mode == PLACEFS_IOC_STAGE_COPY   ? "copy"
	       : mode == PLACEFS_IOC_STAGE_READ ? "read"
	                                        : "borrow";
}

/*
 * READ mode: the tensor's bytes from its shard straight into the caller's
 * shm object, by the filler's threads and this one; no ring is involved.
 */
static int run_read(struct sreq *r, int fd, const struct placefs_tensor *t,
                    struct placefs_stage_span *span, struct placefs_error *err)
{
	const struct placefs_ioc_stage *io = &r->io;
	struct placefs_fill_opts fo = {.cancel = &r->cancel, .name = t->name};
	struct timespec dl;
	uint64_t t0 = placefs_clock_ns(), end;
	int dfd, rc;

	if (__builtin_add_overflow(io->dest_offset, t->nbytes, &end) || end > io->dest_size)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "tensor \"%s\" (%llu bytes) does not fit at dest_offset "
		                         "%llu of dest_size %llu",
		                         t->name, (unsigned long long)t->nbytes,
		                         (unsigned long long)io->dest_offset,
		                         (unsigned long long)io->dest_size);
	if (io->timeout_ns && io->timeout_ns <= TIMEOUT_MAX_NS) {
		dl = placefs_clock_deadline(io->timeout_ns);
		fo.deadline = &dl;
	} else if (!io->timeout_ns && r->fs->default_timeout_ns) {
		dl = placefs_clock_deadline(r->fs->default_timeout_ns);
		fo.deadline = &dl;
	}
	/* The daemon writes only into shared memory that belongs to the caller. */
	dfd = placefs_fill_open_shm((const char *)io->dest_handle, 1, (unsigned)r->uid,
	                            io->dest_size, err);
	if (dfd < 0)
		return dfd;
	rc = placefs_filler_copy(r->fs->fill, fd, t->offset, dfd, io->dest_offset, t->nbytes, &fo,
	                         err);
	close(dfd);
	if (rc < 0)
		return rc;
	memset(span, 0, sizeof(*span));
	span->nbytes = t->nbytes;
	span->read_ns = span->total_ns = placefs_clock_ns() - t0;
	return 0;
}

static void run_stage(struct sreq *r)
{
	struct placefs_ioctl *fs = r->fs;
	struct placefs_mount *m = fs->m;
	const struct placefs_tensor *t = placefs_plan_entry(m->plan, r->entry)->tensor;
	int fd = placefs_ckpt_shard(m->ckpt, t->shard)->fd;
	/*
	 * A slice never matches a prefetch hint (hints are whole tensors) and
	 * gives none: a rank's loader asks for its slices, not the tensors.
	 */
	struct placefs_stage_opts o = {
	        .key = r->sliced ? 0 : r->entry + 1,
	        .owner = r->fh,
	        .cancel = &r->cancel,
	        .name = t->name,
	        .slice = r->sliced ? &r->lay : NULL,
	};
	struct placefs_stage_span span;
	struct placefs_error err;
	struct placefs_dest dest;
	struct timespec dl;
	struct placefs_ioc_stage *io = &r->io;
	int rc;

	if (io->timeout_ns && io->timeout_ns <= TIMEOUT_MAX_NS) {
		dl = placefs_clock_deadline(io->timeout_ns);
		o.deadline = &dl;
	} else if (!io->timeout_ns && fs->default_timeout_ns) {
		/* No timeout given: -o stage_timeout (default 60 s), not forever. */
		dl = placefs_clock_deadline(fs->default_timeout_ns);
		o.deadline = &dl;
	}
	placefs_error_clear(&err);
	inflight_add(fs, r);
	fuse_req_interrupt_func(r->req, on_interrupt, r);
	if (io->mode == PLACEFS_IOC_STAGE_READ) {
		rc = run_read(r, fd, t, &span, &err);
	} else if (io->mode == PLACEFS_IOC_STAGE_COPY) {
		memset(&dest, 0, sizeof(dest));
		dest.kind = io->dest_kind;
		dest.handle_bytes = io->dest_handle_bytes;
		memcpy(dest.handle, io->dest_handle, sizeof(dest.handle));
		dest.offset = io->dest_offset;
		dest.size = io->dest_size;
		/* The daemon writes only into shared memory that belongs to the caller. */
		dest.check_uid = 1;
		dest.uid = r->uid;
		/* Its cached import goes once this process has exited. */
		dest.pid = r->pid;
		rc = placefs_stagers_stage_copy(fs->ss, r->pos, fd, t->offset, t->nbytes, &o, &dest,
		                                &span, &err);
	} else {
		rc = placefs_stagers_stage(fs->ss, r->pos, fd, t->offset, t->nbytes, &o, &span,
		                           &err);
	}
	/* After this no interrupt callback runs, so r may go away. */
	fuse_req_interrupt_func(r->req, NULL, NULL);
	inflight_del(fs, r);

	if (rc != 0 || io->mode != PLACEFS_IOC_STAGE_BORROW || !span.lease)
		/* Nothing stays held: the stage's bytes no longer count against its user. */
		share_put(fs, r->uid, r->reserved, false);
	if (rc != 0) {
		/* Timeouts and interrupts are flow control, counted in stats, not logged. */
		if (rc != -ETIMEDOUT && rc != -EINTR) {
			atomic_fetch_add_explicit(&m->ctr.client_errors, 1, memory_order_relaxed);
			placefs_log_limited(&fs->loglim, rc == -EFBIG ? LOG_NOTICE : LOG_ERR,
			                    "staging: %s of '%s' failed (%s): %s",
			                    mode_name(io->mode), fname_of(m, r->entry),
			                    strerror(-rc), err.msg[0] ? err.msg : strerror(-rc));
		}
		fuse_reply_err(r->req, -rc);
		return;
	}
	if (io->mode == PLACEFS_IOC_STAGE_BORROW && span.lease && r->reserved) {
		bool ok;

		/* Recorded before the caller hears of the lease, so that it can end it at once. */
		pthread_mutex_lock(&fs->lock);
		ok = lease_add(fs, r, span.lease);
		pthread_mutex_unlock(&fs->lock);
		if (!ok) {
			placefs_stagers_release(fs->ss, span.lease, r->fh);
			share_put(fs, r->uid, r->reserved, false);
			fuse_reply_err(r->req, ENOMEM);
			return;
		}
	}
	io->nbytes = span.nbytes;
	io->ring_offset = span.ring_offset;
	io->lease = span.lease;
	io->wait_ns = span.wait_ns;
	io->read_ns = span.read_ns;
	io->copy_ns = span.copy_ns;
	io->total_ns = span.total_ns;
	io->out_flags = span.prefetched ? PLACEFS_IOC_STAGED_PREFETCHED : 0;
	if (io->mode != PLACEFS_IOC_STAGE_READ)
		io->device = placefs_stagers_devices(fs->ss)->items[r->pos].index;
	if (fuse_reply_ioctl(r->req, 0, io, sizeof(*io)) != 0 && span.lease) {
		/* The caller is gone before it heard of its lease: nobody can release it. */
		if (placefs_stagers_release(fs->ss, span.lease, r->fh) == 0 && r->reserved)
			lease_end(fs, span.lease);
	}
	if (io->mode != PLACEFS_IOC_STAGE_READ && !r->sliced)
		hint_after(fs, r->pos, r->entry);
	else if (io->mode != PLACEFS_IOC_STAGE_READ)
		hint_sliced(fs, r->pos);
}

static void *detached_main(void *arg)
{
	struct sreq *r = arg;
	struct placefs_ioctl *fs = r->fs;

	run_stage(r);
	share_put(fs, r->uid, 0, r->thread);
	free(r);
	pthread_mutex_lock(&fs->lock);
	if (--fs->detached == 0)
		pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

/* Writes why a request is malformed and returns EINVAL. */
static int bad(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int bad(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return EINVAL;
}

/* The destination of a copy- or read-mode request (STAGE or STAGE_BATCH). */
static int check_dest(uint32_t mode, uint32_t kind, uint32_t hbytes, const uint8_t *handle,
                      char *why, size_t len)
{
	struct placefs_error err;

	if (mode == PLACEFS_IOC_STAGE_READ && kind != PLACEFS_IOC_HANDLE_HOST_SHM)
		return bad(why, len,
		           "read mode takes a host shm destination (kind %d), not kind %u",
		           PLACEFS_IOC_HANDLE_HOST_SHM, kind);
	switch (kind) {
	case PLACEFS_IOC_HANDLE_CUDA_IPC:
		if (hbytes != PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES)
			return bad(why, len, "a CUDA IPC handle is %d bytes, not %u",
			           PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES, hbytes);
		break;
	case PLACEFS_IOC_HANDLE_HOST_SHM:
		placefs_error_clear(&err);
		if (placefs_backend_shm_name_check(handle, hbytes, &err) < 0)
			return bad(why, len, "%s", err.msg);
		break;
	default: return bad(why, len, "unknown destination kind %u", kind);
	}
	if (hbytes < PLACEFS_IOC_HANDLE_MAX &&
	    !all_zero(handle + hbytes, PLACEFS_IOC_HANDLE_MAX - hbytes))
		return bad(why, len, "bytes after the destination handle are not zero");
	return 0;
}

/* Every field of a STAGE request; 0 or the errno, with a message. */
static int check_stage(const struct placefs_ioc_stage *s, char *why, size_t len)
{
	if (s->version != PLACEFS_IOC_VERSION)
		return bad(why, len, "version %u, expected %u", s->version, PLACEFS_IOC_VERSION);
	if (s->size != sizeof(*s))
		return bad(why, len, "size field %u, expected %zu", s->size, sizeof(*s));
	if (s->mode != PLACEFS_IOC_STAGE_BORROW && s->mode != PLACEFS_IOC_STAGE_COPY &&
	    s->mode != PLACEFS_IOC_STAGE_READ)
		return bad(why, len, "unknown mode %u", s->mode);
	if (s->flags & ~(PLACEFS_IOC_STAGE_SLICE | PLACEFS_IOC_STAGE_DEVICE))
		return bad(why, len, "flags 0x%x (known: SLICE 0x%x, DEVICE 0x%x)", s->flags,
		           PLACEFS_IOC_STAGE_SLICE, PLACEFS_IOC_STAGE_DEVICE);
	if (s->pad0 != 0 || !all_zero(s->reserved, sizeof(s->reserved)))
		return bad(why, len, "a reserved field is not zero");
	/* The fields of a flag that is clear must be zero. */
	if (!(s->flags & PLACEFS_IOC_STAGE_SLICE) &&
	    (s->slice_dim || s->slice_start || s->slice_len))
		return bad(why, len,
		           "slice_dim, slice_start and slice_len are not zero without the "
		           "SLICE flag");
	if (!(s->flags & PLACEFS_IOC_STAGE_DEVICE) && s->device)
		return bad(why, len, "device is not zero without the DEVICE flag");
	if (s->mode == PLACEFS_IOC_STAGE_READ && s->flags)
		return bad(why, len, "read mode takes no SLICE or DEVICE flag (it uses no ring)");
	if (s->mode == PLACEFS_IOC_STAGE_BORROW) {
		if (s->dest_kind || s->dest_handle_bytes || s->dest_offset || s->dest_size ||
		    !all_zero(s->dest_handle, sizeof(s->dest_handle)))
			return bad(why, len, "borrow mode takes no destination");
		return 0;
	}
	if (s->dest_offset > s->dest_size)
		return bad(why, len, "dest_offset %llu is past dest_size %llu",
		           (unsigned long long)s->dest_offset, (unsigned long long)s->dest_size);
	return check_dest(s->mode, s->dest_kind, s->dest_handle_bytes, s->dest_handle, why, len);
}

static void do_stage(fuse_req_t req, struct placefs_ioctl *fs, size_t entry, uint64_t fh,
                     const struct placefs_ioc_stage *in)
{
	struct placefs_mount *m = fs->m;
	const struct placefs_plan_entry *e = placefs_plan_entry(m->plan, entry);
	const struct fuse_ctx *ctx;
	struct sreq local, *r;
	struct user_use *u = NULL;
	struct placefs_slice_layout lay;
	struct placefs_error err;
	pthread_attr_t attr;
	pthread_t tid;
	char why[256];
	bool sliced = (in->flags & PLACEFS_IOC_STAGE_SLICE) != 0;
	int rc, pos = 0;
	unsigned i;

	rc = check_stage(in, why, sizeof(why));
	if (rc) {
		refuse(req, fs, rc, "'%s': bad stage request: %s", e->fname, why);
		return;
	}
	if (!fs->ss && in->mode != PLACEFS_IOC_STAGE_READ) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		fuse_reply_err(req, ENODEV);
		return;
	}
	placefs_error_clear(&err);
	if (sliced) {
		const struct placefs_tensor *t = e->tensor;
		struct placefs_slice sl = {
		        .dim = in->slice_dim, .start = in->slice_start, .len = in->slice_len};

		rc = placefs_slice_layout(t->name, t->dtype, t->ndim, t->shape, t->nbytes, &sl,
		                          &lay, &err);
		if (rc < 0) {
			refuse(req, fs, -rc, "'%s': bad slice: %s", e->fname, err.msg);
			return;
		}
	}
	if (in->mode != PLACEFS_IOC_STAGE_READ) {
		/* The ring of the named device, of the destination's, or the only one. */
		const struct placefs_devices *ds = placefs_stagers_devices(fs->ss);
		struct placefs_device dev = {ds->items[0].kind, in->device};
		struct placefs_dest dest;

		memset(&dest, 0, sizeof(dest));
		dest.kind = in->dest_kind;
		dest.handle_bytes = in->dest_handle_bytes;
		memcpy(dest.handle, in->dest_handle, sizeof(dest.handle));
		dest.offset = in->dest_offset;
		dest.size = in->dest_size;
		pos = placefs_stagers_route(
		        fs->ss, (in->flags & PLACEFS_IOC_STAGE_DEVICE) ? &dev : NULL,
		        in->mode == PLACEFS_IOC_STAGE_COPY ? &dest : NULL, &err);
		if (pos < 0) {
			refuse(req, fs, -pos, "'%s': %s", e->fname, err.msg);
			return;
		}
	}
	if (in->mode != PLACEFS_IOC_STAGE_READ &&
	    (e->placement == PLACEFS_PLACE_CPU || e->tensor->nbytes > fs->info.ring_bytes)) {
		char lim[32], ring[32];

		placefs_size_format(placefs_plan_limit(m->plan), lim, sizeof(lim));
		placefs_size_format(fs->info.ring_bytes, ring, sizeof(ring));
		refuse(req, fs, EFBIG,
		       "tensor \"%s\" (%llu bytes) is placed on the %s and is not staged: "
		       "staging limit %s, ring %llu bytes (%s)",
		       e->tensor->name, (unsigned long long)e->tensor->nbytes,
		       placefs_placement_name(e->placement),
		       placefs_plan_has_limit(m->plan) ? lim : "none",
		       (unsigned long long)fs->info.ring_bytes, ring);
		return;
	}
	for (i = 0; i < fs->nst; i++)
		if (in->mode != PLACEFS_IOC_STAGE_BORROW &&
		    in->dest_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    fs->infos[i].handle_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    strcmp((const char *)in->dest_handle, (const char *)fs->infos[i].handle) == 0) {
			refuse(req, fs, EINVAL, "'%s': the destination is a staging ring itself",
			       e->fname);
			return;
		}
	rc = placefs_mount_shard_ok(m, e->tensor->shard);
	if (rc < 0) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		fuse_reply_err(req, -rc);
		return;
	}

	ctx = fuse_req_ctx(req);
	if (in->mode == PLACEFS_IOC_STAGE_BORROW && !may_borrow(fs, ctx->uid, ctx->gid)) {
		atomic_fetch_add_explicit(&fs->denied, 1, memory_order_relaxed);
		refuse(req, fs, EACCES,
		       "'%s': uid %u may not borrow: a lease lends the whole ring, and this user "
		       "may not read every shard (copy mode works)",
		       e->fname, (unsigned)ctx->uid);
		return;
	}

	memset(&local, 0, sizeof(local));
	local.fs = fs;
	local.req = req;
	local.fh = fh;
	local.entry = entry;
	local.uid = ctx->uid;
	local.pid = ctx->pid;
	local.io = *in;
	local.sliced = sliced;
	local.pos = (unsigned)pos;
	if (sliced)
		local.lay = lay;

	/*
	 * A capped user's leases and stages in progress: at most -o user_share
	 * of the ring. Direct copies take no ring space, so they count for none.
	 */
	if (in->mode != PLACEFS_IOC_STAGE_READ && capped(fs, local.uid) &&
	    !(in->mode == PLACEFS_IOC_STAGE_COPY && copies_direct(fs, local.pos))) {
		uint64_t need = sliced ? lay.nbytes : e->tensor->nbytes;

		if (!need)
			need = 1;

		if (fs->align > 1 && need % fs->align)
			need += fs->align - need % fs->align;
		pthread_mutex_lock(&fs->lock);
		u = user_get(fs, local.uid);
		if (u && u->bytes + need <= fs->share_bytes) {
			u->bytes += need;
			local.reserved = need;
		}
		pthread_mutex_unlock(&fs->lock);
		if (!u) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		if (!local.reserved) {
			atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
			refuse(req, fs, EBUSY,
			       "'%s': uid %u holds its share of the ring (-o user_share=%u%%, %llu "
			       "bytes) in leases and stages; release some first",
			       e->fname, (unsigned)local.uid, m->opts->user_share,
			       (unsigned long long)fs->share_bytes);
			return;
		}
	}

	/* Inline while enough workers stay free for RELEASE and INTERRUPT requests. */
	if (atomic_fetch_add(&fs->inline_busy, 1) < fs->inline_max) {
		run_stage(&local);
		atomic_fetch_sub(&fs->inline_busy, 1);
		return;
	}
	atomic_fetch_sub(&fs->inline_busy, 1);

	/*
	 * On a thread of its own, of which there are at most -o max_waiting
	 * (and half of them per capped user): more answer EAGAIN at once
	 * rather than growing threads without bound or blocking a worker.
	 */
	why[0] = '\0';
	pthread_mutex_lock(&fs->lock);
	if (fs->closing)
		snprintf(why, sizeof(why), "the mount is ending");
	else if (fs->detached >= fs->max_waiting)
		snprintf(why, sizeof(why), "%u stages wait already (-o max_waiting=%u)",
		         fs->detached, fs->max_waiting);
	else if (local.reserved && (u = user_get(fs, local.uid)) != NULL &&
	         u->waiting >= fs->user_waiting_max)
		snprintf(why, sizeof(why), "uid %u has %u stages waiting already (at most %u)",
		         (unsigned)local.uid, u->waiting, fs->user_waiting_max);
	if (!why[0]) {
		fs->detached++;
		if (local.reserved && (u = user_get(fs, local.uid)) != NULL) {
			u->waiting++;
			local.thread = true;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	if (why[0]) {
		share_put(fs, local.uid, local.reserved, false);
		atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
		refuse(req, fs, EAGAIN, "'%s': not staged: %s", e->fname, why);
		return;
	}
	rc = ENOMEM;
	r = malloc(sizeof(*r));
	if (r) {
		*r = local;
		rc = pthread_attr_init(&attr);
		if (rc == 0) {
			pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
			rc = pthread_create(&tid, &attr, detached_main, r);
			pthread_attr_destroy(&attr);
		}
		if (rc == 0) {
			atomic_fetch_add_explicit(&fs->threads, 1, memory_order_relaxed);
			return;
		}
		free(r);
		rc = EAGAIN;
	}
	share_put(fs, local.uid, local.reserved, local.thread);
	pthread_mutex_lock(&fs->lock);
	if (--fs->detached == 0)
		pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	/* No thread to be had: a worker that waited here could be the one RELEASE needs. */
	atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
	refuse(req, fs, rc, "'%s': not staged: no thread to wait on (%s)", e->fname, strerror(rc));
}

/* ---- STAGE_BATCH ------------------------------------------------------------------- */

/* Every field of a STAGE_BATCH request; 0 or the errno, with a message. */
static int check_batch(const struct placefs_ioc_stage_batch *b, char *why, size_t len)
{
	unsigned i;

	if (b->version != PLACEFS_IOC_VERSION)
		return bad(why, len, "version %u, expected %u", b->version, PLACEFS_IOC_VERSION);
	if (b->size != sizeof(*b))
		return bad(why, len, "size field %u, expected %zu", b->size, sizeof(*b));
	if (b->mode != PLACEFS_IOC_STAGE_COPY && b->mode != PLACEFS_IOC_STAGE_READ)
		return bad(why, len, "batch mode %u: copy (%d) or read (%d) only", b->mode,
		           PLACEFS_IOC_STAGE_COPY, PLACEFS_IOC_STAGE_READ);
	if (b->count == 0 || b->count > PLACEFS_IOC_BATCH_MAX)
		return bad(why, len, "count %u, expected 1 to %d", b->count, PLACEFS_IOC_BATCH_MAX);
	if (b->total_ns || b->done || !all_zero(b->reserved, sizeof(b->reserved)))
		return bad(why, len, "a reserved or out field is not zero");
	if (b->flags & ~PLACEFS_IOC_BATCH_RANGES)
		return bad(why, len, "flags 0x%x: only PLACEFS_IOC_BATCH_RANGES (0x%x) is known",
		           b->flags, PLACEFS_IOC_BATCH_RANGES);
	for (i = 0; i < b->count; i++) {
		/* A range's nbytes is its length (in); an entry's is out only. */
		if ((b->flags & PLACEFS_IOC_BATCH_RANGES) ? b->entries[i].nbytes == 0
		                                          : b->entries[i].nbytes != 0)
			return bad(why, len, "entry %u: nbytes %llu: %s", i,
			           (unsigned long long)b->entries[i].nbytes,
			           (b->flags & PLACEFS_IOC_BATCH_RANGES)
			                   ? "a range holds at least one plan entry"
			                   : "an out field is not zero");
		if (b->entries[i].error || b->entries[i].out_flags)
			return bad(why, len, "entry %u: an out field is not zero", i);
	}
	if (!all_zero(&b->entries[b->count],
	              (PLACEFS_IOC_BATCH_MAX - b->count) * sizeof(b->entries[0])))
		return bad(why, len, "entries after the first %u are not zero", b->count);
	return check_dest(b->mode, b->dest_kind, b->dest_handle_bytes, b->dest_handle, why, len);
}

/* fs->block held: j hands out no more entries. */
static void batch_unqueue(struct placefs_ioctl *fs, struct bjob *j)
{
	struct bjob **pp;

	for (pp = &fs->bjobs; *pp; pp = &(*pp)->next_job)
		if (*pp == j) {
			*pp = j->next_job;
			j->next_job = NULL;
			return;
		}
}

/*
 * Checks entry i of j on its own (the tensor, the destination range, the
 * caller's right to its shard, the shard's health); sets its nbytes and
 * *tp. *healthy: the shard whose health this run has checked already (-1:
 * none yet); the entries of a run share one shard, and the check costs two
 * stat calls. 0 or a negative errno with a message.
 */
static int entry_check(struct bjob *j, size_t i, const struct placefs_tensor **tp, int64_t *healthy,
                       struct placefs_error *err)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_mount *m = fs->m;
	struct placefs_ioc_stage_batch *io = j->io;
	struct bitem *e = &j->items[i];
	const struct placefs_plan_entry *pe;
	const struct placefs_tensor *t;
	uint64_t end;
	int rc;

	if (e->tensor >= placefs_plan_count(m->plan))
		return placefs_error_set(err, -ERANGE, PLACEFS_E_USAGE,
		                         "entry %u: tensor index %llu, the plan has %zu tensors",
		                         e->from, (unsigned long long)e->tensor,
		                         placefs_plan_count(m->plan));
	pe = placefs_plan_entry(m->plan, (size_t)e->tensor);
	t = pe->tensor;
	e->nbytes = t->nbytes;
	if (__builtin_add_overflow(e->dest_offset, t->nbytes, &end) || end > io->dest_size)
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE,
		        "tensor \"%s\" (%llu bytes) does not fit at dest_offset %llu "
		        "of dest_size %llu",
		        t->name, (unsigned long long)t->nbytes, (unsigned long long)e->dest_offset,
		        (unsigned long long)io->dest_size);
	if (io->mode == PLACEFS_IOC_STAGE_COPY &&
	    (pe->placement == PLACEFS_PLACE_CPU || t->nbytes > fs->info.ring_bytes))
		return placefs_error_set(
		        err, -EFBIG, PLACEFS_E_USAGE,
		        "tensor \"%s\" (%llu bytes) is placed on the %s and is not "
		        "staged (ring %llu bytes); read mode reads it",
		        t->name, (unsigned long long)t->nbytes,
		        placefs_placement_name(pe->placement),
		        (unsigned long long)fs->info.ring_bytes);
	if (j->r.uid != 0 && t->shard < fs->nperms &&
	    !perm_reads(&fs->perms[t->shard], j->r.uid, j->gid))
		return placefs_error_set(err, -EACCES, PLACEFS_E_USAGE,
		                         "uid %u may not read the shard of tensor \"%s\"",
		                         (unsigned)j->r.uid, t->name);
	if (*healthy != (int64_t)t->shard) {
		rc = placefs_mount_shard_ok(m, t->shard);
		if (rc < 0)
			return placefs_error_set(
			        err, rc, PLACEFS_E_IO,
			        "tensor \"%s\": its shard is not as it was at mount "
			        "(%s)",
			        t->name, strerror(-rc));
		*healthy = (int64_t)t->shard;
	}
	*tp = t;
	return 0;
}

/*
 * Moves bytes [off, off + n) of t's shard to dest_off of the batch's
 * destination: one read (read mode) or one stage through the ring (copy).
 * key: the prefetch key of the stage (0 for a run of several tensors).
 */
static int batch_move(struct bjob *j, const struct placefs_tensor *t, uint64_t off, uint64_t n,
                      uint64_t dest_off, uint64_t key, int *prefetched, struct placefs_error *err)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_mount *m = fs->m;
	struct placefs_ioc_stage_batch *io = j->io;
	struct placefs_stage_opts o = {0};
	struct placefs_stage_span span;
	struct placefs_dest dest;
	struct timespec dl;
	const struct timespec *dlp = NULL;
	uint64_t need = 0;
	int fd, rc = 0;

	if (io->timeout_ns && io->timeout_ns <= TIMEOUT_MAX_NS) {
		dl = placefs_clock_deadline(io->timeout_ns);
		dlp = &dl;
	} else if (!io->timeout_ns && fs->default_timeout_ns) {
		dl = placefs_clock_deadline(fs->default_timeout_ns);
		dlp = &dl;
	}
	fd = placefs_ckpt_shard(m->ckpt, t->shard)->fd;
	if (io->mode == PLACEFS_IOC_STAGE_READ) {
		struct placefs_fill_opts fo = {
		        .deadline = dlp, .cancel = &j->r.cancel, .name = t->name};

		return placefs_filler_copy(fs->fill, fd, off, j->dfd, dest_off, n, &fo, err);
	}
	/* A direct copy takes no ring space, so it counts against no share of it. */
	if (capped(fs, j->r.uid) && !j->direct) {
		struct user_use *u;

		need = n ? n : 1;
		if (fs->align > 1 && need % fs->align)
			need += fs->align - need % fs->align;
		pthread_mutex_lock(&fs->lock);
		u = user_get(fs, j->r.uid);
		if (u && u->bytes + need <= fs->share_bytes)
			u->bytes += need;
		else
			rc = u ? -EBUSY : -ENOMEM;
		pthread_mutex_unlock(&fs->lock);
		if (rc)
			return placefs_error_set(
			        err, rc, PLACEFS_E_USAGE,
			        "tensor \"%s\": uid %u holds its share of the ring "
			        "(-o user_share=%u%%)",
			        t->name, (unsigned)j->r.uid, m->opts->user_share);
	}
	memset(&dest, 0, sizeof(dest));
	dest.kind = io->dest_kind;
	dest.handle_bytes = io->dest_handle_bytes;
	memcpy(dest.handle, io->dest_handle, sizeof(dest.handle));
	dest.offset = dest_off;
	dest.size = io->dest_size;
	dest.check_uid = 1;
	dest.uid = j->r.uid;
	dest.pid = j->r.pid;
	o.key = key;
	o.owner = j->r.fh;
	o.deadline = dlp;
	o.cancel = &j->r.cancel;
	o.name = t->name;
	rc = placefs_stagers_stage_copy(fs->ss, j->pos, fd, off, n, &o, &dest, &span, err);
	if (need)
		share_put(fs, j->r.uid, need, false);
	if (rc == 0 && prefetched)
		*prefetched = span.prefetched;
	return rc;
}

/*
 * Runs run r of j: its entries are checked one by one, then moved as one
 * range when there are several (they are adjacent in one shard and in the
 * destination, see batch_runs()), else as the one tensor. Entry errors are
 * set; returns how many entries landed.
 */
static size_t batch_run(struct bjob *j, size_t r)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_ioc_stage_batch *io = j->io;
	size_t first = j->runs[r].first, n = j->runs[r].count, i, ok = 0;
	const struct placefs_tensor *t0 = NULL, *t = NULL;
	struct placefs_error err;
	uint64_t bytes = 0;
	int64_t healthy = -1;
	int rc = 0, pf = 0;

	placefs_error_clear(&err);
	for (i = first; i < first + n && rc == 0; i++) {
		rc = entry_check(j, i, &t, &healthy, &err);
		if (rc == 0) {
			if (!t0)
				t0 = t;
			bytes += t->nbytes;
		}
	}
	if (rc != 0 && n > 1) {
		/* One entry of the run fails its checks: each entry on its own, then. */
		for (i = first; i < first + n; i++) {
			j->runs[r].first = i;
			j->runs[r].count = 1;
			ok += batch_run(j, r);
		}
		return ok;
	}
	if (rc == 0 && __atomic_load_n(&j->r.cancel, __ATOMIC_ACQUIRE))
		rc = placefs_error_set(&err, -EINTR, PLACEFS_E_IO, "interrupted");
	if (rc == 0) {
		atomic_fetch_add_explicit(&fs->batch_moves, 1, memory_order_relaxed);
		rc = batch_move(j, t0, t0->offset, bytes, j->items[first].dest_offset,
		                n == 1 ? j->items[first].tensor + 1 : 0, &pf, &err);
	}
	for (i = first; i < first + n; i++) {
		j->items[i].error = rc < 0 ? -rc : 0;
		j->items[i].out_flags = rc == 0 && pf ? PLACEFS_IOC_STAGED_PREFETCHED : 0;
	}
	if (rc == 0) {
		/*
		 * No prefetch hint here (single stages give one): a loader sends its
		 * batches side by side, so the tensors after this run are already in
		 * flight in other requests, moved as runs that never adopt a
		 * prefetched span; prefetching them read their bytes twice and
		 * crowded the ring (a mixture of experts: 256 spans held, none used).
		 */
		ok = n;
	} else if (rc != -ETIMEDOUT && rc != -EINTR) {
		atomic_fetch_add_explicit(&fs->m->ctr.client_errors, 1, memory_order_relaxed);
		placefs_log_limited(&fs->loglim, rc == -EFBIG ? LOG_NOTICE : LOG_ERR,
		                    "staging: batch %s, entries %u-%u failed (%s): %s",
		                    mode_name(io->mode), j->items[first].from,
		                    j->items[first + n - 1].from, strerror(-rc), err.msg);
	}
	return ok;
}

/*
 * Cuts j's entries into runs: consecutive entries whose tensors follow each
 * other in one shard and whose destinations follow each other too become
 * one range (so a mixture-of-experts layer of small tensors is one read or
 * one stage, not hundreds), up to a cap (copy through the ring: a quarter of
 * the ring, at most 64 MiB, so that the ring still overlaps runs; a direct
 * copy, which takes no ring space: the ring (a run is never larger than a
 * tensor may be), at most 64 MiB; read: 256 MiB). An entry that
 * would fail its checks stays a run of its own.
 */
static void batch_runs(struct bjob *j)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_mount *m = fs->m;
	struct placefs_ioc_stage_batch *io = j->io;
	uint64_t cap = j->direct ? fs->info.ring_bytes : fs->info.ring_bytes / 4;
	const struct placefs_tensor *prev = NULL;
	uint64_t run_bytes = 0, prev_dest = 0;
	size_t i;

	if (cap > (64ULL << 20))
		cap = 64ULL << 20;
	if (io->mode == PLACEFS_IOC_STAGE_READ)
		cap = 256ULL << 20;
	j->nruns = 0;
	for (i = 0; i < j->nitems; i++) {
		const struct bitem *e = &j->items[i];
		const struct placefs_plan_entry *pe = NULL;
		const struct placefs_tensor *t = NULL;
		bool joins = false;

		if (e->tensor < placefs_plan_count(m->plan)) {
			pe = placefs_plan_entry(m->plan, (size_t)e->tensor);
			t = pe->tensor;
			if (io->mode == PLACEFS_IOC_STAGE_COPY &&
			    pe->placement == PLACEFS_PLACE_CPU)
				t = NULL;
		}
		if (t && prev && t->shard == prev->shard &&
		    t->offset == prev->offset + prev->nbytes &&
		    e->dest_offset == prev_dest + prev->nbytes && run_bytes + t->nbytes <= cap)
			joins = true;
		if (joins) {
			j->runs[j->nruns - 1].count++;
			run_bytes += t->nbytes;
		} else {
			j->runs[j->nruns].first = i;
			j->runs[j->nruns].count = 1;
			j->nruns++;
			run_bytes = t ? t->nbytes : 0;
		}
		prev = t;
		prev_dest = e->dest_offset;
	}
}

/* Whether range entry e lies within a plan of n entries; *end: its end. */
static bool range_in_plan(const struct placefs_ioc_batch_entry *e, uint64_t n, uint64_t *end)
{
	return e->tensor < n && !__builtin_add_overflow(e->tensor, e->nbytes, end) && *end <= n;
}

static int cmp_range(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * Sets j's items: its entries one for one; or, with PLACEFS_IOC_BATCH_RANGES,
 * the tensors of each range that the mode places (copy: gpu, read: cpu) in
 * plan order, each at dest_offset + its packed offset. A range that is not
 * within the plan becomes one item that fails its check (ERANGE). 0,
 * -ENOMEM, or -EINVAL with `why` when two ranges overlap (so the items are
 * never more than the plan's tensors plus the entries).
 */
static int batch_items(struct bjob *j, char *why, size_t len)
{
	const struct placefs_plan *plan = j->r.fs->m->plan;
	const struct placefs_ioc_stage_batch *io = j->io;
	const bool ranges = io->flags & PLACEFS_IOC_BATCH_RANGES;
	const enum placefs_placement want =
	        io->mode == PLACEFS_IOC_STAGE_COPY ? PLACEFS_PLACE_GPU : PLACEFS_PLACE_CPU;
	const uint64_t n = placefs_plan_count(plan);
	uint64_t span[PLACEFS_IOC_BATCH_MAX][2];
	size_t total = 0, k = 0;
	unsigned i, ns = 0;

	for (i = 0; ranges && i < io->count; i++) {
		const struct placefs_ioc_batch_entry *e = &io->entries[i];
		uint64_t end;

		if (range_in_plan(e, n, &end)) {
			span[ns][0] = e->tensor;
			span[ns++][1] = end;
		}
	}
	qsort(span, ns, sizeof(span[0]), cmp_range);
	for (i = 1; i < ns; i++)
		if (span[i][0] < span[i - 1][1])
			return -bad(why, len, "ranges [%llu, %llu) and [%llu, %llu) overlap",
			            (unsigned long long)span[i - 1][0],
			            (unsigned long long)span[i - 1][1],
			            (unsigned long long)span[i][0], (unsigned long long)span[i][1]);
	for (i = 0; i < io->count; i++) {
		const struct placefs_ioc_batch_entry *e = &io->entries[i];
		uint64_t end;

		if (!ranges || !range_in_plan(e, n, &end)) {
			total++;
			continue;
		}
		for (uint64_t t = e->tensor; t < end; t++)
			total += placefs_plan_entry(plan, (size_t)t)->placement == want;
	}
	j->items = calloc(total ? total : 1, sizeof(*j->items));
	j->runs = calloc(total ? total : 1, sizeof(*j->runs));
	if (!j->items || !j->runs)
		return -ENOMEM;
	for (i = 0; i < io->count; i++) {
		const struct placefs_ioc_batch_entry *e = &io->entries[i];
		uint64_t end;

		if (!ranges || !range_in_plan(e, n, &end)) {
			/* An entry; or a range past the plan, which fails its check. */
			j->items[k].tensor = ranges && e->tensor < n ? n : e->tensor;
			j->items[k].dest_offset = e->dest_offset;
			j->items[k++].from = i;
			continue;
		}
		for (uint64_t t = e->tensor; t < end; t++) {
			const struct placefs_plan_entry *pe = placefs_plan_entry(plan, (size_t)t);

			if (pe->placement != want)
				continue;
			j->items[k].tensor = t;
			j->items[k].dest_offset = e->dest_offset + pe->packed; /* modulo 2^64 */
			j->items[k++].from = i;
		}
	}
	j->nitems = k;
	return 0;
}

/*
 * Writes the items' results into the request's entries; returns the entries
 * with error 0. A range's nbytes is the bytes its tensors moved; its error
 * the first failing tensor's, whose plan index replaces `tensor`.
 */
static uint32_t batch_fold(struct bjob *j)
{
	struct placefs_ioc_stage_batch *io = j->io;
	uint32_t done = 0;
	unsigned i;

	if (io->flags & PLACEFS_IOC_BATCH_RANGES)
		for (i = 0; i < io->count; i++)
			io->entries[i].nbytes = 0;
	for (size_t k = 0; k < j->nitems; k++) {
		const struct bitem *it = &j->items[k];
		struct placefs_ioc_batch_entry *e = &io->entries[it->from];

		if (!(io->flags & PLACEFS_IOC_BATCH_RANGES)) {
			e->nbytes = it->nbytes;
			e->error = it->error;
			e->out_flags = it->out_flags;
		} else if (it->error == 0) {
			e->nbytes += it->nbytes;
		} else if (e->error == 0) {
			e->error = it->error;
			e->tensor = it->tensor;
		}
	}
	for (i = 0; i < io->count; i++)
		done += io->entries[i].error == 0;
	return done;
}

/*
 * fs->block held: runs one run of `only` (or, for a pool thread, of the
 * oldest queued job), dropping the lock meanwhile. False when there was none.
 */
static bool batch_step(struct placefs_ioctl *fs, struct bjob *only)
{
	struct bjob *j = only ? only : fs->bjobs;
	size_t r, ok;

	if (!j || j->next >= j->nruns)
		return false;
	r = j->next++;
	if (j->next >= j->nruns)
		batch_unqueue(fs, j);
	j->inflight++;
	pthread_mutex_unlock(&fs->block);

	ok = batch_run(j, r);

	pthread_mutex_lock(&fs->block);
	j->done += ok;
	if (--j->inflight == 0 && j->next >= j->nruns)
		pthread_cond_broadcast(&j->ended);
	return true;
}

static void *batch_main(void *arg)
{
	struct placefs_ioctl *fs = arg;

	pthread_mutex_lock(&fs->block);
	while (!fs->bstop)
		if (!batch_step(fs, NULL))
			pthread_cond_wait(&fs->bwork, &fs->block);
	pthread_mutex_unlock(&fs->block);
	return NULL;
}

static void do_batch(fuse_req_t req, struct placefs_ioctl *fs, uint64_t fh,
                     const struct placefs_ioc_stage_batch *in)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct placefs_error err;
	struct bjob j;
	char why[256];
	uint64_t t0 = placefs_clock_ns();
	unsigned bpos = 0;
	int rc;

	rc = check_batch(in, why, sizeof(why));
	if (rc) {
		refuse(req, fs, rc, "bad batch request: %s", why);
		return;
	}
	if (in->mode == PLACEFS_IOC_STAGE_COPY && !fs->ss) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		fuse_reply_err(req, ENODEV);
		return;
	}
	for (unsigned k = 0; k < fs->nst; k++)
		if (in->dest_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    fs->infos[k].handle_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    strcmp((const char *)in->dest_handle, (const char *)fs->infos[k].handle) == 0) {
			refuse(req, fs, EINVAL, "batch: the destination is a staging ring itself");
			return;
		}
	if (in->mode == PLACEFS_IOC_STAGE_COPY) {
		/* The batch's one destination names one device (or the mount has one). */
		struct placefs_dest dest;

		memset(&dest, 0, sizeof(dest));
		dest.kind = in->dest_kind;
		dest.handle_bytes = in->dest_handle_bytes;
		memcpy(dest.handle, in->dest_handle, sizeof(dest.handle));
		dest.size = in->dest_size;
		placefs_error_clear(&err);
		rc = placefs_stagers_route(fs->ss, NULL, &dest, &err);
		if (rc < 0) {
			refuse(req, fs, -rc, "batch: %s", err.msg);
			return;
		}
		bpos = (unsigned)rc;
	}
	/* On the worker itself, while enough stay free for RELEASE and INTERRUPT. */
	if (atomic_fetch_add(&fs->inline_busy, 1) >= fs->inline_max) {
		atomic_fetch_sub(&fs->inline_busy, 1);
		atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
		fuse_reply_err(req, EAGAIN);
		return;
	}
	memset(&j, 0, sizeof(j));
	j.r.fs = fs;
	j.r.req = req;
	j.r.fh = fh;
	j.r.uid = ctx->uid;
	j.r.pid = ctx->pid;
	j.gid = ctx->gid;
	j.dfd = -1;
	j.pos = bpos;
	j.direct = in->mode == PLACEFS_IOC_STAGE_COPY && copies_direct(fs, bpos);
	j.io = malloc(sizeof(*j.io));
	if (!j.io || pthread_cond_init(&j.ended, NULL) != 0) {
		free(j.io);
		atomic_fetch_sub(&fs->inline_busy, 1);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(j.io, in, sizeof(*j.io));
	rc = batch_items(&j, why, sizeof(why));
	if (rc == -EINVAL) {
		placefs_error_set(&err, rc, PLACEFS_E_USAGE, "bad batch request: %s", why);
		rc = EINVAL;
		goto out_reply_err;
	} else if (rc < 0) {
		placefs_error_set(&err, rc, PLACEFS_E_NOMEM, "out of memory");
		rc = ENOMEM;
		goto out_reply_err;
	}
	if (in->mode == PLACEFS_IOC_STAGE_READ) {
		placefs_error_clear(&err);
		j.dfd = placefs_fill_open_shm((const char *)in->dest_handle, 1, (unsigned)j.r.uid,
		                              in->dest_size, &err);
		if (j.dfd < 0) {
			rc = -j.dfd;
			goto out_reply_err;
		}
	}
	inflight_add(fs, &j.r);
	fuse_req_interrupt_func(req, on_interrupt, &j.r);
	batch_runs(&j);
	pthread_mutex_lock(&fs->block);
	if (j.nruns > 1) {
		struct bjob **pp = &fs->bjobs;

		while (*pp)
			pp = &(*pp)->next_job;
		*pp = &j;
		pthread_cond_broadcast(&fs->bwork);
	}
	while (batch_step(fs, &j))
		;
	while (j.inflight)
		pthread_cond_wait(&j.ended, &fs->block);
	batch_unqueue(fs, &j);
	pthread_mutex_unlock(&fs->block);
	fuse_req_interrupt_func(req, NULL, NULL);
	inflight_del(fs, &j.r);

	j.io->done = batch_fold(&j);
	j.io->total_ns = placefs_clock_ns() - t0;
	atomic_fetch_add_explicit(&fs->batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->batch_entries, j.nitems, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->batch_failed, j.nitems - j.done, memory_order_relaxed);
	fuse_reply_ioctl(req, 0, j.io, sizeof(*j.io));
	rc = 0;
out_reply_err:
	if (rc) {
		atomic_fetch_add_explicit(&fs->m->ctr.client_errors, 1, memory_order_relaxed);
		placefs_log_limited(&fs->loglim, LOG_WARNING, "staging: batch refused (%s): %s",
		                    strerror(rc), err.msg);
		fuse_reply_err(req, rc);
	}
	if (j.dfd >= 0)
		close(j.dfd);
	pthread_cond_destroy(&j.ended);
	free(j.runs);
	free(j.items);
	free(j.io);
	atomic_fetch_sub(&fs->inline_busy, 1);
}

/* ---- RING_INFO, RELEASE ---------------------------------------------------------------- */

static void do_ring_info(fuse_req_t req, struct placefs_ioctl *fs, const char *fname,
                         const struct placefs_ioc_ring_info *in)
{
	struct placefs_ioc_ring_info out;

	if (in->version != PLACEFS_IOC_VERSION || in->size != sizeof(*in)) {
		refuse(req, fs, EINVAL, "'%s': ring info with version %u size %u, expected %u %zu",
		       fname, in->version, in->size, PLACEFS_IOC_VERSION, sizeof(*in));
		return;
	}
	if (!all_zero(in->reserved, sizeof(in->reserved)) || in->ndevices || in->position) {
		refuse(req, fs, EINVAL, "'%s': ring info with a non-zero reserved field", fname);
		return;
	}
	if (in->flags != 0 && in->flags != PLACEFS_IOC_RING_INFO_DEVICE &&
	    in->flags != PLACEFS_IOC_RING_INFO_POSITION) {
		refuse(req, fs, EINVAL,
		       "'%s': ring info flags 0x%x (zero, DEVICE 0x%x or POSITION 0x%x)", fname,
		       in->flags, PLACEFS_IOC_RING_INFO_DEVICE, PLACEFS_IOC_RING_INFO_POSITION);
		return;
	}
	if (in->flags == 0 && in->select != 0) {
		refuse(req, fs, EINVAL, "'%s': ring info select %d without a flag", fname,
		       in->select);
		return;
	}
	memset(&out, 0, sizeof(out));
	out.version = PLACEFS_IOC_VERSION;
	out.size = sizeof(out);
	out.backend = PLACEFS_IOC_BACKEND_NONE;
	out.device = -1;
	if (fs && fs->ss) {
		const struct placefs_backend_info *bi;
		struct placefs_error err;
		int pos = 0;

		placefs_error_clear(&err);
		if (in->flags == PLACEFS_IOC_RING_INFO_DEVICE) {
			struct placefs_device dev = {placefs_stagers_devices(fs->ss)->items[0].kind,
			                             in->select};

			pos = placefs_stagers_find(fs->ss, dev, &err);
		} else if (in->flags == PLACEFS_IOC_RING_INFO_POSITION) {
			pos = in->select >= 0 && (unsigned)in->select < fs->nst ? in->select
			                                                        : -ENODEV;
			if (pos < 0)
				snprintf(err.msg, sizeof(err.msg),
				         "position %d, the mount has %u rings", in->select,
				         fs->nst);
		}
		if (pos < 0) {
			refuse(req, fs, -pos, "'%s': ring info: %s", fname, err.msg);
			return;
		}
		bi = &fs->infos[pos];
		out.backend = (uint32_t)bi->device.kind;
		out.device = bi->device.index;
		out.ring_bytes = bi->ring_bytes;
		out.host_buffer_bytes = bi->host_buffer_bytes;
		out.alignment = fs->align;
		out.ndevices = fs->nst;
		out.position = (uint32_t)pos;
		/*
		 * The handle maps the whole ring: only for those who may borrow
		 * (may_borrow()); others see HANDLE_NONE, and copy mode works.
		 */
		if (may_borrow(fs, fuse_req_ctx(req)->uid, fuse_req_ctx(req)->gid)) {
			out.handle_kind = bi->handle_kind;
			out.handle_bytes = bi->handle_bytes;
			memcpy(out.handle, bi->handle, sizeof(out.handle));
		}
	} else if (in->flags) {
		refuse(req, fs, ENODEV, "'%s': ring info of a device: staging is disabled", fname);
		return;
	}
	fuse_reply_ioctl(req, 0, &out, sizeof(out));
}

static void do_release(fuse_req_t req, struct placefs_ioctl *fs, const char *fname, uint64_t fh,
                       const struct placefs_ioc_release *in)
{
	if (in->version != PLACEFS_IOC_VERSION || in->size != sizeof(*in)) {
		refuse(req, fs, EINVAL, "'%s': release with version %u size %u, expected %u %zu",
		       fname, in->version, in->size, PLACEFS_IOC_VERSION, sizeof(*in));
		return;
	}
	if (!all_zero(in->reserved, sizeof(in->reserved))) {
		refuse(req, fs, EINVAL, "'%s': release with a non-zero reserved field", fname);
		return;
	}
	if (!fs || !fs->ss) {
		fuse_reply_err(req, ENODEV);
		return;
	}
	/* Only leases taken on this file handle; 0 is never a lease. */
	if (in->lease == 0 || placefs_stagers_release(fs->ss, in->lease, fh) != 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	lease_end(fs, in->lease);
	fuse_reply_ioctl(req, 0, NULL, 0);
}

void placefs_ioctl_op(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                      struct fuse_file_info *fi, unsigned flags, const void *in_buf,
                      size_t in_bufsz, size_t out_bufsz)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct placefs_ioctl *fs = m->stage;
	struct placefs_vnode node;
	unsigned int want;
	size_t size, out_size;
	const char *fname;

	(void)arg;
	/*
	 * Only tensor files have staging commands; control files and
	 * directories (which libfuse already refuses) answer ENOTTY, as does
	 * any ioctl that is not one of ours (FS_IOC_GETFLAGS from lsattr...).
	 * FUSE_IOCTL_COMPAT / _32BIT are accepted: the structs are fixed-width
	 * and the command numbers the same for 32- and 64-bit callers.
	 */
	if ((flags & FUSE_IOCTL_DIR) || placefs_vtree_get(m->vt, ino, &node) != 0 ||
	    node.kind != PLACEFS_V_TENSOR || _IOC_TYPE(cmd) != PLACEFS_IOC_MAGIC) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	fname = fname_of(m, node.entry);
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(PLACEFS_IOC_RING_INFO):
		want = PLACEFS_IOC_RING_INFO;
		size = out_size = sizeof(struct placefs_ioc_ring_info);
		break;
	case _IOC_NR(PLACEFS_IOC_STAGE):
		want = PLACEFS_IOC_STAGE;
		size = out_size = sizeof(struct placefs_ioc_stage);
		break;
	case _IOC_NR(PLACEFS_IOC_RELEASE):
		want = PLACEFS_IOC_RELEASE;
		size = sizeof(struct placefs_ioc_release);
		out_size = 0;
		break;
	case _IOC_NR(PLACEFS_IOC_STAGE_BATCH):
		want = PLACEFS_IOC_STAGE_BATCH;
		size = out_size = sizeof(struct placefs_ioc_stage_batch);
		break;
	default: fuse_reply_err(req, ENOTTY); return;
	}
	/*
	 * One of our commands encoded with another size or direction: the
	 * kernel moved that many bytes, which are not our struct.
	 */
	if (cmd != want || in_bufsz != size || out_bufsz != out_size || !in_buf) {
		refuse(req, fs, EINVAL,
		       "'%s': ioctl 0x%08x carries %zu bytes in and %zu out; command %u takes "
		       "0x%08x with %zu in and %zu out",
		       fname, cmd, in_bufsz, out_bufsz, _IOC_NR(cmd), want, size, out_size);
		return;
	}
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(PLACEFS_IOC_RING_INFO): {
		struct placefs_ioc_ring_info ri;

		memcpy(&ri, in_buf, sizeof(ri));
		do_ring_info(req, fs, fname, &ri);
		return;
	}
	case _IOC_NR(PLACEFS_IOC_STAGE): {
		struct placefs_ioc_stage s;

		memcpy(&s, in_buf, sizeof(s));
		if (!fs) {
			fuse_reply_err(req, ENODEV);
			return;
		}
		do_stage(req, fs, node.entry, fi->fh, &s);
		return;
	}
	case _IOC_NR(PLACEFS_IOC_STAGE_BATCH):
		if (!fs) {
			fuse_reply_err(req, ENODEV);
			return;
		}
		/* in_buf is the request's own buffer: the batch runs on a copy. */
		do_batch(req, fs, fi->fh, in_buf);
		return;
	default: {
		struct placefs_ioc_release rel;

		memcpy(&rel, in_buf, sizeof(rel));
		do_release(req, fs, fname, fi->fh, &rel);
		return;
	}
	}
}

void placefs_ioctl_release(struct placefs_ioctl *fs, uint64_t fh)
{
	if (fs && fs->ss && placefs_stagers_release_owner(fs->ss, fh) > 0)
		lease_end_owner(fs, fh);
}

/* ---- stats --------------------------------------------------------------------------- */

/* Values of "staging" computed when the document is made. */
struct staging_view {
	unsigned dests;   /* copy destinations the backend holds mapped */
	unsigned waiting; /* stages on threads of their own now */
	struct placefs_backend_dest_stats dest;
};

/*
 * The members of "staging" after "device" and "backend", in order: one row
 * each. Base 0 is the stager's snapshot, base 1 this module, base 2 the view.
 */
#define STAGER(path, member) PLACEFS_STAT(path, U64, 0, struct placefs_stager_stats, member)
#define OWN(path, member)    PLACEFS_STAT(path, ATOMIC_U64, 1, struct placefs_ioctl, member)
#define VIEW(path, member)   PLACEFS_STAT(path, UINT, 2, struct staging_view, member)

static const struct placefs_stat staging_rows[] = {
        STAGER("ring_bytes", ring_capacity),
        STAGER("ring_used", ring_used),
        STAGER("ring_high_water", ring_high_water),
        STAGER("host_buffer_bytes", host_buffer_bytes),
        STAGER("chunk_bytes", chunk_bytes),
        STAGER("io_threads", io_threads),
        STAGER("staged.copy.tensors", staged[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.copy.bytes", staged_bytes[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.borrow.tensors", staged[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("staged.borrow.bytes", staged_bytes[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("waits", ring_waits),
        STAGER("wait_ns", ring_wait_ns),
        STAGER("errors", errors),
        OWN("refused", refused),
        STAGER("leases", leases),
        STAGER("released", released),
        STAGER("read_bytes", read_bytes),
        STAGER("prefetch.issued", prefetch_issued),
        STAGER("prefetch.hits", prefetch_hits),
        STAGER("prefetch.evicted", prefetch_evicted),
        STAGER("prefetch.cancelled", prefetch_cancelled),
        STAGER("prefetch.held", prefetch_held),
        OWN("stage_threads", threads),
        VIEW("stage_threads_now", waiting),
        OWN("busy", busy),
        OWN("borrow_refused", denied),
        VIEW("dests", dests),
        PLACEFS_STAT("dest_imports", U64, 2, struct staging_view, dest.imports),
        PLACEFS_STAT("dest_import_ns", U64, 2, struct staging_view, dest.import_ns),
        PLACEFS_STAT("dest_import_waits", U64, 2, struct staging_view, dest.import_waits),
        STAGER("zero_copy.on", zero_copy),
        STAGER("zero_copy.bytes", zero_copy_bytes),
        STAGER("zero_copy.registrations", zero_copy_registrations),
        STAGER("zero_copy.registration_ns", zero_copy_registration_ns),
        STAGER("zero_copy.registered_bytes", zero_copy_registered_bytes),
        STAGER("zero_copy.refused", zero_copy_refused),
        STAGER("zero_copy.stale", zero_copy_stale),
        STAGER("slices.tensors", slices),
        STAGER("slices.bytes", slice_bytes),
        STAGER("slices.strided_read_bytes", strided_read_bytes),
        STAGER("direct.on", direct),
        STAGER("direct.stages", direct_stages),
        STAGER("direct.bytes", direct_bytes),
};

/*
 * One element of "staging.devices" per stager, in the order of the -o
 * device= list, after "device" (its name), "index" and "position". Base 0
 * is that stager's snapshot.
 */
static const struct placefs_stat device_rows[] = {
        STAGER("ring_bytes", ring_capacity),
        STAGER("ring_used", ring_used),
        STAGER("ring_high_water", ring_high_water),
        STAGER("host_buffer_bytes", host_buffer_bytes),
        STAGER("io_threads", io_threads),
        STAGER("staged.copy.tensors", staged[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.copy.bytes", staged_bytes[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.borrow.tensors", staged[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("staged.borrow.bytes", staged_bytes[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("waits", ring_waits),
        STAGER("wait_ns", ring_wait_ns),
        STAGER("errors", errors),
        STAGER("leases", leases),
        STAGER("released", released),
        STAGER("read_bytes", read_bytes),
        STAGER("prefetch.issued", prefetch_issued),
        STAGER("prefetch.hits", prefetch_hits),
        STAGER("zero_copy.bytes", zero_copy_bytes),
        STAGER("slices.tensors", slices),
        STAGER("slices.bytes", slice_bytes),
        STAGER("slices.strided_read_bytes", strided_read_bytes),
        STAGER("direct.stages", direct_stages),
        STAGER("direct.bytes", direct_bytes),
};

/* READ mode (the filler), after the ring's rows; also without a ring. */
#define FILL(path, member) PLACEFS_STAT(path, U64, 0, struct placefs_fill_stats, member)

static const struct placefs_stat read_rows[] = {
        FILL("read.threads", threads),       FILL("read.piece_bytes", piece_bytes),
        FILL("read.tensors", copies),        FILL("read.bytes", bytes),
        FILL("read.errors", errors),         FILL("read.ns", ns),
        FILL("read.mapped_bytes", mapped),   FILL("read.spliced_bytes", spliced),
        FILL("read.bounced_bytes", bounced), FILL("read.now", busy_copies),
};

/* STAGE_BATCH, last. */
struct batch_view {
	uint64_t threads, requests, entries, failed, moves;
};

#define BATCH(path, member) PLACEFS_STAT(path, U64, 0, struct batch_view, member)

static const struct placefs_stat batch_rows[] = {
        BATCH("batch.threads", threads), BATCH("batch.requests", requests),
        BATCH("batch.entries", entries), BATCH("batch.failed", failed),
        BATCH("batch.moves", moves),
};

static void read_stats(const struct placefs_ioctl *fs, struct placefs_stats *w)
{
	struct placefs_fill_stats f;
	struct batch_view b = {0};

	placefs_filler_stats(fs ? fs->fill : NULL, &f);
	placefs_stats_table(w, read_rows, PLACEFS_STATS_ROWS(read_rows), (const void *const[]){&f});
	if (fs) {
		b.threads = fs->nbthreads;
		b.requests = atomic_load_explicit(&fs->batches, memory_order_relaxed);
		b.entries = atomic_load_explicit(&fs->batch_entries, memory_order_relaxed);
		b.failed = atomic_load_explicit(&fs->batch_failed, memory_order_relaxed);
		b.moves = atomic_load_explicit(&fs->batch_moves, memory_order_relaxed);
	}
	placefs_stats_table(w, batch_rows, PLACEFS_STATS_ROWS(batch_rows),
	                    (const void *const[]){&b});
}

/* staging.disk: the disk gate's counters (lib/staging/gate.h); streams 0 when there is none. */
#define DISK(path, kind, member) PLACEFS_STAT(path, kind, 0, struct placefs_gate_stats, member)

static const struct placefs_stat disk_rows[] = {
        DISK("disk.streams", UINT, streams),
        DISK("disk.cached_reads", U64, cached_reads),
        DISK("disk.cached_bytes", U64, cached_bytes),
        DISK("disk.disk_reads", U64, disk_reads),
        DISK("disk.disk_bytes", U64, disk_bytes),
        DISK("disk.unknown_reads", U64, unknown_reads),
        DISK("disk.waits", U64, waits),
        DISK("disk.wait_ns", U64, wait_ns),
        DISK("disk.peak", UINT, peak),
        DISK("disk.waiting", UINT, waiting),
        DISK("disk.sequential", U64, sequential),
};

static void disk_stats(struct placefs_gate *g, struct placefs_stats *w)
{
	struct placefs_gate_stats d;

	placefs_gate_get_stats(g, &d);
	placefs_stats_table(w, disk_rows, PLACEFS_STATS_ROWS(disk_rows), (const void *const[]){&d});
}

void placefs_ioctl_stats(const struct placefs_ioctl *fs, struct placefs_stats *w)
{
	struct placefs_stager_stats s;
	struct staging_view v;

	placefs_stats_begin(w, "staging");
	placefs_stats_string(w, "device", fs ? fs->device : "none");
	if (!fs || !fs->ss) {
		placefs_stats_string(w, "backend", "none");
		placefs_stats_u64(w, "ndevices", 0);
		read_stats(fs, w);
		placefs_stats_end(w);
		return;
	}
	placefs_stats_string(w, "backend", placefs_device_kind_name(fs->info.device.kind));
	placefs_stats_u64(w, "ndevices", fs->nst);
	/* Every ring's counters added up (lib/staging/stagers.h); per device below. */
	placefs_stagers_stats(fs->ss, &s);
	placefs_stagers_dest_stats(fs->ss, &v.dest);
	v.dests = (unsigned)v.dest.held;
	pthread_mutex_lock((pthread_mutex_t *)&fs->lock);
	v.waiting = fs->detached;
	pthread_mutex_unlock((pthread_mutex_t *)&fs->lock);
	placefs_stats_table(w, staging_rows, PLACEFS_STATS_ROWS(staging_rows),
	                    (const void *const[]){&s, fs, &v});
	placefs_stats_begin_array(w, "devices");
	for (unsigned i = 0; i < fs->nst; i++) {
		struct placefs_stager_stats d;
		char name[PLACEFS_DEVICE_NAME_MAX];

		placefs_stager_stats(placefs_stagers_at(fs->ss, i), &d);
		placefs_stats_begin(w, NULL);
		placefs_stats_string(
		        w, "device",
		        placefs_device_format(placefs_stagers_devices(fs->ss)->items[i], name));
		placefs_stats_i64(w, "index", placefs_stagers_devices(fs->ss)->items[i].index);
		placefs_stats_u64(w, "position", i);
		placefs_stats_string(w, "name", fs->infos[i].name);
		placefs_stats_table(w, device_rows, PLACEFS_STATS_ROWS(device_rows),
		                    (const void *const[]){&d});
		placefs_stats_end(w);
	}
	placefs_stats_end(w);
	disk_stats(fs->gate, w);
	read_stats(fs, w);
	placefs_stats_end(w);
}

/* ---- create / free --------------------------------------------------------------------- */

/*
 * The staging devices for the options: the -o device= list as given, or
 * for the default cuda:0 when a CUDA device is present. An empty list
 * ("none") with *why set when staging stays off.
 */
static struct placefs_devices choose_devices(const struct placefs_opts *o, char *why, size_t wlen)
{
	struct placefs_devices none = {0};
	struct placefs_error err;
	int n;

	if (!o->device_auto) {
		if (!o->devices.all && o->devices.n == 0)
			snprintf(why, wlen, "-o device=none");
		return o->devices;
	}
	/* The default: the first GPU when there is one, else no staging. */
	placefs_error_clear(&err);
	n = placefs_backend_cuda_devices(&err);
	if (n > 0)
		return o->devices;
	snprintf(why, wlen,
	         "no -o device given and %.300s; -o device=host stages through shared "
	         "memory",
	         n == 0 ? "no CUDA device is present" : err.msg);
	return none;
}

static int ioctl_init(struct placefs_ioctl *fs, struct placefs_mount *m)
{
	size_t i, n = placefs_plan_count(m->plan);

	fs->m = m;
	atomic_init(&fs->inline_busy, 0);
	placefs_stats_table_zero(staging_rows, PLACEFS_STATS_ROWS(staging_rows),
	                         (void *const[]){NULL, fs, NULL});
	if (pthread_mutex_init(&fs->lock, NULL) != 0)
		return -ENOMEM;
	if (pthread_mutex_init(&fs->hint_lock, NULL) != 0)
		goto fail_hint;
	if (placefs_clock_cond_init(&fs->cond) != 0)
		goto fail_cond;
	if (pthread_mutex_init(&fs->block, NULL) != 0)
		goto fail_block;
	if (pthread_cond_init(&fs->bwork, NULL) != 0)
		goto fail_bwork;
	fs->gpu = malloc((n ? n : 1) * sizeof(*fs->gpu));
	fs->gpu_pos = malloc((n ? n : 1) * sizeof(*fs->gpu_pos));
	if (!fs->gpu || !fs->gpu_pos)
		goto fail_alloc;
	for (i = 0; i < n; i++) {
		if (placefs_plan_entry(m->plan, i)->placement == PLACEFS_PLACE_GPU) {
			fs->gpu_pos[i] = fs->ngpu;
			fs->gpu[fs->ngpu++] = i;
		} else {
			fs->gpu_pos[i] = SIZE_MAX;
		}
	}
	/* Half the workers may wait on the ring; -s has only one, which never may. */
	fs->inline_max = m->opts->singlethread ? 0 : m->opts->max_threads / 2;
	fs->loglim = (struct placefs_log_limit)PLACEFS_LOG_LIMIT_INIT(&m->ctr.log_suppressed);
	fs->self_uid = geteuid();
	fs->default_timeout_ns = (uint64_t)m->opts->stage_timeout * 1000000000ULL;
	fs->max_waiting = m->opts->max_waiting ? m->opts->max_waiting : PLACEFS_MAX_WAITING;
	fs->user_waiting_max = fs->max_waiting > 1 ? fs->max_waiting / 2 : 1;
	fs->share_bytes = UINT64_MAX; /* set once the ring's size is known */
	if (perms_init(fs) != 0)
		goto fail_alloc;
	return 0;
fail_alloc:
	free(fs->gpu);
	free(fs->gpu_pos);
	free(fs->perms);
	pthread_cond_destroy(&fs->bwork);
fail_bwork:
	pthread_mutex_destroy(&fs->block);
fail_block:
	pthread_cond_destroy(&fs->cond);
fail_cond:
	pthread_mutex_destroy(&fs->hint_lock);
fail_hint:
	pthread_mutex_destroy(&fs->lock);
	return -ENOMEM;
}

int placefs_ioctl_create(struct placefs_mount *m, struct placefs_ioctl **out,
                         struct placefs_error *err)
{
	struct placefs_stagers_config cfg;
	struct placefs_error e;
	struct placefs_ioctl *fs;
	char spec[PLACEFS_DEVICES_NAME_MAX], why[512], ring[32], hb[32], chunk[32], note[256];
	char zc[300];
	struct placefs_stager_stats zs;
	struct placefs_devices devs;
	int rc;

	*out = NULL;
	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	if (ioctl_init(fs, m) != 0) {
		free(fs);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	}
	{
		struct placefs_fill_config fc = {0};

		placefs_error_clear(&e);
		rc = placefs_filler_create(&fc, &fs->fill, &e);
		if (rc != 0) {
			placefs_error_set(err, rc, e.kind, "staging: %s", e.msg);
			placefs_ioctl_free(fs);
			return rc;
		}
	}
	{
		long nc = sysconf(_SC_NPROCESSORS_ONLN);

		fs->nbwant = nc < 2 ? 2 : nc > BATCH_THREADS ? BATCH_THREADS : (unsigned)nc;
	}
	for (unsigned k = 0; k < fs->nbwant; k++) {
		rc = -pthread_create(&fs->bthreads[k], NULL, batch_main, fs);
		if (rc != 0) {
			placefs_ioctl_free(fs);
			return placefs_error_set(err, rc, PLACEFS_E_IO,
			                         "staging: cannot start a batch thread: %s",
			                         strerror(-rc));
		}
		fs->nbthreads++;
	}
	why[0] = '\0';
	devs = choose_devices(m->opts, why, sizeof(why));
	placefs_devices_format(&devs, spec, sizeof(spec));
	snprintf(fs->device, sizeof(fs->device), "none");
	if (devs.all || devs.n > 0) {
		memset(&cfg, 0, sizeof(cfg));
		cfg.devices = devs;
		cfg.stager.device = devs.all ? m->opts->device : devs.items[0];
		cfg.stager.ring_bytes = placefs_plan_ring_bytes(m->plan);
		cfg.stager.host_buffer = m->opts->host_buffer;
		cfg.stager.prefetch = m->opts->prefetch;
		cfg.stager.zero_copy = m->opts->zero_copy;
		cfg.stager.direct_copy = m->opts->direct_copy;
		if (m->opts->disk_streams > 0) {
			rc = placefs_gate_create(m->opts->disk_streams, &fs->gate, err);
			if (rc != 0) {
				placefs_ioctl_free(fs);
				return rc;
			}
		}
		cfg.stager.gate = fs->gate;
		placefs_error_clear(&e);
		rc = placefs_stagers_create(&cfg, &fs->ss, &e);
		if (rc != 0 && !m->opts->device_auto) {
			/* Asked for explicitly: refuse to mount, saying why. */
			placefs_error_set(err, rc, e.kind, "staging (-o device=%s): %s", spec,
			                  e.msg);
			placefs_ioctl_free(fs);
			return rc;
		}
		if (rc != 0) {
			/* The default device: the mount works without staging. */
			fs->ss = NULL;
			snprintf(why, sizeof(why),
			         "no -o device given and %.16s could not be set up: %.400s", spec,
			         e.msg);
		} else if (fs->ss) {
			uint64_t total;

			fs->nst = placefs_stagers_count(fs->ss);
			for (unsigned k = 0; k < fs->nst; k++)
				placefs_backend_get_info(
				        placefs_stager_backend(placefs_stagers_at(fs->ss, k)),
				        &fs->infos[k]);
			fs->info = fs->infos[0];
			fs->align = PLACEFS_STAGE_ALIGN_DEFAULT;
			/* The share is of all rings together, wherever the leases are. */
			total = fs->info.ring_bytes * fs->nst;
			fs->share_bytes = m->opts->user_share >= 100
			                          ? UINT64_MAX
			                          : total / 100 * m->opts->user_share +
			                                    total % 100 * m->opts->user_share / 100;
			placefs_devices_format(placefs_stagers_devices(fs->ss), spec, sizeof(spec));
			if (fs->nst == 1)
				snprintf(fs->device, sizeof(fs->device), "%s", fs->info.name);
			else
				snprintf(fs->device, sizeof(fs->device), "%s", spec);
		}
	}
	if (!fs->ss) {
		snprintf(fs->log_line, sizeof(fs->log_line), "staging: disabled (%s)", why);
		*out = fs;
		return 0;
	}

	rc = -pthread_create(&fs->watcher, NULL, watch_main, fs);
	if (rc != 0) {
		placefs_ioctl_free(fs);
		return placefs_error_set(err, rc, PLACEFS_E_IO,
		                         "staging: cannot start a thread: %s", strerror(-rc));
	}
	fs->watcher_started = true;

	placefs_size_format(fs->info.ring_bytes, ring, sizeof(ring));
	placefs_size_format(fs->info.host_buffer_bytes, hb, sizeof(hb));
	placefs_size_format(fs->info.chunk_bytes, chunk, sizeof(chunk));
	placefs_stager_stats(placefs_stagers_at(fs->ss, 0), &zs);
	placefs_stager_zero_copy_note(placefs_stagers_at(fs->ss, 0), note, sizeof(note));
	snprintf(zc, sizeof(zc), "%s%s%s%s", zs.zero_copy ? "on" : "off", note[0] ? " (" : "", note,
	         note[0] ? ")" : "");
	snprintf(fs->log_line, sizeof(fs->log_line),
	         "staging: %.300s: ring %llu bytes (%s, one allocation%s), host buffer %llu "
	         "bytes (%s: %u chunks of %s), prefetch %s, direct copies %s, zero-copy %s",
	         fs->nst == 1 ? fs->info.name : spec, (unsigned long long)fs->info.ring_bytes, ring,
	         fs->nst == 1 ? "" : " per device", (unsigned long long)fs->info.host_buffer_bytes,
	         hb, fs->info.nchunks, chunk, m->opts->prefetch ? "on" : "off",
	         zs.direct ? "on" : "off", zc);
	if (fs->gate) {
		size_t n = strlen(fs->log_line);

		snprintf(fs->log_line + n, sizeof(fs->log_line) - n,
		         ", at most %u staging reads in the disk at once (-o disk_streams)",
		         m->opts->disk_streams);
	}
	snprintf(fs->plan_line, sizeof(fs->plan_line),
	         "staging: device %.300s, ring %llu bytes (%s%s), host buffer %llu bytes (%s)\n",
	         fs->nst == 1 ? fs->info.name : spec, (unsigned long long)fs->info.ring_bytes, ring,
	         fs->nst == 1 ? "" : " each", (unsigned long long)fs->info.host_buffer_bytes, hb);
	*out = fs;
	return 0;
}

const char *placefs_ioctl_plan_line(const struct placefs_ioctl *fs)
{
	return fs ? fs->plan_line : "";
}

void placefs_ioctl_log(const struct placefs_ioctl *fs)
{
	if (fs && fs->log_line[0])
		placefs_log(LOG_INFO, "%s", fs->log_line);
}

void placefs_ioctl_shutdown(struct placefs_ioctl *fs)
{
	if (!fs)
		return;
	cancel_all(fs);
	pthread_mutex_lock(&fs->lock);
	while (fs->detached > 0)
		pthread_cond_wait(&fs->cond, &fs->lock);
	fs->watch_stop = true;
	pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	if (fs->watcher_started) {
		pthread_join(fs->watcher, NULL);
		fs->watcher_started = false;
	}
}

void placefs_ioctl_free(struct placefs_ioctl *fs)
{
	size_t i;

	if (!fs)
		return;
	placefs_ioctl_shutdown(fs);
	pthread_mutex_lock(&fs->block);
	fs->bstop = true;
	pthread_cond_broadcast(&fs->bwork);
	pthread_mutex_unlock(&fs->block);
	for (i = 0; i < fs->nbthreads; i++)
		pthread_join(fs->bthreads[i], NULL);
	placefs_log_limit_flush(&fs->loglim, "staging");
	placefs_stagers_free(fs->ss);
	placefs_gate_free(fs->gate); /* after the stagers, which borrow it */
	placefs_filler_free(fs->fill);
	for (i = 0; i < LEASE_BUCKETS; i++) {
		while (fs->leases[i]) {
			struct lease_rec *l = fs->leases[i];

			fs->leases[i] = l->next;
			free(l);
		}
	}
	free(fs->users);
	free(fs->perms);
	free(fs->gpu);
	free(fs->gpu_pos);
	pthread_cond_destroy(&fs->bwork);
	pthread_mutex_destroy(&fs->block);
	pthread_cond_destroy(&fs->cond);
	pthread_mutex_destroy(&fs->hint_lock);
	pthread_mutex_destroy(&fs->lock);
	pthread_mutex_destroy(&fs->loglim.lock);
	free(fs);
}
