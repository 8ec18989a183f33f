/* SPDX-License-Identifier: MIT */
/*
 * The stager's job queue and I/O threads: jobs cut into pieces, each read
 * (through the disk gate) into one of a thread's bounce chunks and copied
 * into the ring or a direct destination; zero-copy jobs run as one DMA.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>

#include "common/clock.h"
#include "staging/gate.h"
#include "common/io.h"
#include "staging/stage_i.h"
#include "staging/zerocopy.h"

/* ---- jobs and I/O threads ------------------------------------------------ */

void stage_job_init(struct job *j, int fd, uint64_t file_off, uint64_t nbytes, uint64_t ring_off,
                    uint64_t chunk, int prio, const char *name)
{
	memset(j, 0, sizeof(*j));
	j->fd = fd;
	j->file_off = file_off;
	j->nbytes = nbytes;
	j->ring_off = ring_off;
	j->npieces = nbytes / chunk + (nbytes % chunk != 0);
	j->piece_bytes = chunk;
	j->prio = prio;
	j->name = name;
}

/* Queues a job, or finishes an empty one at once; lock held. */
void stage_job_submit(struct placefs_stager *st, struct job *j)
{
	j->t_start = placefs_clock_ns();
	if (j->npieces == 0) {
		j->finished = true;
		j->t_end = j->t_start;
		pthread_cond_broadcast(&st->done_cond);
		if (j->done_cb)
			j->done_cb(st, j);
		return;
	}
	j->qnext = NULL;
	if (st->q_tail)
		st->q_tail->qnext = j;
	else
		st->q_head = j;
	st->q_tail = j;
	__atomic_fetch_add(&st->q_submits, 1, __ATOMIC_RELEASE);
	if (j->npieces > 1)
		pthread_cond_broadcast(&st->work_cond);
	else
		pthread_cond_signal(&st->work_cond);
}

/* Foreground jobs first, each class in arrival order; lock held. */
static struct job *job_pick(struct placefs_stager *st)
{
	struct job *j;

	for (j = st->q_head; j; j = j->qnext)
		if (j->prio)
			return j;
	return st->q_head;
}

static void job_dequeue(struct placefs_stager *st, struct job *j)
{
	struct job **pp, *prev = NULL;

	for (pp = &st->q_head; *pp; prev = *pp, pp = &(*pp)->qnext) {
		if (*pp == j) {
			*pp = j->qnext;
			if (st->q_tail == j)
				st->q_tail = prev;
			j->qnext = NULL;
			return;
		}
	}
}

/* Accounts one finished piece; takes the lock. */
static void piece_done(struct placefs_stager *st, struct job *j, int rc,
                       const struct placefs_error *e)
{
	pthread_mutex_lock(&st->lock);
	if (rc != 0 && j->rc == 0) {
		if (e)
			j->err = *e;
		__atomic_store_n(&j->rc, rc, __ATOMIC_RELEASE);
	}
	if (++j->done == j->npieces) {
		j->finished = true;
		j->t_end = placefs_clock_ns();
		pthread_cond_broadcast(&st->done_cond);
		if (j->done_cb)
			j->done_cb(st, j); /* may free j */
	}
	pthread_mutex_unlock(&st->lock);
}

/*
 * Reads bytes [off, off + n) of a tensor into buf, through the mount's disk
 * gate when it has one (lib/staging/gate.h); -EIO naming the tensor otherwise.
 */
int stage_read_full(struct placefs_stager *st, int fd, uint8_t *buf, uint64_t n, uint64_t off,
                    const char *name, struct placefs_error *err)
{
	ssize_t r = placefs_gate_pread(st->gate, fd, buf, (size_t)n, off);

	if (r < 0)
		return placefs_error_set(
		        err, -EIO, PLACEFS_E_IO,
		        "tensor \"%s\": reading %llu bytes at offset %llu failed: %s", name,
		        (unsigned long long)n, (unsigned long long)off, strerror((int)-r));
	if ((uint64_t)r < n)
		return placefs_error_set(
		        err, -EIO, PLACEFS_E_IO,
		        "tensor \"%s\": short read: the shard ends at offset %llu, "
		        "%llu bytes before the tensor's end",
		        name, (unsigned long long)(off + (uint64_t)r),
		        (unsigned long long)(n - (uint64_t)r));
	return 0;
}

/* ---- zero-copy sources ----------------------------------------------------- */

static void slots_reap_ready(struct io_thread *t, bool all);

/*
 * Runs a zero-copy job (one piece) on thread t: the registry's DMA from the
 * mapping and its staleness check (lib/staging/zerocopy.h). Unlocked.
 */
static void zc_run(struct io_thread *t, struct job *j)
{
	struct placefs_stager *st = t->st;
	struct placefs_zerocopy_src *z = j->zc;
	struct placefs_error e;
	int rc = 0;

	/*
	 * Finish this thread's bounce copies first, so that their jobs complete
	 * now rather than after this transfer (which runs on other streams).
	 */
	slots_reap_ready(t, true);
	placefs_error_clear(&e);
	if (__atomic_load_n(&j->rc, __ATOMIC_ACQUIRE) == 0) {
		/* Into this stager's ring, whichever stager's registry it is. */
		rc = placefs_zerocopy_copy_ctx(st->zc, st->be, z, j->fd, t->chunks, t->nslots,
		                               j->file_off, j->ring_off, j->nbytes, &e);
		if (rc != 0)
			placefs_error_prefix(&e, "tensor \"%s\"", j->name);
	}
	j->zc = NULL;
	placefs_zerocopy_put(st->zc, z);
	piece_done(st, j, rc, &e);
}

/*
 * Switches a job that has not been submitted to the zero-copy path, when it
 * can be. May register the shard (slow); st->lock must not be held.
 */
void stage_job_try_zc(struct placefs_stager *st, struct job *j)
{
	struct placefs_zerocopy_src *z;

	if (!st->zc)
		return;
	z = placefs_zerocopy_acquire(st->zc, j->fd, j->file_off, j->nbytes);
	if (z) {
		j->zc = z;
		j->npieces = 1;
	}
}

/* Waits for the copy pending in slot s and finishes its piece. */
static void slot_reap(struct io_thread *t, unsigned s)
{
	struct placefs_error e;
	struct job *j = t->pend[s].job;
	int rc;

	placefs_error_clear(&e);
	rc = placefs_backend_chunk_wait(t->st->be, t->chunks[s], &e);
	if (rc != 0)
		placefs_error_prefix(&e, "tensor \"%s\"", j->name);
	t->pend[s].job = NULL;
	t->npending--;
	piece_done(t->st, j, rc, &e);
}

static void slots_reap_ready(struct io_thread *t, bool all)
{
	unsigned s;

	for (s = 0; s < t->nslots; s++)
		if (t->pend[s].job && (all || placefs_backend_chunk_poll(t->st->be, t->chunks[s])))
			slot_reap(t, s);
}

/* Reads one piece into the next chunk and starts its copy; called unlocked. */
static void piece_run(struct io_thread *t, struct job *j, uint64_t piece)
{
	struct placefs_stager *st = t->st;
	struct placefs_error e;
	uint64_t off = piece * j->piece_bytes;
	uint64_t n = j->nbytes - off;
	unsigned s = t->rr;
	uint8_t *buf;
	int rc;

	if (j->zc) {
		zc_run(t, j);
		return;
	}
	t->rr = (t->rr + 1) % t->nslots;
	if (n > j->piece_bytes)
		n = j->piece_bytes;
	/* The chunk may still be copying an earlier piece: wait before reuse. */
	if (t->pend[s].job)
		slot_reap(t, s);
	if (__atomic_load_n(&j->rc, __ATOMIC_ACQUIRE) != 0) {
		piece_done(st, j, 0, NULL); /* the tensor already failed: skip */
		return;
	}
	placefs_error_clear(&e);
	buf = placefs_backend_chunk(st->be, t->chunks[s]);
	if (j->strided)
		rc = stage_read_strided(st, j, buf, off, n, &e);
	else
		rc = stage_read_full(st, j->fd, buf, n, j->file_off + off, j->name, &e);
	if (rc == 0) {
		if (!j->strided)
			CNT_ADD(st, read_bytes, n);
		if (j->tgt)
			rc = placefs_backend_chunk_to_target(st->be, t->chunks[s], j->tgt,
			                                     j->dest_off + off, n, &e);
		else
			rc = placefs_backend_chunk_to_ring(st->be, t->chunks[s], j->ring_off + off,
			                                   n, &e);
		if (rc != 0)
			placefs_error_prefix(&e, "tensor \"%s\"", j->name);
	}
	if (rc != 0) {
		piece_done(st, j, rc, &e);
		return;
	}
	t->pend[s].job = j;
	t->npending++;
	slots_reap_ready(t, false);
}

/*
 * Polls the job queue, unlocked, for up to st->spin_ns or until a job is
 * queued or the stop comes. Lock held on entry and return; the caller looks
 * at the queue again.
 */
static void io_spin(struct placefs_stager *st)
{
	uint64_t end = placefs_clock_ns() + st->spin_ns;
	uint64_t seen = __atomic_load_n(&st->q_submits, __ATOMIC_RELAXED);

	pthread_mutex_unlock(&st->lock);
	do {
		if (__atomic_load_n(&st->q_submits, __ATOMIC_ACQUIRE) != seen ||
		    __atomic_load_n(&st->stopping, __ATOMIC_RELAXED))
			break;
		sched_yield();
	} while (placefs_clock_ns() < end);
	pthread_mutex_lock(&st->lock);
}

void *stage_io_main(void *arg)
{
	struct io_thread *t = arg;
	struct placefs_stager *st = t->st;
	bool spin = false;

	pthread_mutex_lock(&st->lock);
	for (;;) {
		struct job *j = job_pick(st);
		uint64_t piece;

		if (!j) {
			if (t->npending) {
				/* Idle: finish the copies still in flight first. */
				pthread_mutex_unlock(&st->lock);
				slots_reap_ready(t, true);
				pthread_mutex_lock(&st->lock);
				continue;
			}
			if (st->stopping)
				break;
			if (spin) {
				/*
				 * Just worked: poll the queue for a while before
				 * sleeping, then look again (a job may have come
				 * just as the window closed, unlocked).
				 */
				spin = false;
				io_spin(st);
				continue;
			}
			pthread_cond_wait(&st->work_cond, &st->lock);
			continue;
		}
		spin = st->spin_ns > 0;
		piece = j->next++;
		if (j->next == j->npieces)
			job_dequeue(st, j);
		pthread_mutex_unlock(&st->lock);
		piece_run(t, j, piece);
		pthread_mutex_lock(&st->lock);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* Runs a job to the end on the I/O threads; returns its first error. */
int stage_job_run(struct placefs_stager *st, struct job *j)
{
	pthread_mutex_lock(&st->lock);
	stage_job_submit(st, j);
	while (!j->finished)
		pthread_cond_wait(&st->done_cond, &st->lock);
	pthread_mutex_unlock(&st->lock);
	return j->rc;
}
