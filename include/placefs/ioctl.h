/* SPDX-License-Identifier: MIT */
/*
 * placefs/ioctl.h: the GPU staging protocol of a placefs mount.
 *
 * A program opens a tensor file of a placefs mount and issues one of the
 * three commands below on that descriptor. The data travels through FUSE's
 * restricted ioctl, so every struct has a fixed size (well under the 16383
 * bytes that _IOC_SIZE can encode), fixed-width fields only, explicit padding
 * and no pointers: the same bytes work from C, from C++ and from Python's
 * fcntl.ioctl(fd, cmd, bytearray(size), True), for 32-bit and 64-bit callers.
 *
 * Every struct starts with `version` (PLACEFS_IOC_VERSION) and `size` (the
 * caller's sizeof of the struct). A wrong version or size, a non-zero
 * reserved field or an unknown mode or flag fails with EINVAL, so fields can
 * be added later under a new version without misreading old callers.
 *
 * Magic 0xB9: unassigned in the kernel's
 * Documentation/userspace-api/ioctl/ioctl-number.rst (0xB8 is mshv and the
 * Marvell DPI driver, 0xBA is liveupdate). The commands only ever reach the
 * placefs daemon because FUSE forwards ioctls on its own files; the magic,
 * the size encoded in the command and the version field keep misdirected
 * calls from being misread.
 *
 * Errors (errno after ioctl() returns -1):
 *   EINVAL     bad version, size, mode, flags, reserved field, destination
 *              (kind, handle, offset + nbytes > dest_size); a bad slice
 *              (slice_dim not 0 or 1, or 1 of a 1-dimensional tensor,
 *              slice_len 0, start + len past the dimension, a start, length
 *              or row stride that is not a whole number of bytes for a
 *              sub-byte dtype); on a mount of several devices, a request
 *              that names no device where none can be inferred (a borrow,
 *              a shm destination)
 *   EFBIG      the tensor (or the slice asked for) is larger than the
 *              staging ring (never staged)
 *   ENODEV     staging is disabled on this mount (-o device=none), or the
 *              request names (or its CUDA IPC destination lives on) a
 *              device this mount does not stage to
 *   EOPNOTSUPP the destination kind cannot be served by this backend
 *              (a CUDA IPC destination on the host backend)
 *   EACCES     the destination shared-memory object is not the caller's
 *   ENOENT     release: no such lease on this file descriptor; copy: the
 *              destination shared-memory object does not exist
 *   ETIMEDOUT  stage: no ring space within timeout_ns (or, when it is 0,
 *              within the mount's -o stage_timeout, 60 s by default)
 *   EAGAIN     stage: every waiting slot of the mount (-o max_waiting) is
 *              taken; try again later
 *   EBUSY      stage: the caller's user holds its share of the ring
 *              (-o user_share) in leases and stages in progress
 *   EACCES     borrow (and RING_INFO's handle): the caller may not read
 *              every shard of the mount, so it may not map the ring
 *   EINTR      stage: interrupted while waiting for ring space
 *   EIO        the tensor could not be read completely, or a device copy
 *              failed (the daemon logs the cause); the bytes are never
 *              returned partially
 *   ENOMEM     the daemon ran out of host memory
 *   ENOTTY     not a placefs tensor file, or an unknown command
 */
#ifndef PLACEFS_IOCTL_H
#define PLACEFS_IOCTL_H

#include <stdint.h>
#include <linux/ioctl.h>

#define PLACEFS_IOC_MAGIC   0xB9
#define PLACEFS_IOC_VERSION 1u

/* Room for a destination or export handle: a CUDA IPC handle or a shm name. */
#define PLACEFS_IOC_HANDLE_MAX 128
/* Bytes of a cudaIpcMemHandle_t. */
#define PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES 64

/* ring_info.backend */
enum placefs_ioc_backend {
	PLACEFS_IOC_BACKEND_NONE = 0, /* staging disabled */
	PLACEFS_IOC_BACKEND_HOST = 1, /* the ring is a POSIX shared-memory object */
	PLACEFS_IOC_BACKEND_CUDA = 2, /* the ring is a cudaMalloc allocation */
};

/* Kinds of handle (ring_info.handle_kind, stage.dest_kind). */
enum placefs_ioc_handle_kind {
	PLACEFS_IOC_HANDLE_NONE = 0,
	/* 64 bytes of a cudaIpcMemHandle_t (cudaIpcGetMemHandle of the base of an allocation). */
	PLACEFS_IOC_HANDLE_CUDA_IPC = 1,
	/*
	 * A POSIX shared-memory name as for shm_open(): "/name", NUL-terminated
	 * inside the handle field; handle_bytes is strlen(name) + 1.
	 */
	PLACEFS_IOC_HANDLE_HOST_SHM = 2,
};

/* stage.mode */
enum placefs_ioc_stage_mode {
	/* Stage into the ring and lend the span: ring_offset/nbytes valid until release or close. */
	PLACEFS_IOC_STAGE_BORROW = 0,
	/* Push the tensor through the ring into the caller's destination; no lease remains. */
	PLACEFS_IOC_STAGE_COPY = 1,
	/*
	 * Read the tensor straight into the caller's host shared-memory
	 * destination (dest_kind PLACEFS_IOC_HANDLE_HOST_SHM only) with the
	 * daemon's reader threads, in parallel pieces: no ring, no device, any
	 * placement, also on a mount with -o device=none. The way to bring
	 * cpu-placed tensors into host memory beside the gpu-placed ones.
	 * ring_offset, lease and copy_ns come back 0; read_ns is the read.
	 */
	PLACEFS_IOC_STAGE_READ = 2,
};

/* stage.flags */
/*
 * slice_dim, slice_start and slice_len are valid: stage only elements
 * [slice_start, slice_start + slice_len) of dimension slice_dim (0: rows, a
 * contiguous range; 1: columns, one segment per row), compacted: the bytes
 * of the C-contiguous tensor t[start:start+len] or t[:, start:start+len].
 * Only the slice is read, takes ring space and lands in the destination;
 * nbytes comes back as the slice's size. Borrow and copy alike.
 */
#define PLACEFS_IOC_STAGE_SLICE 0x1u
/*
 * `device` is valid: stage into the ring of that device (a CUDA ordinal,
 * or N of a host:N stand-in; -1 is the single host ring). Without it a
 * mount of one device uses that one, and a mount of several the device a
 * CUDA IPC destination lives on; a borrow (or a shm destination) on a
 * mount of several must name one.
 */
#define PLACEFS_IOC_STAGE_DEVICE 0x2u

/* ring_info.flags */
/* Describe the ring of device `select` (an ordinal as stage.device): ENODEV if not served. */
#define PLACEFS_IOC_RING_INFO_DEVICE 0x1u
/* Describe the ring at position `select` (0 .. ndevices - 1) of the mount's list: ENODEV past it. */
#define PLACEFS_IOC_RING_INFO_POSITION 0x2u

/* stage.out_flags */
#define PLACEFS_IOC_STAGED_PREFETCHED 0x1u /* the bytes were already in the ring */

/*
 * PLACEFS_IOC_RING_INFO: describes the mount's staging ring (the first
 * device's on a mount of several, unless flags select another).
 * In: version, size, flags, select. Out: everything else (reserved stays
 * zero).
 */
struct placefs_ioc_ring_info {
	uint32_t version;           /* in: PLACEFS_IOC_VERSION */
	uint32_t size;              /* in: sizeof(struct placefs_ioc_ring_info) */
	uint32_t backend;           /* out: enum placefs_ioc_backend */
	int32_t device;             /* out: CUDA ordinal (N of host:N), -1 for host and none */
	uint64_t ring_bytes;        /* out: size of the one ring allocation */
	uint64_t host_buffer_bytes; /* out: pinned bounce memory the daemon uses */
	uint64_t alignment;         /* out: every ring_offset is a multiple of this */
	uint32_t handle_kind;       /* out: enum placefs_ioc_handle_kind of `handle` */
	uint32_t handle_bytes;      /* out: used bytes of `handle` */
	uint8_t handle
	        [PLACEFS_IOC_HANDLE_MAX]; /* out: how to map the ring: IPC handle or shm name */
	uint32_t flags;                   /* in: zero or one PLACEFS_IOC_RING_INFO_* */
	int32_t select;                   /* in: the device or position flags name; else zero */
	uint32_t ndevices;    /* out: the rings of this mount: 0 (none), 1, or one per device */
	uint32_t position;    /* out: this ring's position in the mount's list */
	uint64_t reserved[8]; /* in: zero; out: zero */
};

/*
 * PLACEFS_IOC_STAGE: stages the tensor of the file the ioctl is issued on.
 * Borrow mode returns a lease on ring bytes [ring_offset, ring_offset +
 * nbytes); copy mode writes the tensor to destination bytes [dest_offset,
 * dest_offset + nbytes), which must lie within dest_size, and returns when
 * the bytes are there.
 */
struct placefs_ioc_stage {
	uint32_t version;           /* in: PLACEFS_IOC_VERSION */
	uint32_t size;              /* in: sizeof(struct placefs_ioc_stage) */
	uint32_t mode;              /* in: enum placefs_ioc_stage_mode */
	uint32_t flags;             /* in: PLACEFS_IOC_STAGE_SLICE, _DEVICE, or zero */
	uint32_t dest_kind;         /* in, copy mode: enum placefs_ioc_handle_kind */
	uint32_t dest_handle_bytes; /* in, copy mode: used bytes of dest_handle */
	uint64_t dest_offset;       /* in, copy mode: byte offset into the destination */
	uint64_t dest_size;         /* in, copy mode: size of the destination allocation */
	uint8_t dest_handle[PLACEFS_IOC_HANDLE_MAX]; /* in, copy mode */
	uint64_t timeout_ns;  /* in: longest wait for ring space; 0 = -o stage_timeout */
	uint64_t nbytes;      /* out: payload bytes staged (the slice's, with SLICE) */
	uint64_t ring_offset; /* out: borrow: where the bytes are; copy: where they were */
	uint64_t lease;       /* out: borrow: lease id (non-zero); copy: 0 */
	uint64_t wait_ns;     /* out: time spent waiting for ring space */
	uint64_t read_ns;     /* out: time from storage into the ring */
	uint64_t copy_ns;     /* out: time from the ring into the destination */
	uint64_t total_ns;    /* out: time in the daemon */
	uint32_t out_flags;   /* out: PLACEFS_IOC_STAGED_* */
	uint32_t pad0;        /* in: zero */
	uint32_t slice_dim;   /* in, with SLICE: 0 or 1; else zero */
	int32_t device;       /* in, with DEVICE: the device; else zero. out: the device used */
	uint64_t slice_start; /* in, with SLICE: first element of slice_dim; else zero */
	uint64_t slice_len;   /* in, with SLICE: elements (>= 1); else zero */
	uint64_t reserved[7]; /* in: zero; out: zero */
};

/* PLACEFS_IOC_RELEASE: ends a borrow lease taken on the same file descriptor. */
struct placefs_ioc_release {
	uint32_t version;     /* in: PLACEFS_IOC_VERSION */
	uint32_t size;        /* in: sizeof(struct placefs_ioc_release) */
	uint64_t lease;       /* in: the lease from PLACEFS_IOC_STAGE */
	uint64_t reserved[6]; /* in: zero */
};

/*
 * PLACEFS_IOC_STAGE_BATCH flag: each entry is a range of the plan, not one
 * tensor (see below).
 */
#define PLACEFS_IOC_BATCH_RANGES 1u

/* Entries of one PLACEFS_IOC_STAGE_BATCH request, at most. */
#define PLACEFS_IOC_BATCH_MAX 256

/* One tensor of a PLACEFS_IOC_STAGE_BATCH request. */
struct placefs_ioc_batch_entry {
	uint64_t tensor;      /* in: its index in the mount's .placefs/plan.json, from 0 */
	uint64_t dest_offset; /* in: where it goes in the batch's destination */
	uint64_t nbytes;      /* out: its payload bytes (moved when error is 0) */
	int32_t error;        /* out: 0, or the positive errno of this entry */
	uint32_t out_flags;   /* in: zero; out: PLACEFS_IOC_STAGED_* */
};
/*
 * With PLACEFS_IOC_BATCH_RANGES an entry is a range of plan entries,
 * [tensor, tensor + nbytes), of which it moves the tensors the mode places:
 * copy mode the gpu-placed ones, read mode the cpu-placed ones. Each goes to
 * dest_offset + its offset in its placement's packed layout (modulo 2^64):
 * the placement's tensors in plan order from 0; a tensor that directly
 * follows the placement's one before it in the same shard starts where that
 * one ends when that offset is a multiple of its element size, any other at
 * the first multiple of 256 after the one before (.placefs/layout.json gives
 * each layout's size and, as "pack": "runs", the rule's name;
 * .placefs/packed.tsv each tensor's offset, which placefs_client_packed_read()
 * of <placefs/client.h> reads). A loader that lays a placement out so in one
 * buffer at B passes dest_offset = B for every range and knows nothing else
 * of the plan.
 *   in:  tensor (first index), dest_offset, nbytes (entries in the range, >= 1)
 *   out: nbytes (payload bytes moved), error (0, or the errno of the first
 *        tensor that failed, whose plan index then replaces `tensor`)
 * A range with no tensor of the mode's placement moves nothing and succeeds.
 */

/*
 * PLACEFS_IOC_STAGE_BATCH: many tensors in one request, into one destination,
 * in copy mode (gpu-placed tensors through the ring) or read mode (any
 * tensor, by the reader threads). The ioctl may be issued on any tensor file
 * of the mount; entries name tensors by plan index, and the caller must be
 * able to read each one's shard (else that entry fails with EACCES). The
 * daemon runs the entries in parallel and answers when all have ended; the
 * request fails as a whole (-1 and errno) only when it is malformed (EINVAL:
 * header fields as for PLACEFS_IOC_STAGE, count 0 or above the maximum,
 * reserved fields or unused entries not zero) or cannot be run (ENODEV:
 * copy mode without staging; EAGAIN, ENOMEM). Otherwise it returns 0 with
 * `done` entries succeeded and each entry's `error` set: ERANGE for an index
 * past the plan, EFBIG for a copy of a tensor that is not staged, EINVAL
 * when dest_offset + nbytes exceeds dest_size, and the errnos of
 * PLACEFS_IOC_STAGE otherwise.
 */
struct placefs_ioc_stage_batch {
	uint32_t version;           /* in: PLACEFS_IOC_VERSION */
	uint32_t size;              /* in: sizeof(struct placefs_ioc_stage_batch) */
	uint32_t mode;              /* in: PLACEFS_IOC_STAGE_COPY or PLACEFS_IOC_STAGE_READ */
	uint32_t count;             /* in: entries used, 1 .. PLACEFS_IOC_BATCH_MAX */
	uint32_t dest_kind;         /* in: enum placefs_ioc_handle_kind (read: HOST_SHM) */
	uint32_t dest_handle_bytes; /* in: used bytes of dest_handle */
	uint64_t dest_size;         /* in: size of the destination allocation */
	uint8_t dest_handle[PLACEFS_IOC_HANDLE_MAX]; /* in */
	uint64_t timeout_ns;                         /* in: per entry, as for PLACEFS_IOC_STAGE */
	uint64_t total_ns;                           /* out: time in the daemon */
	uint32_t done;                               /* out: entries with error 0 */
	uint32_t flags;                              /* in: zero or PLACEFS_IOC_BATCH_RANGES */
	uint64_t reserved[9];                        /* in: zero; out: zero */
	struct placefs_ioc_batch_entry entries[PLACEFS_IOC_BATCH_MAX];
};

#define PLACEFS_IOC_RING_INFO   _IOWR(PLACEFS_IOC_MAGIC, 0x01, struct placefs_ioc_ring_info)
#define PLACEFS_IOC_STAGE       _IOWR(PLACEFS_IOC_MAGIC, 0x02, struct placefs_ioc_stage)
#define PLACEFS_IOC_RELEASE     _IOW(PLACEFS_IOC_MAGIC, 0x03, struct placefs_ioc_release)
#define PLACEFS_IOC_STAGE_BATCH _IOWR(PLACEFS_IOC_MAGIC, 0x04, struct placefs_ioc_stage_batch)

/* The sizes, for bindings that build the buffers by hand (Python struct). */
#define PLACEFS_IOC_RING_INFO_SIZE   256
#define PLACEFS_IOC_STAGE_SIZE       320
#define PLACEFS_IOC_RELEASE_SIZE     64
#define PLACEFS_IOC_BATCH_ENTRY_SIZE 32
#define PLACEFS_IOC_STAGE_BATCH_SIZE (256 + PLACEFS_IOC_BATCH_MAX * PLACEFS_IOC_BATCH_ENTRY_SIZE)

#ifdef __cplusplus
#define PLACEFS_IOC_ASSERT(c, m) static_assert(c, m)
#else
#define PLACEFS_IOC_ASSERT(c, m) _Static_assert(c, m)
#endif

PLACEFS_IOC_ASSERT(sizeof(struct placefs_ioc_ring_info) == PLACEFS_IOC_RING_INFO_SIZE,
                   "placefs_ioc_ring_info layout");
PLACEFS_IOC_ASSERT(sizeof(struct placefs_ioc_stage) == PLACEFS_IOC_STAGE_SIZE,
                   "placefs_ioc_stage layout");
PLACEFS_IOC_ASSERT(sizeof(struct placefs_ioc_release) == PLACEFS_IOC_RELEASE_SIZE,
                   "placefs_ioc_release layout");
PLACEFS_IOC_ASSERT(PLACEFS_IOC_STAGE_SIZE <= 16383, "restricted FUSE ioctl size limit");
PLACEFS_IOC_ASSERT(sizeof(struct placefs_ioc_batch_entry) == PLACEFS_IOC_BATCH_ENTRY_SIZE,
                   "placefs_ioc_batch_entry layout");
PLACEFS_IOC_ASSERT(sizeof(struct placefs_ioc_stage_batch) == PLACEFS_IOC_STAGE_BATCH_SIZE,
                   "placefs_ioc_stage_batch layout");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage_batch, entries) == 256,
                   "placefs_ioc_stage_batch.entries offset");
PLACEFS_IOC_ASSERT(PLACEFS_IOC_STAGE_BATCH_SIZE <= 16383, "restricted FUSE ioctl size limit");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_ring_info, handle) == 48,
                   "placefs_ioc_ring_info.handle offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage, dest_handle) == 40,
                   "placefs_ioc_stage.dest_handle offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage, nbytes) == 176,
                   "placefs_ioc_stage.nbytes offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage, out_flags) == 232,
                   "placefs_ioc_stage.out_flags offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage, slice_dim) == 240,
                   "placefs_ioc_stage.slice_dim offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage, device) == 244,
                   "placefs_ioc_stage.device offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage, slice_start) == 248,
                   "placefs_ioc_stage.slice_start offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_stage, slice_len) == 256,
                   "placefs_ioc_stage.slice_len offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_ring_info, flags) == 176,
                   "placefs_ioc_ring_info.flags offset");
PLACEFS_IOC_ASSERT(__builtin_offsetof(struct placefs_ioc_ring_info, position) == 188,
                   "placefs_ioc_ring_info.position offset");

#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) ||        \
        defined(__riscv)
/* The generic encoding: these are the numbers to use from Python. */
PLACEFS_IOC_ASSERT(PLACEFS_IOC_RING_INFO == 0xC100B901u, "PLACEFS_IOC_RING_INFO number");
PLACEFS_IOC_ASSERT(PLACEFS_IOC_STAGE == 0xC140B902u, "PLACEFS_IOC_STAGE number");
PLACEFS_IOC_ASSERT(PLACEFS_IOC_RELEASE == 0x4040B903u, "PLACEFS_IOC_RELEASE number");
PLACEFS_IOC_ASSERT(PLACEFS_IOC_STAGE_BATCH == 0xE100B904u, "PLACEFS_IOC_STAGE_BATCH number");
#endif

#undef PLACEFS_IOC_ASSERT

#endif
