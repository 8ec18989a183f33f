/* SPDX-License-Identifier: MIT */
/*
 * backend: the memory a placefs mount stages tensors into.
 *
 * A backend is chosen at mount with -o device=SPEC:
 *   cuda:N  the ring is one cudaMalloc allocation on device N; bounce
 *           buffers are cudaHostAlloc memory (or, with
 *           PLACEFS_CUDA_HOST_ALLOC=register, an anonymous mapping pinned
 *           with cudaHostRegister); copies are cudaMemcpyAsync on
 *           one stream per chunk; the ring is exported as a CUDA IPC handle.
 *   host    the ring is a POSIX shared-memory object ("/placefs-<pid>-<r>",
 *           r a random 64-bit number: nobody can take the name first; made
 *           with O_EXCL, retried on a collision) reserved page by page with
 *           posix_fallocate() and mapped MAP_SHARED; bounce buffers are
 *           aligned heap memory, touched at creation; copies into the ring are
 *           memcpy, copies out to shm destinations pwrite(). Same protocol end
 *           to end, for machines without a GPU. The daemon holds a shared
 *           flock() on the object while it lives, so that
 *           placefs_shm_remove_stale() never takes a live one.
 *   none    staging disabled: placefs_backend_create() gives NULL.
 *
 * placefs_backend_create() makes all the memory the backend will ever use
 * for tensor data: exactly ring_bytes of ring and at most host_buffer bytes
 * of (pinned) bounce memory, split into chunks. Nothing grows later, and
 * nothing is left to allocate at a first touch: a host ring that /dev/shm
 * cannot hold is refused here (-ENOSPC, the message naming the ring's size
 * and /dev/shm's free space), never a SIGBUS at a later stage.
 *
 * Threads: every function may be called from any thread, concurrently,
 * except that one chunk must be driven by one thread at a time (the stager
 * gives each I/O thread its own chunks) and create/free are not concurrent
 * with anything. CUDA errors come back as negative errnos plus a message in
 * `err` naming the CUDA error; the caller logs it.
 */
#ifndef PLACEFS_BACKEND_H
#define PLACEFS_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/device.h"
#include "common/error.h"
#include "placefs/ioctl.h"

/*
 * -o host_buffer defaults and bounds. A CUDA ring defaults to 128 MiB: 32
 * chunks of 4 MiB, two or three per I/O thread. On an NVIDIA H200 VM with 16
 * cores (300 MiB last-level cache), fresh mounts side by side in one run of
 * tests/bench/first-pass.sh --prime --loader, a one-shot load of Llama-3-8B
 * shapes moved 47.8-48.9 GB/s with it against 43.4-44.2 with
 * 64 MiB (2 MiB chunks), and the mixture of experts 46.2-46.6 against
 * 41.5-42.0; 96M gave 47.7, 192M and 256M 35-50 (unsteady; the hypothesis,
 * unproven: the bytes between the CPU's copy and the DMA that reads them
 * back outgrow the cache), 32M 34-35. On a busier instance it was ahead in
 * one run and behind in another (doc/PERFORMANCE.md 3.1). The host ring
 * keeps 64 MiB: its chunks are memcpy'd into host memory, and it is filled
 * (touched) at mount.
 */
#define PLACEFS_HOST_BUFFER_DEFAULT_CUDA (128ULL << 20)
#define PLACEFS_HOST_BUFFER_DEFAULT_HOST (64ULL << 20)
#define PLACEFS_HOST_BUFFER_MIN          (8ULL << 10)
#define PLACEFS_HOST_BUFFER_MAX          (4ULL << 30)
/*
 * Chunk policy: host_buffer / 32 rounded down to 4 KiB, clamped to
 * [4 KiB, 16 MiB]; as many whole chunks as fit ($PLACEFS_CHUNK_BYTES, a size
 * within those bounds and at most host_buffer, overrides it). 128 MiB gives
 * 32 chunks of 4 MiB (two or three per I/O thread: 14 threads on 16 cores);
 * 64 MiB 32 of 2 MiB; 1 GiB 64 of 16 MiB. Every I/O thread must
 * double-buffer: 4 MiB chunks one per thread (64 MiB as 16) ran at 42.8
 * GB/s against 47.8-48.9 as 32, and 16 MiB one per thread at half that
 * (doc/PERFORMANCE.md section 3.1).
 */
#define PLACEFS_CHUNK_TARGET_COUNT 32
#define PLACEFS_CHUNK_MIN          (4ULL << 10)
#define PLACEFS_CHUNK_MAX          (16ULL << 20)

struct placefs_backend;

struct placefs_backend_info {
	struct placefs_device device; /* host (index -1) or cuda:N */
	uint64_t ring_bytes;          /* the one ring allocation */
	uint64_t host_buffer_bytes;   /* nchunks * chunk_bytes (<= the requested host_buffer) */
	uint64_t chunk_bytes;
	unsigned nchunks;
	uint32_t handle_kind;  /* enum placefs_ioc_handle_kind of the ring export */
	uint32_t handle_bytes; /* 0 when the ring cannot be exported */
	uint8_t handle[PLACEFS_IOC_HANDLE_MAX];
	char name[128]; /* for logs: "cuda:0 (NVIDIA H200)", "host (/placefs-1-0)" */
};

/*
 * A copy-mode destination: a CUDA IPC handle of the caller's allocation or
 * the name of a POSIX shared-memory object, plus where the tensor goes.
 * Bytes [offset, offset + nbytes) of the destination must lie inside
 * [0, size); for shm, size must not exceed the object's size.
 */
struct placefs_dest {
	uint32_t kind;         /* PLACEFS_IOC_HANDLE_CUDA_IPC or PLACEFS_IOC_HANDLE_HOST_SHM */
	uint32_t handle_bytes; /* 64 for CUDA IPC; strlen(name) + 1 for shm */
	uint8_t handle[PLACEFS_IOC_HANDLE_MAX];
	uint64_t offset;
	uint64_t size;
	int check_uid; /* shm: refuse (-EACCES) objects not owned by uid */
	uid_t uid;
	/*
	 * The process (or any thread of it: the FUSE caller's thread id) that
	 * copies into it, 0 if unknown. Its cached import is dropped once no
	 * process that used it last is alive (placefs_backend_sweep()).
	 */
	pid_t pid;
};

/*
 * Creates the backend of device `dev` (lib/common/device.h) with a ring of ring_bytes (> 0) and
 * bounce chunks carved from at most host_buffer bytes (0 = the device kind's default,
 * PLACEFS_HOST_BUFFER_DEFAULT_CUDA or _HOST; else PLACEFS_HOST_BUFFER_MIN..MAX). "none" succeeds with *out = NULL.
 * Errors: -EINVAL (a device that placefs_device_check() refuses, sizes), -ENODEV (no such CUDA device; the message
 * is "cuda:N requested but no CUDA device is available: <CUDA error>"),
 * -EOPNOTSUPP (cuda:N in a build without CUDA), -ENOMEM, -EIO, -ENOSPC (host:
 * the ring cannot be reserved in /dev/shm), -EEXIST (host: 16 random names
 * all taken).
 */
int placefs_backend_create(struct placefs_device dev, uint64_t ring_bytes, uint64_t host_buffer,
                           struct placefs_backend **out, struct placefs_error *err);

/*
 * A host ring reserved ahead of its backend. A mount over a network file
 * system reads shard headers for hundreds of milliseconds before its plan
 * gives the ring's size, and reserving a host ring (posix_fallocate() of up
 * to 256 MiB of /dev/shm: 62 ms of one CPU on a 2-vCPU VM, the time between
 * the last header read and the mount over s3fs) can run meanwhile.
 *
 * placefs_host_reserve_start() creates the ring's object now (its name as
 * a host ring's, locked as one) and starts a thread that allocates and
 * touches host_buffer bytes of bounce memory (0: the host default), then
 * reserves the object's pages up to `guess` bytes in 16 MiB steps (none
 * when that is over half of /dev/shm's free space). Errors: those of ring_create
 * (-EEXIST, -EIO) and -ENOMEM; a thread that cannot start leaves the work
 * to the backend.
 *
 * placefs_backend_create_reserved() is placefs_backend_create() where a host
 * backend takes `reserve` (borrowed; any other device ignores it): the thread
 * stops at the ring's size, the object is cut to it or reserved up to it
 * (-ENOSPC as without a reservation), and the bounce memory is used when it
 * is large enough. A reservation is taken at most once.
 *
 * placefs_host_reserve_free() stops and joins the thread and, unless a
 * backend took the object, unlinks it; NULL is fine.
 */
struct placefs_host_reserve;

int placefs_host_reserve_start(uint64_t guess, uint64_t host_buffer,
                               struct placefs_host_reserve **out, struct placefs_error *err);
int placefs_backend_create_reserved(struct placefs_device dev, uint64_t ring_bytes,
                                    uint64_t host_buffer, struct placefs_host_reserve *reserve,
                                    struct placefs_backend **out, struct placefs_error *err);
void placefs_host_reserve_free(struct placefs_host_reserve *r);

/*
 * CUDA started ahead of its backends. Starting the driver and a device's
 * primary context takes a large part of a CUDA mount's start-up, and needs
 * nothing the checkpoint says: placefs_backend_cuda_warm_start() does it on
 * a thread of its own, beside the header reads, for devices[0..n) or, with
 * `all`, every device present. The backends created later find it done.
 * *out is NULL (and 0 returned) where there is nothing to start: a build
 * without CUDA, no device given, or a thread that cannot start; -ENOMEM.
 * Failures (no driver, no such device) are not reported here: the backend
 * reports them as it would without this.
 *
 * placefs_backend_cuda_warm_free() waits for the thread; NULL is fine.
 */
struct placefs_cuda_warm;

int placefs_backend_cuda_warm_start(const int *devices, unsigned n, int all,
                                    struct placefs_cuda_warm **out, struct placefs_error *err);
void placefs_backend_cuda_warm_free(struct placefs_cuda_warm *w);

/*
 * Frees everything: imported destinations, streams, bounce chunks, the ring
 * (and for host, unlinks its shm name). No copy may be in flight: callers
 * wait for their chunks first. NULL is accepted.
 */
void placefs_backend_free(struct placefs_backend *be);

void placefs_backend_get_info(const struct placefs_backend *be, struct placefs_backend_info *info);

/* Start of bounce chunk i (chunk_bytes long, 4 KiB aligned, pinned for CUDA). */
void *placefs_backend_chunk(const struct placefs_backend *be, unsigned i);

/*
 * Starts copying the first n bytes of chunk i into ring bytes [ring_off,
 * ring_off + n). Asynchronous: the chunk must not be written, and the ring
 * bytes not relied on, until placefs_backend_chunk_wait(i) returned 0.
 * -EINVAL for a bad chunk, n > chunk_bytes or a range outside the ring.
 */
int placefs_backend_chunk_to_ring(struct placefs_backend *be, unsigned i, uint64_t ring_off,
                                  uint64_t n, struct placefs_error *err);
/* 1 when chunk i's last copy has ended (wait then reports how), 0 while it runs. */
int placefs_backend_chunk_poll(struct placefs_backend *be, unsigned i);
/* Waits for chunk i's last copy; 0 or the copy's error (e.g. -EIO). */
int placefs_backend_chunk_wait(struct placefs_backend *be, unsigned i, struct placefs_error *err);

/*
 * Zero-copy sources, for the shard registry (lib/staging/zerocopy.h): the device
 * reads a shard's page cache itself, by DMA, with no bounce chunk and no CPU
 * copy. Only the cuda backend has them (placefs_backend_has_zero_copy() is 1
 * there, 0 for host). Same thread rules as the chunk calls: the chunks
 * named in src_to_ring must be the calling thread's own.
 */
int placefs_backend_has_zero_copy(const struct placefs_backend *be);

/*
 * Maps bytes [0, file_size) of the shard open on fd read-only (PROT_READ,
 * MAP_SHARED) and registers the mapping with the device; *base is the
 * mapping (NULL on failure, when nothing stays mapped). The CPU must never
 * read through it (a page past a truncated end would raise SIGBUS). Slow:
 * registration pins, and so first reads, every page (~34 ms/GiB on ext4).
 * Errors: -EINVAL (fd < 0, file_size 0, base NULL), -EOPNOTSUPP (a backend
 * without zero-copy, or a device that cannot register read-only memory),
 * -EIO or -ENOMEM (mmap or the registration failed).
 */
int placefs_backend_map_source(struct placefs_backend *be, int fd, uint64_t file_size, void **base,
                               struct placefs_error *err);

/*
 * Undoes placefs_backend_map_source(base, file_size); no copy from it may be
 * in flight. NULL base (or a backend without zero-copy) does nothing.
 */
void placefs_backend_unmap_source(struct placefs_backend *be, void *base, uint64_t file_size);

/*
 * Copies n bytes at src (inside a mapping from placefs_backend_map_source())
 * into ring bytes [ring_off, ring_off + n) and returns when they are there
 * (synchronous; no copy outlives the call, even a failed one). The transfer
 * is spread over the zero-copy streams of bounce chunks chunks[0..nchunks).
 * -EINVAL for no chunks, a chunk that does not exist, src NULL or a range
 * outside the ring; -EOPNOTSUPP for a backend without zero-copy; -EIO (the
 * device's error). A 0-byte copy checks the arguments and touches nothing.
 */
int placefs_backend_src_to_ring(struct placefs_backend *be, const unsigned *chunks,
                                unsigned nchunks, const void *src, uint64_t ring_off, uint64_t n,
                                struct placefs_error *err);

/*
 * Copies ring bytes [ring_off, ring_off + n) to `dest` and returns when they
 * are there. The destination is imported on first use and cached (CUDA IPC:
 * opened once per handle; shm: opened once per object, re-opened when the
 * name now refers to another object), until placefs_backend_sweep() finds
 * it dead, it is the oldest idle one of DEST_CACHE_MAX (64), or
 * placefs_backend_free().
 * A shm destination is never mapped: the bytes go in with pwrite() on its
 * descriptor, so whatever its owner does to it meanwhile (ftruncate it
 * shorter, leave it sparse on a full /dev/shm) costs that copy an errno and
 * never the daemon a SIGBUS. An object shrunk after the size check is grown
 * back to at most `size` bytes by the write (its owner's memory, which it
 * had already); one whose pages /dev/shm cannot supply gives -ENOSPC.
 * Errors: -EINVAL (range, handle syntax, offset + n > size, size larger than
 * the shm object, not a regular file), -ENOENT (no such shm object), -EACCES
 * (check_uid), -EOPNOTSUPP (CUDA IPC destination on the host backend), -EIO
 * (CUDA), -ENOSPC, -EFBIG (pwrite into the shm object).
 * A 0-byte copy checks the arguments and touches nothing.
 */
int placefs_backend_copy_out(struct placefs_backend *be, uint64_t ring_off, uint64_t n,
                             const struct placefs_dest *dest, struct placefs_error *err);

/*
 * Direct copies (copy mode without the ring, lib/staging/stage.h): a destination
 * is opened once per stage, then bounce chunks go straight into it.
 *
 * placefs_backend_target_open() checks dest as placefs_backend_copy_out()
 * does for the n bytes at dest->offset, imports it into the cache (or finds
 * it there) and holds it until placefs_backend_target_close() (NULL is
 * accepted). Errors: those of placefs_backend_copy_out()'s checks and
 * imports, -ENOMEM.
 *
 * placefs_backend_chunk_to_target() copies the first n bytes of chunk i to
 * destination bytes [off, off + n), which must lie inside the range opened
 * (-EINVAL otherwise, and for a bad chunk or n > chunk_bytes). A CUDA IPC
 * destination is asynchronous like placefs_backend_chunk_to_ring():
 * placefs_backend_chunk_poll()/_wait() report it, and the target must stay
 * open until then. A shm destination is written with pwrite() before the
 * call returns (-ENOSPC, -EFBIG, -EIO as for copy_out).
 */
struct placefs_backend_target;

int placefs_backend_target_open(struct placefs_backend *be, const struct placefs_dest *dest,
                                uint64_t n, struct placefs_backend_target **out,
                                struct placefs_error *err);
int placefs_backend_chunk_to_target(struct placefs_backend *be, unsigned i,
                                    struct placefs_backend_target *t, uint64_t off, uint64_t n,
                                    struct placefs_error *err);
void placefs_backend_target_close(struct placefs_backend *be, struct placefs_backend_target *t);

/*
 * The device a copy-mode destination lives on, for a mount that stages to
 * several (lib/staging/stagers.h routes a copy to the ring of that device): a CUDA
 * IPC destination is imported into this backend's cache as for
 * placefs_backend_copy_out() (opened on this backend's device, peer access
 * enabled lazily) and the runtime asked where the allocation is
 * (cudaPointerGetAttributes); *out is then {cuda, ordinal}. Errors: -EINVAL
 * (handle syntax, not device memory), -EOPNOTSUPP (a shm destination, which
 * lives on no device, or a backend without CUDA IPC), the import's errors.
 */
int placefs_backend_dest_device(struct placefs_backend *be, const struct placefs_dest *dest,
                                struct placefs_device *out, struct placefs_error *err);

/*
 * Drops the cached destinations that nobody can copy into any more: shm
 * objects that were unlinked (st_nlink 0 on the descriptor kept for each,
 * what a client's placefs_client_dest_free() does), and destinations whose
 * last user process (placefs_dest.pid) has exited (kill(pid, 0) fails with
 * ESRCH: a client killed before it could unlink, a CUDA allocation whose
 * owner is gone). Entries a copy is using stay. Costs a system call or two
 * per cached entry; the daemon calls it about once a second, so an exited
 * client's destination stays open (its pages allocated) for about that
 * long (placefs_backend_copy_out() also sweeps before each new import).
 * Returns how many were dropped. `be` is const because callers reach
 * the backend through placefs_stager_backend(); the cache it changes is
 * behind the backend's own lock.
 */
unsigned placefs_backend_sweep(const struct placefs_backend *be);

/* How many destinations are cached now (open shm objects, opened IPC handles). */
unsigned placefs_backend_dest_count(const struct placefs_backend *be);

/*
 * The destination cache's counters. A CUDA IPC import runs outside the
 * cache's lock, so copies into destinations already imported go on during
 * it; a request for a handle being imported waits for that import
 * (import_waits) instead of opening the handle again.
 */
struct placefs_backend_dest_stats {
	uint64_t held;         /* cached now, as placefs_backend_dest_count() */
	uint64_t imports;      /* CUDA IPC handles opened (successes and failures) */
	uint64_t import_ns;    /* time spent opening them */
	uint64_t import_waits; /* requests that waited for another request's import */
};

/* Fills *out (all zero for a NULL backend). */
void placefs_backend_dest_stats(const struct placefs_backend *be,
                                struct placefs_backend_dest_stats *out);

/*
 * Removes the shared-memory objects that placefs processes killed before
 * they could clean up left in /dev/shm: host rings ("placefs-<pid>-<n>") and
 * client destinations ("placefs-client-<pid>-<n>", see placefs/client.h)
 * whose <pid> is not a live process here (kill(pid, 0) fails with ESRCH) and
 * that no process holds a flock() on (every live daemon and client holds
 * one on its objects, so the objects of a process in another PID namespace
 * sharing /dev/shm stay). Objects the caller may not unlink are left alone.
 * Calls report(name, bytes, arg) for each object removed, when report is not
 * NULL. Returns the number removed, or a negative errno (with a message)
 * when /dev/shm exists but cannot be listed; 0 when there is no /dev/shm.
 */
int placefs_shm_remove_stale(void (*report)(const char *name, uint64_t bytes, void *arg), void *arg,
                             struct placefs_error *err);

/*
 * Who may open the ring through its export handle: the host ring's shm
 * object is created mode 0600 (the daemon's user alone); this gives it
 * group gid ((gid_t)-1: unchanged) and permission bits `mode` (fchown,
 * fchmod), e.g. 0640 for the members of a group or 0604 for everyone, so
 * that the borrowers the daemon admits can map it read-only. -EOPNOTSUPP
 * for a ring whose handle is no file (CUDA IPC: any process that may use
 * the device opens it); else 0 or the errno of fchown/fchmod, with a
 * message.
 */
int placefs_backend_share_ring(const struct placefs_backend *be, gid_t gid, mode_t mode,
                               struct placefs_error *err);

/* Copies ring bytes [ring_off, ring_off + n) into host memory dst (synchronous). */
int placefs_backend_read_ring(struct placefs_backend *be, uint64_t ring_off, void *dst, uint64_t n,
                              struct placefs_error *err);

/*
 * The shm-name rule of destinations (and of PLACEFS_IOC_HANDLE_HOST_SHM in
 * placefs/ioctl.h): name[0..bytes) is "/" followed by 1 to
 * PLACEFS_IOC_HANDLE_MAX - 2 bytes that are neither '/' nor NUL, then one NUL
 * (so bytes is strlen(name) + 1, from 3 to PLACEFS_IOC_HANDLE_MAX). Reads at
 * most `bytes` bytes of name. 0, or -EINVAL with the message "destination shm
 * name must be ..." in err. The one home of the rule: the daemon's ioctl
 * checks and placefs_backend_copy_out() call it.
 */
int placefs_backend_shm_name_check(const uint8_t *name, uint32_t bytes, struct placefs_error *err);

/* Fills a shm destination; -EINVAL when the name is not "/name" or too long. */
int placefs_dest_shm(struct placefs_dest *d, const char *name, uint64_t offset, uint64_t size,
                     struct placefs_error *err);
/* Fills a CUDA IPC destination from the 64 bytes of a cudaIpcMemHandle_t. */
int placefs_dest_cuda_ipc(struct placefs_dest *d, const void *handle, size_t len, uint64_t offset,
                          uint64_t size, struct placefs_error *err);

/*
 * Number of CUDA devices, or -ENODEV (the runtime reports an error, e.g. no
 * driver; the message names it) or -EOPNOTSUPP (built without CUDA).
 * Initialises the CUDA runtime in this process when built with CUDA.
 */
int placefs_backend_cuda_devices(struct placefs_error *err);

#endif
