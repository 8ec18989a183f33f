/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/io.h"
#include "log.h"
#include "mount.h"
#include "stats.h"

enum shard_state {
	SHARD_OK = 0,
	SHARD_CHANGED, /* its last check failed */
	SHARD_IOERR,   /* reading it failed although the check passed */
};

struct placefs_shard_health {
	atomic_int state;               /* enum shard_state */
	atomic_int no_map;              /* 1 once a reply from its mapping faulted: pread since */
	atomic_uint_fast64_t fail_ns;   /* CLOCK_MONOTONIC of its last failed read */
	atomic_uint_fast64_t fails;     /* requests failed since it was last OK */
	atomic_uint_fast64_t reopen_ns; /* CLOCK_MONOTONIC of the last look for a remount */
	pthread_mutex_t log_lock;       /* the two fields below */
	uint64_t log_ns;                /* the rate limiter's clock (see shard_log()) */
	uint64_t suppressed;            /* lines not logged since then */
};

/* The counters in .placefs/stats, in the document's order: one row each. */
#define COUNTER(path, member) PLACEFS_STAT(path, ATOMIC_U64, 0, struct placefs_counters, member)
#define GAUGE(path, member)   PLACEFS_STAT(path, ATOMIC_I64, 0, struct placefs_counters, member)

static const struct placefs_stat counter_rows[] = {
        COUNTER("reads", reads),
        COUNTER("bytes_read.gpu", bytes[PLACEFS_PLACE_GPU]),
        COUNTER("bytes_read.cpu", bytes[PLACEFS_PLACE_CPU]),
        COUNTER("read_errors", read_errors),
        COUNTER("opens", opens),
        GAUGE("open_files", open_files),
        COUNTER("stale_refusals", stale_refusals),
        COUNTER("xattr_requests", xattr_requests),
        COUNTER("xattr_formats", xattr_formats),
        COUNTER("client_errors", client_errors),
        COUNTER("log_suppressed", log_suppressed),
        COUNTER("view_reads", view_reads),
        COUNTER("view_bytes_read", view_bytes),
};

struct placefs_mount *placefs_mount_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static const char *shard_file(const struct placefs_mount *m, uint32_t i)
{
	return placefs_ckpt_shard(m->ckpt, i)->file;
}

/* ---- shard health ------------------------------------------------------------ */

/*
 * Logs one line about shard i: a burst of PLACEFS_SHARD_LOG_BURST lines
 * (a shard going bad and coming back is told at once), then at most one per
 * PLACEFS_SHARD_LOG_NS, unless `force` (for events that happen once per
 * shard). A line held back is counted, and the next line logged says how
 * many were.
 */
static void shard_log(struct placefs_mount *m, uint32_t i, int prio, bool force, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));

static void shard_log(struct placefs_mount *m, uint32_t i, int prio, bool force, const char *fmt,
                      ...)
{
	struct placefs_shard_health *h = &m->health[i];
	uint64_t now = placefs_clock_ns(), held;
	char line[1024];
	va_list ap;

	/*
	 * A virtual clock (GCRA): log_ns runs ahead of now by one interval per
	 * line logged and catches up in real time; a line may go while it is
	 * at most BURST - 1 intervals ahead.
	 */
	pthread_mutex_lock(&h->log_lock);
	if (h->log_ns < now)
		h->log_ns = now;
	if (!force && h->log_ns - now > (PLACEFS_SHARD_LOG_BURST - 1) * PLACEFS_SHARD_LOG_NS) {
		h->suppressed++;
		pthread_mutex_unlock(&h->log_lock);
		return;
	}
	h->log_ns += PLACEFS_SHARD_LOG_NS;
	held = h->suppressed;
	h->suppressed = 0;
	pthread_mutex_unlock(&h->log_lock);

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (held)
		placefs_log(prio, "%s (%llu earlier line%s about this shard not logged)", line,
		            (unsigned long long)held, held == 1 ? "" : "s");
	else
		placefs_log(prio, "%s", line);
}

/*
 * Records a failed request on shard i: the shard is now `state` (CHANGED or
 * IOERR) and answers rc. Only a change of state is logged (and that through
 * shard_log()'s limit), so a reader loop on a failing shard cannot flood
 * the log.
 */
static void shard_fail(struct placefs_mount *m, uint32_t i, enum shard_state state, int rc,
                       bool force, const char *msg)
{
	struct placefs_shard_health *h = &m->health[i];
	int old;

	atomic_fetch_add_explicit(&m->ctr.stale_refusals, 1, memory_order_relaxed);
	if (state == SHARD_IOERR)
		atomic_store_explicit(&h->fail_ns, placefs_clock_ns(), memory_order_relaxed);
	atomic_fetch_add_explicit(&h->fails, 1, memory_order_relaxed);
	old = atomic_exchange(&h->state, (int)state);
	if (old != (int)state || force)
		shard_log(m, i, LOG_ERR, force, "%s: reads of its tensors now fail with %s", msg,
		          rc == -ESTALE ? "ESTALE"
		          : rc == -EIO  ? "EIO"
		                        : strerror(-rc));
}

/* Makes shard i OK again if it is in state `from`, logging the recovery. */
static void shard_recover(struct placefs_mount *m, uint32_t i, enum shard_state from)
{
	struct placefs_shard_health *h = &m->health[i];
	int expect = (int)from;
	uint64_t fails;

	if (!atomic_compare_exchange_strong(&h->state, &expect, SHARD_OK))
		return;
	fails = atomic_exchange_explicit(&h->fails, 0, memory_order_relaxed);
	if (from == SHARD_CHANGED)
		shard_log(m, i, LOG_NOTICE, false,
		          "shard '%s' matches what was validated again; serving it "
		          "(%llu request%s refused meanwhile)",
		          shard_file(m, i), (unsigned long long)fails, fails == 1 ? "" : "s");
	else
		shard_log(m, i, LOG_NOTICE, false,
		          "shard '%s' reads without errors again; serving it (%llu request%s "
		          "failed meanwhile)",
		          shard_file(m, i), (unsigned long long)fails, fails == 1 ? "" : "s");
}

void placefs_mount_shard_read_ok(struct placefs_mount *m, uint32_t i)
{
	struct placefs_shard_health *h = &m->health[i];

	if (atomic_load_explicit(&h->state, memory_order_relaxed) != SHARD_IOERR)
		return;
	if (placefs_clock_ns() - atomic_load_explicit(&h->fail_ns, memory_order_relaxed) <
	    PLACEFS_SHARD_QUIET_NS)
		return;
	shard_recover(m, i, SHARD_IOERR);
}

/*
 * Shard i's mapping onto the descriptor's file again, at the same address,
 * after the descriptor was given another file (a remount): MAP_FIXED
 * replaces the old pages at once. If that fails, the range is held with an
 * inaccessible mapping (a reply still copying from it faults: EIO) and the
 * shard is read with pread from then on.
 */
static void shard_remap(struct placefs_mount *m, uint32_t i)
{
	struct placefs_shard_health *h = &m->health[i];
	void *at, *p;

	if (!m->maps || !m->maps[i])
		return;
	at = (void *)m->maps[i];
	p = mmap(at, m->map_len[i], PROT_READ, MAP_SHARED | MAP_FIXED,
	         placefs_ckpt_shard(m->ckpt, i)->fd, 0);
	if (p == MAP_FAILED) {
		atomic_store(&h->no_map, 1);
		mmap(at, m->map_len[i], PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
		return;
	}
	atomic_store(&h->no_map, 0);
}

/*
 * At most once per PLACEFS_SHARD_QUIET_NS per shard, placefs_ckpt_shard_reopen():
 * after a failed check (same_file false), a shard whose file system was
 * mounted again is taken from there; while its reads fail although the
 * check passes (same_file true), it is opened again. Either way its mapping
 * is renewed. Returns 1 taken, else 0 (the verdict stands; a refusal is
 * logged with the shard's other lines).
 */
static int shard_try_reopen(struct placefs_mount *m, uint32_t i, bool same_file)
{
	struct placefs_shard_health *h = &m->health[i];
	uint64_t now = placefs_clock_ns(), last;
	struct placefs_error err;
	int rc;

	last = atomic_load_explicit(&h->reopen_ns, memory_order_relaxed);
	if ((last && now - last < PLACEFS_SHARD_QUIET_NS) ||
	    !atomic_compare_exchange_strong(&h->reopen_ns, &last, now))
		return 0;
	placefs_error_clear(&err);
	rc = placefs_ckpt_shard_reopen(m->ckpt, i, same_file, &err);
	if (rc < 0 && err.msg[0])
		shard_log(m, i, LOG_ERR, false, "%s: reads of its tensors still fail", err.msg);
	if (rc != 1)
		return 0;
	shard_remap(m, i);
	if (same_file)
		shard_log(m, i, LOG_NOTICE, false,
		          "shard '%s' opened again, its reads failing (size, modification time "
		          "and header as validated); reading it through the new descriptor",
		          shard_file(m, i));
	else
		shard_log(m, i, LOG_NOTICE, false,
		          "shard '%s' is back on a file system mounted again (size, modification "
		          "time and header as validated); reading it from there",
		          shard_file(m, i));
	return 1;
}

/*
 * fstat and stat still match when the shard's file system fails to read it,
 * so a passing check ends CHANGED (the shard was put back) but not IOERR.
 */
int placefs_mount_shard_ok(struct placefs_mount *m, uint32_t i)
{
	struct placefs_error err;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_ckpt_shard_check(m->ckpt, i, &err);
	if (rc != 0 && shard_try_reopen(m, i, false)) {
		placefs_error_clear(&err);
		rc = placefs_ckpt_shard_check(m->ckpt, i, &err);
	}
	if (rc == 0) {
		int st = atomic_load_explicit(&m->health[i].state, memory_order_relaxed);

		if (st == SHARD_CHANGED)
			shard_recover(m, i, SHARD_CHANGED);
		else if (st == SHARD_IOERR)
			shard_try_reopen(m, i, true);
		return 0;
	}
	if (rc != -ESTALE && rc != -EIO)
		rc = -EIO;
	shard_fail(m, i, SHARD_CHANGED, rc, false, err.msg[0] ? err.msg : shard_file(m, i));
	return rc;
}

bool placefs_mount_shard_healthy(const struct placefs_mount *m, uint32_t i)
{
	return atomic_load_explicit(&m->health[i].state, memory_order_relaxed) == SHARD_OK;
}

const uint8_t *placefs_mount_shard_map(const struct placefs_mount *m, uint32_t i)
{
	if (!m->maps || !m->maps[i] ||
	    atomic_load_explicit(&m->health[i].no_map, memory_order_relaxed))
		return NULL;
	return m->maps[i];
}

void placefs_mount_shard_read_failed(struct placefs_mount *m, uint32_t i, uint64_t pos, int errnum)
{
	char msg[512];

	/* A short read means the shard shrank: never answer with fewer bytes. */
	snprintf(msg, sizeof(msg), "shard '%s': %s at byte %llu", shard_file(m, i),
	         errnum ? strerror(errnum) : "short read", (unsigned long long)pos);
	shard_fail(m, i, SHARD_IOERR, -EIO, false, msg);
}

/*
 * The reader already got EIO, and libfuse has printed "fuse: writing device:
 * Bad address": a message the daemon cannot avoid once the reply is sent. So
 * that a failing source does not print it for every request, the shard is
 * served with pread from now on, where the daemon sees the error itself and
 * replies EIO quietly.
 */
void placefs_mount_shard_map_failed(struct placefs_mount *m, uint32_t i, uint64_t pos, int rc)
{
	char msg[512];
	bool first;

	if (rc != -EFAULT)
		return; /* ENOENT: the request was interrupted; the shard is not at fault */
	first = atomic_exchange(&m->health[i].no_map, 1) == 0;
	snprintf(msg, sizeof(msg),
	         "shard '%s': replying from its mapping failed at byte %llu (%s: it shrank or "
	         "cannot be read)%s",
	         shard_file(m, i), (unsigned long long)pos, strerror(-rc),
	         first ? "; serving it with pread from now on" : "");
	shard_fail(m, i, SHARD_IOERR, -EIO, first, msg);
}

/* ---- readahead ------------------------------------------------------------------ */

void placefs_mount_tune_readahead(struct placefs_mount *m)
{
	char path[96], val[32];
	uint64_t ra = m->opts->readahead;
	int fd, n, rc;

	if (atomic_load_explicit(&m->bdi_tuned, memory_order_relaxed) ||
	    atomic_exchange(&m->bdi_tuned, 1))
		return;
	if (ra == 0 || m->bdi[0] == '\0')
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", m->bdi);
	n = snprintf(val, sizeof(val), "%llu\n", (unsigned long long)(ra + 1023) / 1024);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		rc = placefs_io_write_full(fd, val, (size_t)n);
		close(fd);
	} else {
		rc = -errno;
	}
	if (rc == 0)
		placefs_log(LOG_INFO, "readahead set to %llu KiB (%s)",
		            (unsigned long long)(ra + 1023) / 1024, path);
	else
		placefs_log(LOG_NOTICE, "cannot set readahead through %s (%s); kernel default kept",
		            path, strerror(-rc));
}

/* ---- views and their aux files ---------------------------------------------------- */

static uint64_t ts_ns(struct timespec t)
{
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Whether descriptors a and b read the same `size` bytes; a that cannot be read counts as same. */
static bool same_bytes(int a, int b, uint64_t size)
{
	char *x = malloc(1 << 20), *y = malloc(1 << 20);
	bool same = x && y;

	for (uint64_t off = 0; same && off < size; off += 1 << 20) {
		size_t n = size - off < (1 << 20) ? (size_t)(size - off) : 1 << 20;
		ssize_t ra = placefs_io_pread_full(a, x, n, off);

		if (ra < 0)
			break; /* the old file system is gone: size and mtime decide */
		same = (size_t)ra == n && placefs_io_pread_full(b, y, n, off) == (ssize_t)n &&
		       memcmp(x, y, n) == 0;
	}
	free(x);
	free(y);
	return same;
}

/* placefs_mount_aux_ok()'s look for aux file j on a file system mounted again: 1 taken. */
static int aux_try_reopen(struct placefs_mount *m, size_t j)
{
	struct placefs_aux_file *a = &m->aux[j];
	const char *dir = placefs_ckpt_dir(m->ckpt);
	uint64_t now = placefs_clock_ns(), last;
	struct stat st, fst;
	int fd, rc = 0;

	last = atomic_load_explicit(&a->reopen_ns, memory_order_relaxed);
	if ((last && now - last < PLACEFS_SHARD_QUIET_NS) ||
	    !atomic_compare_exchange_strong(&a->reopen_ns, &last, now))
		return 0;
	if (stat(a->path, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_dev == atomic_load(&a->dev) || st.st_size != a->st.st_size ||
	    ts_ns(st.st_mtim) != ts_ns(a->st.st_mtim))
		return 0;
	fd = placefs_ckpt_open_file(m->ckpt, a->path + strlen(dir) + 1,
	                            O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return 0;
	if (fstat(fd, &fst) == 0 && fst.st_dev == st.st_dev && fst.st_ino == st.st_ino &&
	    fst.st_size == a->st.st_size && ts_ns(fst.st_mtim) == ts_ns(a->st.st_mtim) &&
	    fcntl(fd, F_SETFL, 0) == 0 && same_bytes(a->fd, fd, (uint64_t)fst.st_size) &&
	    dup3(fd, a->fd, O_CLOEXEC) >= 0) {
		atomic_store(&a->dev, (uint64_t)fst.st_dev);
		atomic_store(&a->ino, (uint64_t)fst.st_ino);
		atomic_store(&a->ctime_ns, ts_ns(fst.st_ctim));
		placefs_log(LOG_NOTICE,
		            "file %s of the views is back on a file system mounted again (size, "
		            "modification time and bytes as validated); serving it",
		            a->path);
		rc = 1;
	}
	close(fd);
	return rc;
}

static int aux_check(struct placefs_aux_file *a, const char **why)
{
	struct stat fst, st;
	uint64_t dev = atomic_load(&a->dev), ino = atomic_load(&a->ino);

	if (fstat(a->fd, &fst) != 0) {
		*why = strerror(errno);
		return -EIO;
	}
	if (fst.st_size < a->st.st_size) {
		*why = "it shrank";
		return -EIO;
	}
	if (fst.st_size != a->st.st_size || (uint64_t)fst.st_dev != dev ||
	    (uint64_t)fst.st_ino != ino || ts_ns(fst.st_mtim) != ts_ns(a->st.st_mtim) ||
	    ts_ns(fst.st_ctim) != atomic_load(&a->ctime_ns)) {
		*why = "it was changed";
		return -ESTALE;
	}
	if (stat(a->path, &st) != 0 || (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino) {
		*why = "it was removed or replaced";
		return -ESTALE;
	}
	return 0;
}

int placefs_mount_aux_ok(struct placefs_mount *m, size_t j)
{
	struct placefs_aux_file *a = &m->aux[j];
	const char *why = NULL;
	int rc;

	rc = aux_check(a, &why);
	if (rc != 0 && aux_try_reopen(m, j))
		rc = aux_check(a, &why);
	if (rc == 0) {
		atomic_store_explicit(&a->bad, 0, memory_order_relaxed);
		return 0;
	}
	atomic_fetch_add_explicit(&m->ctr.stale_refusals, 1, memory_order_relaxed);
	if (atomic_exchange(&a->bad, 1) == 0)
		placefs_log(LOG_ERR,
		            "file %s of the views: %s since mount; its reads now fail with %s",
		            a->path, why, rc == -ESTALE ? "ESTALE" : "EIO");
	return rc;
}

/*
 * Who may read an open file (a shard, an aux file), as at mount. An ACL
 * that cannot be read or that the kernel's rules refuse is logged, and the
 * file is then shown to its owner (and root) only, as the kernel lets
 * nobody else past an ACL it cannot use.
 */
static void perm_read(struct placefs_perm *p, int fd, const char *path, const char *what)
{
	struct placefs_error e;

	placefs_error_clear(&e);
	if (placefs_perm_from_fd(p, fd, path, &e) < 0)
		placefs_log(LOG_WARNING, "%s; %s %s is served to its owner and root only", e.msg,
		            what, path);
}

static int cmp_aux(const void *a, const void *b)
{
	return strcmp(((const struct placefs_aux_file *)a)->name,
	              ((const struct placefs_aux_file *)b)->name);
}

/* Opens one aux candidate `name` of directory `d`: 1 taken, 0 skipped, < 0 out of memory. */
static int aux_open(struct placefs_mount *m, DIR *d, const char *name, const char *shown)
{
	const char *dir = placefs_ckpt_dir(m->ckpt);
	struct placefs_aux_file *a;
	struct stat st;
	int fd;

	/* Links followed; what is not a regular file (FIFO, device, directory) is left out unopened. */
	if (fstatat(dirfd(d), name, &st, 0) != 0) {
		placefs_log(LOG_WARNING, "%s/%s: %s; not shown in the views", dir, name,
		            strerror(errno));
		return 0;
	}
	if (!S_ISREG(st.st_mode))
		return 0;
	fd = placefs_ckpt_open_file(m->ckpt, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		placefs_log(LOG_WARNING, "%s/%s: %s; not shown in the views", dir, name,
		            fd == -EXDEV || fd == -ELOOP
		                    ? "a symbolic link that leads outside the source directory"
		                    : strerror(-fd));
		return 0;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fcntl(fd, F_SETFL, 0) != 0) {
		close(fd);
		return 0;
	}
	a = &m->aux[m->naux];
	memset(a, 0, sizeof(*a));
	a->fd = fd;
	a->st = st;
	atomic_init(&a->bad, 0);
	atomic_init(&a->dev, (uint64_t)st.st_dev);
	atomic_init(&a->ino, (uint64_t)st.st_ino);
	atomic_init(&a->ctime_ns, ts_ns(st.st_ctim));
	atomic_init(&a->reopen_ns, 0);
	a->name = strdup(shown);
	if (asprintf(&a->path, "%s/%s", dir, name) < 0)
		a->path = NULL;
	m->naux++;
	if (!a->name || !a->path)
		return -ENOMEM;
	perm_read(&a->perm, fd, a->path, "the file");
	return 1;
}

/* The aux files: the source directory's top-level entries lib/view wants, sorted by name. */
static int aux_scan(struct placefs_mount *m, struct placefs_error *err)
{
	struct dirent *de;
	size_t skipped = 0, alloc = 0;
	DIR *d;
	int rc = 0;

	if (!placefs_ckpt_is_dir(m->ckpt))
		return 0;
	d = opendir(placefs_ckpt_dir(m->ckpt));
	if (!d) {
		placefs_log(LOG_WARNING, "cannot list %s (%s): the views show no other files",
		            placefs_ckpt_dir(m->ckpt), strerror(errno));
		return 0;
	}
	while ((de = readdir(d)) != NULL) {
		char shown[PLACEFS_NAME_MAX + 1];

		if (!placefs_view_aux_name(m->ckpt, de->d_name, shown))
			continue;
		if (m->naux == PLACEFS_AUX_MAX) {
			skipped++;
			continue;
		}
		if (m->naux == alloc) {
			size_t na = alloc ? alloc * 2 : 16;
			struct placefs_aux_file *nv = realloc(m->aux, na * sizeof(*nv));

			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			m->aux = nv;
			alloc = na;
		}
		rc = aux_open(m, d, de->d_name, shown);
		if (rc < 0)
			break;
	}
	closedir(d);
	if (rc < 0)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	if (skipped)
		placefs_log(LOG_WARNING,
		            "%s: more than %d other files; %zu of them not shown in the views",
		            placefs_ckpt_dir(m->ckpt), PLACEFS_AUX_MAX, skipped);
	if (m->naux)
		qsort(m->aux, m->naux, sizeof(*m->aux), cmp_aux);
	return 0;
}

/* One view built on a thread of its own: the three only read the checkpoint and the plan. */
struct view_job {
	struct placefs_mount *m;
	int kind;
	const char *text;
	size_t len;
	int rc;
	struct placefs_error err;
};

static void *view_job_run(void *arg)
{
	struct view_job *j = arg;

	placefs_error_clear(&j->err);
	j->rc = placefs_view_create(j->m->ckpt, j->m->plan, (enum placefs_view_kind)j->kind,
	                            j->text, j->len, &j->m->views[j->kind], &j->err);
	return NULL;
}

static int views_init(struct placefs_mount *m, struct placefs_error *err)
{
	struct view_job jobs[PLACEFS_VIEW_KINDS];
	pthread_t tid[PLACEFS_VIEW_KINDS];
	bool started[PLACEFS_VIEW_KINDS];
	char *text = NULL;
	size_t len = 0;
	int rc;

	rc = placefs_view_read_index(m->ckpt, &text, &len, err);
	if (rc)
		return rc;
	/* In parallel: at 100,000 tensors each view costs some tens of milliseconds. */
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		jobs[k] = (struct view_job){.m = m, .kind = k, .text = text, .len = len};
		started[k] = k > 0 && pthread_create(&tid[k], NULL, view_job_run, &jobs[k]) == 0;
	}
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		if (!started[k])
			view_job_run(&jobs[k]);
	}
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		if (started[k])
			pthread_join(tid[k], NULL);
	}
	free(text);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		if (jobs[k].rc)
			return placefs_error_set(err, jobs[k].rc, jobs[k].err.kind, "%s",
			                         jobs[k].err.msg);
	}
	return aux_scan(m, err);
}

/* ---- life cycle ------------------------------------------------------------------ */

int placefs_mount_init(struct placefs_mount *m, const struct placefs_opts *opts,
                       struct placefs_ckpt *ckpt, struct placefs_plan *plan,
                       struct placefs_error *err)
{
	size_t i;

	m->opts = opts;
	m->ckpt = ckpt;
	m->plan = plan;
	m->started_ns = placefs_clock_ns();
	m->check_reads = getenv("PLACEFS_TEST_SKIP_READ_CHECK") == NULL;
	atomic_init(&m->bdi_tuned, 0);
	m->nshards = placefs_ckpt_shard_count(ckpt);
	m->health = calloc(m->nshards ? m->nshards : 1, sizeof(*m->health));
	if (!m->health)
		goto nomem;
	for (i = 0; i < m->nshards; i++) {
		struct placefs_shard_health *h = &m->health[i];

		atomic_init(&h->state, SHARD_OK);
		atomic_init(&h->no_map, 0);
		atomic_init(&h->fail_ns, 0);
		atomic_init(&h->fails, 0);
		atomic_init(&h->reopen_ns, 0);
		if (pthread_mutex_init(&h->log_lock, NULL) != 0) {
			/* Only the locks made so far are destroyed. */
			m->nshards = i;
			goto nomem;
		}
	}
	m->perms = calloc(m->nshards ? m->nshards : 1, sizeof(*m->perms));
	if (!m->perms)
		goto nomem;
	for (i = 0; i < m->nshards; i++) {
		const struct placefs_shard *s = placefs_ckpt_shard(ckpt, i);

		perm_read(&m->perms[i], s->fd, s->path, "shard");
	}
	placefs_stats_table_zero(counter_rows, PLACEFS_STATS_ROWS(counter_rows),
	                         (void *const[]){&m->ctr});
	atomic_init(&m->next_fh, 0);

	if (opts->read_mode == PLACEFS_READ_MMAP) {
		m->maps = calloc(m->nshards ? m->nshards : 1, sizeof(*m->maps));
		m->map_len = calloc(m->nshards ? m->nshards : 1, sizeof(*m->map_len));
		if (!m->maps || !m->map_len)
			goto nomem;
		for (i = 0; i < m->nshards; i++) {
			const struct placefs_shard *s = placefs_ckpt_shard(ckpt, i);
			void *p = MAP_FAILED;

			if (s->size <= SIZE_MAX)
				p = mmap(NULL, (size_t)s->size, PROT_READ, MAP_SHARED, s->fd, 0);
			if (p == MAP_FAILED) {
				/* A source that cannot be mapped is still served, with pread. */
				placefs_log(LOG_WARNING,
				            "shard '%s' cannot be mapped (%s); "
				            "serving it with pread",
				            s->file,
				            s->size > SIZE_MAX ? "too large" : strerror(errno));
				continue;
			}
			m->maps[i] = p;
			m->map_len[i] = (size_t)s->size;
		}
	}
	return views_init(m, err);
nomem:
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
}

int placefs_mount_make_tree(struct placefs_mount *m, const char *plan_note,
                            struct placefs_error *err)
{
	struct placefs_vtree_views views;
	struct placefs_vtree_aux *aux;
	struct timespec now;
	int rc;

	clock_gettime(CLOCK_REALTIME, &now);
	m->nxattrs = placefs_plan_count(m->plan);
	m->xattrs = calloc(m->nxattrs ? m->nxattrs : 1, sizeof(*m->xattrs));
	aux = calloc(m->naux ? m->naux : 1, sizeof(*aux));
	if (!m->xattrs || !aux) {
		free(aux);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	}
	memset(&views, 0, sizeof(views));
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++)
		views.view[k] = m->views[k];
	for (size_t j = 0; j < m->naux; j++)
		aux[j] = (struct placefs_vtree_aux){m->aux[j].name, m->aux[j].fd, &m->aux[j].st,
		                                    &m->aux[j].perm};
	views.aux = aux;
	views.naux = m->naux;
	/* Without the views (a zeroed mount in a test), no .placefs/views. */
	rc = placefs_vtree_create(m->ckpt, m->plan, m->perms, m->opts->source, plan_note, getuid(),
	                          getgid(), now, m->views[0] ? &views : NULL, &m->vt, err);
	free(aux); /* the tree copies the array */
	return rc;
}

void placefs_mount_release(struct placefs_mount *m)
{
	size_t i;

	if (!m)
		return;
	if (m->maps) {
		for (i = 0; i < m->nshards; i++)
			if (m->maps[i])
				munmap((void *)m->maps[i], m->map_len[i]);
	}
	for (i = 0; m->health && i < m->nshards; i++) {
		struct placefs_shard_health *h = &m->health[i];
		static const char *const names[] = {"ok", "changed", "failing reads"};
		int st = atomic_load(&h->state);

		/* What the rate limit held back is summarized, so the log ends telling the truth. */
		if (h->suppressed)
			placefs_log(LOG_NOTICE,
			            "shard '%s': %llu line%s about it not logged (rate limit); "
			            "its state at the end: %s",
			            shard_file(m, (uint32_t)i), (unsigned long long)h->suppressed,
			            h->suppressed == 1 ? "" : "s",
			            st >= 0 && st <= 2 ? names[st] : "?");
		pthread_mutex_destroy(&h->log_lock);
	}
	for (i = 0; m->xattrs && i < m->nxattrs; i++)
		free(atomic_load(&m->xattrs[i]));
	free(m->xattrs);
	m->xattrs = NULL;
	free(m->maps);
	free(m->map_len);
	free(m->health);
	for (i = 0; m->perms && i < m->nshards; i++)
		placefs_perm_release(&m->perms[i]);
	free(m->perms);
	m->perms = NULL;
	placefs_vtree_free(m->vt);
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		placefs_view_free(m->views[k]);
		m->views[k] = NULL;
	}
	for (i = 0; m->aux && i < m->naux; i++) {
		if (m->aux[i].fd >= 0)
			close(m->aux[i].fd);
		free(m->aux[i].name);
		free(m->aux[i].path);
		placefs_perm_release(&m->aux[i].perm);
	}
	free(m->aux);
	m->aux = NULL;
	m->naux = 0;
	m->maps = NULL;
	m->map_len = NULL;
	m->health = NULL;
	m->vt = NULL;
}

/* ---- stats --------------------------------------------------------------------- */

void placefs_mount_stats(const struct placefs_mount *m, struct placefs_stats *w)
{
	struct placefs_plan_totals t;
	size_t i;

	placefs_stats_table(w, counter_rows, PLACEFS_STATS_ROWS(counter_rows),
	                    (const void *const[]){&m->ctr});
	placefs_plan_totals(m->plan, &t);
	placefs_stats_begin(w, "tensors");
	placefs_stats_u64(w, "gpu", t.count[PLACEFS_PLACE_GPU]);
	placefs_stats_u64(w, "cpu", t.count[PLACEFS_PLACE_CPU]);
	placefs_stats_end(w);
	placefs_stats_string(w, "read_mode",
	                     m->opts->read_mode == PLACEFS_READ_MMAP ? "mmap" : "pread");
	placefs_stats_u64(w, "direct_reads", m->direct_reads);
	placefs_stats_seconds(w, "uptime_s", (double)(placefs_clock_ns() - m->started_ns) / 1e9);
	placefs_stats_begin_array(w, "stale_shards");
	for (i = 0; i < m->nshards; i++)
		if (!placefs_mount_shard_healthy(m, (uint32_t)i))
			placefs_stats_string(w, NULL, shard_file(m, (uint32_t)i));
	placefs_stats_end(w);
}
