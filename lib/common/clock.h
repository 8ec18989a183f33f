/* SPDX-License-Identifier: MIT */
/*
 * clock: CLOCK_MONOTONIC time and deadlines, in one place.
 *
 * Every timed wait in placefs is against CLOCK_MONOTONIC so that wall-clock
 * jumps do not shorten or stretch it: condition variables that are waited on
 * with a deadline are initialised with placefs_clock_cond_init().
 */
#ifndef PLACEFS_CLOCK_H
#define PLACEFS_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define PLACEFS_NS_PER_S 1000000000ULL

/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t placefs_clock_ns(void);

/* CLOCK_MONOTONIC now, in seconds (for rates and durations printed to humans). */
double placefs_clock_s(void);

/*
 * A timespec as nanoseconds. A negative tv_sec is the past (0); a time past
 * UINT64_MAX nanoseconds (such as a saturated placefs_clock_deadline())
 * saturates to UINT64_MAX instead of wrapping.
 */
uint64_t placefs_clock_ts_ns(const struct timespec *ts);

/*
 * The CLOCK_MONOTONIC deadline `ns` nanoseconds from now, as the timespec
 * that pthread_cond_timedwait() takes on a condition variable made by
 * placefs_clock_cond_init(). Saturates instead of overflowing.
 */
struct timespec placefs_clock_deadline(uint64_t ns);

/*
 * Initialises *c to wait against CLOCK_MONOTONIC. Returns 0 or a negative
 * errno (from pthread_condattr_* or pthread_cond_init).
 */
int placefs_clock_cond_init(pthread_cond_t *c);

/*
 * Waits on c (made by placefs_clock_cond_init(), m held) for at most `ns`
 * nanoseconds. Returns 0 when woken, -ETIMEDOUT when the time ran out.
 * Spurious wake-ups return 0: callers re-check their condition.
 */
int placefs_clock_cond_wait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns);

#endif
