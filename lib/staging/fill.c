/* SPDX-License-Identifier: MIT */
/* fill: parallel copies from a file into a destination file (see fill.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common/clock.h"
#include "staging/fill.h"
#include "common/io.h"

#define PIECE_MIN  (64u << 10)
#define PIECE_MAX  (1ull << 30)
#define PIPE_BYTES (1u << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* One placefs_filler_copy() call: it lives on the caller's stack. */
struct job {
	int src, dst;
	uint64_t src_off, dst_off, n;
	uint8_t *dmap;     /* the destination's bytes [dst_off, dst_off + n), or NULL */
	uint64_t next;     /* bytes handed out as pieces; lock held */
	unsigned inflight; /* pieces being moved; lock held */
	int rc;            /* first error; lock held */
	struct placefs_error err;
	const int *cancel;
	const struct timespec *deadline;
	const char *name;
	const char *dest_name; /* the destination's shm name, or NULL */
	pthread_cond_t done;   /* inflight reached 0 after the last piece */
	struct job *next_job;
};

/* What one thread needs to move pieces: a pipe for splice, a buffer for pread. */
struct mover {
	int pipe_r, pipe_w;
	size_t pipe_bytes;
	void *buf;
};

struct placefs_filler {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job with pieces left was queued, or stop */
	struct job *jobs;    /* FIFO: the oldest first */
	bool stop;
	unsigned nthreads;
	pthread_t *threads;
	uint64_t piece;
	uintptr_t page;
	bool populate; /* $PLACEFS_FILL_POPULATE=1: MADV_POPULATE_WRITE each piece first */
	enum placefs_fill_method method;
	_Atomic uint64_t copies, bytes, errors, ns, mapped, spliced, bounced, busy;
};

static void mover_init(struct mover *mv)
{
	memset(mv, 0, sizeof(*mv));
	mv->pipe_r = mv->pipe_w = -1;
}

static void mover_close_pipe(struct mover *mv)
{
	if (mv->pipe_r >= 0)
		close(mv->pipe_r);
	if (mv->pipe_w >= 0)
		close(mv->pipe_w);
	mv->pipe_r = mv->pipe_w = -1;
}

static void mover_release(struct mover *mv)
{
	mover_close_pipe(mv);
	free(mv->buf);
	mv->buf = NULL;
}

static int mover_pipe(struct mover *mv)
{
	int p[2], sz;

	if (mv->pipe_r >= 0)
		return 0;
	if (pipe2(p, O_CLOEXEC) != 0)
		return -errno;
	mv->pipe_r = p[0];
	mv->pipe_w = p[1];
	/* 1 MiB is the default pipe-max-size, so this works unprivileged; else keep 64 KiB. */
	(void)fcntl(mv->pipe_w, F_SETPIPE_SZ, PIPE_BYTES);
	sz = fcntl(mv->pipe_w, F_GETPIPE_SZ);
	mv->pipe_bytes = sz > 0 ? (size_t)sz : 65536;
	return 0;
}

static int set_err(struct placefs_error *e, const struct job *j, int rc, const char *what,
                   uint64_t off)
{
	return placefs_error_set(e, rc, PLACEFS_E_IO, "%s: %s at byte %llu: %s",
	                         j->name ? j->name : "the range", what, (unsigned long long)off,
	                         strerror(rc < 0 ? -rc : rc));
}

/* pread + pwrite of [off, off + len) of the job (off relative to the job). */
static int move_bounce(struct placefs_filler *f, struct mover *mv, const struct job *j,
                       uint64_t off, uint64_t len, struct placefs_error *e)
{
	while (len) {
		size_t k = len < f->piece ? (size_t)len : (size_t)f->piece;
		ssize_t r;
		int rc;

		if (!mv->buf) {
			mv->buf = malloc((size_t)f->piece);
			if (!mv->buf)
				return placefs_error_set(e, -ENOMEM, PLACEFS_E_NOMEM,
				                         "out of memory");
		}
		r = placefs_io_pread_full(j->src, mv->buf, k, j->src_off + off);
		if (r < 0)
			return set_err(e, j, (int)r, "cannot read the source", j->src_off + off);
		if ((size_t)r < k)
			return placefs_error_set(
			        e, -EIO, PLACEFS_E_IO,
			        "%s: the source ends at byte %llu, %llu bytes early",
			        j->name ? j->name : "the range",
			        (unsigned long long)(j->src_off + off + (uint64_t)r),
			        (unsigned long long)(k - (size_t)r + (len - k)));
		rc = placefs_io_pwrite_full(j->dst, mv->buf, k, j->dst_off + off);
		if (rc < 0)
			return set_err(e, j, rc, "cannot write the destination", j->dst_off + off);
		atomic_fetch_add_explicit(&f->bounced, k, memory_order_relaxed);
		off += k;
		len -= k;
	}
	return 0;
}

/*
 * splice() of [off, off + len): source pages into the pipe by reference,
 * then into the destination (one copy). Returns 1 when the source cannot
 * splice at all (nothing was moved), so the caller bounces instead.
 */
static int move_splice(struct placefs_filler *f, struct mover *mv, const struct job *j,
                       uint64_t off, uint64_t len, struct placefs_error *e)
{
	loff_t in = (loff_t)(j->src_off + off), out = (loff_t)(j->dst_off + off);
	bool moved = false;
	int rc;

	rc = mover_pipe(mv);
	if (rc < 0)
		return set_err(e, j, rc, "cannot make a pipe", j->src_off + off);
	while (len) {
		size_t want = len < mv->pipe_bytes ? (size_t)len : mv->pipe_bytes;
		ssize_t k = splice(j->src, &in, mv->pipe_w, NULL, want, SPLICE_F_MOVE);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (!moved && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
				return 1;
			return set_err(e, j, -errno, "cannot read the source", (uint64_t)in);
		}
		if (k == 0)
			return placefs_error_set(
			        e, -EIO, PLACEFS_E_IO,
			        "%s: the source ends at byte %llu, %llu bytes early",
			        j->name ? j->name : "the range", (unsigned long long)in,
			        (unsigned long long)len);
		moved = true;
		len -= (uint64_t)k;
		while (k > 0) {
			ssize_t w =
			        splice(mv->pipe_r, NULL, j->dst, &out, (size_t)k, SPLICE_F_MOVE);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				rc = w < 0 ? -errno : -EIO;
				/* Bytes may be left in the pipe: never reuse it. */
				mover_close_pipe(mv);
				return set_err(e, j, rc, "cannot write the destination",
				               (uint64_t)out);
			}
			k -= w;
			atomic_fetch_add_explicit(&f->spliced, (uint64_t)w, memory_order_relaxed);
		}
	}
	return 0;
}

/*
 * pread() into the mapping of bytes [off, off + len) of the job failed with
 * EFAULT: the destination's owner shrank it (perhaps growing it again
 * since), or its file system could not supply a page. Told apart now: a
 * destination shorter than the piece shrank; so did one whose file system
 * has room for the piece (or 1 MiB of it), as its pages could be had. Only
 * a destination of its full size on a file system without that room is
 * -ENOSPC.
 */
static int mapped_fault(const struct job *j, uint64_t off, uint64_t len, struct placefs_error *e)
{
	const char *what = j->name ? j->name : "the range";
	uint64_t end = j->dst_off + off + len, room = len < (1u << 20) ? len : (1u << 20);
	struct statfs sf;
	struct stat st;
	char dest[160];

	if (j->dest_name)
		snprintf(dest, sizeof(dest), "destination shm \"%.128s\"", j->dest_name);
	else
		snprintf(dest, sizeof(dest), "the destination");
	if (fstat(j->dst, &st) != 0)
		st.st_size = -1;
	if (st.st_size >= 0 && (uint64_t)st.st_size < end)
		return placefs_error_set(e, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: %s shrank during the copy (to %lld bytes; the copy "
		                         "writes up to byte %llu)",
		                         what, dest, (long long)st.st_size,
		                         (unsigned long long)end);
	if (fstatfs(j->dst, &sf) == 0 &&
	    (sf.f_blocks == 0 || (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize >= room))
		return placefs_error_set(e, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: %s shrank during the copy (it has %lld bytes again; "
		                         "what was written before is lost)",
		                         what, dest, (long long)st.st_size);
	return placefs_error_set(e, -ENOSPC, PLACEFS_E_IO,
	                         "%s: the pages of %s at byte %llu cannot be had (is /dev/shm "
	                         "full?)",
	                         what, dest, (unsigned long long)(j->dst_off + off));
}

/*
 * pread() straight into the destination's mapping: one copy, and writers of
 * different pieces do not serialise on the destination's inode lock as
 * write() into one tmpfs file does. Only the kernel stores into the
 * mapping (copy_to_user), so a destination its owner shrank, or whose pages
 * /dev/shm cannot supply, makes pread() fail with EFAULT: never a SIGBUS.
 */
static int move_mapped(struct placefs_filler *f, const struct job *j, uint64_t off, uint64_t len,
                       struct placefs_error *e)
{
	ssize_t r;

	if (f->populate) {
		/* The pages in one call, not one fault each (errors show in pread). */
		uintptr_t a = (uintptr_t)(j->dmap + off), b = a + (uintptr_t)len;

		a -= a % f->page;
		b += (f->page - b % f->page) % f->page;
		(void)madvise((void *)a, (size_t)(b - a), MADV_POPULATE_WRITE);
	}
	r = placefs_io_pread_full(j->src, j->dmap + off, (size_t)len, j->src_off + off);

	if (r == -EFAULT)
		return mapped_fault(j, off, len, e);
	if (r < 0)
		return set_err(e, j, (int)r, "cannot read the source", j->src_off + off);
	if ((uint64_t)r < len)
		return placefs_error_set(e, -EIO, PLACEFS_E_IO,
		                         "%s: the source ends at byte %llu, %llu bytes early",
		                         j->name ? j->name : "the range",
		                         (unsigned long long)(j->src_off + off + (uint64_t)r),
		                         (unsigned long long)(len - (uint64_t)r));
	atomic_fetch_add_explicit(&f->mapped, len, memory_order_relaxed);
	return 0;
}

static int move_piece(struct placefs_filler *f, struct mover *mv, const struct job *j, uint64_t off,
                      uint64_t len, struct placefs_error *e)
{
	int rc;

	if (j->dmap)
		return move_mapped(f, j, off, len, e);
	if (f->method != PLACEFS_FILL_PREAD) {
		rc = move_splice(f, mv, j, off, len, e);
		if (rc <= 0)
			return rc;
	}
	return move_bounce(f, mv, j, off, len, e);
}

/* Lock held. True when the job still hands out pieces; sets rc on cancel or deadline. */
static bool job_open(struct job *j)
{
	if (j->rc || j->next >= j->n)
		return false;
	if (j->cancel && __atomic_load_n(j->cancel, __ATOMIC_RELAXED)) {
		j->rc = placefs_error_set(&j->err, -EINTR, PLACEFS_E_IO, "%s: interrupted",
		                          j->name ? j->name : "the range");
		return false;
	}
	if (j->deadline && placefs_clock_ns() >= placefs_clock_ts_ns(j->deadline)) {
		j->rc = placefs_error_set(&j->err, -ETIMEDOUT, PLACEFS_E_IO, "%s: timed out",
		                          j->name ? j->name : "the range");
		return false;
	}
	return true;
}

/* Lock held: unlinks j from the queue (it hands out no more pieces). */
static void job_unqueue(struct placefs_filler *f, struct job *j)
{
	struct job **pp;

	for (pp = &f->jobs; *pp; pp = &(*pp)->next_job)
		if (*pp == j) {
			*pp = j->next_job;
			j->next_job = NULL;
			return;
		}
}

/*
 * Lock held: moves one piece of j (dropping the lock while it moves).
 * Returns false when j had no piece left.
 */
static bool job_step(struct placefs_filler *f, struct mover *mv, struct job *j)
{
	uint64_t off, len;
	struct placefs_error e;
	int rc;

	if (!job_open(j)) {
		job_unqueue(f, j);
		return false;
	}
	off = j->next;
	len = j->n - off < f->piece ? j->n - off : f->piece;
	j->next += len;
	j->inflight++;
	if (j->next >= j->n)
		job_unqueue(f, j);
	pthread_mutex_unlock(&f->lock);

	/* Each mover writes its own error; the first one wins below. */
	placefs_error_clear(&e);
	rc = move_piece(f, mv, j, off, len, &e);

	pthread_mutex_lock(&f->lock);
	if (rc < 0 && !j->rc) {
		j->rc = rc;
		j->err = e;
		job_unqueue(f, j);
	}
	if (--j->inflight == 0 && (j->rc || j->next >= j->n))
		pthread_cond_broadcast(&j->done);
	return true;
}

static void *worker_main(void *arg)
{
	struct placefs_filler *f = arg;
	struct mover mv;

	mover_init(&mv);
	pthread_mutex_lock(&f->lock);
	for (;;) {
		if (f->stop)
			break;
		if (!f->jobs) {
			pthread_cond_wait(&f->work, &f->lock);
			continue;
		}
		(void)job_step(f, &mv, f->jobs);
	}
	pthread_mutex_unlock(&f->lock);
	mover_release(&mv);
	return NULL;
}

int placefs_filler_copy(struct placefs_filler *f, int src_fd, uint64_t src_off, int dst_fd,
                        uint64_t dst_off, uint64_t n, const struct placefs_fill_opts *opts,
                        struct placefs_error *err)
{
	struct job j;
	struct mover mv;
	uint64_t end, t0;
	void *map = NULL;
	size_t map_len = 0;
	int rc;

	if (n == 0) {
		atomic_fetch_add_explicit(&f->copies, 1, memory_order_relaxed);
		return 0;
	}
	if (__builtin_add_overflow(src_off, n, &end) || end > (uint64_t)INT64_MAX ||
	    __builtin_add_overflow(dst_off, n, &end) || end > (uint64_t)INT64_MAX) {
		atomic_fetch_add_explicit(&f->errors, 1, memory_order_relaxed);
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: %llu bytes at %llu (destination %llu) overflow",
		                         opts && opts->name ? opts->name : "the range",
		                         (unsigned long long)n, (unsigned long long)src_off,
		                         (unsigned long long)dst_off);
	}
	memset(&j, 0, sizeof(j));
	j.src = src_fd;
	j.dst = dst_fd;
	j.src_off = src_off;
	j.dst_off = dst_off;
	j.n = n;
	if (opts) {
		j.cancel = opts->cancel;
		j.deadline = opts->deadline;
		j.name = opts->name;
		j.dest_name = opts->dest_name;
	}
	placefs_error_clear(&j.err);
	rc = pthread_cond_init(&j.done, NULL);
	if (rc)
		return placefs_error_set(err, -rc, PLACEFS_E_NOMEM, "cannot make a condition: %s",
		                         strerror(rc));
	mover_init(&mv);
	t0 = placefs_clock_ns();
	atomic_fetch_add_explicit(&f->busy, 1, memory_order_relaxed);
	if (f->method == PLACEFS_FILL_AUTO || f->method == PLACEFS_FILL_MAP) {
		long pg = sysconf(_SC_PAGESIZE);
		uint64_t base = dst_off - dst_off % (uint64_t)(pg > 0 ? pg : 4096);

		map_len = (size_t)(dst_off - base + n);
		map = mmap(NULL, map_len, PROT_WRITE, MAP_SHARED, dst_fd, (off_t)base);
		if (map != MAP_FAILED) {
			j.dmap = (uint8_t *)map + (dst_off - base);
		} else if (f->method == PLACEFS_FILL_MAP) {
			rc = placefs_error_set(&j.err, -errno, PLACEFS_E_IO,
			                       "%s: cannot map the destination: %s",
			                       j.name ? j.name : "the range", strerror(errno));
			map = NULL;
			goto out;
		} else {
			map = NULL;
		}
	}

	pthread_mutex_lock(&f->lock);
	if (n > f->piece) {
		struct job **pp = &f->jobs;

		while (*pp)
			pp = &(*pp)->next_job;
		*pp = &j;
		pthread_cond_broadcast(&f->work);
	}
	rc = 0;
	/* The caller moves pieces too: a one-piece copy never waits for a hand-off. */
	while (job_step(f, &mv, &j))
		;
	while (j.inflight)
		pthread_cond_wait(&j.done, &f->lock);
	job_unqueue(f, &j);
	rc = j.rc;
	pthread_mutex_unlock(&f->lock);
out:
	if (map)
		munmap(map, map_len);
	atomic_fetch_sub_explicit(&f->busy, 1, memory_order_relaxed);
	mover_release(&mv);
	pthread_cond_destroy(&j.done);
	if (rc < 0) {
		atomic_fetch_add_explicit(&f->errors, 1, memory_order_relaxed);
		if (err)
			*err = j.err;
		return rc;
	}
	atomic_fetch_add_explicit(&f->copies, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->bytes, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->ns, placefs_clock_ns() - t0, memory_order_relaxed);
	return 0;
}

static int env_unsigned(const char *name, unsigned lo, unsigned hi, unsigned *out,
                        struct placefs_error *err)
{
	const char *v = getenv(name);
	char *end;
	unsigned long x;

	if (!v || !*v)
		return 0;
	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno || *end || v[0] < '0' || v[0] > '9' || x < lo || x > hi)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "$%s='%.32s' is not a number from %u to %u", name, v, lo,
		                         hi);
	*out = (unsigned)x;
	return 1;
}

static int pick_method(enum placefs_fill_method m, enum placefs_fill_method *out,
                       struct placefs_error *err)
{
	const char *v = getenv("PLACEFS_FILL_METHOD");

	if (m != PLACEFS_FILL_AUTO || !v || !*v || strcmp(v, "auto") == 0) {
		if (m != PLACEFS_FILL_AUTO && m != PLACEFS_FILL_MAP && m != PLACEFS_FILL_SPLICE &&
		    m != PLACEFS_FILL_PREAD)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "unknown fill method %d", (int)m);
		*out = m;
		return 0;
	}
	if (strcmp(v, "map") == 0)
		*out = PLACEFS_FILL_MAP;
	else if (strcmp(v, "splice") == 0)
		*out = PLACEFS_FILL_SPLICE;
	else if (strcmp(v, "pread") == 0)
		*out = PLACEFS_FILL_PREAD;
	else
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_USAGE,
		        "$PLACEFS_FILL_METHOD='%.32s' is not auto, map, splice or pread", v);
	return 0;
}

int placefs_filler_create(const struct placefs_fill_config *cfg, struct placefs_filler **out,
                          struct placefs_error *err)
{
	struct placefs_fill_config c = {0};
	struct placefs_filler *f;
	unsigned i, nt;
	long ncpu;
	int rc;

	*out = NULL;
	if (cfg)
		c = *cfg;
	nt = c.threads;
	if (nt > PLACEFS_FILL_THREADS_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%u fill threads, at most %d", nt,
		                         PLACEFS_FILL_THREADS_MAX);
	if (nt == 0) {
		rc = env_unsigned("PLACEFS_FILL_THREADS", 0, PLACEFS_FILL_THREADS_MAX, &nt, err);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			ncpu = sysconf(_SC_NPROCESSORS_ONLN);
			nt = ncpu > 0 ? (unsigned)(ncpu / 2) : 2;
			nt = nt < 2 ? 2 : nt > 8 ? 8 : nt;
		}
	}
	if (c.piece_bytes == 0)
		c.piece_bytes = PLACEFS_FILL_PIECE_DEFAULT;
	if (c.piece_bytes < PIECE_MIN || c.piece_bytes > PIECE_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "fill piece of %llu bytes, expected 64 KiB to 1 GiB",
		                         (unsigned long long)c.piece_bytes);
	f = calloc(1, sizeof(*f));
	if (!f)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	rc = pick_method(c.method, &f->method, err);
	if (rc < 0)
		goto fail_free;
	f->piece = c.piece_bytes;
	ncpu = sysconf(_SC_PAGESIZE);
	f->page = ncpu > 0 ? (uintptr_t)ncpu : 4096;
	{
		const char *pv = getenv("PLACEFS_FILL_POPULATE");

		f->populate = pv && strcmp(pv, "1") == 0;
	}
	rc = -pthread_mutex_init(&f->lock, NULL);
	if (rc)
		goto fail_free;
	rc = -pthread_cond_init(&f->work, NULL);
	if (rc)
		goto fail_mutex;
	if (nt) {
		f->threads = calloc(nt, sizeof(*f->threads));
		if (!f->threads) {
			rc = -ENOMEM;
			goto fail_cond;
		}
	}
	for (i = 0; i < nt; i++) {
		rc = -pthread_create(&f->threads[i], NULL, worker_main, f);
		if (rc)
			break;
		f->nthreads++;
	}
	if (rc) {
		placefs_error_set(err, rc, PLACEFS_E_NOMEM, "cannot start fill thread %u: %s", i,
		                  strerror(-rc));
		placefs_filler_free(f);
		return rc;
	}
	*out = f;
	return 0;
fail_cond:
	pthread_cond_destroy(&f->work);
fail_mutex:
	pthread_mutex_destroy(&f->lock);
fail_free:
	free(f);
	if (rc == -ENOMEM)
		return placefs_error_set(err, rc, PLACEFS_E_NOMEM, "out of memory");
	if (rc && !(err && err->msg[0]))
		return placefs_error_set(err, rc, PLACEFS_E_NOMEM, "cannot start the filler: %s",
		                         strerror(-rc));
	return rc;
}

void placefs_filler_free(struct placefs_filler *f)
{
	unsigned i;

	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_cond_broadcast(&f->work);
	pthread_mutex_unlock(&f->lock);
	for (i = 0; i < f->nthreads; i++)
		pthread_join(f->threads[i], NULL);
	free(f->threads);
	pthread_cond_destroy(&f->work);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void placefs_filler_stats(const struct placefs_filler *f, struct placefs_fill_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!f)
		return;
	out->threads = f->nthreads;
	out->piece_bytes = f->piece;
	out->copies = atomic_load_explicit(&f->copies, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&f->bytes, memory_order_relaxed);
	out->errors = atomic_load_explicit(&f->errors, memory_order_relaxed);
	out->ns = atomic_load_explicit(&f->ns, memory_order_relaxed);
	out->mapped = atomic_load_explicit(&f->mapped, memory_order_relaxed);
	out->spliced = atomic_load_explicit(&f->spliced, memory_order_relaxed);
	out->bounced = atomic_load_explicit(&f->bounced, memory_order_relaxed);
	out->busy_copies = atomic_load_explicit(&f->busy, memory_order_relaxed);
}

int placefs_fill_open_shm(const char *name, int check_uid, unsigned uid, uint64_t min_size,
                          struct placefs_error *err)
{
	struct stat st;
	int fd, rc;

	fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		return placefs_error_set(err, rc, PLACEFS_E_IO,
		                         "destination shm \"%s\": cannot open: %s", name,
		                         strerror(-rc));
	}
	if (fstat(fd, &st) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "destination shm \"%s\": cannot stat: %s", name,
		                       strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                       "destination shm \"%s\" is not a regular file", name);
		goto out_close;
	}
	if (check_uid && st.st_uid != (uid_t)uid) {
		rc = placefs_error_set(err, -EACCES, PLACEFS_E_USAGE,
		                       "destination shm \"%s\" belongs to uid %u, not to the "
		                       "caller (uid %u)",
		                       name, (unsigned)st.st_uid, uid);
		goto out_close;
	}
	if ((uint64_t)st.st_size < min_size || st.st_size == 0) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                       "destination shm \"%s\" has %lld bytes, fewer than "
		                       "dest_size %llu",
		                       name, (long long)st.st_size, (unsigned long long)min_size);
		goto out_close;
	}
	return fd;
out_close:
	close(fd);
	return rc;
}
