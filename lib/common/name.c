/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/name.h"

/* Longest part of a tensor name quoted in a message; the rest is elided. */
#define QUOTE_MAX 160

static int is_control(unsigned char c)
{
	return (c >= 0x01 && c <= 0x1f) || c == 0x7f;
}

/*
 * Length in bytes of the UTF-8 character at p if it is one that must not
 * appear raw in a file name, else 0: a C1 control (U+0080-U+009F) or a
 * bidirectional formatting character (Unicode's Bidi_Control: U+061C,
 * U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), which would make a listing
 * show a name other than the real one. Reads at most 3 bytes, stopping at NUL.
 */
static size_t hidden_len(const unsigned char *p)
{
	if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
		return 2;
	if (p[0] == 0xd8 && p[1] == 0x9c)
		return 2;
	if (p[0] == 0xe2 && p[1] == 0x80 &&
	    (p[2] == 0x8e || p[2] == 0x8f || (p[2] >= 0xaa && p[2] <= 0xae)))
		return 3;
	if (p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9)
		return 3;
	return 0;
}

static int hex_upper(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
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
		size_t rl = 1, hl = hidden_len(p);
		char hex[10];

		if (hl) {
			/* Each byte as %XX, the scheme used for '%' and '/'. */
			for (size_t k = 0; k < hl; k++)
				snprintf(hex + 3 * k, sizeof(hex) - 3 * k, "%%%02X", p[k]);
			rep = hex;
			rl = 3 * hl;
			total += rl;
			if (total <= PLACEFS_NAME_MAX) {
				memcpy(out + o, rep, rl);
				o += rl;
			}
			p += hl - 1;
			continue;
		}

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
		if (is_control(c) || c == '/' || (c == '.' && p == fname) ||
		    hidden_len((const unsigned char *)p))
			return -EINVAL;
		if (c == '%' && p[1] != '2') {
			/* A hidden character, escaped byte by byte: "%E2%80%AE". */
			unsigned char b[4] = {0};
			size_t n = p[1] == 'E' ? 3 : 2, hl;

			for (size_t k = 0; k < n; k++) {
				int hi, lo;

				if (p[3 * k] != '%' || (hi = hex_upper(p[3 * k + 1])) < 0 ||
				    (lo = hex_upper(p[3 * k + 2])) < 0)
					return -EINVAL;
				b[k] = (unsigned char)(hi * 16 + lo);
			}
			hl = hidden_len(b);
			if (hl != n || o + n >= outlen)
				return -EINVAL;
			memcpy(out + o, b, n);
			o += n;
			p += 3 * n - 1;
			continue;
		}
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
