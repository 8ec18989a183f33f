/* SPDX-License-Identifier: MIT */
/*
 * ioctl: the daemon's staging glue: the ioctls of <placefs/ioctl.h>.
 *
 * It owns the mount's stager (lib/staging/stage.h), answers RING_INFO, STAGE and
 * RELEASE on tensor files, ends a file handle's leases when the handle is
 * released, hints the stager's prefetch with the GPU-placed tensors that
 * follow the one just staged, and writes the "staging" member of
 * .placefs/stats.
 *
 * Life cycle (fs/main.c): placefs_ioctl_create() once the FUSE session
 * exists and after the daemon has forked (a CUDA context and threads do not
 * survive fork()), before the mount's tree is made and the mount goes live;
 * placefs_ioctl_shutdown() when the session loop has returned, before the
 * session is destroyed (it ends every stage still waiting and waits for the
 * threads that serve them); placefs_ioctl_free() last.
 *
 * Threads: a STAGE request runs on the FUSE worker that received it as long
 * as at most half of the workers are busy staging or with batches (and its
 * user, unless root or the daemon's, holds fewer than half of those slots);
 * beyond that (and always with -s) it runs on a thread of its own, so
 * workers stay free for the RELEASE and INTERRUPT requests that end the
 * waits. At most -o max_waiting stages run on threads of their own (half of
 * them per user other than root and the daemon's); one more answers EAGAIN
 * at once, never a new thread or a blocked worker. Waits
 * end on the caller's timeout (-o stage_timeout when it gives none), on a
 * FUSE interrupt (a signal to the caller) and when the session exits.
 *
 * Users (doc/RELIABILITY.md, "Threat model"): a borrow, and RING_INFO's
 * handle, only for root, the daemon's uid and uids whose mode bits read every
 * shard (EACCES, HANDLE_NONE otherwise; copy mode is open to all); a user
 * other than root and the daemon's holds at most -o user_share of the ring
 * in leases and stages in progress while another user's stage through the
 * ring is in progress (EBUSY beyond; alone it may go beyond), and at most
 * half of the workers' slots for stages and batches. Refused and failed
 * requests are counted (client_errors) and their log lines rate-limited
 * (fs/log.h; log_suppressed).
 */
#ifndef PLACEFS_FS_IOCTL_H
#define PLACEFS_FS_IOCTL_H

#include "common/error.h"
#include "mount.h"

struct placefs_ioctl;
struct placefs_stats;

/*
 * Creates the staging glue of m per its options (-o device, host_buffer,
 * noprefetch, zero_copy) into *out, also when staging ends up disabled (so
 * that RING_INFO can say so). Nothing is logged yet (the daemon may still
 * own the terminal). Errors: those of placefs_stager_create() for an
 * explicit -o device (e.g. -ENODEV "cuda:0 requested but no CUDA device is
 * available: ..."), -ENOMEM, or a thread that cannot start; *out is then
 * NULL. The default device that cannot be set up leaves staging off instead.
 */
int placefs_ioctl_create(struct placefs_mount *m, struct placefs_ioctl **out,
                         struct placefs_error *err);

/*
 * The line that ends .placefs/plan: "staging: device D, ring N bytes (S),
 * host buffer N bytes (S)\n" when staging is on, "" when it is off. Owned by io.
 */
const char *placefs_ioctl_plan_line(const struct placefs_ioctl *io);

/* Logs the staging line (device, ring and host buffer sizes, or why staging is off). */
void placefs_ioctl_log(const struct placefs_ioctl *io);

/* Ends every wait, waits for the staging threads; the stager stays. Idempotent; NULL ok. */
void placefs_ioctl_shutdown(struct placefs_ioctl *io);

/* Shuts io down (if not yet) and frees it. NULL ok. */
void placefs_ioctl_free(struct placefs_ioctl *io);

/*
 * The FUSE ioctl operation (struct fuse_lowlevel_ops.ioctl): staging
 * commands on tensor files of the request's mount (placefs_mount_of()).
 * Anything else answers ENOTTY.
 */
void placefs_ioctl_op(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                      struct fuse_file_info *fi, unsigned flags, const void *in_buf,
                      size_t in_bufsz, size_t out_bufsz);

/* Tensor file handle fh was released: its leases end. io may be NULL. */
void placefs_ioctl_release(struct placefs_ioctl *io, uint64_t fh);

/*
 * Writes the member "staging" of .placefs/stats into the object open in w:
 * the device and backend, then (staging on) the ring, the stager's counters,
 * requests refused here, stages run on their own thread (in all and now),
 * stages refused for want of a thread slot or ring share (busy), borrows
 * refused (borrow_refused) and copy destinations held. io may be NULL (no staging: device and backend "none").
 */
void placefs_ioctl_stats(const struct placefs_ioctl *io, struct placefs_stats *w);

#endif
