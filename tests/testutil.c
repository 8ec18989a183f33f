/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

int tu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

char *tu_mkdtemp(void)
{
	const char *tmp = getenv("TMPDIR");
	char *p;

	if (!tmp || !*tmp)
		tmp = "/tmp";
	ck_assert(asprintf(&p, "%s/placefs-test.XXXXXX", tmp) > 0);
	ck_assert_ptr_nonnull(mkdtemp(p));
	return p;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void tu_rmtree(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *tu_path(const char *dir, const char *name)
{
	char *p;

	ck_assert(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

void tu_write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	const char *p = data;

	ck_assert_msg(fd >= 0, "open %s", path);
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		ck_assert_msg(n > 0, "write %s", path);
		p += n;
		len -= (size_t)n;
	}
	ck_assert_int_eq(close(fd), 0);
}

void tu_write_text(const char *path, const char *text)
{
	tu_write_file(path, text, strlen(text));
}

uint8_t *tu_st_image(const char *json, uint64_t data_len, size_t *len)
{
	size_t n = strlen(json);
	size_t total = 8 + n + (size_t)data_len;
	uint8_t *buf = malloc(total ? total : 1);

	ck_assert_ptr_nonnull(buf);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(buf + 8, json, n);
	for (uint64_t i = 0; i < data_len; i++)
		buf[8 + n + i] = (uint8_t)(i * 31 + 7);
	*len = total;
	return buf;
}

void tu_st_write(const char *path, const char *json, uint64_t data_len)
{
	size_t len;
	uint8_t *buf = tu_st_image(json, data_len, &len);

	tu_write_file(path, buf, len);
	free(buf);
}

uint8_t *tu_read_file(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t *buf;
	size_t got = 0;

	ck_assert_msg(fd >= 0, "open %s", path);
	ck_assert_int_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	ck_assert_ptr_nonnull(buf);
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		ck_assert(n > 0);
		got += (size_t)n;
	}
	close(fd);
	*len = got;
	return buf;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t tu_list_dir(const char *dir, const char *suffix, char ***out)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, sl = strlen(suffix);

	ck_assert_msg(d != NULL, "cannot open %s", dir);
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);

		if (l <= sl || strcmp(e->d_name + l - sl, suffix) != 0)
			continue;
		names = realloc(names, (n + 1) * sizeof(*names));
		ck_assert_ptr_nonnull(names);
		names[n] = strdup(e->d_name);
		ck_assert_ptr_nonnull(names[n]);
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), name_cmp);
	*out = names;
	return n;
}

/* A corpus's EXPECTED.tsv: the fragment each bad file's message must hold. */
struct expect {
	char *buf; /* the file's text, cut into the lines below */
	size_t n;
	char *file[256];
	char *frag[256];
};

static void expect_load(struct expect *ex, const char *dir)
{
	char *path = tu_path(dir, "EXPECTED.tsv");
	size_t len;
	char *line;

	ex->buf = (char *)tu_read_file(path, &len);
	ex->buf[len] = '\0';
	ex->n = 0;
	for (line = strtok(ex->buf, "\n"); line; line = strtok(NULL, "\n")) {
		char *tab = strchr(line, '\t');

		if (line[0] == '#')
			continue;
		ck_assert_msg(tab != NULL, "EXPECTED.tsv: bad line %s", line);
		ck_assert_uint_lt(ex->n, 256);
		*tab = '\0';
		ex->file[ex->n] = line;
		ex->frag[ex->n] = tab + 1;
		ex->n++;
	}
	free(path);
}

/* The fragment for file; fails the test when the file has no line. */
static const char *expect_for(const struct expect *ex, const char *file)
{
	for (size_t i = 0; i < ex->n; i++) {
		if (strcmp(ex->file[i], file) == 0)
			return ex->frag[i];
	}
	ck_abort_msg("%s has no line in EXPECTED.tsv", file);
	return NULL;
}

size_t tu_corpus_replay(const char *dir, const char *suffix, size_t min, enum tu_corpus_want want,
                        tu_corpus_parse_fn parse, void *ctx)
{
	char **names;
	size_t n = tu_list_dir(dir, suffix, &names);
	struct expect ex = {0};

	ck_assert_msg(n >= min, "%s: %zu files, expected at least %zu", dir, n, min);
	if (want == TU_CORPUS_BAD) {
		expect_load(&ex, dir);
		ck_assert_uint_eq(ex.n, n);
	}
	for (size_t i = 0; i < n; i++) {
		const char *name = names[i];
		char *path = tu_path(dir, name);
		struct placefs_error err;
		int rc;

		placefs_error_clear(&err);
		rc = parse(path, name, &err, ctx);
		if (want == TU_CORPUS_GOOD) {
			ck_assert_msg(rc == 0, "%s was refused: %s", name, err.msg);
		} else {
			const char *frag = expect_for(&ex, name);
			size_t nl = strlen(name);

			ck_assert_msg(rc < 0, "%s was accepted", name);
			ck_assert_msg(strncmp(err.msg, name, nl) == 0 && err.msg[nl] == ':',
			              "%s: message does not name the file: %s", name, err.msg);
			ck_assert_msg(strstr(err.msg, frag), "%s: refused for another reason: %s",
			              name, err.msg);
		}
		free(path);
		free(names[i]);
	}
	free(names);
	free(ex.buf);
	return n;
}

struct placefs_device tu_device(const char *spec)
{
	struct placefs_device d = {PLACEFS_DEVICE_NONE, -1};
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_device_parse(spec, &d, &err) == 0, "%s", err.msg);
	return d;
}
