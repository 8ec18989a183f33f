/* SPDX-License-Identifier: MIT */
/*
 * test_stage_ioctl: raw staging ioctls against a live placefs mount, for
 * tests/mount-stage.sh. Subcommands:
 *
 *   bad MOUNT GPUFILE CPUFILE   every malformed request, with its errno
 *   hold FILE...                borrow each file, print "held", wait for
 *                               EOF on stdin, release, print "released"
 *   try FILE TIMEOUT_MS [--sigusr1]
 *                               one borrow with a timeout: "waiting" on
 *                               stderr, then "ok wait_ns=N" or the errno
 *                               name on stdout (with --sigusr1 a SIGUSR1
 *                               interrupts the wait)
 *   wrap FILE...                borrow, check against read() through the
 *                               mapped ring, release, in turn; prints the
 *                               number of times the ring wrapped
 *   batch CPUFILE GPUFILE...    the client's batches (placefs_client_index,
 *                               placefs_client_copy_batch): the gpu files
 *                               (in plan order) by index and as one range
 *                               of the plan (each at its offset of the
 *                               mount's .placefs/packed.tsv, read with
 *                               placefs_client_packed_read), byte-exact
 *                               with read(); a cpu
 *                               file (EFBIG), an index past the plan
 *                               (ERANGE) and an entry past the destination
 *                               (EINVAL) fail alone; malformed requests
 *                               fail whole
 *
 * Exit status 0 when every check held.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/devmem.h" /* device memory of our own, for a CUDA IPC destination */
#include "placefs/client.h"

static int checks, failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		checks++;                                                                          \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			fprintf(stderr, "FAIL: " __VA_ARGS__);                                     \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

static int xopen(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "test_stage_ioctl: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	return fd;
}

/* Issues cmd with arg and checks that it fails with `want` (0: succeeds). */
static void expect(int fd, unsigned long cmd, void *arg, int want, const char *what)
{
	int rc = ioctl(fd, cmd, arg);
	int e = rc == 0 ? 0 : errno;

	CHECK(e == want, "%s: %s, expected %s", what, e ? placefs_client_errno_name(e) : "success",
	      want ? placefs_client_errno_name(want) : "success");
}

static void stage_init(struct placefs_ioc_stage *s, uint32_t mode)
{
	memset(s, 0, sizeof(*s));
	s->version = PLACEFS_IOC_VERSION;
	s->size = sizeof(*s);
	s->mode = mode;
}

static void copy_init(struct placefs_ioc_stage *s, const char *shm, uint64_t off, uint64_t size)
{
	stage_init(s, PLACEFS_IOC_STAGE_COPY);
	s->dest_kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	s->dest_handle_bytes = (uint32_t)strlen(shm) + 1;
	memcpy(s->dest_handle, shm, strlen(shm) + 1);
	s->dest_offset = off;
	s->dest_size = size;
}

/* copy_init() for a CUDA IPC destination: the 64-byte handle h. */
static void ipc_copy_init(struct placefs_ioc_stage *s, const uint8_t *h, uint64_t off,
                          uint64_t size)
{
	stage_init(s, PLACEFS_IOC_STAGE_COPY);
	s->dest_kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
	s->dest_handle_bytes = PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES;
	memcpy(s->dest_handle, h, PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES);
	s->dest_offset = off;
	s->dest_size = size;
}

static void release_init(struct placefs_ioc_release *r, uint64_t lease)
{
	memset(r, 0, sizeof(*r));
	r->version = PLACEFS_IOC_VERSION;
	r->size = sizeof(*r);
	r->lease = lease;
}

/* A host shm object of `size` bytes owned by us, for copy destinations. */
static void make_shm(char *name, size_t len, uint64_t size)
{
	int fd;

	snprintf(name, len, "/placefs-test-ioctl-%ld", (long)getpid());
	fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		fprintf(stderr, "test_stage_ioctl: shm %s: %s\n", name, strerror(errno));
		exit(2);
	}
	close(fd);
}

/*
 * A CUDA IPC destination whose dest_size is larger than the allocation its
 * handle names: the daemon holds the range to the allocation (the driver's
 * size), so a copy past its end is EINVAL (a daemon without the check writes
 * into whatever it has mapped next, or fails with a CUDA error); the copy
 * that ends at the allocation's last byte works and lands the tensor's
 * bytes. The allocation is a multiple of 2 MiB, so the driver's size is the
 * one asked for.
 */
static void cuda_past_allocation(int fd, int32_t device, uint64_t n)
{
	uint64_t bytes = (n + 4096 + (2ULL << 20) - 1) / (2ULL << 20) * (2ULL << 20);
	uint8_t h[PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES], *tail;
	struct placefs_ioc_stage s;
	struct placefs_error err;
	void *dp = NULL;
	uint64_t i;

	placefs_error_clear(&err);
	if (placefs_devmem_alloc(device, bytes, &dp, h, &err) != 0) {
		CHECK(0, "cannot allocate %" PRIu64 " bytes on cuda:%d: %s", bytes, device,
		      err.msg);
		return;
	}
	ipc_copy_init(&s, h, bytes - n + 4096, bytes * 2); /* the size: the client's word */
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy past the end of the CUDA allocation");
	s.dest_offset = bytes + 4096;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy wholly past the CUDA allocation");
	ipc_copy_init(&s, h, bytes - n, bytes);
	expect(fd, PLACEFS_IOC_STAGE, &s, 0, "copy that ends at the allocation's last byte");
	/* The copy that was let through wrote the tensor's bytes there. */
	tail = malloc(n ? n : 1);
	if (tail &&
	    placefs_devmem_to_host(device, (uint8_t *)dp + (bytes - n), tail, n, &err) == 0) {
		uint8_t *want = malloc(n ? n : 1);
		ssize_t got = want ? pread(fd, want, n, 0) : -1;

		CHECK(got == (ssize_t)n, "read of the tensor file: %zd of %" PRIu64, got, n);
		for (i = 0; want && got == (ssize_t)n && i < n; i++)
			if (tail[i] != want[i]) {
				CHECK(0,
				      "byte %" PRIu64
				      " of the copy at the allocation's end differs",
				      i);
				break;
			}
		free(want);
	} else {
		CHECK(0, "cannot read the destination back: %s", err.msg);
	}
	free(tail);
	placefs_devmem_free(device, dp);
	printf("CUDA allocation of %" PRIu64 " bytes: copies past its end refused\n", bytes);
}

static int cmd_bad(const char *mnt, const char *gpu, const char *cpu)
{
	struct placefs_ioc_ring_info ri, ri_ok;
	struct placefs_ioc_stage s;
	struct placefs_ioc_release r;
	char shm[64], path[PATH_MAX], buf[512];
	struct stat st;
	uint64_t lease, n;
	int fd, fd2, cfd, dfd, i, host;
	unsigned int flags;

	fd = xopen(gpu, O_RDONLY);
	if (fstat(fd, &st) != 0)
		return 2;
	n = (uint64_t)st.st_size;
	make_shm(shm, sizeof(shm), n + 4096);

	/* ---- RING_INFO ---- */
	memset(&ri_ok, 0, sizeof(ri_ok));
	ri_ok.version = PLACEFS_IOC_VERSION;
	ri_ok.size = sizeof(ri_ok);
	expect(fd, PLACEFS_IOC_RING_INFO, &ri_ok, 0, "ring_info");
	host = ri_ok.backend == PLACEFS_IOC_BACKEND_HOST;
	CHECK(host || ri_ok.backend == PLACEFS_IOC_BACKEND_CUDA, "ring_info backend %u",
	      ri_ok.backend);
	CHECK(ri_ok.ring_bytes > 0 && ri_ok.alignment > 0, "ring_info sizes");
	CHECK(ri_ok.handle_kind ==
	              (host ? PLACEFS_IOC_HANDLE_HOST_SHM : PLACEFS_IOC_HANDLE_CUDA_IPC),
	      "ring_info handle kind %u", ri_ok.handle_kind);
	CHECK(host ? ri_ok.device == -1 : ri_ok.device >= 0, "ring_info device %d", ri_ok.device);
	for (i = 0; i < 3; i++) {
		static const uint32_t v[] = {0, 2, 0xffffffffu};

		ri = ri_ok;
		memset(ri.reserved, 0, sizeof(ri.reserved));
		ri.version = v[i];
		expect(fd, PLACEFS_IOC_RING_INFO, &ri, EINVAL, "ring_info with a bad version");
	}
	memset(&ri, 0, sizeof(ri));
	ri.version = PLACEFS_IOC_VERSION;
	ri.size = 255;
	expect(fd, PLACEFS_IOC_RING_INFO, &ri, EINVAL, "ring_info with size 255");
	ri.size = 257;
	expect(fd, PLACEFS_IOC_RING_INFO, &ri, EINVAL, "ring_info with size 257");
	for (i = 0; i < 12; i++) {
		/* reserved[], an unknown flag, select without a flag, ndevices, position (in: 0) */
		memset(&ri, 0, sizeof(ri));
		ri.version = PLACEFS_IOC_VERSION;
		ri.size = sizeof(ri);
		if (i < 8)
			ri.reserved[i] = 1;
		else if (i == 8)
			ri.flags = 4;
		else if (i == 9)
			ri.select = 1;
		else if (i == 10)
			ri.ndevices = 1;
		else
			ri.position = 1;
		expect(fd, PLACEFS_IOC_RING_INFO, &ri, EINVAL, "ring_info with reserved[i] set");
	}
	/* Both selecting flags at once, and rings this mount does not have. */
	memset(&ri, 0, sizeof(ri));
	ri.version = PLACEFS_IOC_VERSION;
	ri.size = sizeof(ri);
	ri.flags = PLACEFS_IOC_RING_INFO_DEVICE | PLACEFS_IOC_RING_INFO_POSITION;
	expect(fd, PLACEFS_IOC_RING_INFO, &ri, EINVAL, "ring_info with DEVICE|POSITION");
	ri.flags = PLACEFS_IOC_RING_INFO_DEVICE;
	ri.select = 63;
	expect(fd, PLACEFS_IOC_RING_INFO, &ri, ENODEV, "ring_info of a device not served");
	ri.flags = PLACEFS_IOC_RING_INFO_POSITION;
	ri.select = 1;
	expect(fd, PLACEFS_IOC_RING_INFO, &ri, ENODEV, "ring_info past the last position");
	ri.select = -1;
	expect(fd, PLACEFS_IOC_RING_INFO, &ri, ENODEV, "ring_info at position -1");

	/* ---- STAGE: header fields ---- */
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.version = 2;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with version 2");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.version = 0;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with version 0");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.size = 319;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with size 319");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.size = 0;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with size 0");
	for (i = 0; i < 3; i++) {
		static const uint32_t modes[] = {2, 7, 0xffffffffu};

		stage_init(&s, modes[i]);
		expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with an unknown mode");
	}
	/* Unknown flags (SLICE 0x1 and DEVICE 0x2 are served). */
	for (flags = 4; flags; flags <<= 7) {
		stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
		s.flags = flags;
		expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with flags");
	}
	/* A slice of no elements, of dimension 2, past the dimension. */
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.flags = PLACEFS_IOC_STAGE_SLICE;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with a slice of length 0");
	s.slice_dim = 2;
	s.slice_len = 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with a slice of dimension 2");
	s.slice_dim = 0;
	s.slice_start = UINT64_MAX;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with a slice past dimension 0");
	/* A device the mount does not stage to. */
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.flags = PLACEFS_IOC_STAGE_DEVICE;
	s.device = 63;
	expect(fd, PLACEFS_IOC_STAGE, &s, ENODEV, "stage on a device not served");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.pad0 = 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with pad0 set");
	for (i = 0; i < 11; i++) {
		/* reserved[], then slice_dim, device, slice_start, slice_len without their flags */
		stage_init(&s, PLACEFS_IOC_STAGE_COPY);
		copy_init(&s, shm, 0, n);
		if (i < 7)
			s.reserved[i] = 0x100;
		else if (i == 7)
			s.slice_dim = 1;
		else if (i == 8)
			s.device = 1;
		else if (i == 9)
			s.slice_start = 1;
		else
			s.slice_len = 1;
		expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "stage with reserved[i] set");
	}
	/* Borrow mode takes no destination. */
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.dest_kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "borrow with dest_kind");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.dest_handle_bytes = 3;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "borrow with dest_handle_bytes");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.dest_offset = 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "borrow with dest_offset");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.dest_size = 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "borrow with dest_size");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	s.dest_handle[100] = 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "borrow with dest_handle bytes");

	/* ---- STAGE: destinations ---- */
	for (i = 0; i < 3; i++) {
		static const uint32_t kinds[] = {PLACEFS_IOC_HANDLE_NONE, 3, 99};

		copy_init(&s, shm, 0, n);
		s.dest_kind = kinds[i];
		expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with a bad dest_kind");
	}
	for (i = 0; i < 3; i++) {
		static const uint32_t hb[] = {0, 63, 65};

		copy_init(&s, shm, 0, n);
		memset(s.dest_handle, 0, sizeof(s.dest_handle));
		s.dest_kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
		s.dest_handle_bytes = hb[i];
		expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with a CUDA handle of bad length");
	}
	copy_init(&s, "noslash", 0, n);
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy to a shm name without '/'");
	copy_init(&s, "/a/b", 0, n);
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy to a shm name with two '/'");
	copy_init(&s, "/", 0, n);
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy to the shm name \"/\"");
	copy_init(&s, shm, 0, n);
	s.dest_handle_bytes += 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with dest_handle_bytes past the NUL");
	copy_init(&s, shm, 0, n);
	s.dest_handle_bytes -= 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with dest_handle_bytes without the NUL");
	copy_init(&s, shm, 0, n);
	s.dest_handle_bytes = PLACEFS_IOC_HANDLE_MAX + 1;
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with dest_handle_bytes 129");
	copy_init(&s, shm, 0, n);
	s.dest_handle[PLACEFS_IOC_HANDLE_MAX - 1] = 'x';
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with bytes after the shm name");
	copy_init(&s, shm, 1, n);
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with dest_offset + nbytes > dest_size");
	copy_init(&s, shm, n + 2, n + 1);
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with dest_offset > dest_size");
	copy_init(&s, shm, UINT64_MAX - 2, UINT64_MAX);
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy whose dest_offset + nbytes overflows");
	copy_init(&s, shm, 0, n + 8192);
	expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy with dest_size > the shm object");
	copy_init(&s, "/placefs-test-ioctl-missing", 0, n);
	expect(fd, PLACEFS_IOC_STAGE, &s, ENOENT, "copy to a missing shm object");
	if (host) {
		copy_init(&s, (const char *)ri_ok.handle, 0, n);
		expect(fd, PLACEFS_IOC_STAGE, &s, EINVAL, "copy into the staging ring itself");
	}
	copy_init(&s, shm, 0, n);
	memset(s.dest_handle, 0xab, PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES);
	memset(s.dest_handle + PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES, 0,
	       PLACEFS_IOC_HANDLE_MAX - PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES);
	s.dest_kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
	s.dest_handle_bytes = PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES;
	if (host) {
		expect(fd, PLACEFS_IOC_STAGE, &s, EOPNOTSUPP, "copy to a CUDA IPC handle on host");
	} else {
		/* The runtime decides how a made-up handle fails; it must fail cleanly. */
		i = ioctl(fd, PLACEFS_IOC_STAGE, &s);
		CHECK(i != 0, "copy to a made-up CUDA IPC handle succeeded");
		printf("made-up CUDA IPC handle: %s\n",
		       i ? placefs_client_errno_name(errno) : "ok");
		cuda_past_allocation(fd, ri_ok.device, n);
	}
	/* The good request still works, at the last offset that fits. */
	copy_init(&s, shm, 4096, n + 4096);
	expect(fd, PLACEFS_IOC_STAGE, &s, 0, "copy at offset 4096");
	CHECK(s.nbytes == n && s.lease == 0, "copy result nbytes %" PRIu64 " lease %" PRIu64,
	      s.nbytes, s.lease);
	CHECK(s.version == PLACEFS_IOC_VERSION && s.size == sizeof(s), "copy reply header");

	/* ---- command numbers ---- */
	expect(fd, _IOWR(PLACEFS_IOC_MAGIC, 0x09, char[64]), buf, ENOTTY, "unknown command 9");
	expect(fd, _IOWR(PLACEFS_IOC_MAGIC, 0x00, char[64]), buf, ENOTTY, "unknown command 0");
	expect(fd, _IOWR(0xB8, 0x02, struct placefs_ioc_stage), &s, ENOTTY, "another magic");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	expect(fd, _IOWR(PLACEFS_IOC_MAGIC, 0x02, char[100]), &s, EINVAL,
	       "stage command encoding 100 bytes");
	expect(fd, _IOWR(PLACEFS_IOC_MAGIC, 0x02, char[321]), buf, EINVAL,
	       "stage command encoding 321 bytes");
	expect(fd, _IOW(PLACEFS_IOC_MAGIC, 0x02, struct placefs_ioc_stage), &s, EINVAL,
	       "stage command without the read direction");
	memset(&ri, 0, sizeof(ri));
	expect(fd, _IOR(PLACEFS_IOC_MAGIC, 0x01, struct placefs_ioc_ring_info), &ri, EINVAL,
	       "ring_info command without the write direction");
	expect(fd, _IO(PLACEFS_IOC_MAGIC, 0x03), NULL, EINVAL, "release command without data");
	release_init(&r, 1);
	expect(fd, _IOWR(PLACEFS_IOC_MAGIC, 0x03, struct placefs_ioc_release), &r, EINVAL,
	       "release command with the read direction");
	expect(fd, FS_IOC_GETFLAGS, &i, ENOTTY, "FS_IOC_GETFLAGS on a tensor file");

	/* ---- RELEASE ---- */
	release_init(&r, 1);
	r.version = 2;
	expect(fd, PLACEFS_IOC_RELEASE, &r, EINVAL, "release with version 2");
	release_init(&r, 1);
	r.size = 63;
	expect(fd, PLACEFS_IOC_RELEASE, &r, EINVAL, "release with size 63");
	for (i = 0; i < 6; i++) {
		release_init(&r, 1);
		r.reserved[i] = 1;
		expect(fd, PLACEFS_IOC_RELEASE, &r, EINVAL, "release with reserved[i] set");
	}
	release_init(&r, 0);
	expect(fd, PLACEFS_IOC_RELEASE, &r, ENOENT, "release of lease 0");
	release_init(&r, 0xdeadbeefULL);
	expect(fd, PLACEFS_IOC_RELEASE, &r, ENOENT, "release of an unknown lease");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	expect(fd, PLACEFS_IOC_STAGE, &s, 0, "borrow");
	lease = s.lease;
	CHECK(lease != 0 && s.nbytes == n, "borrow result");
	CHECK(s.ring_offset % ri_ok.alignment == 0 && s.ring_offset + n <= ri_ok.ring_bytes,
	      "borrowed span %" PRIu64 "+%" PRIu64 " outside the ring", s.ring_offset, n);
	fd2 = xopen(gpu, O_RDONLY);
	release_init(&r, lease);
	expect(fd2, PLACEFS_IOC_RELEASE, &r, ENOENT, "release through another descriptor");
	close(fd2);
	/* A dup shares the file handle, so it may release. */
	fd2 = dup(fd);
	expect(fd2, PLACEFS_IOC_RELEASE, &r, 0, "release through a dup of the descriptor");
	close(fd2);
	expect(fd, PLACEFS_IOC_RELEASE, &r, ENOENT, "second release");

	/* ---- the cpu-placed tensor ---- */
	cfd = xopen(cpu, O_RDONLY);
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	expect(cfd, PLACEFS_IOC_STAGE, &s, EFBIG, "borrow of the cpu-placed tensor");
	copy_init(&s, shm, 0, n + 4096);
	expect(cfd, PLACEFS_IOC_STAGE, &s, EFBIG, "copy of the cpu-placed tensor");
	ri = ri_ok;
	memset(&ri, 0, sizeof(ri));
	ri.version = PLACEFS_IOC_VERSION;
	ri.size = sizeof(ri);
	expect(cfd, PLACEFS_IOC_RING_INFO, &ri, 0, "ring_info on the cpu-placed tensor");
	close(cfd);

	/* ---- what is not a tensor file ---- */
	snprintf(path, sizeof(path), "%s/.placefs/stats", mnt);
	cfd = xopen(path, O_RDONLY);
	memset(&ri, 0, sizeof(ri));
	ri.version = PLACEFS_IOC_VERSION;
	ri.size = sizeof(ri);
	expect(cfd, PLACEFS_IOC_RING_INFO, &ri, ENOTTY, "ring_info on .placefs/stats");
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	expect(cfd, PLACEFS_IOC_STAGE, &s, ENOTTY, "stage on .placefs/stats");
	close(cfd);
	snprintf(path, sizeof(path), "%s/.placefs/plan", mnt);
	cfd = xopen(path, O_RDONLY);
	expect(cfd, PLACEFS_IOC_STAGE, &s, ENOTTY, "stage on .placefs/plan");
	close(cfd);
	dfd = xopen(mnt, O_RDONLY | O_DIRECTORY);
	expect(dfd, PLACEFS_IOC_RING_INFO, &ri, ENOTTY, "ring_info on the mount's root");
	close(dfd);
	snprintf(path, sizeof(path), "%s/.placefs/by-placement/gpu", mnt);
	dfd = xopen(path, O_RDONLY | O_DIRECTORY);
	expect(dfd, PLACEFS_IOC_STAGE, &s, ENOTTY, "stage on a directory");
	close(dfd);

	/* ---- the daemon still serves ---- */
	stage_init(&s, PLACEFS_IOC_STAGE_BORROW);
	expect(fd, PLACEFS_IOC_STAGE, &s, 0, "borrow after the bad requests");
	release_init(&r, s.lease);
	expect(fd, PLACEFS_IOC_RELEASE, &r, 0, "release after the bad requests");
	CHECK(read(fd, buf, sizeof(buf)) >= 0, "read after the bad requests");
	close(fd);
	shm_unlink(shm);
	printf("bad: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}

static int cmd_hold(int argc, char **argv)
{
	struct placefs_client_error e;
	struct placefs_ioc_stage s;
	char c;
	int *fds = calloc((size_t)argc, sizeof(*fds));
	uint64_t *leases = calloc((size_t)argc, sizeof(*leases));
	int i;

	if (!fds || !leases)
		return 2;
	for (i = 0; i < argc; i++) {
		fds[i] = xopen(argv[i], O_RDONLY);
		if (placefs_client_borrow(fds[i], 0, &s, &e) != 0) {
			fprintf(stderr, "hold: %s: %s\n", argv[i], e.msg);
			return 1;
		}
		leases[i] = s.lease;
		printf("lease %s offset %" PRIu64 " bytes %" PRIu64 "\n", argv[i], s.ring_offset,
		       s.nbytes);
	}
	printf("held\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	for (i = 0; i < argc; i++) {
		if (placefs_client_release(fds[i], leases[i], &e) != 0) {
			fprintf(stderr, "hold: %s: %s\n", argv[i], e.msg);
			return 1;
		}
		close(fds[i]);
	}
	printf("released\n");
	free(fds);
	free(leases);
	return 0;
}

static void on_usr1(int sig)
{
	(void)sig;
}

static int cmd_try(const char *file, const char *ms, int sigusr1)
{
	struct placefs_client_error e;
	struct placefs_ioc_stage s;
	struct sigaction sa;
	int fd, rc;

	if (sigusr1) {
		/* No SA_RESTART: the signal must end the ioctl with EINTR. */
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
	}
	fd = xopen(file, O_RDONLY);
	/* On stderr, so that $(...) sees only the result: the stage starts now. */
	fprintf(stderr, "waiting\n");
	rc = placefs_client_borrow(fd, strtoull(ms, NULL, 10) * 1000000ULL, &s, &e);
	if (rc != 0) {
		printf("%s\n", placefs_client_errno_name(rc));
		close(fd);
		return 1;
	}
	printf("ok wait_ns=%" PRIu64 " offset=%" PRIu64 "\n", s.wait_ns, s.ring_offset);
	placefs_client_release(fd, s.lease, NULL);
	close(fd);
	return 0;
}

static int cmd_wrap(int argc, char **argv)
{
	struct placefs_client_error e;
	struct placefs_ioc_ring_info ri;
	struct placefs_client_ring *ring;
	struct placefs_ioc_stage s;
	uint64_t prev_end = 0;
	int i, fd, wraps = 0;

	fd = xopen(argv[0], O_RDONLY);
	if (placefs_client_ring_info(fd, &ri, &e) != 0 ||
	    placefs_client_ring_map(&ri, &ring, &e) != 0) {
		fprintf(stderr, "wrap: %s\n", e.msg);
		return 2;
	}
	close(fd);
	for (i = 0; i < argc; i++) {
		uint8_t *want, *got;
		struct stat st;

		fd = xopen(argv[i], O_RDONLY);
		if (fstat(fd, &st) != 0)
			return 2;
		want = malloc((size_t)st.st_size + 1);
		got = malloc((size_t)st.st_size + 1);
		if (!want || !got)
			return 2;
		CHECK(read(fd, want, (size_t)st.st_size) == st.st_size, "%s: read()", argv[i]);
		if (placefs_client_borrow(fd, 0, &s, &e) != 0) {
			CHECK(0, "%s: %s", argv[i], e.msg);
			close(fd);
			continue;
		}
		CHECK(s.nbytes == (uint64_t)st.st_size, "%s: nbytes", argv[i]);
		CHECK(s.ring_offset % ri.alignment == 0 &&
		              s.ring_offset + s.nbytes <= ri.ring_bytes,
		      "%s: span %" PRIu64 "+%" PRIu64 " outside the %" PRIu64 "-byte ring", argv[i],
		      s.ring_offset, s.nbytes, ri.ring_bytes);
		if (i > 0 && s.ring_offset < prev_end)
			wraps++;
		prev_end = s.ring_offset + s.nbytes;
		CHECK(placefs_client_ring_read(ring, s.ring_offset, got, s.nbytes, &e) == 0 &&
		              memcmp(want, got, s.nbytes) == 0,
		      "%s: ring bytes differ from read()", argv[i]);
		CHECK(placefs_client_release(fd, s.lease, &e) == 0, "%s: release: %s", argv[i],
		      e.msg);
		printf("%s offset %" PRIu64 " bytes %" PRIu64 " verified\n", argv[i], s.ring_offset,
		       s.nbytes);
		free(want);
		free(got);
		close(fd);
	}
	placefs_client_ring_unmap(ring);
	printf("wraps %d\nwrap: %d checks, %d failures\n", wraps, checks, failures);
	return failures ? 1 : 0;
}

/* The n bytes of path, read() whole, or exit 2. */
static uint8_t *slurp(const char *path, uint64_t *n)
{
	struct stat st;
	uint8_t *buf;
	int fd = xopen(path, O_RDONLY);

	if (fstat(fd, &st) != 0 || !(buf = malloc((size_t)st.st_size + 1)) ||
	    read(fd, buf, (size_t)st.st_size) != st.st_size) {
		fprintf(stderr, "test_stage_ioctl: %s: cannot read it whole\n", path);
		exit(2);
	}
	close(fd);
	*n = (uint64_t)st.st_size;
	return buf;
}

static uint64_t align256(uint64_t v)
{
	return (v + 255) & ~(uint64_t)255;
}

static int cmd_batch(const char *cpu, int argc, char **argv)
{
	struct placefs_ioc_batch_entry *ent, one;
	struct placefs_client_packed *pk = NULL;
	struct placefs_client_error e;
	struct placefs_ioc_ring_info ri;
	struct placefs_client_dest *d;
	uint64_t *idx, *off, *len, *roff, total = 0, payload = 0, room, cpu_idx, v;
	char *mnt, *slash;
	struct stat cst;
	uint8_t **want, *got;
	uint32_t done, i, n = (uint32_t)argc;
	int fd, rc, k;

	idx = calloc(n, sizeof(*idx));
	off = calloc(n, sizeof(*off));
	len = calloc(n, sizeof(*len));
	roff = calloc(n, sizeof(*roff));
	want = calloc(n, sizeof(*want));
	ent = calloc(n > 4 ? n : 4, sizeof(*ent)); /* the failing batch below has 4 entries */
	mnt = strdup(argv[0]);
	if (!idx || !off || !len || !roff || !want || !ent || !mnt || !(slash = strrchr(mnt, '/')))
		return 2;
	/* The mount's packed layout, from the mountpoint (GPUFILE's directory). */
	*slash = '\0';
	if (placefs_client_packed_read(mnt, &pk, &e) != 0) {
		fprintf(stderr, "batch: %s\n", e.msg);
		return 2;
	}
	for (i = 0; i < n; i++) {
		rc = placefs_client_index(argv[i], &idx[i], &e);
		CHECK(rc == 0, "index of %s: %s", argv[i], e.msg);
		CHECK(i == 0 || idx[i] > idx[i - 1], "%s: index %" PRIu64 " not after %" PRIu64,
		      argv[i], idx[i], i ? idx[i - 1] : 0);
		want[i] = slurp(argv[i], &len[i]);
		off[i] = total;
		total = align256(total + len[i]);
		payload += len[i];
		/* Where a range puts it: its line of packed.tsv, which names its file. */
		if (rc != 0 || idx[i] >= pk->count) {
			fprintf(stderr,
			        "batch: %s: plan index %" PRIu64 " has no line in packed.tsv\n",
			        argv[i], idx[i]);
			return 2;
		}
		CHECK(strcmp(pk->tensors[idx[i]].file, strrchr(argv[i], '/') + 1) == 0 &&
		              pk->tensors[idx[i]].placement == PLACEFS_CLIENT_GPU &&
		              pk->tensors[idx[i]].nbytes == len[i],
		      "%s: packed.tsv line %" PRIu64 " is %s", argv[i], idx[i] + 2,
		      pk->tensors[idx[i]].file);
		roff[i] = pk->tensors[idx[i]].packed;
	}
	if (pk->layout[PLACEFS_CLIENT_GPU] > total)
		total = pk->layout[PLACEFS_CLIENT_GPU];
	CHECK(placefs_client_index(cpu, &cpu_idx, &e) == 0, "index of %s: %s", cpu, e.msg);
	/* Room for the cpu file too, so that its entry fails for its placement (EFBIG), not
	 * for its size. */
	if (stat(cpu, &cst) != 0) {
		fprintf(stderr, "batch: %s: %s\n", cpu, strerror(errno));
		return 2;
	}
	room = (uint64_t)cst.st_size > total ? (uint64_t)cst.st_size : total;
	fd = xopen(argv[0], O_RDONLY);
	if (placefs_client_ring_info(fd, &ri, &e) != 0 ||
	    placefs_client_dest_create(&ri, room + 256, &d, &e) != 0) {
		fprintf(stderr, "batch: %s\n", e.msg);
		return 2;
	}
	got = malloc(total + 256);
	if (!got)
		return 2;

	/* Every gpu file by index, at most PLACEFS_IOC_BATCH_MAX a request. */
	for (i = 0; i < n; i += PLACEFS_IOC_BATCH_MAX) {
		uint32_t c = n - i < PLACEFS_IOC_BATCH_MAX ? n - i : PLACEFS_IOC_BATCH_MAX, j;

		for (j = 0; j < c; j++) {
			memset(&ent[j], 0, sizeof(ent[j]));
			ent[j].tensor = idx[i + j];
			ent[j].dest_offset = off[i + j];
		}
		rc = placefs_client_copy_batch(fd, d, ent, c, 0, 0, &done, &e);
		CHECK(rc == 0 && done == c, "batch of %u: rc %d done %u: %s", c, rc, done, e.msg);
		for (j = 0; j < c; j++)
			CHECK(ent[j].error == 0 && ent[j].nbytes == len[i + j],
			      "%s: entry error %d, %" PRIu64 " bytes of %" PRIu64, argv[i + j],
			      ent[j].error, ent[j].nbytes, len[i + j]);
	}
	CHECK(placefs_client_dest_read(d, 0, got, total, &e) == 0, "dest_read: %s", e.msg);
	for (i = 0; i < n; i++)
		CHECK(memcmp(got + off[i], want[i], len[i]) == 0,
		      "%s: batch bytes differ from read()", argv[i]);

	/* One range of the plan, from its first entry through the last gpu file: each gpu
	 * tensor lands at its offset in the gpu placement's packed layout, as packed.tsv
	 * gives it (cpu-placed entries move nothing). It goes 256 bytes further into the
	 * destination than the batch above, so bytes that batch left cannot pass for the
	 * range's. */
	memset(&one, 0, sizeof(one));
	one.tensor = 0;
	one.nbytes = idx[n - 1] + 1;
	one.dest_offset = 256;
	rc = placefs_client_copy_batch(fd, d, &one, 1, PLACEFS_IOC_BATCH_RANGES, 0, &done, &e);
	CHECK(rc == 0 && done == 1 && one.error == 0, "range batch: rc %d done %u error %d: %s", rc,
	      done, one.error, e.msg);
	CHECK(one.nbytes == payload,
	      "range batch moved %" PRIu64 " bytes, the gpu files hold %" PRIu64, one.nbytes,
	      payload);
	CHECK(placefs_client_dest_read(d, 0, got, total + 256, &e) == 0, "dest_read: %s", e.msg);
	for (i = 0; i < n; i++)
		CHECK(memcmp(got + roff[i] + 256, want[i], len[i]) == 0,
		      "%s: range batch bytes differ from read() (packed offset %" PRIu64 ")",
		      argv[i], roff[i]);

	/* Entries that fail alone: the others still move. */
	memset(ent, 0, 4 * sizeof(*ent));
	ent[0].tensor = idx[0];
	ent[1].tensor = cpu_idx;
	ent[1].dest_offset = 0;
	ent[2].tensor = (uint64_t)1 << 40;
	/* The largest gpu file past the destination's end (one of 0 bytes fits anywhere). */
	for (i = 1, k = 0; i < n; i++)
		if (len[i] > len[k])
			k = (int)i;
	ent[3].tensor = idx[k];
	ent[3].dest_offset = room + 255;
	rc = placefs_client_copy_batch(fd, d, ent, 4, 0, 0, &done, &e);
	CHECK(rc == -EFBIG && done == (len[k] ? 1u : 2u), "mixed batch: rc %s done %u (%s)",
	      placefs_client_errno_name(rc), done, e.msg);
	CHECK(strstr(e.msg, "batch entry 1 (tensor ") != NULL, "mixed batch message: %s", e.msg);
	CHECK(ent[0].error == 0 && ent[0].nbytes == len[0], "entry 0: error %d", ent[0].error);
	CHECK(ent[1].error == EFBIG, "cpu entry: %s", placefs_client_errno_name(ent[1].error));
	CHECK(ent[2].error == ERANGE, "index past the plan: %s",
	      placefs_client_errno_name(ent[2].error));
	CHECK(ent[3].error == EINVAL || (len[k] == 0 && ent[3].error == 0),
	      "entry past the destination: %s", placefs_client_errno_name(ent[3].error));

	/* Requests refused whole: entries untouched, nothing done. */
	memset(&one, 0, sizeof(one));
	one.tensor = idx[0];
	one.nbytes = 12345;
	for (k = 0; k < 3; k++) {
		static const uint32_t counts[3] = {0, PLACEFS_IOC_BATCH_MAX + 1, 1};
		static const uint32_t flags[3] = {0, 0, 2};

		done = 7;
		rc = placefs_client_copy_batch(fd, d, &one, counts[k], flags[k], 0, &done, &e);
		CHECK(rc == -EINVAL && done == 0 && one.nbytes == 12345,
		      "malformed batch %d: rc %s done %u", k, placefs_client_errno_name(rc), done);
	}
	/* A file that is not a tensor file of a placefs mount has no index. */
	rc = placefs_client_index("/proc/self/status", &v, &e);
	CHECK(rc == -ENODATA || rc == -EOPNOTSUPP, "index of /proc/self/status: %s (%s)",
	      placefs_client_errno_name(rc), e.msg);
	CHECK(strstr(e.msg, "/proc/self/status") != NULL, "index message: %s", e.msg);

	placefs_client_dest_free(d);
	close(fd);
	for (i = 0; i < n; i++)
		free(want[i]);
	free(want);
	free(got);
	free(idx);
	free(off);
	free(len);
	free(roff);
	free(ent);
	free(mnt);
	placefs_client_packed_free(pk);
	printf("batch: %u gpu files, %d checks, %d failures\n", n, checks, failures);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "bad") == 0)
		return cmd_bad(argv[2], argv[3], argv[4]);
	if (argc >= 3 && strcmp(argv[1], "hold") == 0)
		return cmd_hold(argc - 2, argv + 2);
	if ((argc == 4 || argc == 5) && strcmp(argv[1], "try") == 0)
		return cmd_try(argv[2], argv[3], argc == 5 && strcmp(argv[4], "--sigusr1") == 0);
	if (argc >= 3 && strcmp(argv[1], "wrap") == 0)
		return cmd_wrap(argc - 2, argv + 2);
	if (argc >= 5 && strcmp(argv[1], "batch") == 0)
		return cmd_batch(argv[2], argc - 3, argv + 3);
	fprintf(stderr, "usage: test_stage_ioctl bad MOUNT GPUFILE CPUFILE | hold FILE... |\n"
	                "       try FILE TIMEOUT_MS [--sigusr1] | wrap FILE... |\n"
	                "       batch CPUFILE GPUFILE GPUFILE...\n");
	return 2;
}
