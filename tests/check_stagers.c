/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for lib/staging/stagers.c: one stager per device, with host rings
 * standing in for the devices of a node (host:0,host:1,...): each its own
 * bounded ring, concurrent stages to different devices, routing, the wrong
 * device refused, leases that find their device again, stats per device and
 * summed.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sys/wait.h>

#include "common/clock.h"
#include "client/devmem.h"
#include "staging/stagers.h"
#include "testutil.h"

#define MiB (1ULL << 20)
#define KiB (1ULL << 10)

static uint8_t fbyte(uint64_t i)
{
	uint64_t x = i * 0x9E3779B97F4A7C15ULL;

	return (uint8_t)(x >> 56 ^ x >> 23 ^ i);
}

struct file {
	char *dir, *path;
	int fd;
	uint64_t size;
	uint8_t *data;
};

static void file_open(struct file *f, uint64_t size)
{
	uint64_t i;

	f->dir = tu_mkdtemp();
	f->path = tu_path(f->dir, "shard");
	f->size = size;
	f->data = malloc(size);
	for (i = 0; i < size; i++)
		f->data[i] = fbyte(i);
	tu_write_file(f->path, f->data, size);
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(f->fd, 0);
}

static void file_close(struct file *f)
{
	close(f->fd);
	tu_rmtree(f->dir);
	free(f->path);
	free(f->dir);
	free(f->data);
}

static struct placefs_stagers *mk(const char *list, uint64_t ring, unsigned threads)
{
	struct placefs_stagers_config cfg = {
	        .stager = {.ring_bytes = ring, .host_buffer = 64 * KiB, .io_threads = threads},
	};
	struct placefs_stagers *s = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_devices_parse(list, &cfg.devices, &err) == 0, "%s", err.msg);
	ck_assert_msg(placefs_stagers_create(&cfg, &s, &err) == 0, "%s", err.msg);
	ck_assert_ptr_nonnull(s);
	return s;
}

/* The ring bytes of a span of stager pos. */
static void ring_bytes(struct placefs_stagers *s, unsigned pos, const struct placefs_stage_span *sp,
                       uint8_t *out)
{
	struct placefs_backend *be =
	        (struct placefs_backend *)placefs_stager_backend(placefs_stagers_at(s, pos));

	ck_assert_int_eq(placefs_backend_read_ring(be, sp->ring_offset, out, sp->nbytes, NULL), 0);
}

START_TEST(test_create_and_devices)
{
	struct placefs_stagers_config cfg = {.stager = {.ring_bytes = MiB}};
	struct placefs_backend_info info[4];
	struct placefs_stagers *s = NULL;
	struct placefs_error err;
	unsigned i, j;

	/* none: no set at all. */
	ck_assert_int_eq(placefs_devices_parse("none", &cfg.devices, NULL), 0);
	ck_assert_int_eq(placefs_stagers_create(&cfg, &s, NULL), 0);
	ck_assert_ptr_null(s);
	ck_assert_uint_eq(placefs_stagers_count(NULL), 0);
	placefs_stagers_free(NULL);

	/* Four host devices: four rings of their own, each exported under its own name. */
	s = mk("host:3,host:0,host:1,host:2", MiB, 2);
	ck_assert_uint_eq(placefs_stagers_count(s), 4);
	for (i = 0; i < 4; i++) {
		placefs_backend_get_info(placefs_stager_backend(placefs_stagers_at(s, i)),
		                         &info[i]);
		ck_assert_int_eq(info[i].device.kind, PLACEFS_DEVICE_HOST);
		ck_assert_int_eq(info[i].device.index, i == 0 ? 3 : (int)i - 1);
		ck_assert_uint_eq(info[i].ring_bytes, MiB);
		ck_assert_uint_eq(info[i].handle_kind, PLACEFS_IOC_HANDLE_HOST_SHM);
		for (j = 0; j < i; j++)
			ck_assert_str_ne((const char *)info[i].handle,
			                 (const char *)info[j].handle);
		ck_assert_int_eq(placefs_stagers_find(s, info[i].device, NULL), (int)i);
	}
	ck_assert_ptr_null(placefs_stagers_at(s, 4));
	ck_assert_uint_eq(placefs_stagers_devices(s)->n, 4);
	placefs_stagers_free(s);

	/* A lone host is the single ring of old, index -1. */
	s = mk("host", MiB, 1);
	ck_assert_uint_eq(placefs_stagers_count(s), 1);
	placefs_backend_get_info(placefs_stager_backend(placefs_stagers_at(s, 0)), &info[0]);
	ck_assert_int_eq(info[0].device.index, -1);
	placefs_stagers_free(s);

	/* Refusals: a list built by hand with a device twice, or a bad one; a failing device. */
	memset(&cfg.devices, 0, sizeof(cfg.devices));
	cfg.devices.n = 2;
	cfg.devices.items[0] = cfg.devices.items[1] =
	        (struct placefs_device){PLACEFS_DEVICE_HOST, 1};
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stagers_create(&cfg, &s, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "staging: host:1 is listed twice");
	cfg.devices.items[1] = (struct placefs_device){PLACEFS_DEVICE_HOST, 99};
	ck_assert_int_eq(placefs_stagers_create(&cfg, &s, NULL), -EINVAL);
	cfg.devices.items[1] = (struct placefs_device){PLACEFS_DEVICE_NONE, -1};
	ck_assert_int_eq(placefs_stagers_create(&cfg, &s, NULL), -EINVAL);
	ck_assert_int_eq(placefs_devices_parse("host:0,host:1", &cfg.devices, NULL), 0);
	cfg.stager.host_buffer = 1; /* below PLACEFS_HOST_BUFFER_MIN */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stagers_create(&cfg, &s, &err), -EINVAL);
	ck_assert_ptr_null(s);
	ck_assert_msg(strncmp(err.msg, "device host:0 (1 of 2): ", 24) == 0, "%s", err.msg);
	cfg.stager.host_buffer = 0;

	/* cuda:all: resolved against the CUDA devices there are. */
	ck_assert_int_eq(placefs_devices_parse("cuda:all", &cfg.devices, NULL), 0);
	placefs_error_clear(&err);
	if (placefs_backend_cuda_devices(NULL) <= 0) {
		ck_assert_int_eq(placefs_stagers_create(&cfg, &s, &err), -ENODEV);
		ck_assert_ptr_nonnull(strstr(err.msg, "cuda:all: no CUDA device is visible"));
	} else {
		ck_assert_msg(placefs_stagers_create(&cfg, &s, &err) == 0, "%s", err.msg);
		ck_assert_uint_eq(placefs_stagers_count(s),
		                  (unsigned)placefs_backend_cuda_devices(NULL));
		placefs_stagers_free(s);
	}
}
END_TEST

START_TEST(test_route)
{
	struct placefs_stagers *s = mk("host:0,host:1", MiB, 1);
	struct placefs_stagers *one = mk("host", MiB, 1);
	struct placefs_device d;
	struct placefs_dest dest;
	struct placefs_error err;
	uint8_t h[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES] = {1};

	d = (struct placefs_device){PLACEFS_DEVICE_HOST, 1};
	ck_assert_int_eq(placefs_stagers_route(s, &d, NULL, NULL), 1);
	d.index = 0;
	ck_assert_int_eq(placefs_stagers_route(s, &d, NULL, NULL), 0);
	/* A device the mount does not stage to. */
	d.index = 2;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stagers_route(s, &d, NULL, &err), -ENODEV);
	ck_assert_str_eq(err.msg, "host:2: this mount does not stage to that device (it stages to "
	                          "host:0,host:1)");
	d = (struct placefs_device){PLACEFS_DEVICE_CUDA, 0};
	ck_assert_int_eq(placefs_stagers_route(s, &d, NULL, NULL), -ENODEV);
	d = (struct placefs_device){PLACEFS_DEVICE_HOST, -1};
	ck_assert_int_eq(placefs_stagers_route(s, &d, NULL, NULL), -ENODEV);
	ck_assert_int_eq(placefs_stagers_route(one, &d, NULL, NULL), 0);
	/* Nothing named: one device takes it; several cannot guess for a borrow or shm. */
	ck_assert_int_eq(placefs_stagers_route(one, NULL, NULL, NULL), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stagers_route(s, NULL, NULL, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "this mount stages to 2 devices (host:0,host:1): the request "
	                          "must name one");
	ck_assert_int_eq(placefs_dest_shm(&dest, "/placefs-test-x", 0, 10, NULL), 0);
	ck_assert_int_eq(placefs_stagers_route(s, NULL, &dest, NULL), -EINVAL);
	ck_assert_int_eq(placefs_stagers_route(one, NULL, &dest, NULL), 0);
	/* A CUDA IPC destination on host rings: nobody can tell where it lives. */
	ck_assert_int_eq(placefs_dest_cuda_ipc(&dest, h, sizeof(h), 0, 10, NULL), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stagers_route(s, NULL, &dest, &err), -EOPNOTSUPP);
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot tell which of host:0,host:1 the destination "
	                                      "lives on (name the device)"));
	placefs_stagers_free(one);
	placefs_stagers_free(s);
}
END_TEST

/*
 * Each device's ring is its own and bounded: one ring full does not stop
 * another; leases carry their device; stats are per device and summed.
 */
START_TEST(test_rings_independent)
{
	static const struct timespec now = {0, 0};
	struct placefs_stagers *s = mk("host:0,host:1,host:2", MiB, 2);
	struct placefs_stage_opts o = {.name = "t", .owner = 5};
	struct placefs_stage_opts tryo = {.name = "t", .deadline = &now};
	struct placefs_stage_span full, sp, sp2;
	struct placefs_stager_stats ss, tot;
	struct placefs_error err;
	struct placefs_dest dest;
	struct file f;
	uint8_t *got = malloc(MiB), *dst;
	char name[64];
	unsigned i;

	file_open(&f, 2 * MiB);
	/* Device 0's ring is full ... */
	ck_assert_int_eq(placefs_stagers_stage(s, 0, f.fd, 0, MiB, &o, &full, NULL), 0);
	ck_assert_int_eq(placefs_stagers_lease_pos(s, full.lease), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stagers_stage(s, 0, f.fd, 0, 4096, &tryo, &sp, &err), -ETIMEDOUT);
	/* ... and devices 1 and 2 stage at once, each a whole ring's worth. */
	ck_assert_int_eq(placefs_stagers_stage(s, 1, f.fd, 7, MiB, &tryo, &sp, NULL), 0);
	ck_assert_int_eq(placefs_stagers_lease_pos(s, sp.lease), 1);
	ck_assert_int_eq(placefs_stagers_stage(s, 2, f.fd, 99, MiB, &tryo, &sp2, NULL), 0);
	ck_assert_int_eq(placefs_stagers_lease_pos(s, sp2.lease), 2);
	ring_bytes(s, 1, &sp, got);
	ck_assert(memcmp(got, f.data + 7, MiB) == 0);
	ring_bytes(s, 2, &sp2, got);
	ck_assert(memcmp(got, f.data + 99, MiB) == 0);
	ring_bytes(s, 0, &full, got);
	ck_assert(memcmp(got, f.data, MiB) == 0);
	/* No ring holds more than its own size: a second MiB on 1 waits. */
	ck_assert_int_eq(placefs_stagers_stage(s, 1, f.fd, 0, 1, &tryo, &sp, NULL), -ETIMEDOUT);
	ck_assert_int_eq(placefs_stagers_stage(s, 1, f.fd, 0, MiB + 1, &o, &sp, NULL), -EFBIG);
	ck_assert_int_eq(placefs_stagers_stage(s, 3, f.fd, 0, 1, &o, &sp, NULL), -ENODEV);

	/* Copy out of a lease of device 2 through the set. */
	snprintf(name, sizeof(name), "/placefs-test-%ld-sg", (long)getpid());
	{
		int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ftruncate(fd, (off_t)MiB), 0);
		dst = mmap(NULL, MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		ck_assert_ptr_ne(dst, MAP_FAILED);
		close(fd);
	}
	ck_assert_int_eq(placefs_dest_shm(&dest, name, 0, MiB, NULL), 0);
	ck_assert_int_eq(placefs_stagers_copy_out(s, sp2.lease, &dest, NULL), 0);
	ck_assert(memcmp(dst, f.data + 99, MiB) == 0);
	/* Ids are each ring's own: one never granted on device 1, or past the last device. */
	ck_assert_int_eq(placefs_stagers_release(s, 999 | 1ULL << 56, 0), -ENOENT);
	ck_assert_int_eq(placefs_stagers_release(s, sp2.lease | 5ULL << 56, 0), -ENOENT);
	ck_assert_int_eq(placefs_stagers_copy_out(s, 7ULL << 56 | 1, &dest, NULL), -ENOENT);
	ck_assert_int_eq(placefs_stagers_release(s, 0, 0), -ENOENT);
	ck_assert_int_eq(placefs_stagers_release(s, sp2.lease, 0), 0);
	ck_assert_int_eq(placefs_stagers_release(s, sp2.lease, 0), -ENOENT);
	ck_assert_int_eq(placefs_stagers_release(s, sp.lease, 0), -ENOENT); /* never granted */
	/* Copy mode on device 1, the others untouched. */
	memset(dst, 0, MiB);
	placefs_stager_stats(placefs_stagers_at(s, 1), &ss);
	ck_assert_int_eq(placefs_stagers_release(s, full.lease, 5), 0);
	ck_assert_int_eq(placefs_stagers_stage_copy(s, 0, f.fd, 1000, 5000, NULL, &dest, &sp, NULL),
	                 0);
	ck_assert(memcmp(dst, f.data + 1000, 5000) == 0);
	ck_assert_int_eq(placefs_stagers_stage_copy(s, 9, f.fd, 1000, 5000, NULL, &dest, &sp, NULL),
	                 -ENODEV);
	/* Device 1 still holds its lease (of owner 0): released by lease, not by owner 5. */
	ck_assert_uint_eq(placefs_stagers_release_owner(s, 5), 0);

	placefs_stagers_stats(s, &tot);
	ck_assert_uint_eq(tot.ring_capacity, 3 * MiB);
	ck_assert_uint_eq(tot.ring_used, MiB); /* device 1's lease */
	ck_assert_uint_eq(tot.staged[PLACEFS_IOC_STAGE_BORROW], 3);
	ck_assert_uint_eq(tot.staged[PLACEFS_IOC_STAGE_COPY], 1);
	ck_assert_uint_eq(tot.io_threads, 6);
	ck_assert_uint_eq(tot.chunk_bytes, 4 * KiB);
	for (i = 0; i < 3; i++) {
		placefs_stager_stats(placefs_stagers_at(s, i), &ss);
		ck_assert_uint_le(ss.ring_high_water, ss.ring_capacity);
		ck_assert_uint_eq(ss.ring_high_water, MiB);
		ck_assert_uint_eq(ss.ring_used, i == 1 ? MiB : 0);
	}
	ck_assert_uint_eq(placefs_stagers_dest_count(s), 2); /* devices 2 and 0 each opened it */
	shm_unlink(name);
	ck_assert_uint_eq(placefs_stagers_sweep(s), 2);
	placefs_stagers_wake(s);
	munmap(dst, MiB);
	free(got);
	file_close(&f);
	placefs_stagers_free(s); /* with device 1's lease outstanding */
}
END_TEST

/* Concurrent stages to four devices, whole tensors and slices, each checked against the file. */
struct worker {
	struct placefs_stagers *s;
	const struct file *f;
	unsigned pos;
	uint64_t seed;
	unsigned done;
	uint64_t bytes;
	int failed;
	char msg[1100];
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	uint8_t *got = malloc(MiB), *want = malloc(MiB);
	unsigned k;

	for (k = 0; k < 60 && !w->failed; k++) {
		uint64_t cols = 1 + rnd(&w->seed) % 600, rows = 1 + rnd(&w->seed) % 200;
		uint64_t tb = rows * cols * 4, off = rnd(&w->seed) % (w->f->size - tb);
		uint64_t start = rnd(&w->seed) % cols, len = 1 + rnd(&w->seed) % (cols - start), r;
		const uint64_t shape[2] = {rows, cols};
		struct placefs_slice sl = {1, start, len};
		struct placefs_slice_layout l;
		struct placefs_stage_opts o = {.name = "w", .owner = 100 + w->pos, .slice = &l};
		struct placefs_stage_span sp;
		struct placefs_error err;
		struct placefs_backend *be;

		if (k % 3 == 0)
			o.slice = NULL; /* a whole tensor */
		if (placefs_slice_layout("w", PLACEFS_DT_F32, 2, shape, tb, &sl, &l, &err) != 0) {
			snprintf(w->msg, sizeof(w->msg), "layout: %s", err.msg);
			w->failed = 1;
			break;
		}
		placefs_error_clear(&err);
		if (placefs_stagers_stage(w->s, w->pos, w->f->fd, off, tb, &o, &sp, &err) != 0) {
			snprintf(w->msg, sizeof(w->msg), "stage: %s", err.msg);
			w->failed = 1;
			break;
		}
		if (placefs_stagers_lease_pos(w->s, sp.lease) != (int)w->pos) {
			snprintf(w->msg, sizeof(w->msg), "lease of the wrong device");
			w->failed = 1;
		}
		if (o.slice)
			for (r = 0; r < rows; r++)
				memcpy(want + r * len * 4,
				       w->f->data + off + (r * cols + start) * 4, len * 4);
		else
			memcpy(want, w->f->data + off, tb);
		be = (struct placefs_backend *)placefs_stager_backend(
		        placefs_stagers_at(w->s, w->pos));
		if (sp.nbytes != (o.slice ? rows * len * 4 : tb) ||
		    placefs_backend_read_ring(be, sp.ring_offset, got, sp.nbytes, NULL) != 0 ||
		    memcmp(got, want, sp.nbytes) != 0) {
			snprintf(w->msg, sizeof(w->msg), "device %u: wrong bytes", w->pos);
			w->failed = 1;
		}
		w->bytes += sp.nbytes;
		placefs_stagers_release(w->s, sp.lease, 100 + w->pos);
		w->done++;
	}
	free(got);
	free(want);
	return NULL;
}

START_TEST(test_concurrent_devices)
{
	struct placefs_stagers *s = mk("host:0,host:1,host:2,host:3", 2 * MiB, 2);
	struct worker w[8];
	pthread_t tid[8];
	struct file f;
	uint64_t per[4] = {0}, count[4] = {0};
	unsigned i;

	file_open(&f, 4 * MiB);
	for (i = 0; i < 8; i++) {
		w[i] = (struct worker){.s = s, .f = &f, .pos = i % 4, .seed = 0x9E37 + i * 7919};
		ck_assert_int_eq(pthread_create(&tid[i], NULL, work, &w[i]), 0);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(tid[i], NULL);
		ck_assert_msg(!w[i].failed, "worker %u: %s", i, w[i].msg);
		per[w[i].pos] += w[i].bytes;
		count[w[i].pos] += w[i].done;
	}
	for (i = 0; i < 4; i++) {
		struct placefs_stager_stats ss;

		placefs_stager_stats(placefs_stagers_at(s, i), &ss);
		ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_BORROW], count[i]);
		ck_assert_uint_eq(ss.staged_bytes[PLACEFS_IOC_STAGE_BORROW], per[i]);
		ck_assert_uint_le(ss.ring_high_water, 2 * MiB);
		ck_assert_uint_eq(ss.ring_used, 0);
		ck_assert_uint_eq(ss.errors, 0);
		ck_assert_uint_gt(ss.slices, 0);
	}
	file_close(&f);
	placefs_stagers_free(s);
}
END_TEST

/*
 * The CUDA path on one GPU: a set of cuda:0, slices (rows and columns) staged
 * by borrow (read back from the ring) and by copy into another process's
 * cudaMalloc destination through its IPC handle (the allocation's device
 * found with placefs_backend_dest_device()), the bytes checked by that
 * process; only the slice's bytes are read; cuda:all is every device. The
 * child allocates first, before this process touches CUDA (no CUDA across
 * fork()); without a GPU it says so and the test has nothing to run.
 */
#define DEST_BYTES (2 * MiB)
START_TEST(test_cuda_slices_ipc)
{
	const uint64_t shape[2] = {512, 1024}; /* BF16: 1 MiB */
	struct placefs_slice_layout l0, l1;
	struct placefs_slice s0 = {0, 128, 64}, s1 = {1, 256, 256};
	struct placefs_stage_opts o0 = {.name = "w0", .slice = &l0},
	                          o1 = {.name = "w1", .slice = &l1};
	struct placefs_stagers_config cfg = {
	        .stager = {.ring_bytes = 8 * MiB, .host_buffer = MiB, .io_threads = 2}};
	uint8_t ipc[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES], *got, *want0, *want1;
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stagers *s = NULL;
	struct placefs_error err;
	struct placefs_device where;
	struct placefs_dest dest;
	struct file f;
	char *dump;
	int to_parent[2], to_child[2], status;
	uint64_t r;
	size_t n;
	pid_t pid;
	ssize_t k;
	char ok;

	ck_assert_int_eq(pipe(to_parent), 0);
	ck_assert_int_eq(pipe(to_child), 0);
	file_open(&f, 4 * MiB);
	dump = tu_path(f.dir, "dest.bin");
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		void *dptr = NULL;
		uint8_t *host = malloc(DEST_BYTES);
		int fail;

		fail = placefs_devmem_alloc(0, DEST_BYTES, &dptr, ipc, NULL) != 0;
		ok = fail ? 'n' : 'y';
		if (write(to_parent[1], &ok, 1) != 1 ||
		    (!fail && write(to_parent[1], ipc, sizeof(ipc)) != (ssize_t)sizeof(ipc)))
			_exit(3);
		if (fail)
			_exit(0);
		if (read(to_child[0], &ok, 1) != 1)
			_exit(4);
		if (placefs_devmem_to_host(0, dptr, host, DEST_BYTES, NULL) != 0)
			_exit(5);
		tu_write_file(dump, host, DEST_BYTES);
		placefs_devmem_free(0, dptr);
		_exit(0);
	}
	ck_assert_int_eq(read(to_parent[0], &ok, 1), 1);
	if (ok != 'y') {
		fprintf(stderr, "test_cuda_slices_ipc: no CUDA device: nothing to run\n");
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		file_close(&f);
		free(dump);
		return;
	}
	ck_assert_int_eq(read(to_parent[0], ipc, sizeof(ipc)), (ssize_t)sizeof(ipc));

	ck_assert_int_eq(placefs_devices_parse("cuda:0", &cfg.devices, NULL), 0);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stagers_create(&cfg, &s, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(placefs_slice_layout("w0", PLACEFS_DT_BF16, 2, shape, MiB, &s0, &l0, NULL),
	                 0);
	ck_assert_int_eq(placefs_slice_layout("w1", PLACEFS_DT_BF16, 2, shape, MiB, &s1, &l1, NULL),
	                 0);
	ck_assert_uint_eq(l1.rows, 512);
	want0 = malloc(l0.nbytes);
	want1 = malloc(l1.nbytes);
	memcpy(want0, f.data + 4096 + 128 * 2048, l0.nbytes);
	for (r = 0; r < 512; r++)
		memcpy(want1 + r * 512, f.data + 4096 + r * 2048 + 512, 512);

	/* Where the destination lives: cuda:0. */
	ck_assert_int_eq(placefs_dest_cuda_ipc(&dest, ipc, sizeof(ipc), 0, DEST_BYTES, NULL), 0);
	dest.pid = pid;
	placefs_error_clear(&err);
	ck_assert_msg(placefs_backend_dest_device((struct placefs_backend *)placefs_stager_backend(
	                                                  placefs_stagers_at(s, 0)),
	                                          &dest, &where, &err) == 0,
	              "%s", err.msg);
	ck_assert_int_eq(where.kind, PLACEFS_DEVICE_CUDA);
	ck_assert_int_eq(where.index, 0);
	ck_assert_int_eq(placefs_stagers_route(s, NULL, &dest, NULL), 0);
	ck_assert_int_eq(placefs_stagers_route(s, &where, &dest, NULL), 0);

	/* Copy: the row slice at 0, the column slice at 1 MiB of the destination. */
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stagers_stage_copy(s, 0, f.fd, 4096, MiB, &o0, &dest, &sp, &err) == 0,
	              "%s", err.msg);
	ck_assert_uint_eq(sp.nbytes, l0.nbytes);
	dest.offset = MiB;
	ck_assert_msg(placefs_stagers_stage_copy(s, 0, f.fd, 4096, MiB, &o1, &dest, &sp, &err) == 0,
	              "%s", err.msg);
	ck_assert_uint_eq(sp.nbytes, l1.nbytes);
	/* Borrow: the ring holds the column slice, compacted. */
	ck_assert_msg(placefs_stagers_stage(s, 0, f.fd, 4096, MiB, &o1, &sp, &err) == 0, "%s",
	              err.msg);
	got = malloc(l1.nbytes);
	ck_assert_int_eq(placefs_backend_read_ring((struct placefs_backend *)placefs_stager_backend(
	                                                   placefs_stagers_at(s, 0)),
	                                           sp.ring_offset, got, l1.nbytes, NULL),
	                 0);
	ck_assert(memcmp(got, want1, l1.nbytes) == 0);
	ck_assert_int_eq(placefs_stagers_release(s, sp.lease, 0), 0);
	placefs_stagers_stats(s, &ss);
	ck_assert_uint_eq(ss.slice_bytes, l0.nbytes + 2 * l1.nbytes);
	ck_assert_uint_ge(ss.strided_read_bytes, 2 * l1.nbytes);
	ck_assert_uint_eq(ss.read_bytes - ss.strided_read_bytes, l0.nbytes);
	ck_assert_uint_eq(ss.errors, 0);
	placefs_stagers_free(s); /* closes the import before the child frees */

	ok = 'g';
	ck_assert_int_eq(write(to_child[1], &ok, 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	free(got);
	got = tu_read_file(dump, &n);
	ck_assert_uint_eq(n, DEST_BYTES);
	ck_assert_msg(memcmp(got, want0, l0.nbytes) == 0, "row slice differs in device memory");
	ck_assert_msg(memcmp(got + MiB, want1, l1.nbytes) == 0,
	              "column slice differs in device memory");
	k = placefs_backend_cuda_devices(NULL);
	ck_assert_int_ge(k, 1);
	/* cuda:all: every device. */
	ck_assert_int_eq(placefs_devices_parse("cuda:all", &cfg.devices, NULL), 0);
	cfg.stager.ring_bytes = MiB;
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stagers_create(&cfg, &s, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(placefs_stagers_count(s), (unsigned)k);
	placefs_stagers_free(s);
	free(got);
	free(want0);
	free(want1);
	free(dump);
	file_close(&f);
}
END_TEST

static Suite *stagers_suite(void)
{
	Suite *s = suite_create("stagers");
	TCase *tc = tcase_create("host");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_create_and_devices);
	tcase_add_test(tc, test_route);
	tcase_add_test(tc, test_rings_independent);
	tcase_add_test(tc, test_concurrent_devices);
	suite_add_tcase(s, tc);
	tc = tcase_create("cuda");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cuda_slices_ipc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(stagers_suite());
}
