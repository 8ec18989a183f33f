/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "name.h"

/* Longest part of a tensor name quoted in a message; the rest is elided. */
#define QUOTE_MAX 160

static int is_control(unsigned char c)
{
	return (c >= 0x01 && c <= 0x1f) || c == 0x7f;
}

int placefs_name_encode(const char *name, char out[PLACEFS_NAME_MAX + 1], struct placefs_error *err)
{
	char q[QUOTE_MAX * 4 + 8];
	size_t o = 0, total = 0;

	out[0] = '\0';
	if (!name || !*name)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_NAME,
		                         "tensor \"\": an empty name cannot be a file name");
	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		const char *rep = NULL;
		size_t rl = 1;

		if (is_control(*p)) {
			placefs_error_quote(name, QUOTE_MAX, q, sizeof(q));
			return placefs_error_set(err, -EINVAL, PLACEFS_E_NAME,
			                         "tensor \"%s\": name contains control character "
			                         "\\x%02x, which cannot be in a file name",
			                         q, *p);
		}
		if (*p == '%')
			rep = "%25";
		else if (*p == '/')
			rep = "%2F";
		else if (*p == '.' && p == (const unsigned char *)name)
			rep = "%2E";
		if (rep)
			rl = 3;
		/* Count the full length even past the limit, for the message. */
		total += rl;
		if (total <= PLACEFS_NAME_MAX) {
			if (rep)
				memcpy(out + o, rep, rl);
			else
				out[o] = (char)*p;
			o += rl;
		}
	}
	if (total > PLACEFS_NAME_MAX) {
		out[0] = '\0';
		placefs_error_quote(name, QUOTE_MAX, q, sizeof(q));
		return placefs_error_set(
		        err, -ENAMETOOLONG, PLACEFS_E_NAME,
		        "tensor \"%s\": encoded file name is %zu bytes, more than %d", q, total,
		        PLACEFS_NAME_MAX);
	}
	out[o] = '\0';
	return 0;
}

int placefs_name_decode(const char *fname, char *out, size_t outlen)
{
	size_t o = 0;

	if (!fname || !out || !*fname || strlen(fname) > PLACEFS_NAME_MAX)
		return -EINVAL;
	for (const char *p = fname; *p; p++) {
		unsigned char c = (unsigned char)*p;

		/* Bytes and escapes the encoder never writes make the name invalid. */
		if (is_control(c) || c == '/' || (c == '.' && p == fname))
			return -EINVAL;
		if (c == '%') {
			if (p[1] != '2')
				return -EINVAL;
			if (p[2] == '5')
				c = '%';
			else if (p[2] == 'F')
				c = '/';
			else if (p[2] == 'E' && p == fname)
				c = '.';
			else
				return -EINVAL;
			p += 2;
		}
		if (o + 1 >= outlen)
			return -EINVAL;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return 0;
}
