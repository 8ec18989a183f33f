/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "staging/backend.h"
#include "staging/backend_i.h" /* placefs__shm_random, to force name collisions */
#include "common/clock.h"
#include "testutil.h"

static uint8_t pat(uint64_t i, unsigned seed)
{
	return (uint8_t)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
}

static struct placefs_backend *mk(const char *spec, uint64_t ring, uint64_t hb)
{
	struct placefs_backend *be = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_backend_create(tu_device(spec), ring, hb, &be, &err) == 0, "%s: %s",
	              spec, err.msg);
	ck_assert_ptr_nonnull(be);
	return be;
}

/* A test-owned shm object of `size` bytes, zero-filled; returns its mapping. */
static uint8_t *shm_make(const char *name, uint64_t size)
{
	int fd;
	void *p;

	shm_unlink(name);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	close(fd);
	return p;
}

/* Fills n bytes of chunk c with pattern `seed` and copies them to ring_off. */
static void push(struct placefs_backend *be, unsigned c, uint64_t ring_off, uint64_t n,
                 unsigned seed)
{
	struct placefs_error err;
	uint8_t *p = placefs_backend_chunk(be, c);
	uint64_t i;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < n; i++)
		p[i] = pat(i, seed);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_backend_chunk_to_ring(be, c, ring_off, n, &err) == 0, "%s", err.msg);
	ck_assert_msg(placefs_backend_chunk_wait(be, c, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(placefs_backend_chunk_poll(be, c), 1);
}

static void expect_pat(const uint8_t *p, uint64_t n, unsigned seed)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		if (p[i] != pat(i, seed))
			ck_abort_msg("byte %llu: %u, want %u", (unsigned long long)i, p[i],
			             pat(i, seed));
}

START_TEST(test_create_none_and_bad)
{
	struct placefs_backend *be = (struct placefs_backend *)1;
	struct placefs_error err;

	ck_assert_int_eq(placefs_backend_create(tu_device("none"), 1 << 20, 0, &be, NULL), 0);
	ck_assert_ptr_null(be);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_create((struct placefs_device){PLACEFS_DEVICE_CUDA, 5000},
	                                        1 << 20, 0, &be, &err),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "index 5000"));
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_create(tu_device("host"), 0, 0, &be, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "ring size"));
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_create(tu_device("host"), 1 << 20, 4096, &be, &err),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "host_buffer=4096"));
	ck_assert_int_eq(placefs_backend_create(tu_device("host"), 1 << 20,
	                                        PLACEFS_HOST_BUFFER_MAX + 1, &be, NULL),
	                 -EINVAL);
	ck_assert_ptr_null(be);
	placefs_backend_free(NULL);
}
END_TEST

START_TEST(test_host_info_and_chunks)
{
	struct placefs_backend_info info;
	struct placefs_backend *be;
	char prefix[64];
	int fd;

	be = mk("host", 1 << 20, 64 << 10);
	placefs_backend_get_info(be, &info);
	ck_assert_int_eq(info.device.kind, PLACEFS_DEVICE_HOST);
	ck_assert_int_eq(info.device.index, -1);
	ck_assert_uint_eq(info.ring_bytes, 1 << 20);
	ck_assert_uint_eq(info.chunk_bytes, 4096);
	ck_assert_uint_eq(info.nchunks, 16);
	ck_assert_uint_eq(info.host_buffer_bytes, 64 << 10);
	ck_assert_uint_eq(info.handle_kind, PLACEFS_IOC_HANDLE_HOST_SHM);
	snprintf(prefix, sizeof(prefix), "/placefs-%ld-", (long)getpid());
	ck_assert_msg(strncmp((char *)info.handle, prefix, strlen(prefix)) == 0, "%s",
	              (char *)info.handle);
	ck_assert_uint_eq(info.handle_bytes, strlen((char *)info.handle) + 1);
	ck_assert_ptr_nonnull(strstr(info.name, (char *)info.handle));
	ck_assert_ptr_null(placefs_backend_chunk(be, 16));
	ck_assert_uint_eq((uintptr_t)placefs_backend_chunk(be, 1) % 4096, 0);
	ck_assert_ptr_eq((uint8_t *)placefs_backend_chunk(be, 1),
	                 (uint8_t *)placefs_backend_chunk(be, 0) + 4096);
	placefs_backend_free(be);
	/* The ring's name is gone with the backend. */
	fd = shm_open((char *)info.handle, O_RDONLY, 0);
	ck_assert_int_eq(fd, -1);
	ck_assert_int_eq(errno, ENOENT);

	/* Chunk policy: host_buffer / 32, 4 KiB multiples, whole chunks only. */
	be = mk("host", 4096, 0);
	placefs_backend_get_info(be, &info);
	ck_assert_uint_eq(info.chunk_bytes, 2 << 20);
	ck_assert_uint_eq(info.nchunks, 32);
	ck_assert_uint_eq(info.host_buffer_bytes, PLACEFS_HOST_BUFFER_DEFAULT_HOST);
	placefs_backend_free(be);
	be = mk("host", 4096, 100 << 10);
	placefs_backend_get_info(be, &info);
	ck_assert_uint_eq(info.chunk_bytes, 4096);
	ck_assert_uint_eq(info.nchunks, 25);
	placefs_backend_free(be);
	be = mk("host", 4096, PLACEFS_HOST_BUFFER_MIN);
	placefs_backend_get_info(be, &info);
	ck_assert_uint_eq(info.nchunks, 2);
	ck_assert_uint_le(info.host_buffer_bytes, PLACEFS_HOST_BUFFER_MIN);
	placefs_backend_free(be);
	be = mk("host", 4096, 600ULL << 20);
	placefs_backend_get_info(be, &info);
	ck_assert_uint_eq(info.chunk_bytes, 16 << 20);
	ck_assert_uint_eq(info.nchunks, 37);
	ck_assert_uint_le(info.host_buffer_bytes, 600ULL << 20);
	placefs_backend_free(be);
	/* $PLACEFS_CHUNK_BYTES overrides the policy, within its bounds. */
	setenv("PLACEFS_CHUNK_BYTES", "1M", 1);
	be = mk("host", 4096, 0);
	placefs_backend_get_info(be, &info);
	ck_assert_uint_eq(info.chunk_bytes, 1 << 20);
	ck_assert_uint_eq(info.nchunks, 64);
	placefs_backend_free(be);
	{
		static const char *const bad[] = {"3000", "32M", "1M", "lots", "6K"};
		static const uint64_t hb[] = {0, 0, 512 << 10, 0, 0};
		struct placefs_error err;
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			setenv("PLACEFS_CHUNK_BYTES", bad[i], 1);
			be = NULL;
			placefs_error_clear(&err);
			ck_assert_int_eq(
			        placefs_backend_create(tu_device("host"), 4096, hb[i], &be, &err),
			        -EINVAL);
			ck_assert_ptr_null(be);
			ck_assert_msg(strstr(err.msg, "PLACEFS_CHUNK_BYTES") != NULL, "%s",
			              err.msg);
		}
	}
	unsetenv("PLACEFS_CHUNK_BYTES");
}
END_TEST

START_TEST(test_host_ring_export)
{
	struct placefs_backend_info info;
	struct placefs_backend *be;
	struct placefs_error err;
	uint8_t *view, *buf;
	int fd;

	be = mk("host", 100000, 64 << 10);
	placefs_backend_get_info(be, &info);
	push(be, 0, 0, 4096, 1);
	push(be, 3, 50000, 1000, 2);
	push(be, 15, 100000 - 4096, 4096, 3);

	/* Another mapping of the exported name sees the bytes. */
	fd = shm_open((char *)info.handle, O_RDONLY, 0);
	ck_assert_int_ge(fd, 0);
	view = mmap(NULL, 100000, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(view, MAP_FAILED);
	close(fd);
	expect_pat(view, 4096, 1);
	expect_pat(view + 50000, 1000, 2);
	expect_pat(view + 100000 - 4096, 4096, 3);

	buf = malloc(4096);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_read_ring(be, 50000, buf, 1000, &err), 0);
	expect_pat(buf, 1000, 2);
	ck_assert_int_eq(placefs_backend_read_ring(be, 0, buf, 0, &err), 0);

	/* Bounds. */
	ck_assert_int_eq(placefs_backend_read_ring(be, 99999, buf, 2, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "outside the 100000-byte ring"));
	ck_assert_int_eq(placefs_backend_read_ring(be, UINT64_MAX, buf, 2, NULL), -EINVAL);
	ck_assert_int_eq(placefs_backend_chunk_to_ring(be, 16, 0, 1, NULL), -EINVAL);
	ck_assert_int_eq(placefs_backend_chunk_to_ring(be, 0, 0, 4097, NULL), -EINVAL);
	ck_assert_int_eq(placefs_backend_chunk_to_ring(be, 0, 100000 - 100, 101, NULL), -EINVAL);
	ck_assert_int_eq(placefs_backend_chunk_wait(be, 16, NULL), -EINVAL);
	/* A failed copy changed nothing. */
	expect_pat(view + 100000 - 4096, 4096, 3);

	munmap(view, 100000);
	free(buf);
	placefs_backend_free(be);
}
END_TEST

START_TEST(test_host_dest_shm)
{
	struct placefs_backend *be;
	struct placefs_dest d;
	struct placefs_error err;
	char name[64];
	uint8_t *dst, *dst2;
	unsigned i;

	snprintf(name, sizeof(name), "/placefs-test-%ld-a", (long)getpid());
	dst = shm_make(name, 65536);
	be = mk("host", 1 << 20, 64 << 10);
	push(be, 0, 8192, 4096, 5);

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_dest_shm(&d, name, 1000, 65536, &err), 0);
	ck_assert_msg(placefs_backend_copy_out(be, 8192, 4096, &d, &err) == 0, "%s", err.msg);
	expect_pat(dst + 1000, 4096, 5);
	for (i = 0; i < 1000; i++)
		ck_assert_uint_eq(dst[i], 0);
	ck_assert_uint_eq(dst[5096], 0);

	/* Cached mapping, new bytes; the tail end of the destination exactly. */
	push(be, 1, 8192, 4096, 6);
	d.offset = 65536 - 4096;
	ck_assert_int_eq(placefs_backend_copy_out(be, 8192, 4096, &d, &err), 0);
	expect_pat(dst + 65536 - 4096, 4096, 6);

	/* The same name for a new object: the copy lands in the new one. */
	munmap(dst, 65536);
	dst2 = shm_make(name, 32768);
	d.offset = 0;
	d.size = 32768;
	ck_assert_msg(placefs_backend_copy_out(be, 8192, 4096, &d, &err) == 0, "%s", err.msg);
	expect_pat(dst2, 4096, 6);

	/* Bounds and errors. */
	d.offset = 32768 - 4095;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_copy_out(be, 8192, 4096, &d, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "destination too small"));
	d.offset = UINT64_MAX;
	ck_assert_int_eq(placefs_backend_copy_out(be, 8192, 4096, &d, NULL), -EINVAL);
	d.offset = 0;
	d.size = 32769; /* larger than the object */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_copy_out(be, 8192, 4096, &d, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "fewer than dest_size"));
	d.size = 32768;
	ck_assert_int_eq(placefs_backend_copy_out(be, (1 << 20) - 10, 4096, &d, NULL), -EINVAL);
	d.check_uid = 1;
	d.uid = getuid() + 1;
	ck_assert_int_eq(placefs_backend_copy_out(be, 8192, 4096, &d, NULL), -EACCES);
	d.uid = getuid();
	ck_assert_int_eq(placefs_backend_copy_out(be, 8192, 16, &d, NULL), 0);
	d.check_uid = 0;
	/* Zero bytes: checked, nothing touched. */
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 0, &d, NULL), 0);

	ck_assert_int_eq(shm_unlink(name), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_copy_out(be, 8192, 16, &d, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, name));

	/* Malformed handles. */
	d.handle_bytes = 3; /* not strlen + 1 */
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 16, &d, NULL), -EINVAL);
	ck_assert_int_eq(placefs_dest_shm(&d, "noslash", 0, 16, NULL), -EINVAL);
	ck_assert_int_eq(placefs_dest_shm(&d, "/a/b", 0, 16, NULL), -EINVAL);
	ck_assert_int_eq(placefs_dest_shm(&d, "/", 0, 16, NULL), -EINVAL);
	memset(name, 'x', sizeof(name));
	name[0] = '/';
	name[sizeof(name) - 1] = '\0';
	ck_assert_int_eq(placefs_dest_shm(&d, name, 0, 16, NULL), 0); /* 63 bytes: fine */
	{
		char big[PLACEFS_IOC_HANDLE_MAX + 8];

		memset(big, 'y', sizeof(big));
		big[0] = '/';
		big[sizeof(big) - 1] = '\0';
		ck_assert_int_eq(placefs_dest_shm(&d, big, 0, 16, NULL), -EINVAL);
	}
	memset(&d, 0, sizeof(d));
	d.kind = 77;
	d.size = 16;
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 16, &d, NULL), -EINVAL);

	/* CUDA IPC destinations need the CUDA backend. */
	{
		uint8_t h[64] = {1, 2, 3};

		ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, 63, 0, 16, NULL), -EINVAL);
		ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, 64, 0, 16, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_backend_copy_out(be, 0, 16, &d, &err), -EOPNOTSUPP);
		ck_assert_ptr_nonnull(strstr(err.msg, "host"));
		d.handle_bytes = 60;
		ck_assert_int_eq(placefs_backend_copy_out(be, 0, 16, &d, NULL), -EINVAL);
	}

	munmap(dst2, 32768);
	placefs_backend_free(be);
}
END_TEST

START_TEST(test_host_dest_cache_many)
{
	/* More distinct destinations than the cache holds: all still work. */
	struct placefs_backend *be = mk("host", 1 << 16, 64 << 10);
	struct placefs_dest d;
	char name[64];
	unsigned i;

	push(be, 0, 0, 256, 9);
	for (i = 0; i < 80; i++) {
		uint8_t *p;

		snprintf(name, sizeof(name), "/placefs-test-%ld-c%u", (long)getpid(), i);
		p = shm_make(name, 4096);
		ck_assert_int_eq(placefs_dest_shm(&d, name, 100, 4096, NULL), 0);
		ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0);
		expect_pat(p + 100, 256, 9);
		munmap(p, 4096);
		shm_unlink(name);
	}
	placefs_backend_free(be);
}
END_TEST

/* A pid that was just in use and is not any more: a child that exited and was reaped. */
static pid_t dead_pid(void)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return pid;
}

START_TEST(test_host_dest_sweep)
{
	/* Cached destinations go once unlinked or once their process is gone; not before. */
	pid_t gone_pid = dead_pid(); /* fork before allocating: the child owns nothing */
	struct placefs_backend *be = mk("host", 1 << 16, 64 << 10);
	struct placefs_dest d;
	char live[64], gone[64], dead[64];
	uint8_t *pl, *pg, *pd;

	push(be, 0, 0, 256, 3);
	snprintf(live, sizeof(live), "/placefs-test-%ld-sl", (long)getpid());
	snprintf(gone, sizeof(gone), "/placefs-test-%ld-sg", (long)getpid());
	snprintf(dead, sizeof(dead), "/placefs-test-%ld-sd", (long)getpid());
	pl = shm_make(live, 4096);
	pg = shm_make(gone, 4096);
	pd = shm_make(dead, 4096);
	ck_assert_int_eq(placefs_dest_shm(&d, live, 0, 4096, NULL), 0);
	d.pid = getpid();
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0);
	ck_assert_int_eq(placefs_dest_shm(&d, gone, 0, 4096, NULL), 0);
	d.pid = getpid();
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0);
	ck_assert_int_eq(placefs_dest_shm(&d, dead, 0, 4096, NULL), 0);
	d.pid = gone_pid;
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0);
	expect_pat(pd, 256, 3);
	ck_assert_uint_eq(placefs_backend_dest_count(be), 3);

	/* The process of `dead` has exited: its import goes; the others stay. */
	ck_assert_uint_eq(placefs_backend_sweep(be), 1);
	ck_assert_uint_eq(placefs_backend_dest_count(be), 2);
	/* `gone` unlinked by its owner (alive): its import goes too. */
	ck_assert_int_eq(shm_unlink(gone), 0);
	ck_assert_uint_eq(placefs_backend_sweep(be), 1);
	ck_assert_uint_eq(placefs_backend_dest_count(be), 1);
	ck_assert_uint_eq(placefs_backend_sweep(be), 0);
	/* The survivor still works, from its cached import. */
	push(be, 0, 0, 256, 4);
	ck_assert_int_eq(placefs_dest_shm(&d, live, 0, 4096, NULL), 0);
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0);
	expect_pat(pl, 256, 4);
	ck_assert_uint_eq(placefs_backend_dest_count(be), 1);
	ck_assert_uint_eq(placefs_backend_sweep(NULL), 0);

	munmap(pl, 4096);
	munmap(pg, 4096);
	munmap(pd, 4096);
	shm_unlink(live);
	shm_unlink(dead);
	placefs_backend_free(be);
}
END_TEST

/* What placefs_shm_remove_stale() reported about the two names a test expects. */
struct removed {
	const char *want[2];
	int seen[2];
};

static void count_removed(const char *name, uint64_t bytes, void *arg)
{
	struct removed *r = arg;
	int i;

	for (i = 0; i < 2; i++)
		if (strcmp(name, r->want[i]) == 0 && bytes == 4096)
			r->seen[i]++;
}

/* Makes /dev/shm/<name> afresh, 4096 bytes. */
static void shm_plant(const char *name)
{
	char shm[80];

	snprintf(shm, sizeof(shm), "/%s", name);
	munmap(shm_make(shm, 4096), 4096);
}

START_TEST(test_shm_remove_stale)
{
	/* Leftovers of dead processes go; live, locked and foreign names stay. */
	pid_t dp = dead_pid();
	char rmd[64], cli[64], self[64], locked[64], other[64], path[80], tmp[80];
	struct removed rem = {{NULL, NULL}, {0, 0}};
	struct placefs_error err;
	int fd, n, tries;

	snprintf(rmd, sizeof(rmd), "placefs-%ld-0", (long)dp);
	snprintf(cli, sizeof(cli), "placefs-client-%ld-12", (long)dp);
	snprintf(self, sizeof(self), "placefs-%ld-99", (long)getpid());
	snprintf(locked, sizeof(locked), "placefs-%ld-1", (long)dp);
	snprintf(other, sizeof(other), "placefs-test-%ld-0", (long)dp);
	shm_plant(self);
	shm_plant(other);
	/* Locked before it has its name: a daemon starting meanwhile must not take it. */
	snprintf(tmp, sizeof(tmp), "/dev/shm/%s.tmp", locked);
	snprintf(path, sizeof(path), "/dev/shm/%s", locked);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	ck_assert_int_eq(flock(fd, LOCK_SH), 0);
	ck_assert_int_eq(rename(tmp, path), 0);

	/*
	 * A placefs daemon of another test starting meanwhile may remove a
	 * dead pid's object first: plant again what is gone unreported, until
	 * this call has reported each (a few tries at most).
	 */
	rem.want[0] = rmd;
	rem.want[1] = cli;
	for (tries = 0; tries < 20 && !(rem.seen[0] && rem.seen[1]); tries++) {
		if (!rem.seen[0])
			shm_plant(rmd);
		if (!rem.seen[1])
			shm_plant(cli);
		placefs_error_clear(&err);
		n = placefs_shm_remove_stale(count_removed, &rem, &err);
		ck_assert_msg(n >= 0, "%s", err.msg);
	}
	ck_assert_int_eq(rem.seen[0], 1);
	ck_assert_int_eq(rem.seen[1], 1);
	snprintf(path, sizeof(path), "/dev/shm/%s", rmd);
	ck_assert_int_ne(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "/dev/shm/%s", cli);
	ck_assert_int_ne(access(path, F_OK), 0);
	{
		const char *kept[] = {self, locked, other};
		size_t i;

		for (i = 0; i < 3; i++) {
			snprintf(path, sizeof(path), "/dev/shm/%s", kept[i]);
			ck_assert_msg(access(path, F_OK) == 0, "%s was removed", kept[i]);
			unlink(path);
		}
	}
	close(fd);
}
END_TEST

/* ---- hostile shared memory (issue 14) ----------------------------------------- */

struct shrinker {
	int fd;
	uint64_t size;
	atomic_int stop;
	unsigned rounds;
};

static void *shrink_loop(void *arg)
{
	struct shrinker *s = arg;

	while (!atomic_load(&s->stop)) {
		if (ftruncate(s->fd, 0) != 0 || ftruncate(s->fd, (off_t)s->size) != 0)
			break;
		s->rounds++;
	}
	return NULL;
}

START_TEST(test_host_dest_shrunk_while_copying)
{
	/*
	 * The owner of a destination ftruncate()s it to 0 and back in a loop
	 * while copies run into it: each copy succeeds or fails with an errno,
	 * and this process (the daemon's part) never dies of SIGBUS.
	 */
	const uint64_t size = 4 << 20;
	struct placefs_backend *be = mk("host", size, 2 << 20);
	struct shrinker sh = {.size = size};
	struct placefs_error err;
	struct placefs_dest d;
	unsigned ok = 0, failed = 0, i;
	char name[64];
	pthread_t t;
	uint64_t end;
	uint8_t *p;
	int rc;

	for (i = 0; i < 64; i++)
		push(be, i % 16, (uint64_t)i * 65536, 65536, 3);
	snprintf(name, sizeof(name), "/placefs-test-%ld-shrink", (long)getpid());
	munmap(shm_make(name, size), size);
	sh.fd = shm_open(name, O_RDWR, 0);
	ck_assert_int_ge(sh.fd, 0);
	ck_assert_int_eq(placefs_dest_shm(&d, name, 0, size, NULL), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, shrink_loop, &sh), 0);
	end = placefs_clock_ns() + 1500000000ULL;
	for (i = 0; i < 400 || placefs_clock_ns() < end; i++) {
		if (i >= 4000)
			break;
		placefs_error_clear(&err);
		rc = placefs_backend_copy_out(be, 0, size, &d, &err);
		if (rc == 0) {
			ok++;
			continue;
		}
		ck_assert_msg(rc == -EINVAL || rc == -ENOSPC || rc == -EIO || rc == -EFAULT ||
		                      rc == -EFBIG,
		              "copy %u: %d %s", i, rc, err.msg);
		failed++;
	}
	atomic_store(&sh.stop, 1);
	pthread_join(t, NULL);
	ck_assert_uint_gt(sh.rounds, 0);
	ck_assert_uint_gt(ok + failed, 0);
	/* At rest, the destination takes the bytes again, exactly. */
	ck_assert_int_eq(ftruncate(sh.fd, (off_t)size), 0);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_backend_copy_out(be, 65536, 65536, &d, &err) == 0, "%s", err.msg);
	p = mmap(NULL, size, PROT_READ, MAP_SHARED, sh.fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	expect_pat(p, 65536, 3);
	munmap(p, size);
	close(sh.fd);
	shm_unlink(name);
	placefs_backend_free(be);
}
END_TEST

START_TEST(test_host_ring_reserved)
{
	/* Every page of the ring is allocated at creation: no SIGBUS later. */
	struct placefs_backend_info info;
	struct placefs_backend *be = mk("host", 3 << 20, 64 << 10);
	struct stat st;
	int fd;

	placefs_backend_get_info(be, &info);
	fd = shm_open((char *)info.handle, O_RDONLY, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, 3 << 20);
	ck_assert_msg((uint64_t)st.st_blocks * 512 >= (3 << 20),
	              "the ring has %lld bytes allocated of %d", (long long)st.st_blocks * 512,
	              3 << 20);
	close(fd);
	placefs_backend_free(be);
}
END_TEST

/*
 * The number of this process's host rings in /dev/shm ("placefs-<pid>-<r>");
 * the largest allocation among them into *most (NULL: not wanted).
 */
static unsigned own_rings_most(uint64_t *most)
{
	char prefix[32], path[300];
	struct dirent *de;
	struct stat st;
	unsigned n = 0;
	DIR *d = opendir("/dev/shm");

	ck_assert_ptr_nonnull(d);
	if (most)
		*most = 0;
	snprintf(prefix, sizeof(prefix), "placefs-%ld-", (long)getpid());
	while ((de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		n++;
		snprintf(path, sizeof(path), "/dev/shm/%s", de->d_name);
		if (most && stat(path, &st) == 0 && (uint64_t)st.st_blocks * 512 > *most)
			*most = (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return n;
}

static unsigned own_rings(void)
{
	return own_rings_most(NULL);
}

/* A backend made from a reservation: its ring is `ring` bytes, all allocated, and works. */
static struct placefs_backend *mk_reserved(uint64_t guess, uint64_t ring, uint64_t hb_reserve,
                                           uint64_t hb)
{
	struct placefs_host_reserve *r = NULL;
	struct placefs_backend_info info;
	struct placefs_backend *be = NULL;
	struct placefs_error err;
	uint8_t *back;
	struct stat st;
	unsigned before = own_rings();
	int fd;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_host_reserve_start(guess, hb_reserve, &r, &err) == 0, "%s", err.msg);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(own_rings(), before + 1);
	/* The thread's work done first, so that the cut below is what makes the size. */
	for (int i = 0; i < 500; i++) {
		uint64_t most;

		own_rings_most(&most);
		if (most >= guess)
			break;
		usleep(10000);
	}
	ck_assert_msg(placefs_backend_create_reserved(tu_device("host"), ring, hb, r, &be, &err) ==
	                      0,
	              "%s", err.msg);
	ck_assert_ptr_nonnull(be);
	/* The backend took the object: freeing the reservation leaves it. */
	placefs_host_reserve_free(r);
	ck_assert_uint_eq(own_rings(), before + 1);
	placefs_backend_get_info(be, &info);
	fd = shm_open((char *)info.handle, O_RDONLY, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, ring);
	ck_assert_msg((uint64_t)st.st_blocks * 512 >= ring, "%lld bytes allocated of %llu",
	              (long long)st.st_blocks * 512, (unsigned long long)ring);
	/* Cut to the ring: nothing reserved past it stays allocated. */
	ck_assert_msg((uint64_t)st.st_blocks * 512 <= ring + 4096, "%lld bytes allocated of %llu",
	              (long long)st.st_blocks * 512, (unsigned long long)ring);
	close(fd);
	/* Chunks and ring work end to end, at the ring's last bytes too. */
	ck_assert_uint_ge(info.host_buffer_bytes, 4096);
	push(be, 0, ring - info.chunk_bytes, info.chunk_bytes, 7);
	back = malloc(info.chunk_bytes);
	ck_assert_ptr_nonnull(back);
	ck_assert_msg(placefs_backend_read_ring(be, ring - info.chunk_bytes, back, info.chunk_bytes,
	                                        &err) == 0,
	              "%s", err.msg);
	expect_pat(back, info.chunk_bytes, 7);
	free(back);
	return be;
}

START_TEST(test_host_ring_reserved_ahead)
{
	struct placefs_host_reserve *r = NULL;
	struct placefs_backend *be, *be2;
	struct placefs_backend_info info, info2;
	struct placefs_error err;
	struct statvfs vs;
	unsigned before = own_rings();
	uint64_t avail, ring;

	/* Reserved past the ring (cut), short of it (grown), exactly it. */
	be = mk_reserved(8 << 20, 3 << 20, 64 << 10, 64 << 10);
	placefs_backend_free(be);
	be = mk_reserved(1 << 20, 5 << 20, 64 << 10, 64 << 10);
	placefs_backend_free(be);
	be = mk_reserved(2 << 20, 2 << 20, 0, 0);
	placefs_backend_free(be);
	/* Bounce memory smaller than the backend's: made anew; larger: used. */
	be = mk_reserved(1 << 20, 1 << 20, 64 << 10, 1 << 20);
	placefs_backend_free(be);
	be = mk_reserved(1 << 20, 1 << 20, 1 << 20, 64 << 10);
	placefs_backend_free(be);
	ck_assert_uint_eq(own_rings(), before);

	/* Not taken: freeing it unlinks the object; device none ignores it. */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_host_reserve_start(4 << 20, 0, &r, &err), 0);
	ck_assert_uint_eq(own_rings(), before + 1);
	be = NULL;
	ck_assert_int_eq(
	        placefs_backend_create_reserved(tu_device("none"), 4 << 20, 0, r, &be, &err), 0);
	ck_assert_ptr_null(be);
	placefs_host_reserve_free(r);
	ck_assert_uint_eq(own_rings(), before);
	placefs_host_reserve_free(NULL);

	/* Taken at most once: a second host backend makes its own ring. */
	ck_assert_int_eq(placefs_host_reserve_start(1 << 20, 0, &r, &err), 0);
	ck_assert_int_eq(
	        placefs_backend_create_reserved(tu_device("host"), 1 << 20, 0, r, &be, &err), 0);
	ck_assert_int_eq(
	        placefs_backend_create_reserved(tu_device("host"), 1 << 20, 0, r, &be2, &err), 0);
	placefs_backend_get_info(be, &info);
	placefs_backend_get_info(be2, &info2);
	ck_assert_str_ne((char *)info.handle, (char *)info2.handle);
	placefs_host_reserve_free(r);
	ck_assert_uint_eq(own_rings(), before + 2);
	placefs_backend_free(be);
	placefs_backend_free(be2);
	ck_assert_uint_eq(own_rings(), before);

	/* A ring /dev/shm cannot hold is refused as without a reservation; the object goes. */
	ck_assert_int_eq(statvfs("/dev/shm", &vs), 0);
	avail = (uint64_t)vs.f_bavail * vs.f_frsize;
	ring = (avail + (1ULL << 30)) / 4096 * 4096;
	ck_assert_int_eq(placefs_host_reserve_start(ring, 0, &r, &err), 0);
	placefs_error_clear(&err);
	be = NULL;
	ck_assert_int_eq(placefs_backend_create_reserved(tu_device("host"), ring, 0, r, &be, &err),
	                 -ENOSPC);
	ck_assert_ptr_null(be);
	ck_assert_msg(strstr(err.msg, "/dev/shm has") && strstr(err.msg, "free of"), "%s", err.msg);
	placefs_host_reserve_free(r);
	ck_assert_uint_eq(own_rings(), before);
}
END_TEST

START_TEST(test_host_ring_larger_than_shm)
{
	/* A ring /dev/shm cannot hold is refused, naming its size and the free space. */
	struct placefs_backend *be = NULL;
	struct placefs_error err;
	struct statvfs vs;
	uint64_t avail, ring;
	char want[32];

	ck_assert_int_eq(statvfs("/dev/shm", &vs), 0);
	avail = (uint64_t)vs.f_bavail * vs.f_frsize;
	ring = (avail + (1ULL << 30)) / 4096 * 4096;
	snprintf(want, sizeof(want), "%llu-byte", (unsigned long long)ring);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_create(tu_device("host"), ring, 0, &be, &err), -ENOSPC);
	ck_assert_ptr_null(be);
	ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "/dev/shm has") &&
	                      strstr(err.msg, "free of"),
	              "%s", err.msg);
	/* 1 TiB (the issue's -o ring_size=1T) likewise, on any machine with less free. */
	if (avail < (1ULL << 40)) {
		placefs_error_clear(&err);
		ck_assert_int_eq(
		        placefs_backend_create(tu_device("host"), 1ULL << 40, 0, &be, &err),
		        -ENOSPC);
		ck_assert_ptr_nonnull(strstr(err.msg, "1099511627776-byte (1 TiB)"));
	}
}
END_TEST

static unsigned rand_calls;
static uint64_t rand_fixed;
static unsigned rand_fixed_for;

/* The first rand_fixed_for calls give rand_fixed, later ones fresh numbers. */
static int rand_forced(uint64_t *r)
{
	if (rand_calls++ < rand_fixed_for) {
		*r = rand_fixed;
		return 0;
	}
	*r = rand_fixed + rand_calls;
	return 0;
}

START_TEST(test_host_ring_name_squatted)
{
	/* A name someone else made first is never used, nor touched: another is tried. */
	int (*saved)(uint64_t *) = placefs__shm_random;
	struct placefs_backend_info info, info2;
	struct placefs_backend *be, *be2 = NULL;
	struct placefs_error err;
	char squat[64], path[80];
	struct stat st;
	int fd;

	/* Real names: random, different each time, "/placefs-<pid>-<digits>". */
	be = mk("host", 4096, 0);
	be2 = mk("host", 4096, 0);
	placefs_backend_get_info(be, &info);
	placefs_backend_get_info(be2, &info2);
	ck_assert_str_ne((char *)info.handle, (char *)info2.handle);
	{
		char prefix[32];
		const char *q;

		snprintf(prefix, sizeof(prefix), "/placefs-%ld-", (long)getpid());
		ck_assert_int_eq(strncmp((char *)info.handle, prefix, strlen(prefix)), 0);
		q = (char *)info.handle + strlen(prefix);
		ck_assert_uint_ge(strspn(q, "0123456789"), 1);
		ck_assert_uint_eq(strspn(q, "0123456789"), strlen(q));
	}
	placefs_backend_free(be);
	placefs_backend_free(be2);

	rand_fixed = 4242;
	snprintf(squat, sizeof(squat), "/placefs-%ld-%llu", (long)getpid(),
	         (unsigned long long)rand_fixed);
	snprintf(path, sizeof(path), "/dev/shm%s", squat);
	munmap(shm_make(squat, 8192), 8192);

	placefs__shm_random = rand_forced;
	rand_calls = 0;
	rand_fixed_for = 3;
	be = mk("host", 4096, 0);
	placefs_backend_get_info(be, &info);
	ck_assert_str_ne((char *)info.handle, squat);
	ck_assert_uint_eq(rand_calls, 4);
	/* The squatter's object is as it was. */
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, 8192);
	placefs_backend_free(be);
	ck_assert_int_eq(stat(path, &st), 0);

	/* Every try taken: a bounded number of tries, then EEXIST. */
	rand_calls = 0;
	rand_fixed_for = 1000;
	placefs_error_clear(&err);
	be = NULL;
	ck_assert_int_eq(placefs_backend_create(tu_device("host"), 4096, 0, &be, &err), -EEXIST);
	ck_assert_ptr_null(be);
	ck_assert_uint_eq(rand_calls, PLACEFS__SHM_NAME_TRIES);
	ck_assert_ptr_nonnull(strstr(err.msg, "were all taken"));
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, 8192);
	placefs__shm_random = saved;
	fd = shm_unlink(squat);
	ck_assert_int_eq(fd, 0);
}
END_TEST

START_TEST(test_shm_remove_stale_random_names)
{
	/* The random 64-bit tails of today's names are recognised (and 21 digits are not). */
	pid_t dp = dead_pid();
	char ring[64], cli[64], bad[64], path[80];
	struct removed rem = {{NULL, NULL}, {0, 0}};
	struct placefs_error err;
	int tries, n;

	snprintf(ring, sizeof(ring), "placefs-%ld-18446744073709551615", (long)dp);
	snprintf(cli, sizeof(cli), "placefs-client-%ld-9876543210123", (long)dp);
	snprintf(bad, sizeof(bad), "placefs-%ld-184467440737095516150", (long)dp);
	shm_plant(bad);
	rem.want[0] = ring;
	rem.want[1] = cli;
	for (tries = 0; tries < 20 && !(rem.seen[0] && rem.seen[1]); tries++) {
		if (!rem.seen[0])
			shm_plant(ring);
		if (!rem.seen[1])
			shm_plant(cli);
		placefs_error_clear(&err);
		n = placefs_shm_remove_stale(count_removed, &rem, &err);
		ck_assert_msg(n >= 0, "%s", err.msg);
	}
	ck_assert_int_eq(rem.seen[0], 1);
	ck_assert_int_eq(rem.seen[1], 1);
	snprintf(path, sizeof(path), "/dev/shm/%s", bad);
	ck_assert_msg(access(path, F_OK) == 0, "%s was removed", bad);
	unlink(path);
}
END_TEST

#ifdef HAVE_CUDA
/* Runs the CUDA IPC destination test with a separate process as the client. */
static const char *self_exe;

static int ipc_child(int rfd, int wfd)
{
	struct placefs_backend_info info;
	struct placefs_device dev;
	struct placefs_backend *be = NULL;
	struct placefs_error err;
	uint8_t *buf;
	char go;
	uint64_t i;

	/*
	 * No Check call here (tu_device() included): this process runs no test,
	 * and Check exits with status 2 when it cannot report to a runner.
	 */
	placefs_error_clear(&err);
	if (placefs_device_parse("cuda:0", &dev, &err) != 0 ||
	    placefs_backend_create(dev, 1 << 20, 1 << 20, &be, &err) != 0) {
		fprintf(stderr, "child: %s\n", err.msg);
		return 2;
	}
	placefs_backend_get_info(be, &info);
	if (info.handle_bytes != 64 || write(wfd, info.handle, 64) != 64)
		return 3;
	if (read(rfd, &go, 1) != 1)
		return 4;
	buf = malloc(1 << 16);
	if (placefs_backend_read_ring(be, 4096, buf, 1 << 16, &err) != 0) {
		fprintf(stderr, "child: %s\n", err.msg);
		return 5;
	}
	for (i = 0; i < (1 << 16); i++)
		if (buf[i] != pat(i, 4))
			return 6;
	free(buf);
	placefs_backend_free(be);
	return 0;
}

static void cuda_ipc_dest_test(void)
{
	int to_child[2], from_child[2], status;
	struct placefs_backend *be;
	struct placefs_dest d;
	struct placefs_error err;
	uint8_t h[64];
	pid_t pid;

	ck_assert_int_eq(pipe(to_child), 0);
	ck_assert_int_eq(pipe(from_child), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char a[16], b[16];

		/* exec at once: CUDA must not be used in a forked child. */
		snprintf(a, sizeof(a), "%d", to_child[0]);
		snprintf(b, sizeof(b), "%d", from_child[1]);
		execl(self_exe, self_exe, "--ipc-child", a, b, (char *)NULL);
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	ck_assert_int_eq(read(from_child[0], h, 64), 64);
	be = mk("cuda:0", 1 << 20, 2 << 20);
	push(be, 0, 0, 1 << 16, 4);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, 64, 4096, 1 << 20, NULL), 0);
	ck_assert_msg(placefs_backend_copy_out(be, 0, 1 << 16, &d, &err) == 0, "%s", err.msg);
	/* Cached import: a second copy works too. */
	ck_assert_msg(placefs_backend_copy_out(be, 0, 1 << 16, &d, &err) == 0, "%s", err.msg);
	d.offset = (1 << 20) - 100;
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 1 << 16, &d, NULL), -EINVAL);
	/* A garbage handle is refused cleanly. */
	memset(h, 0x5a, sizeof(h));
	ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, 64, 0, 1 << 20, NULL), 0);
	placefs_error_clear(&err);
	ck_assert_int_lt(placefs_backend_copy_out(be, 0, 16, &d, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "CUDA IPC"));
	/* Close the import before the exporting child frees its ring. */
	placefs_backend_free(be);
	ck_assert_int_eq(write(to_child[1], "g", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	close(to_child[1]);
	close(from_child[0]);
}
#endif

/*
 * CUDA IPC destinations through the host backend with its IPC operations
 * replaced: "device memory" is host memory here, and an import of a handle
 * whose first byte is 'S' blocks until the test says go (at most 5 s), as
 * does closing the import of a handle whose first byte is 'C'. A second byte
 * 'X' makes the import fail.
 */
static pthread_mutex_t fk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fk_cond;   /* placefs_clock_cond_init() in fk_backend() */
static bool fk_go;               /* behind fk_lock */
static atomic_bool fk_timed_out; /* read while the other threads run */
static atomic_int fk_opens, fk_closes, fk_closing;
static uint8_t fk_mem[3][4096];

/* Waits until the test says go, for at most 5 s; notes a timeout. */
static void fk_wait_go(void)
{
	uint64_t end = placefs_clock_ns() + 5000000000ULL, now;

	pthread_mutex_lock(&fk_lock);
	while (!fk_go && (now = placefs_clock_ns()) < end)
		placefs_clock_cond_wait_ns(&fk_cond, &fk_lock, end - now);
	if (!fk_go)
		atomic_store(&fk_timed_out, true);
	pthread_mutex_unlock(&fk_lock);
}

static int fk_ipc_open(struct placefs_backend *be, const uint8_t *h, void **ptr, uint64_t *bytes,
                       struct placefs_error *err)
{
	(void)be;
	atomic_fetch_add(&fk_opens, 1);
	if (h[0] == 'S')
		fk_wait_go();
	if (h[1] == 'X')
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "test: handle refused");
	*ptr = fk_mem[h[0] == 'S' ? 1 : h[0] == 'C' ? 2 : 0];
	*bytes = sizeof(fk_mem[0]); /* what the driver says of the allocation */
	return 0;
}

static void fk_ipc_close(struct placefs_backend *be, void *ptr)
{
	(void)be;
	ck_assert(ptr == fk_mem[0] || ptr == fk_mem[1] || ptr == fk_mem[2]);
	if (ptr == fk_mem[2]) {
		atomic_store(&fk_closing, 1);
		fk_wait_go();
	}
	atomic_fetch_add(&fk_closes, 1);
}

static int fk_ring_to_device(struct placefs_backend *be, uint64_t ring_off, void *dptr, uint64_t n,
                             struct placefs_error *err)
{
	return be->ops->ring_to_host(be, ring_off, dptr, n, err);
}

/* Chunk i to "device memory" at dptr: synchronous, as the host backend's chunk copies. */
static int fk_chunk_to_device(struct placefs_backend *be, unsigned i, void *dptr, uint64_t n,
                              struct placefs_error *err)
{
	(void)err;
	memcpy(dptr, be->host_buf + (uint64_t)i * be->info.chunk_bytes, n);
	return 0;
}

static void fk_go_set(bool go)
{
	pthread_mutex_lock(&fk_lock);
	fk_go = go;
	pthread_cond_broadcast(&fk_cond);
	pthread_mutex_unlock(&fk_lock);
}

struct fk_copy {
	struct placefs_backend *be;
	struct placefs_dest d;
	int rc;
	pthread_t t;
};

static void *fk_copy_run(void *arg)
{
	struct fk_copy *c = arg;

	c->rc = placefs_backend_copy_out(c->be, 0, 256, &c->d, NULL);
	return NULL;
}

static void fk_dest(struct placefs_dest *d, const char *tag)
{
	uint8_t h[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES] = {0};

	memcpy(h, tag, strlen(tag));
	ck_assert_int_eq(placefs_dest_cuda_ipc(d, h, sizeof(h), 0, 4096, NULL), 0);
}

static void fk_start(struct fk_copy *c, struct placefs_backend *be, const char *tag)
{
	c->be = be;
	c->rc = 1;
	fk_dest(&c->d, tag);
	ck_assert_int_eq(pthread_create(&c->t, NULL, fk_copy_run, c), 0);
}

/* Polls until cond holds, for at most 5 s. */
#define FK_UNTIL(cond)                                                                             \
	do {                                                                                       \
		uint64_t end_ = placefs_clock_ns() + 5000000000ULL;                                \
		while (!(cond) && placefs_clock_ns() < end_)                                       \
			usleep(1000);                                                              \
		ck_assert_msg((cond), "timed out waiting for " #cond);                             \
	} while (0)

/* A host backend whose IPC operations are the fakes above, ring bytes 0..256 pattern 4. */
static struct placefs_backend *fk_backend(void)
{
	static struct placefs_backend_ops ops;
	struct placefs_backend *be = mk("host", 1 << 16, 64 << 10);

	ops = *be->ops;
	ops.ipc_open = fk_ipc_open;
	ops.ipc_close = fk_ipc_close;
	ops.ring_to_device = fk_ring_to_device;
	ops.chunk_to_device = fk_chunk_to_device;
	be->ops = &ops;
	ck_assert_int_eq(placefs_clock_cond_init(&fk_cond), 0); /* nobody waits on it yet */
	fk_go_set(false);
	atomic_store(&fk_timed_out, false);
	atomic_store(&fk_opens, 0);
	atomic_store(&fk_closes, 0);
	atomic_store(&fk_closing, 0);
	memset(fk_mem, 0, sizeof(fk_mem));
	push(be, 0, 0, 256, 4);
	return be;
}

START_TEST(test_ipc_import_unlocked)
{
	struct placefs_backend *be = fk_backend();
	struct placefs_backend_dest_stats st;
	struct fk_copy a, b, c2, d2;
	struct placefs_dest d;

	/* F: imported at once, and cached. */
	fk_dest(&d, "F");
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0);
	expect_pat(fk_mem[0], 256, 4);
	ck_assert_int_eq(atomic_load(&fk_opens), 1);

	/* S: a slow import, and a second request for it meanwhile. */
	fk_start(&a, be, "S");
	FK_UNTIL(atomic_load(&fk_opens) == 2);
	fk_start(&b, be, "S");
	placefs_backend_dest_stats(be, &st);
	FK_UNTIL((placefs_backend_dest_stats(be, &st), st.import_waits == 1));
	ck_assert_uint_eq(st.held, 2); /* F, and S pending */

	/* A copy into F goes on while S is being imported. */
	memset(fk_mem[0], 0, 256);
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0);
	expect_pat(fk_mem[0], 256, 4);
	ck_assert(!atomic_load(&fk_timed_out));
	ck_assert_int_eq(a.rc, 1);
	ck_assert_int_eq(b.rc, 1);

	fk_go_set(true);
	pthread_join(a.t, NULL);
	pthread_join(b.t, NULL);
	ck_assert(!atomic_load(&fk_timed_out));
	ck_assert_int_eq(a.rc, 0);
	ck_assert_int_eq(b.rc, 0);
	expect_pat(fk_mem[1], 256, 4);
	ck_assert_int_eq(atomic_load(&fk_opens), 2); /* S opened once for both */
	placefs_backend_dest_stats(be, &st);
	ck_assert_uint_eq(st.held, 2);
	ck_assert_uint_eq(st.imports, 2);
	ck_assert_uint_eq(st.import_waits, 1);

	/* SX: the import fails; the request that waited tries for itself, and fails too. */
	fk_go_set(false);
	fk_start(&c2, be, "SX");
	FK_UNTIL(atomic_load(&fk_opens) == 3);
	fk_start(&d2, be, "SX");
	FK_UNTIL((placefs_backend_dest_stats(be, &st), st.import_waits == 2));
	fk_go_set(true);
	pthread_join(c2.t, NULL);
	pthread_join(d2.t, NULL);
	ck_assert_int_eq(c2.rc, -EINVAL);
	ck_assert_int_eq(d2.rc, -EINVAL);
	ck_assert_int_eq(atomic_load(&fk_opens), 4);
	placefs_backend_dest_stats(be, &st);
	ck_assert_uint_eq(st.held, 2); /* nothing cached for SX */
	ck_assert_uint_eq(st.imports, 4);
	ck_assert_int_eq(atomic_load(&fk_closes), 0); /* a failed import has nothing to close */

	placefs_backend_free(be);
	ck_assert_int_eq(atomic_load(&fk_closes), 2);
}
END_TEST

struct fk_sweep {
	struct placefs_backend *be;
	unsigned n;
};

static void *fk_sweep_run(void *arg)
{
	struct fk_sweep *w = arg;

	w->n = placefs_backend_sweep(w->be);
	return NULL;
}

START_TEST(test_ipc_close_unlocked)
{
	/* A mapping is closed after the lock is released: copies go on meanwhile. */
	struct placefs_backend *be = fk_backend();
	struct fk_sweep w = {be, 0};
	struct placefs_dest f, c;
	pthread_t t;

	fk_dest(&f, "F");
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &f, NULL), 0);
	fk_dest(&c, "C");
	c.pid = dead_pid(); /* its owner is gone: the next sweep drops it */
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &c, NULL), 0);
	expect_pat(fk_mem[2], 256, 4);
	ck_assert_uint_eq(placefs_backend_dest_count(be), 2);

	ck_assert_int_eq(pthread_create(&t, NULL, fk_sweep_run, &w), 0);
	FK_UNTIL(atomic_load(&fk_closing) == 1);
	/* C is out of the cache; F is still served while C's close runs. */
	ck_assert_uint_eq(placefs_backend_dest_count(be), 1);
	memset(fk_mem[0], 0, 256);
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &f, NULL), 0);
	expect_pat(fk_mem[0], 256, 4);
	ck_assert(!atomic_load(&fk_timed_out));
	ck_assert_int_eq(atomic_load(&fk_closes), 0);

	fk_go_set(true);
	pthread_join(t, NULL);
	ck_assert(!atomic_load(&fk_timed_out));
	ck_assert_uint_eq(w.n, 1);
	ck_assert_int_eq(atomic_load(&fk_closes), 1);
	placefs_backend_free(be);
	ck_assert_int_eq(atomic_load(&fk_closes), 2);
}
END_TEST

START_TEST(test_ipc_past_allocation)
{
	/* The client says 8192 bytes; the allocation (the driver's word) has 4096. */
	struct placefs_backend *be = fk_backend();
	struct placefs_error err;
	struct placefs_dest d;
	uint8_t h[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES] = {'F'};
	struct placefs_backend_target *t = NULL;
	uint8_t *chunk;
	uint64_t i;

	ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, sizeof(h), 3840, 8192, NULL), 0);
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), 0); /* its last 256 */
	expect_pat(fk_mem[0] + 3840, 256, 4);
	memset(fk_mem, 0, sizeof(fk_mem));
	ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, sizeof(h), 3841, 8192, NULL), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "4096-byte CUDA allocation") != NULL, "%s", err.msg);
	ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, sizeof(h), 5000, 8192, NULL), 0);
	ck_assert_int_eq(placefs_backend_copy_out(be, 0, 256, &d, NULL), -EINVAL);
	for (i = 0; i < sizeof(fk_mem); i++)
		ck_assert_uint_eq(((uint8_t *)fk_mem)[i], 0); /* nothing written anywhere */

	/* Direct copies open a target: held to the allocation the same way. */
	chunk = placefs_backend_chunk(be, 1);
	for (i = 0; i < 256; i++)
		chunk[i] = pat(i, 6);
	ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, sizeof(h), 3841, 8192, NULL), 0);
	ck_assert_int_eq(placefs_backend_target_open(be, &d, 256, &t, NULL), -EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(placefs_dest_cuda_ipc(&d, h, sizeof(h), 3840, 8192, NULL), 0);
	ck_assert_int_eq(placefs_backend_target_open(be, &d, 256, &t, NULL), 0);
	ck_assert_int_eq(placefs_backend_chunk_to_target(be, 1, t, 3840, 256, NULL), 0);
	ck_assert_int_eq(placefs_backend_chunk_to_target(be, 1, t, 3841, 256, NULL), -EINVAL);
	placefs_backend_target_close(be, t);
	expect_pat(fk_mem[0] + 3840, 256, 6);
	for (i = 0; i < 3840; i++)
		ck_assert_uint_eq(fk_mem[0][i], 0);

	/* The import stays cached, unused: refused copies leave no reference behind. */
	ck_assert_uint_eq(placefs_backend_dest_count(be), 1);
	ck_assert_int_eq(atomic_load(&fk_opens), 1);
	placefs_backend_free(be);
	ck_assert_int_eq(atomic_load(&fk_closes), 1);
}
END_TEST

START_TEST(test_cuda_warm)
{
	/* CUDA started ahead leaves the backends as they were: made, or refused alike. */
	struct placefs_cuda_warm *w = (struct placefs_cuda_warm *)1;
	struct placefs_backend *be = NULL;
	struct placefs_error err;
	int zero = 0, n, rc;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_cuda_warm_start(&zero, 0, 0, &w, &err), 0);
	ck_assert_ptr_null(w);
	placefs_backend_cuda_warm_free(NULL);
	ck_assert_int_eq(placefs_backend_cuda_warm_start(&zero, 1, 0, &w, &err), 0);
#ifndef HAVE_CUDA
	ck_assert_ptr_null(w);
#else
	ck_assert_ptr_nonnull(w);
#endif
	placefs_backend_cuda_warm_free(w);
	ck_assert_int_eq(placefs_backend_cuda_warm_start(NULL, 0, 1, &w, &err), 0);
	placefs_backend_cuda_warm_free(w);

	n = placefs_backend_cuda_devices(&err);
	placefs_error_clear(&err);
	rc = placefs_backend_create(tu_device("cuda:0"), 1 << 20, 0, &be, &err);
	if (n > 0) {
		ck_assert_msg(rc == 0, "%s", err.msg);
		ck_assert_ptr_nonnull(be);
		placefs_backend_free(be);
		return;
	}
	ck_assert_ptr_null(be);
#ifndef HAVE_CUDA
	ck_assert_int_eq(rc, -EOPNOTSUPP);
#else
	ck_assert_int_eq(rc, -ENODEV);
	ck_assert_msg(strncmp(err.msg, "cuda:0 requested but no CUDA device is available: ", 50) ==
	                      0,
	              "%s", err.msg);
#endif
}
END_TEST

START_TEST(test_cuda)
{
	struct placefs_backend *be = (struct placefs_backend *)1;
	struct placefs_error err;
	int n;

	placefs_error_clear(&err);
	n = placefs_backend_cuda_devices(&err);
#ifndef HAVE_CUDA
	ck_assert_int_eq(n, -EOPNOTSUPP);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_create(tu_device("cuda:0"), 1 << 20, 0, &be, &err),
	                 -EOPNOTSUPP);
	ck_assert_str_eq(err.msg, "cuda:0 requested but placefs was built without CUDA");
	ck_assert_ptr_null(be);
#else
	if (n <= 0) {
		/* No GPU here: a clean, specific refusal. */
		if (n < 0) {
			ck_assert_int_eq(n, -ENODEV);
			ck_assert_ptr_nonnull(strstr(err.msg, "no CUDA device is available: "));
		}
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_backend_create(tu_device("cuda:0"), 1 << 20, 0, &be, &err),
		                 -ENODEV);
		ck_assert_ptr_null(be);
		ck_assert_msg(strncmp(err.msg, "cuda:0 requested but no CUDA device is available: ",
		                      50) == 0,
		              "%s", err.msg);
		ck_assert_uint_gt(strlen(err.msg), 51);
		return;
	}
	/* A GPU: the CUDA backend end to end. */
	{
		struct placefs_backend_info info;
		struct placefs_dest d;
		char name[64], spec[32];
		uint8_t *dst, *buf;

		be = mk("cuda:0", 8 << 20, 2 << 20);
		placefs_backend_get_info(be, &info);
		ck_assert_int_eq(info.device.kind, PLACEFS_DEVICE_CUDA);
		ck_assert_int_eq(info.device.index, 0);
		ck_assert_uint_eq(info.ring_bytes, 8 << 20);
		ck_assert_uint_eq(info.nchunks, 32);
		ck_assert_uint_eq(info.chunk_bytes, 65536);
		ck_assert_uint_eq(info.handle_kind, PLACEFS_IOC_HANDLE_CUDA_IPC);
		ck_assert_uint_eq(info.handle_bytes, 64);
		ck_assert_ptr_nonnull(strstr(info.name, "cuda:0 ("));
		push(be, 0, 0, 65536, 7);
		push(be, 1, (8 << 20) - 65536, 65536, 8);
		buf = malloc(65536);
		ck_assert_int_eq(placefs_backend_read_ring(be, 0, buf, 65536, &err), 0);
		expect_pat(buf, 65536, 7);
		ck_assert_int_eq(placefs_backend_read_ring(be, (8 << 20) - 65536, buf, 65536, &err),
		                 0);
		expect_pat(buf, 65536, 8);
		free(buf);
		snprintf(name, sizeof(name), "/placefs-test-%ld-g", (long)getpid());
		dst = shm_make(name, 1 << 17);
		ck_assert_int_eq(placefs_dest_shm(&d, name, 100, 1 << 17, NULL), 0);
		ck_assert_msg(placefs_backend_copy_out(be, 0, 65536, &d, &err) == 0, "%s", err.msg);
		expect_pat(dst + 100, 65536, 7);
		munmap(dst, 1 << 17);
		shm_unlink(name);
		placefs_backend_free(be);

		snprintf(spec, sizeof(spec), "cuda:%d", n);
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_backend_create(tu_device(spec), 1 << 20, 0, &be, &err),
		                 -ENODEV);
		ck_assert_ptr_nonnull(strstr(err.msg, "this machine has"));
		cuda_ipc_dest_test();
	}
#endif
}
END_TEST

/* The checked zero-copy calls: arguments first, then what the backend can do. */
START_TEST(test_host_zero_copy_checks)
{
	struct placefs_backend_info info;
	struct placefs_backend *be = mk("host", 1 << 20, 64 << 10);
	struct placefs_error err;
	unsigned ok[2] = {0, 1}, bad[2] = {0, 99};
	uint8_t src[16] = {0};
	void *base = (void *)1;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	placefs_backend_get_info(be, &info);
	ck_assert_uint_eq(info.nchunks, 16);
	ck_assert_int_eq(placefs_backend_has_zero_copy(be), 0);

	ck_assert_int_eq(placefs_backend_map_source(be, fd, 4096, NULL, NULL), -EINVAL);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_map_source(be, -1, 4096, &base, &err), -EINVAL);
	ck_assert_ptr_null(base);
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot map a 4096-byte shard"));
	base = (void *)1;
	ck_assert_int_eq(placefs_backend_map_source(be, fd, 0, &base, NULL), -EINVAL);
	ck_assert_ptr_null(base);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_map_source(be, fd, 4096, &base, &err), -EOPNOTSUPP);
	ck_assert_ptr_null(base);
	ck_assert_msg(strstr(err.msg, "cannot stage without bounce buffers (zero-copy)") != NULL,
	              "%s", err.msg);
	/* Nothing mapped: unmapping does nothing (and NULL never does anything). */
	placefs_backend_unmap_source(be, NULL, 4096);
	placefs_backend_unmap_source(be, src, sizeof(src));

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_src_to_ring(be, ok, 0, src, 0, 16, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "at least one bounce chunk"));
	ck_assert_int_eq(placefs_backend_src_to_ring(be, NULL, 1, src, 0, 16, NULL), -EINVAL);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_src_to_ring(be, bad, 2, src, 0, 16, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "chunk 99 does not exist"));
	ck_assert_int_eq(placefs_backend_src_to_ring(be, ok, 2, NULL, 0, 16, NULL), -EINVAL);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_src_to_ring(be, ok, 2, src, (1 << 20) - 15, 16, &err),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "outside the 1048576-byte ring"));
	ck_assert_int_eq(placefs_backend_src_to_ring(be, ok, 1, src, UINT64_MAX, 2, NULL), -EINVAL);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_src_to_ring(be, ok, 2, src, (1 << 20) - 16, 16, &err),
	                 -EOPNOTSUPP);
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot stage without bounce buffers"));
	ck_assert_int_eq(placefs_backend_src_to_ring(be, ok, 2, src, 0, 0, NULL), -EOPNOTSUPP);
	close(fd);
	placefs_backend_free(be);
}
END_TEST

/* The shm-name rule, in its one home. */
START_TEST(test_shm_name_check)
{
	static const char rule[] = "destination shm name must be \"/name\" (no other '/', at most "
	                           "128 bytes with its NUL) and handle_bytes its length + 1";
	struct placefs_error err;
	uint8_t name[PLACEFS_IOC_HANDLE_MAX + 8];

	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"/a", 3, NULL), 0);
	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"/placefs-1-0", 13, NULL),
	                 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"/", 2, &err), -EINVAL);
	ck_assert_str_eq(err.msg, rule);
	ck_assert_int_eq(err.kind, PLACEFS_E_USAGE);
	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"ab", 3, NULL), -EINVAL);
	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"/a/b", 5, NULL), -EINVAL);
	/* handle_bytes must be the length + 1 exactly: no NUL inside, one at the end. */
	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"/ab", 3, NULL), -EINVAL);
	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"/a\0b", 5, NULL),
	                 -EINVAL);
	ck_assert_int_eq(placefs_backend_shm_name_check((const uint8_t *)"/a", 0, NULL), -EINVAL);
	/* The longest name fills the handle with its NUL. */
	memset(name, 'x', sizeof(name));
	name[0] = '/';
	name[PLACEFS_IOC_HANDLE_MAX - 1] = '\0';
	ck_assert_int_eq(placefs_backend_shm_name_check(name, PLACEFS_IOC_HANDLE_MAX, NULL), 0);
	name[PLACEFS_IOC_HANDLE_MAX - 1] = 'x';
	name[PLACEFS_IOC_HANDLE_MAX] = '\0';
	ck_assert_int_eq(placefs_backend_shm_name_check(name, PLACEFS_IOC_HANDLE_MAX + 1, NULL),
	                 -EINVAL);
	ck_assert_int_eq(placefs_backend_shm_name_check(name, PLACEFS_IOC_HANDLE_MAX, NULL),
	                 -EINVAL);
}
END_TEST

static Suite *backend_suite(void)
{
	Suite *s = suite_create("backend");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_create_none_and_bad);
	tcase_add_test(tc, test_host_info_and_chunks);
	tcase_add_test(tc, test_host_ring_export);
	tcase_add_test(tc, test_host_dest_shm);
	tcase_add_test(tc, test_host_dest_cache_many);
	tcase_add_test(tc, test_host_dest_sweep);
	tcase_add_test(tc, test_ipc_import_unlocked);
	tcase_add_test(tc, test_ipc_close_unlocked);
	tcase_add_test(tc, test_ipc_past_allocation);
	tcase_add_test(tc, test_shm_remove_stale);
	tcase_add_test(tc, test_host_zero_copy_checks);
	tcase_add_test(tc, test_shm_name_check);
	tcase_add_test(tc, test_host_dest_shrunk_while_copying);
	tcase_add_test(tc, test_host_ring_reserved);
	tcase_add_test(tc, test_host_ring_reserved_ahead);
	tcase_add_test(tc, test_host_ring_larger_than_shm);
	tcase_add_test(tc, test_host_ring_name_squatted);
	tcase_add_test(tc, test_shm_remove_stale_random_names);
	suite_add_tcase(s, tc);
	/* Its own case, so CK_RUN_CASE=core runs the host backend alone (valgrind). */
	tc = tcase_create("cuda");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cuda);
	tcase_add_test(tc, test_cuda_warm);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
#ifdef HAVE_CUDA
	self_exe = "/proc/self/exe";
	if (argc == 4 && strcmp(argv[1], "--ipc-child") == 0)
		return ipc_child(atoi(argv[2]), atoi(argv[3]));
#else
	(void)argc;
	(void)argv;
#endif
	return tu_run_suite(backend_suite());
}
