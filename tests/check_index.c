/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/index.h"
#include "common/strbuf.h"
#include "testutil.h"

#define INDEX_NAME "model.safetensors.index.json"

/* Parses from an exact-size copy so any over-read is caught by valgrind/ASan. */
static int parse(const char *text, struct placefs_index **idx, struct placefs_error *err)
{
	size_t len = strlen(text);
	char *copy = malloc(len ? len : 1);
	int rc;

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, text, len);
	placefs_error_clear(err);
	rc = placefs_index_parse(INDEX_NAME, copy, len, idx, err);
	free(copy);
	return rc;
}

static struct placefs_index *idx_ok(const char *text)
{
	struct placefs_index *idx = NULL;
	struct placefs_error err;
	int rc = parse(text, &idx, &err);

	ck_assert_msg(rc == 0, "expected success for <%s>: %s", text, err.msg);
	ck_assert_ptr_nonnull(idx);
	return idx;
}

static void idx_bad(const char *text, const char *needle)
{
	struct placefs_index *idx = (struct placefs_index *)0x1;
	struct placefs_error err;
	int rc = parse(text, &idx, &err);

	ck_assert_msg(rc == -EINVAL, "expected -EINVAL for <%s>, got %d (%s)", text, rc, err.msg);
	ck_assert_ptr_null(idx);
	ck_assert_int_eq(err.code, -EINVAL);
	ck_assert_int_eq(err.kind, PLACEFS_E_INDEX);
	ck_assert_msg(strncmp(err.msg, INDEX_NAME ": ", strlen(INDEX_NAME) + 2) == 0,
	              "message does not name the index: %s", err.msg);
	ck_assert_msg(strstr(err.msg, needle), "message <%s> lacks <%s>", err.msg, needle);
}

/* An index whose weight_map maps "w" to the JSON string literal `shard`. */
static void shard_bad(const char *shard, const char *needle)
{
	char text[512];

	snprintf(text, sizeof(text), "{\"weight_map\": {\"w\": %s}}", shard);
	idx_bad(text, needle);
}

static void shard_ok(const char *shard, const char *want)
{
	char text[512];
	struct placefs_index *idx;

	snprintf(text, sizeof(text), "{\"weight_map\": {\"w\": %s}}", shard);
	idx = idx_ok(text);
	ck_assert_str_eq(placefs_index_lookup(idx, "w"), want);
	placefs_index_free(idx);
}

/* ---- valid --------------------------------------------------------------- */

static const char *typical =
        "{\n"
        "  \"metadata\": {\"total_size\": 1234, \"total_parameters\": 617},\n"
        "  \"weight_map\": {\n"
        "    \"model.layers.1.mlp.weight\": \"model-00002-of-00002.safetensors\",\n"
        "    \"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n"
        "    \"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\",\n"
        "    \"model.layers.0.mlp.weight\": \"model-00001-of-00002.safetensors\"\n"
        "  }\n"
        "}\n";

START_TEST(test_valid)
{
	struct placefs_index *idx = idx_ok(typical);

	ck_assert_uint_eq(placefs_index_count(idx), 4);
	/* Sorted by name, byte order. */
	ck_assert_str_eq(placefs_index_name(idx, 0), "lm_head.weight");
	ck_assert_str_eq(placefs_index_name(idx, 1), "model.embed_tokens.weight");
	ck_assert_str_eq(placefs_index_name(idx, 2), "model.layers.0.mlp.weight");
	ck_assert_str_eq(placefs_index_name(idx, 3), "model.layers.1.mlp.weight");
	ck_assert_str_eq(placefs_index_shard_of(idx, 0), "model-00002-of-00002.safetensors");
	ck_assert_str_eq(placefs_index_shard_of(idx, 1), "model-00001-of-00002.safetensors");
	ck_assert_str_eq(placefs_index_shard_of(idx, 2), "model-00001-of-00002.safetensors");
	ck_assert_str_eq(placefs_index_shard_of(idx, 3), "model-00002-of-00002.safetensors");
	ck_assert_ptr_null(placefs_index_name(idx, 4));
	ck_assert_ptr_null(placefs_index_shard_of(idx, 4));
	/* Distinct shards, sorted. */
	ck_assert_uint_eq(placefs_index_shard_count(idx), 2);
	ck_assert_str_eq(placefs_index_shard(idx, 0), "model-00001-of-00002.safetensors");
	ck_assert_str_eq(placefs_index_shard(idx, 1), "model-00002-of-00002.safetensors");
	ck_assert_ptr_null(placefs_index_shard(idx, 2));
	/* Entries point at the distinct list's strings. */
	ck_assert_ptr_eq(placefs_index_shard_of(idx, 0), placefs_index_shard(idx, 1));
	placefs_index_free(idx);
}
END_TEST

START_TEST(test_lookup)
{
	struct placefs_index *idx = idx_ok(typical);

	ck_assert_str_eq(placefs_index_lookup(idx, "lm_head.weight"),
	                 "model-00002-of-00002.safetensors");
	ck_assert_str_eq(placefs_index_lookup(idx, "model.embed_tokens.weight"),
	                 "model-00001-of-00002.safetensors");
	ck_assert_ptr_null(placefs_index_lookup(idx, "missing"));
	ck_assert_ptr_null(placefs_index_lookup(idx, "lm_head.weigh"));
	ck_assert_ptr_null(placefs_index_lookup(idx, "LM_HEAD.WEIGHT"));
	ck_assert_ptr_null(placefs_index_lookup(idx, ""));
	ck_assert_ptr_null(placefs_index_lookup(idx, NULL));
	ck_assert_ptr_null(placefs_index_lookup(NULL, "x"));
	placefs_index_free(idx);
}
END_TEST

START_TEST(test_free_null)
{
	placefs_index_free(NULL);
}
END_TEST

START_TEST(test_metadata_absent)
{
	struct placefs_index *idx = idx_ok("{\"weight_map\": {\"a\": \"s.safetensors\"}}");

	ck_assert_uint_eq(placefs_index_count(idx), 1);
	placefs_index_free(idx);
}
END_TEST

START_TEST(test_metadata_null)
{
	struct placefs_index *idx =
	        idx_ok("{\"metadata\": null, \"weight_map\": {\"a\": \"s.safetensors\"}}");

	ck_assert_str_eq(placefs_index_lookup(idx, "a"), "s.safetensors");
	placefs_index_free(idx);
}
END_TEST

START_TEST(test_metadata_contents_ignored)
{
	/* total_size is advisory: any value, even a float, is accepted. */
	struct placefs_index *idx = idx_ok("{\"metadata\": {\"total_size\": 1.5e3, \"x\": [null]},"
	                                   " \"weight_map\": {\"a\": \"s.safetensors\"}}");

	placefs_index_free(idx);
}
END_TEST

START_TEST(test_metadata_wrong_type)
{
	idx_bad("{\"metadata\": 1, \"weight_map\": {}}",
	        "\"metadata\" is a number; it must be an object or null");
	idx_bad("{\"metadata\": [], \"weight_map\": {}}", "\"metadata\" is an array");
	idx_bad("{\"metadata\": \"x\", \"weight_map\": {}}", "\"metadata\" is a string");
}
END_TEST

START_TEST(test_unknown_keys)
{
	struct placefs_index *idx =
	        idx_ok("{\"dtype\": \"bfloat16\", \"extra\": [1, {\"weight_map\": 3}], "
	               "\"weight_map\": {\"a\": \"s.safetensors\"}, \"zzz\": null}");

	ck_assert_uint_eq(placefs_index_count(idx), 1);
	placefs_index_free(idx);
}
END_TEST

START_TEST(test_empty_weight_map)
{
	struct placefs_index *idx = idx_ok("{\"weight_map\": {}}");

	ck_assert_uint_eq(placefs_index_count(idx), 0);
	ck_assert_uint_eq(placefs_index_shard_count(idx), 0);
	ck_assert_ptr_null(placefs_index_lookup(idx, "a"));
	placefs_index_free(idx);
}
END_TEST

START_TEST(test_empty_tensor_name)
{
	/* The index accepts any name; the plan refuses "" as a file name. */
	struct placefs_index *idx = idx_ok("{\"weight_map\": {\"\": \"s.safetensors\"}}");

	ck_assert_str_eq(placefs_index_lookup(idx, ""), "s.safetensors");
	placefs_index_free(idx);
}
END_TEST

START_TEST(test_many_entries)
{
	struct placefs_strbuf sb;
	struct placefs_index *idx;

	placefs_strbuf_init(&sb);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "{\"weight_map\": {"), 0);
	for (int i = 0; i < 10000; i++)
		ck_assert_int_eq(placefs_strbuf_addf(&sb, "%s\"t%d\": \"s%d.safetensors\"",
		                                     i ? ", " : "", i, i % 7),
		                 0);
	ck_assert_int_eq(placefs_strbuf_adds(&sb, "}}"), 0);
	idx = idx_ok(sb.buf);
	ck_assert_uint_eq(placefs_index_count(idx), 10000);
	ck_assert_uint_eq(placefs_index_shard_count(idx), 7);
	for (int i = 0; i < 10000; i++) {
		char name[32], shard[32];

		snprintf(name, sizeof(name), "t%d", i);
		snprintf(shard, sizeof(shard), "s%d.safetensors", i % 7);
		ck_assert_str_eq(placefs_index_lookup(idx, name), shard);
	}
	for (size_t i = 1; i < placefs_index_count(idx); i++)
		ck_assert_int_lt(strcmp(placefs_index_name(idx, i - 1), placefs_index_name(idx, i)),
		                 0);
	placefs_index_free(idx);
	placefs_strbuf_release(&sb);
}
END_TEST

/*
 * Names already in order with each shard's tensors together (as Hugging Face
 * writes an index): no sort is needed, and a shard path is checked once per
 * run; a shard seen again after another run is one shard, and a bad path
 * right after a run of good ones is still refused, naming its tensor.
 */
START_TEST(test_sorted_runs)
{
	struct placefs_index *idx =
	        idx_ok("{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
	               "\"c\": \"s2.safetensors\", \"d\": \"s2.safetensors\", "
	               "\"e\": \"s1.safetensors\"}}");

	ck_assert_uint_eq(placefs_index_count(idx), 5);
	ck_assert_uint_eq(placefs_index_shard_count(idx), 2);
	ck_assert_str_eq(placefs_index_shard(idx, 0), "s1.safetensors");
	ck_assert_str_eq(placefs_index_shard(idx, 1), "s2.safetensors");
	ck_assert_str_eq(placefs_index_name(idx, 4), "e");
	ck_assert_str_eq(placefs_index_lookup(idx, "a"), "s1.safetensors");
	ck_assert_str_eq(placefs_index_lookup(idx, "d"), "s2.safetensors");
	ck_assert_str_eq(placefs_index_lookup(idx, "e"), "s1.safetensors");
	ck_assert_ptr_eq(placefs_index_lookup(idx, "e"), placefs_index_shard(idx, 0));
	placefs_index_free(idx);
	idx_bad("{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
	        "\"c\": \"../s1.safetensors\"}}",
	        "tensor \"c\": shard path \"../s1.safetensors\"");
}
END_TEST

/* ---- weight_map ---------------------------------------------------------- */

START_TEST(test_missing_weight_map)
{
	idx_bad("{\"metadata\": {}}", INDEX_NAME ": no \"weight_map\" (it is required)");
	idx_bad("{}", "no \"weight_map\"");
	idx_bad("{\"Weight_map\": {}}", "no \"weight_map\"");
}
END_TEST

START_TEST(test_weight_map_wrong_type)
{
	idx_bad("{\"weight_map\": null}", "\"weight_map\" is null; it must be an object");
	idx_bad("{\"weight_map\": []}", "\"weight_map\" is an array");
	idx_bad("{\"weight_map\": \"x\"}", "\"weight_map\" is a string");
}
END_TEST

START_TEST(test_non_string_shard)
{
	idx_bad("{\"weight_map\": {\"a\": \"s\", \"w\": 1}}",
	        INDEX_NAME ": weight_map: tensor \"w\": the shard is a number, not a string");
	shard_bad("null", "the shard is null, not a string");
	shard_bad("[\"s\"]", "the shard is an array, not a string");
	shard_bad("{}", "the shard is an object, not a string");
	shard_bad("true", "the shard is a boolean, not a string");
}
END_TEST

START_TEST(test_duplicate_key)
{
	idx_bad("{\"weight_map\": {\"a\": \"s1\", \"a\": \"s2\"}}",
	        INDEX_NAME ": invalid JSON in index: duplicate key \"a\"");
}
END_TEST

START_TEST(test_duplicate_key_identical)
{
	idx_bad("{\"weight_map\": {\"a\": \"s1\", \"a\": \"s1\"}}", "duplicate key \"a\"");
}
END_TEST

START_TEST(test_duplicate_weight_map)
{
	idx_bad("{\"weight_map\": {\"a\": \"s1\"}, \"weight_map\": {\"b\": \"s2\"}}",
	        "duplicate key \"weight_map\"");
}
END_TEST

START_TEST(test_duplicate_in_metadata)
{
	idx_bad("{\"metadata\": {\"total_size\": 1, \"total_size\": 2}, \"weight_map\": {}}",
	        "duplicate key \"total_size\"");
}
END_TEST

/* ---- shard paths --------------------------------------------------------- */

START_TEST(test_shard_absolute)
{
	shard_bad("\"/etc/passwd\"", INDEX_NAME ": weight_map: tensor \"w\": shard path "
	                                        "\"/etc/passwd\" is absolute");
	shard_bad("\"/\"", "is absolute");
}
END_TEST

START_TEST(test_shard_dotdot)
{
	shard_bad("\"../model.safetensors\"", "shard path \"../model.safetensors\" has a \"..\" "
	                                      "component");
	shard_bad("\"a/../../b.safetensors\"", "has a \"..\" component");
	shard_bad("\"a/..\"", "has a \"..\" component");
	shard_bad("\"..\"", "has a \"..\" component");
}
END_TEST

START_TEST(test_shard_dot)
{
	shard_bad("\"./model.safetensors\"", "has a \".\" component");
	shard_bad("\"a/./b.safetensors\"", "has a \".\" component");
	shard_bad("\".\"", "has a \".\" component");
}
END_TEST

START_TEST(test_shard_empty)
{
	shard_bad("\"\"", "shard path \"\" is empty");
}
END_TEST

START_TEST(test_shard_empty_component)
{
	shard_bad("\"a//b.safetensors\"", "has an empty component");
}
END_TEST

START_TEST(test_shard_trailing_slash)
{
	shard_bad("\"dir/\"", "ends with '/'");
}
END_TEST

START_TEST(test_shard_control)
{
	shard_bad("\"a\\u0001b\"", "shard path \"a\\x01b\" contains a control character");
	shard_bad("\"a\\nb\"", "contains a control character");
	shard_bad("\"a\x7f\"", "contains a control character");
	/* A raw control byte never gets past the JSON layer. */
	shard_bad("\"a\x01\"", "invalid JSON in index: raw control byte 0x01");
}
END_TEST

START_TEST(test_shard_nul)
{
	shard_bad("\"a\\u0000.safetensors\"", "\\u0000 in a string");
}
END_TEST

START_TEST(test_shard_allowed)
{
	shard_ok("\"sub/dir/model.safetensors\"", "sub/dir/model.safetensors");
	shard_ok("\".hidden.safetensors\"", ".hidden.safetensors");
	shard_ok("\"..x.safetensors\"", "..x.safetensors");
	shard_ok("\"a..b/c.\"", "a..b/c.");
	shard_ok("\"model weights \\u00e9.safetensors\"", "model weights \xc3\xa9.safetensors");
}
END_TEST

/* ---- JSON-level errors --------------------------------------------------- */

START_TEST(test_not_object)
{
	idx_bad("[]", INDEX_NAME ": invalid JSON in index: the top-level value is not an object");
}
END_TEST

START_TEST(test_syntax)
{
	idx_bad("{\"weight_map\": {\"a\": \"s\"}", "invalid JSON in index: syntax error");
	idx_bad("", "invalid JSON in index: empty index");
	idx_bad("{\"weight_map\": {}} x", "unexpected character 'x'");
	idx_bad("\xef\xbb\xbf{\"weight_map\": {}}", "byte-order mark");
	idx_bad("{\"weight_map\": {\"\xff\": \"s\"}}", "invalid UTF-8 in index");
}
END_TEST

START_TEST(test_whitespace_ok)
{
	struct placefs_index *idx = idx_ok("\r\n\t {\"weight_map\": {}} \r\n\t ");

	placefs_index_free(idx);
}
END_TEST

/* ---- placefs_index_load -------------------------------------------------- */

static char *tmpdir;

static void fs_setup(void)
{
	tmpdir = tu_mkdtemp();
}

static void fs_teardown(void)
{
	tu_rmtree(tmpdir);
	free(tmpdir);
	tmpdir = NULL;
}

START_TEST(test_load_valid)
{
	char *path = tu_path(tmpdir, INDEX_NAME);
	struct placefs_index *idx = NULL;
	struct placefs_error err;

	tu_write_text(path, typical);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(path, INDEX_NAME, &idx, &err), 0);
	ck_assert_uint_eq(placefs_index_count(idx), 4);
	ck_assert_uint_eq(placefs_index_shard_count(idx), 2);
	placefs_index_free(idx);
	free(path);
}
END_TEST

START_TEST(test_load_invalid)
{
	char *path = tu_path(tmpdir, "custom.index.json");
	struct placefs_index *idx = NULL;
	struct placefs_error err;

	tu_write_text(path, "{\"weight_map\": {\"w\": \"../x\"}}");
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(path, "custom.index.json", &idx, &err), -EINVAL);
	ck_assert_ptr_null(idx);
	ck_assert_str_eq(err.msg, "custom.index.json: weight_map: tensor \"w\": shard path "
	                          "\"../x\" has a \"..\" component");
	free(path);
}
END_TEST

START_TEST(test_load_display_name_defaults_to_path)
{
	char *path = tu_path(tmpdir, "i.json");
	struct placefs_index *idx = NULL;
	struct placefs_error err;

	tu_write_text(path, "{}");
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(path, NULL, &idx, &err), -EINVAL);
	ck_assert_msg(strncmp(err.msg, path, strlen(path)) == 0, "%s", err.msg);
	free(path);
}
END_TEST

START_TEST(test_load_missing)
{
	char *path = tu_path(tmpdir, "nope.json");
	struct placefs_index *idx = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(path, "nope.json", &idx, &err), -ENOENT);
	ck_assert_int_eq(err.kind, PLACEFS_E_IO);
	ck_assert_msg(strstr(err.msg, "nope.json: cannot open the index"), "%s", err.msg);
	free(path);
}
END_TEST

START_TEST(test_load_directory)
{
	struct placefs_index *idx = NULL;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(tmpdir, "dir", &idx, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "dir: the index is not a regular file");
}
END_TEST

/* A FIFO (no writer) as the index: refused at once instead of blocking in open. */
START_TEST(test_load_fifo)
{
	char *path = tu_path(tmpdir, "fifo.json");
	struct placefs_index *idx = NULL;
	struct placefs_error err;

	ck_assert_int_eq(mkfifo(path, 0644), 0);
	alarm(10); /* a hang fails the test instead of stalling the suite */
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(path, "fifo", &idx, &err), -EINVAL);
	alarm(0);
	ck_assert_ptr_null(idx);
	ck_assert_str_eq(err.msg, "fifo: the index is not a regular file");
	free(path);
}
END_TEST

START_TEST(test_load_too_large)
{
	/* A sparse file one byte over the cap: refused from its size alone. */
	char *path = tu_path(tmpdir, "huge.json");
	struct placefs_index *idx = NULL;
	struct placefs_error err;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	char want[160];

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)PLACEFS_INDEX_MAX + 1), 0);
	close(fd);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(path, "huge.json", &idx, &err), -EFBIG);
	ck_assert_int_eq(err.kind, PLACEFS_E_INDEX);
	snprintf(want, sizeof(want),
	         "huge.json: the index is %llu bytes, larger than the limit of %llu",
	         PLACEFS_INDEX_MAX + 1, PLACEFS_INDEX_MAX);
	ck_assert_str_eq(err.msg, want);
	free(path);
}
END_TEST

START_TEST(test_load_empty_file)
{
	char *path = tu_path(tmpdir, "empty.json");
	struct placefs_index *idx = NULL;
	struct placefs_error err;

	tu_write_file(path, "", 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_index_load(path, "empty.json", &idx, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "empty.json: invalid JSON in index: empty index");
	free(path);
}
END_TEST

/* ---- corpus replay ------------------------------------------------------- */

/*
 * One corpus file through placefs_index_load(). An accepted index maps at
 * least one tensor; a refused one returns no index and an index error.
 */
static int corpus_parse(const char *path, const char *name, struct placefs_error *err, void *ctx)
{
	struct placefs_index *idx = NULL;
	int rc;

	(void)ctx;
	placefs_error_clear(err);
	rc = placefs_index_load(path, name, &idx, err);
	if (rc == 0) {
		ck_assert_uint_ge(placefs_index_count(idx), 1);
		placefs_index_free(idx);
	} else {
		ck_assert_ptr_null(idx);
		ck_assert_msg(err->kind == PLACEFS_E_INDEX, "%s: refused with kind %d: %s", name,
		              (int)err->kind, err->msg);
	}
	return rc;
}

START_TEST(test_corpus_bad)
{
	tu_corpus_replay(TEST_SRCDIR "/corpus/bad-index", ".json", 10, TU_CORPUS_BAD, corpus_parse,
	                 NULL);
}
END_TEST

START_TEST(test_corpus_good)
{
	tu_corpus_replay(TEST_SRCDIR "/corpus/good-index", ".json", 2, TU_CORPUS_GOOD, corpus_parse,
	                 NULL);
}
END_TEST

static Suite *index_suite(void)
{
	Suite *s = suite_create("index");
	TCase *tc;

	tc = tcase_create("valid");
	tcase_add_test(tc, test_valid);
	tcase_add_test(tc, test_lookup);
	tcase_add_test(tc, test_free_null);
	tcase_add_test(tc, test_metadata_absent);
	tcase_add_test(tc, test_metadata_null);
	tcase_add_test(tc, test_metadata_contents_ignored);
	tcase_add_test(tc, test_metadata_wrong_type);
	tcase_add_test(tc, test_unknown_keys);
	tcase_add_test(tc, test_empty_weight_map);
	tcase_add_test(tc, test_empty_tensor_name);
	tcase_add_test(tc, test_many_entries);
	tcase_add_test(tc, test_sorted_runs);
	suite_add_tcase(s, tc);

	tc = tcase_create("weight_map");
	tcase_add_test(tc, test_missing_weight_map);
	tcase_add_test(tc, test_weight_map_wrong_type);
	tcase_add_test(tc, test_non_string_shard);
	tcase_add_test(tc, test_duplicate_key);
	tcase_add_test(tc, test_duplicate_key_identical);
	tcase_add_test(tc, test_duplicate_weight_map);
	tcase_add_test(tc, test_duplicate_in_metadata);
	suite_add_tcase(s, tc);

	tc = tcase_create("shard_path");
	tcase_add_test(tc, test_shard_absolute);
	tcase_add_test(tc, test_shard_dotdot);
	tcase_add_test(tc, test_shard_dot);
	tcase_add_test(tc, test_shard_empty);
	tcase_add_test(tc, test_shard_empty_component);
	tcase_add_test(tc, test_shard_trailing_slash);
	tcase_add_test(tc, test_shard_control);
	tcase_add_test(tc, test_shard_nul);
	tcase_add_test(tc, test_shard_allowed);
	suite_add_tcase(s, tc);

	tc = tcase_create("json");
	tcase_add_test(tc, test_not_object);
	tcase_add_test(tc, test_syntax);
	tcase_add_test(tc, test_whitespace_ok);
	suite_add_tcase(s, tc);

	tc = tcase_create("load");
	tcase_add_checked_fixture(tc, fs_setup, fs_teardown);
	tcase_add_test(tc, test_load_valid);
	tcase_add_test(tc, test_load_invalid);
	tcase_add_test(tc, test_load_display_name_defaults_to_path);
	tcase_add_test(tc, test_load_missing);
	tcase_add_test(tc, test_load_directory);
	tcase_add_test(tc, test_load_fifo);
	tcase_add_test(tc, test_load_too_large);
	tcase_add_test(tc, test_load_empty_file);
	suite_add_tcase(s, tc);

	tc = tcase_create("corpus");
	tcase_add_test(tc, test_corpus_bad);
	tcase_add_test(tc, test_corpus_good);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(index_suite());
}
