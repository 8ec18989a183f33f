/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
	int fd; /* the ring's object, open for the flock that marks it in use */
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
	/* Held until the ring goes: placefs_shm_remove_stale() never takes a locked object. */
	if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "host: cannot lock shared memory \"%s\": %s", hp->name,
		                       strerror(errno));
		goto fail_size;
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
	hp->fd = fd;

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
	shm_unlink(hp->name);
	close(fd);
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
	close(hp->fd);
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

/* ---- stale objects ----------------------------------------------------------- */

#define SHM_DIR "/dev/shm"

/* Skips "<digits>" at *p; the value, or -1 when there are none or too many. */
static long long scan_num(const char **p)
{
	long long v = 0;
	int n = 0;

	while (**p >= '0' && **p <= '9') {
		if (++n > 10)
			return -1;
		v = v * 10 + (**p - '0');
		(*p)++;
	}
	return n ? v : -1;
}

/*
 * The pid in a name placefs gives shared memory: "placefs-<pid>-<n>" (a host
 * ring) or "placefs-client-<pid>-<n>" (lib/client.c); 0 for any other name.
 */
static pid_t shm_name_pid(const char *name)
{
	const char *p;
	long long pid;

	if (strncmp(name, "placefs-", 8) != 0)
		return 0;
	p = name + 8;
	if (strncmp(p, "client-", 7) == 0)
		p += 7;
	pid = scan_num(&p);
	if (pid <= 0 || pid > INT_MAX || *p++ != '-' || scan_num(&p) < 0 || *p != '\0')
		return 0;
	return (pid_t)pid;
}

int placefs_shm_remove_stale(void (*report)(const char *name, uint64_t bytes, void *arg), void *arg,
                             struct placefs_error *err)
{
	struct dirent *de;
	int n = 0;
	DIR *d;

	d = opendir(SHM_DIR);
	if (!d) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot list %s: %s", SHM_DIR,
		                         strerror(errno));
	}
	while ((de = readdir(d)) != NULL) {
		pid_t pid = shm_name_pid(de->d_name);
		struct stat st;
		int fd;

		if (pid == 0 || pid == getpid())
			continue;
		/* EPERM means alive (another user's process): only ESRCH is gone. */
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		/*
		 * A live owner holds a flock: a process of another PID namespace
		 * whose pid means nothing here. The lock is kept over the unlink,
		 * so no owner can take the object meanwhile.
		 */
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0 && unlinkat(dirfd(d), de->d_name, 0) == 0) {
			n++;
			if (report)
				report(de->d_name, (uint64_t)st.st_size, arg);
		}
		close(fd);
	}
	closedir(d);
	return n;
}
