/* SPDX-License-Identifier: MIT */
/*
 * example-loader: how a C program loads every gpu-placed tensor of a placefs
 * mount into device memory through the client library, <placefs/client.h>.
 *
 *   example-loader [--verify] MOUNTPOINT
 *
 * It is documentation first: it uses nothing but the installed header and
 * libplacefs-client.a (no header of the placefs source tree, not even its
 * config.h), so it builds the way a user's program does:
 *
 *   cc -O2 -o example-loader example-loader.c $(pkg-config --cflags --libs placefs-client)
 *
 * What it does, in the order a loader does it:
 *
 *   1. placefs_client_packed_read(): every tensor of the mount, in plan
 *      order (MOUNTPOINT/.placefs/packed.tsv, which the daemon writes): its
 *      file name, placement, bytes, dtype, shape and its offset in its
 *      placement's "packed layout", where the daemon's batches put the
 *      tensors. Its position in the list is its plan index. The loader keeps
 *      the gpu-placed ones.
 *   2. Each of them goes to its packed offset in one buffer of the gpu
 *      layout's size. (The daemon keeps a run of a shard's neighbours
 *      together there, one range of bytes moved as one copy, and aligns
 *      every tensor's elements; a loader needs no more of its rule than
 *      packed.tsv says.)
 *   3. placefs_client_ring_info() on one tensor file says where the mount
 *      stages to; placefs_client_dest_create() makes ONE destination that
 *      holds the whole layout there: device memory (cudaMalloc on the ring's
 *      device, shared with the daemon through a CUDA IPC handle) for a CUDA
 *      ring, a shared-memory object for a host ring (-o device=host). The
 *      tensors stay in it: it is the loaded model, tensor k at offset[k].
 *   4. placefs_client_copy_batch() with PLACEFS_IOC_BATCH_RANGES sends the
 *      tensors in batches of up to PLACEFS_IOC_BATCH_MAX (256) and 64 MiB,
 *      each batch one range of the plan: [plan index of its first tensor,
 *      plan index of its last]. The daemon moves the range's gpu-placed
 *      tensors and puts each at dest_offset + its packed offset, so with
 *      dest_offset 0 every tensor lands where step 2 put it. (Tens of
 *      thousands of tensors of a few KiB each, as quantized mixtures of
 *      experts have, are then a few hundred requests, not an open, an ioctl
 *      and a close per tensor.) `placefs-stage --all` does the same by
 *      default, into one smaller destination that it reuses.
 *   5. It prints one line: tensors, bytes, seconds from the first request to
 *      the return of the last one (when the last byte is in place), GB/s and
 *      tensors/s. With --verify it then reads each tensor's file with read()
 *      and compares its bytes with the destination's (copied back to the
 *      host with placefs_client_dest_read()).
 *
 * A mount of several rings (-o device=cuda:0,cuda:1) cannot take batches (a
 * batch names no device): there a loader stages each tensor, or each rank's
 * slice of it, with placefs_client_copy_ex() into a destination made from
 * placefs_client_ring_info_device(). This program says so and stops.
 *
 * Exit status: 0 every tensor loaded (and, with --verify, byte-exact); 1 a
 * failure or a mismatch; 2 a bad command line.
 */
/* POSIX.1-2008 (O_CLOEXEC, clock_gettime), also under a strict -std=c11. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <placefs/client.h>

/* At most this many bytes a batch (or one tensor, when it is larger). */
#define BATCH_BYTES ((uint64_t)64 << 20)

struct tensor {
	char *path;      /* MOUNTPOINT/NAME */
	uint64_t index;  /* its entry in the plan: what a batch names it by */
	uint64_t size;   /* its bytes */
	uint64_t offset; /* where it lies in the destination: its packed offset */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- loading and checking ----------------------------------------------------- */

/*
 * Step 4 for tensors t[0 .. n): one PLACEFS_IOC_STAGE_BATCH on fd (any tensor
 * file of the mount) whose one entry is the range of the plan from t[0]'s
 * index through t[n - 1]'s. Returns 0, or -1 with a message.
 */
static int load_batch(int fd, const struct placefs_client_dest *dest, const struct tensor *t,
                      size_t n)
{
	struct placefs_ioc_batch_entry range;
	struct placefs_client_error e;
	uint64_t want = 0;
	uint32_t done = 0;
	size_t i;
	int rc;

	memset(&range, 0, sizeof(range));
	range.tensor = t[0].index;                      /* the range's first plan entry */
	range.nbytes = t[n - 1].index - t[0].index + 1; /* in: how many plan entries it spans */
	range.dest_offset = 0;                          /* each tensor at 0 + its packed offset */
	/* timeout 0: wait for ring space as long as it takes. */
	rc = placefs_client_copy_batch(fd, dest, &range, 1, PLACEFS_IOC_BATCH_RANGES, 0, &done, &e);
	if (rc != 0) {
		fprintf(stderr, "example-loader: %s .. %s: %s [%s]\n", t[0].path, t[n - 1].path,
		        e.msg, placefs_client_errno_name(rc));
		return -1;
	}
	/* out: range.nbytes is what the range moved: every byte of these tensors. */
	for (i = 0; i < n; i++)
		want += t[i].size;
	if (range.nbytes != want) {
		fprintf(stderr,
		        "example-loader: %s .. %s: the daemon moved %" PRIu64 " bytes, the plan "
		        "says %" PRIu64 "\n",
		        t[0].path, t[n - 1].path, range.nbytes, want);
		return -1;
	}
	return 0;
}

/* Reads all n bytes of path into buf with read(); 0, or -1 with a message. */
static int read_file(const char *path, uint8_t *buf, uint64_t n)
{
	uint64_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "example-loader: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr, "example-loader: %s: read: %s\n", path,
			        r < 0 ? strerror(errno) : "shorter than its size");
			close(fd);
			return -1;
		}
		got += (uint64_t)r;
	}
	close(fd);
	return 0;
}

/* Step 5's check: every tensor's bytes in dest against read() of its file. */
static size_t verify(const struct placefs_client_dest *dest, const struct tensor *t, size_t n,
                     uint64_t largest)
{
	struct placefs_client_error e;
	uint8_t *want = malloc(largest ? largest : 1), *got = malloc(largest ? largest : 1);
	size_t i, ok = 0;

	if (!want || !got) {
		fprintf(stderr, "example-loader: out of memory\n");
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (read_file(t[i].path, want, t[i].size) != 0)
			continue;
		if (placefs_client_dest_read(dest, t[i].offset, got, t[i].size, &e) != 0) {
			fprintf(stderr, "example-loader: %s: %s\n", t[i].path, e.msg);
			continue;
		}
		if (memcmp(want, got, t[i].size) != 0) {
			uint64_t k = 0;

			while (want[k] == got[k])
				k++;
			fprintf(stderr,
			        "example-loader: %s: the loaded bytes differ from read() at byte "
			        "%" PRIu64 " of %" PRIu64 " (destination offset %" PRIu64 ")\n",
			        t[i].path, k, t[i].size, t[i].offset);
			continue;
		}
		ok++;
	}
out:
	free(want);
	free(got);
	return ok;
}

int main(int argc, char **argv)
{
	struct placefs_client_error e;
	struct placefs_ioc_ring_info ri;
	struct placefs_client_dest *dest = NULL;
	struct placefs_client_packed *pk = NULL;
	struct tensor *t = NULL;
	const char *mnt;
	size_t n = 0, i, j, requests = 0, good;
	uint64_t layout, bytes = 0, largest = 0;
	double t0, t1, secs;
	int verify_bytes = 0, fd = -1, status = 1;

	if (argc == 3 && strcmp(argv[1], "--verify") == 0)
		verify_bytes = 1;
	if (argc != 2 + verify_bytes || argv[argc - 1][0] == '-') {
		fprintf(stderr, "usage: example-loader [--verify] MOUNTPOINT\n");
		return 2;
	}
	mnt = argv[argc - 1];

	/* 1. Every tensor of the mount in plan order, where the packed layout puts it. */
	if (placefs_client_packed_read(mnt, &pk, &e) != 0) {
		fprintf(stderr, "example-loader: %s\n", e.msg);
		return 1;
	}
	if (pk->placed[PLACEFS_CLIENT_GPU] == 0) {
		printf("example-loader: 0 tensors, 0 bytes in 0.000 s: 0.00 GB/s, 0 tensors/s (%s "
		       "places none on the gpu)\n",
		       mnt);
		status = 0;
		goto out;
	}
	t = calloc(pk->placed[PLACEFS_CLIENT_GPU], sizeof(*t));
	if (!t) {
		fprintf(stderr, "example-loader: out of memory\n");
		goto out;
	}
	for (i = 0; i < pk->count; i++) {
		const struct placefs_client_tensor *pt = &pk->tensors[i];
		size_t len = strlen(mnt) + strlen(pt->file) + 2;

		if (pt->placement != PLACEFS_CLIENT_GPU)
			continue;
		t[n].path = malloc(len);
		if (!t[n].path) {
			fprintf(stderr, "example-loader: out of memory\n");
			goto out;
		}
		snprintf(t[n].path, len, "%s/%s", mnt, pt->file);
		t[n].index = i; /* its line of packed.tsv: its plan index */
		t[n].size = pt->nbytes;
		/* 2. Its place in the buffer: its offset in the packed gpu layout. */
		t[n].offset = pt->packed;
		bytes += pt->nbytes;
		if (pt->nbytes > largest)
			largest = pt->nbytes;
		n++;
	}
	layout = pk->layout[PLACEFS_CLIENT_GPU];

	/* 3. Where the mount stages to, and one destination for all the tensors there. */
	if (placefs_client_open(t[0].path, &fd, &e) != 0 ||
	    placefs_client_ring_info(fd, &ri, &e) != 0) {
		fprintf(stderr, "example-loader: %s\n", e.msg);
		goto out;
	}
	if (ri.backend == PLACEFS_IOC_BACKEND_NONE) {
		fprintf(stderr, "example-loader: %s stages nothing (-o device=none)\n", mnt);
		goto out;
	}
	if (ri.ndevices > 1) {
		fprintf(stderr,
		        "example-loader: %s stages to %u devices, and a batch names none: stage "
		        "each tensor with placefs_client_copy_ex() instead\n",
		        mnt, ri.ndevices);
		goto out;
	}
	if (placefs_client_dest_create(&ri, layout ? layout : 1, &dest, &e) != 0) {
		fprintf(stderr, "example-loader: a destination of %" PRIu64 " bytes: %s\n", layout,
		        e.msg);
		goto out;
	}

	/* 4. The batches: up to 256 tensors and 64 MiB each, in plan order. */
	t0 = now_s();
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && j - i < PLACEFS_IOC_BATCH_MAX; j++)
			if (t[j].offset + t[j].size - t[i].offset > BATCH_BYTES)
				break;
		if (load_batch(fd, dest, &t[i], j - i) != 0)
			goto out;
		requests++;
	}
	t1 = now_s();

	/* 5. The line, then the check. */
	secs = t1 - t0;
	printf("example-loader: %zu tensors, %" PRIu64 " bytes in %.3f s: %.2f GB/s, %.0f "
	       "tensors/s (%zu request%s into %s memory)\n",
	       n, bytes, secs, secs > 0 ? (double)bytes / secs / 1e9 : 0.0,
	       secs > 0 ? (double)n / secs : 0.0, requests, requests == 1 ? "" : "s",
	       placefs_client_dest_kind(dest) == PLACEFS_IOC_HANDLE_CUDA_IPC ? "device" : "shared");
	fflush(stdout);
	status = 0;
	if (verify_bytes) {
		good = verify(dest, t, n, largest);
		printf("verify: %zu of %zu tensors byte-exact\n", good, n);
		if (good != n)
			status = 1;
	}
out:
	placefs_client_dest_free(dest);
	if (fd >= 0)
		close(fd);
	for (i = 0; t && i < n; i++)
		free(t[i].path);
	free(t);
	placefs_client_packed_free(pk);
	return status;
}
