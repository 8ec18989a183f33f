/* SPDX-License-Identifier: MIT */
/*
 * push: fills the kernel's page cache of a tensor file ahead of its reader.
 *
 * A cold cached read through FUSE makes the reader's own thread allocate the
 * page-cache pages of every readahead window and wait for the daemon's
 * replies. Once a reader starts a tensor at byte 0, the pusher's threads
 * instead hand the rest of the tensor to the kernel in 1 MiB pieces with
 * FUSE_NOTIFY_STORE (fuse_lowlevel_notify_store), straight from the shard's
 * read-only mapping: the kernel allocates the pages and copies the bytes in
 * the pusher's thread, and the reader finds them cached. Several pushers
 * share one tensor (each claims the next piece), so one reader is fed by
 * several threads.
 *
 * Per tensor, a frontier records how far its bytes are in the page cache or
 * on their way there: pushes and answered READs both move it, so a reader
 * that overtakes the pushers (its READs arrive beyond the frontier) makes
 * them skip ahead instead of storing pages it already has. Pushing is best
 * effort: a failed store (the inode was forgotten, the shard changed or
 * cannot be read) ends the push of that tensor and leaves its reads to the
 * normal READ path, which reports errors as usual. The pages pushed are the
 * pages the reader is about to read; nothing is pushed for a tensor nobody
 * reads from its start, and only in read_mode=mmap.
 */
#ifndef PLACEFS_FS_PUSH_H
#define PLACEFS_FS_PUSH_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct placefs_mount;
struct placefs_stats;
struct placefs_push;

/* Pieces are stored this many bytes at a time (the FUSE request size). */
#define PLACEFS_PUSH_PIECE (1U << 20)
/* Tensors smaller than this are left to readahead: one READ is as good. */
#define PLACEFS_PUSH_MIN_BYTES (2U << 20)

/*
 * Creates the pusher of mount m (whose plan, vtree and shard mappings exist)
 * with `threads` threads, started at once; m->se must be set before the
 * first placefs_push_note(). threads == 0 sets *out to NULL and returns 0:
 * pushing is off. Returns 0 or a negative errno with a message.
 */
int placefs_push_create(struct placefs_mount *m, unsigned threads, struct placefs_push **out,
                        struct placefs_error *err);

/*
 * Tells the pusher that a READ of [off, off + len) of tensor `entry` (its
 * plan entry index) was answered. A READ at byte 0 of a tensor of at least
 * PLACEFS_PUSH_MIN_BYTES starts its push, once per mount; any READ moves the
 * tensor's frontier. p may be NULL. Thread-safe, never blocks on a push.
 */
void placefs_push_note(struct placefs_push *p, size_t entry, uint64_t off, uint64_t len);

/*
 * Stops the threads and waits for them; a push in progress ends after its
 * current piece. Call before the session is unmounted. Idempotent; p may be NULL.
 */
void placefs_push_stop(struct placefs_push *p);

/* Stops p (if still running) and frees it. NULL is accepted. */
void placefs_push_free(struct placefs_push *p);

/*
 * Writes the member "push" of .placefs/stats into the object open in w:
 * {threads, tensors (pushes started), active (tensors still being pushed),
 * bytes (stored), skipped_bytes (not pushed: a reader was ahead), failures
 * (stores that failed)}, or null when p is NULL (pushing is off).
 */
void placefs_push_stats(const struct placefs_push *p, struct placefs_stats *w);

#endif
