/* SPDX-License-Identifier: MIT */
/*
 * strbuf: a growable, always NUL-terminated byte buffer (git's strbuf shape).
 *
 * Embedded struct: placefs_strbuf_init() allocates nothing, _release() frees
 * the contents, _detach() hands the buffer to the caller. Every adder returns
 * 0 or -ENOMEM (or -EOVERFLOW); after a failure the buffer keeps its old
 * contents.
 */
#ifndef PLACEFS_STRBUF_H
#define PLACEFS_STRBUF_H

#include <stddef.h>
#include <stdint.h>

struct placefs_strbuf {
	char *buf;  /* NULL until the first add; use placefs_strbuf_cstr() */
	size_t len; /* bytes used, excluding the terminating NUL */
	size_t alloc;
};

void placefs_strbuf_init(struct placefs_strbuf *sb);
void placefs_strbuf_release(struct placefs_strbuf *sb);
/* Empties the buffer, keeping its allocation. */
void placefs_strbuf_reset(struct placefs_strbuf *sb);
/* Ensures room for `extra` more bytes plus the NUL. */
int placefs_strbuf_grow(struct placefs_strbuf *sb, size_t extra);
int placefs_strbuf_add(struct placefs_strbuf *sb, const void *data, size_t len);
int placefs_strbuf_adds(struct placefs_strbuf *sb, const char *s);
int placefs_strbuf_addf(struct placefs_strbuf *sb, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included (RFC 8259 escaping). */
int placefs_strbuf_add_json_string(struct placefs_strbuf *sb, const char *s);
/*
 * Appends s in double quotes as a one-line message quotes a hostile string,
 * escaped by placefs_error_quote(): '"' and '\\' get a backslash, control
 * bytes become \xNN, and of a string longer than `max` bytes only the first
 * `max` are written, then "..." (inside the quotes).
 */
int placefs_strbuf_add_quoted(struct placefs_strbuf *sb, const char *s, size_t max);
/*
 * Appends `sep` (at most 8 bytes, else -EINVAL) and v in decimal, without
 * printf: formats with tens of thousands of numbers use it.
 */
int placefs_strbuf_add_u64(struct placefs_strbuf *sb, const char *sep, uint64_t v);
/* The number of decimal digits of v (1 for 0): a column's width without printf. */
size_t placefs_strbuf_u64_width(uint64_t v);
/* Appends a JSON array of unsigned integers: [1, 2, 3] ("[]" when n == 0). */
int placefs_strbuf_add_json_u64_array(struct placefs_strbuf *sb, const uint64_t *v, size_t n);
/* Never NULL: "" for an empty buffer. */
const char *placefs_strbuf_cstr(const struct placefs_strbuf *sb);
/* Returns the buffer (caller frees; never NULL on success) and re-inits sb. */
char *placefs_strbuf_detach(struct placefs_strbuf *sb, size_t *len);

#endif
