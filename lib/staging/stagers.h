/* SPDX-License-Identifier: MIT */
/*
 * stagers: the stagers of one mount, one per device it stages to.
 *
 * A mount with -o device=cuda:0,cuda:1,... (or cuda:all, or the host
 * stand-ins host:0,host:1,...) has one stager (lib/staging/stage.h) per listed
 * device: each its own backend, ring (each of the configured ring_bytes),
 * bounce chunks, streams, I/O threads and prefetch, so devices never wait
 * for each other's ring space. A single device ("host", "cuda:N") is a set
 * of one that behaves exactly as the lone stager did.
 *
 * Positions: stager i serves placefs_stagers_device(i), i in [0, count), in
 * the order of the list. Leases are the stager's lease ids with the
 * position in bits 56..61 (position 0 leaves them as they are), so
 * placefs_stagers_release() needs nothing but the lease: the release ioctl
 * stays as it is.
 *
 * Routing a stage (placefs_stagers_route()): a device named by the request
 * goes to its stager, or fails with -ENODEV ("this mount does not stage to
 * it"); with nothing named, a set of one takes it; a CUDA IPC destination
 * goes to the device its allocation lives on (placefs_backend_dest_device());
 * anything else (a borrow, a shm destination) on a set of several is
 * ambiguous: -EINVAL, the message asking the caller to name a device.
 *
 * Threads: as lib/staging/stage.h: everything but create/free may be called
 * concurrently from any thread.
 */
#ifndef PLACEFS_STAGERS_H
#define PLACEFS_STAGERS_H

#include <stddef.h>
#include <stdint.h>

#include "common/device.h"
#include "common/error.h"
#include "staging/stage.h"

struct placefs_stagers;

struct placefs_stagers_config {
	/* The devices; "cuda:all" is resolved by create (placefs_backend_cuda_devices()). */
	struct placefs_devices devices;
	/* Every stager's settings (ring_bytes each, host_buffer each, ...); .device is ignored. */
	struct placefs_stager_config stager;
};

/*
 * Creates one stager per device, in list order. An empty list ("none")
 * succeeds with *out = NULL (staging disabled). Errors: those of
 * placefs_stager_create() for the first device that fails (the message
 * names it), -ENODEV from resolving cuda:all without a CUDA device,
 * -EINVAL for a list that placefs_device_check() refuses an item of or
 * that names a device twice. Nothing is left on failure.
 */
int placefs_stagers_create(const struct placefs_stagers_config *cfg, struct placefs_stagers **out,
                           struct placefs_error *err);

/* Frees every stager (last first). NULL is accepted. */
void placefs_stagers_free(struct placefs_stagers *s);

unsigned placefs_stagers_count(const struct placefs_stagers *s);
/* The devices served, resolved ("cuda:all" expanded). */
const struct placefs_devices *placefs_stagers_devices(const struct placefs_stagers *s);
/* Stager i (i < count), for its backend's info, prefetch hints, notes, stats. */
struct placefs_stager *placefs_stagers_at(const struct placefs_stagers *s, unsigned i);
/* The position of dev, or -ENODEV with a message naming the devices served. */
int placefs_stagers_find(const struct placefs_stagers *s, struct placefs_device dev,
                         struct placefs_error *err);

/*
 * The position a stage goes to (see above): dev NULL when the request
 * names none; dest NULL for a borrow. >= 0, or -ENODEV (a device not
 * served; for a CUDA IPC destination, its allocation's device), -EINVAL
 * (ambiguous), or placefs_backend_dest_device()'s error, each with a
 * message.
 */
int placefs_stagers_route(struct placefs_stagers *s, const struct placefs_device *dev,
                          const struct placefs_dest *dest, struct placefs_error *err);

/* placefs_stager_stage() on stager `pos`; out->lease carries the position. */
int placefs_stagers_stage(struct placefs_stagers *s, unsigned pos, int fd, uint64_t file_offset,
                          uint64_t nbytes, const struct placefs_stage_opts *opts,
                          struct placefs_stage_span *out, struct placefs_error *err);

/* placefs_stager_stage_copy() on stager `pos`. */
int placefs_stagers_stage_copy(struct placefs_stagers *s, unsigned pos, int fd,
                               uint64_t file_offset, uint64_t nbytes,
                               const struct placefs_stage_opts *opts,
                               const struct placefs_dest *dest, struct placefs_stage_span *out,
                               struct placefs_error *err);

/* The position a lease of this set belongs to, or -1 for one it cannot have made. */
int placefs_stagers_lease_pos(const struct placefs_stagers *s, uint64_t lease);

/* placefs_stager_copy_out() / _release() on the lease's stager (-ENOENT when unknown). */
int placefs_stagers_copy_out(struct placefs_stagers *s, uint64_t lease,
                             const struct placefs_dest *dest, struct placefs_error *err);
int placefs_stagers_release(struct placefs_stagers *s, uint64_t lease, uint64_t owner);

/* Every stager's: release_owner (summed), wake, backend sweep (summed), cached dests (summed). */
size_t placefs_stagers_release_owner(struct placefs_stagers *s, uint64_t owner);
void placefs_stagers_wake(struct placefs_stagers *s);
unsigned placefs_stagers_sweep(const struct placefs_stagers *s);
unsigned placefs_stagers_dest_count(const struct placefs_stagers *s);
/* Every backend's destination counters, summed (placefs_backend_dest_stats()). */
void placefs_stagers_dest_stats(const struct placefs_stagers *s,
                                struct placefs_backend_dest_stats *out);

/*
 * The counters of every stager added up (ring_capacity, host_buffer_bytes,
 * io_threads and ring_high_water included: the high water is the sum of
 * each ring's, an upper bound of the simultaneous total; chunk_bytes is
 * stager 0's; zero_copy is 1 when any has it on). Per device:
 * placefs_stager_stats(placefs_stagers_at(s, i)).
 */
void placefs_stagers_stats(const struct placefs_stagers *s, struct placefs_stager_stats *total);

#endif
