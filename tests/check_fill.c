/* SPDX-License-Identifier: MIT */
/*
 * check_fill: lib/staging/fill.c. Copies from real files (tmpfs /dev/shm when it is
 * there, and the test's directory) into shared-memory objects, by every
 * method and thread count, compared byte for byte with the source; a source
 * that ends early, a destination that cannot take the bytes, cancel and
 * deadline, overflow, many concurrent copies, and the shm opening rules.
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
#include <unistd.h>

#include "common/clock.h"
#include "staging/fill.h"
#include "common/io.h"
#include "testutil.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)

static char *dir;

static void setup(void)
{
	dir = tu_mkdtemp();
}

static void teardown(void)
{
	tu_rmtree(dir);
	free(dir);
}

/* A source file of n pattern bytes (byte i = f(i)), open for reading. */
static int make_source(const char *name, uint64_t n, uint8_t **copy)
{
	char *p = tu_path(dir, name);
	uint8_t *b = malloc(n ? n : 1);
	uint64_t i;
	int fd;

	ck_assert_ptr_nonnull(b);
	for (i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 131 + (i >> 12) * 7 + 3);
	tu_write_file(p, b, n);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	free(p);
	*copy = b;
	return fd;
}

/* A shm object of n bytes owned by us; its name goes into name. */
static int make_shm(char name[64], uint64_t n)
{
	static unsigned seq;
	int fd;

	snprintf(name, 64, "/placefs-check-fill-%d-%u", (int)getpid(), seq++);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)n), 0);
	return fd;
}

static void check_bytes(int fd, uint64_t off, const uint8_t *want, uint64_t n)
{
	uint8_t *got = malloc(n ? n : 1);

	ck_assert_ptr_nonnull(got);
	ck_assert_int_eq(placefs_io_pread_full(fd, got, n, off), (ssize_t)n);
	ck_assert_msg(memcmp(got, want, n) == 0, "copied bytes differ from the source");
	free(got);
}

static struct placefs_filler *filler(unsigned threads, uint64_t piece, enum placefs_fill_method m)
{
	struct placefs_fill_config c = {.threads = threads, .piece_bytes = piece, .method = m};
	struct placefs_filler *f = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_filler_create(&c, &f, &err) == 0, "%s", err.msg);
	return f;
}

/* Every method x thread count x size, at unaligned offsets, equals the source. */
START_TEST(test_copy_exact)
{
	static const enum placefs_fill_method ms[] = {PLACEFS_FILL_AUTO, PLACEFS_FILL_MAP,
	                                              PLACEFS_FILL_SPLICE, PLACEFS_FILL_PREAD};
	static const unsigned ts[] = {0, 1, 3}; /* 0: the default */
	static const uint64_t sizes[] = {1,           4095, 64 * KiB, 64 * KiB + 1, 1 * MiB + 333,
	                                 5 * MiB + 17};
	uint64_t total = 6 * MiB;
	uint8_t *src;
	int sfd = make_source("src", total, &src);
	size_t a, b, c;

	for (a = 0; a < 4; a++)
		for (b = 0; b < 3; b++) {
			struct placefs_filler *f = filler(ts[b], 64 * KiB, ms[a]);
			struct placefs_fill_stats s;
			uint64_t want_bytes = 0;

			for (c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
				uint64_t n = sizes[c], so = 7 + c * 1000, doff = 3 + c;
				struct placefs_error err;
				char name[64];
				int dfd = make_shm(name, n + doff + 5);

				placefs_error_clear(&err);
				ck_assert_msg(placefs_filler_copy(f, sfd, so, dfd, doff, n, NULL,
				                                  &err) == 0,
				              "method %d threads %u size %llu: %s", (int)ms[a],
				              ts[b], (unsigned long long)n, err.msg);
				check_bytes(dfd, doff, src + so, n);
				want_bytes += n;
				close(dfd);
				shm_unlink(name);
			}
			placefs_filler_stats(f, &s);
			ck_assert_uint_eq(s.copies, sizeof(sizes) / sizeof(sizes[0]));
			ck_assert_uint_eq(s.bytes, want_bytes);
			ck_assert_uint_eq(s.errors, 0);
			if (ts[b])
				ck_assert_uint_eq(s.threads, ts[b]);
			else
				ck_assert_uint_ge(s.threads, 2);
			ck_assert_uint_eq(s.mapped + s.spliced + s.bounced, want_bytes);
			/* A shm object maps; a regular file splices. */
			if (ms[a] == PLACEFS_FILL_PREAD)
				ck_assert_uint_eq(s.bounced, want_bytes);
			else if (ms[a] == PLACEFS_FILL_SPLICE)
				ck_assert_uint_eq(s.spliced, want_bytes);
			else
				ck_assert_uint_eq(s.mapped, want_bytes);
			placefs_filler_free(f);
		}
	close(sfd);
	free(src);
}
END_TEST

/* A source that ends before the range does: -EIO naming the tensor, never success. */
START_TEST(test_short_source)
{
	static const enum placefs_fill_method ms[] = {PLACEFS_FILL_MAP, PLACEFS_FILL_SPLICE,
	                                              PLACEFS_FILL_PREAD};
	uint8_t *src;
	int sfd = make_source("short", 3 * MiB, &src);
	size_t a;

	for (a = 0; a < 3; a++) {
		struct placefs_filler *f = filler(2, 64 * KiB, ms[a]);
		struct placefs_fill_opts o = {.name = "tensor \"w\""};
		struct placefs_error err;
		char name[64];
		int dfd = make_shm(name, 4 * MiB);

		placefs_error_clear(&err);
		ck_assert_int_eq(
		        placefs_filler_copy(f, sfd, 1 * MiB, dfd, 0, 2 * MiB + 1, &o, &err), -EIO);
		ck_assert_msg(strstr(err.msg, "tensor \"w\"") && strstr(err.msg, "early"), "%s",
		              err.msg);
		close(dfd);
		shm_unlink(name);
		placefs_filler_free(f);
	}
	close(sfd);
	free(src);
}
END_TEST

/* A destination that cannot take the bytes (read-only descriptor): the errno, not success. */
START_TEST(test_bad_destination)
{
	uint8_t *src;
	int sfd = make_source("s", 1 * MiB, &src);
	struct placefs_filler *f = filler(2, 64 * KiB, PLACEFS_FILL_AUTO);
	struct placefs_error err;
	char name[64];
	int dfd = make_shm(name, 1 * MiB), ro;

	ro = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	ck_assert_int_ge(ro, 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 0, ro, 0, 1 * MiB, NULL, &err), -EBADF);
	ck_assert_msg(strstr(err.msg, "cannot write the destination"), "%s", err.msg);
	/* The filler still works afterwards (the broken pipe was not reused). */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 0, dfd, 0, 1 * MiB, NULL, &err), 0);
	check_bytes(dfd, 0, src, 1 * MiB);
	close(ro);
	close(dfd);
	shm_unlink(name);
	placefs_filler_free(f);
	close(sfd);
	free(src);
}
END_TEST

/*
 * A destination shorter than the range (as when its owner shrinks it during
 * the copy): the mapped path gets EFAULT from the kernel, not a SIGBUS, and
 * says the destination shrank; the bytes that fit are no success either.
 */
START_TEST(test_short_destination)
{
	uint8_t *src;
	int sfd = make_source("sd", 2 * MiB, &src);
	struct placefs_filler *f = filler(2, 64 * KiB, PLACEFS_FILL_MAP);
	struct placefs_fill_opts o = {.name = "tensor \"e\""};
	struct placefs_error err;
	char name[64], want[128];
	int dfd = make_shm(name, 1 * MiB);

	o.dest_name = name;
	snprintf(want, sizeof(want),
	         "destination shm \"%s\" shrank during the copy (to 1048576 bytes", name);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 0, dfd, 0, 2 * MiB, &o, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "tensor \"e\""), "%s", err.msg);
	/* Still serves a copy that fits. */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 5, dfd, 7, 1 * MiB - 7, &o, &err), 0);
	check_bytes(dfd, 7, src + 5, 1 * MiB - 7);
	close(dfd);
	shm_unlink(name);
	placefs_filler_free(f);
	close(sfd);
	free(src);
}
END_TEST

struct shrinker {
	int fd;
	uint64_t n;
	int stop;
};

/* Shrinks the destination to 0 and grows it back, again and again, until told to stop. */
static void *shrink_main(void *arg)
{
	struct shrinker *s = arg;

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		if (ftruncate(s->fd, 0) != 0 || ftruncate(s->fd, (off_t)s->n) != 0)
			break;
	}
	return NULL;
}

/*
 * A destination its owner shrinks to 0 and grows back while copies into it
 * run: each copy succeeds or fails with EINVAL saying the destination (by
 * its name) shrank during the copy; never ENOSPC, although the destination
 * has its full size again by the time the failure is looked at.
 */
START_TEST(test_shrink_during_copy)
{
	uint8_t *src;
	int sfd = make_source("sh", 8 * MiB, &src);
	struct placefs_filler *f = filler(2, 256 * KiB, PLACEFS_FILL_MAP);
	struct placefs_fill_opts o = {.name = "tensor \"s\""};
	struct placefs_error err;
	struct shrinker sh;
	pthread_t t;
	char name[64], want[128];
	unsigned i, ok = 0, shrank = 0;
	uint64_t t0 = placefs_clock_ns();
	int rc;

	sh.fd = make_shm(name, 8 * MiB);
	sh.n = 8 * MiB;
	sh.stop = 0;
	o.dest_name = name;
	snprintf(want, sizeof(want), "destination shm \"%s\" shrank during the copy", name);
	ck_assert_int_eq(pthread_create(&t, NULL, shrink_main, &sh), 0);
	/* At most 2 s; enough rounds to see both outcomes, far more than needed to see a failure. */
	for (i = 0; i < 2000 && (shrank < 20 || i < 200) &&
	            placefs_clock_ns() - t0 < 2000ULL * 1000 * 1000;
	     i++) {
		placefs_error_clear(&err);
		rc = placefs_filler_copy(f, sfd, 0, sh.fd, 0, 8 * MiB, &o, &err);
		if (rc == 0) {
			ok++;
			continue;
		}
		ck_assert_msg(rc == -EINVAL, "copy %u: %d (%s)", i, rc, err.msg);
		ck_assert_msg(strstr(err.msg, want), "copy %u: %s", i, err.msg);
		shrank++;
	}
	__atomic_store_n(&sh.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	ck_assert_msg(shrank > 0, "%u copies, none saw the shrink", i);
	close(sh.fd);
	shm_unlink(name);
	placefs_filler_free(f);
	close(sfd);
	free(src);
}
END_TEST

START_TEST(test_cancel_deadline_overflow)
{
	uint8_t *src;
	int sfd = make_source("c", 2 * MiB, &src);
	struct placefs_filler *f = filler(1, 64 * KiB, PLACEFS_FILL_AUTO);
	struct placefs_fill_opts o = {0};
	struct placefs_error err;
	struct timespec past = placefs_clock_deadline(0);
	int cancel = 1;
	char name[64];
	int dfd = make_shm(name, 2 * MiB);

	o.cancel = &cancel;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 0, dfd, 0, 2 * MiB, &o, &err), -EINTR);
	o.cancel = NULL;
	o.deadline = &past;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 0, dfd, 0, 2 * MiB, &o, &err), -ETIMEDOUT);
	ck_assert_msg(strstr(err.msg, "timed out"), "%s", err.msg);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, UINT64_MAX - 5, dfd, 0, 10, NULL, &err),
	                 -EINVAL);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 0, dfd, UINT64_MAX, 1, NULL, &err), -EINVAL);
	ck_assert_int_eq(placefs_filler_copy(f, sfd, 0, dfd, 0, 0, NULL, &err), 0);
	close(dfd);
	shm_unlink(name);
	placefs_filler_free(f);
	close(sfd);
	free(src);
}
END_TEST

struct conc {
	struct placefs_filler *f;
	int sfd;
	const uint8_t *src;
	unsigned k;
	int rc;
};

static void *conc_main(void *arg)
{
	struct conc *c = arg;
	struct placefs_error err;
	unsigned i;

	for (i = 0; i < 8 && c->rc == 0; i++) {
		uint64_t n = (uint64_t)(c->k * 97 + i * 31) * KiB + i + 1, off = c->k * 4096 + i;
		char name[64];
		int dfd = make_shm(name, n);
		uint8_t *got = malloc(n);

		placefs_error_clear(&err);
		c->rc = placefs_filler_copy(c->f, c->sfd, off, dfd, 0, n, NULL, &err);
		if (c->rc == 0 && (placefs_io_pread_full(dfd, got, n, 0) != (ssize_t)n ||
		                   memcmp(got, c->src + off, n)))
			c->rc = -EILSEQ;
		free(got);
		close(dfd);
		shm_unlink(name);
	}
	return NULL;
}

/* Eight callers at once share three pool threads; every copy exact. */
START_TEST(test_concurrent)
{
	uint8_t *src;
	int sfd = make_source("conc", 4 * MiB, &src);
	struct placefs_filler *f = filler(3, 64 * KiB, PLACEFS_FILL_AUTO);
	struct conc c[8];
	pthread_t t[8];
	struct placefs_fill_stats s;
	unsigned i;

	for (i = 0; i < 8; i++) {
		c[i] = (struct conc){.f = f, .sfd = sfd, .src = src, .k = i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, conc_main, &c[i]), 0);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(c[i].rc == 0, "caller %u: %d", i, c[i].rc);
	}
	placefs_filler_stats(f, &s);
	ck_assert_uint_eq(s.copies, 64);
	ck_assert_uint_eq(s.busy_copies, 0);
	placefs_filler_free(f);
	close(sfd);
	free(src);
}
END_TEST

START_TEST(test_config)
{
	struct placefs_fill_config c = {0};
	struct placefs_filler *f = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	c.piece_bytes = 1000;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_create(&c, &f, &err), -EINVAL);
	ck_assert_ptr_null(f);
	c.piece_bytes = 0;
	c.threads = PLACEFS_FILL_THREADS_MAX + 1;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_create(&c, &f, &err), -EINVAL);
	c.threads = 0;
	setenv("PLACEFS_FILL_THREADS", "x", 1);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_create(&c, &f, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "PLACEFS_FILL_THREADS"), "%s", err.msg);
	setenv("PLACEFS_FILL_THREADS", "5", 1);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_create(&c, &f, &err), 0);
	{
		struct placefs_fill_stats s;

		placefs_filler_stats(f, &s);
		ck_assert_uint_eq(s.threads, 5);
		ck_assert_uint_eq(s.piece_bytes, PLACEFS_FILL_PIECE_DEFAULT);
	}
	placefs_filler_free(f);
	unsetenv("PLACEFS_FILL_THREADS");
	setenv("PLACEFS_FILL_METHOD", "mmap", 1);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_filler_create(&c, &f, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "PLACEFS_FILL_METHOD"), "%s", err.msg);
	unsetenv("PLACEFS_FILL_METHOD");
	placefs_filler_free(NULL);
}
END_TEST

START_TEST(test_open_shm)
{
	struct placefs_error err;
	char name[64];
	int dfd = make_shm(name, 4096), fd;

	placefs_error_clear(&err);
	fd = placefs_fill_open_shm(name, 1, (unsigned)getuid(), 4096, &err);
	ck_assert_msg(fd >= 0, "%s", err.msg);
	close(fd);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_fill_open_shm(name, 1, (unsigned)getuid() + 1, 4096, &err),
	                 -EACCES);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_fill_open_shm(name, 1, (unsigned)getuid(), 4097, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "fewer than"), "%s", err.msg);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_fill_open_shm("/placefs-check-fill-none", 0, 0, 1, &err), -ENOENT);
	close(dfd);
	shm_unlink(name);
}
END_TEST

static Suite *fill_suite(void)
{
	Suite *s = suite_create("fill");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_copy_exact);
	tcase_add_test(tc, test_short_source);
	tcase_add_test(tc, test_bad_destination);
	tcase_add_test(tc, test_short_destination);
	tcase_add_test(tc, test_shrink_during_copy);
	tcase_add_test(tc, test_cancel_deadline_overflow);
	tcase_add_test(tc, test_concurrent);
	tcase_add_test(tc, test_config);
	tcase_add_test(tc, test_open_shm);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(fill_suite());
}
