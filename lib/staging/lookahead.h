/* SPDX-License-Identifier: MIT */
/*
 * lookahead: the next shards' fetches started while the current one is read.
 *
 * A storage client such as s3fs answers a read of bytes it does not hold by
 * fetching a block after them (s3fs 1.90: multipart_size x parallel_count,
 * 10 MiB x 5 = 50 MiB by default), holding that file's reads until the block
 * is in, and serves reads of fetched bytes from its own cache. A reader that
 * goes through the shards one after the other therefore leaves the server
 * idle while it consumes each block; with placefs's header reads at mount
 * (each fetching the first block of its shard) the server waited 225-280 ms
 * of a 0.9-1.1 s load of 370 MB in 4 shards (tests/bench/remote.sh
 * --timeline's request gaps).
 *
 * A lookahead walks the shards after the one being read, in the order given,
 * reading one byte every `stride` bytes of each shard's range: where the
 * client holds the bytes that is a cache hit, and at the first byte it does
 * not, the read starts the fetch the reader will need next, on a file the
 * reader does not hold locked. It walks the first `window` bytes of the
 * ranges after the reader's shard (so what a reader that stops costs is
 * bounded: at most `window` bytes fetched ahead, plus the client's block),
 * and nothing until placefs_lookahead_at() first says where the reader is.
 * The stride must divide the client's block size for the walk to fetch
 * whole blocks (1 MiB divides s3fs's 10 MiB multiples).
 *
 * Threads: placefs_lookahead_at() may be called from any thread; create and
 * free are not concurrent with it. The walk's reads ignore errors (the
 * reader meets them itself); free() does not wait for a read in flight (a
 * client may hold it for a long time): the walk's thread ends after it.
 */
#ifndef PLACEFS_LOOKAHEAD_H
#define PLACEFS_LOOKAHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct placefs_lookahead;

/*
 * One shard's bytes to walk: [lo, hi) of the file open on fd. Borrowed: fd
 * stays open until placefs_lookahead_free() (its number may be given another
 * file meanwhile, as a shard reopened with dup3 is: the walk reads that one
 * from then on, and holds no file of its own, so an unmounted client's files
 * are not kept). A read in flight at the free keeps its file until it returns.
 */
struct placefs_lookahead_shard {
	int fd;
	uint64_t lo;
	uint64_t hi;
};

/*
 * Starts the walker over shards[0..n) (the list copied), in that order.
 * stride > 0, window > 0. Errors: -EINVAL (arguments), -ENOMEM, a thread that
 * cannot start (its errno).
 */
int placefs_lookahead_create(const struct placefs_lookahead_shard *shards, size_t n,
                             uint64_t stride, uint64_t window, struct placefs_lookahead **out,
                             struct placefs_error *err);

/* The reader is now on shard i (an index of the create list; past the end: ignored). */
void placefs_lookahead_at(struct placefs_lookahead *la, size_t i);

/* Reads the walk has made so far. */
uint64_t placefs_lookahead_probes(const struct placefs_lookahead *la);

/*
 * Stops the walk and frees la, waiting for its thread unless that is in a
 * read (a client may hold one for long): then the thread ends after it and
 * frees what is left. NULL is fine.
 */
void placefs_lookahead_free(struct placefs_lookahead *la);

#endif
