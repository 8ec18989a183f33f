/* SPDX-License-Identifier: MIT */
/*
 * ring: a thread-safe span allocator over the byte range [0, capacity).
 *
 * The ring hands out offsets only; it owns no memory. The staging backend
 * maps those offsets onto its one device (or shared-memory) allocation.
 *
 * Rules:
 * - Each span is contiguous and starts at a multiple of `align`. A span never
 *   crosses the end of the ring: when it does not fit between the newest span
 *   and the end, it wraps to offset 0, and the gap at the end stays unused
 *   until the oldest spans before it are gone.
 * - Spans may be released in any order. Space comes back from both ends of
 *   the allocation order: releasing the oldest spans moves the tail past
 *   them, releasing the newest spans moves the head back to the end of the
 *   newest span still held (undoing a wrap when it moves back past one). A
 *   released span between two held ones stays reserved until every span on
 *   one side of it is released too. So the free space is always exactly
 *   what lies outside the circular range from the start of the oldest
 *   unreleased span to the end of the newest one. Span ids are non-zero and
 *   increase with every allocation; an id is never reused.
 * - A request larger than the capacity fails at once with -EFBIG: the ring
 *   never grows. Every other request waits (backpressure) until space is
 *   free. Waiters are served strictly in arrival order, so a large request
 *   is not starved by a stream of small ones.
 * - 0-byte requests succeed (they wait their turn like the others) and still
 *   get a span id that must be released; their offset is aligned and at most
 *   the capacity, and covers nothing. It is the head aligned down, so a 0-byte
 *   span placed while the head stands at a capacity that is not a multiple of
 *   `align` reports cap - cap % align although it sits at the capacity (after
 *   a full-capacity span, say).
 *
 * All functions are thread-safe. The counters are updated atomically and
 * placefs_ring_stats() reads them without taking the lock.
 */
#ifndef PLACEFS_RING_H
#define PLACEFS_RING_H

#include <stdint.h>
#include <time.h>

#include "common/error.h"

struct placefs_ring;

struct placefs_ring_stats {
	uint64_t capacity;
	uint64_t align;
	/*
	 * Bytes of the spans not yet reclaimed: the sum of the aligned lengths
	 * (length rounded up to the alignment, the last span cut at the
	 * capacity) of every span from the oldest to the newest unreleased one,
	 * released ones in between included. The gap at the end while wrapped
	 * is not counted.
	 */
	uint64_t used;
	uint64_t high_water; /* largest `used` seen */
	uint64_t live;       /* spans not yet reclaimed (as for `used`) */
	uint64_t waiting;    /* requests waiting for space now */
	uint64_t allocs;     /* successful allocations */
	uint64_t releases;   /* successful releases */
	uint64_t waits;      /* allocations that had to wait */
	uint64_t wait_ns;    /* total time requests spent waiting (all outcomes) */
	uint64_t timeouts;   /* requests that gave up at their deadline */
	uint64_t cancels;    /* requests ended by their cancel flag */
	uint64_t wraps;      /* spans placed at 0 because the end was too short */
};

/*
 * Creates a ring of `capacity` (> 0) bytes whose spans start at multiples of
 * `align` (a power of two, 1 to 2^20). Returns 0 or -EINVAL / -ENOMEM.
 */
int placefs_ring_create(uint64_t capacity, uint64_t align, struct placefs_ring **out,
                        struct placefs_error *err);

/*
 * Frees the ring. No thread may be inside placefs_ring_alloc(); live spans
 * are simply forgotten (the ring owns no memory). NULL is accepted.
 */
void placefs_ring_free(struct placefs_ring *ring);

/*
 * Allocates a span of `nbytes` and stores its offset and id.
 *
 * Blocks until the span fits and every earlier waiter has been served.
 * `deadline` (CLOCK_MONOTONIC, absolute; NULL = no limit) bounds the wait: a
 * deadline in the past makes this a try-allocation that fails at once unless
 * the span fits now and nobody is waiting. `cancel` (NULL = none) is polled
 * while waiting; when it reads non-zero the request ends. Another thread that
 * sets a cancel flag should call placefs_ring_wake() for a prompt reaction
 * (otherwise it is noticed within 50 ms).
 *
 * Returns 0, -EFBIG (nbytes > capacity), -ETIMEDOUT (deadline passed),
 * -EINTR (cancelled, also when already set on entry) or -ENOMEM.
 * *offset and *span_id are written only on success.
 */
int placefs_ring_alloc(struct placefs_ring *ring, uint64_t nbytes, const struct timespec *deadline,
                       const int *cancel, uint64_t *offset, uint64_t *span_id);

/*
 * Releases a live span. Its bytes become reusable at once when it is the
 * oldest or the newest unreclaimed span (together with released spans next
 * to it), otherwise as soon as every span on one side of it is released.
 * Waiters are woken when space comes back. Returns 0, or -ENOENT when
 * `span_id` is not a live, unreleased span.
 */
int placefs_ring_release(struct placefs_ring *ring, uint64_t span_id);

/* Wakes every waiter so it re-checks its cancel flag. */
void placefs_ring_wake(struct placefs_ring *ring);

/*
 * Registers `fn(arg)`, called (without the ring's lock, in the requesting
 * thread) each time an allocation starts to wait. The stager uses it to give
 * back prefetched spans under pressure. Set it before any concurrent use.
 */
void placefs_ring_set_pressure_hook(struct placefs_ring *ring, void (*fn)(void *), void *arg);

uint64_t placefs_ring_capacity(const struct placefs_ring *ring);
uint64_t placefs_ring_align(const struct placefs_ring *ring);
/* Number of requests waiting for space right now (atomic read). */
uint64_t placefs_ring_waiting(const struct placefs_ring *ring);
/* A consistent-enough snapshot of the counters, lock-free. */
void placefs_ring_stats(const struct placefs_ring *ring, struct placefs_ring_stats *st);

#endif
