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
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/io.h"
#include "testutil.h"

static char *tmpdir;

static void setup(void)
{
	tmpdir = tu_mkdtemp();
}

static void teardown(void)
{
	tu_rmtree(tmpdir);
	free(tmpdir);
	tmpdir = NULL;
}

static uint8_t pat(size_t i)
{
	return (uint8_t)(i * 131 + 17);
}

static uint8_t *pattern(size_t n)
{
	uint8_t *p = malloc(n ? n : 1);

	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < n; i++)
		p[i] = pat(i);
	return p;
}

/* A file of n pattern bytes, opened with flags. */
static int pattern_file(const char *name, size_t n, int flags)
{
	char *path = tu_path(tmpdir, name);
	uint8_t *data = pattern(n);
	int fd;

	tu_write_file(path, data, n);
	fd = open(path, flags | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	free(data);
	free(path);
	return fd;
}

/* pread_full reads what is there, and stops short only at the end of the file. */
START_TEST(test_pread_full_file_and_eof)
{
	const size_t n = 100000;
	int fd = pattern_file("f", n, O_RDONLY);
	uint8_t *buf = malloc(n + 100);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(placefs_io_pread_full(fd, buf, n, 0), (ssize_t)n);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(buf[i], pat(i));
	/* Asking past the end returns what there is. */
	memset(buf, 0, n + 100);
	ck_assert_int_eq(placefs_io_pread_full(fd, buf, 5000, n - 1000), 1000);
	for (size_t i = 0; i < 1000; i++)
		ck_assert_uint_eq(buf[i], pat(n - 1000 + i));
	ck_assert_int_eq(placefs_io_pread_full(fd, buf, n + 100, 0), (ssize_t)n);
	/* At and beyond the end: 0, not an error. */
	ck_assert_int_eq(placefs_io_pread_full(fd, buf, 10, n), 0);
	ck_assert_int_eq(placefs_io_pread_full(fd, buf, 10, (uint64_t)1 << 40), 0);
	ck_assert_int_eq(placefs_io_pread_full(fd, buf, 0, 0), 0);
	/* pread does not move the file position. */
	ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 0);
	ck_assert_int_eq(close(fd), 0);
	free(buf);
}
END_TEST

START_TEST(test_read_full_file_position)
{
	const size_t n = 4096 * 3 + 5;
	int fd = pattern_file("f", n, O_RDONLY);
	uint8_t buf[20000];

	ck_assert_int_eq(lseek(fd, 100, SEEK_SET), 100);
	ck_assert_int_eq(placefs_io_read_full(fd, buf, 50), 50);
	for (size_t i = 0; i < 50; i++)
		ck_assert_uint_eq(buf[i], pat(100 + i));
	ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 150);
	/* The rest, short of the request: the end of the file. */
	ck_assert_int_eq(placefs_io_read_full(fd, buf, sizeof(buf)), (ssize_t)(n - 150));
	for (size_t i = 0; i < n - 150; i++)
		ck_assert_uint_eq(buf[i], pat(150 + i));
	ck_assert_int_eq(placefs_io_read_full(fd, buf, sizeof(buf)), 0);
	ck_assert_int_eq(placefs_io_read_full(fd, buf, 0), 0);
	ck_assert_int_eq(close(fd), 0);
}
END_TEST

/* Errors come back as -errno, whatever the call. */
START_TEST(test_errors)
{
	int ro = pattern_file("ro", 10, O_RDONLY);
	int wo = pattern_file("wo", 10, O_WRONLY);
	int p[2];
	uint8_t buf[16] = {0};

	ck_assert_int_eq(placefs_io_pwrite_full(ro, buf, sizeof(buf), 0), -EBADF);
	ck_assert_int_eq(placefs_io_write_full(ro, buf, sizeof(buf)), -EBADF);
	ck_assert_int_eq(placefs_io_pread_full(wo, buf, sizeof(buf), 0), -EBADF);
	ck_assert_int_eq(placefs_io_read_full(wo, buf, sizeof(buf)), -EBADF);
	/* A pipe has no offsets. */
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(placefs_io_pread_full(p[0], buf, sizeof(buf), 0), -ESPIPE);
	ck_assert_int_eq(placefs_io_pwrite_full(p[1], buf, sizeof(buf), 0), -ESPIPE);
	close(p[0]);
	close(p[1]);
	ck_assert_int_eq(close(ro), 0);
	ck_assert_int_eq(close(wo), 0);
	/* A closed descriptor. */
	ck_assert_int_eq(placefs_io_read_full(ro, buf, sizeof(buf)), -EBADF);
	ck_assert_int_eq(placefs_io_write_full(ro, buf, sizeof(buf)), -EBADF);
	/* Nothing to do is not an error, even on a bad descriptor. */
	ck_assert_int_eq(placefs_io_write_full(ro, buf, 0), 0);
	ck_assert_int_eq(placefs_io_pread_full(ro, buf, 0, 0), 0);
}
END_TEST

START_TEST(test_write_full_device_full)
{
	uint8_t buf[4096] = {1};
	int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return; /* no /dev/full in this sandbox */
	ck_assert_int_eq(placefs_io_write_full(fd, buf, sizeof(buf)), -ENOSPC);
	ck_assert_int_eq(placefs_io_pwrite_full(fd, buf, sizeof(buf), 0), -ENOSPC);
	close(fd);
}
END_TEST

/* pwrite_full writes all of it at the offset, leaving a hole before it. */
START_TEST(test_pwrite_full_file)
{
	const size_t n = 300000;
	char *path = tu_path(tmpdir, "w");
	uint8_t *data = pattern(n), *back;
	struct stat st;
	size_t len;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(placefs_io_pwrite_full(fd, data, n, 8192), 0);
	ck_assert_int_eq(placefs_io_pwrite_full(fd, data, 0, 1 << 20), 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, (off_t)(8192 + n));
	/* The file position is untouched: write_full goes at the start. */
	ck_assert_int_eq(placefs_io_write_full(fd, "ab", 2), 0);
	ck_assert_int_eq(close(fd), 0);

	back = tu_read_file(path, &len);
	ck_assert_uint_eq(len, 8192 + n);
	ck_assert_uint_eq(back[0], 'a');
	ck_assert_uint_eq(back[1], 'b');
	for (size_t i = 2; i < 8192; i++)
		ck_assert_uint_eq(back[i], 0);
	ck_assert_int_eq(memcmp(back + 8192, data, n), 0);
	free(back);
	free(data);
	free(path);
}
END_TEST

/*
 * A writer that feeds a pipe in small pieces with pauses, so that the
 * reader's read() calls come back short; then waits for `go` before
 * closing (or closes at once when close_early).
 */
struct feeder {
	int fd;
	size_t n;
	size_t piece;
	int close_early;
	pthread_mutex_t m;
	pthread_cond_t c;
	int go;
};

static void *feed(void *arg)
{
	struct feeder *f = arg;
	uint8_t *data = pattern(f->n);
	size_t off = 0;

	while (off < f->n) {
		size_t k = f->n - off < f->piece ? f->n - off : f->piece;
		ssize_t w = write(f->fd, data + off, k);

		if (w <= 0)
			break;
		off += (size_t)w;
		if ((off / f->piece) % 8 == 0)
			usleep(2000);
	}
	free(data);
	if (!f->close_early) {
		pthread_mutex_lock(&f->m);
		while (!f->go)
			pthread_cond_wait(&f->c, &f->m);
		pthread_mutex_unlock(&f->m);
	}
	close(f->fd);
	return NULL;
}

static void feeder_start(struct feeder *f, pthread_t *th, int wfd, size_t n, size_t piece,
                         int close_early)
{
	f->fd = wfd;
	f->n = n;
	f->piece = piece;
	f->close_early = close_early;
	f->go = 0;
	ck_assert_int_eq(pthread_mutex_init(&f->m, NULL), 0);
	ck_assert_int_eq(pthread_cond_init(&f->c, NULL), 0);
	ck_assert_int_eq(pthread_create(th, NULL, feed, f), 0);
}

static void feeder_finish(struct feeder *f, pthread_t th)
{
	pthread_mutex_lock(&f->m);
	f->go = 1;
	pthread_cond_signal(&f->c);
	pthread_mutex_unlock(&f->m);
	pthread_join(th, NULL);
	pthread_cond_destroy(&f->c);
	pthread_mutex_destroy(&f->m);
}

/* read_full gathers short reads into the whole request without waiting for EOF. */
START_TEST(test_read_full_pipe_short_reads)
{
	const size_t n = 200000;
	uint8_t *buf = malloc(n);
	struct feeder f;
	pthread_t th;
	int p[2];

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pipe(p), 0);
	/* The writer keeps the pipe open after the last byte: EOF never comes first. */
	feeder_start(&f, &th, p[1], n, 777, 0);
	ck_assert_int_eq(placefs_io_read_full(p[0], buf, n), (ssize_t)n);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(buf[i], pat(i));
	feeder_finish(&f, th);
	ck_assert_int_eq(placefs_io_read_full(p[0], buf, 1), 0);
	close(p[0]);
	free(buf);
}
END_TEST

/* At EOF on a pipe read_full returns the bytes it got. */
START_TEST(test_read_full_pipe_eof)
{
	const size_t n = 50001;
	uint8_t *buf = malloc(2 * n);
	struct feeder f;
	pthread_t th;
	int p[2];

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pipe(p), 0);
	feeder_start(&f, &th, p[1], n, 1000, 1);
	ck_assert_int_eq(placefs_io_read_full(p[0], buf, 2 * n), (ssize_t)n);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(buf[i], pat(i));
	feeder_finish(&f, th);
	close(p[0]);
	free(buf);
}
END_TEST

struct drainer {
	int fd;
	uint8_t *buf;
	size_t n;
	ssize_t got;
};

static void *drain(void *arg)
{
	struct drainer *d = arg;
	size_t off = 0;

	/* Slow, small reads: the writer blocks and its write() calls come back short. */
	for (;;) {
		ssize_t r = read(d->fd, d->buf + off, d->n - off < 3000 ? d->n - off : 3000);

		if (r <= 0)
			break;
		off += (size_t)r;
		if ((off / 3000) % 16 == 0)
			usleep(1000);
	}
	d->got = (ssize_t)off;
	return NULL;
}

/* write_full pushes all of a buffer far larger than the pipe through it. */
START_TEST(test_write_full_pipe)
{
	const size_t n = 1 << 20;
	uint8_t *data = pattern(n);
	struct drainer d = {.n = n + 10, .got = -1};
	pthread_t th;
	int p[2];

	d.buf = malloc(d.n);
	ck_assert_ptr_nonnull(d.buf);
	ck_assert_int_eq(pipe(p), 0);
	d.fd = p[0];
	ck_assert_int_eq(pthread_create(&th, NULL, drain, &d), 0);
	ck_assert_int_eq(placefs_io_write_full(p[1], data, n), 0);
	close(p[1]);
	pthread_join(th, NULL);
	ck_assert_int_eq(d.got, (ssize_t)n);
	ck_assert_int_eq(memcmp(d.buf, data, n), 0);
	close(p[0]);
	free(d.buf);
	free(data);
}
END_TEST

/* placefs_io_random fills every byte it is asked for, and 0 bytes is a no-op. */
START_TEST(test_random)
{
	uint8_t a[4096], b[4096];
	size_t zeros = 0;

	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	ck_assert_int_eq(placefs_io_random(a, sizeof(a)), 0);
	ck_assert_int_eq(placefs_io_random(b, sizeof(b)), 0);
	/* Two 4 KiB draws are equal, or mostly zero, with negligible probability. */
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	for (size_t i = 0; i < sizeof(a); i++)
		zeros += a[i] == 0;
	ck_assert_uint_lt(zeros, 64);
	ck_assert_int_eq(placefs_io_random(NULL, 0), 0);
}
END_TEST

/*
 * The first mount point of /proc/self/mountinfo whose type is prefix, or
 * prefix followed by "." or "4" (fuse, fuse.s3fs, nfs, nfs4), into out; 0
 * when there is none.
 */
static int find_mount(const char *prefix, char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char mnt[1024], type[256];
		const char *sep = strstr(line, " - ");

		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT ... - TYPE SOURCE OPTIONS */
		if (!sep || sscanf(line, "%*s %*s %*s %*s %1023s", mnt) != 1 ||
		    sscanf(sep + 3, "%255s", type) != 1)
			continue;
		/* "fuse", "fuse.s3fs", "nfs", "nfs4"; not "fusectl" */
		if (strncmp(type, prefix, strlen(prefix)) == 0 &&
		    strchr(".4", type[strlen(prefix)]) && !strchr(mnt, '\\') && strlen(mnt) < cap) {
			strcpy(out, mnt);
			found = 1;
		}
	}
	fclose(f);
	return found;
}

/*
 * placefs_io_on_network_fs and placefs_io_on_fuse: both 0 for a device node,
 * a pipe and a bad descriptor. For the root of a FUSE or NFS mount where this
 * machine has one it may open (a placefs test mount, the remote layer's s3fs
 * or sshfs): the first 1 for both, the second 1 for FUSE only.
 */
START_TEST(test_on_network_fs)
{
	static const char *const kinds[] = {"fuse", "nfs"};
	char mnt[1024];
	int p[2], fd;

	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(placefs_io_on_network_fs(fd), 0);
	ck_assert_int_eq(placefs_io_on_fuse(fd), 0);
	close(fd);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(placefs_io_on_network_fs(p[0]), 0);
	ck_assert_int_eq(placefs_io_on_fuse(p[0]), 0);
	close(p[0]);
	close(p[1]);
	ck_assert_int_eq(placefs_io_on_network_fs(-1), 0);
	ck_assert_int_eq(placefs_io_on_fuse(-1), 0);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		if (!find_mount(kinds[i], mnt, sizeof(mnt)))
			continue;
		fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue; /* another user's FUSE mount: not ours to look at */
		ck_assert_msg(placefs_io_on_network_fs(fd) == 1, "%s mount %s not seen as network",
		              kinds[i], mnt);
		ck_assert_msg(placefs_io_on_fuse(fd) == (i == 0), "%s mount %s: FUSE answer %d",
		              kinds[i], mnt, placefs_io_on_fuse(fd));
		close(fd);
	}
}
END_TEST

struct mi_seen {
	unsigned n, stop_at;
	int proc;
};

static int mi_count(const struct placefs_mountinfo *mi, void *arg)
{
	struct mi_seen *m = arg;

	ck_assert_ptr_nonnull(mi->dev);
	ck_assert_ptr_nonnull(strchr(mi->dev, ':'));
	ck_assert_int_eq(mi->point[0], '/');
	if (strcmp(mi->point, "/proc") == 0 && strcmp(mi->type, "proc") == 0)
		m->proc = 1;
	return ++m->n == m->stop_at;
}

START_TEST(test_mountinfo_each)
{
	/* Every mount, fields split (/proc is "proc"); a non-zero return stops the walk. */
	struct mi_seen all = {0}, one = {.stop_at = 1};

	ck_assert_int_eq(placefs_io_mountinfo_each(mi_count, &all), 0);
	ck_assert_uint_gt(all.n, 1);
	ck_assert_int_eq(all.proc, 1);
	ck_assert_int_eq(placefs_io_mountinfo_each(mi_count, &one), 0);
	ck_assert_uint_eq(one.n, 1);
}
END_TEST

START_TEST(test_fs_type_name)
{
	/* The type mountinfo gives each file's mount, matched by device. */
	char t[64], small[4];
	int fd;

	fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(placefs_io_fs_type_name(fd, t, sizeof(t)), 0);
	ck_assert_str_eq(t, "proc");
	/* Truncated to the buffer, NUL-terminated. */
	ck_assert_int_eq(placefs_io_fs_type_name(fd, small, sizeof(small)), 0);
	ck_assert_str_eq(small, "pro");
	ck_assert_int_eq(placefs_io_fs_type_name(fd, small, 0), -EINVAL);
	close(fd);
	fd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		struct statfs sf;

		/* Where /dev/shm is a tmpfs of its own (not a directory of another file system). */
		if (fstatfs(fd, &sf) == 0 && (unsigned long)sf.f_type == 0x01021994UL) {
			ck_assert_int_eq(placefs_io_fs_type_name(fd, t, sizeof(t)), 0);
			ck_assert_str_eq(t, "tmpfs");
		}
		close(fd);
	}
	ck_assert_int_eq(placefs_io_fs_type_name(-1, t, sizeof(t)), -EBADF);
	ck_assert_str_eq(t, "");
}
END_TEST

static Suite *io_suite(void)
{
	Suite *s = suite_create("io");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_pread_full_file_and_eof);
	tcase_add_test(tc, test_read_full_file_position);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_write_full_device_full);
	tcase_add_test(tc, test_pwrite_full_file);
	tcase_add_test(tc, test_read_full_pipe_short_reads);
	tcase_add_test(tc, test_read_full_pipe_eof);
	tcase_add_test(tc, test_write_full_pipe);
	tcase_add_test(tc, test_random);
	tcase_add_test(tc, test_on_network_fs);
	tcase_add_test(tc, test_fs_type_name);
	tcase_add_test(tc, test_mountinfo_each);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(io_suite());
}
