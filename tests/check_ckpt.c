/* SPDX-License-Identifier: MIT */
/* Unit tests for lib/model/ckpt.c: sources, shards, the index rules and change detection. */
#include "config.h"

#include <check.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model/ckpt.h"
#include "common/strbuf.h"
#include "format/stwrite.h"
#include "testutil.h"

static char *tmpdir;

static void setup(void)
{
	char *raw = tu_mkdtemp();

	/* Canonical, so that paths compare equal whatever TMPDIR looks like. */
	tmpdir = realpath(raw, NULL);
	ck_assert_ptr_nonnull(tmpdir);
	free(raw);
}

static void teardown(void)
{
	tu_rmtree(tmpdir);
	free(tmpdir);
	tmpdir = NULL;
}

/* A path under the test directory (malloc'd). */
static char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *at(const char *fmt, ...)
{
	char *rel, *p;
	va_list ap;

	va_start(ap, fmt);
	ck_assert(vasprintf(&rel, fmt, ap) > 0);
	va_end(ap);
	p = tu_path(tmpdir, rel);
	free(rel);
	return p;
}

/*
 * Writes a safetensors file at `path` holding F32 tensors given as
 * (name, element count) pairs ending with NULL, in that offset order.
 */
static void mk(const char *path, ...)
{
	struct placefs_stwrite_tensor t[16];
	uint64_t shapes[16];
	struct placefs_error err;
	const char *name;
	size_t n = 0;
	va_list ap;

	va_start(ap, path);
	while ((name = va_arg(ap, const char *)) != NULL) {
		ck_assert_uint_lt(n, 16);
		shapes[n] = va_arg(ap, unsigned);
		t[n].name = name;
		t[n].dtype = PLACEFS_DT_F32;
		t[n].ndim = 1;
		t[n].shape = &shapes[n];
		n++;
	}
	va_end(ap);
	placefs_error_clear(&err);
	ck_assert_msg(placefs_stwrite_file(path, t, n, NULL, 0, 1, &err) == 0, "%s", err.msg);
}

static void mkdir_at(const char *rel)
{
	char *p = at("%s", rel);

	ck_assert_int_eq(mkdir(p, 0755), 0);
	free(p);
}

static void text_at(const char *rel, const char *text)
{
	char *p = at("%s", rel);

	tu_write_text(p, text);
	free(p);
}

/* The absolute offset of the data buffer of a file: 8 + N. */
static uint64_t data_start(const char *path)
{
	uint8_t b[8];
	uint64_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, b, 8, 0), 8);
	close(fd);
	for (int i = 7; i >= 0; i--)
		n = (n << 8) | b[i];
	return 8 + n;
}

/* Opens a source expecting failure; returns the error for inspection. */
static struct placefs_error open_fails(const char *source, const char *index, int code,
                                       enum placefs_errkind kind)
{
	struct placefs_ckpt *ck = (struct placefs_ckpt *)&ck;
	struct placefs_error err;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_ckpt_open(source, index, &ck, &err);
	ck_assert_msg(rc == code, "open %s: got %d (%s), want %d", source, rc, err.msg, code);
	ck_assert_msg(err.kind == kind, "open %s: kind %s (%s), want %s", source,
	              placefs_errkind_name(err.kind), err.msg, placefs_errkind_name(kind));
	ck_assert_ptr_null(ck);
	return err;
}

static struct placefs_ckpt *open_ok(const char *source, const char *index)
{
	struct placefs_ckpt *ck = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_ckpt_open(source, index, &ck, &err) == 0, "open %s: %s", source,
	              err.msg);
	ck_assert_ptr_nonnull(ck);
	return ck;
}

static void assert_tensor(const struct placefs_ckpt *ck, size_t i, const char *name, uint32_t shard,
                          uint64_t nbytes, uint64_t offset)
{
	const struct placefs_tensor *t = &placefs_ckpt_tensors(ck)[i];

	ck_assert_uint_lt(i, placefs_ckpt_tensor_count(ck));
	ck_assert_str_eq(t->name, name);
	ck_assert_uint_eq(t->shard, shard);
	ck_assert_str_eq(t->file, placefs_ckpt_shard(ck, shard)->file);
	ck_assert_uint_eq(t->nbytes, nbytes);
	ck_assert_uint_eq(t->offset, offset);
}

/* A single .safetensors file is one shard: dir = its directory, file = its name. */
START_TEST(test_single_file)
{
	char *path = at("one.safetensors");
	struct placefs_ckpt *ck;
	const struct placefs_shard *sh;
	const struct placefs_tensor *t;
	struct stat st;
	uint64_t ds;

	mk(path, "a", 1u, "b", 3u, NULL);
	ds = data_start(path);
	ck = open_ok(path, NULL);
	ck_assert_str_eq(placefs_ckpt_source(ck), path);
	ck_assert_str_eq(placefs_ckpt_dir(ck), tmpdir);
	ck_assert_ptr_null(placefs_ckpt_index(ck));
	ck_assert_uint_eq(placefs_ckpt_shard_count(ck), 1);
	sh = placefs_ckpt_shard(ck, 0);
	ck_assert_str_eq(sh->file, "one.safetensors");
	ck_assert_str_eq(sh->path, path);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(sh->dev, st.st_dev);
	ck_assert_uint_eq(sh->ino, st.st_ino);
	ck_assert_uint_eq(sh->size, (uint64_t)st.st_size);
	ck_assert(S_ISREG(sh->mode));
	ck_assert_int_eq(sh->mtime.tv_sec, st.st_mtim.tv_sec);
	ck_assert_int_eq(sh->mtime.tv_nsec, st.st_mtim.tv_nsec);
	ck_assert_int_ge(sh->fd, 0);
	ck_assert_int_eq(fcntl(sh->fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ck_assert_int_eq(fcntl(sh->fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	ck_assert_ptr_nonnull(sh->header);
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), 2);
	assert_tensor(ck, 0, "a", 0, 4, ds);
	assert_tensor(ck, 1, "b", 0, 12, ds + 4);
	t = placefs_ckpt_tensors(ck);
	ck_assert_int_eq(t[1].dtype, PLACEFS_DT_F32);
	ck_assert_uint_eq(t[1].ndim, 1);
	ck_assert_uint_eq(t[1].shape[0], 3);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	placefs_ckpt_free(ck);
	free(path);
}
END_TEST

/* A relative source is made absolute, so shard paths survive a change of directory. */
START_TEST(test_relative_source)
{
	char *path = at("rel.safetensors");
	char *cwd = getcwd(NULL, 0);
	char *here;
	struct placefs_ckpt *ck, *ck2;

	mk(path, "w", 2u, NULL);
	ck_assert_int_eq(chdir(tmpdir), 0);
	here = getcwd(NULL, 0);
	ck = open_ok("./rel.safetensors", NULL);
	ck2 = open_ok(".", NULL);
	ck_assert_int_eq(chdir(cwd), 0);
	ck_assert_str_eq(placefs_ckpt_source(ck), "./rel.safetensors");
	ck_assert_str_eq(placefs_ckpt_dir(ck), here);
	ck_assert_str_eq(placefs_ckpt_dir(ck2), here);
	ck_assert_str_eq(placefs_ckpt_shard(ck2, 0)->file, "rel.safetensors");
	/* Checked from another working directory: still the same file. */
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck2, 0, NULL), 0);
	placefs_ckpt_free(ck2);
	placefs_ckpt_free(ck);
	free(here);
	free(cwd);
	free(path);
}
END_TEST

/* Without an index, every *.safetensors file, sorted by name; other entries are skipped. */
START_TEST(test_dir_without_index)
{
	char *b = at("b.safetensors"), *a = at("a.safetensors"), *h = at(".hidden.safetensors");
	struct placefs_ckpt *ck;
	uint64_t da, db;

	mk(b, "x", 1u, "y", 2u, NULL);
	mk(a, "z", 5u, NULL);
	tu_write_text(h, "not even safetensors");
	text_at("notes.txt", "hello");
	text_at("model.safetensors.bak", "junk");
	mkdir_at("dir.safetensors");
	da = data_start(a);
	db = data_start(b);
	ck = open_ok(tmpdir, NULL);
	ck_assert_ptr_null(placefs_ckpt_index(ck));
	ck_assert_uint_eq(placefs_ckpt_shard_count(ck), 2);
	ck_assert_str_eq(placefs_ckpt_shard(ck, 0)->file, "a.safetensors");
	ck_assert_str_eq(placefs_ckpt_shard(ck, 1)->file, "b.safetensors");
	ck_assert_str_eq(placefs_ckpt_shard(ck, 1)->path, b);
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), 3);
	assert_tensor(ck, 0, "z", 0, 20, da);
	assert_tensor(ck, 1, "x", 1, 4, db);
	assert_tensor(ck, 2, "y", 1, 8, db + 4);
	placefs_ckpt_free(ck);
	free(h);
	free(a);
	free(b);
}
END_TEST

/* With model.safetensors.index.json, the shards are its weight_map values only. */
START_TEST(test_dir_with_index)
{
	char *s1 = at("model-00001-of-00002.safetensors"),
	     *s2 = at("model-00002-of-00002.safetensors");
	struct placefs_ckpt *ck;
	uint64_t d1, d2;

	mk(s1, "a", 1u, "b", 2u, NULL);
	mk(s2, "c", 3u, NULL);
	/* Not in the index, and not even valid: it must not be opened. */
	text_at("consolidated.safetensors", "garbage");
	text_at("model.safetensors.index.json", "{\"metadata\":{\"total_size\":24},\"weight_map\":{"
	                                        "\"c\":\"model-00002-of-00002.safetensors\","
	                                        "\"a\":\"model-00001-of-00002.safetensors\","
	                                        "\"b\":\"model-00001-of-00002.safetensors\"}}");
	d1 = data_start(s1);
	d2 = data_start(s2);
	ck = open_ok(tmpdir, NULL);
	ck_assert_str_eq(placefs_ckpt_index(ck), "model.safetensors.index.json");
	ck_assert_uint_eq(placefs_ckpt_shard_count(ck), 2);
	ck_assert_str_eq(placefs_ckpt_shard(ck, 0)->file, "model-00001-of-00002.safetensors");
	ck_assert_str_eq(placefs_ckpt_shard(ck, 1)->file, "model-00002-of-00002.safetensors");
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), 3);
	assert_tensor(ck, 0, "a", 0, 4, d1);
	assert_tensor(ck, 1, "b", 0, 8, d1 + 4);
	assert_tensor(ck, 2, "c", 1, 12, d2);
	placefs_ckpt_free(ck);
	free(s2);
	free(s1);
}
END_TEST

/*
 * The seed's overlay case: shard 1 holds a (4 B) and a stale b, shard 2 the
 * real b (12 B); the index maps a -> 1, b -> 2. Only shard 2's b survives,
 * in checkpoint order a then b, with sizes [4, 12].
 */
START_TEST(test_overlay_mapped_shard_wins)
{
	char *s1 = at("model-00001-of-00002.safetensors"),
	     *s2 = at("model-00002-of-00002.safetensors");
	struct placefs_ckpt *ck;
	uint64_t d1, d2;

	mk(s1, "a", 1u, "b", 2u, "unmapped", 1u, NULL);
	mk(s2, "b", 3u, NULL);
	text_at("model.safetensors.index.json",
	        "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	        "\"b\":\"model-00002-of-00002.safetensors\"}}");
	d1 = data_start(s1);
	d2 = data_start(s2);
	ck = open_ok(tmpdir, NULL);
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), 2);
	assert_tensor(ck, 0, "a", 0, 4, d1 + 0);
	assert_tensor(ck, 1, "b", 1, 12, d2 + 0);
	placefs_ckpt_free(ck);
	free(s2);
	free(s1);
}
END_TEST

/* An explicit index, relative to the source directory or absolute, wins over the default. */
START_TEST(test_index_given_explicitly)
{
	char *s1 = at("ck/s1.safetensors");
	char *dir = at("ck");
	char *elsewhere = at("other.index.json");
	struct placefs_ckpt *ck;

	mkdir_at("ck");
	mkdir_at("ck/meta");
	mk(s1, "a", 1u, "b", 1u, NULL);
	/* The default index is broken: maps to a missing shard. */
	text_at("ck/model.safetensors.index.json",
	        "{\"weight_map\":{\"a\":\"missing.safetensors\"}}");
	text_at("ck/meta/idx.json", "{\"weight_map\":{\"a\":\"s1.safetensors\"}}");
	text_at("other.index.json", "{\"weight_map\":{\"b\":\"s1.safetensors\"}}");

	ck = open_ok(dir, "meta/idx.json");
	ck_assert_str_eq(placefs_ckpt_index(ck), "meta/idx.json");
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), 1);
	ck_assert_str_eq(placefs_ckpt_tensors(ck)[0].name, "a");
	placefs_ckpt_free(ck);

	/* Absolute: shard paths still resolve against the source directory. */
	ck = open_ok(dir, elsewhere);
	ck_assert_str_eq(placefs_ckpt_index(ck), elsewhere);
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), 1);
	ck_assert_str_eq(placefs_ckpt_tensors(ck)[0].name, "b");
	placefs_ckpt_free(ck);

	/* And the default is used (and fails) when none is given. */
	open_fails(dir, NULL, -ENOENT, PLACEFS_E_INDEX);
	free(elsewhere);
	free(dir);
	free(s1);
}
END_TEST

/* An index with a file source is an error. */
START_TEST(test_index_with_file_source)
{
	char *path = at("f.safetensors");
	struct placefs_error err;

	mk(path, "a", 1u, NULL);
	err = open_fails(path, "model.safetensors.index.json", -EINVAL, PLACEFS_E_SOURCE);
	ck_assert_ptr_nonnull(strstr(err.msg, "f.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "index"));
	free(path);
}
END_TEST

/* A shard the index names that does not exist: the error names index and shard. */
START_TEST(test_missing_shard)
{
	char *s1 = at("model-00001-of-00002.safetensors");
	struct placefs_error err;

	mk(s1, "a", 1u, NULL);
	text_at("model.safetensors.index.json",
	        "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	        "\"b\":\"model-00002-of-00002.safetensors\"}}");
	err = open_fails(tmpdir, NULL, -ENOENT, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "model.safetensors.index.json"));
	ck_assert_ptr_nonnull(strstr(err.msg, "model-00002-of-00002.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "missing"));
	free(s1);
}
END_TEST

/* A mapped tensor absent from its mapped shard (even if present elsewhere) is an error. */
START_TEST(test_tensor_missing_from_mapped_shard)
{
	char *s1 = at("s1.safetensors"), *s2 = at("s2.safetensors");
	struct placefs_error err;

	mk(s1, "a", 1u, NULL);
	mk(s2, "b", 1u, "c", 1u, NULL);
	text_at("model.safetensors.index.json", "{\"weight_map\":{\"a\":\"s1.safetensors\","
	                                        "\"b\":\"s2.safetensors\","
	                                        "\"c\":\"s1.safetensors\"}}");
	err = open_fails(tmpdir, NULL, -EINVAL, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "\"c\""));
	ck_assert_ptr_nonnull(strstr(err.msg, "s1.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "model.safetensors.index.json"));
	free(s2);
	free(s1);
}
END_TEST

/* Shard paths that leave the source directory are refused before anything is opened. */
START_TEST(test_shard_path_escapes_refused)
{
	char *outside = at("outside.safetensors");

	mkdir_at("src");
	mk(outside, "a", 1u, NULL);
	text_at("src/abs.json", "{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
	text_at("src/up.json", "{\"weight_map\":{\"a\":\"../outside.safetensors\"}}");
	text_at("src/mid.json", "{\"weight_map\":{\"a\":\"x/../../outside.safetensors\"}}");
	char *src = at("src");
	struct placefs_error err;

	err = open_fails(src, "abs.json", -EINVAL, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "abs.json"));
	err = open_fails(src, "up.json", -EINVAL, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "up.json"));
	open_fails(src, "mid.json", -EINVAL, PLACEFS_E_INDEX);
	free(src);
	free(outside);
}
END_TEST

/* Without an index, a name in two files is refused naming both files. */
START_TEST(test_duplicate_across_files)
{
	char *a = at("a.safetensors"), *b = at("b.safetensors"), *c = at("c.safetensors");
	struct placefs_error err;

	mk(a, "only.a", 1u, "shared.w", 1u, NULL);
	mk(b, "only.b", 1u, NULL);
	mk(c, "shared.w", 2u, NULL);
	err = open_fails(tmpdir, NULL, -EINVAL, PLACEFS_E_DUP_SOURCE);
	ck_assert_ptr_nonnull(strstr(err.msg, "shared.w"));
	ck_assert_ptr_nonnull(strstr(err.msg, "a.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "c.safetensors"));
	ck_assert_ptr_null(strstr(err.msg, "b.safetensors"));
	free(c);
	free(b);
	free(a);
}
END_TEST

/* The Hugging Face cache layout: snapshot entries are symlinks into blobs/, followed. */
START_TEST(test_hf_cache_symlinks)
{
	char *blob = at("blobs/abc"), *blob2 = at("blobs/def"), *snap = at("snapshots/x");
	char *link = at("snapshots/x/model.safetensors");
	struct placefs_ckpt *ck;
	struct stat st;

	mkdir_at("blobs");
	mkdir_at("snapshots");
	mkdir_at("snapshots/x");
	mk(blob, "w", 4u, NULL);
	ck_assert_int_eq(symlink("../../blobs/abc", link), 0);
	ck = open_ok(snap, NULL);
	ck_assert_uint_eq(placefs_ckpt_shard_count(ck), 1);
	ck_assert_str_eq(placefs_ckpt_shard(ck, 0)->file, "model.safetensors");
	ck_assert_str_eq(placefs_ckpt_shard(ck, 0)->path, link);
	ck_assert_int_eq(stat(blob, &st), 0);
	ck_assert_uint_eq(placefs_ckpt_shard(ck, 0)->ino, st.st_ino);
	assert_tensor(ck, 0, "w", 0, 16, data_start(blob));
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	placefs_ckpt_free(ck);

	/* The link itself as a file source. */
	ck = open_ok(link, NULL);
	ck_assert_str_eq(placefs_ckpt_shard(ck, 0)->file, "model.safetensors");
	placefs_ckpt_free(ck);

	/* Sharded, with the index a link too. */
	char *s2 = at("snapshots/x/model-00002.safetensors");
	char *idx = at("snapshots/x/model.safetensors.index.json");
	text_at("blobs/idx", "{\"weight_map\":{\"w\":\"model.safetensors\","
	                     "\"v\":\"model-00002.safetensors\"}}");
	mk(blob2, "v", 1u, NULL);
	ck_assert_int_eq(symlink("../../blobs/def", s2), 0);
	ck_assert_int_eq(symlink("../../blobs/idx", idx), 0);
	ck = open_ok(snap, NULL);
	ck_assert_uint_eq(placefs_ckpt_shard_count(ck), 2);
	ck_assert_str_eq(placefs_ckpt_tensors(ck)[0].name, "v");
	ck_assert_str_eq(placefs_ckpt_tensors(ck)[1].name, "w");
	placefs_ckpt_free(ck);

	/* A dangling link among the shards is an error, not a silent skip. */
	ck_assert_int_eq(unlink(idx), 0);
	char *dangling = at("snapshots/x/model-00003.safetensors");
	ck_assert_int_eq(symlink("../../blobs/nothing", dangling), 0);
	struct placefs_error err = open_fails(snap, NULL, -ENOENT, PLACEFS_E_SOURCE);
	ck_assert_ptr_nonnull(strstr(err.msg, "model-00003.safetensors"));
	free(dangling);
	free(idx);
	free(s2);
	free(link);
	free(snap);
	free(blob2);
	free(blob);
}
END_TEST

/* A Git LFS pointer in place of a shard is refused with the LFS advice. */
START_TEST(test_lfs_pointer_refused)
{
	struct placefs_error err;

	text_at("model.safetensors",
	        "version https://git-lfs.github.com/spec/v1\n"
	        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e"
	        "2ca24d17e2393\nsize 12345\n");
	err = open_fails(tmpdir, NULL, -EINVAL, PLACEFS_E_FORMAT);
	ck_assert_ptr_nonnull(strstr(err.msg, "model.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "LFS"));
}
END_TEST

/* A shard that fails validation fails the open, naming the shard. */
START_TEST(test_invalid_shard_refused)
{
	char *good = at("a.safetensors");
	char *bad = at("b.safetensors");
	size_t len;
	uint8_t *buf;
	struct placefs_error err;

	mk(good, "x", 4u, NULL);
	buf = tu_read_file(good, &len);
	tu_write_file(bad, buf, len - 1); /* truncated by one byte */
	free(buf);
	err = open_fails(tmpdir, NULL, -EINVAL, PLACEFS_E_FORMAT);
	ck_assert_ptr_nonnull(strstr(err.msg, "b.safetensors"));
	free(bad);
	free(good);
}
END_TEST

/*
 * Shards are opened on several threads; the error is still the first bad
 * shard's in order, every time: 24 shards, 7 and 19 truncated, opened 40
 * times.
 */
START_TEST(test_first_bad_shard_reported)
{
	char name[32], *p, *good = at("s00.safetensors");
	uint8_t *buf;
	size_t len;

	mk(good, "t00", 4u, NULL);
	buf = tu_read_file(good, &len);
	for (int i = 1; i < 24; i++) {
		char tn[8];

		snprintf(name, sizeof(name), "s%02d.safetensors", i);
		snprintf(tn, sizeof(tn), "t%02d", i);
		p = at("%s", name);
		if (i == 7 || i == 19) {
			tu_write_file(p, buf, len - 1);
		} else {
			mk(p, tn, 4u, NULL);
		}
		free(p);
	}
	for (int k = 0; k < 40; k++) {
		struct placefs_error err = open_fails(tmpdir, NULL, -EINVAL, PLACEFS_E_FORMAT);

		ck_assert_msg(strstr(err.msg, "s07.safetensors") && !strstr(err.msg, "s19"),
		              "round %d: %s", k, err.msg);
	}
	free(buf);
	free(good);
}
END_TEST

/* An empty directory, or a missing or odd source, is a source error. */
START_TEST(test_empty_and_missing_sources)
{
	struct placefs_error err;
	char *missing = at("nope");

	err = open_fails(tmpdir, NULL, -ENOENT, PLACEFS_E_SOURCE);
	ck_assert_ptr_nonnull(strstr(err.msg, "no *.safetensors files in"));
	ck_assert_ptr_nonnull(strstr(err.msg, tmpdir));
	err = open_fails(missing, NULL, -ENOENT, PLACEFS_E_SOURCE);
	ck_assert_ptr_nonnull(strstr(err.msg, "nope"));
	open_fails("/dev/null", NULL, -EINVAL, PLACEFS_E_SOURCE);
	open_fails("", NULL, -EINVAL, PLACEFS_E_SOURCE);
	free(missing);
}
END_TEST

/* Puts shard file `path`'s modification time to `mtime`. */
static void set_mtime(const char *path, struct timespec mtime)
{
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, mtime};

	ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* Points the symbolic link `link` at `target` at once (rename over it). */
static void repoint(const char *link, const char *target)
{
	char *tmp;

	ck_assert(asprintf(&tmp, "%s.new", link) > 0);
	unlink(tmp);
	ck_assert_int_eq(symlink(target, tmp), 0);
	ck_assert_int_eq(rename(tmp, link), 0);
	free(tmp);
}

/*
 * placefs_ckpt_shard_reopen(): the source directory reached through a link
 * that is re-pointed to a copy on another file system stands for a remount
 * (/dev/shm is a tmpfs of its own). A copy with the size, mtime and header
 * validated is taken there, and the descriptor reads it; one with another
 * mtime or header is refused naming the shard; a file replaced on the same
 * file system is never taken; same_file opens the very file again.
 */
START_TEST(test_shard_reopen)
{
	char *a = at("a"), *link = at("src"), *pa = at("a/x.safetensors");
	char *tmp = at("a/x.tmp"), bdir[] = "/dev/shm/placefs-check-ckpt-XXXXXX", *pb;
	const struct placefs_shard *sh;
	struct placefs_ckpt *ck;
	struct placefs_error err;
	struct timespec mtime;
	struct stat sa, sb, st;

	ck_assert_int_eq(mkdir(a, 0755), 0);
	mk(pa, "w", 64u, "v", 8u, NULL);
	ck_assert_int_eq(symlink(a, link), 0);
	ck = open_ok(link, NULL);
	sh = placefs_ckpt_shard(ck, 0);
	mtime = sh->mtime;

	/* same_file: the very file on a fresh descriptor; nothing else changes. */
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, true, NULL), 1);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	ck_assert_int_eq(fstat(sh->fd, &st), 0);
	ck_assert_uint_eq(st.st_ino, sh->ino);
	/* Not after a failed check: the same file system has nothing to adopt. */
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, false, NULL), 0);

	/* Replaced on the same file system by an identical copy: stays refused. */
	mk(tmp, "w", 64u, "v", 8u, NULL);
	set_mtime(tmp, mtime);
	ck_assert_int_eq(rename(tmp, pa), 0);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), -ESTALE);
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, false, NULL), 0);
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, true, NULL), 0);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), -ESTALE);

	ck_assert_ptr_nonnull(mkdtemp(bdir));
	ck_assert_int_eq(stat(a, &sa), 0);
	ck_assert_int_eq(stat(bdir, &sb), 0);
	if (sa.st_dev == sb.st_dev) {
		fprintf(stderr,
		        "test_shard_reopen: %s and /dev/shm are one file system; the "
		        "remount cases are skipped\n",
		        a);
		goto out;
	}
	pb = tu_path(bdir, "x.safetensors");

	/* The source on another file system, the copy validated: taken there. */
	mk(pb, "w", 64u, "v", 8u, NULL);
	set_mtime(pb, mtime);
	repoint(link, bdir);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), -ESTALE);
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, false, NULL), 1);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	ck_assert_int_eq(fstat(sh->fd, &st), 0);
	ck_assert_uint_eq(st.st_dev, sb.st_dev);
	/* The descriptor keeps its number, and the record of the mount stays. */
	ck_assert_uint_eq(sh->dev, sa.st_dev);

	/* Back to the first file system: another mtime, then another header. */
	mk(pa, "w", 64u, "v", 8u, NULL);
	repoint(link, a);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, false, &err), -ESTALE);
	ck_assert_ptr_nonnull(strstr(err.msg, "x.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "modification time"));
	mk(pa, "u", 64u, "v", 8u, NULL);
	set_mtime(pa, mtime);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, false, &err), -ESTALE);
	ck_assert_ptr_nonnull(strstr(err.msg, "header"));
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), -ESTALE);
	/* The exact shard again: taken, served. */
	mk(pa, "w", 64u, "v", 8u, NULL);
	set_mtime(pa, mtime);
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, false, NULL), 1);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	free(pb);
out:
	tu_rmtree(bdir);
	placefs_ckpt_free(ck);
	free(a);
	free(link);
	free(pa);
	free(tmp);
}
END_TEST

/* shard_check passes untouched, and catches truncation, rewrite, growth and replacement. */
START_TEST(test_shard_check)
{
	char *p = at("s.safetensors"), *tmp = at("new.safetensors");
	struct placefs_ckpt *ck;
	struct placefs_error err;
	struct timespec ts[2];
	struct stat st;
	uint8_t byte;
	int fd;

	/* Untouched: 0, even when called again. */
	mk(p, "a", 8u, NULL);
	ck = open_ok(p, NULL);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	/* An index past the end is a usage error, not a crash. */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 1, &err), -EINVAL);

	/* Rewritten in place (a payload byte), same size, new mtime: stale. */
	fd = open(p, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &byte, 1, (off_t)data_start(p)), 1);
	byte ^= 0xff;
	ck_assert_int_eq(pwrite(fd, &byte, 1, (off_t)data_start(p)), 1);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	ts[1].tv_sec += 10;
	ck_assert_int_eq(futimens(fd, ts), 0);
	close(fd);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, &err), -ESTALE);
	ck_assert_ptr_nonnull(strstr(err.msg, "s.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "changed since mount"));
	placefs_ckpt_free(ck);

	/* Grown: stale too. */
	ck = open_ok(p, NULL);
	fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
	ck_assert_int_eq(write(fd, "x", 1), 1);
	close(fd);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, &err), -ESTALE);
	placefs_ckpt_free(ck);

	/* Truncated: EIO, naming both sizes. */
	mk(p, "a", 8u, NULL);
	ck = open_ok(p, NULL);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(truncate(p, st.st_size - 4), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, &err), -EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "s.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "shrank"));
	char sizes[64];
	snprintf(sizes, sizeof(sizes), "from %lld to %lld bytes", (long long)st.st_size,
	         (long long)st.st_size - 4);
	ck_assert_ptr_nonnull(strstr(err.msg, sizes));
	placefs_ckpt_free(ck);

	/* Replaced by rename: the open fd still looks fine, the path does not. */
	mk(p, "a", 8u, NULL);
	ck = open_ok(p, NULL);
	mk(tmp, "a", 8u, NULL);
	ck_assert_int_eq(rename(tmp, p), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, &err), -ESTALE);
	ck_assert_ptr_nonnull(strstr(err.msg, "replaced"));
	placefs_ckpt_free(ck);

	/* Removed: stale as well. */
	ck = open_ok(p, NULL);
	ck_assert_int_eq(unlink(p), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, &err), -ESTALE);
	placefs_ckpt_free(ck);
	free(tmp);
	free(p);
}
END_TEST

/* Writes a shard of two F32[4] tensors, the first named n1, at `path`. */
static void mk_pair(const char *path, const char *n1, const char *n2)
{
	mk(path, n1, 4u, n2, 4u, NULL);
}

/* O_DIRECT on a shard's descriptor, and on the one a reopen adopts. */
START_TEST(test_shard_set_direct)
{
	char *p = at("d.safetensors");
	const struct placefs_shard *sh;
	struct placefs_ckpt *ck;
	struct placefs_error err;
	int rc;

	mk(p, "w", 64u, "v", 8u, NULL);
	ck = open_ok(p, NULL);
	sh = placefs_ckpt_shard(ck, 0);
	ck_assert_int_eq(fcntl(sh->fd, F_GETFL) & O_DIRECT, 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_set_direct(ck, 1, true, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "no shard 1"));
	ck_assert_int_eq(placefs_ckpt_shard_set_direct(NULL, 0, true, NULL), -EINVAL);
	placefs_error_clear(&err);
	rc = placefs_ckpt_shard_set_direct(ck, 0, true, &err);
	if (rc != 0) {
		/* A file system without O_DIRECT (tmpfs before Linux 6.6): said, nothing set. */
		ck_assert_int_eq(rc, -EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "d.safetensors"));
		ck_assert_ptr_nonnull(strstr(err.msg, "O_DIRECT"));
		ck_assert_int_eq(fcntl(sh->fd, F_GETFL) & O_DIRECT, 0);
		goto out;
	}
	ck_assert_int_ne(fcntl(sh->fd, F_GETFL) & O_DIRECT, 0);
	/* A fresh descriptor for the very file keeps the setting. */
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, true, NULL), 1);
	ck_assert_int_ne(fcntl(sh->fd, F_GETFL) & O_DIRECT, 0);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	ck_assert_int_eq(placefs_ckpt_shard_set_direct(ck, 0, false, NULL), 0);
	ck_assert_int_eq(fcntl(sh->fd, F_GETFL) & O_DIRECT, 0);
	ck_assert_int_eq(placefs_ckpt_shard_reopen(ck, 0, true, NULL), 1);
	ck_assert_int_eq(fcntl(sh->fd, F_GETFL) & O_DIRECT, 0);
out:
	placefs_ckpt_free(ck);
	free(p);
}
END_TEST

/*
 * Rewritten in place with the entries swapped (same header length, same
 * size) and its mtime put back, as touch -d, tar -x and cp -p do: only the
 * ctime tells. The check must fail; the bytes of "a" are now where "b" was.
 */
START_TEST(test_shard_check_ctime)
{
	char *p = at("s.safetensors"), *swapped = at("swapped.safetensors");
	struct placefs_ckpt *ck;
	struct placefs_error err;
	struct timespec ts[2], nap = {0, 20 * 1000 * 1000};
	struct stat st, st2;
	uint8_t *buf;
	size_t len;
	int fd;

	mk_pair(p, "a", "b");
	mk_pair(swapped, "b", "a");
	ck = open_ok(p, NULL);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(placefs_ckpt_shard(ck, 0)->ctime.tv_sec, st.st_ctim.tv_sec);
	ck_assert_int_eq(placefs_ckpt_shard(ck, 0)->ctime.tv_nsec, st.st_ctim.tv_nsec);
	buf = tu_read_file(swapped, &len);
	ck_assert_uint_eq(len, (size_t)st.st_size);
	/* Timestamps are coarse: make sure the rewrite gets a later ctime. */
	nanosleep(&nap, NULL);
	fd = open(p, O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, buf, len, 0), (ssize_t)len);
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	ck_assert_int_eq(futimens(fd, ts), 0);
	close(fd);
	ck_assert_int_eq(stat(p, &st2), 0);
	ck_assert_uint_eq(st2.st_size, st.st_size);
	ck_assert_int_eq(st2.st_mtim.tv_sec, st.st_mtim.tv_sec);
	ck_assert_int_eq(st2.st_mtim.tv_nsec, st.st_mtim.tv_nsec);
	ck_assert_int_eq(st2.st_ino, st.st_ino);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, &err), -ESTALE);
	ck_assert_ptr_nonnull(strstr(err.msg, "s.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "different header"));
	/* Still stale at the next check: the new ctime was not accepted. */
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), -ESTALE);
	free(buf);

	/* Put back exactly (same header): served again, and the new ctime is kept. */
	buf = tu_read_file(swapped, &len);
	free(buf);
	mk_pair(swapped, "a", "b");
	buf = tu_read_file(swapped, &len);
	nanosleep(&nap, NULL);
	fd = open(p, O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, buf, len, 0), (ssize_t)len);
	ck_assert_int_eq(futimens(fd, ts), 0);
	close(fd);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	/* A chmod changes only the ctime: the header still matches. */
	nanosleep(&nap, NULL);
	ck_assert_int_eq(chmod(p, 0600), 0);
	ck_assert_int_eq(placefs_ckpt_shard_check(ck, 0, NULL), 0);
	free(buf);
	placefs_ckpt_free(ck);
	free(swapped);
	free(p);
}
END_TEST

/*
 * Whether this process has openat2 (Linux >= 5.6, and not hidden by a
 * seccomp filter or by valgrind, which does not know the system call).
 */
static int have_openat2(void)
{
	struct open_how how = {.flags = O_RDONLY | O_DIRECTORY};
	long fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));

	if (fd >= 0) {
		close((int)fd);
		return 1;
	}
	return errno != ENOSYS && errno != EPERM;
}

/* Shards of a directory source may not leave it through symbolic links. */
START_TEST(test_shard_symlink_escapes_refused)
{
	char *outside = at("outside/x.safetensors"), *src = at("src");
	char *lnk = at("src/x.safetensors"), *dlnk = at("src/sub");
	struct placefs_error err;
	struct placefs_ckpt *ck;

	mkdir_at("outside");
	mkdir_at("src");
	mkdir_at("src/real");
	mk(outside, "a", 1u, NULL);
	ck_assert_int_eq(symlink("../outside/x.safetensors", lnk), 0);
	text_at("src/i1.json", "{\"weight_map\":{\"a\":\"x.safetensors\"}}");
	err = open_fails(src, "i1.json", -EXDEV, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "x.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "leads outside"));
	/* Without an index, the link found by listing is refused the same way. */
	err = open_fails(src, NULL, -EXDEV, PLACEFS_E_SOURCE);
	ck_assert_ptr_nonnull(strstr(err.msg, "x.safetensors"));
	ck_assert_int_eq(unlink(lnk), 0);

	/* A symlinked directory component. */
	ck_assert_int_eq(symlink("../outside", dlnk), 0);
	text_at("src/i2.json", "{\"weight_map\":{\"a\":\"sub/x.safetensors\"}}");
	err = open_fails(src, "i2.json", -EXDEV, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "sub/x.safetensors"));

	/*
	 * An absolute link, even to a file inside the source, is refused by
	 * RESOLVE_BENEATH; the fallback without openat2 judges only where the
	 * descriptor landed, inside, and accepts it (doc/SEMANTICS.md).
	 */
	char *inside = at("src/real/y.safetensors");
	mk(inside, "a", 1u, NULL);
	ck_assert_int_eq(symlink(inside, lnk), 0);
	if (have_openat2()) {
		err = open_fails(src, "i1.json", -EXDEV, PLACEFS_E_INDEX);
	} else {
		ck = open_ok(src, "i1.json");
		placefs_ckpt_free(ck);
	}
	ck_assert_int_eq(unlink(lnk), 0);

	/* A relative link that stays inside is followed. */
	ck_assert_int_eq(symlink("real/y.safetensors", lnk), 0);
	ck = open_ok(src, "i1.json");
	ck_assert_str_eq(placefs_ckpt_tensors(ck)[0].name, "a");
	placefs_ckpt_free(ck);
	free(inside);
	free(dlnk);
	free(lnk);
	free(src);
	free(outside);
}
END_TEST

/* Makes openat2 fail with ENOSYS in this process, as on Linux < 5.6. */
static int deny_openat2(void)
{
	struct sock_filter f[] = {
	        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
	        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
	        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

/* Without openat2, the real path of the opened shard is checked instead. */
START_TEST(test_shard_symlink_escapes_fallback)
{
	char *outside = at("outside/x.safetensors"), *src = at("src");
	char *lnk = at("src/x.safetensors"), *inside = at("src/real/y.safetensors");
	struct placefs_error err;
	struct placefs_ckpt *ck;

	mkdir_at("outside");
	mkdir_at("src");
	mkdir_at("src/real");
	mk(outside, "a", 1u, NULL);
	mk(inside, "a", 1u, NULL);
	if (deny_openat2() != 0) {
		fprintf(stderr, "seccomp unavailable here (%s): fallback not tested\n",
		        strerror(errno));
		goto out;
	}
	ck_assert_int_eq(syscall(SYS_openat2, AT_FDCWD, ".", NULL, 0), -1);
	ck_assert_int_eq(errno, ENOSYS);
	ck_assert_int_eq(symlink("../outside/x.safetensors", lnk), 0);
	text_at("src/i1.json", "{\"weight_map\":{\"a\":\"x.safetensors\"}}");
	err = open_fails(src, "i1.json", -EXDEV, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "leads outside"));
	ck_assert_int_eq(unlink(lnk), 0);
	ck_assert_int_eq(symlink("real/y.safetensors", lnk), 0);
	ck = open_ok(src, "i1.json");
	ck_assert_str_eq(placefs_ckpt_tensors(ck)[0].name, "a");
	placefs_ckpt_free(ck);
out:
	free(inside);
	free(lnk);
	free(src);
	free(outside);
}
END_TEST

/* A shard that is no safetensors file is reported without echoing its first bytes. */
START_TEST(test_foreign_file_not_echoed)
{
	struct placefs_error err;

	text_at("model.safetensors", "root:$6$secretsecretsecret\n");
	err = open_fails(tmpdir, NULL, -EINVAL, PLACEFS_E_FORMAT);
	ck_assert_ptr_nonnull(strstr(err.msg, "model.safetensors"));
	ck_assert_ptr_nonnull(strstr(err.msg, "not a safetensors file"));
	/* "root:$6$" read as a little-endian u64 is 2609312867587944306. */
	ck_assert_ptr_null(strstr(err.msg, "2609312867587944306"));
	ck_assert_ptr_null(strstr(err.msg, "header length is"));
	ck_assert_ptr_null(strstr(err.msg, "root"));
}
END_TEST

/* A FIFO as the index is refused at once, not read forever. */
START_TEST(test_fifo_index_refused)
{
	char *fifo = at("model.safetensors.index.json"), *shard = at("a.safetensors");
	struct placefs_error err;

	mk(shard, "a", 1u, NULL);
	ck_assert_int_eq(mkfifo(fifo, 0644), 0);
	alarm(10); /* a hang fails the test instead of blocking it */
	err = open_fails(tmpdir, NULL, -EINVAL, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
	err = open_fails(tmpdir, fifo, -EINVAL, PLACEFS_E_INDEX);
	ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
	alarm(0);
	free(shard);
	free(fifo);
}
END_TEST

/* 100,000 tensors in 100 shards open, with and without an index, in checkpoint order. */
START_TEST(test_many_tensors)
{
	enum { SHARDS = 100, PER = 1000 };
	static char names[PER][16];
	struct placefs_stwrite_tensor t[PER];
	struct placefs_strbuf idx;
	struct placefs_ckpt *ck;
	struct placefs_error err;
	static const uint64_t one = 1;
	const struct placefs_tensor *v;

	placefs_strbuf_init(&idx);
	ck_assert_int_eq(placefs_strbuf_adds(&idx, "{\"weight_map\":{"), 0);
	for (int s = 0; s < SHARDS; s++) {
		char file[32];
		char *path;

		snprintf(file, sizeof(file), "m%03d.safetensors", s);
		for (int i = 0; i < PER; i++) {
			/* Names sort in a different order than files and offsets. */
			snprintf(names[i], sizeof(names[i]), "t%04d.s%03d", PER - 1 - i, s);
			t[i].name = names[i];
			t[i].dtype = PLACEFS_DT_U8;
			t[i].ndim = 1;
			t[i].shape = &one;
			ck_assert_int_eq(placefs_strbuf_addf(&idx, "%s\"%s\":\"%s\"",
			                                     s || i ? "," : "", names[i], file),
			                 0);
		}
		path = at("%s", file);
		placefs_error_clear(&err);
		ck_assert_msg(placefs_stwrite_file(path, t, PER, NULL, 0, 1, &err) == 0, "%s",
		              err.msg);
		free(path);
	}
	ck_assert_int_eq(placefs_strbuf_adds(&idx, "}}"), 0);

	ck = open_ok(tmpdir, NULL);
	ck_assert_uint_eq(placefs_ckpt_shard_count(ck), SHARDS);
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), SHARDS * PER);
	v = placefs_ckpt_tensors(ck);
	for (size_t i = 1; i < SHARDS * PER; i++) {
		ck_assert(v[i].shard > v[i - 1].shard ||
		          (v[i].shard == v[i - 1].shard && v[i].offset > v[i - 1].offset));
	}
	ck_assert_str_eq(v[0].name, "t0999.s000");
	ck_assert_str_eq(v[SHARDS * PER - 1].name, "t0000.s099");
	placefs_ckpt_free(ck);

	text_at("model.safetensors.index.json", placefs_strbuf_cstr(&idx));
	placefs_strbuf_release(&idx);
	ck = open_ok(tmpdir, NULL);
	ck_assert_str_eq(placefs_ckpt_index(ck), "model.safetensors.index.json");
	ck_assert_uint_eq(placefs_ckpt_tensor_count(ck), SHARDS * PER);
	v = placefs_ckpt_tensors(ck);
	ck_assert_str_eq(v[PER].name, "t0999.s001");
	ck_assert_uint_eq(v[PER].shard, 1);
	placefs_ckpt_free(ck);
}
END_TEST

static Suite *ckpt_suite(void)
{
	Suite *s = suite_create("ckpt");
	TCase *tc = tcase_create("core");
	TCase *big = tcase_create("big");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_single_file);
	tcase_add_test(tc, test_relative_source);
	tcase_add_test(tc, test_dir_without_index);
	tcase_add_test(tc, test_dir_with_index);
	tcase_add_test(tc, test_overlay_mapped_shard_wins);
	tcase_add_test(tc, test_index_given_explicitly);
	tcase_add_test(tc, test_index_with_file_source);
	tcase_add_test(tc, test_missing_shard);
	tcase_add_test(tc, test_tensor_missing_from_mapped_shard);
	tcase_add_test(tc, test_shard_path_escapes_refused);
	tcase_add_test(tc, test_duplicate_across_files);
	tcase_add_test(tc, test_hf_cache_symlinks);
	tcase_add_test(tc, test_lfs_pointer_refused);
	tcase_add_test(tc, test_invalid_shard_refused);
	tcase_add_test(tc, test_first_bad_shard_reported);
	tcase_add_test(tc, test_empty_and_missing_sources);
	tcase_add_test(tc, test_shard_check);
	tcase_add_test(tc, test_shard_reopen);
	tcase_add_test(tc, test_shard_set_direct);
	tcase_add_test(tc, test_shard_check_ctime);
	tcase_add_test(tc, test_shard_symlink_escapes_refused);
	tcase_add_test(tc, test_shard_symlink_escapes_fallback);
	tcase_add_test(tc, test_foreign_file_not_echoed);
	tcase_add_test(tc, test_fifo_index_refused);
	suite_add_tcase(s, tc);
	/* Writing and parsing 100 shards takes a while under valgrind. */
	tcase_add_checked_fixture(big, setup, teardown);
	tcase_set_timeout(big, 600);
	tcase_add_test(big, test_many_tensors);
	suite_add_tcase(s, big);
	return s;
}

int main(void)
{
	return tu_run_suite(ckpt_suite());
}
