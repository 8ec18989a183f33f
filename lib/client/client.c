/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "client/devmem.h"
#include "common/error.h"
#include "common/io.h"
#include "placefs/client.h"
#include "placefs/ioctl.h"

/*
 * The client side of the staging protocol. Device memory goes through
 * lib/client/devmem.h, so this file, like every program that uses it, needs no CUDA
 * header, and nothing of the daemon's side (backend, stager, ring).
 */

struct placefs_client_dest {
	uint32_t kind; /* PLACEFS_IOC_HANDLE_HOST_SHM or _CUDA_IPC */
	uint64_t size;
	uint32_t handle_bytes;
	uint8_t handle[PLACEFS_IOC_HANDLE_MAX];
	void *ptr;         /* shm: the mapping; CUDA: the device pointer */
	uint64_t map_size; /* shm: bytes mapped (at least 1) */
	int fd;            /* shm: the object, open for the flock that marks it in use; else -1 */
	int device;        /* ri->device of its ring: the CUDA ordinal, N of host:N, or -1 */
	uint32_t ndevices; /* ri->ndevices: > 1 when copies into it must name the device */
};

struct placefs_client_ring {
	uint32_t backend;
	int device;
	uint64_t bytes;
	void *ptr;
};

/* Sends of a batch the daemon answers EAGAIN (its batch workers busy), at most. */
#define BATCH_AGAIN_TRIES 200

/* Names tried before a destination gives up with EEXIST. */
#define SHM_NAME_TRIES 16

static int cfail(struct placefs_client_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int cfail(struct placefs_client_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

/* Hands a lib/ error on to the client's error. */
static int cfrom(struct placefs_client_error *err, int rc, const struct placefs_error *e)
{
	return cfail(err, rc, "%s", e->msg[0] ? e->msg : strerror(-rc));
}

const char *placefs_client_errno_name(int code)
{
	static const struct {
		int e;
		const char *name;
	} names[] = {
	        {EINVAL, "EINVAL"},         {EFBIG, "EFBIG"},   {ENODEV, "ENODEV"},
	        {EOPNOTSUPP, "EOPNOTSUPP"}, {EACCES, "EACCES"}, {ENOENT, "ENOENT"},
	        {ETIMEDOUT, "ETIMEDOUT"},   {EINTR, "EINTR"},   {EIO, "EIO"},
	        {ENOMEM, "ENOMEM"},         {ENOTTY, "ENOTTY"}, {ESTALE, "ESTALE"},
	        {EBADF, "EBADF"},           {EPERM, "EPERM"},   {ENOSPC, "ENOSPC"},
	        {ENOTDIR, "ENOTDIR"},       {EFAULT, "EFAULT"}, {EAGAIN, "EAGAIN"},
	        {ERANGE, "ERANGE"},         {EPROTO, "EPROTO"}, {ENODATA, "ENODATA"},
	};
	size_t i;

	if (code < 0)
		code = -code;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].e == code)
			return names[i].name;
	return "E?";
}

/* Why an ioctl failed, in words a user can act on. */
static const char *ioctl_hint(int e)
{
	switch (e) {
	case ENOTTY: return " (not a tensor file of a placefs mount)";
	case EFBIG: return " (the tensor is larger than the staging ring: it is placed on the cpu)";
	case ENODEV:
		return " (staging is disabled on this mount, -o device=none, or the mount does not "
		       "stage to the device asked for)";
	case ETIMEDOUT: return " (no ring space within the timeout)";
	case EOPNOTSUPP: return " (the mount's backend cannot serve this destination)";
	case ERANGE: return " (no such entry: the index is past the mount's plan)";
	default: return "";
	}
}

int placefs_client_open(const char *path, int *fd, struct placefs_client_error *err)
{
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		return cfail(err, -errno, "%s: cannot open: %s", path, strerror(errno));
	return 0;
}

/* RING_INFO with flags and select (0, 0: the mount's first ring). */
static int ring_info(int fd, uint32_t flags, int32_t select, struct placefs_ioc_ring_info *ri,
                     struct placefs_client_error *err)
{
	memset(ri, 0, sizeof(*ri));
	ri->version = PLACEFS_IOC_VERSION;
	ri->size = sizeof(*ri);
	ri->flags = flags;
	ri->select = select;
	if (ioctl(fd, PLACEFS_IOC_RING_INFO, ri) != 0) {
		if (flags)
			return cfail(err, -errno, "ring info of %s %d: %s%s",
			             flags == PLACEFS_IOC_RING_INFO_DEVICE ? "device" : "position",
			             (int)select, strerror(errno), ioctl_hint(errno));
		return cfail(err, -errno, "ring info: %s%s", strerror(errno), ioctl_hint(errno));
	}
	if (ri->handle_bytes > PLACEFS_IOC_HANDLE_MAX)
		return cfail(err, -EPROTO, "ring info: the daemon answered handle_bytes %u",
		             ri->handle_bytes);
	return 0;
}

int placefs_client_ring_info(int fd, struct placefs_ioc_ring_info *ri,
                             struct placefs_client_error *err)
{
	return ring_info(fd, 0, 0, ri, err);
}

int placefs_client_ring_info_device(int fd, int32_t device, struct placefs_ioc_ring_info *ri,
                                    struct placefs_client_error *err)
{
	return ring_info(fd, PLACEFS_IOC_RING_INFO_DEVICE, device, ri, err);
}

int placefs_client_ring_info_at(int fd, uint32_t position, struct placefs_ioc_ring_info *ri,
                                struct placefs_client_error *err)
{
	if (position > INT32_MAX)
		return cfail(err, -EINVAL, "ring info: position %u is out of range", position);
	return ring_info(fd, PLACEFS_IOC_RING_INFO_POSITION, (int32_t)position, ri, err);
}

int placefs_client_shard(uint64_t dim_size, uint32_t rank, uint32_t world, uint64_t *start,
                         uint64_t *len, struct placefs_client_error *err)
{
	if (world == 0 || rank >= world)
		return cfail(err, -EINVAL, "shard: rank %u of a world of %u", rank, world);
	if (dim_size % world != 0 || dim_size == 0)
		return cfail(err, -EINVAL,
		             "shard: a dimension of %llu does not split into %u equal parts",
		             (unsigned long long)dim_size, world);
	*len = dim_size / world;
	*start = (uint64_t)rank * *len;
	return 0;
}

int placefs_client_list_gpu(const char *mountpoint, char ***names, size_t *count,
                            struct placefs_client_error *err)
{
	char *path = NULL;
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int rc;

	*names = NULL;
	*count = 0;
	if (asprintf(&path, "%s/.placefs/by-placement/gpu", mountpoint) < 0)
		return cfail(err, -ENOMEM, "out of memory");
	d = opendir(path);
	if (!d) {
		rc = -errno;
		cfail(err, rc, "%s: not a placefs mount (cannot list %s: %s)", mountpoint, path,
		      strerror(-rc));
		free(path);
		return rc;
	}
	/* The daemon lists the links in checkpoint order; readdir keeps it. */
	for (errno = 0; (de = readdir(d)) != NULL; errno = 0) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			char **nv = realloc(v, nc * sizeof(*nv));

			if (!nv)
				goto nomem;
			v = nv;
			cap = nc;
		}
		v[n] = strdup(de->d_name);
		if (!v[n])
			goto nomem;
		n++;
	}
	if (errno != 0) {
		rc = cfail(err, -errno, "%s: readdir: %s", path, strerror(errno));
		goto fail;
	}
	closedir(d);
	free(path);
	*names = v;
	*count = n;
	return 0;
nomem:
	rc = cfail(err, -ENOMEM, "out of memory");
fail:
	closedir(d);
	free(path);
	placefs_client_list_free(v, n);
	return rc;
}

void placefs_client_list_free(char **names, size_t count)
{
	size_t i;

	if (!names)
		return;
	for (i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

/* ---- the packed layout: .placefs/packed.tsv --------------------------------- */

#define PACKED_HEAD "# placement\tpacked\tnbytes\tdtype\tshape\tfile\n"
/* Longest file name of a mount (lib/common/name.h's PLACEFS_NAME_MAX). */
#define PACKED_NAME_MAX 255
/* Bytes of a hostile field quoted in a message, at most. */
#define PACKED_QUOTE 40

/* What placefs_client_packed_read() allocates: the result, then what it points into. */
struct packed_impl {
	struct placefs_client_packed pub; /* first: the caller's pointer is this one's */
	char *text;                       /* the file, its separators made NULs */
	uint64_t *dims;                   /* every tensor's shape, one after the other */
};

/* A field for a message: printable ASCII kept, any other byte '?', cut after PACKED_QUOTE. */
static const char *quote(char out[PACKED_QUOTE + 4], const char *s, size_t n)
{
	size_t i, k = n < PACKED_QUOTE ? n : PACKED_QUOTE;

	for (i = 0; i < k; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (k < n) {
		memcpy(out + k, "...", 3);
		k += 3;
	}
	out[k] = '\0';
	return out;
}

/* A decimal number below 2^64: digits only, no leading zero but "0" itself. */
static int parse_u64(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	size_t i;

	if (n == 0 || n > 20 || (n > 1 && s[0] == '0'))
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (__builtin_mul_overflow(x, 10, &x) ||
		    __builtin_add_overflow(x, (uint64_t)(s[i] - '0'), &x))
			return -1;
	}
	*v = x;
	return 0;
}

/* Where a line's fields are, each [at, at + len) of the text. */
struct packed_fields {
	const char *at[6];
	size_t len[6];
};

/*
 * Checks line `line` (its text [s, s + n), without the newline) and fills
 * *t from it, its dimensions into dims[*ndims ...] (room for `room` more);
 * end[] is where each placement's layout ends so far. 0 or -EPROTO.
 */
static int packed_line(const char *path, size_t line, char *s, size_t n,
                       struct placefs_client_tensor *t, uint64_t *dims, size_t *ndims, size_t room,
                       uint64_t end[2], struct placefs_client_error *err)
{
	static const char *const what[6] = {"placement", "packed", "nbytes",
	                                    "dtype",     "shape",  "file"};
	struct packed_fields f;
	char q[PACKED_QUOTE + 4];
	const char *p = s, *tab;
	size_t k, i, nf = 1;

	for (i = 0; i < n; i++)
		nf += s[i] == '\t';
	if (nf != 6)
		return cfail(err, -EPROTO,
		             "%s line %zu: %zu fields, not the 6 of the header (placement, packed, "
		             "nbytes, dtype, shape, file)",
		             path, line, nf);
	for (k = 0; k < 6; k++) {
		tab = k < 5 ? memchr(p, '\t', (size_t)(s + n - p)) : s + n;
		f.at[k] = p;
		f.len[k] = (size_t)(tab - p);
		p = tab + 1;
	}
	if (f.len[0] == 3 && memcmp(f.at[0], "gpu", 3) == 0)
		t->placement = PLACEFS_CLIENT_GPU;
	else if (f.len[0] == 3 && memcmp(f.at[0], "cpu", 3) == 0)
		t->placement = PLACEFS_CLIENT_CPU;
	else
		return cfail(err, -EPROTO, "%s line %zu: placement '%s' is neither gpu nor cpu",
		             path, line, quote(q, f.at[0], f.len[0]));
	for (k = 1; k <= 2; k++)
		if (parse_u64(f.at[k], f.len[k], k == 1 ? &t->packed : &t->nbytes) != 0)
			return cfail(err, -EPROTO,
			             "%s line %zu: %s '%s' is not a decimal number below 2^64 "
			             "(digits, no leading zero)",
			             path, line, what[k], quote(q, f.at[k], f.len[k]));
	if (t->packed > UINT64_MAX - t->nbytes)
		return cfail(err, -EPROTO,
		             "%s line %zu: the tensor ends past 2^64 (packed %llu, nbytes %llu)",
		             path, line, (unsigned long long)t->packed,
		             (unsigned long long)t->nbytes);
	if (t->packed < end[t->placement])
		return cfail(err, -EPROTO,
		             "%s line %zu: the %s tensor at packed offset %llu overlaps the one "
		             "before it, which ends at %llu (a placement's tensors come in layout "
		             "order)",
		             path, line, t->placement == PLACEFS_CLIENT_GPU ? "gpu" : "cpu",
		             (unsigned long long)t->packed, (unsigned long long)end[t->placement]);
	end[t->placement] = t->packed + t->nbytes;
	for (i = 0; i < f.len[3]; i++) {
		char c = f.at[3][i];

		if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
			break;
	}
	if (f.len[3] == 0 || f.len[3] > PLACEFS_CLIENT_DTYPE_MAX || i < f.len[3])
		return cfail(err, -EPROTO,
		             "%s line %zu: dtype '%s' is not 1 to %d capitals, digits and '_'",
		             path, line, quote(q, f.at[3], f.len[3]), PLACEFS_CLIENT_DTYPE_MAX);
	memcpy(t->dtype, f.at[3], f.len[3]);
	t->dtype[f.len[3]] = '\0';
	/* The shape: nothing (a scalar), or numbers separated by single commas. */
	t->ndim = 0;
	for (p = f.at[4]; f.len[4] > 0;) {
		const char *stop = f.at[4] + f.len[4];
		const char *comma = memchr(p, ',', (size_t)(stop - p));
		const char *e = comma ? comma : stop;

		if (t->ndim == PLACEFS_CLIENT_NDIM_MAX || t->ndim == room)
			return cfail(err, -EPROTO,
			             "%s line %zu: a shape of more than %d dimensions", path, line,
			             PLACEFS_CLIENT_NDIM_MAX);
		if (parse_u64(p, (size_t)(e - p), &dims[*ndims + t->ndim]) != 0)
			return cfail(err, -EPROTO,
			             "%s line %zu: shape '%s' is not decimal numbers below 2^64 "
			             "separated by commas",
			             path, line, quote(q, f.at[4], f.len[4]));
		t->ndim++;
		if (!comma)
			break;
		p = comma + 1;
	}
	t->shape = t->ndim ? dims + *ndims : NULL;
	*ndims += t->ndim;
	/* The file name: a file of the mount's root, as the daemon encodes names. */
	if (f.len[5] == 0 || f.len[5] > PACKED_NAME_MAX)
		return cfail(err, -EPROTO, "%s line %zu: a file name of %zu bytes (1 to %d)", path,
		             line, f.len[5], PACKED_NAME_MAX);
	if (f.at[5][0] == '.')
		return cfail(err, -EPROTO,
		             "%s line %zu: file name '%s' starts with '.' (the daemon encodes "
		             "a leading '.' as %%2E)",
		             path, line, quote(q, f.at[5], f.len[5]));
	for (i = 0; i < f.len[5]; i++) {
		unsigned char c = (unsigned char)f.at[5][i];

		if (c == '/' || c < 0x20 || c == 0x7f)
			return cfail(err, -EPROTO,
			             "%s line %zu: file name '%s' has %s at byte %zu (the daemon "
			             "encodes '/' and refuses control bytes)",
			             path, line, quote(q, f.at[5], f.len[5]),
			             c == '/' ? "a '/'" : "a control byte", i);
	}
	s[n] = '\0'; /* the newline: the file name ends there */
	t->file = f.at[5];
	return 0;
}

/*
 * Reads all of fd into a new NUL-terminated buffer (*len bytes before the
 * NUL), at most PLACEFS_CLIENT_PACKED_MAX bytes. 0 or a negative errno.
 */
static int packed_slurp(int fd, const char *path, char **out, size_t *len,
                        struct placefs_client_error *err)
{
	size_t cap = 64 << 10, n = 0;
	char *buf = NULL, *nb;
	struct stat st;
	ssize_t r;

	/* The control file's size is exact: read it in one go, and learn EOF after. */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
		if ((uint64_t)st.st_size > PLACEFS_CLIENT_PACKED_MAX)
			return cfail(err, -EFBIG,
			             "%s: %llu bytes, larger than the %llu a client reads", path,
			             (unsigned long long)st.st_size,
			             (unsigned long long)PLACEFS_CLIENT_PACKED_MAX);
		cap = (size_t)st.st_size + 1;
	}
	for (;;) {
		if (!buf || n == cap) {
			size_t nc = buf ? cap * 2 : cap;

			if (buf && cap > PLACEFS_CLIENT_PACKED_MAX) {
				free(buf);
				return cfail(err, -EFBIG,
				             "%s: larger than the %llu bytes a client reads", path,
				             (unsigned long long)PLACEFS_CLIENT_PACKED_MAX);
			}
			if (nc > PLACEFS_CLIENT_PACKED_MAX + 1)
				nc = PLACEFS_CLIENT_PACKED_MAX + 1;
			nb = realloc(buf, nc + 1);
			if (!nb) {
				free(buf);
				return cfail(err, -ENOMEM, "%s: out of memory for %zu bytes", path,
				             nc + 1);
			}
			buf = nb;
			cap = nc;
		}
		r = placefs_io_read_full(fd, buf + n, cap - n);
		if (r < 0) {
			free(buf);
			return cfail(err, (int)r, "%s: read: %s", path, strerror((int)-r));
		}
		n += (size_t)r;
		if (n < cap)
			break; /* the end of the file: n <= PLACEFS_CLIENT_PACKED_MAX */
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int placefs_client_packed_read(const char *mountpoint, struct placefs_client_packed **out,
                               struct placefs_client_error *err)
{
	struct packed_impl *pi = NULL;
	struct placefs_client_packed *p;
	size_t len = 0, lines = 0, commas = 0, ndims = 0, room, i, line;
	uint64_t end[2] = {0, 0};
	char *path = NULL, *s, *nl;
	int fd, rc;

	*out = NULL;
	if (asprintf(&path, "%s/.placefs/packed.tsv", mountpoint) < 0)
		return cfail(err, -ENOMEM, "out of memory");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		cfail(err, rc, "%s: cannot open: %s%s", path, strerror(-rc),
		      rc == -ENOENT
		              ? " (not a placefs mount, or its daemon publishes no packed.tsv)"
		              : "");
		goto out;
	}
	pi = calloc(1, sizeof(*pi));
	if (!pi) {
		close(fd);
		rc = cfail(err, -ENOMEM, "out of memory");
		goto out;
	}
	p = &pi->pub;
	rc = packed_slurp(fd, path, &pi->text, &len, err);
	close(fd);
	if (rc != 0)
		goto out;
	if (memchr(pi->text, '\0', len)) {
		rc = cfail(err, -EPROTO, "%s: a NUL byte at byte %zu", path,
		           (size_t)((char *)memchr(pi->text, '\0', len) - pi->text));
		goto out;
	}
	if (len == 0 || pi->text[len - 1] != '\n') {
		for (i = 0; i < len; i++)
			lines += pi->text[i] == '\n';
		rc = cfail(err, -EPROTO, "%s line %zu: %s", path, lines + 1,
		           len ? "the last line has no newline (a file cut short?)" : "empty");
		goto out;
	}
	if (len < sizeof(PACKED_HEAD) - 1 ||
	    memcmp(pi->text, PACKED_HEAD, sizeof(PACKED_HEAD) - 1) != 0) {
		char q[PACKED_QUOTE + 4];

		nl = memchr(pi->text, '\n', len);
		rc = cfail(
		        err, -EPROTO,
		        "%s line 1: '%s' is not the header '# placement<TAB>packed<TAB>nbytes<TAB>"
		        "dtype<TAB>shape<TAB>file' (a packed.tsv of another format)",
		        path, quote(q, pi->text, (size_t)(nl - pi->text)));
		goto out;
	}
	/* Bounds before allocating: a tensor a line, a dimension a comma and one more a tensor. */
	for (i = 0; i < len; i++) {
		lines += pi->text[i] == '\n';
		commas += pi->text[i] == ',';
	}
	p->count = lines - 1;
	if (__builtin_add_overflow(commas, p->count, &room)) {
		rc = cfail(err, -EPROTO, "%s: too many lines", path);
		goto out;
	}
	p->tensors = calloc(p->count ? p->count : 1, sizeof(*p->tensors));
	pi->dims = calloc(room ? room : 1, sizeof(*pi->dims));
	if (!p->tensors || !pi->dims) {
		rc = cfail(err, -ENOMEM, "%s: out of memory for %zu tensors", path, p->count);
		goto out;
	}
	s = pi->text + sizeof(PACKED_HEAD) - 1;
	for (i = 0, line = 2; i < p->count; i++, line++) {
		nl = memchr(s, '\n', (size_t)(pi->text + len - s));
		rc = packed_line(path, line, s, (size_t)(nl - s), &p->tensors[i], pi->dims, &ndims,
		                 room - ndims, end, err);
		if (rc != 0)
			goto out;
		p->placed[p->tensors[i].placement]++;
		s = nl + 1;
	}
	p->layout[PLACEFS_CLIENT_GPU] = end[PLACEFS_CLIENT_GPU];
	p->layout[PLACEFS_CLIENT_CPU] = end[PLACEFS_CLIENT_CPU];
	*out = p;
	pi = NULL;
	rc = 0;
out:
	placefs_client_packed_free(pi ? &pi->pub : NULL);
	free(path);
	return rc;
}

void placefs_client_packed_free(struct placefs_client_packed *p)
{
	/* p is the first member of what placefs_client_packed_read() allocated. */
	struct packed_impl *pi = (struct packed_impl *)p;

	if (!pi)
		return;
	free(pi->pub.tensors);
	free(pi->dims);
	free(pi->text);
	free(pi);
}

static void stage_init(struct placefs_ioc_stage *s, uint32_t mode, uint64_t timeout_ns)
{
	memset(s, 0, sizeof(*s));
	s->version = PLACEFS_IOC_VERSION;
	s->size = sizeof(*s);
	s->mode = mode;
	s->timeout_ns = timeout_ns;
}

/* Fills the slice and device fields of s from a (NULL: none); -EINVAL for unknown flags. */
static int stage_args(struct placefs_ioc_stage *s, const struct placefs_client_stage_args *a,
                      struct placefs_client_error *err)
{
	if (!a)
		return 0;
	if (a->flags & ~(PLACEFS_IOC_STAGE_SLICE | PLACEFS_IOC_STAGE_DEVICE))
		return cfail(err, -EINVAL, "stage: unknown flags 0x%x",
		             a->flags & ~(PLACEFS_IOC_STAGE_SLICE | PLACEFS_IOC_STAGE_DEVICE));
	s->flags = a->flags;
	if (a->flags & PLACEFS_IOC_STAGE_SLICE) {
		s->slice_dim = a->slice_dim;
		s->slice_start = a->slice_start;
		s->slice_len = a->slice_len;
	}
	if (a->flags & PLACEFS_IOC_STAGE_DEVICE)
		s->device = a->device;
	return 0;
}

/* The message of a failed stage: the mode, the slice and device asked for, errno, hint. */
static int stage_fail(const struct placefs_ioc_stage *s, const char *mode,
                      struct placefs_client_error *err)
{
	int e = errno;
	char what[160] = "";

	if (s->flags & PLACEFS_IOC_STAGE_SLICE)
		snprintf(what, sizeof(what), ", slice dim %u [%llu, +%llu)", s->slice_dim,
		         (unsigned long long)s->slice_start, (unsigned long long)s->slice_len);
	if (s->flags & PLACEFS_IOC_STAGE_DEVICE)
		snprintf(what + strlen(what), sizeof(what) - strlen(what), ", device %d",
		         (int)s->device);
	return cfail(err, -e, "stage (%s%s): %s%s", mode, what, strerror(e), ioctl_hint(e));
}

int placefs_client_borrow_ex(int fd, const struct placefs_client_stage_args *a,
                             struct placefs_ioc_stage *out, struct placefs_client_error *err)
{
	int rc;

	stage_init(out, PLACEFS_IOC_STAGE_BORROW, a ? a->timeout_ns : 0);
	rc = stage_args(out, a, err);
	if (rc != 0)
		return rc;
	if (ioctl(fd, PLACEFS_IOC_STAGE, out) != 0)
		return stage_fail(out, "borrow", err);
	return 0;
}

int placefs_client_borrow(int fd, uint64_t timeout_ns, struct placefs_ioc_stage *out,
                          struct placefs_client_error *err)
{
	struct placefs_client_stage_args a = {.timeout_ns = timeout_ns};

	return placefs_client_borrow_ex(fd, &a, out, err);
}

int placefs_client_copy_ex(int fd, const struct placefs_client_dest *dest, uint64_t dest_offset,
                           const struct placefs_client_stage_args *a, struct placefs_ioc_stage *out,
                           struct placefs_client_error *err)
{
	int rc;

	stage_init(out, PLACEFS_IOC_STAGE_COPY, a ? a->timeout_ns : 0);
	rc = stage_args(out, a, err);
	if (rc != 0)
		return rc;
	/* A destination made for one ring of several goes to that ring's device. */
	if (!(out->flags & PLACEFS_IOC_STAGE_DEVICE) && dest->ndevices > 1) {
		out->flags |= PLACEFS_IOC_STAGE_DEVICE;
		out->device = dest->device;
	}
	out->dest_kind = dest->kind;
	out->dest_handle_bytes = dest->handle_bytes;
	memcpy(out->dest_handle, dest->handle, dest->handle_bytes);
	out->dest_offset = dest_offset;
	out->dest_size = dest->size;
	if (ioctl(fd, PLACEFS_IOC_STAGE, out) != 0)
		return stage_fail(out, "copy", err);
	return 0;
}

int placefs_client_copy(int fd, const struct placefs_client_dest *dest, uint64_t dest_offset,
                        uint64_t timeout_ns, struct placefs_ioc_stage *out,
                        struct placefs_client_error *err)
{
	struct placefs_client_stage_args a = {.timeout_ns = timeout_ns};

	return placefs_client_copy_ex(fd, dest, dest_offset, &a, out, err);
}

int placefs_client_index(const char *path, uint64_t *index, struct placefs_client_error *err)
{
	char buf[32], *end;
	unsigned long long v;
	ssize_t n;

	n = getxattr(path, "user.placefs.index", buf, sizeof(buf) - 1);
	if (n < 0) {
		int e = errno;

		return cfail(
		        err, -e, "%s: no user.placefs.index attribute: %s%s", path, strerror(e),
		        e == ENODATA || e == EOPNOTSUPP ? " (not a tensor file of a placefs mount)"
		                                        : "");
	}
	buf[n] = '\0';
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (n == 0 || buf[0] < '0' || buf[0] > '9' || *end || errno)
		return cfail(err, -EPROTO, "%s: user.placefs.index is '%s', not a plan index", path,
		             buf);
	*index = v;
	return 0;
}

int placefs_client_copy_batch(int fd, const struct placefs_client_dest *dest,
                              struct placefs_ioc_batch_entry *entries, uint32_t count,
                              uint32_t flags, uint64_t timeout_ns, uint32_t *done,
                              struct placefs_client_error *err)
{
	struct placefs_ioc_stage_batch *b;
	uint32_t i;
	int e, t, rc = 0;

	if (done)
		*done = 0;
	if (count < 1 || count > PLACEFS_IOC_BATCH_MAX)
		return cfail(err, -EINVAL, "batch: %u entries (1 to %d)", count,
		             PLACEFS_IOC_BATCH_MAX);
	if (flags & ~PLACEFS_IOC_BATCH_RANGES)
		return cfail(err, -EINVAL, "batch: unknown flags 0x%x",
		             flags & ~PLACEFS_IOC_BATCH_RANGES);
	if (dest->ndevices > 1)
		return cfail(err, -EINVAL,
		             "batch: the mount stages to %u devices and a batch names none: "
		             "stage one tensor per request there",
		             dest->ndevices);
	/* 8 KiB and more: on the heap, not on a caller thread's stack. */
	b = calloc(1, sizeof(*b));
	if (!b)
		return cfail(err, -ENOMEM, "batch: out of memory");
	b->version = PLACEFS_IOC_VERSION;
	b->size = sizeof(*b);
	b->mode = PLACEFS_IOC_STAGE_COPY;
	b->count = count;
	b->flags = flags;
	b->dest_kind = dest->kind;
	b->dest_handle_bytes = dest->handle_bytes;
	memcpy(b->dest_handle, dest->handle, dest->handle_bytes);
	b->dest_size = dest->size;
	b->timeout_ns = timeout_ns;
	for (i = 0; i < count; i++) {
		b->entries[i].tensor = entries[i].tensor;
		b->entries[i].dest_offset = entries[i].dest_offset;
		b->entries[i].nbytes = flags & PLACEFS_IOC_BATCH_RANGES ? entries[i].nbytes : 0;
	}
	/*
	 * EAGAIN: every worker the daemon lends to batches is busy (other
	 * clients' batches); nothing ran, so the request is sent again, after
	 * 1 to 10 ms, for about a second in all.
	 */
	for (t = 0; ioctl(fd, PLACEFS_IOC_STAGE_BATCH, b) != 0; t++) {
		e = errno;
		if (e == EAGAIN && t + 1 < BATCH_AGAIN_TRIES) {
			struct timespec ts = {0, (long)(1 + t % 10) * 1000000L};

			nanosleep(&ts, NULL);
			continue;
		}
		rc = cfail(err, -e, "batch of %u %s (copy): %s%s%s", count,
		           flags & PLACEFS_IOC_BATCH_RANGES ? (count == 1 ? "range" : "ranges")
		                                            : (count == 1 ? "tensor" : "tensors"),
		           strerror(e),
		           e == EAGAIN ? " (the daemon's batch workers stayed busy)" : "",
		           e == ENOTTY ? " (not a tensor file of a placefs mount, or a daemon "
		                         "without batches)"
		                       : ioctl_hint(e));
		goto out;
	}
	for (i = 0; i < count; i++) {
		entries[i] = b->entries[i];
		/* An errno the daemon cannot have meant is a protocol error, not a code to pass on. */
		if (entries[i].error < 0 || entries[i].error > 4095)
			entries[i].error = EPROTO;
		if (entries[i].error && rc == 0)
			rc = cfail(err, -entries[i].error, "batch entry %u (tensor %llu): %s%s", i,
			           (unsigned long long)entries[i].tensor,
			           strerror(entries[i].error), ioctl_hint(entries[i].error));
	}
	if (done)
		*done = b->done;
out:
	free(b);
	return rc;
}

int placefs_client_release(int fd, uint64_t lease, struct placefs_client_error *err)
{
	struct placefs_ioc_release r;

	memset(&r, 0, sizeof(r));
	r.version = PLACEFS_IOC_VERSION;
	r.size = sizeof(r);
	r.lease = lease;
	if (ioctl(fd, PLACEFS_IOC_RELEASE, &r) != 0)
		return cfail(err, -errno, "release of lease %llu: %s", (unsigned long long)lease,
		             strerror(errno));
	return 0;
}

/* ---- destinations ------------------------------------------------------------ */

/*
 * Creates a destination's object under "/placefs-client-<pid>-<r>", r a
 * random 64-bit number, with O_EXCL: a name that exists (taken by anyone) is
 * retried with another r. The descriptor, or a negative errno.
 */
static int shm_create(char *name, size_t len, struct placefs_client_error *err)
{
	uint64_t r;
	int t, fd, rc;

	for (t = 0; t < SHM_NAME_TRIES; t++) {
		rc = placefs_io_random(&r, sizeof(r));
		if (rc != 0)
			return cfail(err, rc, "no random bytes for a shared memory name: %s",
			             strerror(-rc));
		snprintf(name, len, "/placefs-client-%ld-%llu", (long)getpid(),
		         (unsigned long long)r);
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return cfail(err, -errno, "cannot create shared memory %s: %s", name,
			             strerror(errno));
	}
	return cfail(err, -EEXIST, "cannot create shared memory: %d random names were all taken",
	             SHM_NAME_TRIES);
}

static int dest_shm(struct placefs_client_dest *d, struct placefs_client_error *err)
{
	char name[64];
	int fd, rc;

	d->map_size = d->size ? d->size : 1;
	if (d->map_size > (uint64_t)SIZE_MAX || d->map_size > (uint64_t)INT64_MAX)
		return cfail(err, -EINVAL, "a destination of %llu bytes is too large",
		             (unsigned long long)d->size);
	fd = shm_create(name, sizeof(name), err);
	if (fd < 0)
		return fd;
	/*
	 * Held for the destination's life, and dropped by the kernel if this
	 * process dies: a daemon's placefs_shm_remove_stale() removes only
	 * objects of dead processes that nobody holds a lock on.
	 */
	if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
		rc = cfail(err, -errno, "cannot lock shared memory %s: %s", name, strerror(errno));
		goto fail;
	}
	/*
	 * Every page allocated now: a full /dev/shm is ENOSPC here, not a
	 * SIGBUS when this process reads the mapping (or a failed stage).
	 */
	do
		rc = posix_fallocate(fd, 0, (off_t)d->map_size);
	while (rc == EINTR);
	if (rc != 0) {
		rc = cfail(err, -rc, "cannot reserve %llu bytes of shared memory %s: %s",
		           (unsigned long long)d->map_size, name, strerror(rc));
		goto fail;
	}
	d->ptr = mmap(NULL, (size_t)d->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (d->ptr == MAP_FAILED) {
		d->ptr = NULL;
		rc = cfail(err, -errno, "cannot map shared memory %s: %s", name, strerror(errno));
		goto fail;
	}
	d->fd = fd;
	d->kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	d->handle_bytes = (uint32_t)strlen(name) + 1;
	memcpy(d->handle, name, d->handle_bytes);
	return 0;
fail:
	close(fd);
	shm_unlink(name);
	return rc;
}

int placefs_client_dest_create(const struct placefs_ioc_ring_info *ri, uint64_t size,
                               struct placefs_client_dest **out, struct placefs_client_error *err)
{
	struct placefs_client_dest *d;
	struct placefs_error e;
	int rc;

	*out = NULL;
	if (ri->backend == PLACEFS_IOC_BACKEND_NONE)
		return cfail(err, -ENODEV, "staging is disabled on this mount (-o device=none)");
	if (ri->backend != PLACEFS_IOC_BACKEND_HOST && ri->backend != PLACEFS_IOC_BACKEND_CUDA)
		return cfail(err, -EPROTO, "unknown staging backend %u", ri->backend);
	d = calloc(1, sizeof(*d));
	if (!d)
		return cfail(err, -ENOMEM, "out of memory");
	d->size = size;
	d->fd = -1;
	d->device = ri->device;
	d->ndevices = ri->ndevices;
	if (ri->backend == PLACEFS_IOC_BACKEND_HOST) {
		rc = dest_shm(d, err);
	} else {
		placefs_error_clear(&e);
		rc = placefs_devmem_alloc(ri->device, size, &d->ptr, d->handle, &e);
		if (rc != 0) {
			cfrom(err, rc, &e);
		} else {
			d->kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
			d->handle_bytes = PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES;
		}
	}
	if (rc != 0) {
		free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void placefs_client_dest_free(struct placefs_client_dest *d)
{
	if (!d)
		return;
	if (d->kind == PLACEFS_IOC_HANDLE_HOST_SHM) {
		munmap(d->ptr, (size_t)d->map_size);
		shm_unlink((const char *)d->handle);
		close(d->fd);
	} else if (d->kind == PLACEFS_IOC_HANDLE_CUDA_IPC) {
		placefs_devmem_free(d->device, d->ptr);
	}
	free(d);
}

uint64_t placefs_client_dest_size(const struct placefs_client_dest *d)
{
	return d->size;
}

uint32_t placefs_client_dest_kind(const struct placefs_client_dest *d)
{
	return d->kind;
}

const char *placefs_client_dest_shm_name(const struct placefs_client_dest *d)
{
	return d->kind == PLACEFS_IOC_HANDLE_HOST_SHM ? (const char *)d->handle : NULL;
}

void *placefs_client_dest_ptr(const struct placefs_client_dest *d)
{
	return d->ptr;
}

int placefs_client_dest_read(const struct placefs_client_dest *d, uint64_t off, void *dst,
                             uint64_t n, struct placefs_client_error *err)
{
	struct placefs_error e;
	int rc;

	if (off > d->size || n > d->size - off)
		return cfail(err, -EINVAL, "destination range %llu+%llu is outside its %llu bytes",
		             (unsigned long long)off, (unsigned long long)n,
		             (unsigned long long)d->size);
	if (n == 0)
		return 0;
	if (d->kind == PLACEFS_IOC_HANDLE_HOST_SHM) {
		memcpy(dst, (const uint8_t *)d->ptr + off, n);
		return 0;
	}
	placefs_error_clear(&e);
	rc = placefs_devmem_to_host(d->device, (const uint8_t *)d->ptr + off, dst, n, &e);
	return rc ? cfrom(err, rc, &e) : 0;
}

/* ---- the ring ------------------------------------------------------------------ */

int placefs_client_ring_map(const struct placefs_ioc_ring_info *ri,
                            struct placefs_client_ring **out, struct placefs_client_error *err)
{
	struct placefs_client_ring *r;
	struct placefs_error e;
	char name[PLACEFS_IOC_HANDLE_MAX];
	int fd, rc;

	*out = NULL;
	if (ri->backend == PLACEFS_IOC_BACKEND_NONE)
		return cfail(err, -ENODEV, "staging is disabled on this mount (-o device=none)");
	if (ri->handle_kind == PLACEFS_IOC_HANDLE_NONE)
		return cfail(err, -EOPNOTSUPP,
		             "the mount's ring cannot be mapped (no export "
		             "handle; copy mode still works)");
	if (ri->ring_bytes == 0 || ri->ring_bytes > (uint64_t)SIZE_MAX)
		return cfail(err, -EPROTO, "ring of %llu bytes",
		             (unsigned long long)ri->ring_bytes);
	r = calloc(1, sizeof(*r));
	if (!r)
		return cfail(err, -ENOMEM, "out of memory");
	r->backend = ri->backend;
	r->device = ri->device;
	r->bytes = ri->ring_bytes;
	if (ri->handle_kind == PLACEFS_IOC_HANDLE_HOST_SHM) {
		if (ri->handle_bytes < 2 || ri->handle_bytes > sizeof(name) ||
		    ri->handle[ri->handle_bytes - 1] != '\0') {
			rc = cfail(err, -EPROTO, "ring info: malformed shm name");
			goto fail;
		}
		memcpy(name, ri->handle, ri->handle_bytes);
		fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
		if (fd < 0) {
			rc = cfail(err, -errno, "cannot open the ring %s: %s", name,
			           strerror(errno));
			goto fail;
		}
		r->ptr = mmap(NULL, (size_t)r->bytes, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (r->ptr == MAP_FAILED) {
			r->ptr = NULL;
			rc = cfail(err, -errno, "cannot map the ring %s: %s", name,
			           strerror(errno));
			goto fail;
		}
	} else if (ri->handle_kind == PLACEFS_IOC_HANDLE_CUDA_IPC) {
		placefs_error_clear(&e);
		rc = placefs_devmem_ipc_map(ri->device, ri->handle, &r->ptr, &e);
		if (rc != 0) {
			cfrom(err, rc, &e);
			goto fail;
		}
	} else {
		rc = cfail(err, -EPROTO, "unknown ring handle kind %u", ri->handle_kind);
		goto fail;
	}
	*out = r;
	return 0;
fail:
	free(r);
	return rc;
}

void placefs_client_ring_unmap(struct placefs_client_ring *r)
{
	if (!r)
		return;
	if (r->backend == PLACEFS_IOC_BACKEND_HOST)
		munmap(r->ptr, (size_t)r->bytes);
	else
		placefs_devmem_ipc_unmap(r->device, r->ptr);
	free(r);
}

const void *placefs_client_ring_ptr(const struct placefs_client_ring *r)
{
	return r->ptr;
}

int placefs_client_ring_read(const struct placefs_client_ring *r, uint64_t off, void *dst,
                             uint64_t n, struct placefs_client_error *err)
{
	struct placefs_error e;
	int rc;

	if (off > r->bytes || n > r->bytes - off)
		return cfail(err, -EINVAL, "ring range %llu+%llu is outside the %llu-byte ring",
		             (unsigned long long)off, (unsigned long long)n,
		             (unsigned long long)r->bytes);
	if (n == 0)
		return 0;
	if (r->backend == PLACEFS_IOC_BACKEND_HOST) {
		memcpy(dst, (const uint8_t *)r->ptr + off, n);
		return 0;
	}
	placefs_error_clear(&e);
	rc = placefs_devmem_to_host(r->device, (const uint8_t *)r->ptr + off, dst, n, &e);
	return rc ? cfrom(err, rc, &e) : 0;
}
