/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "staging/backend.h"
#include "common/clock.h"
#include "staging/fill.h"
#include "staging/gate.h"
#include "ioctl.h"
#include "log.h"
#include "common/size.h"
#include "common/slice.h"
#include "staging/stage.h"
#include "staging/stagers.h"
#include "stats.h"
#include "ioctl_i.h"

/* Whether uid is root or the daemon's own: trusted, never bound per user. */
bool ioctl_trusted(const struct placefs_ioctl *fs, uid_t uid)
{
	return uid == 0 || uid == fs->self_uid;
}

/* Whether uid's ring share and waiting stages are capped: anyone but root and the daemon's uid. */
bool ioctl_capped(const struct placefs_ioctl *fs, uid_t uid)
{
	return !ioctl_trusted(fs, uid) && fs->share_bytes != UINT64_MAX;
}

/* uid's entry, added if new; NULL when out of memory. Under fs->lock. */
struct user_use *ioctl_user_get(struct placefs_ioctl *fs, uid_t uid)
{
	struct user_use *u;
	size_t i;

	for (i = 0; i < fs->nusers; i++)
		if (fs->users[i].uid == uid)
			return &fs->users[i];
	u = realloc(fs->users, (fs->nusers + 1) * sizeof(*u));
	if (!u)
		return NULL;
	fs->users = u;
	u = &fs->users[fs->nusers++];
	memset(u, 0, sizeof(*u));
	u->uid = uid;
	return u;
}

/* Gives back `bytes` of uid's share (and a waiting slot when `thread`). */
void ioctl_share_put(struct placefs_ioctl *fs, uid_t uid, uint64_t bytes, bool thread)
{
	struct user_use *u;

	if (!bytes && !thread)
		return;
	pthread_mutex_lock(&fs->lock);
	u = ioctl_user_get(fs, uid);
	if (u) {
		u->bytes -= bytes < u->bytes ? bytes : u->bytes;
		if (thread && u->waiting)
			u->waiting--;
	}
	pthread_mutex_unlock(&fs->lock);
}

/*
 * The share is work-conserving: a capped user may go beyond it while no
 * other user stages through the ring (a lone request is never refused for
 * the share: it is the ring's rule, EFBIG, that bounds it), and gets no
 * more beyond it while another user's stage or batch run is in progress
 * (waiting for ring space or being copied) until its own leases and stages
 * are back under its share. Every user's ring requests are counted, root's
 * too, so that a trusted user's waiting stage holds a capped one back.
 * With -o user_share=100 nobody is capped and nothing is counted.
 */
int ioctl_ring_enter(struct placefs_ioctl *fs, uid_t uid, uint64_t need, uint64_t *reserved)
{
	struct user_use *u;
	int rc = 0;

	*reserved = 0;
	if (fs->share_bytes == UINT64_MAX)
		return 0;
	pthread_mutex_lock(&fs->lock);
	u = ioctl_user_get(fs, uid);
	if (!u) {
		rc = -ENOMEM;
	} else if (ioctl_capped(fs, uid)) {
		if (u->bytes + need > fs->share_bytes) {
			/* Beyond the share: only while every ring request in progress is its own. */
			if (fs->ring_busy > u->ring)
				rc = -EBUSY;
			else
				atomic_fetch_add_explicit(&fs->share_over, 1, memory_order_relaxed);
		}
		if (rc == 0) {
			u->bytes += need;
			*reserved = need;
		}
	}
	if (rc == 0) {
		u->ring++;
		fs->ring_busy++;
	}
	pthread_mutex_unlock(&fs->lock);
	return rc;
}

/* The request of ioctl_ring_enter() ended; `bytes` of its reservation go back. */
void ioctl_ring_leave(struct placefs_ioctl *fs, uid_t uid, uint64_t bytes)
{
	struct user_use *u;

	if (fs->share_bytes == UINT64_MAX)
		return;
	pthread_mutex_lock(&fs->lock);
	u = ioctl_user_get(fs, uid);
	if (u) {
		u->bytes -= bytes < u->bytes ? bytes : u->bytes;
		if (u->ring)
			u->ring--;
	}
	if (fs->ring_busy)
		fs->ring_busy--;
	pthread_mutex_unlock(&fs->lock);
}

/*
 * The workers' slots: a stage on its FUSE worker or a batch holds one, and
 * at most -o max_threads / 2 are held at once, so that workers stay free
 * for the RELEASE and INTERRUPT requests that end waits. A user other than
 * root and the daemon's holds at most half of them: another user's batch
 * finds one free whatever one user keeps in flight. A slot goes back before
 * the reply that ends its request (ioctl_slot_put()), so a client that sends
 * its next request on the reply never finds its own last slot still held.
 */
bool ioctl_slot_get(struct placefs_ioctl *fs, struct sreq *r)
{
	struct user_use *u;
	bool ok = true;

	if (atomic_fetch_add(&fs->inline_busy, 1) >= fs->inline_max) {
		atomic_fetch_sub(&fs->inline_busy, 1);
		return false;
	}
	if (!ioctl_trusted(fs, r->uid)) {
		pthread_mutex_lock(&fs->lock);
		u = ioctl_user_get(fs, r->uid);
		if (u && u->slots < fs->user_inline_max)
			u->slots++;
		else
			ok = false;
		pthread_mutex_unlock(&fs->lock);
		if (!ok) {
			atomic_fetch_sub(&fs->inline_busy, 1);
			return false;
		}
		r->slot_user = true;
	}
	r->slot = true;
	return true;
}

/* Gives r's slot back, if it holds one (idempotent): before its reply goes out. */
void ioctl_slot_put(struct placefs_ioctl *fs, struct sreq *r)
{
	struct user_use *u;

	if (!r->slot)
		return;
	if (r->slot_user) {
		pthread_mutex_lock(&fs->lock);
		u = ioctl_user_get(fs, r->uid);
		if (u && u->slots)
			u->slots--;
		pthread_mutex_unlock(&fs->lock);
		r->slot_user = false;
	}
	r->slot = false;
	atomic_fetch_sub(&fs->inline_busy, 1);
}

static size_t lease_bucket(uint64_t lease)
{
	return (size_t)((lease * 0x9E3779B97F4A7C15ULL) >> 56) % LEASE_BUCKETS;
}

/* Records a capped user's new lease; false when out of memory. Under fs->lock. */
bool ioctl_lease_add(struct placefs_ioctl *fs, const struct sreq *r, uint64_t lease)
{
	struct lease_rec *l = malloc(sizeof(*l));
	size_t b = lease_bucket(lease);

	if (!l)
		return false;
	l->lease = lease;
	l->fh = r->fh;
	l->uid = r->uid;
	l->bytes = r->reserved;
	l->next = fs->leases[b];
	fs->leases[b] = l;
	return true;
}

/* Lease `lease` ended: its bytes no longer count against its user. */
void ioctl_lease_end(struct placefs_ioctl *fs, uint64_t lease)
{
	struct lease_rec **p, *l = NULL;
	struct user_use *u;

	pthread_mutex_lock(&fs->lock);
	for (p = &fs->leases[lease_bucket(lease)]; *p; p = &(*p)->next) {
		if ((*p)->lease == lease) {
			l = *p;
			*p = l->next;
			break;
		}
	}
	if (l && (u = ioctl_user_get(fs, l->uid)) != NULL)
		u->bytes -= l->bytes < u->bytes ? l->bytes : u->bytes;
	pthread_mutex_unlock(&fs->lock);
	free(l);
}

/* Every lease of file handle fh ended (it was closed). */
void ioctl_lease_end_owner(struct placefs_ioctl *fs, uint64_t fh)
{
	struct lease_rec **p, *l;
	struct user_use *u;
	size_t b;

	pthread_mutex_lock(&fs->lock);
	for (b = 0; b < LEASE_BUCKETS; b++) {
		p = &fs->leases[b];
		while ((l = *p) != NULL) {
			if (l->fh != fh) {
				p = &l->next;
				continue;
			}
			*p = l->next;
			if ((u = ioctl_user_get(fs, l->uid)) != NULL)
				u->bytes -= l->bytes < u->bytes ? l->bytes : u->bytes;
			free(l);
		}
	}
	pthread_mutex_unlock(&fs->lock);
}

/* ---- who may read a shard, borrow, open the ring ---------------------------------- */

/*
 * Every decision here is the kernel's (lib/common/perm.h: owner bits, the
 * access ACL, the caller's fsgid and supplementary groups) over each
 * shard's owner, group, mode and ACL as read at mount (fs/mount.h), the
 * same the tree shows the kernel for its own check of the tensor files.
 */

/*
 * What (uid, gid) may do as far as the primary group tells: remembered per
 * pair (the shards' permissions never change while mounted), so a request
 * costs a lookup, and the supplementary groups are read only where an
 * answer depends on them.
 */
static struct perm_entry perm_primary(struct placefs_ioctl *fs, uid_t uid, gid_t gid)
{
	struct perm_entry e = {uid, gid, false, PLACEFS_PERM_YES};
	enum placefs_perm_answer a;
	size_t i;

	pthread_mutex_lock(&fs->lock);
	for (i = 0; i < fs->npcache; i++) {
		if (fs->pcache[i].uid == uid && fs->pcache[i].gid == gid) {
			e = fs->pcache[i];
			pthread_mutex_unlock(&fs->lock);
			return e;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	for (i = 0; i < fs->m->nshards + (fs->ring_host ? 1 : 0); i++) {
		a = placefs_perm_reads_primary(
		        i < fs->m->nshards ? &fs->m->perms[i] : &fs->ring_perm, uid, gid);
		if (a == PLACEFS_PERM_DEPENDS)
			e.groups = true;
		if (a == PLACEFS_PERM_NO)
			e.borrow = PLACEFS_PERM_NO;
		else if (a == PLACEFS_PERM_DEPENDS && e.borrow == PLACEFS_PERM_YES)
			e.borrow = PLACEFS_PERM_DEPENDS;
	}
	if (uid == 0 || uid == fs->self_uid)
		e.borrow = PLACEFS_PERM_YES;
	/* A full cache stays as it is: the answer is recomputed, O(shards). */
	pthread_mutex_lock(&fs->lock);
	if (fs->npcache < PERM_CACHE)
		fs->pcache[fs->npcache++] = e;
	pthread_mutex_unlock(&fs->lock);
	return e;
}

/*
 * The caller's supplementary groups (fuse_req_getgroups() reads them from
 * /proc/PID/task/PID/status of the calling thread, which waits in this
 * request meanwhile); their count, or -1 when they cannot be had: -ENOSYS,
 * or a caller not visible in the daemon's PID namespace (pid 0), gone, or
 * whose /proc cannot be read. Then the primary gid alone is known, and
 * every answer that other groups could change refuses
 * (placefs_perm_reads_primary()): the primary gid taken as the whole list
 * would let a member of a group that a mode or ACL refuses (mode 0604)
 * pass as "other".
 */
static int who_groups(fuse_req_t req, struct ioctl_who *w)
{
	int n = fuse_req_getgroups(req, WHO_GROUPS, w->small);

	/* The list may grow between two reads: a bigger one until it fits. */
	for (int tries = 0; n > WHO_GROUPS && tries < 4; tries++) {
		gid_t *g = malloc((size_t)n * sizeof(*g));
		int got;

		if (!g)
			return -1;
		got = fuse_req_getgroups(req, n, g);
		if (got >= 0 && got <= n) {
			w->groups = g;
			return got;
		}
		free(g);
		n = got;
	}
	return n >= 0 && n <= WHO_GROUPS ? n : -1;
}

void ioctl_who_get(struct placefs_ioctl *fs, fuse_req_t req, struct ioctl_who *w)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	w->uid = ctx->uid;
	w->gid = ctx->gid;
	w->groups = w->small;
	w->ngroups = -1;
	if (w->uid != 0 && perm_primary(fs, w->uid, w->gid).groups)
		w->ngroups = who_groups(req, w);
}

void ioctl_who_release(struct ioctl_who *w)
{
	if (w->groups != w->small)
		free(w->groups);
	w->groups = w->small;
	w->ngroups = -1;
}

/* Whether w may read p: exactly with its groups, else only what no group list refuses. */
static bool who_reads(const struct ioctl_who *w, const struct placefs_perm *p)
{
	if (w->ngroups >= 0)
		return placefs_perm_reads(p, w->uid, w->gid, w->groups, (size_t)w->ngroups);
	return placefs_perm_reads_primary(p, w->uid, w->gid) == PLACEFS_PERM_YES;
}

bool ioctl_perm_reads(struct placefs_ioctl *fs, const struct ioctl_who *w, uint32_t shard)
{
	if (w->uid == 0)
		return true;
	if (shard >= fs->m->nshards)
		return false;
	return who_reads(w, &fs->m->perms[shard]);
}

static int cmp_gid(const void *a, const void *b)
{
	gid_t x = *(const gid_t *)a, y = *(const gid_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Borrowing lends a mapping (host) or IPC handle (CUDA) of the whole ring,
 * which holds tensors of every shard that other clients stage: only a
 * caller who may read every shard may borrow (root, the daemon's uid, or a
 * caller whose uid and groups read every shard), and on a host ring only
 * one who may open its shm object (ioctl_ring_share() lets exactly the
 * widest such audience it can name open it): a grant is always usable.
 * Copy mode writes only the caller's own tensor and stays open to everyone
 * who may read it. Where the primary group decides, the answer is
 * remembered per (uid, gid); else per (uid, gid, group list), a few.
 */
bool ioctl_may_borrow(struct placefs_ioctl *fs, const struct ioctl_who *w)
{
	struct perm_entry e;
	struct perm_groups *c;
	gid_t *sorted;
	size_t i, n;
	bool ok = true;

	if (w->uid == 0 || w->uid == fs->self_uid)
		return true;
	e = perm_primary(fs, w->uid, w->gid);
	if (e.borrow != PLACEFS_PERM_DEPENDS)
		return e.borrow == PLACEFS_PERM_YES;
	if (w->ngroups < 0)
		return false;
	n = (size_t)w->ngroups;
	sorted = malloc((n ? n : 1) * sizeof(*sorted));
	if (!sorted)
		return false;
	if (n)
		memcpy(sorted, w->groups, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_gid);
	pthread_mutex_lock(&fs->lock);
	for (i = 0; i < fs->ngcache; i++) {
		c = &fs->gcache[i];
		if (c->uid == w->uid && c->gid == w->gid && c->ngroups == n &&
		    (n == 0 || memcmp(c->groups, sorted, n * sizeof(*sorted)) == 0)) {
			ok = c->ok;
			pthread_mutex_unlock(&fs->lock);
			free(sorted);
			return ok;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	for (i = 0; ok && i < fs->m->nshards; i++)
		ok = who_reads(w, &fs->m->perms[i]);
	if (ok && fs->ring_host)
		ok = who_reads(w, &fs->ring_perm);
	pthread_mutex_lock(&fs->lock);
	/* The oldest answer makes room. */
	c = &fs->gcache[fs->gnext];
	fs->gnext = (fs->gnext + 1) % PERM_GROUPS_CACHE;
	if (fs->ngcache < PERM_GROUPS_CACHE)
		fs->ngcache++;
	free(c->groups);
	*c = (struct perm_groups){w->uid, w->gid, n, sorted, ok};
	pthread_mutex_unlock(&fs->lock);
	return ok;
}

int ioctl_perms_init(struct placefs_ioctl *fs)
{
	/* As host_open() creates a ring: the daemon's, mode 0600. */
	fs->ring_host = false;
	return placefs_perm_init(&fs->ring_perm, fs->self_uid, getegid(), 0600, NULL, 0, "ring",
	                         NULL);
}

/* Gives every host ring group gid and mode `mode`; 0, or the first error (logged). */
static int ring_share_all(struct placefs_ioctl *fs, gid_t gid, mode_t mode)
{
	struct placefs_error e;
	int rc;

	for (unsigned k = 0; k < fs->nst; k++) {
		if (fs->infos[k].handle_kind != PLACEFS_IOC_HANDLE_HOST_SHM)
			continue;
		placefs_error_clear(&e);
		rc = placefs_backend_share_ring(
		        placefs_stager_backend(placefs_stagers_at(fs->ss, k)), gid, mode, &e);
		if (rc < 0) {
			placefs_log(LOG_WARNING, "staging: %s", e.msg);
			return rc;
		}
	}
	return 0;
}

void ioctl_ring_share(struct placefs_ioctl *fs)
{
	enum placefs_perm_audience a;
	gid_t g = getegid(), share = (gid_t)-1;
	mode_t mode = 0600;
	bool host = false;

	for (unsigned k = 0; k < fs->nst; k++)
		host |= fs->infos[k].handle_kind == PLACEFS_IOC_HANDLE_HOST_SHM;
	if (!host)
		return;
	fs->ring_host = true;
	a = placefs_perm_audience(fs->m->perms, fs->m->nshards, &share);
	if (a == PLACEFS_PERM_ANYONE)
		mode = 0644;
	else if (a == PLACEFS_PERM_GROUP)
		mode = 0640;
	if (a != PLACEFS_PERM_NOBODY &&
	    ring_share_all(fs, a == PLACEFS_PERM_GROUP ? share : g, mode) < 0) {
		/* Back to the daemon's alone: then only root and it may borrow. */
		a = PLACEFS_PERM_NOBODY;
		mode = 0600;
		ring_share_all(fs, g, mode);
	}
	if (a == PLACEFS_PERM_GROUP)
		g = share;
	placefs_perm_release(&fs->ring_perm);
	placefs_perm_init(&fs->ring_perm, fs->self_uid, g, mode, NULL, 0, "ring", NULL);
	/* Said by placefs_ioctl_log() with the rest, once the log is the daemon's. */
	if (a == PLACEFS_PERM_ANYONE)
		snprintf(fs->share_line, sizeof(fs->share_line),
		         "staging: every shard is readable by everyone: anyone may borrow (the "
		         "ring's shm object is mode 0644)");
	else if (a == PLACEFS_PERM_GROUP)
		snprintf(fs->share_line, sizeof(fs->share_line),
		         "staging: every member of group %u may read every shard: they may borrow "
		         "(the ring's shm object is group %u, mode 0640); other users copy",
		         (unsigned)g, (unsigned)g);
	else
		snprintf(fs->share_line, sizeof(fs->share_line),
		         "staging: no group of users may read every shard: only root and the "
		         "daemon's user may borrow (the ring's shm object is mode 0600); other "
		         "users copy");
}
