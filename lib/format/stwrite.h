/* SPDX-License-Identifier: MIT */
/*
 * stwrite: writes deterministic synthetic safetensors files (for
 * placefs-mkckpt, the tests, the demo and the benchmarks).
 *
 * The header lists the tensors in the given order with contiguous offsets,
 * is padded with spaces to a multiple of 8 bytes, and loads in the reference
 * reader. Payload bytes are a pure function of (seed, tensor name, dtype,
 * byte position), so a test can recompute any byte without the file; float
 * dtypes of 16 bits and more always hold finite values.
 */
#ifndef PLACEFS_STWRITE_H
#define PLACEFS_STWRITE_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/error.h"

struct placefs_stwrite_tensor {
	const char *name;
	enum placefs_dtype dtype;
	uint32_t ndim;
	const uint64_t *shape;
};

/*
 * Writes `path` (created or truncated, mode 0644). `meta` holds nmeta
 * key/value pairs (2 * nmeta strings) for __metadata__, or NULL for none.
 * Returns 0 or a negative errno with a message.
 */
int placefs_stwrite_file(const char *path, const struct placefs_stwrite_tensor *t, size_t n,
                         const char *const *meta, size_t nmeta, uint64_t seed,
                         struct placefs_error *err);

/* Fills buf with the payload bytes [pos, pos + len) of tensor `name`. */
void placefs_stwrite_fill(uint64_t seed, const char *name, enum placefs_dtype dtype, uint64_t pos,
                          void *buf, size_t len);

/* Payload bytes of a tensor (elements x bits / 8); -EOVERFLOW or -EINVAL. */
int placefs_stwrite_nbytes(enum placefs_dtype dtype, uint32_t ndim, const uint64_t *shape,
                           uint64_t *out);

#endif
