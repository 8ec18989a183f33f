/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "staging/gate.h"
#include "testutil.h"

#define TMPFS_MAGIC_ 0x01021994

static char *tmpdir;

/*
 * A directory on a file system whose page cache can be dropped: $TMPDIR or
 * /tmp, or /var/tmp when that is tmpfs (tmpfs pages are the file).
 */
static void setup(void)
{
	struct statfs sf;

	tmpdir = tu_mkdtemp();
	if (statfs(tmpdir, &sf) == 0 && sf.f_type == TMPFS_MAGIC_) {
		char tmpl[] = "/var/tmp/placefs-gate.XXXXXX";

		tu_rmtree(tmpdir);
		free(tmpdir);
		ck_assert_ptr_nonnull(mkdtemp(tmpl));
		tmpdir = strdup(tmpl);
		ck_assert_ptr_nonnull(tmpdir);
	}
}

static void teardown(void)
{
	tu_rmtree(tmpdir);
	free(tmpdir);
	tmpdir = NULL;
}

static uint8_t pat(size_t i, unsigned seed)
{
	return (uint8_t)(i * 131 + 17 + seed * 7);
}

/* A file of n pattern bytes, opened read-only. */
static int pattern_file(const char *name, size_t n, unsigned seed)
{
	char *path = tu_path(tmpdir, name);
	uint8_t *data = malloc(n ? n : 1);
	int fd;

	ck_assert_ptr_nonnull(data);
	for (size_t i = 0; i < n; i++)
		data[i] = pat(i, seed);
	tu_write_file(path, data, n);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	free(data);
	free(path);
	return fd;
}

/*
 * Drops fd's pages from the page cache: 1 when cachestat(2) then says the
 * range is not cached, 0 when this kernel or file system cannot be made to
 * show it (the caller skips what needs it, saying so).
 */
static int evict(int fd, size_t n)
{
	int c;

	ck_assert_int_eq(fdatasync(fd), 0);
	ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	c = placefs_gate_cached(fd, 0, n);
	if (c == 1 || c < 0)
		fprintf(stderr,
		        "check_gate: %s: pages stay cached or cachestat(2) is missing (%d)\n",
		        tmpdir, c);
	return c == 0;
}

static void check_bytes(const uint8_t *buf, size_t n, size_t from, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pat(from + i, seed))
			ck_abort_msg("byte %zu: %u, expected %u", from + i, buf[i],
			             pat(from + i, seed));
}

START_TEST(test_create_bounds)
{
	struct placefs_gate *g = (void *)1;
	struct placefs_error e;

	placefs_error_clear(&e);
	ck_assert_int_eq(placefs_gate_create(0, &g, &e), -EINVAL);
	ck_assert_ptr_null(g);
	ck_assert_ptr_nonnull(strstr(e.msg, "disk streams 0: expected 1 to 64"));
	placefs_error_clear(&e);
	ck_assert_int_eq(placefs_gate_create(PLACEFS_GATE_STREAMS_MAX + 1, &g, &e), -EINVAL);
	ck_assert_int_eq(placefs_gate_create(PLACEFS_GATE_STREAMS_MAX, &g, NULL), 0);
	placefs_gate_free(g);
	placefs_gate_free(NULL);
}
END_TEST

/* A file just written is in the page cache: read at once, counted as cached. */
START_TEST(test_cached_reads_pass)
{
	const size_t n = 3 * 65536 + 123;
	int fd = pattern_file("f", n, 1);
	uint8_t *buf = malloc(n);
	struct placefs_gate *g;
	struct placefs_gate_stats s;
	int c = placefs_gate_cached(fd, 0, n);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(placefs_gate_create(1, &g, NULL), 0);
	ck_assert_int_eq(placefs_gate_cached(fd, 0, 0), 1);
	ck_assert_int_eq(placefs_gate_cached(fd, UINT64_MAX, 2), -EINVAL);
	ck_assert_int_eq(placefs_gate_pread(g, fd, buf, n, 0), (ssize_t)n);
	check_bytes(buf, n, 0, 1);
	/* Past the end: what there is, then nothing. */
	ck_assert_int_eq(placefs_gate_pread(g, fd, buf, 1000, n - 10), 10);
	check_bytes(buf, 10, n - 10, 1);
	ck_assert_int_eq(placefs_gate_pread(g, fd, buf, 10, n), 0);
	/* No gate: the plain read. */
	ck_assert_int_eq(placefs_gate_pread(NULL, fd, buf, 4096, 5), 4096);
	check_bytes(buf, 4096, 5, 1);
	placefs_gate_get_stats(g, &s);
	ck_assert_uint_eq(s.streams, 1);
	if (c == 1) {
		/* The file's last page is cached too: the reads at its end are not gated. */
		ck_assert_uint_eq(s.cached_reads, 3);
		ck_assert_uint_eq(s.cached_bytes, n + 10);
		ck_assert_uint_eq(s.disk_reads, 0);
		ck_assert_uint_eq(s.waits, 0);
	} else {
		ck_assert_int_lt(c, 0); /* no cachestat(2): nothing gated */
		ck_assert_uint_eq(s.unknown_reads, 3);
		ck_assert_uint_eq(s.disk_reads, 0);
	}
	placefs_gate_free(g);
	free(buf);
	close(fd);
}
END_TEST

/*
 * A file on tmpfs is its pages: never gated, even where it has no page at all
 * (a hole, which cachestat(2) alone calls not cached) and every slot is held.
 */
START_TEST(test_memory_fs_not_gated)
{
	const size_t n = 8u << 20;
	char path[] = "/dev/shm/placefs-gate-XXXXXX";
	struct placefs_gate *g;
	struct placefs_gate_stats s;
	struct statfs sf;
	uint8_t *buf = malloc(n);
	int fd;

	ck_assert_ptr_nonnull(buf);
	if (statfs("/dev/shm", &sf) != 0 || sf.f_type != TMPFS_MAGIC_) {
		fprintf(stderr,
		        "check_gate: /dev/shm is not tmpfs: memory file systems not checked\n");
		free(buf);
		return;
	}
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)n), 0);
	ck_assert_int_eq(placefs_gate_cached(fd, 0, n), 1);
	ck_assert_int_eq(placefs_gate_create(1, &g, NULL), 0);
	placefs_gate_enter(g, 99, 0); /* the one slot, held by another reader */
	memset(buf, 0xa5, n);
	ck_assert_int_eq(placefs_gate_pread(g, fd, buf, n, 0), (ssize_t)n);
	for (size_t i = 0; i < n; i++)
		if (buf[i] != 0)
			ck_abort_msg("byte %zu of a hole: %u", i, buf[i]);
	placefs_gate_leave(g, 99, 0, 0);
	placefs_gate_get_stats(g, &s);
	ck_assert_uint_eq(s.cached_reads, 1);
	ck_assert_uint_eq(s.cached_bytes, n);
	ck_assert_uint_eq(s.disk_reads, 1); /* the held slot's own */
	ck_assert_uint_eq(s.waits, 0);
	placefs_gate_free(g);
	close(fd);
	free(buf);
}
END_TEST

struct reader {
	struct placefs_gate *g;
	int fd;
	size_t n;
	unsigned seed;
	ssize_t got;
	int bad;
};

static void *read_main(void *arg)
{
	struct reader *r = arg;
	uint8_t *buf = malloc(r->n);

	if (!buf) {
		r->bad = 1;
		return NULL;
	}
	/* In pieces, as the I/O threads read. */
	r->got = 0;
	for (size_t off = 0; off < r->n; off += 65536) {
		size_t k = r->n - off < 65536 ? r->n - off : 65536;
		ssize_t x = placefs_gate_pread(r->g, r->fd, buf + off, k, off);

		if (x != (ssize_t)k) {
			r->bad = 1;
			break;
		}
		r->got += x;
	}
	for (size_t i = 0; !r->bad && i < r->n; i++)
		r->bad = buf[i] != pat(i, r->seed);
	free(buf);
	return NULL;
}

/*
 * Readers of files not in the page cache: never more than `streams` of them
 * in the disk at once, and the bytes exact.
 */
static void run_cold(unsigned streams)
{
	enum { NR = 6 };
	const size_t n = 2 << 20;
	struct reader r[NR];
	pthread_t th[NR];
	struct placefs_gate *g;
	struct placefs_gate_stats s;
	int all_cold = 1;

	ck_assert_int_eq(placefs_gate_create(streams, &g, NULL), 0);
	for (unsigned i = 0; i < NR; i++) {
		char name[16];

		snprintf(name, sizeof(name), "cold%u", i);
		r[i] = (struct reader){.g = g, .fd = pattern_file(name, n, i), .n = n, .seed = i};
		all_cold &= evict(r[i].fd, n);
	}
	for (unsigned i = 0; i < NR; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, read_main, &r[i]), 0);
	for (unsigned i = 0; i < NR; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_msg(!r[i].bad, "reader %u: wrong bytes or a short read", i);
		ck_assert_int_eq(r[i].got, (ssize_t)n);
		close(r[i].fd);
	}
	placefs_gate_get_stats(g, &s);
	ck_assert_uint_le(s.peak, streams);
	if (s.unknown_reads == 0)
		ck_assert_uint_eq(s.cached_bytes + s.disk_bytes, (uint64_t)NR * n);
	if (all_cold) {
		/* Every reader's first piece found the disk: each took a slot. */
		ck_assert_uint_ge(s.disk_reads, NR);
		ck_assert_uint_ge(s.peak, 1);
		ck_assert_uint_eq(s.unknown_reads, 0);
	}
	placefs_gate_free(g);
}

START_TEST(test_cold_one_stream)
{
	run_cold(1);
}
END_TEST

START_TEST(test_cold_two_streams)
{
	run_cold(2);
}
END_TEST

/* ---- the sweep: a freed slot goes to the waiter next in file order -------------------- */

struct sweeper {
	struct placefs_gate *g;
	int fd;
	uint64_t off;
};

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sweeper *order[8];
static unsigned norder;

static void *sweep_main(void *arg)
{
	struct sweeper *w = arg;

	placefs_gate_enter(w->g, w->fd, w->off);
	pthread_mutex_lock(&order_lock);
	order[norder++] = w;
	pthread_mutex_unlock(&order_lock);
	placefs_gate_leave(w->g, w->fd, w->off + 4096, 4096);
	return NULL;
}

/* Holds the only slot at (fd, off), queues ws, frees the slot at end; returns the order. */
static void sweep(struct placefs_gate *g, int fd, uint64_t off, uint64_t end, struct sweeper *ws,
                  unsigned n)
{
	pthread_t th[8];
	struct placefs_gate_stats s;

	norder = 0;
	placefs_gate_enter(g, fd, off);
	for (unsigned i = 0; i < n; i++) {
		ws[i].g = g;
		ck_assert_int_eq(pthread_create(&th[i], NULL, sweep_main, &ws[i]), 0);
		/* One at a time, so that each is queued before the next starts. */
		for (int k = 0; k < 5000; k++) {
			placefs_gate_get_stats(g, &s);
			if (s.waiting == i + 1)
				break;
			usleep(1000);
		}
		ck_assert_uint_eq(s.waiting, i + 1);
	}
	placefs_gate_leave(g, fd, end, end - off);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	ck_assert_uint_eq(norder, n);
}

START_TEST(test_sweep_order)
{
	struct placefs_gate *g;
	struct placefs_gate_stats s;
	/* Asked out of order; admitted in file order, each where the one before ended. */
	struct sweeper a[4] = {{.fd = 7, .off = 12288},
	                       {.fd = 7, .off = 4096},
	                       {.fd = 7, .off = 16384},
	                       {.fd = 7, .off = 8192}};
	/* From (7, 24576) on: (7, 30000), then (9, 100); wrapped: (5, 50), (7, 0). */
	struct sweeper b[4] = {{.fd = 7, .off = 0},
	                       {.fd = 9, .off = 100},
	                       {.fd = 5, .off = 50},
	                       {.fd = 7, .off = 30000}};

	ck_assert_int_eq(placefs_gate_create(1, &g, NULL), 0);
	sweep(g, 7, 0, 4096, a, 4);
	ck_assert_ptr_eq(order[0], &a[1]);
	ck_assert_ptr_eq(order[1], &a[3]);
	ck_assert_ptr_eq(order[2], &a[0]);
	ck_assert_ptr_eq(order[3], &a[2]);
	placefs_gate_get_stats(g, &s);
	ck_assert_uint_eq(s.sequential, 4);
	ck_assert_uint_eq(s.waits, 4);
	ck_assert_uint_eq(s.peak, 1);
	ck_assert_uint_eq(s.waiting, 0);
	ck_assert_uint_eq(s.disk_reads, 5);
	ck_assert_uint_eq(s.disk_bytes, 5 * 4096);

	sweep(g, 7, 20480, 24576, b, 4);
	ck_assert_ptr_eq(order[0], &b[3]);
	ck_assert_ptr_eq(order[1], &b[1]);
	ck_assert_ptr_eq(order[2], &b[2]);
	ck_assert_ptr_eq(order[3], &b[0]);
	placefs_gate_get_stats(g, &s);
	/* The hold at (7, 20480) continued a[2]'s read; none of b continued the one before. */
	ck_assert_uint_eq(s.sequential, 5);
	placefs_gate_free(g);
}
END_TEST

/* Two slots: a newcomer waits behind the queue, and at most two are held. */
START_TEST(test_two_slots_hand_over)
{
	struct placefs_gate *g;
	struct placefs_gate_stats s;
	struct sweeper c[3] = {{.fd = 3, .off = 8192}, {.fd = 3, .off = 0}, {.fd = 3, .off = 4096}};

	ck_assert_int_eq(placefs_gate_create(2, &g, NULL), 0);
	placefs_gate_enter(g, 3,
	                   1 << 20); /* one slot of two held here; sweep below takes the other */
	sweep(g, 3, 1 << 21, (1 << 21) + 4096, c, 3);
	placefs_gate_get_stats(g, &s);
	ck_assert_uint_eq(s.peak, 2);
	/* From (3, 2 MiB + 4 KiB) nothing is ahead: wrapped to the lowest, in order. */
	ck_assert_ptr_eq(order[0], &c[1]);
	ck_assert_ptr_eq(order[1], &c[2]);
	ck_assert_ptr_eq(order[2], &c[0]);
	placefs_gate_leave(g, 3, (1 << 20) + 4096, 4096);
	placefs_gate_get_stats(g, &s);
	ck_assert_uint_eq(s.waiting, 0);
	ck_assert_uint_eq(s.disk_reads, 5);
	placefs_gate_free(g);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("gate");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_create_bounds);
	tcase_add_test(tc, test_cached_reads_pass);
	tcase_add_test(tc, test_memory_fs_not_gated);
	tcase_add_test(tc, test_cold_one_stream);
	tcase_add_test(tc, test_cold_two_streams);
	tcase_add_test(tc, test_sweep_order);
	tcase_add_test(tc, test_two_slots_hand_over);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(suite());
}
