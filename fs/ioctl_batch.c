/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "staging/backend.h"
#include "common/clock.h"
#include "staging/fill.h"
#include "staging/gate.h"
#include "staging/lookahead.h"
#include "ioctl.h"
#include "log.h"
#include "common/size.h"
#include "common/slice.h"
#include "staging/stage.h"
#include "staging/stagers.h"
#include "stats.h"
#include "ioctl_i.h"

/* ---- STAGE_BATCH ------------------------------------------------------------------- */

/* fs->block held: j hands out no more entries. */
static void batch_unqueue(struct placefs_ioctl *fs, struct bjob *j)
{
	struct bjob **pp;

	for (pp = &fs->bjobs; *pp; pp = &(*pp)->next_job)
		if (*pp == j) {
			*pp = j->next_job;
			j->next_job = NULL;
			return;
		}
}

/*
 * Checks entry i of j on its own (the tensor, the destination range, the
 * caller's right to its shard, the shard's health); sets its nbytes and
 * *tp. *healthy: the shard whose health this run has checked already (-1:
 * none yet); the entries of a run share one shard, and the check costs two
 * stat calls. 0 or a negative errno with a message.
 */
static int entry_check(struct bjob *j, size_t i, const struct placefs_tensor **tp, int64_t *healthy,
                       struct placefs_error *err)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_mount *m = fs->m;
	struct placefs_ioc_stage_batch *io = j->io;
	struct bitem *e = &j->items[i];
	const struct placefs_plan_entry *pe;
	const struct placefs_tensor *t;
	uint64_t end;
	int rc;

	if (e->tensor >= placefs_plan_count(m->plan))
		return placefs_error_set(err, -ERANGE, PLACEFS_E_USAGE,
		                         "entry %u: tensor index %llu, the plan has %zu tensors",
		                         e->from, (unsigned long long)e->tensor,
		                         placefs_plan_count(m->plan));
	pe = placefs_plan_entry(m->plan, (size_t)e->tensor);
	t = pe->tensor;
	e->nbytes = t->nbytes;
	if (__builtin_add_overflow(e->dest_offset, t->nbytes, &end) || end > io->dest_size)
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE,
		        "tensor \"%s\" (%llu bytes) does not fit at dest_offset %llu "
		        "of dest_size %llu",
		        t->name, (unsigned long long)t->nbytes, (unsigned long long)e->dest_offset,
		        (unsigned long long)io->dest_size);
	if (io->mode == PLACEFS_IOC_STAGE_COPY &&
	    (pe->placement == PLACEFS_PLACE_CPU || t->nbytes > fs->info.ring_bytes))
		return placefs_error_set(
		        err, -EFBIG, PLACEFS_E_USAGE,
		        "tensor \"%s\" (%llu bytes) is placed on the %s and is not "
		        "staged (ring %llu bytes); read mode reads it",
		        t->name, (unsigned long long)t->nbytes,
		        placefs_placement_name(pe->placement),
		        (unsigned long long)fs->info.ring_bytes);
	if (!ioctl_perm_reads(fs, &j->who, t->shard))
		return placefs_error_set(err, -EACCES, PLACEFS_E_USAGE,
		                         "uid %u may not read the shard of tensor \"%s\"",
		                         (unsigned)j->r.uid, t->name);
	if (*healthy != (int64_t)t->shard) {
		rc = placefs_mount_shard_ok(m, t->shard);
		if (rc < 0)
			return placefs_error_set(
			        err, rc, PLACEFS_E_IO,
			        "tensor \"%s\": its shard is not as it was at mount "
			        "(%s)",
			        t->name, strerror(-rc));
		*healthy = (int64_t)t->shard;
	}
	*tp = t;
	return 0;
}

/*
 * Moves bytes [off, off + n) of t's shard to dest_off of the batch's
 * destination: one read (read mode) or one stage through the ring (copy).
 * key: the prefetch key of the stage (0 for a run of several tensors).
 */
static int batch_move(struct bjob *j, const struct placefs_tensor *t, uint64_t off, uint64_t n,
                      uint64_t dest_off, uint64_t key, int *prefetched, struct placefs_error *err)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_mount *m = fs->m;
	struct placefs_ioc_stage_batch *io = j->io;
	struct placefs_stage_opts o = {0};
	struct placefs_stage_span span;
	struct placefs_dest dest;
	struct timespec dl;
	const struct timespec *dlp = NULL;
	uint64_t need, reserved = 0;
	int fd, rc = 0;

	if (io->timeout_ns && io->timeout_ns <= TIMEOUT_MAX_NS) {
		dl = placefs_clock_deadline(io->timeout_ns);
		dlp = &dl;
	} else if (!io->timeout_ns && fs->default_timeout_ns) {
		dl = placefs_clock_deadline(fs->default_timeout_ns);
		dlp = &dl;
	}
	fd = placefs_ckpt_shard(m->ckpt, t->shard)->fd;
	placefs_lookahead_at(fs->lookahead, t->shard);
	if (io->mode == PLACEFS_IOC_STAGE_READ) {
		struct placefs_fill_opts fo = {.deadline = dlp,
		                               .cancel = &j->r.cancel,
		                               .name = t->name,
		                               .dest_name = (const char *)io->dest_handle};

		return placefs_filler_copy(fs->fill, fd, off, j->dfd, dest_off, n, &fo, err);
	}
	/*
	 * A run through the ring counts among the ring's users and against a
	 * capped user's share (ioctl_ring_enter()); a direct copy takes no ring
	 * space, so it counts for none.
	 */
	if (!j->direct) {
		need = n ? n : 1;
		if (fs->align > 1 && need % fs->align)
			need += fs->align - need % fs->align;
		rc = ioctl_ring_enter(fs, j->r.uid, need, &reserved);
		if (rc == -ENOMEM)
			return placefs_error_set(err, rc, PLACEFS_E_NOMEM, "out of memory");
		if (rc)
			return placefs_error_set(
			        err, rc, PLACEFS_E_USAGE,
			        "tensor \"%s\": uid %u holds more than its share of the ring "
			        "(-o user_share=%u%%) while other users stage through it",
			        t->name, (unsigned)j->r.uid, m->opts->user_share);
	}
	memset(&dest, 0, sizeof(dest));
	dest.kind = io->dest_kind;
	dest.handle_bytes = io->dest_handle_bytes;
	memcpy(dest.handle, io->dest_handle, sizeof(dest.handle));
	dest.offset = dest_off;
	dest.size = io->dest_size;
	dest.check_uid = 1;
	dest.uid = j->r.uid;
	dest.pid = j->r.pid;
	o.key = key;
	o.owner = j->r.fh;
	o.deadline = dlp;
	o.cancel = &j->r.cancel;
	o.name = t->name;
	rc = placefs_stagers_stage_copy(fs->ss, j->pos, fd, off, n, &o, &dest, &span, err);
	if (!j->direct)
		ioctl_ring_leave(fs, j->r.uid, reserved);
	if (rc == 0 && prefetched)
		*prefetched = span.prefetched;
	return rc;
}

/*
 * Runs run r of j: its entries are checked one by one, then moved as one
 * range when there are several (they are adjacent in one shard and in the
 * destination, see batch_runs()), else as the one tensor. Entry errors are
 * set; returns how many entries landed.
 */
static size_t batch_run(struct bjob *j, size_t r)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_ioc_stage_batch *io = j->io;
	size_t first = j->runs[r].first, n = j->runs[r].count, i, ok = 0;
	const struct placefs_tensor *t0 = NULL, *t = NULL;
	struct placefs_error err;
	uint64_t bytes = 0;
	int64_t healthy = -1;
	int rc = 0, pf = 0;

	placefs_error_clear(&err);
	for (i = first; i < first + n && rc == 0; i++) {
		rc = entry_check(j, i, &t, &healthy, &err);
		if (rc == 0) {
			if (!t0)
				t0 = t;
			bytes += t->nbytes;
		}
	}
	if (rc != 0 && n > 1) {
		/* One entry of the run fails its checks: each entry on its own, then. */
		for (i = first; i < first + n; i++) {
			j->runs[r].first = i;
			j->runs[r].count = 1;
			ok += batch_run(j, r);
		}
		return ok;
	}
	if (rc == 0 && __atomic_load_n(&j->r.cancel, __ATOMIC_ACQUIRE))
		rc = placefs_error_set(&err, -EINTR, PLACEFS_E_IO, "interrupted");
	if (rc == 0) {
		atomic_fetch_add_explicit(&fs->batch_moves, 1, memory_order_relaxed);
		rc = batch_move(j, t0, t0->offset, bytes, j->items[first].dest_offset,
		                n == 1 ? j->items[first].tensor + 1 : 0, &pf, &err);
	}
	for (i = first; i < first + n; i++) {
		j->items[i].error = rc < 0 ? -rc : 0;
		j->items[i].out_flags = rc == 0 && pf ? PLACEFS_IOC_STAGED_PREFETCHED : 0;
	}
	if (rc == 0) {
		/*
		 * No prefetch hint here (single stages give one): a loader sends its
		 * batches side by side, so the tensors after this run are already in
		 * flight in other requests, moved as runs that never adopt a
		 * prefetched span; prefetching them read their bytes twice and
		 * crowded the ring (a mixture of experts: 256 spans held, none used).
		 */
		ok = n;
	} else if (rc != -ETIMEDOUT && rc != -EINTR) {
		atomic_fetch_add_explicit(&fs->m->ctr.client_errors, 1, memory_order_relaxed);
		placefs_log_limited(&fs->loglim, rc == -EFBIG ? LOG_NOTICE : LOG_ERR,
		                    "staging: batch %s, entries %u-%u failed (%s): %s",
		                    ioctl_mode_name(io->mode), j->items[first].from,
		                    j->items[first + n - 1].from, strerror(-rc), err.msg);
	}
	return ok;
}

/*
 * Cuts j's entries into runs: consecutive entries whose tensors follow each
 * other in one shard and whose destinations follow each other too become
 * one range (so a mixture-of-experts layer of small tensors is one read or
 * one stage, not hundreds), up to a cap (copy through the ring: a quarter of
 * the ring, at most 64 MiB, so that the ring still overlaps runs; a direct
 * copy, which takes no ring space: the ring (a run is never larger than a
 * tensor may be), at most 64 MiB; read: 256 MiB). An entry that
 * would fail its checks stays a run of its own.
 */
static void batch_runs(struct bjob *j)
{
	struct placefs_ioctl *fs = j->r.fs;
	struct placefs_mount *m = fs->m;
	struct placefs_ioc_stage_batch *io = j->io;
	uint64_t cap = j->direct ? fs->info.ring_bytes : fs->info.ring_bytes / 4;
	const struct placefs_tensor *prev = NULL;
	uint64_t run_bytes = 0, prev_dest = 0;
	size_t i;

	if (cap > (64ULL << 20))
		cap = 64ULL << 20;
	if (io->mode == PLACEFS_IOC_STAGE_READ)
		cap = 256ULL << 20;
	j->nruns = 0;
	for (i = 0; i < j->nitems; i++) {
		const struct bitem *e = &j->items[i];
		const struct placefs_plan_entry *pe = NULL;
		const struct placefs_tensor *t = NULL;
		bool joins = false;

		if (e->tensor < placefs_plan_count(m->plan)) {
			pe = placefs_plan_entry(m->plan, (size_t)e->tensor);
			t = pe->tensor;
			if (io->mode == PLACEFS_IOC_STAGE_COPY &&
			    pe->placement == PLACEFS_PLACE_CPU)
				t = NULL;
		}
		if (t && prev && t->shard == prev->shard &&
		    t->offset == prev->offset + prev->nbytes &&
		    e->dest_offset == prev_dest + prev->nbytes && run_bytes + t->nbytes <= cap)
			joins = true;
		if (joins) {
			j->runs[j->nruns - 1].count++;
			run_bytes += t->nbytes;
		} else {
			j->runs[j->nruns].first = i;
			j->runs[j->nruns].count = 1;
			j->nruns++;
			run_bytes = t ? t->nbytes : 0;
		}
		prev = t;
		prev_dest = e->dest_offset;
	}
}

/* Whether range entry e lies within a plan of n entries; *end: its end. */
static bool range_in_plan(const struct placefs_ioc_batch_entry *e, uint64_t n, uint64_t *end)
{
	return e->tensor < n && !__builtin_add_overflow(e->tensor, e->nbytes, end) && *end <= n;
}

static int cmp_range(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * Sets j's items: its entries one for one; or, with PLACEFS_IOC_BATCH_RANGES,
 * the tensors of each range that the mode places (copy: gpu, read: cpu) in
 * plan order, each at dest_offset + its packed offset. A range that is not
 * within the plan becomes one item that fails its check (ERANGE). 0,
 * -ENOMEM, or -EINVAL with `why` when two ranges overlap (so the items are
 * never more than the plan's tensors plus the entries).
 */
static int batch_items(struct bjob *j, char *why, size_t len)
{
	const struct placefs_plan *plan = j->r.fs->m->plan;
	const struct placefs_ioc_stage_batch *io = j->io;
	const bool ranges = io->flags & PLACEFS_IOC_BATCH_RANGES;
	const enum placefs_placement want =
	        io->mode == PLACEFS_IOC_STAGE_COPY ? PLACEFS_PLACE_GPU : PLACEFS_PLACE_CPU;
	const uint64_t n = placefs_plan_count(plan);
	uint64_t span[PLACEFS_IOC_BATCH_MAX][2];
	size_t total = 0, k = 0;
	unsigned i, ns = 0;

	for (i = 0; ranges && i < io->count; i++) {
		const struct placefs_ioc_batch_entry *e = &io->entries[i];
		uint64_t end;

		if (range_in_plan(e, n, &end)) {
			span[ns][0] = e->tensor;
			span[ns++][1] = end;
		}
	}
	qsort(span, ns, sizeof(span[0]), cmp_range);
	for (i = 1; i < ns; i++)
		if (span[i][0] < span[i - 1][1])
			return -ioctl_bad(why, len, "ranges [%llu, %llu) and [%llu, %llu) overlap",
			                  (unsigned long long)span[i - 1][0],
			                  (unsigned long long)span[i - 1][1],
			                  (unsigned long long)span[i][0],
			                  (unsigned long long)span[i][1]);
	for (i = 0; i < io->count; i++) {
		const struct placefs_ioc_batch_entry *e = &io->entries[i];
		uint64_t end;

		if (!ranges || !range_in_plan(e, n, &end)) {
			total++;
			continue;
		}
		for (uint64_t t = e->tensor; t < end; t++)
			total += placefs_plan_entry(plan, (size_t)t)->placement == want;
	}
	j->items = calloc(total ? total : 1, sizeof(*j->items));
	j->runs = calloc(total ? total : 1, sizeof(*j->runs));
	if (!j->items || !j->runs)
		return -ENOMEM;
	for (i = 0; i < io->count; i++) {
		const struct placefs_ioc_batch_entry *e = &io->entries[i];
		uint64_t end;

		if (!ranges || !range_in_plan(e, n, &end)) {
			/* An entry; or a range past the plan, which fails its check. */
			j->items[k].tensor = ranges && e->tensor < n ? n : e->tensor;
			j->items[k].dest_offset = e->dest_offset;
			j->items[k++].from = i;
			continue;
		}
		for (uint64_t t = e->tensor; t < end; t++) {
			const struct placefs_plan_entry *pe = placefs_plan_entry(plan, (size_t)t);

			if (pe->placement != want)
				continue;
			j->items[k].tensor = t;
			j->items[k].dest_offset = e->dest_offset + pe->packed; /* modulo 2^64 */
			j->items[k++].from = i;
		}
	}
	j->nitems = k;
	return 0;
}

/*
 * Writes the items' results into the request's entries; returns the entries
 * with error 0. A range's nbytes is the bytes its tensors moved; its error
 * the first failing tensor's, whose plan index replaces `tensor`.
 */
static uint32_t batch_fold(struct bjob *j)
{
	struct placefs_ioc_stage_batch *io = j->io;
	uint32_t done = 0;
	unsigned i;

	if (io->flags & PLACEFS_IOC_BATCH_RANGES)
		for (i = 0; i < io->count; i++)
			io->entries[i].nbytes = 0;
	for (size_t k = 0; k < j->nitems; k++) {
		const struct bitem *it = &j->items[k];
		struct placefs_ioc_batch_entry *e = &io->entries[it->from];

		if (!(io->flags & PLACEFS_IOC_BATCH_RANGES)) {
			e->nbytes = it->nbytes;
			e->error = it->error;
			e->out_flags = it->out_flags;
		} else if (it->error == 0) {
			e->nbytes += it->nbytes;
		} else if (e->error == 0) {
			e->error = it->error;
			e->tensor = it->tensor;
		}
	}
	for (i = 0; i < io->count; i++)
		done += io->entries[i].error == 0;
	return done;
}

/*
 * fs->block held: runs one run of `only` (or, for a pool thread, of the
 * oldest queued job), dropping the lock meanwhile. False when there was none.
 */
static bool batch_step(struct placefs_ioctl *fs, struct bjob *only)
{
	struct bjob *j = only ? only : fs->bjobs;
	size_t r, ok;

	if (!j || j->next >= j->nruns)
		return false;
	r = j->next++;
	if (j->next >= j->nruns)
		batch_unqueue(fs, j);
	j->inflight++;
	pthread_mutex_unlock(&fs->block);

	ok = batch_run(j, r);

	pthread_mutex_lock(&fs->block);
	j->done += ok;
	if (--j->inflight == 0 && j->next >= j->nruns)
		pthread_cond_broadcast(&j->ended);
	return true;
}

void *ioctl_batch_main(void *arg)
{
	struct placefs_ioctl *fs = arg;

	pthread_mutex_lock(&fs->block);
	while (!fs->bstop)
		if (!batch_step(fs, NULL))
			pthread_cond_wait(&fs->bwork, &fs->block);
	pthread_mutex_unlock(&fs->block);
	return NULL;
}

void ioctl_do_batch(fuse_req_t req, struct placefs_ioctl *fs, uint64_t fh,
                    const struct placefs_ioc_stage_batch *in)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct placefs_error err;
	struct bjob j;
	char why[256];
	uint64_t t0 = placefs_clock_ns();
	unsigned bpos = 0;
	int rc;

	rc = ioctl_check_batch(in, why, sizeof(why));
	if (rc) {
		ioctl_refuse(req, fs, rc, "bad batch request: %s", why);
		return;
	}
	if (in->mode == PLACEFS_IOC_STAGE_COPY && !fs->ss) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		fuse_reply_err(req, ENODEV);
		return;
	}
	for (unsigned k = 0; k < fs->nst; k++)
		if (in->dest_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    fs->infos[k].handle_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    strcmp((const char *)in->dest_handle, (const char *)fs->infos[k].handle) == 0) {
			ioctl_refuse(req, fs, EINVAL,
			             "batch: the destination is a staging ring itself");
			return;
		}
	if (in->mode == PLACEFS_IOC_STAGE_COPY) {
		/* The batch's one destination names one device (or the mount has one). */
		struct placefs_dest dest;

		memset(&dest, 0, sizeof(dest));
		dest.kind = in->dest_kind;
		dest.handle_bytes = in->dest_handle_bytes;
		memcpy(dest.handle, in->dest_handle, sizeof(dest.handle));
		dest.size = in->dest_size;
		placefs_error_clear(&err);
		rc = placefs_stagers_route(fs->ss, NULL, &dest, &err);
		if (rc < 0) {
			ioctl_refuse(req, fs, -rc, "batch: %s", err.msg);
			return;
		}
		bpos = (unsigned)rc;
	}
	memset(&j, 0, sizeof(j));
	j.r.fs = fs;
	j.r.req = req;
	j.r.fh = fh;
	j.r.uid = ctx->uid;
	j.r.pid = ctx->pid;
	/*
	 * On the worker itself, while enough stay free for RELEASE and
	 * INTERRUPT and the user holds at most half of those slots; else
	 * EAGAIN, and nothing ran.
	 */
	if (!ioctl_slot_get(fs, &j.r)) {
		atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
		fuse_reply_err(req, EAGAIN);
		return;
	}
	j.dfd = -1;
	j.pos = bpos;
	j.direct = in->mode == PLACEFS_IOC_STAGE_COPY && ioctl_copies_direct(fs, bpos);
	j.io = malloc(sizeof(*j.io));
	if (!j.io || pthread_cond_init(&j.ended, NULL) != 0) {
		free(j.io);
		ioctl_slot_put(fs, &j.r);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* The caller's groups, where a shard's answer needs them: read once, here. */
	ioctl_who_get(fs, req, &j.who);
	memcpy(j.io, in, sizeof(*j.io));
	rc = batch_items(&j, why, sizeof(why));
	if (rc == -EINVAL) {
		placefs_error_set(&err, rc, PLACEFS_E_USAGE, "bad batch request: %s", why);
		rc = EINVAL;
		goto out_reply_err;
	} else if (rc < 0) {
		placefs_error_set(&err, rc, PLACEFS_E_NOMEM, "out of memory");
		rc = ENOMEM;
		goto out_reply_err;
	}
	if (in->mode == PLACEFS_IOC_STAGE_READ) {
		placefs_error_clear(&err);
		j.dfd = placefs_fill_open_shm((const char *)in->dest_handle, 1, (unsigned)j.r.uid,
		                              in->dest_size, &err);
		if (j.dfd < 0) {
			rc = -j.dfd;
			goto out_reply_err;
		}
	}
	ioctl_inflight_add(fs, &j.r);
	fuse_req_interrupt_func(req, ioctl_on_interrupt, &j.r);
	batch_runs(&j);
	pthread_mutex_lock(&fs->block);
	if (j.nruns > 1) {
		struct bjob **pp = &fs->bjobs;

		while (*pp)
			pp = &(*pp)->next_job;
		*pp = &j;
		pthread_cond_broadcast(&fs->bwork);
	}
	while (batch_step(fs, &j))
		;
	while (j.inflight)
		pthread_cond_wait(&j.ended, &fs->block);
	batch_unqueue(fs, &j);
	pthread_mutex_unlock(&fs->block);
	fuse_req_interrupt_func(req, NULL, NULL);
	ioctl_inflight_del(fs, &j.r);

	j.io->done = batch_fold(&j);
	j.io->total_ns = placefs_clock_ns() - t0;
	atomic_fetch_add_explicit(&fs->batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->batch_entries, j.nitems, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->batch_failed, j.nitems - j.done, memory_order_relaxed);
	/* Before the reply: the caller's next request may come as soon as it has it. */
	ioctl_slot_put(fs, &j.r);
	fuse_reply_ioctl(req, 0, j.io, sizeof(*j.io));
	rc = 0;
out_reply_err:
	if (rc) {
		atomic_fetch_add_explicit(&fs->m->ctr.client_errors, 1, memory_order_relaxed);
		placefs_log_limited(&fs->loglim, LOG_WARNING, "staging: batch refused (%s): %s",
		                    strerror(rc), err.msg);
		ioctl_slot_put(fs, &j.r);
		fuse_reply_err(req, rc);
	}
	if (j.dfd >= 0)
		close(j.dfd);
	pthread_cond_destroy(&j.ended);
	free(j.runs);
	free(j.items);
	free(j.io);
	ioctl_who_release(&j.who);
}
