/* SPDX-License-Identifier: MIT */
/*
 * test_syscalls: a system-call level checker run against a live placefs
 * mount (in the spirit of libfuse's test/test_syscalls.c).
 *
 *   test_syscalls MOUNTPOINT SOURCE
 *
 * SOURCE is what the mount serves (a .safetensors file or a checkpoint
 * directory). Every tensor file is compared with its byte range in the
 * source shard named by its xattrs; the checkpoint order, the attributes,
 * the read edges, mmap, O_DIRECT, the xattr protocol, the by-placement
 * links and the refusal of every write-class call are checked. Prints one
 * line per failed check and exits 1 if any failed, 0 otherwise.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/io.h"

static unsigned long checks, failures;
static const char *mnt, *source;
static int source_is_dir;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...)
{
	va_list ap;

	failures++;
	fputs("FAIL: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		checks++;                                                                          \
		if (!(cond))                                                                       \
			failf(__VA_ARGS__);                                                        \
	} while (0)

/* Checks that a call returned -1 with errno `want` (or `alt` when nonzero). */
#define CHECK_ERRNO(call, want, alt, what)                                                         \
	do {                                                                                       \
		int r_ = (int)(call);                                                              \
		int e_ = errno;                                                                    \
		checks++;                                                                          \
		if (r_ != -1 || (e_ != (want) && ((alt) == 0 || e_ != (alt))))                     \
			failf("%s: returned %d, errno %d (%s); expected %s", what, r_,             \
			      r_ == -1 ? e_ : 0, r_ == -1 ? strerror(e_) : "-", #want);            \
	} while (0)

struct tensor {
	char *fname;
	char *shard; /* the shard's path */
	uint64_t offset;
	uint64_t nbytes;
	char placement[8];
};

static char *path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + 1 + lb + 1);

	if (!s) {
		perror("malloc");
		exit(2);
	}
	memcpy(s, a, la);
	s[la] = '/';
	memcpy(s + la + 1, b, lb + 1);
	return s;
}

/* Reads xattr `name` of `path` as a NUL-terminated string; NULL on failure. */
static char *get_xattr(const char *path, const char *name)
{
	ssize_t n = getxattr(path, name, NULL, 0);
	char *v;

	if (n < 0)
		return NULL;
	v = malloc((size_t)n + 1);
	if (!v)
		return NULL;
	n = getxattr(path, name, v, (size_t)n);
	if (n < 0) {
		free(v);
		return NULL;
	}
	v[n] = '\0';
	return v;
}

/* The whole range unless EOF comes first (lib/common/io.h); *got is what was read. */
static int read_all_at(int fd, void *buf, size_t len, off_t off, size_t *got)
{
	ssize_t r = placefs_io_pread_full(fd, buf, len, (uint64_t)off);

	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	*got = (size_t)r;
	return 0;
}

/* Compares [off, off + len) of the tensor file (fd) with the source range. */
static void compare_range(const struct tensor *t, int fd, int sfd, uint64_t off, size_t len)
{
	char *a = malloc(len ? len : 1), *b = malloc(len ? len : 1);
	size_t ga = 0, gb = 0;

	if (!a || !b) {
		perror("malloc");
		exit(2);
	}
	checks++;
	if (read_all_at(fd, a, len, (off_t)off, &ga) < 0)
		failf("%s: pread(%zu @ %" PRIu64 "): %s", t->fname, len, off, strerror(errno));
	else if (read_all_at(sfd, b, len, (off_t)(t->offset + off), &gb) < 0 || gb != len)
		failf("%s: source %s too short", t->fname, t->shard);
	else if (ga != len || memcmp(a, b, len) != 0)
		failf("%s: bytes [%" PRIu64 ", +%zu) differ from the source (got %zu bytes)",
		      t->fname, off, len, ga);
	free(a);
	free(b);
}

static void check_read_edges(const struct tensor *t, int fd)
{
	char buf[16];
	ssize_t r;
	off_t end;

	r = pread(fd, buf, sizeof(buf), (off_t)t->nbytes);
	CHECK(r == 0, "%s: pread at size returned %zd, expected 0", t->fname, r);
	r = pread(fd, buf, sizeof(buf), (off_t)t->nbytes + 1);
	CHECK(r == 0, "%s: pread at size+1 returned %zd, expected 0", t->fname, r);
	r = pread(fd, buf, sizeof(buf), (off_t)1 << 62);
	CHECK(r == 0, "%s: pread at 2^62 returned %zd, expected 0", t->fname, r);
	if (t->nbytes > 0) {
		r = pread(fd, buf, 2, (off_t)t->nbytes - 1);
		CHECK(r == 1, "%s: pread of 2 at size-1 returned %zd, expected 1", t->fname, r);
	}
	end = lseek(fd, 0, SEEK_END);
	CHECK(end == (off_t)t->nbytes, "%s: lseek SEEK_END gave %jd, expected %" PRIu64, t->fname,
	      (intmax_t)end, t->nbytes);
	r = read(fd, buf, sizeof(buf));
	CHECK(r == 0, "%s: read at end returned %zd", t->fname, r);
	CHECK(lseek(fd, 0, SEEK_SET) == 0, "%s: lseek SEEK_SET 0 failed", t->fname);
}

static void check_mmap(const struct tensor *t, int fd, int sfd)
{
	size_t len = (size_t)t->nbytes;
	char *src;
	void *p;
	size_t got;

	if (len == 0)
		return;
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	checks++;
	if (p == MAP_FAILED) {
		failf("%s: mmap MAP_SHARED: %s", t->fname, strerror(errno));
		return;
	}
	src = malloc(len);
	if (!src) {
		perror("malloc");
		exit(2);
	}
	checks++;
	if (read_all_at(sfd, src, len, (off_t)t->offset, &got) < 0 || got != len ||
	    memcmp(p, src, len) != 0)
		failf("%s: mmap MAP_SHARED content differs from the source", t->fname);
	free(src);
	munmap(p, len);
}

static void check_odirect(const struct tensor *t, int sfd)
{
	char *path = path_join(mnt, t->fname);
	size_t len = t->nbytes > (4u << 20) ? (4u << 20) : (size_t)t->nbytes;
	size_t cap = (len + 4095) & ~(size_t)4095;
	void *buf = NULL;
	char *src;
	size_t got = 0;
	int fd;

	fd = open(path, O_RDONLY | O_DIRECT);
	checks++;
	if (fd < 0) {
		failf("%s: open O_DIRECT: %s", t->fname, strerror(errno));
		free(path);
		return;
	}
	if (posix_memalign(&buf, 4096, cap ? cap : 4096) != 0 || !(src = malloc(len + 1))) {
		perror("malloc");
		exit(2);
	}
	checks++;
	if (read_all_at(fd, buf, cap ? cap : 4096, 0, &got) < 0)
		failf("%s: O_DIRECT read: %s", t->fname, strerror(errno));
	else if (got < len || (len > 0 && (read_all_at(sfd, src, len, (off_t)t->offset, &got) < 0 ||
	                                   memcmp(buf, src, len) != 0)))
		failf("%s: O_DIRECT read differs from the source", t->fname);
	free(src);
	free(buf);
	close(fd);
	free(path);
}

static void check_xattrs(const struct tensor *t, const char *path)
{
	static const char *const names[] = {
	        "user.placefs.placement", "user.placefs.dtype",  "user.placefs.shape",
	        "user.placefs.nbytes",    "user.placefs.source", "user.placefs.offset",
	        "user.placefs.name",      "user.placefs.index",
	};
	char list[1024], small[4];
	ssize_t n, m;
	size_t i;

	n = listxattr(path, NULL, 0);
	CHECK(n > 0 && (size_t)n < sizeof(list), "%s: listxattr size probe gave %zd", t->fname, n);
	if (n <= 0 || (size_t)n >= sizeof(list))
		return;
	CHECK_ERRNO(listxattr(path, small, 1), ERANGE, 0, "listxattr with a 1-byte buffer");
	m = listxattr(path, list, sizeof(list));
	CHECK(m == n, "%s: listxattr returned %zd, probe said %zd", t->fname, m, n);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		ssize_t pos = 0, vl;
		int found = 0;

		while (pos < m) {
			if (strcmp(list + pos, names[i]) == 0)
				found = 1;
			pos += (ssize_t)strlen(list + pos) + 1;
		}
		CHECK(found, "%s: listxattr lacks %s", t->fname, names[i]);
		vl = getxattr(path, names[i], NULL, 0);
		CHECK(vl > 0, "%s: getxattr %s probe gave %zd", t->fname, names[i], vl);
		if (vl > 1)
			CHECK_ERRNO(getxattr(path, names[i], small, 1), ERANGE, 0,
			            "getxattr with a 1-byte buffer");
	}
	CHECK_ERRNO(getxattr(path, "user.placefs.nope", small, sizeof(small)), ENODATA, 0,
	            "getxattr of an unknown user.placefs name");
	CHECK_ERRNO(getxattr(path, "user.other", NULL, 0), ENODATA, 0,
	            "getxattr of an unknown name (probe)");
	/* Namespaces placefs does not have: "not supported", so ls -l stops probing. */
	CHECK_ERRNO(getxattr(path, "trusted.x", small, sizeof(small)), EOPNOTSUPP, 0,
	            "getxattr of trusted.x");
	if (access("/sys/fs/selinux", F_OK) != 0) /* an active SELinux answers for itself */
		CHECK_ERRNO(lgetxattr(path, "security.selinux", small, sizeof(small)), EOPNOTSUPP,
		            0, "lgetxattr of security.selinux");
	CHECK_ERRNO(getxattr(path, "security.capability", NULL, 0), EOPNOTSUPP, 0,
	            "getxattr of security.capability (probe)");
	CHECK_ERRNO(getxattr(path, "system.posix_acl_access", small, sizeof(small)), EOPNOTSUPP, 0,
	            "getxattr of system.posix_acl_access");
}

static void check_tensor(const struct tensor *t)
{
	char *path = path_join(mnt, t->fname);
	struct stat st, ss;
	uint64_t off;
	int fd, sfd;

	sfd = open(t->shard, O_RDONLY);
	if (sfd < 0) {
		failf("%s: cannot open source shard %s: %s", t->fname, t->shard, strerror(errno));
		free(path);
		return;
	}
	CHECK(stat(path, &st) == 0, "%s: stat: %s", t->fname, strerror(errno));
	CHECK(fstat(sfd, &ss) == 0, "stat %s", t->shard);
	CHECK(S_ISREG(st.st_mode), "%s: not a regular file", t->fname);
	/* The shard's read bits and owner (doc/SEMANTICS.md: permissions and ownership). */
	CHECK((st.st_mode & 07777) == (ss.st_mode & 0444), "%s: mode %o, expected %o", t->fname,
	      st.st_mode & 07777, ss.st_mode & 0444);
	CHECK(st.st_uid == ss.st_uid && st.st_gid == ss.st_gid,
	      "%s: owner %u:%u, expected the shard's %u:%u", t->fname, (unsigned)st.st_uid,
	      (unsigned)st.st_gid, (unsigned)ss.st_uid, (unsigned)ss.st_gid);
	CHECK(st.st_nlink == 1, "%s: nlink %ju", t->fname, (uintmax_t)st.st_nlink);
	CHECK((uint64_t)st.st_size == t->nbytes, "%s: size %jd, expected %" PRIu64, t->fname,
	      (intmax_t)st.st_size, t->nbytes);
	CHECK(st.st_mtim.tv_sec == ss.st_mtim.tv_sec && st.st_mtim.tv_nsec == ss.st_mtim.tv_nsec,
	      "%s: mtime %jd.%09ld differs from the shard's %jd.%09ld", t->fname,
	      (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (intmax_t)ss.st_mtim.tv_sec,
	      ss.st_mtim.tv_nsec);
	CHECK((uint64_t)st.st_blocks * 512 >= t->nbytes, "%s: st_blocks %jd too small", t->fname,
	      (intmax_t)st.st_blocks);

	fd = open(path, O_RDONLY);
	checks++;
	if (fd < 0) {
		failf("%s: open O_RDONLY: %s", t->fname, strerror(errno));
		goto out;
	}
	/* The whole file in 1 MiB pieces, then a few unaligned ranges. */
	for (off = 0; off < t->nbytes; off += 1u << 20)
		compare_range(t, fd, sfd, off,
		              t->nbytes - off < (1u << 20) ? (size_t)(t->nbytes - off) : 1u << 20);
	if (t->nbytes > 3) {
		compare_range(t, fd, sfd, 1, (size_t)(t->nbytes - 2));
		compare_range(t, fd, sfd, t->nbytes / 3, (size_t)(t->nbytes / 3 + 1));
	}
	check_read_edges(t, fd);
	check_mmap(t, fd, sfd);
	close(fd);
	check_odirect(t, sfd);
	check_xattrs(t, path);
out:
	close(sfd);
	free(path);
}

/* Collects the tensors from the root listing; checks its order on the way. */
static struct tensor *list_tensors(size_t *count)
{
	struct tensor *v = NULL;
	size_t n = 0, ndot = 0, nctl = 0;
	struct dirent *de;
	DIR *d;
	char *prev_shard = NULL;
	uint64_t prev_off = 0;

	d = opendir(mnt);
	if (!d) {
		failf("opendir %s: %s", mnt, strerror(errno));
		*count = 0;
		return NULL;
	}
	while ((de = readdir(d)) != NULL) {
		struct tensor t;
		char *path, *off, *nb, *src, *pl;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
			ndot++;
			continue;
		}
		if (strcmp(de->d_name, ".placefs") == 0) {
			CHECK(n == 0, "'.placefs' is not listed before the tensors");
			CHECK(de->d_type == DT_DIR, "'.placefs' d_type %d", de->d_type);
			nctl++;
			continue;
		}
		CHECK(de->d_type == DT_REG, "%s: d_type %d, expected DT_REG", de->d_name,
		      de->d_type);
		path = path_join(mnt, de->d_name);
		off = get_xattr(path, "user.placefs.offset");
		nb = get_xattr(path, "user.placefs.nbytes");
		src = get_xattr(path, "user.placefs.source");
		pl = get_xattr(path, "user.placefs.placement");
		checks++;
		if (!off || !nb || !src || !pl) {
			failf("%s: missing xattrs", de->d_name);
			free(path);
			free(off);
			free(nb);
			free(src);
			free(pl);
			continue;
		}
		memset(&t, 0, sizeof(t));
		t.fname = strdup(de->d_name);
		t.offset = strtoull(off, NULL, 10);
		t.nbytes = strtoull(nb, NULL, 10);
		t.shard = source_is_dir ? path_join(source, src) : strdup(source);
		snprintf(t.placement, sizeof(t.placement), "%s", pl);
		CHECK(strcmp(pl, "gpu") == 0 || strcmp(pl, "cpu") == 0, "%s: placement '%s'",
		      t.fname, pl);
		/* Checkpoint order: shards by path (byte order), then tensors by offset. */
		if (prev_shard) {
			int c = strcmp(prev_shard, src);

			CHECK(c < 0 || (c == 0 && prev_off <= t.offset),
			      "%s: listed out of checkpoint order (after %s@%" PRIu64 ")", t.fname,
			      prev_shard, prev_off);
		}
		free(prev_shard);
		prev_shard = src;
		prev_off = t.offset;
		v = realloc(v, (n + 1) * sizeof(*v));
		if (!v) {
			perror("realloc");
			exit(2);
		}
		v[n++] = t;
		free(path);
		free(off);
		free(nb);
		free(pl);
	}
	closedir(d);
	free(prev_shard);
	CHECK(ndot == 2, "root lists %zu dot entries, expected 2", ndot);
	CHECK(nctl == 1, "root lists '.placefs' %zu times", nctl);
	*count = n;
	return v;
}

static void check_links(const struct tensor *v, size_t n)
{
	static const char *const pl[] = {"gpu", "cpu"};
	size_t seen = 0;
	int k;

	for (k = 0; k < 2; k++) {
		char dir[PATH_MAX];
		struct dirent *de;
		DIR *d;

		snprintf(dir, sizeof(dir), "%s/.placefs/by-placement/%s", mnt, pl[k]);
		d = opendir(dir);
		checks++;
		if (!d) {
			failf("opendir %s: %s", dir, strerror(errno));
			continue;
		}
		while ((de = readdir(d)) != NULL) {
			char want[PATH_MAX], got[PATH_MAX];
			char *lp, *pv;
			struct stat a, b;
			ssize_t r;
			size_t i;

			if (de->d_name[0] == '.')
				continue; /* encoded names never start with '.' */
			seen++;
			lp = path_join(dir, de->d_name);
			r = readlink(lp, got, sizeof(got) - 1);
			snprintf(want, sizeof(want), "../../../%s", de->d_name);
			checks++;
			if (r < 0 || (got[r] = '\0', strcmp(got, want) != 0))
				failf("%s: readlink gave '%s', expected '%s'", lp, r < 0 ? "" : got,
				      want);
			CHECK(lstat(lp, &a) == 0 && S_ISLNK(a.st_mode) &&
			              (size_t)a.st_size == strlen(want),
			      "%s: lstat: not a link of size %zu", lp, strlen(want));
			CHECK(stat(lp, &a) == 0, "%s: stat through the link: %s", lp,
			      strerror(errno));
			for (i = 0; i < n && strcmp(v[i].fname, de->d_name) != 0; i++)
				;
			CHECK(i < n, "%s: no such tensor in the root", lp);
			if (i < n) {
				char *fp = path_join(mnt, v[i].fname);

				CHECK(stat(fp, &b) == 0 && a.st_ino == b.st_ino,
				      "%s: link does not resolve to the tensor file", lp);
				CHECK(strcmp(v[i].placement, pl[k]) == 0,
				      "%s: tensor placed '%s' listed under %s", lp, v[i].placement,
				      pl[k]);
				free(fp);
			}
			pv = get_xattr(lp, "user.placefs.placement"); /* follows the link */
			CHECK(pv && strcmp(pv, pl[k]) == 0, "%s: placement through the link '%s'",
			      lp, pv ? pv : "(none)");
			free(pv);
			free(lp);
		}
		closedir(d);
	}
	CHECK(seen == n, "by-placement holds %zu links for %zu tensors", seen, n);
}

static void check_refusals(const struct tensor *t)
{
	char *path = path_join(mnt, t->fname);
	char *newp = path_join(mnt, "placefs-new-file");
	char *dirp = path_join(mnt, ".placefs");
	char *lnk = path_join(mnt, ".placefs/by-placement");
	struct timespec ts[2] = {{0, 0}, {0, 0}};
	int fd;

	CHECK_ERRNO(open(path, O_WRONLY), EROFS, 0, "open O_WRONLY");
	CHECK_ERRNO(open(path, O_RDWR), EROFS, 0, "open O_RDWR");
	CHECK_ERRNO(open(path, O_RDONLY | O_TRUNC), EROFS, 0, "open O_RDONLY|O_TRUNC");
	CHECK_ERRNO(open(path, O_WRONLY | O_APPEND), EROFS, 0, "open O_WRONLY|O_APPEND");
	CHECK_ERRNO(open(newp, O_CREAT | O_WRONLY, 0644), EROFS, 0, "open O_CREAT (new name)");
	CHECK_ERRNO(open(newp, O_CREAT | O_EXCL | O_RDONLY, 0644), EROFS, 0,
	            "open O_CREAT|O_EXCL|O_RDONLY (new name)");
	CHECK_ERRNO(creat(newp, 0644), EROFS, 0, "creat");
	CHECK_ERRNO(truncate(path, 0), EROFS, 0, "truncate");
	CHECK_ERRNO(unlink(path), EROFS, 0, "unlink");
	CHECK_ERRNO(rename(path, newp), EROFS, 0, "rename");
	CHECK_ERRNO(mkdir(newp, 0755), EROFS, 0, "mkdir");
	CHECK_ERRNO(rmdir(lnk), EROFS, 0, "rmdir");
	CHECK_ERRNO(symlink("x", newp), EROFS, 0, "symlink");
	CHECK_ERRNO(link(path, newp), EROFS, EPERM, "link");
	CHECK_ERRNO(mknod(newp, S_IFIFO | 0644, 0), EROFS, 0, "mknod");
	CHECK_ERRNO(chmod(path, 0644), EROFS, EPERM, "chmod");
	CHECK_ERRNO(chown(path, 0, 0), EROFS, EPERM, "chown");
	CHECK_ERRNO(utimensat(AT_FDCWD, path, ts, 0), EROFS, EPERM, "utimensat");
	CHECK_ERRNO(setxattr(path, "user.placefs.x", "1", 1, 0), EROFS, EPERM, "setxattr");
	CHECK_ERRNO(setxattr(path, "user.placefs.placement", "cpu", 3, XATTR_REPLACE), EROFS, EPERM,
	            "setxattr (replace)");
	CHECK_ERRNO(removexattr(path, "user.placefs.placement"), EROFS, EPERM, "removexattr");
	CHECK_ERRNO(access(path, W_OK), EROFS, 0, "access W_OK");
	CHECK_ERRNO(setxattr(dirp, "user.x", "1", 1, 0), EROFS, EPERM, "setxattr on a directory");
	CHECK(access(path, R_OK) == 0, "access R_OK: %s", strerror(errno));

	/* A read-only open of a control file works; a write open does not. */
	fd = open(dirp, O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0, "open .placefs O_DIRECTORY: %s", strerror(errno));
	if (fd >= 0) {
		CHECK_ERRNO(openat(fd, "plan", O_WRONLY), EROFS, 0, "open .placefs/plan O_WRONLY");
		CHECK_ERRNO(getxattr(dirp, "user.placefs.dtype", NULL, 0), ENODATA, 0,
		            "getxattr on a directory");
		CHECK(listxattr(dirp, NULL, 0) == 0, "listxattr on a directory is not empty");
		close(fd);
	}
	free(path);
	free(newp);
	free(dirp);
	free(lnk);
}

static void check_control(void)
{
	static const char *const files[] = {"plan",          "plan.json",    "columns.json",
	                                    "columns.jsonl", "layout.json",  "packed.tsv",
	                                    "shards.json",   "metadata.json"};
	char path[PATH_MAX], buf[4096];
	struct stat st;
	struct statvfs sv;
	size_t i;
	ssize_t r;
	int fd;

	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char *data;
		size_t got = 0;

		snprintf(path, sizeof(path), "%s/.placefs/%s", mnt, files[i]);
		CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
		              (st.st_mode & 0777) == 0444,
		      "%s: not a non-empty 0444 regular file", path);
		fd = open(path, O_RDONLY);
		checks++;
		if (fd < 0) {
			failf("open %s: %s", path, strerror(errno));
			continue;
		}
		data = malloc((size_t)st.st_size + 16);
		if (!data) {
			perror("malloc");
			exit(2);
		}
		CHECK(read_all_at(fd, data, (size_t)st.st_size + 16, 0, &got) == 0 &&
		              got == (size_t)st.st_size,
		      "%s: read %zu bytes, st_size %jd", path, got, (intmax_t)st.st_size);
		free(data);
		close(fd);
	}
	snprintf(path, sizeof(path), "%s/.placefs/stats", mnt);
	CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0,
	      "%s: expected a regular file of size 0", path);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	if (fd >= 0) {
		r = read(fd, buf, sizeof(buf) - 1);
		CHECK(r > 2 && buf[0] == '{' && buf[r - 1] == '\n', "%s: not a JSON document",
		      path);
		close(fd);
	}
	CHECK(statvfs(mnt, &sv) == 0, "statvfs: %s", strerror(errno));
	CHECK(sv.f_flag & ST_RDONLY, "statvfs: ST_RDONLY not set");
	CHECK(sv.f_namemax == 255, "statvfs: f_namemax %lu", sv.f_namemax);
	CHECK(sv.f_bavail == 0 && sv.f_ffree == 0, "statvfs: free space reported");
	CHECK(stat(mnt, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0555,
	      "root: not a 0555 directory");
}

int main(int argc, char **argv)
{
	struct tensor *v;
	struct stat st;
	size_t n, i;

	if (argc != 3) {
		fprintf(stderr, "usage: %s MOUNTPOINT SOURCE\n", argv[0]);
		return 2;
	}
	mnt = argv[1];
	source = argv[2];
	if (stat(source, &st) != 0) {
		fprintf(stderr, "test_syscalls: %s: %s\n", source, strerror(errno));
		return 2;
	}
	source_is_dir = S_ISDIR(st.st_mode);

	v = list_tensors(&n);
	CHECK(n > 0, "no tensor files in %s", mnt);
	for (i = 0; i < n; i++)
		check_tensor(&v[i]);
	check_links(v, n);
	if (n > 0)
		check_refusals(&v[0]);
	check_control();

	for (i = 0; i < n; i++) {
		free(v[i].fname);
		free(v[i].shard);
	}
	free(v);
	printf("test_syscalls: %lu checks on %zu tensors, %lu failed\n", checks, n, failures);
	return failures ? 1 : 0;
}
