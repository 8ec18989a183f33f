/* SPDX-License-Identifier: MIT */
/*
 * jsonstrict (internal to the parsers): cJSON with the reference reader's
 * strictness restored. Only lib/format/safetensors.c and lib/format/index.c include this.
 *
 * placefs_json_parse() validates, before and after cJSON:
 *  - the whole text is valid UTF-8 (no overlongs, surrogates or > U+10FFFF)
 *    and has no byte-order mark;
 *  - only space, tab, CR and LF around tokens, and nothing but those after
 *    the top-level value;
 *  - no raw byte < 0x20 and no \u0000 inside strings (cJSON would truncate);
 *  - the top-level value is an object;
 *  - no object anywhere has two members with the same (case-sensitive) key.
 * Numbers are kept exactly: a pre-scan lexer records every number token in
 * document order, and placefs_json_u64() gives the exact value of a number
 * that is a plain non-negative integer (digits only, no leading zero, no
 * sign, fraction or exponent, fits in uint64_t).
 *
 * Use cJSON_GetObjectItemCaseSensitive() or walk ->child; never the
 * case-insensitive cJSON_GetObjectItem().
 */
#ifndef PLACEFS_JSONSTRICT_I_H
#define PLACEFS_JSONSTRICT_I_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/error.h"

struct placefs_json;

/*
 * Parses `len` bytes of `text` (need not be NUL-terminated). `file` and
 * `kind` are used for the error message and kind ("<file>: invalid JSON in
 * header: ...", with a byte offset where known). Returns 0, -EINVAL or
 * -ENOMEM.
 */
int placefs_json_parse(const char *file, const char *text, size_t len, enum placefs_errkind kind,
                       struct placefs_json **out, struct placefs_error *err);
void placefs_json_free(struct placefs_json *js); /* NULL ok */

/*
 * Caps that keep the memory of a parse proportional to the text (cJSON takes
 * some 64 bytes per value), checked by the lexer before cJSON allocates
 * anything. Zero fields are no limit.
 *  - array_max: elements in any one array. The message names the members at
 *    depths 1 and 2 (array_owner, e.g. "tensor", then the field) and cites
 *    array_rule.
 *  - bytes_per_token, tokens_extra: at most len / bytes_per_token +
 *    tokens_extra values and member names in the whole text.
 */
struct placefs_json_limits {
	size_t array_max;
	const char *array_owner;
	const char *array_rule;
	size_t bytes_per_token;
	size_t tokens_extra;
};

/* placefs_json_parse() with caps (lim may be NULL: none). */
int placefs_json_parse_limited(const char *file, const char *text, size_t len,
                               enum placefs_errkind kind, const struct placefs_json_limits *lim,
                               struct placefs_json **out, struct placefs_error *err);

const cJSON *placefs_json_root(const struct placefs_json *js);

/*
 * Exact value of a number node of this document. Returns 0, or -EINVAL if
 * the node is not a number of this document or the token is not a plain
 * non-negative integer, -ERANGE if it does not fit in uint64_t.
 */
int placefs_json_u64(const struct placefs_json *js, const cJSON *node, uint64_t *out);

/* 1 if `s` (len bytes) is valid UTF-8, else 0. */
int placefs_utf8_valid(const char *s, size_t len);

/*
 * The type of a value as a message names it: "null", "a boolean", "a number",
 * "a string", "an array", "an object" ("an unknown value" for a node that
 * placefs_json_parse() never makes). A static string.
 */
const char *placefs_json_type_name(const cJSON *v);

#define PLACEFS_JSON_QUOTE_MAX 256

/*
 * Writes `s` into buf (size bytes, at least 16) as a double-quoted string for
 * an error message: '"' and '\\' are escaped, control bytes become \xNN, and
 * a string too long to fit is cut at a character boundary and ends in "...".
 * Returns buf.
 */
const char *placefs_json_quote(char *buf, size_t size, const char *s);

#endif
