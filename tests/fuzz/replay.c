/* SPDX-License-Identifier: MIT */
#include "config.h"

/*
 * replay: runs files through a fuzz target's LLVMFuzzerTestOneInput() without
 * libFuzzer, so that `make check` (with the ordinary compiler, and under
 * ASan/UBSan in the sanitizer build) keeps every corpus input and every past
 * crash as a regression test.
 *
 * Usage: replay-<target> PATH...   (directories are walked recursively, in
 * name order). Each input is read into a buffer of exactly its size, as
 * libFuzzer does, so reads past the end are caught by ASan. A broken
 * invariant aborts; exit status 0 means every input ran.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

static size_t ninputs;

static int replay_file(const char *path)
{
	struct stat st;
	uint8_t *buf = NULL;
	size_t got = 0, size;
	int fd, rc = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		goto out;
	}
	size = (size_t)st.st_size;
	buf = malloc(size ? size : 1);
	if (!buf) {
		fprintf(stderr, "replay: %s: out of memory\n", path);
		goto out;
	}
	while (got < size) {
		ssize_t r = read(fd, buf + got, size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr, "replay: %s: %s\n", path,
			        r < 0 ? strerror(errno) : "file shrank while reading");
			goto out;
		}
		got += (size_t)r;
	}
	/* Named first so that a crash report can be traced to its input. */
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
	if (LLVMFuzzerTestOneInput(buf, size) != 0) {
		fprintf(stderr, "replay: %s: the target returned non-zero\n", path);
		goto out;
	}
	ninputs++;
	rc = 0;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}

static int replay_path(const char *path)
{
	struct dirent **ents;
	struct stat st;
	int n, rc = 0;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path);
	n = scandir(path, &ents, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		const char *d = ents[i]->d_name;
		size_t len = strlen(path) + strlen(d) + 2;
		char *sub;

		if (strcmp(d, ".") == 0 || strcmp(d, "..") == 0)
			goto next;
		sub = malloc(len);
		if (!sub) {
			rc = -1;
			goto next;
		}
		snprintf(sub, len, "%s/%s", path, d);
		if (replay_path(sub) < 0)
			rc = -1;
		free(sub);
	next:
		free(ents[i]);
	}
	free(ents);
	return rc;
}

int main(int argc, char **argv)
{
	int rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE-OR-DIRECTORY...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		if (replay_path(argv[i]) < 0)
			rc = 1;
	}
	printf("%s: %zu inputs replayed%s\n", argv[0], ninputs, rc ? ", some unreadable" : "");
	return rc;
}
