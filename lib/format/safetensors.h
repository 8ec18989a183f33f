/* SPDX-License-Identifier: MIT */
/*
 * safetensors: a strict reader of one safetensors file's header, matching the
 * reference reader (huggingface/safetensors) check for check, plus the gaps
 * cJSON leaves open (see doc/FORMAT.md).
 *
 * Layout: u64 LE header length N | N bytes of UTF-8 JSON | data buffer.
 * Every number from the file is hostile: N is bounded by
 * PLACEFS_ST_HEADER_MAX and by file size - 8 before any allocation, and all
 * size arithmetic is checked.
 */
#ifndef PLACEFS_SAFETENSORS_H
#define PLACEFS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/error.h"

#define PLACEFS_ST_HEADER_MAX 100000000ULL /* bytes, as the reference reader */

/*
 * Caps that bound the memory one header can cost (doc/FORMAT.md, "Caps"):
 *  - PLACEFS_ST_NDIM_MAX: dimensions per tensor, and elements in any array
 *    of a header (the reference reader has no cap; real models use at most
 *    8);
 *  - at most one JSON value or member name per PLACEFS_ST_BYTES_PER_TOKEN
 *    bytes of header, plus PLACEFS_ST_TOKENS_EXTRA (the leanest real tensor
 *    entry, `"ab":{"dtype":"F32","shape":[],"data_offsets":[0,4]}`, has 11
 *    in 52 bytes).
 * Both are checked before the JSON tree is built, so parsing a header costs
 * a bounded multiple of its bytes (doc/RELIABILITY.md has the figures).
 */
#define PLACEFS_ST_NDIM_MAX        1024
#define PLACEFS_ST_BYTES_PER_TOKEN 4
#define PLACEFS_ST_TOKENS_EXTRA    4096

struct placefs_st_tensor {
	const char *name; /* UTF-8, NUL-free, may be empty */
	enum placefs_dtype dtype;
	uint32_t ndim;
	const uint64_t *shape; /* ndim entries; NULL when ndim == 0 (scalar) */
	uint64_t begin, end;   /* data_offsets, relative to the data buffer */
	uint64_t nbytes;       /* end - begin */
	uint64_t offset;       /* absolute offset in the file: 8 + N + begin */
};

struct placefs_st_meta {
	const char *key;
	const char *value;
};

struct placefs_st_header;

/*
 * Checks the first bytes of a file of `file_size` bytes (`prefix_len` >= 8
 * unless the file is shorter) and returns the header length N in *n.
 * Recognises a Git LFS pointer and an HTML page and says so. `file` names the
 * file in messages. Returns 0 or -EINVAL (kind PLACEFS_E_FORMAT).
 */
int placefs_st_header_length(const char *file, const uint8_t *prefix, size_t prefix_len,
                             uint64_t file_size, uint64_t *n, struct placefs_error *err);

/*
 * Parses and validates the N-byte JSON header `json` (not NUL-terminated)
 * of a file of `file_size` bytes: UTF-8, strict JSON, no duplicate keys,
 * `__metadata__` a string map or null, dtypes, shapes, offsets covering the
 * data buffer exactly. Tensors come out sorted by offset.
 * Returns 0 or a negative errno (kind PLACEFS_E_FORMAT, -ENOMEM).
 */
int placefs_st_header_parse(const char *file, const char *json, size_t n, uint64_t file_size,
                            struct placefs_st_header **out, struct placefs_error *err);

/* Whole-buffer convenience (the fuzz target's entry): `data` is the file. */
int placefs_st_parse_buffer(const char *file, const uint8_t *data, size_t len,
                            struct placefs_st_header **out, struct placefs_error *err);

/*
 * Reads and parses the header of an open file (pread; the file offset is
 * not moved). `file_size` comes from the caller's fstat so the caller can
 * record exactly what was validated.
 */
int placefs_st_read_fd(const char *file, int fd, uint64_t file_size, struct placefs_st_header **out,
                       struct placefs_error *err);

void placefs_st_header_free(struct placefs_st_header *h); /* NULL ok */

uint64_t placefs_st_header_json_len(const struct placefs_st_header *h);   /* N */
uint64_t placefs_st_header_data_start(const struct placefs_st_header *h); /* 8 + N */
size_t placefs_st_header_tensor_count(const struct placefs_st_header *h);
/* i < count; sorted by offset. Pointers live as long as h. */
const struct placefs_st_tensor *placefs_st_header_tensor(const struct placefs_st_header *h,
                                                         size_t i);
/* 1 when __metadata__ is a map (possibly empty), 0 when absent or null. */
int placefs_st_header_has_meta(const struct placefs_st_header *h);
size_t placefs_st_header_meta_count(const struct placefs_st_header *h);
/* In file order. */
const struct placefs_st_meta *placefs_st_header_meta(const struct placefs_st_header *h, size_t i);

/*
 * The version of the JSON library the header and index parsers run on
 * (cJSON_Version(), e.g. "1.7.15"), for `placefs --version`. Defined in
 * lib/format/jsonstrict.c, so that no program has to include cJSON itself.
 */
const char *placefs_json_version(void);

#endif
