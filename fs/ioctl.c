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

/* ---- helpers ------------------------------------------------------------------- */

bool ioctl_all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

const char *ioctl_fname_of(struct placefs_mount *m, size_t entry)
{
	return placefs_plan_entry(m->plan, entry)->fname;
}

/* Logs why a request is refused before it reaches the stager, and answers it. */
void ioctl_refuse(fuse_req_t req, struct placefs_ioctl *fs, int e, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

void ioctl_refuse(fuse_req_t req, struct placefs_ioctl *fs, int e, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add_explicit(&placefs_mount_of(req)->ctr.client_errors, 1,
	                          memory_order_relaxed);
	if (fs) {
		atomic_fetch_add_explicit(&fs->refused, 1, memory_order_relaxed);
		/* Any client can send these at will: a burst, then one line a second. */
		placefs_log_limited(&fs->loglim, e == EFBIG ? LOG_NOTICE : LOG_WARNING,
		                    "staging: %s (%s)", msg, strerror(e));
	} else {
		placefs_log(e == EFBIG ? LOG_NOTICE : LOG_WARNING, "staging: %s (%s)", msg,
		            strerror(e));
	}
	fuse_reply_err(req, e);
}

/* ---- cancellation ------------------------------------------------------------ */

void ioctl_on_interrupt(fuse_req_t req, void *data)
{
	struct sreq *r = data;

	(void)req;
	__atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
	if (r->fs->ss) /* a read-mode request on a mount without staging */
		placefs_stagers_wake(r->fs->ss);
}

/* Ends every wait and refuses new stages: the session is ending. */
static void cancel_all(struct placefs_ioctl *fs)
{
	struct sreq *r;

	pthread_mutex_lock(&fs->lock);
	fs->closing = true;
	for (r = fs->inflight; r; r = r->next)
		__atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&fs->lock);
	if (fs->ss)
		placefs_stagers_wake(fs->ss);
}

void ioctl_inflight_add(struct placefs_ioctl *fs, struct sreq *r)
{
	pthread_mutex_lock(&fs->lock);
	r->prev = NULL;
	r->next = fs->inflight;
	if (fs->inflight)
		fs->inflight->prev = r;
	fs->inflight = r;
	/* Registered before this check, so cancel_all() cannot miss it. */
	if (fs->closing)
		r->cancel = 1;
	pthread_mutex_unlock(&fs->lock);
}

void ioctl_inflight_del(struct placefs_ioctl *fs, struct sreq *r)
{
	pthread_mutex_lock(&fs->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		fs->inflight = r->next;
	if (r->next)
		r->next->prev = r->prev;
	pthread_mutex_unlock(&fs->lock);
}

/*
 * libfuse ends the session loop by joining its workers, and a worker waiting
 * for ring space would keep it from ever returning (SIGTERM with a lease
 * held elsewhere). This thread notices the session's end and cancels the
 * waits; a stage already past its wait finishes its I/O normally.
 */
static void *watch_main(void *arg)
{
	struct placefs_ioctl *fs = arg;
	unsigned ticks = 0;

	pthread_mutex_lock(&fs->lock);
	while (!fs->watch_stop) {
		if (fs->m->se && fuse_session_exited(fs->m->se)) {
			pthread_mutex_unlock(&fs->lock);
			cancel_all(fs);
			pthread_mutex_lock(&fs->lock);
			break;
		}
		/*
		 * Copy destinations whose clients unlinked them or exited stay
		 * mapped (their pages allocated) until this drops them.
		 */
		if (++ticks % SWEEP_TICKS == 0) {
			pthread_mutex_unlock(&fs->lock);
			placefs_stagers_sweep(fs->ss);
			pthread_mutex_lock(&fs->lock);
			continue;
		}
		placefs_clock_cond_wait_ns(&fs->cond, &fs->lock, WATCH_NS);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

/* ---- prefetch hints -------------------------------------------------------------- */

/*
 * After a stage of GPU tensor `entry`, makes sure the prefetcher knows the
 * GPU tensors that follow it. A loader walking the plan moves the stager's
 * cursor along the current list by itself; a new list (the next HINT_WINDOW
 * tensors) is handed over only when the loader has used half of it or did
 * not ask for the tensor after the last one (it started again or jumped),
 * so the cost stays O(1) per stage.
 */
void ioctl_hint_after(struct placefs_ioctl *fs, unsigned spos, size_t entry)
{
	struct placefs_prefetch_item *items;
	struct placefs_error err;
	size_t pos = fs->gpu_pos[entry], lo, hi, i;

	if (pos == SIZE_MAX || !fs->m->opts->prefetch || spos >= fs->nst)
		return;
	pthread_mutex_lock(&fs->hint_lock);
	if (fs->hints[spos].sliced_ns &&
	    placefs_clock_ns() - fs->hints[spos].sliced_ns < SLICED_QUIET_NS) {
		/* A tensor-parallel loader: see ioctl_hint_sliced(). */
		pthread_mutex_unlock(&fs->hint_lock);
		return;
	}
	if (fs->hints[spos].hinted && pos == fs->hints[spos].last_pos + 1 &&
	    pos < fs->hints[spos].hint_lo + HINT_WINDOW / 2 && pos < fs->hints[spos].hint_hi) {
		fs->hints[spos].last_pos = pos;
		pthread_mutex_unlock(&fs->hint_lock);
		return;
	}
	fs->hints[spos].last_pos = pos;
	lo = pos + 1;
	hi = fs->ngpu - lo > HINT_WINDOW ? lo + HINT_WINDOW : fs->ngpu;
	items = calloc(hi > lo ? hi - lo : 1, sizeof(*items));
	if (!items) {
		pthread_mutex_unlock(&fs->hint_lock);
		return;
	}
	for (i = lo; i < hi; i++) {
		const struct placefs_tensor *t =
		        placefs_plan_entry(fs->m->plan, fs->gpu[i])->tensor;

		items[i - lo].fd = placefs_ckpt_shard(fs->m->ckpt, t->shard)->fd;
		items[i - lo].offset = t->offset;
		items[i - lo].nbytes = t->nbytes;
		items[i - lo].key = fs->gpu[i] + 1;
	}
	placefs_error_clear(&err);
	if (placefs_stager_prefetch(placefs_stagers_at(fs->ss, spos), items, hi - lo, &err) == 0) {
		fs->hints[spos].hinted = true;
		fs->hints[spos].hint_lo = lo;
		fs->hints[spos].hint_hi = hi;
	}
	pthread_mutex_unlock(&fs->hint_lock);
	free(items);
}

/*
 * A sliced stage on stager spos: its loader keeps a part of each tensor, so
 * the whole tensors the prefetcher would stage after a neighbour are bytes
 * nobody asks for (rank 0 of 8 read 4.6 GB beside its 2.2 GB). The hint
 * list is dropped and no new one is given for SLICED_QUIET_NS after the
 * last sliced stage; whole-tensor loads hint again after that.
 */
void ioctl_hint_sliced(struct placefs_ioctl *fs, unsigned spos)
{
	struct placefs_error err;
	bool had;

	if (!fs->m->opts->prefetch || spos >= fs->nst)
		return;
	pthread_mutex_lock(&fs->hint_lock);
	had = fs->hints[spos].hinted;
	fs->hints[spos].hinted = false;
	fs->hints[spos].sliced_ns = placefs_clock_ns();
	if (had) {
		placefs_error_clear(&err);
		(void)placefs_stager_prefetch(placefs_stagers_at(fs->ss, spos), NULL, 0, &err);
	}
	pthread_mutex_unlock(&fs->hint_lock);
}

/* ---- shared-host limits ------------------------------------------------------------ */

/* Whether a copy-mode stage on stager pos goes direct (takes no ring space). */
bool ioctl_copies_direct(const struct placefs_ioctl *fs, unsigned pos)
{
	return placefs_stager_is_direct(placefs_stagers_at(fs->ss, pos));
}

/* Writes why a request is malformed and returns EINVAL. */
int ioctl_bad(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int ioctl_bad(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return EINVAL;
}

/* The destination of a copy- or read-mode request (STAGE or STAGE_BATCH). */
int ioctl_check_dest(uint32_t mode, uint32_t kind, uint32_t hbytes, const uint8_t *handle,
                     char *why, size_t len)
{
	struct placefs_error err;

	if (mode == PLACEFS_IOC_STAGE_READ && kind != PLACEFS_IOC_HANDLE_HOST_SHM)
		return ioctl_bad(why, len,
		                 "read mode takes a host shm destination (kind %d), not kind %u",
		                 PLACEFS_IOC_HANDLE_HOST_SHM, kind);
	switch (kind) {
	case PLACEFS_IOC_HANDLE_CUDA_IPC:
		if (hbytes != PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES)
			return ioctl_bad(why, len, "a CUDA IPC handle is %d bytes, not %u",
			                 PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES, hbytes);
		break;
	case PLACEFS_IOC_HANDLE_HOST_SHM:
		placefs_error_clear(&err);
		if (placefs_backend_shm_name_check(handle, hbytes, &err) < 0)
			return ioctl_bad(why, len, "%s", err.msg);
		break;
	default: return ioctl_bad(why, len, "unknown destination kind %u", kind);
	}
	if (hbytes < PLACEFS_IOC_HANDLE_MAX &&
	    !ioctl_all_zero(handle + hbytes, PLACEFS_IOC_HANDLE_MAX - hbytes))
		return ioctl_bad(why, len, "bytes after the destination handle are not zero");
	return 0;
}

/* Every field of a STAGE request; 0 or the errno, with a message. */
int ioctl_check_stage(const struct placefs_ioc_stage *s, char *why, size_t len)
{
	if (s->version != PLACEFS_IOC_VERSION)
		return ioctl_bad(why, len, "version %u, expected %u", s->version,
		                 PLACEFS_IOC_VERSION);
	if (s->size != sizeof(*s))
		return ioctl_bad(why, len, "size field %u, expected %zu", s->size, sizeof(*s));
	if (s->mode != PLACEFS_IOC_STAGE_BORROW && s->mode != PLACEFS_IOC_STAGE_COPY &&
	    s->mode != PLACEFS_IOC_STAGE_READ)
		return ioctl_bad(why, len, "unknown mode %u", s->mode);
	if (s->flags & ~(PLACEFS_IOC_STAGE_SLICE | PLACEFS_IOC_STAGE_DEVICE))
		return ioctl_bad(why, len, "flags 0x%x (known: SLICE 0x%x, DEVICE 0x%x)", s->flags,
		                 PLACEFS_IOC_STAGE_SLICE, PLACEFS_IOC_STAGE_DEVICE);
	if (s->pad0 != 0 || !ioctl_all_zero(s->reserved, sizeof(s->reserved)))
		return ioctl_bad(why, len, "a reserved field is not zero");
	/* The fields of a flag that is clear must be zero. */
	if (!(s->flags & PLACEFS_IOC_STAGE_SLICE) &&
	    (s->slice_dim || s->slice_start || s->slice_len))
		return ioctl_bad(why, len,
		                 "slice_dim, slice_start and slice_len are not zero without the "
		                 "SLICE flag");
	if (!(s->flags & PLACEFS_IOC_STAGE_DEVICE) && s->device)
		return ioctl_bad(why, len, "device is not zero without the DEVICE flag");
	if (s->mode == PLACEFS_IOC_STAGE_READ && s->flags)
		return ioctl_bad(why, len,
		                 "read mode takes no SLICE or DEVICE flag (it uses no ring)");
	if (s->mode == PLACEFS_IOC_STAGE_BORROW) {
		if (s->dest_kind || s->dest_handle_bytes || s->dest_offset || s->dest_size ||
		    !ioctl_all_zero(s->dest_handle, sizeof(s->dest_handle)))
			return ioctl_bad(why, len, "borrow mode takes no destination");
		return 0;
	}
	if (s->dest_offset > s->dest_size)
		return ioctl_bad(why, len, "dest_offset %llu is past dest_size %llu",
		                 (unsigned long long)s->dest_offset,
		                 (unsigned long long)s->dest_size);
	return ioctl_check_dest(s->mode, s->dest_kind, s->dest_handle_bytes, s->dest_handle, why,
	                        len);
}

/* Every field of a STAGE_BATCH request; 0 or the errno, with a message. */
int ioctl_check_batch(const struct placefs_ioc_stage_batch *b, char *why, size_t len)
{
	unsigned i;

	if (b->version != PLACEFS_IOC_VERSION)
		return ioctl_bad(why, len, "version %u, expected %u", b->version,
		                 PLACEFS_IOC_VERSION);
	if (b->size != sizeof(*b))
		return ioctl_bad(why, len, "size field %u, expected %zu", b->size, sizeof(*b));
	if (b->mode != PLACEFS_IOC_STAGE_COPY && b->mode != PLACEFS_IOC_STAGE_READ)
		return ioctl_bad(why, len, "batch mode %u: copy (%d) or read (%d) only", b->mode,
		                 PLACEFS_IOC_STAGE_COPY, PLACEFS_IOC_STAGE_READ);
	if (b->count == 0 || b->count > PLACEFS_IOC_BATCH_MAX)
		return ioctl_bad(why, len, "count %u, expected 1 to %d", b->count,
		                 PLACEFS_IOC_BATCH_MAX);
	if (b->total_ns || b->done || !ioctl_all_zero(b->reserved, sizeof(b->reserved)))
		return ioctl_bad(why, len, "a reserved or out field is not zero");
	if (b->flags & ~PLACEFS_IOC_BATCH_RANGES)
		return ioctl_bad(why, len,
		                 "flags 0x%x: only PLACEFS_IOC_BATCH_RANGES (0x%x) is known",
		                 b->flags, PLACEFS_IOC_BATCH_RANGES);
	for (i = 0; i < b->count; i++) {
		/* A range's nbytes is its length (in); an entry's is out only. */
		if ((b->flags & PLACEFS_IOC_BATCH_RANGES) ? b->entries[i].nbytes == 0
		                                          : b->entries[i].nbytes != 0)
			return ioctl_bad(why, len, "entry %u: nbytes %llu: %s", i,
			                 (unsigned long long)b->entries[i].nbytes,
			                 (b->flags & PLACEFS_IOC_BATCH_RANGES)
			                         ? "a range holds at least one plan entry"
			                         : "an out field is not zero");
		if (b->entries[i].error || b->entries[i].out_flags)
			return ioctl_bad(why, len, "entry %u: an out field is not zero", i);
	}
	if (!ioctl_all_zero(&b->entries[b->count],
	                    (PLACEFS_IOC_BATCH_MAX - b->count) * sizeof(b->entries[0])))
		return ioctl_bad(why, len, "entries after the first %u are not zero", b->count);
	return ioctl_check_dest(b->mode, b->dest_kind, b->dest_handle_bytes, b->dest_handle, why,
	                        len);
}

/* ---- RING_INFO, RELEASE ---------------------------------------------------------------- */

static void do_ring_info(fuse_req_t req, struct placefs_ioctl *fs, const char *fname,
                         const struct placefs_ioc_ring_info *in)
{
	struct placefs_ioc_ring_info out;
	struct ioctl_who who;

	if (in->version != PLACEFS_IOC_VERSION || in->size != sizeof(*in)) {
		ioctl_refuse(req, fs, EINVAL,
		             "'%s': ring info with version %u size %u, expected %u %zu", fname,
		             in->version, in->size, PLACEFS_IOC_VERSION, sizeof(*in));
		return;
	}
	if (!ioctl_all_zero(in->reserved, sizeof(in->reserved)) || in->ndevices || in->position) {
		ioctl_refuse(req, fs, EINVAL, "'%s': ring info with a non-zero reserved field",
		             fname);
		return;
	}
	if (in->flags != 0 && in->flags != PLACEFS_IOC_RING_INFO_DEVICE &&
	    in->flags != PLACEFS_IOC_RING_INFO_POSITION) {
		ioctl_refuse(req, fs, EINVAL,
		             "'%s': ring info flags 0x%x (zero, DEVICE 0x%x or POSITION 0x%x)",
		             fname, in->flags, PLACEFS_IOC_RING_INFO_DEVICE,
		             PLACEFS_IOC_RING_INFO_POSITION);
		return;
	}
	if (in->flags == 0 && in->select != 0) {
		ioctl_refuse(req, fs, EINVAL, "'%s': ring info select %d without a flag", fname,
		             in->select);
		return;
	}
	memset(&out, 0, sizeof(out));
	out.version = PLACEFS_IOC_VERSION;
	out.size = sizeof(out);
	out.backend = PLACEFS_IOC_BACKEND_NONE;
	out.device = -1;
	if (fs && fs->ss) {
		const struct placefs_backend_info *bi;
		struct placefs_error err;
		int pos = 0;

		placefs_error_clear(&err);
		if (in->flags == PLACEFS_IOC_RING_INFO_DEVICE) {
			struct placefs_device dev = {placefs_stagers_devices(fs->ss)->items[0].kind,
			                             in->select};

			pos = placefs_stagers_find(fs->ss, dev, &err);
		} else if (in->flags == PLACEFS_IOC_RING_INFO_POSITION) {
			pos = in->select >= 0 && (unsigned)in->select < fs->nst ? in->select
			                                                        : -ENODEV;
			if (pos < 0)
				snprintf(err.msg, sizeof(err.msg),
				         "position %d, the mount has %u rings", in->select,
				         fs->nst);
		}
		if (pos < 0) {
			ioctl_refuse(req, fs, -pos, "'%s': ring info: %s", fname, err.msg);
			return;
		}
		bi = &fs->infos[pos];
		out.backend = (uint32_t)bi->device.kind;
		out.device = bi->device.index;
		out.ring_bytes = bi->ring_bytes;
		out.host_buffer_bytes = bi->host_buffer_bytes;
		out.alignment = fs->align;
		out.ndevices = fs->nst;
		out.position = (uint32_t)pos;
		/*
		 * The handle maps the whole ring: only for those who may borrow
		 * (ioctl_may_borrow(): they read every shard, and may open a host
		 * ring's shm object); others see HANDLE_NONE, and copy mode works.
		 */
		ioctl_who_get(fs, req, &who);
		if (ioctl_may_borrow(fs, &who)) {
			out.handle_kind = bi->handle_kind;
			out.handle_bytes = bi->handle_bytes;
			memcpy(out.handle, bi->handle, sizeof(out.handle));
		}
		ioctl_who_release(&who);
	} else if (in->flags) {
		ioctl_refuse(req, fs, ENODEV, "'%s': ring info of a device: staging is disabled",
		             fname);
		return;
	}
	fuse_reply_ioctl(req, 0, &out, sizeof(out));
}

static void do_release(fuse_req_t req, struct placefs_ioctl *fs, const char *fname, uint64_t fh,
                       const struct placefs_ioc_release *in)
{
	if (in->version != PLACEFS_IOC_VERSION || in->size != sizeof(*in)) {
		ioctl_refuse(req, fs, EINVAL,
		             "'%s': release with version %u size %u, expected %u %zu", fname,
		             in->version, in->size, PLACEFS_IOC_VERSION, sizeof(*in));
		return;
	}
	if (!ioctl_all_zero(in->reserved, sizeof(in->reserved))) {
		ioctl_refuse(req, fs, EINVAL, "'%s': release with a non-zero reserved field",
		             fname);
		return;
	}
	if (!fs || !fs->ss) {
		fuse_reply_err(req, ENODEV);
		return;
	}
	/* Only leases taken on this file handle; 0 is never a lease. */
	if (in->lease == 0 || placefs_stagers_release(fs->ss, in->lease, fh) != 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	ioctl_lease_end(fs, in->lease);
	fuse_reply_ioctl(req, 0, NULL, 0);
}

void placefs_ioctl_op(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                      struct fuse_file_info *fi, unsigned flags, const void *in_buf,
                      size_t in_bufsz, size_t out_bufsz)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct placefs_ioctl *fs = m->stage;
	struct placefs_vnode node;
	unsigned int want;
	size_t size, out_size;
	const char *fname;

	(void)arg;
	/*
	 * Only tensor files have staging commands; control files and
	 * directories (which libfuse already refuses) answer ENOTTY, as does
	 * any ioctl that is not one of ours (FS_IOC_GETFLAGS from lsattr...).
	 * FUSE_IOCTL_COMPAT / _32BIT are accepted: the structs are fixed-width
	 * and the command numbers the same for 32- and 64-bit callers.
	 */
	if ((flags & FUSE_IOCTL_DIR) || placefs_vtree_get(m->vt, ino, &node) != 0 ||
	    node.kind != PLACEFS_V_TENSOR || _IOC_TYPE(cmd) != PLACEFS_IOC_MAGIC) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	fname = ioctl_fname_of(m, node.entry);
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(PLACEFS_IOC_RING_INFO):
		want = PLACEFS_IOC_RING_INFO;
		size = out_size = sizeof(struct placefs_ioc_ring_info);
		break;
	case _IOC_NR(PLACEFS_IOC_STAGE):
		want = PLACEFS_IOC_STAGE;
		size = out_size = sizeof(struct placefs_ioc_stage);
		break;
	case _IOC_NR(PLACEFS_IOC_RELEASE):
		want = PLACEFS_IOC_RELEASE;
		size = sizeof(struct placefs_ioc_release);
		out_size = 0;
		break;
	case _IOC_NR(PLACEFS_IOC_STAGE_BATCH):
		want = PLACEFS_IOC_STAGE_BATCH;
		size = out_size = sizeof(struct placefs_ioc_stage_batch);
		break;
	default: fuse_reply_err(req, ENOTTY); return;
	}
	/*
	 * One of our commands encoded with another size or direction: the
	 * kernel moved that many bytes, which are not our struct.
	 */
	if (cmd != want || in_bufsz != size || out_bufsz != out_size || !in_buf) {
		ioctl_refuse(
		        req, fs, EINVAL,
		        "'%s': ioctl 0x%08x carries %zu bytes in and %zu out; command %u takes "
		        "0x%08x with %zu in and %zu out",
		        fname, cmd, in_bufsz, out_bufsz, _IOC_NR(cmd), want, size, out_size);
		return;
	}
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(PLACEFS_IOC_RING_INFO): {
		struct placefs_ioc_ring_info ri;

		memcpy(&ri, in_buf, sizeof(ri));
		do_ring_info(req, fs, fname, &ri);
		return;
	}
	case _IOC_NR(PLACEFS_IOC_STAGE): {
		struct placefs_ioc_stage s;

		memcpy(&s, in_buf, sizeof(s));
		if (!fs) {
			fuse_reply_err(req, ENODEV);
			return;
		}
		ioctl_do_stage(req, fs, node.entry, fi->fh, &s);
		return;
	}
	case _IOC_NR(PLACEFS_IOC_STAGE_BATCH):
		if (!fs) {
			fuse_reply_err(req, ENODEV);
			return;
		}
		/* in_buf is the request's own buffer: the batch runs on a copy. */
		ioctl_do_batch(req, fs, fi->fh, in_buf);
		return;
	default: {
		struct placefs_ioc_release rel;

		memcpy(&rel, in_buf, sizeof(rel));
		do_release(req, fs, fname, fi->fh, &rel);
		return;
	}
	}
}

void placefs_ioctl_release(struct placefs_ioctl *fs, uint64_t fh)
{
	if (fs && fs->ss && placefs_stagers_release_owner(fs->ss, fh) > 0)
		ioctl_lease_end_owner(fs, fh);
}

/* ---- create / free --------------------------------------------------------------------- */

/*
 * The staging devices for the options: the -o device= list as given, or
 * for the default cuda:0 when a CUDA device is present. An empty list
 * ("none") with *why set when staging stays off.
 */
static struct placefs_devices choose_devices(const struct placefs_opts *o, char *why, size_t wlen)
{
	struct placefs_devices none = {0};
	struct placefs_error err;
	int n;

	if (!o->device_auto) {
		if (!o->devices.all && o->devices.n == 0)
			snprintf(why, wlen, "-o device=none");
		return o->devices;
	}
	/* The default: the first GPU when there is one, else no staging. */
	placefs_error_clear(&err);
	n = placefs_backend_cuda_devices(&err);
	if (n > 0)
		return o->devices;
	snprintf(why, wlen,
	         "no -o device given and %.300s; -o device=host stages through shared "
	         "memory",
	         n == 0 ? "no CUDA device is present" : err.msg);
	return none;
}

/*
 * The mount's lookahead: every shard with a selected tensor, in shard order,
 * over the bytes from its first selected tensor to the end of its last, one
 * read per MiB (a divisor of s3fs's fetches, multiples of 10 MiB), over the
 * first 128 MiB after the reader's shard.
 */
#define LOOKAHEAD_STRIDE (1ULL << 20)
#define LOOKAHEAD_WINDOW (128ULL << 20)

static int lookahead_create(struct placefs_ioctl *fs, struct placefs_error *err)
{
	const struct placefs_mount *m = fs->m;
	size_t n = placefs_ckpt_shard_count(m->ckpt), i;
	struct placefs_lookahead_shard *sh;
	int rc;

	sh = calloc(n ? n : 1, sizeof(*sh));
	if (!sh)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		sh[i].fd = placefs_ckpt_shard(m->ckpt, i)->fd;
		sh[i].lo = UINT64_MAX;
	}
	for (i = 0; i < placefs_plan_count(m->plan); i++) {
		const struct placefs_tensor *t = placefs_plan_entry(m->plan, i)->tensor;
		struct placefs_lookahead_shard *s = &sh[t->shard];

		if (t->offset < s->lo)
			s->lo = t->offset;
		if (t->offset + t->nbytes > s->hi)
			s->hi = t->offset + t->nbytes;
	}
	for (i = 0; i < n; i++)
		if (sh[i].lo > sh[i].hi)
			sh[i].lo = sh[i].hi = 0; /* nothing selected there */
	rc = placefs_lookahead_create(sh, n, LOOKAHEAD_STRIDE, LOOKAHEAD_WINDOW, &fs->lookahead,
	                              err);
	free(sh);
	return rc;
}

static int ioctl_init(struct placefs_ioctl *fs, struct placefs_mount *m)
{
	size_t i, n = placefs_plan_count(m->plan);

	fs->m = m;
	atomic_init(&fs->inline_busy, 0);
	ioctl_stats_zero(fs);
	if (pthread_mutex_init(&fs->lock, NULL) != 0)
		return -ENOMEM;
	if (pthread_mutex_init(&fs->hint_lock, NULL) != 0)
		goto fail_hint;
	if (placefs_clock_cond_init(&fs->cond) != 0)
		goto fail_cond;
	if (pthread_mutex_init(&fs->block, NULL) != 0)
		goto fail_block;
	if (pthread_cond_init(&fs->bwork, NULL) != 0)
		goto fail_bwork;
	fs->gpu = malloc((n ? n : 1) * sizeof(*fs->gpu));
	fs->gpu_pos = malloc((n ? n : 1) * sizeof(*fs->gpu_pos));
	if (!fs->gpu || !fs->gpu_pos)
		goto fail_alloc;
	for (i = 0; i < n; i++) {
		if (placefs_plan_entry(m->plan, i)->placement == PLACEFS_PLACE_GPU) {
			fs->gpu_pos[i] = fs->ngpu;
			fs->gpu[fs->ngpu++] = i;
		} else {
			fs->gpu_pos[i] = SIZE_MAX;
		}
	}
	/* Half the workers may wait on the ring; -s has only one, which never may. */
	fs->inline_max = m->opts->singlethread ? 0 : m->opts->max_threads / 2;
	/* Of those, one user other than root and the daemon's holds at most half. */
	fs->user_inline_max = fs->inline_max > 1 ? fs->inline_max / 2 : fs->inline_max;
	fs->loglim = (struct placefs_log_limit)PLACEFS_LOG_LIMIT_INIT(&m->ctr.log_suppressed);
	fs->self_uid = geteuid();
	fs->default_timeout_ns = (uint64_t)m->opts->stage_timeout * 1000000000ULL;
	fs->max_waiting = m->opts->max_waiting ? m->opts->max_waiting : PLACEFS_MAX_WAITING;
	fs->user_waiting_max = fs->max_waiting > 1 ? fs->max_waiting / 2 : 1;
	fs->share_bytes = UINT64_MAX; /* set once the ring's size is known */
	if (ioctl_perms_init(fs) != 0)
		goto fail_alloc;
	return 0;
fail_alloc:
	free(fs->gpu);
	free(fs->gpu_pos);
	pthread_cond_destroy(&fs->bwork);
fail_bwork:
	pthread_mutex_destroy(&fs->block);
fail_block:
	pthread_cond_destroy(&fs->cond);
fail_cond:
	pthread_mutex_destroy(&fs->hint_lock);
fail_hint:
	pthread_mutex_destroy(&fs->lock);
	return -ENOMEM;
}

int placefs_ioctl_create(struct placefs_mount *m, struct placefs_ioctl **out,
                         struct placefs_error *err)
{
	struct placefs_stagers_config cfg;
	struct placefs_error e;
	struct placefs_ioctl *fs;
	char spec[PLACEFS_DEVICES_NAME_MAX], why[512], ring[32], hb[32], chunk[32], note[256];
	char zc[300];
	struct placefs_stager_stats zs;
	struct placefs_devices devs;
	int rc;

	*out = NULL;
	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	if (ioctl_init(fs, m) != 0) {
		free(fs);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	}
	{
		struct placefs_fill_config fc = {0};

		placefs_error_clear(&e);
		rc = placefs_filler_create(&fc, &fs->fill, &e);
		if (rc != 0) {
			placefs_error_set(err, rc, e.kind, "staging: %s", e.msg);
			placefs_ioctl_free(fs);
			return rc;
		}
	}
	if (m->lookahead) {
		rc = lookahead_create(fs, &e);
		if (rc != 0) {
			placefs_error_set(err, rc, e.kind, "staging: %s", e.msg);
			placefs_ioctl_free(fs);
			return rc;
		}
	}
	{
		long nc = sysconf(_SC_NPROCESSORS_ONLN);

		fs->nbwant = nc < 2 ? 2 : nc > BATCH_THREADS ? BATCH_THREADS : (unsigned)nc;
	}
	for (unsigned k = 0; k < fs->nbwant; k++) {
		rc = -pthread_create(&fs->bthreads[k], NULL, ioctl_batch_main, fs);
		if (rc != 0) {
			placefs_ioctl_free(fs);
			return placefs_error_set(err, rc, PLACEFS_E_IO,
			                         "staging: cannot start a batch thread: %s",
			                         strerror(-rc));
		}
		fs->nbthreads++;
	}
	why[0] = '\0';
	devs = choose_devices(m->opts, why, sizeof(why));
	placefs_devices_format(&devs, spec, sizeof(spec));
	snprintf(fs->device, sizeof(fs->device), "none");
	if (devs.all || devs.n > 0) {
		memset(&cfg, 0, sizeof(cfg));
		cfg.devices = devs;
		cfg.stager.device = devs.all ? m->opts->device : devs.items[0];
		cfg.stager.ring_bytes = placefs_plan_ring_bytes(m->plan);
		cfg.stager.host_buffer = m->opts->host_buffer;
		cfg.stager.prefetch = m->opts->prefetch;
		cfg.stager.zero_copy = m->opts->zero_copy;
		cfg.stager.direct_copy = m->opts->direct_copy;
		cfg.stager.host_reserve = m->host_reserve;
		if (m->opts->disk_streams > 0) {
			rc = placefs_gate_create(m->opts->disk_streams, &fs->gate, err);
			if (rc != 0) {
				placefs_ioctl_free(fs);
				return rc;
			}
		}
		cfg.stager.gate = fs->gate;
		placefs_error_clear(&e);
		rc = placefs_stagers_create(&cfg, &fs->ss, &e);
		if (rc != 0 && !m->opts->device_auto) {
			/* Asked for explicitly: refuse to mount, saying why. */
			placefs_error_set(err, rc, e.kind, "staging (-o device=%s): %s", spec,
			                  e.msg);
			placefs_ioctl_free(fs);
			return rc;
		}
		if (rc != 0) {
			/* The default device: the mount works without staging. */
			fs->ss = NULL;
			snprintf(why, sizeof(why),
			         "no -o device given and %.16s could not be set up: %.400s", spec,
			         e.msg);
		} else if (fs->ss) {
			uint64_t total;

			fs->nst = placefs_stagers_count(fs->ss);
			for (unsigned k = 0; k < fs->nst; k++)
				placefs_backend_get_info(
				        placefs_stager_backend(placefs_stagers_at(fs->ss, k)),
				        &fs->infos[k]);
			fs->info = fs->infos[0];
			fs->align = PLACEFS_STAGE_ALIGN_DEFAULT;
			/* Who may map the host rings: the borrowers it admits (ioctl_may_borrow()). */
			ioctl_ring_share(fs);
			/* The share is of all rings together, wherever the leases are. */
			total = fs->info.ring_bytes * fs->nst;
			fs->share_bytes = m->opts->user_share >= 100
			                          ? UINT64_MAX
			                          : total / 100 * m->opts->user_share +
			                                    total % 100 * m->opts->user_share / 100;
			placefs_devices_format(placefs_stagers_devices(fs->ss), spec, sizeof(spec));
			if (fs->nst == 1)
				snprintf(fs->device, sizeof(fs->device), "%s", fs->info.name);
			else
				snprintf(fs->device, sizeof(fs->device), "%s", spec);
		}
	}
	if (!fs->ss) {
		snprintf(fs->log_line, sizeof(fs->log_line), "staging: disabled (%s)", why);
		*out = fs;
		return 0;
	}

	rc = -pthread_create(&fs->watcher, NULL, watch_main, fs);
	if (rc != 0) {
		placefs_ioctl_free(fs);
		return placefs_error_set(err, rc, PLACEFS_E_IO,
		                         "staging: cannot start a thread: %s", strerror(-rc));
	}
	fs->watcher_started = true;

	placefs_size_format(fs->info.ring_bytes, ring, sizeof(ring));
	placefs_size_format(fs->info.host_buffer_bytes, hb, sizeof(hb));
	placefs_size_format(fs->info.chunk_bytes, chunk, sizeof(chunk));
	placefs_stager_stats(placefs_stagers_at(fs->ss, 0), &zs);
	placefs_stager_zero_copy_note(placefs_stagers_at(fs->ss, 0), note, sizeof(note));
	snprintf(zc, sizeof(zc), "%s%s%s%s", zs.zero_copy ? "on" : "off", note[0] ? " (" : "", note,
	         note[0] ? ")" : "");
	snprintf(fs->log_line, sizeof(fs->log_line),
	         "staging: %.300s: ring %llu bytes (%s, one allocation%s), host buffer %llu "
	         "bytes (%s: %u chunks of %s), prefetch %s, direct copies %s, zero-copy %s",
	         fs->nst == 1 ? fs->info.name : spec, (unsigned long long)fs->info.ring_bytes, ring,
	         fs->nst == 1 ? "" : " per device", (unsigned long long)fs->info.host_buffer_bytes,
	         hb, fs->info.nchunks, chunk, m->opts->prefetch ? "on" : "off",
	         zs.direct ? "on" : "off", zc);
	if (fs->gate) {
		size_t n = strlen(fs->log_line);

		snprintf(fs->log_line + n, sizeof(fs->log_line) - n,
		         ", at most %u staging reads in the disk at once (-o disk_streams)",
		         m->opts->disk_streams);
	}
	snprintf(fs->plan_line, sizeof(fs->plan_line),
	         "staging: device %.300s, ring %llu bytes (%s%s), host buffer %llu bytes (%s)\n",
	         fs->nst == 1 ? fs->info.name : spec, (unsigned long long)fs->info.ring_bytes, ring,
	         fs->nst == 1 ? "" : " each", (unsigned long long)fs->info.host_buffer_bytes, hb);
	*out = fs;
	return 0;
}

const char *placefs_ioctl_plan_line(const struct placefs_ioctl *fs)
{
	return fs ? fs->plan_line : "";
}

void placefs_ioctl_log(const struct placefs_ioctl *fs)
{
	if (fs && fs->log_line[0])
		placefs_log(LOG_INFO, "%s", fs->log_line);
	if (fs && fs->share_line[0])
		placefs_log(LOG_INFO, "%s", fs->share_line);
}

void placefs_ioctl_shutdown(struct placefs_ioctl *fs)
{
	if (!fs)
		return;
	cancel_all(fs);
	pthread_mutex_lock(&fs->lock);
	while (fs->detached > 0)
		pthread_cond_wait(&fs->cond, &fs->lock);
	fs->watch_stop = true;
	pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	if (fs->watcher_started) {
		pthread_join(fs->watcher, NULL);
		fs->watcher_started = false;
	}
}

void placefs_ioctl_free(struct placefs_ioctl *fs)
{
	size_t i;

	if (!fs)
		return;
	placefs_ioctl_shutdown(fs);
	pthread_mutex_lock(&fs->block);
	fs->bstop = true;
	pthread_cond_broadcast(&fs->bwork);
	pthread_mutex_unlock(&fs->block);
	for (i = 0; i < fs->nbthreads; i++)
		pthread_join(fs->bthreads[i], NULL);
	placefs_log_limit_flush(&fs->loglim, "staging");
	placefs_stagers_free(fs->ss);
	placefs_lookahead_free(fs->lookahead);
	placefs_gate_free(fs->gate); /* after the stagers, which borrow it */
	placefs_filler_free(fs->fill);
	for (i = 0; i < LEASE_BUCKETS; i++) {
		while (fs->leases[i]) {
			struct lease_rec *l = fs->leases[i];

			fs->leases[i] = l->next;
			free(l);
		}
	}
	free(fs->users);
	for (i = 0; i < fs->ngcache; i++)
		free(fs->gcache[i].groups);
	placefs_perm_release(&fs->ring_perm);
	free(fs->gpu);
	free(fs->gpu_pos);
	pthread_cond_destroy(&fs->bwork);
	pthread_mutex_destroy(&fs->block);
	pthread_cond_destroy(&fs->cond);
	pthread_mutex_destroy(&fs->hint_lock);
	pthread_mutex_destroy(&fs->lock);
	pthread_mutex_destroy(&fs->loglim.lock);
	free(fs);
}
