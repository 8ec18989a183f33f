/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "common/perm.h"

/* The id the kernel writes in entries that name nobody (ACL_UNDEFINED_ID). */
#define ACL_UNDEFINED_ID 0xffffffffu

static uint16_t le16(const uint8_t *b)
{
	return (uint16_t)(b[0] | b[1] << 8);
}

static uint32_t le32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *b, uint32_t v)
{
	put16(b, (uint16_t)v);
	put16(b + 2, (uint16_t)(v >> 16));
}

static const char *tag_name(unsigned tag)
{
	switch (tag) {
	case PLACEFS_ACL_USER_OBJ: return "user::";
	case PLACEFS_ACL_USER: return "user:ID:";
	case PLACEFS_ACL_GROUP_OBJ: return "group::";
	case PLACEFS_ACL_GROUP: return "group:ID:";
	case PLACEFS_ACL_MASK: return "mask::";
	case PLACEFS_ACL_OTHER: return "other::";
	default: return "?";
	}
}

/*
 * Parses and validates an ACL xattr value as the kernel's
 * posix_acl_from_xattr() and posix_acl_valid() do, and as setfacl writes
 * one: user::, named users in ascending order of id, group::, named groups
 * likewise, mask:: (required with named entries), other::, each once; perm
 * bits within rwx; named ids defined and not repeated.
 */
static int acl_parse(struct placefs_perm *p, const uint8_t *v, size_t len, const char *path,
                     struct placefs_error *err)
{
	enum { S_UOBJ, S_USER, S_GROUP, S_OTHER, S_DONE } state = S_UOBJ;
	const char *what = path ? path : "(file)";
	bool needs_mask = false;
	uint32_t last_id = 0;
	bool have_last = false;
	size_t i, n;

	if (len < 4)
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_FORMAT,
		        "%s: access ACL of %zu bytes: shorter than its 4-byte header", what, len);
	if (len > PLACEFS_PERM_ACL_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
		                         "%s: access ACL of %zu bytes: larger than the kernel's "
		                         "limit of %d",
		                         what, len, PLACEFS_PERM_ACL_MAX);
	if (le32(v) != PLACEFS_ACL_VERSION)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
		                         "%s: access ACL of version %u, expected %d", what, le32(v),
		                         PLACEFS_ACL_VERSION);
	if ((len - 4) % 8 != 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
		                         "%s: access ACL of %zu bytes: not a 4-byte header and "
		                         "8-byte entries",
		                         what, len);
	n = (len - 4) / 8;
	if (n == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
		                         "%s: access ACL without entries (it needs user::, group:: "
		                         "and other::)",
		                         what);
	p->acl = calloc(n, sizeof(*p->acl));
	if (!p->acl)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		const uint8_t *b = v + 4 + 8 * i;
		struct placefs_perm_entry e = {le16(b), le16(b + 2), le32(b + 4)};
		const char *bad = NULL;

		if (e.perm & ~7u)
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_FORMAT,
			        "%s: access ACL entry %zu (%s): permission bits 0x%x "
			        "beyond rwx",
			        what, i, tag_name(e.tag), e.perm);
		switch (e.tag) {
		case PLACEFS_ACL_USER_OBJ:
			if (state != S_UOBJ)
				bad = "user:: must come first, once";
			state = S_USER;
			have_last = false;
			break;
		case PLACEFS_ACL_USER:
		case PLACEFS_ACL_GROUP:
			if (state != (e.tag == PLACEFS_ACL_USER ? S_USER : S_GROUP)) {
				bad = e.tag == PLACEFS_ACL_USER ? "a named user must come after "
				                                  "user:: and before group::"
				                                : "a named group must come after "
				                                  "group:: and before mask::";
				break;
			}
			if (e.id == ACL_UNDEFINED_ID) {
				bad = "a named entry without an id (0xffffffff)";
				break;
			}
			if (have_last && e.id == last_id) {
				bad = "a named entry repeated";
				break;
			}
			if (have_last && e.id < last_id) {
				bad = "named entries not in ascending order of id";
				break;
			}
			last_id = e.id;
			have_last = true;
			needs_mask = true;
			break;
		case PLACEFS_ACL_GROUP_OBJ:
			if (state != S_USER)
				bad = "group:: must come once, after user:: and the named users";
			state = S_GROUP;
			have_last = false;
			break;
		case PLACEFS_ACL_MASK:
			if (state != S_GROUP)
				bad = "mask:: must come once, after group:: and the named groups";
			state = S_OTHER;
			break;
		case PLACEFS_ACL_OTHER:
			if (state == S_GROUP && needs_mask)
				bad = "named entries without a mask::";
			else if (state != S_OTHER && state != S_GROUP)
				bad = "other:: must come once, last, after group::";
			state = S_DONE;
			break;
		default:
			return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
			                         "%s: access ACL entry %zu: unknown tag 0x%x", what,
			                         i, e.tag);
		}
		if (!bad && state == S_DONE && i + 1 < n)
			bad = "entries after other::";
		if (bad && (e.tag == PLACEFS_ACL_USER || e.tag == PLACEFS_ACL_GROUP))
			return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
			                         "%s: access ACL entry %zu (%s %u): %s", what, i,
			                         e.tag == PLACEFS_ACL_USER ? "user" : "group", e.id,
			                         bad);
		if (bad)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT,
			                         "%s: access ACL entry %zu (%s): %s", what, i,
			                         tag_name(e.tag), bad);
		p->acl[i] = e;
	}
	if (state != S_DONE)
		return placefs_error_set(
		        err, -EINVAL, PLACEFS_E_FORMAT, "%s: access ACL without %s", what,
		        state == S_USER    ? "group:: and other::"
		        : state == S_GROUP ? (needs_mask ? "mask:: and other::" : "other::")
		                           : "other::");
	p->nacl = n;
	return 0;
}

/* The ACL is consulted: there is one and the mode's group bits (its mask) are not all clear. */
static bool acl_active(const struct placefs_perm *p)
{
	return p->nacl && (p->mode & S_IRWXG);
}

static unsigned acl_mask(const struct placefs_perm *p)
{
	for (size_t i = 0; i < p->nacl; i++)
		if (p->acl[i].tag == PLACEFS_ACL_MASK)
			return p->acl[i].perm;
	return 7;
}

static unsigned acl_other(const struct placefs_perm *p)
{
	return p->acl[p->nacl - 1].perm; /* validated: other:: is last */
}

/* Whether group-class or named-user entry e lets read through the mask. */
static bool grants(const struct placefs_perm_entry *e, unsigned mask)
{
	return (e->perm & mask & PLACEFS_ACL_READ) != 0;
}

/* The gid a group-class entry matches, or false for other entries. */
static bool group_entry(const struct placefs_perm *p, const struct placefs_perm_entry *e, gid_t *g)
{
	if (e->tag == PLACEFS_ACL_GROUP_OBJ)
		*g = p->gid;
	else if (e->tag == PLACEFS_ACL_GROUP)
		*g = (gid_t)e->id;
	else
		return false;
	return true;
}

static bool in_groups(gid_t g, gid_t gid, const gid_t *groups, size_t ngroups)
{
	if (g == gid)
		return true;
	for (size_t i = 0; i < ngroups; i++)
		if (groups[i] == g)
			return true;
	return false;
}

/* Whether a caller matching group g in the group class reads (one matching entry grants). */
static bool gid_grants(const struct placefs_perm *p, gid_t g, unsigned mask)
{
	gid_t eg;

	for (size_t i = 0; i < p->nacl; i++)
		if (group_entry(p, &p->acl[i], &eg) && eg == g && grants(&p->acl[i], mask))
			return true;
	return false;
}

static int make_mirror(struct placefs_perm *p)
{
	unsigned mask;
	bool named = false;
	size_t i;

	p->mirror_mode = p->narrow_mode = p->mode & 0400;
	if (p->refused)
		return 0;
	if (!acl_active(p)) {
		p->mirror_mode = p->narrow_mode = p->mode & 0444;
		return 0;
	}
	mask = acl_mask(p);
	for (i = 0; i < p->nacl; i++)
		named |= p->acl[i].tag == PLACEFS_ACL_USER || p->acl[i].tag == PLACEFS_ACL_GROUP;
	/* Narrowed: a group or other bit only where every caller of the class reads. */
	{
		bool users = true, own = false, others = true;
		gid_t g;

		for (i = 0; i < p->nacl; i++) {
			const struct placefs_perm_entry *e = &p->acl[i];

			if (e->tag == PLACEFS_ACL_USER && (uid_t)e->id != p->uid && e->id != 0)
				users &= grants(e, mask);
			else if (group_entry(p, e, &g) && g == p->gid)
				own |= grants(e, mask);
			else if (group_entry(p, e, &g))
				others &= gid_grants(p, g, mask);
		}
		p->narrow_mode |= users && own ? 0040 : 0;
		p->narrow_mode |= users && others && (acl_other(p) & PLACEFS_ACL_READ) ? 0004 : 0;
	}
	p->mirror_mode |= (acl_other(p) & PLACEFS_ACL_READ) ? 0004 : 0;
	if (!named) {
		/* user::, group::, (mask::,) other:: say no more than mode bits can. */
		p->mirror_mode |= grants(&p->acl[1], mask) ? 0040 : 0;
		return 0;
	}
	p->mirror_mode |= 0040; /* the mask r--: the kernel consults the ACL */
	p->mirror_len = 4 + 8 * p->nacl;
	p->mirror = malloc(p->mirror_len);
	if (!p->mirror)
		return -ENOMEM;
	put32(p->mirror, PLACEFS_ACL_VERSION);
	for (i = 0; i < p->nacl; i++) {
		const struct placefs_perm_entry *e = &p->acl[i];
		uint8_t *b = p->mirror + 4 + 8 * i;
		unsigned perm;
		uint32_t id = ACL_UNDEFINED_ID;

		switch (e->tag) {
		case PLACEFS_ACL_USER_OBJ: perm = (p->mode >> 6) & PLACEFS_ACL_READ; break;
		case PLACEFS_ACL_MASK: perm = PLACEFS_ACL_READ; break;
		case PLACEFS_ACL_OTHER: perm = e->perm & PLACEFS_ACL_READ; break;
		default:
			perm = grants(e, mask) ? PLACEFS_ACL_READ : 0;
			if (e->tag != PLACEFS_ACL_GROUP_OBJ)
				id = e->id;
			break;
		}
		put16(b, e->tag);
		put16(b + 2, (uint16_t)perm);
		put32(b + 4, id);
	}
	return 0;
}

/* p holds no ACL any more and lets in only its owner (and uid 0). */
static void refuse(struct placefs_perm *p)
{
	free(p->acl);
	free(p->mirror);
	p->acl = NULL;
	p->mirror = NULL;
	p->nacl = 0;
	p->mirror_len = 0;
	p->refused = true;
	make_mirror(p); /* allocates nothing without an ACL */
}

int placefs_perm_init(struct placefs_perm *p, uid_t uid, gid_t gid, mode_t mode, const void *acl,
                      size_t acl_len, const char *path, struct placefs_error *err)
{
	int rc;

	memset(p, 0, sizeof(*p));
	p->uid = uid;
	p->gid = gid;
	p->mode = mode & 07777;
	if (acl) {
		rc = acl_parse(p, acl, acl_len, path, err);
		if (rc < 0) {
			refuse(p);
			return rc;
		}
	}
	if (make_mirror(p) < 0) {
		/* Without memory for the mirror: nobody but the owner, who needs none. */
		refuse(p);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	}
	return 0;
}

int placefs_perm_from_fd(struct placefs_perm *p, int fd, const char *path,
                         struct placefs_error *err)
{
	const char *what = path ? path : "(file)";
	uint8_t *buf = NULL;
	struct stat st;
	ssize_t len = -1;
	int rc, e;

	if (fstat(fd, &st) != 0) {
		e = errno;
		placefs_perm_init(p, 0, 0, 0, NULL, 0, path, NULL);
		refuse(p);
		return placefs_error_set(err, -e, PLACEFS_E_IO, "%s: cannot stat: %s", what,
		                         strerror(e));
	}
	/* The size, then the value; it may grow between the two, so try a few times. */
	for (int tries = 0; tries < 4; tries++) {
		len = fgetxattr(fd, PLACEFS_PERM_ACL_XATTR, NULL, 0);
		if (len < 0 || len > PLACEFS_PERM_ACL_MAX)
			break;
		free(buf);
		buf = malloc(len ? (size_t)len : 1);
		if (!buf) {
			placefs_perm_init(p, st.st_uid, st.st_gid, st.st_mode, NULL, 0, path, NULL);
			refuse(p);
			return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
		}
		len = fgetxattr(fd, PLACEFS_PERM_ACL_XATTR, buf, (size_t)len);
		if (len >= 0 || errno != ERANGE)
			break;
	}
	if (len < 0 && (errno == ENODATA || errno == ENOTSUP || errno == EOPNOTSUPP)) {
		free(buf);
		return placefs_perm_init(p, st.st_uid, st.st_gid, st.st_mode, NULL, 0, path, err);
	}
	if (len < 0 || len > PLACEFS_PERM_ACL_MAX) {
		e = len < 0 ? errno : E2BIG;
		free(buf);
		placefs_perm_init(p, st.st_uid, st.st_gid, st.st_mode, NULL, 0, path, NULL);
		refuse(p);
		return placefs_error_set(err, -EIO, PLACEFS_E_IO,
		                         "%s: cannot read its access ACL: %s", what, strerror(e));
	}
	rc = placefs_perm_init(p, st.st_uid, st.st_gid, st.st_mode, buf, (size_t)len, path, err);
	free(buf);
	return rc;
}

void placefs_perm_release(struct placefs_perm *p)
{
	if (!p)
		return;
	free(p->acl);
	free(p->mirror);
	p->acl = NULL;
	p->mirror = NULL;
	p->nacl = 0;
	p->mirror_len = 0;
}

bool placefs_perm_reads(const struct placefs_perm *p, uid_t uid, gid_t gid, const gid_t *groups,
                        size_t ngroups)
{
	bool found = false;
	unsigned mask;
	gid_t g;

	if (uid == 0)
		return true;
	if (uid == p->uid)
		return (p->mode & S_IRUSR) != 0;
	if (p->refused)
		return false;
	if (acl_active(p)) {
		/* posix_acl_permission(): the first match decides, in the ACL's order. */
		mask = acl_mask(p);
		for (size_t i = 0; i < p->nacl; i++) {
			const struct placefs_perm_entry *e = &p->acl[i];

			if (e->tag == PLACEFS_ACL_USER && (uid_t)e->id == uid)
				return grants(e, mask);
			if (group_entry(p, e, &g) && in_groups(g, gid, groups, ngroups)) {
				found = true;
				if (e->perm & PLACEFS_ACL_READ)
					return (mask & PLACEFS_ACL_READ) != 0;
			}
			if (e->tag == PLACEFS_ACL_OTHER)
				return !found && (e->perm & PLACEFS_ACL_READ);
		}
		return false; /* not reached: a validated ACL ends with other:: */
	}
	if (in_groups(p->gid, gid, groups, ngroups))
		return (p->mode & S_IRGRP) != 0;
	return (p->mode & S_IROTH) != 0;
}

enum placefs_perm_answer placefs_perm_reads_primary(const struct placefs_perm *p, uid_t uid,
                                                    gid_t gid)
{
	bool matched = false, match_grant = false, any = false, all = true, other;
	unsigned mask;
	gid_t g;

	if (uid == 0)
		return PLACEFS_PERM_YES;
	if (uid == p->uid)
		return (p->mode & S_IRUSR) ? PLACEFS_PERM_YES : PLACEFS_PERM_NO;
	if (p->refused)
		return PLACEFS_PERM_NO;
	if (acl_active(p)) {
		mask = acl_mask(p);
		for (size_t i = 0; i < p->nacl; i++) {
			const struct placefs_perm_entry *e = &p->acl[i];

			if (e->tag == PLACEFS_ACL_USER && (uid_t)e->id == uid)
				return grants(e, mask) ? PLACEFS_PERM_YES : PLACEFS_PERM_NO;
		}
		for (size_t i = 0; i < p->nacl; i++) {
			const struct placefs_perm_entry *e = &p->acl[i];

			if (!group_entry(p, e, &g))
				continue;
			any |= grants(e, mask);
			all &= gid_grants(p, g, mask);
			if (g == gid) {
				matched = true;
				match_grant |= grants(e, mask);
			}
		}
		other = (acl_other(p) & PLACEFS_ACL_READ) != 0;
	} else {
		any = all = (p->mode & S_IRGRP) != 0;
		if (p->gid == gid) {
			matched = true;
			match_grant = any;
		}
		other = (p->mode & S_IROTH) != 0;
	}
	/*
	 * Other groups can only add matching entries: once one matches, a grant
	 * among them decides; with none matching yet, each entry that other
	 * groups could match, or none, may be the one that decides.
	 */
	if (matched)
		return match_grant ? PLACEFS_PERM_YES
		                   : (any ? PLACEFS_PERM_DEPENDS : PLACEFS_PERM_NO);
	if (other && all)
		return PLACEFS_PERM_YES;
	if (!other && !any)
		return PLACEFS_PERM_NO;
	return PLACEFS_PERM_DEPENDS;
}

mode_t placefs_perm_mirror_mode(const struct placefs_perm *p, bool acl)
{
	return acl ? p->mirror_mode : p->narrow_mode;
}

const uint8_t *placefs_perm_mirror_acl(const struct placefs_perm *p, size_t *len)
{
	*len = p->mirror ? p->mirror_len : 0;
	return p->mirror;
}

/*
 * Whether every caller but uid 0 reads p: with `with_group`, every caller
 * that has group g (as fsgid or supplementary), else every caller at all.
 */
static bool all_read(const struct placefs_perm *p, bool with_group, gid_t grp)
{
	bool matched = false, match_grant = false, all = true;
	unsigned mask;
	gid_t g;

	if (p->refused)
		return false;
	if (p->uid != 0 && !(p->mode & S_IRUSR))
		return false; /* its owner, who may have any group */
	if (!acl_active(p)) {
		if (with_group && grp == p->gid)
			return (p->mode & S_IRGRP) != 0;
		return (p->mode & S_IRGRP) && (p->mode & S_IROTH);
	}
	mask = acl_mask(p);
	for (size_t i = 0; i < p->nacl; i++) {
		const struct placefs_perm_entry *e = &p->acl[i];

		if (e->tag == PLACEFS_ACL_USER && (uid_t)e->id != p->uid && e->id != 0 &&
		    !grants(e, mask))
			return false;
		if (!group_entry(p, e, &g))
			continue;
		all &= gid_grants(p, g, mask);
		if (with_group && g == grp) {
			matched = true;
			match_grant |= grants(e, mask);
		}
	}
	if (matched)
		return match_grant;
	return all && (acl_other(p) & PLACEFS_ACL_READ);
}

static bool group_reads_all(const struct placefs_perm *ps, size_t n, gid_t g)
{
	for (size_t i = 0; i < n; i++)
		if (!all_read(&ps[i], true, g))
			return false;
	return true;
}

enum placefs_perm_audience placefs_perm_audience(const struct placefs_perm *ps, size_t n,
                                                 gid_t *gid)
{
	size_t i, k;
	gid_t g;

	for (i = 0; i < n; i++)
		if (!all_read(&ps[i], false, 0))
			break;
	if (i == n)
		return PLACEFS_PERM_ANYONE;
	for (i = 0; i < n; i++) {
		if (group_reads_all(ps, n, ps[i].gid)) {
			*gid = ps[i].gid;
			return PLACEFS_PERM_GROUP;
		}
		for (k = 0; k < ps[i].nacl; k++) {
			if (ps[i].acl[k].tag != PLACEFS_ACL_GROUP)
				continue;
			g = (gid_t)ps[i].acl[k].id;
			if (group_reads_all(ps, n, g)) {
				*gid = g;
				return PLACEFS_PERM_GROUP;
			}
		}
	}
	return PLACEFS_PERM_NOBODY;
}
