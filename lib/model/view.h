/* SPDX-License-Identifier: MIT */
/*
 * view: model-directory views of a checkpoint (MNT/.placefs/views/{all,gpu,cpu}/).
 *
 * A view is a directory a loader opens unchanged. This module is its pure
 * logic (no FUSE, no I/O but placefs_view_read_index()): for one view kind,
 *  - one view shard file per source shard that holds selected tensors of the
 *    view (all: every selected tensor; gpu/cpu: the plan's placement), named
 *    as the shard (lib/common/name.h encoding of the shard's path, so a nested
 *    "sub/x.safetensors" is "sub%2Fx.safetensors"): a safetensors header
 *    generated for exactly those tensors (same names, dtypes, shapes;
 *    offsets recomputed contiguous from 0; the source shard's __metadata__
 *    kept, or absent as in the source; JSON padded with spaces to a multiple
 *    of 8 bytes as the reference writer pads) followed by the source's
 *    payload bytes, tensor after tensor;
 *  - a segment map: byte ranges of a view file -> the header in memory, or
 *    a byte range of the source shard (placefs_view_map());
 *  - when the source has an index, the view's index: weight_map of the
 *    view's tensors only (sorted by name), the source index's other
 *    "metadata" members kept as they are written, metadata.total_size the
 *    sum of the view's tensor bytes.
 *
 * Tensor order in a view file: the source's, by offset, so that reading a
 * view file reads its shard sequentially. Only if that order would leave a
 * tensor at a view offset that is not a multiple of its element size (up to
 * 8 bytes; a source whose tensors are not sorted by alignment, with some
 * left out), the file's tensors are stably sorted by element size,
 * largest first, which aligns every one: loaders view the bytes in place.
 *
 * Sizes (of every view file and of the index) are computed at creation by
 * a counting pass of the same formatter that writes the bytes later; the
 * header and index bytes themselves are formatted on first use and kept
 * (published with a compare-and-swap), so a 100,000-tensor view costs
 * O(tensors) words at mount and its JSON only when read.
 *
 * A view points into the checkpoint and the plan: both must outlive it.
 * After placefs_view_create() every function may be called from any
 * thread without a lock.
 */
#ifndef PLACEFS_VIEW_H
#define PLACEFS_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "model/ckpt.h"
#include "common/error.h"
#include "common/name.h"
#include "model/plan.h"

enum placefs_view_kind {
	PLACEFS_VIEW_ALL = 0, /* the selection */
	PLACEFS_VIEW_GPU = 1, /* its gpu-placed tensors */
	PLACEFS_VIEW_CPU = 2, /* its cpu-placed tensors */
};
#define PLACEFS_VIEW_KINDS 3

/* The view's index file name when the source index has no plain name of its own. */
#define PLACEFS_VIEW_INDEX_NAME "model.safetensors.index.json"

/* "all", "gpu", "cpu". */
const char *placefs_view_kind_name(enum placefs_view_kind kind);

struct placefs_view;

/*
 * Builds view `kind` over `plan` (made from ck's tensors). `index_text`
 * (`index_len` bytes; NULL when the checkpoint has no index) is the source
 * index as placefs_view_read_index() returns it: its "metadata" members
 * other than total_size are copied into the view's index. The view has an
 * index exactly when placefs_ckpt_index(ck) is not NULL.
 * Returns 0 or a negative errno with a message: -ENOMEM, -EINVAL (kind
 * PLACEFS_E_NAME: a shard path whose encoded name is too long; PLACEFS_E_FORMAT:
 * a view header over PLACEFS_ST_HEADER_MAX), -EOVERFLOW.
 */
int placefs_view_create(const struct placefs_ckpt *ck, const struct placefs_plan *plan,
                        enum placefs_view_kind kind, const char *index_text, size_t index_len,
                        struct placefs_view **out, struct placefs_error *err);
void placefs_view_free(struct placefs_view *v); /* NULL ok */

enum placefs_view_kind placefs_view_kind(const struct placefs_view *v);

/* View shard files, in checkpoint (shard path) order. */
size_t placefs_view_file_count(const struct placefs_view *v);
/* i < count. The name lives as long as v. */
const char *placefs_view_file_name(const struct placefs_view *v, size_t i);
uint32_t placefs_view_file_shard(const struct placefs_view *v, size_t i); /* ckpt shard index */
uint64_t placefs_view_file_size(const struct placefs_view *v, size_t i);
/* 8 + N: where the payload starts. A multiple of 8. */
uint64_t placefs_view_file_header_size(const struct placefs_view *v, size_t i);
/* The file's tensors, in the file's order: plan entry indexes. */
size_t placefs_view_file_tensor_count(const struct placefs_view *v, size_t i);
size_t placefs_view_file_tensor(const struct placefs_view *v, size_t i, size_t j);
/* Index of the file named `name`, or -1. */
long placefs_view_file_find(const struct placefs_view *v, const char *name);

/*
 * The header bytes (placefs_view_file_header_size() of them: the 8-byte
 * little-endian length, the JSON, the padding) of file i, formatted on the
 * first call and kept for the life of v. NULL with -ENOMEM in err when out
 * of memory (a later call tries again).
 */
const uint8_t *placefs_view_header(const struct placefs_view *v, size_t i,
                                   struct placefs_error *err);

enum placefs_view_src {
	PLACEFS_VIEW_SRC_HEADER = 0, /* `off` is in placefs_view_header()'s bytes */
	PLACEFS_VIEW_SRC_SHARD = 1,  /* `off` is an absolute offset in the file's shard */
};

struct placefs_view_piece {
	enum placefs_view_src src;
	uint64_t off;
	uint64_t len; /* > 0 */
};

/*
 * Maps bytes [off, off + size) of file i, clipped to the file's size, onto
 * at most `max` pieces, in order, each a maximal run (adjacent tensors whose
 * source bytes are adjacent are one piece). Returns the number of pieces
 * written and sets *mapped to the bytes they cover: less than the clipped
 * size only when `max` pieces were not enough (call again from off +
 * *mapped). 0 pieces at or past the end. O(log pieces of the file).
 */
size_t placefs_view_map(const struct placefs_view *v, size_t i, uint64_t off, uint64_t size,
                        struct placefs_view_piece *out, size_t max, uint64_t *mapped);

/* The view's tensors and their payload bytes (what metadata.total_size says). */
size_t placefs_view_tensor_count(const struct placefs_view *v);
uint64_t placefs_view_total_bytes(const struct placefs_view *v);

/* Whether the view has an index, its file name and size in bytes. */
int placefs_view_has_index(const struct placefs_view *v);
const char *placefs_view_index_name(const struct placefs_view *v); /* NULL without one */
uint64_t placefs_view_index_size(const struct placefs_view *v);
/*
 * The index bytes (placefs_view_index_size() of them, JSON indented by two
 * spaces, "\n" at the end), formatted on the first call and kept. NULL
 * without an index, or with -ENOMEM in err.
 */
const char *placefs_view_index(const struct placefs_view *v, struct placefs_error *err);

/*
 * Whether `name`, an entry of the source directory's top level, is one of
 * the files every view shows byte for byte (config.json, tokenizer files...:
 * the "aux" files), and under which file name (into out: `name` encoded by
 * lib/common/name.h, so that no name hides what a listing shows). Not: a hidden
 * name (a leading '.'), a shard of ck, any safetensors file or index
 * ("*.safetensors", "*.safetensors.index.json": a stale copy or another
 * index would contradict the view's own), ck's index, the view's index
 * name, or a name lib/common/name.h refuses. A file source has no aux files (its
 * directory is not the checkpoint's): 0 for every name. Whether the entry
 * is a regular file is the caller's to check. Returns 1 or 0.
 */
int placefs_view_aux_name(const struct placefs_ckpt *ck, const char *name,
                          char out[PLACEFS_NAME_MAX + 1]);

/*
 * Reads the checkpoint's index file again (as lib/ckpt found it: a regular
 * file of at most PLACEFS_INDEX_MAX bytes, opened without blocking), for
 * placefs_view_create(), which validates the part it copies (the
 * "metadata" object) with lib/index's strict rules. *text (malloc'd,
 * NUL-terminated; the caller frees) and *len get its bytes; without an
 * index both are NULL/0 and 0 is returned. Returns 0 or a negative errno
 * (kinds PLACEFS_E_IO, PLACEFS_E_INDEX).
 */
int placefs_view_read_index(const struct placefs_ckpt *ck, char **text, size_t *len,
                            struct placefs_error *err);

#endif
