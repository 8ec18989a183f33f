/* SPDX-License-Identifier: MIT */
/*
 * placefs-stage: stages tensor files of a placefs mount through the mount's
 * staging ring (copy or borrow mode), reports per-tensor and total
 * throughput and, with --verify, compares every staged tensor with a plain
 * read() of the same file. See doc/placefs-stage.1.
 *
 * Exit status: 0 every tensor staged (and verified); 1 a tensor failed;
 * 2 bad command line.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/io.h"
#include "placefs/client.h"
#include "common/progress.h"
#include "common/size.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Everything staged through one mount (files are grouped by st_dev). */
struct mnt {
	dev_t dev;
	uint64_t largest; /* largest file of this mount on the command line */
	/* its files' bytes, each at a multiple of BATCH_ALIGN (saturated); --all with
	 * .placefs/packed.tsv: the size of the mount's packed gpu layout */
	uint64_t packed;
	bool have_info;
	struct placefs_ioc_ring_info ri;
	struct placefs_client_dest *dest;
	struct placefs_client_ring *ring;
	bool setup_failed;
	uint32_t batch; /* tensors a request on this mount (batch_size()), once set up */
};

struct file {
	char *path;
	uint64_t size;
	size_t mnt;
	/* --all, from the mount's .placefs/packed.tsv (collect_all()): */
	uint64_t index;  /* its plan entry */
	uint64_t packed; /* its offset in the mount's packed gpu layout */
};

static struct {
	int mode; /* PLACEFS_IOC_STAGE_COPY or _BORROW */
	bool verify;
	bool quiet;
	uint64_t timeout_ns;
	/* --slice DIM:START:LEN, or RANK/WORLD@DIM (the even split, per tensor) */
	bool slice, shard;
	uint32_t slice_dim, rank, world;
	uint64_t slice_start, slice_len;
	/* --device N: the ring of device N (CUDA ordinal or N of host:N) */
	bool has_device;
	int32_t device;
	/* --batch N: up to N tensors a request (copy mode); 0: not given (batch_size()) */
	uint32_t batch;
	/* --all: every gpu-placed tensor of one mount, in plan order */
	bool all;
} cfg;

/* A --batch destination holds at most this much (or the largest tensor). */
#define BATCH_DEST_BYTES ((uint64_t)64 << 20)
/* Tensors' offsets in a batch destination, as the loaders lay them out. */
#define BATCH_ALIGN 256

/*
 * The shm destinations this program made, unlinked by the signal handler
 * too, so that an interrupted run leaves nothing in /dev/shm.
 */
#define MAX_SHM 16
static char shm_names[MAX_SHM][PLACEFS_IOC_HANDLE_MAX];
static volatile sig_atomic_t nshm;

static void on_signal(int sig)
{
	int i;

	for (i = 0; i < nshm; i++)
		shm_unlink(shm_names[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void remember_shm(const struct placefs_client_dest *d)
{
	const char *name = placefs_client_dest_shm_name(d);

	if (!name || nshm >= MAX_SHM)
		return;
	snprintf(shm_names[nshm], sizeof(shm_names[nshm]), "%s", name);
	nshm = nshm + 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: placefs-stage [--mode copy|borrow] [--verify] [--timeout MS] [-q]\n"
	           "                     [--slice DIM:START:LEN | --slice RANK/WORLD@DIM]\n"
	           "                     [--device N] [--batch N]\n"
	           "                     (--all MOUNTPOINT | FILE...)\n"
	           "Stages tensor files of a placefs mount through its staging ring.\n"
	           "\n"
	           "  --all MOUNTPOINT  every gpu-placed tensor of the mount, in checkpoint order\n"
	           "  --mode MODE       copy (into memory of this program, default) or borrow\n"
	           "                    (lease the ring bytes, then release them); the default\n"
	           "                    comes from INSTANTTENSOR_COPY: 1 copy, 0 borrow\n"
	           "  --verify          compare each staged tensor with a read() of its file\n"
	           "  --timeout MS      longest wait for ring space per tensor (default: none)\n"
	           "  --slice DIM:START:LEN  stage only elements [START, START+LEN) of dimension\n"
	           "                    DIM (0: rows, 1: columns); or RANK/WORLD@DIM: rank's\n"
	           "                    even part of each tensor's dimension DIM\n"
	           "  --device N        stage through the ring of device N (cuda:N, or host:N),\n"
	           "                    which a borrow on a mount of several devices needs\n"
	           "  --batch N         copy mode: up to N tensors (1-256) a request, staged\n"
	           "                    side by side by the daemon into one destination\n"
	           "                    (PLACEFS_IOC_STAGE_BATCH; a mount of one ring);\n"
	           "                    default 256 with --all in copy mode (one a request\n"
	           "                    with --slice, in borrow mode, on a mount of several\n"
	           "                    rings and for files); 1: one tensor a request\n"
	           "  -q, --quiet       no per-tensor lines, only the summary\n"
	           "  -h, --help        show this help\n"
	           "  -V, --version     show the version\n");
}

/*
 * The progress bar on stderr (lib/common/progress.h: bytes, rate, ETA), drawn only
 * when stderr is a terminal; NULL until the files are known.
 */
static struct placefs_progress *bar;

/* Clears the progress bar before a line is printed. */
static void bar_clear(void)
{
	placefs_progress_clear(bar);
}

static void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void errorf(const char *fmt, ...)
{
	va_list ap;

	bar_clear();
	fflush(stdout);
	fputs("placefs-stage: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The mode from --mode or INSTANTTENSOR_COPY; -1 for a bad value. */
static int parse_mode(const char *arg)
{
	const char *env;

	if (arg) {
		if (strcmp(arg, "copy") == 0)
			return PLACEFS_IOC_STAGE_COPY;
		if (strcmp(arg, "borrow") == 0)
			return PLACEFS_IOC_STAGE_BORROW;
		errorf("--mode must be copy or borrow, got '%s'", arg);
		return -1;
	}
	env = getenv("INSTANTTENSOR_COPY");
	if (!env || strcmp(env, "1") == 0)
		return PLACEFS_IOC_STAGE_COPY;
	if (strcmp(env, "0") == 0)
		return PLACEFS_IOC_STAGE_BORROW;
	errorf("INSTANTTENSOR_COPY must be 0 or 1, got '%s'", env);
	return -1;
}

/* Reads all of fd (n bytes, from its start) into buf with read(); -EIO when it is shorter. */
static int read_all(int fd, uint8_t *buf, uint64_t n)
{
	ssize_t r;

	if (lseek(fd, 0, SEEK_SET) != 0)
		return -errno;
	r = placefs_io_read_full(fd, buf, (size_t)n);
	if (r < 0)
		return (int)r;
	return (uint64_t)r < n ? -EIO : 0;
}

/* v rounded up to BATCH_ALIGN, saturated. */
static uint64_t align_up(uint64_t v)
{
	return v > UINT64_MAX - (BATCH_ALIGN - 1)
	               ? UINT64_MAX
	               : (v + BATCH_ALIGN - 1) / BATCH_ALIGN * BATCH_ALIGN;
}

/*
 * The tensors a request on a mount whose ring info is ri: --batch N when
 * given; otherwise PLACEFS_IOC_BATCH_MAX for --all in copy mode of whole
 * tensors on a mount of one ring (a batch names no device), else 1. A
 * mixture of experts of 51,027 tensors, host ring, the first pass on a
 * fresh mount: 7.2-7.8 s one a request, 0.10-0.13 s 256 a request
 * (placefs-stage --all --batch 1 and --batch 256, doc/placefs-stage.1).
 */
static uint32_t batch_size(const struct placefs_ioc_ring_info *ri)
{
	if (cfg.batch)
		return cfg.batch;
	if (cfg.all && cfg.mode == PLACEFS_IOC_STAGE_COPY && !cfg.slice && ri->ndevices <= 1)
		return PLACEFS_IOC_BATCH_MAX;
	return 1;
}

/*
 * The copy destination of a mount: its largest tensor; when it batches,
 * room for a batch: BATCH_DEST_BYTES, but no more than N of its largest
 * tensor (each after up to BATCH_ALIGN - 1 bytes of padding) or all of its
 * files need (shared memory is not spent on room no batch uses), and never
 * less than the largest tensor.
 */
static uint64_t dest_bytes(const struct mnt *mt)
{
	uint64_t room = BATCH_DEST_BYTES, most;

	if (mt->batch <= 1)
		return mt->largest;
	/* --all: a packed layout pads a tensor by up to BATCH_ALIGN - 1 bytes, whatever its size. */
	most = cfg.all ? mt->largest + (BATCH_ALIGN - 1) : align_up(mt->largest);
	if (most < mt->largest || __builtin_mul_overflow(most, (uint64_t)mt->batch, &most))
		most = UINT64_MAX;
	if (most < room)
		room = most;
	if (mt->packed < room)
		room = mt->packed;
	return room > mt->largest ? room : mt->largest;
}

/* The mount's ring info, destination and ring mapping, made on first use. */
static int mnt_setup(struct mnt *mt, int fd, const char *path)
{
	struct placefs_client_error e;
	char sz[32];
	int rc;

	if (mt->setup_failed)
		return -1;
	if (mt->have_info)
		return 0;
	mt->setup_failed = true;
	if ((cfg.has_device ? placefs_client_ring_info_device(fd, cfg.device, &mt->ri, &e)
	                    : placefs_client_ring_info(fd, &mt->ri, &e)) != 0) {
		errorf("%s: %s", path, e.msg);
		return -1;
	}
	if (mt->ri.backend == PLACEFS_IOC_BACKEND_NONE) {
		errorf("%s: staging is disabled on this mount (-o device=none)", path);
		return -1;
	}
	mt->batch = batch_size(&mt->ri);
	if (cfg.mode == PLACEFS_IOC_STAGE_COPY) {
		rc = placefs_client_dest_create(&mt->ri, dest_bytes(mt), &mt->dest, &e);
		if (rc != 0) {
			placefs_size_format(dest_bytes(mt), sz, sizeof(sz));
			errorf("%s: cannot make a %s destination: %s", path, sz, e.msg);
			return -1;
		}
		remember_shm(mt->dest);
	} else if (cfg.verify) {
		rc = placefs_client_ring_map(&mt->ri, &mt->ring, &e);
		if (rc != 0) {
			errorf("%s: cannot map the ring to verify borrowed bytes: %s", path, e.msg);
			return -1;
		}
	}
	mt->have_info = true;
	mt->setup_failed = false;
	return 0;
}

/*
 * The tensor's first two dimensions from its user.placefs.shape xattr
 * ("[4096, 512]"); *ndim is the number of dimensions (up to 2 kept).
 */
static int read_shape(int fd, const char *path, uint64_t shape[2], unsigned *ndim)
{
	char buf[4096], *p, *end;
	ssize_t n = fgetxattr(fd, "user.placefs.shape", buf, sizeof(buf) - 1);

	*ndim = 0;
	if (n < 2) {
		errorf("%s: no user.placefs.shape xattr for --slice", path);
		return -1;
	}
	buf[n] = '\0';
	p = buf + 1;
	while (*p && *p != ']') {
		unsigned long long v;

		errno = 0;
		v = strtoull(p, &end, 10);
		if (errno || end == p) {
			errorf("%s: unreadable user.placefs.shape '%s'", path, buf);
			return -1;
		}
		if (*ndim < 2)
			shape[*ndim] = v;
		++*ndim;
		p = end;
		while (*p == ',' || *p == ' ')
			p++;
	}
	return 0;
}

/* The stage arguments for this file: the slice (--slice) and the device (--device). */
static int stage_args(int fd, const struct file *f, struct placefs_client_stage_args *a,
                      uint64_t shape[2], unsigned *ndim)
{
	struct placefs_client_error e;

	memset(a, 0, sizeof(*a));
	a->timeout_ns = cfg.timeout_ns;
	if (cfg.has_device) {
		a->flags |= PLACEFS_IOC_STAGE_DEVICE;
		a->device = cfg.device;
	}
	if (!cfg.slice)
		return 0;
	if (read_shape(fd, f->path, shape, ndim) != 0)
		return -1;
	a->flags |= PLACEFS_IOC_STAGE_SLICE;
	a->slice_dim = cfg.slice_dim;
	a->slice_start = cfg.slice_start;
	a->slice_len = cfg.slice_len;
	if (cfg.shard) {
		if (cfg.slice_dim >= *ndim) {
			errorf("%s: --slice %u/%u@%u: the tensor has %u dimensions", f->path,
			       cfg.rank, cfg.world, cfg.slice_dim, *ndim);
			return -1;
		}
		if (placefs_client_shard(shape[cfg.slice_dim], cfg.rank, cfg.world, &a->slice_start,
		                         &a->slice_len, &e) != 0) {
			errorf("%s: --slice: %s", f->path, e.msg);
			return -1;
		}
	}
	return 0;
}

/*
 * Compacts the slice a names out of the whole tensor in buf (size bytes,
 * first dimensions shape[]), in place: the bytes the daemon should have
 * staged, nbytes of them. -1 when rows or columns are not whole bytes.
 */
static int cut_slice(uint8_t *buf, uint64_t size, const uint64_t shape[2], unsigned ndim,
                     const struct placefs_client_stage_args *a, uint64_t nbytes)
{
	uint64_t rows, row, col, i;

	if (ndim < 1 || shape[0] == 0 || size % shape[0])
		return -1;
	row = size / shape[0];
	if (a->slice_dim == 0) {
		if (a->slice_len * row != nbytes)
			return -1;
		memmove(buf, buf + a->slice_start * row, nbytes);
		return 0;
	}
	if (ndim < 2 || shape[1] == 0 || row % shape[1])
		return -1;
	rows = shape[0];
	col = row / shape[1];
	if (rows * a->slice_len * col != nbytes)
		return -1;
	for (i = 0; i < rows; i++)
		memmove(buf + i * a->slice_len * col, buf + i * row + a->slice_start * col,
		        a->slice_len * col);
	return 0;
}

struct totals {
	size_t staged, failed, verified, prefetched;
	unsigned long requests; /* stage and batch ioctls sent */
	uint64_t bytes;
	double stage_s; /* wall time inside the stage ioctls */
	double first, last;
	double verify_s;  /* checking, between the first and the last ioctl */
	double pending_s; /* checking since the last ioctl */
};

/*
 * Compares n staged bytes (got) with read()'s (want); when they differ,
 * reports the first byte that does, and where the staged copy was (`where`).
 * Returns 0 when they are the same, else -1.
 */
static int same_bytes(const char *path, const uint8_t *want, const uint8_t *got, uint64_t n,
                      const char *where)
{
	uint64_t i = 0;

	if (memcmp(want, got, n) == 0)
		return 0;
	while (want[i] == got[i])
		i++;
	errorf("%s: staged bytes differ from read() at byte %" PRIu64 " of %" PRIu64 " (%s)", path,
	       i, n, where);
	return -1;
}

/*
 * Counts a staged tensor and, unless -q, prints its line: its bytes, the
 * time of the request that staged it and that request's throughput (over
 * req_bytes), then `what` (the batch, or ""), and the flags.
 */
static void tally(struct totals *tot, const char *path, uint64_t nbytes, uint32_t out_flags,
                  bool verified, double secs, uint64_t req_bytes, const char *what)
{
	char sz[32];

	tot->staged++;
	tot->bytes += nbytes;
	tot->verified += verified;
	tot->prefetched += (out_flags & PLACEFS_IOC_STAGED_PREFETCHED) != 0;
	if (cfg.quiet)
		return;
	bar_clear();
	placefs_size_format(nbytes, sz, sizeof(sz));
	printf("%12" PRIu64 " B %10s %9.3f ms %8.2f GB/s%s%s%s  %s\n", nbytes, sz, secs * 1e3,
	       secs > 0 ? (double)req_bytes / secs / 1e9 : 0.0, what,
	       (out_flags & PLACEFS_IOC_STAGED_PREFETCHED) ? "  prefetched" : "",
	       verified ? "  verified" : "", path);
}

/*
 * Stages one file and verifies it. The buffers hold the largest tensor.
 * Returns 0 or -1 (the failure is reported).
 */
static int stage_file(struct file *f, struct mnt *mt, uint8_t *want, uint8_t *got,
                      struct totals *tot)
{
	struct placefs_client_error e;
	struct placefs_client_stage_args a;
	struct placefs_ioc_stage r;
	uint64_t shape[2] = {0, 0};
	unsigned ndim = 0;
	double t0, t1, v0;
	char where[64];
	int fd, rc, ok = -1;
	bool verified = false;

	if (placefs_client_open(f->path, &fd, &e) != 0) {
		errorf("%s", e.msg);
		return -1;
	}
	if (mnt_setup(mt, fd, f->path) != 0)
		goto out;
	if (stage_args(fd, f, &a, shape, &ndim) != 0)
		goto out;
	t0 = placefs_clock_s();
	if (tot->first == 0)
		tot->first = t0;
	tot->verify_s += tot->pending_s;
	tot->pending_s = 0;
	tot->requests++;
	if (cfg.mode == PLACEFS_IOC_STAGE_COPY)
		rc = placefs_client_copy_ex(fd, mt->dest, 0, &a, &r, &e);
	else
		rc = placefs_client_borrow_ex(fd, &a, &r, &e);
	t1 = placefs_clock_s();
	tot->last = t1;
	if (rc != 0) {
		errorf("%s: %s [%s]", f->path, e.msg, placefs_client_errno_name(rc));
		goto out;
	}
	tot->stage_s += t1 - t0;
	if (cfg.slice ? r.nbytes > f->size : r.nbytes != f->size) {
		errorf("%s: the daemon staged %" PRIu64 " bytes, the file has %" PRIu64, f->path,
		       r.nbytes, f->size);
		goto release;
	}
	if (cfg.verify) {
		v0 = placefs_clock_s();
		rc = read_all(fd, want, f->size);
		if (rc != 0) {
			errorf("%s: read() for --verify failed: %s", f->path, strerror(-rc));
			goto release;
		}
		if (cfg.slice && cut_slice(want, f->size, shape, ndim, &a, r.nbytes) != 0) {
			errorf("%s: --verify: the slice of %" PRIu64 " bytes is not a whole number "
			       "of bytes per row",
			       f->path, r.nbytes);
			goto release;
		}
		if (cfg.mode == PLACEFS_IOC_STAGE_COPY)
			rc = placefs_client_dest_read(mt->dest, 0, got, r.nbytes, &e);
		else
			rc = placefs_client_ring_read(mt->ring, r.ring_offset, got, r.nbytes, &e);
		if (rc != 0) {
			errorf("%s: cannot read the staged bytes back: %s", f->path, e.msg);
			goto release;
		}
		snprintf(where, sizeof(where), "ring offset %" PRIu64, r.ring_offset);
		if (same_bytes(f->path, want, got, r.nbytes, where) != 0)
			goto release;
		verified = true;
		tot->pending_s += placefs_clock_s() - v0;
	}
	ok = 0;
release:
	if (cfg.mode == PLACEFS_IOC_STAGE_BORROW && placefs_client_release(fd, r.lease, &e) != 0) {
		errorf("%s: %s", f->path, e.msg);
		ok = -1;
	}
	if (ok == 0)
		tally(tot, f->path, r.nbytes, r.out_flags, verified, t1 - t0, r.nbytes, "");
out:
	close(fd);
	return ok;
}

/*
 * The end of the batch that starts at files[i]: the files after it on the
 * same mount, at most the mount's batch size, whose bytes fit the mount's
 * destination: each at a multiple of BATCH_ALIGN, or with `ranged` where the
 * packed layout puts them (from files[i]'s packed offset on).
 */
static size_t batch_end(const struct file *files, size_t n, size_t i, bool ranged,
                        const struct mnt *mt)
{
	uint64_t room = dest_bytes(mt), used = 0;
	size_t j;

	for (j = i; j < n && j - i < mt->batch && files[j].mnt == files[i].mnt; j++) {
		uint64_t at = ranged ? files[j].packed - files[i].packed : align_up(used);

		if (j > i && (at > room || files[j].size > room - at))
			break;
		used = at + files[j].size;
	}
	return j;
}

/*
 * Stages files[0 .. n) of one mount in one PLACEFS_IOC_STAGE_BATCH request
 * (copy mode) into the mount's destination, and verifies each. Each file is
 * an entry named by its plan index (user.placefs.index), at its aligned
 * offset, or, with `ranged` (--all: the files are every gpu-placed tensor of
 * the mount, in plan order, their plan indexes and packed offsets from
 * .placefs/packed.tsv), the whole batch is one range of the plan from the first
 * file's index through the last's, which moves exactly these files (the
 * cpu-placed entries between them move nothing), each to its packed offset
 * less the first one's. Returns the number of files that failed (each
 * reported).
 */
static size_t stage_batch(struct file *files, size_t n, bool ranged, struct mnt *mt, uint8_t *want,
                          uint8_t *got, struct totals *tot)
{
	static unsigned long batches;
	struct placefs_ioc_batch_entry ent[PLACEFS_IOC_BATCH_MAX];
	size_t pos[PLACEFS_IOC_BATCH_MAX];   /* files[pos[k]] */
	uint64_t off[PLACEFS_IOC_BATCH_MAX]; /* ... lands at off[k] of the destination */
	uint32_t nent = 0;                   /* entries of the request */
	struct placefs_client_error e;
	uint64_t used = 0, moved = 0, want_moved = 0;
	uint32_t count = 0, done = 0, k;
	size_t failed = 0, i;
	double t0, t1;
	char where[80], what[48];
	int fd, rc;

	if (placefs_client_open(files[0].path, &fd, &e) != 0) {
		errorf("%s", e.msg);
		return n;
	}
	if (mnt_setup(mt, fd, files[0].path) != 0) {
		close(fd);
		return n;
	}
	memset(ent, 0, sizeof(ent));
	for (i = 0; i < n; i++) {
		uint64_t idx = 0;

		if (!ranged && placefs_client_index(files[i].path, &idx, &e) != 0) {
			errorf("%s", e.msg);
			failed++;
			continue;
		}
		used = ranged ? files[i].packed - files[0].packed : align_up(used);
		off[count] = used;
		pos[count++] = i;
		used += files[i].size;
		want_moved += files[i].size;
		if (!ranged) {
			ent[nent].tensor = idx;
			ent[nent++].dest_offset = off[count - 1];
		}
	}
	if (ranged) {
		/* One range, files[0] through files[n - 1]: each goes to dest_offset + its
		 * packed offset, files[0] at packed offset P, so dest_offset is 0 - P. */
		ent[0].tensor = files[0].index;
		ent[0].nbytes = files[n - 1].index - files[0].index + 1;
		ent[0].dest_offset = (uint64_t)0 - files[0].packed;
		nent = 1;
	}
	if (nent == 0)
		goto out;
	batches++;
	tot->requests++;
	t0 = placefs_clock_s();
	if (tot->first == 0)
		tot->first = t0;
	tot->verify_s += tot->pending_s;
	tot->pending_s = 0;
	rc = placefs_client_copy_batch(fd, mt->dest, ent, nent,
	                               ranged ? PLACEFS_IOC_BATCH_RANGES : 0, cfg.timeout_ns, &done,
	                               &e);
	t1 = placefs_clock_s();
	tot->last = t1;
	if (rc != 0 && (ranged || (done == 0 && ent[0].error == 0))) {
		/* Refused as a whole, or a range that failed part way: the batch failed. */
		errorf("%s and %u more: %s [%s]", files[pos[0]].path, count - 1, e.msg,
		       placefs_client_errno_name(rc));
		failed += count;
		goto out;
	}
	tot->stage_s += t1 - t0;
	for (k = 0; k < nent; k++)
		if (ent[k].error == 0)
			moved += ent[k].nbytes;
	if (ranged && moved != want_moved) {
		errorf("%s and %u more: the daemon moved %" PRIu64
		       " bytes for plan entries %" PRIu64 "..%" PRIu64 ", the files hold %" PRIu64
		       " (are they every gpu-placed tensor, in plan order?)",
		       files[0].path, count - 1, moved, ent[0].tensor,
		       ent[0].tensor + ent[0].nbytes - 1, want_moved);
		failed += count;
		goto out;
	}
	for (k = 0; k < count; k++) {
		struct file *f = &files[pos[k]];
		/* A range entry says nothing per tensor: each moved its file's bytes. */
		struct placefs_ioc_batch_entry one = {.nbytes = f->size};
		const struct placefs_ioc_batch_entry *r = ranged ? &one : &ent[k];
		bool verified = false;
		double v0;

		if (r->error) {
			errorf("%s: %s%s [%s]", f->path, strerror(r->error),
			       r->error == EFBIG ? " (not staged: placed on the cpu)" : "",
			       placefs_client_errno_name(r->error));
			failed++;
			continue;
		}
		if (r->nbytes != f->size) {
			errorf("%s: the daemon staged %" PRIu64 " bytes, the file has %" PRIu64,
			       f->path, r->nbytes, f->size);
			failed++;
			continue;
		}
		if (cfg.verify) {
			int vfd;

			v0 = placefs_clock_s();
			if (placefs_client_open(f->path, &vfd, &e) != 0) {
				errorf("%s", e.msg);
				failed++;
				continue;
			}
			rc = read_all(vfd, want, f->size);
			close(vfd);
			if (rc != 0) {
				errorf("%s: read() for --verify failed: %s", f->path,
				       strerror(-rc));
				failed++;
				continue;
			}
			if (placefs_client_dest_read(mt->dest, off[k], got, f->size, &e) != 0) {
				errorf("%s: cannot read the staged bytes back: %s", f->path, e.msg);
				failed++;
				continue;
			}
			snprintf(where, sizeof(where), "batch %lu, destination offset %" PRIu64,
			         batches, off[k]);
			if (same_bytes(f->path, want, got, f->size, where) != 0) {
				failed++;
				continue;
			}
			verified = true;
			tot->pending_s += placefs_clock_s() - v0;
		}
		snprintf(what, sizeof(what), "  batch %lu of %u", batches, count);
		tally(tot, f->path, r->nbytes, r->out_flags, verified, t1 - t0, moved, what);
	}
out:
	close(fd);
	return failed;
}

/*
 * mnt_setup() through a descriptor of its own, before the first request on
 * the mount (whether it batches depends on its ring); a failure is reported
 * once, and the files of the mount then fail one by one.
 */
static void mnt_prepare(struct mnt *mt, const char *path)
{
	struct placefs_client_error e;
	int fd;

	if (mt->have_info || mt->setup_failed)
		return;
	if (placefs_client_open(path, &fd, &e) != 0)
		return; /* the stage of this file reports it */
	mnt_setup(mt, fd, path);
	close(fd);
}

/* Groups the files by mount and finds each mount's largest file. */
static int collect(struct file *files, size_t n, struct mnt **mnts, size_t *nmnt)
{
	struct mnt *v = NULL;
	size_t i, j, k = 0;
	struct stat st;

	for (i = 0; i < n; i++) {
		if (stat(files[i].path, &st) != 0) {
			errorf("%s: %s", files[i].path, strerror(errno));
			goto fail;
		}
		if (!S_ISREG(st.st_mode)) {
			errorf("%s: not a tensor file", files[i].path);
			goto fail;
		}
		files[i].size = (uint64_t)st.st_size;
		for (j = 0; j < k && v[j].dev != st.st_dev; j++)
			;
		if (j == k) {
			struct mnt *nv = realloc(v, (k + 1) * sizeof(*nv));

			if (!nv) {
				errorf("out of memory");
				goto fail;
			}
			v = nv;
			memset(&v[k], 0, sizeof(v[k]));
			v[k++].dev = st.st_dev;
		}
		files[i].mnt = j;
		if (files[i].size > v[j].largest)
			v[j].largest = files[i].size;
		if (__builtin_add_overflow(align_up(v[j].packed), files[i].size, &v[j].packed))
			v[j].packed = UINT64_MAX;
	}
	*mnts = v;
	*nmnt = k;
	return 0;
fail:
	free(v);
	return -1;
}

/*
 * --all: files[] gets every gpu-placed tensor of the mount on `mp`, in plan
 * order, from its .placefs/packed.tsv (pk): each one's bytes, plan index
 * and offset in the packed gpu layout, where a range of the plan puts it,
 * with no stat() or look-up per file; one mount, which the files fill.
 */
static int collect_all(const char *mp, const struct placefs_client_packed *pk, struct file *files,
                       struct mnt **mnts, size_t *nmnt)
{
	struct mnt *v = calloc(1, sizeof(*v));
	size_t i, k = 0;

	if (!v) {
		errorf("out of memory");
		return -1;
	}
	for (i = 0; i < pk->count; i++) {
		const struct placefs_client_tensor *t = &pk->tensors[i];

		if (t->placement != PLACEFS_CLIENT_GPU)
			continue;
		if (asprintf(&files[k].path, "%s/%s", mp, t->file) < 0) {
			files[k].path = NULL;
			errorf("out of memory");
			free(v);
			return -1;
		}
		files[k].size = t->nbytes;
		files[k].index = i;
		files[k].packed = t->packed;
		if (t->nbytes > v->largest)
			v->largest = t->nbytes;
		k++;
	}
	v->packed = pk->layout[PLACEFS_CLIENT_GPU];
	*mnts = v;
	*nmnt = 1;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
	        {"all", required_argument, NULL, 'a'},
	        {"mode", required_argument, NULL, 'm'},
	        {"verify", no_argument, NULL, 'v'},
	        {"timeout", required_argument, NULL, 't'},
	        {"quiet", no_argument, NULL, 'q'},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {"slice", required_argument, NULL, 's'},
	        {"device", required_argument, NULL, 'd'},
	        {"batch", required_argument, NULL, 'b'},
	        {NULL, 0, NULL, 0},
	};
	struct placefs_client_error e;
	const char *all = NULL, *mode = NULL;
	struct file *files = NULL;
	struct mnt *mnts = NULL;
	struct totals tot;
	uint8_t *want = NULL, *got = NULL;
	uint64_t largest = 0;
	struct placefs_client_packed *pk = NULL;
	char **names = NULL;
	size_t nfiles = 0, nnames = 0, nmnt = 0, i, j, f;
	bool ranged = false;
	double secs;
	char sz[32];
	int c, status = EXIT_FAIL;

	while ((c = getopt_long(argc, argv, "qhV", lopts, NULL)) != -1) {
		switch (c) {
		case 'a': all = optarg; break;
		case 'm': mode = optarg; break;
		case 'v': cfg.verify = true; break;
		case 'q': cfg.quiet = true; break;
		case 't': {
			char *end;
			unsigned long long ms;

			errno = 0;
			ms = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' ||
			    ms > UINT64_MAX / 1000000ULL) {
				errorf("--timeout must be a number of milliseconds, got '%s'",
				       optarg);
				return EXIT_USAGE;
			}
			cfg.timeout_ns = ms * 1000000ULL;
			break;
		}
		case 's': {
			unsigned d, r, w;
			unsigned long long st, ln;
			int k = -1;

			/* DIM:START:LEN or RANK/WORLD@DIM, decimal, nothing after. */
			if (sscanf(optarg, "%u/%u@%u%n", &r, &w, &d, &k) == 3 && k > 0 &&
			    !optarg[k] && !strchr(optarg, '-') && !strchr(optarg, '+') &&
			    !strchr(optarg, ' ')) {
				cfg.shard = true;
				cfg.rank = r;
				cfg.world = w;
			} else if (sscanf(optarg, "%u:%llu:%llu%n", &d, &st, &ln, &k) == 3 &&
			           k > 0 && !optarg[k] && !strchr(optarg, '-') &&
			           !strchr(optarg, '+')) {
				cfg.slice_start = st;
				cfg.slice_len = ln;
			} else {
				errorf("--slice must be DIM:START:LEN or RANK/WORLD@DIM, got '%s'",
				       optarg);
				return EXIT_USAGE;
			}
			if (d > 1) {
				errorf("--slice: dimension %u (0: rows, 1: columns)", d);
				return EXIT_USAGE;
			}
			cfg.slice = true;
			cfg.slice_dim = d;
			break;
		}
		case 'd': {
			char *end;
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < -1 || v > 1023) {
				errorf("--device must be a device number from -1 to 1023, got '%s'",
				       optarg);
				return EXIT_USAGE;
			}
			cfg.has_device = true;
			cfg.device = (int32_t)v;
			break;
		}
		case 'b': {
			char *end;
			unsigned long v;

			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' || v < 1 ||
			    v > PLACEFS_IOC_BATCH_MAX) {
				errorf("--batch must be a number of tensors from 1 to %d, got '%s'",
				       PLACEFS_IOC_BATCH_MAX, optarg);
				return EXIT_USAGE;
			}
			cfg.batch = (uint32_t)v;
			break;
		}
		case 'h': usage(stdout); return EXIT_OK;
		case 'V': printf("placefs-stage %s\n", PACKAGE_VERSION); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if ((all && optind < argc) || (!all && optind >= argc)) {
		errorf("give either --all MOUNTPOINT or tensor files");
		usage(stderr);
		return EXIT_USAGE;
	}
	cfg.all = all != NULL;
	cfg.mode = parse_mode(mode);
	if (cfg.mode < 0)
		return EXIT_USAGE;
	if (cfg.batch > 1 && (cfg.mode != PLACEFS_IOC_STAGE_COPY || cfg.slice)) {
		errorf("--batch stages whole tensors in copy mode: not with %s",
		       cfg.slice ? "--slice" : "borrow mode");
		return EXIT_USAGE;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);

	if (all) {
		/*
		 * Every tensor of the mount in plan order, where its packed layout puts
		 * it: batches of --all are ranges of the plan. Without packed.tsv (or
		 * with one that does not parse) the gpu-placed files are listed, and
		 * each is named by its index.
		 */
		struct placefs_client_error pe;

		if (placefs_client_packed_read(all, &pk, &pe) == 0) {
			nfiles = (size_t)pk->placed[PLACEFS_CLIENT_GPU];
		} else if (placefs_client_list_gpu(all, &names, &nnames, &e) == 0) {
			errorf("%s: cannot lay the batches out as ranges of the plan: each tensor "
			       "is named by its index instead",
			       pe.msg);
			nfiles = nnames;
		} else {
			errorf("%s", e.msg);
			return EXIT_FAIL;
		}
	} else {
		nfiles = (size_t)(argc - optind);
	}
	files = calloc(nfiles ? nfiles : 1, sizeof(*files));
	if (!files) {
		errorf("out of memory");
		goto out;
	}
	if (pk && collect_all(all, pk, files, &mnts, &nmnt) != 0)
		goto out;
	for (i = 0; !pk && i < nfiles; i++) {
		if (all) {
			if (asprintf(&files[i].path, "%s/%s", all, names[i]) < 0) {
				files[i].path = NULL;
				errorf("out of memory");
				goto out;
			}
		} else {
			files[i].path = strdup(argv[optind + (int)i]);
			if (!files[i].path) {
				errorf("out of memory");
				goto out;
			}
		}
	}
	if (!pk && collect(files, nfiles, &mnts, &nmnt) != 0)
		goto out;
	ranged = pk != NULL;
	for (i = 0; i < nmnt; i++)
		if (mnts[i].largest > largest)
			largest = mnts[i].largest;
	if (cfg.verify) {
		want = malloc(largest ? largest : 1);
		got = malloc(largest ? largest : 1);
		if (!want || !got) {
			errorf("cannot allocate %" PRIu64 " bytes to verify with", largest);
			goto out;
		}
	}

	{
		struct placefs_error perr;
		uint64_t all_bytes = 0;

		for (i = 0; i < nfiles; i++)
			if (__builtin_add_overflow(all_bytes, files[i].size, &all_bytes))
				all_bytes = UINT64_MAX;
		placefs_error_clear(&perr);
		if (placefs_progress_create(stderr, all_bytes, cfg.verify ? "verify" : "stage", -1,
		                            NULL, NULL, &bar, &perr) != 0) {
			errorf("%s", perr.msg);
			goto out;
		}
	}
	memset(&tot, 0, sizeof(tot));
	for (i = 0; i < nfiles; i = j) {
		struct mnt *mt = &mnts[files[i].mnt];

		j = i + 1;
		/* Its ring decides how many tensors a request (batch_size()). */
		mnt_prepare(mt, files[i].path);
		if (mt->batch > 1) {
			j = batch_end(files, nfiles, i, ranged, mt);
			tot.failed += stage_batch(&files[i], j - i, ranged, mt, want, got, &tot);
		} else if (stage_file(&files[i], mt, want, got, &tot) != 0) {
			tot.failed++;
		}
		/* Failed files count too: the bar measures the way through the list. */
		for (f = i; f < j; f++)
			placefs_progress_update(bar, files[f].size);
	}
	fflush(stdout);
	placefs_progress_finish(bar);

	/* From the first ioctl to the return of the last one, without the checks in between. */
	secs = tot.last > tot.first ? tot.last - tot.first - tot.verify_s : 0;
	placefs_size_format(tot.bytes, sz, sizeof(sz));
	printf("placefs-stage: %zu of %zu tensors staged (%s), %" PRIu64 " bytes (%s) in %.3f s: "
	       "%.2f GB/s; %.3f s in the ioctls; %zu prefetched; %lu request%s",
	       tot.staged, nfiles, cfg.mode == PLACEFS_IOC_STAGE_COPY ? "copy" : "borrow",
	       tot.bytes, sz, secs, secs > 0 ? (double)tot.bytes / secs / 1e9 : 0.0, tot.stage_s,
	       tot.prefetched, tot.requests, tot.requests == 1 ? "" : "s");
	if (nmnt == 1 && mnts[0].have_info)
		printf("; ring %" PRIu64 " bytes on %s", mnts[0].ri.ring_bytes,
		       mnts[0].ri.backend == PLACEFS_IOC_BACKEND_CUDA ? "cuda" : "host");
	putchar('\n');
	if (cfg.verify)
		printf("verify: %zu of %zu tensors byte-exact\n", tot.verified, nfiles);
	if (tot.failed)
		printf("placefs-stage: %zu tensor%s failed\n", tot.failed,
		       tot.failed == 1 ? "" : "s");
	status = tot.failed ? EXIT_FAIL : EXIT_OK;
out:
	for (i = 0; i < nmnt; i++) {
		placefs_client_dest_free(mnts[i].dest);
		placefs_client_ring_unmap(mnts[i].ring);
	}
	free(mnts);
	for (i = 0; files && i < nfiles; i++)
		free(files[i].path);
	free(files);
	placefs_client_list_free(names, nnames);
	placefs_client_packed_free(pk);
	free(want);
	free(got);
	placefs_progress_free(bar);
	return status;
}
