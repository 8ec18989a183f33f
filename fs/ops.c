/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/io.h"
#include "ioctl.h"
#include "log.h"
#include "mount.h"
#include "common/name.h"
#include "ops.h"
#include "push.h"
#include "stats.h"
#include "vtree.h"

#define XATTR_PREFIX "user.placefs."

/* The tensor xattrs, in the order listxattr gives them. */
static const char *const xattr_names[] = {
        XATTR_PREFIX "placement", XATTR_PREFIX "dtype",  XATTR_PREFIX "shape",
        XATTR_PREFIX "nbytes",    XATTR_PREFIX "source", XATTR_PREFIX "offset",
        XATTR_PREFIX "name",      XATTR_PREFIX "index",
};
#define N_XATTRS (sizeof(xattr_names) / sizeof(xattr_names[0]))

/*
 * A control file's content generated at open (stats), owned by the file
 * handle. Reference-counted: the kernel may deliver RELEASE (from the reader
 * woken by our reply) before the replying thread has returned from writev,
 * so a READ holds its own reference while it replies.
 */
struct ctl_buf {
	atomic_int refs;
	size_t len;
	char data[];
};

static struct ctl_buf *ctl_buf_get(uint64_t fh)
{
	struct ctl_buf *cb = (struct ctl_buf *)(uintptr_t)fh;

	atomic_fetch_add(&cb->refs, 1);
	return cb;
}

static void ctl_buf_put(struct ctl_buf *cb)
{
	if (atomic_fetch_sub(&cb->refs, 1) == 1)
		free(cb);
}

/* ---- per-thread read buffer ------------------------------------------------ */

/*
 * Each worker thread keeps one buffer for pread-mode replies, sized for the
 * largest request it has seen (1 MiB by default), so a READ costs no
 * allocation. The key's destructor frees it when libfuse ends the thread.
 */
struct tbuf {
	size_t cap;
	char data[];
};

static pthread_key_t tbuf_key;
static pthread_once_t tbuf_once = PTHREAD_ONCE_INIT;
static int tbuf_key_ok;

static void tbuf_key_create(void)
{
	tbuf_key_ok = pthread_key_create(&tbuf_key, free) == 0;
}

static char *thread_buf(size_t len)
{
	struct tbuf *b;
	size_t cap;

	pthread_once(&tbuf_once, tbuf_key_create);
	if (!tbuf_key_ok)
		return NULL;
	b = pthread_getspecific(tbuf_key);
	if (b && b->cap >= len)
		return b->data;
	cap = len < PLACEFS_MAX_READ ? PLACEFS_MAX_READ : len;
	free(b);
	pthread_setspecific(tbuf_key, NULL);
	b = malloc(sizeof(*b) + cap);
	if (!b)
		return NULL;
	b->cap = cap;
	pthread_setspecific(tbuf_key, b);
	return b->data;
}

/* ---- stats ------------------------------------------------------------------------ */

/* Generates the .placefs/stats document: one JSON object and "\n". */
static int stats_format(const struct placefs_mount *m, struct placefs_strbuf *sb)
{
	struct placefs_stats w;
	int rc;

	placefs_stats_init(&w, sb);
	placefs_stats_begin(&w, NULL);
	placefs_mount_stats(m, &w);
	placefs_push_stats(m->push, &w);
	placefs_ioctl_stats(m->stage, &w);
	placefs_stats_end(&w);
	rc = placefs_stats_finish(&w);
	return rc < 0 ? rc : placefs_strbuf_adds(sb, "\n");
}

/* ---- helpers ------------------------------------------------------------------- */

static int fill_entry(const struct placefs_mount *m, uint64_t ino, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->generation = 1;
	e->attr_timeout = PLACEFS_TIMEOUT;
	e->entry_timeout = PLACEFS_TIMEOUT;
	return placefs_vtree_stat(m->vt, ino, &e->attr);
}

/* Replies with the part of data[0, len) that [off, off + size) covers. */
static void reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off)
{
	if (off < 0)
		fuse_reply_err(req, EINVAL);
	else if ((uint64_t)off >= len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, data + off,
		               len - (size_t)off < size ? len - (size_t)off : size);
}

/*
 * The kernel's limit on an xattr value (XATTR_SIZE_MAX): a longer value can
 * never be read (getxattr(2) fails with E2BIG), so formatting stops there.
 */
#define XATTR_VALUE_MAX 65536u

/* One tensor's xattr values, in xattr_names[] order: one allocation. */
struct placefs_xattr_set {
	uint32_t off[N_XATTRS]; /* where each value starts in data */
	uint32_t len[N_XATTRS]; /* its length; UINT32_MAX: longer than XATTR_VALUE_MAX */
	char data[];
};

/*
 * Appends a shape as "[d0, d1, ...]" (placefs_strbuf_add_json_u64_array's
 * format) but stops once it is longer than XATTR_VALUE_MAX: a header may
 * declare millions of dimensions. Returns 0, 1 (too long) or -ENOMEM.
 */
static int add_shape(struct placefs_strbuf *sb, const uint64_t *v, size_t n)
{
	size_t start = sb->len, i;
	int rc = placefs_strbuf_add(sb, "[", 1);

	for (i = 0; rc == 0 && i < n; i++) {
		rc = placefs_strbuf_addf(sb, i ? ", %llu" : "%llu", (unsigned long long)v[i]);
		if (rc == 0 && sb->len - start > XATTR_VALUE_MAX)
			return 1;
	}
	if (rc == 0)
		rc = placefs_strbuf_add(sb, "]", 1);
	if (rc == 0 && sb->len - start > XATTR_VALUE_MAX)
		return 1;
	return rc;
}

/*
 * Value number i (xattr_names[i]) of plan entry e, the plan's entry number
 * `entry`, into sb: 0, 1 (too long) or -ENOMEM.
 */
static int format_value(const struct placefs_mount *m, const struct placefs_plan_entry *e,
                        size_t entry, size_t i, struct placefs_strbuf *sb)
{
	const struct placefs_tensor *t = e->tensor;
	const char *name = xattr_names[i] + strlen(XATTR_PREFIX);

	if (strcmp(name, "placement") == 0)
		return placefs_strbuf_adds(sb, placefs_placement_name(e->placement));
	if (strcmp(name, "dtype") == 0)
		return placefs_strbuf_adds(sb, placefs_dtype_name(t->dtype));
	if (strcmp(name, "shape") == 0)
		return add_shape(sb, t->shape, t->ndim);
	if (strcmp(name, "nbytes") == 0)
		return placefs_strbuf_addf(sb, "%llu", (unsigned long long)t->nbytes);
	if (strcmp(name, "source") == 0)
		return placefs_strbuf_adds(sb, placefs_ckpt_shard(m->ckpt, t->shard)->file);
	if (strcmp(name, "offset") == 0)
		return placefs_strbuf_addf(sb, "%llu", (unsigned long long)t->offset);
	if (strcmp(name, "index") == 0)
		return placefs_strbuf_addf(sb, "%zu", entry);
	return placefs_strbuf_adds(sb, t->name);
}

/* Formats every xattr value of plan entry number `entry` into one allocation; NULL without memory. */
static struct placefs_xattr_set *format_xattrs(struct placefs_mount *m, size_t entry)
{
	const struct placefs_plan_entry *e = placefs_plan_entry(m->plan, entry);
	struct placefs_xattr_set *xs = NULL;
	struct placefs_strbuf sb;
	uint32_t off[N_XATTRS], len[N_XATTRS];
	size_t i, at;
	int rc = 0;

	placefs_strbuf_init(&sb);
	for (i = 0; rc >= 0 && i < N_XATTRS; i++) {
		at = sb.len;
		rc = format_value(m, e, entry, i, &sb);
		if (rc == 1) {
			/* Not kept: it could never be read. */
			sb.len = at;
			off[i] = (uint32_t)at;
			len[i] = UINT32_MAX;
			rc = 0;
		} else if (rc == 0) {
			off[i] = (uint32_t)at;
			len[i] = (uint32_t)(sb.len - at);
		}
	}
	if (rc == 0) {
		xs = malloc(sizeof(*xs) + sb.len + 1);
		if (xs) {
			memcpy(xs->off, off, sizeof(off));
			memcpy(xs->len, len, sizeof(len));
			memcpy(xs->data, placefs_strbuf_cstr(&sb), sb.len);
			xs->data[sb.len] = '\0';
			atomic_fetch_add_explicit(&m->ctr.xattr_formats, 1, memory_order_relaxed);
		}
	}
	placefs_strbuf_release(&sb);
	return xs;
}

/* Plan entry `entry`'s xattr values, formatted on first use and kept; NULL: out of memory. */
static const struct placefs_xattr_set *xattrs_of(struct placefs_mount *m, size_t entry)
{
	struct placefs_xattr_set *xs, *expect = NULL;

	if (entry >= m->nxattrs)
		return NULL;
	xs = atomic_load_explicit(&m->xattrs[entry], memory_order_acquire);
	if (xs)
		return xs;
	xs = format_xattrs(m, entry);
	if (!xs)
		return NULL;
	if (!atomic_compare_exchange_strong_explicit(&m->xattrs[entry], &expect, xs,
	                                             memory_order_acq_rel, memory_order_acquire)) {
		/* Another request formatted it first: use that one. */
		free(xs);
		xs = expect;
	}
	return xs;
}

/* The index of xattr `name` in xattr_names[], or -1. */
static int xattr_index(const char *name)
{
	size_t i;

	for (i = 0; i < N_XATTRS; i++)
		if (strcmp(name, xattr_names[i]) == 0)
			return (int)i;
	return -1;
}

/* Answers a getxattr/listxattr with `data`, following the size-0 probe protocol. */
static void reply_xattr_data(fuse_req_t req, const char *data, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, data, len);
}

/* ---- operations ------------------------------------------------------------------ */

/* Negotiates the connection: full READDIRPLUS always, long-lived caches. No reply. */
static void placefs_op_init(void *userdata, struct fuse_conn_info *conn)
{
	const struct placefs_mount *m = userdata;

	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	/* Always PLUS: "auto" falls back to LOOKUP per entry after the first few thousand. */
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/*
	 * POSIX ACLs only where a shard or aux file has an extended one (named
	 * users or groups): then the tensor and view files of that shard show
	 * its ACL (placefs_op_getxattr), and the kernel evaluates it as it does
	 * the source's (default_permissions). Without any, the mode bits say
	 * everything, getxattr answers EOPNOTSUPP for every namespace but user.
	 * (which `ls -l` remembers per filesystem), and the kernel never asks
	 * for an ACL: with the capability it would ask once per inode (then
	 * cached), one round trip per file on the first `ls -l`. A kernel that
	 * does not offer it gets the narrowed modes (lib/common/perm.h).
	 */
	if (placefs_vtree_has_acls(m->vt)) {
		if (conn->capable & FUSE_CAP_POSIX_ACL) {
			conn->want |= FUSE_CAP_POSIX_ACL;
			placefs_vtree_set_acls(m->vt, true);
			placefs_log(LOG_INFO,
			            "POSIX ACLs: files of shards with an access ACL show it, "
			            "and the kernel checks it");
		} else {
			placefs_log(
			        LOG_WARNING,
			        "POSIX ACLs: the kernel does not offer them to FUSE; files of "
			        "shards with an access ACL show narrowed modes instead (a group or "
			        "other read bit only where the ACL lets every such caller read)");
		}
	}
	/* Large O_DIRECT reads become parallel 1 MiB requests instead of a serial chain. */
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		conn->want |= FUSE_CAP_ASYNC_DIO;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	conn->max_read = PLACEFS_MAX_READ;
	/*
	 * Readahead requests in flight for cold cached reads (the kernel's
	 * default is 12, congested at 9). At the congestion threshold the kernel
	 * drops an async readahead window after allocating its pages, and frees
	 * them again: keep it above every concurrent reader's window (fs/opts.h).
	 */
	conn->max_background = m->opts->max_background;
	conn->congestion_threshold = m->opts->max_background * 3 / 4;
	if (conn->congestion_threshold == 0)
		conn->congestion_threshold = 1;
	placefs_log(LOG_INFO, "readahead requests in flight: at most %u, congested from %u",
	            conn->max_background, conn->congestion_threshold);
	conn->time_gran = 1;
}

/* Valid replies: fuse_reply_entry, fuse_reply_err (ENOENT for a bad parent, ENOTDIR). */
static void placefs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct fuse_entry_param e;
	int64_t ino;

	placefs_mount_tune_readahead(m);
	ino = placefs_vtree_lookup(m->vt, parent, name);
	if (ino < 0) {
		fuse_reply_err(req, (int)-ino);
		return;
	}
	if (ino == 0) {
		/* A negative entry, cached as long as the positive ones: the tree never changes. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = PLACEFS_TIMEOUT;
		fuse_reply_entry(req, &e);
		return;
	}
	if (fill_entry(m, (uint64_t)ino, &e) < 0)
		fuse_reply_err(req, ENOENT);
	else
		fuse_reply_entry(req, &e);
}

/* Inodes live as long as the mount, so lookup counts need no tracking. Valid reply: none. */
static void placefs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino;
	(void)nlookup;
	fuse_reply_none(req);
}

/* Valid reply: none. */
static void placefs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	(void)count;
	(void)forgets;
	fuse_reply_none(req);
}

/* Valid replies: fuse_reply_attr, fuse_reply_err (ENOENT). */
static void placefs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int rc;

	(void)fi;
	placefs_mount_tune_readahead(placefs_mount_of(req));
	rc = placefs_vtree_stat(placefs_mount_of(req)->vt, ino, &st);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, PLACEFS_TIMEOUT);
}

/* Valid replies: fuse_reply_readlink, fuse_reply_err (EINVAL: not a link, ENOENT). */
static void placefs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[sizeof(PLACEFS_LINK_PREFIX) + PLACEFS_NAME_MAX + 1];
	int rc;

	rc = placefs_vtree_readlink(placefs_mount_of(req)->vt, ino, buf, sizeof(buf));
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_readlink(req, buf);
}

/*
 * Tensors: page cache kept across opens (FOPEN_KEEP_CACHE) so MAP_SHARED
 * mappings work; O_DIRECT opens get direct_io, and keep the cache too:
 * without FOPEN_KEEP_CACHE the kernel drops the inode's pages at every open,
 * so one O_DIRECT reader would send every cached reader and mapping of the
 * file back to the daemon. The shard is checked here too,
 * so a changed shard cannot be read even from pages cached before the change
 * through a new open.
 * Valid replies: fuse_reply_open, fuse_reply_err (EROFS, EISDIR, ESTALE, EIO, ENOMEM).
 */
static void placefs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct placefs_strbuf sb;
	struct placefs_vnode node;
	const struct placefs_plan_entry *e;
	struct ctl_buf *cb;
	int rc;

	placefs_mount_tune_readahead(m);
	rc = placefs_vtree_get(m->vt, ino, &node);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (node.kind == PLACEFS_V_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_APPEND))) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fi->noflush = 1;
	switch (node.kind) {
	case PLACEFS_V_TENSOR:
		e = placefs_vtree_entry(m->vt, ino);
		rc = placefs_mount_shard_ok(m, e->tensor->shard);
		if (rc < 0) {
			fuse_reply_err(req, -rc);
			return;
		}
		if (fi->flags & O_DIRECT)
			fi->direct_io = 1;
		fi->keep_cache = 1;
		/* Never 0: the staging leases taken through this handle belong to it. */
		fi->fh = atomic_fetch_add(&m->next_fh, 1) + 1;
		atomic_fetch_add(&m->ctr.open_files, 1);
		if (fuse_reply_open(req, fi) != 0) {
			/* The opener is gone (interrupted): no release will follow. */
			atomic_fetch_sub(&m->ctr.open_files, 1);
			return;
		}
		atomic_fetch_add_explicit(&m->ctr.opens, 1, memory_order_relaxed);
		return;
	case PLACEFS_V_VIEW_SHARD:
	case PLACEFS_V_AUX:
		/* As a tensor: the source is checked, the cache kept (MAP_SHARED works). */
		rc = node.kind == PLACEFS_V_AUX
		             ? placefs_mount_aux_ok(m, node.entry)
		             : placefs_mount_shard_ok(
		                       m, placefs_view_file_shard(m->views[node.view], node.entry));
		if (rc < 0) {
			fuse_reply_err(req, -rc);
			return;
		}
		/* fall through */
	case PLACEFS_V_VIEW_INDEX:
	case PLACEFS_V_FILE:
		if (fi->flags & O_DIRECT)
			fi->direct_io = 1;
		fi->keep_cache = 1;
		fuse_reply_open(req, fi);
		return;
	case PLACEFS_V_STATS:
		/* Generated once per open, so a sequence of reads sees one consistent document. */
		placefs_strbuf_init(&sb);
		rc = stats_format(m, &sb);
		cb = rc < 0 ? NULL : malloc(sizeof(*cb) + sb.len + 1);
		if (!cb) {
			placefs_strbuf_release(&sb);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		atomic_init(&cb->refs, 1);
		cb->len = sb.len;
		memcpy(cb->data, placefs_strbuf_cstr(&sb), sb.len + 1);
		placefs_strbuf_release(&sb);
		fi->fh = (uint64_t)(uintptr_t)cb;
		fi->direct_io = 1;
		if (fuse_reply_open(req, fi) != 0)
			free(cb);
		return;
	default: fuse_reply_err(req, EINVAL); return;
	}
}

/* Serves [off, off + size) of tensor ino; see placefs_op_read(). */
static void read_tensor(fuse_req_t req, struct placefs_mount *m, fuse_ino_t ino, size_t size,
                        off_t off)
{
	const struct placefs_plan_entry *e = placefs_vtree_entry(m->vt, ino);
	const struct placefs_tensor *t = e->tensor;
	const uint8_t *map;
	uint64_t pos;
	size_t len;
	ssize_t got;
	char *buf;
	int rc;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if ((uint64_t)off >= t->nbytes) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	len = t->nbytes - (uint64_t)off < size ? (size_t)(t->nbytes - (uint64_t)off) : size;
	pos = t->offset + (uint64_t)off;
	if (m->check_reads && (rc = placefs_mount_shard_ok(m, t->shard)) < 0)
		goto fail;

	map = placefs_mount_shard_map(m, t->shard);
	if (map) {
		/*
		 * One writev to /dev/fuse straight from the mapping. Should the
		 * shard shrink under it, the kernel's copy faults and the write
		 * fails with EFAULT (the reader gets EIO); the daemon itself never
		 * touches the mapped bytes, so it cannot take a SIGBUS.
		 */
		rc = fuse_reply_buf(req, (const char *)map + pos, len);
		if (rc < 0) {
			atomic_fetch_add_explicit(&m->ctr.read_errors, 1, memory_order_relaxed);
			placefs_mount_shard_map_failed(m, t->shard, pos, rc);
			return;
		}
		placefs_push_note(m->push, (size_t)(ino - PLACEFS_INO_FIRST), (uint64_t)off, len);
		goto done;
	}

	buf = thread_buf(len);
	if (!buf) {
		rc = -ENOMEM;
		goto fail;
	}
	got = placefs_io_pread_full(placefs_ckpt_shard(m->ckpt, t->shard)->fd, buf, len, pos);
	if (got < 0 || (size_t)got < len) {
		/* An error, or a short read: the shard shrank. Never answer with fewer bytes. */
		placefs_mount_shard_read_failed(m, t->shard, got < 0 ? pos : pos + (uint64_t)got,
		                                got < 0 ? (int)-got : 0);
		rc = -EIO;
		goto fail;
	}
	fuse_reply_buf(req, buf, len);
done:
	placefs_mount_shard_read_ok(m, t->shard);
	atomic_fetch_add_explicit(&m->ctr.reads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->ctr.bytes[e->placement == PLACEFS_PLACE_CPU], len,
	                          memory_order_relaxed);
	return;
fail:
	atomic_fetch_add_explicit(&m->ctr.read_errors, 1, memory_order_relaxed);
	fuse_reply_err(req, -rc);
}

/* Pieces of a view file per READ served from the mappings in one writev; more: copied. */
#define VIEW_IOV_MAX 64

/*
 * Serves [off, off + size) of view file `node` (lib/model/view.h's segment map):
 * the header from memory, the payload from the shard as read_tensor() does
 * (one writev from the shard's mapping in read_mode=mmap, else pread into
 * the thread's buffer), after the same shard check.
 */
static void read_view(fuse_req_t req, struct placefs_mount *m, const struct placefs_vnode *node,
                      size_t size, off_t off)
{
	const struct placefs_view *v = m->views[node->view];
	struct placefs_view_piece pc[VIEW_IOV_MAX];
	struct iovec iov[VIEW_IOV_MAX];
	struct placefs_error err;
	uint32_t sh = placefs_view_file_shard(v, node->entry);
	uint64_t fsize = placefs_view_file_size(v, node->entry), mapped, pos;
	const uint8_t *hdr = NULL, *map;
	size_t n, len, at;
	char *buf;
	int rc;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if ((uint64_t)off >= fsize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	len = fsize - (uint64_t)off < size ? (size_t)(fsize - (uint64_t)off) : size;
	if (m->check_reads && (rc = placefs_mount_shard_ok(m, sh)) < 0)
		goto fail;
	if ((uint64_t)off < placefs_view_file_header_size(v, node->entry)) {
		placefs_error_clear(&err);
		hdr = placefs_view_header(v, node->entry, &err);
		if (!hdr) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	map = placefs_mount_shard_map(m, sh);
	n = placefs_view_map(v, node->entry, (uint64_t)off, len, pc, VIEW_IOV_MAX, &mapped);
	if (map && mapped == len) {
		for (size_t k = 0; k < n; k++) {
			iov[k].iov_base =
			        (void *)(pc[k].src == PLACEFS_VIEW_SRC_HEADER ? hdr + pc[k].off
			                                                      : map + pc[k].off);
			iov[k].iov_len = (size_t)pc[k].len;
		}
		/* As read_tensor(): the kernel copies from the mapping; a fault fails the reply. */
		rc = fuse_reply_iov(req, iov, (int)n);
		if (rc < 0) {
			atomic_fetch_add_explicit(&m->ctr.read_errors, 1, memory_order_relaxed);
			placefs_mount_shard_map_failed(m, sh, n ? pc[n - 1].off : 0, rc);
			return;
		}
		goto done;
	}
	buf = thread_buf(len);
	if (!buf) {
		rc = -ENOMEM;
		goto fail;
	}
	for (at = 0, pos = (uint64_t)off; at < len; pos += mapped) {
		n = placefs_view_map(v, node->entry, pos, len - at, pc, VIEW_IOV_MAX, &mapped);
		if (n == 0) {
			rc = -EIO;
			goto fail;
		}
		for (size_t k = 0; k < n; k++) {
			ssize_t got;

			if (pc[k].src == PLACEFS_VIEW_SRC_HEADER) {
				memcpy(buf + at, hdr + pc[k].off, (size_t)pc[k].len);
				at += (size_t)pc[k].len;
				continue;
			}
			got = placefs_io_pread_full(placefs_ckpt_shard(m->ckpt, sh)->fd, buf + at,
			                            (size_t)pc[k].len, pc[k].off);
			if (got < 0 || (uint64_t)got < pc[k].len) {
				placefs_mount_shard_read_failed(
				        m, sh, got < 0 ? pc[k].off : pc[k].off + (uint64_t)got,
				        got < 0 ? (int)-got : 0);
				rc = -EIO;
				goto fail;
			}
			at += (size_t)pc[k].len;
		}
	}
	fuse_reply_buf(req, buf, len);
done:
	placefs_mount_shard_read_ok(m, sh);
	atomic_fetch_add_explicit(&m->ctr.view_reads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->ctr.view_bytes, len, memory_order_relaxed);
	return;
fail:
	atomic_fetch_add_explicit(&m->ctr.read_errors, 1, memory_order_relaxed);
	fuse_reply_err(req, -rc);
}

/* Serves [off, off + size) of aux file j with pread, its size fixed at mount. */
static void read_aux(fuse_req_t req, struct placefs_mount *m, size_t j, size_t size, off_t off)
{
	const struct placefs_aux_file *a = &m->aux[j];
	uint64_t fsize = (uint64_t)a->st.st_size;
	ssize_t got;
	size_t len;
	char *buf;
	int rc;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if ((uint64_t)off >= fsize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	len = fsize - (uint64_t)off < size ? (size_t)(fsize - (uint64_t)off) : size;
	if (m->check_reads && (rc = placefs_mount_aux_ok(m, j)) < 0)
		goto fail;
	buf = thread_buf(len);
	if (!buf) {
		rc = -ENOMEM;
		goto fail;
	}
	got = placefs_io_pread_full(a->fd, buf, len, (uint64_t)off);
	if (got < 0 || (size_t)got < len) {
		/* Never fewer bytes than the size shown. */
		placefs_log(LOG_ERR, "file %s of the views: %s at byte %llu", a->path,
		            got < 0 ? strerror((int)-got) : "short read",
		            (unsigned long long)off + (got > 0 ? (unsigned long long)got : 0));
		rc = -EIO;
		goto fail;
	}
	fuse_reply_buf(req, buf, len);
	atomic_fetch_add_explicit(&m->ctr.view_reads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->ctr.view_bytes, len, memory_order_relaxed);
	return;
fail:
	atomic_fetch_add_explicit(&m->ctr.read_errors, 1, memory_order_relaxed);
	fuse_reply_err(req, -rc);
}

/*
 * Exactly the source bytes for any offset and length; 0 bytes at or past the
 * end. Valid replies: fuse_reply_buf, fuse_reply_err (ESTALE, EIO, EISDIR,
 * EINVAL, ENOMEM).
 */
static void placefs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                            struct fuse_file_info *fi)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct placefs_vnode node;
	struct ctl_buf *cb;
	int rc;

	rc = placefs_vtree_get(m->vt, ino, &node);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	switch (node.kind) {
	case PLACEFS_V_TENSOR: read_tensor(req, m, ino, size, off); return;
	case PLACEFS_V_FILE: reply_slice(req, node.data, node.len, size, off); return;
	case PLACEFS_V_VIEW_SHARD: read_view(req, m, &node, size, off); return;
	case PLACEFS_V_AUX: read_aux(req, m, node.entry, size, off); return;
	case PLACEFS_V_VIEW_INDEX: {
		const struct placefs_view *v = m->views[node.view];
		struct placefs_error err;
		const char *text;

		placefs_error_clear(&err);
		text = placefs_view_index(v, &err);
		if (!text)
			fuse_reply_err(req, ENOMEM);
		else
			reply_slice(req, text, (size_t)placefs_view_index_size(v), size, off);
		return;
	}
	case PLACEFS_V_STATS:
		cb = ctl_buf_get(fi->fh);
		reply_slice(req, cb->data, cb->len, size, off);
		ctl_buf_put(cb);
		return;
	case PLACEFS_V_DIR: fuse_reply_err(req, EISDIR); return;
	default: fuse_reply_err(req, EINVAL); return;
	}
}

/* Valid reply: fuse_reply_err (always 0). */
static void placefs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct placefs_vnode node;

	if (placefs_vtree_get(m->vt, ino, &node) == 0) {
		if (node.kind == PLACEFS_V_TENSOR) {
			atomic_fetch_sub(&m->ctr.open_files, 1);
			/* Leases die with their handle: a crashed borrower never wedges the ring. */
			placefs_ioctl_release(m->stage, fi->fh);
		} else if (node.kind == PLACEFS_V_STATS) {
			ctl_buf_put((struct ctl_buf *)(uintptr_t)fi->fh);
		}
	}
	fuse_reply_err(req, 0);
}

/* Listings are cached by the kernel and kept across opens. Valid replies: fuse_reply_open, fuse_reply_err (ENOTDIR, ENOENT). */
static void placefs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int64_t n;

	placefs_mount_tune_readahead(placefs_mount_of(req));
	n = placefs_vtree_dir_count(placefs_mount_of(req)->vt, ino);

	if (n < 0) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/*
 * Fills one readdir buffer from position `off` (0 ".", 1 "..", then the
 * children); each entry's offset is its position + 1.
 */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct fuse_entry_param e;
	int64_t count;
	uint64_t i, child;
	const char *name;
	size_t pos = 0, ent;
	char *buf;

	count = placefs_vtree_dir_count(m->vt, ino);
	if (count < 0) {
		fuse_reply_err(req, (int)-count);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (i = (uint64_t)off; i < (uint64_t)count + 2; i++) {
		if (i == 0) {
			child = ino;
			name = ".";
		} else if (i == 1) {
			child = placefs_vtree_parent(m->vt, ino);
			name = "..";
		} else if (placefs_vtree_dir_child(m->vt, ino, (size_t)(i - 2), &child, &name) <
		           0) {
			break;
		}
		if (fill_entry(m, child, &e) < 0)
			break;
		if (plus)
			ent = fuse_add_direntry_plus(req, buf + pos, size - pos, name, &e,
			                             (off_t)(i + 1));
		else
			ent = fuse_add_direntry(req, buf + pos, size - pos, name, &e.attr,
			                        (off_t)(i + 1));
		if (ent > size - pos)
			break;
		pos += ent;
	}
	fuse_reply_buf(req, buf, pos);
	free(buf);
}

/* Valid replies: fuse_reply_buf, fuse_reply_err (ENOTDIR, ENOENT, ENOMEM). */
static void placefs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                               struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 0);
}

/* Every entry carries full attributes, so `ls -l` needs no LOOKUP. Valid replies: as readdir. */
static void placefs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                                   struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 1);
}

/* Valid replies: fuse_reply_statfs, fuse_reply_err. */
static void placefs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct placefs_mount *m = placefs_mount_of(req);
	struct statvfs sv;
	uint64_t total = placefs_vtree_total_bytes(m->vt);

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = total / 4096 + (total % 4096 != 0);
	sv.f_files = placefs_vtree_inode_count(m->vt);
	sv.f_namemax = PLACEFS_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/*
 * Whether the filesystem has the xattr namespace of `name` at all: only
 * "user." (the placefs attributes). Any other namespace, security.* and
 * system.posix_acl_* above all, gets EOPNOTSUPP rather than ENODATA: FUSE
 * cannot cache xattrs, and `ls -l` probes security.selinux and the access
 * ACL on every file but stops probing a filesystem once it answers "not
 * supported" (coreutils remembers that per st_dev). With ENODATA, a first
 * `ls -l` of 100,000 tensors paid 100,000 or more round trips to the daemon.
 */
static bool xattr_namespace_supported(const char *name)
{
	return strncmp(name, "user.", 5) == 0;
}

/* The ACL names the kernel asks for once POSIX ACLs are negotiated (placefs_op_init). */
static bool xattr_is_acl(const char *name)
{
	return strcmp(name, PLACEFS_PERM_ACL_XATTR) == 0 ||
	       strcmp(name, "system.posix_acl_default") == 0;
}

/* The access ACL node `ino` shows, or NULL: none, or ACLs not negotiated. */
static const uint8_t *acl_of(const struct placefs_mount *m, fuse_ino_t ino, size_t *len)
{
	const struct placefs_perm *p;

	*len = 0;
	if (!placefs_vtree_acls(m->vt) || !(p = placefs_vtree_perm(m->vt, ino)))
		return NULL;
	return placefs_perm_mirror_acl(p, len);
}

/*
 * Valid replies: fuse_reply_buf, fuse_reply_xattr (size probe), fuse_reply_err
 * (ENODATA: no such attribute, EOPNOTSUPP: namespace not supported, ERANGE, ENOMEM).
 */
static void placefs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct placefs_mount *m = placefs_mount_of(req);
	const struct placefs_xattr_set *xs;
	struct placefs_vnode node;
	int rc, idx;

	atomic_fetch_add_explicit(&m->ctr.xattr_requests, 1, memory_order_relaxed);
	rc = placefs_vtree_get(m->vt, ino, &node);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (xattr_is_acl(name) && placefs_vtree_acls(m->vt)) {
		/* Its source's access ACL, as the kernel evaluates it; no default ACLs. */
		const uint8_t *acl = NULL;
		size_t len = 0;

		if (strcmp(name, PLACEFS_PERM_ACL_XATTR) == 0)
			acl = acl_of(m, ino, &len);
		if (!acl)
			fuse_reply_err(req, ENODATA);
		else
			reply_xattr_data(req, (const char *)acl, len, size);
		return;
	}
	if (!xattr_namespace_supported(name)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (node.kind != PLACEFS_V_TENSOR) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	idx = xattr_index(name);
	if (idx < 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	xs = xattrs_of(m, node.entry);
	if (!xs)
		fuse_reply_err(req, ENOMEM);
	else if (xs->len[idx] == UINT32_MAX)
		/* What getxattr(2) answers for a value over the kernel's limit. */
		fuse_reply_err(req, E2BIG);
	else
		reply_xattr_data(req, xs->data + xs->off[idx], xs->len[idx], size);
}

/* Valid replies: fuse_reply_buf, fuse_reply_xattr (size probe), fuse_reply_err (ERANGE). */
static void placefs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	/*
	 * The same for every tensor: xattr_names[], each NUL-terminated, built
	 * once; then the access ACL's name where the node shows one.
	 */
	static const char list[] = XATTR_PREFIX
	        "placement\0" XATTR_PREFIX "dtype\0" XATTR_PREFIX "shape\0" XATTR_PREFIX
	        "nbytes\0" XATTR_PREFIX "source\0" XATTR_PREFIX "offset\0" XATTR_PREFIX
	        "name\0" XATTR_PREFIX "index\0" PLACEFS_PERM_ACL_XATTR;
	static const size_t acl_name = sizeof(PLACEFS_PERM_ACL_XATTR);
	struct placefs_mount *m = placefs_mount_of(req);
	struct placefs_vnode node;
	size_t len;
	bool acl;
	int rc;

	atomic_fetch_add_explicit(&m->ctr.xattr_requests, 1, memory_order_relaxed);
	rc = placefs_vtree_get(m->vt, ino, &node);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	acl = acl_of(m, ino, &len) != NULL;
	if (node.kind == PLACEFS_V_TENSOR)
		reply_xattr_data(req, list, sizeof(list) - (acl ? 0 : acl_name), size);
	else
		reply_xattr_data(req, list + sizeof(list) - acl_name, acl ? acl_name : 0, size);
}

/* Read-only: every write-class operation. Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                               struct fuse_file_info *fi)
{
	(void)ino;
	(void)attr;
	(void)to_set;
	(void)fi;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                             dev_t rdev)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)rdev;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent;
	(void)name;
	(void)mode;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
                               const char *name)
{
	(void)link;
	(void)parent;
	(void)name;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                              fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	(void)parent;
	(void)name;
	(void)newparent;
	(void)newname;
	(void)flags;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                            const char *newname)
{
	(void)ino;
	(void)newparent;
	(void)newname;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                             off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	(void)buf;
	(void)size;
	(void)off;
	(void)fi;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                              struct fuse_file_info *fi)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)fi;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                                size_t size, int flags)
{
	(void)ino;
	(void)name;
	(void)value;
	(void)size;
	(void)flags;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	(void)name;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS). */
static void placefs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
                                 off_t length, struct fuse_file_info *fi)
{
	(void)ino;
	(void)mode;
	(void)offset;
	(void)length;
	(void)fi;
	fuse_reply_err(req, EROFS);
}

/* Valid reply: fuse_reply_err (EROFS): the destination would be on this file system. */
static void placefs_op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
                                       struct fuse_file_info *fi_in, fuse_ino_t ino_out,
                                       off_t off_out, struct fuse_file_info *fi_out, size_t len,
                                       int flags)
{
	(void)ino_in;
	(void)off_in;
	(void)fi_in;
	(void)ino_out;
	(void)off_out;
	(void)fi_out;
	(void)len;
	(void)flags;
	fuse_reply_err(req, EROFS);
}

static const struct fuse_lowlevel_ops placefs_ops = {
        .init = placefs_op_init,
        .lookup = placefs_op_lookup,
        .forget = placefs_op_forget,
        .forget_multi = placefs_op_forget_multi,
        .getattr = placefs_op_getattr,
        .readlink = placefs_op_readlink,
        .open = placefs_op_open,
        .read = placefs_op_read,
        .release = placefs_op_release,
        .opendir = placefs_op_opendir,
        .readdir = placefs_op_readdir,
        .readdirplus = placefs_op_readdirplus,
        .statfs = placefs_op_statfs,
        .getxattr = placefs_op_getxattr,
        .listxattr = placefs_op_listxattr,
        /* Write-class operations: the mount is read-only ("-o ro" makes the VFS refuse most first). */
        .setattr = placefs_op_setattr,
        .mknod = placefs_op_mknod,
        .mkdir = placefs_op_mkdir,
        .unlink = placefs_op_unlink,
        .rmdir = placefs_op_rmdir,
        .symlink = placefs_op_symlink,
        .rename = placefs_op_rename,
        .link = placefs_op_link,
        .write = placefs_op_write,
        .create = placefs_op_create,
        .setxattr = placefs_op_setxattr,
        .removexattr = placefs_op_removexattr,
        .fallocate = placefs_op_fallocate,
        .copy_file_range = placefs_op_copy_file_range,
        /* GPU staging commands on tensor files (fs/ioctl.c). */
        .ioctl = placefs_ioctl_op,
};

const struct fuse_lowlevel_ops *placefs_ops_table(size_t *size)
{
	*size = sizeof(placefs_ops);
	return &placefs_ops;
}
