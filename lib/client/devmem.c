/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "client/devmem.h"

#ifdef HAVE_CUDA

_Static_assert(sizeof(cudaIpcMemHandle_t) == PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES,
               "CUDA IPC handle size");

/*
 * A CUDA error as an errno, the same mapping as lib/staging/backend_cuda.c's (the
 * client library carries no daemon-side object, so it has its own copy).
 */
static int cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return 0;
	case cudaErrorMemoryAllocation: return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorDevicesUnavailable:
	case cudaErrorSystemDriverMismatch: return -ENODEV;
	case cudaErrorInvalidValue: return -EINVAL;
	case cudaErrorNotSupported: return -EOPNOTSUPP;
	default: return -EIO;
	}
}

/* Records a CUDA failure: "cuda:N: <what>: <CUDA error name>: <description>". */
static int cuda_fail(struct placefs_error *err, cudaError_t e, int device, const char *what)
{
	int rc = cuda_errno(e);

	return placefs_error_set(err, rc, rc == -ENOMEM ? PLACEFS_E_NOMEM : PLACEFS_E_IO,
	                         "cuda:%d: %s: %s: %s", device, what, cudaGetErrorName(e),
	                         cudaGetErrorString(e));
}

int placefs_devmem_alloc(int device, uint64_t bytes, void **dptr,
                         uint8_t ipc[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES], struct placefs_error *err)
{
	cudaIpcMemHandle_t h;
	cudaError_t e;
	void *p = NULL;

	*dptr = NULL;
	e = cudaSetDevice(device);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return cuda_fail(err, e, device, "cannot select the device");
	}
	e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return cuda_fail(err, e, device, "cannot allocate the destination buffer");
	}
	e = cudaIpcGetMemHandle(&h, p);
	if (e != cudaSuccess) {
		cudaGetLastError();
		cudaFree(p);
		return cuda_fail(err, e, device, "cannot export the destination buffer");
	}
	memcpy(ipc, &h, sizeof(h));
	*dptr = p;
	return 0;
}

void placefs_devmem_free(int device, void *dptr)
{
	if (!dptr)
		return;
	cudaSetDevice(device);
	cudaFree(dptr);
}

int placefs_devmem_ipc_map(int device, const uint8_t *ipc, void **dptr, struct placefs_error *err)
{
	cudaIpcMemHandle_t h;
	cudaError_t e;

	*dptr = NULL;
	memcpy(&h, ipc, sizeof(h));
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaIpcOpenMemHandle(dptr, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		cudaGetLastError();
		*dptr = NULL;
		return cuda_fail(err, e, device, "cannot open the ring's CUDA IPC handle");
	}
	return 0;
}

void placefs_devmem_ipc_unmap(int device, void *dptr)
{
	if (!dptr)
		return;
	cudaSetDevice(device);
	cudaIpcCloseMemHandle(dptr);
}

int placefs_devmem_to_host(int device, const void *src, void *dst, uint64_t n,
                           struct placefs_error *err)
{
	cudaError_t e;

	if (n == 0)
		return 0;
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return cuda_fail(err, e, device, "copy from device memory to the host failed");
	}
	return 0;
}

#else /* !HAVE_CUDA */

static int no_cuda(int device, struct placefs_error *err)
{
	return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
	                         "cuda:%d: placefs was built without CUDA", device);
}

int placefs_devmem_alloc(int device, uint64_t bytes, void **dptr,
                         uint8_t ipc[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES], struct placefs_error *err)
{
	(void)bytes;
	(void)ipc;
	*dptr = NULL;
	return no_cuda(device, err);
}

void placefs_devmem_free(int device, void *dptr)
{
	(void)device;
	(void)dptr;
}

int placefs_devmem_ipc_map(int device, const uint8_t *ipc, void **dptr, struct placefs_error *err)
{
	(void)ipc;
	*dptr = NULL;
	return no_cuda(device, err);
}

void placefs_devmem_ipc_unmap(int device, void *dptr)
{
	(void)device;
	(void)dptr;
}

int placefs_devmem_to_host(int device, const void *src, void *dst, uint64_t n,
                           struct placefs_error *err)
{
	(void)src;
	(void)dst;
	(void)n;
	return no_cuda(device, err);
}

#endif
