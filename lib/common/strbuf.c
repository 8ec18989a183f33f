/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/strbuf.h"

void placefs_strbuf_init(struct placefs_strbuf *sb)
{
	sb->buf = NULL;
	sb->len = 0;
	sb->alloc = 0;
}

void placefs_strbuf_release(struct placefs_strbuf *sb)
{
	if (!sb)
		return;
	free(sb->buf);
	placefs_strbuf_init(sb);
}

void placefs_strbuf_reset(struct placefs_strbuf *sb)
{
	sb->len = 0;
	if (sb->buf)
		sb->buf[0] = '\0';
}

int placefs_strbuf_grow(struct placefs_strbuf *sb, size_t extra)
{
	size_t need, nalloc;
	char *nbuf;

	if (__builtin_add_overflow(sb->len, extra, &need) || __builtin_add_overflow(need, 1, &need))
		return -EOVERFLOW;
	if (need <= sb->alloc)
		return 0;
	nalloc = sb->alloc ? sb->alloc : 64;
	while (nalloc < need) {
		if (__builtin_mul_overflow(nalloc, 2, &nalloc))
			return -EOVERFLOW;
	}
	nbuf = realloc(sb->buf, nalloc);
	if (!nbuf)
		return -ENOMEM;
	if (!sb->buf)
		nbuf[0] = '\0';
	sb->buf = nbuf;
	sb->alloc = nalloc;
	return 0;
}

int placefs_strbuf_add(struct placefs_strbuf *sb, const void *data, size_t len)
{
	int rc = placefs_strbuf_grow(sb, len);

	if (rc)
		return rc;
	if (len)
		memcpy(sb->buf + sb->len, data, len);
	sb->len += len;
	sb->buf[sb->len] = '\0';
	return 0;
}

int placefs_strbuf_adds(struct placefs_strbuf *sb, const char *s)
{
	return placefs_strbuf_add(sb, s, strlen(s));
}

int placefs_strbuf_addf(struct placefs_strbuf *sb, const char *fmt, ...)
{
	size_t room = sb->buf ? sb->alloc - sb->len : 0;
	va_list ap;
	int n, rc;

	/* One pass when it fits in the room there is; else measure, grow, format. */
	va_start(ap, fmt);
	n = room ? vsnprintf(sb->buf + sb->len, room, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		if (room)
			sb->buf[sb->len] = '\0';
		return -EINVAL;
	}
	if ((size_t)n < room) {
		sb->len += (size_t)n;
		return 0;
	}
	rc = placefs_strbuf_grow(sb, (size_t)n);
	if (rc) {
		if (sb->buf)
			sb->buf[sb->len] = '\0'; /* the partial output is not ours to keep */
		return rc;
	}
	va_start(ap, fmt);
	vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t)n;
	return 0;
}

/* Drops a partial append so that a failed adder leaves the old contents. */
static int truncate_on_error(struct placefs_strbuf *sb, size_t len, int rc)
{
	if (rc && sb->buf) {
		sb->len = len;
		sb->buf[len] = '\0';
	}
	return rc;
}

int placefs_strbuf_add_json_string(struct placefs_strbuf *sb, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t start = sb->len;
	int rc = placefs_strbuf_add(sb, "\"", 1);

	while (rc == 0 && *p) {
		const unsigned char *q = p;

		/* A run of bytes that need no escape, in one add. */
		while (*q >= 0x20 && *q != '"' && *q != '\\' && *q != 0x7f)
			q++;
		if (q != p) {
			rc = placefs_strbuf_add(sb, p, (size_t)(q - p));
			p = q;
			continue;
		}
		switch (*p++) {
		case '"': rc = placefs_strbuf_add(sb, "\\\"", 2); break;
		case '\\': rc = placefs_strbuf_add(sb, "\\\\", 2); break;
		case '\n': rc = placefs_strbuf_add(sb, "\\n", 2); break;
		case '\r': rc = placefs_strbuf_add(sb, "\\r", 2); break;
		case '\t': rc = placefs_strbuf_add(sb, "\\t", 2); break;
		case '\b': rc = placefs_strbuf_add(sb, "\\b", 2); break;
		case '\f': rc = placefs_strbuf_add(sb, "\\f", 2); break;
		default: rc = placefs_strbuf_addf(sb, "\\u%04x", p[-1]); break;
		}
	}
	if (!rc)
		rc = placefs_strbuf_add(sb, "\"", 1);
	return truncate_on_error(sb, start, rc);
}

int placefs_strbuf_add_quoted(struct placefs_strbuf *sb, const char *s, size_t max)
{
	size_t n = strnlen(s, max), room;
	int rc;

	/*
	 * Room for placefs_error_quote() never to cut: up to 4 bytes ("\xNN")
	 * for each of the n bytes, "..." and its NUL; then the two quotes.
	 */
	if (__builtin_mul_overflow(n, 4, &room) || __builtin_add_overflow(room, 4 + 1, &room))
		return -EOVERFLOW;
	rc = placefs_strbuf_grow(sb, room + 2);
	if (rc)
		return rc;
	sb->buf[sb->len++] = '"';
	placefs_error_quote(s, max, sb->buf + sb->len, room);
	sb->len += strlen(sb->buf + sb->len);
	sb->buf[sb->len++] = '"';
	sb->buf[sb->len] = '\0';
	return 0;
}

size_t placefs_strbuf_u64_width(uint64_t v)
{
	size_t n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

int placefs_strbuf_add_u64(struct placefs_strbuf *sb, const char *sep, uint64_t v)
{
	char tmp[32]; /* sep (at most 8 bytes) and 20 digits */
	size_t seplen = strlen(sep), n = 0, len;
	char *p;

	if (seplen > 8)
		return -EINVAL;
	do {
		tmp[sizeof(tmp) - 1 - n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	p = tmp + sizeof(tmp) - n - seplen;
	memcpy(p, sep, seplen);
	len = n + seplen;
	return placefs_strbuf_add(sb, p, len);
}

int placefs_strbuf_add_json_u64_array(struct placefs_strbuf *sb, const uint64_t *v, size_t n)
{
	size_t start = sb->len;
	int rc = placefs_strbuf_add(sb, "[", 1);

	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = placefs_strbuf_add_u64(sb, i ? ", " : "", v[i]);
	if (!rc)
		rc = placefs_strbuf_add(sb, "]", 1);
	return truncate_on_error(sb, start, rc);
}

const char *placefs_strbuf_cstr(const struct placefs_strbuf *sb)
{
	return sb->buf ? sb->buf : "";
}

char *placefs_strbuf_detach(struct placefs_strbuf *sb, size_t *len)
{
	char *r;

	if (!sb->buf && placefs_strbuf_grow(sb, 0))
		return NULL;
	r = sb->buf;
	if (len)
		*len = sb->len;
	placefs_strbuf_init(sb);
	return r;
}
