/* SPDX-License-Identifier: MIT */
/*
 * progress-fmt: prints placefs_progress_format() lines for tests/progress-tty.sh,
 * which compares them with python/placefs/_progress.py's format_line().
 *
 *   progress-fmt LABEL DONE TOTAL ELAPSED_NS FINAL   (one line out)
 *   progress-fmt -                                    (the same five fields per
 *                                                      stdin line, tab-separated)
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/progress.h"

static int one(const char *label, const char *done, const char *total, const char *ns,
               const char *final)
{
	char line[512];

	placefs_progress_format(line, sizeof(line), label, strtoull(done, NULL, 10),
	                        strtoull(total, NULL, 10), strtoull(ns, NULL, 10), atoi(final));
	return puts(line) < 0;
}

int main(int argc, char **argv)
{
	char buf[1024];

	if (argc == 6)
		return one(argv[1], argv[2], argv[3], argv[4], argv[5]);
	if (argc != 2 || strcmp(argv[1], "-") != 0) {
		fprintf(stderr, "usage: progress-fmt LABEL DONE TOTAL ELAPSED_NS FINAL | -\n");
		return 2;
	}
	while (fgets(buf, sizeof(buf), stdin)) {
		char *f[5], *save = NULL;
		int i;

		buf[strcspn(buf, "\n")] = '\0';
		for (i = 0; i < 5; i++) {
			f[i] = strtok_r(i ? NULL : buf, "\t", &save);
			if (!f[i])
				break;
		}
		/* An empty label is written as "-". */
		if (i != 5 || one(strcmp(f[0], "-") ? f[0] : "", f[1], f[2], f[3], f[4]))
			return 1;
	}
	return 0;
}
