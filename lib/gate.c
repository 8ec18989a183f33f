/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "gate.h"
#include "io.h"

/* cachestat(2): the same number on every architecture (Linux 6.5). */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

struct cachestat_range_abi {
	uint64_t off;
	uint64_t len;
};

struct cachestat_abi {
	uint64_t nr_cache;
	uint64_t nr_dirty;
	uint64_t nr_writeback;
	uint64_t nr_evicted;
	uint64_t nr_recently_evicted;
};

struct placefs_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned streams;
	unsigned held;                /* slots taken; lock held */
	struct placefs_gate_stats st; /* lock held */
};

int placefs_gate_cached(int fd, uint64_t off, uint64_t len)
{
	struct cachestat_range_abi r;
	struct cachestat_abi cs;
	long psz = sysconf(_SC_PAGESIZE);
	uint64_t end, first, last;

	if (len == 0)
		return 1;
	if (psz <= 0 || __builtin_add_overflow(off, len, &end))
		return -EINVAL;
	first = off / (uint64_t)psz;
	last = (end - 1) / (uint64_t)psz;
	r.off = first * (uint64_t)psz;
	r.len = (last - first + 1) * (uint64_t)psz;
	memset(&cs, 0, sizeof(cs));
	if (syscall(__NR_cachestat, fd, &r, &cs, 0) != 0)
		return -errno;
	/* A range past the end of the file is not all cached: gated, the read stops there. */
	return cs.nr_cache >= last - first + 1 ? 1 : 0;
}

int placefs_gate_create(unsigned streams, struct placefs_gate **out, struct placefs_error *err)
{
	struct placefs_gate *g;
	int rc;

	*out = NULL;
	if (streams < 1 || streams > PLACEFS_GATE_STREAMS_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "disk streams %u: expected 1 to %d", streams,
		                         PLACEFS_GATE_STREAMS_MAX);
	g = calloc(1, sizeof(*g));
	if (!g)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "disk gate: out of memory");
	rc = -pthread_mutex_init(&g->lock, NULL);
	if (rc != 0)
		goto fail_free;
	rc = placefs_clock_cond_init(&g->cond);
	if (rc != 0)
		goto fail_lock;
	g->streams = streams;
	g->st.streams = streams;
	*out = g;
	return 0;

fail_lock:
	pthread_mutex_destroy(&g->lock);
fail_free:
	free(g);
	return placefs_error_set(err, rc, PLACEFS_E_IO, "disk gate: %s", strerror(-rc));
}

void placefs_gate_free(struct placefs_gate *g)
{
	if (!g)
		return;
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

/* Takes a slot, waiting for one when all are held. */
static void take(struct placefs_gate *g)
{
	pthread_mutex_lock(&g->lock);
	if (g->held >= g->streams) {
		uint64_t t0 = placefs_clock_ns();

		g->st.waits++;
		while (g->held >= g->streams)
			pthread_cond_wait(&g->cond, &g->lock);
		g->st.wait_ns += placefs_clock_ns() - t0;
	}
	g->held++;
	if (g->held > g->st.peak)
		g->st.peak = g->held;
	pthread_mutex_unlock(&g->lock);
}

static void give(struct placefs_gate *g, ssize_t got)
{
	pthread_mutex_lock(&g->lock);
	g->held--;
	g->st.disk_reads++;
	if (got > 0)
		g->st.disk_bytes += (uint64_t)got;
	pthread_cond_signal(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

static void count(struct placefs_gate *g, int cached, ssize_t got)
{
	pthread_mutex_lock(&g->lock);
	if (cached == 1) {
		g->st.cached_reads++;
		if (got > 0)
			g->st.cached_bytes += (uint64_t)got;
	} else {
		g->st.unknown_reads++;
	}
	pthread_mutex_unlock(&g->lock);
}

ssize_t placefs_gate_pread(struct placefs_gate *g, int fd, void *buf, size_t len, uint64_t off)
{
	ssize_t got;
	int cached;

	if (!g || len == 0)
		return placefs_io_pread_full(fd, buf, len, off);
	cached = placefs_gate_cached(fd, off, len);
	if (cached != 0) {
		/* All in the page cache, or the kernel cannot say: no gate. */
		got = placefs_io_pread_full(fd, buf, len, off);
		count(g, cached, got);
		return got;
	}
	take(g);
	got = placefs_io_pread_full(fd, buf, len, off);
	give(g, got);
	return got;
}

void placefs_gate_get_stats(struct placefs_gate *g, struct placefs_gate_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	*out = g->st;
	pthread_mutex_unlock(&g->lock);
}
