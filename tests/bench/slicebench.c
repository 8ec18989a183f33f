/* SPDX-License-Identifier: MIT */
/*
 * slicebench: how fast a strided (dimension 1) slice goes through a host
 * stager, reading one pread per row segment ("segments") or whole rows
 * compacted in place ("rows"), for tensor-parallel worlds of 2, 4 and 8.
 *
 *   slicebench FILE ROWS COLS ELEM_BYTES [REPEATS [DEVICE]]
 *
 * FILE holds the tensor at offset 0 (ROWS x COLS x ELEM_BYTES bytes; it
 * is written if it is shorter) and should be in the page cache (the first,
 * untimed pass reads it). Each line: mode, world, rank 0's segment bytes,
 * slice MB, best of REPEATS in ms, GB/s of slice bytes, bytes read per
 * slice byte. DEVICE is host (the default) or cuda:N. Results in
 * doc/STAGING.md ("Devices and slices").
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/io.h"
#include "staging/stage.h"

static struct placefs_device dev = {PLACEFS_DEVICE_HOST, -1};

static int run(const char *mode_name, enum placefs_stage_slice_read mode, int fd, uint64_t rows,
               uint64_t cols, uint64_t esz, unsigned world, int repeats)
{
	struct placefs_stager_config cfg = {
	        .device = dev,
	        .ring_bytes = rows * cols * esz / world + (1 << 20),
	        .slice_read = mode,
	};
	const uint64_t shape[2] = {rows, cols * esz}; /* bytes as U8 columns */
	struct placefs_slice s = {1, 0, cols * esz / world};
	struct placefs_stager_stats st0, st1;
	struct placefs_slice_layout l;
	struct placefs_stager *st = NULL;
	struct placefs_error err;
	uint64_t best = UINT64_MAX;
	int i;

	placefs_error_clear(&err);
	if (placefs_slice_layout("bench", PLACEFS_DT_U8, 2, shape, rows * cols * esz, &s, &l,
	                         &err) != 0 ||
	    placefs_stager_create(&cfg, &st, &err) != 0) {
		fprintf(stderr, "slicebench: %s\n", err.msg);
		return 1;
	}
	placefs_stager_stats(st, &st0);
	for (i = 0; i < repeats + 1; i++) {
		struct placefs_stage_opts o = {.name = "bench", .slice = &l};
		struct placefs_stage_span sp;
		uint64_t t0 = placefs_clock_ns(), t;

		if (placefs_stager_stage(st, fd, 0, rows * cols * esz, &o, &sp, &err) != 0) {
			fprintf(stderr, "slicebench: %s\n", err.msg);
			placefs_stager_free(st);
			return 1;
		}
		t = placefs_clock_ns() - t0;
		placefs_stager_release(st, sp.lease, 0);
		if (i > 0 && t < best)
			best = t;
	}
	placefs_stager_stats(st, &st1);
	printf("%-8s world %u  segment %7llu B  slice %7.1f MB  %8.2f ms  %6.2f GB/s  read x%.2f\n",
	       mode_name, world, (unsigned long long)l.seg_bytes, l.nbytes / 1e6, best / 1e6,
	       (double)l.nbytes / (double)best,
	       (double)(st1.strided_read_bytes - st0.strided_read_bytes) /
	               (double)(l.nbytes * (uint64_t)(repeats + 1)));
	placefs_stager_free(st);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t rows, cols, esz, size, i;
	static const unsigned worlds[] = {2, 4, 8};
	int repeats = argc > 5 ? atoi(argv[5]) : 5, fd, rc = 0;
	struct stat sb;
	size_t w;

	if (argc < 5 || (argc > 6 && placefs_device_parse(argv[6], &dev, NULL) != 0)) {
		fprintf(stderr, "usage: slicebench FILE ROWS COLS ELEM_BYTES [REPEATS [DEVICE]]\n");
		return 2;
	}
	rows = strtoull(argv[2], NULL, 10);
	cols = strtoull(argv[3], NULL, 10);
	esz = strtoull(argv[4], NULL, 10);
	size = rows * cols * esz;
	fd = open(argv[1], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		perror(argv[1]);
		return 1;
	}
	if ((uint64_t)sb.st_size < size) {
		uint8_t *buf = malloc(1 << 20);

		for (i = 0; i < (1 << 20); i++)
			buf[i] = (uint8_t)(i * 131);
		for (i = 0; i < size; i += 1 << 20)
			placefs_io_pwrite_full(fd, buf, size - i < (1 << 20) ? size - i : 1 << 20,
			                       i);
		free(buf);
	}
	for (w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++) {
		rc |= run("segments", PLACEFS_STAGE_SLICE_SEGMENTS, fd, rows, cols, esz, worlds[w],
		          repeats);
		rc |= run("rows", PLACEFS_STAGE_SLICE_ROWS, fd, rows, cols, esz, worlds[w],
		          repeats);
		rc |= run("auto", PLACEFS_STAGE_SLICE_AUTO, fd, rows, cols, esz, worlds[w],
		          repeats);
	}
	close(fd);
	return rc;
}
