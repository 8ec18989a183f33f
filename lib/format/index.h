/* SPDX-License-Identifier: MIT */
/*
 * index: a strict reader of model.safetensors.index.json.
 *
 * `weight_map` (required, an object of tensor name -> shard path strings) is
 * the authority; `metadata` may be absent, null or an object; other keys are
 * ignored. Duplicate keys anywhere are an error. A shard path must be
 * relative, non-empty, without "." or ".." components, without control
 * characters and without a trailing '/'. Offsets never come from the index.
 */
#ifndef PLACEFS_INDEX_H
#define PLACEFS_INDEX_H

#include <stddef.h>

#include "common/error.h"

#define PLACEFS_INDEX_MAX (256ULL << 20) /* an index larger than this is refused */

struct placefs_index;

/* Parses `len` bytes of JSON. `file` names the index in messages. kind PLACEFS_E_INDEX. */
int placefs_index_parse(const char *file, const char *text, size_t len, struct placefs_index **out,
                        struct placefs_error *err);

/* Reads and parses the file at `path`; `file` is its display name. */
int placefs_index_load(const char *path, const char *file, struct placefs_index **out,
                       struct placefs_error *err);

void placefs_index_free(struct placefs_index *idx); /* NULL ok */

/* weight_map entries, sorted by tensor name (byte order). */
size_t placefs_index_count(const struct placefs_index *idx);
const char *placefs_index_name(const struct placefs_index *idx, size_t i);
const char *placefs_index_shard_of(const struct placefs_index *idx, size_t i);
/* Shard path the index maps `name` to, or NULL. O(log n). */
const char *placefs_index_lookup(const struct placefs_index *idx, const char *name);

/* The distinct shard paths, sorted by name. */
size_t placefs_index_shard_count(const struct placefs_index *idx);
const char *placefs_index_shard(const struct placefs_index *idx, size_t i);

#endif
