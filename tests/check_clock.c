/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "testutil.h"

#define MS (1000000ULL)

/* CLOCK_MONOTONIC read directly, to check the helpers against. */
static uint64_t ref_ns(void)
{
	struct timespec ts;

	ck_assert_int_eq(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
	return (uint64_t)ts.tv_sec * PLACEFS_NS_PER_S + (uint64_t)ts.tv_nsec;
}

START_TEST(test_now_is_monotonic)
{
	uint64_t a, b, c, prev;
	double s;

	a = ref_ns();
	b = placefs_clock_ns();
	c = ref_ns();
	ck_assert_uint_le(a, b);
	ck_assert_uint_le(b, c);

	a = ref_ns();
	s = placefs_clock_s();
	c = ref_ns();
	ck_assert_msg(s >= (double)a / 1e9 - 1e-6 && s <= (double)c / 1e9 + 1e-6,
	              "%.9f not within [%llu, %llu] ns", s, (unsigned long long)a,
	              (unsigned long long)c);

	prev = placefs_clock_ns();
	for (int i = 0; i < 10000; i++) {
		uint64_t now = placefs_clock_ns();

		ck_assert_uint_ge(now, prev);
		prev = now;
	}

	/* A 20 ms sleep shows as at least 20 ms, and not as seconds. */
	a = placefs_clock_ns();
	s = placefs_clock_s();
	usleep(20000);
	b = placefs_clock_ns() - a;
	ck_assert_uint_ge(b, 20 * MS);
	ck_assert_uint_lt(b, 2000 * MS);
	ck_assert(placefs_clock_s() - s >= 0.020);
}
END_TEST

START_TEST(test_ts_ns)
{
	static const struct {
		time_t sec;
		long nsec;
		uint64_t want;
	} v[] = {
	        {0, 0, 0},
	        {0, 1, 1},
	        {1, 5, 1000000005ULL},
	        {3, 999999999, 3999999999ULL},
	        /* The past: a negative tv_sec is 0, a negative tv_nsec is subtracted. */
	        {-1, 0, 0},
	        {-5, 999999999, 0},
	        {1, -1, 999999999ULL},
	        {0, -5, 0},
	        /* The largest value, exactly, then saturation instead of wrapping. */
	        {18446744073LL, 709551615L, UINT64_MAX},
	        {18446744073LL, 709551616L, UINT64_MAX},
	        {18446744074LL, 0, UINT64_MAX},
	        {(time_t)1 << 62, 0, UINT64_MAX},
	        {INT64_MAX, 999999999, UINT64_MAX},
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct timespec ts = {.tv_sec = v[i].sec, .tv_nsec = v[i].nsec};

		ck_assert_msg(placefs_clock_ts_ns(&ts) == v[i].want, "{%lld, %ld}: %llu, want %llu",
		              (long long)v[i].sec, v[i].nsec,
		              (unsigned long long)placefs_clock_ts_ns(&ts),
		              (unsigned long long)v[i].want);
	}
}
END_TEST

/* A deadline is now + ns, with tv_nsec always normalised to [0, 1 s). */
START_TEST(test_deadline_normalised)
{
	static const uint64_t ns[] = {
	        0,
	        1,
	        999,
	        500 * MS,
	        999999999ULL,
	        1000000000ULL,
	        1000000001ULL,
	        1999999999ULL,
	        3600ULL * PLACEFS_NS_PER_S + 123456789ULL,
	};
	unsigned carried = 0;

	for (int round = 0; round < 2000; round++) {
		for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
			uint64_t before = ref_ns();
			struct timespec d = placefs_clock_deadline(ns[i]);
			uint64_t after = ref_ns(), at = placefs_clock_ts_ns(&d);

			ck_assert_int_ge(d.tv_nsec, 0);
			ck_assert_int_lt(d.tv_nsec, (long)PLACEFS_NS_PER_S);
			ck_assert_msg(at >= before + ns[i] && at <= after + ns[i],
			              "deadline(%llu) = %llu, not in [%llu, %llu]",
			              (unsigned long long)ns[i], (unsigned long long)at,
			              (unsigned long long)(before + ns[i]),
			              (unsigned long long)(after + ns[i]));
			/* 999999999 ns carries into tv_sec unless now's nanoseconds are 0. */
			if (ns[i] == 999999999ULL && (uint64_t)d.tv_sec > before / PLACEFS_NS_PER_S)
				carried++;
		}
	}
	ck_assert_uint_gt(carried, 0);
}
END_TEST

/* The longest deadline does not overflow time_t; as nanoseconds it saturates. */
START_TEST(test_deadline_saturates)
{
	uint64_t now_s = placefs_clock_ns() / PLACEFS_NS_PER_S;
	struct timespec d = placefs_clock_deadline(UINT64_MAX);
	struct timespec h = placefs_clock_deadline(UINT64_MAX / 2);

	ck_assert_int_ge(d.tv_sec, (time_t)(UINT64_MAX / PLACEFS_NS_PER_S + now_s));
	ck_assert_int_le(d.tv_sec, (time_t)(UINT64_MAX / PLACEFS_NS_PER_S + now_s + 2));
	ck_assert_int_ge(d.tv_nsec, 0);
	ck_assert_int_lt(d.tv_nsec, (long)PLACEFS_NS_PER_S);
	ck_assert_uint_eq(placefs_clock_ts_ns(&d), UINT64_MAX);
	/* Half of it still fits in 64 bits of nanoseconds, and comes first. */
	ck_assert_int_lt(h.tv_sec, d.tv_sec);
	ck_assert_uint_lt(placefs_clock_ts_ns(&h), UINT64_MAX);
	ck_assert_uint_ge(placefs_clock_ts_ns(&h), UINT64_MAX / 2);
}
END_TEST

struct waiter {
	pthread_mutex_t m;
	pthread_cond_t c;
	int flag;
	unsigned delay_ms;
};

static void waiter_init(struct waiter *w, unsigned delay_ms)
{
	ck_assert_int_eq(pthread_mutex_init(&w->m, NULL), 0);
	ck_assert_int_eq(placefs_clock_cond_init(&w->c), 0);
	w->flag = 0;
	w->delay_ms = delay_ms;
}

static void waiter_destroy(struct waiter *w)
{
	pthread_cond_destroy(&w->c);
	pthread_mutex_destroy(&w->m);
}

static void *signal_later(void *arg)
{
	struct waiter *w = arg;

	usleep(w->delay_ms * 1000);
	pthread_mutex_lock(&w->m);
	w->flag = 1;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
	return NULL;
}

/*
 * An unsignalled wait times out after its time, measured on CLOCK_MONOTONIC.
 * A condition variable on the default clock (CLOCK_REALTIME) would see the
 * monotonic deadline as long past and return at once.
 */
START_TEST(test_cond_wait_times_out)
{
	static const uint64_t waits[] = {0, 1 * MS, 50 * MS, 200 * MS};
	struct waiter w;

	waiter_init(&w, 0);
	pthread_mutex_lock(&w.m);
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		uint64_t t0 = ref_ns(), el;
		int rc;

		/* Spurious wake-ups return 0: wait again for the rest. */
		do {
			uint64_t spent = ref_ns() - t0;

			rc = placefs_clock_cond_wait_ns(&w.c, &w.m,
			                                spent < waits[i] ? waits[i] - spent : 0);
		} while (rc == 0);
		el = ref_ns() - t0;
		ck_assert_int_eq(rc, -ETIMEDOUT);
		ck_assert_msg(el >= waits[i], "%llu ns wait returned after %llu ns",
		              (unsigned long long)waits[i], (unsigned long long)el);
		ck_assert_msg(el < waits[i] + 2000 * MS, "%llu ns wait returned after %llu ns",
		              (unsigned long long)waits[i], (unsigned long long)el);
	}
	pthread_mutex_unlock(&w.m);
	waiter_destroy(&w);
}
END_TEST

/* A signal ends the wait early with 0, even with the longest timeout. */
START_TEST(test_cond_wait_woken)
{
	static const uint64_t timeouts[] = {10000 * MS, UINT64_MAX};

	for (size_t i = 0; i < sizeof(timeouts) / sizeof(timeouts[0]); i++) {
		struct waiter w;
		pthread_t th;
		uint64_t t0, el;
		unsigned rounds = 0;
		int rc = 0;

		waiter_init(&w, 50);
		pthread_mutex_lock(&w.m);
		t0 = ref_ns();
		ck_assert_int_eq(pthread_create(&th, NULL, signal_later, &w), 0);
		while (!w.flag) {
			rc = placefs_clock_cond_wait_ns(&w.c, &w.m, timeouts[i]);
			ck_assert_int_eq(rc, 0);
			rounds++;
		}
		el = ref_ns() - t0;
		pthread_mutex_unlock(&w.m);
		pthread_join(th, NULL);
		/* Really waited (a deadline taken as invalid would spin), and woke early. */
		ck_assert_uint_lt(rounds, 100);
		ck_assert_uint_ge(el, 40 * MS);
		ck_assert_uint_lt(el, 5000 * MS);
		waiter_destroy(&w);
	}
}
END_TEST

static Suite *clock_suite(void)
{
	Suite *s = suite_create("clock");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_now_is_monotonic);
	tcase_add_test(tc, test_ts_ns);
	tcase_add_test(tc, test_deadline_normalised);
	tcase_add_test(tc, test_deadline_saturates);
	tcase_add_test(tc, test_cond_wait_times_out);
	tcase_add_test(tc, test_cond_wait_woken);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(clock_suite());
}
