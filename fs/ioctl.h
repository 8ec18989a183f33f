/* SPDX-License-Identifier: MIT */
/*
 * stage: the daemon's GPU staging glue. It owns the mount's stager
 * (lib/stage.h), answers the ioctls of <placefs/ioctl.h> on tensor files,
 * ends a file handle's leases when the handle is released, hints the
 * stager's prefetch with the GPU-placed tensors that follow the one just
 * staged, and adds the "staging" member to .placefs/stats.
 *
 * Life cycle (fs/main.c): placefs_fs_stage_create() once the FUSE session
 * exists and after the daemon has forked (a CUDA context and threads do not
 * survive fork()), before the mount goes live; placefs_fs_stage_shutdown()
 * when the session loop has returned, before the session is destroyed (it
 * ends every stage still waiting and waits for the threads that serve them);
 * placefs_fs_stage_free() last.
 *
 * Threads: a STAGE request runs on the FUSE worker that received it as long
 * as at most half of the workers are busy staging; beyond that (and always
 * with -s) it runs on a thread of its own, so workers stay free for the
 * RELEASE and INTERRUPT requests that end the waits. Waits end on the
 * caller's timeout, on a FUSE interrupt (a signal to the caller) and when the
 * session exits.
 */
#ifndef PLACEFS_FS_IOCTL_H
#define PLACEFS_FS_IOCTL_H

#include "ops.h"

/*
 * Creates the staging state of m per its options (-o device, host_buffer,
 * noprefetch): sets m->stage (also when staging is disabled, so that
 * RING_INFO can say so) and m->stats_hook, and appends a "staging:" line
 * with the ring and host buffer sizes to .placefs/plan when staging is on.
 * Nothing is logged yet (the daemon may still own the terminal).
 * Errors: those of placefs_stager_create() for an explicit -o device (e.g.
 * -ENODEV "cuda:0 requested but no CUDA device is available: ..."), -ENOMEM.
 * The default device that cannot be set up leaves staging off instead.
 */
int placefs_fs_stage_create(struct placefs_mount *m, struct placefs_error *err);

/* Logs the staging line (device, ring and host buffer sizes, or why staging is off). */
void placefs_fs_stage_log(const struct placefs_mount *m);

/* Ends every wait, waits for the staging threads; the stager stays. NULL-safe. */
void placefs_fs_stage_shutdown(struct placefs_mount *m);

/* Frees the staging state (after placefs_fs_stage_shutdown()). */
void placefs_fs_stage_free(struct placefs_mount *m);

/* The FUSE ioctl operation (struct fuse_lowlevel_ops.ioctl). */
void placefs_fs_stage_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                            struct fuse_file_info *fi, unsigned flags, const void *in_buf,
                            size_t in_bufsz, size_t out_bufsz);

/* A tensor file handle was released: its leases end. */
void placefs_fs_stage_release(struct placefs_mount *m, uint64_t fh);

#endif
