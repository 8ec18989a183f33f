/* SPDX-License-Identifier: MIT */
/*
 * ioctl_probe: prints what include/placefs/ioctl.h says about the staging
 * protocol (struct sizes, every field's offset and size, the command
 * numbers, the enum values) and the bytes of a few structs filled by C, so
 * that tests/py/loader_test.py can check python/placefs against the C
 * compiler's view rather than against numbers copied by hand.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "placefs/ioctl.h"

#define FIELD(s, m)                                                                                \
	printf("field %s.%s %zu %zu\n", #s, #m, offsetof(struct placefs_ioc_##s, m),               \
	       sizeof(((struct placefs_ioc_##s *)0)->m))

static void hex(const char *what, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	printf("%s ", what);
	for (i = 0; i < n; i++)
		printf("%02x", b[i]);
	printf("\n");
}

int main(void)
{
	struct placefs_ioc_ring_info ri;
	struct placefs_ioc_stage st;
	struct placefs_ioc_release rl;
	static const char shm[] = "/probe-dest";
	unsigned i;

	printf("size ring_info %zu\nsize stage %zu\nsize release %zu\n",
	       sizeof(struct placefs_ioc_ring_info), sizeof(struct placefs_ioc_stage),
	       sizeof(struct placefs_ioc_release));
	printf("cmd RING_INFO %lu\ncmd STAGE %lu\ncmd RELEASE %lu\n",
	       (unsigned long)PLACEFS_IOC_RING_INFO, (unsigned long)PLACEFS_IOC_STAGE,
	       (unsigned long)PLACEFS_IOC_RELEASE);
	printf("const IOC_MAGIC %d\nconst IOC_VERSION %u\nconst HANDLE_MAX %d\n", PLACEFS_IOC_MAGIC,
	       PLACEFS_IOC_VERSION, PLACEFS_IOC_HANDLE_MAX);
	printf("const CUDA_IPC_HANDLE_BYTES %d\n", PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES);
	printf("const BACKEND_NONE %d\nconst BACKEND_HOST %d\nconst BACKEND_CUDA %d\n",
	       PLACEFS_IOC_BACKEND_NONE, PLACEFS_IOC_BACKEND_HOST, PLACEFS_IOC_BACKEND_CUDA);
	printf("const HANDLE_NONE %d\nconst HANDLE_CUDA_IPC %d\nconst HANDLE_HOST_SHM %d\n",
	       PLACEFS_IOC_HANDLE_NONE, PLACEFS_IOC_HANDLE_CUDA_IPC, PLACEFS_IOC_HANDLE_HOST_SHM);
	printf("const STAGE_BORROW %d\nconst STAGE_COPY %d\nconst STAGED_PREFETCHED %u\n",
	       PLACEFS_IOC_STAGE_BORROW, PLACEFS_IOC_STAGE_COPY, PLACEFS_IOC_STAGED_PREFETCHED);
	printf("const RING_INFO_SIZE %d\nconst STAGE_SIZE %d\nconst RELEASE_SIZE %d\n",
	       PLACEFS_IOC_RING_INFO_SIZE, PLACEFS_IOC_STAGE_SIZE, PLACEFS_IOC_RELEASE_SIZE);

	FIELD(ring_info, version);
	FIELD(ring_info, size);
	FIELD(ring_info, backend);
	FIELD(ring_info, device);
	FIELD(ring_info, ring_bytes);
	FIELD(ring_info, host_buffer_bytes);
	FIELD(ring_info, alignment);
	FIELD(ring_info, handle_kind);
	FIELD(ring_info, handle_bytes);
	FIELD(ring_info, handle);
	FIELD(ring_info, flags);
	FIELD(ring_info, select);
	FIELD(ring_info, ndevices);
	FIELD(ring_info, position);
	FIELD(ring_info, reserved);
	FIELD(stage, version);
	FIELD(stage, size);
	FIELD(stage, mode);
	FIELD(stage, flags);
	FIELD(stage, dest_kind);
	FIELD(stage, dest_handle_bytes);
	FIELD(stage, dest_offset);
	FIELD(stage, dest_size);
	FIELD(stage, dest_handle);
	FIELD(stage, timeout_ns);
	FIELD(stage, nbytes);
	FIELD(stage, ring_offset);
	FIELD(stage, lease);
	FIELD(stage, wait_ns);
	FIELD(stage, read_ns);
	FIELD(stage, copy_ns);
	FIELD(stage, total_ns);
	FIELD(stage, out_flags);
	FIELD(stage, pad0);
	FIELD(stage, slice_dim);
	FIELD(stage, device);
	FIELD(stage, slice_start);
	FIELD(stage, slice_len);
	FIELD(stage, reserved);
	FIELD(release, version);
	FIELD(release, size);
	FIELD(release, lease);
	FIELD(release, reserved);

	/* The request python/placefs must build for ring_info(). */
	memset(&ri, 0, sizeof(ri));
	ri.version = PLACEFS_IOC_VERSION;
	ri.size = sizeof(ri);
	hex("req ring_info", &ri, sizeof(ri));
	/* A reply, with a value in every field, that it must decode. */
	ri.backend = PLACEFS_IOC_BACKEND_CUDA;
	ri.device = -1;
	ri.ring_bytes = 0x0102030405060708ull;
	ri.host_buffer_bytes = 0x1112131415161718ull;
	ri.alignment = 4096;
	ri.handle_kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
	ri.handle_bytes = PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES;
	for (i = 0; i < PLACEFS_IOC_HANDLE_MAX; i++)
		ri.handle[i] = (uint8_t)(i < PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES ? 0xA0 ^ i : 0);
	hex("rsp ring_info", &ri, sizeof(ri));

	/* stage(fd, "copy", Destination.shm("/probe-dest", 0x2000, 0x300000), 123456789). */
	memset(&st, 0, sizeof(st));
	st.version = PLACEFS_IOC_VERSION;
	st.size = sizeof(st);
	st.mode = PLACEFS_IOC_STAGE_COPY;
	st.dest_kind = PLACEFS_IOC_HANDLE_HOST_SHM;
	st.dest_handle_bytes = sizeof(shm);
	st.dest_offset = 0x2000;
	st.dest_size = 0x300000;
	memcpy(st.dest_handle, shm, sizeof(shm));
	st.timeout_ns = 123456789;
	hex("req stage_copy_shm", &st, sizeof(st));
	/* stage(fd, "copy", Destination.cuda_ipc(bytes(i ^ 0x5A for i in range(64)), 7, 1 << 40)). */
	memset(&st, 0, sizeof(st));
	st.version = PLACEFS_IOC_VERSION;
	st.size = sizeof(st);
	st.mode = PLACEFS_IOC_STAGE_COPY;
	st.dest_kind = PLACEFS_IOC_HANDLE_CUDA_IPC;
	st.dest_handle_bytes = PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES;
	st.dest_offset = 7;
	st.dest_size = 1ull << 40;
	for (i = 0; i < PLACEFS_IOC_CUDA_IPC_HANDLE_BYTES; i++)
		st.dest_handle[i] = (uint8_t)(i ^ 0x5A);
	hex("req stage_copy_ipc", &st, sizeof(st));
	/* stage(fd, "borrow"), then a reply with every output field set. */
	memset(&st, 0, sizeof(st));
	st.version = PLACEFS_IOC_VERSION;
	st.size = sizeof(st);
	st.mode = PLACEFS_IOC_STAGE_BORROW;
	hex("req stage_borrow", &st, sizeof(st));
	st.nbytes = 0x2122232425262728ull;
	st.ring_offset = 0x3132333435363738ull;
	st.lease = 0x4142434445464748ull;
	st.wait_ns = 0x5152535455565758ull;
	st.read_ns = 0x6162636465666768ull;
	st.copy_ns = 0x7172737475767778ull;
	st.total_ns = 0x8182838485868788ull;
	st.out_flags = PLACEFS_IOC_STAGED_PREFETCHED;
	hex("rsp stage", &st, sizeof(st));

	/* release(fd, 0x0123456789abcdef). */
	memset(&rl, 0, sizeof(rl));
	rl.version = PLACEFS_IOC_VERSION;
	rl.size = sizeof(rl);
	rl.lease = 0x0123456789abcdefull;
	hex("req release", &rl, sizeof(rl));
	return 0;
}
