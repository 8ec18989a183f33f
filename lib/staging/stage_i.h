/* SPDX-License-Identifier: MIT */
/*
 * stage_i.h: the stager's private state, shared by its parts (internal to
 * lib/staging/: only the four files below include it, everyone else goes
 * through stage.h):
 *   stage.c          create/free, leases and the public entry points;
 *   stage_io.c       the job queue, the I/O threads and their bounce chunks;
 *   stage_slice.c    strided slice reads;
 *   stage_prefetch.c prefetch.
 */
#ifndef PLACEFS_STAGE_I_H
#define PLACEFS_STAGE_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "staging/stage.h"

/*
 * Locking: one mutex (st->lock) guards the job queue, job progress, leases
 * and prefetch state. Lock order is st->lock, then the ring's lock (the ring
 * never calls back with its lock held). No file or device I/O happens under
 * st->lock, and the zero-copy registry (its own lock) is called without it.
 */

#define LEASE_BUCKETS 256

/*
 * Zero-copy staging (lib/staging/zerocopy.h): a job whose bytes lie in a shard the
 * registry has registered is one piece, run by one I/O thread as one DMA
 * from the shard's mapping into the ring over the zero-copy streams of the
 * thread's bounce chunks; the registry then checks that the shard did not
 * change, and the tensor fails with -EIO (its span given back) when it did.
 * Every other job takes the bounce path.
 */

struct job {
	struct job *qnext;
	int fd;
	uint64_t file_off;
	uint64_t nbytes;
	uint64_t ring_off;
	/*
	 * A direct copy (copy mode without the ring): pieces go to destination
	 * bytes dest_off + their offset instead of ring_off + it.
	 */
	struct placefs_backend_target *tgt;
	uint64_t dest_off;
	uint64_t npieces;
	uint64_t piece_bytes; /* ring bytes per piece (the last may be shorter) */
	/*
	 * A strided slice: nbytes are lay.nbytes, read from file_off + the
	 * layout's segments; rows_mode: one pread of the rows a piece spans,
	 * compacted in place, else one pread per segment. Contiguous jobs have
	 * strided false (file_off and nbytes are the range itself).
	 */
	bool strided;
	bool rows_mode;
	struct placefs_slice_layout lay;
	uint64_t next;                   /* next piece to hand out */
	uint64_t done;                   /* pieces finished (read + copy waited for, or skipped) */
	int prio;                        /* 1: a foreground request; 0: prefetch */
	struct placefs_zerocopy_src *zc; /* zero-copy source (one piece); NULL: bounce path */
	int rc;                          /* first error; read atomically to skip remaining pieces */
	bool finished;
	struct placefs_error err;
	const char *name;
	uint64_t t_start;
	uint64_t t_end;
	/* Called under st->lock when the job finishes; may free the job. */
	void (*done_cb)(struct placefs_stager *st, struct job *j);
};

/* A pending copy in one of an I/O thread's chunks. */
struct pend {
	struct job *job;
};

struct io_thread {
	struct placefs_stager *st;
	pthread_t tid;
	unsigned nslots;
	unsigned *chunks; /* the backend chunks this thread owns */
	struct pend *pend;
	unsigned npending;
	unsigned rr; /* next slot to fill */
	bool started;
};

struct lease {
	struct lease *next;
	uint64_t id; /* the ring span id */
	uint64_t ring_off;
	uint64_t nbytes;
	uint64_t owner;
	unsigned refs; /* copies out of it in progress */
	bool released; /* ended while a copy was running */
};

enum pf_state {
	PF_INFLIGHT,
	PF_DONE,
};

struct pf_entry {
	struct pf_entry *next;
	uint64_t key;
	int fd;
	uint64_t off;
	uint64_t nbytes;
	uint64_t span_id;
	uint64_t ring_off;
	enum pf_state state;
	bool adopted; /* a foreground stage took it: never evicted */
	bool evict;   /* give it back as soon as it finishes */
	struct job job;
	char name[48];
};

struct counters {
	uint64_t staged[2];
	uint64_t staged_bytes[2];
	uint64_t copied_out;
	uint64_t leases;
	uint64_t released;
	uint64_t errors;
	uint64_t read_bytes;
	uint64_t prefetch_issued;
	uint64_t prefetch_hits;
	uint64_t prefetch_evicted;
	uint64_t prefetch_cancelled;
	uint64_t prefetch_held;
	uint64_t slices;
	uint64_t slice_bytes;
	uint64_t strided_read_bytes;
	uint64_t direct_stages;
	uint64_t direct_bytes;
};

struct placefs_stager {
	struct placefs_backend *be;
	struct placefs_gate *gate; /* borrowed from the config; NULL: none */
	struct placefs_backend_info info;
	struct placefs_ring *ring;

	bool sync_ok; /* lock and condition variables initialised */
	pthread_mutex_t lock;
	pthread_cond_t work_cond; /* I/O threads: work queued or stopping */
	pthread_cond_t done_cond; /* a job finished */
	pthread_cond_t pf_cond;   /* prefetch thread: something changed */

	struct job *q_head;
	struct job *q_tail;
	uint64_t q_submits; /* jobs queued so far; atomic, polled by io_spin() */
	bool stopping;      /* atomic stores: io_spin() polls it unlocked */
	uint64_t spin_ns;   /* io_spin() window; 0 = off */
	enum placefs_stage_slice_read slice_read; /* resolved: AUTO means the per-tensor rule */
	bool direct;                              /* copy mode skips the ring (resolved) */

	struct io_thread *threads;
	unsigned nthreads;

	struct lease *leases[LEASE_BUCKETS];

	/* Prefetch. */
	bool pf_enabled;
	bool pf_started;
	bool pf_stop;
	pthread_t pf_tid;
	struct placefs_prefetch_item *hints;
	size_t nhints;
	size_t cursor;
	struct pf_entry *pf;
	unsigned pf_held;
	unsigned pf_flight;
	/*
	 * Foreground requests between choosing to allocate and getting (or
	 * giving up on) their span: prefetch takes no space meanwhile, so it
	 * never wins space a foreground request is about to ask for.
	 */
	unsigned fg_allocating;

	/* Zero-copy: NULL when off; zc_note says why (set at create, then constant). */
	struct placefs_zerocopy *zc;
	bool zc_borrowed; /* zc is another stager's (config zero_copy_shared): not freed here */
	char zc_note[256];

	struct counters c; /* atomic fields */
};

#define CNT_ADD(st, f, v) __atomic_fetch_add(&(st)->c.f, (v), __ATOMIC_RELAXED)
#define CNT_SUB(st, f, v) __atomic_fetch_sub(&(st)->c.f, (v), __ATOMIC_RELAXED)
#define CNT_GET(st, f)    __atomic_load_n(&(st)->c.f, __ATOMIC_RELAXED)

/* ---- stage_io.c: jobs and I/O threads ------------------------------------- */

void stage_job_init(struct job *j, int fd, uint64_t file_off, uint64_t nbytes, uint64_t ring_off,
                    uint64_t chunk, int prio, const char *name);
/* Queues a job, or finishes an empty one at once; lock held. */
void stage_job_submit(struct placefs_stager *st, struct job *j);
/* Runs a job to the end on the I/O threads; returns its first error. */
int stage_job_run(struct placefs_stager *st, struct job *j);
/*
 * Switches a job that has not been submitted to the zero-copy path, when it
 * can be. May register the shard (slow); st->lock must not be held.
 */
void stage_job_try_zc(struct placefs_stager *st, struct job *j);
/* An I/O thread (arg: its struct io_thread). */
void *stage_io_main(void *arg);
/*
 * Reads bytes [off, off + n) of a tensor into buf, through the mount's disk
 * gate when it has one (lib/staging/gate.h); -EIO naming the tensor otherwise.
 */
int stage_read_full(struct placefs_stager *st, int fd, uint8_t *buf, uint64_t n, uint64_t off,
                    const char *name, struct placefs_error *err);

/* ---- stage_slice.c: strided slices ---------------------------------------- */

/* Reads slice bytes [off, off + n) of a strided job into buf, compacted. */
int stage_read_strided(struct placefs_stager *st, struct job *j, uint8_t *buf, uint64_t off,
                       uint64_t n, struct placefs_error *err);
/* Makes j (fresh from stage_job_init() over the slice's bytes) read the strided layout l. */
void stage_job_set_strided(struct placefs_stager *st, struct job *j,
                           const struct placefs_slice_layout *l);

/* ---- stage_prefetch.c: prefetch ------------------------------------------- */

/* Prefetch yields to a foreground request that lacks space; lock held. */
unsigned stage_pf_yield(struct placefs_stager *st);
/* Ring pressure hook: a foreground request must wait, so prefetch yields. */
void stage_pf_on_pressure(void *arg);
/* The prefetch thread (arg: the stager). */
void *stage_pf_main(void *arg);
/* Space was just given back: issue the next prefetches now. Lock held. */
void stage_pf_kick(struct placefs_stager *st);
/*
 * Takes over a prefetched copy of (key, fd, off, n) if there is one: 1 with
 * *span filled, 0 when there is none (or it failed). Lock held.
 */
int stage_pf_adopt(struct placefs_stager *st, uint64_t key, int fd, uint64_t off, uint64_t n,
                   uint64_t *span_id, uint64_t *ring_off, uint64_t *read_ns);
/* The loader asked for `key`: prefetch continues after it. Lock held. */
void stage_pf_advance(struct placefs_stager *st, uint64_t key);
/* The prefetch entry of `key`, or NULL; lock held. */
struct pf_entry *stage_pf_find(struct placefs_stager *st, uint64_t key);

#endif
