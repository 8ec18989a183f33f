/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "staging/stage.h"
#include "testutil.h"

#define MiB (1ULL << 20)
#define KiB (1ULL << 10)

/* Byte i of every test file. */
static uint8_t fbyte(uint64_t i)
{
	uint64_t x = i * 0x9E3779B97F4A7C15ULL;

	return (uint8_t)(x >> 56 ^ x >> 23 ^ i);
}

struct fixture {
	char *dir;
	char *path;
	int fd;
	uint64_t size;
	uint8_t *data;
};

static void fx_open(struct fixture *fx, uint64_t size)
{
	uint64_t i;

	fx->dir = tu_mkdtemp();
	fx->path = tu_path(fx->dir, "shard.safetensors");
	fx->size = size;
	fx->data = malloc(size ? size : 1);
	ck_assert_ptr_nonnull(fx->data);
	for (i = 0; i < size; i++)
		fx->data[i] = fbyte(i);
	tu_write_file(fx->path, fx->data, size);
	fx->fd = open(fx->path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fx->fd, 0);
}

static void fx_close(struct fixture *fx)
{
	close(fx->fd);
	tu_rmtree(fx->dir);
	free(fx->path);
	free(fx->dir);
	free(fx->data);
}

/* A stager with zero-copy as asked (cfg.zero_copy: 0 default, > 0 on, < 0 off). */
static struct placefs_stager *mk_zc(const char *dev, uint64_t ring, uint64_t hb, unsigned threads,
                                    int prefetch, int zero_copy)
{
	struct placefs_stager_config cfg = {
	        .device = tu_device(dev),
	        .ring_bytes = ring,
	        .host_buffer = hb,
	        .io_threads = threads,
	        .prefetch = prefetch,
	        .zero_copy = zero_copy,
	};
	struct placefs_stager *st = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_stager_create(&cfg, &st, &err) == 0, "%s", err.msg);
	ck_assert_ptr_nonnull(st);
	return st;
}

static struct placefs_stager *mk(const char *dev, uint64_t ring, uint64_t hb, unsigned threads,
                                 int prefetch)
{
	return mk_zc(dev, ring, hb, threads, prefetch, 0);
}

/* Maps the exported ring of a host stager read-only. */
static const uint8_t *ring_view(struct placefs_stager *st)
{
	struct placefs_backend_info info;
	void *p;
	int fd;

	placefs_backend_get_info(placefs_stager_backend(st), &info);
	ck_assert_uint_eq(info.handle_kind, PLACEFS_IOC_HANDLE_HOST_SHM);
	fd = shm_open((const char *)info.handle, O_RDONLY, 0);
	ck_assert_int_ge(fd, 0);
	p = mmap(NULL, info.ring_bytes, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	close(fd);
	return p;
}

static void ring_unview(struct placefs_stager *st, const uint8_t *p)
{
	struct placefs_backend_info info;

	placefs_backend_get_info(placefs_stager_backend(st), &info);
	munmap((void *)p, info.ring_bytes);
}

/* The ring bytes of a span equal the file bytes, through read_ring. */
static void check_span(struct placefs_stager *st, const struct placefs_stage_span *sp,
                       const struct fixture *fx, uint64_t file_off)
{
	struct placefs_backend *be = (struct placefs_backend *)placefs_stager_backend(st);
	struct placefs_error err;
	uint8_t *buf = malloc(sp->nbytes ? sp->nbytes : 1);

	placefs_error_clear(&err);
	ck_assert_msg(placefs_backend_read_ring(be, sp->ring_offset, buf, sp->nbytes, &err) == 0,
	              "%s", err.msg);
	ck_assert_msg(memcmp(buf, fx->data + file_off, sp->nbytes) == 0,
	              "ring bytes differ from the file (offset %llu, %llu bytes)",
	              (unsigned long long)file_off, (unsigned long long)sp->nbytes);
	free(buf);
}

static uint8_t *shm_make(const char *name, uint64_t size)
{
	void *p;
	int fd;

	shm_unlink(name);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	close(fd);
	return p;
}

START_TEST(test_none_and_bad_config)
{
	struct placefs_stager_config cfg = {.device = tu_device("none"), .ring_bytes = MiB};
	struct placefs_stager *st = (struct placefs_stager *)1;
	struct placefs_error err;

	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), 0);
	ck_assert_ptr_null(st);
	cfg.device = tu_device("host");
	cfg.io_threads = 1000;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "I/O threads"));
	cfg.io_threads = 0;
	cfg.align = 3;
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), -EINVAL);
	cfg.align = 0;
	cfg.ring_bytes = 0;
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), -EINVAL);
	cfg.ring_bytes = MiB;
	cfg.device = (struct placefs_device){PLACEFS_DEVICE_CUDA, -1};
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), -EINVAL);
	ck_assert_ptr_null(st);
	placefs_stager_free(NULL);
}
END_TEST

/* Tensors of awkward sizes, staged, checked in the ring and in a destination. */
START_TEST(test_end_to_end_host)
{
	static const uint64_t sizes[] = {0,     1,     4095,         4096, 4097,   12345,
	                                 65536, 99999, 1 * MiB + 13, 8192, 3 * MiB};
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct placefs_error err;
	struct placefs_dest d;
	struct fixture fx;
	const uint8_t *view;
	uint8_t *dst;
	char name[64];
	uint64_t off = 8 + 1234, total = 0;
	unsigned i, n = sizeof(sizes) / sizeof(sizes[0]);

	for (i = 0; i < n; i++)
		total += sizes[i];
	fx_open(&fx, off + total + 77);
	/* 16 chunks of 4 KiB over 4 threads: many pieces per tensor. */
	st = mk("host", 4 * MiB, 64 * KiB, 4, 0);
	view = ring_view(st);
	snprintf(name, sizeof(name), "/placefs-test-%ld-s", (long)getpid());
	dst = shm_make(name, 4 * MiB);

	for (i = 0; i < n; i++) {
		struct placefs_stage_opts o = {.name = "t", .owner = 1};
		struct placefs_stage_span sp;

		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, off, sizes[i], &o, &sp, &err) == 0,
		              "tensor %u: %s", i, err.msg);
		ck_assert_uint_ne(sp.lease, 0);
		ck_assert_uint_eq(sp.nbytes, sizes[i]);
		ck_assert_uint_eq(sp.ring_offset % PLACEFS_STAGE_ALIGN_DEFAULT, 0);
		ck_assert_uint_le(sp.ring_offset + sp.nbytes, 4 * MiB);
		ck_assert_int_eq(sp.prefetched, 0);
		ck_assert_uint_ge(sp.total_ns, sp.read_ns);
		/* The exported shm shows the bytes, and read_ring agrees. */
		ck_assert(memcmp(view + sp.ring_offset, fx.data + off, sizes[i]) == 0);
		check_span(st, &sp, &fx, off);
		/* Copy out to a destination at an odd offset. */
		memset(dst, 0xee, 4 * MiB);
		ck_assert_int_eq(placefs_dest_shm(&d, name, 333, 4 * MiB, NULL), 0);
		ck_assert_msg(placefs_stager_copy_out(st, sp.lease, &d, &err) == 0, "%s", err.msg);
		ck_assert(memcmp(dst + 333, fx.data + off, sizes[i]) == 0);
		ck_assert_uint_eq(dst[332], 0xee);
		ck_assert_uint_eq(dst[333 + sizes[i]], 0xee);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 1), 0);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 1), -ENOENT);
		off += sizes[i];
	}

	/* Copy mode in one call. */
	off = 8 + 1234;
	for (i = 0; i < n; i++) {
		struct placefs_stage_span sp;

		memset(dst, 0, 4 * MiB);
		ck_assert_int_eq(placefs_dest_shm(&d, name, 4 * MiB - sizes[i], 4 * MiB, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage_copy(st, fx.fd, off, sizes[i], NULL, &d, &sp,
		                                        &err) == 0,
		              "tensor %u: %s", i, err.msg);
		ck_assert_uint_eq(sp.lease, 0);
		ck_assert_uint_eq(sp.nbytes, sizes[i]);
		ck_assert(memcmp(dst + 4 * MiB - sizes[i], fx.data + off, sizes[i]) == 0);
		off += sizes[i];
	}

	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_BORROW], n);
	ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_COPY], n);
	ck_assert_uint_eq(ss.staged_bytes[PLACEFS_IOC_STAGE_BORROW], total);
	ck_assert_uint_eq(ss.staged_bytes[PLACEFS_IOC_STAGE_COPY], total);
	ck_assert_uint_eq(ss.copied_out, n);
	ck_assert_uint_eq(ss.read_bytes, 2 * total);
	ck_assert_uint_eq(ss.leases, 0);
	ck_assert_uint_eq(ss.errors, 0);
	ck_assert_uint_eq(ss.ring_used, 0);
	ck_assert_uint_eq(ss.ring_capacity, 4 * MiB);
	ck_assert_uint_eq(ss.chunk_bytes, 4 * KiB);
	ck_assert_uint_eq(ss.io_threads, 4);
	ck_assert_uint_le(ss.host_buffer_bytes, 64 * KiB);

	/* A destination too small is refused before any read. */
	ck_assert_int_eq(placefs_dest_shm(&d, name, 4 * MiB - 10, 4 * MiB, NULL), 0);
	{
		struct placefs_stage_span sp;

		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage_copy(st, fx.fd, 0, 11, NULL, &d, &sp, &err),
		                 -EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "destination too small"));
	}
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.read_bytes, 2 * total);

	ring_unview(st, view);
	munmap(dst, 4 * MiB);
	shm_unlink(name);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/* The seed's case: five 4 MiB tensors through an 8 MiB ring, consumed one by one. */
struct producer {
	struct placefs_stager *st;
	int fd;
	struct placefs_stage_span sp[5];
	int rc[5];
	int produced;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	int i;

	for (i = 0; i < 5; i++) {
		struct placefs_stage_opts o = {.name = "seed"};

		p->rc[i] = placefs_stager_stage(p->st, p->fd, (uint64_t)i * 4 * MiB, 4 * MiB, &o,
		                                &p->sp[i], NULL);
		__atomic_store_n(&p->produced, i + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

START_TEST(test_backpressure_seed)
{
	struct placefs_stager_stats ss;
	struct producer p = {0};
	struct fixture fx;
	pthread_t th;
	int i;

	fx_open(&fx, 20 * MiB);
	p.st = mk("host", 8 * MiB, 1 * MiB, 0, 0);
	p.fd = fx.fd;
	ck_assert_int_eq(pthread_create(&th, NULL, produce, &p), 0);
	while (__atomic_load_n(&p.produced, __ATOMIC_ACQUIRE) < 2)
		usleep(1000);
	usleep(50000);
	/* The third tensor waits for space: the ring never grows. */
	ck_assert_int_eq(__atomic_load_n(&p.produced, __ATOMIC_ACQUIRE), 2);
	for (i = 0; i < 5; i++) {
		while (__atomic_load_n(&p.produced, __ATOMIC_ACQUIRE) <= i)
			usleep(1000);
		ck_assert_int_eq(p.rc[i], 0);
		/* Two slots' worth: every span sits at 0 or 4 MiB, never across the end. */
		ck_assert(p.sp[i].ring_offset == 0 || p.sp[i].ring_offset == 4 * MiB);
		check_span(p.st, &p.sp[i], &fx, (uint64_t)i * 4 * MiB);
		ck_assert_int_eq(placefs_stager_release(p.st, p.sp[i].lease, 0), 0);
	}
	pthread_join(th, NULL);
	placefs_stager_stats(p.st, &ss);
	ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_BORROW], 5);
	/* The third waited for sure; later ones only if they beat the consumer. */
	ck_assert_uint_ge(ss.ring_waits, 1);
	ck_assert_uint_eq(ss.ring_high_water, 8 * MiB);
	ck_assert_uint_eq(ss.ring_used, 0);
	placefs_stager_free(p.st);
	fx_close(&fx);
}
END_TEST

/* Copy mode from several threads at once through a ring smaller than the sum. */
struct copier {
	struct placefs_stager *st;
	int fd;
	const char *dest;
	unsigned first, step;
	int failures;
};

static void *copy_some(void *arg)
{
	struct copier *c = arg;
	unsigned i;

	for (i = c->first; i < 10; i += c->step) {
		struct placefs_stage_span sp;
		struct placefs_dest d;
		struct placefs_error err;

		placefs_error_clear(&err);
		placefs_dest_shm(&d, c->dest, (uint64_t)i * 2 * MiB, 20 * MiB, NULL);
		if (placefs_stager_stage_copy(c->st, c->fd, (uint64_t)i * 2 * MiB, 2 * MiB, NULL,
		                              &d, &sp, &err) != 0) {
			fprintf(stderr, "copy %u: %s\n", i, err.msg);
			c->failures++;
		}
	}
	return NULL;
}

/*
 * Ten 2 MiB copies from nthreads threads at once into one 20 MiB shm
 * destination, through a 5 MiB ring (direct: straight into the
 * destination): every byte lands, each stage counts once, and the ring is
 * never over-committed (direct copies never touch it).
 */
static void copy_concurrent(unsigned nthreads, uint64_t host_buffer, bool direct)
{
	struct copier c[4];
	pthread_t th[4];
	struct fixture fx;
	struct placefs_stager *st;
	struct placefs_stager_stats ss;
	char name[64];
	uint8_t *dst;
	unsigned i;

	ck_assert_uint_le(nthreads, 4);
	fx_open(&fx, 20 * MiB);
	if (!direct)
		setenv("PLACEFS_STAGE_DIRECT", "0", 1);
	st = mk("host", 5 * MiB, host_buffer, nthreads, 0);
	unsetenv("PLACEFS_STAGE_DIRECT");
	snprintf(name, sizeof(name), "/placefs-test-%ld-c%d", (long)getpid(), direct);
	dst = shm_make(name, 20 * MiB);
	for (i = 0; i < nthreads; i++) {
		c[i] = (struct copier){
		        .st = st, .fd = fx.fd, .dest = name, .first = i, .step = nthreads};
		ck_assert_int_eq(pthread_create(&th[i], NULL, copy_some, &c[i]), 0);
	}
	for (i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(c[i].failures, 0);
	}
	ck_assert(memcmp(dst, fx.data, 20 * MiB) == 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_COPY], 10);
	ck_assert_uint_eq(ss.direct_stages, direct ? 10 : 0);
	ck_assert_uint_eq(ss.direct_bytes, direct ? 20 * MiB : 0);
	if (direct)
		ck_assert_uint_eq(ss.ring_high_water, 0);
	else
		ck_assert_uint_le(ss.ring_high_water, 5 * MiB);
	ck_assert_uint_eq(ss.ring_used, 0);
	munmap(dst, 20 * MiB);
	shm_unlink(name);
	placefs_stager_free(st);
	fx_close(&fx);
}

START_TEST(test_copy_mode_concurrent)
{
	copy_concurrent(3, 256 * KiB, false);
}
END_TEST

/*
 * Direct copies: copy mode lands the exact bytes at the destination's
 * offset without touching the ring (high water 0, no wait, no lease), in
 * pieces over several I/O threads and concurrent callers; the ring's rule
 * still holds (a range larger than the ring is -EFBIG), a destination too
 * small is -EINVAL before any read, a short read is -EIO; with direct
 * copies off (config or $PLACEFS_STAGE_DIRECT=0) the same copy goes
 * through the ring; a bad $PLACEFS_STAGE_DIRECT is refused at create; a
 * prefetched span of the key is adopted instead of read again.
 */
START_TEST(test_direct_copy)
{
	struct placefs_stage_opts o = {.name = "model.layers.0.mlp.up_proj.weight"};
	struct placefs_stager_config cfg = {.device = tu_device("host"),
	                                    .ring_bytes = 3 * MiB,
	                                    .host_buffer = 256 * KiB,
	                                    .io_threads = 3};
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stager *st = NULL;
	struct placefs_error err;
	struct placefs_dest d;
	struct fixture fx;
	char name[64];
	uint8_t *dst;
	int pass;

	fx_open(&fx, 8 * MiB);
	snprintf(name, sizeof(name), "/placefs-test-%ld-dc", (long)getpid());
	dst = shm_make(name, 4 * MiB);
	for (pass = 0; pass < 3; pass++) {
		/* 0: direct (the default); 1: off by config; 2: off by the environment. */
		cfg.direct_copy = pass == 1 ? -1 : 0;
		if (pass == 2)
			setenv("PLACEFS_STAGE_DIRECT", "0", 1);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_create(&cfg, &st, &err) == 0, "%s", err.msg);
		unsetenv("PLACEFS_STAGE_DIRECT");
		ck_assert_int_eq(placefs_stager_is_direct(st), pass == 0);

		/* 3 MiB - 5 bytes (13 pieces of 256 KiB, the last short) at odd offsets. */
		memset(dst, 0x5a, 4 * MiB);
		ck_assert_int_eq(placefs_dest_shm(&d, name, 77, 4 * MiB, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage_copy(st, fx.fd, 12345, 3 * MiB - 5, &o, &d, &sp,
		                                        &err) == 0,
		              "%s", err.msg);
		ck_assert_uint_eq(sp.nbytes, 3 * MiB - 5);
		ck_assert_uint_eq(sp.lease, 0);
		ck_assert(memcmp(dst + 77, fx.data + 12345, 3 * MiB - 5) == 0);
		ck_assert_uint_eq(dst[76], 0x5a);
		ck_assert_uint_eq(dst[77 + 3 * MiB - 5], 0x5a);

		/* Larger than the ring: -EFBIG either way, nothing written. */
		placefs_error_clear(&err);
		ck_assert_int_eq(
		        placefs_stager_stage_copy(st, fx.fd, 0, 3 * MiB + 1, &o, &d, &sp, &err),
		        -EFBIG);
		ck_assert_msg(strstr(err.msg, "do not fit the 3145728-byte staging ring") != NULL,
		              "%s", err.msg);
		/* A destination too small: -EINVAL before any read. */
		ck_assert_int_eq(placefs_dest_shm(&d, name, 4 * MiB - 10, 4 * MiB, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage_copy(st, fx.fd, 0, 11, &o, &d, &sp, &err),
		                 -EINVAL);
		ck_assert_msg(strstr(err.msg, "destination too small") != NULL, "%s", err.msg);
		/* Past the end of the file: -EIO naming the tensor, never wrong bytes handed out. */
		ck_assert_int_eq(placefs_dest_shm(&d, name, 0, 4 * MiB, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage_copy(st, fx.fd, 8 * MiB - MiB, 2 * MiB, &o,
		                                           &d, &sp, &err),
		                 -EIO);
		ck_assert_msg(strstr(err.msg, "model.layers.0.mlp.up_proj.weight") != NULL, "%s",
		              err.msg);

		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.direct, pass == 0);
		ck_assert_uint_eq(ss.direct_stages, pass == 0 ? 1 : 0);
		ck_assert_uint_eq(ss.direct_bytes, pass == 0 ? 3 * MiB - 5 : 0);
		ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_COPY], 1);
		ck_assert_uint_eq(ss.errors, 3);
		ck_assert_uint_eq(ss.ring_used, 0);
		ck_assert_uint_eq(ss.leases, 0);
		if (pass == 0)
			ck_assert_uint_eq(ss.ring_high_water, 0);
		else
			ck_assert_uint_ge(ss.ring_high_water, 3 * MiB - 5);
		placefs_stager_free(st);
		st = NULL;
	}

	/* A bad $PLACEFS_STAGE_DIRECT is refused at create, naming it. */
	setenv("PLACEFS_STAGE_DIRECT", "yes", 1);
	cfg.direct_copy = 0;
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), -EINVAL);
	ck_assert_ptr_null(st);
	ck_assert_msg(strstr(err.msg, "PLACEFS_STAGE_DIRECT=\"yes\"") != NULL, "%s", err.msg);
	/* The config wins over the environment. */
	cfg.direct_copy = 1;
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), 0);
	unsetenv("PLACEFS_STAGE_DIRECT");
	ck_assert_int_eq(placefs_stager_is_direct(st), 1);
	placefs_stager_free(st);

	munmap(dst, 4 * MiB);
	shm_unlink(name);
	fx_close(&fx);
}
END_TEST

/* Direct copies from many threads at once into one destination. */
START_TEST(test_direct_copy_concurrent)
{
	copy_concurrent(4, 128 * KiB, true);
}
END_TEST

START_TEST(test_efbig)
{
	struct placefs_stager_stats ss;
	struct placefs_stage_opts o = {.name = "model.embed_tokens.weight"};
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct fixture fx;

	fx_open(&fx, 2 * MiB);
	st = mk("host", MiB, 0, 2, 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, MiB + 1, &o, &sp, &err), -EFBIG);
	ck_assert_str_eq(err.msg, "tensor \"model.embed_tokens.weight\": 1048577 bytes do not fit "
	                          "the 1048576-byte staging ring");
	ck_assert_int_eq(err.kind, PLACEFS_E_LIMIT);
	/* Exactly the ring size fits. */
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 1, MiB, &o, &sp, NULL), 0);
	ck_assert_uint_eq(sp.ring_offset, 0);
	check_span(st, &sp, &fx, 1);
	ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.errors, 1);
	ck_assert_uint_eq(ss.read_bytes, MiB);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

START_TEST(test_short_read_and_bad_fd)
{
	struct placefs_stager_stats ss;
	struct placefs_stage_opts o = {.name = "lm_head.weight"};
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct fixture fx;
	int fd;

	fx_open(&fx, 100000);
	st = mk("host", MiB, 64 * KiB, 4, 0);
	placefs_error_clear(&err);
	/* The file ends 1 byte early: the whole tensor fails, nothing is held. */
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 50000, 50001, &o, &sp, &err), -EIO);
	ck_assert_int_eq(err.kind, PLACEFS_E_IO);
	ck_assert_msg(strstr(err.msg, "tensor \"lm_head.weight\": short read") != NULL, "%s",
	              err.msg);
	ck_assert_uint_eq(sp.lease, 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 200000, 10, &o, &sp, &err), -EIO);
	fd = open(fx.path, O_RDONLY);
	close(fd);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_stage(st, fd, 0, 100, &o, &sp, &err), -EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "failed"));
	ck_assert_int_eq(placefs_stager_stage(st, -1, 0, 100, &o, &sp, NULL), -EINVAL);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, UINT64_MAX - 5, 100, &o, &sp, NULL),
	                 -EINVAL);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.errors, 5);
	ck_assert_uint_eq(ss.ring_used, 0);
	ck_assert_uint_eq(ss.leases, 0);
	/* The stager still works. */
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 100000, &o, &sp, NULL), 0);
	check_span(st, &sp, &fx, 0);
	placefs_stager_free(st); /* with a lease outstanding: dropped */
	fx_close(&fx);
}
END_TEST

struct later {
	struct placefs_stager *st;
	int *flag;
};

static void *set_later(void *arg)
{
	struct later *l = arg;

	usleep(50000);
	__atomic_store_n(l->flag, 1, __ATOMIC_RELEASE);
	placefs_stager_wake(l->st);
	return NULL;
}

START_TEST(test_deadline_and_cancel)
{
	struct placefs_stage_span held, sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct timespec dl;
	struct fixture fx;
	pthread_t th;
	int flag = 0;

	fx_open(&fx, 2 * MiB);
	st = mk("host", MiB, 0, 2, 0);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, MiB, NULL, &held, NULL), 0);
	dl = placefs_clock_deadline(50000000);
	{
		struct placefs_stage_opts o = {.name = "w", .deadline = &dl};

		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 1, &o, &sp, &err), -ETIMEDOUT);
		ck_assert_ptr_nonnull(strstr(err.msg, "no staging ring space"));
		ck_assert_uint_ge(sp.wait_ns, 40000000);
	}
	{
		struct placefs_stage_opts o = {.name = "w", .cancel = &flag};
		struct later l = {.st = st, .flag = &flag};
		uint64_t t0, t1;

		ck_assert_int_eq(pthread_create(&th, NULL, set_later, &l), 0);
		placefs_error_clear(&err);
		t0 = placefs_clock_ns();
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 1, &o, &sp, &err), -EINTR);
		t1 = placefs_clock_ns();
		pthread_join(th, NULL);
		/* Woken, not polled: well under the 50 ms poll period after the flag. */
		ck_assert_int_lt((int64_t)(t1 - t0), 2000000000L);
		ck_assert_ptr_nonnull(strstr(err.msg, "interrupted"));
	}
	ck_assert_int_eq(placefs_stager_release(st, held.lease, 0), 0);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

START_TEST(test_leases_and_owners)
{
	struct placefs_stage_span sp[4];
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct placefs_dest d;
	struct fixture fx;
	char name[64];
	uint8_t *dst;
	int i;

	fx_open(&fx, MiB);
	st = mk("host", MiB, 0, 2, 0);
	for (i = 0; i < 4; i++) {
		struct placefs_stage_opts o = {.owner = i < 3 ? 7 : 8};

		ck_assert_int_eq(
		        placefs_stager_stage(st, fx.fd, (uint64_t)i * 1000, 1000, &o, &sp[i], NULL),
		        0);
	}
	/* Zero bytes is a lease like any other. */
	{
		struct placefs_stage_span z;

		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 5, 0, NULL, &z, NULL), 0);
		ck_assert_uint_ne(z.lease, 0);
		ck_assert_uint_eq(z.nbytes, 0);
		ck_assert_int_eq(placefs_stager_release(st, z.lease, 0), 0);
	}
	ck_assert_int_eq(placefs_stager_release(st, sp[0].lease, 8), -ENOENT); /* not 8's */
	ck_assert_int_eq(placefs_stager_release(st, 999999, 0), -ENOENT);
	ck_assert_int_eq(placefs_stager_release(st, 0, 0), -ENOENT);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.leases, 4);
	ck_assert_uint_eq(placefs_stager_release_owner(st, 7), 3);
	ck_assert_uint_eq(placefs_stager_release_owner(st, 7), 0);
	ck_assert_int_eq(placefs_stager_release(st, sp[1].lease, 0), -ENOENT);
	snprintf(name, sizeof(name), "/placefs-test-%ld-l", (long)getpid());
	dst = shm_make(name, 4096);
	ck_assert_int_eq(placefs_dest_shm(&d, name, 0, 4096, NULL), 0);
	ck_assert_int_eq(placefs_stager_copy_out(st, sp[1].lease, &d, NULL), -ENOENT);
	ck_assert_int_eq(placefs_stager_copy_out(st, sp[3].lease, &d, NULL), 0);
	ck_assert(memcmp(dst, fx.data + 3000, 1000) == 0);
	ck_assert_int_eq(placefs_stager_release(st, sp[3].lease, 8), 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.leases, 0);
	ck_assert_uint_eq(ss.released, 5);
	ck_assert_uint_eq(ss.ring_used, 0);
	munmap(dst, 4096);
	shm_unlink(name);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

static void wait_stat(struct placefs_stager *st, size_t field_off, uint64_t want)
{
	struct placefs_stager_stats ss;
	int i;

	for (i = 0; i < 5000; i++) {
		placefs_stager_stats(st, &ss);
		if (*(uint64_t *)((char *)&ss + field_off) >= want)
			return;
		usleep(1000);
	}
	ck_abort_msg("stat at offset %zu never reached %llu", field_off, (unsigned long long)want);
}

START_TEST(test_prefetch_hits)
{
	struct placefs_prefetch_item items[6];
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct fixture fx;
	unsigned i, hits = 0;

	fx_open(&fx, 6 * 256 * KiB + 100);
	st = mk("host", MiB, 64 * KiB, 4, 1);
	for (i = 0; i < 6; i++)
		items[i] = (struct placefs_prefetch_item){.fd = fx.fd,
		                                          .offset = 100 + i * 256 * KiB,
		                                          .nbytes = 256 * KiB,
		                                          .key = i + 1};
	ck_assert_int_eq(placefs_stager_prefetch(st, items, 6, NULL), 0);
	/* The ring holds four of them: prefetch fills it and stops. */
	wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_held), 4);
	usleep(20000);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.prefetch_issued, 4);
	ck_assert_uint_eq(ss.ring_used, MiB);
	for (i = 0; i < 6; i++) {
		struct placefs_stage_opts o = {.key = i + 1, .name = "p"};
		struct placefs_stage_span sp;

		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, items[i].offset, items[i].nbytes,
		                                      &o, &sp, NULL),
		                 0);
		hits += (unsigned)sp.prefetched;
		check_span(st, &sp, &fx, items[i].offset);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		/* The freed space goes to the next hinted tensor. */
		if (i + 5 <= 6)
			wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_issued),
			          i + 5);
	}
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(hits, 6);
	ck_assert_uint_eq(ss.prefetch_issued, 6);
	ck_assert_uint_eq(ss.prefetch_hits, hits);
	ck_assert_uint_eq(ss.prefetch_held, 0);
	ck_assert_uint_eq(ss.ring_used, 0);
	/* A key asked for with other bytes is not adopted; with its own bytes it is. */
	ck_assert_int_eq(placefs_stager_prefetch(st, items, 1, NULL), 0);
	wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_held), 1);
	{
		struct placefs_stage_opts o = {.key = 1};
		struct placefs_stage_span sp;

		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 10, &o, &sp, NULL), 0);
		ck_assert_int_eq(sp.prefetched, 0);
		check_span(st, &sp, &fx, 0);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, items[0].offset, items[0].nbytes,
		                                      &o, &sp, NULL),
		                 0);
		ck_assert_int_eq(sp.prefetched, 1);
		check_span(st, &sp, &fx, items[0].offset);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	}
	{
		struct placefs_prefetch_item bad = {.fd = fx.fd, .nbytes = 1, .key = 0};

		ck_assert_int_eq(placefs_stager_prefetch(st, &bad, 1, NULL), -EINVAL);
	}
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/* A foreground stage never waits on prefetched bytes nobody asked for. */
/*
 * Copy mode with prefetch hints and direct copies: a key whose span was
 * prefetched is copied out of the ring (no second read), a key with none
 * goes direct; every byte is right either way.
 */
START_TEST(test_direct_copy_adopts_prefetch)
{
	struct placefs_prefetch_item items[2];
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct placefs_dest d;
	struct fixture fx;
	char name[64];
	uint8_t *dst;
	unsigned i;

	fx_open(&fx, 4 * 256 * KiB);
	st = mk("host", 256 * KiB, 64 * KiB, 2, 1);
	snprintf(name, sizeof(name), "/placefs-test-%ld-dp", (long)getpid());
	dst = shm_make(name, MiB);
	for (i = 0; i < 2; i++)
		items[i] = (struct placefs_prefetch_item){
		        .fd = fx.fd, .offset = i * 256 * KiB, .nbytes = 256 * KiB, .key = i + 1};
	ck_assert_int_eq(placefs_stager_prefetch(st, items, 2, NULL), 0);
	/* The ring holds one: key 1 is prefetched, key 2 is not. */
	wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_held), 1);
	for (i = 0; i < 2; i++) {
		struct placefs_stage_opts o = {.key = i + 1, .name = "p"};
		struct placefs_stage_span sp;
		struct placefs_error err;

		ck_assert_int_eq(placefs_dest_shm(&d, name, i * 256 * KiB, MiB, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage_copy(st, fx.fd, items[i].offset, items[i].nbytes,
		                                        &o, &d, &sp, &err) == 0,
		              "%s", err.msg);
		/* Key 2 may have been prefetched meanwhile (key 1's space came back). */
		if (i == 0)
			ck_assert_int_eq(sp.prefetched, 1);
	}
	ck_assert(memcmp(dst, fx.data, 512 * KiB) == 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_COPY], 2);
	/* Each stage either adopted its prefetched span or went direct: never both, never read twice. */
	ck_assert_uint_ge(ss.prefetch_hits, 1);
	ck_assert_uint_eq(ss.direct_stages + ss.prefetch_hits, 2);
	ck_assert_uint_eq(ss.read_bytes, 512 * KiB);
	munmap(dst, MiB);
	shm_unlink(name);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

START_TEST(test_prefetch_yields)
{
	struct placefs_prefetch_item items[4];
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct timespec dl;
	struct fixture fx;
	unsigned i;

	fx_open(&fx, 2 * MiB);
	st = mk("host", MiB, 64 * KiB, 2, 1);
	for (i = 0; i < 4; i++)
		items[i] = (struct placefs_prefetch_item){
		        .fd = fx.fd, .offset = i * 256 * KiB, .nbytes = 256 * KiB, .key = 100 + i};
	ck_assert_int_eq(placefs_stager_prefetch(st, items, 4, NULL), 0);
	wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_held), 4);
	dl = placefs_clock_deadline(5 * PLACEFS_NS_PER_S);
	{
		struct placefs_stage_opts o = {.name = "big", .deadline = &dl};

		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, MiB, MiB, &o, &sp, &err) == 0, "%s",
		              err.msg);
	}
	check_span(st, &sp, &fx, MiB);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.prefetch_evicted, 4);
	ck_assert_uint_eq(ss.prefetch_held, 0);
	ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	/* A new hint list starts over. */
	ck_assert_int_eq(placefs_stager_prefetch(st, items, 2, NULL), 0);
	wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_issued), 6);
	ck_assert_int_eq(placefs_stager_prefetch(st, NULL, 0, NULL), 0);
	placefs_stager_free(st); /* prefetched spans outstanding: dropped */
	fx_close(&fx);
}
END_TEST

/*
 * A foreground request that needs the space of a prefetch still being read
 * cuts it short: the pieces not yet handed to an I/O thread are skipped, so
 * it never waits for the whole speculative read. Attempts repeat until one
 * finds the prefetch in flight (a fast machine may finish it first).
 */
START_TEST(test_prefetch_cancelled)
{
	struct placefs_stager_stats s0, s1;
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct timespec dl;
	struct fixture fx;
	unsigned attempt;
	int cut = 0;

	fx_open(&fx, 16 * MiB + 64 * KiB);
	/* One I/O thread and small chunks: the 16 MiB prefetch is thousands of pieces. */
	st = mk("host", 16 * MiB, 8 * KiB, 1, 1);
	for (attempt = 0; attempt < 20 && !cut; attempt++) {
		struct placefs_prefetch_item it = {
		        .fd = fx.fd, .offset = 0, .nbytes = 16 * MiB, .key = 500 + attempt};
		struct placefs_stage_opts o = {.name = "fg", .deadline = &dl};

		placefs_stager_stats(st, &s0);
		ck_assert_int_eq(placefs_stager_prefetch(st, &it, 1, NULL), 0);
		wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_issued), attempt + 1);
		dl = placefs_clock_deadline(30 * PLACEFS_NS_PER_S);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, 16 * MiB, 4 * KiB, &o, &sp, &err) ==
		                      0,
		              "%s", err.msg);
		check_span(st, &sp, &fx, 16 * MiB);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		/* The prefetch is given back once its last piece in flight ends. */
		for (int i = 0; i < 5000; i++) {
			placefs_stager_stats(st, &s1);
			if (s1.prefetch_held == 0)
				break;
			usleep(1000);
		}
		ck_assert_uint_eq(s1.prefetch_held, 0);
		ck_assert_uint_eq(s1.prefetch_evicted, s0.prefetch_evicted + 1);
		if (s1.prefetch_cancelled > s0.prefetch_cancelled) {
			cut = 1;
			ck_assert_uint_eq(s1.prefetch_cancelled, s0.prefetch_cancelled + 1);
			/* The foreground's 4 KiB plus less than the whole prefetch were read. */
			ck_assert_uint_lt(s1.read_bytes - s0.read_bytes, 16 * MiB + 4 * KiB);
		} else {
			ck_assert_uint_eq(s1.read_bytes - s0.read_bytes, 16 * MiB + 4 * KiB);
		}
	}
	ck_assert_msg(cut, "no foreground stage found the prefetch in flight in %u attempts",
	              attempt);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/* A stage whose deadline has already passed never waits, but still gets prefetched space. */
START_TEST(test_prefetch_yields_to_try)
{
	static const struct timespec past = {0, 0};
	struct placefs_prefetch_item items[4];
	struct placefs_stage_opts o = {.name = "try", .deadline = &past};
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct fixture fx;
	unsigned i;

	fx_open(&fx, 2 * MiB);
	st = mk("host", MiB, 64 * KiB, 2, 1);
	for (i = 0; i < 4; i++)
		items[i] = (struct placefs_prefetch_item){
		        .fd = fx.fd, .offset = i * 256 * KiB, .nbytes = 256 * KiB, .key = 100 + i};
	ck_assert_int_eq(placefs_stager_prefetch(st, items, 4, NULL), 0);
	/* All four read; their jobs end right after the last (synchronous) copy. */
	wait_stat(st, offsetof(struct placefs_stager_stats, read_bytes), MiB);
	usleep(200000);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.prefetch_held, 4);
	ck_assert_uint_eq(ss.ring_used, MiB);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stager_stage(st, fx.fd, MiB + 5, 512 * KiB, &o, &sp, &err) == 0, "%s",
	              err.msg);
	check_span(st, &sp, &fx, MiB + 5);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.prefetch_evicted, 4);
	ck_assert_uint_eq(ss.prefetch_held, 0);
	ck_assert_uint_eq(ss.ring_waits, 0); /* it never waited */
	/* Without prefetched spans to give back, a full ring still refuses at once. */
	{
		struct placefs_stage_span sp2, sp3;

		ck_assert_int_eq(placefs_stager_prefetch(st, NULL, 0, NULL), 0);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 512 * KiB, NULL, &sp2, NULL),
		                 0);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 1, &o, &sp3, NULL), -ETIMEDOUT);
		ck_assert_uint_eq(sp3.lease, 0);
		ck_assert_int_eq(placefs_stager_release(st, sp2.lease, 0), 0);
	}
	ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.ring_used, 0);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/*
 * The Python loader's `wrapfull` case: an 8 MiB ring full of two 4 MiB leases
 * (w.0, w.1); a stage of w.2 times out, which moves the prefetch cursor past
 * w.2; w.0 is released and prefetch puts w.3 into the freed space (at 0, the
 * newest span in the ring, with w.1 still older than it). A new stage of w.2
 * must evict w.3 and get its space back although w.1 is still held.
 *
 * Run twice: with w.3 fully prefetched when w.2 asks (given back at once),
 * and with tiny chunks on one I/O thread so that w.3 is most likely still in
 * flight (given back as soon as it finishes).
 */
START_TEST(test_prefetch_newest_given_back)
{
	struct placefs_prefetch_item items[5];
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct placefs_error err;
	struct fixture fx;
	unsigned i, pass;

	fx_open(&fx, 20 * MiB);
	for (i = 0; i < 5; i++)
		items[i] = (struct placefs_prefetch_item){
		        .fd = fx.fd, .offset = i * 4 * MiB, .nbytes = 4 * MiB, .key = i + 1};
	for (pass = 0; pass < 2; pass++) {
		struct placefs_stage_opts o = {.name = "w"};
		struct placefs_stage_span w0, w1, w2;
		struct timespec dl;

		st = pass == 0 ? mk("host", 8 * MiB, 0, 0, 1) : mk("host", 8 * MiB, 16 * KiB, 1, 1);
		ck_assert_int_eq(placefs_stager_prefetch(st, items, 5, NULL), 0);
		/* Prefetch fills the ring with w.0 and w.1; the leases adopt them. */
		wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_held), 2);
		o.key = 1;
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 4 * MiB, &o, &w0, NULL), 0);
		o.key = 2;
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 4 * MiB, 4 * MiB, &o, &w1, NULL),
		                 0);
		ck_assert_int_eq(w0.prefetched + w1.prefetched, 2);
		check_span(st, &w0, &fx, 0);
		check_span(st, &w1, &fx, 4 * MiB);

		/* The ring is full: w.2 times out (and prefetch moves past it). */
		o.key = 3;
		dl = placefs_clock_deadline(100ULL * 1000000);
		o.deadline = &dl;
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 8 * MiB, 4 * MiB, &o, &w2, &err),
		                 -ETIMEDOUT);
		ck_assert_uint_eq(w2.lease, 0);

		/* w.0 goes; prefetch stages w.3 into its space. */
		ck_assert_int_eq(placefs_stager_release(st, w0.lease, 0), 0);
		wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_issued), 3);
		if (pass == 0) {
			/* w.3 is completely read (and copied: the host copy is synchronous). */
			wait_stat(st, offsetof(struct placefs_stager_stats, read_bytes), 12 * MiB);
			usleep(20000);
		}
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.prefetch_held, 1);
		ck_assert_uint_eq(ss.leases, 1);

		/* w.1 is still held; w.2 must get the space w.3 took, well within 5 s. */
		dl = placefs_clock_deadline(5000ULL * 1000000);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, 8 * MiB, 4 * MiB, &o, &w2, &err) == 0,
		              "pass %u: w.2 after releasing w.0: %s", pass, err.msg);
		ck_assert_uint_eq(w2.prefetched, 0);
		check_span(st, &w2, &fx, 8 * MiB);
		check_span(st, &w1, &fx, 4 * MiB);
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.prefetch_held, 0);
		ck_assert_uint_ge(ss.prefetch_evicted, 1);
		ck_assert_uint_eq(ss.leases, 2);
		ck_assert_uint_eq(ss.ring_used, 8 * MiB);

		/* No new prefetches: then everything comes back. */
		ck_assert_int_eq(placefs_stager_prefetch(st, NULL, 0, NULL), 0);
		ck_assert_int_eq(placefs_stager_release(st, w1.lease, 0), 0);
		ck_assert_int_eq(placefs_stager_release(st, w2.lease, 0), 0);
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.leases, 0);
		ck_assert_uint_eq(ss.ring_used, 0);
		ck_assert_uint_eq(ss.ring_high_water, 8 * MiB);
		placefs_stager_free(st);
	}
	fx_close(&fx);
}
END_TEST

/* Two callers ask for the same prefetched key at once: one adopts, one stages. */
struct twin {
	struct placefs_stager *st;
	const struct fixture *fx;
	uint64_t key, off, n;
	int rc;
	int prefetched;
};

static void *twin_stage(void *arg)
{
	struct twin *t = arg;
	struct placefs_stage_opts o = {.key = t->key, .name = "twin"};
	struct placefs_stage_span sp;

	t->rc = placefs_stager_stage(t->st, t->fx->fd, t->off, t->n, &o, &sp, NULL);
	if (t->rc == 0) {
		check_span(t->st, &sp, t->fx, t->off);
		t->prefetched = sp.prefetched;
		t->rc = placefs_stager_release(t->st, sp.lease, 0);
	}
	return NULL;
}

START_TEST(test_prefetch_same_key_twice)
{
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct fixture fx;
	unsigned it, adopted = 0;

	fx_open(&fx, 12 * MiB);
	/* Tiny chunks on one thread: a 6 MiB prefetch stays in flight for a while. */
	st = mk("host", 8 * MiB, 16 * KiB, 1, 1);
	for (it = 0; it < 8; it++) {
		struct placefs_prefetch_item item = {
		        .fd = fx.fd, .offset = it * 512 * KiB, .nbytes = 6 * MiB, .key = it + 1};
		struct twin tw[2];
		pthread_t th[2];
		unsigned k;

		ck_assert_int_eq(placefs_stager_prefetch(st, &item, 1, NULL), 0);
		wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_issued), it + 1);
		for (k = 0; k < 2; k++) {
			tw[k] = (struct twin){.st = st,
			                      .fx = &fx,
			                      .key = it + 1,
			                      .off = item.offset,
			                      .n = item.nbytes};
			ck_assert_int_eq(pthread_create(&th[k], NULL, twin_stage, &tw[k]), 0);
		}
		for (k = 0; k < 2; k++) {
			pthread_join(th[k], NULL);
			ck_assert_int_eq(tw[k].rc, 0);
		}
		ck_assert_int_le(tw[0].prefetched + tw[1].prefetched, 1);
		adopted += (unsigned)(tw[0].prefetched + tw[1].prefetched);
	}
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.prefetch_hits, adopted);
	ck_assert_uint_ge(adopted, 1);
	ck_assert_uint_eq(ss.leases, 0);
	ck_assert_uint_eq(ss.prefetch_held, 0);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/* Many threads, random tensors and modes, prefetch running, a small ring. */
struct worker {
	struct placefs_stager *st;
	const struct fixture *fx;
	unsigned seed;
	int failures;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct placefs_backend *be = (struct placefs_backend *)placefs_stager_backend(w->st);
	uint8_t *buf = malloc(512 * KiB);
	int i;

	for (i = 0; i < 60; i++) {
		unsigned k = (unsigned)rand_r(&w->seed) % 64;
		uint64_t off = (uint64_t)k * 40000,
		         n = 1 + (uint64_t)rand_r(&w->seed) % (512 * KiB);
		struct placefs_stage_opts o = {.key = k + 1, .name = "w"};
		struct placefs_stage_span sp;
		struct placefs_error err;

		if (off + n > w->fx->size)
			n = w->fx->size - off;
		if (k % 3 == 0)
			n = 40000; /* the hinted size: may be adopted */
		placefs_error_clear(&err);
		if (placefs_stager_stage(w->st, w->fx->fd, off, n, &o, &sp, &err) != 0) {
			fprintf(stderr, "stage: %s\n", err.msg);
			w->failures++;
			continue;
		}
		if (placefs_backend_read_ring(be, sp.ring_offset, buf, n, &err) != 0 ||
		    memcmp(buf, w->fx->data + off, n) != 0) {
			fprintf(stderr, "wrong bytes for key %u (%llu bytes)\n", k,
			        (unsigned long long)n);
			w->failures++;
		}
		if (placefs_stager_release(w->st, sp.lease, 0) != 0)
			w->failures++;
	}
	free(buf);
	return NULL;
}

START_TEST(test_concurrent_stress)
{
	struct placefs_prefetch_item items[64];
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct worker w[4];
	pthread_t th[4];
	struct fixture fx;
	unsigned i;

	fx_open(&fx, 64 * 40000 + 512 * KiB);
	/* Room for two or three tensors at once: constant wrapping and waiting. */
	st = mk("host", 1200 * KiB, 128 * KiB, 4, 1);
	for (i = 0; i < 64; i++)
		items[i] = (struct placefs_prefetch_item){
		        .fd = fx.fd, .offset = i * 40000ULL, .nbytes = 40000, .key = i + 1};
	ck_assert_int_eq(placefs_stager_prefetch(st, items, 64, NULL), 0);
	for (i = 0; i < 4; i++) {
		w[i] = (struct worker){.st = st, .fx = &fx, .seed = 99 + i};
		ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(w[i].failures, 0);
	}
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.staged[PLACEFS_IOC_STAGE_BORROW], 240);
	ck_assert_uint_eq(ss.leases, 0);
	ck_assert_uint_eq(ss.errors, 0);
	ck_assert_uint_le(ss.ring_high_water, 1200 * KiB);
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/*
 * One pass over a device: odd sizes, borrow and copy mode into a shm
 * destination, the seed's backpressure case and a prefetch hit.
 */
static void device_pass(const char *dev)
{
	static const uint64_t sizes[] = {0, 1, 4097, 1 * MiB + 13, 4 * MiB, 8 * MiB};
	struct placefs_stager_stats ss;
	struct placefs_stager *st;
	struct placefs_error err;
	struct placefs_dest d;
	struct producer p = {0};
	struct fixture fx;
	pthread_t th;
	char name[64];
	uint8_t *dst;
	uint64_t off = 0;
	unsigned i;

	fx_open(&fx, 24 * MiB);
	st = mk(dev, 8 * MiB, 4 * MiB, 4, 1);
	snprintf(name, sizeof(name), "/placefs-test-%ld-cu", (long)getpid());
	dst = shm_make(name, 8 * MiB);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct placefs_stage_span sp;

		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, off, sizes[i], NULL, &sp, &err) == 0,
		              "%s", err.msg);
		check_span(st, &sp, &fx, off);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		ck_assert_int_eq(placefs_dest_shm(&d, name, 8 * MiB - sizes[i], 8 * MiB, NULL), 0);
		ck_assert_msg(placefs_stager_stage_copy(st, fx.fd, off, sizes[i], NULL, &d, &sp,
		                                        &err) == 0,
		              "%s", err.msg);
		ck_assert(memcmp(dst + 8 * MiB - sizes[i], fx.data + off, sizes[i]) == 0);
		off += sizes[i] + 3;
	}
	/* Five 4 MiB tensors through the 8 MiB ring, consumed one by one. */
	p.st = st;
	p.fd = fx.fd;
	ck_assert_int_eq(pthread_create(&th, NULL, produce, &p), 0);
	for (i = 0; i < 5; i++) {
		while (__atomic_load_n(&p.produced, __ATOMIC_ACQUIRE) <= (int)i)
			usleep(1000);
		ck_assert_int_eq(p.rc[i], 0);
		check_span(st, &p.sp[i], &fx, (uint64_t)i * 4 * MiB);
		ck_assert_int_eq(placefs_stager_release(st, p.sp[i].lease, 0), 0);
	}
	pthread_join(th, NULL);
	/* A prefetch hit. */
	{
		struct placefs_prefetch_item item = {
		        .fd = fx.fd, .offset = 777, .nbytes = 3 * MiB, .key = 42};
		struct placefs_stage_opts o = {.key = 42};
		struct placefs_stage_span sp;

		ck_assert_int_eq(placefs_stager_prefetch(st, &item, 1, NULL), 0);
		wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_issued), 1);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 777, 3 * MiB, &o, &sp, NULL), 0);
		ck_assert_int_eq(sp.prefetched, 1);
		check_span(st, &sp, &fx, 777);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	}
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.errors, 0);
	ck_assert_uint_eq(ss.leases, 0);
	ck_assert_uint_le(ss.ring_high_water, 8 * MiB);
	munmap(dst, 8 * MiB);
	shm_unlink(name);
	placefs_stager_free(st);
	fx_close(&fx);
}

START_TEST(test_device_pass_host)
{
	device_pass("host");
}
END_TEST

/* The same on cuda:0 where a GPU exists (check_backend checks the refusal elsewhere). */
START_TEST(test_device_pass_cuda)
{
	struct placefs_error err;
	int n;

	placefs_error_clear(&err);
	n = placefs_backend_cuda_devices(&err);
	if (n <= 0) {
		fprintf(stderr, "test_device_pass_cuda: no CUDA device (%s): nothing to run\n",
		        n == 0 ? "none found" : err.msg);
		return;
	}
	device_pass("cuda:0");
}
END_TEST

/*
 * The I/O threads' polling window: a bad PLACEFS_STAGE_SPIN_US is refused
 * by name; 0 (sleep at once) and a long window both stage exact bytes with
 * prefetch, and the stager stops promptly while threads poll.
 */
START_TEST(test_io_spin_setting)
{
	static const char *const windows[] = {"0", "5000"};
	struct placefs_stager_config cfg = {.device = tu_device("host"), .ring_bytes = 4 * MiB};
	struct placefs_prefetch_item items[4];
	struct placefs_stage_span sp;
	struct placefs_stager *st = NULL;
	struct placefs_error err;
	struct fixture fx;
	unsigned w, i;

	setenv("PLACEFS_STAGE_SPIN_US", "100001", 1);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), -EINVAL);
	ck_assert_ptr_null(st);
	ck_assert_str_eq(err.msg, "PLACEFS_STAGE_SPIN_US=\"100001\": expected 0 to 100000");
	fx_open(&fx, 4 * MiB);
	for (w = 0; w < 2; w++) {
		setenv("PLACEFS_STAGE_SPIN_US", windows[w], 1);
		st = mk("host", 2 * MiB, 256 * KiB, 3, 1);
		for (i = 0; i < 4; i++)
			items[i] = (struct placefs_prefetch_item){
			        .fd = fx.fd, .offset = i * MiB, .nbytes = MiB - i, .key = i + 1};
		ck_assert_int_eq(placefs_stager_prefetch(st, items, 4, NULL), 0);
		for (i = 0; i < 4; i++) {
			struct placefs_stage_opts o = {.key = i + 1};

			placefs_error_clear(&err);
			ck_assert_msg(placefs_stager_stage(st, fx.fd, i * MiB, MiB - i, &o, &sp,
			                                   &err) == 0,
			              "%s", err.msg);
			check_span(st, &sp, &fx, i * MiB);
			ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		}
		placefs_stager_free(st);
	}
	unsetenv("PLACEFS_STAGE_SPIN_US");
	fx_close(&fx);
}
END_TEST

/* The host backend has no zero-copy: the knobs are parsed, reported, and change nothing. */
START_TEST(test_zero_copy_host)
{
	struct placefs_stager_config cfg = {.device = tu_device("host"), .ring_bytes = 4 * MiB};
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stager *st = NULL;
	struct placefs_error err;
	struct fixture fx;
	char note[256];

	setenv("PLACEFS_STAGE_ZERO_COPY", "yes", 1);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), -EINVAL);
	ck_assert_ptr_null(st);
	ck_assert_ptr_nonnull(strstr(err.msg, "PLACEFS_STAGE_ZERO_COPY"));
	/* An explicit configuration does not read the variable. */
	cfg.zero_copy = 1;
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stager_create(&cfg, &st, &err) == 0, "%s", err.msg);
	placefs_stager_zero_copy_note(st, note, sizeof(note));
	ck_assert_msg(strstr(note, "cannot stage without bounce buffers") != NULL, "%s", note);
	fx_open(&fx, 3 * MiB + 5);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stager_stage(st, fx.fd, 7, 3 * MiB - 2, NULL, &sp, &err) == 0, "%s",
	              err.msg);
	check_span(st, &sp, &fx, 7);
	ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.zero_copy, 0);
	ck_assert_uint_eq(ss.zero_copy_bytes, 0);
	ck_assert_uint_eq(ss.zero_copy_registrations, 0);
	ck_assert_uint_eq(ss.read_bytes, 3 * MiB - 2);
	placefs_stager_free(st);
	unsetenv("PLACEFS_STAGE_ZERO_COPY");
	cfg.zero_copy = 0;
	st = NULL;
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), 0);
	placefs_stager_zero_copy_note(st, note, sizeof(note));
	ck_assert_str_eq(note, "");
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/* 1 when cuda:0 exists; else says that `test` skipped its CUDA part. */
static int have_cuda(const char *test)
{
	struct placefs_error err;
	int n;

	placefs_error_clear(&err);
	n = placefs_backend_cuda_devices(&err);
	if (n <= 0) {
		fprintf(stderr, "%s: SKIPPED its CUDA part: no CUDA device (%s)\n", test,
		        n == 0 ? "none found" : err.msg);
		return 0;
	}
	return 1;
}

/*
 * 1 when the stager registered the shard for zero-copy; 0 (said on stderr)
 * only when the device cannot register read-only memory at all, which is
 * the one refusal the test accepts.
 */
static int zero_copy_used(struct placefs_stager *st, const char *test)
{
	struct placefs_stager_stats ss;
	char note[256];

	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.zero_copy, 1);
	placefs_stager_zero_copy_note(st, note, sizeof(note));
	if (ss.zero_copy_registrations == 0 &&
	    strstr(note, "HostRegisterReadOnlySupported is 0") != NULL) {
		fprintf(stderr, "%s: SKIPPED its zero-copy checks: %s\n", test, note);
		return 0;
	}
	ck_assert_msg(ss.zero_copy_registrations == 1, "registrations %llu: %s",
	              (unsigned long long)ss.zero_copy_registrations, note);
	return 1;
}

/* Zero-copy on a real file: odd offsets and sizes, pieces over several streams, prefetch. */
START_TEST(test_zero_copy_cuda)
{
	static const uint64_t offs[] = {0, 1, 4096, 5 * MiB + 3, 0};
	static const uint64_t sizes[] = {1, 4097, 40 * MiB + 3, 17 * MiB, 64 * MiB};
	struct placefs_prefetch_item item;
	struct placefs_stage_opts o = {.key = 9};
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct fixture fx;
	uint64_t sum = 0;
	unsigned i;

	if (!have_cuda("test_zero_copy_cuda"))
		return;
	fx_open(&fx, 64 * MiB);
	st = mk_zc("cuda:0", 64 * MiB, 8 * MiB, 2, 1, 1);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, offs[i], sizes[i], NULL, &sp, &err) ==
		                      0,
		              "%s", err.msg);
		check_span(st, &sp, &fx, offs[i]);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		sum += sizes[i];
	}
	if (zero_copy_used(st, "test_zero_copy_cuda")) {
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.zero_copy_bytes, sum);
		ck_assert_uint_eq(ss.read_bytes, 0);
		ck_assert_uint_eq(ss.zero_copy_registered_bytes, 64 * MiB);
		item = (struct placefs_prefetch_item){
		        .fd = fx.fd, .offset = 333, .nbytes = 20 * MiB, .key = 9};
		ck_assert_int_eq(placefs_stager_prefetch(st, &item, 1, NULL), 0);
		wait_stat(st, offsetof(struct placefs_stager_stats, prefetch_issued), 1);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 333, 20 * MiB, &o, &sp, NULL), 0);
		ck_assert_int_eq(sp.prefetched, 1);
		check_span(st, &sp, &fx, 333);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.zero_copy_bytes, sum + 20 * MiB);
		ck_assert_uint_eq(ss.zero_copy_registrations, 1);
		ck_assert_uint_eq(ss.read_bytes, 0);
		ck_assert_uint_eq(ss.errors, 0);
	}
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/*
 * Zero-copy parts over the fan-out streams (PLACEFS_STAGE_ZC_STREAMS,
 * PLACEFS_STAGE_ZC_WAIT): sizes that split into uneven parts, a part count
 * capped by the streams, and exact bytes with each knob; bad knob values
 * refuse the stager with a message naming the variable.
 */
START_TEST(test_zero_copy_fanout_cuda)
{
	static const char *const knobs[][2] = {{"1", "block"}, {"3", "spin"}, {"16", "block"}};
	static const uint64_t offs[] = {7, 0, 4096, 123};
	static const uint64_t sizes[] = {4 * MiB + 1, 12 * MiB - 1, 48 * MiB, 64 * KiB + 5};
	struct placefs_stager_config cfg = {.device = tu_device("cuda:0"), .ring_bytes = 64 * MiB};
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct fixture fx;
	unsigned k, i;

	if (!have_cuda("test_zero_copy_fanout_cuda"))
		return;
	fx_open(&fx, 64 * MiB);
	for (k = 0; k < sizeof(knobs) / sizeof(knobs[0]); k++) {
		setenv("PLACEFS_STAGE_ZC_STREAMS", knobs[k][0], 1);
		setenv("PLACEFS_STAGE_ZC_WAIT", knobs[k][1], 1);
		st = mk_zc("cuda:0", 64 * MiB, 8 * MiB, 2, 0, 1);
		for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			placefs_error_clear(&err);
			ck_assert_msg(placefs_stager_stage(st, fx.fd, offs[i], sizes[i], NULL, &sp,
			                                   &err) == 0,
			              "%s", err.msg);
			check_span(st, &sp, &fx, offs[i]);
			ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		}
		if (!zero_copy_used(st, "test_zero_copy_fanout_cuda")) {
			placefs_stager_free(st);
			break;
		}
		placefs_stager_free(st);
	}
	setenv("PLACEFS_STAGE_ZC_STREAMS", "0", 1);
	placefs_error_clear(&err);
	st = NULL;
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), -EINVAL);
	ck_assert_ptr_null(st);
	ck_assert_ptr_nonnull(strstr(err.msg, "PLACEFS_STAGE_ZC_STREAMS must be a number"));
	setenv("PLACEFS_STAGE_ZC_STREAMS", "4", 1);
	setenv("PLACEFS_STAGE_ZC_WAIT", "busy", 1);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "PLACEFS_STAGE_ZC_WAIT must be block or spin"));
	unsetenv("PLACEFS_STAGE_ZC_STREAMS");
	unsetenv("PLACEFS_STAGE_ZC_WAIT");
	fx_close(&fx);
}
END_TEST

/*
 * A shard truncated, or touched, after its registration: the next zero-copy
 * stage fails (never stale bytes), and the shard falls back to pread(),
 * which sees the file as it is now.
 */
START_TEST(test_zero_copy_stale_cuda)
{
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct placefs_error err;
	struct fixture fx;
	struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 0}, {.tv_sec = 1000000000}};
	int wfd;

	if (!have_cuda("test_zero_copy_stale_cuda"))
		return;
	/* Truncation. */
	fx_open(&fx, 16 * MiB);
	st = mk_zc("cuda:0", 16 * MiB, 8 * MiB, 2, 0, 1);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 8 * MiB, 4 * MiB, NULL, &sp, NULL), 0);
	check_span(st, &sp, &fx, 8 * MiB);
	ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	if (zero_copy_used(st, "test_zero_copy_stale_cuda")) {
		ck_assert_int_eq(truncate(fx.path, 6 * MiB), 0);
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 8 * MiB, 4 * MiB, NULL, &sp, &err),
		                 -EIO);
		ck_assert_msg(strstr(err.msg, "changed") != NULL, "%s", err.msg);
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.zero_copy_stale, 1);
		ck_assert_uint_eq(ss.leases, 0);
		ck_assert_uint_eq(ss.ring_used, 0);
		/* The registration is gone once unused; the shard is read with pread(). */
		ck_assert_uint_eq(ss.zero_copy_registered_bytes, 0);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 1, 5 * MiB, NULL, &sp, NULL), 0);
		check_span(st, &sp, &fx, 1);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 8 * MiB, 4 * MiB, NULL, &sp, &err),
		                 -EIO);
		ck_assert_msg(strstr(err.msg, "short read") != NULL, "%s", err.msg);
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.read_bytes, 5 * MiB);
		ck_assert_uint_eq(ss.zero_copy_registrations, 1);
	}
	placefs_stager_free(st);
	fx_close(&fx);

	/* Same size, new mtime (as a rewrite in place leaves it). */
	fx_open(&fx, 4 * MiB);
	st = mk_zc("cuda:0", 4 * MiB, 8 * MiB, 2, 0, 1);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 4 * MiB, NULL, &sp, NULL), 0);
	check_span(st, &sp, &fx, 0);
	ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	if (zero_copy_used(st, "test_zero_copy_stale_cuda")) {
		wfd = open(fx.path, O_WRONLY | O_CLOEXEC);
		ck_assert_int_ge(wfd, 0);
		ck_assert_int_eq(futimens(wfd, ts), 0);
		close(wfd);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 4 * MiB, NULL, &sp, NULL),
		                 -EIO);
		placefs_stager_stats(st, &ss);
		ck_assert_uint_eq(ss.zero_copy_stale, 1);
		ck_assert_uint_eq(ss.leases, 0);
		/* The bounce path serves the file from now on. */
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 0, 4 * MiB, NULL, &sp, NULL), 0);
		check_span(st, &sp, &fx, 0);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	}
	placefs_stager_free(st);
	fx_close(&fx);
}
END_TEST

/*
 * PLACEFS_STAGE_ZERO_COPY=0: the bounce path, on the same device, still
 * correct; unset, zero-copy is off (the default); "1" turns it on.
 */
START_TEST(test_zero_copy_off_cuda)
{
	struct placefs_stager_stats ss;
	struct placefs_stage_span sp;
	struct placefs_stager *st;
	struct fixture fx;
	char note[256];

	if (!have_cuda("test_zero_copy_off_cuda"))
		return;
	setenv("PLACEFS_STAGE_ZERO_COPY", "0", 1);
	fx_open(&fx, 24 * MiB);
	st = mk("cuda:0", 24 * MiB, 8 * MiB, 2, 0);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 3, 20 * MiB + 1, NULL, &sp, NULL), 0);
	check_span(st, &sp, &fx, 3);
	ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.zero_copy, 0);
	ck_assert_uint_eq(ss.zero_copy_bytes, 0);
	ck_assert_uint_eq(ss.zero_copy_registrations, 0);
	ck_assert_uint_eq(ss.read_bytes, 20 * MiB + 1);
	placefs_stager_zero_copy_note(st, note, sizeof(note));
	ck_assert_msg(strstr(note, "PLACEFS_STAGE_ZERO_COPY=0") != NULL, "%s", note);
	placefs_stager_free(st);
	fx_close(&fx);
	/* The whole device pass on the bounce path too. */
	device_pass("cuda:0");
	unsetenv("PLACEFS_STAGE_ZERO_COPY");
	/* Unset, zero-copy is off by default too (pinned memory stays within host_buffer). */
	st = mk("cuda:0", 24 * MiB, 8 * MiB, 2, 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.zero_copy, 0);
	placefs_stager_zero_copy_note(st, note, sizeof(note));
	ck_assert_msg(strstr(note, "zero-copy staging is off (the default)") != NULL, "%s", note);
	placefs_stager_free(st);
	/* PLACEFS_STAGE_ZERO_COPY=1 turns it on. */
	setenv("PLACEFS_STAGE_ZERO_COPY", "1", 1);
	st = mk("cuda:0", 24 * MiB, 8 * MiB, 2, 0);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.zero_copy, 1);
	placefs_stager_free(st);
	unsetenv("PLACEFS_STAGE_ZERO_COPY");
}
END_TEST

/* ---- slices ------------------------------------------------------------------ */

/*
 * The slice's bytes the naive way, element by element (bit by bit for
 * sub-byte dtypes): the C-contiguous tensor t[start:start+len] (dim 0) or
 * t[:, start:start+len] (dim 1) of the source bytes src.
 */
static uint8_t *naive_slice(const uint8_t *src, unsigned bits, uint32_t ndim, const uint64_t *shape,
                            uint32_t dim, uint64_t start, uint64_t len, uint64_t *nbytes)
{
	uint64_t outer = 1, inner = 1, d = shape[dim], j = 0;
	uint8_t *out;
	uint32_t i;

	for (i = 0; i < dim; i++)
		outer *= shape[i];
	for (i = dim + 1; i < ndim; i++)
		inner *= shape[i];
	*nbytes = outer * len * inner * bits / 8;
	out = calloc(1, *nbytes + 1);
	for (uint64_t o = 0; o < outer; o++)
		for (uint64_t c = start; c < start + len; c++)
			for (uint64_t k = 0; k < inner; k++, j++) {
				uint64_t e = (o * d + c) * inner + k;

				if (bits % 8 == 0) {
					memcpy(out + j * bits / 8, src + e * bits / 8, bits / 8);
					continue;
				}
				for (unsigned b = 0; b < bits; b++) {
					uint64_t sb = e * bits + b, db = j * bits + b;

					if (src[sb / 8] >> (sb % 8) & 1)
						out[db / 8] |= (uint8_t)(1u << (db % 8));
				}
			}
	return out;
}

static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
 * Random tensors (dtype, 1 to 3 dimensions, some rows longer than a chunk)
 * at random offsets of one file; random dim 0 and dim 1 slices of each,
 * staged in borrow mode (the ring bytes) and copy mode (a shm destination
 * at an odd offset), in each read mode: always the naive slice's bytes, in
 * a span of the slice's size.
 */
static void slices_random(enum placefs_stage_slice_read mode, uint64_t seed, int direct)
{
	static const enum placefs_dtype dts[] = {PLACEFS_DT_U8,  PLACEFS_DT_BF16, PLACEFS_DT_F32,
	                                         PLACEFS_DT_F64, PLACEFS_DT_F4,   PLACEFS_DT_I16};
	struct placefs_stager_config cfg = {
	        .device = tu_device("host"),
	        .ring_bytes = 4 * MiB,
	        .host_buffer = 64 * KiB, /* 16 chunks of 4 KiB: many pieces */
	        .io_threads = 3,
	        .slice_read = mode,
	        .direct_copy = direct,
	};
	struct placefs_stager_stats ss;
	struct placefs_stager *st = NULL;
	struct placefs_error err;
	struct placefs_dest d;
	struct fixture fx;
	uint64_t staged = 0, bytes = 0, strided = 0, strided_bytes = 0;
	char name[64];
	uint8_t *dst;
	int trial, done = 0;

	fx_open(&fx, 3 * MiB);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stager_create(&cfg, &st, &err) == 0, "%s", err.msg);
	snprintf(name, sizeof(name), "/placefs-test-%ld-sl", (long)getpid());
	dst = shm_make(name, 2 * MiB);
	for (trial = 0; trial < 300; trial++) {
		enum placefs_dtype dt = dts[rnd_next(&seed) % 6];
		unsigned bits = placefs_dtype_bits(dt);
		uint32_t ndim = 1 + (uint32_t)(rnd_next(&seed) % 3), dim, i;
		uint64_t shape[3], total = 1, tb, off, start, len, want_n;
		struct placefs_slice_layout l;
		struct placefs_slice sl;
		struct placefs_stage_span sp;
		struct placefs_stage_opts o = {.name = "sl", .owner = 7, .slice = &l};
		uint8_t *want, *got;

		for (i = 0; i < ndim; i++) {
			/* Mostly small dimensions; now and then a wide one (rows > a chunk). */
			shape[i] = 1 + rnd_next(&seed) % (rnd_next(&seed) % 4 == 0 ? 3000 : 24);
			total *= shape[i];
		}
		if (total * bits / 8 > MiB || total * bits % 8 != 0)
			continue;
		tb = total * bits / 8;
		off = rnd_next(&seed) % (fx.size - tb);
		dim = ndim > 1 ? (uint32_t)(rnd_next(&seed) % 2) : 0;
		start = rnd_next(&seed) % shape[dim];
		len = 1 + rnd_next(&seed) % (shape[dim] - start);
		sl = (struct placefs_slice){dim, start, len};
		placefs_error_clear(&err);
		if (placefs_slice_layout("sl", dt, ndim, shape, tb, &sl, &l, &err) != 0) {
			ck_assert_uint_eq(bits % 8, 4); /* only sub-byte slices may be refused */
			continue;
		}
		want = naive_slice(fx.data + off, bits, ndim, shape, dim, start, len, &want_n);
		ck_assert_uint_eq(l.nbytes, want_n);
		got = malloc(want_n + 1);

		/* Borrow: the span holds exactly the slice. */
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, off, tb, &o, &sp, &err) == 0, "%s",
		              err.msg);
		ck_assert_uint_eq(sp.nbytes, want_n);
		ck_assert_int_eq(placefs_backend_read_ring(
		                         (struct placefs_backend *)placefs_stager_backend(st),
		                         sp.ring_offset, got, want_n, NULL),
		                 0);
		ck_assert_msg(memcmp(got, want, want_n) == 0,
		              "borrow: slice bytes differ (dtype %s ndim %u dim %u [%llu,+%llu))",
		              placefs_dtype_name(dt), ndim, dim, (unsigned long long)start,
		              (unsigned long long)len);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 7), 0);

		/* Copy to a shm destination at an odd offset. */
		memset(dst, 0xa5, want_n + 200);
		ck_assert_int_eq(placefs_dest_shm(&d, name, 101, 2 * MiB, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage_copy(st, fx.fd, off, tb, &o, &d, &sp, &err) == 0,
		              "%s", err.msg);
		ck_assert_uint_eq(sp.nbytes, want_n);
		ck_assert_msg(memcmp(dst + 101, want, want_n) == 0, "copy: slice bytes differ");
		ck_assert_uint_eq(dst[100], 0xa5);
		ck_assert_uint_eq(dst[101 + want_n], 0xa5);
		staged += 2;
		if (l.offset != 0 || l.nbytes != tb)
			bytes += 2 * want_n;
		if (!placefs_slice_contiguous(&l)) {
			strided++;
			strided_bytes += 2 * want_n;
		}
		free(got);
		free(want);
		done++;
	}
	ck_assert_int_gt(done, 150);
	ck_assert_uint_gt(strided, 30);
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.errors, 0);
	ck_assert_uint_eq(ss.leases, 0);
	ck_assert_uint_eq(ss.ring_used, 0);
	ck_assert_uint_eq(ss.slice_bytes, bytes);
	ck_assert_uint_eq(ss.staged[0] + ss.staged[1], staged);
	/* Copies went direct or through the ring, as configured. */
	ck_assert_uint_eq(ss.direct, direct >= 0);
	ck_assert_uint_eq(ss.direct_stages, direct >= 0 ? staged / 2 : 0);
	/* Segments read exactly the slice; rows read at least it. */
	if (mode == PLACEFS_STAGE_SLICE_SEGMENTS)
		ck_assert_uint_eq(ss.strided_read_bytes, strided_bytes);
	else
		ck_assert_uint_ge(ss.strided_read_bytes, strided_bytes);
	munmap(dst, 2 * MiB);
	shm_unlink(name);
	placefs_stager_free(st);
	fx_close(&fx);
}

START_TEST(test_slices_segments)
{
	slices_random(PLACEFS_STAGE_SLICE_SEGMENTS, 0x1234567, 1);
	slices_random(PLACEFS_STAGE_SLICE_SEGMENTS, 0x1234568, -1);
}
END_TEST

START_TEST(test_slices_rows)
{
	slices_random(PLACEFS_STAGE_SLICE_ROWS, 0x7654321, 1);
	slices_random(PLACEFS_STAGE_SLICE_ROWS, 0x7654322, -1);
}
END_TEST

START_TEST(test_slices_auto)
{
	slices_random(PLACEFS_STAGE_SLICE_AUTO, 0xfeedbeef, 0);
}
END_TEST

/*
 * The ring holds only the slice: a tensor four times the ring stages a
 * quarter of itself; a slice larger than the ring is -EFBIG; a hand-built
 * layout outside the tensor is -EINVAL before any read; a slice past the
 * end of the file is -EIO; a bad mode or $PLACEFS_STAGE_SLICE_READ is
 * refused at create.
 */
START_TEST(test_slices_bounds)
{
	const uint64_t shape[2] = {256, 4096}; /* F32: 4 MiB, a 1 MiB ring */
	struct placefs_stager_config cfg = {.device = tu_device("host"),
	                                    .ring_bytes = MiB,
	                                    .host_buffer = 256 * KiB,
	                                    .io_threads = 2};
	struct placefs_slice_layout l;
	struct placefs_slice sl;
	struct placefs_stage_span sp;
	struct placefs_stage_opts o = {.name = "big", .slice = &l};
	struct placefs_stager_stats ss;
	struct placefs_stager *st = NULL;
	struct placefs_error err;
	struct fixture fx;
	uint8_t *want, *got = malloc(MiB);
	uint64_t n;
	int dim;

	fx_open(&fx, 4 * MiB + 100);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), 0);
	for (dim = 0; dim < 2; dim++) {
		sl = (struct placefs_slice){(uint32_t)dim, dim ? 2048 : 128, dim ? 1024 : 64};
		ck_assert_int_eq(placefs_slice_layout("big", PLACEFS_DT_F32, 2, shape, 4 * MiB, &sl,
		                                      &l, NULL),
		                 0);
		ck_assert_uint_eq(l.nbytes, MiB);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stager_stage(st, fx.fd, 100, 4 * MiB, &o, &sp, &err) == 0,
		              "%s", err.msg);
		want = naive_slice(fx.data + 100, 32, 2, shape, (uint32_t)dim, sl.start, sl.len,
		                   &n);
		ck_assert_int_eq(placefs_backend_read_ring(
		                         (struct placefs_backend *)placefs_stager_backend(st),
		                         sp.ring_offset, got, n, NULL),
		                 0);
		ck_assert(memcmp(got, want, n) == 0);
		free(want);
		ck_assert_int_eq(placefs_stager_release(st, sp.lease, 0), 0);
		/* One row more does not fit. */
		sl.len += dim ? 4 : 1;
		ck_assert_int_eq(placefs_slice_layout("big", PLACEFS_DT_F32, 2, shape, 4 * MiB, &sl,
		                                      &l, NULL),
		                 0);
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 100, 4 * MiB, &o, &sp, &err),
		                 -EFBIG);
		ck_assert_ptr_nonnull(strstr(err.msg, "do not fit"));
	}
	/* A layout outside the tensor. */
	l = (struct placefs_slice_layout){8, 2, 16, 4 * MiB, 32};
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 100, 4 * MiB, &o, &sp, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor \"big\": slice layout"));
	{
		struct placefs_dest d;

		ck_assert_int_eq(placefs_dest_shm(&d, "/placefs-test-none", 0, 10, NULL), 0);
		placefs_error_clear(&err);
		ck_assert_int_eq(
		        placefs_stager_stage_copy(st, fx.fd, 100, 4 * MiB, &o, &d, &sp, &err),
		        -EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "slice layout"));
	}
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.read_bytes, 2 * MiB);
	/* The tensor runs past the end of the file: the last rows cannot be read. */
	sl = (struct placefs_slice){1, 4000, 96};
	ck_assert_int_eq(
	        placefs_slice_layout("big", PLACEFS_DT_F32, 2, shape, 4 * MiB, &sl, &l, NULL), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_stage(st, fx.fd, 1000, 4 * MiB, &o, &sp, &err), -EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "short read"));
	placefs_stager_stats(st, &ss);
	ck_assert_uint_eq(ss.ring_used, 0);
	ck_assert_uint_eq(ss.leases, 0);
	placefs_stager_free(st);

	st = NULL;
	cfg.slice_read = (enum placefs_stage_slice_read)9;
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), -EINVAL);
	cfg.slice_read = PLACEFS_STAGE_SLICE_AUTO;
	setenv("PLACEFS_STAGE_SLICE_READ", "columns", 1);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "PLACEFS_STAGE_SLICE_READ=\"columns\""));
	setenv("PLACEFS_STAGE_SLICE_READ", "rows", 1);
	ck_assert_int_eq(placefs_stager_create(&cfg, &st, NULL), 0);
	placefs_stager_free(st);
	unsetenv("PLACEFS_STAGE_SLICE_READ");
	free(got);
	fx_close(&fx);
}
END_TEST

static Suite *stage_suite(void)
{
	Suite *s = suite_create("stage");
	TCase *tc = tcase_create("host");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_none_and_bad_config);
	tcase_add_test(tc, test_end_to_end_host);
	tcase_add_test(tc, test_backpressure_seed);
	tcase_add_test(tc, test_copy_mode_concurrent);
	tcase_add_test(tc, test_direct_copy);
	tcase_add_test(tc, test_direct_copy_concurrent);
	tcase_add_test(tc, test_efbig);
	tcase_add_test(tc, test_short_read_and_bad_fd);
	tcase_add_test(tc, test_deadline_and_cancel);
	tcase_add_test(tc, test_leases_and_owners);
	tcase_add_test(tc, test_prefetch_hits);
	tcase_add_test(tc, test_direct_copy_adopts_prefetch);
	tcase_add_test(tc, test_prefetch_yields);
	tcase_add_test(tc, test_prefetch_cancelled);
	tcase_add_test(tc, test_prefetch_yields_to_try);
	tcase_add_test(tc, test_prefetch_newest_given_back);
	tcase_add_test(tc, test_prefetch_same_key_twice);
	tcase_add_test(tc, test_concurrent_stress);
	tcase_add_test(tc, test_device_pass_host);
	tcase_add_test(tc, test_zero_copy_host);
	tcase_add_test(tc, test_io_spin_setting);
	tcase_add_test(tc, test_slices_segments);
	tcase_add_test(tc, test_slices_rows);
	tcase_add_test(tc, test_slices_auto);
	tcase_add_test(tc, test_slices_bounds);
	suite_add_tcase(s, tc);
	tc = tcase_create("cuda");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_device_pass_cuda);
	tcase_add_test(tc, test_zero_copy_cuda);
	tcase_add_test(tc, test_zero_copy_fanout_cuda);
	tcase_add_test(tc, test_zero_copy_stale_cuda);
	tcase_add_test(tc, test_zero_copy_off_cuda);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(stage_suite());
}
