/* SPDX-License-Identifier: MIT */
/*
 * plan: selection and placement.
 *
 * Order of decisions: the checkpoint's tensors (already index-filtered) ->
 * weight-prefix filter (case-sensitive startswith; no prefix = all) ->
 * placement: payload <= limit -> gpu, > limit -> cpu; without a limit every
 * selected tensor is gpu. Then the explicit failures, each with its own kind:
 * PLACEFS_E_DUP_CPU, PLACEFS_E_DUP_GPU, PLACEFS_E_OVERLAP (a name in both
 * sets), PLACEFS_E_EMPTY (nothing selected; the message lists the prefixes),
 * PLACEFS_E_NAME (a selected name that cannot be a file name).
 *
 * Ring size: with a limit, exactly the limit. Without one,
 * max(largest gpu tensor, min(total gpu bytes, PLACEFS_PLAN_AUTO_RING)),
 * rounded up to 4096, and at least 4096: room for the largest tensor and
 * for several small ones in flight. placefs_plan_set_ring_bytes() can make
 * the ring larger than that (-o ring_size, --ring-size), never smaller.
 *
 * A plan points into the tensors it was built from: they must outlive it.
 */
#ifndef PLACEFS_PLAN_H
#define PLACEFS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "model/ckpt.h"
#include "common/error.h"
#include "common/strbuf.h"

#define PLACEFS_PLAN_AUTO_RING (256ULL << 20)

enum placefs_placement {
	PLACEFS_PLACE_GPU = 0,
	PLACEFS_PLACE_CPU = 1,
};

struct placefs_plan_options {
	const char *const *prefixes; /* nprefixes entries; none = everything */
	size_t nprefixes;
	int has_limit;  /* 0: no staging limit */
	uint64_t limit; /* > 0 when has_limit */
};

/* The environment variable that sets the staging limit when no option does. */
#define PLACEFS_PLAN_ENV_LIMIT "INSTANTTENSOR_BUFFER_SIZE"

/*
 * The staging limit from the command line or the environment, the option
 * first: `text` is the option's value as given (NULL: the option was not
 * given) and `origin` names the option ("--buffer-size", "-o buffer_size").
 * Without the option, $INSTANTTENSOR_BUFFER_SIZE is used when it is set (set
 * but empty is an error); with neither there is no limit. Each is parsed by
 * placefs_size_parse() with its own origin for the message.
 *
 * Returns 0 and sets *has_limit to 1, *limit to the value and *limit_origin
 * to `origin` or PLACEFS_PLAN_ENV_LIMIT (not copied); with no limit, sets
 * *has_limit and *limit to 0 and *limit_origin to NULL (limit_origin may be
 * NULL when the caller has no use for it). On failure returns
 * placefs_size_parse()'s -EINVAL or -ERANGE with kind PLACEFS_E_LIMIT and
 * the outputs unchanged. Reads the environment: not thread-safe against
 * setenv().
 */
int placefs_plan_limit_parse(const char *text, const char *origin, int *has_limit, uint64_t *limit,
                             const char **limit_origin, struct placefs_error *err);

/*
 * The packed layout of a placement: its tensors in plan order, the first at
 * 0. A tensor that directly follows the placement's tensor before it in the
 * same shard (its offset is that one's offset plus its bytes) starts where
 * that one ends, when that offset is a multiple of its element size (its
 * dtype's bits / 8, at least 1); any other tensor starts at the first
 * multiple of PLACEFS_PLAN_PACK_ALIGN at or after the end of the one before.
 * So neighbours in a shard stay neighbours in the layout (a run of them is
 * one range of bytes of the shard, moved as one copy) and every tensor's
 * elements are aligned. A loader that lays a placement's tensors out in one
 * buffer this way can ask for ranges of them by plan index alone
 * (PLACEFS_IOC_BATCH_RANGES, include/placefs/ioctl.h); the plan's columns
 * (file, offset, nbytes, dtype, placement) are all it needs to compute it.
 */
#define PLACEFS_PLAN_PACK_ALIGN 256
/* layout.json's "pack": the name of this rule (a client that knows another refuses it). */
#define PLACEFS_PLAN_PACK_RULE "runs"

struct placefs_plan_entry {
	const struct placefs_tensor *tensor;
	enum placefs_placement placement;
	const char *fname; /* encoded file name (lib/common/name.h) */
	uint64_t packed;   /* its offset in its placement's packed layout */
};

struct placefs_plan_totals {
	uint64_t count[2]; /* indexed by enum placefs_placement */
	uint64_t bytes[2];
	uint64_t largest[2];
	uint64_t packed[2]; /* the packed layout's size: the end of its last tensor */
};

struct placefs_plan;

int placefs_plan_create(const struct placefs_tensor *tensors, size_t n,
                        const struct placefs_plan_options *opt, struct placefs_plan **out,
                        struct placefs_error *err);
void placefs_plan_free(struct placefs_plan *plan); /* NULL ok */

/* Selected entries, in the order of the input tensors (checkpoint order). */
size_t placefs_plan_count(const struct placefs_plan *plan);
const struct placefs_plan_entry *placefs_plan_entry(const struct placefs_plan *plan, size_t i);
/* Index of the entry whose fname is `fname`, or -1. O(log n). */
long placefs_plan_find(const struct placefs_plan *plan, const char *fname);

int placefs_plan_has_limit(const struct placefs_plan *plan);
uint64_t placefs_plan_limit(const struct placefs_plan *plan);
/* The staging ring's size: computed at creation, or as set below. */
uint64_t placefs_plan_ring_bytes(const struct placefs_plan *plan);

/*
 * Sets the staging ring to `bytes` rounded up to a multiple of 4096, in place
 * of the size placefs_plan_create() computed (see "Ring size" above). A ring
 * larger than the largest gpu tensor lets the stager load the next tensor
 * while the current one is leased. `bytes` must be at least the computed
 * ring: the staging limit when there is one (every gpu tensor up to the
 * limit must fit), else the automatic size.
 *
 * `origin` names where the value came from ("-o ring_size", "--ring-size";
 * NULL: "the ring size"): the error message starts with it, and the text
 * plan's ring line says "set by <origin>" from now on (it is copied; its
 * first 63 bytes are kept).
 *
 * Afterwards placefs_plan_ring_bytes(), the JSON "ring_bytes" and the text
 * and summary outputs report the new size. Each call is checked against the
 * computed ring, not against an earlier call's size. Returns 0, or -EINVAL
 * with kind PLACEFS_E_USAGE and the plan unchanged: below the computed ring
 * (the message gives the value, the minimum and why), or too close to
 * UINT64_MAX to be rounded up. Not thread-safe: call it before the plan is
 * shared.
 */
int placefs_plan_set_ring_bytes(struct placefs_plan *plan, uint64_t bytes, const char *origin,
                                struct placefs_error *err);
void placefs_plan_totals(const struct placefs_plan *plan, struct placefs_plan_totals *t);
const char *placefs_placement_name(enum placefs_placement p); /* "gpu" / "cpu" */

/*
 * The machine-readable plan, exactly (one line, then "\n"):
 * {"source": S, "buffer_size": N|null, "ring_bytes": N, "tensors": [{"name": S,
 *  "filename": S, "file": S, "dtype": S, "shape": [N, ...], "nbytes": N,
 *  "offset": N, "placement": "gpu"|"cpu"}, ...], "totals": {"gpu": {"count": N,
 *  "bytes": N}, "cpu": {"count": N, "bytes": N}}}
 * "filename" is the tensor's file name in the mount (the entry's fname, as
 * lib/common/name.h encodes it), "file" its shard. Both placefs-plan --json and the
 * mount's .placefs/plan.json use this.
 */
int placefs_plan_format_json(const struct placefs_plan *plan, const char *source,
                             struct placefs_strbuf *sb);
/*
 * The same plan in columns, for loaders of many tensors (one line, then
 * "\n"): parsing it makes no object per tensor and repeats no key.
 * {"source": S, "buffer_size": N|null, "ring_bytes": N, "version": 1,
 *  "count": N, "files": [S, ...], "dtypes": [S, ...], "name": [S, ...],
 *  "filename": {"I": S, ...}, "file": [N, ...], "dtype": [N, ...],
 *  "shape": [[N, ...], ...], "nbytes": [N, ...], "offset": [N, ...],
 *  "packed": [N, ...], "placement": "gc...", "totals": {as above}}
 * Every array has `count` items, entry i of each the plan's entry i (the
 * order of format_json's "tensors"). "file" and "dtype" are positions in
 * "files" (shards, in the order the entries first name them) and "dtypes".
 * "filename" holds only the entries whose file name in the mount differs
 * from the tensor's name (lib/common/name.h encoded it), keyed by the entry's
 * index in decimal. "packed" is the entry's offset in its placement's packed
 * layout (the entry's `packed` above: what PLACEFS_IOC_BATCH_RANGES writes
 * at). "placement" has one character per entry: 'g' or 'c'.
 * The mount's .placefs/columns.json uses this. Returns 0 or -ENOMEM with
 * sb as it was.
 */
int placefs_plan_format_columns(const struct placefs_plan *plan, const char *source,
                                struct placefs_strbuf *sb);
/*
 * The same columns in chunks, one JSON object a line, for a loader that
 * goes through the plan in order and parses only what it has reached:
 * {"version": 1, "count": N, "chunk": C, "chunks": K}, then K lines, line k
 * holding entries [k * C, min((k + 1) * C, N)):
 * {"first": k * C, "count": n, "files": ..., "dtypes": ..., "name": ...,
 *  "filename": {...}, "file": ..., "dtype": ..., "shape": ...,
 *  "nbytes": ..., "offset": ..., "packed": ..., "placement": "gc..."}
 * Each chunk's members are format_columns' members of those entries, with
 * tables ("files", "dtypes") of its own and "filename" keyed by the entry's
 * position in the chunk. The mount's .placefs/columns.jsonl uses this with
 * PLACEFS_PLAN_COLUMN_CHUNK. Returns 0, -EINVAL (chunk 0) or -ENOMEM, with
 * sb as it was.
 */
#define PLACEFS_PLAN_COLUMN_CHUNK 1024
int placefs_plan_format_column_chunks(const struct placefs_plan *plan, size_t chunk,
                                      struct placefs_strbuf *sb);
/*
 * What a loader needs before it reads the plan (one line, then "\n"):
 * {"align": PLACEFS_PLAN_PACK_ALIGN, "pack": PLACEFS_PLAN_PACK_RULE,
 *  "first": S|null, "gpu": {"count": N,
 *  "bytes": N, "packed": N}, "cpu": {...}}
 * "first" is the file name of the plan's first tensor (a file the staging
 * ioctls can be issued on); "packed" each placement's packed layout size.
 * The mount's .placefs/layout.json. 0 or -ENOMEM with sb as it was.
 */
int placefs_plan_format_layout(const struct placefs_plan *plan, struct placefs_strbuf *sb);
/*
 * The packed layouts entry by entry, for clients that do not compute the
 * layout themselves (the C client's placefs_client_packed_read()): a first
 * line PLACEFS_PLAN_PACKED_HEAD, then one line per plan entry in plan order
 * (line i + 2 is entry i), six fields separated by tabs:
 *   placement  "gpu" or "cpu"
 *   packed     the entry's offset in its placement's packed layout (decimal)
 *   nbytes     its payload bytes (decimal)
 *   dtype      its dtype's name ("BF16")
 *   shape      its dimensions in decimal, separated by commas ("4096,512";
 *              empty for a scalar)
 *   file       its file name in the mount (the entry's fname)
 * and "\n". No field holds a tab or a newline: the file name is an encoded
 * name (lib/common/name.h refuses every C0 control byte, tab and newline
 * among them), the others are words and numbers. The mount's
 * .placefs/packed.tsv. 0 or -ENOMEM with sb as it was.
 */
#define PLACEFS_PLAN_PACKED_HEAD "# placement\tpacked\tnbytes\tdtype\tshape\tfile\n"
int placefs_plan_format_packed(const struct placefs_plan *plan, struct placefs_strbuf *sb);
/* The text plan: one line per tensor, then a summary. */
int placefs_plan_format_text(const struct placefs_plan *plan, const char *source,
                             struct placefs_strbuf *sb);
/* The summary lines alone (used in the daemon's start-up log). */
int placefs_plan_format_summary(const struct placefs_plan *plan, struct placefs_strbuf *sb);

/*
 * The sweep table: for each candidate limit, what would go where. With
 * nlimits == 0 the candidates are the powers of two from 1 MiB up to the
 * first one >= the largest selected tensor, plus "none". Selection errors are
 * reported as by placefs_plan_create.
 */
int placefs_plan_sweep(const struct placefs_tensor *tensors, size_t n, const char *const *prefixes,
                       size_t nprefixes, const uint64_t *limits, size_t nlimits,
                       struct placefs_strbuf *sb, struct placefs_error *err);

#endif
