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

/*
 * Whether shard permission p lets (uid, gid) read by its mode bits, as
 * the kernel decides for a process whose only group is gid: owner bits
 * for the owner, else group bits for the group, else other bits. With an
 * access ACL, whose group bits are its mask and whose named entries could
 * say anything, only the owner is trusted.
 */
bool ioctl_perm_reads(const struct shard_perm *p, uid_t uid, gid_t gid)
{
	if (p->uid == uid)
		return p->mode & S_IRUSR;
	if (p->acl)
		return false;
	if (p->gid == gid)
		return p->mode & S_IRGRP;
	return p->mode & S_IROTH;
}

/*
 * Borrowing lends a mapping (host) or IPC handle (CUDA) of the whole ring,
 * which holds tensors of every shard that other clients stage: only a
 * caller who may read every shard may borrow (root, the daemon's uid, or a
 * uid whose mode bits, with its primary group, read every shard). Copy
 * mode writes only the caller's own tensor and stays open to everyone who
 * may open the file. Decided once per (uid, gid), from the shards' modes
 * at mount (which the tree's modes are made from).
 */
bool ioctl_may_borrow(struct placefs_ioctl *fs, uid_t uid, gid_t gid)
{
	bool ok = true;
	size_t i;

	if (uid == 0 || uid == fs->self_uid)
		return true;
	pthread_mutex_lock(&fs->lock);
	for (i = 0; i < fs->npcache; i++) {
		if (fs->pcache[i].uid == uid && fs->pcache[i].gid == gid) {
			ok = fs->pcache[i].ok;
			pthread_mutex_unlock(&fs->lock);
			return ok;
		}
	}
	for (i = 0; ok && i < fs->nperms; i++)
		ok = ioctl_perm_reads(&fs->perms[i], uid, gid);
	/* A full cache stays as it is: the answer is recomputed, O(shards). */
	if (fs->npcache < PERM_CACHE)
		fs->pcache[fs->npcache++] = (struct perm_entry){uid, gid, ok};
	pthread_mutex_unlock(&fs->lock);
	return ok;
}

/* Reads every shard's owner, group, mode and whether it has an ACL; -ENOMEM or 0. */
int ioctl_perms_init(struct placefs_ioctl *fs)
{
	size_t i, n = fs->m->nshards;
	struct stat st;

	fs->perms = calloc(n ? n : 1, sizeof(*fs->perms));
	if (!fs->perms)
		return -ENOMEM;
	fs->nperms = n;
	for (i = 0; i < n; i++) {
		int fd = placefs_ckpt_shard(fs->m->ckpt, i)->fd;
		struct shard_perm *p = &fs->perms[i];

		if (fstat(fd, &st) != 0) {
			/* Unknown: nobody but root and the daemon's uid may borrow. */
			p->uid = 0;
			p->mode = 0;
			p->acl = true;
			continue;
		}
		p->uid = st.st_uid;
		p->gid = st.st_gid;
		p->mode = st.st_mode;
		p->acl = fgetxattr(fd, "system.posix_acl_access", NULL, 0) > 0;
	}
	return 0;
}
