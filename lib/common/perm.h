/* SPDX-License-Identifier: MIT */
/*
 * perm: who may read a file, decided as the kernel decides it.
 *
 * A struct placefs_perm holds what decides read access to one file (a
 * shard, an aux file of the views): its owner, group and mode, and its
 * POSIX access ACL when it has one, parsed from the raw value of the
 * `system.posix_acl_access` xattr (linux/posix_acl_xattr.h: a 4-byte
 * little-endian version 2, then 8-byte entries {u16 tag, u16 perm, u32 id},
 * sorted by tag, named entries by id) and validated in full.
 *
 * placefs_perm_reads() answers MAY_READ as the kernel's generic_permission()
 * does for a caller with fsuid `uid`, fsgid `gid` and supplementary groups
 * `groups` (acl_permission_check() and posix_acl_permission()):
 *
 *   - uid 0 reads everything (CAP_DAC_OVERRIDE);
 *   - the owner gets the owner bits of the mode;
 *   - with an ACL, consulted only while the mode's group bits (the mask) are
 *     not all clear: a named user entry matching uid gets entry & MASK; else
 *     if gid or a supplementary group matches the owning group's entry or a
 *     named group entry, the caller reads iff one matching entry grants read
 *     and the MASK does (when there is one), and is refused if it matches
 *     but none grants; else the OTHER entry;
 *   - without an ACL: the group bits if gid or a supplementary group is the
 *     file's group, else the other bits.
 *
 * The daemon decides its own checks with it, and shows the kernel the same
 * decision on the mount: placefs_perm_mirror_mode() and
 * placefs_perm_mirror_acl() are the read bits and the ACL a file of the
 * mount gets so that the kernel's check of it (default_permissions) reads
 * exactly as placefs_perm_reads() of the source does, and the read bits
 * without an ACL (when the kernel will not evaluate one) that let in nobody
 * the source's ACL refuses.
 *
 * Thread-safety: a struct placefs_perm is read-only once made; every
 * function but _init, _from_fd and _release may run concurrently on it.
 */
#ifndef PLACEFS_COMMON_PERM_H
#define PLACEFS_COMMON_PERM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* The xattr that holds a file's access ACL, and the kernel's limit on its value. */
#define PLACEFS_PERM_ACL_XATTR "system.posix_acl_access"
#define PLACEFS_PERM_ACL_MAX   65536

/* Entry tags and permission bits of the ACL xattr format. */
#define PLACEFS_ACL_VERSION   2
#define PLACEFS_ACL_USER_OBJ  0x01
#define PLACEFS_ACL_USER      0x02
#define PLACEFS_ACL_GROUP_OBJ 0x04
#define PLACEFS_ACL_GROUP     0x08
#define PLACEFS_ACL_MASK      0x10
#define PLACEFS_ACL_OTHER     0x20
#define PLACEFS_ACL_READ      0x04

struct placefs_perm_entry {
	uint16_t tag;
	uint16_t perm; /* rwx: 4 2 1 */
	uint32_t id;   /* named USER and GROUP entries only */
};

struct placefs_perm {
	uid_t uid;
	gid_t gid;
	mode_t mode; /* the permission bits of st_mode (07777) */
	/*
	 * The ACL could not be read or was refused: only the owner (by the
	 * mode's owner bits) and uid 0 read, as the kernel lets nobody else past
	 * an ACL it cannot use.
	 */
	bool refused;
	size_t nacl; /* 0: no access ACL */
	struct placefs_perm_entry *acl;
	/* What a file of the mount shows (placefs_perm_mirror_*), made at init. */
	uint8_t *mirror; /* the ACL xattr value, NULL: none */
	size_t mirror_len;
	mode_t mirror_mode; /* read bits with the mirrored ACL evaluated */
	mode_t narrow_mode; /* read bits when no ACL is evaluated */
};

/*
 * Fills p from a file's owner, group, st_mode and the raw value of its
 * access ACL xattr (acl NULL: none; an empty value is refused). `path` names the file in
 * messages. A value that the kernel's rules refuse (version, size, tags,
 * perm bits, order, duplicates, missing or extra entries) returns -EINVAL
 * with a message naming the file and the rule; -ENOMEM without memory. On
 * failure p is still usable, and refused (see above). Free with _release.
 */
int placefs_perm_init(struct placefs_perm *p, uid_t uid, gid_t gid, mode_t mode, const void *acl,
                      size_t acl_len, const char *path, struct placefs_error *err);

/*
 * Fills p from an open file: fstat() and fgetxattr() of its access ACL
 * (ENODATA and ENOTSUP: no ACL). An fstat() failure returns its errno, an
 * ACL that cannot be read (or is larger than PLACEFS_PERM_ACL_MAX) -EIO,
 * with a message; on any failure p is usable and refused. Free with _release.
 */
int placefs_perm_from_fd(struct placefs_perm *p, int fd, const char *path,
                         struct placefs_error *err);

void placefs_perm_release(struct placefs_perm *p); /* a zeroed struct is fine */

/* Whether the caller (fsuid, fsgid, its supplementary groups) may read the file. */
bool placefs_perm_reads(const struct placefs_perm *p, uid_t uid, gid_t gid, const gid_t *groups,
                        size_t ngroups);

/* An answer that may depend on supplementary groups that are not known. */
enum placefs_perm_answer {
	PLACEFS_PERM_NO = 0,  /* refused whatever the caller's other groups */
	PLACEFS_PERM_YES = 1, /* read whatever the caller's other groups */
	PLACEFS_PERM_DEPENDS = 2,
};

/*
 * The answer for (uid, gid) with the supplementary groups not known: YES or
 * NO when every group list gives it, DEPENDS otherwise (then the caller
 * needs the list, or must refuse). A mode 0644 file answers YES to everyone.
 */
enum placefs_perm_answer placefs_perm_reads_primary(const struct placefs_perm *p, uid_t uid,
                                                    gid_t gid);

/*
 * The read bits (0444 at most) of a file of the mount that shows p: with
 * `acl`, when the kernel evaluates placefs_perm_mirror_acl() on it, they
 * give exactly placefs_perm_reads(); without, they let in no caller that
 * placefs_perm_reads() refuses (a group or other bit only where every
 * caller of that class reads).
 */
mode_t placefs_perm_mirror_mode(const struct placefs_perm *p, bool acl);

/*
 * The access ACL xattr value a file of the mount shows for p, or NULL (none:
 * the mode bits say it all). Each entry is cut to its effective read bit
 * (the mask applied to named users and the group class) and the mask is
 * r--, so that the kernel evaluates the ACL whenever the source's is.
 */
const uint8_t *placefs_perm_mirror_acl(const struct placefs_perm *p, size_t *len);

/* Who may open an object shared with those who read every file of a set. */
enum placefs_perm_audience {
	PLACEFS_PERM_NOBODY = 0, /* nobody but the object's owner and uid 0 */
	PLACEFS_PERM_GROUP = 1,  /* the members of one group (*gid) */
	PLACEFS_PERM_ANYONE = 2,
};

/*
 * The widest audience, among everyone or the members of one group, in
 * which every caller (any uid but 0, any supplementary groups) reads every
 * one of the n files: an object readable by that audience (mode 0604, or
 * 0640 with group *gid) lets in no caller who may not read them all. The
 * groups tried are the files' owning groups and named ACL groups, in order.
 */
enum placefs_perm_audience placefs_perm_audience(const struct placefs_perm *ps, size_t n,
                                                 gid_t *gid);

#endif /* PLACEFS_COMMON_PERM_H */
