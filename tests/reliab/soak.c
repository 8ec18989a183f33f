/* SPDX-License-Identifier: MIT */
/*
 * soak: many concurrent readers of a placefs mount, every byte checked.
 *
 *   soak [-t THREADS] [-s SECONDS] [-S SEED] [-L MAXLEN] [-m MODES]
 *        [-e ERRNO,...] [-x] [-p] MANIFEST
 *
 * MANIFEST has one line per tensor file, fields separated by tabs:
 *
 *   <path in the mount> <gpu|cpu> <source shard path> <payload offset> <nbytes>
 *
 * worked out independently of the mount (tests/reliab/stutil.py manifest).
 * Each thread picks a random tensor (one pick in eight among those of 1 MiB
 * or more, so large replies are exercised), a random offset (sometimes at or
 * past the end) and length, reads that range through the mount in one of
 * three ways (O_DIRECT pread, which always reaches the daemon; cached pread;
 * a MAP_SHARED mapping) and compares it with the same range read from the
 * source shard: the length must be exactly what the file holds there and
 * every byte must match.
 *
 * Errors whose errno is listed with -e are tolerated (counted per errno);
 * with -x a thread stops at its first tolerated error, which is what the
 * fault tests use while they kill or stop the daemon; with -p a short read
 * is followed up instead of being a failure (see read_pread). Any other
 * error, a short read without -p, or a wrong byte is a failure. The last line of output is a
 * summary of key=value pairs for the calling script; the exit status is 0
 * only with no mismatch and no unexpected error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_ERRNO 256
#define MiB       (1024u * 1024u)

enum { MODE_DIRECT = 1, MODE_CACHED = 2, MODE_MMAP = 4 };

struct tensor {
	char *path;
	int gpu;
	int src_fd;
	uint64_t offset;
	uint64_t nbytes;
};

struct counters {
	uint64_t reads;           /* reads issued and checked */
	uint64_t bytes;           /* bytes returned and checked */
	uint64_t opens;           /* successful opens of tensor files */
	uint64_t direct_daemon;   /* O_DIRECT reads that had to reach the daemon */
	uint64_t direct_bytes[2]; /* their bytes, [0] cpu, [1] gpu */
	uint64_t mismatches;      /* wrong bytes or wrong lengths */
	uint64_t short_reads;     /* with -p: reads that needed a follow-up */
	uint64_t unexpected;      /* errors not listed with -e */
	uint64_t tolerated[MAX_ERRNO];
};

static struct tensor *tensors;
static size_t ntensors;
static size_t *large;
static size_t nlarge;
static int modes = MODE_DIRECT | MODE_CACHED | MODE_MMAP;
static uint64_t maxlen = 2 * MiB;
static int tolerated_errno[MAX_ERRNO];
static int stop_on_error;
static int allow_partial;
static uint64_t seed = 1;
static struct timespec deadline;
static atomic_int reports;
static struct counters *all_counters;

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64*: fast, and every thread has its own stream. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static uint64_t below(uint64_t *s, uint64_t n)
{
	return n ? rnd(s) % n : 0;
}

static int past_deadline(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline.tv_sec ||
	       (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec);
}

/* Prints the first few problems only, so that a broken mount does not flood the log. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_add(&reports, 1) >= 20)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* Counts an errno; returns 1 when the thread should stop. */
static int on_error(struct counters *c, const struct tensor *t, const char *what, int e)
{
	if (e > 0 && e < MAX_ERRNO && tolerated_errno[e]) {
		c->tolerated[e]++;
		return stop_on_error;
	}
	c->unexpected++;
	report("soak: %s: %s: %s\n", t->path, what, strerror(e));
	return 0;
}

/* The expected bytes: exactly the source range, read with pread until complete. */
static int source_range(const struct tensor *t, uint64_t off, size_t len, char *buf)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r =
		        pread(t->src_fd, buf + done, len - done, (off_t)(t->offset + off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static void check(struct counters *c, const struct tensor *t, const char *how, uint64_t off,
                  size_t want, const char *got, size_t n, char *exp)
{
	c->reads++;
	c->bytes += n;
	if (n != want) {
		c->mismatches++;
		report("soak: %s: %s of [%" PRIu64 ", +%zu) returned %zu bytes, expected %zu\n",
		       t->path, how, off, want, n, want);
		return;
	}
	if (want == 0)
		return;
	if (source_range(t, off, want, exp) != 0) {
		c->unexpected++;
		report("soak: cannot read the source range of %s: %s\n", t->path, strerror(errno));
		return;
	}
	if (memcmp(got, exp, want) != 0) {
		size_t i = 0;

		while (got[i] == exp[i])
			i++;
		c->mismatches++;
		report("soak: %s: %s of [%" PRIu64 ", +%zu): byte %" PRIu64
		       " is 0x%02x, the source has 0x%02x\n",
		       t->path, how, off, want, off + i, (unsigned char)got[i],
		       (unsigned char)exp[i]);
	}
}

/*
 * One read through pread; returns 1 when the thread should stop. With -p a
 * short read is followed up the way applications do (read again from where
 * it stopped): the kernel splits a large read into several requests, and
 * when the daemon goes away between them the caller gets the bytes already
 * copied, then the error. What came back must still be the source's bytes.
 */
static int read_pread(struct counters *c, const struct tensor *t, int direct, uint64_t off,
                      size_t len, char *buf, char *exp)
{
	const char *how = direct ? "O_DIRECT pread" : "pread";
	size_t want, done = 0;
	int fd, e = 0, stop = 0;

	fd = open(t->path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
	if (fd < 0)
		return on_error(c, t, "open", errno);
	c->opens++;
	want = off >= t->nbytes ? 0 : (size_t)(t->nbytes - off < len ? t->nbytes - off : len);
	for (;;) {
		ssize_t r = pread(fd, buf + done, len - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			e = errno;
			break;
		}
		done += (size_t)r;
		/* Without -p, one pread must return everything: placefs never answers short. */
		if (r == 0 || !allow_partial || done >= want)
			break;
		c->short_reads++;
	}
	if (e) {
		if (done > 0)
			check(c, t, how, off, done, buf, done, exp);
		stop = on_error(c, t, how, e);
		goto out;
	}
	if (direct && want > 0 && done == want) {
		c->direct_daemon++;
		c->direct_bytes[t->gpu] += done;
	}
	check(c, t, how, off, want, buf, done, exp);
out:
	close(fd);
	return stop;
}

/* One read through a shared mapping of the whole file; returns 1 when the thread should stop. */
static int read_mmap(struct counters *c, const struct tensor *t, uint64_t off, size_t len,
                     char *exp)
{
	void *p;
	int fd, stop = 0;

	if (t->nbytes == 0 || t->nbytes > SIZE_MAX)
		return 0;
	if (off >= t->nbytes)
		off = t->nbytes - 1;
	if (len > t->nbytes - off)
		len = (size_t)(t->nbytes - off);
	fd = open(t->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return on_error(c, t, "open", errno);
	c->opens++;
	p = mmap(NULL, (size_t)t->nbytes, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		stop = on_error(c, t, "mmap", errno);
		goto out;
	}
	/*
	 * A page the kernel cannot fill would be SIGBUS here; the fault tests
	 * do not use this mode while they break the daemon.
	 */
	check(c, t, "mmap", off, len, (const char *)p + off, len, exp);
	munmap(p, (size_t)t->nbytes);
out:
	close(fd);
	return stop;
}

static void *reader(void *arg)
{
	struct counters *c = arg;
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)(c - all_counters) + 1;
	char *buf = NULL, *exp = NULL;
	int ms[3], nms = 0;

	if (modes & MODE_DIRECT)
		ms[nms++] = MODE_DIRECT;
	if (modes & MODE_CACHED)
		ms[nms++] = MODE_CACHED;
	if (modes & MODE_MMAP)
		ms[nms++] = MODE_MMAP;
	if (posix_memalign((void **)&buf, 4096, (size_t)maxlen + 4096) != 0 ||
	    !(exp = malloc((size_t)maxlen + 4096))) {
		c->unexpected++;
		report("soak: out of memory\n");
		goto out;
	}
	for (int i = 0; i < 4; i++)
		rnd(&s);
	while (!past_deadline()) {
		const struct tensor *t;
		uint64_t off, span;
		size_t len;
		int mode, stop;

		if (nlarge && below(&s, 8) == 0)
			t = &tensors[large[below(&s, nlarge)]];
		else
			t = &tensors[below(&s, ntensors)];
		/* Mostly inside the file; sometimes at the end, past it, or empty. */
		off = below(&s, t->nbytes + 1);
		if (below(&s, 32) == 0)
			off = t->nbytes + below(&s, 4096);
		span = off < t->nbytes ? t->nbytes - off : 0;
		len = (size_t)(1 + below(&s, (span + 64 < maxlen ? span + 64 : maxlen)));
		if (below(&s, 64) == 0)
			len = 0;
		mode = ms[below(&s, (uint64_t)nms)];
		if (mode == MODE_MMAP)
			stop = read_mmap(c, t, off, len, exp);
		else
			stop = read_pread(c, t, mode == MODE_DIRECT, off, len, buf, exp);
		if (stop)
			break;
	}
out:
	free(buf);
	free(exp);
	return NULL;
}

static int parse_errnos(char *list)
{
	static const struct {
		const char *name;
		int e;
	} names[] = {
	        {"EIO", EIO},
	        {"ESTALE", ESTALE},
	        {"ENOTCONN", ENOTCONN},
	        {"ENOENT", ENOENT},
	        {"ECONNABORTED", ECONNABORTED},
	        {"EINTR", EINTR},
	        {"ENODEV", ENODEV},
	        {"EBADF", EBADF},
	};
	char *save = NULL, *tok;

	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t i;

		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(tok, names[i].name) == 0)
				break;
		if (i == sizeof(names) / sizeof(names[0])) {
			fprintf(stderr, "soak: unknown errno name '%s'\n", tok);
			return -1;
		}
		tolerated_errno[names[i].e] = 1;
	}
	return 0;
}

static const char *errno_name(int e)
{
	switch (e) {
	case EIO: return "EIO";
	case ESTALE: return "ESTALE";
	case ENOTCONN: return "ENOTCONN";
	case ENOENT: return "ENOENT";
	case ECONNABORTED: return "ECONNABORTED";
	case EINTR: return "EINTR";
	case ENODEV: return "ENODEV";
	case EBADF: return "EBADF";
	default: return "E?";
	}
}

/* Appends the tensor of one manifest line (its 5 fields); -1 on failure, reported. */
static int add_tensor(char *const fields[5])
{
	static size_t alloc;
	struct tensor t;

	t.path = strdup(fields[0]);
	t.gpu = strcmp(fields[1], "gpu") == 0;
	t.offset = strtoull(fields[3], NULL, 10);
	t.nbytes = strtoull(fields[4], NULL, 10);
	t.src_fd = open(fields[2], O_RDONLY | O_CLOEXEC);
	if (!t.path || t.src_fd < 0) {
		fprintf(stderr, "soak: %s: %s\n", fields[2], strerror(errno));
		goto fail;
	}
	if (ntensors == alloc) {
		size_t n = alloc ? 2 * alloc : 1024;
		struct tensor *nt = realloc(tensors, n * sizeof(*nt));

		if (!nt) {
			fprintf(stderr, "soak: out of memory\n");
			goto fail;
		}
		tensors = nt;
		alloc = n;
	}
	tensors[ntensors++] = t;
	return 0;
fail:
	free(t.path);
	if (t.src_fd >= 0)
		close(t.src_fd);
	return -1;
}

static int load_manifest(const char *file)
{
	char *line = NULL;
	size_t cap = 0;
	FILE *f = fopen(file, "re");

	if (!f) {
		fprintf(stderr, "soak: %s: %s\n", file, strerror(errno));
		return -1;
	}
	while (getline(&line, &cap, f) > 0) {
		char *fields[5], *save = NULL;
		int n = 0;

		line[strcspn(line, "\n")] = '\0';
		for (char *tok = strtok_r(line, "\t", &save); tok && n < 5;
		     tok = strtok_r(NULL, "\t", &save))
			fields[n++] = tok;
		if (n != 5) {
			fprintf(stderr, "soak: %s: a line without 5 fields\n", file);
			goto fail;
		}
		if (add_tensor(fields) < 0)
			goto fail;
	}
	free(line);
	fclose(f);
	if (ntensors == 0) {
		fprintf(stderr, "soak: %s lists no tensor\n", file);
		return -1;
	}
	large = calloc(ntensors, sizeof(*large));
	if (!large)
		return -1;
	for (size_t i = 0; i < ntensors; i++)
		if (tensors[i].nbytes >= MiB)
			large[nlarge++] = i;
	return 0;
fail:
	free(line);
	fclose(f);
	return -1;
}

static void free_tensors(void)
{
	for (size_t i = 0; i < ntensors; i++) {
		free(tensors[i].path);
		close(tensors[i].src_fd);
	}
	free(tensors);
	free(large);
}

int main(int argc, char **argv)
{
	struct counters total;
	struct counters *cs = NULL;
	pthread_t *th = NULL;
	struct timespec t0, t1;
	uint64_t tolerated = 0;
	double secs = 20, el;
	int nthreads = 64, opt, i, status = 2;

	while ((opt = getopt(argc, argv, "t:s:S:L:m:e:xp")) != -1) {
		switch (opt) {
		case 't': nthreads = atoi(optarg); break;
		case 's': secs = atof(optarg); break;
		case 'S': seed = strtoull(optarg, NULL, 10); break;
		case 'L': maxlen = strtoull(optarg, NULL, 10); break;
		case 'm':
			modes = (strstr(optarg, "direct") ? MODE_DIRECT : 0) |
			        (strstr(optarg, "cached") ? MODE_CACHED : 0) |
			        (strstr(optarg, "mmap") ? MODE_MMAP : 0);
			break;
		case 'e':
			if (parse_errnos(optarg) < 0)
				return 2;
			break;
		case 'x': stop_on_error = 1; break;
		case 'p': allow_partial = 1; break;
		default: goto usage;
		}
	}
	if (optind + 1 != argc || nthreads < 1 || nthreads > 4096 || modes == 0 || maxlen < 1 ||
	    maxlen > 64 * MiB || !(secs > 0))
		goto usage;
	if (load_manifest(argv[optind]) < 0)
		goto out;
	cs = calloc((size_t)nthreads, sizeof(*cs));
	th = calloc((size_t)nthreads, sizeof(*th));
	if (!cs || !th)
		goto out;
	all_counters = cs;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	deadline = t0;
	deadline.tv_sec += (time_t)secs;
	deadline.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	for (i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], NULL, reader, &cs[i]) != 0) {
			fprintf(stderr, "soak: cannot start thread %d\n", i);
			exit(2);
		}
	for (i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

	memset(&total, 0, sizeof(total));
	for (i = 0; i < nthreads; i++) {
		total.reads += cs[i].reads;
		total.bytes += cs[i].bytes;
		total.opens += cs[i].opens;
		total.direct_daemon += cs[i].direct_daemon;
		total.direct_bytes[0] += cs[i].direct_bytes[0];
		total.direct_bytes[1] += cs[i].direct_bytes[1];
		total.mismatches += cs[i].mismatches;
		total.short_reads += cs[i].short_reads;
		total.unexpected += cs[i].unexpected;
		for (int e = 0; e < MAX_ERRNO; e++) {
			total.tolerated[e] += cs[i].tolerated[e];
			tolerated += cs[i].tolerated[e];
		}
	}
	printf("soak: tolerated errors:");
	for (int e = 0; e < MAX_ERRNO; e++)
		if (total.tolerated[e])
			printf(" %s=%" PRIu64, errno_name(e), total.tolerated[e]);
	printf("\n");
	printf("threads=%d seconds=%.2f tensors=%zu reads=%" PRIu64 " bytes=%" PRIu64
	       " gbps=%.3f opens=%" PRIu64 " direct_reads=%" PRIu64 " direct_bytes_gpu=%" PRIu64
	       " direct_bytes_cpu=%" PRIu64 " mismatches=%" PRIu64 " errors=%" PRIu64
	       " tolerated=%" PRIu64 " short=%" PRIu64 "\n",
	       nthreads, el, ntensors, total.reads, total.bytes, (double)total.bytes / el / 1e9,
	       total.opens, total.direct_daemon, total.direct_bytes[1], total.direct_bytes[0],
	       total.mismatches, total.unexpected, tolerated, total.short_reads);
	status = total.mismatches || total.unexpected ? 1 : 0;
out:
	free(cs);
	free(th);
	free_tensors();
	return status;
usage:
	fprintf(stderr, "usage: soak [-t THREADS] [-s SECONDS] [-S SEED] [-L MAXLEN] "
	                "[-m direct,cached,mmap] [-e ERRNO,...] [-x] [-p] MANIFEST\n");
	return 2;
}
