/* SPDX-License-Identifier: MIT */
/*
 * check_client: lib/client/client.c without a mount. Destinations and ring
 * mappings are made for real (shm objects; a host backend's own ring), the
 * ioctls are shown to refuse files that are not placefs tensors, and the
 * CUDA calls to answer as the build and the machine allow. The protocol
 * against a live daemon is tests/mount-stage.sh's.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "staging/backend.h"
#include "client/devmem.h"
#include "placefs/client.h"
#include "testutil.h"

static uint8_t pat(uint64_t i, unsigned seed)
{
	return (uint8_t)(i * 131 + seed * 17 + (i >> 9));
}

START_TEST(test_errno_names)
{
	ck_assert_str_eq(placefs_client_errno_name(EFBIG), "EFBIG");
	ck_assert_str_eq(placefs_client_errno_name(-ETIMEDOUT), "ETIMEDOUT");
	ck_assert_str_eq(placefs_client_errno_name(ENOTTY), "ENOTTY");
	ck_assert_str_eq(placefs_client_errno_name(-EOPNOTSUPP), "EOPNOTSUPP");
	ck_assert_str_eq(placefs_client_errno_name(0), "E?");
	ck_assert_str_eq(placefs_client_errno_name(9999), "E?");
}
END_TEST

static struct placefs_ioc_ring_info host_ri(void)
{
	struct placefs_ioc_ring_info ri;

	memset(&ri, 0, sizeof(ri));
	ri.backend = PLACEFS_IOC_BACKEND_HOST;
	ri.device = -1;
	return ri;
}

START_TEST(test_dest_shm)
{
	static const uint64_t sizes[] = {0, 1, 4095, 12345, 1 << 20};
	struct placefs_ioc_ring_info ri = host_ri();
	struct placefs_client_error e;
	struct placefs_client_dest *d;
	uint8_t *buf = malloc(1 << 20);
	char name[PLACEFS_IOC_HANDLE_MAX];
	size_t k;
	uint64_t i;
	int fd;

	ck_assert_ptr_nonnull(buf);
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t n = sizes[k];
		struct stat st;
		uint8_t *p;

		ck_assert_int_eq(placefs_client_dest_create(&ri, n, &d, &e), 0);
		ck_assert_uint_eq(placefs_client_dest_size(d), n);
		ck_assert_uint_eq(placefs_client_dest_kind(d), PLACEFS_IOC_HANDLE_HOST_SHM);
		ck_assert_ptr_nonnull(placefs_client_dest_shm_name(d));
		snprintf(name, sizeof(name), "%s", placefs_client_dest_shm_name(d));
		ck_assert_int_eq(strncmp(name, "/placefs-client-", 16), 0);
		/* The object exists, is ours, mode 0600, at least one byte. */
		fd = shm_open(name, O_RDONLY, 0);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(fstat(fd, &st), 0);
		ck_assert_uint_eq(st.st_uid, getuid());
		ck_assert_uint_eq(st.st_mode & 0777, 0600);
		ck_assert_uint_eq((uint64_t)st.st_size, n ? n : 1);
		close(fd);
		/* What is written through the mapping reads back, at any offset. */
		p = placefs_client_dest_ptr(d);
		for (i = 0; i < n; i++)
			p[i] = pat(i, (unsigned)k);
		if (n > 0) {
			ck_assert_int_eq(placefs_client_dest_read(d, 0, buf, n, &e), 0);
			for (i = 0; i < n; i++)
				ck_assert_uint_eq(buf[i], pat(i, (unsigned)k));
			ck_assert_int_eq(placefs_client_dest_read(d, n - 1, buf, 1, &e), 0);
			ck_assert_uint_eq(buf[0], pat(n - 1, (unsigned)k));
		}
		ck_assert_int_eq(placefs_client_dest_read(d, n, buf, 0, &e), 0);
		ck_assert_int_eq(placefs_client_dest_read(d, n, buf, 1, &e), -EINVAL);
		ck_assert_ptr_nonnull(strstr(e.msg, "outside"));
		ck_assert_int_eq(placefs_client_dest_read(d, UINT64_MAX, buf, 2, &e), -EINVAL);
		placefs_client_dest_free(d);
		/* Freed: the name is gone. */
		ck_assert_int_lt(shm_open(name, O_RDONLY, 0), 0);
		ck_assert_int_eq(errno, ENOENT);
	}
	placefs_client_dest_free(NULL);
	free(buf);
}
END_TEST

START_TEST(test_dest_names_unguessable)
{
	/*
	 * Names another user could make first (the old "<pid>-<counter>") do not
	 * stop a destination: its name is random, made with O_EXCL. Its pages
	 * are all reserved, and two destinations never share a name.
	 */
	struct placefs_ioc_ring_info ri = host_ri();
	struct placefs_client_dest *d, *d2;
	struct placefs_client_error e;
	char squat[64], prefix[64];
	const char *name, *q;
	struct stat st;
	int i, fd;

	for (i = 0; i < 64; i++) {
		snprintf(squat, sizeof(squat), "/placefs-client-%ld-%d", (long)getpid(), i);
		fd = shm_open(squat, O_RDWR | O_CREAT, 0600);
		ck_assert_int_ge(fd, 0);
		close(fd);
	}
	ck_assert_msg(placefs_client_dest_create(&ri, 1 << 20, &d, &e) == 0, "%s", e.msg);
	ck_assert_msg(placefs_client_dest_create(&ri, 1 << 20, &d2, &e) == 0, "%s", e.msg);
	name = placefs_client_dest_shm_name(d);
	ck_assert_str_ne(name, placefs_client_dest_shm_name(d2));
	snprintf(prefix, sizeof(prefix), "/placefs-client-%ld-", (long)getpid());
	ck_assert_int_eq(strncmp(name, prefix, strlen(prefix)), 0);
	q = name + strlen(prefix);
	ck_assert_uint_ge(strlen(q), 1);
	ck_assert_uint_eq(strspn(q, "0123456789"), strlen(q));
	fd = shm_open(name, O_RDONLY, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_msg((uint64_t)st.st_blocks * 512 >= (1 << 20), "%lld bytes allocated",
	              (long long)st.st_blocks * 512);
	close(fd);
	placefs_client_dest_free(d);
	placefs_client_dest_free(d2);
	for (i = 0; i < 64; i++) {
		snprintf(squat, sizeof(squat), "/placefs-client-%ld-%d", (long)getpid(), i);
		ck_assert_int_eq(shm_unlink(squat), 0);
	}
}
END_TEST

START_TEST(test_dest_refused)
{
	struct placefs_ioc_ring_info ri = host_ri();
	struct placefs_client_error e;
	struct placefs_client_dest *d = (void *)1;

	ri.backend = PLACEFS_IOC_BACKEND_NONE;
	ck_assert_int_eq(placefs_client_dest_create(&ri, 10, &d, &e), -ENODEV);
	ck_assert_ptr_null(d);
	ck_assert_int_eq(e.code, -ENODEV);
	ck_assert_ptr_nonnull(strstr(e.msg, "staging is disabled"));
	ri.backend = 7;
	ck_assert_int_eq(placefs_client_dest_create(&ri, 10, &d, &e), -EPROTO);
	ri.backend = PLACEFS_IOC_BACKEND_HOST;
	ck_assert_int_eq(placefs_client_dest_create(&ri, UINT64_MAX, &d, &e), -EINVAL);
	ck_assert_ptr_null(d);
}
END_TEST

/* A host backend's ring, filled with a pattern, mapped through the client. */
START_TEST(test_ring_map_host)
{
	struct placefs_backend *be = NULL;
	struct placefs_backend_info info;
	struct placefs_ioc_ring_info ri;
	struct placefs_client_ring *r = (void *)1;
	struct placefs_client_error e;
	struct placefs_error err;
	const uint64_t ring = 256 << 10;
	uint64_t n;
	uint8_t *buf = malloc(ring), *chunk;
	const uint8_t *mapped;
	uint64_t i;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_backend_create(tu_device("host"), ring, 64 << 10, &be, &err) == 0,
	              "%s", err.msg);
	placefs_backend_get_info(be, &info);
	ck_assert_uint_ge(info.chunk_bytes, 4096);
	n = info.chunk_bytes / 2;
	chunk = placefs_backend_chunk(be, 0);
	for (i = 0; i < info.chunk_bytes; i++)
		chunk[i] = pat(i, 3);
	ck_assert_int_eq(placefs_backend_chunk_to_ring(be, 0, ring - info.chunk_bytes,
	                                               info.chunk_bytes, &err),
	                 0);
	ck_assert_int_eq(placefs_backend_chunk_wait(be, 0, &err), 0);

	memset(&ri, 0, sizeof(ri));
	ri.version = PLACEFS_IOC_VERSION;
	ri.size = sizeof(ri);
	ri.backend = info.device.kind;
	ri.device = info.device.index;
	ri.ring_bytes = info.ring_bytes;
	ri.handle_kind = info.handle_kind;
	ri.handle_bytes = info.handle_bytes;
	memcpy(ri.handle, info.handle, sizeof(ri.handle));
	ck_assert_msg(placefs_client_ring_map(&ri, &r, &e) == 0, "%s", e.msg);
	mapped = placefs_client_ring_ptr(r);
	for (i = 0; i < info.chunk_bytes; i++)
		ck_assert_uint_eq(mapped[ring - info.chunk_bytes + i], pat(i, 3));
	ck_assert_int_eq(placefs_client_ring_read(r, ring - n, buf, n, &e), 0);
	for (i = 0; i < n; i++)
		ck_assert_uint_eq(buf[i], pat(info.chunk_bytes - n + i, 3));
	ck_assert_int_eq(placefs_client_ring_read(r, ring - 1, buf, 2, &e), -EINVAL);
	ck_assert_int_eq(placefs_client_ring_read(r, UINT64_MAX, buf, 2, &e), -EINVAL);
	ck_assert_int_eq(placefs_client_ring_read(r, ring, buf, 0, &e), 0);
	placefs_client_ring_unmap(r);
	placefs_client_ring_unmap(NULL);

	/* What cannot be mapped. */
	ri.handle_kind = PLACEFS_IOC_HANDLE_NONE;
	ck_assert_int_eq(placefs_client_ring_map(&ri, &r, &e), -EOPNOTSUPP);
	ck_assert_ptr_null(r);
	ri.handle_kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	ri.handle[ri.handle_bytes - 1] = 'x'; /* no NUL */
	ck_assert_int_eq(placefs_client_ring_map(&ri, &r, &e), -EPROTO);
	memcpy(ri.handle, "/placefs-client-test-none", 26);
	ri.handle_bytes = 26;
	ck_assert_int_eq(placefs_client_ring_map(&ri, &r, &e), -ENOENT);
	ri.backend = PLACEFS_IOC_BACKEND_NONE;
	ck_assert_int_eq(placefs_client_ring_map(&ri, &r, &e), -ENODEV);
	placefs_backend_free(be);
	free(buf);
}
END_TEST

START_TEST(test_not_placefs)
{
	char *dir = tu_mkdtemp(), *f = tu_path(dir, "plain");
	struct placefs_ioc_ring_info ri;
	struct placefs_ioc_stage s;
	struct placefs_client_error e;
	int fd;

	tu_write_text(f, "not a tensor\n");
	ck_assert_int_eq(placefs_client_open(f, &fd, &e), 0);
	ck_assert_int_eq(placefs_client_ring_info(fd, &ri, &e), -ENOTTY);
	ck_assert_ptr_nonnull(strstr(e.msg, "not a tensor file of a placefs mount"));
	ck_assert_int_eq(placefs_client_borrow(fd, 0, &s, &e), -ENOTTY);
	ck_assert_int_eq(placefs_client_release(fd, 1, &e), -ENOTTY);
	close(fd);
	ck_assert_int_eq(placefs_client_open("/nonexistent/placefs", &fd, &e), -ENOENT);
	ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent/placefs"));
	tu_rmtree(dir);
	free(f);
	free(dir);
}
END_TEST

START_TEST(test_shard)
{
	struct placefs_client_error e;
	uint64_t start, len, covered = 0;
	uint32_t r;

	/* Every rank's part, in order, covers the dimension exactly once. */
	for (r = 0; r < 8; r++) {
		ck_assert_int_eq(placefs_client_shard(11008, r, 8, &start, &len, &e), 0);
		ck_assert_uint_eq(start, covered);
		ck_assert_uint_eq(len, 1376);
		covered += len;
	}
	ck_assert_uint_eq(covered, 11008);
	ck_assert_int_eq(placefs_client_shard(7, 0, 1, &start, &len, NULL), 0);
	ck_assert_uint_eq(len, 7);
	ck_assert_int_eq(placefs_client_shard(10, 0, 3, &start, &len, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "does not split into 3 equal parts"));
	ck_assert_int_eq(placefs_client_shard(8, 2, 2, &start, &len, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "rank 2 of a world of 2"));
	ck_assert_int_eq(placefs_client_shard(8, 0, 0, &start, &len, NULL), -EINVAL);
	ck_assert_int_eq(placefs_client_shard(0, 0, 2, &start, &len, NULL), -EINVAL);
	ck_assert_int_eq(placefs_client_shard(UINT64_MAX - 1, 1, 2, &start, &len, NULL), 0);
	ck_assert_uint_eq(start + len, UINT64_MAX - 1);
}
END_TEST

/*
 * The slice and device calls without a mount: unknown flags are refused
 * before any ioctl (fd -1 would say EBADF), and the ioctl that is made
 * carries what was asked (the message repeats it from the request).
 */
START_TEST(test_stage_args)
{
	char *dir = tu_mkdtemp(), *f = tu_path(dir, "plain");
	struct placefs_ioc_ring_info ri = host_ri();
	struct placefs_client_stage_args a = {.flags = PLACEFS_IOC_STAGE_SLICE,
	                                      .slice_dim = 1,
	                                      .slice_start = 64,
	                                      .slice_len = 32};
	struct placefs_client_dest *d;
	struct placefs_ioc_stage s;
	struct placefs_client_error e;
	int fd;

	a.flags |= 0x80;
	ck_assert_int_eq(placefs_client_borrow_ex(-1, &a, &s, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "unknown flags 0x80"));
	a.flags &= ~0x80u;
	tu_write_text(f, "not a tensor\n");
	ck_assert_int_eq(placefs_client_open(f, &fd, &e), 0);
	ck_assert_int_eq(placefs_client_borrow_ex(fd, &a, &s, &e), -ENOTTY);
	ck_assert_str_eq(e.msg, "stage (borrow, slice dim 1 [64, +32)): Inappropriate ioctl for "
	                        "device (not a tensor file of a placefs mount)");
	ck_assert_uint_eq(s.flags, PLACEFS_IOC_STAGE_SLICE);
	ck_assert_uint_eq(s.slice_dim, 1);
	ck_assert_uint_eq(s.slice_start, 64);
	ck_assert_uint_eq(s.slice_len, 32);
	ck_assert_int_eq(s.device, 0);
	a.flags |= PLACEFS_IOC_STAGE_DEVICE;
	a.device = 3;
	ck_assert_int_eq(placefs_client_borrow_ex(fd, &a, &s, &e), -ENOTTY);
	ck_assert_ptr_nonnull(strstr(e.msg, "slice dim 1 [64, +32), device 3)"));
	ck_assert_int_eq(s.device, 3);
	/* Fields without their flag are not sent. */
	a.flags = 0;
	ck_assert_int_eq(placefs_client_borrow_ex(fd, &a, &s, &e), -ENOTTY);
	ck_assert_uint_eq(s.flags, 0);
	ck_assert_uint_eq(s.slice_len, 0);
	ck_assert_int_eq(s.device, 0);
	ck_assert_str_eq(e.msg, "stage (borrow): Inappropriate ioctl for device (not a tensor "
	                        "file of a placefs mount)");
	/* A destination of ring 2 of several names device 2 by itself. */
	ri.device = 2;
	ri.ndevices = 4;
	ck_assert_int_eq(placefs_client_dest_create(&ri, 4096, &d, &e), 0);
	ck_assert_int_eq(placefs_client_copy(fd, d, 0, 0, &s, &e), -ENOTTY);
	ck_assert_uint_eq(s.flags, PLACEFS_IOC_STAGE_DEVICE);
	ck_assert_int_eq(s.device, 2);
	ck_assert_ptr_nonnull(strstr(e.msg, "stage (copy, device 2)"));
	/* ... unless the caller names another. */
	a.flags = PLACEFS_IOC_STAGE_DEVICE;
	a.device = 0;
	ck_assert_int_eq(placefs_client_copy_ex(fd, d, 0, &a, &s, &e), -ENOTTY);
	ck_assert_int_eq(s.device, 0);
	placefs_client_dest_free(d);
	/* A mount of one ring: nothing is added. */
	ri.ndevices = 1;
	ck_assert_int_eq(placefs_client_dest_create(&ri, 4096, &d, &e), 0);
	ck_assert_int_eq(placefs_client_copy(fd, d, 0, 0, &s, &e), -ENOTTY);
	ck_assert_uint_eq(s.flags, 0);
	placefs_client_dest_free(d);
	ck_assert_int_eq(placefs_client_ring_info_device(fd, 1, &ri, &e), -ENOTTY);
	ck_assert_ptr_nonnull(strstr(e.msg, "ring info of device 1"));
	ck_assert_int_eq(placefs_client_ring_info_at(fd, 2, &ri, &e), -ENOTTY);
	ck_assert_ptr_nonnull(strstr(e.msg, "ring info of position 2"));
	ck_assert_int_eq(placefs_client_ring_info_at(fd, 0x80000000u, &ri, &e), -EINVAL);
	close(fd);
	tu_rmtree(dir);
	free(f);
	free(dir);
}
END_TEST

START_TEST(test_batch)
{
	char *dir = tu_mkdtemp(), *f = tu_path(dir, "plain");
	struct placefs_ioc_ring_info ri = host_ri();
	struct placefs_ioc_batch_entry ent[2];
	struct placefs_client_dest *d;
	struct placefs_client_error e;
	uint64_t idx = 0;
	uint32_t done = 9;
	int fd, rc;

	tu_write_text(f, "not a tensor\n");
	ck_assert_int_eq(placefs_client_open(f, &fd, &e), 0);
	ck_assert_int_eq(placefs_client_dest_create(&ri, 4096, &d, &e), 0);
	memset(ent, 0, sizeof(ent));
	ent[0].tensor = 5;
	ent[0].nbytes = 77;
	/* Refused before the daemon: count, flags; entries untouched, nothing done. */
	ck_assert_int_eq(placefs_client_copy_batch(fd, d, ent, 0, 0, 0, &done, &e), -EINVAL);
	ck_assert_uint_eq(done, 0);
	ck_assert_str_eq(e.msg, "batch: 0 entries (1 to 256)");
	ck_assert_int_eq(
	        placefs_client_copy_batch(fd, d, ent, PLACEFS_IOC_BATCH_MAX + 1, 0, 0, NULL, &e),
	        -EINVAL);
	ck_assert_int_eq(placefs_client_copy_batch(fd, d, ent, 1, 6, 0, &done, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "batch: unknown flags 0x6");
	/* A file that is not a placefs tensor: ENOTTY, named as such. */
	ck_assert_int_eq(placefs_client_copy_batch(fd, d, ent, 2, 0, 0, &done, &e), -ENOTTY);
	ck_assert_ptr_nonnull(strstr(e.msg, "batch of 2 tensors (copy): "));
	ck_assert_ptr_nonnull(strstr(e.msg, "not a tensor file of a placefs mount"));
	ck_assert_uint_eq(ent[0].tensor, 5);
	ck_assert_uint_eq(ent[0].nbytes, 77);
	placefs_client_dest_free(d);
	/* A destination of one ring of several: a batch names no device. */
	ri.device = 1;
	ri.ndevices = 2;
	ck_assert_int_eq(placefs_client_dest_create(&ri, 4096, &d, &e), 0);
	ck_assert_int_eq(placefs_client_copy_batch(fd, d, ent, 1, 0, 0, &done, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "stage one tensor per request"));
	placefs_client_dest_free(d);
	close(fd);

	/* The index is the file's user.placefs.index attribute, a decimal number. */
	rc = placefs_client_index(f, &idx, &e);
	ck_assert_msg(rc == -ENODATA || rc == -EOPNOTSUPP, "index of a plain file: %d", rc);
	ck_assert_ptr_nonnull(strstr(e.msg, f));
	ck_assert_ptr_nonnull(strstr(e.msg, "not a tensor file of a placefs mount"));
	if (setxattr(f, "user.placefs.index", "42", 2, 0) == 0) {
		ck_assert_int_eq(placefs_client_index(f, &idx, &e), 0);
		ck_assert_uint_eq(idx, 42);
		ck_assert_int_eq(setxattr(f, "user.placefs.index", "4x", 2, 0), 0);
		ck_assert_int_eq(placefs_client_index(f, &idx, &e), -EPROTO);
		ck_assert_ptr_nonnull(
		        strstr(e.msg, "user.placefs.index is '4x', not a plan index"));
		ck_assert_int_eq(setxattr(f, "user.placefs.index", "-1", 2, 0), 0);
		ck_assert_int_eq(placefs_client_index(f, &idx, &e), -EPROTO);
		ck_assert_int_eq(setxattr(f, "user.placefs.index", "", 0, 0), 0);
		ck_assert_int_eq(placefs_client_index(f, &idx, &e), -EPROTO);
		ck_assert_uint_eq(idx, 42);
	} else {
		ck_assert_msg(errno == EOPNOTSUPP, "setxattr: %s", strerror(errno));
	}
	ck_assert_int_eq(placefs_client_index("/nonexistent/placefs", &idx, &e), -ENOENT);
	tu_rmtree(dir);
	free(f);
	free(dir);
}
END_TEST

START_TEST(test_list_gpu)
{
	char *dir = tu_mkdtemp(), *p;
	struct placefs_client_error e;
	char **names;
	size_t n, i;
	int seen = 0;

	ck_assert_int_eq(placefs_client_list_gpu(dir, &names, &n, &e), -ENOENT);
	ck_assert_ptr_nonnull(strstr(e.msg, "not a placefs mount"));
	p = tu_path(dir, ".placefs");
	ck_assert_int_eq(mkdir(p, 0755), 0);
	free(p);
	p = tu_path(dir, ".placefs/by-placement");
	ck_assert_int_eq(mkdir(p, 0755), 0);
	free(p);
	p = tu_path(dir, ".placefs/by-placement/gpu");
	ck_assert_int_eq(mkdir(p, 0755), 0);
	free(p);
	ck_assert_int_eq(placefs_client_list_gpu(dir, &names, &n, &e), 0);
	ck_assert_uint_eq(n, 0);
	placefs_client_list_free(names, n);
	for (i = 0; i < 3; i++) {
		char rel[64];

		snprintf(rel, sizeof(rel), ".placefs/by-placement/gpu/t%%2E%zu", i);
		p = tu_path(dir, rel);
		tu_write_text(p, "");
		free(p);
	}
	ck_assert_int_eq(placefs_client_list_gpu(dir, &names, &n, &e), 0);
	ck_assert_uint_eq(n, 3);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(strncmp(names[i], "t%2E", 4), 0);
		seen |= 1 << (names[i][4] - '0');
	}
	ck_assert_int_eq(seen, 7);
	placefs_client_list_free(names, n);
	placefs_client_list_free(NULL, 0);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

/* ---- .placefs/packed.tsv ---------------------------------------------------- */

#define HEAD "# placement\tpacked\tnbytes\tdtype\tshape\tfile\n"

/* dir/.placefs/packed.tsv holds len bytes of text (dir/.placefs made when missing). */
static void put_packed(const char *dir, const char *text, size_t len)
{
	char *p = tu_path(dir, ".placefs");

	ck_assert(mkdir(p, 0755) == 0 || errno == EEXIST);
	free(p);
	p = tu_path(dir, ".placefs/packed.tsv");
	tu_write_file(p, text, len);
	free(p);
}

/* packed.tsv of `text` is refused with -EPROTO, the message naming the file and `want`. */
static void packed_bad(const char *dir, const char *text, size_t len, const char *want)
{
	struct placefs_client_packed *pk = (struct placefs_client_packed *)&pk;
	struct placefs_client_error e;
	char *path = tu_path(dir, ".placefs/packed.tsv");
	int rc;

	put_packed(dir, text, len);
	memset(&e, 0, sizeof(e));
	rc = placefs_client_packed_read(dir, &pk, &e);
	ck_assert_msg(rc == -EPROTO, "want -EPROTO for '%.*s', got %d (%s)", (int)len, text, rc,
	              e.msg);
	ck_assert_int_eq(e.code, -EPROTO);
	ck_assert_ptr_null(pk);
	ck_assert_msg(strncmp(e.msg, path, strlen(path)) == 0, "message names no file: %s", e.msg);
	ck_assert_msg(strstr(e.msg, want) != NULL, "want '%s' in: %s", want, e.msg);
	ck_assert_ptr_null(strchr(e.msg, '\n'));
	ck_assert_ptr_null(strchr(e.msg, '\t'));
	free(path);
}

static void packed_bad_s(const char *dir, const char *text, const char *want)
{
	packed_bad(dir, text, strlen(text), want);
}

START_TEST(test_packed_good)
{
	static const char text[] = HEAD "gpu\t0\t300\tU8\t300\t%2Ea\n"
	                                "gpu\t300\t24\tF32\t2,3\tb%2Fc\n"
	                                "gpu\t324\t4\tF32\t\tscale\n"
	                                "cpu\t0\t5000\tBF16\t2500\tbig,one\n"
	                                "gpu\t512\t0\tF8_E4M3\t0,8\tw w\n"
	                                "gpu\t512\t18446744073709551103\tU8\t"
	                                "18446744073709551103\t50%25\n";
	char *dir = tu_mkdtemp();
	struct placefs_client_packed *pk = NULL;
	const struct placefs_client_tensor *t;
	struct placefs_client_error e;

	put_packed(dir, text, sizeof(text) - 1);
	ck_assert_msg(placefs_client_packed_read(dir, &pk, &e) == 0, "%s", e.msg);
	ck_assert_ptr_nonnull(pk);
	ck_assert_uint_eq(pk->count, 6);
	ck_assert_uint_eq(pk->placed[PLACEFS_CLIENT_GPU], 5);
	ck_assert_uint_eq(pk->placed[PLACEFS_CLIENT_CPU], 1);
	ck_assert_uint_eq(pk->layout[PLACEFS_CLIENT_GPU], UINT64_MAX);
	ck_assert_uint_eq(pk->layout[PLACEFS_CLIENT_CPU], 5000);
	t = pk->tensors;
	ck_assert_str_eq(t[0].file, "%2Ea");
	ck_assert_uint_eq(t[0].placement, PLACEFS_CLIENT_GPU);
	ck_assert_uint_eq(t[0].packed, 0);
	ck_assert_uint_eq(t[0].nbytes, 300);
	ck_assert_str_eq(t[0].dtype, "U8");
	ck_assert_uint_eq(t[0].ndim, 1);
	ck_assert_uint_eq(t[0].shape[0], 300);
	ck_assert_str_eq(t[1].file, "b%2Fc");
	ck_assert_uint_eq(t[1].packed, 300);
	ck_assert_uint_eq(t[1].ndim, 2);
	ck_assert_uint_eq(t[1].shape[0], 2);
	ck_assert_uint_eq(t[1].shape[1], 3);
	ck_assert_str_eq(t[2].file, "scale");
	ck_assert_uint_eq(t[2].ndim, 0);
	ck_assert_ptr_null(t[2].shape);
	ck_assert_str_eq(t[2].dtype, "F32");
	ck_assert_str_eq(t[3].file, "big,one");
	ck_assert_uint_eq(t[3].placement, PLACEFS_CLIENT_CPU);
	ck_assert_uint_eq(t[3].packed, 0);
	ck_assert_uint_eq(t[3].nbytes, 5000);
	ck_assert_str_eq(t[3].dtype, "BF16");
	ck_assert_uint_eq(t[3].shape[0], 2500);
	/* A 0-byte tensor ends where it starts: the next one may start there too. */
	ck_assert_str_eq(t[4].file, "w w");
	ck_assert_uint_eq(t[4].nbytes, 0);
	ck_assert_str_eq(t[4].dtype, "F8_E4M3");
	ck_assert_uint_eq(t[4].shape[0], 0);
	ck_assert_uint_eq(t[4].shape[1], 8);
	ck_assert_str_eq(t[5].file, "50%25");
	ck_assert_uint_eq(t[5].packed + t[5].nbytes, UINT64_MAX);
	placefs_client_packed_free(pk);
	placefs_client_packed_free(NULL);

	/* The header alone: no tensors, empty layouts. */
	put_packed(dir, HEAD, strlen(HEAD));
	ck_assert_msg(placefs_client_packed_read(dir, &pk, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(pk->count, 0);
	ck_assert_uint_eq(pk->layout[PLACEFS_CLIENT_GPU], 0);
	ck_assert_uint_eq(pk->placed[PLACEFS_CLIENT_CPU], 0);
	placefs_client_packed_free(pk);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

/* Larger than a read() at a time, and read to its end: the layout of many tensors. */
START_TEST(test_packed_many)
{
	enum { N = 20000 };
	char *dir = tu_mkdtemp(), line[128];
	struct placefs_client_packed *pk = NULL;
	struct placefs_client_error e;
	size_t cap = N * sizeof(line), len = 0, i;
	char *text = malloc(cap);

	ck_assert_ptr_nonnull(text);
	memcpy(text, HEAD, strlen(HEAD));
	len = strlen(HEAD);
	for (i = 0; i < N; i++) {
		int k = snprintf(line, sizeof(line),
		                 "%s\t%zu\t3\tBF16\t%zu,1,1,1,1,1,1,1,1,1\tt.%zu\n",
		                 i % 3 ? "gpu" : "cpu", (i / 3) * 2000 + i % 3 * 256, i, i);

		memcpy(text + len, line, (size_t)k);
		len += (size_t)k;
	}
	put_packed(dir, text, len);
	ck_assert_msg(placefs_client_packed_read(dir, &pk, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(pk->count, N);
	ck_assert_uint_eq(pk->placed[PLACEFS_CLIENT_CPU], (N + 2) / 3);
	for (i = 0; i < N; i++) {
		char want[32];

		snprintf(want, sizeof(want), "t.%zu", i);
		ck_assert_str_eq(pk->tensors[i].file, want);
		ck_assert_uint_eq(pk->tensors[i].ndim, 10);
		ck_assert_uint_eq(pk->tensors[i].shape[0], i);
		ck_assert_uint_eq(pk->tensors[i].shape[9], 1);
	}
	placefs_client_packed_free(pk);
	free(text);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

/* Every malformed file: -EPROTO (or its own errno), a message naming the file and the line. */
START_TEST(test_packed_bad)
{
	char *dir = tu_mkdtemp(), *p, big[4096];
	struct placefs_client_packed *pk = (struct placefs_client_packed *)&pk;
	struct placefs_client_error e;
	size_t i;
	int fd;

	/* No mount, no file. */
	ck_assert_int_eq(placefs_client_packed_read(dir, &pk, &e), -ENOENT);
	ck_assert_ptr_null(pk);
	ck_assert_ptr_nonnull(strstr(e.msg, "not a placefs mount"));
	ck_assert_int_eq(placefs_client_packed_read(dir, &pk, NULL), -ENOENT);

	/* The file as a whole. */
	packed_bad(dir, "", 0, "line 1: empty");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta", "line 2: the last line has no newline");
	packed_bad_s(dir, "# placement\tpacked\tnbytes\tdtype\tshape\n", "line 1: '# placement?");
	packed_bad_s(dir, "gpu\t0\t1\tU8\t1\ta\n", "line 1: 'gpu?0?1?U8?1?a' is not the header");
	packed_bad(dir, HEAD "gpu\t0\t1\tU8\t1\ta\0b\n", strlen(HEAD) + 18, "a NUL byte");
	/* Fields. */
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta\ngpu\t0\t1\tU8\ta\n", "line 3: 5 fields");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta\tb\n", "line 2: 7 fields");
	packed_bad_s(dir, HEAD "\n", "line 2: 1 fields");
	packed_bad_s(dir, HEAD "GPU\t0\t1\tU8\t1\ta\n", "line 2: placement 'GPU'");
	packed_bad_s(dir, HEAD "\t0\t1\tU8\t1\ta\n", "placement '' is neither");
	packed_bad_s(dir, HEAD "gpu\t01\t1\tU8\t1\ta\n", "line 2: packed '01' is not a decimal");
	packed_bad_s(dir, HEAD "gpu\t-1\t1\tU8\t1\ta\n", "packed '-1'");
	packed_bad_s(dir, HEAD "gpu\t+1\t1\tU8\t1\ta\n", "packed '+1'");
	packed_bad_s(dir, HEAD "gpu\t\t1\tU8\t1\ta\n", "packed ''");
	packed_bad_s(dir, HEAD "gpu\t 1\t1\tU8\t1\ta\n", "packed ' 1'");
	packed_bad_s(dir, HEAD "gpu\t18446744073709551616\t1\tU8\t1\ta\n",
	             "packed '18446744073709551616'");
	packed_bad_s(dir, HEAD "gpu\t0\t1x\tU8\t1\ta\n", "nbytes '1x'");
	packed_bad_s(dir, HEAD "gpu\t0\t99999999999999999999\tU8\t1\ta\n", "nbytes '9999");
	packed_bad_s(dir, HEAD "gpu\t18446744073709551615\t1\tU8\t1\ta\n", "ends past 2^64");
	packed_bad_s(dir,
	             HEAD "gpu\t0\t100\tU8\t100\ta\ncpu\t0\t100\tU8\t100\tb\n"
	                  "gpu\t99\t1\tU8\t1\tc\n",
	             "line 4: the gpu tensor at packed offset 99 overlaps the one before it, which "
	             "ends at 100");
	packed_bad_s(dir, HEAD "cpu\t512\t1\tU8\t1\ta\ncpu\t0\t1\tU8\t1\tb\n",
	             "line 3: the cpu tensor at packed offset 0 overlaps");
	packed_bad_s(dir, HEAD "gpu\t0\t1\t\t1\ta\n", "line 2: dtype '' is not");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tbf16\t1\ta\n", "dtype 'bf16'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tF8-E4M3\t1\ta\n", "dtype 'F8-E4M3'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tABCDEFGHIJKLMNOPQRSTUVWXYZ012345\t1\ta\n",
	             "dtype 'ABCDEFGHIJKLMNOPQRSTUVWXYZ012345' is not 1 to 31");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1,,2\ta\n", "line 2: shape '1,,2'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t,1\ta\n", "shape ',1'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1,\ta\n", "shape '1,'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t[1]\ta\n", "shape '[1]'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1, 2\ta\n", "shape '1, 2'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\t\n", "line 2: a file name of 0 bytes");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\t.placefs\n", "file name '.placefs' starts with");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\t..\n", "file name '..' starts with '.'");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta/../b\n", "has a '/' at byte 1");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta\r\n", "file name 'a?' has a control byte");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta\033[2Jb\n", "a control byte at byte 1");
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta\177\n", "a control byte at byte 1");
	/* A file name of 256 bytes; one of 255 is a name. */
	{
		char name[257];

		memset(name, 'n', 256);
		name[256] = '\0';
		snprintf(big, sizeof(big), HEAD "gpu\t0\t1\tU8\t1\t%s\n", name);
	}
	packed_bad_s(dir, big, "a file name of 256 bytes");
	big[strlen(big) - 2] = '\n';
	big[strlen(big) - 1] = '\0';
	put_packed(dir, big, strlen(big));
	ck_assert_msg(placefs_client_packed_read(dir, &pk, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(strlen(pk->tensors[0].file), 255);
	placefs_client_packed_free(pk);
	/* 1025 dimensions; 1024 are a shape. */
	p = big + snprintf(big, sizeof(big), HEAD "gpu\t0\t1\tU8\t1");
	for (i = 1; i < 1025; i++)
		p += snprintf(p, 3, ",1");
	snprintf(p, 4, "\ta\n");
	packed_bad_s(dir, big, "line 2: a shape of more than 1024 dimensions");
	snprintf(strrchr(big, ',') - 2, 6, "\ta\n");
	put_packed(dir, big, strlen(big));
	ck_assert_msg(placefs_client_packed_read(dir, &pk, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(pk->tensors[0].ndim, 1023);
	placefs_client_packed_free(pk);
	/* A quoted field is cut, and its odd bytes shown as '?'. */
	packed_bad_s(dir, HEAD "gpu\t0\t1\tU8\t1\ta\nxpu\t0\t1\tU8\t1\ta\n",
	             "line 3: placement 'xpu'");
	packed_bad_s(
	        dir,
	        HEAD
	        "\033]0;x\007aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\t0\t1\tU8\t1\ta\n",
	        "placement '?]0;x?aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is neither");
	/* Larger than a client reads: refused before reading (a sparse file). */
	p = tu_path(dir, ".placefs/packed.tsv");
	fd = open(p, O_WRONLY | O_TRUNC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)PLACEFS_CLIENT_PACKED_MAX + 1), 0);
	close(fd);
	pk = (struct placefs_client_packed *)&pk;
	ck_assert_int_eq(placefs_client_packed_read(dir, &pk, &e), -EFBIG);
	ck_assert_ptr_null(pk);
	ck_assert_int_eq(strncmp(e.msg, p, strlen(p)), 0);
	/* A directory in its place: the read's errno. */
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	ck_assert_int_eq(placefs_client_packed_read(dir, &pk, &e), -EISDIR);
	ck_assert_ptr_null(pk);
	free(p);
	tu_rmtree(dir);
	free(dir);
}
END_TEST

/* The CUDA calls: refused without CUDA or a device, working with one. */
START_TEST(test_cuda_calls)
{
	struct placefs_ioc_ring_info ri = host_ri();
	struct placefs_client_dest *d = NULL;
	struct placefs_client_error e;
	struct placefs_error err;
	uint8_t ipc[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES], *buf;
	void *p = (void *)1;
	int n;

	placefs_error_clear(&err);
	n = placefs_backend_cuda_devices(&err);
	ri.backend = PLACEFS_IOC_BACKEND_CUDA;
	ri.device = 0;
	if (n <= 0) {
		placefs_error_clear(&err);
		ck_assert_int_lt(placefs_devmem_alloc(0, 4096, &p, ipc, &err), 0);
		ck_assert_ptr_null(p);
		ck_assert_uint_gt(strlen(err.msg), 0);
		placefs_error_clear(&err);
		ck_assert_int_lt(placefs_devmem_ipc_map(0, ipc, &p, &err), 0);
		ck_assert_int_lt(placefs_client_dest_create(&ri, 4096, &d, &e), 0);
		ck_assert_ptr_null(d);
		ck_assert_uint_gt(strlen(e.msg), 0);
#ifndef HAVE_CUDA
		ck_assert_int_eq(e.code, -EOPNOTSUPP);
		ck_assert_ptr_nonnull(strstr(e.msg, "built without CUDA"));
#endif
		placefs_devmem_free(0, NULL);
		placefs_devmem_ipc_unmap(0, NULL);
		return;
	}
	/* A GPU: a destination of device memory, exported, read back. */
	ck_assert_msg(placefs_client_dest_create(&ri, 1 << 20, &d, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(placefs_client_dest_kind(d), PLACEFS_IOC_HANDLE_CUDA_IPC);
	ck_assert_ptr_null(placefs_client_dest_shm_name(d));
	ck_assert_ptr_nonnull(placefs_client_dest_ptr(d));
	buf = malloc(1 << 20);
	ck_assert_int_eq(placefs_client_dest_read(d, 0, buf, 1 << 20, &e), 0);
	ck_assert_int_eq(placefs_client_dest_read(d, 1, buf, 1 << 20, &e), -EINVAL);
	free(buf);
	placefs_client_dest_free(d);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("client");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_errno_names);
	tcase_add_test(tc, test_dest_shm);
	tcase_add_test(tc, test_dest_refused);
	tcase_add_test(tc, test_dest_names_unguessable);
	tcase_add_test(tc, test_ring_map_host);
	tcase_add_test(tc, test_not_placefs);
	tcase_add_test(tc, test_list_gpu);
	tcase_add_test(tc, test_packed_good);
	tcase_add_test(tc, test_packed_many);
	tcase_add_test(tc, test_packed_bad);
	tcase_add_test(tc, test_shard);
	tcase_add_test(tc, test_stage_args);
	tcase_add_test(tc, test_batch);
	tcase_add_test(tc, test_cuda_calls);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(suite());
}
