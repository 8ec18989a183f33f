/* SPDX-License-Identifier: MIT */
/*
 * gate: at most N threads reading from the disk at once, page-cache hits
 * never held back.
 *
 * The staging I/O threads (one per CPU, up to 16) read pieces of a few MiB
 * each. From the page cache that parallelism is what reaches the copy
 * engine's pace; from a cold disk it is a dozen scattered reads in flight,
 * which some disks serve slower than fewer streams. The gate is on by
 * default with 2 streams (-o disk_streams=2): on an NVIDIA H100 80GB HBM3
 * instance with 16 vCPUs and a virtio disk, at 24b3cd4 (tests/bench/gpu.sh
 * --oneshot --disk-streams "0 1 2", then three rounds of cold one-shot loads
 * with buffered dd before and after each row; doc/PERFORMANCE.md 3.5), a
 * cold one-shot load through 2 streams beat the ungated one in 5 of 5 pairs
 * (1.73-2.11 against 1.47-1.55 GB/s, dd 1.60-1.87 between the rows);
 * 1 stream beat it too (5 of 5) and lost to 2 in 3 of 5. A disk that wants
 * a deeper queue (an NVMe array) may want more; 0 turns the gate off. Shards
 * on a FUSE file system (s3fs, sshfs) get no gate unless the option is given
 * (fs/main.c): a read there is a request to a server, and no gate was at
 * least as fast as 2 streams in 6 of 6 cold rounds on s3fs and faster in 6 of
 * 6 on sshfs (doc/STAGING.md, "The disk gate on a network file system").
 *
 * placefs_gate_pread() asks the kernel whether the range is all in the page
 * cache (cachestat(2), Linux 6.5; no I/O is started by asking; a file on
 * tmpfs or ramfs is, without asking). If it is,
 * the read goes ahead at once; if not, the reader waits for one of the
 * gate's `streams` slots and reads with it held. A freed slot goes to the
 * waiting reader next in a sweep over (descriptor, offset) from where the
 * last gated read ended, wrapping to the lowest: the disk sees the pieces
 * in file order, as one sequential reader (buffered dd) reads them, instead
 * of in the order a dozen I/O threads happen to ask. A kernel without
 * cachestat(2) (or a file it does not serve) cannot tell, and every read
 * goes ahead as if there were no gate: the warm path is never slowed by it.
 *
 * One gate serves every device's I/O threads of a mount: it is the disk
 * that is shared. (The reader threads of PLACEFS_IOC_STAGE_READ and the
 * FUSE reads do not go through it.)
 */
#ifndef PLACEFS_GATE_H
#define PLACEFS_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* -o disk_streams: its default (0 would be no gate), and its largest value. */
#define PLACEFS_GATE_STREAMS_DEFAULT 2
#define PLACEFS_GATE_STREAMS_MAX     64

struct placefs_gate;

struct placefs_gate_stats {
	unsigned streams;      /* the slots */
	uint64_t cached_reads; /* reads found all in the page cache: not gated */
	uint64_t cached_bytes;
	uint64_t disk_reads; /* reads that took a slot */
	uint64_t disk_bytes;
	uint64_t unknown_reads; /* reads the kernel could not say of: not gated */
	uint64_t waits;         /* disk reads that found every slot taken */
	uint64_t wait_ns;       /* their time waiting */
	unsigned peak;          /* most slots held at once */
	unsigned waiting;       /* readers waiting now */
	uint64_t sequential;    /* disk reads admitted where the one before ended */
};

/*
 * Creates a gate of `streams` slots (1 .. PLACEFS_GATE_STREAMS_MAX).
 * Returns 0, -EINVAL (streams out of range, with a message) or -ENOMEM.
 */
int placefs_gate_create(unsigned streams, struct placefs_gate **out, struct placefs_error *err);

/* Frees the gate; no read may be in it. NULL is accepted. */
void placefs_gate_free(struct placefs_gate *g);

/*
 * placefs_io_pread_full() through the gate: the same result (bytes read,
 * short only at end of file, or a negative errno). g NULL: no gate.
 */
ssize_t placefs_gate_pread(struct placefs_gate *g, int fd, void *buf, size_t len, uint64_t off);

/*
 * Whether bytes [off, off + len) of fd are all in the page cache: 1 yes,
 * 0 no, -ENOSYS or another negative errno when the kernel cannot say.
 * len 0 is 1; so is a file on tmpfs or ramfs, whose pages are the file
 * (reading it needs no disk), without asking the kernel page by page.
 */
int placefs_gate_cached(int fd, uint64_t off, uint64_t len);

/*
 * The gate around a read of the caller's own that needs the disk: enter
 * takes a slot for reading fd from off (waiting, in the sweep's order, while
 * all are held); leave gives it back, saying where the read ended and how
 * many bytes it brought. placefs_gate_pread() is these around a pread;
 * every enter must be followed by one leave.
 */
void placefs_gate_enter(struct placefs_gate *g, int fd, uint64_t off);
void placefs_gate_leave(struct placefs_gate *g, int fd, uint64_t end, uint64_t bytes);

/* A snapshot of the counters. */
void placefs_gate_get_stats(struct placefs_gate *g, struct placefs_gate_stats *out);

#endif
