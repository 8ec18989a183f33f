/* SPDX-License-Identifier: MIT */
/*
 * regbench: what a first pass from the page cache to one GPU can reach, by
 * pipeline, on a file that was never registered (issue #13). Built only
 * with CUDA; run on a GPU machine:
 *
 *     regbench FILE [GIB] [THREADS...]
 *
 * FILE is created (GIB GiB, default 4) unless it exists with that size; in
 * /dev/shm its pages are then in the page cache, as a checkpoint's are.
 * Every row maps the file afresh (no page-table entries, nothing
 * registered) and moves the whole file to device memory once:
 *
 *   ceiling   cudaMemcpyAsync from 2 x 64 MiB cudaHostAlloc buffers (the
 *             pinned host-to-device ceiling, the reference of every ratio)
 *   register  T threads register (cudaHostRegisterReadOnly) and unregister
 *             windows of W bytes, no copy: can registration run in parallel?
 *   window    T threads each register a window, DMA it into their own
 *             device slot, unregister it: zero-copy with pinned memory
 *             bounded by T x W
 *   bounce    T threads pread() into D pinned C-byte chunks each and DMA
 *             them (the bounce path), C and D swept
 *
 * One line per row: "NAME T D W GB/s x_ceiling". REGBENCH_BOUNCE_ONLY=1
 * runs only the ceiling and the bounce rows.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024ull * 1024)

static const char *g_path;
static uint64_t g_size;
static int g_fd = -1;
static unsigned char *g_map;
static uint64_t g_window;
static atomic_uint_fast64_t g_next;
static void *g_dev;          /* one slot of g_window bytes per thread */
static int g_populate;       /* MADV_POPULATE_READ each window before registering */
static unsigned g_depth = 2; /* bounce chunks per thread */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die_cuda(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "regbench: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

static void make_file(uint64_t size)
{
	struct stat sb;
	g_fd = open(g_path, O_RDWR | O_CREAT, 0600);
	if (g_fd < 0 || fstat(g_fd, &sb) != 0) {
		perror(g_path);
		exit(1);
	}
	if ((uint64_t)sb.st_size != size) {
		size_t bl = 8 * MIB;
		unsigned char *b = malloc(bl);
		if (!b || ftruncate(g_fd, 0) != 0) {
			perror("regbench: file");
			exit(1);
		}
		for (size_t i = 0; i < bl; i++)
			b[i] = (unsigned char)(i * 131u + 7u);
		for (uint64_t off = 0; off < size; off += bl)
			if (pwrite(g_fd, b, bl, (off_t)off) != (ssize_t)bl) {
				perror("regbench: write");
				exit(1);
			}
		free(b);
	}
	g_size = size;
}

static void map_fresh(void)
{
	if (g_map)
		munmap(g_map, g_size);
	g_map = mmap(NULL, g_size, PROT_READ, MAP_SHARED, g_fd, 0);
	if (g_map == MAP_FAILED) {
		perror("regbench: mmap");
		exit(1);
	}
}

enum kind { REGISTER, WINDOW, BOUNCE };

struct worker {
	pthread_t t;
	enum kind kind;
	unsigned idx;
	double reg_s;
};

static void *run(void *arg)
{
	struct worker *w = arg;
	cudaStream_t s;
	void *pin[8] = {NULL};
	cudaEvent_t ev[8];
	unsigned cur = 0;
	int used[8] = {0};
	unsigned char *slot = (unsigned char *)g_dev + (uint64_t)w->idx * g_window;

	die_cuda(cudaSetDevice(0), "set device");
	die_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
	if (w->kind == BOUNCE) {
		for (unsigned i = 0; i < g_depth; i++) {
			die_cuda(cudaHostAlloc(&pin[i], g_window, cudaHostAllocDefault),
			         "host alloc");
			die_cuda(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming), "event");
		}
	}
	for (;;) {
		uint64_t off = atomic_fetch_add(&g_next, g_window);
		if (off >= g_size)
			break;
		uint64_t n = g_size - off < g_window ? g_size - off : g_window;
		if (w->kind == BOUNCE) {
			if (used[cur])
				die_cuda(cudaEventSynchronize(ev[cur]), "event sync");
			if (pread(g_fd, pin[cur], n, (off_t)off) != (ssize_t)n) {
				perror("regbench: pread");
				exit(1);
			}
			die_cuda(cudaMemcpyAsync(slot, pin[cur], n, cudaMemcpyHostToDevice, s),
			         "copy");
			die_cuda(cudaEventRecord(ev[cur], s), "record");
			used[cur] = 1;
			cur = (cur + 1) % g_depth;
			continue;
		}
		double t0 = now();
		if (g_populate)
			madvise(g_map + off, n, 22 /* MADV_POPULATE_READ */);
		die_cuda(cudaHostRegister(g_map + off, n, cudaHostRegisterReadOnly), "register");
		w->reg_s += now() - t0;
		if (w->kind == WINDOW) {
			die_cuda(cudaMemcpyAsync(slot, g_map + off, n, cudaMemcpyHostToDevice, s),
			         "copy");
			die_cuda(cudaStreamSynchronize(s), "sync");
		}
		die_cuda(cudaHostUnregister(g_map + off), "unregister");
	}
	die_cuda(cudaStreamSynchronize(s), "sync");
	for (unsigned i = 0; i < 8; i++)
		if (pin[i]) {
			cudaFreeHost(pin[i]);
			cudaEventDestroy(ev[i]);
		}
	cudaStreamDestroy(s);
	return NULL;
}

static double row(const char *name, enum kind kind, unsigned threads, uint64_t window,
                  double ceiling)
{
	struct worker w[64];
	map_fresh();
	g_window = window;
	atomic_store(&g_next, 0);
	die_cuda(cudaMalloc(&g_dev, window * threads), "device slots");
	double t0 = now();
	for (unsigned i = 0; i < threads; i++) {
		w[i] = (struct worker){.kind = kind, .idx = i};
		pthread_create(&w[i].t, NULL, run, &w[i]);
	}
	double reg = 0;
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(w[i].t, NULL);
		reg += w[i].reg_s;
	}
	double dt = now() - t0;
	cudaFree(g_dev);
	double gbs = (double)g_size / dt / 1e9;
	printf("%-10s T=%-2u D=%u W=%-4lluK %7.2f GB/s  %5.2f x  (register %.3f s summed over "
	       "threads)\n",
	       name, threads, g_depth, (unsigned long long)(window >> 10), gbs,
	       ceiling > 0 ? gbs / ceiling : 1.0, reg);
	fflush(stdout);
	return gbs;
}

static double ceiling_row(void)
{
	void *pin[2], *dev;
	cudaStream_t s[2];
	uint64_t chunk = 64 * MIB, total = 0;
	die_cuda(cudaMalloc(&dev, 2 * chunk), "malloc");
	for (int i = 0; i < 2; i++) {
		die_cuda(cudaHostAlloc(&pin[i], chunk, cudaHostAllocDefault), "host alloc");
		memset(pin[i], i, chunk);
		die_cuda(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking), "stream");
	}
	double best = 0;
	for (int pass = 0; pass < 3; pass++) {
		double t0 = now();
		total = 0;
		for (int i = 0; total < g_size; i ^= 1, total += chunk)
			die_cuda(cudaMemcpyAsync((char *)dev + i * chunk, pin[i], chunk,
			                         cudaMemcpyHostToDevice, s[i]),
			         "copy");
		cudaDeviceSynchronize();
		double gbs = (double)total / (now() - t0) / 1e9;
		best = gbs > best ? gbs : best;
	}
	printf("%-10s T=1  W=64  M %7.2f GB/s   1.00 x  (best of 3, 2 streams)\n", "ceiling", best);
	for (int i = 0; i < 2; i++) {
		cudaFreeHost(pin[i]);
		cudaStreamDestroy(s[i]);
	}
	cudaFree(dev);
	return best;
}

int main(int argc, char **argv)
{
	unsigned tl[16] = {1, 2, 4, 8, 14};
	unsigned nt = 5;
	if (argc < 2) {
		fprintf(stderr, "usage: regbench FILE [GIB] [THREADS...]\n");
		return 2;
	}
	g_path = argv[1];
	uint64_t gib = argc > 2 ? strtoull(argv[2], NULL, 10) : 4;
	if (gib < 1 || gib > 256) {
		fprintf(stderr, "regbench: GIB must be 1..256\n");
		return 2;
	}
	if (argc > 3) {
		nt = 0;
		for (int i = 3; i < argc && nt < 16; i++) {
			unsigned v = (unsigned)strtoul(argv[i], NULL, 10);
			if (v < 1 || v > 64) {
				fprintf(stderr, "regbench: THREADS must be 1..64\n");
				return 2;
			}
			tl[nt++] = v;
		}
	}
	make_file(gib << 30);
	die_cuda(cudaSetDevice(0), "set device");
	double c = ceiling_row();
	static const uint64_t wins[] = {16 * MIB, 64 * MIB, 256 * MIB};
	int bounce_only = getenv("REGBENCH_BOUNCE_ONLY") != NULL;
	for (unsigned wi = 0; wi < 3 && !bounce_only; wi++)
		for (unsigned i = 0; i < nt; i++)
			row("register", REGISTER, tl[i], wins[wi], 0);
	for (unsigned wi = 0; wi < 3 && !bounce_only; wi++)
		for (unsigned i = 0; i < nt; i++)
			row("window", WINDOW, tl[i], wins[wi], c);
	g_populate = 1;
	for (unsigned i = 0; i < nt && !bounce_only; i++)
		row("window+pop", WINDOW, tl[i], 64 * MIB, c);
	g_populate = 0;
	static const uint64_t chunks[] = {512 << 10, 1 * MIB, 2 * MIB, 4 * MIB, 16 * MIB};
	static const unsigned depths[] = {2, 4};
	for (unsigned di = 0; di < 2; di++)
		for (unsigned ci = 0; ci < 5; ci++)
			for (unsigned i = 0; i < nt; i++) {
				g_depth = depths[di];
				row("bounce", BOUNCE, tl[i], chunks[ci], c);
			}
	munmap(g_map, g_size);
	close(g_fd);
	return 0;
}
