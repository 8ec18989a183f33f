/* SPDX-License-Identifier: MIT */
/* Unit tests for lib/device.c: the staging device grammar, checks and names. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "testutil.h"

START_TEST(test_parse)
{
	static const char *const bad[] = {
	        "",         "cuda",    "cuda:",  "cuda:abc", "cuda:-1",    "cuda:1024",
	        "cuda:0x1", " host",   "host ",  "HOST",     "cuda:00001", "gpu",
	        "cuda:1a",  "cuda: 1", "none\n", "cuda:+1",  "cuda:0:1",
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
	        "device spec \"cuda:abc\": expected cuda:N (N from 0 to 1023), host or none");
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
	        placefs_device_check((struct placefs_device){PLACEFS_DEVICE_HOST, 0}, NULL),
	        -EINVAL);
	ck_assert_int_eq(placefs_device_check(
	                         (struct placefs_device){(enum placefs_device_kind)7, -1}, NULL),
	                 -EINVAL);
	ck_assert_str_eq(placefs_device_kind_name((enum placefs_device_kind)7), "unknown");
}
END_TEST

static Suite *device_suite(void)
{
	Suite *s = suite_create("device");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_parse);
	tcase_add_test(tc, test_check_and_format);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(device_suite());
}
