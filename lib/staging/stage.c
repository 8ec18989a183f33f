/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "staging/gate.h"
#include "common/io.h"
#include "staging/ring.h"
#include "staging/stage.h"
#include "staging/zerocopy.h"

/*
 * Locking: one mutex (st->lock) guards the job queue, job progress, leases
 * and prefetch state. Lock order is st->lock, then the ring's lock (the ring
 * never calls back with its lock held). No file or device I/O happens under
 * st->lock, and the zero-copy registry (its own lock) is called without it.
 */

#define LEASE_BUCKETS 256
/* How far ahead of the prefetch cursor a foreground stage looks for its key. */
#define PF_WINDOW 4096
/* Back-stop period for the prefetch thread's waits. */
#define PF_POLL_NS (200ULL * 1000 * 1000)
/* At most this many prefetches are issued by a releasing thread (pf_kick). */
#define PF_KICK 4
/*
 * An I/O thread that finished a piece polls the queue this long before it
 * sleeps (PLACEFS_STAGE_SPIN_US overrides it; 0 = sleep at once): the next
 * job usually comes within a copy-out and a release, and a sleeping thread
 * takes tens of microseconds to wake.
 */
#define IO_SPIN_US_DEFAULT 200

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

/* ---- jobs and I/O threads ------------------------------------------------ */

static void job_init(struct job *j, int fd, uint64_t file_off, uint64_t nbytes, uint64_t ring_off,
                     uint64_t chunk, int prio, const char *name)
{
	memset(j, 0, sizeof(*j));
	j->fd = fd;
	j->file_off = file_off;
	j->nbytes = nbytes;
	j->ring_off = ring_off;
	j->npieces = nbytes / chunk + (nbytes % chunk != 0);
	j->piece_bytes = chunk;
	j->prio = prio;
	j->name = name;
}

/* Queues a job, or finishes an empty one at once; lock held. */
static void job_submit(struct placefs_stager *st, struct job *j)
{
	j->t_start = placefs_clock_ns();
	if (j->npieces == 0) {
		j->finished = true;
		j->t_end = j->t_start;
		pthread_cond_broadcast(&st->done_cond);
		if (j->done_cb)
			j->done_cb(st, j);
		return;
	}
	j->qnext = NULL;
	if (st->q_tail)
		st->q_tail->qnext = j;
	else
		st->q_head = j;
	st->q_tail = j;
	__atomic_fetch_add(&st->q_submits, 1, __ATOMIC_RELEASE);
	if (j->npieces > 1)
		pthread_cond_broadcast(&st->work_cond);
	else
		pthread_cond_signal(&st->work_cond);
}

/* Foreground jobs first, each class in arrival order; lock held. */
static struct job *job_pick(struct placefs_stager *st)
{
	struct job *j;

	for (j = st->q_head; j; j = j->qnext)
		if (j->prio)
			return j;
	return st->q_head;
}

static void job_dequeue(struct placefs_stager *st, struct job *j)
{
	struct job **pp, *prev = NULL;

	for (pp = &st->q_head; *pp; prev = *pp, pp = &(*pp)->qnext) {
		if (*pp == j) {
			*pp = j->qnext;
			if (st->q_tail == j)
				st->q_tail = prev;
			j->qnext = NULL;
			return;
		}
	}
}

/* Accounts one finished piece; takes the lock. */
static void piece_done(struct placefs_stager *st, struct job *j, int rc,
                       const struct placefs_error *e)
{
	pthread_mutex_lock(&st->lock);
	if (rc != 0 && j->rc == 0) {
		if (e)
			j->err = *e;
		__atomic_store_n(&j->rc, rc, __ATOMIC_RELEASE);
	}
	if (++j->done == j->npieces) {
		j->finished = true;
		j->t_end = placefs_clock_ns();
		pthread_cond_broadcast(&st->done_cond);
		if (j->done_cb)
			j->done_cb(st, j); /* may free j */
	}
	pthread_mutex_unlock(&st->lock);
}

/*
 * Reads bytes [off, off + n) of a tensor into buf, through the mount's disk
 * gate when it has one (lib/staging/gate.h); -EIO naming the tensor otherwise.
 */
static int read_full(struct placefs_stager *st, int fd, uint8_t *buf, uint64_t n, uint64_t off,
                     const char *name, struct placefs_error *err)
{
	ssize_t r = placefs_gate_pread(st->gate, fd, buf, (size_t)n, off);

	if (r < 0)
		return placefs_error_set(
		        err, -EIO, PLACEFS_E_IO,
		        "tensor \"%s\": reading %llu bytes at offset %llu failed: %s", name,
		        (unsigned long long)n, (unsigned long long)off, strerror((int)-r));
	if ((uint64_t)r < n)
		return placefs_error_set(
		        err, -EIO, PLACEFS_E_IO,
		        "tensor \"%s\": short read: the shard ends at offset %llu, "
		        "%llu bytes before the tensor's end",
		        name, (unsigned long long)(off + (uint64_t)r),
		        (unsigned long long)(n - (uint64_t)r));
	return 0;
}

/* ---- strided slices --------------------------------------------------------- */

/*
 * Reads slice bytes [off, off + n) of a strided job into buf, compacted.
 * Rows mode: pieces are whole segments and the source bytes they span fit
 * the chunk (slice_plan()), so one pread brings them all and the segments
 * move down into place, front to back (each lands at or before where it was
 * read). Segments mode: one pread per segment (or part of one).
 */
static int read_strided(struct placefs_stager *st, struct job *j, uint8_t *buf, uint64_t off,
                        uint64_t n, struct placefs_error *err)
{
	const struct placefs_slice_layout *l = &j->lay;
	uint64_t run, src = placefs_slice_src(l, off, &run), done, span, k, i;
	int rc;

	if (j->rows_mode) {
		k = n / l->seg_bytes;
		span = (k - 1) * l->stride + l->seg_bytes;
		rc = read_full(st, j->fd, buf, span, j->file_off + src, j->name, err);
		if (rc != 0)
			return rc;
		for (i = 1; i < k; i++)
			memmove(buf + i * l->seg_bytes, buf + i * l->stride, (size_t)l->seg_bytes);
		CNT_ADD(st, read_bytes, span);
		CNT_ADD(st, strided_read_bytes, span);
		return 0;
	}
	for (done = 0; done < n; done += run) {
		src = placefs_slice_src(l, off + done, &run);
		if (run > n - done)
			run = n - done;
		rc = read_full(st, j->fd, buf + done, run, j->file_off + src, j->name, err);
		if (rc != 0)
			return rc;
	}
	CNT_ADD(st, read_bytes, n);
	CNT_ADD(st, strided_read_bytes, n);
	return 0;
}

/*
 * Segments or rows for a strided slice with this stager's chunks. "auto":
 * rows when a chunk holds at least two rows, a whole row (the stride) is at
 * most SLICE_ROWS_STRIDE_MAX bytes and the rows read at most
 * SLICE_ROWS_RATIO times the slice's bytes. A segment costs a pread each;
 * reading whole rows costs copying the bytes skipped, twice (page cache,
 * then compaction). Measured with tests/bench/slicebench on the H200
 * machine, 16 cores, into cuda:0 (doc/STAGING.md, "Devices and slices"):
 * rows won for rows of 2-8 KiB (12.4 against 7.5 GB/s for 4 KiB segments of
 * 8 KiB rows, 3.2 against 2.3 for 1 KiB ones), segments for rows of 28 KiB
 * and more (8.5 against 6.2 GB/s for 3.5 KiB segments of 28 KiB rows).
 */
#define SLICE_ROWS_STRIDE_MAX (16ULL << 10)
#define SLICE_ROWS_RATIO      8
static bool slice_rows(const struct placefs_stager *st, const struct placefs_slice_layout *l)
{
	uint64_t chunk = st->info.chunk_bytes;

	if (l->seg_bytes > chunk || l->stride > chunk - l->seg_bytes)
		return false; /* not two rows' worth in one chunk: rows cannot help */
	if (st->slice_read == PLACEFS_STAGE_SLICE_ROWS)
		return true;
	if (st->slice_read == PLACEFS_STAGE_SLICE_SEGMENTS)
		return false;
	return l->stride <= SLICE_ROWS_STRIDE_MAX && l->stride / l->seg_bytes <= SLICE_ROWS_RATIO;
}

/* Makes j (fresh from job_init() over the slice's bytes) read the strided layout l. */
static void job_set_strided(struct placefs_stager *st, struct job *j,
                            const struct placefs_slice_layout *l)
{
	uint64_t chunk = st->info.chunk_bytes, k;

	j->strided = true;
	j->lay = *l;
	j->rows_mode = slice_rows(st, l);
	if (j->rows_mode) {
		/* k whole segments whose rows span at most a chunk: (k-1)*stride + seg <= chunk. */
		k = (chunk - l->seg_bytes) / l->stride + 1;
		j->piece_bytes = k * l->seg_bytes;
	} else {
		j->piece_bytes = chunk;
	}
	j->npieces = j->nbytes / j->piece_bytes + (j->nbytes % j->piece_bytes != 0);
}

/* ---- zero-copy sources ----------------------------------------------------- */

static void slots_reap_ready(struct io_thread *t, bool all);

/*
 * Runs a zero-copy job (one piece) on thread t: the registry's DMA from the
 * mapping and its staleness check (lib/staging/zerocopy.h). Unlocked.
 */
static void zc_run(struct io_thread *t, struct job *j)
{
	struct placefs_stager *st = t->st;
	struct placefs_zerocopy_src *z = j->zc;
	struct placefs_error e;
	int rc = 0;

	/*
	 * Finish this thread's bounce copies first, so that their jobs complete
	 * now rather than after this transfer (which runs on other streams).
	 */
	slots_reap_ready(t, true);
	placefs_error_clear(&e);
	if (__atomic_load_n(&j->rc, __ATOMIC_ACQUIRE) == 0) {
		/* Into this stager's ring, whichever stager's registry it is. */
		rc = placefs_zerocopy_copy_ctx(st->zc, st->be, z, j->fd, t->chunks, t->nslots,
		                               j->file_off, j->ring_off, j->nbytes, &e);
		if (rc != 0)
			placefs_error_prefix(&e, "tensor \"%s\"", j->name);
	}
	j->zc = NULL;
	placefs_zerocopy_put(st->zc, z);
	piece_done(st, j, rc, &e);
}

/*
 * Switches a job that has not been submitted to the zero-copy path, when it
 * can be. May register the shard (slow); st->lock must not be held.
 */
static void job_try_zc(struct placefs_stager *st, struct job *j)
{
	struct placefs_zerocopy_src *z;

	if (!st->zc)
		return;
	z = placefs_zerocopy_acquire(st->zc, j->fd, j->file_off, j->nbytes);
	if (z) {
		j->zc = z;
		j->npieces = 1;
	}
}

/* Waits for the copy pending in slot s and finishes its piece. */
static void slot_reap(struct io_thread *t, unsigned s)
{
	struct placefs_error e;
	struct job *j = t->pend[s].job;
	int rc;

	placefs_error_clear(&e);
	rc = placefs_backend_chunk_wait(t->st->be, t->chunks[s], &e);
	if (rc != 0)
		placefs_error_prefix(&e, "tensor \"%s\"", j->name);
	t->pend[s].job = NULL;
	t->npending--;
	piece_done(t->st, j, rc, &e);
}

static void slots_reap_ready(struct io_thread *t, bool all)
{
	unsigned s;

	for (s = 0; s < t->nslots; s++)
		if (t->pend[s].job && (all || placefs_backend_chunk_poll(t->st->be, t->chunks[s])))
			slot_reap(t, s);
}

/* Reads one piece into the next chunk and starts its copy; called unlocked. */
static void piece_run(struct io_thread *t, struct job *j, uint64_t piece)
{
	struct placefs_stager *st = t->st;
	struct placefs_error e;
	uint64_t off = piece * j->piece_bytes;
	uint64_t n = j->nbytes - off;
	unsigned s = t->rr;
	uint8_t *buf;
	int rc;

	if (j->zc) {
		zc_run(t, j);
		return;
	}
	t->rr = (t->rr + 1) % t->nslots;
	if (n > j->piece_bytes)
		n = j->piece_bytes;
	/* The chunk may still be copying an earlier piece: wait before reuse. */
	if (t->pend[s].job)
		slot_reap(t, s);
	if (__atomic_load_n(&j->rc, __ATOMIC_ACQUIRE) != 0) {
		piece_done(st, j, 0, NULL); /* the tensor already failed: skip */
		return;
	}
	placefs_error_clear(&e);
	buf = placefs_backend_chunk(st->be, t->chunks[s]);
	if (j->strided)
		rc = read_strided(st, j, buf, off, n, &e);
	else
		rc = read_full(st, j->fd, buf, n, j->file_off + off, j->name, &e);
	if (rc == 0) {
		if (!j->strided)
			CNT_ADD(st, read_bytes, n);
		if (j->tgt)
			rc = placefs_backend_chunk_to_target(st->be, t->chunks[s], j->tgt,
			                                     j->dest_off + off, n, &e);
		else
			rc = placefs_backend_chunk_to_ring(st->be, t->chunks[s], j->ring_off + off,
			                                   n, &e);
		if (rc != 0)
			placefs_error_prefix(&e, "tensor \"%s\"", j->name);
	}
	if (rc != 0) {
		piece_done(st, j, rc, &e);
		return;
	}
	t->pend[s].job = j;
	t->npending++;
	slots_reap_ready(t, false);
}

/*
 * Polls the job queue, unlocked, for up to st->spin_ns or until a job is
 * queued or the stop comes. Lock held on entry and return; the caller looks
 * at the queue again.
 */
static void io_spin(struct placefs_stager *st)
{
	uint64_t end = placefs_clock_ns() + st->spin_ns;
	uint64_t seen = __atomic_load_n(&st->q_submits, __ATOMIC_RELAXED);

	pthread_mutex_unlock(&st->lock);
	do {
		if (__atomic_load_n(&st->q_submits, __ATOMIC_ACQUIRE) != seen ||
		    __atomic_load_n(&st->stopping, __ATOMIC_RELAXED))
			break;
		sched_yield();
	} while (placefs_clock_ns() < end);
	pthread_mutex_lock(&st->lock);
}

static void *io_main(void *arg)
{
	struct io_thread *t = arg;
	struct placefs_stager *st = t->st;
	bool spin = false;

	pthread_mutex_lock(&st->lock);
	for (;;) {
		struct job *j = job_pick(st);
		uint64_t piece;

		if (!j) {
			if (t->npending) {
				/* Idle: finish the copies still in flight first. */
				pthread_mutex_unlock(&st->lock);
				slots_reap_ready(t, true);
				pthread_mutex_lock(&st->lock);
				continue;
			}
			if (st->stopping)
				break;
			if (spin) {
				/*
				 * Just worked: poll the queue for a while before
				 * sleeping, then look again (a job may have come
				 * just as the window closed, unlocked).
				 */
				spin = false;
				io_spin(st);
				continue;
			}
			pthread_cond_wait(&st->work_cond, &st->lock);
			continue;
		}
		spin = st->spin_ns > 0;
		piece = j->next++;
		if (j->next == j->npieces)
			job_dequeue(st, j);
		pthread_mutex_unlock(&st->lock);
		piece_run(t, j, piece);
		pthread_mutex_lock(&st->lock);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* Runs a job to the end on the I/O threads; returns its first error. */
static int job_run(struct placefs_stager *st, struct job *j)
{
	pthread_mutex_lock(&st->lock);
	job_submit(st, j);
	while (!j->finished)
		pthread_cond_wait(&st->done_cond, &st->lock);
	pthread_mutex_unlock(&st->lock);
	return j->rc;
}

/* ---- leases ---------------------------------------------------------------- */

static struct lease **lease_slot(struct placefs_stager *st, uint64_t id)
{
	return &st->leases[(id * 0x9E3779B97F4A7C15ULL) >> 56];
}

static struct lease *lease_find(struct placefs_stager *st, uint64_t id)
{
	struct lease *l;

	for (l = *lease_slot(st, id); l; l = l->next)
		if (l->id == id && !l->released)
			return l;
	return NULL;
}

/* Unlinks and frees l and gives its span back; lock held. */
static void lease_drop(struct placefs_stager *st, struct lease *l)
{
	struct lease **pp;

	for (pp = lease_slot(st, l->id); *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	placefs_ring_release(st->ring, l->id);
	free(l);
	pthread_cond_signal(&st->pf_cond);
}

/* Ends a lease now, or when its last copy finishes; lock held. */
static void lease_end(struct placefs_stager *st, struct lease *l)
{
	CNT_SUB(st, leases, 1);
	CNT_ADD(st, released, 1);
	if (l->refs > 0)
		l->released = true;
	else
		lease_drop(st, l);
}

static int lease_add(struct placefs_stager *st, uint64_t id, uint64_t ring_off, uint64_t nbytes,
                     uint64_t owner)
{
	struct lease *l = calloc(1, sizeof(*l));
	struct lease **slot;

	if (!l)
		return -ENOMEM;
	l->id = id;
	l->ring_off = ring_off;
	l->nbytes = nbytes;
	l->owner = owner;
	slot = lease_slot(st, id);
	l->next = *slot;
	*slot = l;
	CNT_ADD(st, leases, 1);
	return 0;
}

/* ---- prefetch ------------------------------------------------------------- */

static void pf_unlink(struct placefs_stager *st, struct pf_entry *e)
{
	struct pf_entry **pp;

	for (pp = &st->pf; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	}
	st->pf_held--;
	__atomic_store_n(&st->c.prefetch_held, (uint64_t)st->pf_held, __ATOMIC_RELAXED);
	pthread_cond_signal(&st->pf_cond);
}

/* Gives a finished, unadopted prefetch back to the ring; lock held. */
static void pf_evict(struct placefs_stager *st, struct pf_entry *e)
{
	pf_unlink(st, e);
	placefs_ring_release(st->ring, e->span_id);
	if (e->job.rc == 0 || e->job.rc == -ECANCELED)
		CNT_ADD(st, prefetch_evicted, 1);
	free(e);
}

/*
 * Prefetch yields to a foreground request that lacks space: every unadopted
 * prefetched span is given back, finished ones at once (the ring reclaims
 * them when they are at either end of its allocation order, as a prefetch
 * made after the foreground spans is), those in flight as soon as their job
 * ends. A job in flight with more than the bounce buffer's worth of pieces
 * still to hand out is cut short: the rest is cancelled (-ECANCELED; its
 * pieces are skipped, those handed out end first), so a foreground request
 * never waits for the whole of a large speculative read (a 1 GiB embedding
 * through a host ring of the development VM: 2.2 s). A smaller one runs to
 * its end, as the loader may still adopt it (the next tensor it asks for).
 * An adopter that finds a job cancelled stages the tensor afresh
 * (pf_adopt). Returns how many were given back at once. Lock held.
 */
static unsigned pf_yield(struct placefs_stager *st)
{
	struct pf_entry *e, *next;
	unsigned n = 0;

	for (e = st->pf; e; e = next) {
		next = e->next;
		if (e->adopted)
			continue;
		if (e->state == PF_DONE) {
			pf_evict(st, e);
			n++;
			continue;
		}
		e->evict = true;
		if (e->job.next < e->job.npieces &&
		    (e->job.npieces - e->job.next) * e->job.piece_bytes >
		            st->info.host_buffer_bytes &&
		    __atomic_load_n(&e->job.rc, __ATOMIC_RELAXED) == 0) {
			__atomic_store_n(&e->job.rc, -ECANCELED, __ATOMIC_RELEASE);
			CNT_ADD(st, prefetch_cancelled, 1);
		}
	}
	return n;
}

/* Ring pressure hook: a foreground request must wait, so prefetch yields. */
static void pf_on_pressure(void *arg)
{
	struct placefs_stager *st = arg;

	pthread_mutex_lock(&st->lock);
	pf_yield(st);
	pthread_mutex_unlock(&st->lock);
}

/* A prefetch job finished; lock held. */
static void pf_job_done(struct placefs_stager *st, struct job *j)
{
	struct pf_entry *e = (struct pf_entry *)((char *)j - offsetof(struct pf_entry, job));

	e->state = PF_DONE;
	st->pf_flight--;
	pthread_cond_signal(&st->pf_cond);
	if (e->adopted)
		return; /* the adopter takes it from here */
	if (j->rc != 0 || e->evict || placefs_ring_waiting(st->ring) > 0)
		pf_evict(st, e);
}

static struct pf_entry *pf_find(struct placefs_stager *st, uint64_t key)
{
	struct pf_entry *e;

	for (e = st->pf; e; e = e->next)
		if (e->key == key)
			return e;
	return NULL;
}

/*
 * Issues the next prefetch hint into free ring space: 1 when it did (or
 * skipped a hint that can never be prefetched), 0 when there is nothing to
 * do now. Lock held; dropped and retaken while a shard is registered.
 */
static int pf_issue(struct placefs_stager *st)
{
	static const struct timespec now_only = {0, 0};
	const struct placefs_prefetch_item *it;
	struct pf_entry *e;
	uint64_t off, id;

	if (st->pf_stop || st->cursor >= st->nhints || st->pf_held >= PLACEFS_STAGE_PREFETCH_MAX ||
	    st->pf_flight >= 2 * st->nthreads || st->fg_allocating > 0 ||
	    placefs_ring_waiting(st->ring) > 0)
		return 0;
	it = &st->hints[st->cursor];
	if (it->nbytes > placefs_ring_capacity(st->ring) || pf_find(st, it->key)) {
		st->cursor++;
		return 1;
	}
	/* Only free space, and only when no foreground request waits. */
	if (placefs_ring_alloc(st->ring, it->nbytes, &now_only, NULL, &off, &id) != 0)
		return 0;
	e = calloc(1, sizeof(*e));
	if (!e) {
		placefs_ring_release(st->ring, id);
		return 0;
	}
	e->key = it->key;
	e->fd = it->fd;
	e->off = it->offset;
	e->nbytes = it->nbytes;
	e->span_id = id;
	e->ring_off = off;
	e->state = PF_INFLIGHT;
	snprintf(e->name, sizeof(e->name), "prefetch key %llu", (unsigned long long)it->key);
	job_init(&e->job, it->fd, it->offset, it->nbytes, off, st->info.chunk_bytes, 0, e->name);
	e->job.done_cb = pf_job_done;
	e->next = st->pf;
	st->pf = e;
	st->pf_held++;
	st->pf_flight++;
	st->cursor++;
	__atomic_store_n(&st->c.prefetch_held, (uint64_t)st->pf_held, __ATOMIC_RELAXED);
	CNT_ADD(st, prefetch_issued, 1);
	if (st->zc) {
		/*
		 * The entry is listed (in flight) already, so an adopter waits
		 * for it and a yield marks it; registering a new shard is slow,
		 * so it runs unlocked.
		 */
		pthread_mutex_unlock(&st->lock);
		job_try_zc(st, &e->job);
		pthread_mutex_lock(&st->lock);
	}
	job_submit(st, &e->job); /* may finish (and evict) at once when empty */
	return 1;
}

static void *pf_main(void *arg)
{
	struct placefs_stager *st = arg;

	pthread_mutex_lock(&st->lock);
	while (!st->pf_stop)
		if (!pf_issue(st))
			placefs_clock_cond_wait_ns(&st->pf_cond, &st->lock, PF_POLL_NS);
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/*
 * Space was just given back: the releasing thread issues the next prefetches
 * itself (at most PF_KICK of them) instead of waiting for the prefetch
 * thread to wake up, so that the next tensor's transfer starts at once when
 * the ring holds one large tensor at a time. Lock held.
 */
static void pf_kick(struct placefs_stager *st)
{
	unsigned i;

	if (!st->pf_enabled)
		return;
	for (i = 0; i < PF_KICK && pf_issue(st); i++)
		;
}

/*
 * Takes over a prefetched copy of (key, fd, off, n) if there is one: 1 with
 * *span filled, 0 when there is none (or it failed). Lock held.
 */
static int pf_adopt(struct placefs_stager *st, uint64_t key, int fd, uint64_t off, uint64_t n,
                    uint64_t *span_id, uint64_t *ring_off, uint64_t *read_ns)
{
	struct pf_entry *e = pf_find(st, key);
	uint64_t t0 = placefs_clock_ns();
	int rc;

	/* Another caller may be adopting it right now: then stage afresh. */
	if (!e || e->adopted || e->fd != fd || e->off != off || e->nbytes != n)
		return 0;
	e->adopted = true;
	e->evict = false;
	if (e->state == PF_INFLIGHT) {
		/* Its remaining pieces now go ahead of other prefetches. */
		e->job.prio = 1;
		while (e->state == PF_INFLIGHT)
			pthread_cond_wait(&st->done_cond, &st->lock);
	}
	rc = e->job.rc;
	*span_id = e->span_id;
	*ring_off = e->ring_off;
	*read_ns = placefs_clock_ns() - t0;
	pf_unlink(st, e);
	free(e);
	if (rc != 0) {
		placefs_ring_release(st->ring, *span_id);
		return 0; /* stage it again in the foreground, with its own error */
	}
	return 1;
}

/* The loader asked for `key`: prefetch continues after it. Lock held. */
static void pf_advance(struct placefs_stager *st, uint64_t key)
{
	size_t i, end = st->cursor + PF_WINDOW;

	if (end > st->nhints)
		end = st->nhints;
	for (i = st->cursor; i < end; i++) {
		if (st->hints[i].key == key) {
			st->cursor = i + 1;
			pthread_cond_signal(&st->pf_cond);
			return;
		}
	}
}

int placefs_stager_prefetch(struct placefs_stager *st, const struct placefs_prefetch_item *items,
                            size_t n, struct placefs_error *err)
{
	struct placefs_prefetch_item *copy = NULL;
	size_t i;

	if (!st->pf_enabled)
		return 0;
	for (i = 0; i < n; i++)
		if (items[i].key == 0)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "prefetch hint %zu has key 0", i);
	if (n > 0) {
		if (n > SIZE_MAX / sizeof(*copy))
			return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
		copy = malloc(n * sizeof(*copy));
		if (!copy)
			return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
		memcpy(copy, items, n * sizeof(*copy));
	}
	pthread_mutex_lock(&st->lock);
	free(st->hints);
	st->hints = copy;
	st->nhints = n;
	st->cursor = 0;
	pthread_cond_signal(&st->pf_cond);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

/* ---- create / free -------------------------------------------------------- */

/* The mutex and condition variables (CLOCK_MONOTONIC for timed waits). */
static int sync_init(struct placefs_stager *st)
{
	if (pthread_mutex_init(&st->lock, NULL) != 0)
		return -ENOMEM;
	if (placefs_clock_cond_init(&st->work_cond) != 0)
		goto fail_work;
	if (placefs_clock_cond_init(&st->done_cond) != 0)
		goto fail_done;
	if (placefs_clock_cond_init(&st->pf_cond) != 0)
		goto fail_pf;
	return 0;

fail_pf:
	pthread_cond_destroy(&st->done_cond);
fail_done:
	pthread_cond_destroy(&st->work_cond);
fail_work:
	pthread_mutex_destroy(&st->lock);
	return -ENOMEM;
}

static void threads_stop(struct placefs_stager *st)
{
	unsigned i;

	if (st->pf_started) {
		pthread_mutex_lock(&st->lock);
		st->pf_stop = true;
		pthread_cond_broadcast(&st->pf_cond);
		pthread_mutex_unlock(&st->lock);
		pthread_join(st->pf_tid, NULL);
		st->pf_started = false;
	}
	/*
	 * The I/O threads drain the queue (prefetch jobs still in flight
	 * included) and wait for their pending copies, then exit: no copy is in
	 * flight when the backend is freed.
	 */
	pthread_mutex_lock(&st->lock);
	__atomic_store_n(&st->stopping, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&st->work_cond);
	pthread_mutex_unlock(&st->lock);
	for (i = 0; i < st->nthreads; i++) {
		if (st->threads[i].started)
			pthread_join(st->threads[i].tid, NULL);
		st->threads[i].started = false;
	}
}

/* Frees a stager in any state create() can leave it in. */
static void stager_destroy(struct placefs_stager *st)
{
	struct pf_entry *e, *en;
	unsigned i;

	if (st->sync_ok)
		threads_stop(st);
	for (e = st->pf; e; e = en) {
		en = e->next;
		free(e);
	}
	/* No copy is in flight any more: drop the registrations before the backend. */
	if (!st->zc_borrowed)
		placefs_zerocopy_free(st->zc);
	for (i = 0; i < LEASE_BUCKETS; i++) {
		struct lease *l, *ln;

		for (l = st->leases[i]; l; l = ln) {
			ln = l->next;
			free(l);
		}
	}
	for (i = 0; i < st->nthreads; i++) {
		free(st->threads[i].chunks);
		free(st->threads[i].pend);
	}
	free(st->threads);
	free(st->hints);
	if (st->sync_ok) {
		pthread_cond_destroy(&st->pf_cond);
		pthread_cond_destroy(&st->done_cond);
		pthread_cond_destroy(&st->work_cond);
		pthread_mutex_destroy(&st->lock);
	}
	placefs_ring_free(st->ring);
	placefs_backend_free(st->be);
	free(st);
}

/*
 * I/O threads when the config says 0: PLACEFS_STAGE_IO_THREADS if set (a
 * tuning knob for benchmarks), else one per online CPU minus two (the FUSE
 * workers and the copy engine's feeder need some), clamped to [4, 16]. One
 * thread fills pinned memory at about 8 GB/s, so ~7 keep a PCIe Gen5 link busy.
 */
static int default_io_threads(unsigned *out, struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_IO_THREADS");
	long ncpu;

	if (env) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(env, &end, 10);
		if (errno || end == env || *end || env[0] < '0' || env[0] > '9' || v == 0 ||
		    v > PLACEFS_STAGE_IO_THREADS_MAX)
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "PLACEFS_STAGE_IO_THREADS=\"%s\": expected 1 to %d", env,
			        PLACEFS_STAGE_IO_THREADS_MAX);
		*out = (unsigned)v;
		return 0;
	}
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	*out = ncpu - 2 < 4 ? 4 : ncpu - 2 > 16 ? 16 : (unsigned)(ncpu - 2);
	return 0;
}

/* The I/O threads' polling window: $PLACEFS_STAGE_SPIN_US or the default. */
static int io_spin_setting(uint64_t *ns, struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_SPIN_US");
	unsigned long v = IO_SPIN_US_DEFAULT;
	char *end;

	if (env) {
		errno = 0;
		v = strtoul(env, &end, 10);
		if (errno || end == env || *end || env[0] < '0' || env[0] > '9' || v > 100000)
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "PLACEFS_STAGE_SPIN_US=\"%s\": expected 0 to 100000", env);
	}
	*ns = (uint64_t)v * 1000;
	return 0;
}

/* The strided-slice read mode: the config's, else $PLACEFS_STAGE_SLICE_READ, else auto. */
static int slice_read_setting(const struct placefs_stager_config *cfg,
                              enum placefs_stage_slice_read *out, struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_SLICE_READ");

	*out = PLACEFS_STAGE_SLICE_AUTO;
	switch (cfg->slice_read) {
	case PLACEFS_STAGE_SLICE_SEGMENTS:
	case PLACEFS_STAGE_SLICE_ROWS: *out = cfg->slice_read; return 0;
	case PLACEFS_STAGE_SLICE_AUTO: break;
	default:
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE,
		        "staging: slice read mode %d is not auto, segments or rows",
		        (int)cfg->slice_read);
	}
	if (!env || strcmp(env, "auto") == 0)
		return 0;
	if (strcmp(env, "segments") == 0)
		*out = PLACEFS_STAGE_SLICE_SEGMENTS;
	else if (strcmp(env, "rows") == 0)
		*out = PLACEFS_STAGE_SLICE_ROWS;
	else
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE,
		        "PLACEFS_STAGE_SLICE_READ=\"%s\": expected auto, segments or "
		        "rows",
		        env);
	return 0;
}

/* Direct copies: the config's, else $PLACEFS_STAGE_DIRECT ("0" or "1"), else on. */
static int direct_setting(const struct placefs_stager_config *cfg, bool *out,
                          struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_DIRECT");

	*out = true;
	if (cfg->direct_copy != 0) {
		*out = cfg->direct_copy > 0;
		return 0;
	}
	if (!env || strcmp(env, "1") == 0)
		return 0;
	if (strcmp(env, "0") == 0) {
		*out = false;
		return 0;
	}
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "PLACEFS_STAGE_DIRECT=\"%s\": expected 0 or 1", env);
}

/*
 * Decides whether zero-copy is on (st->zc made): the backend must have it,
 * and the config (or, by default, $PLACEFS_STAGE_ZERO_COPY) must turn it
 * on. It is off by default: measured on an H200 (doc/PERFORMANCE.md), the
 * bounce path's first pass after a mount runs at 0.76 x the pinned-H2D
 * ceiling against 0.22 x for zero-copy, whose first stage of each shard
 * registers the whole shard (1.2 s for 17 GB; 256 ms before the first
 * tensor), and its pinned memory stays within host_buffer instead of
 * growing with the checkpoint. Zero-copy wins only on later passes.
 */
static int zero_copy_setup(struct placefs_stager *st, const struct placefs_stager_config *cfg,
                           struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_ZERO_COPY");
	const char *why = "configuration";
	int want = cfg->zero_copy;

	if (want == 0 && env) {
		if (strcmp(env, "0") == 0) {
			want = -1;
			why = "PLACEFS_STAGE_ZERO_COPY=0";
		} else if (strcmp(env, "1") == 0) {
			want = 1;
		} else {
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "PLACEFS_STAGE_ZERO_COPY=\"%s\": expected 0 or 1",
			                         env);
		}
	} else if (want == 0) {
		want = -1;
		why = "the default";
	}
	if (!placefs_backend_has_zero_copy(st->be)) {
		if (want > 0)
			snprintf(st->zc_note, sizeof(st->zc_note),
			         "%s: this backend cannot stage without bounce buffers (zero-copy)",
			         st->info.name);
		return 0;
	}
	if (want < 0) {
		snprintf(st->zc_note, sizeof(st->zc_note), "%s: zero-copy staging is off (%s)",
		         st->info.name, why);
		return 0;
	}
	if (cfg->zero_copy_shared) {
		st->zc = cfg->zero_copy_shared;
		st->zc_borrowed = true;
		return 0;
	}
	return placefs_zerocopy_create(st->be, 0, &st->zc, err);
}

int placefs_stager_create(const struct placefs_stager_config *cfg, struct placefs_stager **out,
                          struct placefs_error *err)
{
	struct placefs_stager *st;
	enum placefs_stage_slice_read slice_read;
	unsigned want, i;
	uint64_t spin_ns = 0;
	bool direct;
	int rc;

	*out = NULL;
	want = cfg->io_threads;
	if (want == 0) {
		rc = default_io_threads(&want, err);
		if (rc)
			return rc;
	}
	if (want > PLACEFS_STAGE_IO_THREADS_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "staging: %u I/O threads requested, at most %d", want,
		                         PLACEFS_STAGE_IO_THREADS_MAX);
	rc = io_spin_setting(&spin_ns, err);
	if (rc)
		return rc;
	rc = slice_read_setting(cfg, &slice_read, err);
	if (rc)
		return rc;
	rc = direct_setting(cfg, &direct, err);
	if (rc)
		return rc;
	st = calloc(1, sizeof(*st));
	if (!st)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "staging: out of memory");
	st->spin_ns = spin_ns;
	st->slice_read = slice_read;
	st->direct = direct;
	st->gate = cfg->gate;
	rc = placefs_backend_create(cfg->device, cfg->ring_bytes, cfg->host_buffer, &st->be, err);
	if (rc != 0 || !st->be) {
		free(st);
		return rc; /* "none" ends here with *out = NULL */
	}
	placefs_backend_get_info(st->be, &st->info);
	rc = placefs_ring_create(cfg->ring_bytes,
	                         cfg->align ? cfg->align : PLACEFS_STAGE_ALIGN_DEFAULT, &st->ring,
	                         err);
	if (rc != 0)
		goto fail;
	if (sync_init(st) != 0)
		goto fail_nomem;
	st->sync_ok = true;

	/* One thread per chunk at most; the chunks are dealt round-robin. */
	st->threads =
	        calloc(want < st->info.nchunks ? want : st->info.nchunks, sizeof(*st->threads));
	if (!st->threads)
		goto fail_nomem;
	st->nthreads = want < st->info.nchunks ? want : st->info.nchunks;
	for (i = 0; i < st->nthreads; i++) {
		struct io_thread *t = &st->threads[i];
		unsigned c;

		t->st = st;
		t->nslots = (st->info.nchunks - i + st->nthreads - 1) / st->nthreads;
		t->chunks = calloc(t->nslots, sizeof(*t->chunks));
		t->pend = calloc(t->nslots, sizeof(*t->pend));
		if (!t->chunks || !t->pend)
			goto fail_nomem;
		for (c = 0; c < t->nslots; c++)
			t->chunks[c] = i + c * st->nthreads;
	}
	for (i = 0; i < st->nthreads; i++) {
		rc = -pthread_create(&st->threads[i].tid, NULL, io_main, &st->threads[i]);
		if (rc != 0)
			goto fail_start;
		st->threads[i].started = true;
	}
	rc = zero_copy_setup(st, cfg, err);
	if (rc != 0)
		goto fail;
	placefs_ring_set_pressure_hook(st->ring, pf_on_pressure, st);
	st->pf_enabled = cfg->prefetch != 0;
	if (st->pf_enabled) {
		rc = -pthread_create(&st->pf_tid, NULL, pf_main, st);
		if (rc != 0)
			goto fail_start;
		st->pf_started = true;
	}
	*out = st;
	return 0;

fail_start:
	placefs_error_set(err, rc, PLACEFS_E_IO, "staging: cannot start a thread: %s",
	                  strerror(-rc));
	goto fail;
fail_nomem:
	rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "staging: out of memory");
fail:
	stager_destroy(st);
	return rc;
}

void placefs_stager_free(struct placefs_stager *st)
{
	if (st)
		stager_destroy(st);
}

const struct placefs_backend *placefs_stager_backend(const struct placefs_stager *st)
{
	return st->be;
}

/* ---- staging -------------------------------------------------------------- */

/*
 * The bytes a stage moves: checks fd and the range, then the slice (if any)
 * against the tensor, and narrows *file_offset and *nbytes to a contiguous
 * slice's range or *nbytes to a strided slice's bytes (*strided set); -EFBIG
 * when they cannot fit the ring. 0 or a negative errno with a message.
 */
static int stage_range(struct placefs_stager *st, const char *name, int fd,
                       const struct placefs_slice_layout *slice, uint64_t *file_offset,
                       uint64_t *nbytes, bool *strided, struct placefs_error *err)
{
	uint64_t cap = placefs_ring_capacity(st->ring);
	int rc;

	*strided = false;
	if (fd < 0 || *file_offset > (uint64_t)INT64_MAX ||
	    *nbytes > (uint64_t)INT64_MAX - *file_offset)
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE, "tensor \"%s\": bad file or range %llu+%llu",
		        name, (unsigned long long)*file_offset, (unsigned long long)*nbytes);
	if (slice) {
		rc = placefs_slice_check(name, slice, *nbytes, err);
		if (rc != 0)
			return rc;
		if (placefs_slice_contiguous(slice))
			*file_offset += slice->offset; /* a range of the tensor: the tensor path */
		else
			*strided = true;
		*nbytes = slice->nbytes;
	}
	if (*nbytes > cap)
		return placefs_error_set(err, -EFBIG, PLACEFS_E_LIMIT,
		                         "tensor \"%s\": %llu bytes do not fit the %llu-byte "
		                         "staging ring",
		                         name, (unsigned long long)*nbytes,
		                         (unsigned long long)cap);
	return 0;
}

static int stage_one(struct placefs_stager *st, int fd, uint64_t file_offset, uint64_t nbytes,
                     const struct placefs_stage_opts *opts, struct placefs_stage_span *out,
                     struct placefs_error *err)
{
	const char *name = opts && opts->name ? opts->name : "(unnamed)";
	const struct placefs_slice_layout *slice = opts ? opts->slice : NULL;
	uint64_t key = opts ? opts->key : 0;
	uint64_t owner = opts ? opts->owner : 0;
	uint64_t t0 = placefs_clock_ns(), t1, span_id = 0, ring_off = 0, read_ns = 0;
	bool strided;
	struct job job;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = stage_range(st, name, fd, slice, &file_offset, &nbytes, &strided, err);
	if (rc != 0)
		return rc;
	if (strided)
		key = 0; /* a prefetched span holds whole tensors, never these bytes */

	pthread_mutex_lock(&st->lock);
	if (key && pf_adopt(st, key, fd, file_offset, nbytes, &span_id, &ring_off, &read_ns)) {
		rc = lease_add(st, span_id, ring_off, nbytes, owner);
		if (rc != 0)
			placefs_ring_release(st->ring, span_id);
		pthread_mutex_unlock(&st->lock);
		if (rc != 0)
			return placefs_error_set(err, rc, PLACEFS_E_NOMEM, "out of memory");
		CNT_ADD(st, prefetch_hits, 1);
		out->lease = span_id;
		out->ring_offset = ring_off;
		out->nbytes = nbytes;
		out->read_ns = read_ns;
		out->prefetched = 1;
		out->total_ns = placefs_clock_ns() - t0;
		return 0;
	}
	if (opts && opts->key)
		pf_advance(st, opts->key);
	st->fg_allocating++;
	pthread_mutex_unlock(&st->lock);

	rc = placefs_ring_alloc(st->ring, nbytes, opts ? opts->deadline : NULL,
	                        opts ? opts->cancel : NULL, &ring_off, &span_id);
	pthread_mutex_lock(&st->lock);
	/*
	 * A request whose deadline had already passed on entry was a
	 * try-allocation: it never waited, so the ring never called the
	 * pressure hook. Prefetched spans must not make it fail either: give
	 * them back and try once more. (After a real wait the hook has already
	 * done this and prefetch has taken nothing since, so there is normally
	 * nothing to give back.) The deadline has passed, so this retry is a
	 * try as well: it never waits and never calls the hook, which would
	 * need st->lock.
	 */
	if (rc == -ETIMEDOUT && opts && pf_yield(st) > 0)
		rc = placefs_ring_alloc(st->ring, nbytes, opts->deadline, opts->cancel, &ring_off,
		                        &span_id);
	if (--st->fg_allocating == 0)
		pthread_cond_signal(&st->pf_cond);
	pthread_mutex_unlock(&st->lock);
	t1 = placefs_clock_ns();
	out->wait_ns = t1 - t0;
	switch (rc) {
	case 0: break;
	case -ETIMEDOUT:
		return placefs_error_set(err, rc, PLACEFS_E_LIMIT,
		                         "tensor \"%s\": no staging ring space within the deadline "
		                         "(%llu bytes wanted)",
		                         name, (unsigned long long)nbytes);
	case -EINTR:
		return placefs_error_set(err, rc, PLACEFS_E_USAGE,
		                         "tensor \"%s\": interrupted while waiting for ring space",
		                         name);
	default:
		return placefs_error_set(err, rc, PLACEFS_E_NOMEM,
		                         "tensor \"%s\": cannot allocate ring space: %s", name,
		                         strerror(-rc));
	}

	job_init(&job, fd, file_offset, nbytes, ring_off, st->info.chunk_bytes, 1, name);
	if (strided)
		job_set_strided(st, &job, slice);
	else
		job_try_zc(st, &job);
	rc = job_run(st, &job);
	if (rc != 0) {
		placefs_ring_release(st->ring, span_id);
		if (err && err->code == 0)
			*err = job.err;
		return rc;
	}
	pthread_mutex_lock(&st->lock);
	rc = lease_add(st, span_id, ring_off, nbytes, owner);
	if (rc != 0)
		placefs_ring_release(st->ring, span_id);
	pthread_mutex_unlock(&st->lock);
	if (rc != 0)
		return placefs_error_set(err, rc, PLACEFS_E_NOMEM, "out of memory");
	out->lease = span_id;
	out->ring_offset = ring_off;
	out->nbytes = nbytes;
	out->read_ns = placefs_clock_ns() - t1;
	out->total_ns = placefs_clock_ns() - t0;
	return 0;
}

/* Counts a successful stage of `staged` bytes (the slice's, if any) of an nbytes tensor. */
static void count_staged(struct placefs_stager *st, int mode, const struct placefs_stage_opts *opts,
                         uint64_t nbytes, uint64_t staged)
{
	CNT_ADD(st, staged[mode], 1);
	CNT_ADD(st, staged_bytes[mode], staged);
	if (opts && opts->slice && (opts->slice->offset != 0 || opts->slice->nbytes != nbytes)) {
		CNT_ADD(st, slices, 1);
		CNT_ADD(st, slice_bytes, staged);
	}
}

int placefs_stager_stage(struct placefs_stager *st, int fd, uint64_t file_offset, uint64_t nbytes,
                         const struct placefs_stage_opts *opts, struct placefs_stage_span *out,
                         struct placefs_error *err)
{
	int rc = stage_one(st, fd, file_offset, nbytes, opts, out, err);

	if (rc != 0) {
		CNT_ADD(st, errors, 1);
		return rc;
	}
	count_staged(st, PLACEFS_IOC_STAGE_BORROW, opts, nbytes, out->nbytes);
	return 0;
}

/* Copies lease `id` out, keeping it alive meanwhile; counts nothing. */
static int copy_lease(struct placefs_stager *st, uint64_t id, const struct placefs_dest *dest,
                      struct placefs_error *err)
{
	struct lease *l;
	int rc;

	pthread_mutex_lock(&st->lock);
	l = lease_find(st, id);
	if (l)
		l->refs++;
	pthread_mutex_unlock(&st->lock);
	if (!l)
		return placefs_error_set(err, -ENOENT, PLACEFS_E_USAGE, "no lease %llu",
		                         (unsigned long long)id);
	rc = placefs_backend_copy_out(st->be, l->ring_off, l->nbytes, dest, err);
	pthread_mutex_lock(&st->lock);
	if (--l->refs == 0 && l->released)
		lease_drop(st, l);
	pthread_mutex_unlock(&st->lock);
	return rc;
}

int placefs_stager_copy_out(struct placefs_stager *st, uint64_t lease,
                            const struct placefs_dest *dest, struct placefs_error *err)
{
	int rc = copy_lease(st, lease, dest, err);

	if (rc != 0)
		CNT_ADD(st, errors, 1);
	else
		CNT_ADD(st, copied_out, 1);
	return rc;
}

/*
 * Whether a copy-mode stage goes direct: direct copies are on, zero-copy is
 * off (with it on, shards DMA straight into the ring), and no prefetched
 * span of the key is there to adopt.
 */
static bool use_direct(struct placefs_stager *st, const struct placefs_stage_opts *o)
{
	bool pf = false;

	if (!placefs_stager_is_direct(st))
		return false;
	if (o->key && !(o->slice && !placefs_slice_contiguous(o->slice))) {
		pthread_mutex_lock(&st->lock);
		pf = pf_find(st, o->key) != NULL;
		if (!pf)
			pf_advance(st, o->key);
		pthread_mutex_unlock(&st->lock);
	}
	return !pf;
}

/*
 * A copy-mode stage without the ring: the I/O threads read the tensor (or
 * slice) into their bounce chunks and copy each chunk straight into the
 * destination. Nothing waits for ring space and nothing is leased, so the
 * bytes in flight are bounded by the bounce chunks alone.
 */
static int stage_direct(struct placefs_stager *st, int fd, uint64_t file_offset, uint64_t nbytes,
                        const struct placefs_stage_opts *o, const struct placefs_dest *dest,
                        struct placefs_stage_span *out, struct placefs_error *err)
{
	const char *name = o->name ? o->name : "(unnamed)";
	const struct placefs_slice_layout *slice = o->slice;
	struct placefs_backend_target *tgt = NULL;
	uint64_t t0 = placefs_clock_ns();
	bool strided;
	struct job job;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = stage_range(st, name, fd, slice, &file_offset, &nbytes, &strided, err);
	if (rc != 0)
		return rc;
	if (o->cancel && __atomic_load_n(o->cancel, __ATOMIC_ACQUIRE))
		return placefs_error_set(err, -EINTR, PLACEFS_E_USAGE, "tensor \"%s\": interrupted",
		                         name);
	rc = placefs_backend_target_open(st->be, dest, nbytes, &tgt, err);
	if (rc != 0) {
		placefs_error_prefix(err, "tensor \"%s\"", name);
		return rc;
	}
	job_init(&job, fd, file_offset, nbytes, 0, st->info.chunk_bytes, 1, name);
	job.tgt = tgt;
	job.dest_off = dest->offset;
	if (strided)
		job_set_strided(st, &job, slice);
	rc = job_run(st, &job);
	placefs_backend_target_close(st->be, tgt);
	if (rc != 0) {
		if (err && err->code == 0)
			*err = job.err;
		return rc;
	}
	out->nbytes = nbytes;
	out->read_ns = out->total_ns = placefs_clock_ns() - t0;
	return 0;
}

int placefs_stager_stage_copy(struct placefs_stager *st, int fd, uint64_t file_offset,
                              uint64_t nbytes, const struct placefs_stage_opts *opts,
                              const struct placefs_dest *dest, struct placefs_stage_span *out,
                              struct placefs_error *err)
{
	const char *name = opts && opts->name ? opts->name : "(unnamed)";
	/* The bytes that land: the slice's (checked by stage_one() before any I/O). */
	uint64_t want = opts && opts->slice ? opts->slice->nbytes : nbytes;
	struct placefs_stage_opts o = {0};
	uint64_t t0 = placefs_clock_ns(), t1;
	int rc;

	if (opts && opts->slice &&
	    (rc = placefs_slice_check(name, opts->slice, nbytes, err)) != 0) {
		CNT_ADD(st, errors, 1);
		return rc;
	}
	/* Refuse a destination that cannot take the tensor before any I/O. */
	if (dest->offset > dest->size || want > dest->size - dest->offset) {
		CNT_ADD(st, errors, 1);
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "tensor \"%s\": destination too small: offset %llu + "
		                         "%llu bytes > size %llu",
		                         name, (unsigned long long)dest->offset,
		                         (unsigned long long)want, (unsigned long long)dest->size);
	}
	if (opts)
		o = *opts;
	o.owner = 0; /* the lease never leaves this call */
	if (use_direct(st, &o)) {
		rc = stage_direct(st, fd, file_offset, nbytes, &o, dest, out, err);
		if (rc != 0) {
			CNT_ADD(st, errors, 1);
			return rc;
		}
		CNT_ADD(st, direct_stages, 1);
		CNT_ADD(st, direct_bytes, out->nbytes);
		count_staged(st, PLACEFS_IOC_STAGE_COPY, opts, nbytes, out->nbytes);
		return 0;
	}
	rc = stage_one(st, fd, file_offset, nbytes, &o, out, err);
	if (rc != 0) {
		CNT_ADD(st, errors, 1);
		return rc;
	}
	t1 = placefs_clock_ns();
	rc = copy_lease(st, out->lease, dest, err);
	out->copy_ns = placefs_clock_ns() - t1;
	placefs_stager_release(st, out->lease, 0);
	out->lease = 0;
	out->total_ns = placefs_clock_ns() - t0;
	if (rc != 0) {
		placefs_error_prefix(err, "tensor \"%s\"", name);
		CNT_ADD(st, errors, 1);
		return rc;
	}
	count_staged(st, PLACEFS_IOC_STAGE_COPY, opts, nbytes, out->nbytes);
	return 0;
}

int placefs_stager_release(struct placefs_stager *st, uint64_t lease, uint64_t owner)
{
	struct lease *l;

	pthread_mutex_lock(&st->lock);
	l = lease_find(st, lease);
	if (!l || (owner != 0 && l->owner != owner)) {
		pthread_mutex_unlock(&st->lock);
		return -ENOENT;
	}
	lease_end(st, l);
	pf_kick(st);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

void placefs_stager_wake(struct placefs_stager *st)
{
	placefs_ring_wake(st->ring);
}

size_t placefs_stager_release_owner(struct placefs_stager *st, uint64_t owner)
{
	size_t n = 0;
	unsigned i;

	pthread_mutex_lock(&st->lock);
	for (i = 0; i < LEASE_BUCKETS; i++) {
		struct lease *l, *next;

		for (l = st->leases[i]; l; l = next) {
			next = l->next;
			if (!l->released && l->owner == owner) {
				lease_end(st, l);
				n++;
			}
		}
	}
	pthread_mutex_unlock(&st->lock);
	return n;
}

int placefs_stager_is_direct(const struct placefs_stager *st)
{
	return st->direct && !st->zc;
}

void placefs_stager_stats(const struct placefs_stager *st, struct placefs_stager_stats *out)
{
	struct placefs_ring_stats rs;
	int m;

	placefs_ring_stats(st->ring, &rs);
	memset(out, 0, sizeof(*out));
	out->ring_capacity = rs.capacity;
	out->ring_used = rs.used;
	out->ring_high_water = rs.high_water;
	out->ring_waits = rs.waits;
	out->ring_wait_ns = rs.wait_ns;
	out->host_buffer_bytes = st->info.host_buffer_bytes;
	out->chunk_bytes = st->info.chunk_bytes;
	out->io_threads = st->nthreads;
	for (m = 0; m < 2; m++) {
		out->staged[m] = CNT_GET(st, staged[m]);
		out->staged_bytes[m] = CNT_GET(st, staged_bytes[m]);
	}
	out->copied_out = CNT_GET(st, copied_out);
	out->leases = CNT_GET(st, leases);
	out->released = CNT_GET(st, released);
	out->errors = CNT_GET(st, errors);
	out->read_bytes = CNT_GET(st, read_bytes);
	out->prefetch_issued = CNT_GET(st, prefetch_issued);
	out->prefetch_hits = CNT_GET(st, prefetch_hits);
	out->prefetch_evicted = CNT_GET(st, prefetch_evicted);
	out->prefetch_cancelled = CNT_GET(st, prefetch_cancelled);
	out->prefetch_held = CNT_GET(st, prefetch_held);
	out->slices = CNT_GET(st, slices);
	out->slice_bytes = CNT_GET(st, slice_bytes);
	out->strided_read_bytes = CNT_GET(st, strided_read_bytes);
	out->direct = (uint64_t)placefs_stager_is_direct(st);
	out->direct_stages = CNT_GET(st, direct_stages);
	out->direct_bytes = CNT_GET(st, direct_bytes);
	if (st->zc) {
		struct placefs_zerocopy_stats zs;

		placefs_zerocopy_stats(st->zc, &zs);
		out->zero_copy = 1;
		out->zero_copy_bytes = zs.bytes;
		out->zero_copy_registrations = zs.registrations;
		out->zero_copy_registration_ns = zs.registration_ns;
		out->zero_copy_registered_bytes = zs.registered_bytes;
		out->zero_copy_refused = zs.refused;
		out->zero_copy_stale = zs.stale;
	}
}

struct placefs_zerocopy *placefs_stager_zero_copy(const struct placefs_stager *st)
{
	return st->zc;
}

void placefs_stager_zero_copy_note(struct placefs_stager *st, char *buf, size_t len)
{
	if (len == 0)
		return;
	if (st->zc)
		placefs_zerocopy_note(st->zc, buf, len); /* the first refusal, if any */
	else
		snprintf(buf, len, "%s", st->zc_note); /* why it is off */
}
