/* SPDX-License-Identifier: MIT */
#include "config.h"

/*
 * Fuzz target: a whole safetensors file image through placefs_st_parse_buffer().
 * A header that parses must describe the file exactly: tensors sorted by
 * offset, contiguous from the start of the data buffer to the end of the
 * file, each size equal to shape x dtype width, names unique.
 */

#include <stdbool.h>

#include "common/dtype.h"
#include "fuzz.h"
#include "format/safetensors.h"

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names (or metadata keys) must be unique: duplicate keys are refused. */
static void check_unique(const char **names, size_t n)
{
	qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 1; i < n; i++)
		FUZZ_CHECK(strcmp(names[i - 1], names[i]) != 0);
}

static void check_tensor(const struct placefs_st_tensor *t, uint64_t n, uint64_t data_start,
                         uint64_t len)
{
	unsigned bits = placefs_dtype_bits(t->dtype);
	uint64_t elems = 1, nbits, end;
	bool ovf = false;

	FUZZ_CHECK(t->name != NULL);
	/* A name comes from the header, so it cannot be longer than the header. */
	FUZZ_CHECK(strnlen(t->name, (size_t)n + 1) <= n);
	FUZZ_CHECK(strcmp(t->name, "__metadata__") != 0);
	FUZZ_CHECK(t->dtype > PLACEFS_DT_INVALID && t->dtype < PLACEFS_DT_COUNT);
	FUZZ_CHECK(bits != 0);
	FUZZ_CHECK((t->ndim == 0) == (t->shape == NULL));
	FUZZ_CHECK(t->begin <= t->end);
	FUZZ_CHECK(t->nbytes == t->end - t->begin);
	FUZZ_CHECK(t->offset == data_start + t->begin);
	FUZZ_CHECK(!__builtin_add_overflow(t->offset, t->nbytes, &end));
	FUZZ_CHECK(end <= len);
	for (uint32_t d = 0; d < t->ndim; d++)
		ovf |= __builtin_mul_overflow(elems, t->shape[d], &elems);
	FUZZ_CHECK(!ovf);
	FUZZ_CHECK(!__builtin_mul_overflow(elems, (uint64_t)bits, &nbits));
	FUZZ_CHECK(nbits % 8 == 0);
	FUZZ_CHECK(nbits / 8 == t->nbytes);
}

static void check_header(const struct placefs_st_header *h, uint64_t len)
{
	uint64_t n = placefs_st_header_json_len(h);
	uint64_t data_start = placefs_st_header_data_start(h);
	size_t count = placefs_st_header_tensor_count(h);
	size_t nmeta = placefs_st_header_meta_count(h);
	uint64_t next = 0;
	const char **names;

	FUZZ_CHECK(n <= PLACEFS_ST_HEADER_MAX);
	FUZZ_CHECK(data_start == 8 + n);
	FUZZ_CHECK(data_start <= len);
	FUZZ_CHECK(placefs_st_header_tensor(h, count) == NULL);

	names = malloc((count + nmeta + 1) * sizeof(*names));
	FUZZ_CHECK(names != NULL);
	for (size_t i = 0; i < count; i++) {
		const struct placefs_st_tensor *t = placefs_st_header_tensor(h, i);

		FUZZ_CHECK(t != NULL);
		check_tensor(t, n, data_start, len);
		/* Sorted by offset and contiguous: each begins where the last ended. */
		FUZZ_CHECK(t->begin == next);
		next = t->end;
		names[i] = t->name;
	}
	/* The data buffer is covered exactly, to the last byte of the file. */
	FUZZ_CHECK(data_start + next == len);
	check_unique(names, count);

	FUZZ_CHECK(placefs_st_header_has_meta(h) == 0 || placefs_st_header_has_meta(h) == 1);
	if (!placefs_st_header_has_meta(h))
		FUZZ_CHECK(nmeta == 0);
	FUZZ_CHECK(placefs_st_header_meta(h, nmeta) == NULL);
	for (size_t i = 0; i < nmeta; i++) {
		const struct placefs_st_meta *m = placefs_st_header_meta(h, i);

		FUZZ_CHECK(m != NULL && m->key != NULL && m->value != NULL);
		FUZZ_CHECK(strnlen(m->key, (size_t)n + 1) <= n);
		FUZZ_CHECK(strnlen(m->value, (size_t)n + 1) <= n);
		names[i] = m->key;
	}
	check_unique(names, nmeta);
	free(names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct placefs_st_header *h = (struct placefs_st_header *)&h; /* must be reset */
	struct placefs_error err;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_st_parse_buffer("fuzz.safetensors", data, len, &h, &err);
	if (rc) {
		fuzz_check_error(&err, rc);
		FUZZ_CHECK(err.kind == PLACEFS_E_FORMAT || err.kind == PLACEFS_E_NOMEM);
		FUZZ_CHECK(h == NULL);
		return 0;
	}
	FUZZ_CHECK(err.code == 0);
	FUZZ_CHECK(h != NULL);
	check_header(h, len);
	placefs_st_header_free(h);
	return 0;
}
