/* SPDX-License-Identifier: MIT */
#include "config.h"

/*
 * Fuzz target: model.safetensors.index.json text through
 * placefs_index_parse(). An index that parses must be sorted and
 * self-consistent, and every shard path must be safe to join to the
 * checkpoint directory (checked here independently of lib/format/index.c).
 */

#include <stdbool.h>

#include "fuzz.h"
#include "format/index.h"

/* The shard path rule of lib/format/index.h, written again from the contract. */
static bool shard_path_ok(const char *p)
{
	const char *c = p;

	if (!*p || p[0] == '/' || p[strlen(p) - 1] == '/')
		return false;
	for (const unsigned char *u = (const unsigned char *)p; *u; u++) {
		if (*u < 0x20 || *u == 0x7f)
			return false;
	}
	for (;;) {
		size_t n = strcspn(c, "/");

		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!c[n])
			return true;
		c += n + 1;
	}
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void check_index(const struct placefs_index *idx)
{
	size_t count = placefs_index_count(idx);
	size_t nshards = placefs_index_shard_count(idx);
	const char **shards;
	bool *used;

	FUZZ_CHECK(nshards <= count);
	FUZZ_CHECK((nshards == 0) == (count == 0));
	shards = malloc((nshards + 1) * sizeof(*shards));
	used = calloc(nshards + 1, sizeof(*used));
	FUZZ_CHECK(shards != NULL && used != NULL);
	for (size_t i = 0; i < nshards; i++) {
		shards[i] = placefs_index_shard(idx, i);
		FUZZ_CHECK(shards[i] != NULL);
		FUZZ_CHECK(shard_path_ok(shards[i]));
		/* Distinct and sorted by name. */
		if (i)
			FUZZ_CHECK(strcmp(shards[i - 1], shards[i]) < 0);
	}
	for (size_t i = 0; i < count; i++) {
		const char *name = placefs_index_name(idx, i);
		const char *shard = placefs_index_shard_of(idx, i);
		const char *found;
		const char **slot;

		FUZZ_CHECK(name != NULL && shard != NULL);
		/* Sorted by tensor name, and unique because duplicate keys are refused. */
		if (i)
			FUZZ_CHECK(strcmp(placefs_index_name(idx, i - 1), name) < 0);
		found = placefs_index_lookup(idx, name);
		FUZZ_CHECK(found != NULL && strcmp(found, shard) == 0);
		slot = bsearch(&shard, shards, nshards, sizeof(*shards), str_cmp);
		FUZZ_CHECK(slot != NULL);
		used[slot - shards] = true;
	}
	/* The shard list holds only shards some tensor maps to. */
	for (size_t i = 0; i < nshards; i++)
		FUZZ_CHECK(used[i]);
	free(used);
	free(shards);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct placefs_index *idx = (struct placefs_index *)&idx; /* must be reset */
	struct placefs_error err;
	int rc;

	placefs_error_clear(&err);
	/* The text is not NUL-terminated: ASan catches a parser that reads past len. */
	rc = placefs_index_parse("fuzz.index.json", (const char *)data, len, &idx, &err);
	if (rc) {
		fuzz_check_error(&err, rc);
		FUZZ_CHECK(err.kind == PLACEFS_E_INDEX || err.kind == PLACEFS_E_NOMEM);
		FUZZ_CHECK(idx == NULL);
		return 0;
	}
	FUZZ_CHECK(err.code == 0);
	FUZZ_CHECK(idx != NULL);
	check_index(idx);
	placefs_index_free(idx);
	return 0;
}
