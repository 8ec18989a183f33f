/* SPDX-License-Identifier: MIT */
/*
 * placefs/client.h: a small C client of a placefs mount's GPU staging.
 *
 * It wraps the ioctl protocol of <placefs/ioctl.h> and the memory a client
 * needs around it, so a program never has to include CUDA headers itself:
 *
 *   int fd;
 *   struct placefs_ioc_ring_info ri;
 *   struct placefs_client_dest *d;
 *   struct placefs_ioc_stage r;
 *   struct placefs_client_error e;
 *
 *   placefs_client_open("/mnt/ckpt/model.layers.0.mlp.up_proj.weight", &fd, &e);
 *   placefs_client_ring_info(fd, &ri, &e);
 *   placefs_client_dest_create(&ri, 64 << 20, &d, &e);   // shm or cudaMalloc
 *   placefs_client_copy(fd, d, 0, 0, &r, &e);            // r.nbytes are in d
 *   ...
 *   placefs_client_dest_free(d);
 *   close(fd);
 *
 * Borrow mode instead leases ring bytes: map the ring once with
 * placefs_client_ring_map(), then placefs_client_borrow() gives
 * [r.ring_offset, r.ring_offset + r.nbytes), valid until
 * placefs_client_release() or close(fd).
 *
 * Memory follows the mount's backend (ring_info.backend):
 *   host  destinations are POSIX shared-memory objects this library creates
 *         ("/placefs-client-<pid>-<r>", r a random 64-bit number, made with
 *         O_EXCL and retried with another r when the name exists; mode 0600,
 *         every page reserved with posix_fallocate(), unlinked by
 *         placefs_client_dest_free()); each keeps one descriptor open with a
 *         shared flock() on it, so that a placefs daemon starting later
 *         removes the object only if its process died without freeing it.
 *         The daemon keeps a destination open while it is in use and writes
 *         into it with pwrite(), never through a mapping, and drops it
 *         within about a second of its unlinking or its process's exit. The
 *         ring is mapped read-only by name.
 *   cuda  destinations are cudaMalloc allocations on ring_info.device,
 *         exported with cudaIpcGetMemHandle(); the ring is mapped with
 *         cudaIpcOpenMemHandle(). Both need a library built with CUDA
 *         (EOPNOTSUPP otherwise), and the device ordinal must mean the same
 *         GPU in the client as in the daemon (same CUDA_VISIBLE_DEVICES).
 *   none  staging is disabled: the stage calls and dest_create fail with
 *         ENODEV.
 *
 * A mount may stage to several devices (-o device=cuda:0,cuda:1,...), one
 * ring each (ring_info.ndevices > 1). A tensor-parallel rank asks for its
 * own device's ring with placefs_client_ring_info_device(), makes its
 * destination from that (so copies into it go to that device by
 * themselves), and stages only its part of each weight with a slice:
 *
 *   struct placefs_client_stage_args a = {.flags = PLACEFS_IOC_STAGE_SLICE};
 *   a.slice_dim = 0;                                  // column-parallel: rows
 *   placefs_client_shard(shape[0], rank, world, &a.slice_start, &a.slice_len, &e);
 *   placefs_client_ring_info_device(fd, rank, &ri, &e);
 *   placefs_client_dest_create(&ri, bytes, &d, &e);
 *   placefs_client_copy_ex(fd, d, 0, &a, &r, &e);    // r.nbytes: the slice's
 *
 * A borrow on such a mount must name the device (PLACEFS_IOC_STAGE_DEVICE).
 *
 * Every function returns 0 or a negative errno (the errno of the ioctl, see
 * <placefs/ioctl.h>) and, when `err` is not NULL, fills it with a one-line
 * message naming the file and the cause. Functions that take a descriptor
 * may be called from several threads at once; a dest or ring object must not
 * be freed while another thread uses it.
 */
#ifndef PLACEFS_CLIENT_H
#define PLACEFS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <placefs/ioctl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PLACEFS_CLIENT_MSG_MAX 1024

struct placefs_client_error {
	int code; /* negative errno; 0 when nothing failed */
	char msg[PLACEFS_CLIENT_MSG_MAX];
};

/* A staging destination: a shm object or device memory (see above). */
struct placefs_client_dest;
/* The mount's ring mapped into this process (borrow mode). */
struct placefs_client_ring;

/* ---- files ----------------------------------------------------------------- */

/* Opens `path` read-only (O_CLOEXEC) into *fd. */
int placefs_client_open(const char *path, int *fd, struct placefs_client_error *err);

/*
 * PLACEFS_IOC_RING_INFO on fd. -ENOTTY when fd is not a tensor file of a
 * placefs mount. A mount with staging disabled answers backend
 * PLACEFS_IOC_BACKEND_NONE with zero sizes.
 */
int placefs_client_ring_info(int fd, struct placefs_ioc_ring_info *ri,
                             struct placefs_client_error *err);
/*
 * The ring of one device of the mount (PLACEFS_IOC_RING_INFO_DEVICE; the
 * CUDA ordinal, or N of host:N) or at one position of its device list
 * (PLACEFS_IOC_RING_INFO_POSITION, 0 .. ndevices - 1). -ENODEV when the
 * mount has no such ring.
 */
int placefs_client_ring_info_device(int fd, int32_t device, struct placefs_ioc_ring_info *ri,
                                    struct placefs_client_error *err);
int placefs_client_ring_info_at(int fd, uint32_t position, struct placefs_ioc_ring_info *ri,
                                struct placefs_client_error *err);

/*
 * The GPU-placed tensor files of the mount on `mountpoint`, in checkpoint
 * order (the listing of MOUNTPOINT/.placefs/by-placement/gpu): *names is a
 * malloc'ed array of *count malloc'ed file names, relative to the
 * mountpoint. -ENOENT when mountpoint is not a placefs mount.
 */
int placefs_client_list_gpu(const char *mountpoint, char ***names, size_t *count,
                            struct placefs_client_error *err);
void placefs_client_list_free(char **names, size_t count);

/* ---- the packed layout: .placefs/packed.tsv --------------------------------- */

/*
 * Where each tensor of a mount lies in its placement's packed layout, the
 * layout PLACEFS_IOC_BATCH_RANGES puts tensors in (see <placefs/ioctl.h>):
 * a loader that lays a placement out in one buffer this way sends ranges
 * of the plan with one dest_offset and knows where every tensor landed,
 * without computing the layout's rule itself. The daemon publishes it as
 * MOUNTPOINT/.placefs/packed.tsv (doc/SEMANTICS.md): a first line
 *
 *   # placement<TAB>packed<TAB>nbytes<TAB>dtype<TAB>shape<TAB>file
 *
 * then one line per plan entry, in plan order, with those six fields:
 * "gpu" or "cpu", the packed offset and the bytes in decimal, the dtype's
 * name, the dimensions in decimal separated by commas (empty for a
 * scalar), the tensor's file name in the mount.
 */

/* Most dimensions of one tensor: as many as the daemon accepts in a header. */
#define PLACEFS_CLIENT_NDIM_MAX 1024
/* Longest dtype name (bytes, without the NUL). */
#define PLACEFS_CLIENT_DTYPE_MAX 31
/* Largest packed.tsv read: 1 GiB (millions of tensors). */
#define PLACEFS_CLIENT_PACKED_MAX ((uint64_t)1 << 30)

enum placefs_client_placement {
	PLACEFS_CLIENT_GPU = 0, /* staged: the copy-mode (ring) layout */
	PLACEFS_CLIENT_CPU = 1, /* read by the daemon's readers: the read-mode layout */
};

/* One line of packed.tsv: one tensor of the mount. */
struct placefs_client_tensor {
	const char *file;                         /* its file name in the mount: MOUNTPOINT/file */
	uint64_t packed;                          /* its offset in its placement's packed layout */
	uint64_t nbytes;                          /* its payload bytes */
	const uint64_t *shape;                    /* ndim dimensions; NULL for a scalar (ndim 0) */
	uint32_t ndim;                            /* 0 .. PLACEFS_CLIENT_NDIM_MAX */
	uint32_t placement;                       /* enum placefs_client_placement */
	char dtype[PLACEFS_CLIENT_DTYPE_MAX + 1]; /* "BF16", "F8_E4M3", ... */
};

/*
 * The whole of packed.tsv. The tensors and their file names and shapes are
 * the object's: valid until placefs_client_packed_free(), never changed.
 */
struct placefs_client_packed {
	/*
	 * count tensors in plan order: tensors[i] is plan entry i, the index a
	 * batch names it by (its file's user.placefs.index).
	 */
	struct placefs_client_tensor *tensors;
	size_t count;
	uint64_t placed[2]; /* tensors of each placement (index: enum placefs_client_placement) */
	uint64_t layout[2]; /* each packed layout's size: the end of its last tensor (or 0) */
};

/*
 * Reads and checks MOUNTPOINT/.placefs/packed.tsv into *out (NULL on
 * failure), which the caller frees with placefs_client_packed_free(). The
 * file is hostile input, checked in full before anything is returned:
 *   - at most PLACEFS_CLIENT_PACKED_MAX bytes (-EFBIG), no NUL byte, the
 *     last line ended by a newline;
 *   - line 1 exactly the header above (another header: another format);
 *   - each other line six fields separated by single tabs: "gpu" or "cpu";
 *     packed and nbytes decimal numbers below 2^64 (digits only, no
 *     leading zero), packed + nbytes too; a dtype of 1 to
 *     PLACEFS_CLIENT_DTYPE_MAX capitals, digits and '_'; a shape of at
 *     most PLACEFS_CLIENT_NDIM_MAX such numbers separated by single commas,
 *     or nothing; a file name of 1 to 255 bytes without '/', control bytes
 *     or a leading '.' (so MOUNTPOINT/file is always a file of the mount's
 *     root: the daemon encodes every tensor name so, doc/SEMANTICS.md);
 *   - the tensors of one placement in layout order: each starts at or
 *     after the end of the one before it (packed >= its packed + nbytes),
 *     so no two overlap and layout[p] bounds them all.
 * Returns 0; -ENOENT (and the open's other errnos) when the file cannot be
 * opened: no placefs mount, or a daemon without packed.tsv; -EFBIG;
 * -EPROTO for a malformed file, with a message naming the file, the line
 * and what is wrong; -ENOMEM; a read's negative errno. It allocates at
 * most some ten times the file's size. Reentrant: it keeps no state, and
 * threads may read one result at once; free it once, after the last use.
 */
int placefs_client_packed_read(const char *mountpoint, struct placefs_client_packed **out,
                               struct placefs_client_error *err);
/* Frees what placefs_client_packed_read() returned. NULL is accepted. */
void placefs_client_packed_free(struct placefs_client_packed *p);

/* ---- staging --------------------------------------------------------------- */

/*
 * Borrow mode: stages fd's tensor into the ring and fills *out (nbytes,
 * ring_offset, lease, timings, out_flags). timeout_ns bounds the wait for
 * ring space (0: no limit; -ETIMEDOUT after it).
 */
int placefs_client_borrow(int fd, uint64_t timeout_ns, struct placefs_ioc_stage *out,
                          struct placefs_client_error *err);

/*
 * Copy mode: stages fd's tensor into bytes [dest_offset, dest_offset +
 * nbytes) of `dest` and returns when they are there (-EINVAL when they do not
 * fit in placefs_client_dest_size()).
 */
int placefs_client_copy(int fd, const struct placefs_client_dest *dest, uint64_t dest_offset,
                        uint64_t timeout_ns, struct placefs_ioc_stage *out,
                        struct placefs_client_error *err);

/*
 * What a stage may add to the whole-tensor default (NULL or all zero: the
 * whole tensor, as placefs_client_borrow() and _copy()). flags:
 * PLACEFS_IOC_STAGE_SLICE (slice_dim 0 or 1, slice_start, slice_len >= 1:
 * see <placefs/ioctl.h>), PLACEFS_IOC_STAGE_DEVICE (device: the CUDA
 * ordinal, or N of host:N). Fields whose flag is not set are ignored.
 */
struct placefs_client_stage_args {
	uint64_t timeout_ns; /* as placefs_client_borrow()'s */
	uint32_t flags;
	uint32_t slice_dim;
	uint64_t slice_start;
	uint64_t slice_len;
	int32_t device;
};

/*
 * placefs_client_borrow() with a slice and/or a device: EINVAL for a bad
 * slice or unknown flags, ENODEV for a device the mount does not stage to,
 * EFBIG when the slice does not fit the ring.
 */
int placefs_client_borrow_ex(int fd, const struct placefs_client_stage_args *a,
                             struct placefs_ioc_stage *out, struct placefs_client_error *err);

/*
 * placefs_client_copy() with a slice and/or a device; the slice's bytes
 * must fit the destination. Without PLACEFS_IOC_STAGE_DEVICE, a
 * destination made from the ring info of a mount of several devices names
 * its ring's device itself (placefs_client_copy() does the same).
 */
int placefs_client_copy_ex(int fd, const struct placefs_client_dest *dest, uint64_t dest_offset,
                           const struct placefs_client_stage_args *a, struct placefs_ioc_stage *out,
                           struct placefs_client_error *err);

/*
 * The tensor's entry in the mount's plan (its file's user.placefs.index
 * attribute; .placefs/plan.json lists the entries in that order): what a
 * batch names it by. -ENODATA when `path` is not a tensor file of a placefs
 * mount, -EPROTO when the attribute is not a decimal number.
 */
int placefs_client_index(const char *path, uint64_t *index, struct placefs_client_error *err);

/*
 * Copy mode for many tensors in one request (PLACEFS_IOC_STAGE_BATCH, on fd,
 * any tensor file of the mount): entries[0 .. count) each name a tensor by
 * its plan index (placefs_client_index()) and where its bytes go in dest
 * (dest_offset; nbytes, error and out_flags zero); count is 1 ..
 * PLACEFS_IOC_BATCH_MAX. flags: 0, or PLACEFS_IOC_BATCH_RANGES (each entry a
 * range of the plan, see <placefs/ioctl.h>). The daemon runs the entries in
 * parallel and answers when all have ended: each entry's nbytes (bytes
 * moved), error (0 or a positive errno) and out_flags are filled, and *done
 * (NULL allowed) counts those that moved. Returns 0 when every entry moved;
 * otherwise the negative errno of the first entry that failed, with a
 * message naming it (ERANGE: an index past the plan; EFBIG: a tensor that is
 * not staged, placed on the cpu; EINVAL: its bytes do not fit dest; else as
 * placefs_client_copy()), the entries saying which others failed. A request
 * refused as a whole leaves the entries as they were and *done 0: EINVAL
 * for a malformed one and on a mount of several rings (a batch names no
 * device: stage one tensor per request there), ENODEV without staging,
 * ENOTTY from a daemon without batches or a file that is not a placefs
 * tensor file, EAGAIN when every worker the daemon lends to batches stayed
 * busy with other requests for about a second (such a refusal is sent
 * again, 1 to 10 ms later, until then).
 */
int placefs_client_copy_batch(int fd, const struct placefs_client_dest *dest,
                              struct placefs_ioc_batch_entry *entries, uint32_t count,
                              uint32_t flags, uint64_t timeout_ns, uint32_t *done,
                              struct placefs_client_error *err);

/*
 * The even tensor-parallel split: rank's part of a dimension of dim_size
 * (*start = rank * dim_size / world, *len = dim_size / world). -EINVAL when
 * world is 0, rank >= world, or dim_size is 0 or not a multiple of world.
 */
int placefs_client_shard(uint64_t dim_size, uint32_t rank, uint32_t world, uint64_t *start,
                         uint64_t *len, struct placefs_client_error *err);

/* Ends a borrow lease taken on the same descriptor (-ENOENT if there is none). */
int placefs_client_release(int fd, uint64_t lease, struct placefs_client_error *err);

/* ---- destinations ------------------------------------------------------------ */

/*
 * Makes a destination of `size` bytes that the daemon described by `ri` can
 * copy into: a shm object for a host ring, device memory on ri->device for a
 * CUDA ring. -ENODEV when staging is disabled; -ENOSPC when /dev/shm cannot
 * hold `size` bytes; -EEXIST when 16 random names were all taken.
 */
int placefs_client_dest_create(const struct placefs_ioc_ring_info *ri, uint64_t size,
                               struct placefs_client_dest **out, struct placefs_client_error *err);
/* Frees device memory, or unmaps and unlinks the shm object. NULL is accepted. */
void placefs_client_dest_free(struct placefs_client_dest *d);
uint64_t placefs_client_dest_size(const struct placefs_client_dest *d);
/* PLACEFS_IOC_HANDLE_HOST_SHM or PLACEFS_IOC_HANDLE_CUDA_IPC. */
uint32_t placefs_client_dest_kind(const struct placefs_client_dest *d);
/*
 * The shm name of a host destination ("/placefs-client-<pid>-<r>"), or NULL
 * for device memory: a program that may be killed can shm_unlink() it from
 * a signal handler.
 */
const char *placefs_client_dest_shm_name(const struct placefs_client_dest *d);
/* The mapped shm bytes (host) or the device pointer (CUDA). */
void *placefs_client_dest_ptr(const struct placefs_client_dest *d);
/* Copies destination bytes [off, off + n) into host memory dst. */
int placefs_client_dest_read(const struct placefs_client_dest *d, uint64_t off, void *dst,
                             uint64_t n, struct placefs_client_error *err);

/* ---- the ring ------------------------------------------------------------------ */

/*
 * Maps the ring of `ri` read-only: shm_open + mmap for a host ring,
 * cudaIpcOpenMemHandle for a CUDA ring. -EOPNOTSUPP when the ring cannot be
 * exported (handle_kind NONE), -ENODEV when staging is disabled, -EACCES when
 * the host ring belongs to another user.
 */
int placefs_client_ring_map(const struct placefs_ioc_ring_info *ri,
                            struct placefs_client_ring **out, struct placefs_client_error *err);
void placefs_client_ring_unmap(struct placefs_client_ring *r); /* NULL ok */
/* The mapped bytes (host) or the device pointer of ring offset 0 (CUDA). */
const void *placefs_client_ring_ptr(const struct placefs_client_ring *r);
/* Copies ring bytes [off, off + n) into host memory dst (-EINVAL outside the ring). */
int placefs_client_ring_read(const struct placefs_client_ring *r, uint64_t off, void *dst,
                             uint64_t n, struct placefs_client_error *err);

/* "EINVAL", "EFBIG", ... for a negative or positive errno; "E?" for others. */
const char *placefs_client_errno_name(int code);

#ifdef __cplusplus
}
#endif

#endif
