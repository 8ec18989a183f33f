/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "staging/ring.h"

/* A canceller that forgets placefs_ring_wake() is noticed within this time. */
#define CANCEL_POLL_NS (50ULL * 1000 * 1000)

struct span {
	uint64_t id;
	uint64_t off;
	uint64_t len;  /* aligned length: the bytes this span keeps from others */
	bool released; /* released by its owner, not yet reclaimed */
	/*
	 * Placed at 0 because the end of the ring was too short, and still the
	 * wrap point: only a span after the oldest one keeps this flag, so the
	 * ring is wrapped exactly when one of them has it.
	 */
	bool wrapped;
};

/* A request waiting for space; lives on the waiting thread's stack. */
struct waiter {
	struct waiter *next;
	struct waiter *prev;
};

struct placefs_ring {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* broadcast whenever space or the head of the queue changes */
	uint64_t capacity;
	uint64_t align;

	/*
	 * Unreclaimed spans in allocation order, a circular array. Both ends
	 * are always unreleased (released spans there are reclaimed at once);
	 * released spans in between wait for one side to go. Ids increase
	 * along the array but have gaps where the newest spans were reclaimed,
	 * so a span is found by binary search.
	 */
	struct span *spans;
	size_t slots;
	size_t first;
	size_t count;
	uint64_t next_id;

	uint64_t head; /* end of the newest span: where the next one goes */
	bool wrapped;  /* newer spans restarted at 0, before the oldest one */

	struct waiter *wq_head;
	struct waiter *wq_tail;

	void (*hook)(void *);
	void *hook_arg;

	/* Counters: written under the lock with atomic stores, read lock-free. */
	struct placefs_ring_stats st;
};

#define STAT_SET(r, f, v) __atomic_store_n(&(r)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_ADD(r, f, v) __atomic_fetch_add(&(r)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_GET(r, f)    __atomic_load_n(&(r)->st.f, __ATOMIC_RELAXED)

int placefs_ring_create(uint64_t capacity, uint64_t align, struct placefs_ring **out,
                        struct placefs_error *err)
{
	struct placefs_ring *r;

	*out = NULL;
	if (capacity == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "staging ring: capacity must be greater than zero");
	if (align == 0 || (align & (align - 1)) != 0 || align > (1ULL << 20))
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "staging ring: alignment %llu is not a power of two "
		                         "between 1 and 1 MiB",
		                         (unsigned long long)align);
	r = calloc(1, sizeof(*r));
	if (!r)
		goto fail_alloc;
	r->slots = 16;
	r->spans = calloc(r->slots, sizeof(*r->spans));
	if (!r->spans)
		goto fail_spans;
	if (pthread_mutex_init(&r->lock, NULL) != 0)
		goto fail_mutex;
	/* Deadlines are CLOCK_MONOTONIC so wall-clock jumps do not matter. */
	if (placefs_clock_cond_init(&r->cond) != 0)
		goto fail_cond;
	r->capacity = capacity;
	r->align = align;
	r->next_id = 1;
	r->st.capacity = capacity;
	r->st.align = align;
	*out = r;
	return 0;

fail_cond:
	pthread_mutex_destroy(&r->lock);
fail_mutex:
	free(r->spans);
fail_spans:
	free(r);
fail_alloc:
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "staging ring: out of memory");
}

void placefs_ring_free(struct placefs_ring *ring)
{
	if (!ring)
		return;
	pthread_cond_destroy(&ring->cond);
	pthread_mutex_destroy(&ring->lock);
	free(ring->spans);
	free(ring);
}

static struct span *span_at(struct placefs_ring *r, size_t i)
{
	return &r->spans[(r->first + i) % r->slots];
}

/* Makes room for one more span record; lock held. */
static int spans_reserve(struct placefs_ring *r)
{
	struct span *n;
	size_t i;

	if (r->count < r->slots)
		return 0;
	if (r->slots > SIZE_MAX / 2 / sizeof(*n))
		return -ENOMEM;
	n = malloc(r->slots * 2 * sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (i = 0; i < r->count; i++)
		n[i] = *span_at(r, i);
	free(r->spans);
	r->spans = n;
	r->first = 0;
	r->slots *= 2;
	return 0;
}

/*
 * Where a span of n bytes would go now, or false when it does not fit.
 * Free space is [head, capacity) + [0, tail) when not wrapped, or
 * [head, tail) when wrapped; tail is the offset of the oldest live span.
 */
static bool fit(const struct placefs_ring *r, uint64_t n, uint64_t *off, bool *wrap)
{
	uint64_t tail;

	*wrap = false;
	if (r->count == 0) {
		*off = 0;
		return n <= r->capacity;
	}
	tail = r->spans[r->first].off;
	if (!r->wrapped) {
		if (n <= r->capacity - r->head) {
			*off = r->head;
			return true;
		}
		if (n <= tail) {
			*off = 0;
			*wrap = true;
			return true;
		}
		return false;
	}
	if (tail >= r->head && n <= tail - r->head) {
		*off = r->head;
		return true;
	}
	return false;
}

/* Records a span of n bytes at off; lock held, spans_reserve() done. */
static uint64_t place(struct placefs_ring *r, uint64_t n, uint64_t off, bool wrap)
{
	struct span *s;
	uint64_t end, len;

	if (r->count == 0) {
		r->head = 0;
		r->wrapped = false;
	}
	s = &r->spans[(r->first + r->count) % r->slots];
	/* Round the end up to the alignment; the last span may end short of it. */
	end = off + n;
	if (end % r->align != 0) {
		uint64_t pad = r->align - end % r->align;
		end = pad <= r->capacity - end ? end + pad : r->capacity;
	}
	len = end - off;
	s->id = r->next_id;
	s->off = off;
	s->len = len;
	s->released = false;
	/* The first span cannot be a wrap point (see struct span). */
	s->wrapped = wrap && r->count > 0;
	r->count++;
	r->head = end;
	if (wrap) {
		r->wrapped = true;
		STAT_ADD(r, wraps, 1);
	}
	STAT_SET(r, used, STAT_GET(r, used) + len);
	if (STAT_GET(r, used) > STAT_GET(r, high_water))
		STAT_SET(r, high_water, STAT_GET(r, used));
	STAT_SET(r, live, (uint64_t)r->count);
	STAT_ADD(r, allocs, 1);
	return r->next_id++;
}

/*
 * A 0-byte span sits at the current head, which may be the (unaligned)
 * capacity; it covers nothing, so report an aligned offset instead.
 */
static uint64_t report_off(const struct placefs_ring *r, uint64_t n, uint64_t off)
{
	return n == 0 ? off - off % r->align : off;
}

static void wq_remove(struct placefs_ring *r, struct waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		r->wq_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		r->wq_tail = w->prev;
	STAT_SET(r, waiting, STAT_GET(r, waiting) - 1);
}

static bool cancelled(const int *cancel)
{
	return cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE) != 0;
}

int placefs_ring_alloc(struct placefs_ring *ring, uint64_t nbytes, const struct timespec *deadline,
                       const int *cancel, uint64_t *offset, uint64_t *span_id)
{
	struct placefs_ring *r = ring;
	struct waiter me = {0};
	uint64_t off, id, start, limit = 0;
	bool wrap;
	int rc;

	if (nbytes > r->capacity)
		return -EFBIG;
	if (deadline)
		limit = placefs_clock_ts_ns(deadline);
	if (cancelled(cancel))
		return -EINTR;

	pthread_mutex_lock(&r->lock);
	if (!r->wq_head && fit(r, nbytes, &off, &wrap)) {
		if (spans_reserve(r) != 0) {
			pthread_mutex_unlock(&r->lock);
			return -ENOMEM;
		}
		id = place(r, nbytes, off, wrap);
		pthread_mutex_unlock(&r->lock);
		*offset = report_off(r, nbytes, off);
		*span_id = id;
		return 0;
	}
	start = placefs_clock_ns();
	if (deadline && start >= limit) {
		/* A try-allocation: not counted as a wait or a timeout. */
		pthread_mutex_unlock(&r->lock);
		return -ETIMEDOUT;
	}

	/* Queue up; only the head of the queue may allocate. */
	me.prev = r->wq_tail;
	if (r->wq_tail)
		r->wq_tail->next = &me;
	else
		r->wq_head = &me;
	r->wq_tail = &me;
	STAT_SET(r, waiting, STAT_GET(r, waiting) + 1);
	STAT_ADD(r, waits, 1);

	if (r->hook) {
		pthread_mutex_unlock(&r->lock);
		r->hook(r->hook_arg);
		pthread_mutex_lock(&r->lock);
	}

	for (;;) {
		uint64_t now, wake;

		if (cancelled(cancel)) {
			rc = -EINTR;
			STAT_ADD(r, cancels, 1);
			break;
		}
		if (r->wq_head == &me && fit(r, nbytes, &off, &wrap)) {
			rc = spans_reserve(r);
			if (rc == 0) {
				id = place(r, nbytes, off, wrap);
				*offset = report_off(r, nbytes, off);
				*span_id = id;
			}
			break;
		}
		now = placefs_clock_ns();
		if (deadline && now >= limit) {
			rc = -ETIMEDOUT;
			STAT_ADD(r, timeouts, 1);
			break;
		}
		if (!deadline && !cancel) {
			pthread_cond_wait(&r->cond, &r->lock);
			continue;
		}
		wake = deadline ? limit : UINT64_MAX;
		if (cancel && wake - now > CANCEL_POLL_NS)
			wake = now + CANCEL_POLL_NS;
		placefs_clock_cond_wait_ns(&r->cond, &r->lock, wake - now);
	}
	wq_remove(r, &me);
	STAT_ADD(r, wait_ns, placefs_clock_ns() - start);
	/* The next waiter may fit now, or is the new head of the queue. */
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* The index of span `id` in allocation order, or -1 when it is not recorded; lock held. */
static ptrdiff_t span_find(struct placefs_ring *r, uint64_t id)
{
	size_t lo = 0, hi = r->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t m = span_at(r, mid)->id;

		if (m == id)
			return (ptrdiff_t)mid;
		if (m < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Forgets every span; lock held. */
static void reset_empty(struct placefs_ring *r)
{
	r->first = 0;
	r->head = 0;
	r->wrapped = false;
}

/* Reclaims the oldest span, which is released; lock held. */
static void reclaim_oldest(struct placefs_ring *r)
{
	struct span *s = &r->spans[r->first];

	STAT_SET(r, used, STAT_GET(r, used) - s->len);
	r->first = (r->first + 1) % r->slots;
	r->count--;
	if (r->count == 0) {
		reset_empty(r);
		return;
	}
	s = &r->spans[r->first];
	if (s->wrapped) {
		/* The oldest span is now the one that wrapped: one region again. */
		s->wrapped = false;
		r->wrapped = false;
	}
}

/*
 * Reclaims the newest span, which is released: the head moves back to the
 * end of the span before it. When the newest span was the wrap point, that
 * end is where the head stood before the wrap, and the ring is one region
 * again (the gap left at the end is free once more). Lock held.
 */
static void reclaim_newest(struct placefs_ring *r)
{
	struct span *s = span_at(r, r->count - 1), *prev;

	STAT_SET(r, used, STAT_GET(r, used) - s->len);
	r->count--;
	if (r->count == 0) {
		reset_empty(r);
		return;
	}
	if (s->wrapped)
		r->wrapped = false;
	prev = span_at(r, r->count - 1);
	r->head = prev->off + prev->len;
}

int placefs_ring_release(struct placefs_ring *ring, uint64_t span_id)
{
	struct placefs_ring *r = ring;
	uint64_t before;
	ptrdiff_t i;

	pthread_mutex_lock(&r->lock);
	i = span_find(r, span_id);
	if (i < 0 || span_at(r, (size_t)i)->released) {
		pthread_mutex_unlock(&r->lock);
		return -ENOENT;
	}
	span_at(r, (size_t)i)->released = true;
	STAT_ADD(r, releases, 1);
	/*
	 * Reclaim from both ends, so a released span never waits for spans
	 * allocated after it to go (the newest span may be released first, as
	 * when the stager gives back a prefetched span under pressure).
	 */
	before = r->count;
	while (r->count > 0 && r->spans[r->first].released)
		reclaim_oldest(r);
	while (r->count > 0 && span_at(r, r->count - 1)->released)
		reclaim_newest(r);
	STAT_SET(r, live, (uint64_t)r->count);
	if (r->count != before && r->wq_head)
		pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

void placefs_ring_wake(struct placefs_ring *ring)
{
	pthread_mutex_lock(&ring->lock);
	pthread_cond_broadcast(&ring->cond);
	pthread_mutex_unlock(&ring->lock);
}

void placefs_ring_set_pressure_hook(struct placefs_ring *ring, void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&ring->lock);
	ring->hook = fn;
	ring->hook_arg = arg;
	pthread_mutex_unlock(&ring->lock);
}

uint64_t placefs_ring_capacity(const struct placefs_ring *ring)
{
	return ring->capacity;
}

uint64_t placefs_ring_align(const struct placefs_ring *ring)
{
	return ring->align;
}

uint64_t placefs_ring_waiting(const struct placefs_ring *ring)
{
	return STAT_GET(ring, waiting);
}

void placefs_ring_stats(const struct placefs_ring *ring, struct placefs_ring_stats *st)
{
	st->capacity = ring->capacity;
	st->align = ring->align;
	st->used = STAT_GET(ring, used);
	st->high_water = STAT_GET(ring, high_water);
	st->live = STAT_GET(ring, live);
	st->waiting = STAT_GET(ring, waiting);
	st->allocs = STAT_GET(ring, allocs);
	st->releases = STAT_GET(ring, releases);
	st->waits = STAT_GET(ring, waits);
	st->wait_ns = STAT_GET(ring, wait_ns);
	st->timeouts = STAT_GET(ring, timeouts);
	st->cancels = STAT_GET(ring, cancels);
	st->wraps = STAT_GET(ring, wraps);
}
