/* SPDX-License-Identifier: MIT */
/*
 * stage: moves tensors from shard files into the staging ring.
 *
 * A stager owns the backend (lib/staging/backend.h), the ring allocator over the
 * backend's ring (lib/staging/ring.h), a pool of I/O threads and an optional
 * prefetch thread. It is created once at mount.
 *
 * Staging a tensor: the caller's thread waits for a ring span of the
 * tensor's size (backpressure; -EFBIG when it can never fit), then the I/O
 * threads read the tensor with pread() in chunk-sized pieces into their own
 * pinned bounce chunks and start a copy of each chunk into the span as soon
 * as it is filled, while they read the next piece into their other chunk.
 * The call returns when every byte is in the ring. A short read fails the
 * whole tensor with -EIO: wrong bytes are never handed out.
 *
 * The result is a lease: the span stays untouched until
 * placefs_stager_release() (or placefs_stager_release_owner()). Copy mode is
 * a direct copy by default (below), else stage + copy_out + release in one
 * call.
 *
 * Prefetch: placefs_stager_prefetch() gives the tensors the loader will ask
 * for next, in order. The prefetch thread stages them into free ring space
 * with low priority and only when no foreground request is waiting for (or
 * about to ask for) space; a later stage of the same key adopts the
 * prefetched span. When a foreground request lacks space (it has to wait, or
 * its deadline has already passed), unadopted prefetched spans are given
 * back at once (those still being read as soon as they finish; one with more
 * than host_buffer bytes left to read is cut short first), and the ring
 * reclaims a released span at either end of its allocation order at once.
 * So prefetch never blocks a foreground stage, with one exception: a
 * prefetched span allocated between two spans that are still leased stays
 * reserved until one side of it is released (see lib/staging/ring.h).
 *
 * Memory: device memory for tensor data is the ring alone; pinned memory is
 * the backend's bounce chunks alone (<= host_buffer), plus, with zero-copy,
 * the page cache of the registered shards (below). Neither grows otherwise.
 *
 * Zero-copy (backends with placefs_backend_has_zero_copy(): cuda; off
 * unless the config or $PLACEFS_STAGE_ZERO_COPY=1 turns it on, because its
 * first pass after a mount is slower than the bounce path and its pinned
 * memory grows with the checkpoint; the registry is lib/staging/zerocopy.h): the
 * first stage of a tensor of
 * a shard (identified by st_dev, st_ino) maps the whole shard read-only and
 * registers it with the device (cudaHostRegisterReadOnly, ~34 ms/GiB on
 * ext4, more on tmpfs); from then on the tensors of that shard go straight
 * from the shard's page cache into the ring by DMA, one I/O thread per
 * tensor, with no bounce buffer and no CPU copy. Registration pins the
 * shard's pages until the stager is freed; shards are registered only
 * while the total stays within half of physical memory. A shard whose
 * registration fails (or that does not fit that cap) uses the bounce path
 * for the stager's life. After each zero-copy stage the stager checks that
 * the file still has the size and mtime it had at registration, and fails
 * the tensor with -EIO otherwise (the pinned pages may be stale); that
 * shard then uses the bounce path too.
 *
 * Direct copies (on by default; placefs_stager_config.direct_copy): a
 * copy-mode stage does not go through the ring. The I/O threads read the
 * tensor into their bounce chunks as above and copy each chunk straight
 * into the destination (a DMA into the imported CUDA IPC allocation, a
 * pwrite() into the shm object), so copy mode never waits for ring space,
 * takes no device memory beyond its destination and needs no device-to-
 * device copy after the last chunk. The ring's rule still holds: a tensor
 * (or slice) larger than the ring is -EFBIG, as in the ring path. A stage
 * whose key has a prefetched span, and every stage while zero-copy is on,
 * takes the ring path. Off, copy mode is stage + copy-out + release.
 *
 * Slices (lib/common/slice.h): a request may name a slice of the tensor
 * (placefs_stage_opts.slice, a layout from placefs_slice_layout()). Then
 * only the slice's bytes are read and land in the ring, compacted, in a
 * span of the slice's size (-EFBIG only when the slice does not fit the
 * ring). A contiguous slice (dimension 0) is the tensor path on a smaller
 * range, zero-copy included. A strided one (dimension 1) fills each bounce
 * chunk with compacted slice bytes, in one of two ways
 * ($PLACEFS_STAGE_SLICE_READ): "segments" preads each row's segment
 * straight into its place in the chunk; "rows" preads the whole run of
 * rows a chunk's segments span and compacts them in place (memmove); "auto"
 * (the default) picks per tensor, see slice_rows() in stage_slice.c for
 * the rule and doc/STAGING.md for the measurements. Strided slices never
 * take the zero-copy path and never adopt a prefetched span.
 *
 * Threads: every function except create/free may be called concurrently
 * from any number of threads. The file descriptors passed in must stay open
 * until the call returns (for prefetch: until the stager is freed or the
 * hint list replaced and the entry consumed or evicted).
 */
#ifndef PLACEFS_STAGE_H
#define PLACEFS_STAGE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "staging/backend.h"
#include "common/error.h"
#include "common/slice.h"

#define PLACEFS_STAGE_IO_THREADS_MAX 64
/* Ring spans start at multiples of this (cudaMalloc's own alignment). */
#define PLACEFS_STAGE_ALIGN_DEFAULT 256
/* At most this many prefetched tensors are held at once. */
#define PLACEFS_STAGE_PREFETCH_MAX 256

struct placefs_stager;
struct placefs_zerocopy;
struct placefs_gate;

/* How a strided slice fills a bounce chunk (see "Slices" above). */
enum placefs_stage_slice_read {
	PLACEFS_STAGE_SLICE_AUTO = 0,     /* $PLACEFS_STAGE_SLICE_READ if set, else per tensor */
	PLACEFS_STAGE_SLICE_SEGMENTS = 1, /* one pread per row segment */
	PLACEFS_STAGE_SLICE_ROWS = 2,     /* one pread of the rows spanned, compacted in place */
};

struct placefs_stager_config {
	struct placefs_device device; /* cuda:N, host or none (lib/common/device.h) */
	uint64_t ring_bytes;          /* > 0: the staging limit, or placefs_plan_ring_bytes() */
	uint64_t host_buffer;         /* 0 = the backend's default (backend.h) */
	/*
	 * 0 = default: $PLACEFS_STAGE_IO_THREADS if set, else online CPUs - 2
	 * clamped to [4, 16]; capped by the number of bounce chunks.
	 */
	unsigned io_threads;
	uint64_t align; /* 0 = PLACEFS_STAGE_ALIGN_DEFAULT */
	int prefetch;   /* start the prefetch thread */
	/*
	 * Zero-copy staging (backends that support it: cuda): 0 = default, off
	 * unless $PLACEFS_STAGE_ZERO_COPY is "1" ("0" or unset: off; anything
	 * else is -EINVAL); > 0 on; < 0 off. See "Zero-copy" below.
	 */
	int zero_copy;
	/*
	 * Strided slices: PLACEFS_STAGE_SLICE_AUTO (0) reads
	 * $PLACEFS_STAGE_SLICE_READ ("auto", "segments" or "rows"; anything else
	 * is -EINVAL), else the mode given.
	 */
	enum placefs_stage_slice_read slice_read;
	/*
	 * NULL: zero-copy (when on) uses a registry of this stager's own. Else
	 * the registry of another stager of the same mount
	 * (placefs_stager_zero_copy()), borrowed: the shards registered once
	 * serve every device (lib/staging/stagers.h); that stager must outlive this one.
	 */
	struct placefs_zerocopy *zero_copy_shared;
	/*
	 * Direct copies: 0 = default, $PLACEFS_STAGE_DIRECT ("0" or "1";
	 * anything else is -EINVAL), else on; > 0 on; < 0 off.
	 */
	int direct_copy;
	/*
	 * NULL: the I/O threads read as they come. Else the mount's disk gate
	 * (lib/staging/gate.h), borrowed: reads of bytes not in the page cache wait for
	 * one of its slots. It must outlive the stager.
	 */
	struct placefs_gate *gate;
	/*
	 * NULL, or a host ring reserved ahead (backend.h), borrowed: a host
	 * stager takes it (placefs_backend_create_reserved()).
	 */
	struct placefs_host_reserve *host_reserve;
};

/* Per-request options; a NULL pointer means all defaults. */
struct placefs_stage_opts {
	uint64_t key;                    /* non-zero: matches a prefetch hint */
	uint64_t owner;                  /* tag for placefs_stager_release_owner() */
	const struct timespec *deadline; /* CLOCK_MONOTONIC; NULL = wait as long as needed */
	const int *cancel;               /* polled while waiting for ring space */
	const char *name;                /* tensor name for error messages */
	/*
	 * NULL: the whole tensor. Else the slice to stage, relative to the
	 * tensor's bytes [file_offset, file_offset + nbytes): checked with
	 * placefs_slice_check() (-EINVAL), and the span, out->nbytes, the
	 * counters and copy mode's destination bounds are the slice's.
	 */
	const struct placefs_slice_layout *slice;
};

/* One staged tensor. */
struct placefs_stage_span {
	uint64_t lease;       /* non-zero; 0 after copy mode (nothing is held) */
	uint64_t ring_offset; /* multiple of the alignment */
	uint64_t nbytes;
	uint64_t wait_ns; /* waiting for ring space */
	uint64_t read_ns; /* storage -> ring, after the span was granted */
	uint64_t copy_ns; /* ring -> destination (copy mode) */
	uint64_t total_ns;
	int prefetched; /* the bytes were staged ahead by prefetch */
};

struct placefs_prefetch_item {
	int fd;
	uint64_t offset;
	uint64_t nbytes;
	uint64_t key; /* non-zero, unique within the list */
};

struct placefs_stager_stats {
	uint64_t ring_capacity;
	uint64_t ring_used;
	uint64_t ring_high_water;
	uint64_t ring_waits;
	uint64_t ring_wait_ns;
	uint64_t host_buffer_bytes;
	uint64_t chunk_bytes;
	uint64_t io_threads;
	uint64_t staged[2]; /* tensors, by mode: [PLACEFS_IOC_STAGE_BORROW], [..._COPY] */
	uint64_t staged_bytes[2];
	uint64_t copied_out; /* placefs_stager_copy_out() calls that succeeded */
	uint64_t leases;     /* leases held now */
	uint64_t released;
	uint64_t errors;     /* failed stage/copy calls (EFBIG, EIO, timeouts...) */
	uint64_t read_bytes; /* bytes pread() from storage (incl. prefetch) */
	uint64_t prefetch_issued;
	uint64_t prefetch_hits; /* stages that found their bytes prefetched */
	uint64_t prefetch_evicted;
	uint64_t prefetch_cancelled; /* in-flight prefetches cut short for a foreground request */
	uint64_t prefetch_held;      /* prefetched tensors held now */
	/* Zero-copy (see above). zero_copy_bytes are not in read_bytes. */
	uint64_t zero_copy;                  /* 1 when zero-copy staging is on */
	uint64_t zero_copy_bytes;            /* moved by DMA from registered shards */
	uint64_t zero_copy_registrations;    /* shards mapped and registered */
	uint64_t zero_copy_registration_ns;  /* time spent registering them */
	uint64_t zero_copy_registered_bytes; /* shard bytes pinned by registrations now */
	uint64_t zero_copy_refused; /* shards left to bounce buffers (registration failed, cap) */
	uint64_t zero_copy_stale;   /* zero-copy stages failed: the shard changed (size/mtime) */
	/* Slices (opts.slice naming less than the whole tensor), both modes. */
	uint64_t slices;             /* slice stages that succeeded (in staged[] too) */
	uint64_t slice_bytes;        /* their bytes (in staged_bytes[] too) */
	uint64_t strided_read_bytes; /* bytes pread for strided slices (in read_bytes too) */
	/* Direct copies (see "Direct copies" above). */
	uint64_t direct;        /* 1 when copy mode goes direct */
	uint64_t direct_stages; /* copy-mode stages that went direct (in staged[] too) */
	uint64_t direct_bytes;  /* their bytes (in staged_bytes[] too) */
};

/*
 * Creates the backend, the ring and the threads. With device "none" it
 * succeeds with *out = NULL (staging disabled). Errors are those of
 * placefs_backend_create() plus -EINVAL for bad config values.
 */
int placefs_stager_create(const struct placefs_stager_config *cfg, struct placefs_stager **out,
                          struct placefs_error *err);

/*
 * Stops the prefetch thread, lets the I/O threads finish what is queued
 * (in-flight copies complete before their chunks and spans are freed),
 * joins them and frees the backend. No other call may be running or start.
 * Outstanding leases are dropped. NULL is accepted.
 */
void placefs_stager_free(struct placefs_stager *st);

const struct placefs_backend *placefs_stager_backend(const struct placefs_stager *st);

/*
 * Stages nbytes at file_offset of fd into the ring (borrow mode) and fills
 * *out with a lease. Errors: -EFBIG (nbytes > ring), -ETIMEDOUT/-EINTR
 * (deadline/cancel while waiting for space), -EIO (short read, read error,
 * device copy failure), -ENOMEM. Nothing is held on failure.
 */
int placefs_stager_stage(struct placefs_stager *st, int fd, uint64_t file_offset, uint64_t nbytes,
                         const struct placefs_stage_opts *opts, struct placefs_stage_span *out,
                         struct placefs_error *err);

/*
 * Copies a leased tensor to dest (see placefs_backend_copy_out()); the lease
 * stays. -ENOENT for an unknown lease.
 */
int placefs_stager_copy_out(struct placefs_stager *st, uint64_t lease,
                            const struct placefs_dest *dest, struct placefs_error *err);

/*
 * Copy mode: checks dest bounds first (-EINVAL before any I/O), stages,
 * copies out, releases; or, as a direct copy, reads into the bounce chunks
 * and copies them into dest (out->wait_ns and copy_ns are then 0).
 * out->lease is 0 on return. Errors: those of placefs_stager_stage() and
 * placefs_backend_copy_out().
 */
int placefs_stager_stage_copy(struct placefs_stager *st, int fd, uint64_t file_offset,
                              uint64_t nbytes, const struct placefs_stage_opts *opts,
                              const struct placefs_dest *dest, struct placefs_stage_span *out,
                              struct placefs_error *err);

/*
 * Ends a lease; its ring space is reused as lib/staging/ring.h describes (at once
 * when it is the oldest or the newest span in the ring).
 * A lease being copied out is ended when the copy finishes. -ENOENT when
 * unknown. With owner != 0 the lease must belong to that owner (-ENOENT
 * otherwise), so one client cannot end another's lease.
 */
int placefs_stager_release(struct placefs_stager *st, uint64_t lease, uint64_t owner);

/*
 * Wakes every request waiting for ring space so it re-reads its cancel flag
 * (call it after setting one, e.g. from a FUSE interrupt callback).
 */
void placefs_stager_wake(struct placefs_stager *st);

/* Ends every lease of `owner` (a closing file handle); returns how many. */
size_t placefs_stager_release_owner(struct placefs_stager *st, uint64_t owner);

/*
 * Replaces the prefetch hint list with a copy of items[0..n) (checkpoint
 * order). Items larger than the ring are skipped. n == 0 clears the list.
 * Already prefetched tensors stay until adopted or evicted. -EINVAL for a
 * zero key, -ENOMEM; without a prefetch thread it does nothing and returns 0.
 */
int placefs_stager_prefetch(struct placefs_stager *st, const struct placefs_prefetch_item *items,
                            size_t n, struct placefs_error *err);

/*
 * Why zero-copy is off, or the first shard registration failure, as one
 * line in buf (empty when there is nothing to say). For the daemon's log.
 */
void placefs_stager_zero_copy_note(struct placefs_stager *st, char *buf, size_t len);

/*
 * The zero-copy registry this stager uses (its own or a borrowed one), NULL
 * when zero-copy is off.
 */
struct placefs_zerocopy *placefs_stager_zero_copy(const struct placefs_stager *st);

/* 1 when copy-mode stages go direct (see "Direct copies"), else 0. */
int placefs_stager_is_direct(const struct placefs_stager *st);

/* Counters, read without locks (each field is atomic on its own). */
void placefs_stager_stats(const struct placefs_stager *st, struct placefs_stager_stats *out);

#endif
