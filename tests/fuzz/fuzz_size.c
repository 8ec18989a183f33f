/* SPDX-License-Identifier: MIT */
#include "config.h"

/*
 * Fuzz target: placefs_size_parse() against a second, independent reading of
 * the grammar in lib/common/size.h (the oracle below), plus placefs_size_format()
 * into buffers of every small size.
 */

#include <errno.h>

#include "fuzz.h"
#include "common/size.h"

/*
 * The oracle: 0 and *out, -EINVAL when the text is not in the grammar or is
 * zero, -ERANGE when it is in the grammar but does not fit in 64 bits.
 */
static int oracle(const char *s, uint64_t *out)
{
	static const struct {
		const char *text;
		unsigned shift; /* a power of 1024 ... */
		unsigned exp10; /* ... or of 1000 */
	} suffixes[] = {
	        {"", 0, 0},     {"K", 10, 0},   {"M", 20, 0},   {"G", 30, 0},   {"T", 40, 0},
	        {"KiB", 10, 0}, {"MiB", 20, 0}, {"GiB", 30, 0}, {"TiB", 40, 0}, {"KB", 0, 3},
	        {"MB", 0, 6},   {"GB", 0, 9},   {"TB", 0, 12},
	};
	size_t nd = strspn(s, "0123456789");
	unsigned __int128 v = 0;
	size_t i;

	if (nd == 0)
		return -EINVAL;
	for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		if (strcmp(s + nd, suffixes[i].text) == 0)
			break;
	}
	if (i == sizeof(suffixes) / sizeof(suffixes[0]))
		return -EINVAL;
	/*
	 * 128 bits and saturation at 2^64 keep the oracle itself overflow-free:
	 * at most 2^64 x 2^40 after the suffix.
	 */
	for (size_t d = 0; d < nd; d++) {
		v = v * 10 + (unsigned)(s[d] - '0');
		if (v > UINT64_MAX)
			v = (unsigned __int128)UINT64_MAX + 1;
	}
	if (v == 0)
		return -EINVAL;
	v <<= suffixes[i].shift;
	for (unsigned e = 0; e < suffixes[i].exp10; e++)
		v *= 10;
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

static void check_format(uint64_t bytes)
{
	char full[64];

	placefs_size_format(bytes, full, sizeof(full));
	FUZZ_CHECK(memchr(full, '\0', sizeof(full)) != NULL);
	FUZZ_CHECK(full[0] >= '0' && full[0] <= '9');
	FUZZ_CHECK(strchr(full, ' ') != NULL && strchr(full, 'B') != NULL);
	/* A short buffer gets a truncated, terminated prefix and nothing past its end. */
	for (size_t len = 1; len <= strlen(full) + 1; len++) {
		char *buf = malloc(len);

		FUZZ_CHECK(buf != NULL);
		placefs_size_format(bytes, buf, len);
		FUZZ_CHECK(memchr(buf, '\0', len) != NULL);
		FUZZ_CHECK(strncmp(buf, full, len - 1) == 0);
		free(buf);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	char *text = fuzz_strdup(data, len);
	struct placefs_error err;
	uint64_t got = 0, want = 0;
	int rc, orc;

	placefs_error_clear(&err);
	rc = placefs_size_parse(text, "FUZZ_SIZE", &got, &err);
	orc = oracle(text, &want);
	FUZZ_CHECK(rc == orc);
	if (rc) {
		fuzz_check_error(&err, rc);
		FUZZ_CHECK(err.kind == PLACEFS_E_LIMIT);
		FUZZ_CHECK(strstr(err.msg, "FUZZ_SIZE") != NULL);
	} else {
		FUZZ_CHECK(err.code == 0);
		FUZZ_CHECK(got > 0);
		FUZZ_CHECK(got == want);
		check_format(got);
	}
	/* Formatting must cope with any 64-bit value, not only parsed ones. */
	if (len >= 8) {
		uint64_t raw;

		memcpy(&raw, data, sizeof(raw));
		check_format(raw);
	}
	free(text);
	return 0;
}
