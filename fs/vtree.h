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
 *
 * Inode numbers: the fixed nodes first (PLACEFS_INO_*), then tensor i at
 * PLACEFS_INO_FIRST + i, then its by-placement link at
 * PLACEFS_INO_FIRST + n + i. Tensor and link nodes are not stored: their
 * attributes are computed from the plan entry and its shard, so the table
 * costs O(1) memory per tensor beyond the two per-placement child lists.
 * Lookup is placefs_plan_find(), O(log n). The tree is made complete by
 * placefs_vtree_create() (the daemon makes it last before mounting, once
 * the stager's line for .placefs/plan is known) and nothing changes after,
 * so every accessor is safe from any thread without a lock.
 */
#ifndef PLACEFS_FS_VTREE_H
#define PLACEFS_FS_VTREE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "ckpt.h"
#include "error.h"
#include "plan.h"

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
	PLACEFS_INO_FIRST, /* first tensor */
};

#define PLACEFS_CTL_NAME    ".placefs"
#define PLACEFS_LINK_PREFIX "../../../"

enum placefs_vkind {
	PLACEFS_V_NONE = 0,
	PLACEFS_V_DIR,
	PLACEFS_V_TENSOR, /* `entry` is the plan entry */
	PLACEFS_V_FILE,   /* control file with fixed content */
	PLACEFS_V_STATS,  /* control file generated at each open */
	PLACEFS_V_LINK,   /* by-placement symlink to plan entry `entry` */
};

struct placefs_vnode {
	enum placefs_vkind kind;
	uint64_t ino;
	size_t entry;     /* TENSOR, LINK */
	const char *data; /* FILE: content */
	size_t len;       /* FILE: content length */
};

struct placefs_vtree;

/*
 * Builds the tree for `plan` over `ck`. `source` is SOURCE as given on the
 * command line (it appears in plan and plan.json); `plan_note`, NULL or a
 * text of whole lines, is appended to .placefs/plan (the daemon's
 * "staging:" line). Directories, control
 * files and links get owner uid/gid and times `now`; tensors get their
 * shard's owner, group, mtime and read bits (mode 0444 at most: r for user,
 * group and other as the shard has them; with a POSIX ACL on the shard the
 * group may read only if both its entry and the mask allow it), so that the
 * kernel (default_permissions) grants access to a tensor's bytes exactly as
 * the source grants it, or less. Returns 0 or a negative errno with a message.
 */
int placefs_vtree_create(const struct placefs_ckpt *ck, const struct placefs_plan *plan,
                         const char *source, const char *plan_note, uid_t uid, gid_t gid,
                         struct timespec now, struct placefs_vtree **out,
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

/* The plan entry of a tensor or link inode, or NULL. */
const struct placefs_plan_entry *placefs_vtree_entry(const struct placefs_vtree *vt, uint64_t ino);

#endif
