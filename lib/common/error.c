/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

void placefs_error_clear(struct placefs_error *err)
{
	if (!err)
		return;
	err->code = 0;
	err->kind = PLACEFS_E_NONE;
	err->msg[0] = '\0';
}

int placefs_error_set(struct placefs_error *err, int code, enum placefs_errkind kind,
                      const char *fmt, ...)
{
	va_list ap;

	if (!err || err->code != 0)
		return code;
	err->code = code;
	err->kind = kind;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

void placefs_error_prefix(struct placefs_error *err, const char *fmt, ...)
{
	char head[PLACEFS_ERROR_MSG_MAX];
	char old[PLACEFS_ERROR_MSG_MAX];
	va_list ap;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* Truncation is acceptable: the message is for humans. */
	size_t hl = strnlen(head, sizeof(head) - 3);
	memcpy(err->msg, head, hl);
	memcpy(err->msg + hl, ": ", 2);
	hl += 2;
	size_t ol = strnlen(old, sizeof(err->msg) - hl - 1);
	memcpy(err->msg + hl, old, ol);
	err->msg[hl + ol] = '\0';
}

const char *placefs_errkind_name(enum placefs_errkind kind)
{
	switch (kind) {
	case PLACEFS_E_NONE: return "none";
	case PLACEFS_E_IO: return "io";
	case PLACEFS_E_FORMAT: return "format";
	case PLACEFS_E_INDEX: return "index";
	case PLACEFS_E_SOURCE: return "source";
	case PLACEFS_E_LIMIT: return "limit";
	case PLACEFS_E_NAME: return "name";
	case PLACEFS_E_EMPTY: return "empty-selection";
	case PLACEFS_E_DUP_GPU: return "duplicate-gpu";
	case PLACEFS_E_DUP_CPU: return "duplicate-cpu";
	case PLACEFS_E_OVERLAP: return "gpu-cpu-overlap";
	case PLACEFS_E_DUP_SOURCE: return "duplicate-source";
	case PLACEFS_E_USAGE: return "usage";
	case PLACEFS_E_NOMEM: return "nomem";
	}
	return "unknown";
}

int placefs_error_exit_status(const struct placefs_error *err)
{
	/*
	 * A file that does not exist (an --index path, say) is a bad source
	 * for the user, whichever layer noticed it.
	 */
	if (err->kind == PLACEFS_E_IO && err->code == -ENOENT)
		return PLACEFS_EXIT_CHECKPOINT;
	switch (err->kind) {
	case PLACEFS_E_FORMAT:
	case PLACEFS_E_INDEX:
	case PLACEFS_E_SOURCE:
	case PLACEFS_E_DUP_SOURCE: return PLACEFS_EXIT_CHECKPOINT;
	case PLACEFS_E_LIMIT: return PLACEFS_EXIT_LIMIT;
	case PLACEFS_E_EMPTY: return PLACEFS_EXIT_EMPTY;
	case PLACEFS_E_DUP_GPU: return PLACEFS_EXIT_DUP_GPU;
	case PLACEFS_E_DUP_CPU: return PLACEFS_EXIT_DUP_CPU;
	case PLACEFS_E_OVERLAP: return PLACEFS_EXIT_OVERLAP;
	case PLACEFS_E_NAME: return PLACEFS_EXIT_NAME;
	case PLACEFS_E_USAGE: return PLACEFS_EXIT_USAGE;
	default: return PLACEFS_EXIT_ERROR;
	}
}

void placefs_error_quote(const char *s, size_t max, char *out, size_t outlen)
{
	size_t o = 0, i;

	for (i = 0; s[i] && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		char tmp[5];
		size_t tl;

		if (c == '"' || c == '\\') {
			tmp[0] = '\\';
			tmp[1] = (char)c;
			tl = 2;
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(tmp, sizeof(tmp), "\\x%02x", c);
			tl = 4;
		} else {
			tmp[0] = (char)c;
			tl = 1;
		}
		/* Keep room for "..." and the NUL whatever comes next. */
		if (o + tl + 4 >= outlen)
			break;
		memcpy(out + o, tmp, tl);
		o += tl;
	}
	if (s[i] && o + 4 < outlen) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}
