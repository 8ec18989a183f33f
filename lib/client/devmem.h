/* SPDX-License-Identifier: MIT */
/*
 * devmem: device memory for client programs (lib/client/client.c), never used by
 * the daemon.
 *
 * A copy-mode client allocates its destination and exports it with an IPC
 * handle; a borrower maps the daemon's ring through the ring's IPC handle
 * and copies bytes back to check them. This is the only client-side code
 * that talks to CUDA, so lib/client/client.c and the programs that use it need no
 * CUDA header (and the client library nothing of the daemon's backend).
 *
 * Each call works on CUDA device `device` and selects it first (the
 * runtime's current device is per host thread), so any thread may call any
 * of them, concurrently; a pointer must not be freed while another thread
 * uses it. Every call blocks until the runtime has done its work (the first
 * one in a process initialises the CUDA runtime). Failures come back as a
 * negative errno with "cuda:N: <what>: <CUDA error name>: <description>" in
 * `err`. Built without CUDA, every one of them fails with -EOPNOTSUPP
 * ("cuda:N: placefs was built without CUDA") and the free functions do
 * nothing.
 */
#ifndef PLACEFS_DEVMEM_H
#define PLACEFS_DEVMEM_H

#include <stdint.h>

#include "common/error.h"
#include "placefs/ioctl.h"

/*
 * cudaMalloc of `bytes` (0 allocates 1 byte) and its IPC handle (64 bytes,
 * written to ipc). The caller owns *dptr and frees it with
 * placefs_devmem_free(); *dptr is NULL on failure.
 */
int placefs_devmem_alloc(int device, uint64_t bytes, void **dptr,
                         uint8_t ipc[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES], struct placefs_error *err);
/* Frees what placefs_devmem_alloc() gave. NULL is accepted. */
void placefs_devmem_free(int device, void *dptr);

/*
 * cudaIpcOpenMemHandle of another process's allocation (the daemon's ring,
 * 64 bytes of ipc); *dptr is NULL on failure. Undone by
 * placefs_devmem_ipc_unmap() (NULL is accepted there).
 */
int placefs_devmem_ipc_map(int device, const uint8_t *ipc, void **dptr, struct placefs_error *err);
void placefs_devmem_ipc_unmap(int device, void *dptr);

/* Synchronous copy of n bytes of device memory at src into host memory dst (n 0: nothing). */
int placefs_devmem_to_host(int device, const void *src, void *dst, uint64_t n,
                           struct placefs_error *err);

#endif
