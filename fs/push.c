/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mount.h"
#include "push.h"
#include "stats.h"

/* A tensor being pushed; queued in start order, taken piece by piece in turn. */
struct job {
	size_t entry;
	struct job *next;
};

struct placefs_push {
	struct placefs_mount *m;
	size_t n;                   /* plan entries */
	_Atomic uint64_t *frontier; /* per entry: bytes [0, frontier) cached or on their way */
	atomic_uchar *started;      /* per entry: 1 once its push was started */
	pthread_mutex_t lock;       /* the queue and `stopping` */
	pthread_cond_t cond;        /* work queued, or stopping */
	struct job *head, *tail;    /* tensors with pieces left */
	bool stopping;
	bool lock_init, cond_init;
	pthread_t *threads;
	unsigned nthreads, nstarted;

	atomic_uint_fast64_t tensors;  /* pushes started */
	atomic_uint_fast64_t active;   /* pushes with pieces left (queued) */
	atomic_uint_fast64_t inflight; /* pieces being stored now */
	atomic_uint_fast64_t bytes;    /* bytes stored in the page cache */
	atomic_uint_fast64_t skipped;  /* bytes not pushed: a reader had asked for them first */
	atomic_uint_fast64_t failures; /* stores that failed (each ends its tensor's push) */
};

/*
 * The members of "push" in .placefs/stats, in order: one row each. Base 0 is
 * the pusher, base 1 the values computed when the document is made.
 */
struct push_view {
	uint64_t active; /* pushes queued or with a piece being stored */
};

#define OWN(path, kind, member) PLACEFS_STAT(path, kind, 0, struct placefs_push, member)

static const struct placefs_stat push_rows[] = {
        OWN("threads", UINT, nthreads),
        OWN("tensors", ATOMIC_U64, tensors),
        PLACEFS_STAT("active", U64, 1, struct push_view, active),
        OWN("bytes", ATOMIC_U64, bytes),
        OWN("skipped_bytes", ATOMIC_U64, skipped),
        OWN("failures", ATOMIC_U64, failures),
};

/* Raises *f to at least v; returns the value it replaced. */
static uint64_t frontier_raise(_Atomic uint64_t *f, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(f, memory_order_relaxed);

	while (cur < v && !atomic_compare_exchange_weak_explicit(f, &cur, v, memory_order_relaxed,
	                                                         memory_order_relaxed))
		;
	return cur;
}

/* Unlinks j from the queue (locked); j may already be gone. */
static void job_unlink(struct placefs_push *p, struct job *j)
{
	struct job **pp, *prev = NULL;

	for (pp = &p->head; *pp; prev = *pp, pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			if (p->tail == j)
				p->tail = prev;
			return;
		}
	}
}

/* Moves the head job to the tail so the next piece goes to another tensor (locked). */
static void job_rotate(struct placefs_push *p)
{
	struct job *j = p->head;

	if (!j || !j->next)
		return;
	p->head = j->next;
	j->next = NULL;
	p->tail->next = j;
	p->tail = j;
}

/*
 * Stores bytes [off, off + len) of tensor `entry` into the kernel's page
 * cache from its shard's mapping. Returns 0 or a negative errno; never touches
 * the mapped bytes itself (the kernel's copy faults instead: EFAULT).
 */
static int push_piece(struct placefs_push *p, size_t entry, uint64_t off, uint64_t len)
{
	struct placefs_mount *m = p->m;
	const struct placefs_tensor *t = placefs_plan_entry(m->plan, entry)->tensor;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT((size_t)len);
	const uint8_t *map = placefs_mount_shard_map(m, t->shard);
	int rc;

	if (!map || !placefs_mount_shard_healthy(m, t->shard))
		return -EIO;
	/* The same check a READ makes, so a changed shard is never pushed from. */
	rc = placefs_mount_shard_ok(m, t->shard);
	if (rc < 0)
		return rc;
	bv.buf[0].mem = (void *)(map + t->offset + off);
	return fuse_lowlevel_notify_store(m->se, PLACEFS_INO_FIRST + entry, (off_t)off, &bv, 0);
}

static void *push_main(void *arg)
{
	struct placefs_push *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stopping) {
		struct job *j = p->head;
		uint64_t nbytes, pos, len;
		size_t entry;
		int rc;

		if (!j) {
			pthread_cond_wait(&p->cond, &p->lock);
			continue;
		}
		/* Once unlocked, j may be freed by another pusher: keep its entry. */
		entry = j->entry;
		nbytes = placefs_plan_entry(p->m->plan, entry)->tensor->nbytes;
		pos = atomic_load_explicit(&p->frontier[entry], memory_order_relaxed);
		if (pos >= nbytes) {
			job_unlink(p, j);
			free(j);
			atomic_fetch_sub(&p->active, 1);
			continue;
		}
		len = nbytes - pos < PLACEFS_PUSH_PIECE ? nbytes - pos : PLACEFS_PUSH_PIECE;
		/* Claim the piece; a READ that moved the frontier meanwhile wins. */
		if (!atomic_compare_exchange_strong_explicit(&p->frontier[entry], &pos, pos + len,
		                                             memory_order_relaxed,
		                                             memory_order_relaxed))
			continue;
		job_rotate(p);
		atomic_fetch_add(&p->inflight, 1);
		pthread_mutex_unlock(&p->lock);
		rc = push_piece(p, entry, pos, len);
		pthread_mutex_lock(&p->lock);
		atomic_fetch_sub(&p->inflight, 1);
		if (rc == 0) {
			atomic_fetch_add_explicit(&p->bytes, len, memory_order_relaxed);
			continue;
		}
		/*
		 * ENOENT: the kernel no longer knows the inode (nobody has it
		 * open); anything else: the shard is unhealthy. Either way the
		 * rest of this tensor is left to READs, which report errors.
		 */
		atomic_store_explicit(&p->frontier[entry], nbytes, memory_order_relaxed);
		if (rc != -ENOENT)
			atomic_fetch_add_explicit(&p->failures, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int placefs_push_create(struct placefs_mount *m, unsigned threads, struct placefs_push **out,
                        struct placefs_error *err)
{
	struct placefs_push *p;
	size_t i;
	int rc;

	*out = NULL;
	if (threads == 0 || !m->maps)
		return 0;
	p = calloc(1, sizeof(*p));
	if (!p)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	p->m = m;
	p->n = placefs_plan_count(m->plan);
	p->frontier = calloc(p->n ? p->n : 1, sizeof(*p->frontier));
	p->started = calloc(p->n ? p->n : 1, sizeof(*p->started));
	p->threads = calloc(threads, sizeof(*p->threads));
	if (!p->frontier || !p->started || !p->threads) {
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
		goto fail;
	}
	for (i = 0; i < p->n; i++) {
		atomic_init(&p->frontier[i], 0);
		atomic_init(&p->started[i], 0);
	}
	placefs_stats_table_zero(push_rows, PLACEFS_STATS_ROWS(push_rows),
	                         (void *const[]){p, NULL});
	atomic_init(&p->active, 0);
	atomic_init(&p->inflight, 0);
	rc = -pthread_mutex_init(&p->lock, NULL);
	if (rc != 0)
		goto fail_sys;
	p->lock_init = true;
	rc = -pthread_cond_init(&p->cond, NULL);
	if (rc != 0)
		goto fail_sys;
	p->cond_init = true;
	p->nthreads = threads;
	for (p->nstarted = 0; p->nstarted < threads; p->nstarted++) {
		rc = -pthread_create(&p->threads[p->nstarted], NULL, push_main, p);
		if (rc != 0)
			goto fail_sys;
	}
	*out = p;
	return 0;

fail_sys:
	placefs_error_set(err, rc, PLACEFS_E_NOMEM, "cannot start the page-cache pushers: %s",
	                  strerror(-rc));
fail:
	placefs_push_free(p);
	return rc;
}

void placefs_push_note(struct placefs_push *p, size_t entry, uint64_t off, uint64_t len)
{
	uint64_t nbytes, end, prev;
	struct job *j;

	if (!p || entry >= p->n || __builtin_add_overflow(off, len, &end))
		return;
	/*
	 * What a pusher would have stored next, a READ has already brought in
	 * (or, for a READ beyond the frontier, readahead is bringing in).
	 */
	prev = frontier_raise(&p->frontier[entry], end);
	if (atomic_load_explicit(&p->started[entry], memory_order_relaxed)) {
		if (prev < end)
			atomic_fetch_add_explicit(&p->skipped, end - (prev > off ? prev : off),
			                          memory_order_relaxed);
		return;
	}
	if (off != 0)
		return;
	nbytes = placefs_plan_entry(p->m->plan, entry)->tensor->nbytes;
	if (nbytes < PLACEFS_PUSH_MIN_BYTES || end >= nbytes ||
	    atomic_exchange_explicit(&p->started[entry], 1, memory_order_relaxed))
		return;
	j = malloc(sizeof(*j));
	if (!j)
		return; /* best effort: readahead still serves the tensor */
	j->entry = entry;
	j->next = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		return;
	}
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	atomic_fetch_add_explicit(&p->tensors, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->active, 1, memory_order_relaxed);
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void placefs_push_stop(struct placefs_push *p)
{
	struct job *j;
	unsigned i;

	if (!p || !p->lock_init)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	if (p->cond_init)
		pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (i = 0; i < p->nstarted; i++)
		pthread_join(p->threads[i], NULL);
	p->nstarted = 0;
	while ((j = p->head)) {
		p->head = j->next;
		free(j);
	}
	p->tail = NULL;
}

void placefs_push_free(struct placefs_push *p)
{
	if (!p)
		return;
	placefs_push_stop(p);
	if (p->cond_init)
		pthread_cond_destroy(&p->cond);
	if (p->lock_init)
		pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p->started);
	free(p->frontier);
	free(p);
}

void placefs_push_stats(const struct placefs_push *p, struct placefs_stats *w)
{
	struct push_view v;

	if (!p) {
		placefs_stats_null(w, "push");
		return;
	}
	/*
	 * A job leaves the queue once its last piece is claimed, while that
	 * piece may still be stored: count the pieces in flight too. The queue
	 * is read first, so a piece claimed before its job left is seen.
	 */
	v.active = atomic_load(&p->active);
	v.active += atomic_load(&p->inflight);
	placefs_stats_begin(w, "push");
	placefs_stats_table(w, push_rows, PLACEFS_STATS_ROWS(push_rows),
	                    (const void *const[]){p, &v});
	placefs_stats_end(w);
}
