/* SPDX-License-Identifier: MIT */
/*
 * backend_i.h: the ops table a device backend implements (internal to lib/).
 *
 * backend.c validates every argument (chunk index, sizes, ring ranges,
 * destination bounds) and manages the destination cache; the ops only move
 * bytes. Ranges passed to the ops are always inside the ring.
 */
#ifndef PLACEFS_BACKEND_I_H
#define PLACEFS_BACKEND_I_H

#include <pthread.h>

#include "backend.h"

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
	/* Ring -> host memory (the caller's buffer or a mapped shm destination). */
	int (*ring_to_host)(struct placefs_backend *be, uint64_t ring_off, void *dst, uint64_t n,
	                    struct placefs_error *err);
	/* CUDA IPC destinations; NULL when the backend cannot serve them. */
	int (*ipc_open)(struct placefs_backend *be, const uint8_t *handle, void **ptr,
	                struct placefs_error *err);
	void (*ipc_close)(struct placefs_backend *be, void *ptr);
	int (*ring_to_device)(struct placefs_backend *be, uint64_t ring_off, void *dptr, uint64_t n,
	                      struct placefs_error *err);
};

struct placefs_backend {
	const struct placefs_backend_ops *ops;
	struct placefs_backend_info info;
	uint8_t *host_buf; /* info.nchunks * info.chunk_bytes, set by open() */
	void *priv;        /* the backend's own state */

	/* Imported copy-mode destinations (backend.c). */
	pthread_mutex_t dest_lock;
	struct placefs__dest_entry *dests;
	unsigned ndests;
	uint64_t dest_clock;
};

extern const struct placefs_backend_ops placefs__host_ops;
#ifdef HAVE_CUDA
extern const struct placefs_backend_ops placefs__cuda_ops;
/* cudaGetDeviceCount(), as a count or -ENODEV with the CUDA error in err. */
int placefs__cuda_device_count(struct placefs_error *err);
#endif

#endif
