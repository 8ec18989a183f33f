/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "model/ckpt.h"
#include "format/index.h"
#include "common/io.h"

#define AUTO_INDEX "model.safetensors.index.json"
#define ST_SUFFIX  ".safetensors"

/* What placefs_ckpt_shard_check() needs beyond the public struct placefs_shard. */
struct shard_priv {
	pthread_mutex_t lock;       /* serialises the re-read of the header */
	_Atomic uint64_t ctime_ok;  /* the last ctime (ns) whose header matched */
	_Atomic uint64_t ctime_bad; /* the last one whose header did not (0: none) */
	uint8_t *hdr;               /* the 8 + N header bytes validated at open */
	size_t hdr_len;
	/* The file the descriptor holds now: the one validated, or one adopted after a remount. */
	_Atomic uint64_t dev, ino;
	/* Its descriptors read with O_DIRECT (placefs_ckpt_shard_set_direct()). */
	_Atomic bool direct;
};

struct placefs_ckpt {
	char *source;            /* as given */
	char *root;              /* directory shards are opened beneath; NULL: a file source */
	char *root_rel;          /* dir relative to root ("" when they are the same) */
	struct shard_priv *priv; /* one per shard, once the shard list is final */
	char *dir;               /* absolute, lexically normalised */
	char *disp;              /* the source directory as the user wrote it, for messages */
	char *index;             /* as given, or AUTO_INDEX; NULL without an index */
	char *index_disp;        /* the index as the user would write it, for messages */
	struct placefs_shard *shards;
	size_t nshards;
	struct placefs_tensor *tensors;
	size_t ntensors;
};

static int nomem(struct placefs_error *err)
{
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
}

/* Joins a directory and a relative name; "/" and "" are handled without doubled slashes. */
static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir);
	char *p;

	if (dl == 0)
		return strdup(name);
	if (asprintf(&p, "%s%s%s", dir, dir[dl - 1] == '/' ? "" : "/", name) < 0)
		return NULL;
	return p;
}

/*
 * Makes `path` absolute without resolving symbolic links: the current
 * directory is prefixed to a relative path, then empty and "." components
 * are dropped (".." is kept, since resolving it lexically could cross a
 * link). An absolute path keeps working after a daemon changes directory,
 * and an unresolved one still sees a snapshot link being re-pointed.
 */
static char *absolute(const char *path)
{
	char *cwd = NULL, *full, *out, *o;
	const char *p;

	if (path[0] != '/') {
		cwd = getcwd(NULL, 0);
		if (!cwd)
			return NULL;
		full = join(cwd, path);
		free(cwd);
	} else {
		full = strdup(path);
	}
	if (!full)
		return NULL;
	out = malloc(strlen(full) + 2);
	if (!out) {
		free(full);
		return NULL;
	}
	o = out;
	for (p = full; *p;) {
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (len > 0 && !(len == 1 && p[0] == '.')) {
			*o++ = '/';
			memcpy(o, p, len);
			o += len;
		}
		p += len + (e ? 1 : 0);
	}
	if (o == out)
		*o++ = '/';
	*o = '\0';
	free(full);
	return out;
}

/* Splits an absolute normalised path into a freshly allocated parent and base. */
static int split_path(const char *abs, char **dir, char **base)
{
	const char *slash = strrchr(abs, '/');

	*dir = slash == abs ? strdup("/") : strndup(abs, (size_t)(slash - abs));
	*base = strdup(slash + 1);
	if (!*dir || !*base) {
		free(*dir);
		free(*base);
		*dir = *base = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* The parent of a user-written path, for messages ("." when it has no slash). */
static char *display_dir(const char *source)
{
	const char *slash = strrchr(source, '/');

	if (!slash)
		return strdup(".");
	if (slash == source)
		return strdup("/");
	return strndup(source, (size_t)(slash - source));
}

void placefs_ckpt_free(struct placefs_ckpt *ck)
{
	if (!ck)
		return;
	for (size_t i = 0; i < ck->nshards; i++) {
		struct placefs_shard *sh = &ck->shards[i];

		if (ck->priv) {
			pthread_mutex_destroy(&ck->priv[i].lock);
			free(ck->priv[i].hdr);
		}
		if (sh->fd >= 0)
			close(sh->fd);
		placefs_st_header_free((struct placefs_st_header *)sh->header);
		free((char *)sh->file);
		free((char *)sh->path);
	}
	free(ck->priv);
	free(ck->root);
	free(ck->root_rel);
	free(ck->shards);
	free(ck->tensors);
	free(ck->index_disp);
	free(ck->index);
	free(ck->disp);
	free(ck->dir);
	free(ck->source);
	free(ck);
}

/* Adds a shard named `file` (relative to the source directory); takes `file`. */
static int add_shard(struct placefs_ckpt *ck, char *file, size_t *alloc, struct placefs_error *err)
{
	struct placefs_shard *sh;

	if (!file)
		return nomem(err);
	if (ck->nshards == *alloc) {
		size_t na = *alloc ? *alloc * 2 : 16;
		struct placefs_shard *nv;

		if (na > SIZE_MAX / sizeof(*nv) || na > UINT32_MAX ||
		    !(nv = realloc(ck->shards, na * sizeof(*nv)))) {
			free(file);
			return nomem(err);
		}
		ck->shards = nv;
		*alloc = na;
	}
	sh = &ck->shards[ck->nshards];
	memset(sh, 0, sizeof(*sh));
	sh->fd = -1;
	sh->file = file;
	sh->path = join(ck->dir, file);
	ck->nshards++;
	if (!sh->path)
		return nomem(err);
	return 0;
}

/* A timestamp as one number, so that it can be compared atomically (until 2554). */
static uint64_t ts_ns(struct timespec t)
{
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/*
 * The directory shards of a directory source are confined to: the source
 * directory itself, or for a Hugging Face snapshot (.../snapshots/REV) the
 * repository directory two levels up, whose blobs/ the snapshot links into.
 */
static int set_root(struct placefs_ckpt *ck)
{
	const char *d = ck->dir;
	const char *last = strrchr(d, '/');
	const char *prev = NULL;

	if (last && last > d) {
		for (prev = last - 1; prev > d && *prev != '/'; prev--)
			;
	}
	if (prev && *prev == '/' && (size_t)(last - prev - 1) == strlen("snapshots") &&
	    memcmp(prev + 1, "snapshots", strlen("snapshots")) == 0 && strcmp(last + 1, "..") &&
	    strcmp(last + 1, ".")) {
		ck->root = prev == d ? strdup("/") : strndup(d, (size_t)(prev - d));
		ck->root_rel = strdup(prev + 1);
	} else {
		ck->root = strdup(d);
		ck->root_rel = strdup("");
	}
	return ck->root && ck->root_rel ? 0 : -ENOMEM;
}

/* 1 if the real path `p` is `root` or beneath it. */
static int path_beneath(const char *p, const char *root)
{
	size_t n = strlen(root);

	if (strcmp(root, "/") == 0)
		return 1;
	return strncmp(p, root, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

/*
 * Opens `file` (relative to the source directory) beneath ck->root. Returns
 * a descriptor, or -errno: -EXDEV when the path or a link in it leads out.
 */
static int open_beneath(const struct placefs_ckpt *ck, const char *file, int flags)
{
	struct open_how how = {.flags = (uint64_t)flags,
	                       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	char *rel = NULL, *rroot = NULL;
	char link[64], got[PATH_MAX];
	int rfd, fd = -1, e;
	ssize_t n;

	if (asprintf(&rel, "%s%s%s", ck->root_rel, ck->root_rel[0] ? "/" : "", file) < 0)
		return -ENOMEM;
	rfd = open(ck->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0) {
		e = -errno;
		goto out;
	}
	for (int tries = 0; tries < 8; tries++) {
		fd = (int)syscall(SYS_openat2, rfd, rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	/* ENOSYS: Linux < 5.6; EPERM: a seccomp filter that predates openat2. */
	if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) {
		e = fd >= 0 ? fd : -errno;
		goto out;
	}
	/* No openat2: open, then check where the descriptor landed. */
	fd = openat(rfd, rel, flags);
	if (fd < 0) {
		e = -errno;
		goto out;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, got, sizeof(got) - 1);
	rroot = realpath(ck->root, NULL);
	if (n < 0 || !rroot) {
		e = -EXDEV;
		goto out;
	}
	got[n] = '\0';
	e = path_beneath(got, rroot) ? fd : -EXDEV;
out:
	if (e < 0 && fd >= 0)
		close(fd);
	if (rfd >= 0)
		close(rfd);
	free(rroot);
	free(rel);
	return e;
}

/* Keeps the 8 + N header bytes validated, for placefs_ckpt_shard_check(). */
static int keep_header(struct shard_priv *p, int fd, const struct placefs_st_header *h,
                       const char *disp, struct placefs_error *err)
{
	size_t len = (size_t)placefs_st_header_data_start(h);
	ssize_t r;

	p->hdr = malloc(len);
	if (!p->hdr)
		return nomem(err);
	r = placefs_io_pread_full(fd, p->hdr, len, 0);
	if (r < 0 || (size_t)r != len)
		return placefs_error_set(err, r < 0 ? (int)r : -EIO, PLACEFS_E_IO,
		                         "cannot read shard %s again: %s", disp,
		                         r < 0 ? strerror((int)-r) : "it shrank");
	p->hdr_len = len;
	return 0;
}

/*
 * Opens, checks and parses one shard. The header is validated against the
 * size from the same fstat that is recorded, so what placefs_ckpt_shard_check
 * compares with is exactly what was validated.
 */
static int open_shard(const struct placefs_ckpt *ck, struct placefs_shard *sh,
                      struct shard_priv *priv, struct placefs_error *err)
{
	struct placefs_st_header *h = NULL;
	char *disp = join(ck->disp, sh->file);
	struct stat st;
	int rc = 0;

	if (!disp)
		return nomem(err);
	/* O_NONBLOCK keeps a FIFO posing as a shard from hanging the open. */
	if (ck->root) {
		int r = open_beneath(ck, sh->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

		sh->fd = r >= 0 ? r : -1;
		errno = r >= 0 ? 0 : -r;
	} else {
		sh->fd = open(sh->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	}
	if (sh->fd < 0) {
		int e = errno;

		if (e == EXDEV || e == ELOOP)
			rc = placefs_error_set(
			        err, -EXDEV, ck->index ? PLACEFS_E_INDEX : PLACEFS_E_SOURCE,
			        "shard %s (%s) leads outside %s through a symbolic link%s; shards "
			        "must stay inside the source directory",
			        sh->file, disp, ck->root,
			        e == ELOOP ? " (or a loop of links)" : "");
		else if (e == ENOENT && ck->index)
			rc = placefs_error_set(err, -e, PLACEFS_E_INDEX,
			                       "%s: shard %s listed in the index is missing (%s)",
			                       ck->index_disp, sh->file, disp);
		else
			rc = placefs_error_set(err, -e,
			                       e == ENOENT ? PLACEFS_E_SOURCE : PLACEFS_E_IO,
			                       "cannot open shard %s: %s", disp, strerror(e));
		goto out;
	}
	if (fstat(sh->fd, &st) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot stat shard %s: %s", disp,
		                       strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_SOURCE,
		                       "shard %s is not a regular file", disp);
		goto out;
	}
	/* Regular files ignore O_NONBLOCK, but later users should not see it set. */
	if (fcntl(sh->fd, F_SETFL, 0) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot use shard %s: %s", disp,
		                       strerror(errno));
		goto out;
	}
	rc = placefs_st_read_fd(disp, sh->fd, (uint64_t)st.st_size, &h, err);
	if (rc)
		goto out;
	sh->header = h;
	sh->dev = st.st_dev;
	sh->ino = st.st_ino;
	sh->size = (uint64_t)st.st_size;
	sh->mtime = st.st_mtim;
	sh->ctime = st.st_ctim;
	sh->mode = st.st_mode;
	atomic_store(&priv->ctime_ok, ts_ns(st.st_ctim));
	atomic_store(&priv->dev, (uint64_t)st.st_dev);
	atomic_store(&priv->ino, (uint64_t)st.st_ino);
	rc = keep_header(priv, sh->fd, h, disp, err);
out:
	free(disp);
	return rc;
}

/*
 * Opening the shards: each worker claims the next shard index; a failure
 * lowers `stop`, past which nothing more is claimed. Every index below the
 * lowest failure was claimed (claims are in order) and finishes, so the
 * error reported is the first shard's in order, as one thread would find it.
 */
#define OPEN_THREADS_MAX 8

struct open_pool {
	struct placefs_ckpt *ck;
	atomic_size_t next;
	atomic_size_t stop; /* the lowest failing index so far (nshards: none) */
};

struct open_worker {
	struct open_pool *pool;
	size_t failed; /* this worker's first failing index, or SIZE_MAX */
	int rc;
	struct placefs_error err;
	pthread_t tid;
	int started;
};

static void *open_main(void *arg)
{
	struct open_worker *w = arg;
	struct open_pool *p = w->pool;
	struct placefs_ckpt *ck = p->ck;

	for (;;) {
		size_t i = atomic_fetch_add(&p->next, 1), stop;

		if (i >= ck->nshards || i > atomic_load(&p->stop))
			break;
		w->rc = open_shard(ck, &ck->shards[i], &ck->priv[i], &w->err);
		if (w->rc) {
			w->failed = i;
			stop = atomic_load(&p->stop);
			while (i < stop && !atomic_compare_exchange_weak(&p->stop, &stop, i))
				;
			break;
		}
	}
	return NULL;
}

/*
 * Whether the checkpoint's directory is on a network file system (see
 * placefs_io_on_network_fs()); 0 when it cannot be opened.
 */
static int dir_on_network(const struct placefs_ckpt *ck)
{
	int fd = open(ck->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int on;

	if (fd < 0)
		return 0;
	on = placefs_io_on_network_fs(fd);
	close(fd);
	return on;
}

/*
 * Opens, checks and parses every shard: on up to OPEN_THREADS_MAX threads (a
 * checkpoint of many shards spends much of its mount parsing their headers),
 * the calling thread one of them; fewer when threads cannot be had. On a
 * local file system no more threads than CPUs (the parsing is the work);
 * on a network one a thread per shard up to the maximum, as each header read
 * mostly waits on the server (s3fs answers it with 50 MB read ahead: 4
 * shards on 4 threads mounted in 359-381 ms, on 2 in 386-400 ms, on a
 * 2-vCPU VM, tests/bench/remote.sh's checkpoint).
 */
static int open_shards(struct placefs_ckpt *ck, struct placefs_error *err)
{
	struct open_worker w[OPEN_THREADS_MAX];
	struct open_pool pool = {.ck = ck};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nw = ck->nshards, best = 0;

	if (ncpu < 1)
		ncpu = 1;
	if (nw > (size_t)ncpu && (nw == 1 || !dir_on_network(ck)))
		nw = (size_t)ncpu;
	if (nw > OPEN_THREADS_MAX)
		nw = OPEN_THREADS_MAX;
	if (nw == 0)
		return 0;
	atomic_init(&pool.next, 0);
	atomic_init(&pool.stop, ck->nshards);
	for (size_t k = 0; k < nw; k++) {
		w[k].pool = &pool;
		w[k].failed = SIZE_MAX;
		w[k].rc = 0;
		w[k].started = 0;
		placefs_error_clear(&w[k].err);
	}
	for (size_t k = 1; k < nw; k++)
		w[k].started = pthread_create(&w[k].tid, NULL, open_main, &w[k]) == 0;
	open_main(&w[0]);
	for (size_t k = 1; k < nw; k++)
		if (w[k].started)
			pthread_join(w[k].tid, NULL);
	for (size_t k = 1; k < nw; k++)
		if (w[k].failed < w[best].failed)
			best = k;
	if (w[best].failed == SIZE_MAX)
		return 0;
	if (err)
		*err = w[best].err;
	return w[best].rc;
}

static int cmp_shard_file(const void *a, const void *b)
{
	return strcmp(((const struct placefs_shard *)a)->file,
	              ((const struct placefs_shard *)b)->file);
}

/* Tensors by name, then by shard, so that a duplicate's report is deterministic. */
static int cmp_tensor_ptr(const void *a, const void *b)
{
	const struct placefs_tensor *x = *(const struct placefs_tensor *const *)a;
	const struct placefs_tensor *y = *(const struct placefs_tensor *const *)b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return x->shard < y->shard ? -1 : x->shard > y->shard;
}

static int has_suffix(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

/* Every *.safetensors entry of the source directory (links followed), sorted. */
static int scan_dir(struct placefs_ckpt *ck, struct placefs_error *err)
{
	size_t alloc = 0;
	DIR *d = opendir(ck->dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return placefs_error_set(err, -errno, PLACEFS_E_SOURCE,
		                         "cannot read directory %s: %s", ck->disp, strerror(errno));
	for (errno = 0; (de = readdir(d)) != NULL; errno = 0) {
		struct stat st;
		char *path;

		/* As the shell's glob: hidden names are not matched by '*'. */
		if (de->d_name[0] == '.' || !has_suffix(de->d_name, ST_SUFFIX))
			continue;
		path = join(ck->dir, de->d_name);
		if (!path) {
			rc = nomem(err);
			break;
		}
		if (stat(path, &st) != 0) {
			int e = errno;
			int dangling = e == ENOENT && lstat(path, &st) == 0 && S_ISLNK(st.st_mode);

			free(path);
			if (dangling)
				rc = placefs_error_set(err, -e, PLACEFS_E_SOURCE,
				                       "%s/%s is a dangling symbolic link",
				                       ck->disp, de->d_name);
			else
				rc = placefs_error_set(err, -e, PLACEFS_E_IO,
				                       "cannot stat %s/%s: %s", ck->disp,
				                       de->d_name, strerror(e));
			break;
		}
		free(path);
		if (!S_ISREG(st.st_mode))
			continue;
		rc = add_shard(ck, strdup(de->d_name), &alloc, err);
		if (rc)
			break;
	}
	if (rc == 0 && errno != 0)
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot read directory %s: %s",
		                       ck->disp, strerror(errno));
	closedir(d);
	if (rc)
		return rc;
	if (ck->nshards == 0)
		return placefs_error_set(err, -ENOENT, PLACEFS_E_SOURCE,
		                         "no *.safetensors files in %s", ck->disp);
	qsort(ck->shards, ck->nshards, sizeof(*ck->shards), cmp_shard_file);
	return 0;
}

/*
 * The index module refuses these already; checked again here because a
 * shard path escaping the source directory must never be opened.
 */
static int shard_path_ok(const char *file)
{
	const char *p = file;

	if (!*file || file[0] == '/')
		return 0;
	while (*p) {
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if ((len == 2 && p[0] == '.' && p[1] == '.') || (len == 1 && p[0] == '.'))
			return 0;
		p += len + (e ? 1 : 0);
	}
	return 1;
}

/*
 * Whether a tensor of shard `file` is served. With an index the mapped shard
 * wins: copies in other shards, and tensors the index does not map, are
 * hidden. Without one, everything is.
 */
static int selected(const struct placefs_index *idx, const char *name, const char *file)
{
	const char *m;

	if (!idx)
		return 1;
	m = placefs_index_lookup(idx, name);
	return m && strcmp(m, file) == 0;
}

/* Builds the tensor array in checkpoint order; `idx` (may be NULL) selects. */
static int collect(struct placefs_ckpt *ck, const struct placefs_index *idx,
                   struct placefs_error *err)
{
	size_t total = 0, k = 0;

	/* Sized for every tensor of every shard: an upper bound on the selection. */
	for (size_t s = 0; s < ck->nshards; s++) {
		if (__builtin_add_overflow(
		            total, placefs_st_header_tensor_count(ck->shards[s].header), &total))
			return nomem(err);
	}
	ck->tensors = calloc(total ? total : 1, sizeof(*ck->tensors));
	if (!ck->tensors)
		return nomem(err);
	for (size_t s = 0; s < ck->nshards; s++) {
		const struct placefs_shard *sh = &ck->shards[s];
		size_t cnt = placefs_st_header_tensor_count(sh->header);

		for (size_t i = 0; i < cnt; i++) {
			const struct placefs_st_tensor *t = placefs_st_header_tensor(sh->header, i);
			struct placefs_tensor *o;

			if (!selected(idx, t->name, sh->file))
				continue;
			o = &ck->tensors[k++];
			o->name = t->name;
			o->shard = (uint32_t)s;
			o->file = sh->file;
			o->dtype = t->dtype;
			o->ndim = t->ndim;
			o->shape = t->shape;
			o->nbytes = t->nbytes;
			o->offset = t->offset;
		}
	}
	ck->ntensors = k;
	return 0;
}

/*
 * With an index: every weight_map entry must have been found in its shard.
 * Without: no name may come from two files. Both walk the tensors sorted by
 * name, so 100,000 tensors cost a sort, not a quadratic scan.
 */
static int check_names(const struct placefs_ckpt *ck, const struct placefs_index *idx,
                       struct placefs_error *err)
{
	const struct placefs_tensor **v;
	size_t n = ck->ntensors;
	int rc = 0;

	if (idx && placefs_index_count(idx) == n)
		return 0;
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v)
		return nomem(err);
	for (size_t i = 0; i < n; i++)
		v[i] = &ck->tensors[i];
	qsort(v, n, sizeof(*v), cmp_tensor_ptr);
	if (!idx) {
		for (size_t i = 1; i < n; i++) {
			if (strcmp(v[i - 1]->name, v[i]->name) != 0)
				continue;
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_DUP_SOURCE,
			                       "tensor \"%s\" is in both %s/%s and %s/%s; without "
			                       "an index a name must come from one file",
			                       v[i]->name, ck->disp, v[i - 1]->file, ck->disp,
			                       v[i]->file);
			break;
		}
	} else {
		size_t j = 0, cnt = placefs_index_count(idx);

		/* Both lists are sorted by name in byte order: a merge walk finds the gap. */
		for (size_t i = 0; i < cnt; i++) {
			const char *name = placefs_index_name(idx, i);

			while (j < n && strcmp(v[j]->name, name) < 0)
				j++;
			if (j < n && strcmp(v[j]->name, name) == 0)
				continue;
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_INDEX,
			                       "%s: tensor \"%s\" is mapped to shard %s, which has "
			                       "no such tensor",
			                       ck->index_disp, name,
			                       placefs_index_shard_of(idx, i));
			break;
		}
		if (rc == 0)
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_INDEX,
			                       "%s: the index and its shards disagree",
			                       ck->index_disp);
	}
	free(v);
	return rc;
}

/* Loads the index at `path` and takes its distinct shard paths as the shard set. */
static int shards_from_index(struct placefs_ckpt *ck, const char *path, struct placefs_index **idxp,
                             struct placefs_error *err)
{
	char *disp = ck->index[0] == '/' ? strdup(ck->index) : join(ck->disp, ck->index);
	size_t alloc = 0;
	int rc;

	if (!disp)
		return nomem(err);
	ck->index_disp = disp;
	rc = placefs_index_load(path, disp, idxp, err);
	if (rc)
		goto out;
	for (size_t i = 0; i < placefs_index_shard_count(*idxp); i++) {
		const char *f = placefs_index_shard(*idxp, i);

		if (!shard_path_ok(f)) {
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_INDEX,
			                       "%s: shard path \"%s\" must be relative and stay "
			                       "inside the source directory",
			                       disp, f);
			goto out;
		}
		rc = add_shard(ck, strdup(f), &alloc, err);
		if (rc)
			goto out;
	}
	qsort(ck->shards, ck->nshards, sizeof(*ck->shards), cmp_shard_file);
out:
	return rc;
}

/* Sets up dir/disp and the shard list for a directory source. */
static int open_dir_source(struct placefs_ckpt *ck, const char *index, struct placefs_index **idxp,
                           struct placefs_error *err)
{
	char *ipath = NULL;
	int rc = 0;

	ck->dir = absolute(ck->source);
	if (!ck->dir)
		return placefs_error_set(err, -errno,
		                         errno == ENOMEM ? PLACEFS_E_NOMEM : PLACEFS_E_SOURCE,
		                         "cannot resolve %s: %s", ck->source, strerror(errno));
	ck->disp = strdup(ck->source);
	if (!ck->disp || set_root(ck))
		return nomem(err);
	if (index) {
		if (!*index)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_SOURCE,
			                         "the index path is empty");
		ck->index = strdup(index);
		ipath = index[0] == '/' ? strdup(index) : join(ck->dir, index);
		if (!ck->index || !ipath) {
			rc = nomem(err);
			goto out;
		}
	} else {
		struct stat st;

		ipath = join(ck->dir, AUTO_INDEX);
		if (!ipath)
			return nomem(err);
		/* lstat: a dangling link in the index's place is an error, not "no index". */
		if (lstat(ipath, &st) == 0) {
			ck->index = strdup(AUTO_INDEX);
			if (!ck->index) {
				rc = nomem(err);
				goto out;
			}
		} else if (errno != ENOENT) {
			rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot stat %s/%s: %s",
			                       ck->disp, AUTO_INDEX, strerror(errno));
			goto out;
		}
	}
	if (ck->index)
		rc = shards_from_index(ck, ipath, idxp, err);
	else
		rc = scan_dir(ck, err);
out:
	free(ipath);
	return rc;
}

int placefs_ckpt_open(const char *source, const char *index, struct placefs_ckpt **out,
                      struct placefs_error *err)
{
	struct placefs_index *idx = NULL;
	struct placefs_ckpt *ck;
	struct stat st;
	int rc;

	if (!source || !out)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "ckpt: no source given");
	*out = NULL;
	if (!*source)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_SOURCE,
		                         "the source path is empty");
	if (stat(source, &st) != 0)
		return placefs_error_set(err, -errno, PLACEFS_E_SOURCE, "cannot open source %s: %s",
		                         source, strerror(errno));
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return placefs_error_set(err, -EINVAL, PLACEFS_E_SOURCE,
		                         "source %s is neither a file nor a directory", source);
	if (S_ISREG(st.st_mode) && index)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_SOURCE,
		                         "source %s is a file: an index (%s) needs a directory "
		                         "source",
		                         source, index);
	ck = calloc(1, sizeof(*ck));
	if (!ck)
		return nomem(err);
	ck->source = strdup(source);
	if (!ck->source) {
		rc = nomem(err);
		goto fail;
	}
	if (S_ISREG(st.st_mode)) {
		char *abs = absolute(source);
		char *base = NULL;
		size_t alloc = 0;

		if (!abs) {
			rc = placefs_error_set(err, -errno,
			                       errno == ENOMEM ? PLACEFS_E_NOMEM : PLACEFS_E_SOURCE,
			                       "cannot resolve %s: %s", source, strerror(errno));
			goto fail;
		}
		rc = split_path(abs, &ck->dir, &base);
		free(abs);
		ck->disp = display_dir(source);
		if (rc || !ck->disp) {
			free(base);
			rc = nomem(err);
			goto fail;
		}
		rc = add_shard(ck, base, &alloc, err);
	} else {
		rc = open_dir_source(ck, index, &idx, err);
	}
	if (rc)
		goto fail;
	ck->priv = calloc(ck->nshards ? ck->nshards : 1, sizeof(*ck->priv));
	if (!ck->priv) {
		rc = nomem(err);
		goto fail;
	}
	for (size_t i = 0; i < ck->nshards; i++)
		pthread_mutex_init(&ck->priv[i].lock, NULL);
	rc = open_shards(ck, err);
	if (rc)
		goto fail;
	rc = collect(ck, idx, err);
	if (rc)
		goto fail;
	rc = check_names(ck, idx, err);
	if (rc)
		goto fail;
	placefs_index_free(idx);
	*out = ck;
	return 0;

fail:
	placefs_index_free(idx);
	placefs_ckpt_free(ck);
	return rc;
}

const char *placefs_ckpt_source(const struct placefs_ckpt *ck)
{
	return ck->source;
}

const char *placefs_ckpt_dir(const struct placefs_ckpt *ck)
{
	return ck->dir;
}

const char *placefs_ckpt_index(const struct placefs_ckpt *ck)
{
	return ck->index;
}

size_t placefs_ckpt_shard_count(const struct placefs_ckpt *ck)
{
	return ck->nshards;
}

const struct placefs_shard *placefs_ckpt_shard(const struct placefs_ckpt *ck, size_t i)
{
	return i < ck->nshards ? &ck->shards[i] : NULL;
}

size_t placefs_ckpt_tensor_count(const struct placefs_ckpt *ck)
{
	return ck->ntensors;
}

const struct placefs_tensor *placefs_ckpt_tensors(const struct placefs_ckpt *ck)
{
	return ck->tensors;
}

static int stale_rewritten(const struct placefs_shard *sh, struct placefs_error *err)
{
	return placefs_error_set(err, -ESTALE, PLACEFS_E_IO,
	                         "shard %s was rewritten since mount: same size and modification "
	                         "time, but a new change time and a different header",
	                         sh->path);
}

/*
 * Size, mtime and inode match. A new ctime means the inode changed all the
 * same (a write, a chmod, a utimensat putting the mtime back): the header is
 * read again and must be the one validated. `fst` is the fstat taken before
 * the read, so a change during it shows a newer ctime at the next check.
 */
static int ctime_check(const struct placefs_ckpt *ck, size_t i, const struct stat *fst,
                       struct placefs_error *err)
{
	const struct placefs_shard *sh = &ck->shards[i];
	struct shard_priv *p;
	uint8_t *buf = NULL;
	uint64_t now;
	ssize_t r;
	int rc = 0;

	if (!ck->priv)
		return 0;
	p = &ck->priv[i];
	now = ts_ns(fst->st_ctim);
	if (atomic_load_explicit(&p->ctime_ok, memory_order_acquire) == now)
		return 0; /* the common case: no lock */
	/* Known bad: refused without reading the header again at every request. */
	if (atomic_load_explicit(&p->ctime_bad, memory_order_acquire) == now)
		return stale_rewritten(sh, err);
	pthread_mutex_lock(&p->lock);
	if (atomic_load_explicit(&p->ctime_ok, memory_order_acquire) == now)
		goto out; /* another thread read the header meanwhile */
	buf = malloc(p->hdr_len ? p->hdr_len : 1);
	if (!buf) {
		rc = nomem(err);
		goto out;
	}
	r = placefs_io_pread_full(sh->fd, buf, p->hdr_len, 0);
	if (r < 0 || (size_t)r != p->hdr_len) {
		rc = placefs_error_set(err, -EIO, PLACEFS_E_IO,
		                       "shard %s changed since mount and its header cannot be read "
		                       "again: %s",
		                       sh->path, r < 0 ? strerror((int)-r) : "short read");
		goto out;
	}
	if (memcmp(buf, p->hdr, p->hdr_len) != 0) {
		atomic_store_explicit(&p->ctime_bad, now, memory_order_release);
		rc = stale_rewritten(sh, err);
		goto out;
	}
	atomic_store_explicit(&p->ctime_ok, now, memory_order_release);
out:
	pthread_mutex_unlock(&p->lock);
	free(buf);
	return rc;
}

/* The device and inode shard i's descriptor holds now (see placefs_ckpt_shard_reopen()). */
static void shard_ident(const struct placefs_ckpt *ck, size_t i, uint64_t *dev, uint64_t *ino)
{
	if (!ck->priv) {
		*dev = (uint64_t)ck->shards[i].dev;
		*ino = (uint64_t)ck->shards[i].ino;
		return;
	}
	*dev = atomic_load_explicit(&ck->priv[i].dev, memory_order_acquire);
	*ino = atomic_load_explicit(&ck->priv[i].ino, memory_order_acquire);
}

int placefs_ckpt_shard_check(const struct placefs_ckpt *ck, size_t i, struct placefs_error *err)
{
	const struct placefs_shard *sh;
	struct stat st, fst;
	uint64_t dev, ino;

	if (!ck || i >= ck->nshards)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "ckpt: no shard %zu", i);
	sh = &ck->shards[i];
	if (fstat(sh->fd, &st) != 0)
		return placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot stat shard %s: %s",
		                         sh->path, strerror(errno));
	fst = st;
	if ((uint64_t)st.st_size < sh->size)
		return placefs_error_set(err, -EIO, PLACEFS_E_IO,
		                         "shard %s shrank from %" PRIu64 " to %" PRIu64 " bytes",
		                         sh->path, sh->size, (uint64_t)st.st_size);
	if ((uint64_t)st.st_size != sh->size || st.st_mtim.tv_sec != sh->mtime.tv_sec ||
	    st.st_mtim.tv_nsec != sh->mtime.tv_nsec)
		return placefs_error_set(err, -ESTALE, PLACEFS_E_IO,
		                         "shard %s changed since mount (size %" PRIu64
		                         " -> %" PRIu64 " bytes, or a new modification time)",
		                         sh->path, sh->size, (uint64_t)st.st_size);
	if (stat(sh->path, &st) != 0)
		return placefs_error_set(err, -ESTALE, PLACEFS_E_IO,
		                         "shard %s was removed or replaced since mount: %s",
		                         sh->path, strerror(errno));
	shard_ident(ck, i, &dev, &ino);
	if ((uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino ||
	    (uint64_t)fst.st_dev != dev || (uint64_t)fst.st_ino != ino)
		return placefs_error_set(err, -ESTALE, PLACEFS_E_IO,
		                         "shard %s was replaced since mount", sh->path);
	return ctime_check(ck, i, &fst, err);
}

int placefs_ckpt_shard_reopen(const struct placefs_ckpt *ck, size_t i, bool same_file,
                              struct placefs_error *err)
{
	const struct placefs_shard *sh;
	struct shard_priv *p;
	struct stat st, fst;
	uint8_t *buf = NULL;
	uint64_t dev, ino;
	ssize_t r;
	int fd, rc = 0;

	if (!ck || i >= ck->nshards || !ck->priv)
		return 0;
	sh = &ck->shards[i];
	p = &ck->priv[i];
	shard_ident(ck, i, &dev, &ino);
	/*
	 * Nothing at the path, or not the file asked for (another file system
	 * after a failed check; the very file the descriptor holds for a fresh
	 * descriptor): the caller's verdict stands.
	 */
	if (stat(sh->path, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	if (same_file ? (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino
	              : (uint64_t)st.st_dev == dev)
		return 0;
	if ((uint64_t)st.st_size != sh->size || st.st_mtim.tv_sec != sh->mtime.tv_sec ||
	    st.st_mtim.tv_nsec != sh->mtime.tv_nsec)
		return placefs_error_set(err, -ESTALE, PLACEFS_E_IO,
		                         "shard %s is on a file system mounted again, but its size "
		                         "(%" PRIu64 " bytes) or modification time is not the one "
		                         "validated",
		                         sh->path, (uint64_t)st.st_size);
	fd = ck->root ? open_beneath(ck, sh->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
	              : open(sh->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return 0; /* gone again, or it leads out: stays refused */
	/* The file opened must be the one looked at, and still the one validated. */
	if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode) || fst.st_dev != st.st_dev ||
	    fst.st_ino != st.st_ino || (uint64_t)fst.st_size != sh->size ||
	    fst.st_mtim.tv_sec != sh->mtime.tv_sec || fst.st_mtim.tv_nsec != sh->mtime.tv_nsec ||
	    fcntl(fd, F_SETFL, 0) != 0)
		goto out;
	buf = malloc(p->hdr_len ? p->hdr_len : 1);
	if (!buf) {
		rc = nomem(err);
		goto out;
	}
	r = placefs_io_pread_full(fd, buf, p->hdr_len, 0);
	if (r < 0 || (size_t)r != p->hdr_len || memcmp(buf, p->hdr, p->hdr_len) != 0) {
		rc = placefs_error_set(err, -ESTALE, PLACEFS_E_IO,
		                       "shard %s is on a file system mounted again, but its header "
		                       "%s",
		                       sh->path,
		                       r < 0 || (size_t)r != p->hdr_len
		                               ? "cannot be read"
		                               : "is not the one validated");
		goto out;
	}
	/*
	 * Adopted: the descriptor's number now holds the new file (dup3 replaces
	 * it at once; a read in progress on the old one finishes there), so its
	 * users (reads, stagers) need not know. The lock keeps a header re-read
	 * of ctime_check() from racing the switch.
	 */
	pthread_mutex_lock(&p->lock);
	/* Its header read as any reader would; O_DIRECT from here on, as the shard's was. */
	if (atomic_load(&p->direct) && fcntl(fd, F_SETFL, O_DIRECT) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "cannot reopen shard %s with O_DIRECT reads: %s", sh->path,
		                       strerror(errno));
	} else if (dup3(fd, sh->fd, O_CLOEXEC) < 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot reopen shard %s: %s",
		                       sh->path, strerror(errno));
	} else {
		atomic_store_explicit(&p->dev, (uint64_t)fst.st_dev, memory_order_release);
		atomic_store_explicit(&p->ino, (uint64_t)fst.st_ino, memory_order_release);
		atomic_store_explicit(&p->ctime_bad, 0, memory_order_release);
		atomic_store_explicit(&p->ctime_ok, ts_ns(fst.st_ctim), memory_order_release);
		rc = 1;
	}
	pthread_mutex_unlock(&p->lock);
out:
	free(buf);
	close(fd);
	return rc;
}

int placefs_ckpt_shard_set_direct(const struct placefs_ckpt *ck, size_t i, bool on,
                                  struct placefs_error *err)
{
	const struct placefs_shard *sh;
	struct shard_priv *p;
	int rc = 0;

	if (!ck || i >= ck->nshards || !ck->priv)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "no shard %zu", i);
	sh = &ck->shards[i];
	p = &ck->priv[i];
	/* Under the lock: a reopen adopting a new descriptor meanwhile sees the new setting. */
	pthread_mutex_lock(&p->lock);
	if (fcntl(sh->fd, F_SETFL, on ? O_DIRECT : 0) != 0)
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO,
		                       "shard %s: cannot %s O_DIRECT reads: %s", sh->path,
		                       on ? "turn on" : "turn off", strerror(errno));
	else
		atomic_store(&p->direct, on);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int placefs_ckpt_open_file(const struct placefs_ckpt *ck, const char *file, int flags)
{
	if (!ck || !ck->root)
		return -EINVAL;
	return open_beneath(ck, file, flags);
}

int placefs_ckpt_is_dir(const struct placefs_ckpt *ck)
{
	return ck->root != NULL;
}
