/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
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

int placefs_io_fs_type_name(int fd, char *out, size_t len)
{
	char line[4096], dev[32];
	struct stat st;
	int rc = -ENOENT;
	FILE *f;

	if (len == 0)
		return -EINVAL;
	out[0] = '\0';
	if (fstat(fd, &st) != 0)
		return -errno;
	snprintf(dev, sizeof(dev), "%u:%u", major(st.st_dev), minor(st.st_dev));
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	/* "ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER" */
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *sep, *end;

		p = strchr(p, ' ');
		if (!p || !(p = strchr(p + 1, ' ')))
			continue;
		p++;
		end = strchr(p, ' ');
		if (!end || (size_t)(end - p) != strlen(dev) ||
		    strncmp(p, dev, (size_t)(end - p)) != 0)
			continue;
		sep = strstr(end, " - ");
		if (!sep)
			continue;
		p = sep + 3;
		end = p + strcspn(p, " \n");
		snprintf(out, len, "%.*s", (int)(end - p), p);
		rc = 0;
		break;
	}
	fclose(f);
	return rc;
}
