/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "staging/zerocopy.h"

/*
 * Locking: zc->lock guards the entry list, each entry's state, base and
 * users, the pinned total and the note; zc->cond is broadcast when a
 * registration ends. Mapping, registering, copying and unmapping run
 * unlocked. The counters are atomics, read without the lock.
 */

enum src_state {
	SRC_REGISTERING,
	SRC_READY,
	SRC_REFUSED, /* bounce path for good: registration failed, over the cap, or stale */
};

struct placefs_zerocopy_src {
	struct placefs_zerocopy_src *next;
	dev_t dev;
	ino_t ino;
	uint64_t size;
	struct timespec mtime;
	void *base; /* the registered mapping; NULL when not registered */
	enum src_state state;
	unsigned users; /* acquires not yet put */
};

struct placefs_zerocopy {
	struct placefs_zerocopy_ops ops;
	void *ctx;
	char name[128];
	uint64_t cap;
	bool cap_default; /* for the note's wording */

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct placefs_zerocopy_src *srcs;
	uint64_t pinned; /* bytes of the registered (or registering) shards */
	char note[256];  /* the first refusal */

	struct placefs_zerocopy_stats c; /* atomic fields */
};

#define CNT_ADD(zc, f, v) __atomic_fetch_add(&(zc)->c.f, (v), __ATOMIC_RELAXED)
#define CNT_SUB(zc, f, v) __atomic_fetch_sub(&(zc)->c.f, (v), __ATOMIC_RELAXED)
#define CNT_GET(zc, f)    __atomic_load_n(&(zc)->c.f, __ATOMIC_RELAXED)

/* ---- the backend's checked calls as ops ------------------------------------ */

static int be_map_source(void *ctx, int fd, uint64_t file_size, void **base,
                         struct placefs_error *err)
{
	return placefs_backend_map_source(ctx, fd, file_size, base, err);
}

static void be_unmap_source(void *ctx, void *base, uint64_t file_size)
{
	placefs_backend_unmap_source(ctx, base, file_size);
}

static int be_src_to_ring(void *ctx, const unsigned *chunks, unsigned nchunks, const void *src,
                          uint64_t ring_off, uint64_t n, struct placefs_error *err)
{
	return placefs_backend_src_to_ring(ctx, chunks, nchunks, src, ring_off, n, err);
}

static const struct placefs_zerocopy_ops backend_ops = {
        .map_source = be_map_source,
        .unmap_source = be_unmap_source,
        .src_to_ring = be_src_to_ring,
};

/* ---- create / free ---------------------------------------------------------- */

uint64_t placefs_zerocopy_default_cap(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

	return pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize / 2 : 0;
}

int placefs_zerocopy_create_ops(const struct placefs_zerocopy_ops *ops, void *ctx, const char *name,
                                uint64_t cap, struct placefs_zerocopy **out,
                                struct placefs_error *err)
{
	struct placefs_zerocopy *zc;
	int rc;

	*out = NULL;
	if (!ops || !ops->map_source || !ops->unmap_source || !ops->src_to_ring)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "zero-copy: a registry needs map_source, unmap_source "
		                         "and src_to_ring");
	zc = calloc(1, sizeof(*zc));
	if (!zc)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "zero-copy: out of memory");
	zc->ops = *ops;
	zc->ctx = ctx;
	snprintf(zc->name, sizeof(zc->name), "%s", name ? name : "zero-copy");
	zc->cap_default = cap == 0;
	zc->cap = cap ? cap : placefs_zerocopy_default_cap();
	if (pthread_mutex_init(&zc->lock, NULL) != 0)
		goto fail_lock;
	rc = placefs_clock_cond_init(&zc->cond);
	if (rc != 0)
		goto fail_cond;
	*out = zc;
	return 0;

fail_cond:
	pthread_mutex_destroy(&zc->lock);
fail_lock:
	free(zc);
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "zero-copy: out of memory");
}

int placefs_zerocopy_create(struct placefs_backend *be, uint64_t cap, struct placefs_zerocopy **out,
                            struct placefs_error *err)
{
	struct placefs_backend_info info;

	*out = NULL;
	placefs_backend_get_info(be, &info);
	if (!placefs_backend_has_zero_copy(be))
		return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
		                         "%s: this backend cannot stage without bounce buffers "
		                         "(zero-copy)",
		                         info.name);
	return placefs_zerocopy_create_ops(&backend_ops, be, info.name, cap, out, err);
}

void placefs_zerocopy_free(struct placefs_zerocopy *zc)
{
	if (!zc)
		return;
	while (zc->srcs) {
		struct placefs_zerocopy_src *z = zc->srcs;

		zc->srcs = z->next;
		if (z->base)
			zc->ops.unmap_source(zc->ctx, z->base, z->size);
		free(z);
	}
	pthread_cond_destroy(&zc->cond);
	pthread_mutex_destroy(&zc->lock);
	free(zc);
}

/* ---- sources ------------------------------------------------------------------ */

/* Notes the first reason a shard was refused; lock held. */
__attribute__((format(printf, 2, 3))) static void note(struct placefs_zerocopy *zc, const char *fmt,
                                                       ...)
{
	va_list ap;

	if (zc->note[0] != '\0')
		return;
	va_start(ap, fmt);
	vsnprintf(zc->note, sizeof(zc->note), fmt, ap);
	va_end(ap);
}

static struct placefs_zerocopy_src *find(struct placefs_zerocopy *zc, dev_t dev, ino_t ino)
{
	struct placefs_zerocopy_src *z;

	for (z = zc->srcs; z; z = z->next)
		if (z->dev == dev && z->ino == ino)
			return z;
	return NULL;
}

/* Maps and registers the new entry z of fd (lock held on entry and return, dropped meanwhile). */
static void do_register(struct placefs_zerocopy *zc, struct placefs_zerocopy_src *z, int fd)
{
	struct placefs_error e;
	void *base = NULL;
	uint64_t t0;
	int rc;

	z->state = SRC_REGISTERING;
	zc->pinned += z->size;
	pthread_mutex_unlock(&zc->lock);
	placefs_error_clear(&e);
	t0 = placefs_clock_ns();
	rc = zc->ops.map_source(zc->ctx, fd, z->size, &base, &e);
	t0 = placefs_clock_ns() - t0;
	pthread_mutex_lock(&zc->lock);
	if (rc == 0) {
		z->base = base;
		z->state = SRC_READY;
		CNT_ADD(zc, registrations, 1);
		CNT_ADD(zc, registration_ns, t0);
		CNT_ADD(zc, registered_bytes, z->size);
	} else {
		z->state = SRC_REFUSED;
		zc->pinned -= z->size;
		CNT_ADD(zc, refused, 1);
		note(zc, "zero-copy refused for a shard, which uses bounce buffers instead: %s",
		     e.msg);
	}
	pthread_cond_broadcast(&zc->cond);
}

struct placefs_zerocopy_src *placefs_zerocopy_acquire(struct placefs_zerocopy *zc, int fd,
                                                      uint64_t off, uint64_t n)
{
	struct placefs_zerocopy_src *z;
	struct stat sb;

	if (n == 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0)
		return NULL;
	pthread_mutex_lock(&zc->lock);
	z = find(zc, sb.st_dev, sb.st_ino);
	if (!z) {
		z = calloc(1, sizeof(*z));
		if (!z) {
			pthread_mutex_unlock(&zc->lock);
			return NULL;
		}
		z->dev = sb.st_dev;
		z->ino = sb.st_ino;
		z->size = (uint64_t)sb.st_size;
		z->mtime = sb.st_mtim;
		z->next = zc->srcs;
		zc->srcs = z;
		if (z->size > zc->cap - zc->pinned) {
			z->state = SRC_REFUSED;
			CNT_ADD(zc, refused, 1);
			if (zc->cap_default)
				note(zc,
				     "%s: zero-copy registrations would pin more than half of "
				     "physical memory; further shards use bounce buffers",
				     zc->name);
			else
				note(zc,
				     "%s: zero-copy registrations would pin more than %llu bytes; "
				     "further shards use bounce buffers",
				     zc->name, (unsigned long long)zc->cap);
		} else {
			do_register(zc, z, fd);
		}
	}
	while (z->state == SRC_REGISTERING)
		pthread_cond_wait(&zc->cond, &zc->lock);
	/* A range past the registered end is left to pread(), which reports it. */
	if (z->state != SRC_READY || off > z->size || n > z->size - off) {
		pthread_mutex_unlock(&zc->lock);
		return NULL;
	}
	z->users++;
	pthread_mutex_unlock(&zc->lock);
	return z;
}

int placefs_zerocopy_copy(struct placefs_zerocopy *zc, struct placefs_zerocopy_src *z, int fd,
                          const unsigned *chunks, unsigned nchunks, uint64_t off, uint64_t ring_off,
                          uint64_t n, struct placefs_error *err)
{
	return placefs_zerocopy_copy_ctx(zc, NULL, z, fd, chunks, nchunks, off, ring_off, n, err);
}

int placefs_zerocopy_copy_ctx(struct placefs_zerocopy *zc, void *ctx,
                              struct placefs_zerocopy_src *z, int fd, const unsigned *chunks,
                              unsigned nchunks, uint64_t off, uint64_t ring_off, uint64_t n,
                              struct placefs_error *err)
{
	struct stat sb;
	int rc;

	/* base and size do not change while a use is held. */
	if (off > z->size || n > z->size - off)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: range %llu+%llu is outside the %llu-byte registered "
		                         "shard",
		                         zc->name, (unsigned long long)off, (unsigned long long)n,
		                         (unsigned long long)z->size);
	rc = zc->ops.src_to_ring(ctx ? ctx : zc->ctx, chunks, nchunks,
	                         (const uint8_t *)z->base + off, ring_off, n, err);
	if (rc != 0)
		return rc;
	if (fstat(fd, &sb) != 0 || sb.st_dev != z->dev || sb.st_ino != z->ino ||
	    (uint64_t)sb.st_size != z->size || sb.st_mtim.tv_sec != z->mtime.tv_sec ||
	    sb.st_mtim.tv_nsec != z->mtime.tv_nsec) {
		pthread_mutex_lock(&zc->lock);
		if (z->state == SRC_READY) {
			z->state = SRC_REFUSED;
			CNT_ADD(zc, stale, 1);
		}
		pthread_mutex_unlock(&zc->lock);
		return placefs_error_set(
		        err, -EIO, PLACEFS_E_IO,
		        "the shard changed (size or mtime) since it was "
		        "registered for zero-copy staging; its bytes are not used");
	}
	CNT_ADD(zc, bytes, n);
	return 0;
}

void placefs_zerocopy_put(struct placefs_zerocopy *zc, struct placefs_zerocopy_src *z)
{
	void *base = NULL;

	if (!z)
		return;
	pthread_mutex_lock(&zc->lock);
	if (--z->users == 0 && z->state == SRC_REFUSED && z->base) {
		base = z->base;
		z->base = NULL;
		zc->pinned -= z->size;
		CNT_SUB(zc, registered_bytes, z->size);
	}
	pthread_mutex_unlock(&zc->lock);
	if (base)
		zc->ops.unmap_source(zc->ctx, base, z->size);
}

void placefs_zerocopy_stats(const struct placefs_zerocopy *zc, struct placefs_zerocopy_stats *out)
{
	out->bytes = CNT_GET(zc, bytes);
	out->registrations = CNT_GET(zc, registrations);
	out->registration_ns = CNT_GET(zc, registration_ns);
	out->registered_bytes = CNT_GET(zc, registered_bytes);
	out->refused = CNT_GET(zc, refused);
	out->stale = CNT_GET(zc, stale);
}

void placefs_zerocopy_note(struct placefs_zerocopy *zc, char *buf, size_t len)
{
	if (len == 0)
		return;
	pthread_mutex_lock(&zc->lock);
	snprintf(buf, len, "%s", zc->note);
	pthread_mutex_unlock(&zc->lock);
}
