/* SPDX-License-Identifier: MIT */
/*
 * vtree: the mount's inode table, fixed at mount time.
 *
 *   /                          root: ".placefs", then one file per plan entry
 *   /<fname>                   a tensor (plan entry i), read-only
 *   /.placefs/                 control directory
 *   /.placefs/plan             the text plan
 *   /.placefs/plan.json        placefs_plan_format_json() for SOURCE as given
 *   /.placefs/stats            live counters (generated at open)
 *   /.placefs/metadata.json    each shard's __metadata__
 *   /.placefs/by-placement/{gpu,cpu}/<fname>  symlink -> ../../../<fname>
 *   /.placefs/views/                   model-directory views (lib/model/view.h)
 *   /.placefs/views/{all,gpu,cpu}/     one loadable model directory each:
 *       <aux>                          each top-level file of the source that
 *                                      is no shard or index (config.json...),
 *                                      byte for byte; one inode in all three
 *       <shard name>                   a safetensors file of the view's tensors
 *                                      of that shard (generated header, then
 *                                      the source's payload bytes)
 *       <index name>                   the view's index, when the source has one
 *
 * Inode numbers: the fixed nodes first (PLACEFS_INO_*), then tensor i at
 * PLACEFS_INO_FIRST + i, then its by-placement link at
 * PLACEFS_INO_FIRST + n + i; then, from V = PLACEFS_INO_FIRST + 2n: the
 * views directory V, the view directories V + 1 + kind, the aux files
 * from V + 4, then each view's files and its index, view after view.
 * Tensor and link nodes are not stored: their attributes are computed
 * from the plan entry and its shard, so the table costs O(1) memory per
 * tensor beyond the two per-placement child lists (views: O(shards + aux
 * files) here, O(tensors) in lib/view).
 * Lookup is placefs_plan_find(), O(log n). The tree is made complete by
 * placefs_vtree_create() (the daemon makes it last before mounting, once
 * the stager's line for .placefs/plan is known) and nothing changes after,
 * so every accessor is safe from any thread without a lock.
 */
#ifndef PLACEFS_FS_VTREE_H
#define PLACEFS_FS_VTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "model/ckpt.h"
#include "common/error.h"
#include "common/perm.h"
#include "model/plan.h"
#include "model/view.h"

enum {
	PLACEFS_INO_ROOT = 1, /* FUSE_ROOT_ID */
	PLACEFS_INO_CTL_DIR,
	PLACEFS_INO_PLAN,
	PLACEFS_INO_PLAN_JSON,
	PLACEFS_INO_STATS,
	PLACEFS_INO_METADATA,
	PLACEFS_INO_BYPL_DIR,
	PLACEFS_INO_GPU_DIR,
	PLACEFS_INO_CPU_DIR,
	PLACEFS_INO_COLUMNS,
	PLACEFS_INO_LAYOUT,
	PLACEFS_INO_SHARDS,
	PLACEFS_INO_COLUMN_CHUNKS,
	PLACEFS_INO_PACKED,
	PLACEFS_INO_FIRST, /* first tensor */
};

#define PLACEFS_CTL_NAME    ".placefs"
#define PLACEFS_LINK_PREFIX "../../../"

enum placefs_vkind {
	PLACEFS_V_NONE = 0,
	PLACEFS_V_DIR,
	PLACEFS_V_TENSOR,     /* `entry` is the plan entry */
	PLACEFS_V_FILE,       /* control file with fixed content */
	PLACEFS_V_STATS,      /* control file generated at each open */
	PLACEFS_V_LINK,       /* by-placement symlink to plan entry `entry` */
	PLACEFS_V_VIEW_SHARD, /* file `entry` of view `view` (lib/model/view.h) */
	PLACEFS_V_VIEW_INDEX, /* the index of view `view` */
	PLACEFS_V_AUX,        /* aux file `entry` (struct placefs_vtree_views) */
};

struct placefs_vnode {
	enum placefs_vkind kind;
	uint64_t ino;
	size_t entry;     /* TENSOR, LINK, VIEW_SHARD, AUX */
	int view;         /* VIEW_SHARD, VIEW_INDEX: enum placefs_view_kind */
	const char *data; /* FILE: content */
	size_t len;       /* FILE: content length */
};

#define PLACEFS_VIEWS_NAME "views"

/* One top-level file of the source shown in every view (fs/mount.c opens them). */
struct placefs_vtree_aux {
	const char *name;      /* as the views show it (lib/view's placefs_view_aux_name()) */
	int fd;                /* open on it */
	const struct stat *st; /* as validated at mount: size, owner, mode, mtime */
	const struct placefs_perm *perm; /* who may read it, as at mount */
};

/* What .placefs/views shows; the views and the aux array must outlive the tree. */
struct placefs_vtree_views {
	const struct placefs_view *view[PLACEFS_VIEW_KINDS];
	const struct placefs_vtree_aux *aux; /* naux entries, in listing order */
	size_t naux;
};

struct placefs_vtree;

/*
 * Builds the tree for `plan` over `ck`. `source` is SOURCE as given on the
 * command line (it appears in plan and plan.json); `plan_note`, NULL or a
 * text of whole lines, is appended to .placefs/plan (the daemon's
 * "staging:" line). Directories, control
 * files and links get owner uid/gid and times `now`; tensors get their
 * shard's owner, group, mtime and read bits from `perms` (one per shard,
 * lib/common/perm.h; they must outlive the tree): mode 0444 at most, and,
 * for a shard with an extended POSIX ACL, the bits that go with the ACL
 * the tensor file shows (placefs_vtree_perm()) once placefs_vtree_set_acls()
 * says the kernel evaluates it, else bits narrowed so that no caller the
 * shard's ACL refuses is let in. So the kernel (default_permissions)
 * grants access to a tensor's bytes exactly as the source grants it (or,
 * without ACL support, less). `views` (NULL: no .placefs/views) gives the
 * views: view files get their shard's owner, read bits, ACL and mtime, as
 * tensors do; aux files their own (nlink 3: one inode in the three views);
 * view indexes are control files. The control files that grow with the
 * plan are formatted on threads of their own, joined before it returns.
 * Returns 0 or a negative errno with a message.
 */
int placefs_vtree_create(const struct placefs_ckpt *ck, const struct placefs_plan *plan,
                         const struct placefs_perm *perms, const char *source,
                         const char *plan_note, uid_t uid, gid_t gid, struct timespec now,
                         const struct placefs_vtree_views *views, struct placefs_vtree **out,
                         struct placefs_error *err);
void placefs_vtree_free(struct placefs_vtree *vt); /* NULL ok */

/* Fills *node for `ino`. Returns 0, or -ENOENT for a number that is not in the tree. */
int placefs_vtree_get(const struct placefs_vtree *vt, uint64_t ino, struct placefs_vnode *node);

/* Attributes of `ino` (st_ino, mode, nlink, uid, gid, size, blocks, times). 0 or -ENOENT. */
int placefs_vtree_stat(const struct placefs_vtree *vt, uint64_t ino, struct stat *st);

/*
 * The child `name` of directory `parent`. Returns its inode number, 0 when
 * there is no such child, -ENOTDIR when parent is not a directory, -ENOENT
 * when parent does not exist.
 */
int64_t placefs_vtree_lookup(const struct placefs_vtree *vt, uint64_t parent, const char *name);

/*
 * Directory listing, without "." and "..": the number of children, and the
 * child at position i (its inode number and name). The root lists ".placefs"
 * first, then the tensors in checkpoint order; each by-placement directory
 * lists its links in checkpoint order. Both return -ENOTDIR / -ENOENT as
 * placefs_vtree_lookup() does.
 */
int64_t placefs_vtree_dir_count(const struct placefs_vtree *vt, uint64_t dir);
int placefs_vtree_dir_child(const struct placefs_vtree *vt, uint64_t dir, size_t i, uint64_t *ino,
                            const char **name);

/* The parent directory's inode number (the root is its own parent); 0 if none. */
uint64_t placefs_vtree_parent(const struct placefs_vtree *vt, uint64_t ino);

/*
 * The target of link `ino` ("../../../<fname>") into buf. Returns its length
 * (buf is NUL-terminated and truncated if len is too small), -EINVAL when
 * ino is not a link, -ENOENT when it does not exist.
 */
int placefs_vtree_readlink(const struct placefs_vtree *vt, uint64_t ino, char *buf, size_t len);

/* Inode numbers in use (the fixed nodes, tensors and links): for statfs. */
uint64_t placefs_vtree_inode_count(const struct placefs_vtree *vt);
/* Sum of the tensors' payload bytes: for statfs. */
uint64_t placefs_vtree_total_bytes(const struct placefs_vtree *vt);

/* View `kind` (enum placefs_view_kind) of the tree, or NULL without views. */
const struct placefs_view *placefs_vtree_view(const struct placefs_vtree *vt, int kind);
/* The aux files as given: aux file j is PLACEFS_V_AUX node entry j. */
int placefs_vtree_aux_count(const struct placefs_vtree *vt);
const struct placefs_vtree_aux *placefs_vtree_aux(const struct placefs_vtree *vt, size_t j);

/*
 * Who may read node `ino` as its source decides (a tensor or view file: its
 * shard's; an aux file: its own), or NULL for the daemon's own nodes
 * (directories, control files, links: everyone who may enter the mount).
 */
const struct placefs_perm *placefs_vtree_perm(const struct placefs_vtree *vt, uint64_t ino);
/* Whether some node shows an ACL: a shard or aux file has one with named entries. */
bool placefs_vtree_has_acls(const struct placefs_vtree *vt);
/*
 * Whether the kernel evaluates the ACLs the nodes show (FUSE_CAP_POSIX_ACL
 * negotiated); until set, false: the modes are the narrowed ones. Set once,
 * at INIT, before any other request.
 */
void placefs_vtree_set_acls(struct placefs_vtree *vt, bool on);
bool placefs_vtree_acls(const struct placefs_vtree *vt);

/* The plan entry of a tensor or link inode, or NULL. */
const struct placefs_plan_entry *placefs_vtree_entry(const struct placefs_vtree *vt, uint64_t ino);

#endif
