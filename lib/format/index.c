/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/index.h"
#include "common/io.h"
#include "format/jsonstrict_i.h"

struct idx_entry {
	const char *name;
	const char *shard; /* points into the distinct shard list's strings */
};

struct placefs_index {
	struct idx_entry *entries;
	size_t count;
	const char **shards;
	size_t nshards;
	char *strings;
};

static int idx_fail(struct placefs_error *err, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static int idx_fail(struct placefs_error *err, const char *fmt, ...)
{
	char msg[PLACEFS_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return placefs_error_set(err, -EINVAL, PLACEFS_E_INDEX, "%s", msg);
}

/*
 * Why a shard path is unsafe, or NULL. Shard paths are joined to the
 * checkpoint directory, so they must stay inside it by construction.
 */
static const char *shard_path_problem(const char *p)
{
	const char *c;
	size_t plen = strlen(p);

	if (plen == 0)
		return "is empty";
	if (p[0] == '/')
		return "is absolute (shard paths must be relative to the index)";
	for (const unsigned char *u = (const unsigned char *)p; *u; u++) {
		if (*u < 0x20 || *u == 0x7f)
			return "contains a control character";
	}
	if (p[plen - 1] == '/')
		return "ends with '/'";
	c = p;
	for (;;) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);

		if (n == 0)
			return "has an empty component (\"//\")";
		if (n == 1 && c[0] == '.')
			return "has a \".\" component";
		if (n == 2 && c[0] == '.' && c[1] == '.')
			return "has a \"..\" component";
		if (!slash)
			break;
		c = slash + 1;
	}
	return NULL;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct idx_entry *)a)->name, ((const struct idx_entry *)b)->name);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int placefs_index_parse(const char *file, const char *text, size_t len, struct placefs_index **out,
                        struct placefs_error *err)
{
	struct placefs_json *js = NULL;
	struct placefs_index *idx = NULL;
	const cJSON *root, *wm = NULL, *meta = NULL;
	const char **tmp = NULL;
	char q[PLACEFS_JSON_QUOTE_MAX], q2[PLACEFS_JSON_QUOTE_MAX];
	size_t n = 0, nstr = 0;
	char *sp;
	int rc;

	if (!file)
		file = "(unknown)";
	*out = NULL;
	if (len > PLACEFS_INDEX_MAX)
		return placefs_error_set(
		        err, -EFBIG, PLACEFS_E_INDEX,
		        "%s: the index is %zu bytes, larger than the limit of %llu", file, len,
		        PLACEFS_INDEX_MAX);
	rc = placefs_json_parse(file, text, len, PLACEFS_E_INDEX, &js, err);
	if (rc)
		return rc;
	root = placefs_json_root(js);
	/* Keys are unique (jsonstrict checked), so the first match is the only one. */
	for (const cJSON *m = root->child; m; m = m->next) {
		if (strcmp(m->string, "weight_map") == 0)
			wm = m;
		else if (strcmp(m->string, "metadata") == 0)
			meta = m;
	}
	if (meta && !cJSON_IsNull(meta) && !cJSON_IsObject(meta)) {
		rc = idx_fail(err, "%s: \"metadata\" is %s; it must be an object or null", file,
		              placefs_json_type_name(meta));
		goto fail;
	}
	if (!wm) {
		rc = idx_fail(err, "%s: no \"weight_map\" (it is required)", file);
		goto fail;
	}
	if (!cJSON_IsObject(wm)) {
		rc = idx_fail(err,
		              "%s: \"weight_map\" is %s; it must be an object mapping tensor names "
		              "to shard paths",
		              file, placefs_json_type_name(wm));
		goto fail;
	}
	for (const cJSON *m = wm->child; m; m = m->next) {
		const char *why;

		placefs_json_quote(q, sizeof(q), m->string);
		if (!cJSON_IsString(m)) {
			rc = idx_fail(err,
			              "%s: weight_map: tensor %s: the shard is %s, not a string",
			              file, q, placefs_json_type_name(m));
			goto fail;
		}
		why = shard_path_problem(m->valuestring);
		if (why) {
			rc = idx_fail(err, "%s: weight_map: tensor %s: shard path %s %s", file, q,
			              placefs_json_quote(q2, sizeof(q2), m->valuestring), why);
			goto fail;
		}
		n++;
		nstr += strlen(m->string) + 1 + strlen(m->valuestring) + 1;
	}

	idx = calloc(1, sizeof(*idx));
	if (!idx)
		goto nomem;
	idx->entries = calloc(n ? n : 1, sizeof(*idx->entries));
	idx->shards = calloc(n ? n : 1, sizeof(*idx->shards));
	idx->strings = malloc(nstr ? nstr : 1);
	tmp = calloc(n ? n : 1, sizeof(*tmp));
	if (!idx->entries || !idx->shards || !idx->strings || !tmp)
		goto nomem;

	/* Distinct shards: sort the paths, keep the first of each run. */
	n = 0;
	for (const cJSON *m = wm->child; m; m = m->next)
		tmp[n++] = m->valuestring;
	qsort(tmp, n, sizeof(*tmp), str_cmp);
	sp = idx->strings;
	for (size_t i = 0; i < n; i++) {
		size_t l;

		if (i && strcmp(tmp[i - 1], tmp[i]) == 0)
			continue;
		l = strlen(tmp[i]) + 1;
		memcpy(sp, tmp[i], l);
		idx->shards[idx->nshards++] = sp;
		sp += l;
	}
	for (const cJSON *m = wm->child; m; m = m->next) {
		struct idx_entry *e = &idx->entries[idx->count++];
		const char *key = m->valuestring;
		const char **hit;
		size_t l = strlen(m->string) + 1;

		memcpy(sp, m->string, l);
		e->name = sp;
		sp += l;
		hit = bsearch(&key, idx->shards, idx->nshards, sizeof(*idx->shards), str_cmp);
		/* Always found: the list was built from these very values. */
		e->shard = hit ? *hit : NULL;
	}
	qsort(idx->entries, idx->count, sizeof(*idx->entries), entry_cmp);
	free(tmp);
	placefs_json_free(js);
	*out = idx;
	return 0;

nomem:
	rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory reading the index",
	                       file);
fail:
	free(tmp);
	placefs_index_free(idx);
	placefs_json_free(js);
	return rc;
}

int placefs_index_load(const char *path, const char *file, struct placefs_index **out,
                       struct placefs_error *err)
{
	struct stat st;
	char *buf = NULL;
	ssize_t got;
	int fd, rc;

	if (!file)
		file = path;
	*out = NULL;
	/*
	 * O_NONBLOCK: a FIFO (or a device) posing as the index must not hang the
	 * open; it is refused below as not a regular file. Links are followed
	 * (a Hugging Face snapshot's index is one).
	 */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return placefs_error_set(err, -errno, PLACEFS_E_IO, "%s: cannot open the index: %s",
		                         file, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "%s: cannot stat the index: %s",
		                       file, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = idx_fail(err, "%s: the index is not a regular file", file);
		goto out;
	}
	/* Regular files ignore O_NONBLOCK; clear it anyway for plain blocking reads. */
	if (fcntl(fd, F_SETFL, 0) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "%s: cannot use the index: %s",
		                       file, strerror(errno));
		goto out;
	}
	/* Refused before any allocation: the size comes from an untrusted file. */
	if ((uint64_t)st.st_size > PLACEFS_INDEX_MAX) {
		rc = placefs_error_set(err, -EFBIG, PLACEFS_E_INDEX,
		                       "%s: the index is %" PRIu64
		                       " bytes, larger than the limit of %llu",
		                       file, (uint64_t)st.st_size, PLACEFS_INDEX_MAX);
		goto out;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM,
		                       "%s: out of memory reading the index", file);
		goto out;
	}
	got = placefs_io_read_full(fd, buf, (size_t)st.st_size);
	if (got < 0) {
		rc = placefs_error_set(err, (int)got, PLACEFS_E_IO, "%s: cannot read the index: %s",
		                       file, strerror((int)-got));
		goto out;
	}
	if ((size_t)got < (size_t)st.st_size) {
		rc = placefs_error_set(err, -EIO, PLACEFS_E_IO,
		                       "%s: the index shrank while being read", file);
		goto out;
	}
	rc = placefs_index_parse(file, buf, (size_t)got, out, err);
out:
	free(buf);
	close(fd);
	return rc;
}

void placefs_index_free(struct placefs_index *idx)
{
	if (!idx)
		return;
	free(idx->entries);
	free(idx->shards);
	free(idx->strings);
	free(idx);
}

size_t placefs_index_count(const struct placefs_index *idx)
{
	return idx->count;
}

const char *placefs_index_name(const struct placefs_index *idx, size_t i)
{
	return i < idx->count ? idx->entries[i].name : NULL;
}

const char *placefs_index_shard_of(const struct placefs_index *idx, size_t i)
{
	return i < idx->count ? idx->entries[i].shard : NULL;
}

const char *placefs_index_lookup(const struct placefs_index *idx, const char *name)
{
	struct idx_entry key = {.name = name};
	const struct idx_entry *hit;

	if (!idx || !name)
		return NULL;
	hit = bsearch(&key, idx->entries, idx->count, sizeof(*idx->entries), entry_cmp);
	return hit ? hit->shard : NULL;
}

size_t placefs_index_shard_count(const struct placefs_index *idx)
{
	return idx->nshards;
}

const char *placefs_index_shard(const struct placefs_index *idx, size_t i)
{
	return i < idx->nshards ? idx->shards[i] : NULL;
}
