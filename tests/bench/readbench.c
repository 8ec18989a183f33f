/* SPDX-License-Identifier: MIT */
/*
 * readbench: reads byte ranges with N threads in fixed-size pread()s and
 * reports the throughput. The benchmarks use it both on a placefs mount (each
 * tensor file, whole) and on the shard files (the same byte ranges), so the
 * two sides of a ratio run the same code.
 *
 *   readbench [-t THREADS] [-b BLOCK] [-p PIECE] [-d] [-c] MANIFEST
 *
 * -p cuts every range into work items of PIECE bytes (a multiple of 4096),
 * so several threads read one large file at once. -d opens with O_DIRECT
 * (the disk's own pace, no page cache): offsets must then be multiples of
 * 4096, and the last block of a range is read whole (rounded up to 4096; a
 * range that ends at the end of its file reads short there). With -p and -d
 * a manifest of whole files (offset 0, the file's size) is the parallel
 * O_DIRECT reader that the cold-disk figures are measured against.
 *
 * MANIFEST: one range per line, "PATH<TAB>OFFSET<TAB>LENGTH". Ranges are
 * handed to threads from a shared counter, longest first (ties in manifest
 * order), so that one large tensor taken last cannot leave every other
 * thread idle at the end: with whole tensors as work items, manifest order
 * measured the tail of the largest tensor more than the readers' throughput.
 * -c adds a checksum of all
 * bytes read (FNV-1a over each block, combined per range in manifest order)
 * so two runs can be compared for equality. Prints one line:
 *   bytes=N seconds=S gbps=G checksum=X
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct range {
	char *path;
	uint64_t off, len;
	uint64_t sum;
};

static struct range *ranges;
static size_t *order; /* indexes into ranges, longest first */
static size_t nranges;
static atomic_size_t next_range;
static size_t block = 1 << 20;
static int do_sum;
static int do_direct;
static uint64_t piece;
static atomic_int failed;

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static void *worker(void *arg)
{
	char *buf = aligned_alloc(4096, block);

	(void)arg;
	if (!buf) {
		atomic_store(&failed, 1);
		return NULL;
	}
	for (;;) {
		size_t i = atomic_fetch_add(&next_range, 1);
		struct range *r;
		int fd;
		uint64_t done = 0, h = 1469598103934665603ULL;

		if (i >= nranges)
			break;
		r = &ranges[order[i]];
		fd = open(r->path, O_RDONLY | O_CLOEXEC | (do_direct ? O_DIRECT : 0));
		if (fd < 0) {
			fprintf(stderr, "readbench: %s: %s\n", r->path, strerror(errno));
			atomic_store(&failed, 1);
			continue;
		}
		while (done < r->len) {
			size_t want = r->len - done < block ? (size_t)(r->len - done) : block;
			ssize_t n;

			if (do_direct && want % 4096)
				want += 4096 - want % 4096; /* the last block, whole */
			n = pread(fd, buf, want, (off_t)(r->off + done));
			if (n > 0 && (uint64_t)n > r->len - done)
				n = (ssize_t)(r->len - done);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				fprintf(stderr, "readbench: %s at %" PRIu64 ": %s\n", r->path,
				        r->off + done, n < 0 ? strerror(errno) : "unexpected EOF");
				atomic_store(&failed, 1);
				break;
			}
			if (do_sum)
				h = fnv(h, (unsigned char *)buf, (size_t)n);
			done += (uint64_t)n;
		}
		r->sum = h;
		close(fd);
	}
	free(buf);
	return NULL;
}

static int load_manifest(const char *file)
{
	FILE *f = fopen(file, "r");
	char *line = NULL;
	size_t cap = 0, alloc = 0;
	ssize_t n;

	if (!f) {
		fprintf(stderr, "readbench: %s: %s\n", file, strerror(errno));
		return -1;
	}
	while ((n = getline(&line, &cap, f)) > 0) {
		char *tab1 = strchr(line, '\t'), *tab2;

		if (!tab1 || !(tab2 = strchr(tab1 + 1, '\t'))) {
			fprintf(stderr, "readbench: %s: malformed line: %s", file, line);
			free(line);
			fclose(f);
			return -1;
		}
		if (nranges == alloc) {
			alloc = alloc ? alloc * 2 : 1024;
			ranges = realloc(ranges, alloc * sizeof(*ranges));
			if (!ranges)
				abort();
		}
		*tab1 = '\0';
		ranges[nranges].path = strdup(line);
		ranges[nranges].off = strtoull(tab1 + 1, NULL, 10);
		ranges[nranges].len = strtoull(tab2 + 1, NULL, 10);
		nranges++;
	}
	free(line);
	fclose(f);
	return 0;
}

/* -p: every range becomes items of at most `piece` bytes (each its own path copy). */
static int split_pieces(void)
{
	size_t n = 0, k = 0;
	struct range *out;

	for (size_t i = 0; i < nranges; i++)
		n += ranges[i].len ? (size_t)((ranges[i].len + piece - 1) / piece) : 1;
	out = calloc(n ? n : 1, sizeof(*out));
	if (!out)
		return -1;
	for (size_t i = 0; i < nranges; i++) {
		uint64_t off = 0;
		do {
			uint64_t len = ranges[i].len - off < piece ? ranges[i].len - off : piece;
			out[k].path = strdup(ranges[i].path);
			if (!out[k].path)
				abort();
			out[k].off = ranges[i].off + off;
			out[k].len = len;
			k++;
			off += len;
		} while (off < ranges[i].len);
		free(ranges[i].path);
	}
	free(ranges);
	ranges = out;
	nranges = k;
	return 0;
}

static int longest_first(const void *a, const void *b)
{
	const struct range *x = &ranges[*(const size_t *)a], *y = &ranges[*(const size_t *)b];

	if (x->len != y->len)
		return x->len < y->len ? 1 : -1;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int threads = 1, opt;
	struct timespec t0, t1;
	uint64_t total = 0, sum = 1469598103934665603ULL;
	pthread_t *tids;
	double secs;

	while ((opt = getopt(argc, argv, "t:b:p:dc")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'b': block = (size_t)strtoull(optarg, NULL, 10); break;
		case 'p': piece = strtoull(optarg, NULL, 10); break;
		case 'd': do_direct = 1; break;
		case 'c': do_sum = 1; break;
		default:
			fprintf(stderr,
			        "usage: readbench [-t THREADS] [-b BLOCK] [-p PIECE] [-d] [-c] "
			        "MANIFEST\n");
			return 2;
		}
	}
	if (optind != argc - 1 || threads < 1 || block < 4096 || block % 4096 || piece % 4096) {
		fprintf(stderr, "usage: readbench [-t THREADS] [-b BLOCK] [-p PIECE] [-d] [-c] "
		                "MANIFEST (BLOCK and PIECE multiples of 4096)\n");
		return 2;
	}
	if (load_manifest(argv[optind]))
		return 1;
	if (piece && split_pieces())
		return 1;
	order = calloc(nranges ? nranges : 1, sizeof(*order));
	if (!order)
		abort();
	for (size_t i = 0; i < nranges; i++)
		order[i] = i;
	qsort(order, nranges, sizeof(*order), longest_first);
	tids = calloc((size_t)threads, sizeof(*tids));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < threads; i++)
		pthread_create(&tids[i], NULL, worker, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (size_t i = 0; i < nranges; i++) {
		total += ranges[i].len;
		sum = fnv(sum, (const unsigned char *)&ranges[i].sum, sizeof(ranges[i].sum));
		free(ranges[i].path);
	}
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("bytes=%" PRIu64 " seconds=%.4f gbps=%.3f checksum=%016" PRIx64 "\n", total, secs,
	       (double)total / secs / 1e9, do_sum ? sum : 0);
	free(ranges);
	free(order);
	free(tids);
	return atomic_load(&failed) ? 1 : 0;
}
