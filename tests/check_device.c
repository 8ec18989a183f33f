/* SPDX-License-Identifier: MIT */
/* Unit tests for lib/common/device.c: the staging device grammar, checks and names. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/device.h"
#include "testutil.h"

START_TEST(test_parse)
{
	static const char *const bad[] = {
	        "",         "cuda",    "cuda:",    "cuda:abc", "cuda:-1",    "cuda:1024",
	        "cuda:0x1", " host",   "host ",    "HOST",     "cuda:00001", "gpu",
	        "cuda:1a",  "cuda: 1", "none\n",   "cuda:+1",  "cuda:0:1",   "host:",
	        "host:64",  "host:-1", "host:001", "host:a",   "host:0x1",   "cuda:all",
	};
	struct placefs_device d;
	struct placefs_error err;
	size_t i;

	ck_assert_int_eq(placefs_device_parse("none", &d, NULL), 0);
	ck_assert_int_eq(d.kind, PLACEFS_DEVICE_NONE);
	ck_assert_int_eq(d.index, -1);
	ck_assert_int_eq(placefs_device_parse("host", &d, NULL), 0);
	ck_assert_int_eq(d.kind, PLACEFS_DEVICE_HOST);
	ck_assert_int_eq(d.index, -1);
	ck_assert_int_eq(placefs_device_parse("cuda:0", &d, NULL), 0);
	ck_assert_int_eq(d.kind, PLACEFS_DEVICE_CUDA);
	ck_assert_int_eq(d.index, 0);
	ck_assert_int_eq(placefs_device_parse("cuda:1023", &d, NULL), 0);
	ck_assert_int_eq(d.index, 1023);
	ck_assert_int_eq(placefs_device_parse("cuda:07", &d, NULL), 0);
	ck_assert_int_eq(d.index, 7);
	ck_assert_int_eq(placefs_device_parse("host:0", &d, NULL), 0);
	ck_assert_int_eq(d.kind, PLACEFS_DEVICE_HOST);
	ck_assert_int_eq(d.index, 0);
	ck_assert_int_eq(placefs_device_parse("host:63", &d, NULL), 0);
	ck_assert_int_eq(d.index, 63);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		placefs_error_clear(&err);
		ck_assert_msg(placefs_device_parse(bad[i], &d, &err) == -EINVAL, "\"%s\" accepted",
		              bad[i]);
		ck_assert_int_eq(err.kind, PLACEFS_E_USAGE);
		ck_assert_ptr_nonnull(strstr(err.msg, "expected cuda:N"));
	}
	placefs_error_clear(&err);
	placefs_device_parse("cuda:abc", &d, &err);
	ck_assert_str_eq(
	        err.msg,
	        "device spec \"cuda:abc\": expected cuda:N (N from 0 to 1023), host or none (or "
	        "host:N, N from 0 to 63)");
	ck_assert_str_eq(placefs_device_kind_name(PLACEFS_DEVICE_CUDA), "cuda");
	ck_assert_str_eq(placefs_device_kind_name(PLACEFS_DEVICE_HOST), "host");
	ck_assert_str_eq(placefs_device_kind_name(PLACEFS_DEVICE_NONE), "none");
}
END_TEST

START_TEST(test_check_and_format)
{
	char buf[PLACEFS_DEVICE_NAME_MAX];
	struct placefs_device d;
	struct placefs_error err;

	ck_assert_int_eq(placefs_device_parse("cuda:1023", &d, NULL), 0);
	ck_assert_int_eq(placefs_device_check(d, NULL), 0);
	ck_assert_str_eq(placefs_device_format(d, buf), "cuda:1023");
	ck_assert_int_eq(placefs_device_parse("cuda:07", &d, NULL), 0);
	ck_assert_str_eq(placefs_device_format(d, buf), "cuda:7");
	ck_assert_int_eq(placefs_device_parse("host", &d, NULL), 0);
	ck_assert_str_eq(placefs_device_format(d, buf), "host");
	ck_assert_int_eq(placefs_device_parse("none", &d, NULL), 0);
	ck_assert_str_eq(placefs_device_format(d, buf), "none");
	/* Parsing what format wrote gives the value back. */
	d = (struct placefs_device){PLACEFS_DEVICE_CUDA, 42};
	ck_assert_int_eq(placefs_device_parse(placefs_device_format(d, buf), &d, NULL), 0);
	ck_assert_int_eq(d.kind, PLACEFS_DEVICE_CUDA);
	ck_assert_int_eq(d.index, 42);

	placefs_error_clear(&err);
	ck_assert_int_eq(
	        placefs_device_check((struct placefs_device){PLACEFS_DEVICE_CUDA, -1}, &err),
	        -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "index -1"));
	ck_assert_int_eq(
	        placefs_device_check((struct placefs_device){PLACEFS_DEVICE_CUDA, 1024}, NULL),
	        -EINVAL);
	ck_assert_int_eq(
	        placefs_device_check((struct placefs_device){PLACEFS_DEVICE_HOST, 0}, NULL), 0);
	ck_assert_int_eq(
	        placefs_device_check((struct placefs_device){PLACEFS_DEVICE_HOST, 64}, NULL),
	        -EINVAL);
	ck_assert_int_eq(
	        placefs_device_check((struct placefs_device){PLACEFS_DEVICE_HOST, -2}, NULL),
	        -EINVAL);
	ck_assert_int_eq(
	        placefs_device_check((struct placefs_device){PLACEFS_DEVICE_NONE, 0}, NULL),
	        -EINVAL);
	d = (struct placefs_device){PLACEFS_DEVICE_HOST, 5};
	ck_assert_str_eq(placefs_device_format(d, buf), "host:5");
	ck_assert_int_eq(placefs_device_parse(buf, &d, NULL), 0);
	ck_assert_int_eq(d.index, 5);
	ck_assert_int_eq(placefs_device_check(
	                         (struct placefs_device){(enum placefs_device_kind)7, -1}, NULL),
	                 -EINVAL);
	ck_assert_str_eq(placefs_device_kind_name((enum placefs_device_kind)7), "unknown");
}
END_TEST

/* Parses a list that must be accepted and checks it formats back to `want`. */
static struct placefs_devices list_ok(const char *spec, const char *want)
{
	char buf[PLACEFS_DEVICES_NAME_MAX];
	struct placefs_devices l;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_devices_parse(spec, &l, &err) == 0, "\"%s\" refused: %s", spec,
	              err.msg);
	ck_assert_str_eq(placefs_devices_format(&l, buf, sizeof(buf)), want);
	return l;
}

static void list_bad(const char *spec, const char *why)
{
	struct placefs_devices l;
	struct placefs_error err;

	placefs_error_clear(&err);
	ck_assert_msg(placefs_devices_parse(spec, &l, &err) == -EINVAL, "\"%s\" accepted", spec);
	ck_assert_int_eq(err.kind, PLACEFS_E_USAGE);
	ck_assert_msg(strstr(err.msg, why) != NULL, "\"%s\": message \"%s\" lacks \"%s\"", spec,
	              err.msg, why);
	ck_assert_ptr_nonnull(strstr(err.msg, "device list \""));
}

START_TEST(test_list_parse)
{
	struct placefs_devices l;
	char spec[1024], buf[PLACEFS_DEVICES_NAME_MAX];
	size_t at = 0;
	int i;

	/* The single devices mean what they always meant. */
	l = list_ok("none", "none");
	ck_assert_uint_eq(l.n, 0);
	ck_assert_int_eq(l.all, 0);
	l = list_ok("host", "host");
	ck_assert_uint_eq(l.n, 1);
	ck_assert_int_eq(l.items[0].kind, PLACEFS_DEVICE_HOST);
	ck_assert_int_eq(l.items[0].index, -1);
	l = list_ok("cuda:3", "cuda:3");
	ck_assert_uint_eq(l.n, 1);
	ck_assert_int_eq(l.items[0].kind, PLACEFS_DEVICE_CUDA);
	ck_assert_int_eq(l.items[0].index, 3);
	/* Lists keep their order. */
	l = list_ok("cuda:1,cuda:0,cuda:7", "cuda:1,cuda:0,cuda:7");
	ck_assert_uint_eq(l.n, 3);
	ck_assert_int_eq(l.items[2].index, 7);
	ck_assert_int_eq(placefs_devices_find(&l, (struct placefs_device){PLACEFS_DEVICE_CUDA, 0}),
	                 1);
	ck_assert_int_eq(placefs_devices_find(&l, (struct placefs_device){PLACEFS_DEVICE_CUDA, 2}),
	                 -1);
	ck_assert_int_eq(placefs_devices_find(&l, (struct placefs_device){PLACEFS_DEVICE_HOST, 1}),
	                 -1);
	l = list_ok("host:0,host:1,host:2,host:3", "host:0,host:1,host:2,host:3");
	ck_assert_uint_eq(l.n, 4);
	ck_assert_int_eq(l.items[3].kind, PLACEFS_DEVICE_HOST);
	ck_assert_int_eq(l.items[3].index, 3);
	l = list_ok("cuda:all", "cuda:all");
	ck_assert_uint_eq(l.n, 0);
	ck_assert_int_eq(l.all, 1);
	/* 64 devices fit, 65 do not. */
	for (i = 0; i < 64; i++)
		at += (size_t)snprintf(spec + at, sizeof(spec) - at, "%scuda:%d", i ? "," : "",
		                       1023 - i);
	l = list_ok(spec, spec);
	ck_assert_uint_eq(l.n, 64);
	ck_assert_uint_lt(strlen(placefs_devices_format(&l, buf, sizeof(buf))), sizeof(buf));
	snprintf(spec + at, sizeof(spec) - at, ",cuda:0");
	list_bad(spec, "more than 64 devices");

	list_bad("", "an empty item");
	list_bad(NULL, "an empty item");
	list_bad("cuda:0,", "an empty item");
	list_bad(",cuda:0", "an empty item");
	list_bad("cuda:0,,cuda:1", "an empty item");
	list_bad("cuda:0,cuda:0", "cuda:0 is listed twice");
	list_bad("cuda:1,cuda:2,cuda:01", "cuda:1 is listed twice");
	list_bad("host:2,host:2", "host:2 is listed twice");
	list_bad("cuda:0,host:1", "cannot be mixed");
	list_bad("host:0,cuda:1", "cannot be mixed");
	list_bad("host,host:1", "stand alone");
	list_bad("host:1,host", "stand alone");
	list_bad("none,cuda:0", "stand alone");
	list_bad("cuda:0,none", "stand alone");
	list_bad("host,host", "stand alone");
	list_bad("cuda:all,cuda:1", "item \"cuda:all\"");
	list_bad("cuda:0, cuda:1", "item \" cuda:1\"");
	list_bad("cuda:0;cuda:1", "item \"cuda:0;cuda:1\"");
	list_bad("cuda:1024", "item \"cuda:1024\"");
	list_bad("gpu:0", "item \"gpu:0\"");
}
END_TEST

START_TEST(test_list_resolve)
{
	struct placefs_devices l;
	struct placefs_error err;
	char buf[PLACEFS_DEVICES_NAME_MAX];

	ck_assert_int_eq(placefs_devices_parse("cuda:all", &l, NULL), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_devices_resolve(&l, 0, &err), -ENODEV);
	ck_assert_str_eq(err.msg, "cuda:all: no CUDA device is visible");
	ck_assert_int_eq(placefs_devices_resolve(&l, -ENODEV, NULL), -ENODEV);
	ck_assert_int_eq(placefs_devices_resolve(&l, 65, NULL), -EINVAL);
	ck_assert_int_eq(l.all, 1);
	ck_assert_int_eq(placefs_devices_resolve(&l, 4, NULL), 0);
	ck_assert_int_eq(l.all, 0);
	ck_assert_uint_eq(l.n, 4);
	ck_assert_str_eq(placefs_devices_format(&l, buf, sizeof(buf)),
	                 "cuda:0,cuda:1,cuda:2,cuda:3");
	/* A list without "all" is left as it is. */
	ck_assert_int_eq(placefs_devices_parse("host:3", &l, NULL), 0);
	ck_assert_int_eq(placefs_devices_resolve(&l, 0, NULL), 0);
	ck_assert_uint_eq(l.n, 1);
	/* A short buffer is truncated, never overrun. */
	ck_assert_int_eq(placefs_devices_parse("cuda:10,cuda:11", &l, NULL), 0);
	ck_assert_str_eq(placefs_devices_format(&l, buf, 6), "cuda:");
}
END_TEST

static Suite *device_suite(void)
{
	Suite *s = suite_create("device");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_parse);
	tcase_add_test(tc, test_check_and_format);
	tcase_add_test(tc, test_list_parse);
	tcase_add_test(tc, test_list_resolve);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(device_suite());
}
