/* SPDX-License-Identifier: MIT */
/*
 * test_viewcheck FILE...: validates each file with the reference reader's
 * rules (lib/safetensors: the header and its tensors against the file's
 * size), as read through read(2); checks that fstat's size is the number of
 * bytes read(2) returns and that a MAP_SHARED mapping of the file holds the
 * same bytes. For the views of a live mount (tests/mount-views.sh). Prints
 * one line per file; exits 1 if any file fails.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/io.h"
#include "format/safetensors.h"

static int check_file(const char *path)
{
	struct placefs_st_header *h = NULL;
	struct placefs_error err;
	uint8_t *buf = NULL, probe;
	void *map = MAP_FAILED;
	struct stat st;
	ssize_t got;
	int fd, rc = 1;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		fprintf(stderr, "FAIL %s: %s\n", path, strerror(errno));
		goto out;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		fprintf(stderr, "FAIL %s: out of memory\n", path);
		goto out;
	}
	got = placefs_io_pread_full(fd, buf, (size_t)st.st_size, 0);
	if (got != (ssize_t)st.st_size || pread(fd, &probe, 1, st.st_size) != 0) {
		fprintf(stderr,
		        "FAIL %s: read gives %zd bytes (or more past them), stat says %lld\n", path,
		        got, (long long)st.st_size);
		goto out;
	}
	placefs_error_clear(&err);
	if (placefs_st_parse_buffer(path, buf, (size_t)st.st_size, &h, &err) != 0) {
		fprintf(stderr, "FAIL %s\n", err.msg);
		goto out;
	}
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			fprintf(stderr, "FAIL %s: mmap MAP_SHARED: %s\n", path, strerror(errno));
			goto out;
		}
		if (memcmp(map, buf, (size_t)st.st_size) != 0) {
			fprintf(stderr, "FAIL %s: the mapping differs from read()\n", path);
			goto out;
		}
	}
	printf("ok %s: %zu tensors, header %llu bytes, %lld bytes\n", path,
	       placefs_st_header_tensor_count(h),
	       (unsigned long long)placefs_st_header_data_start(h), (long long)st.st_size);
	rc = 0;
out:
	if (map != MAP_FAILED)
		munmap(map, (size_t)st.st_size);
	placefs_st_header_free(h);
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	int bad = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: test_viewcheck FILE...\n");
		return 2;
	}
	for (int i = 1; i < argc; i++)
		bad |= check_file(argv[i]);
	return bad;
}
