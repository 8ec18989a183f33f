/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/progress.h"
#include "testutil.h"

#define S  1000000000ULL
#define MS 1000000ULL

static const char *fmt(const char *label, uint64_t done, uint64_t total, uint64_t ns, int final)
{
	static char buf[256];
	size_t n;

	memset(buf, 'Z', sizeof(buf));
	n = placefs_progress_format(buf, sizeof(buf), label, done, total, ns, final);
	ck_assert_uint_eq(n, strlen(buf));
	return buf;
}

START_TEST(test_format_layout)
{
	ck_assert_str_eq(fmt("stage", 1ULL << 30, 4ULL << 30, 2 * S, 0),
	                 "stage [#####...............]  25%  1 GiB/4 GiB  512 MiB/s  ETA 0:06");
	/* No label: no leading space. */
	ck_assert_str_eq(fmt("", 1ULL << 30, 4ULL << 30, 2 * S, 0),
	                 "[#####...............]  25%  1 GiB/4 GiB  512 MiB/s  ETA 0:06");
	ck_assert_str_eq(fmt(NULL, 0, 4ULL << 30, 0, 0),
	                 "[....................]   0%  0 B/4 GiB  --/s  ETA --:--");
	/* Time passed but nothing done yet: a rate of 0, no ETA. */
	ck_assert_str_eq(fmt(NULL, 0, 1000, 3 * S, 0),
	                 "[....................]   0%  0 B/1000 B  0 B/s  ETA --:--");
	/* The final form gives the elapsed time, rounded down. */
	ck_assert_str_eq(fmt("load", 4ULL << 30, 4ULL << 30, 8 * S + 999 * MS, 1),
	                 "load [####################] 100%  4 GiB/4 GiB  455.16 MiB/s  in 0:08");
	/* floor() for the bar and the percentage: 19.99 of 20 is 19 marks, 99%. */
	ck_assert_str_eq(fmt(NULL, 9999, 10000, S, 0),
	                 "[###################.]  99%  9.76 KiB/9.77 KiB  9.76 KiB/s  ETA 0:01");
}
END_TEST

START_TEST(test_format_edges)
{
	/* An empty total is complete. */
	ck_assert_str_eq(fmt(NULL, 0, 0, S, 0),
	                 "[####################] 100%  0 B/0 B  0 B/s  ETA --:--");
	/* More done than announced counts as the total. */
	ck_assert_str_eq(fmt(NULL, 5000, 1000, S, 1),
	                 "[####################] 100%  1000 B/1000 B  1000 B/s  in 0:01");
	/* ETA rounds up, hours appear past 59:59. */
	ck_assert_str_eq(fmt(NULL, 1, 2, S + 1, 0),
	                 "[##########..........]  50%  1 B/2 B  0 B/s  ETA 0:02");
	ck_assert_str_eq(fmt(NULL, 1, 3601, S, 0),
	                 "[....................]   0%  1 B/3.52 KiB  1 B/s  ETA 1:00:00");
	ck_assert_str_eq(fmt(NULL, 1, 3600, S, 0),
	                 "[....................]   0%  1 B/3.52 KiB  1 B/s  ETA 59:59");
	/* The largest values do not overflow. */
	ck_assert_str_eq(fmt(NULL, UINT64_MAX, UINT64_MAX, 1, 0),
	                 "[####################] 100%  16.00 EiB/16.00 EiB  16.00 EiB/s  ETA 0:00");
	/* An ETA past 2^64 seconds is clamped there. */
	ck_assert_str_eq(
	        fmt(NULL, 1, UINT64_MAX, UINT64_MAX, 0),
	        "[....................]   0%  1 B/16.00 EiB  0 B/s  ETA 5124095576030431:00:15");
}
END_TEST

START_TEST(test_format_truncates)
{
	char small[8];
	size_t n;

	n = placefs_progress_format(small, sizeof(small), "x", 1, 2, S, 0);
	ck_assert_uint_gt(n, sizeof(small));
	ck_assert_str_eq(small, "x [####");
	/* A zero-length buffer still reports the length. */
	ck_assert_uint_eq(placefs_progress_format(NULL, 0, "x", 1, 2, S, 0), n);
}
END_TEST

/* The injected clock: the test moves it by hand. */
static uint64_t fake_ns;

static uint64_t fake_clock(void *arg)
{
	ck_assert_ptr_eq(arg, &fake_ns);
	return fake_ns;
}

/* What the bar wrote to f since the last call (f is rewound and truncated). */
static char *drain(FILE *f)
{
	static char out[4096];
	long n;

	fflush(f);
	n = ftell(f);
	ck_assert_int_ge(n, 0);
	ck_assert_int_lt(n, (long)sizeof(out));
	rewind(f);
	ck_assert_uint_eq(fread(out, 1, (size_t)n, f), (size_t)n);
	out[n] = '\0';
	rewind(f);
	ck_assert_int_eq(ftruncate(fileno(f), 0), 0);
	return out;
}

START_TEST(test_draw_and_throttle)
{
	struct placefs_progress *p = NULL;
	struct placefs_error err;
	FILE *f = tmpfile();

	ck_assert_ptr_nonnull(f);
	placefs_error_clear(&err);
	fake_ns = 1000 * S;
	ck_assert_int_eq(placefs_progress_create(f, 4000, "t", 1, fake_clock, &fake_ns, &p, &err),
	                 0);
	ck_assert_int_eq(placefs_progress_enabled(p), 1);
	/* Nothing until the first update, which always draws. */
	ck_assert_str_eq(drain(f), "");
	fake_ns += 500 * MS;
	placefs_progress_update(p, 1000);
	ck_assert_str_eq(
	        drain(f),
	        "\rt [#####...............]  25%  1000 B/3.91 KiB  1.95 KiB/s  ETA 0:02\033[K");
	/* Within 0.1 s of that draw: counted, not drawn. */
	fake_ns += 99 * MS;
	placefs_progress_update(p, 1000);
	ck_assert_str_eq(drain(f), "");
	fake_ns += 1 * MS;
	placefs_progress_update(p, 0);
	ck_assert_str_eq(
	        drain(f),
	        "\rt [##########..........]  50%  1.95 KiB/3.91 KiB  3.25 KiB/s  ETA 0:01\033[K");
	/* Ten updates a millisecond apart draw once at most. */
	for (int i = 0; i < 10; i++) {
		fake_ns += MS;
		placefs_progress_update(p, 10);
	}
	ck_assert_str_eq(drain(f), "");
	/* clear erases the line and the next update draws at once. */
	placefs_progress_clear(p);
	ck_assert_str_eq(drain(f), "\r\033[K");
	placefs_progress_clear(p);
	ck_assert_str_eq(drain(f), "");
	fake_ns += MS;
	placefs_progress_update(p, 1900);
	ck_assert_str_eq(
	        drain(f),
	        "\rt [####################] 100%  3.91 KiB/3.91 KiB  6.39 KiB/s  ETA 0:00\033[K");
	/* The final line ends with a newline, once. */
	fake_ns += 2 * S;
	placefs_progress_finish(p);
	ck_assert_str_eq(
	        drain(f),
	        "\rt [####################] 100%  3.91 KiB/3.91 KiB  1.5 KiB/s  in 0:02\033[K\n");
	placefs_progress_finish(p);
	placefs_progress_update(p, 5);
	placefs_progress_clear(p);
	ck_assert_str_eq(drain(f), "");
	placefs_progress_free(p);
	fclose(f);
}
END_TEST

START_TEST(test_disabled_writes_nothing)
{
	struct placefs_progress *p = NULL;
	FILE *f = tmpfile();

	ck_assert_ptr_nonnull(f);
	/* -1: only on a terminal, and a temporary file is not one. */
	ck_assert_int_eq(placefs_progress_create(f, 100, "x", -1, fake_clock, &fake_ns, &p, NULL),
	                 0);
	ck_assert_int_eq(placefs_progress_enabled(p), 0);
	placefs_progress_update(p, 50);
	placefs_progress_clear(p);
	placefs_progress_finish(p);
	ck_assert_str_eq(drain(f), "");
	placefs_progress_free(p);
	/* 0: never, whatever the stream. */
	ck_assert_int_eq(placefs_progress_create(f, 100, NULL, 0, NULL, NULL, &p, NULL), 0);
	placefs_progress_update(p, 100);
	placefs_progress_finish(p);
	ck_assert_str_eq(drain(f), "");
	placefs_progress_free(p);
	fclose(f);
}
END_TEST

START_TEST(test_null_and_errors)
{
	struct placefs_progress *p = NULL;
	struct placefs_error err;

	placefs_progress_update(NULL, 1);
	placefs_progress_clear(NULL);
	placefs_progress_finish(NULL);
	placefs_progress_free(NULL);
	ck_assert_int_eq(placefs_progress_enabled(NULL), 0);
	placefs_error_clear(&err);
	ck_assert_int_eq(placefs_progress_create(NULL, 1, "x", 1, NULL, NULL, &p, &err), -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(err.code, -EINVAL);
	/* The real clock: a bar on stderr, disabled, still counts without drawing. */
	ck_assert_int_eq(placefs_progress_create(stderr, 10, "x", 0, NULL, NULL, &p, &err), 0);
	placefs_progress_update(p, UINT64_MAX);
	placefs_progress_update(p, UINT64_MAX);
	placefs_progress_finish(p);
	placefs_progress_free(p);
}
END_TEST

static Suite *progress_suite(void)
{
	Suite *s = suite_create("progress");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_format_layout);
	tcase_add_test(tc, test_format_edges);
	tcase_add_test(tc, test_format_truncates);
	tcase_add_test(tc, test_draw_and_throttle);
	tcase_add_test(tc, test_disabled_writes_nothing);
	tcase_add_test(tc, test_null_and_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(progress_suite());
}
