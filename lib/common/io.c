/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/random.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/io.h"

/* One system call moves at most this much (Linux caps a transfer near 2 GiB). */
#define IO_STEP ((size_t)1 << 30)

static size_t step(size_t left)
{
	return left > IO_STEP ? IO_STEP : left;
}

ssize_t placefs_io_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = pread(fd, (char *)buf + got, step(len - got), (off_t)(off + got));

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

ssize_t placefs_io_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = read(fd, (char *)buf + got, step(len - got));

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

int placefs_io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r =
		        pwrite(fd, (const char *)buf + done, step(len - done), (off_t)(off + done));

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

int placefs_io_write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = write(fd, (const char *)buf + done, step(len - done));

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

int placefs_io_random(void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t k = getrandom((char *)buf + got, len - got, 0);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)k;
	}
	return 0;
}

/* statfs(2) f_type values (linux/magic.h; Lustre's and GPFS's from their sources). */
#define FUSE_MAGIC 0x65735546u
static const uint32_t network_fs_magic[] = {
        FUSE_MAGIC, /* FUSE */
        0x00006969, /* NFS */
        0xff534d42, /* CIFS */
        0xfe534d42, /* SMB2 */
        0x0000517b, /* SMB */
        0x00c36400, /* Ceph */
        0x01021997, /* 9P */
        0x6b414653, /* AFS */
        0x5346414f, /* OpenAFS */
        0x0bd00bd0, /* Lustre */
        0x47504653, /* GPFS */
};

/* fd's file system type (statfs f_type) into *type; -1 when fstatfs() fails. */
static int fs_type(int fd, uint32_t *type)
{
	struct statfs sf;

	if (fstatfs(fd, &sf) != 0)
		return -1;
	*type = (uint32_t)sf.f_type;
	return 0;
}

int placefs_io_on_network_fs(int fd)
{
	uint32_t type;

	if (fs_type(fd, &type) != 0)
		return 0;
	for (size_t i = 0; i < sizeof(network_fs_magic) / sizeof(network_fs_magic[0]); i++)
		if (type == network_fs_magic[i])
			return 1;
	return 0;
}

int placefs_io_on_fuse(int fd)
{
	uint32_t type;

	return fs_type(fd, &type) == 0 && type == FUSE_MAGIC;
}

/* Undoes mountinfo's octal escapes (space is \\040) in place. */
static void unescape_mountinfo(char *s)
{
	char *d = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*d++ = *s;
		}
	}
	*d = '\0';
}

int placefs_io_mountinfo_each(int (*each)(const struct placefs_mountinfo *mi, void *arg), void *arg)
{
	char *line = NULL;
	size_t cap = 0;
	FILE *f;
	int rc = 0;

	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	/* "ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER" */
	while (rc == 0 && getline(&line, &cap, f) > 0) {
		struct placefs_mountinfo mi = {.type = ""};
		char *save = NULL, *tok, *point = NULL, *sep = strstr(line, " - ");
		int i;

		if (sep) {
			sep += 3;
			sep[strcspn(sep, " \n")] = '\0';
			mi.type = sep;
		}
		for (i = 0, tok = strtok_r(line, " ", &save); tok && i < 5;
		     i++, tok = strtok_r(NULL, " ", &save)) {
			if (i == 2)
				mi.dev = tok;
			else if (i == 4)
				point = tok;
		}
		if (!mi.dev || !point)
			continue;
		unescape_mountinfo(point);
		mi.point = point;
		rc = each(&mi, arg);
	}
	free(line);
	fclose(f);
	return 0;
}

struct type_of {
	char dev[32];
	char *out;
	size_t len;
	int found;
};

static int type_of_dev(const struct placefs_mountinfo *mi, void *arg)
{
	struct type_of *t = arg;

	if (strcmp(mi->dev, t->dev) != 0)
		return 0;
	snprintf(t->out, t->len, "%s", mi->type);
	t->found = 1;
	return 1;
}

int placefs_io_fs_type_name(int fd, char *out, size_t len)
{
	struct type_of t = {.out = out, .len = len};
	struct stat st;
	int rc;

	if (len == 0)
		return -EINVAL;
	out[0] = '\0';
	if (fstat(fd, &st) != 0)
		return -errno;
	snprintf(t.dev, sizeof(t.dev), "%u:%u", major(st.st_dev), minor(st.st_dev));
	rc = placefs_io_mountinfo_each(type_of_dev, &t);
	if (rc != 0)
		return rc;
	return t.found ? 0 : -ENOENT;
}
