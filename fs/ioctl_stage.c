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

/* ---- STAGE -------------------------------------------------------------------------- */

const char *ioctl_mode_name(uint32_t mode)
{
	return mode == PLACEFS_IOC_STAGE_COPY   ? "copy"
	       : mode == PLACEFS_IOC_STAGE_READ ? "read"
	                                        : "borrow";
}

/*
 * READ mode: the tensor's bytes from its shard straight into the caller's
 * shm object, by the filler's threads and this one; no ring is involved.
 */
static int run_read(struct sreq *r, int fd, const struct placefs_tensor *t,
                    struct placefs_stage_span *span, struct placefs_error *err)
{
	const struct placefs_ioc_stage *io = &r->io;
	struct placefs_fill_opts fo = {
	        .cancel = &r->cancel, .name = t->name, .dest_name = (const char *)io->dest_handle};
	struct timespec dl;
	uint64_t t0 = placefs_clock_ns(), end;
	int dfd, rc;

	if (__builtin_add_overflow(io->dest_offset, t->nbytes, &end) || end > io->dest_size)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "tensor \"%s\" (%llu bytes) does not fit at dest_offset "
		                         "%llu of dest_size %llu",
		                         t->name, (unsigned long long)t->nbytes,
		                         (unsigned long long)io->dest_offset,
		                         (unsigned long long)io->dest_size);
	if (io->timeout_ns && io->timeout_ns <= TIMEOUT_MAX_NS) {
		dl = placefs_clock_deadline(io->timeout_ns);
		fo.deadline = &dl;
	} else if (!io->timeout_ns && r->fs->default_timeout_ns) {
		dl = placefs_clock_deadline(r->fs->default_timeout_ns);
		fo.deadline = &dl;
	}
	/* The daemon writes only into shared memory that belongs to the caller. */
	dfd = placefs_fill_open_shm((const char *)io->dest_handle, 1, (unsigned)r->uid,
	                            io->dest_size, err);
	if (dfd < 0)
		return dfd;
	rc = placefs_filler_copy(r->fs->fill, fd, t->offset, dfd, io->dest_offset, t->nbytes, &fo,
	                         err);
	close(dfd);
	if (rc < 0)
		return rc;
	memset(span, 0, sizeof(*span));
	span->nbytes = t->nbytes;
	span->read_ns = span->total_ns = placefs_clock_ns() - t0;
	return 0;
}

static void run_stage(struct sreq *r)
{
	struct placefs_ioctl *fs = r->fs;
	struct placefs_mount *m = fs->m;
	const struct placefs_tensor *t = placefs_plan_entry(m->plan, r->entry)->tensor;
	int fd = placefs_ckpt_shard(m->ckpt, t->shard)->fd;
	/*
	 * A slice never matches a prefetch hint (hints are whole tensors) and
	 * gives none: a rank's loader asks for its slices, not the tensors.
	 */
	struct placefs_stage_opts o = {
	        .key = r->sliced ? 0 : r->entry + 1,
	        .owner = r->fh,
	        .cancel = &r->cancel,
	        .name = t->name,
	        .slice = r->sliced ? &r->lay : NULL,
	};
	struct placefs_stage_span span;
	struct placefs_error err;
	struct placefs_dest dest;
	struct timespec dl;
	struct placefs_ioc_stage *io = &r->io;
	int rc;

	placefs_lookahead_at(fs->lookahead, t->shard);
	if (io->timeout_ns && io->timeout_ns <= TIMEOUT_MAX_NS) {
		dl = placefs_clock_deadline(io->timeout_ns);
		o.deadline = &dl;
	} else if (!io->timeout_ns && fs->default_timeout_ns) {
		/* No timeout given: -o stage_timeout (default 60 s), not forever. */
		dl = placefs_clock_deadline(fs->default_timeout_ns);
		o.deadline = &dl;
	}
	placefs_error_clear(&err);
	ioctl_inflight_add(fs, r);
	fuse_req_interrupt_func(r->req, ioctl_on_interrupt, r);
	if (io->mode == PLACEFS_IOC_STAGE_READ) {
		rc = run_read(r, fd, t, &span, &err);
	} else if (io->mode == PLACEFS_IOC_STAGE_COPY) {
		memset(&dest, 0, sizeof(dest));
		dest.kind = io->dest_kind;
		dest.handle_bytes = io->dest_handle_bytes;
		memcpy(dest.handle, io->dest_handle, sizeof(dest.handle));
		dest.offset = io->dest_offset;
		dest.size = io->dest_size;
		/* The daemon writes only into shared memory that belongs to the caller. */
		dest.check_uid = 1;
		dest.uid = r->uid;
		/* Its cached import goes once this process has exited. */
		dest.pid = r->pid;
		rc = placefs_stagers_stage_copy(fs->ss, r->pos, fd, t->offset, t->nbytes, &o, &dest,
		                                &span, &err);
	} else {
		rc = placefs_stagers_stage(fs->ss, r->pos, fd, t->offset, t->nbytes, &o, &span,
		                           &err);
	}
	/* After this no interrupt callback runs, so r may go away. */
	fuse_req_interrupt_func(r->req, NULL, NULL);
	ioctl_inflight_del(fs, r);

	if (r->ring) {
		/* Unless a lease holds them, the stage's bytes no longer count against its user. */
		ioctl_ring_leave(fs, r->uid,
		                 rc != 0 || io->mode != PLACEFS_IOC_STAGE_BORROW || !span.lease
		                         ? r->reserved
		                         : 0);
		r->ring = false;
	}
	/* Before the reply: the caller's next request may come as soon as it has it. */
	ioctl_slot_put(fs, r);
	if (rc != 0) {
		/* Timeouts and interrupts are flow control, counted in stats, not logged. */
		if (rc != -ETIMEDOUT && rc != -EINTR) {
			atomic_fetch_add_explicit(&m->ctr.client_errors, 1, memory_order_relaxed);
			placefs_log_limited(&fs->loglim, rc == -EFBIG ? LOG_NOTICE : LOG_ERR,
			                    "staging: %s of '%s' failed (%s): %s",
			                    ioctl_mode_name(io->mode), ioctl_fname_of(m, r->entry),
			                    strerror(-rc), err.msg[0] ? err.msg : strerror(-rc));
		}
		fuse_reply_err(r->req, -rc);
		return;
	}
	if (io->mode == PLACEFS_IOC_STAGE_BORROW && span.lease && r->reserved) {
		bool ok;

		/* Recorded before the caller hears of the lease, so that it can end it at once. */
		pthread_mutex_lock(&fs->lock);
		ok = ioctl_lease_add(fs, r, span.lease);
		pthread_mutex_unlock(&fs->lock);
		if (!ok) {
			placefs_stagers_release(fs->ss, span.lease, r->fh);
			ioctl_share_put(fs, r->uid, r->reserved, false);
			fuse_reply_err(r->req, ENOMEM);
			return;
		}
	}
	io->nbytes = span.nbytes;
	io->ring_offset = span.ring_offset;
	io->lease = span.lease;
	io->wait_ns = span.wait_ns;
	io->read_ns = span.read_ns;
	io->copy_ns = span.copy_ns;
	io->total_ns = span.total_ns;
	io->out_flags = span.prefetched ? PLACEFS_IOC_STAGED_PREFETCHED : 0;
	if (io->mode != PLACEFS_IOC_STAGE_READ)
		io->device = placefs_stagers_devices(fs->ss)->items[r->pos].index;
	if (fuse_reply_ioctl(r->req, 0, io, sizeof(*io)) != 0 && span.lease) {
		/* The caller is gone before it heard of its lease: nobody can release it. */
		if (placefs_stagers_release(fs->ss, span.lease, r->fh) == 0 && r->reserved)
			ioctl_lease_end(fs, span.lease);
	}
	if (io->mode != PLACEFS_IOC_STAGE_READ && !r->sliced)
		ioctl_hint_after(fs, r->pos, r->entry);
	else if (io->mode != PLACEFS_IOC_STAGE_READ)
		ioctl_hint_sliced(fs, r->pos);
}

static void *detached_main(void *arg)
{
	struct sreq *r = arg;
	struct placefs_ioctl *fs = r->fs;

	run_stage(r);
	ioctl_share_put(fs, r->uid, 0, r->thread);
	free(r);
	pthread_mutex_lock(&fs->lock);
	if (--fs->detached == 0)
		pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

void ioctl_do_stage(fuse_req_t req, struct placefs_ioctl *fs, size_t entry, uint64_t fh,
                    const struct placefs_ioc_stage *in)
{
	struct placefs_mount *m = fs->m;
	const struct placefs_plan_entry *e = placefs_plan_entry(m->plan, entry);
	const struct fuse_ctx *ctx;
	struct ioctl_who who;
	bool allowed, borrow_ok;
	struct sreq local, *r;
	struct user_use *u = NULL;
	struct placefs_slice_layout lay;
	struct placefs_error err;
	pthread_attr_t attr;
	pthread_t tid;
	char why[256];
	bool sliced = (in->flags & PLACEFS_IOC_STAGE_SLICE) != 0;
	int rc, pos = 0;
	unsigned i;

	rc = ioctl_check_stage(in, why, sizeof(why));
	if (rc) {
		ioctl_refuse(req, fs, rc, "'%s': bad stage request: %s", e->fname, why);
		return;
	}
	if (!fs->ss && in->mode != PLACEFS_IOC_STAGE_READ) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		fuse_reply_err(req, ENODEV);
		return;
	}
	placefs_error_clear(&err);
	if (sliced) {
		const struct placefs_tensor *t = e->tensor;
		struct placefs_slice sl = {
		        .dim = in->slice_dim, .start = in->slice_start, .len = in->slice_len};

		rc = placefs_slice_layout(t->name, t->dtype, t->ndim, t->shape, t->nbytes, &sl,
		                          &lay, &err);
		if (rc < 0) {
			ioctl_refuse(req, fs, -rc, "'%s': bad slice: %s", e->fname, err.msg);
			return;
		}
	}
	if (in->mode != PLACEFS_IOC_STAGE_READ) {
		/* The ring of the named device, of the destination's, or the only one. */
		const struct placefs_devices *ds = placefs_stagers_devices(fs->ss);
		struct placefs_device dev = {ds->items[0].kind, in->device};
		struct placefs_dest dest;

		memset(&dest, 0, sizeof(dest));
		dest.kind = in->dest_kind;
		dest.handle_bytes = in->dest_handle_bytes;
		memcpy(dest.handle, in->dest_handle, sizeof(dest.handle));
		dest.offset = in->dest_offset;
		dest.size = in->dest_size;
		pos = placefs_stagers_route(
		        fs->ss, (in->flags & PLACEFS_IOC_STAGE_DEVICE) ? &dev : NULL,
		        in->mode == PLACEFS_IOC_STAGE_COPY ? &dest : NULL, &err);
		if (pos < 0) {
			ioctl_refuse(req, fs, -pos, "'%s': %s", e->fname, err.msg);
			return;
		}
	}
	if (in->mode != PLACEFS_IOC_STAGE_READ &&
	    (e->placement == PLACEFS_PLACE_CPU || e->tensor->nbytes > fs->info.ring_bytes)) {
		char lim[32], ring[32];

		placefs_size_format(placefs_plan_limit(m->plan), lim, sizeof(lim));
		placefs_size_format(fs->info.ring_bytes, ring, sizeof(ring));
		ioctl_refuse(req, fs, EFBIG,
		             "tensor \"%s\" (%llu bytes) is placed on the %s and is not staged: "
		             "staging limit %s, ring %llu bytes (%s)",
		             e->tensor->name, (unsigned long long)e->tensor->nbytes,
		             placefs_placement_name(e->placement),
		             placefs_plan_has_limit(m->plan) ? lim : "none",
		             (unsigned long long)fs->info.ring_bytes, ring);
		return;
	}
	for (i = 0; i < fs->nst; i++)
		if (in->mode != PLACEFS_IOC_STAGE_BORROW &&
		    in->dest_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    fs->infos[i].handle_kind == PLACEFS_IOC_HANDLE_HOST_SHM &&
		    strcmp((const char *)in->dest_handle, (const char *)fs->infos[i].handle) == 0) {
			ioctl_refuse(req, fs, EINVAL,
			             "'%s': the destination is a staging ring itself", e->fname);
			return;
		}
	rc = placefs_mount_shard_ok(m, e->tensor->shard);
	if (rc < 0) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		fuse_reply_err(req, -rc);
		return;
	}

	ctx = fuse_req_ctx(req);
	/*
	 * The caller opened the file, but the daemon decides for itself, as the
	 * kernel would for this caller's credentials (a descriptor handed over
	 * by another process carries no right to stage), every mode and slice.
	 */
	ioctl_who_get(fs, req, &who);
	allowed = ioctl_perm_reads(fs, &who, e->tensor->shard);
	borrow_ok = allowed && (in->mode != PLACEFS_IOC_STAGE_BORROW || ioctl_may_borrow(fs, &who));
	ioctl_who_release(&who);
	if (!allowed) {
		ioctl_refuse(req, fs, EACCES,
		             "'%s': uid %u may not read the shard of tensor \"%s\"", e->fname,
		             (unsigned)ctx->uid, e->tensor->name);
		return;
	}
	if (!borrow_ok) {
		atomic_fetch_add_explicit(&fs->denied, 1, memory_order_relaxed);
		ioctl_refuse(
		        req, fs, EACCES,
		        "'%s': uid %u may not borrow: a lease lends the whole ring, and this user "
		        "may not read every shard or open the ring (copy mode works)",
		        e->fname, (unsigned)ctx->uid);
		return;
	}

	memset(&local, 0, sizeof(local));
	local.fs = fs;
	local.req = req;
	local.fh = fh;
	local.entry = entry;
	local.uid = ctx->uid;
	local.pid = ctx->pid;
	local.io = *in;
	local.sliced = sliced;
	local.pos = (unsigned)pos;
	if (sliced)
		local.lay = lay;

	/*
	 * A stage through the ring counts among the ring's users, and a capped
	 * user's leases and stages in progress against its -o user_share of the
	 * ring: beyond it only while no other user stages through the ring
	 * (ioctl_ring_enter()). Direct copies take no ring space, so they count
	 * for none.
	 */
	if (in->mode != PLACEFS_IOC_STAGE_READ &&
	    !(in->mode == PLACEFS_IOC_STAGE_COPY && ioctl_copies_direct(fs, local.pos))) {
		uint64_t need = sliced ? lay.nbytes : e->tensor->nbytes;

		if (!need)
			need = 1;

		if (fs->align > 1 && need % fs->align)
			need += fs->align - need % fs->align;
		rc = ioctl_ring_enter(fs, local.uid, need, &local.reserved);
		if (rc == -ENOMEM) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		if (rc == -EBUSY) {
			atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
			ioctl_refuse(
			        req, fs, EBUSY,
			        "'%s': uid %u holds more than its share of the ring (-o "
			        "user_share=%u%%, %llu bytes) in leases and stages while other "
			        "users stage through it; release some first",
			        e->fname, (unsigned)local.uid, m->opts->user_share,
			        (unsigned long long)fs->share_bytes);
			return;
		}
		local.ring = true;
	}

	/*
	 * Inline while enough workers stay free for RELEASE and INTERRUPT
	 * requests, and the user holds at most half of those slots.
	 */
	if (ioctl_slot_get(fs, &local)) {
		run_stage(&local);
		ioctl_slot_put(fs, &local);
		return;
	}

	/*
	 * On a thread of its own, of which there are at most -o max_waiting
	 * (and half of them per user other than root and the daemon's): more
	 * answer EAGAIN at once rather than growing threads without bound or
	 * blocking a worker.
	 */
	why[0] = '\0';
	pthread_mutex_lock(&fs->lock);
	if (fs->closing)
		snprintf(why, sizeof(why), "the mount is ending");
	else if (fs->detached >= fs->max_waiting)
		snprintf(why, sizeof(why), "%u stages wait already (-o max_waiting=%u)",
		         fs->detached, fs->max_waiting);
	else if (!ioctl_trusted(fs, local.uid) && (u = ioctl_user_get(fs, local.uid)) != NULL &&
	         u->waiting >= fs->user_waiting_max)
		snprintf(why, sizeof(why), "uid %u has %u stages waiting already (at most %u)",
		         (unsigned)local.uid, u->waiting, fs->user_waiting_max);
	if (!why[0]) {
		fs->detached++;
		if (!ioctl_trusted(fs, local.uid) && (u = ioctl_user_get(fs, local.uid)) != NULL) {
			u->waiting++;
			local.thread = true;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	if (why[0]) {
		if (local.ring)
			ioctl_ring_leave(fs, local.uid, local.reserved);
		atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
		ioctl_refuse(req, fs, EAGAIN, "'%s': not staged: %s", e->fname, why);
		return;
	}
	rc = ENOMEM;
	r = malloc(sizeof(*r));
	if (r) {
		*r = local;
		rc = pthread_attr_init(&attr);
		if (rc == 0) {
			pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
			rc = pthread_create(&tid, &attr, detached_main, r);
			pthread_attr_destroy(&attr);
		}
		if (rc == 0) {
			atomic_fetch_add_explicit(&fs->threads, 1, memory_order_relaxed);
			return;
		}
		free(r);
		rc = EAGAIN;
	}
	if (local.ring)
		ioctl_ring_leave(fs, local.uid, local.reserved);
	ioctl_share_put(fs, local.uid, 0, local.thread);
	pthread_mutex_lock(&fs->lock);
	if (--fs->detached == 0)
		pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	/* No thread to be had: a worker that waited here could be the one RELEASE needs. */
	atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
	ioctl_refuse(req, fs, rc, "'%s': not staged: no thread to wait on (%s)", e->fname,
	             strerror(rc));
}
