/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "staging/backend_i.h"
#include "common/clock.h"
#include "staging/fill.h"
#include "common/io.h"
#include "common/size.h"

/* At most this many imported destinations stay cached; the oldest idle one goes first. */
#define DEST_CACHE_MAX 64
/* Heap buffer of a ring -> shm copy for a backend without ring_to_fd (CUDA). */
#define DEST_BOUNCE_MAX (4ULL << 20)

struct placefs__dest_entry {
	struct placefs__dest_entry *next;
	uint32_t kind;
	uint32_t key_len;
	uint8_t key[PLACEFS_IOC_HANDLE_MAX];
	void *ptr;      /* CUDA IPC: the imported device pointer; shm: NULL (never mapped) */
	uint64_t bytes; /* CUDA IPC: the allocation's bytes from ptr on, as the driver says */
	dev_t dev;      /* shm: identity of the object */
	ino_t ino;
	int fd;         /* shm: the object, written with pwrite() and seen unlinked; else -1 */
	pid_t tid;      /* placefs_dest.pid of its last use */
	pid_t pid;      /* the process of that thread; 0 unknown */
	unsigned refs;  /* copies using it right now, and the importer while pending */
	bool pending;   /* CUDA IPC: being imported, outside the lock (see dest_get_ipc) */
	bool detached;  /* no longer in the cache; dropped at the last unref */
	uint64_t stamp; /* last use, for eviction */
};

int placefs_backend_cuda_devices(struct placefs_error *err)
{
#ifdef HAVE_CUDA
	return placefs__cuda_device_count(err);
#else
	return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
	                         "placefs was built without CUDA");
#endif
}

/*
 * The bounce chunk size: $PLACEFS_CHUNK_BYTES when set (a size, a multiple
 * of 4 KiB within [PLACEFS_CHUNK_MIN, PLACEFS_CHUNK_MAX] and at most
 * host_buffer), else the policy of backend.h.
 */
static int chunk_size(uint64_t host_buffer, const char *spec, uint64_t *out,
                      struct placefs_error *err)
{
	const char *env = getenv("PLACEFS_CHUNK_BYTES");
	uint64_t chunk;
	int rc;

	if (env && *env) {
		rc = placefs_size_parse(env, "$PLACEFS_CHUNK_BYTES", &chunk, err);
		if (rc != 0)
			return rc;
		if (chunk < PLACEFS_CHUNK_MIN || chunk > PLACEFS_CHUNK_MAX ||
		    chunk % PLACEFS_CHUNK_MIN != 0 || chunk > host_buffer)
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "%s: $PLACEFS_CHUNK_BYTES=%llu must be a multiple of %llu within "
			        "%llu..%llu bytes and at most host_buffer (%llu)",
			        spec, (unsigned long long)chunk,
			        (unsigned long long)PLACEFS_CHUNK_MIN,
			        (unsigned long long)PLACEFS_CHUNK_MIN,
			        (unsigned long long)PLACEFS_CHUNK_MAX,
			        (unsigned long long)host_buffer);
		*out = chunk;
		return 0;
	}
	chunk = host_buffer / PLACEFS_CHUNK_TARGET_COUNT / PLACEFS_CHUNK_MIN * PLACEFS_CHUNK_MIN;
	if (chunk < PLACEFS_CHUNK_MIN)
		chunk = PLACEFS_CHUNK_MIN;
	if (chunk > PLACEFS_CHUNK_MAX)
		chunk = PLACEFS_CHUNK_MAX;
	*out = chunk;
	return 0;
}

int placefs_backend_create(struct placefs_device dev, uint64_t ring_bytes, uint64_t host_buffer,
                           struct placefs_backend **out, struct placefs_error *err)
{
	return placefs_backend_create_reserved(dev, ring_bytes, host_buffer, NULL, out, err);
}

int placefs_backend_create_reserved(struct placefs_device dev, uint64_t ring_bytes,
                                    uint64_t host_buffer, struct placefs_host_reserve *reserve,
                                    struct placefs_backend **out, struct placefs_error *err)
{
	const struct placefs_backend_ops *ops = NULL;
	struct placefs_backend *be;
	char spec[PLACEFS_DEVICE_NAME_MAX];
	uint64_t chunk = 0, n;
	int rc;

	*out = NULL;
	rc = placefs_device_check(dev, err);
	if (rc != 0)
		return rc;
	if (dev.kind == PLACEFS_DEVICE_NONE)
		return 0;
	placefs_device_format(dev, spec);
	if (ring_bytes == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: the staging ring size must be greater than zero",
		                         spec);
	if (host_buffer == 0)
		host_buffer = dev.kind == PLACEFS_DEVICE_HOST ? PLACEFS_HOST_BUFFER_DEFAULT_HOST
		                                              : PLACEFS_HOST_BUFFER_DEFAULT_CUDA;
	if (host_buffer < PLACEFS_HOST_BUFFER_MIN || host_buffer > PLACEFS_HOST_BUFFER_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: host_buffer=%llu is outside %llu..%llu bytes", spec,
		                         (unsigned long long)host_buffer,
		                         (unsigned long long)PLACEFS_HOST_BUFFER_MIN,
		                         (unsigned long long)PLACEFS_HOST_BUFFER_MAX);
	if (dev.kind == PLACEFS_DEVICE_HOST) {
		ops = &placefs__host_ops;
	} else {
#ifdef HAVE_CUDA
		ops = &placefs__cuda_ops;
#else
		return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
		                         "%s requested but placefs was built without CUDA", spec);
#endif
	}

	rc = chunk_size(host_buffer, spec, &chunk, err);
	if (rc != 0)
		return rc;
	n = host_buffer / chunk;

	be = calloc(1, sizeof(*be));
	if (!be)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory", spec);
	if (pthread_mutex_init(&be->dest_lock, NULL) != 0) {
		free(be);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory", spec);
	}
	if (pthread_cond_init(&be->dest_cond, NULL) != 0) {
		pthread_mutex_destroy(&be->dest_lock);
		free(be);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory", spec);
	}
	be->ops = ops;
	be->info.device = dev;
	be->info.ring_bytes = ring_bytes;
	be->info.chunk_bytes = chunk;
	be->info.nchunks = (unsigned)n;
	be->info.host_buffer_bytes = chunk * n;
	if (dev.kind == PLACEFS_DEVICE_HOST)
		be->host_reserve = reserve;
	rc = ops->open(be, dev.index, err);
	be->host_reserve = NULL; /* taken or not, it is the caller's again */
	if (rc != 0) {
		pthread_cond_destroy(&be->dest_cond);
		pthread_mutex_destroy(&be->dest_lock);
		free(be);
		return rc;
	}
	*out = be;
	return 0;
}

struct placefs_cuda_warm {
	pthread_t th;
	int all;
	unsigned n;
	int devices[PLACEFS_DEVICES_MAX];
};

#ifdef HAVE_CUDA
static void *cuda_warm_main(void *arg)
{
	struct placefs_cuda_warm *w = arg;
	struct placefs_error err;
	int count;

	if (w->all) {
		placefs_error_clear(&err);
		count = placefs__cuda_device_count(&err);
		for (int d = 0; d < count && d < PLACEFS_DEVICES_MAX; d++)
			placefs__cuda_warm(d);
		return NULL;
	}
	for (unsigned i = 0; i < w->n; i++)
		placefs__cuda_warm(w->devices[i]);
	return NULL;
}
#endif

int placefs_backend_cuda_warm_start(const int *devices, unsigned n, int all,
                                    struct placefs_cuda_warm **out, struct placefs_error *err)
{
	*out = NULL;
#ifdef HAVE_CUDA
	struct placefs_cuda_warm *w;

	if (n > PLACEFS_DEVICES_MAX)
		n = PLACEFS_DEVICES_MAX;
	if (!all && n == 0)
		return 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "cuda: out of memory");
	w->all = all;
	w->n = n;
	if (n)
		memcpy(w->devices, devices, n * sizeof(*devices));
	if (pthread_create(&w->th, NULL, cuda_warm_main, w) != 0) {
		free(w);
		return 0;
	}
	*out = w;
#else
	(void)devices;
	(void)n;
	(void)all;
	(void)err;
#endif
	return 0;
}

void placefs_backend_cuda_warm_free(struct placefs_cuda_warm *w)
{
	if (!w)
		return;
	pthread_join(w->th, NULL);
	free(w);
}

static void dest_drop(struct placefs_backend *be, struct placefs__dest_entry *e)
{
	if (e->kind == PLACEFS_IOC_HANDLE_HOST_SHM) {
		if (e->fd >= 0)
			close(e->fd);
	} else if (be->ops->ipc_close && e->ptr) {
		be->ops->ipc_close(be, e->ptr); /* NULL: an import that failed */
	}
	free(e);
}

/*
 * Entries leave the cache under the lock but are dropped after it, so that no
 * CUDA call (cudaIpcCloseMemHandle) runs with the lock held: dest_bury()
 * puts a detached entry nobody uses on a list of the caller's, dest_bury_all()
 * drops the list once the lock is released. Closing a mapping after the
 * same handle was imported again is safe: the runtime counts the opens of a
 * handle in a context and unmaps at the last close.
 */
static void dest_bury(struct placefs__dest_entry **grave, struct placefs__dest_entry *e)
{
	e->next = *grave;
	*grave = e;
}

static void dest_bury_all(struct placefs_backend *be, struct placefs__dest_entry *grave)
{
	struct placefs__dest_entry *next;

	for (; grave; grave = next) {
		next = grave->next;
		dest_drop(be, grave);
	}
}

void placefs_backend_free(struct placefs_backend *be)
{
	struct placefs__dest_entry *e, *next;

	if (!be)
		return;
	/* Imports first: a CUDA IPC mapping must close before the context goes. */
	for (e = be->dests; e; e = next) {
		next = e->next;
		dest_drop(be, e);
	}
	be->ops->close(be);
	pthread_cond_destroy(&be->dest_cond);
	pthread_mutex_destroy(&be->dest_lock);
	free(be);
}

void placefs_backend_get_info(const struct placefs_backend *be, struct placefs_backend_info *info)
{
	*info = be->info;
}

void *placefs_backend_chunk(const struct placefs_backend *be, unsigned i)
{
	if (i >= be->info.nchunks)
		return NULL;
	return be->host_buf + (uint64_t)i * be->info.chunk_bytes;
}

static int ring_range(const struct placefs_backend *be, uint64_t off, uint64_t n,
                      struct placefs_error *err)
{
	if (off > be->info.ring_bytes || n > be->info.ring_bytes - off)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: ring range %llu+%llu is outside the %llu-byte ring",
		                         be->info.name, (unsigned long long)off,
		                         (unsigned long long)n,
		                         (unsigned long long)be->info.ring_bytes);
	return 0;
}

/* Chunk i exists and holds n bytes; -EINVAL with a message otherwise. */
static int chunk_check(const struct placefs_backend *be, unsigned i, uint64_t n,
                       struct placefs_error *err)
{
	if (i >= be->info.nchunks || n > be->info.chunk_bytes)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: chunk %u with %llu bytes is not a valid bounce chunk",
		                         be->info.name, i, (unsigned long long)n);
	return 0;
}

int placefs_backend_chunk_to_ring(struct placefs_backend *be, unsigned i, uint64_t ring_off,
                                  uint64_t n, struct placefs_error *err)
{
	int rc = chunk_check(be, i, n, err);

	if (rc == 0)
		rc = ring_range(be, ring_off, n, err);
	if (rc != 0 || n == 0)
		return rc;
	return be->ops->chunk_to_ring(be, i, ring_off, n, err);
}

int placefs_backend_chunk_poll(struct placefs_backend *be, unsigned i)
{
	if (i >= be->info.nchunks)
		return 1;
	return be->ops->chunk_poll(be, i);
}

int placefs_backend_chunk_wait(struct placefs_backend *be, unsigned i, struct placefs_error *err)
{
	if (i >= be->info.nchunks)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: chunk %u does not exist", be->info.name, i);
	return be->ops->chunk_wait(be, i, err);
}

int placefs_backend_read_ring(struct placefs_backend *be, uint64_t ring_off, void *dst, uint64_t n,
                              struct placefs_error *err)
{
	int rc = ring_range(be, ring_off, n, err);

	if (rc != 0 || n == 0)
		return rc;
	return be->ops->ring_to_host(be, ring_off, dst, n, err);
}

int placefs_backend_share_ring(const struct placefs_backend *be, gid_t gid, mode_t mode,
                               struct placefs_error *err)
{
	if (!be->ops->share)
		return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
		                         "%s: the ring's handle is not a file", be->ops->name);
	return be->ops->share(be, gid, mode, err);
}

int placefs_backend_has_zero_copy(const struct placefs_backend *be)
{
	return be->ops->map_source && be->ops->unmap_source && be->ops->src_to_ring;
}

static int no_zero_copy(const struct placefs_backend *be, struct placefs_error *err)
{
	return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
	                         "%s: this backend cannot stage without bounce buffers (zero-copy)",
	                         be->info.name);
}

int placefs_backend_map_source(struct placefs_backend *be, int fd, uint64_t file_size, void **base,
                               struct placefs_error *err)
{
	if (!base)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: mapping a zero-copy source needs somewhere to put it",
		                         be->info.name);
	*base = NULL;
	if (fd < 0 || file_size == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: cannot map a %llu-byte shard on descriptor %d",
		                         be->info.name, (unsigned long long)file_size, fd);
	if (!placefs_backend_has_zero_copy(be))
		return no_zero_copy(be, err);
	return be->ops->map_source(be, fd, file_size, base, err);
}

void placefs_backend_unmap_source(struct placefs_backend *be, void *base, uint64_t file_size)
{
	if (!base || !placefs_backend_has_zero_copy(be))
		return;
	be->ops->unmap_source(be, base, file_size);
}

int placefs_backend_src_to_ring(struct placefs_backend *be, const unsigned *chunks,
                                unsigned nchunks, const void *src, uint64_t ring_off, uint64_t n,
                                struct placefs_error *err)
{
	unsigned k;
	int rc;

	if (!chunks || nchunks == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: a zero-copy transfer needs at least one bounce chunk",
		                         be->info.name);
	for (k = 0; k < nchunks; k++)
		if (chunks[k] >= be->info.nchunks)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: chunk %u does not exist", be->info.name,
			                         chunks[k]);
	if (!src)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: a zero-copy transfer needs a source", be->info.name);
	rc = ring_range(be, ring_off, n, err);
	if (rc != 0)
		return rc;
	if (!placefs_backend_has_zero_copy(be))
		return no_zero_copy(be, err);
	if (n == 0)
		return 0;
	return be->ops->src_to_ring(be, chunks, nchunks, src, ring_off, n, err);
}

/* A shm name is "/" then 1..(HANDLE_MAX - 2) bytes without '/' or NUL, NUL-terminated. */
int placefs_backend_shm_name_check(const uint8_t *h, uint32_t bytes, struct placefs_error *err)
{
	size_t len;

	if (bytes < 3 || bytes > PLACEFS_IOC_HANDLE_MAX)
		goto bad;
	len = strnlen((const char *)h, bytes);
	if (len != (size_t)bytes - 1 || h[0] != '/' || memchr(h + 1, '/', len - 1))
		goto bad;
	return 0;
bad:
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "destination shm name must be \"/name\" (no other '/', at most %d "
	                         "bytes with its NUL) and handle_bytes its length + 1",
	                         PLACEFS_IOC_HANDLE_MAX);
}

int placefs_dest_shm(struct placefs_dest *d, const char *name, uint64_t offset, uint64_t size,
                     struct placefs_error *err)
{
	size_t len = strnlen(name, PLACEFS_IOC_HANDLE_MAX);

	memset(d, 0, sizeof(*d));
	if (len >= PLACEFS_IOC_HANDLE_MAX)
		return placefs_backend_shm_name_check((const uint8_t *)"", 0, err);
	d->kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	memcpy(d->handle, name, len);
	d->handle_bytes = (uint32_t)len + 1;
	d->offset = offset;
	d->size = size;
	return placefs_backend_shm_name_check(d->handle, d->handle_bytes, err);
}

int placefs_dest_cuda_ipc(struct placefs_dest *d, const void *handle, size_t len, uint64_t offset,
                          uint64_t size, struct placefs_error *err)
{
	memset(d, 0, sizeof(*d));
	if (len != PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "a CUDA IPC handle is %d bytes, not %zu",
		                         PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES, len);
	d->kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
	d->handle_bytes = (uint32_t)len;
	memcpy(d->handle, handle, len);
	d->offset = offset;
	d->size = size;
	return 0;
}

/* Puts e at the head of the cache; lock held. */
static void dest_attach(struct placefs_backend *be, struct placefs__dest_entry *e)
{
	e->next = be->dests;
	be->dests = e;
	be->ndests++;
}

/* Removes e from the cache list; lock held. */
static void dest_detach(struct placefs_backend *be, struct placefs__dest_entry *e)
{
	struct placefs__dest_entry **pp;

	for (pp = &be->dests; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			be->ndests--;
			break;
		}
	}
	e->detached = true;
	e->next = NULL;
}

/*
 * The process thread `tid` belongs to (the FUSE request context names the
 * calling thread), from /proc; the thread id itself when /proc cannot say.
 */
static pid_t tgid_of(pid_t tid)
{
	char path[64], line[128];
	pid_t pid = tid;
	FILE *f;

	if (tid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/status", (long)tid);
	f = fopen(path, "re");
	if (!f)
		return tid;
	while (fgets(line, sizeof(line), f)) {
		long v;

		if (sscanf(line, "Tgid: %ld", &v) == 1) {
			if (v > 0 && v <= INT_MAX)
				pid = (pid_t)v;
			break;
		}
	}
	fclose(f);
	return pid;
}

/* Records the user of entry e; lock held. */
static void dest_note_user(struct placefs__dest_entry *e, pid_t tid)
{
	if (tid <= 0 || tid == e->tid)
		return;
	e->tid = tid;
	e->pid = tgid_of(tid);
}

/* True when nobody can copy into entry e any more (see placefs_backend_sweep()). */
static bool dest_dead(const struct placefs__dest_entry *e)
{
	struct stat st;

	if (e->fd >= 0 && fstat(e->fd, &st) == 0 && st.st_nlink == 0)
		return true;
	return e->pid > 0 && kill(e->pid, 0) != 0 && errno == ESRCH;
}

/* Takes the idle dead entries out of the cache onto *grave; lock held. */
static unsigned dest_sweep(struct placefs_backend *be, struct placefs__dest_entry **grave)
{
	struct placefs__dest_entry *e, *next;
	unsigned n = 0;

	for (e = be->dests; e; e = next) {
		next = e->next;
		if (e->refs == 0 && dest_dead(e)) {
			dest_detach(be, e);
			dest_bury(grave, e);
			n++;
		}
	}
	return n;
}

unsigned placefs_backend_sweep(const struct placefs_backend *cbe)
{
	/* The cache is behind dest_lock; see the header for why `be` is const. */
	struct placefs_backend *be = (struct placefs_backend *)cbe;
	struct placefs__dest_entry *grave = NULL;
	unsigned n;

	if (!be)
		return 0;
	pthread_mutex_lock(&be->dest_lock);
	n = dest_sweep(be, &grave);
	pthread_mutex_unlock(&be->dest_lock);
	dest_bury_all(be, grave);
	return n;
}

void placefs_backend_dest_stats(const struct placefs_backend *cbe,
                                struct placefs_backend_dest_stats *out)
{
	struct placefs_backend *be = (struct placefs_backend *)cbe;

	memset(out, 0, sizeof(*out));
	if (!be)
		return;
	pthread_mutex_lock(&be->dest_lock);
	out->held = be->ndests;
	out->imports = be->dest_imports;
	out->import_ns = be->dest_import_ns;
	out->import_waits = be->dest_import_waits;
	pthread_mutex_unlock(&be->dest_lock);
}

unsigned placefs_backend_dest_count(const struct placefs_backend *be)
{
	struct placefs_backend_dest_stats st;

	placefs_backend_dest_stats(be, &st);
	return (unsigned)st.held;
}

/*
 * Before a new import (a lookup that missed): takes the dead entries, then
 * the oldest idle ones, out of the cache onto *grave until there is room for
 * one more; lock held. The sweep costs little next to the import itself.
 */
static void dest_evict(struct placefs_backend *be, struct placefs__dest_entry **grave)
{
	dest_sweep(be, grave);
	while (be->ndests >= DEST_CACHE_MAX) {
		struct placefs__dest_entry *e, *old = NULL;

		for (e = be->dests; e; e = e->next)
			if (e->refs == 0 && (!old || e->stamp < old->stamp))
				old = e;
		if (!old)
			return; /* all busy: the cache may exceed its size for a while */
		dest_detach(be, old);
		dest_bury(grave, old);
	}
}

static struct placefs__dest_entry *dest_find(struct placefs_backend *be, uint32_t kind,
                                             const uint8_t *key, uint32_t len)
{
	struct placefs__dest_entry *e;

	for (e = be->dests; e; e = e->next)
		if (e->kind == kind && e->key_len == len && memcmp(e->key, key, len) == 0)
			return e;
	return NULL;
}

static struct placefs__dest_entry *dest_new(struct placefs_backend *be, uint32_t kind,
                                            const uint8_t *key, uint32_t len)
{
	struct placefs__dest_entry *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->kind = kind;
	e->key_len = len;
	memcpy(e->key, key, len);
	e->fd = -1;
	return e;
}

/* Takes a reference on e for a copy about to use it; lock held. */
static void dest_ref(struct placefs_backend *be, struct placefs__dest_entry *e, pid_t tid)
{
	dest_note_user(e, tid);
	e->refs++;
	e->stamp = ++be->dest_clock;
}

/*
 * Finds or opens the shm object of d and takes a reference on it. The object
 * is opened and checked before the lock is taken, and never mapped: its
 * owner may shrink it at any time, and a store into a mapping past its end
 * is a SIGBUS for the whole daemon. Copies pwrite() into its descriptor.
 */
static int dest_get_shm(struct placefs_backend *be, const struct placefs_dest *d,
                        struct placefs__dest_entry **out, struct placefs_error *err)
{
	const char *name = (const char *)d->handle;
	struct placefs__dest_entry *e, *grave = NULL;
	struct stat st;
	int fd;

	/* The same rules as a read-mode destination: regular, the caller's, long enough. */
	fd = placefs_fill_open_shm(name, d->check_uid, (unsigned)d->uid, d->size, err);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) != 0) {
		int rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                           "destination shm \"%s\": cannot stat: %s", name,
		                           strerror(errno));

		close(fd);
		return rc;
	}
	pthread_mutex_lock(&be->dest_lock);
	e = dest_find(be, d->kind, d->handle, d->handle_bytes);
	if (e && e->dev == st.st_dev && e->ino == st.st_ino) {
		dest_ref(be, e, d->pid);
		pthread_mutex_unlock(&be->dest_lock);
		close(fd);
		*out = e;
		return 0;
	}
	if (e) {
		/* The name now refers to another object. */
		dest_detach(be, e);
		if (e->refs == 0)
			dest_bury(&grave, e);
	}
	dest_evict(be, &grave);
	e = dest_new(be, d->kind, d->handle, d->handle_bytes);
	if (!e) {
		pthread_mutex_unlock(&be->dest_lock);
		dest_bury_all(be, grave);
		close(fd);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	}
	e->dev = st.st_dev;
	e->ino = st.st_ino;
	/* Kept open: copies write through it, and its st_nlink tells when the owner unlinked it. */
	e->fd = fd;
	dest_ref(be, e, d->pid);
	dest_attach(be, e);
	pthread_mutex_unlock(&be->dest_lock);
	dest_bury_all(be, grave);
	*out = e;
	return 0;
}

int placefs__pwrite_dest(int fd, const void *buf, uint64_t n, uint64_t off, const char *what,
                         struct placefs_error *err)
{
	int rc;

	if (n > (uint64_t)SIZE_MAX || off > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX - off)
		return placefs_error_set(err, -EFBIG, PLACEFS_E_USAGE,
		                         "%s: %llu bytes at %llu do not fit a file", what,
		                         (unsigned long long)n, (unsigned long long)off);
	rc = placefs_io_pwrite_full(fd, buf, (size_t)n, off);
	if (rc != 0)
		return placefs_error_set(
		        err, rc, PLACEFS_E_IO, "%s: cannot write %llu bytes at offset %llu: %s",
		        what, (unsigned long long)n, (unsigned long long)off, strerror(-rc));
	return 0;
}

/* Ring -> shm destination for a backend without ring_to_fd: through a heap buffer. */
static int ring_to_fd_bounce(struct placefs_backend *be, uint64_t ring_off, int fd, uint64_t off,
                             uint64_t n, struct placefs_error *err)
{
	uint64_t len = n < DEST_BOUNCE_MAX ? n : DEST_BOUNCE_MAX, done;
	uint8_t *buf = malloc((size_t)len);
	int rc = 0;

	if (!buf)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM,
		                         "%s: out of memory for a %llu-byte copy buffer",
		                         be->info.name, (unsigned long long)len);
	for (done = 0; done < n && rc == 0; done += len) {
		if (len > n - done)
			len = n - done;
		rc = be->ops->ring_to_host(be, ring_off + done, buf, len, err);
		if (rc == 0)
			rc = placefs__pwrite_dest(fd, buf, len, off + done, "destination shm", err);
	}
	free(buf);
	return rc;
}

/*
 * Finds or opens the CUDA IPC handle of d and takes a reference on it. An
 * import (cudaIpcOpenMemHandle: milliseconds, more for a large allocation)
 * runs without the lock, so that copies into destinations already imported
 * go on meanwhile: the importer puts a pending entry in the cache first, and
 * a request for the same handle waits for it rather than opening the handle
 * a second time (which would cost a second import and leave two entries for
 * one key). If the import fails, the entry leaves the cache and each waiter
 * tries for itself, so that each gets its own error. Entries evicted to make
 * room are closed after the lock is released (dest_bury()).
 */
static int dest_get_ipc(struct placefs_backend *be, const struct placefs_dest *d,
                        struct placefs__dest_entry **out, struct placefs_error *err)
{
	struct placefs__dest_entry *e, *grave = NULL;
	uint64_t t0, bytes = 0;
	void *p = NULL;
	int rc;

	pthread_mutex_lock(&be->dest_lock);
	while ((e = dest_find(be, d->kind, d->handle, d->handle_bytes)) != NULL) {
		if (!e->pending)
			goto found;
		be->dest_import_waits++;
		e->refs++; /* keeps e while it waits, whatever becomes of it */
		while (e->pending)
			pthread_cond_wait(&be->dest_cond, &be->dest_lock);
		e->refs--;
		if (!e->detached)
			goto found;
		if (e->refs == 0)
			dest_bury(&grave, e); /* the import failed; try it here */
	}
	dest_evict(be, &grave);
	e = dest_new(be, d->kind, d->handle, d->handle_bytes);
	if (!e) {
		pthread_mutex_unlock(&be->dest_lock);
		dest_bury_all(be, grave);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	}
	e->pending = true;
	e->refs = 1; /* neither evicted nor swept while pending */
	dest_attach(be, e);
	pthread_mutex_unlock(&be->dest_lock);
	dest_bury_all(be, grave);
	grave = NULL;

	t0 = placefs_clock_ns();
	rc = be->ops->ipc_open(be, d->handle, &p, &bytes, err);
	t0 = placefs_clock_ns() - t0;

	pthread_mutex_lock(&be->dest_lock);
	e->pending = false;
	e->refs--;
	be->dest_imports++;
	be->dest_import_ns += t0;
	pthread_cond_broadcast(&be->dest_cond);
	if (rc != 0) {
		/* Out of the cache; the last request that waited for it drops it, else here. */
		bool drop = e->refs == 0;

		dest_detach(be, e);
		pthread_mutex_unlock(&be->dest_lock);
		if (drop)
			dest_drop(be, e);
		return rc;
	}
	e->ptr = p;
	e->bytes = bytes;
found:
	dest_ref(be, e, d->pid);
	pthread_mutex_unlock(&be->dest_lock);
	dest_bury_all(be, grave);
	*out = e;
	return 0;
}

/* Checks dest and the n bytes at its offset; 0 or a negative errno with a message. */
static int dest_check(const struct placefs_backend *be, const struct placefs_dest *dest, uint64_t n,
                      struct placefs_error *err)
{
	int rc;

	switch (dest->kind) {
	case PLACEFS_IOC_HANDLE_HOST_SHM:
		rc = placefs_backend_shm_name_check(dest->handle, dest->handle_bytes, err);
		if (rc != 0)
			return rc;
		break;
	case PLACEFS_IOC_HANDLE_CUDA_IPC:
		if (dest->handle_bytes != PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "a CUDA IPC destination handle is %d bytes, "
			                         "not %u",
			                         PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES,
			                         dest->handle_bytes);
		if (!be->ops->ipc_open)
			return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
			                         "%s cannot copy into a CUDA IPC destination",
			                         be->info.name);
		break;
	default:
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "unknown destination kind %u", dest->kind);
	}
	if (dest->offset > dest->size || n > dest->size - dest->offset)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "destination too small: offset %llu + %llu bytes > size "
		                         "%llu",
		                         (unsigned long long)dest->offset, (unsigned long long)n,
		                         (unsigned long long)dest->size);
	return 0;
}

static void dest_release(struct placefs_backend *be, struct placefs__dest_entry *e)
{
	bool last;

	pthread_mutex_lock(&be->dest_lock);
	last = --e->refs == 0 && e->detached;
	pthread_mutex_unlock(&be->dest_lock);
	if (last)
		dest_drop(be, e); /* out of the cache and unused: nobody else can reach it */
}

/*
 * Finds or imports dest's cache entry and takes a reference on it, for
 * writing n bytes at dest->offset. A CUDA IPC destination's size is the
 * client's word (dest_check() holds the range to it); the allocation's is
 * the driver's, and a range past it would write into whatever the daemon
 * has mapped next, another client's memory included: refused.
 */
static int dest_acquire(struct placefs_backend *be, const struct placefs_dest *dest, uint64_t n,
                        struct placefs__dest_entry **out, struct placefs_error *err)
{
	int rc;

	if (dest->kind == PLACEFS_IOC_HANDLE_HOST_SHM)
		return dest_get_shm(be, dest, out, err);
	rc = dest_get_ipc(be, dest, out, err);
	if (rc != 0)
		return rc;
	if (dest->offset > (*out)->bytes || n > (*out)->bytes - dest->offset) {
		uint64_t bytes = (*out)->bytes;

		dest_release(be, *out);
		*out = NULL;
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "destination too small: offset %llu + %llu bytes > the "
		                         "%llu-byte CUDA allocation its handle names (dest_size "
		                         "%llu)",
		                         (unsigned long long)dest->offset, (unsigned long long)n,
		                         (unsigned long long)bytes, (unsigned long long)dest->size);
	}
	return 0;
}

int placefs_backend_copy_out(struct placefs_backend *be, uint64_t ring_off, uint64_t n,
                             const struct placefs_dest *dest, struct placefs_error *err)
{
	struct placefs__dest_entry *e = NULL;
	int rc;

	rc = ring_range(be, ring_off, n, err);
	if (rc == 0)
		rc = dest_check(be, dest, n, err);
	if (rc != 0 || n == 0)
		return rc;
	rc = dest_acquire(be, dest, n, &e, err);
	if (rc != 0)
		return rc;

	/* The copy runs unlocked; the reference keeps the descriptor or mapping alive. */
	if (dest->kind == PLACEFS_IOC_HANDLE_HOST_SHM && be->ops->ring_to_fd)
		rc = be->ops->ring_to_fd(be, ring_off, e->fd, dest->offset, n, err);
	else if (dest->kind == PLACEFS_IOC_HANDLE_HOST_SHM)
		rc = ring_to_fd_bounce(be, ring_off, e->fd, dest->offset, n, err);
	else
		rc = be->ops->ring_to_device(be, ring_off, (uint8_t *)e->ptr + dest->offset, n,
		                             err);
	dest_release(be, e);
	return rc;
}

struct placefs_backend_target {
	struct placefs__dest_entry *e;
	uint32_t kind;
	uint64_t lo, hi; /* the destination bytes this target may write */
};

int placefs_backend_target_open(struct placefs_backend *be, const struct placefs_dest *dest,
                                uint64_t n, struct placefs_backend_target **out,
                                struct placefs_error *err)
{
	struct placefs_backend_target *t;
	int rc;

	*out = NULL;
	rc = dest_check(be, dest, n, err);
	if (rc != 0)
		return rc;
	if (dest->kind == PLACEFS_IOC_HANDLE_CUDA_IPC && !be->ops->chunk_to_device)
		return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
		                         "%s cannot copy into a CUDA IPC destination",
		                         be->info.name);
	t = calloc(1, sizeof(*t));
	if (!t)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	rc = dest_acquire(be, dest, n, &t->e, err);
	if (rc != 0) {
		free(t);
		return rc;
	}
	t->kind = dest->kind;
	t->lo = dest->offset;
	t->hi = dest->offset + n;
	*out = t;
	return 0;
}

int placefs_backend_chunk_to_target(struct placefs_backend *be, unsigned i,
                                    struct placefs_backend_target *t, uint64_t off, uint64_t n,
                                    struct placefs_error *err)
{
	int rc = chunk_check(be, i, n, err);

	if (rc != 0)
		return rc;
	if (!t || off < t->lo || off > t->hi || n > t->hi - off)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: destination range %llu+%llu is outside the range "
		                         "opened",
		                         be->info.name, (unsigned long long)off,
		                         (unsigned long long)n);
	if (n == 0)
		return 0;
	if (t->kind == PLACEFS_IOC_HANDLE_HOST_SHM)
		return placefs__pwrite_dest(t->e->fd,
		                            be->host_buf + (uint64_t)i * be->info.chunk_bytes, n,
		                            off, "destination shm", err);
	return be->ops->chunk_to_device(be, i, (uint8_t *)t->e->ptr + off, n, err);
}

void placefs_backend_target_close(struct placefs_backend *be, struct placefs_backend_target *t)
{
	if (!t)
		return;
	dest_release(be, t->e);
	free(t);
}

int placefs_backend_dest_device(struct placefs_backend *be, const struct placefs_dest *dest,
                                struct placefs_device *out, struct placefs_error *err)
{
	struct placefs__dest_entry *e = NULL;
	int rc, device = -1;

	if (dest->kind != PLACEFS_IOC_HANDLE_CUDA_IPC)
		return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
		                         "a destination of kind %u lives on no device", dest->kind);
	if (dest->handle_bytes != PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "a CUDA IPC destination handle is %d bytes, not %u",
		                         PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES, dest->handle_bytes);
	if (!be->ops->ipc_open || !be->ops->ptr_device)
		return placefs_error_set(err, -EOPNOTSUPP, PLACEFS_E_USAGE,
		                         "%s cannot copy into a CUDA IPC destination",
		                         be->info.name);
	rc = dest_acquire(be, dest, 0, &e, err);
	if (rc != 0)
		return rc;
	rc = be->ops->ptr_device(be, e->ptr, &device, err);
	dest_release(be, e);
	if (rc != 0)
		return rc;
	out->kind = PLACEFS_DEVICE_CUDA;
	out->index = device;
	return placefs_device_check(*out, err);
}
