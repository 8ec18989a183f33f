/* SPDX-License-Identifier: MIT */
/*
 * The stager's prefetch: the hints, the prefetch thread, issuing prefetches
 * into free ring space, yielding to foreground requests and adoption.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "staging/ring.h"
#include "staging/stage.h"
#include "staging/stage_i.h"

/* How far ahead of the prefetch cursor a foreground stage looks for its key. */
#define PF_WINDOW 4096
/* Back-stop period for the prefetch thread's waits. */
#define PF_POLL_NS (200ULL * 1000 * 1000)
/* At most this many prefetches are issued by a releasing thread (stage_pf_kick). */
#define PF_KICK 4

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
 * never waits for the whole of a large speculative read (a borrow behind the
 * prefetch of a 1 GiB embedding took 1.88-2.67 s before it was cut short,
 * 0.045 s after: BENCH_DEVICE=host tests/bench/borrow-latency.sh on a 2-core
 * virtual machine, doc/STAGING.md 5). A smaller one runs to
 * its end, as the loader may still adopt it (the next tensor it asks for).
 * An adopter that finds a job cancelled stages the tensor afresh
 * (stage_pf_adopt). Returns how many were given back at once. Lock held.
 */
unsigned stage_pf_yield(struct placefs_stager *st)
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
void stage_pf_on_pressure(void *arg)
{
	struct placefs_stager *st = arg;

	pthread_mutex_lock(&st->lock);
	stage_pf_yield(st);
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

struct pf_entry *stage_pf_find(struct placefs_stager *st, uint64_t key)
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
	if (it->nbytes > placefs_ring_capacity(st->ring) || stage_pf_find(st, it->key)) {
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
	stage_job_init(&e->job, it->fd, it->offset, it->nbytes, off, st->info.chunk_bytes, 0,
	               e->name);
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
		stage_job_try_zc(st, &e->job);
		pthread_mutex_lock(&st->lock);
	}
	stage_job_submit(st, &e->job); /* may finish (and evict) at once when empty */
	return 1;
}

void *stage_pf_main(void *arg)
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
void stage_pf_kick(struct placefs_stager *st)
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
int stage_pf_adopt(struct placefs_stager *st, uint64_t key, int fd, uint64_t off, uint64_t n,
                   uint64_t *span_id, uint64_t *ring_off, uint64_t *read_ns)
{
	struct pf_entry *e = stage_pf_find(st, key);
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
void stage_pf_advance(struct placefs_stager *st, uint64_t key)
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
