/* SPDX-License-Identifier: MIT */
/*
 * slice: the part of a tensor one tensor-parallel rank keeps, and where its
 * bytes lie in the tensor's bytes.
 *
 * A slice is a range [start, start + len) of dimension 0 (rows: one
 * contiguous byte range, what a column-parallel weight's rank keeps) or of
 * dimension 1 (columns: one segment per index of dimension 0, at the
 * stride of a whole row, what a row-parallel weight's rank keeps). Its
 * bytes, compacted (segment after segment, in row-major order), are the
 * C-contiguous tensor of shape [len, ...] or [shape[0], len, ...]: exactly
 * what torch's t[start:start+len] or t[:, start:start+len].contiguous()
 * holds.
 *
 * A layout describes any such byte set uniformly: `rows` segments of
 * `seg_bytes`, the first at `offset` (relative to the tensor's first byte),
 * each `stride` bytes after the previous one; `nbytes` = rows * seg_bytes.
 * Layouts are normalised: a set that is contiguous (dimension 0, a single
 * row, or every column) is one segment; an empty one (a dimension of size
 * 0) is all zero.
 *
 * Sub-byte dtypes (F4, F6_*) are handled exactly: a slice whose start,
 * length or row stride is not a whole number of bytes is refused, never
 * rounded.
 *
 * Pure arithmetic, no state; every product is overflow-checked.
 */
#ifndef PLACEFS_SLICE_H
#define PLACEFS_SLICE_H

#include <stdint.h>

#include "common/dtype.h"
#include "common/error.h"

/* The dimensions a slice may cut. */
#define PLACEFS_SLICE_DIM_MAX 1

/* A slice request: elements [start, start + len) of dimension dim. */
struct placefs_slice {
	uint32_t dim; /* 0 or 1 */
	uint64_t start;
	uint64_t len; /* >= 1 */
};

/* The bytes of a slice in the tensor's bytes (see above). */
struct placefs_slice_layout {
	uint64_t offset;    /* first byte, relative to the tensor's first byte */
	uint64_t rows;      /* segments; 0 only when nbytes is 0 */
	uint64_t seg_bytes; /* bytes of each segment */
	uint64_t stride;    /* from one segment's first byte to the next's; seg_bytes when rows 1 */
	uint64_t nbytes;    /* rows * seg_bytes: the slice's size */
};

/*
 * The layout of slice s of tensor `name` (dtype dt, shape[0..ndim),
 * tensor_bytes bytes). 0, or -EINVAL with kind PLACEFS_E_USAGE and a
 * message naming the tensor and the rule: dim not 0 or 1, dim 1 of a tensor
 * of fewer than 2 dimensions (or dim 0 of a scalar), len 0, start + len past
 * the dimension, a start, length or stride that is not a whole number of
 * bytes (sub-byte dtypes), an unknown dtype, a shape whose bytes overflow or
 * disagree with tensor_bytes. name NULL is "(unnamed)".
 */
int placefs_slice_layout(const char *name, enum placefs_dtype dt, uint32_t ndim,
                         const uint64_t *shape, uint64_t tensor_bytes,
                         const struct placefs_slice *s, struct placefs_slice_layout *out,
                         struct placefs_error *err);

/* The layout of the whole tensor: one segment of nbytes (all zero for 0). */
void placefs_slice_whole(uint64_t nbytes, struct placefs_slice_layout *out);

/*
 * Checks a layout made by hand against a tensor of tensor_bytes bytes:
 * nbytes = rows * seg_bytes, rows 0 exactly when nbytes is 0, stride >=
 * seg_bytes when rows > 1, and the last segment ends within the tensor (all
 * overflow-checked). 0 or -EINVAL with a message naming the tensor.
 */
int placefs_slice_check(const char *name, const struct placefs_slice_layout *l,
                        uint64_t tensor_bytes, struct placefs_error *err);

/* 1 when the layout is one contiguous range (rows <= 1). */
int placefs_slice_contiguous(const struct placefs_slice_layout *l);

/*
 * Where slice byte x (< l->nbytes) lies, relative to the tensor's first
 * byte; *run is the number of slice bytes from x that are contiguous there
 * (to the end of its segment).
 */
uint64_t placefs_slice_src(const struct placefs_slice_layout *l, uint64_t x, uint64_t *run);

#endif
