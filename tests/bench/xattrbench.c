/* SPDX-License-Identifier: MIT */
/*
 * xattrbench: one llistxattr() per directory entry, the call `ls -l` of
 * coreutils 9.4 makes on every file to look for ACLs. On a FUSE mount each
 * call is one LISTXATTR round trip to the daemon: the kernel caches no
 * extended attributes. Run on the mount and on a tmpfs directory with as many
 * files, the difference is what a listing that asks once per file must pay on
 * top of the tmpfs listing, whatever the daemon answers.
 *
 *   xattrbench DIR
 *
 * Entries whose names start with '.' are skipped, as `ls -l` skips them.
 * Prints one line: calls=N seconds=S us_per_call=U
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>

int main(int argc, char **argv)
{
	static char list[65536];
	struct timespec t0, t1;
	struct dirent *e;
	unsigned long calls = 0;
	char path[4096];
	double secs;
	DIR *d;

	if (argc != 2) {
		fprintf(stderr, "usage: xattrbench DIR\n");
		return 2;
	}
	d = opendir(argv[1]);
	if (!d) {
		fprintf(stderr, "xattrbench: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		if (llistxattr(path, list, sizeof(list)) < 0 && errno != ENOTSUP) {
			fprintf(stderr, "xattrbench: %s: %s\n", path, strerror(errno));
			closedir(d);
			return 1;
		}
		calls++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	closedir(d);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("calls=%lu seconds=%.4f us_per_call=%.2f\n", calls, secs,
	       calls ? secs * 1e6 / (double)calls : 0.0);
	return 0;
}
