/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/perm.h"
#include "testutil.h"

/* ---- ACL blobs ---------------------------------------------------------------------- */

#define U_OBJ  PLACEFS_ACL_USER_OBJ
#define U      PLACEFS_ACL_USER
#define G_OBJ  PLACEFS_ACL_GROUP_OBJ
#define G      PLACEFS_ACL_GROUP
#define MASK   PLACEFS_ACL_MASK
#define OTHER  PLACEFS_ACL_OTHER
#define NOID   0xffffffffu
#define MAXENT 16

struct ent {
	unsigned tag, perm;
	uint32_t id;
};

struct blob {
	uint8_t b[4 + 8 * MAXENT];
	size_t len;
};

static struct blob mkblob(uint32_t version, const struct ent *e, size_t n)
{
	struct blob x;

	ck_assert(n <= MAXENT);
	memset(&x, 0, sizeof(x));
	x.b[0] = (uint8_t)version;
	x.b[1] = (uint8_t)(version >> 8);
	x.b[2] = (uint8_t)(version >> 16);
	x.b[3] = (uint8_t)(version >> 24);
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = x.b + 4 + 8 * i;

		p[0] = (uint8_t)e[i].tag;
		p[1] = (uint8_t)(e[i].tag >> 8);
		p[2] = (uint8_t)e[i].perm;
		p[3] = (uint8_t)(e[i].perm >> 8);
		for (int k = 0; k < 4; k++)
			p[4 + k] = (uint8_t)(e[i].id >> (8 * k));
	}
	x.len = 4 + 8 * n;
	return x;
}

#define BLOB(...)                                                                                  \
	mkblob(2, (const struct ent[]){__VA_ARGS__},                                               \
	       sizeof((const struct ent[]){__VA_ARGS__}) / sizeof(struct ent))

/* ---- the kernel's check, transcribed (fs/namei.c, fs/posix_acl.c) -------------------- */

/*
 * acl_permission_check() and posix_acl_permission() for MAY_READ, written
 * as the kernel writes them (goto and all), against a blob taken as valid.
 */
static int kernel_reads(uid_t fuid, gid_t fgid, mode_t mode, const struct blob *acl, uid_t uid,
                        gid_t gid, const gid_t *groups, size_t ngroups)
{
	size_t n = acl ? (acl->len - 4) / 8 : 0, i, m;
	const int want = 4;
	int found = 0;
	unsigned tag, perm;

	if (uid == 0)
		return 1; /* CAP_DAC_OVERRIDE */
#define IN_GROUP(g)                                                                                \
	({                                                                                         \
		int _r = (g) == gid;                                                               \
		for (size_t _k = 0; _k < ngroups; _k++)                                            \
			_r |= groups[_k] == (g);                                                   \
		_r;                                                                                \
	})
#define TAG(i)  ((unsigned)acl->b[4 + 8 * (i)] | (unsigned)acl->b[5 + 8 * (i)] << 8)
#define PERM(i) ((unsigned)acl->b[6 + 8 * (i)])
#define ID(i)                                                                                      \
	((uint32_t)acl->b[8 + 8 * (i)] | (uint32_t)acl->b[9 + 8 * (i)] << 8 |                      \
	 (uint32_t)acl->b[10 + 8 * (i)] << 16 | (uint32_t)acl->b[11 + 8 * (i)] << 24)
	if (fuid == uid)
		return ((mode >> 6) & want) == want;
	if (n && (mode & 070)) {
		for (i = 0; i < n; i++) {
			tag = TAG(i);
			switch (tag) {
			case U_OBJ: break; /* checked already */
			case U:
				if (ID(i) == uid)
					goto mask;
				break;
			case G_OBJ:
				if (IN_GROUP(fgid)) {
					found = 1;
					if ((PERM(i) & want) == want)
						goto mask;
				}
				break;
			case G:
				if (IN_GROUP(ID(i))) {
					found = 1;
					if ((PERM(i) & want) == want)
						goto mask;
				}
				break;
			case MASK: break;
			case OTHER:
				if (found)
					return 0;
				goto check_perm;
			default: return 0;
			}
		}
		return 0;
	mask:
		for (m = i + 1; m < n; m++)
			if (TAG(m) == MASK)
				return (PERM(i) & PERM(m) & want) == want;
	check_perm:
		perm = PERM(i);
		return (perm & want) == want;
	}
	if ((want & (mode ^ (mode >> 3))) && IN_GROUP(fgid))
		mode >>= 3;
	return (mode & want) == want;
#undef IN_GROUP
#undef TAG
#undef PERM
#undef ID
}

/* ---- the matrix ------------------------------------------------------------------------ */

/* The callers: uid, gid, supplementary groups. Group 500 is "secret", 600 "team". */
struct who {
	const char *name;
	uid_t uid;
	gid_t gid;
	gid_t groups[2];
	size_t ngroups;
};

static const struct who people[] = {
        {"owner", 1000, 1000, {0}, 0},
        {"member-primary", 1001, 500, {0}, 0},
        {"member-supplementary", 1002, 1002, {500}, 1},
        {"outsider", 1003, 1003, {0}, 0},
        {"named-member", 1004, 500, {0}, 0},
        {"team-supplementary", 1005, 1005, {600}, 1},
        {"root", 0, 0, {0}, 0},
};
#define NPEOPLE (sizeof(people) / sizeof(people[0]))

struct cell {
	const char *name;
	mode_t mode;
	bool has_acl;
	struct blob acl;
	const char *reads; /* one letter per person of people[]: y or n */
};

static void check_cell(const struct cell *c)
{
	struct placefs_error err;
	struct placefs_perm p, mirror, narrow;
	const uint8_t *mb;
	size_t mlen;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_perm_init(&p, 1000, 500, c->mode, c->has_acl ? c->acl.b : NULL, c->acl.len,
	                       c->name, &err);
	ck_assert_msg(rc == 0, "%s: %s", c->name, err.msg);
	mb = placefs_perm_mirror_acl(&p, &mlen);
	rc = placefs_perm_init(&mirror, 1000, 500, placefs_perm_mirror_mode(&p, true), mb, mlen,
	                       "mirror", &err);
	ck_assert_msg(rc == 0, "%s: the mirrored ACL is refused: %s", c->name, err.msg);
	placefs_perm_init(&narrow, 1000, 500, placefs_perm_mirror_mode(&p, false), NULL, 0,
	                  "narrow", &err);
	ck_assert_msg((placefs_perm_mirror_mode(&p, true) & ~0444) == 0, "%s: mirror mode %o",
	              c->name, placefs_perm_mirror_mode(&p, true));
	for (size_t i = 0; i < NPEOPLE; i++) {
		const struct who *w = &people[i];
		bool want = c->reads[i] == 'y';
		bool got = placefs_perm_reads(&p, w->uid, w->gid, w->groups, w->ngroups);
		enum placefs_perm_answer pa = placefs_perm_reads_primary(&p, w->uid, w->gid);

		ck_assert_msg(got == want, "%s, %s: reads %d, expected %d", c->name, w->name, got,
		              want);
		ck_assert_msg(kernel_reads(1000, 500, c->mode, c->has_acl ? &c->acl : NULL, w->uid,
		                           w->gid, w->groups, w->ngroups) == want,
		              "%s, %s: the kernel's transcription disagrees with the table",
		              c->name, w->name);
		ck_assert_msg(pa == PLACEFS_PERM_DEPENDS || (pa == PLACEFS_PERM_YES) == want,
		              "%s, %s: primary answer %d, reads %d", c->name, w->name, pa, want);
		/* The kernel on the mount decides the same on the mirror, never more on the narrowed bits. */
		ck_assert_msg(placefs_perm_reads(&mirror, w->uid, w->gid, w->groups, w->ngroups) ==
		                      want,
		              "%s, %s: the mirror decides otherwise", c->name, w->name);
		ck_assert_msg(
		        !placefs_perm_reads(&narrow, w->uid, w->gid, w->groups, w->ngroups) || want,
		        "%s, %s: the narrowed mode lets in a refused caller", c->name, w->name);
	}
	placefs_perm_release(&p);
	placefs_perm_release(&mirror);
	placefs_perm_release(&narrow);
}

/* Owner 1000, group 500 ("secret") for every cell. */
START_TEST(test_matrix)
{
	/* people: owner, member-primary, member-supplementary, outsider, named-member (1004,
	 * primary 500), team-supplementary (600), root */
	const struct cell cells[] = {
	        {"owner only 0600", 0600, false, {{0}, 0}, "ynnnnny"},
	        {"group 0640", 0640, false, {{0}, 0}, "yyynyny"},
	        {"group 0604: other but not the group", 0604, false, {{0}, 0}, "ynnynyy"},
	        {"other 0644", 0644, false, {{0}, 0}, "yyyyyyy"},
	        {"owner without read 0044", 0044, false, {{0}, 0}, "nyyyyyy"},
	        {"named user allows", 0640, true,
	         BLOB({U_OBJ, 6, NOID}, {U, 4, 1003}, {G_OBJ, 0, NOID}, {MASK, 4, NOID},
	              {OTHER, 0, NOID}),
	         "ynnynny"},
	        {"named user denies a group member", 0640, true,
	         BLOB({U_OBJ, 6, NOID}, {U, 0, 1004}, {G_OBJ, 4, NOID}, {MASK, 4, NOID},
	              {OTHER, 0, NOID}),
	         "yyynnny"},
	        {"named group allows", 0640, true,
	         BLOB({U_OBJ, 6, NOID}, {G_OBJ, 0, NOID}, {G, 4, 600}, {MASK, 4, NOID},
	              {OTHER, 0, NOID}),
	         "ynnnnyy"},
	        {"mask removes a named entry's read", 0620, true,
	         BLOB({U_OBJ, 6, NOID}, {U, 4, 1003}, {G_OBJ, 4, NOID}, {MASK, 2, NOID},
	              {OTHER, 0, NOID}),
	         "ynnnnny"},
	        {"group entry denies, other allows", 0644, true,
	         BLOB({U_OBJ, 6, NOID}, {U, 4, 1003}, {G_OBJ, 0, NOID}, {MASK, 4, NOID},
	              {OTHER, 4, NOID}),
	         "ynnyny"
	         "y"},
	        /* Group bits (the mask) all clear: the kernel skips the ACL, so the named user gets other. */
	        {"mask --- skips the ACL", 0604, true,
	         BLOB({U_OBJ, 6, NOID}, {U, 4, 1003}, {G_OBJ, 4, NOID}, {MASK, 0, NOID},
	              {OTHER, 4, NOID}),
	         "ynnynyy"},
	        {"two group entries, one grants", 0640, true,
	         BLOB({U_OBJ, 6, NOID}, {G_OBJ, 0, NOID}, {G, 4, 500}, {MASK, 4, NOID},
	              {OTHER, 0, NOID}),
	         "yyynyny"},
	        {"minimal ACL", 0640, true,
	         BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {OTHER, 0, NOID}), "yyynyny"},
	};

	for (size_t i = 0; i < sizeof(cells) / sizeof(cells[0]); i++)
		check_cell(&cells[i]);
}
END_TEST

/* 0604 and 0640 group secret, for a user in secret only as a supplementary group. */
START_TEST(test_supplementary)
{
	struct placefs_perm p;
	gid_t sec = 500;

	placefs_perm_init(&p, 1000, 500, 0604, NULL, 0, "x", NULL);
	ck_assert(!placefs_perm_reads(&p, 1002, 1002, &sec, 1));
	ck_assert(placefs_perm_reads(&p, 1002, 1002, NULL, 0));
	ck_assert_int_eq(placefs_perm_reads_primary(&p, 1002, 1002), PLACEFS_PERM_DEPENDS);
	ck_assert_int_eq(placefs_perm_reads_primary(&p, 1002, 500), PLACEFS_PERM_NO);
	placefs_perm_release(&p);
	placefs_perm_init(&p, 1000, 500, 0640, NULL, 0, "x", NULL);
	ck_assert(placefs_perm_reads(&p, 1002, 1002, &sec, 1));
	ck_assert(!placefs_perm_reads(&p, 1002, 1002, NULL, 0));
	ck_assert_int_eq(placefs_perm_reads_primary(&p, 1002, 1002), PLACEFS_PERM_DEPENDS);
	ck_assert_int_eq(placefs_perm_reads_primary(&p, 1002, 500), PLACEFS_PERM_YES);
	placefs_perm_release(&p);
	placefs_perm_init(&p, 1000, 500, 0644, NULL, 0, "x", NULL);
	ck_assert_int_eq(placefs_perm_reads_primary(&p, 1002, 1002), PLACEFS_PERM_YES);
	placefs_perm_release(&p);
	placefs_perm_init(&p, 1000, 500, 0600, NULL, 0, "x", NULL);
	ck_assert_int_eq(placefs_perm_reads_primary(&p, 1002, 1002), PLACEFS_PERM_NO);
	placefs_perm_release(&p);
}
END_TEST

/* ---- hostile blobs ----------------------------------------------------------------- */

static void refused(const char *what, const struct blob *b, const char *rule)
{
	struct placefs_error err;
	struct placefs_perm p;
	int rc;

	placefs_error_clear(&err);
	rc = placefs_perm_init(&p, 1000, 500, 0644, b->b, b->len, "/src/model.safetensors", &err);
	ck_assert_msg(rc == -EINVAL, "%s: accepted (%d)", what, rc);
	ck_assert_msg(strstr(err.msg, "/src/model.safetensors") != NULL, "%s: no file: %s", what,
	              err.msg);
	ck_assert_msg(strstr(err.msg, rule) != NULL, "%s: the rule \"%s\" is not in \"%s\"", what,
	              rule, err.msg);
	/* Refused: the owner by its bits, root, nobody else. */
	ck_assert(p.refused);
	ck_assert(placefs_perm_reads(&p, 1000, 500, NULL, 0));
	ck_assert(placefs_perm_reads(&p, 0, 0, NULL, 0));
	ck_assert(!placefs_perm_reads(&p, 1001, 500, NULL, 0));
	ck_assert(!placefs_perm_reads(&p, 1003, 1003, NULL, 0));
	ck_assert_int_eq(placefs_perm_mirror_mode(&p, true), 0400);
	ck_assert_int_eq(placefs_perm_mirror_mode(&p, false), 0400);
	placefs_perm_release(&p);
}

START_TEST(test_malformed)
{
	struct blob b;

	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID});
	b.len = 3;
	refused("3 bytes", &b, "shorter than its 4-byte header");
	b = mkblob(1, (const struct ent[]){{U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID}},
	           3);
	refused("version 1", &b, "version 1, expected 2");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID});
	b.len -= 3;
	refused("size", &b, "not a 4-byte header and 8-byte entries");
	b = BLOB({U_OBJ, 6, NOID});
	b.len = 4;
	refused("no entries", &b, "without entries");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID});
	refused("no other", &b, "without other::");
	b = BLOB({U_OBJ, 6, NOID}, {OTHER, 4, NOID});
	refused("no group", &b, "other:: must come once, last, after group::");
	b = BLOB({G_OBJ, 4, NOID}, {OTHER, 4, NOID});
	refused("no user", &b, "group:: must come once");
	b = BLOB({U_OBJ, 6, NOID}, {U, 4, 7}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID});
	refused("named without mask", &b, "named entries without a mask::");
	b = BLOB({U_OBJ, 6, NOID}, {U, 4, 7}, {U, 0, 7}, {G_OBJ, 4, NOID}, {MASK, 4, NOID},
	         {OTHER, 4, NOID});
	refused("duplicate user", &b, "a named entry repeated");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {G, 4, 9}, {G, 0, 9}, {MASK, 4, NOID},
	         {OTHER, 4, NOID});
	refused("duplicate group", &b, "a named entry repeated");
	b = BLOB({U_OBJ, 6, NOID}, {U, 4, 9}, {U, 0, 7}, {G_OBJ, 4, NOID}, {MASK, 4, NOID},
	         {OTHER, 4, NOID});
	refused("unsorted users", &b, "not in ascending order of id");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {U, 4, 7}, {MASK, 4, NOID}, {OTHER, 4, NOID});
	refused("user after group", &b, "a named user must come after user:: and before group::");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {MASK, 4, NOID}, {G, 4, 7}, {OTHER, 4, NOID});
	refused("group after mask", &b, "a named group must come after group:: and before mask::");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID}, {MASK, 4, NOID});
	refused("mask after other", &b, "entries after other::");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID}, {OTHER, 4, NOID});
	refused("two others", &b, "entries after other::");
	b = BLOB({U_OBJ, 6, NOID}, {U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID});
	refused("two user objs", &b, "user:: must come first, once");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {G_OBJ, 4, NOID}, {OTHER, 4, NOID});
	refused("two group objs", &b, "group:: must come once");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 4, NOID}, {0x40, 4, NOID}, {OTHER, 4, NOID});
	refused("unknown tag", &b, "unknown tag 0x40");
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 8, NOID}, {OTHER, 4, NOID});
	refused("perm bits", &b, "permission bits 0x8 beyond rwx");
	b = BLOB({U_OBJ, 6, NOID}, {U, 4, NOID}, {G_OBJ, 4, NOID}, {MASK, 4, NOID},
	         {OTHER, 4, NOID});
	refused("undefined id", &b, "without an id");
	{
		static uint8_t big[PLACEFS_PERM_ACL_MAX + 12];
		struct placefs_error err;
		struct placefs_perm p;

		memset(big, 0, sizeof(big));
		big[0] = 2;
		placefs_error_clear(&err);
		ck_assert_int_eq(placefs_perm_init(&p, 1, 1, 0644, big, sizeof(big), "big", &err),
		                 -EINVAL);
		ck_assert_msg(strstr(err.msg, "larger than the kernel's limit") != NULL, "%s",
		              err.msg);
		placefs_perm_release(&p);
	}
}
END_TEST

/* ---- random ACLs against the transcription ----------------------------------------- */

static uint64_t rng = 88172645463325252ULL;

static unsigned rnd(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

/* A valid ACL over uids 1000..1005 and gids 500..503 (sorted, unique), or none. */
static bool random_acl(struct blob *b, mode_t *mode)
{
	struct ent e[MAXENT];
	size_t n = 0;
	unsigned mask = rnd(8);
	bool named = false;

	*mode = (mode_t)(rnd(8) << 6 | rnd(8) << 3 | rnd(8));
	if (rnd(3) == 0)
		return false;
	e[n++] = (struct ent){U_OBJ, (*mode >> 6) & 7, NOID};
	for (uint32_t u = 1000; u <= 1005; u++)
		if (rnd(3) == 0) {
			e[n++] = (struct ent){U, rnd(8), u};
			named = true;
		}
	e[n++] = (struct ent){G_OBJ, rnd(8), NOID};
	for (uint32_t g = 500; g <= 503; g++)
		if (rnd(3) == 0) {
			e[n++] = (struct ent){G, rnd(8), g};
			named = true;
		}
	if (named || rnd(2)) {
		e[n++] = (struct ent){MASK, mask, NOID};
		*mode = (*mode & ~070u) | mask << 3;
	} else {
		*mode = (*mode & ~070u) | e[n - 1].perm << 3;
	}
	e[n++] = (struct ent){OTHER, *mode & 7, NOID};
	*b = mkblob(2, e, n);
	return true;
}

START_TEST(test_random)
{
	for (int round = 0; round < 4000; round++) {
		struct placefs_perm p, mirror, narrow;
		struct placefs_error err;
		struct blob b;
		mode_t mode;
		bool has = random_acl(&b, &mode);
		const uint8_t *mb;
		size_t mlen;
		int rc;

		placefs_error_clear(&err);
		rc = placefs_perm_init(&p, 1000, 500, mode, has ? b.b : NULL, b.len, "r", &err);
		ck_assert_msg(rc == 0, "round %d: %s", round, err.msg);
		mb = placefs_perm_mirror_acl(&p, &mlen);
		ck_assert_int_eq(placefs_perm_init(&mirror, 1000, 500,
		                                   placefs_perm_mirror_mode(&p, true), mb, mlen,
		                                   "m", &err),
		                 0);
		placefs_perm_init(&narrow, 1000, 500, placefs_perm_mirror_mode(&p, false), NULL, 0,
		                  "n", NULL);
		for (int c = 0; c < 24; c++) {
			uid_t uid = c == 0 ? 0 : 1000 + rnd(7);
			gid_t gid = 499 + rnd(6), groups[3];
			size_t ng = rnd(4);
			bool want;
			enum placefs_perm_answer pa;

			for (size_t k = 0; k < ng; k++)
				groups[k] = 499 + rnd(6);
			want = kernel_reads(1000, 500, mode, has ? &b : NULL, uid, gid, groups, ng);
			ck_assert_msg(placefs_perm_reads(&p, uid, gid, groups, ng) == want,
			              "round %d: uid %u gid %u: reads differs from the kernel's",
			              round, uid, gid);
			ck_assert_msg(placefs_perm_reads(&mirror, uid, gid, groups, ng) == want,
			              "round %d: uid %u: the mirror differs", round, uid);
			ck_assert_msg(!placefs_perm_reads(&narrow, uid, gid, groups, ng) || want,
			              "round %d: uid %u: the narrowed mode lets in more", round,
			              uid);
			pa = placefs_perm_reads_primary(&p, uid, gid);
			if (pa != PLACEFS_PERM_DEPENDS)
				ck_assert_msg((pa == PLACEFS_PERM_YES) == want,
				              "round %d: uid %u gid %u: primary %d, reads %d",
				              round, uid, gid, pa, want);
			/* DEPENDS only when some group list decides otherwise. */
			if (pa == PLACEFS_PERM_DEPENDS) {
				bool yes = false, no = false;

				for (unsigned set = 0; set < 64; set++) {
					gid_t all[6];
					size_t na = 0;

					for (unsigned k = 0; k < 6; k++)
						if (set & (1u << k))
							all[na++] = 499 + k;
					if (kernel_reads(1000, 500, mode, has ? &b : NULL, uid, gid,
					                 all, na))
						yes = true;
					else
						no = true;
				}
				ck_assert_msg(yes && no,
				              "round %d: uid %u gid %u: DEPENDS, but not so", round,
				              uid, gid);
			}
		}
		placefs_perm_release(&p);
		placefs_perm_release(&mirror);
		placefs_perm_release(&narrow);
	}
}
END_TEST

/* The audience: everyone in it reads every file; as wide as the files allow. */
START_TEST(test_audience)
{
	struct placefs_perm ps[3];
	gid_t g = 0;
	struct blob b;

	placefs_perm_init(&ps[0], 1000, 500, 0644, NULL, 0, "a", NULL);
	placefs_perm_init(&ps[1], 1001, 600, 0644, NULL, 0, "b", NULL);
	ck_assert_int_eq(placefs_perm_audience(ps, 2, &g), PLACEFS_PERM_ANYONE);
	placefs_perm_release(&ps[1]);
	placefs_perm_init(&ps[1], 1001, 500, 0640, NULL, 0, "b", NULL);
	ck_assert_int_eq(placefs_perm_audience(ps, 2, &g), PLACEFS_PERM_GROUP);
	ck_assert_int_eq(g, 500);
	placefs_perm_release(&ps[1]);
	/* 0604 for group 500: its members may not read, others may: nobody shared. */
	placefs_perm_init(&ps[1], 1001, 500, 0604, NULL, 0, "b", NULL);
	ck_assert_int_eq(placefs_perm_audience(ps, 2, &g), PLACEFS_PERM_NOBODY);
	placefs_perm_release(&ps[1]);
	placefs_perm_init(&ps[1], 1001, 600, 0640, NULL, 0, "b", NULL);
	placefs_perm_release(&ps[0]);
	placefs_perm_init(&ps[0], 1000, 500, 0640, NULL, 0, "a", NULL);
	ck_assert_int_eq(placefs_perm_audience(ps, 2, &g), PLACEFS_PERM_NOBODY);
	/* A named group that every file grants. */
	b = BLOB({U_OBJ, 6, NOID}, {G_OBJ, 0, NOID}, {G, 4, 600}, {MASK, 4, NOID},
	         {OTHER, 0, NOID});
	placefs_perm_release(&ps[0]);
	placefs_perm_init(&ps[0], 1000, 500, 0640, b.b, b.len, "a", NULL);
	ck_assert_int_eq(placefs_perm_audience(ps, 2, &g), PLACEFS_PERM_GROUP);
	ck_assert_int_eq(g, 600);
	/* A named user denied among them: the group no longer qualifies. */
	b = BLOB({U_OBJ, 6, NOID}, {U, 0, 1004}, {G_OBJ, 4, NOID}, {MASK, 4, NOID},
	         {OTHER, 0, NOID});
	placefs_perm_init(&ps[2], 1000, 600, 0640, b.b, b.len, "c", NULL);
	ck_assert_int_eq(placefs_perm_audience(ps, 3, &g), PLACEFS_PERM_NOBODY);
	for (int i = 0; i < 3; i++)
		placefs_perm_release(&ps[i]);

	/* Random sets: whoever the audience lets in reads every file. */
	for (int round = 0; round < 1000; round++) {
		struct placefs_perm rs[3];
		struct blob bl[3];
		bool has[3];
		mode_t mode[3];
		enum placefs_perm_audience a;

		for (int i = 0; i < 3; i++) {
			has[i] = random_acl(&bl[i], &mode[i]);
			ck_assert_int_eq(placefs_perm_init(&rs[i], 1000 + rnd(3), 500 + rnd(3),
			                                   mode[i], has[i] ? bl[i].b : NULL,
			                                   bl[i].len, "r", NULL),
			                 0);
		}
		a = placefs_perm_audience(rs, 3, &g);
		for (int c = 0; c < 40 && a != PLACEFS_PERM_NOBODY; c++) {
			uid_t uid = 1000 + rnd(7);
			gid_t gid = 499 + rnd(6), groups[4];
			size_t ng = rnd(4);

			for (size_t k = 0; k < ng; k++)
				groups[k] = 499 + rnd(6);
			/* A member of the audience's group, by its fsgid or one more group. */
			if (a == PLACEFS_PERM_GROUP) {
				if (rnd(2))
					gid = g;
				else
					groups[ng++] = g;
			}
			for (int i = 0; i < 3; i++)
				ck_assert_msg(kernel_reads(rs[i].uid, rs[i].gid, mode[i],
				                           has[i] ? &bl[i] : NULL, uid, gid, groups,
				                           ng),
				              "round %d: audience %d (gid %u) lets in uid %u, who "
				              "may not "
				              "read file %d",
				              round, a, g, uid, i);
		}
		for (int i = 0; i < 3; i++)
			placefs_perm_release(&rs[i]);
	}
}
END_TEST

/* From a real file: fstat and its ACL xattr, where the file system has them. */
START_TEST(test_from_fd)
{
	char *dir = tu_mkdtemp(), *path = tu_path(dir, "shard");
	struct placefs_error err;
	struct placefs_perm p;
	struct blob b = BLOB({U_OBJ, 6, NOID}, {U, 4, 4242}, {G_OBJ, 0, NOID}, {MASK, 4, NOID},
	                     {OTHER, 0, NOID});
	int fd;

	placefs_error_clear(&err);
	tu_write_text(path, "x");
	ck_assert_int_eq(chmod(path, 0640), 0);
	fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(placefs_perm_from_fd(&p, fd, path, &err), 0);
	ck_assert_int_eq(p.nacl, 0);
	ck_assert_int_eq(p.mode, 0640);
	ck_assert_int_eq(p.uid, geteuid());
	placefs_perm_release(&p);
	if (fsetxattr(fd, PLACEFS_PERM_ACL_XATTR, b.b, b.len, 0) == 0) {
		ck_assert_int_eq(placefs_perm_from_fd(&p, fd, path, &err), 0);
		ck_assert_int_eq(p.nacl, 5);
		ck_assert(placefs_perm_reads(&p, 4242, 4242, NULL, 0));
		ck_assert(!placefs_perm_reads(&p, 4243, p.gid, NULL, 0));
		placefs_perm_release(&p);
	}
	close(fd);
	fd = open(path, O_RDONLY);
	close(fd);
	/* A closed descriptor: refused, owner-only, with the errno. */
	ck_assert_int_eq(placefs_perm_from_fd(&p, fd, path, &err), -EBADF);
	ck_assert(p.refused);
	placefs_perm_release(&p);
	tu_rmtree(dir);
	free(path);
	free(dir);
}
END_TEST

static Suite *perm_suite(void)
{
	Suite *s = suite_create("perm");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_matrix);
	tcase_add_test(tc, test_supplementary);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_random);
	tcase_add_test(tc, test_audience);
	tcase_add_test(tc, test_from_fd);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(perm_suite());
}
