/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "staging/backend_i.h"
#include "common/io.h"
#include "common/size.h"

/*
 * The host backend: the ring is a POSIX shared-memory object that other
 * processes map by name (the export handle), the bounce chunks are aligned
 * heap memory and every copy is a synchronous memcpy (into the ring) or
 * pwrite() (out to a client's shm destination). It runs the same protocol as
 * the CUDA backend so the whole staging path can be tested on machines
 * without a GPU.
 *
 * Every byte is reserved at creation: the ring with posix_fallocate() (a
 * sparse tmpfs object would raise SIGBUS at the first page that /dev/shm
 * cannot supply), on a thread while the bounce chunks are written once.
 */

#define SHM_DIR   "/dev/shm"
#define RING_PAGE 4096ULL

struct host_priv {
	uint8_t *ring;
	int fd; /* the ring's object, open for the flock that marks it in use */
	char name[64];
};

static int random_u64(uint64_t *r)
{
	return placefs_io_random(r, sizeof(*r));
}

int (*placefs__shm_random)(uint64_t *r) = random_u64;

/*
 * Creates the ring's object under a fresh unguessable name (backend_i.h),
 * retrying names that exist; the descriptor, or a negative errno.
 */
static int ring_create(char *name, size_t len, struct placefs_error *err)
{
	unsigned t;
	uint64_t r;
	int fd, rc;

	for (t = 0; t < PLACEFS__SHM_NAME_TRIES; t++) {
		rc = placefs__shm_random(&r);
		if (rc != 0)
			return placefs_error_set(
			        err, rc, PLACEFS_E_IO,
			        "host: no random bytes for a shared memory name: %s",
			        strerror(-rc));
		snprintf(name, len, "/placefs-%ld-%llu", (long)getpid(), (unsigned long long)r);
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return placefs_error_set(err, -errno, PLACEFS_E_IO,
			                         "host: cannot create shared memory \"%s\": %s",
			                         name, strerror(errno));
	}
	return placefs_error_set(err, -EEXIST, PLACEFS_E_IO,
	                         "host: cannot create shared memory: %u random names in %s "
	                         "were all taken",
	                         PLACEFS__SHM_NAME_TRIES, SHM_DIR);
}

/*
 * Free bytes of /dev/shm for an unprivileged writer; UINT64_MAX when statvfs
 * cannot say, or says nothing (a tmpfs mounted with size=0 has no limit and
 * reports 0 blocks).
 */
static uint64_t shm_free_bytes(uint64_t *total)
{
	struct statvfs vs;

	*total = 0;
	if (statvfs(SHM_DIR, &vs) != 0 || vs.f_blocks == 0)
		return UINT64_MAX;
	*total = (uint64_t)vs.f_blocks * vs.f_frsize;
	return (uint64_t)vs.f_bavail * vs.f_frsize;
}

static int reserve_fail(const char *name, uint64_t bytes, int rc, struct placefs_error *err)
{
	char want[32], have[32], all[32];
	uint64_t total, avail = shm_free_bytes(&total);

	placefs_size_format(bytes, want, sizeof(want));
	if (avail == UINT64_MAX)
		return placefs_error_set(err, rc, PLACEFS_E_IO,
		                         "host: cannot reserve the %llu-byte (%s) ring \"%s\" in "
		                         "%s: %s",
		                         (unsigned long long)bytes, want, name, SHM_DIR,
		                         strerror(-rc));
	placefs_size_format(avail, have, sizeof(have));
	placefs_size_format(total, all, sizeof(all));
	return placefs_error_set(err, rc, PLACEFS_E_IO,
	                         "host: cannot reserve the %llu-byte (%s) ring \"%s\": %s has "
	                         "%llu bytes (%s) free of %s: %s",
	                         (unsigned long long)bytes, want, name, SHM_DIR,
	                         (unsigned long long)avail, have, all, strerror(-rc));
}

/* posix_fallocate() of [off, off + len) of fd, retried on EINTR: 0 or an errno. */
static int fallocate_range(int fd, uint64_t off, uint64_t len)
{
	int rc;

	do
		rc = posix_fallocate(fd, (off_t)off, (off_t)len);
	while (rc == EINTR);
	return rc;
}

struct reserve {
	pthread_t th;
	int fd;
	uint64_t from, bytes;
	int rc; /* posix_fallocate()'s: 0 or an errno */
};

static void *reserve_main(void *arg)
{
	struct reserve *r = arg;

	r->rc = r->bytes > r->from ? fallocate_range(r->fd, r->from, r->bytes - r->from) : 0;
	return NULL;
}

/*
 * Allocates every page of the ring's object up to `bytes` now, from `from`
 * on (the pages before are reserved already): refused at once when /dev/shm
 * has less free space than that, else posix_fallocate() (which also catches
 * a /dev/shm filled meanwhile), on a thread of its own while this one
 * touches the bounce buffers (bounce_bytes at bounce), which it does in
 * every case. Both are page allocation and zeroing; side by side they take
 * the longer of the two, not the sum.
 */
static int ring_reserve(int fd, const char *name, uint64_t from, uint64_t bytes, uint8_t *bounce,
                        uint64_t bounce_bytes, struct placefs_error *err)
{
	struct reserve r = {.fd = fd, .from = from, .bytes = bytes};
	uint64_t total;
	bool threaded;

	if (bytes > from && shm_free_bytes(&total) < bytes - from)
		return reserve_fail(name, bytes, -ENOSPC, err);
	threaded = pthread_create(&r.th, NULL, reserve_main, &r) == 0;
	if (bounce_bytes)
		memset(bounce, 0, bounce_bytes);
	if (threaded)
		pthread_join(r.th, NULL);
	else
		reserve_main(&r);
	if (r.rc != 0)
		return reserve_fail(name, bytes, -r.rc, err);
	return 0;
}

/* ---- a ring reserved ahead (backend.h) --------------------------------------- */

/* The reservation thread's step: how soon it stops once the size is known. */
#define RESERVE_STEP (16ULL << 20)

struct placefs_host_reserve {
	pthread_t th;
	bool started; /* th runs (or ran) host_reserve_main */
	bool joined;
	bool adopted; /* fd, name and bounce belong to a backend now */
	int fd;
	char name[64];
	uint64_t target;   /* bytes to reserve; atomic: lowered by the adopter */
	uint64_t reserved; /* bytes [0, reserved) reserved; the thread's until joined */
	uint8_t *bounce;
	uint64_t bounce_bytes;
};

static void *host_reserve_main(void *arg)
{
	struct placefs_host_reserve *r = arg;
	uint64_t n;

	if (r->bounce)
		memset(r->bounce, 0, r->bounce_bytes);
	while (r->reserved < __atomic_load_n(&r->target, __ATOMIC_ACQUIRE)) {
		n = __atomic_load_n(&r->target, __ATOMIC_ACQUIRE) - r->reserved;
		if (n > RESERVE_STEP)
			n = RESERVE_STEP;
		/* A failure is the adopter's to meet again (and report) for what it needs. */
		if (fallocate_range(r->fd, r->reserved, n) != 0)
			break;
		r->reserved += n;
	}
	return NULL;
}

int placefs_host_reserve_start(uint64_t guess, uint64_t host_buffer,
                               struct placefs_host_reserve **out, struct placefs_error *err)
{
	struct placefs_host_reserve *r;
	uint64_t total, avail;
	int rc;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "host: out of memory");
	r->fd = ring_create(r->name, sizeof(r->name), err);
	if (r->fd < 0) {
		rc = r->fd;
		goto fail;
	}
	if (flock(r->fd, LOCK_SH | LOCK_NB) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "host: cannot lock shared memory \"%s\": %s", r->name,
		                       strerror(errno));
		goto fail_shm;
	}
	/*
	 * Nothing ahead for a guess over half of what /dev/shm has free: the
	 * adopter reserves it, or refuses it at once, as without a reservation.
	 */
	avail = shm_free_bytes(&total);
	if (guess > avail / 2)
		guess = 0;
	r->target = guess / RING_PAGE * RING_PAGE;
	if (host_buffer == 0)
		host_buffer = PLACEFS_HOST_BUFFER_DEFAULT_HOST;
	if (host_buffer <= PLACEFS_HOST_BUFFER_MAX) {
		r->bounce_bytes = (host_buffer + RING_PAGE - 1) / RING_PAGE * RING_PAGE;
		r->bounce = aligned_alloc(RING_PAGE, r->bounce_bytes); /* NULL: made at adoption */
	}
	/* No thread: the adopter reserves it all, as without a reservation. */
	r->started = pthread_create(&r->th, NULL, host_reserve_main, r) == 0;
	*out = r;
	return 0;

fail_shm:
	shm_unlink(r->name);
	close(r->fd);
fail:
	free(r);
	return rc;
}

static void reserve_join(struct placefs_host_reserve *r)
{
	if (r->started && !r->joined) {
		pthread_join(r->th, NULL);
		r->joined = true;
	}
}

void placefs_host_reserve_free(struct placefs_host_reserve *r)
{
	if (!r)
		return;
	__atomic_store_n(&r->target, 0, __ATOMIC_RELEASE);
	reserve_join(r);
	if (!r->adopted) {
		shm_unlink(r->name);
		close(r->fd);
	}
	free(r->bounce); /* NULL once a backend took it */
	free(r);
}

/*
 * Takes r's object for a ring of `bytes` and its bounce memory when large
 * enough: the thread stops at `bytes`, the object is cut to it when more
 * was reserved and reserved up to it when less (a /dev/shm that cannot
 * hold it fails as ring_reserve() fails). On success fd and name are hp's
 * and be->host_buf is set (touched); on failure nothing changed hands but
 * what r still frees.
 */
static int reserve_adopt(struct placefs_host_reserve *r, struct placefs_backend *be,
                         struct host_priv *hp, int *fdp, struct placefs_error *err)
{
	uint64_t bytes = be->info.ring_bytes, need = be->info.host_buffer_bytes;
	uint8_t *fresh = NULL;
	int rc;

	if (__atomic_load_n(&r->target, __ATOMIC_ACQUIRE) > bytes)
		__atomic_store_n(&r->target, bytes, __ATOMIC_RELEASE);
	reserve_join(r);
	if (r->reserved > bytes && ftruncate(r->fd, (off_t)bytes) != 0)
		return placefs_error_set(err, -errno, PLACEFS_E_IO,
		                         "host: cannot cut the ring \"%s\" to %llu bytes: %s",
		                         r->name, (unsigned long long)bytes, strerror(errno));
	if (!r->bounce || r->bounce_bytes < need) {
		fresh = aligned_alloc(RING_PAGE, need);
		if (!fresh)
			return placefs_error_set(
			        err, -ENOMEM, PLACEFS_E_NOMEM,
			        "host: cannot allocate %llu bytes of bounce buffers",
			        (unsigned long long)need);
	}
	/* The rest of the ring, beside the touch of bounce memory made now. */
	rc = ring_reserve(r->fd, r->name, r->reserved < bytes ? r->reserved : bytes, bytes, fresh,
	                  fresh ? need : 0, err);
	if (rc != 0) {
		free(fresh);
		return rc;
	}
	if (fresh) {
		be->host_buf = fresh;
	} else {
		be->host_buf = r->bounce;
		r->bounce = NULL;
	}
	memcpy(hp->name, r->name, sizeof(hp->name));
	*fdp = r->fd;
	r->adopted = true;
	return 0;
}

static int host_open(struct placefs_backend *be, int device, struct placefs_error *err)
{
	struct host_priv *hp;
	uint64_t ring_bytes = be->info.ring_bytes;
	int fd = -1, rc;

	(void)device;
	if (ring_bytes > (uint64_t)SIZE_MAX || ring_bytes > (uint64_t)INT64_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "host: ring of %llu bytes is too large",
		                         (unsigned long long)ring_bytes);
	hp = calloc(1, sizeof(*hp));
	if (!hp)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "host: out of memory");
	if (be->host_reserve && !be->host_reserve->adopted) {
		rc = reserve_adopt(be->host_reserve, be, hp, &fd, err);
		if (rc != 0) {
			free(hp);
			return rc;
		}
		goto map;
	}
	fd = ring_create(hp->name, sizeof(hp->name), err);
	if (fd < 0) {
		rc = fd;
		goto fail_shm;
	}
	/* Held until the ring goes: placefs_shm_remove_stale() never takes a locked object. */
	if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "host: cannot lock shared memory \"%s\": %s", hp->name,
		                       strerror(errno));
		goto fail_size;
	}
	be->host_buf = aligned_alloc(RING_PAGE, be->info.host_buffer_bytes);
	if (!be->host_buf) {
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM,
		                       "host: cannot allocate %llu bytes of bounce buffers",
		                       (unsigned long long)be->info.host_buffer_bytes);
		goto fail_size;
	}
	/*
	 * Every ring page allocated and the bounce buffers touched once: the
	 * pages are the process's from now on, not at the first stage.
	 */
	rc = ring_reserve(fd, hp->name, 0, ring_bytes, be->host_buf, be->info.host_buffer_bytes,
	                  err);
	if (rc != 0)
		goto fail_buf;
map:
	hp->ring = mmap(NULL, (size_t)ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (hp->ring == MAP_FAILED) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "host: cannot map the %llu-byte ring \"%s\": %s",
		                       (unsigned long long)ring_bytes, hp->name, strerror(errno));
		goto fail_buf;
	}
	hp->fd = fd;

	be->priv = hp;
	be->info.handle_kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	be->info.handle_bytes = (uint32_t)strlen(hp->name) + 1;
	memcpy(be->info.handle, hp->name, be->info.handle_bytes);
	snprintf(be->info.name, sizeof(be->info.name), "host (%s)", hp->name);
	return 0;

fail_buf:
	free(be->host_buf);
	be->host_buf = NULL;
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

/* Straight from the ring (reserved, never shrunk) into the destination's file. */
static int host_ring_to_fd(struct placefs_backend *be, uint64_t ring_off, int fd, uint64_t off,
                           uint64_t n, struct placefs_error *err)
{
	struct host_priv *hp = be->priv;

	return placefs__pwrite_dest(fd, hp->ring + ring_off, n, off, "destination shm", err);
}

/*
 * The ring's object is the daemon's, mode 0600 from creation; the daemon
 * lets the borrowers it admits read it (and only read: they map it
 * PROT_READ, and only the daemon writes the ring).
 */
static int host_share(const struct placefs_backend *be, gid_t gid, mode_t mode,
                      struct placefs_error *err)
{
	const struct host_priv *hp = be->priv;

	/*
	 * An access ACL (inherited from a default ACL of /dev/shm) would let in
	 * its named users once the group bits, its mask, allow reading: the
	 * owner, group and mode alone decide.
	 */
	if (fremovexattr(hp->fd, "system.posix_acl_access") != 0 && errno != ENODATA &&
	    errno != ENOTSUP && errno != EOPNOTSUPP)
		return placefs_error_set(err, -errno, PLACEFS_E_IO,
		                         "host: cannot remove the ACL of the ring \"%s\": %s",
		                         hp->name, strerror(errno));
	if (gid != (gid_t)-1 && fchown(hp->fd, (uid_t)-1, gid) != 0)
		return placefs_error_set(err, -errno, PLACEFS_E_IO,
		                         "host: cannot give the ring \"%s\" group %u: %s", hp->name,
		                         (unsigned)gid, strerror(errno));
	if (fchmod(hp->fd, mode) != 0)
		return placefs_error_set(err, -errno, PLACEFS_E_IO,
		                         "host: cannot give the ring \"%s\" mode %04o: %s",
		                         hp->name, (unsigned)mode, strerror(errno));
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
        .ring_to_fd = host_ring_to_fd,
        /* No CUDA here: CUDA IPC destinations are refused with -EOPNOTSUPP. */
        .ipc_open = NULL,
        .ipc_close = NULL,
        .ring_to_device = NULL,
        .share = host_share,
};

/* ---- stale objects ----------------------------------------------------------- */

/*
 * Skips "<digits>" at *p, at most max of them; the value (saturated at
 * LLONG_MAX), or -1 when there are none or more than max.
 */
static long long scan_num(const char **p, int max)
{
	long long v = 0;
	int n = 0;

	while (**p >= '0' && **p <= '9') {
		if (++n > max)
			return -1;
		if (v <= (LLONG_MAX - 9) / 10)
			v = v * 10 + (**p - '0');
		else
			v = LLONG_MAX;
		(*p)++;
	}
	return n ? v : -1;
}

/*
 * The pid in a name placefs gives shared memory: "placefs-<pid>-<n>" (a host
 * ring; n is random now, a small counter in older versions) or
 * "placefs-client-<pid>-<n>" (lib/client/client.c, the same); 0 for any other name.
 * <pid> has at most 10 digits, <n> at most 20 (a 64-bit number).
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
	pid = scan_num(&p, 10);
	if (pid <= 0 || pid > INT_MAX || *p++ != '-' || scan_num(&p, 20) < 0 || *p != '\0')
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
