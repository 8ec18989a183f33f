/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h> /* CUresult, CUdeviceptr: the one driver call, through dlsym() */
#include <cuda_runtime_api.h>

#include "staging/backend_i.h"

/*
 * The CUDA backend, plain C against the runtime API (no nvcc). The ring is
 * one cudaMalloc allocation, the bounce chunks one pinned allocation (host_pin())
 * (allocated once: pinning is slow, ~1 s per GiB). Each chunk has its own
 * non-blocking stream and an event recorded after its last copy, so a chunk
 * is reused only once its DMA has finished. Copies out of the ring run on
 * the calling thread's per-thread default stream and are waited for.
 *
 * The current device is per host thread in the runtime, so every entry point
 * selects the backend's device first: the stager's I/O threads and the FUSE
 * workers never have to know.
 */

/*
 * A zero-copy transfer is cut into equal parts of at least ZC_PART_MIN bytes
 * (multiples of ZC_PART_ALIGN), at most one per zero-copy stream of the
 * calling thread's chunks, so that with PLACEFS_STAGE_ZC_STREAMS > 1 a large
 * tensor keeps several copies in flight and its parts end together. With
 * the default fan-out of 1 that is one part per chunk the thread owns.
 */
#define ZC_FANOUT_DEFAULT 1
#define ZC_PART_MIN       (4ULL << 20)
#define ZC_PART_ALIGN     (64ULL << 10)

_Static_assert(sizeof(cudaIpcMemHandle_t) == PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES,
               "CUDA IPC handle size");

struct cuda_priv {
	int device;
	uint8_t *ring;         /* device memory */
	cudaStream_t *streams; /* one per chunk */
	cudaEvent_t *events;   /* one per chunk: its last copy */
	unsigned nstreams;
	/*
	 * Zero-copy streams: zc_fanout per chunk, chunk c owning
	 * zc_streams[c * zc_fanout ...]; an event each, recorded after its
	 * part of a copy. See cuda_src_to_ring().
	 */
	cudaStream_t *zc_streams;
	cudaEvent_t *zc_events;
	unsigned zc_fanout;
	int ro_register; /* cudaDevAttrHostRegisterReadOnlySupported */
	/*
	 * How the bounce chunks were pinned: 0 cudaHostAlloc (cudaFreeHost),
	 * 1 an anonymous mapping registered with cudaHostRegister (unregister,
	 * munmap). See host_pin_mode().
	 */
	int host_registered;
	size_t host_len; /* the mapping's length when host_registered */
};

/* Maps a CUDA error to an errno for the caller. */
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

/* Records a CUDA failure: "<what>: <CUDA error name>: <description>". */
static int cuda_fail(struct placefs_error *err, cudaError_t e, int device, const char *what)
{
	int rc = cuda_errno(e);

	return placefs_error_set(err, rc, rc == -ENOMEM ? PLACEFS_E_NOMEM : PLACEFS_E_IO,
	                         "cuda:%d: %s: %s: %s", device, what, cudaGetErrorName(e),
	                         cudaGetErrorString(e));
}

int placefs__cuda_device_count(struct placefs_error *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		/* Clear the runtime's last error so later calls do not report it again. */
		cudaGetLastError();
		return placefs_error_set(err, -ENODEV, PLACEFS_E_IO,
		                         "no CUDA device is available: %s", cudaGetErrorString(e));
	}
	return n;
}

void placefs__cuda_warm(int device)
{
	if (cudaSetDevice(device) == cudaSuccess)
		cudaFree(0); /* makes the primary context current */
	cudaGetLastError();
}

/*
 * Creates n non-blocking streams, each with an event (cudaEventDisableTiming
 * | ev_flags) for its last copy. On failure the slot that failed is NULL and
 * the caller's cleanup (pairs_destroy) frees the rest.
 */
static int pairs_create(cudaStream_t *streams, cudaEvent_t *events, unsigned n, unsigned ev_flags,
                        int device, const char *what, struct placefs_error *err)
{
	char msg[64];
	cudaError_t e;
	unsigned i;

	for (i = 0; i < n; i++) {
		e = cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
		if (e != cudaSuccess) {
			streams[i] = NULL;
			snprintf(msg, sizeof(msg), "cannot create %s stream", what);
			return cuda_fail(err, e, device, msg);
		}
		e = cudaEventCreateWithFlags(&events[i], cudaEventDisableTiming | ev_flags);
		if (e != cudaSuccess) {
			events[i] = NULL;
			snprintf(msg, sizeof(msg), "cannot create %s event", what);
			return cuda_fail(err, e, device, msg);
		}
	}
	return 0;
}

/* Waits for and destroys what pairs_create made (NULL slots are skipped). */
static void pairs_destroy(cudaStream_t *streams, cudaEvent_t *events, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		if (streams[i]) {
			cudaStreamSynchronize(streams[i]);
			cudaStreamDestroy(streams[i]);
		}
		if (events[i])
			cudaEventDestroy(events[i]);
	}
}

/*
 * Pins the bounce chunks: one cudaHostAlloc allocation (the default,
 * $PLACEFS_CUDA_HOST_ALLOC=alloc), or with $PLACEFS_CUDA_HOST_ALLOC=register
 * an anonymous mapping (MADV_HUGEPAGE), faulted in with MADV_POPULATE_WRITE
 * where the kernel has it and registered with cudaHostRegister. Both give pinned, page-locked memory of exactly
 * host_buffer_bytes that the copy engine reads at the same rate; they differ
 * in how long the mount takes to make them (tests/bench/first-pass.sh shows
 * the mount time of each). -EINVAL for another value.
 */
static int host_pin_mode(int *reg, struct placefs_error *err)
{
	const char *s = getenv("PLACEFS_CUDA_HOST_ALLOC");

	*reg = 0;
	if (!s || !*s || strcmp(s, "alloc") == 0)
		return 0;
	if (strcmp(s, "register") == 0) {
		*reg = 1;
		return 0;
	}
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "PLACEFS_CUDA_HOST_ALLOC must be alloc or register, got '%s'", s);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static cudaError_t host_pin(struct cuda_priv *cp, uint8_t **out, size_t n)
{
	cudaError_t e;
	void *p;

	if (!cp->host_registered)
		return cudaHostAlloc((void **)out, n, cudaHostAllocDefault);
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return cudaErrorMemoryAllocation;
	(void)madvise(p, n, MADV_HUGEPAGE);
	(void)madvise(p, n, MADV_POPULATE_WRITE); /* older kernels: the register faults them */
	e = cudaHostRegister(p, n, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		munmap(p, n);
		return e;
	}
	cp->host_len = n;
	*out = p;
	return cudaSuccess;
}

static void host_unpin(struct cuda_priv *cp, uint8_t *p)
{
	if (!cp->host_registered) {
		cudaFreeHost(p);
		return;
	}
	if (cudaHostUnregister(p) != cudaSuccess)
		cudaGetLastError();
	munmap(p, cp->host_len);
}

static void cuda_release(struct cuda_priv *cp, uint8_t *host_buf)
{
	cudaSetDevice(cp->device);
	if (cp->streams)
		pairs_destroy(cp->streams, cp->events, cp->nstreams);
	if (cp->zc_streams)
		pairs_destroy(cp->zc_streams, cp->zc_events, cp->nstreams * cp->zc_fanout);
	free(cp->streams);
	free(cp->events);
	free(cp->zc_streams);
	free(cp->zc_events);
	if (host_buf)
		host_unpin(cp, host_buf);
	if (cp->ring)
		cudaFree(cp->ring);
	free(cp);
}

/*
 * Zero-copy tuning from the environment (tests/bench/stage-sweep.sh varies
 * them): PLACEFS_STAGE_ZC_STREAMS, how many streams per bounce chunk a
 * zero-copy transfer is spread over (1..16, default ZC_FANOUT_DEFAULT), and
 * PLACEFS_STAGE_ZC_WAIT, how the I/O thread waits for one: "spin" (the
 * default: the runtime polls, as for any event without
 * cudaEventBlockingSync) or "block" (sleep until the device interrupts).
 * Measured on an H200 with a ring of one large tensor (tests/bench/stage-sweep.sh
 * --envs, doc/PERFORMANCE.md 3.1 and 5):
 * more streams gave nothing, and blocking waits cost 3-4 % of the link: the
 * ring waits for the thread that sleeps through the end of each transfer.
 */
static int zc_knobs(unsigned *fanout, int *spin, struct placefs_error *err)
{
	const char *s = getenv("PLACEFS_STAGE_ZC_STREAMS");
	char *end;
	long v;

	*fanout = ZC_FANOUT_DEFAULT;
	*spin = 1;
	if (s && *s) {
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno != 0 || *end != '\0' || v < 1 || v > 16)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "PLACEFS_STAGE_ZC_STREAMS must be a number "
			                         "from 1 to 16, got '%s'",
			                         s);
		*fanout = (unsigned)v;
	}
	s = getenv("PLACEFS_STAGE_ZC_WAIT");
	if (s && *s) {
		if (strcmp(s, "block") == 0)
			*spin = 0;
		else if (strcmp(s, "spin") != 0)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "PLACEFS_STAGE_ZC_WAIT must be block or spin, "
			                         "got '%s'",
			                         s);
	}
	return 0;
}

static int cuda_open(struct placefs_backend *be, int device, struct placefs_error *err)
{
	struct cuda_priv *cp;
	struct cudaDeviceProp prop;
	cudaIpcMemHandle_t h;
	cudaError_t e;
	unsigned fanout;
	int n = 0, rc, zc_spin, host_reg;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return placefs_error_set(err, -ENODEV, PLACEFS_E_IO,
		                         "cuda:%d requested but no CUDA device is available: %s",
		                         device, cudaGetErrorString(e));
	}
	if (n == 0)
		return placefs_error_set(err, -ENODEV, PLACEFS_E_IO,
		                         "cuda:%d requested but no CUDA device is available: %s",
		                         device, cudaGetErrorString(cudaErrorNoDevice));
	if (device >= n)
		return placefs_error_set(err, -ENODEV, PLACEFS_E_IO,
		                         "cuda:%d requested but this machine has %d CUDA "
		                         "device%s (cuda:0..cuda:%d)",
		                         device, n, n == 1 ? "" : "s", n - 1);

	rc = zc_knobs(&fanout, &zc_spin, err);
	if (rc != 0)
		return rc;
	rc = host_pin_mode(&host_reg, err);
	if (rc != 0)
		return rc;
	cp = calloc(1, sizeof(*cp));
	if (!cp)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "cuda: out of memory");
	cp->device = device;
	cp->streams = calloc(be->info.nchunks, sizeof(*cp->streams));
	cp->events = calloc(be->info.nchunks, sizeof(*cp->events));
	cp->zc_streams = calloc((size_t)be->info.nchunks * fanout, sizeof(*cp->zc_streams));
	cp->zc_events = calloc((size_t)be->info.nchunks * fanout, sizeof(*cp->zc_events));
	if (!cp->streams || !cp->events || !cp->zc_streams || !cp->zc_events) {
		free(cp->streams);
		free(cp->events);
		free(cp->zc_streams);
		free(cp->zc_events);
		free(cp);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "cuda: out of memory");
	}
	cp->nstreams = be->info.nchunks;
	cp->zc_fanout = fanout;
	cp->host_registered = host_reg;

	e = cudaSetDevice(device);
	if (e != cudaSuccess) {
		rc = cuda_fail(err, e, device, "cannot select the device");
		goto fail;
	}
	e = cudaMalloc((void **)&cp->ring, be->info.ring_bytes);
	if (e != cudaSuccess) {
		cp->ring = NULL;
		cudaGetLastError();
		rc = placefs_error_set(err, cuda_errno(e), PLACEFS_E_NOMEM,
		                       "cuda:%d: cannot allocate the %llu-byte staging ring: %s",
		                       device, (unsigned long long)be->info.ring_bytes,
		                       cudaGetErrorString(e));
		goto fail;
	}
	e = host_pin(cp, &be->host_buf, (size_t)be->info.host_buffer_bytes);
	if (e != cudaSuccess) {
		be->host_buf = NULL;
		cudaGetLastError();
		rc = placefs_error_set(err, cuda_errno(e), PLACEFS_E_NOMEM,
		                       "cuda:%d: cannot allocate %llu bytes of pinned bounce "
		                       "buffers: %s",
		                       device, (unsigned long long)be->info.host_buffer_bytes,
		                       cudaGetErrorString(e));
		goto fail;
	}
	/* Bounce chunks: blocking sync, a waiting I/O thread sleeps (it has other chunks to fill). */
	rc = pairs_create(cp->streams, cp->events, cp->nstreams, cudaEventBlockingSync, device,
	                  "a copy", err);
	if (rc != 0)
		goto fail;
	rc = pairs_create(cp->zc_streams, cp->zc_events, cp->nstreams * cp->zc_fanout,
	                  zc_spin ? 0 : cudaEventBlockingSync, device, "a zero-copy", err);
	if (rc != 0)
		goto fail;

	if (cudaDeviceGetAttribute(&cp->ro_register, cudaDevAttrHostRegisterReadOnlySupported,
	                           device) != cudaSuccess) {
		cudaGetLastError();
		cp->ro_register = 0;
	}
	memset(&prop, 0, sizeof(prop));
	if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
		cudaGetLastError();
		snprintf(prop.name, sizeof(prop.name), "unknown device");
	}
	e = cudaIpcGetMemHandle(&h, cp->ring);
	if (e == cudaSuccess) {
		be->info.handle_kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
		be->info.handle_bytes = PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES;
		memcpy(be->info.handle, &h, sizeof(h));
		snprintf(be->info.name, sizeof(be->info.name), "cuda:%d (%.64s)", device,
		         prop.name);
	} else {
		/* Borrow mode needs the export; copy mode still works without it. */
		cudaGetLastError();
		be->info.handle_kind = PLACEFS_IOC_HANDLE_NONE;
		be->info.handle_bytes = 0;
		snprintf(be->info.name, sizeof(be->info.name),
		         "cuda:%d (%.40s, no IPC export: %.40s)", device, prop.name,
		         cudaGetErrorName(e));
	}
	be->priv = cp;
	return 0;

fail:
	cuda_release(cp, be->host_buf);
	be->host_buf = NULL;
	return rc;
}

static void cuda_close(struct placefs_backend *be)
{
	cuda_release(be->priv, be->host_buf);
	be->host_buf = NULL;
	be->priv = NULL;
}

static int cuda_chunk_to_ring(struct placefs_backend *be, unsigned i, uint64_t ring_off, uint64_t n,
                              struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	cudaError_t e;

	cudaSetDevice(cp->device);
	e = cudaMemcpyAsync(cp->ring + ring_off, be->host_buf + (uint64_t)i * be->info.chunk_bytes,
	                    n, cudaMemcpyHostToDevice, cp->streams[i]);
	if (e == cudaSuccess)
		e = cudaEventRecord(cp->events[i], cp->streams[i]);
	if (e != cudaSuccess)
		return cuda_fail(err, e, cp->device, "cannot start a copy into the ring");
	return 0;
}

static int cuda_chunk_to_device(struct placefs_backend *be, unsigned i, void *dptr, uint64_t n,
                                struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	cudaError_t e;

	cudaSetDevice(cp->device);
	/* Default kind: the destination may live on another device (UVA). */
	e = cudaMemcpyAsync(dptr, be->host_buf + (uint64_t)i * be->info.chunk_bytes, n,
	                    cudaMemcpyDefault, cp->streams[i]);
	if (e == cudaSuccess)
		e = cudaEventRecord(cp->events[i], cp->streams[i]);
	if (e != cudaSuccess)
		return cuda_fail(err, e, cp->device, "cannot start a copy into the destination");
	return 0;
}

static int cuda_chunk_poll(struct placefs_backend *be, unsigned i)
{
	struct cuda_priv *cp = be->priv;

	cudaSetDevice(cp->device);
	return cudaEventQuery(cp->events[i]) == cudaErrorNotReady ? 0 : 1;
}

static int cuda_chunk_wait(struct placefs_backend *be, unsigned i, struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	cudaError_t e;

	cudaSetDevice(cp->device);
	e = cudaEventSynchronize(cp->events[i]);
	if (e != cudaSuccess)
		return cuda_fail(err, e, cp->device, "a copy out of a bounce chunk failed");
	return 0;
}

static int cuda_ring_to_host(struct placefs_backend *be, uint64_t ring_off, void *dst, uint64_t n,
                             struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	cudaError_t e;

	cudaSetDevice(cp->device);
	e = cudaMemcpyAsync(dst, cp->ring + ring_off, n, cudaMemcpyDeviceToHost,
	                    cudaStreamPerThread);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(cudaStreamPerThread);
	if (e != cudaSuccess)
		return cuda_fail(err, e, cp->device, "copy from the ring to host memory failed");
	return 0;
}

/*
 * The driver's cuMemGetAddressRange, which the runtime API lacks: the base
 * and size of the allocation an address lies in. Looked up once in the
 * driver library the runtime has loaded (its ABI has been stable since CUDA
 * 3.2), so that the build needs no libcuda and no driver-API version.
 */
typedef CUresult (*cuda_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
static cuda_range_fn cuda_range;
static pthread_once_t cuda_range_once = PTHREAD_ONCE_INIT;

static void cuda_range_load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (lib)
		cuda_range = (cuda_range_fn)(uintptr_t)dlsym(lib, "cuMemGetAddressRange_v2");
}

/*
 * The bytes from ptr to the end of its allocation, as the driver says.
 * Where the driver cannot say (no such entry point, or an error for this
 * pointer), UINT64_MAX: the client's dest_size then bounds the copy, as it
 * did before this check, rather than every copy into device memory failing.
 * tests/test_stage_ioctl bad checks on a GPU that the driver does say.
 */
static uint64_t cuda_bytes_from(void *ptr)
{
	CUdeviceptr base = 0, p = (CUdeviceptr)(uintptr_t)ptr;
	size_t size = 0;

	pthread_once(&cuda_range_once, cuda_range_load);
	if (!cuda_range || cuda_range(&base, &size, p) != CUDA_SUCCESS || p < base ||
	    p - base > size)
		return UINT64_MAX;
	return (uint64_t)(size - (p - base));
}

static int cuda_ipc_open(struct placefs_backend *be, const uint8_t *handle, void **ptr,
                         uint64_t *bytes, struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	cudaIpcMemHandle_t h;
	cudaError_t e;

	memcpy(&h, handle, sizeof(h));
	cudaSetDevice(cp->device);
	e = cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		int rc = cuda_errno(e);

		cudaGetLastError();
		/* A handle the runtime rejects is the caller's mistake. */
		if (rc == -EIO)
			rc = -EINVAL;
		return placefs_error_set(err, rc, PLACEFS_E_USAGE,
		                         "cuda:%d: cannot open the destination CUDA IPC handle: "
		                         "%s: %s",
		                         cp->device, cudaGetErrorName(e), cudaGetErrorString(e));
	}
	*bytes = cuda_bytes_from(*ptr);
	return 0;
}

static void cuda_ipc_close(struct placefs_backend *be, void *ptr)
{
	struct cuda_priv *cp = be->priv;

	cudaSetDevice(cp->device);
	cudaIpcCloseMemHandle(ptr);
}

static int cuda_ring_to_device(struct placefs_backend *be, uint64_t ring_off, void *dptr,
                               uint64_t n, struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	cudaError_t e;

	cudaSetDevice(cp->device);
	/* Default kind: the destination may live on another device (UVA). */
	e = cudaMemcpyAsync(dptr, cp->ring + ring_off, n, cudaMemcpyDefault, cudaStreamPerThread);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(cudaStreamPerThread);
	if (e != cudaSuccess)
		return cuda_fail(err, e, cp->device,
		                 "copy from the ring to the destination failed");
	return 0;
}

static int cuda_ptr_device(struct placefs_backend *be, void *ptr, int *device,
                           struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	struct cudaPointerAttributes a;
	cudaError_t e;

	memset(&a, 0, sizeof(a));
	cudaSetDevice(cp->device);
	e = cudaPointerGetAttributes(&a, ptr);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return cuda_fail(err, e, cp->device, "cannot tell where the destination lives");
	}
	if (a.type != cudaMemoryTypeDevice || a.device < 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "cuda:%d: the destination is not device memory (type %d)",
		                         cp->device, (int)a.type);
	*device = a.device;
	return 0;
}

/* ---- zero-copy sources ------------------------------------------------------ */

/*
 * Zero-copy staging (the registry is lib/staging/zerocopy.h): a shard is
 * mapped PROT_READ, MAP_SHARED and the mapping registered with
 * cudaHostRegister(cudaHostRegisterReadOnly). Registration pins the shard's
 * page-cache pages (faulting them in, i.e. reading the file, first), after
 * which the copy engine reads them straight into the ring: no bounce buffer
 * and no CPU copy (46-55 GB/s against 27-31 GB/s through bounce chunks on an
 * H200). Read-write registration of a file mapping fails on ext4, hence the
 * read-only flag, which needs cudaDevAttrHostRegisterReadOnlySupported.
 *
 * The pinned pages stay referenced by the registration: if the file is
 * truncated or rewritten afterwards, the DMA reads the old pages (stale
 * bytes, but mapped memory: it never faults). So this backend only moves
 * bytes; the registry checks after every copy that the file still has the
 * size and mtime it had at registration, and the stager fails the tensor
 * otherwise.
 *
 * The CPU never touches the mapping: a read through it of a page beyond a
 * truncated end would raise SIGBUS in the daemon.
 */

static int cuda_map_source(struct placefs_backend *be, int fd, uint64_t file_size, void **base,
                           struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t len;
	cudaError_t e;
	void *p;

	*base = NULL;
	if (!cp->ro_register)
		return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_IO,
		                         "cuda:%d: the device cannot register read-only host "
		                         "memory (cudaDevAttrHostRegisterReadOnlySupported is 0)",
		                         cp->device);
	if (page <= 0)
		page = 4096;
	if (file_size == 0 || file_size > (uint64_t)SIZE_MAX - (uint64_t)page)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "cuda:%d: cannot map a %llu-byte shard", cp->device,
		                         (unsigned long long)file_size);
	len = (file_size + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
	p = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return placefs_error_set(err, -EIO, PLACEFS_E_IO,
		                         "cuda:%d: cannot map the %llu-byte shard: %s", cp->device,
		                         (unsigned long long)file_size, strerror(errno));
	cudaSetDevice(cp->device);
	/* Portable: the stagers of every device of a mount share the registration. */
	e = cudaHostRegister(p, (size_t)len, cudaHostRegisterReadOnly | cudaHostRegisterPortable);
	if (e != cudaSuccess) {
		cudaGetLastError();
		munmap(p, (size_t)len);
		return cuda_fail(err, e, cp->device, "cannot register the shard's mapping");
	}
	*base = p;
	return 0;
}

static void cuda_unmap_source(struct placefs_backend *be, void *base, uint64_t file_size)
{
	struct cuda_priv *cp = be->priv;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t len;

	if (!base)
		return;
	if (page <= 0)
		page = 4096;
	len = (file_size + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
	cudaSetDevice(cp->device);
	if (cudaHostUnregister(base) != cudaSuccess)
		cudaGetLastError();
	munmap(base, (size_t)len);
}

/* The zero-copy stream (and event) of part k: parts go round the chunks, then their fan-out. */
static unsigned zc_slot(const struct cuda_priv *cp, const unsigned *chunks, unsigned nchunks,
                        unsigned k)
{
	return chunks[k % nchunks] * cp->zc_fanout + k / nchunks;
}

static int cuda_src_to_ring(struct placefs_backend *be, const unsigned *chunks, unsigned nchunks,
                            const void *src, uint64_t ring_off, uint64_t n,
                            struct placefs_error *err)
{
	struct cuda_priv *cp = be->priv;
	const uint8_t *s = src;
	cudaError_t e = cudaSuccess, e2;
	uint64_t done = 0, parts, part, total = (uint64_t)nchunks * cp->zc_fanout;
	unsigned k = 0, used;

	/* parts = min(streams, ceil(n / ZC_PART_MIN)), part = ceil(n / parts) aligned up. */
	parts = n / ZC_PART_MIN + (n % ZC_PART_MIN != 0);
	if (parts > total)
		parts = total;
	if (parts == 0)
		parts = 1;
	part = n / parts + (n % parts != 0);
	part = (part + ZC_PART_ALIGN - 1) / ZC_PART_ALIGN * ZC_PART_ALIGN;
	cudaSetDevice(cp->device);
	while (done < n && e == cudaSuccess) {
		uint64_t m = n - done < part ? n - done : part;
		unsigned z = zc_slot(cp, chunks, nchunks, k);

		e = cudaMemcpyAsync(cp->ring + ring_off + done, s + done, m, cudaMemcpyHostToDevice,
		                    cp->zc_streams[z]);
		if (e == cudaSuccess)
			e = cudaEventRecord(cp->zc_events[z], cp->zc_streams[z]);
		done += m;
		k++;
	}
	/* Wait for every stream used, even after a failure: no copy outlives the call. */
	used = k;
	for (k = 0; k < used; k++) {
		e2 = cudaEventSynchronize(cp->zc_events[zc_slot(cp, chunks, nchunks, k)]);
		if (e == cudaSuccess)
			e = e2;
	}
	if (e != cudaSuccess) {
		cudaGetLastError();
		return cuda_fail(err, e, cp->device, "a zero-copy transfer into the ring failed");
	}
	return 0;
}

const struct placefs_backend_ops placefs__cuda_ops = {
        .name = "cuda",
        .open = cuda_open,
        .close = cuda_close,
        .chunk_to_ring = cuda_chunk_to_ring,
        .chunk_poll = cuda_chunk_poll,
        .chunk_wait = cuda_chunk_wait,
        .ring_to_host = cuda_ring_to_host,
        .ipc_open = cuda_ipc_open,
        .ipc_close = cuda_ipc_close,
        .ring_to_device = cuda_ring_to_device,
        .chunk_to_device = cuda_chunk_to_device,
        .ptr_device = cuda_ptr_device,
        .map_source = cuda_map_source,
        .unmap_source = cuda_unmap_source,
        .src_to_ring = cuda_src_to_ring,
};
