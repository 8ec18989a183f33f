/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "staging/lookahead.h"

#define MIB     (1ULL << 20)
#define NSHARDS 4
#define SHARD   (8 * MIB)
#define TMPFS   0x01021994

static char dir[256];
static int fds[NSHARDS];

/* NSHARDS files of SHARD bytes each in a fresh directory under the build tree. */
static void make_shards(void)
{
	static uint8_t buf[MIB];

	snprintf(dir, sizeof(dir), "lookahead.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	memset(buf, 0x5a, sizeof(buf));
	for (int i = 0; i < NSHARDS; i++) {
		char path[300];

		snprintf(path, sizeof(path), "%s/s%d", dir, i);
		fds[i] = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		ck_assert_int_ge(fds[i], 0);
		for (uint64_t off = 0; off < SHARD; off += sizeof(buf))
			ck_assert_int_eq(pwrite(fds[i], buf, sizeof(buf), (off_t)off),
			                 (ssize_t)sizeof(buf));
		ck_assert_int_eq(fdatasync(fds[i]), 0);
		/* Out of the page cache, where the file system lets it go. */
		posix_fadvise(fds[i], 0, 0, POSIX_FADV_DONTNEED);
	}
}

static void drop_shards(void)
{
	for (int i = 0; i < NSHARDS; i++) {
		char path[300];

		close(fds[i]);
		snprintf(path, sizeof(path), "%s/s%d", dir, i);
		unlink(path);
	}
	rmdir(dir);
}

/* Waits until la has made `want` reads (and then a little, for any more); its count. */
static uint64_t settle(struct placefs_lookahead *la, uint64_t want)
{
	for (int i = 0; i < 500 && placefs_lookahead_probes(la) < want; i++)
		usleep(10000);
	usleep(50000);
	return placefs_lookahead_probes(la);
}

/* Whether the page at off of shard i is in the page cache. */
static int resident(int i, uint64_t off)
{
	unsigned char v = 0;
	uint8_t *p = mmap(NULL, SHARD, PROT_READ, MAP_SHARED, fds[i], 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	ck_assert_int_eq(mincore(p + off, 4096, &v), 0);
	munmap(p, SHARD);
	return v & 1;
}

static int on_tmpfs(void)
{
	struct statfs s;

	return fstatfs(fds[0], &s) == 0 && (unsigned long)s.f_type == TMPFS;
}

START_TEST(test_walks_ahead_of_the_reader)
{
	struct placefs_lookahead_shard sh[NSHARDS];
	struct placefs_lookahead *la = NULL;
	struct placefs_error err;
	int cold;

	make_shards();
	cold = !on_tmpfs() && !resident(1, 2 * MIB) && !resident(3, 2 * MIB);
	for (int i = 0; i < NSHARDS; i++) {
		sh[i].fd = fds[i];
		sh[i].lo = i == 1 ? MIB : 0; /* shard 1 from 1 MiB on */
		sh[i].hi = SHARD;
	}
	placefs_error_clear(&err);
	/* A window of 15 MiB: shard 1's 7 MiB, then 8 of shard 2. */
	ck_assert_int_eq(placefs_lookahead_create(sh, NSHARDS, MIB, 15 * MIB, &la, &err), 0);
	/* Nothing before it knows where the reader is. */
	usleep(100000);
	ck_assert_uint_eq(placefs_lookahead_probes(la), 0);
	/* Reader on shard 0: shards 1 (7 reads from 1 MiB) and 2 (8), not 3 (past the window). */
	placefs_lookahead_at(la, 0);
	ck_assert_uint_eq(settle(la, 15), 15);
	if (cold) {
		ck_assert(resident(1, 1 * MIB));
		ck_assert(resident(1, 7 * MIB));
		ck_assert(resident(2, 4 * MIB));
		ck_assert(!resident(3, 2 * MIB));
		ck_assert(!resident(0, 2 * MIB));
	}
	/* On shard 1: 2 is done (8 MiB of the window), then 7 MiB of shard 3. */
	placefs_lookahead_at(la, 1);
	ck_assert_uint_eq(settle(la, 22), 22);
	if (cold)
		ck_assert(resident(3, 5 * MIB));
	/* Past the end is ignored; on the last shard there is nothing after it. */
	placefs_lookahead_at(la, NSHARDS);
	placefs_lookahead_at(la, 3);
	ck_assert_uint_eq(settle(la, 22), 22);
	placefs_lookahead_free(la);
	placefs_lookahead_free(NULL);
	ck_assert_uint_eq(placefs_lookahead_probes(NULL), 0);
	drop_shards();
}
END_TEST

START_TEST(test_window_and_bad_arguments)
{
	struct placefs_lookahead_shard sh[2] = {{.fd = 0, .lo = 0, .hi = 0}};
	struct placefs_lookahead *la = (struct placefs_lookahead *)1;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_lookahead_create(sh, 2, 0, MIB, &la, &err), -EINVAL);
	ck_assert_ptr_null(la);
	ck_assert_int_eq(placefs_lookahead_create(sh, 2, MIB, 0, &la, &err), -EINVAL);
	ck_assert_int_eq(placefs_lookahead_create(NULL, 2, MIB, MIB, &la, &err), -EINVAL);
	sh[0].lo = 5;
	sh[0].hi = 4;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_lookahead_create(sh, 2, MIB, MIB, &la, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "shard 0"));

	/* A window of 5 MiB read every 2 MiB: part of a shard; an empty shard takes none of it. */
	make_shards();
	{
		struct placefs_lookahead_shard s4[NSHARDS];

		for (int i = 0; i < NSHARDS; i++)
			s4[i] = (struct placefs_lookahead_shard){
			        .fd = fds[i], .lo = 0, .hi = SHARD};
		s4[2].hi = 0;
		ck_assert_int_eq(placefs_lookahead_create(s4, NSHARDS, 2 * MIB, 5 * MIB, &la, &err),
		                 0);
		placefs_lookahead_at(la, 0);
		ck_assert_uint_eq(settle(la, 3), 3); /* shard 1 at 0, 2 and 4 MiB */
		placefs_lookahead_at(la, 1);
		ck_assert_uint_eq(settle(la, 6), 6); /* shard 2 is empty: shard 3 at 0, 2, 4 */
		placefs_lookahead_at(la, 2);
		ck_assert_uint_eq(settle(la, 6), 6); /* shard 3's next read, at 6 MiB, is past it */
		placefs_lookahead_free(la);
	}
	drop_shards();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lookahead");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_walks_ahead_of_the_reader);
	tcase_add_test(tc, test_window_and_bad_arguments);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
