/* SPDX-License-Identifier: MIT */
/*
 * The stager's life and its public entry points: create/free and the
 * settings read at create, leases, and staging (stage, copy-out, direct
 * copies, release, stats). Its parts are stage_io.c (the job queue, the
 * I/O threads and their bounce chunks), stage_slice.c (strided slice
 * reads) and stage_prefetch.c (prefetch); stage_i.h holds what they share.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "staging/ring.h"
#include "staging/stage.h"
#include "staging/stage_i.h"
#include "staging/zerocopy.h"

/*
 * An I/O thread that finished a piece polls the queue this long before it
 * sleeps (PLACEFS_STAGE_SPIN_US overrides it; 0 = sleep at once): the next
 * job usually comes within a copy-out and a release, and a sleeping thread
 * takes tens of microseconds to wake.
 */
#define IO_SPIN_US_DEFAULT 200

/* ---- leases ---------------------------------------------------------------- */

static struct lease **lease_slot(struct placefs_stager *st, uint64_t id)
{
	return &st->leases[(id * 0x9E3779B97F4A7C15ULL) >> 56];
}

static struct lease *lease_find(struct placefs_stager *st, uint64_t id)
{
	struct lease *l;

	for (l = *lease_slot(st, id); l; l = l->next)
		if (l->id == id && !l->released)
			return l;
	return NULL;
}

/* Unlinks and frees l and gives its span back; lock held. */
static void lease_drop(struct placefs_stager *st, struct lease *l)
{
	struct lease **pp;

	for (pp = lease_slot(st, l->id); *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	placefs_ring_release(st->ring, l->id);
	free(l);
	pthread_cond_signal(&st->pf_cond);
}

/* Ends a lease now, or when its last copy finishes; lock held. */
static void lease_end(struct placefs_stager *st, struct lease *l)
{
	CNT_SUB(st, leases, 1);
	CNT_ADD(st, released, 1);
	if (l->refs > 0)
		l->released = true;
	else
		lease_drop(st, l);
}

static int lease_add(struct placefs_stager *st, uint64_t id, uint64_t ring_off, uint64_t nbytes,
                     uint64_t owner)
{
	struct lease *l = calloc(1, sizeof(*l));
	struct lease **slot;

	if (!l)
		return -ENOMEM;
	l->id = id;
	l->ring_off = ring_off;
	l->nbytes = nbytes;
	l->owner = owner;
	slot = lease_slot(st, id);
	l->next = *slot;
	*slot = l;
	CNT_ADD(st, leases, 1);
	return 0;
}

/* ---- create / free -------------------------------------------------------- */

/* The mutex and condition variables (CLOCK_MONOTONIC for timed waits). */
static int sync_init(struct placefs_stager *st)
{
	if (pthread_mutex_init(&st->lock, NULL) != 0)
		return -ENOMEM;
	if (placefs_clock_cond_init(&st->work_cond) != 0)
		goto fail_work;
	if (placefs_clock_cond_init(&st->done_cond) != 0)
		goto fail_done;
	if (placefs_clock_cond_init(&st->pf_cond) != 0)
		goto fail_pf;
	return 0;

fail_pf:
	pthread_cond_destroy(&st->done_cond);
fail_done:
	pthread_cond_destroy(&st->work_cond);
fail_work:
	pthread_mutex_destroy(&st->lock);
	return -ENOMEM;
}

static void threads_stop(struct placefs_stager *st)
{
	unsigned i;

	if (st->pf_started) {
		pthread_mutex_lock(&st->lock);
		st->pf_stop = true;
		pthread_cond_broadcast(&st->pf_cond);
		pthread_mutex_unlock(&st->lock);
		pthread_join(st->pf_tid, NULL);
		st->pf_started = false;
	}
	/*
	 * The I/O threads drain the queue (prefetch jobs still in flight
	 * included) and wait for their pending copies, then exit: no copy is in
	 * flight when the backend is freed.
	 */
	pthread_mutex_lock(&st->lock);
	__atomic_store_n(&st->stopping, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&st->work_cond);
	pthread_mutex_unlock(&st->lock);
	for (i = 0; i < st->nthreads; i++) {
		if (st->threads[i].started)
			pthread_join(st->threads[i].tid, NULL);
		st->threads[i].started = false;
	}
}

/* Frees a stager in any state create() can leave it in. */
static void stager_destroy(struct placefs_stager *st)
{
	struct pf_entry *e, *en;
	unsigned i;

	if (st->sync_ok)
		threads_stop(st);
	for (e = st->pf; e; e = en) {
		en = e->next;
		free(e);
	}
	/* No copy is in flight any more: drop the registrations before the backend. */
	if (!st->zc_borrowed)
		placefs_zerocopy_free(st->zc);
	for (i = 0; i < LEASE_BUCKETS; i++) {
		struct lease *l, *ln;

		for (l = st->leases[i]; l; l = ln) {
			ln = l->next;
			free(l);
		}
	}
	for (i = 0; i < st->nthreads; i++) {
		free(st->threads[i].chunks);
		free(st->threads[i].pend);
	}
	free(st->threads);
	free(st->hints);
	if (st->sync_ok) {
		pthread_cond_destroy(&st->pf_cond);
		pthread_cond_destroy(&st->done_cond);
		pthread_cond_destroy(&st->work_cond);
		pthread_mutex_destroy(&st->lock);
	}
	placefs_ring_free(st->ring);
	placefs_backend_free(st->be);
	free(st);
}

/*
 * I/O threads when the config says 0: PLACEFS_STAGE_IO_THREADS if set (a
 * tuning knob for benchmarks), else one per online CPU minus two (the FUSE
 * workers and the copy engine's feeder need some), clamped to [4, 16]. One
 * thread fills pinned memory at about 8 GB/s, so ~7 keep a PCIe Gen5 link busy.
 */
static int default_io_threads(unsigned *out, struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_IO_THREADS");
	long ncpu;

	if (env) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(env, &end, 10);
		if (errno || end == env || *end || env[0] < '0' || env[0] > '9' || v == 0 ||
		    v > PLACEFS_STAGE_IO_THREADS_MAX)
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "PLACEFS_STAGE_IO_THREADS=\"%s\": expected 1 to %d", env,
			        PLACEFS_STAGE_IO_THREADS_MAX);
		*out = (unsigned)v;
		return 0;
	}
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	*out = ncpu - 2 < 4 ? 4 : ncpu - 2 > 16 ? 16 : (unsigned)(ncpu - 2);
	return 0;
}

/* The I/O threads' polling window: $PLACEFS_STAGE_SPIN_US or the default. */
static int io_spin_setting(uint64_t *ns, struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_SPIN_US");
	unsigned long v = IO_SPIN_US_DEFAULT;
	char *end;

	if (env) {
		errno = 0;
		v = strtoul(env, &end, 10);
		if (errno || end == env || *end || env[0] < '0' || env[0] > '9' || v > 100000)
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "PLACEFS_STAGE_SPIN_US=\"%s\": expected 0 to 100000", env);
	}
	*ns = (uint64_t)v * 1000;
	return 0;
}

/* The strided-slice read mode: the config's, else $PLACEFS_STAGE_SLICE_READ, else auto. */
static int slice_read_setting(const struct placefs_stager_config *cfg,
                              enum placefs_stage_slice_read *out, struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_SLICE_READ");

	*out = PLACEFS_STAGE_SLICE_AUTO;
	switch (cfg->slice_read) {
	case PLACEFS_STAGE_SLICE_SEGMENTS:
	case PLACEFS_STAGE_SLICE_ROWS: *out = cfg->slice_read; return 0;
	case PLACEFS_STAGE_SLICE_AUTO: break;
	default:
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE,
		        "staging: slice read mode %d is not auto, segments or rows",
		        (int)cfg->slice_read);
	}
	if (!env || strcmp(env, "auto") == 0)
		return 0;
	if (strcmp(env, "segments") == 0)
		*out = PLACEFS_STAGE_SLICE_SEGMENTS;
	else if (strcmp(env, "rows") == 0)
		*out = PLACEFS_STAGE_SLICE_ROWS;
	else
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE,
		        "PLACEFS_STAGE_SLICE_READ=\"%s\": expected auto, segments or "
		        "rows",
		        env);
	return 0;
}

/* Direct copies: the config's, else $PLACEFS_STAGE_DIRECT ("0" or "1"), else on. */
static int direct_setting(const struct placefs_stager_config *cfg, bool *out,
                          struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_DIRECT");

	*out = true;
	if (cfg->direct_copy != 0) {
		*out = cfg->direct_copy > 0;
		return 0;
	}
	if (!env || strcmp(env, "1") == 0)
		return 0;
	if (strcmp(env, "0") == 0) {
		*out = false;
		return 0;
	}
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "PLACEFS_STAGE_DIRECT=\"%s\": expected 0 or 1", env);
}

/*
 * Decides whether zero-copy is on (st->zc made): the backend must have it,
 * and the config (or, by default, $PLACEFS_STAGE_ZERO_COPY) must turn it
 * on. It is off by default: measured on an H200 (doc/PERFORMANCE.md 4), the
 * bounce path's first pass after a mount runs at 0.76 x the pinned-H2D
 * ceiling against 0.22 x for zero-copy, whose first stage of each shard
 * registers the whole shard (1.2 s for 17 GB; 256 ms before the first
 * tensor), and its pinned memory stays within host_buffer instead of
 * growing with the checkpoint. Zero-copy wins only on later passes.
 */
static int zero_copy_setup(struct placefs_stager *st, const struct placefs_stager_config *cfg,
                           struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_STAGE_ZERO_COPY");
	const char *why = "configuration";
	int want = cfg->zero_copy;

	if (want == 0 && env) {
		if (strcmp(env, "0") == 0) {
			want = -1;
			why = "PLACEFS_STAGE_ZERO_COPY=0";
		} else if (strcmp(env, "1") == 0) {
			want = 1;
		} else {
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "PLACEFS_STAGE_ZERO_COPY=\"%s\": expected 0 or 1",
			                         env);
		}
	} else if (want == 0) {
		want = -1;
		why = "the default";
	}
	if (!placefs_backend_has_zero_copy(st->be)) {
		if (want > 0)
			snprintf(st->zc_note, sizeof(st->zc_note),
			         "%s: this backend cannot stage without bounce buffers (zero-copy)",
			         st->info.name);
		return 0;
	}
	if (want < 0) {
		snprintf(st->zc_note, sizeof(st->zc_note), "%s: zero-copy staging is off (%s)",
		         st->info.name, why);
		return 0;
	}
	if (cfg->zero_copy_shared) {
		st->zc = cfg->zero_copy_shared;
		st->zc_borrowed = true;
		return 0;
	}
	return placefs_zerocopy_create(st->be, 0, &st->zc, err);
}

int placefs_stager_create(const struct placefs_stager_config *cfg, struct placefs_stager **out,
                          struct placefs_error *err)
{
	struct placefs_stager *st;
	enum placefs_stage_slice_read slice_read;
	unsigned want, i;
	uint64_t spin_ns = 0;
	bool direct;
	int rc;

	*out = NULL;
	want = cfg->io_threads;
	if (want == 0) {
		rc = default_io_threads(&want, err);
		if (rc)
			return rc;
	}
	if (want > PLACEFS_STAGE_IO_THREADS_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "staging: %u I/O threads requested, at most %d", want,
		                         PLACEFS_STAGE_IO_THREADS_MAX);
	rc = io_spin_setting(&spin_ns, err);
	if (rc)
		return rc;
	rc = slice_read_setting(cfg, &slice_read, err);
	if (rc)
		return rc;
	rc = direct_setting(cfg, &direct, err);
	if (rc)
		return rc;
	st = calloc(1, sizeof(*st));
	if (!st)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "staging: out of memory");
	st->spin_ns = spin_ns;
	st->slice_read = slice_read;
	st->direct = direct;
	st->gate = cfg->gate;
	rc = placefs_backend_create_reserved(cfg->device, cfg->ring_bytes, cfg->host_buffer,
	                                     cfg->host_reserve, &st->be, err);
	if (rc != 0 || !st->be) {
		free(st);
		return rc; /* "none" ends here with *out = NULL */
	}
	placefs_backend_get_info(st->be, &st->info);
	rc = placefs_ring_create(cfg->ring_bytes,
	                         cfg->align ? cfg->align : PLACEFS_STAGE_ALIGN_DEFAULT, &st->ring,
	                         err);
	if (rc != 0)
		goto fail;
	if (sync_init(st) != 0)
		goto fail_nomem;
	st->sync_ok = true;

	/* One thread per chunk at most; the chunks are dealt round-robin. */
	st->threads =
	        calloc(want < st->info.nchunks ? want : st->info.nchunks, sizeof(*st->threads));
	if (!st->threads)
		goto fail_nomem;
	st->nthreads = want < st->info.nchunks ? want : st->info.nchunks;
	for (i = 0; i < st->nthreads; i++) {
		struct io_thread *t = &st->threads[i];
		unsigned c;

		t->st = st;
		t->nslots = (st->info.nchunks - i + st->nthreads - 1) / st->nthreads;
		t->chunks = calloc(t->nslots, sizeof(*t->chunks));
		t->pend = calloc(t->nslots, sizeof(*t->pend));
		if (!t->chunks || !t->pend)
			goto fail_nomem;
		for (c = 0; c < t->nslots; c++)
			t->chunks[c] = i + c * st->nthreads;
	}
	for (i = 0; i < st->nthreads; i++) {
		rc = -pthread_create(&st->threads[i].tid, NULL, stage_io_main, &st->threads[i]);
		if (rc != 0)
			goto fail_start;
		st->threads[i].started = true;
	}
	rc = zero_copy_setup(st, cfg, err);
	if (rc != 0)
		goto fail;
	placefs_ring_set_pressure_hook(st->ring, stage_pf_on_pressure, st);
	st->pf_enabled = cfg->prefetch != 0;
	if (st->pf_enabled) {
		rc = -pthread_create(&st->pf_tid, NULL, stage_pf_main, st);
		if (rc != 0)
			goto fail_start;
		st->pf_started = true;
	}
	*out = st;
	return 0;

fail_start:
	placefs_error_set(err, rc, PLACEFS_E_IO, "staging: cannot start a thread: %s",
	                  strerror(-rc));
	goto fail;
fail_nomem:
	rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "staging: out of memory");
fail:
	stager_destroy(st);
	return rc;
}

void placefs_stager_free(struct placefs_stager *st)
{
	if (st)
		stager_destroy(st);
}

const struct placefs_backend *placefs_stager_backend(const struct placefs_stager *st)
{
	return st->be;
}

/* ---- staging -------------------------------------------------------------- */

/*
 * The bytes a stage moves: checks fd and the range, then the slice (if any)
 * against the tensor, and narrows *file_offset and *nbytes to a contiguous
 * slice's range or *nbytes to a strided slice's bytes (*strided set); -EFBIG
 * when they cannot fit the ring. 0 or a negative errno with a message.
 */
static int stage_range(struct placefs_stager *st, const char *name, int fd,
                       const struct placefs_slice_layout *slice, uint64_t *file_offset,
                       uint64_t *nbytes, bool *strided, struct placefs_error *err)
{
	uint64_t cap = placefs_ring_capacity(st->ring);
	int rc;

	*strided = false;
	if (fd < 0 || *file_offset > (uint64_t)INT64_MAX ||
	    *nbytes > (uint64_t)INT64_MAX - *file_offset)
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE, "tensor \"%s\": bad file or range %llu+%llu",
		        name, (unsigned long long)*file_offset, (unsigned long long)*nbytes);
	if (slice) {
		rc = placefs_slice_check(name, slice, *nbytes, err);
		if (rc != 0)
			return rc;
		if (placefs_slice_contiguous(slice))
			*file_offset += slice->offset; /* a range of the tensor: the tensor path */
		else
			*strided = true;
		*nbytes = slice->nbytes;
	}
	if (*nbytes > cap)
		return placefs_error_set(err, -EFBIG, PLACEFS_E_LIMIT,
		                         "tensor \"%s\": %llu bytes do not fit the %llu-byte "
		                         "staging ring",
		                         name, (unsigned long long)*nbytes,
		                         (unsigned long long)cap);
	return 0;
}

static int stage_one(struct placefs_stager *st, int fd, uint64_t file_offset, uint64_t nbytes,
                     const struct placefs_stage_opts *opts, struct placefs_stage_span *out,
                     struct placefs_error *err)
{
	const char *name = opts && opts->name ? opts->name : "(unnamed)";
	const struct placefs_slice_layout *slice = opts ? opts->slice : NULL;
	uint64_t key = opts ? opts->key : 0;
	uint64_t owner = opts ? opts->owner : 0;
	uint64_t t0 = placefs_clock_ns(), t1, span_id = 0, ring_off = 0, read_ns = 0;
	bool strided;
	struct job job;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = stage_range(st, name, fd, slice, &file_offset, &nbytes, &strided, err);
	if (rc != 0)
		return rc;
	if (strided)
		key = 0; /* a prefetched span holds whole tensors, never these bytes */

	pthread_mutex_lock(&st->lock);
	if (key &&
	    stage_pf_adopt(st, key, fd, file_offset, nbytes, &span_id, &ring_off, &read_ns)) {
		rc = lease_add(st, span_id, ring_off, nbytes, owner);
		if (rc != 0)
			placefs_ring_release(st->ring, span_id);
		pthread_mutex_unlock(&st->lock);
		if (rc != 0)
			return placefs_error_set(err, rc, PLACEFS_E_NOMEM, "out of memory");
		CNT_ADD(st, prefetch_hits, 1);
		out->lease = span_id;
		out->ring_offset = ring_off;
		out->nbytes = nbytes;
		out->read_ns = read_ns;
		out->prefetched = 1;
		out->total_ns = placefs_clock_ns() - t0;
		return 0;
	}
	if (opts && opts->key)
		stage_pf_advance(st, opts->key);
	st->fg_allocating++;
	pthread_mutex_unlock(&st->lock);

	rc = placefs_ring_alloc(st->ring, nbytes, opts ? opts->deadline : NULL,
	                        opts ? opts->cancel : NULL, &ring_off, &span_id);
	pthread_mutex_lock(&st->lock);
	/*
	 * A request whose deadline had already passed on entry was a
	 * try-allocation: it never waited, so the ring never called the
	 * pressure hook. Prefetched spans must not make it fail either: give
	 * them back and try once more. (After a real wait the hook has already
	 * done this and prefetch has taken nothing since, so there is normally
	 * nothing to give back.) The deadline has passed, so this retry is a
	 * try as well: it never waits and never calls the hook, which would
	 * need st->lock.
	 */
	if (rc == -ETIMEDOUT && opts && stage_pf_yield(st) > 0)
		rc = placefs_ring_alloc(st->ring, nbytes, opts->deadline, opts->cancel, &ring_off,
		                        &span_id);
	if (--st->fg_allocating == 0)
		pthread_cond_signal(&st->pf_cond);
	pthread_mutex_unlock(&st->lock);
	t1 = placefs_clock_ns();
	out->wait_ns = t1 - t0;
	switch (rc) {
	case 0: break;
	case -ETIMEDOUT:
		return placefs_error_set(err, rc, PLACEFS_E_LIMIT,
		                         "tensor \"%s\": no staging ring space within the deadline "
		                         "(%llu bytes wanted)",
		                         name, (unsigned long long)nbytes);
	case -EINTR:
		return placefs_error_set(err, rc, PLACEFS_E_USAGE,
		                         "tensor \"%s\": interrupted while waiting for ring space",
		                         name);
	default:
		return placefs_error_set(err, rc, PLACEFS_E_NOMEM,
		                         "tensor \"%s\": cannot allocate ring space: %s", name,
		                         strerror(-rc));
	}

	stage_job_init(&job, fd, file_offset, nbytes, ring_off, st->info.chunk_bytes, 1, name);
	if (strided)
		stage_job_set_strided(st, &job, slice);
	else
		stage_job_try_zc(st, &job);
	rc = stage_job_run(st, &job);
	if (rc != 0) {
		placefs_ring_release(st->ring, span_id);
		if (err && err->code == 0)
			*err = job.err;
		return rc;
	}
	pthread_mutex_lock(&st->lock);
	rc = lease_add(st, span_id, ring_off, nbytes, owner);
	if (rc != 0)
		placefs_ring_release(st->ring, span_id);
	pthread_mutex_unlock(&st->lock);
	if (rc != 0)
		return placefs_error_set(err, rc, PLACEFS_E_NOMEM, "out of memory");
	out->lease = span_id;
	out->ring_offset = ring_off;
	out->nbytes = nbytes;
	out->read_ns = placefs_clock_ns() - t1;
	out->total_ns = placefs_clock_ns() - t0;
	return 0;
}

/* Counts a successful stage of `staged` bytes (the slice's, if any) of an nbytes tensor. */
static void count_staged(struct placefs_stager *st, int mode, const struct placefs_stage_opts *opts,
                         uint64_t nbytes, uint64_t staged)
{
	CNT_ADD(st, staged[mode], 1);
	CNT_ADD(st, staged_bytes[mode], staged);
	if (opts && opts->slice && (opts->slice->offset != 0 || opts->slice->nbytes != nbytes)) {
		CNT_ADD(st, slices, 1);
		CNT_ADD(st, slice_bytes, staged);
	}
}

int placefs_stager_stage(struct placefs_stager *st, int fd, uint64_t file_offset, uint64_t nbytes,
                         const struct placefs_stage_opts *opts, struct placefs_stage_span *out,
                         struct placefs_error *err)
{
	int rc = stage_one(st, fd, file_offset, nbytes, opts, out, err);

	if (rc != 0) {
		CNT_ADD(st, errors, 1);
		return rc;
	}
	count_staged(st, PLACEFS_IOC_STAGE_BORROW, opts, nbytes, out->nbytes);
	return 0;
}

/* Copies lease `id` out, keeping it alive meanwhile; counts nothing. */
static int copy_lease(struct placefs_stager *st, uint64_t id, const struct placefs_dest *dest,
                      struct placefs_error *err)
{
	struct lease *l;
	int rc;

	pthread_mutex_lock(&st->lock);
	l = lease_find(st, id);
	if (l)
		l->refs++;
	pthread_mutex_unlock(&st->lock);
	if (!l)
		return placefs_error_set(err, -ENOENT, PLACEFS_E_USAGE, "no lease %llu",
		                         (unsigned long long)id);
	rc = placefs_backend_copy_out(st->be, l->ring_off, l->nbytes, dest, err);
	pthread_mutex_lock(&st->lock);
	if (--l->refs == 0 && l->released)
		lease_drop(st, l);
	pthread_mutex_unlock(&st->lock);
	return rc;
}

int placefs_stager_copy_out(struct placefs_stager *st, uint64_t lease,
                            const struct placefs_dest *dest, struct placefs_error *err)
{
	int rc = copy_lease(st, lease, dest, err);

	if (rc != 0)
		CNT_ADD(st, errors, 1);
	else
		CNT_ADD(st, copied_out, 1);
	return rc;
}

/*
 * Whether a copy-mode stage goes direct: direct copies are on, zero-copy is
 * off (with it on, shards DMA straight into the ring), and no prefetched
 * span of the key is there to adopt.
 */
static bool use_direct(struct placefs_stager *st, const struct placefs_stage_opts *o)
{
	bool pf = false;

	if (!placefs_stager_is_direct(st))
		return false;
	if (o->key && !(o->slice && !placefs_slice_contiguous(o->slice))) {
		pthread_mutex_lock(&st->lock);
		pf = stage_pf_find(st, o->key) != NULL;
		if (!pf)
			stage_pf_advance(st, o->key);
		pthread_mutex_unlock(&st->lock);
	}
	return !pf;
}

/*
 * A copy-mode stage without the ring: the I/O threads read the tensor (or
 * slice) into their bounce chunks and copy each chunk straight into the
 * destination. Nothing waits for ring space and nothing is leased, so the
 * bytes in flight are bounded by the bounce chunks alone.
 */
static int stage_direct(struct placefs_stager *st, int fd, uint64_t file_offset, uint64_t nbytes,
                        const struct placefs_stage_opts *o, const struct placefs_dest *dest,
                        struct placefs_stage_span *out, struct placefs_error *err)
{
	const char *name = o->name ? o->name : "(unnamed)";
	const struct placefs_slice_layout *slice = o->slice;
	struct placefs_backend_target *tgt = NULL;
	uint64_t t0 = placefs_clock_ns();
	bool strided;
	struct job job;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = stage_range(st, name, fd, slice, &file_offset, &nbytes, &strided, err);
	if (rc != 0)
		return rc;
	if (o->cancel && __atomic_load_n(o->cancel, __ATOMIC_ACQUIRE))
		return placefs_error_set(err, -EINTR, PLACEFS_E_USAGE, "tensor \"%s\": interrupted",
		                         name);
	rc = placefs_backend_target_open(st->be, dest, nbytes, &tgt, err);
	if (rc != 0) {
		placefs_error_prefix(err, "tensor \"%s\"", name);
		return rc;
	}
	stage_job_init(&job, fd, file_offset, nbytes, 0, st->info.chunk_bytes, 1, name);
	job.tgt = tgt;
	job.dest_off = dest->offset;
	if (strided)
		stage_job_set_strided(st, &job, slice);
	rc = stage_job_run(st, &job);
	placefs_backend_target_close(st->be, tgt);
	if (rc != 0) {
		if (err && err->code == 0)
			*err = job.err;
		return rc;
	}
	out->nbytes = nbytes;
	out->read_ns = out->total_ns = placefs_clock_ns() - t0;
	return 0;
}

int placefs_stager_stage_copy(struct placefs_stager *st, int fd, uint64_t file_offset,
                              uint64_t nbytes, const struct placefs_stage_opts *opts,
                              const struct placefs_dest *dest, struct placefs_stage_span *out,
                              struct placefs_error *err)
{
	const char *name = opts && opts->name ? opts->name : "(unnamed)";
	/* The bytes that land: the slice's (checked by stage_one() before any I/O). */
	uint64_t want = opts && opts->slice ? opts->slice->nbytes : nbytes;
	struct placefs_stage_opts o = {0};
	uint64_t t0 = placefs_clock_ns(), t1;
	int rc;

	if (opts && opts->slice &&
	    (rc = placefs_slice_check(name, opts->slice, nbytes, err)) != 0) {
		CNT_ADD(st, errors, 1);
		return rc;
	}
	/* Refuse a destination that cannot take the tensor before any I/O. */
	if (dest->offset > dest->size || want > dest->size - dest->offset) {
		CNT_ADD(st, errors, 1);
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "tensor \"%s\": destination too small: offset %llu + "
		                         "%llu bytes > size %llu",
		                         name, (unsigned long long)dest->offset,
		                         (unsigned long long)want, (unsigned long long)dest->size);
	}
	if (opts)
		o = *opts;
	o.owner = 0; /* the lease never leaves this call */
	if (use_direct(st, &o)) {
		rc = stage_direct(st, fd, file_offset, nbytes, &o, dest, out, err);
		if (rc != 0) {
			CNT_ADD(st, errors, 1);
			return rc;
		}
		CNT_ADD(st, direct_stages, 1);
		CNT_ADD(st, direct_bytes, out->nbytes);
		count_staged(st, PLACEFS_IOC_STAGE_COPY, opts, nbytes, out->nbytes);
		return 0;
	}
	rc = stage_one(st, fd, file_offset, nbytes, &o, out, err);
	if (rc != 0) {
		CNT_ADD(st, errors, 1);
		return rc;
	}
	t1 = placefs_clock_ns();
	rc = copy_lease(st, out->lease, dest, err);
	out->copy_ns = placefs_clock_ns() - t1;
	placefs_stager_release(st, out->lease, 0);
	out->lease = 0;
	out->total_ns = placefs_clock_ns() - t0;
	if (rc != 0) {
		placefs_error_prefix(err, "tensor \"%s\"", name);
		CNT_ADD(st, errors, 1);
		return rc;
	}
	count_staged(st, PLACEFS_IOC_STAGE_COPY, opts, nbytes, out->nbytes);
	return 0;
}

int placefs_stager_release(struct placefs_stager *st, uint64_t lease, uint64_t owner)
{
	struct lease *l;

	pthread_mutex_lock(&st->lock);
	l = lease_find(st, lease);
	if (!l || (owner != 0 && l->owner != owner)) {
		pthread_mutex_unlock(&st->lock);
		return -ENOENT;
	}
	lease_end(st, l);
	stage_pf_kick(st);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

void placefs_stager_wake(struct placefs_stager *st)
{
	placefs_ring_wake(st->ring);
}

size_t placefs_stager_release_owner(struct placefs_stager *st, uint64_t owner)
{
	size_t n = 0;
	unsigned i;

	pthread_mutex_lock(&st->lock);
	for (i = 0; i < LEASE_BUCKETS; i++) {
		struct lease *l, *next;

		for (l = st->leases[i]; l; l = next) {
			next = l->next;
			if (!l->released && l->owner == owner) {
				lease_end(st, l);
				n++;
			}
		}
	}
	pthread_mutex_unlock(&st->lock);
	return n;
}

int placefs_stager_is_direct(const struct placefs_stager *st)
{
	return st->direct && !st->zc;
}

void placefs_stager_stats(const struct placefs_stager *st, struct placefs_stager_stats *out)
{
	struct placefs_ring_stats rs;
	int m;

	placefs_ring_stats(st->ring, &rs);
	memset(out, 0, sizeof(*out));
	out->ring_capacity = rs.capacity;
	out->ring_used = rs.used;
	out->ring_high_water = rs.high_water;
	out->ring_waits = rs.waits;
	out->ring_wait_ns = rs.wait_ns;
	out->host_buffer_bytes = st->info.host_buffer_bytes;
	out->chunk_bytes = st->info.chunk_bytes;
	out->io_threads = st->nthreads;
	for (m = 0; m < 2; m++) {
		out->staged[m] = CNT_GET(st, staged[m]);
		out->staged_bytes[m] = CNT_GET(st, staged_bytes[m]);
	}
	out->copied_out = CNT_GET(st, copied_out);
	out->leases = CNT_GET(st, leases);
	out->released = CNT_GET(st, released);
	out->errors = CNT_GET(st, errors);
	out->read_bytes = CNT_GET(st, read_bytes);
	out->prefetch_issued = CNT_GET(st, prefetch_issued);
	out->prefetch_hits = CNT_GET(st, prefetch_hits);
	out->prefetch_evicted = CNT_GET(st, prefetch_evicted);
	out->prefetch_cancelled = CNT_GET(st, prefetch_cancelled);
	out->prefetch_held = CNT_GET(st, prefetch_held);
	out->slices = CNT_GET(st, slices);
	out->slice_bytes = CNT_GET(st, slice_bytes);
	out->strided_read_bytes = CNT_GET(st, strided_read_bytes);
	out->direct = (uint64_t)placefs_stager_is_direct(st);
	out->direct_stages = CNT_GET(st, direct_stages);
	out->direct_bytes = CNT_GET(st, direct_bytes);
	if (st->zc) {
		struct placefs_zerocopy_stats zs;

		placefs_zerocopy_stats(st->zc, &zs);
		out->zero_copy = 1;
		out->zero_copy_bytes = zs.bytes;
		out->zero_copy_registrations = zs.registrations;
		out->zero_copy_registration_ns = zs.registration_ns;
		out->zero_copy_registered_bytes = zs.registered_bytes;
		out->zero_copy_refused = zs.refused;
		out->zero_copy_stale = zs.stale;
	}
}

struct placefs_zerocopy *placefs_stager_zero_copy(const struct placefs_stager *st)
{
	return st->zc;
}

void placefs_stager_zero_copy_note(struct placefs_stager *st, char *buf, size_t len)
{
	if (len == 0)
		return;
	if (st->zc)
		placefs_zerocopy_note(st->zc, buf, len); /* the first refusal, if any */
	else
		snprintf(buf, len, "%s", st->zc_note); /* why it is off */
}
