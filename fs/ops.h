/* SPDX-License-Identifier: MIT */
/*
 * ops: the FUSE low-level operations.
 *
 * Every callback reaches the mount's state (fs/mount.h) through
 * placefs_mount_of(req) and serves from its inode table (fs/vtree.h) without
 * a lock. READs of tensor files verify their shard first and record its
 * health in the mount; answered READs feed the page-cache pusher
 * (fs/push.h). The ioctl operation and a tensor file handle's release go to
 * the staging glue (fs/ioctl.h). Each open of a tensor file gets its own
 * file handle number (m->next_fh), which owns the staging leases taken
 * through it. .placefs/stats is generated at each open, from the mount's,
 * the pusher's and the staging glue's members (fs/stats.h).
 */
#ifndef PLACEFS_FS_OPS_H
#define PLACEFS_FS_OPS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_lowlevel.h>

#include <stddef.h>

/* Entry and attribute timeouts, seconds: nothing in a placefs mount ever changes. */
#define PLACEFS_TIMEOUT 86400.0

/* The operations table and its size, for fuse_session_new() (userdata: the mount). */
const struct fuse_lowlevel_ops *placefs_ops_table(size_t *size);

#endif
