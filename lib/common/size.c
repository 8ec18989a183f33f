/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/size.h"

#define GRAMMAR                                                                                    \
	"digits with an optional suffix: K, M, G, T, KiB, MiB, GiB, TiB (powers of 1024) or KB, "  \
	"MB, GB, TB (powers of 1000)"

/* Longest part of a bad value quoted in a message; the rest is elided. */
#define QUOTE_MAX 64

struct suffix {
	const char *text;
	uint64_t scale;
};

/*
 * K/M/G/T are binary, as in dd, numfmt --from=iec and every size option of
 * placefs before the SI forms; KB/MB/GB/TB are decimal, as Hugging Face's
 * max_shard_size ("5GB") and numfmt --from=si mean them.
 */
static const struct suffix suffixes[] = {
        {"K", 1ULL << 10},   {"M", 1ULL << 20},   {"G", 1ULL << 30},     {"T", 1ULL << 40},
        {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30},   {"TiB", 1ULL << 40},
        {"KB", 1000ULL},     {"MB", 1000000ULL},  {"GB", 1000000000ULL}, {"TB", 1000000000000ULL},
};

int placefs_size_parse(const char *text, const char *origin, uint64_t *out,
                       struct placefs_error *err)
{
	char q[QUOTE_MAX * 4 + 8];
	uint64_t v = 0;
	const char *p;
	uint64_t scale = 1;
	int overflow = 0;

	if (!origin)
		origin = "size";
	if (!text)
		text = "";
	placefs_error_quote(text, QUOTE_MAX, q, sizeof(q));

	if (!*text)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_LIMIT,
		                         "%s=\"\": empty value (" GRAMMAR ")", origin);
	if (text[0] == '-' && text[1] >= '0' && text[1] <= '9')
		return placefs_error_set(err, -EINVAL, PLACEFS_E_LIMIT,
		                         "%s=\"%s\": must be greater than zero", origin, q);

	for (p = text; *p >= '0' && *p <= '9'; p++) {
		/* Keep scanning after an overflow so garbage still wins over range. */
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
			overflow = 1;
	}
	if (p == text || *p == '.' || *p == 'e' || *p == 'E' || *p == 'x' || *p == 'X' ||
	    *p == '_' || *p == ',')
		return placefs_error_set(err, -EINVAL, PLACEFS_E_LIMIT,
		                         "%s=\"%s\": not a whole number of bytes (" GRAMMAR ")",
		                         origin, q);
	if (*p) {
		size_t i;

		for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
			if (strcmp(p, suffixes[i].text) == 0)
				break;
		}
		if (i == sizeof(suffixes) / sizeof(suffixes[0])) {
			char qs[QUOTE_MAX * 4 + 8];

			placefs_error_quote(p, QUOTE_MAX, qs, sizeof(qs));
			return placefs_error_set(err, -EINVAL, PLACEFS_E_LIMIT,
			                         "%s=\"%s\": unknown suffix \"%s\" (" GRAMMAR ")",
			                         origin, q, qs);
		}
		scale = suffixes[i].scale;
	}
	if (!overflow && v == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_LIMIT,
		                         "%s=\"%s\": must be greater than zero", origin, q);
	if (overflow || __builtin_mul_overflow(v, scale, &v))
		return placefs_error_set(err, -ERANGE, PLACEFS_E_LIMIT,
		                         "%s=\"%s\": too large (the most is %" PRIu64 " bytes)",
		                         origin, q, UINT64_MAX);
	*out = v;
	return 0;
}

void placefs_size_format(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	unsigned u = 0;
	unsigned __int128 unit, hundredths;
	uint64_t whole, frac;

	if (!buf || !len)
		return;
	while (u + 1 < sizeof(units) / sizeof(units[0]) && (bytes >> (10 * (u + 1))) != 0)
		u++;
	unit = (unsigned __int128)1 << (10 * u);
	if (bytes % unit == 0) {
		snprintf(buf, len, "%" PRIu64 " %s", (uint64_t)(bytes / unit), units[u]);
		return;
	}
	/*
	 * Round to the nearest hundredth and drop trailing zeros, but keep
	 * "1.00" when rounding lands on a whole number: an inexact value must not
	 * look like an exact power.
	 */
	hundredths = ((unsigned __int128)bytes * 100 + unit / 2) / unit;
	whole = (uint64_t)(hundredths / 100);
	frac = (uint64_t)(hundredths % 100);
	if (frac % 10 != 0 || frac == 0)
		snprintf(buf, len, "%" PRIu64 ".%02" PRIu64 " %s", whole, frac, units[u]);
	else
		snprintf(buf, len, "%" PRIu64 ".%" PRIu64 " %s", whole, frac / 10, units[u]);
}
