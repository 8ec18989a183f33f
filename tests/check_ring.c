/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"

static struct placefs_ring *mk(uint64_t cap, uint64_t align)
{
	struct placefs_ring *r = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_ring_create(cap, align, &r, &err) == 0, "create: %s", err.msg);
	ck_assert_ptr_nonnull(r);
	return r;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static struct timespec in_ms(unsigned ms)
{
	uint64_t t = mono_ns() + (uint64_t)ms * 1000000ULL;
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ULL),
	                      .tv_nsec = (long)(t % 1000000000ULL)};
	return ts;
}

static struct timespec in_us(unsigned us)
{
	uint64_t t = mono_ns() + (uint64_t)us * 1000ULL;
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ULL),
	                      .tv_nsec = (long)(t % 1000000000ULL)};
	return ts;
}

static const struct timespec PAST = {0, 0};

/* Allocates and expects success at `want_off`; returns the span id. */
static uint64_t take(struct placefs_ring *r, uint64_t n, uint64_t want_off)
{
	uint64_t off = 777, id = 0;
	int rc = placefs_ring_alloc(r, n, &PAST, NULL, &off, &id);

	ck_assert_msg(rc == 0, "alloc %llu: %d", (unsigned long long)n, rc);
	ck_assert_msg(off == want_off, "alloc %llu: offset %llu, want %llu", (unsigned long long)n,
	              (unsigned long long)off, (unsigned long long)want_off);
	ck_assert_uint_ne(id, 0);
	return id;
}

/* Expects a try-allocation of n bytes to find no space. */
static void no_room(struct placefs_ring *r, uint64_t n)
{
	uint64_t off = 777, id = 777;

	ck_assert_int_eq(placefs_ring_alloc(r, n, &PAST, NULL, &off, &id), -ETIMEDOUT);
	ck_assert_uint_eq(off, 777);
	ck_assert_uint_eq(id, 777);
}

START_TEST(test_create_bad)
{
	struct placefs_ring *r = (struct placefs_ring *)1;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ring_create(0, 256, &r, &err), -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(strstr(err.msg, "capacity"));
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ring_create(4096, 0, &r, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "alignment 0"));
	ck_assert_int_eq(placefs_ring_create(4096, 3, &r, NULL), -EINVAL);
	ck_assert_int_eq(placefs_ring_create(4096, 1ULL << 21, &r, NULL), -EINVAL);
	r = mk(4096, 1ULL << 20);
	ck_assert_uint_eq(placefs_ring_capacity(r), 4096);
	ck_assert_uint_eq(placefs_ring_align(r), 1ULL << 20);
	placefs_ring_free(r);
	placefs_ring_free(NULL);
}
END_TEST

START_TEST(test_basic_and_stats)
{
	struct placefs_ring *r = mk(1000, 1);
	struct placefs_ring_stats st;
	uint64_t a, b, c;

	a = take(r, 100, 0);
	b = take(r, 200, 100);
	c = take(r, 700, 300);
	ck_assert_uint_eq(a, 1);
	ck_assert_uint_eq(b, 2);
	ck_assert_uint_eq(c, 3);
	no_room(r, 1);
	placefs_ring_stats(r, &st);
	ck_assert_uint_eq(st.capacity, 1000);
	ck_assert_uint_eq(st.used, 1000);
	ck_assert_uint_eq(st.high_water, 1000);
	ck_assert_uint_eq(st.live, 3);
	ck_assert_uint_eq(st.allocs, 3);
	ck_assert_uint_eq(st.waits, 0);
	ck_assert_int_eq(placefs_ring_release(r, a), 0);
	ck_assert_int_eq(placefs_ring_release(r, b), 0);
	ck_assert_int_eq(placefs_ring_release(r, c), 0);
	placefs_ring_stats(r, &st);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.live, 0);
	ck_assert_uint_eq(st.releases, 3);
	ck_assert_uint_eq(st.high_water, 1000);
	/* Empty again: the next span starts at 0. */
	ck_assert_int_eq(placefs_ring_release(r, take(r, 1000, 0)), 0);
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_alignment)
{
	struct placefs_ring *r = mk(4096, 256);
	struct placefs_ring_stats st;

	take(r, 1, 0);
	take(r, 1, 256);
	take(r, 300, 512);
	take(r, 256, 1024);
	take(r, 0, 1280);
	take(r, 10, 1280);
	placefs_ring_stats(r, &st);
	ck_assert_uint_eq(st.used, 1536); /* aligned lengths */
	placefs_ring_free(r);

	/* A capacity that is not a multiple of the alignment: the last span ends short. */
	r = mk(1000, 256);
	take(r, 900, 0);
	placefs_ring_stats(r, &st);
	ck_assert_uint_eq(st.used, 1000);
	no_room(r, 1);
	take(r, 0, 768); /* a 0-byte span at the unaligned end reports an aligned offset */
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_efbig_and_exact_fit)
{
	struct placefs_ring *r = mk(1 << 20, 256);
	uint64_t off = 5, id = 5;

	ck_assert_int_eq(placefs_ring_alloc(r, (1 << 20) + 1, NULL, NULL, &off, &id), -EFBIG);
	ck_assert_int_eq(placefs_ring_alloc(r, UINT64_MAX, NULL, NULL, &off, &id), -EFBIG);
	ck_assert_uint_eq(off, 5);
	id = take(r, 1 << 20, 0);
	no_room(r, 1);
	ck_assert_int_eq(placefs_ring_release(r, id), 0);
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_zero_bytes)
{
	struct placefs_ring *r = mk(100, 1);
	uint64_t full, z1, z2;

	z1 = take(r, 0, 0);
	full = take(r, 100, 0);
	/* A 0-byte span fits even in a full ring, and still needs a release. */
	z2 = take(r, 0, 100);
	ck_assert_uint_ne(z1, z2);
	ck_assert_int_eq(placefs_ring_release(r, full), 0);
	ck_assert_int_eq(placefs_ring_release(r, z2), 0);
	/* z1 is the oldest span: nothing is reclaimed until it goes. */
	no_room(r, 1);
	ck_assert_int_eq(placefs_ring_release(r, z1), 0);
	ck_assert_int_eq(placefs_ring_release(r, take(r, 100, 0)), 0);
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_wrap_around)
{
	struct placefs_ring *r = mk(100, 1);
	struct placefs_ring_stats st;
	uint64_t a, b, c, d, e;

	a = take(r, 40, 0);
	b = take(r, 40, 40);
	ck_assert_int_eq(placefs_ring_release(r, a), 0);
	/* 30 bytes do not fit in [80, 100): wrap to 0, below the oldest span (40). */
	c = take(r, 30, 0);
	d = take(r, 10, 30);
	no_room(r, 1);  /* [40, 80) is b, [80, 100) waits for b */
	no_room(r, 20); /* never crosses the end */
	ck_assert_int_eq(placefs_ring_release(r, b), 0);
	/* Now c is the oldest: free space is [40, 100). */
	e = take(r, 60, 40);
	no_room(r, 1);
	placefs_ring_stats(r, &st);
	ck_assert_uint_eq(st.wraps, 1);
	ck_assert_uint_eq(st.used, 100);
	ck_assert_int_eq(placefs_ring_release(r, c), 0);
	ck_assert_int_eq(placefs_ring_release(r, d), 0);
	/* e is alone at [40, 100): the next span wraps into [0, 40). */
	take(r, 40, 0);
	ck_assert_int_eq(placefs_ring_release(r, e), 0);
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_out_of_order_release)
{
	struct placefs_ring *r = mk(300, 1);
	uint64_t a, b, c;

	a = take(r, 100, 0);
	b = take(r, 100, 100);
	c = take(r, 100, 200);
	ck_assert_int_eq(placefs_ring_release(r, c), 0);
	ck_assert_int_eq(placefs_ring_release(r, b), 0);
	/* a still pins everything allocated after it. */
	no_room(r, 1);
	ck_assert_int_eq(placefs_ring_release(r, a), 0);
	take(r, 300, 0);
	placefs_ring_free(r);

	/* Releasing the middle first, then the oldest, reclaims both. */
	r = mk(300, 1);
	a = take(r, 100, 0);
	b = take(r, 100, 100);
	c = take(r, 100, 200);
	ck_assert_int_eq(placefs_ring_release(r, b), 0);
	ck_assert_int_eq(placefs_ring_release(r, a), 0);
	/* c at [200, 300) is now the oldest: [0, 200) is free after a wrap. */
	take(r, 200, 0);
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_bad_release)
{
	struct placefs_ring *r = mk(100, 1);
	uint64_t a, b;

	ck_assert_int_eq(placefs_ring_release(r, 0), -ENOENT);
	ck_assert_int_eq(placefs_ring_release(r, 1), -ENOENT);
	a = take(r, 10, 0);
	b = take(r, 10, 10);
	ck_assert_int_eq(placefs_ring_release(r, b), 0);
	ck_assert_int_eq(placefs_ring_release(r, b), -ENOENT); /* released, not reclaimed */
	ck_assert_int_eq(placefs_ring_release(r, a), 0);
	ck_assert_int_eq(placefs_ring_release(r, a), -ENOENT); /* reclaimed */
	ck_assert_int_eq(placefs_ring_release(r, 99), -ENOENT);
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_many_spans_grow)
{
	/* More live spans than the initial record array holds, across a wrap. */
	struct placefs_ring *r = mk(1000, 1);
	uint64_t ids[1000];
	unsigned i;

	for (i = 0; i < 1000; i++)
		ids[i] = take(r, 1, i);
	for (i = 0; i < 500; i++)
		ck_assert_int_eq(placefs_ring_release(r, ids[i]), 0);
	for (i = 0; i < 500; i++)
		ids[i] = take(r, 1, i);
	no_room(r, 1);
	for (i = 0; i < 1000; i++)
		ck_assert_int_eq(placefs_ring_release(r, ids[i]), 0);
	placefs_ring_free(r);
}
END_TEST

START_TEST(test_deadline_timeout)
{
	struct placefs_ring *r = mk(100, 1);
	struct placefs_ring_stats st;
	struct timespec dl;
	uint64_t off = 0, id = 0, t0, el;

	take(r, 100, 0);
	dl = in_ms(80);
	t0 = mono_ns();
	ck_assert_int_eq(placefs_ring_alloc(r, 1, &dl, NULL, &off, &id), -ETIMEDOUT);
	el = mono_ns() - t0;
	ck_assert_msg(el >= 70000000ULL, "returned after %llu ns", (unsigned long long)el);
	ck_assert_msg(el < 2000000000ULL, "returned after %llu ns", (unsigned long long)el);
	placefs_ring_stats(r, &st);
	ck_assert_uint_eq(st.timeouts, 1);
	ck_assert_uint_eq(st.waits, 1);
	ck_assert_uint_eq(st.waiting, 0);
	ck_assert_uint_ge(st.wait_ns, 70000000ULL);
	placefs_ring_free(r);
}
END_TEST

struct canceller {
	struct placefs_ring *ring;
	int *flag;
	unsigned ms;
	int wake;
};

static void *cancel_later(void *arg)
{
	struct canceller *c = arg;

	usleep(c->ms * 1000);
	__atomic_store_n(c->flag, 1, __ATOMIC_RELEASE);
	if (c->wake)
		placefs_ring_wake(c->ring);
	return NULL;
}

START_TEST(test_cancel)
{
	struct placefs_ring *r = mk(100, 1);
	struct placefs_ring_stats st;
	uint64_t off = 0, id = 0, t0, el;
	int flag = 1;
	pthread_t th;
	struct canceller c = {.ring = r, .flag = &flag, .ms = 50, .wake = 1};

	/* Already cancelled: refused even though there is space. */
	ck_assert_int_eq(placefs_ring_alloc(r, 1, NULL, &flag, &off, &id), -EINTR);
	take(r, 100, 0);

	/* Cancelled with a wake-up. */
	flag = 0;
	ck_assert_int_eq(pthread_create(&th, NULL, cancel_later, &c), 0);
	t0 = mono_ns();
	ck_assert_int_eq(placefs_ring_alloc(r, 1, NULL, &flag, &off, &id), -EINTR);
	el = mono_ns() - t0;
	pthread_join(th, NULL);
	ck_assert_msg(el >= 40000000ULL && el < 2000000000ULL, "after %llu ns",
	              (unsigned long long)el);

	/* Cancelled without a wake-up: noticed by polling. */
	flag = 0;
	c.wake = 0;
	ck_assert_int_eq(pthread_create(&th, NULL, cancel_later, &c), 0);
	ck_assert_int_eq(placefs_ring_alloc(r, 1, NULL, &flag, &off, &id), -EINTR);
	pthread_join(th, NULL);
	placefs_ring_stats(r, &st);
	ck_assert_uint_eq(st.cancels, 2);
	ck_assert_uint_eq(st.waiting, 0);
	placefs_ring_free(r);
}
END_TEST

/* The seed's case: five 4 MiB tensors through an 8 MiB ring. */
struct producer {
	struct placefs_ring *ring;
	uint64_t ids[5];
	uint64_t offs[5];
	int rc[5];
	int produced; /* atomic */
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	int i;

	for (i = 0; i < 5; i++) {
		p->rc[i] =
		        placefs_ring_alloc(p->ring, 4 << 20, NULL, NULL, &p->offs[i], &p->ids[i]);
		__atomic_store_n(&p->produced, i + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

START_TEST(test_backpressure_threads)
{
	struct producer p = {.ring = mk(8 << 20, 256)};
	struct placefs_ring_stats st;
	pthread_t th;
	int i;

	ck_assert_int_eq(pthread_create(&th, NULL, produce, &p), 0);
	/* Two fit; the third must wait for a release. */
	while (__atomic_load_n(&p.produced, __ATOMIC_ACQUIRE) < 2)
		usleep(1000);
	while (placefs_ring_waiting(p.ring) == 0)
		usleep(1000);
	usleep(20000);
	ck_assert_int_eq(__atomic_load_n(&p.produced, __ATOMIC_ACQUIRE), 2);
	for (i = 0; i < 5; i++) {
		while (__atomic_load_n(&p.produced, __ATOMIC_ACQUIRE) <= i)
			usleep(1000);
		ck_assert_int_eq(p.rc[i], 0);
		ck_assert_uint_eq(p.offs[i], (uint64_t)(i % 2) * (4 << 20));
		usleep(5000);
		ck_assert_int_eq(placefs_ring_release(p.ring, p.ids[i]), 0);
	}
	pthread_join(th, NULL);
	placefs_ring_stats(p.ring, &st);
	ck_assert_uint_eq(st.allocs, 5);
	ck_assert_uint_ge(st.waits, 3);
	ck_assert_uint_eq(st.high_water, 8 << 20);
	ck_assert_uint_eq(st.used, 0);
	placefs_ring_free(p.ring);
}
END_TEST

struct fifo_req {
	struct placefs_ring *ring;
	uint64_t n;
	int *seq; /* shared order counter */
	int order;
	uint64_t id;
};

static void *fifo_alloc(void *arg)
{
	struct fifo_req *q = arg;
	uint64_t off;

	ck_assert_int_eq(placefs_ring_alloc(q->ring, q->n, NULL, NULL, &off, &q->id), 0);
	q->order = __atomic_add_fetch(q->seq, 1, __ATOMIC_ACQ_REL);
	return NULL;
}

START_TEST(test_fifo_fairness)
{
	struct placefs_ring *r = mk(100, 1);
	int seq = 0;
	struct fifo_req big = {.ring = r, .n = 80, .seq = &seq};
	struct fifo_req small = {.ring = r, .n = 10, .seq = &seq};
	pthread_t t1, t2;
	uint64_t a, b;

	a = take(r, 50, 0);
	b = take(r, 40, 50);
	ck_assert_int_eq(pthread_create(&t1, NULL, fifo_alloc, &big), 0);
	while (placefs_ring_waiting(r) < 1)
		usleep(1000);
	/* 10 bytes would fit at [90, 100) now, but the big request came first. */
	ck_assert_int_eq(pthread_create(&t2, NULL, fifo_alloc, &small), 0);
	while (placefs_ring_waiting(r) < 2)
		usleep(1000);
	usleep(20000);
	ck_assert_int_eq(__atomic_load_n(&seq, __ATOMIC_ACQUIRE), 0);
	ck_assert_int_eq(placefs_ring_release(r, a), 0);
	ck_assert_int_eq(placefs_ring_release(r, b), 0);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	/* Ids grow with every allocation: the big request was served first. */
	ck_assert_uint_lt(big.id, small.id);
	ck_assert_int_eq(seq, 2);
	placefs_ring_free(r);
}
END_TEST

static int hook_calls;

static void count_hook(void *arg)
{
	__atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
}

START_TEST(test_pressure_hook)
{
	struct placefs_ring *r = mk(100, 1);
	struct timespec dl;
	uint64_t off, id;

	hook_calls = 0;
	placefs_ring_set_pressure_hook(r, count_hook, &hook_calls);
	id = take(r, 100, 0);
	no_room(r, 1); /* a try never waits: no pressure */
	ck_assert_int_eq(hook_calls, 0);
	dl = in_ms(10);
	ck_assert_int_eq(placefs_ring_alloc(r, 1, &dl, NULL, &off, &id), -ETIMEDOUT);
	ck_assert_int_eq(hook_calls, 1);
	placefs_ring_free(r);
}
END_TEST

/* ---- randomized stress: no two live spans ever overlap ---------------------- */

#define STRESS_THREADS 4
#define STRESS_HELD    6

struct live {
	uint64_t off, len, id;
};

static struct {
	pthread_mutex_t lock;
	struct live spans[STRESS_THREADS * STRESS_HELD];
	unsigned n;
	uint64_t cap;
	uint64_t align;
	int failures;
} g;

static void live_add(uint64_t off, uint64_t len, uint64_t id)
{
	unsigned i;

	pthread_mutex_lock(&g.lock);
	if (off % g.align != 0 || off > g.cap || len > g.cap - off) {
		fprintf(stderr, "bad span %llu+%llu\n", (unsigned long long)off,
		        (unsigned long long)len);
		g.failures++;
	}
	for (i = 0; i < g.n; i++) {
		const struct live *s = &g.spans[i];

		if (len && s->len && off < s->off + s->len && s->off < off + len) {
			fprintf(stderr, "overlap %llu+%llu with %llu+%llu\n",
			        (unsigned long long)off, (unsigned long long)len,
			        (unsigned long long)s->off, (unsigned long long)s->len);
			g.failures++;
		}
		if (s->id == id)
			g.failures++;
	}
	g.spans[g.n++] = (struct live){off, len, id};
	pthread_mutex_unlock(&g.lock);
}

static void live_del(uint64_t id)
{
	unsigned i;

	pthread_mutex_lock(&g.lock);
	for (i = 0; i < g.n; i++) {
		if (g.spans[i].id == id) {
			g.spans[i] = g.spans[--g.n];
			break;
		}
	}
	pthread_mutex_unlock(&g.lock);
}

struct stresser {
	struct placefs_ring *ring;
	unsigned seed;
	unsigned iters;
	unsigned done;
	int blocked;
};

static void *stress(void *arg)
{
	struct stresser *s = arg;
	uint64_t held[STRESS_HELD];
	unsigned nheld = 0, i;

	for (i = 0; i < s->iters; i++) {
		unsigned x = (unsigned)rand_r(&s->seed);
		uint64_t n, off, id;
		struct timespec dl;
		int rc;

		if (nheld == STRESS_HELD || (nheld > 0 && (x % 3 == 0 || s->blocked))) {
			s->blocked = 0;
			/* Release a random span: out of order on purpose. */
			unsigned k = (unsigned)rand_r(&s->seed) % nheld;

			live_del(held[k]);
			ck_assert_int_eq(placefs_ring_release(s->ring, held[k]), 0);
			held[k] = held[--nheld];
			continue;
		}
		switch (x % 41) {
		case 0: n = 0; break;
		case 1: n = g.cap; break;
		case 2:
		case 3: n = 1 + (uint64_t)rand_r(&s->seed) % g.cap; break;
		default: n = 1 + (uint64_t)rand_r(&s->seed) % (g.cap / 16); break;
		}
		/* Holding spans while waiting forever could deadlock the threads. */
		dl = nheld ? in_us(300) : in_us(2000000);
		rc = placefs_ring_alloc(s->ring, n, &dl, NULL, &off, &id);
		if (rc == -ETIMEDOUT) {
			s->blocked = 1; /* give something back next */
			continue;
		}
		ck_assert_int_eq(rc, 0);
		live_add(off, n, id);
		held[nheld++] = id;
		s->done++;
	}
	while (nheld > 0) {
		live_del(held[--nheld]);
		ck_assert_int_eq(placefs_ring_release(s->ring, held[nheld]), 0);
	}
	return NULL;
}

START_TEST(test_random_stress)
{
	static const uint64_t caps[] = {4096, 1000, 65536 + 17};
	static const uint64_t aligns[] = {1, 8, 256};
	unsigned v;

	for (v = 0; v < 3; v++) {
		struct stresser s[STRESS_THREADS];
		pthread_t th[STRESS_THREADS];
		struct placefs_ring_stats st;
		unsigned i, total = 0;

		memset(&g, 0, sizeof(g));
		pthread_mutex_init(&g.lock, NULL);
		g.cap = caps[v];
		g.align = aligns[v];
		s[0].ring = mk(caps[v], aligns[v]);
		for (i = 0; i < STRESS_THREADS; i++)
			s[i] = (struct stresser){
			        .ring = s[0].ring, .seed = 1234 + i * 77 + v, .iters = 8000};
		for (i = 0; i < STRESS_THREADS; i++)
			ck_assert_int_eq(pthread_create(&th[i], NULL, stress, &s[i]), 0);
		for (i = 0; i < STRESS_THREADS; i++) {
			pthread_join(th[i], NULL);
			total += s[i].done;
		}
		ck_assert_int_eq(g.failures, 0);
		ck_assert_uint_gt(total, 1000);
		placefs_ring_stats(s[0].ring, &st);
		ck_assert_uint_eq(st.used, 0);
		ck_assert_uint_eq(st.live, 0);
		ck_assert_uint_eq(st.waiting, 0);
		ck_assert_uint_eq(st.allocs, total);
		ck_assert_uint_eq(st.releases, total);
		ck_assert_uint_gt(st.wraps, 0);
		ck_assert_uint_le(st.high_water, caps[v]);
		/* Everything came back: the whole ring is one free region again. */
		ck_assert_int_eq(placefs_ring_release(s[0].ring, take(s[0].ring, caps[v], 0)), 0);
		placefs_ring_free(s[0].ring);
		pthread_mutex_destroy(&g.lock);
	}
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_create_bad);
	tcase_add_test(tc, test_basic_and_stats);
	tcase_add_test(tc, test_alignment);
	tcase_add_test(tc, test_efbig_and_exact_fit);
	tcase_add_test(tc, test_zero_bytes);
	tcase_add_test(tc, test_wrap_around);
	tcase_add_test(tc, test_out_of_order_release);
	tcase_add_test(tc, test_bad_release);
	tcase_add_test(tc, test_many_spans_grow);
	tcase_add_test(tc, test_deadline_timeout);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_backpressure_threads);
	tcase_add_test(tc, test_fifo_fairness);
	tcase_add_test(tc, test_pressure_hook);
	tcase_add_test(tc, test_random_stress);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ring_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
