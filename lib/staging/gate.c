/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/clock.h"
#include "staging/gate.h"
#include "common/io.h"

/* cachestat(2): the same number on every architecture (Linux 6.5). */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

/* statfs(2) f_type of the memory file systems, whose pages are the file (linux/magic.h). */
#define TMPFS_MAGIC_ 0x01021994
#define RAMFS_MAGIC_ 0x858458f6

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

/* A reader waiting for a slot, on its own stack; linked while it waits. */
struct waiter {
	struct waiter *next;
	int fd;
	uint64_t off;
	bool granted; /* a slot was handed to it; lock held */
};

struct placefs_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;          /* a slot was handed over */
	unsigned held;                /* slots taken, at most st.streams; lock held */
	struct waiter *wait;          /* readers waiting, unordered; lock held */
	int last_fd;                  /* the sweep's place: where the last gated read began, */
	uint64_t last_end;            /* and where it ended once it left */
	struct placefs_gate_stats st; /* lock held */
};

int placefs_gate_cached(int fd, uint64_t off, uint64_t len)
{
	struct cachestat_range_abi r;
	struct cachestat_abi cs;
	long psz = sysconf(_SC_PAGESIZE);
	uint64_t end, first, last;

	struct statfs sf;

	if (len == 0)
		return 1;
	if (psz <= 0 || __builtin_add_overflow(off, len, &end))
		return -EINVAL;
	/*
	 * tmpfs and ramfs hold the file in memory: reading it needs no disk. Not
	 * asked of cachestat(2) either, which walks every page of the range
	 * (about 30 us per 4 MiB on tmpfs, 20 on ext4, on a 2-core virtual
	 * machine with Linux 6.18).
	 */
	if (fstatfs(fd, &sf) == 0 &&
	    ((uint32_t)sf.f_type == TMPFS_MAGIC_ || (uint32_t)sf.f_type == RAMFS_MAGIC_))
		return 1;
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
	g->last_fd = -1;
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

/* Whether (fd, off) comes before (gfd, goff) in the sweep's order. */
static bool before(int fd, uint64_t off, int gfd, uint64_t goff)
{
	return fd < gfd || (fd == gfd && off < goff);
}

/*
 * The waiter next in the sweep: the first at or after where the last gated
 * read ended, in (descriptor, offset) order, else (the sweep wraps) the
 * first of all. Lock held; g->wait not empty.
 */
static struct waiter **next_waiter(struct placefs_gate *g)
{
	struct waiter **ahead = NULL, **first = NULL;

	for (struct waiter **w = &g->wait; *w; w = &(*w)->next) {
		if (!first || before((*w)->fd, (*w)->off, (*first)->fd, (*first)->off))
			first = w;
		if (!before((*w)->fd, (*w)->off, g->last_fd, g->last_end) &&
		    (!ahead || before((*w)->fd, (*w)->off, (*ahead)->fd, (*ahead)->off)))
			ahead = w;
	}
	return ahead ? ahead : first;
}

void placefs_gate_enter(struct placefs_gate *g, int fd, uint64_t off)
{
	struct waiter me = {.fd = fd, .off = off};

	pthread_mutex_lock(&g->lock);
	if (g->held < g->st.streams && !g->wait) {
		g->held++;
	} else {
		uint64_t t0 = placefs_clock_ns();

		g->st.waits++;
		me.next = g->wait;
		g->wait = &me;
		g->st.waiting++;
		while (!me.granted)
			pthread_cond_wait(&g->cond, &g->lock);
		g->st.wait_ns += placefs_clock_ns() - t0;
	}
	/* held counts this reader now (taken here, or handed over by leave). */
	if (g->held > g->st.peak)
		g->st.peak = g->held;
	if (fd == g->last_fd && off == g->last_end)
		g->st.sequential++;
	g->last_fd = fd;
	g->last_end = off;
	pthread_mutex_unlock(&g->lock);
}

void placefs_gate_leave(struct placefs_gate *g, int fd, uint64_t end, uint64_t bytes)
{
	pthread_mutex_lock(&g->lock);
	g->st.disk_reads++;
	g->st.disk_bytes += bytes;
	if (fd == g->last_fd && end > g->last_end)
		g->last_end = end;
	if (g->wait) {
		/* The slot goes to the next waiter in the sweep, never to a newcomer. */
		struct waiter **w = next_waiter(g);
		struct waiter *x = *w;

		*w = x->next;
		g->st.waiting--;
		x->granted = true;
		pthread_cond_broadcast(&g->cond);
	} else {
		g->held--;
	}
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
	uint64_t moved;
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
	placefs_gate_enter(g, fd, off);
	got = placefs_io_pread_full(fd, buf, len, off);
	moved = got > 0 ? (uint64_t)got : 0;
	placefs_gate_leave(g, fd, off + moved, moved);
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
