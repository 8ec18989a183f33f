/* SPDX-License-Identifier: MIT */
/*
 * backend_i.h: the ops table a device backend implements (internal to lib/).
 *
 * backend.c validates every argument (chunk index, sizes, ring ranges,
 * destination bounds) and manages the destination cache; the ops only move
 * bytes. Ranges passed to the ops are always inside the ring. Only
 * backend*.c include this header: everything else goes through backend.h.
 */
#ifndef PLACEFS_BACKEND_I_H
#define PLACEFS_BACKEND_I_H

#include <pthread.h>

#include "staging/backend.h"

struct placefs__dest_entry;

struct placefs_backend_ops {
	const char *name;
	/*
	 * Allocates the ring (info.ring_bytes), the bounce memory
	 * (info.nchunks * info.chunk_bytes, into be->host_buf) and per-chunk
	 * copy state; fills info.handle*, info.name. On failure it frees what it
	 * made; close() is not called.
	 */
	int (*open)(struct placefs_backend *be, int device, struct placefs_error *err);
	void (*close)(struct placefs_backend *be);
	int (*chunk_to_ring)(struct placefs_backend *be, unsigned i, uint64_t ring_off, uint64_t n,
	                     struct placefs_error *err);
	int (*chunk_poll)(struct placefs_backend *be, unsigned i);
	int (*chunk_wait)(struct placefs_backend *be, unsigned i, struct placefs_error *err);
	/* Ring -> host memory of the daemon (placefs_backend_read_ring()'s buffer). */
	int (*ring_to_host)(struct placefs_backend *be, uint64_t ring_off, void *dst, uint64_t n,
	                    struct placefs_error *err);
	/*
	 * Ring -> bytes [off, off + n) of the file open on fd (a shm
	 * destination): written with pwrite(), never through a mapping, so a
	 * client that shrinks or overfills its object gets an errno (-ENOSPC,
	 * -EFBIG, -EIO) and the daemon no SIGBUS. NULL: backend.c goes through
	 * ring_to_host() into a heap buffer, then pwrite().
	 */
	int (*ring_to_fd)(struct placefs_backend *be, uint64_t ring_off, int fd, uint64_t off,
	                  uint64_t n, struct placefs_error *err);
	/*
	 * CUDA IPC destinations; NULL when the backend cannot serve them.
	 * ipc_open maps the allocation a handle names and gives its address
	 * and its size in bytes (from the driver, not from the client: copies
	 * past it are refused; UINT64_MAX where the driver cannot say).
	 */
	int (*ipc_open)(struct placefs_backend *be, const uint8_t *handle, void **ptr,
	                uint64_t *bytes, struct placefs_error *err);
	void (*ipc_close)(struct placefs_backend *be, void *ptr);
	int (*ring_to_device)(struct placefs_backend *be, uint64_t ring_off, void *dptr, uint64_t n,
	                      struct placefs_error *err);
	/*
	 * Starts copying the first n bytes of chunk i to device memory at dptr
	 * (inside an imported IPC destination), like chunk_to_ring: chunk_poll
	 * and chunk_wait report it. NULL when the backend cannot serve IPC
	 * destinations.
	 */
	int (*chunk_to_device)(struct placefs_backend *be, unsigned i, void *dptr, uint64_t n,
	                       struct placefs_error *err);
	/*
	 * The device ordinal an imported IPC pointer (from ipc_open) lives on;
	 * NULL when the backend cannot serve IPC destinations.
	 */
	int (*ptr_device)(struct placefs_backend *be, void *ptr, int *device,
	                  struct placefs_error *err);
	/*
	 * Zero-copy sources (lib/staging/zerocopy.c, through backend.c's checked
	 * placefs_backend_map_source() and friends): NULL when the backend has
	 * none (host); a backend sets all three or none.
	 * map_source maps bytes [0, file_size) of the shard open on fd read-only
	 * (PROT_READ, MAP_SHARED) and registers the mapping with the device so
	 * its DMA engine reads it directly; *base is the mapping. The CPU never
	 * reads through it. -EOPNOTSUPP when the device cannot register
	 * read-only memory, -EIO (or -ENOMEM) when mmap or the registration
	 * fails; nothing is left mapped on failure. unmap_source undoes it; no
	 * copy from it may be in flight.
	 */
	int (*map_source)(struct placefs_backend *be, int fd, uint64_t file_size, void **base,
	                  struct placefs_error *err);
	void (*unmap_source)(struct placefs_backend *be, void *base, uint64_t file_size);
	/*
	 * Copies n bytes at src (inside a mapping from map_source) into ring
	 * bytes [ring_off, ring_off + n) and returns when they are there. The
	 * copy is split into parts spread over the zero-copy streams that
	 * belong to the bounce chunks chunks[0..nchunks) (nchunks >= 1), which
	 * the calling thread owns.
	 */
	int (*src_to_ring)(struct placefs_backend *be, const unsigned *chunks, unsigned nchunks,
	                   const void *src, uint64_t ring_off, uint64_t n,
	                   struct placefs_error *err);
	/*
	 * Gives the ring's export handle group gid ((gid_t)-1: unchanged) and
	 * permission bits `mode` (placefs_backend_share_ring()); NULL when the
	 * handle is not a file (CUDA IPC).
	 */
	int (*share)(const struct placefs_backend *be, gid_t gid, mode_t mode,
	             struct placefs_error *err);
};

struct placefs_backend {
	const struct placefs_backend_ops *ops;
	struct placefs_backend_info info;
	uint8_t *host_buf; /* info.nchunks * info.chunk_bytes, set by open() */
	void *priv;        /* the backend's own state */
	/* host: a reservation to take in open() (placefs_backend_create_reserved()) */
	struct placefs_host_reserve *host_reserve;

	/* Imported copy-mode destinations (backend.c), all behind dest_lock. */
	pthread_mutex_t dest_lock;
	pthread_cond_t dest_cond; /* an import finished (an entry left "pending") */
	struct placefs__dest_entry *dests;
	unsigned ndests;
	uint64_t dest_clock;
	uint64_t dest_imports;      /* CUDA IPC imports done (or failed) */
	uint64_t dest_import_ns;    /* time in them */
	uint64_t dest_import_waits; /* requests that waited for another's import */
};

extern const struct placefs_backend_ops placefs__host_ops;

/*
 * pwrite()s all n bytes of buf at off of fd, for ring_to_fd; 0 or a negative
 * errno with a message naming `what` (a short write that makes no progress
 * is -EIO).
 */
int placefs__pwrite_dest(int fd, const void *buf, uint64_t n, uint64_t off, const char *what,
                         struct placefs_error *err);

/*
 * The host backend's shared-memory names: "/placefs-<pid>-<r>" with r a
 * random 64-bit number in decimal (placefs_shm_remove_stale() reads the pid;
 * nobody can guess r, so nobody can take the name first). The object is
 * made with O_CREAT | O_EXCL, and a name that exists already is retried with
 * a fresh r, PLACEFS__SHM_NAME_TRIES times in all before -EEXIST.
 * placefs__shm_random fills *r (getrandom(2)); 0 or a negative errno. Tests
 * replace it to force collisions; nothing else may.
 */
#define PLACEFS__SHM_NAME_TRIES 16
extern int (*placefs__shm_random)(uint64_t *r);
#ifdef HAVE_CUDA
extern const struct placefs_backend_ops placefs__cuda_ops;
/* cudaGetDeviceCount(), as a count or -ENODEV with the CUDA error in err. */
int placefs__cuda_device_count(struct placefs_error *err);
/*
 * Starts CUDA on `device` (the driver and the device's primary context), for
 * placefs_backend_cuda_warm_start(); failures are left for the backend to
 * report.
 */
void placefs__cuda_warm(int device);
#endif

#endif
