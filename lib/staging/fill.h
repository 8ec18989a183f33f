/* SPDX-License-Identifier: MIT */
/*
 * fill: copies byte ranges of a file into a destination file in parallel
 * pieces, with a small pool of reader threads. The daemon uses it for
 * PLACEFS_IOC_STAGE_READ: a tensor goes from its shard straight into the
 * caller's shared-memory object, with no ring and no device.
 *
 * A copy is cut into pieces of `piece_bytes`; the calling thread and every
 * pool thread take the next piece of the oldest unfinished copy, so one
 * large tensor is read by all threads at once and a small one (one piece)
 * by the caller alone, with no hand-off. The destination range is mapped
 * (MAP_SHARED, write-only) for the copy and each piece is pread() from the
 * source straight into the mapping: one copy, and the pieces of one
 * destination go in in parallel (write() into one tmpfs file serialises on
 * its inode lock). Only the kernel ever stores into that mapping: when the
 * destination's owner shrinks it, or /dev/shm cannot supply its pages,
 * pread() fails with EFAULT and the daemon never takes a SIGBUS. Which of
 * the two it was is told after the failure: the destination is now shorter
 * than the piece (fstat), or its file system has room for the piece
 * (fstatfs), so the pages could be had and the owner must have shrunk it,
 * perhaps growing it again since: -EINVAL, "shrank during the copy". Only a
 * destination of its full size on a file system without that room is
 * -ENOSPC. Where the destination cannot be mapped,
 * a piece moves with splice() through a per-thread pipe (the source's
 * page-cache pages go into the pipe by reference and are copied once), or,
 * where the source cannot splice, with pread() into a per-thread buffer and
 * pwrite() (two copies).
 *
 * Errors of a copy: -EIO when the source ends early (the destination bytes
 * are then unspecified, never reported as filled), the errno of a read or
 * write (-ENOSPC, -EFBIG, -EIO ...), -EINVAL when the destination shrank
 * under the copy (the message names it and says "shrank during the copy";
 * bytes written before the shrink are lost with it), -EINTR when *cancel
 * became non-zero,
 * -ETIMEDOUT when the deadline passed. Pieces already started finish
 * first, so the call returns at most one piece's time after a cancel.
 *
 * Threads: placefs_filler_copy() and placefs_filler_stats() may be called
 * from any number of threads at once; create and free from one.
 */
#ifndef PLACEFS_FILL_H
#define PLACEFS_FILL_H

#include <stdint.h>
#include <time.h>

#include "common/error.h"

#define PLACEFS_FILL_THREADS_MAX 64
/* Default piece: large enough to amortise the hand-off, small enough to share a tensor. */
#define PLACEFS_FILL_PIECE_DEFAULT (4u << 20)

enum placefs_fill_method {
	PLACEFS_FILL_AUTO = 0,   /* map; where the destination cannot be mapped, splice */
	PLACEFS_FILL_SPLICE = 1, /* splice, falling back to pread + pwrite per source */
	PLACEFS_FILL_PREAD = 2,  /* pread + pwrite only */
	PLACEFS_FILL_MAP = 3,    /* map only (the errno of mmap() where it cannot) */
};

struct placefs_filler;

struct placefs_fill_config {
	/*
	 * Pool threads besides the callers. 0 = default: $PLACEFS_FILL_THREADS
	 * if set, else online CPUs / 2 clamped to [2, 8].
	 */
	unsigned threads;
	uint64_t piece_bytes; /* 0 = PLACEFS_FILL_PIECE_DEFAULT; else 64 KiB .. 1 GiB */
	/* 0: $PLACEFS_FILL_METHOD ("auto", "map", "splice", "pread") if set, else auto. */
	enum placefs_fill_method method;
};

/* Per-copy options; NULL means no deadline and no cancel flag. */
struct placefs_fill_opts {
	const struct timespec *deadline; /* CLOCK_MONOTONIC; NULL = none */
	const int *cancel;               /* polled between pieces */
	const char *name;                /* for messages (the tensor); NULL = "the range" */
	const char *dest_name;           /* for messages (the shm name); NULL = "the destination" */
};

struct placefs_fill_stats {
	uint64_t threads;
	uint64_t piece_bytes;
	uint64_t copies;      /* placefs_filler_copy() calls that succeeded */
	uint64_t bytes;       /* bytes they copied */
	uint64_t errors;      /* calls that failed */
	uint64_t ns;          /* wall time of the successful calls, summed */
	uint64_t mapped;      /* bytes pread() into the destination's mapping */
	uint64_t spliced;     /* bytes moved by splice() */
	uint64_t bounced;     /* bytes moved by pread() + pwrite() */
	uint64_t busy_copies; /* copies in progress now */
};

/*
 * Starts the pool. -EINVAL (with a message) for a bad config or
 * environment value, -ENOMEM, or the errno of pthread_create().
 */
int placefs_filler_create(const struct placefs_fill_config *cfg, struct placefs_filler **out,
                          struct placefs_error *err);

/* Waits for the copies in progress, stops the threads. NULL is accepted. */
void placefs_filler_free(struct placefs_filler *f);

/*
 * Copies n bytes at src_off of src_fd to dst_off of dst_fd and returns when
 * they are all there (0) or the copy failed (negative errno, message in
 * err). Both descriptors must stay open until it returns. n == 0 is 0.
 * -EINVAL when src_off + n or dst_off + n overflows.
 */
int placefs_filler_copy(struct placefs_filler *f, int src_fd, uint64_t src_off, int dst_fd,
                        uint64_t dst_off, uint64_t n, const struct placefs_fill_opts *opts,
                        struct placefs_error *err);

/* Counters, read without locks. */
void placefs_filler_stats(const struct placefs_filler *f, struct placefs_fill_stats *out);

/*
 * Opens the shared-memory object `name` ("/name", see
 * placefs_backend_shm_name_check()) to be written: O_RDWR | O_NOFOLLOW,
 * a regular file, owned by `uid` when check_uid, at least min_size bytes
 * long. Returns a descriptor (>= 0) or a negative errno with a message:
 * -ENOENT, -EACCES, -EINVAL (not a regular file, too short).
 */
int placefs_fill_open_shm(const char *name, int check_uid, unsigned uid, uint64_t min_size,
                          struct placefs_error *err);

#endif
