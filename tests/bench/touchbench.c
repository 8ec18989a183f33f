/* SPDX-License-Identifier: MIT */
/*
 * touchbench: what the first write to newly allocated memory costs on this
 * machine, against writing the same memory again. A first read through a
 * page-cached FUSE file writes every byte into newly allocated page-cache
 * pages; a direct read of the source allocates nothing.
 *
 * On a virtual machine whose guest reports free pages to the host
 * (virtio-balloon / page_reporting), a page that has been free for a few
 * seconds is no longer backed by the host, and the first write to it after
 * reallocation faults into the hypervisor. Pages freed moments ago are still
 * backed.
 *
 *   touchbench [-p PAUSE] MiB     writes MiB of new anonymous memory three
 *       times, each time followed by a rewrite and a free: once to start from
 *       a known state, once right after that free ("freed"), and once PAUSE
 *       seconds later (default 5; "settled"). Prints one line:
 *       freed_gbps=F settled_gbps=S rewrite_gbps=R
 *   touchbench -q MiB             one write and free, no output: leaves MiB
 *       of just-freed, host-backed memory for the next allocations
 *       (cpu-read.sh's "backed" first read).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Maps, writes twice, frees; the two rates in GB/s. 0 or -1. */
static int round_trip(size_t bytes, double *first, double *rewrite)
{
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t0, t1, t2;

	if (p == MAP_FAILED) {
		fprintf(stderr, "touchbench: mmap %zu bytes: %s\n", bytes, strerror(errno));
		return -1;
	}
	t0 = now();
	memset(p, 1, bytes);
	t1 = now();
	memset(p, 2, bytes);
	t2 = now();
	munmap(p, bytes);
	*first = (double)bytes / (t1 - t0) / 1e9;
	*rewrite = (double)bytes / (t2 - t1) / 1e9;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned pause = 5;
	int opt, quiet = 0;
	double f0, w0, freed, w1, settled, w2;
	size_t bytes;

	while ((opt = getopt(argc, argv, "p:q")) != -1) {
		switch (opt) {
		case 'p': pause = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'q': quiet = 1; break;
		default: goto usage;
		}
	}
	if (optind != argc - 1)
		goto usage;
	bytes = (size_t)strtoull(argv[optind], NULL, 10) << 20;
	if (!bytes)
		goto usage;
	if (round_trip(bytes, &f0, &w0) < 0)
		return 1;
	if (quiet)
		return 0;
	if (round_trip(bytes, &freed, &w1) < 0)
		return 1;
	sleep(pause);
	if (round_trip(bytes, &settled, &w2) < 0)
		return 1;
	printf("freed_gbps=%.3f settled_gbps=%.3f rewrite_gbps=%.3f\n", freed, settled,
	       (w1 + w2) / 2);
	return 0;
usage:
	fprintf(stderr, "usage: touchbench [-p PAUSE] [-q] MiB\n");
	return 2;
}
