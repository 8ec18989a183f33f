/* SPDX-License-Identifier: MIT */
/*
 * check_zerocopy: lib/staging/zerocopy.c without a GPU. The host backend has no
 * zero-copy, and the registry says so; its bookkeeping (lookup by file,
 * uses, the cap, refusals, staleness, unregistering, counters, concurrent
 * first use) is driven through placefs_zerocopy_create_ops() with a device
 * of the test's own: it maps the shard for real (mmap, read-only) and
 * "DMAs" with memcpy into a ring buffer. The registry over a real CUDA
 * device is check_stage's (test_zero_copy_*_cuda).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "staging/backend.h"
#include "testutil.h"
#include "staging/zerocopy.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)

/* The test's device. */
struct fake {
	pthread_mutex_t lock;
	unsigned maps, unmaps, copies;
	int map_rc;        /* != 0: registrations fail with it */
	int copy_rc;       /* != 0: copies fail with it */
	unsigned map_ms;   /* a registration takes this long */
	uint64_t unmapped; /* bytes unmapped */
	uint8_t ring[1 * MiB];
};

static void fake_init(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
}

static unsigned fake_get(struct fake *f, const unsigned *v)
{
	unsigned n;

	pthread_mutex_lock(&f->lock);
	n = *v;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static int fake_map(void *ctx, int fd, uint64_t size, void **base, struct placefs_error *err)
{
	struct fake *f = ctx;
	void *p;

	pthread_mutex_lock(&f->lock);
	f->maps++;
	pthread_mutex_unlock(&f->lock);
	*base = NULL;
	if (f->map_ms) {
		struct timespec ts = {0, (long)f->map_ms * 1000000L};

		nanosleep(&ts, NULL);
	}
	if (f->map_rc)
		return placefs_error_set(err, f->map_rc, PLACEFS_E_IO, "fake: cannot register");
	p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return placefs_error_set(err, -EIO, PLACEFS_E_IO, "fake: mmap: %s",
		                         strerror(errno));
	*base = p;
	return 0;
}

static void fake_unmap(void *ctx, void *base, uint64_t size)
{
	struct fake *f = ctx;

	munmap(base, (size_t)size);
	pthread_mutex_lock(&f->lock);
	f->unmaps++;
	f->unmapped += size;
	pthread_mutex_unlock(&f->lock);
}

static int fake_copy(void *ctx, const unsigned *chunks, unsigned nchunks, const void *src,
                     uint64_t ring_off, uint64_t n, struct placefs_error *err)
{
	struct fake *f = ctx;

	ck_assert_ptr_nonnull(chunks);
	ck_assert_uint_ge(nchunks, 1);
	if (f->copy_rc)
		return placefs_error_set(err, f->copy_rc, PLACEFS_E_IO, "fake: the DMA failed");
	if (ring_off > sizeof(f->ring) || n > sizeof(f->ring) - ring_off)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "fake: outside the ring");
	memcpy(f->ring + ring_off, src, n);
	pthread_mutex_lock(&f->lock);
	f->copies++;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

static const struct placefs_zerocopy_ops fake_ops = {
        .map_source = fake_map,
        .unmap_source = fake_unmap,
        .src_to_ring = fake_copy,
};

static const unsigned chunks[2] = {0, 1};

static uint8_t pat(uint64_t i, unsigned seed)
{
	return (uint8_t)(i * 131 + seed * 17 + (i >> 9));
}

/* A shard of n pattern bytes in dir; returns its path (malloc'd). */
static char *shard(const char *dir, const char *name, uint64_t n, unsigned seed)
{
	char *path = tu_path(dir, name);
	uint8_t *buf = malloc(n ? n : 1);
	uint64_t i;

	ck_assert_ptr_nonnull(buf);
	for (i = 0; i < n; i++)
		buf[i] = pat(i, seed);
	tu_write_file(path, buf, n);
	free(buf);
	return path;
}

static int open_ro(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	return fd;
}

static struct placefs_zerocopy *fake_registry(struct fake *f, uint64_t cap)
{
	struct placefs_zerocopy *zc = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_zerocopy_create_ops(&fake_ops, f, "fake:0", cap, &zc, &err) == 0,
	              "%s", err.msg);
	ck_assert_ptr_nonnull(zc);
	return zc;
}

static struct placefs_zerocopy_stats stats(const struct placefs_zerocopy *zc)
{
	struct placefs_zerocopy_stats s;

	memset(&s, 0xa5, sizeof(s));
	placefs_zerocopy_stats(zc, &s);
	return s;
}

/* The mtime of path, moved a second on: the shard "changed" without changing size. */
static void touch_later(const char *path)
{
	struct stat sb;
	struct timespec t[2];

	ck_assert_int_eq(stat(path, &sb), 0);
	t[0] = sb.st_atim;
	t[1] = sb.st_mtim;
	t[1].tv_sec += 1;
	ck_assert_int_eq(utimensat(AT_FDCWD, path, t, 0), 0);
}

/*
 * One registry for two devices (lib/staging/stagers.h): a shard registered once
 * (by the first device's context) is copied into either device's ring, and
 * counted once.
 */
START_TEST(test_copy_ctx_shared)
{
	char *dir = tu_mkdtemp(), *path = shard(dir, "s", 256 * KiB, 3);
	struct fake *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	struct placefs_zerocopy_src *z;
	struct placefs_zerocopy *zc;
	struct placefs_zerocopy_stats st;
	struct placefs_error err;
	uint64_t i;
	int fd = open_ro(path);

	fake_init(a);
	fake_init(b);
	zc = fake_registry(a, 0);
	z = placefs_zerocopy_acquire(zc, fd, 1000, 5000);
	ck_assert_ptr_nonnull(z);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_zerocopy_copy_ctx(zc, b, z, fd, chunks, 2, 1000, 64, 5000, &err) == 0,
	              "%s", err.msg);
	ck_assert_int_eq(
	        placefs_zerocopy_copy_ctx(zc, NULL, z, fd, chunks, 2, 1000, 128, 5000, NULL), 0);
	for (i = 0; i < 5000; i++) {
		ck_assert_uint_eq(b->ring[64 + i], pat(1000 + i, 3));
		ck_assert_uint_eq(a->ring[128 + i], pat(1000 + i, 3));
	}
	ck_assert_uint_eq(b->ring[128 + 5000 + 1], 0);
	ck_assert_uint_eq(a->copies, 1);
	ck_assert_uint_eq(b->copies, 1);
	ck_assert_uint_eq(a->maps, 1); /* registered once, by its own context */
	ck_assert_uint_eq(b->maps, 0);
	st = stats(zc);
	ck_assert_uint_eq(st.bytes, 10000);
	ck_assert_uint_eq(st.registrations, 1);
	/* A failing device reports its own error. */
	b->copy_rc = -EIO;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_zerocopy_copy_ctx(zc, b, z, fd, chunks, 2, 1000, 64, 5000, &err),
	                 -EIO);
	ck_assert_str_eq(err.msg, "fake: the DMA failed");
	placefs_zerocopy_put(zc, z);
	placefs_zerocopy_free(zc);
	ck_assert_uint_eq(a->unmaps, 1);
	close(fd);
	tu_rmtree(dir);
	free(path);
	free(dir);
	free(a);
	free(b);
}
END_TEST

/* The host backend has no zero-copy: the registry refuses to exist, cleanly. */
START_TEST(test_host_unsupported)
{
	struct placefs_backend *be = NULL;
	struct placefs_zerocopy *zc = (struct placefs_zerocopy *)1;
	struct placefs_zerocopy_ops partial = fake_ops;
	struct placefs_error err;
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

	placefs_error_clear(&err);
	ck_assert_msg(placefs_backend_create(tu_device("host"), 1 * MiB, 0, &be, &err) == 0, "%s",
	              err.msg);
	ck_assert_int_eq(placefs_backend_has_zero_copy(be), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_zerocopy_create(be, 0, &zc, &err), -EOPNOTSUPP);
	ck_assert_ptr_null(zc);
	ck_assert_int_eq(err.code, -EOPNOTSUPP);
	ck_assert_msg(strstr(err.msg, "host") != NULL &&
	                      strstr(err.msg, "cannot stage without bounce buffers (zero-copy)"),
	              "%s", err.msg);
	placefs_backend_free(be);

	/* A device lacking one of the three calls is refused too. */
	partial.src_to_ring = NULL;
	zc = (struct placefs_zerocopy *)1;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_zerocopy_create_ops(&partial, NULL, NULL, 0, &zc, &err), -EINVAL);
	ck_assert_ptr_null(zc);
	ck_assert_uint_gt(strlen(err.msg), 0);
	ck_assert_int_eq(placefs_zerocopy_create_ops(NULL, NULL, NULL, 0, &zc, NULL), -EINVAL);
	placefs_zerocopy_free(NULL);
	placefs_zerocopy_put(NULL, NULL);

	/* The default cap is half of physical memory. */
	ck_assert_int_gt(pages, 0);
	ck_assert_int_gt(psize, 0);
	ck_assert_uint_eq(placefs_zerocopy_default_cap(), (uint64_t)pages * (uint64_t)psize / 2);
}
END_TEST

/* One entry per file, found again through any descriptor; uses; what goes to the bounce path. */
START_TEST(test_lookup_and_uses)
{
	char *dir = tu_mkdtemp();
	char *a = shard(dir, "a", 256 * KiB + 5, 1);
	char *empty = shard(dir, "empty", 0, 0);
	struct placefs_zerocopy_src *z1, *z2;
	struct placefs_zerocopy_stats s;
	struct placefs_zerocopy *zc;
	struct placefs_error err;
	struct fake *f = malloc(sizeof(*f));
	int fd1, fd2, efd, pfd[2];
	uint64_t i;
	char note[256];

	ck_assert_ptr_nonnull(f);
	fake_init(f);
	zc = fake_registry(f, 0);
	s = stats(zc);
	ck_assert_uint_eq(s.registrations, 0);
	ck_assert_uint_eq(s.registered_bytes, 0);
	ck_assert_uint_eq(s.bytes, 0);
	ck_assert_uint_eq(s.refused, 0);
	ck_assert_uint_eq(s.stale, 0);

	fd1 = open_ro(a);
	fd2 = open_ro(a);
	/* Nothing to copy, a pipe, an empty file, a directory: the bounce path, no entry. */
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fd1, 0, 0));
	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, pfd[0], 0, 10));
	efd = open_ro(empty);
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, efd, 0, 1));
	close(efd);
	efd = open(dir, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(efd, 0);
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, efd, 0, 1));
	close(efd);
	close(pfd[0]);
	close(pfd[1]);
	ck_assert_uint_eq(fake_get(f, &f->maps), 0);

	/* The first use registers the whole shard, the second finds it. */
	z1 = placefs_zerocopy_acquire(zc, fd1, 100, 4096);
	ck_assert_ptr_nonnull(z1);
	z2 = placefs_zerocopy_acquire(zc, fd2, 0, 256 * KiB + 5);
	ck_assert_ptr_eq(z1, z2);
	ck_assert_uint_eq(fake_get(f, &f->maps), 1);
	s = stats(zc);
	ck_assert_uint_eq(s.registrations, 1);
	ck_assert_uint_eq(s.registered_bytes, 256 * KiB + 5);
	ck_assert_uint_eq(s.refused, 0);

	/* Copies move the right bytes to the right place and count them. */
	placefs_error_clear(&err);
	ck_assert_msg(placefs_zerocopy_copy(zc, z1, fd1, chunks, 2, 100, 7, 4096, &err) == 0, "%s",
	              err.msg);
	for (i = 0; i < 4096; i++)
		ck_assert_uint_eq(f->ring[7 + i], pat(100 + i, 1));
	ck_assert_int_eq(placefs_zerocopy_copy(zc, z2, fd2, chunks, 1, 256 * KiB, 0, 5, &err), 0);
	for (i = 0; i < 5; i++)
		ck_assert_uint_eq(f->ring[i], pat(256 * KiB + i, 1));
	ck_assert_uint_eq(stats(zc).bytes, 4096 + 5);
	/* A range outside the registered shard is refused before the device sees it. */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_zerocopy_copy(zc, z1, fd1, chunks, 1, 256 * KiB, 0, 6, &err),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "outside the"));
	ck_assert_uint_eq(fake_get(f, &f->copies), 2);
	ck_assert_uint_eq(stats(zc).bytes, 4096 + 5);

	/* A range past the registered end goes to pread() (which reports it). */
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fd1, 256 * KiB, 6));
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fd1, UINT64_MAX, 1));

	/* A ready shard stays registered after its last use. */
	placefs_zerocopy_put(zc, z1);
	placefs_zerocopy_put(zc, z2);
	ck_assert_uint_eq(fake_get(f, &f->unmaps), 0);
	ck_assert_uint_eq(stats(zc).registered_bytes, 256 * KiB + 5);
	z1 = placefs_zerocopy_acquire(zc, fd1, 0, 1);
	ck_assert_ptr_eq(z1, z2);
	placefs_zerocopy_put(zc, z1);
	ck_assert_uint_eq(fake_get(f, &f->maps), 1);
	placefs_zerocopy_note(zc, note, sizeof(note));
	ck_assert_str_eq(note, "");

	/* free unregisters what is left. */
	placefs_zerocopy_free(zc);
	ck_assert_uint_eq(f->unmaps, 1);
	ck_assert_uint_eq(f->unmapped, 256 * KiB + 5);
	close(fd1);
	close(fd2);
	free(f);
	free(a);
	free(empty);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * The cap: a shard that would take the registered total over it is refused
 * for good. A stale shard is unregistered by its last use, which gives its
 * bytes back to the cap.
 */
START_TEST(test_cap_and_stale)
{
	char *dir = tu_mkdtemp();
	char *a = shard(dir, "a", 64 * KiB, 1);
	char *b = shard(dir, "b", 64 * KiB, 2);
	char *c = shard(dir, "c", 64 * KiB, 3);
	struct placefs_zerocopy_src *za, *za2, *zc_src;
	struct placefs_zerocopy *zc;
	struct placefs_zerocopy_stats s;
	struct placefs_error err;
	struct fake *f = malloc(sizeof(*f));
	int fa, fb, fc;
	char note[256];

	ck_assert_ptr_nonnull(f);
	fake_init(f);
	zc = fake_registry(f, 100 * KiB); /* room for one shard of 64 KiB */
	fa = open_ro(a);
	fb = open_ro(b);
	fc = open_ro(c);

	za = placefs_zerocopy_acquire(zc, fa, 0, 64 * KiB);
	ck_assert_ptr_nonnull(za);
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fb, 0, 10));
	s = stats(zc);
	ck_assert_uint_eq(s.registrations, 1);
	ck_assert_uint_eq(s.refused, 1);
	ck_assert_uint_eq(s.registered_bytes, 64 * KiB);
	placefs_zerocopy_note(zc, note, sizeof(note));
	ck_assert_msg(strstr(note, "fake:0: zero-copy registrations would pin more than 102400 "
	                           "bytes; further shards use bounce buffers") != NULL,
	              "%s", note);
	/* Refused for good: not tried again, not counted again. */
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fb, 0, 10));
	ck_assert_uint_eq(stats(zc).refused, 1);
	ck_assert_uint_eq(fake_get(f, &f->maps), 1);

	/* Two uses of a; the shard changes; the copy fails, once counted as stale. */
	za2 = placefs_zerocopy_acquire(zc, fa, 0, 64 * KiB);
	ck_assert_ptr_eq(za, za2);
	ck_assert_int_eq(placefs_zerocopy_copy(zc, za, fa, chunks, 2, 0, 0, 64 * KiB, &err), 0);
	touch_later(a);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_zerocopy_copy(zc, za, fa, chunks, 2, 0, 0, 64 * KiB, &err), -EIO);
	ck_assert_str_eq(err.msg, "the shard changed (size or mtime) since it was registered for "
	                          "zero-copy staging; its bytes are not used");
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_zerocopy_copy(zc, za2, fa, chunks, 1, 0, 0, 16, &err), -EIO);
	s = stats(zc);
	ck_assert_uint_eq(s.stale, 1);
	ck_assert_uint_eq(s.bytes, 64 * KiB); /* only the copy before the change */
	ck_assert_uint_eq(fake_get(f, &f->copies), 3);
	/* Still registered while a use is held; the last use unregisters it. */
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fa, 0, 1));
	placefs_zerocopy_put(zc, za);
	ck_assert_uint_eq(fake_get(f, &f->unmaps), 0);
	ck_assert_uint_eq(stats(zc).registered_bytes, 64 * KiB);
	placefs_zerocopy_put(zc, za2);
	ck_assert_uint_eq(fake_get(f, &f->unmaps), 1);
	s = stats(zc);
	ck_assert_uint_eq(s.registered_bytes, 0);
	ck_assert_uint_eq(s.registrations, 1);
	ck_assert_uint_eq(s.refused, 1); /* staleness is counted in stale, not here */

	/* The cap has room again: a new shard registers; a and b stay refused. */
	zc_src = placefs_zerocopy_acquire(zc, fc, 0, 64 * KiB);
	ck_assert_ptr_nonnull(zc_src);
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fa, 0, 1));
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fb, 0, 1));
	s = stats(zc);
	ck_assert_uint_eq(s.registrations, 2);
	ck_assert_uint_eq(s.registered_bytes, 64 * KiB);
	ck_assert_int_eq(placefs_zerocopy_copy(zc, zc_src, fc, chunks, 1, 1, 0, 100, &err), 0);
	ck_assert_uint_eq(f->ring[0], pat(1, 3));
	placefs_zerocopy_put(zc, zc_src);

	placefs_zerocopy_free(zc);
	ck_assert_uint_eq(f->unmaps, 2);
	ck_assert_uint_eq(f->maps, 2);
	close(fa);
	close(fb);
	close(fc);
	free(f);
	free(a);
	free(b);
	free(c);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

/* A registration that fails refuses the shard, says why, and gives its bytes back to the cap. */
START_TEST(test_registration_fails)
{
	char *dir = tu_mkdtemp();
	char *a = shard(dir, "a", 64 * KiB, 1);
	char *b = shard(dir, "b", 64 * KiB, 2);
	struct placefs_zerocopy_src *z;
	struct placefs_zerocopy *zc;
	struct placefs_zerocopy_stats s;
	struct placefs_error err;
	struct fake *f = malloc(sizeof(*f));
	int fa, fb;
	char note[256];

	ck_assert_ptr_nonnull(f);
	fake_init(f);
	zc = fake_registry(f, 100 * KiB);
	fa = open_ro(a);
	fb = open_ro(b);
	f->map_rc = -EOPNOTSUPP;
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fa, 0, 10));
	s = stats(zc);
	ck_assert_uint_eq(s.registrations, 0);
	ck_assert_uint_eq(s.refused, 1);
	ck_assert_uint_eq(s.registered_bytes, 0);
	ck_assert_uint_eq(s.registration_ns, 0);
	placefs_zerocopy_note(zc, note, sizeof(note));
	ck_assert_str_eq(note, "zero-copy refused for a shard, which uses bounce buffers instead: "
	                       "fake: cannot register");
	/* Not tried again. */
	f->map_rc = 0;
	ck_assert_ptr_null(placefs_zerocopy_acquire(zc, fa, 0, 10));
	ck_assert_uint_eq(fake_get(f, &f->maps), 1);
	/* The failed one holds nothing of the cap: b fits. */
	z = placefs_zerocopy_acquire(zc, fb, 0, 10);
	ck_assert_ptr_nonnull(z);
	s = stats(zc);
	ck_assert_uint_eq(s.registrations, 1);
	ck_assert_uint_eq(s.registered_bytes, 64 * KiB);
	/* The note keeps the first refusal. */
	placefs_zerocopy_note(zc, note, 12);
	ck_assert_str_eq(note, "zero-copy r");
	/* A device error fails the copy, counts nothing and leaves the shard registered. */
	f->copy_rc = -EIO;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_zerocopy_copy(zc, z, fb, chunks, 1, 0, 0, 10, &err), -EIO);
	ck_assert_str_eq(err.msg, "fake: the DMA failed");
	f->copy_rc = 0;
	s = stats(zc);
	ck_assert_uint_eq(s.bytes, 0);
	ck_assert_uint_eq(s.stale, 0);
	placefs_zerocopy_put(zc, z);
	ck_assert_uint_eq(fake_get(f, &f->unmaps), 0);
	z = placefs_zerocopy_acquire(zc, fb, 0, 10);
	ck_assert_ptr_nonnull(z);
	ck_assert_int_eq(placefs_zerocopy_copy(zc, z, fb, chunks, 1, 0, 0, 10, &err), 0);
	ck_assert_uint_eq(stats(zc).bytes, 10);
	placefs_zerocopy_put(zc, z);
	placefs_zerocopy_free(zc);
	ck_assert_uint_eq(f->unmaps, 1);
	close(fa);
	close(fb);
	free(f);
	free(a);
	free(b);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

struct racer {
	struct placefs_zerocopy *zc;
	const char *path;
	struct placefs_zerocopy_src *got;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	int fd = open(r->path, O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		r->got = placefs_zerocopy_acquire(r->zc, fd, 0, 4096);
		close(fd);
	}
	return NULL;
}

/* Threads that want the same new shard at once: one registers, the others wait for it. */
START_TEST(test_concurrent_first_use)
{
	char *dir = tu_mkdtemp();
	char *a = shard(dir, "a", 64 * KiB, 1);
	struct racer r[8];
	pthread_t tid[8];
	struct placefs_zerocopy *zc;
	struct placefs_zerocopy_stats s;
	struct fake *f = malloc(sizeof(*f));
	unsigned i;

	ck_assert_ptr_nonnull(f);
	fake_init(f);
	f->map_ms = 100;
	zc = fake_registry(f, 0);
	for (i = 0; i < 8; i++) {
		r[i].zc = zc;
		r[i].path = a;
		r[i].got = NULL;
		ck_assert_int_eq(pthread_create(&tid[i], NULL, race, &r[i]), 0);
	}
	for (i = 0; i < 8; i++)
		pthread_join(tid[i], NULL);
	ck_assert_uint_eq(f->maps, 1);
	for (i = 0; i < 8; i++) {
		ck_assert_ptr_nonnull(r[i].got);
		ck_assert_ptr_eq(r[i].got, r[0].got);
	}
	s = stats(zc);
	ck_assert_uint_eq(s.registrations, 1);
	ck_assert_uint_ge(s.registration_ns, 100ULL * 1000 * 1000);
	for (i = 0; i < 8; i++)
		placefs_zerocopy_put(zc, r[i].got);
	ck_assert_uint_eq(f->unmaps, 0);
	placefs_zerocopy_free(zc);
	ck_assert_uint_eq(f->unmaps, 1);
	free(f);
	free(a);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

static Suite *zerocopy_suite(void)
{
	Suite *s = suite_create("zerocopy");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_host_unsupported);
	tcase_add_test(tc, test_copy_ctx_shared);
	tcase_add_test(tc, test_lookup_and_uses);
	tcase_add_test(tc, test_cap_and_stale);
	tcase_add_test(tc, test_registration_fails);
	tcase_add_test(tc, test_concurrent_first_use);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(zerocopy_suite());
}
