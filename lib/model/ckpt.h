/* SPDX-License-Identifier: MIT */
/*
 * ckpt: the checkpoint model. Opens a source, validates every shard fully,
 * and lists the tensors the index selects, in checkpoint order.
 *
 * Sources:
 *  - a .safetensors file: one shard;
 *  - a directory with an index (`index` argument, else
 *    model.safetensors.index.json if present): the shards are the distinct
 *    weight_map values, each must exist and validate, a tensor is taken only
 *    from the shard the index maps it to (copies elsewhere are ignored), and a
 *    mapped tensor missing from its shard is an error;
 *  - a directory without an index: every *.safetensors in it (symlinks
 *    followed); a name present in two files is an error naming both.
 *
 * Checkpoint order: shards sorted by path (byte order), tensors by offset.
 * Each shard stays open (O_RDONLY|O_CLOEXEC) for the life of the ckpt, and
 * what was validated (device, inode, size, mtime, ctime, header bytes) is
 * recorded so that placefs_ckpt_shard_check() can detect a shard changed
 * underneath.
 *
 * Shards of a directory source are opened beneath it (openat2 with
 * RESOLVE_BENEATH; where the kernel lacks it, the opened file's real path is
 * checked instead): symbolic links among them may point only inside the
 * source directory, or, for a Hugging Face snapshot (a directory whose parent
 * is named "snapshots"), inside the repository directory above it, which
 * holds blobs/. A file given as the source is opened as named.
 */
#ifndef PLACEFS_CKPT_H
#define PLACEFS_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/dtype.h"
#include "common/error.h"
#include "format/safetensors.h"

struct placefs_shard {
	const char *file; /* path relative to the source directory, as in the index */
	const char *path; /* path opened (source directory joined with file) */
	int fd;           /* read-only descriptor, owned by the ckpt */
	dev_t dev; /* device and inode as validated at open (see placefs_ckpt_shard_reopen()) */
	ino_t ino;
	uint64_t size;
	struct timespec mtime;
	struct timespec ctime; /* as validated at open; see placefs_ckpt_shard_check() */
	mode_t mode;
	const struct placefs_st_header *header;
};

struct placefs_tensor {
	const char *name;
	uint32_t shard;   /* index into the ckpt's shards */
	const char *file; /* == shard's file, for convenience */
	enum placefs_dtype dtype;
	uint32_t ndim;
	const uint64_t *shape;
	uint64_t nbytes;
	uint64_t offset; /* absolute byte offset in the shard */
};

struct placefs_ckpt;

/*
 * Opens `source`. `index` is NULL (auto), or an index file: absolute, or
 * relative to the source directory; giving one with a file source is an
 * error. Returns 0 or a negative errno with a message naming the file, the
 * tensor and the rule (kinds PLACEFS_E_SOURCE, _FORMAT, _INDEX, _DUP_SOURCE, _IO).
 * The shards are opened and parsed on up to 8 threads, all joined before it
 * returns; of several bad shards, the error is the first one's in shard order.
 */
int placefs_ckpt_open(const char *source, const char *index, struct placefs_ckpt **out,
                      struct placefs_error *err);
void placefs_ckpt_free(struct placefs_ckpt *ck); /* NULL ok; closes the shard fds */

const char *placefs_ckpt_source(const struct placefs_ckpt *ck); /* as given */
/*
 * The source directory, made absolute without resolving links (so shard
 * paths stay valid after the daemon changes directory).
 */
const char *placefs_ckpt_dir(const struct placefs_ckpt *ck);
/* 1 for a directory source, 0 for a file given as the source. */
int placefs_ckpt_is_dir(const struct placefs_ckpt *ck);
/* The index file used, relative to the source directory, or NULL. */
const char *placefs_ckpt_index(const struct placefs_ckpt *ck);

size_t placefs_ckpt_shard_count(const struct placefs_ckpt *ck);
const struct placefs_shard *placefs_ckpt_shard(const struct placefs_ckpt *ck, size_t i);

/* The selected tensors, in checkpoint order. The array lives as long as ck. */
size_t placefs_ckpt_tensor_count(const struct placefs_ckpt *ck);
const struct placefs_tensor *placefs_ckpt_tensors(const struct placefs_ckpt *ck);

/*
 * Verifies that shard i is still what was validated: fstat of the open fd
 * (device, inode, size, mtime, ctime) and stat of its path (device, inode).
 * The ctime cannot be set from user space, so a shard rewritten in place
 * with its size and mtime put back (touch -d, tar -x, cp -p) shows a new
 * one: then its header (8 + N bytes) is read again and compared byte for
 * byte with the one validated; identical, the new ctime is accepted (a shard
 * put back exactly serves again), different, the shard is stale. So a
 * changed shard is never served as if it were the old one.
 * Returns 0, or -ESTALE (replaced or rewritten) / -EIO (shrunk, or its header
 * cannot be read again) with a message naming the shard. Thread-safe.
 */
int placefs_ckpt_shard_check(const struct placefs_ckpt *ck, size_t i, struct placefs_error *err);

/*
 * Opens shard i's path again and, if the file there has the size,
 * modification time and header bytes validated at mount (as a shard put
 * back with a new ctime is accepted), puts it in place of the descriptor's
 * file. The descriptor keeps its number (dup3), so whoever reads through it
 * reads the new file from then on. Which file is taken:
 *  - same_file false, after a failed check: a file on another file system
 *    than the one the descriptor holds (the source's file system was
 *    unmounted and mounted again: s3fs, sshfs, NFS); the check compares
 *    with its device and inode from then on. A file of the same file system
 *    is never taken: a shard replaced there stays refused;
 *  - same_file true, while reads fail although the check passes: the very
 *    file the descriptor holds (same device and inode), on a fresh
 *    descriptor (a network file system that reconnected, such as sshfs -o
 *    reconnect, answers EIO on descriptors opened before).
 * Returns 1 taken; 0 nothing to take (no such file there, or it changed
 * while being looked at); -ESTALE with a message when the file is there but
 * is not the shard validated. Thread-safe: concurrent callers may both take
 * the same file.
 */
int placefs_ckpt_shard_reopen(const struct placefs_ckpt *ck, size_t i, bool same_file,
                              struct placefs_error *err);

/*
 * Reads of shard i's descriptor go around the page cache (O_DIRECT) when on,
 * and so do those of a descriptor placefs_ckpt_shard_reopen() adopts later.
 * For a shard on a FUSE file system whose client keeps its own cache (s3fs):
 * its bytes are then held once, by the client, not a second time in the page
 * cache. A file system whose O_DIRECT needs aligned reads (ext4, XFS) would
 * fail tensor reads: the caller picks the shards. 0, or a negative errno
 * with a message (the file system refuses O_DIRECT: EINVAL).
 */
int placefs_ckpt_shard_set_direct(const struct placefs_ckpt *ck, size_t i, bool on,
                                  struct placefs_error *err);

/*
 * Opens `file` (a path relative to the source directory) as the shards of a
 * directory source are opened: beneath the directory they are confined to
 * (see above; openat2 RESOLVE_BENEATH, or the real-path check without it),
 * with `flags` (O_CLOEXEC is up to the caller). For the other files of the
 * source directory (lib/view's aux files). Returns a descriptor, or -errno:
 * -EXDEV when the path or a link in it leads out, -EINVAL for a file source
 * (it has no directory of its own). Thread-safe.
 */
int placefs_ckpt_open_file(const struct placefs_ckpt *ck, const char *file, int flags);

#endif
