/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "common/clock.h"

uint64_t placefs_clock_ts_ns(const struct timespec *ts)
{
	uint64_t ns;

	if (ts->tv_sec < 0)
		return 0;
	if (__builtin_mul_overflow((uint64_t)ts->tv_sec, PLACEFS_NS_PER_S, &ns))
		return UINT64_MAX;
	if (ts->tv_nsec < 0)
		return ns > (uint64_t)-ts->tv_nsec ? ns - (uint64_t)-ts->tv_nsec : 0;
	if (__builtin_add_overflow(ns, (uint64_t)ts->tv_nsec, &ns))
		return UINT64_MAX;
	return ns;
}

uint64_t placefs_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return placefs_clock_ts_ns(&ts);
}

double placefs_clock_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct timespec placefs_clock_deadline(uint64_t ns)
{
	struct timespec ts;
	uint64_t sec = ns / PLACEFS_NS_PER_S;
	long nsec = (long)(ns % PLACEFS_NS_PER_S);
	/* The largest tv_sec that cannot overflow time_t (64-bit on every Linux we build for). */
	const uint64_t sec_max = (uint64_t)1 << 62;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (sec > sec_max - (uint64_t)ts.tv_sec) {
		ts.tv_sec = (time_t)sec_max;
		ts.tv_nsec = 0;
		return ts;
	}
	ts.tv_sec += (time_t)sec;
	ts.tv_nsec += nsec;
	if (ts.tv_nsec >= (long)PLACEFS_NS_PER_S) {
		ts.tv_sec++;
		ts.tv_nsec -= (long)PLACEFS_NS_PER_S;
	}
	return ts;
}

int placefs_clock_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t ca;
	int rc;

	if ((rc = pthread_condattr_init(&ca)) != 0)
		return -rc;
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
	return -rc;
}

int placefs_clock_cond_wait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns)
{
	struct timespec dl = placefs_clock_deadline(ns);

	return pthread_cond_timedwait(c, m, &dl) == ETIMEDOUT ? -ETIMEDOUT : 0;
}
