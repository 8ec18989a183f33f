/* SPDX-License-Identifier: MIT */
/*
 * zerocopy: the registry of shards a device reads straight from the page
 * cache (zero-copy staging).
 *
 * A shard is mapped read-only and registered with the device once
 * (placefs_backend_map_source()), lazily at the first acquire of a range of
 * it, and stays registered until the registry is freed; a tensor of it is
 * then one DMA from the mapping into the ring (placefs_backend_src_to_ring()),
 * with no bounce buffer and no CPU copy. The CPU never reads through a
 * mapping: every byte goes by DMA.
 *
 * Entries are keyed by the file's (st_dev, st_ino). Each records the size
 * and mtime the file had at registration (taken before the mapping was
 * made). A registration keeps the old pages referenced when the file is
 * truncated or rewritten afterwards, so the DMA never faults but may read
 * stale bytes: placefs_zerocopy_copy() therefore fstat()s the file after
 * every copy and fails it with -EIO when the size or mtime differ
 * (truncation and write() change them before they drop or change pages, so
 * a change during the copy is caught as well). Such a source is refused from
 * then on and unregistered by its last user.
 *
 * States of an entry: registering (one thread maps it, unlocked; others
 * acquiring the same shard wait), ready, or refused for good (the
 * registration failed, it did not fit the cap, or it went stale): a refused
 * shard uses the bounce path for the registry's life.
 *
 * Pinned memory: a registration pins the whole shard's page cache. Shards
 * are registered only while the total stays within the cap (by default half
 * of physical memory); the others are refused.
 *
 * Ownership: the registry borrows the backend (or the ops' context), which
 * must outlive it; it owns its entries and their mappings. A source handle
 * from placefs_zerocopy_acquire() is a use of an entry: it stays valid until
 * placefs_zerocopy_put().
 *
 * Threads: every function except create and free may be called from any
 * number of threads at once; the registry has its own lock, never held
 * while it maps, registers or copies, and never calls back into its caller.
 * placefs_zerocopy_acquire() and placefs_zerocopy_copy() block (registration
 * takes ~34 ms/GiB on ext4; a copy returns when its bytes are in the ring);
 * the others only take the lock briefly.
 */
#ifndef PLACEFS_ZEROCOPY_H
#define PLACEFS_ZEROCOPY_H

#include <stddef.h>
#include <stdint.h>

#include "staging/backend.h"
#include "common/error.h"

struct placefs_zerocopy;
/* One registered shard, as held by a use (see placefs_zerocopy_acquire()). */
struct placefs_zerocopy_src;

/*
 * What the registry needs from a device, with lib/staging/backend.h's contracts of
 * placefs_backend_map_source(), _unmap_source() and _src_to_ring(); `ctx` is
 * the create call's. placefs_zerocopy_create() binds them to a backend;
 * other sources of DMA (or a test's) may supply their own.
 */
struct placefs_zerocopy_ops {
	int (*map_source)(void *ctx, int fd, uint64_t file_size, void **base,
	                  struct placefs_error *err);
	void (*unmap_source)(void *ctx, void *base, uint64_t file_size);
	int (*src_to_ring)(void *ctx, const unsigned *chunks, unsigned nchunks, const void *src,
	                   uint64_t ring_off, uint64_t n, struct placefs_error *err);
};

/* Counters, each read atomically on its own (placefs_stager_stats() shows them). */
struct placefs_zerocopy_stats {
	uint64_t bytes;            /* moved by DMA from registered shards */
	uint64_t registrations;    /* shards mapped and registered */
	uint64_t registration_ns;  /* time spent registering them */
	uint64_t registered_bytes; /* shard bytes pinned by registrations now */
	uint64_t refused;          /* shards left to bounce buffers (registration failed, cap) */
	uint64_t stale;            /* copies failed: the shard changed (size/mtime) */
};

/* Half of physical memory: the default cap (0 when the system cannot say). */
uint64_t placefs_zerocopy_default_cap(void);

/*
 * Creates the registry of backend `be` with at most cap bytes registered
 * at once (0 = placefs_zerocopy_default_cap()). -EOPNOTSUPP (with "...
 * cannot stage without bounce buffers (zero-copy)") when the backend has
 * no zero-copy (placefs_backend_has_zero_copy(): host), -ENOMEM. *out is
 * NULL on failure.
 */
int placefs_zerocopy_create(struct placefs_backend *be, uint64_t cap, struct placefs_zerocopy **out,
                            struct placefs_error *err);

/*
 * The same over ops (all three set, else -EINVAL) called with ctx; `name`
 * (copied; NULL = "zero-copy") starts the refusal notes. A cap of 0 means
 * placefs_zerocopy_default_cap() here too.
 */
int placefs_zerocopy_create_ops(const struct placefs_zerocopy_ops *ops, void *ctx, const char *name,
                                uint64_t cap, struct placefs_zerocopy **out,
                                struct placefs_error *err);

/*
 * Unregisters and unmaps every shard. No use may be outstanding (every
 * acquire put) and no other call running. NULL is accepted.
 */
void placefs_zerocopy_free(struct placefs_zerocopy *zc);

/*
 * The registered source for bytes [off, off + n) of the regular file open
 * on fd, with a use taken, or NULL when those bytes go through the bounce
 * path: n is 0, fd is not a non-empty regular file, the shard is refused
 * (now or before: the cap, a failed registration, staleness), the range
 * goes past the size registered (left to pread(), which reports it), or
 * memory ran out. Never fails otherwise: a refusal is counted and its first
 * reason kept for placefs_zerocopy_note(). Registers the shard on its first
 * acquire (slow), or waits for the thread registering it.
 */
struct placefs_zerocopy_src *placefs_zerocopy_acquire(struct placefs_zerocopy *zc, int fd,
                                                      uint64_t off, uint64_t n);

/*
 * Copies bytes [off, off + n) of the shard (the range acquired, or inside
 * it) into ring bytes [ring_off, ring_off + n) over the zero-copy streams
 * of chunks[0..nchunks) (the calling thread's), then checks that fd (the
 * shard, still open) has the identity, size and mtime of the registration.
 * 0; the device's error (-EINVAL for a range outside the registration or
 * the ring, -EIO...); or -EIO with "the shard changed (size or mtime) since
 * it was registered for zero-copy staging; its bytes are not used" when it
 * did, after which the source is refused (counted once in stale). The bytes
 * of a successful copy count in bytes. The use stays: put it after.
 */
int placefs_zerocopy_copy(struct placefs_zerocopy *zc, struct placefs_zerocopy_src *src, int fd,
                          const unsigned *chunks, unsigned nchunks, uint64_t off, uint64_t ring_off,
                          uint64_t n, struct placefs_error *err);

/*
 * placefs_zerocopy_copy() into the ring of another context than the
 * registry's own (ctx NULL: its own): the ring of another device's backend
 * of the same mount, when the stagers of a mount share one registry
 * (lib/staging/stagers.h). ctx is passed to ops.src_to_ring as the create call's
 * would be (for placefs_zerocopy_create(): a struct placefs_backend *,
 * whose device must be able to read the registration: the cuda backend
 * registers shards portable, for every device's context).
 */
int placefs_zerocopy_copy_ctx(struct placefs_zerocopy *zc, void *ctx,
                              struct placefs_zerocopy_src *src, int fd, const unsigned *chunks,
                              unsigned nchunks, uint64_t off, uint64_t ring_off, uint64_t n,
                              struct placefs_error *err);

/*
 * Ends a use from placefs_zerocopy_acquire(). The last use of a refused
 * (stale) source unregisters and unmaps it, which gives its bytes back to
 * the cap. NULL is accepted.
 */
void placefs_zerocopy_put(struct placefs_zerocopy *zc, struct placefs_zerocopy_src *src);

/* A snapshot of the counters (no lock). */
void placefs_zerocopy_stats(const struct placefs_zerocopy *zc, struct placefs_zerocopy_stats *out);

/* The first refusal (cap, failed registration) as one line; empty when none. */
void placefs_zerocopy_note(struct placefs_zerocopy *zc, char *buf, size_t len);

#endif
