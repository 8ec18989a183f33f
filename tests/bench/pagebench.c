/* SPDX-License-Identifier: MIT */
/*
 * pagebench: what filling *new* page-cache pages costs on this machine,
 * against rewriting pages that already exist. A first read through a cached
 * FUSE file makes the kernel allocate a page-cache page for every 4 KiB and
 * copy the daemon's reply into it; a direct read of the source allocates
 * nothing. This measures that difference without FUSE:
 *
 *   new:     T threads each pwrite() 1 MiB blocks into its own new file in DIR
 *            (every page is allocated and inserted into the page cache);
 *   rewrite: the same writes again into the same files (pages exist);
 *   read:    T threads pread() the same files back (the direct-read ceiling).
 *
 *   pagebench [-t THREADS] [-m MiB per thread] DIR      (DIR on tmpfs: /dev/shm)
 *
 * Prints one line per phase: phase=P threads=T bytes=N seconds=S gbps=G.
 * The files are removed at the end.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1U << 20)

struct worker {
	pthread_t tid;
	char path[4096];
	int fd;
	uint64_t bytes;
	int phase; /* 0 write, 1 read */
	int failed;
};

static uint64_t per_thread = 512ULL << 20;

static void *run(void *arg)
{
	struct worker *w = arg;
	char *buf = aligned_alloc(4096, BLOCK);
	uint64_t off;

	if (!buf) {
		w->failed = 1;
		return NULL;
	}
	memset(buf, 0x5a, BLOCK);
	for (off = 0; off < per_thread; off += BLOCK) {
		ssize_t n = w->phase == 0 ? pwrite(w->fd, buf, BLOCK, (off_t)off)
		                          : pread(w->fd, buf, BLOCK, (off_t)off);

		if (n != (ssize_t)BLOCK) {
			w->failed = 1;
			break;
		}
	}
	free(buf);
	return NULL;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Runs one phase on every worker at once; returns 0 or -1. */
static int phase(struct worker *w, int threads, int ph, const char *name)
{
	double t0, t1;
	int i, bad = 0;

	t0 = now();
	for (i = 0; i < threads; i++) {
		w[i].phase = ph;
		if (pthread_create(&w[i].tid, NULL, run, &w[i]) != 0)
			return -1;
	}
	for (i = 0; i < threads; i++) {
		pthread_join(w[i].tid, NULL);
		bad |= w[i].failed;
	}
	t1 = now();
	if (bad) {
		fprintf(stderr, "pagebench: %s: a write or read failed\n", name);
		return -1;
	}
	printf("phase=%s threads=%d bytes=%" PRIu64 " seconds=%.4f gbps=%.3f\n", name, threads,
	       per_thread * (uint64_t)threads, t1 - t0,
	       (double)(per_thread * (uint64_t)threads) / (t1 - t0) / 1e9);
	return 0;
}

int main(int argc, char **argv)
{
	struct worker *w;
	int threads = 1, opt, i, rc = 1;

	while ((opt = getopt(argc, argv, "t:m:")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'm': per_thread = strtoull(optarg, NULL, 10) << 20; break;
		default: fprintf(stderr, "usage: pagebench [-t THREADS] [-m MiB] DIR\n"); return 2;
		}
	}
	if (optind != argc - 1 || threads < 1 || threads > 1024 || per_thread == 0) {
		fprintf(stderr, "usage: pagebench [-t THREADS] [-m MiB] DIR\n");
		return 2;
	}
	w = calloc((size_t)threads, sizeof(*w));
	if (!w)
		return 1;
	for (i = 0; i < threads; i++) {
		snprintf(w[i].path, sizeof(w[i].path), "%s/pagebench.%d.%d", argv[optind],
		         (int)getpid(), i);
		w[i].fd = open(w[i].path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (w[i].fd < 0) {
			fprintf(stderr, "pagebench: %s: %s\n", w[i].path, strerror(errno));
			threads = i;
			goto out;
		}
	}
	if (phase(w, threads, 0, "new") == 0 && phase(w, threads, 0, "rewrite") == 0 &&
	    phase(w, threads, 1, "read") == 0)
		rc = 0;
out:
	for (i = 0; i < threads; i++) {
		close(w[i].fd);
		unlink(w[i].path);
	}
	free(w);
	return rc;
}
