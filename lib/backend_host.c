/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend_i.h"

/*
 * The host backend: the ring is a POSIX shared-memory object that other
 * processes map by name (the export handle), the bounce chunks are aligned
 * heap memory and every copy is a synchronous memcpy. It runs the same
 * protocol as the CUDA backend so the whole staging path can be tested on
 * machines without a GPU.
 */

struct host_priv {
	uint8_t *ring;
	char name[64];
};

static unsigned host_seq;

static int host_open(struct placefs_backend *be, int device, struct placefs_error *err)
{
	struct host_priv *hp;
	uint64_t ring_bytes = be->info.ring_bytes;
	unsigned seq;
	int fd, rc;

	(void)device;
	if (ring_bytes > (uint64_t)SIZE_MAX || ring_bytes > (uint64_t)INT64_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "host: ring of %llu bytes is too large",
		                         (unsigned long long)ring_bytes);
	hp = calloc(1, sizeof(*hp));
	if (!hp)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "host: out of memory");
	seq = __atomic_fetch_add(&host_seq, 1, __ATOMIC_RELAXED);
	snprintf(hp->name, sizeof(hp->name), "/placefs-%ld-%u", (long)getpid(), seq);

	fd = shm_open(hp->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "host: cannot create shared memory \"%s\": %s", hp->name,
		                       strerror(errno));
		goto fail_shm;
	}
	if (ftruncate(fd, (off_t)ring_bytes) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "host: cannot size shared memory \"%s\" to %llu bytes: %s",
		                       hp->name, (unsigned long long)ring_bytes, strerror(errno));
		goto fail_size;
	}
	hp->ring = mmap(NULL, (size_t)ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (hp->ring == MAP_FAILED) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "host: cannot map the %llu-byte ring \"%s\": %s",
		                       (unsigned long long)ring_bytes, hp->name, strerror(errno));
		goto fail_size;
	}
	close(fd);
	fd = -1;

	be->host_buf = aligned_alloc(4096, be->info.host_buffer_bytes);
	if (!be->host_buf) {
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM,
		                       "host: cannot allocate %llu bytes of bounce buffers",
		                       (unsigned long long)be->info.host_buffer_bytes);
		goto fail_buf;
	}

	be->priv = hp;
	be->info.handle_kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	be->info.handle_bytes = (uint32_t)strlen(hp->name) + 1;
	memcpy(be->info.handle, hp->name, be->info.handle_bytes);
	snprintf(be->info.name, sizeof(be->info.name), "host (%s)", hp->name);
	return 0;

fail_buf:
	munmap(hp->ring, (size_t)ring_bytes);
fail_size:
	if (fd >= 0)
		close(fd);
	shm_unlink(hp->name);
fail_shm:
	free(hp);
	return rc;
}

static void host_close(struct placefs_backend *be)
{
	struct host_priv *hp = be->priv;

	free(be->host_buf);
	munmap(hp->ring, (size_t)be->info.ring_bytes);
	shm_unlink(hp->name);
	free(hp);
}

static int host_chunk_to_ring(struct placefs_backend *be, unsigned i, uint64_t ring_off, uint64_t n,
                              struct placefs_error *err)
{
	struct host_priv *hp = be->priv;

	(void)err;
	memcpy(hp->ring + ring_off, be->host_buf + (uint64_t)i * be->info.chunk_bytes, n);
	return 0;
}

static int host_chunk_poll(struct placefs_backend *be, unsigned i)
{
	(void)be;
	(void)i;
	return 1; /* copies are synchronous */
}

static int host_chunk_wait(struct placefs_backend *be, unsigned i, struct placefs_error *err)
{
	(void)be;
	(void)i;
	(void)err;
	return 0;
}

static int host_ring_to_host(struct placefs_backend *be, uint64_t ring_off, void *dst, uint64_t n,
                             struct placefs_error *err)
{
	struct host_priv *hp = be->priv;

	(void)err;
	memcpy(dst, hp->ring + ring_off, n);
	return 0;
}

const struct placefs_backend_ops placefs__host_ops = {
        .name = "host",
        .open = host_open,
        .close = host_close,
        .chunk_to_ring = host_chunk_to_ring,
        .chunk_poll = host_chunk_poll,
        .chunk_wait = host_chunk_wait,
        .ring_to_host = host_ring_to_host,
        /* No CUDA here: CUDA IPC destinations are refused with -EOPNOTSUPP. */
        .ipc_open = NULL,
        .ipc_close = NULL,
        .ring_to_device = NULL,
};
