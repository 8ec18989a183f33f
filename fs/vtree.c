/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/strbuf.h"
#include "vtree.h"

/* A child of a view directory. */
struct vchild {
	const char *name;
	uint64_t ino;
};

/* The views part of the tree (inode numbers from `base`). */
struct vparts {
	int on;
	uint64_t base; /* the views directory */
	uint64_t end;  /* first number past the views */
	const struct placefs_view *view[PLACEFS_VIEW_KINDS];
	uint64_t first[PLACEFS_VIEW_KINDS];        /* the view's first file */
	struct vchild *list[PLACEFS_VIEW_KINDS];   /* listing order */
	struct vchild *sorted[PLACEFS_VIEW_KINDS]; /* by name, for lookup */
	size_t nlist[PLACEFS_VIEW_KINDS];
	struct placefs_vtree_aux *aux; /* in the caller's order */
	size_t naux;
};

/* The control files formatted once at creation: their slots in text[]. */
enum {
	TEXT_PLAN,
	TEXT_PLAN_JSON,
	TEXT_METADATA,
	TEXT_COLUMNS,
	TEXT_LAYOUT,
	TEXT_SHARDS,
	TEXT_COLUMN_CHUNKS,
	TEXT_PACKED,
	N_TEXT
};

struct placefs_vtree {
	const struct placefs_ckpt *ck;
	const struct placefs_plan *plan;
	size_t n; /* plan entries */
	uid_t uid;
	gid_t gid;
	const struct placefs_perm *perms; /* per shard */
	bool has_acls;                    /* some shard or aux file shows an ACL */
	atomic_bool acls;                 /* the kernel evaluates them (placefs_vtree_set_acls()) */
	struct timespec now;
	size_t *list[2]; /* plan entry indexes per placement, checkpoint order */
	size_t nlist[2];
	char *text[N_TEXT]; /* indexed by TEXT_* */
	size_t text_len[N_TEXT];
	uint64_t total_bytes;
	struct vparts v;
};

/* The nodes that exist in every mount, indexed by inode number. */
static const struct {
	const char *name;
	uint64_t parent;
	enum placefs_vkind kind;
	int text; /* index into text[] for PLACEFS_V_FILE */
} fixed[PLACEFS_INO_FIRST] = {
        [PLACEFS_INO_ROOT] = {"", PLACEFS_INO_ROOT, PLACEFS_V_DIR, -1},
        [PLACEFS_INO_CTL_DIR] = {PLACEFS_CTL_NAME, PLACEFS_INO_ROOT, PLACEFS_V_DIR, -1},
        [PLACEFS_INO_PLAN] = {"plan", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE, TEXT_PLAN},
        [PLACEFS_INO_PLAN_JSON] = {"plan.json", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE,
                                   TEXT_PLAN_JSON},
        [PLACEFS_INO_STATS] = {"stats", PLACEFS_INO_CTL_DIR, PLACEFS_V_STATS, -1},
        [PLACEFS_INO_METADATA] = {"metadata.json", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE,
                                  TEXT_METADATA},
        [PLACEFS_INO_BYPL_DIR] = {"by-placement", PLACEFS_INO_CTL_DIR, PLACEFS_V_DIR, -1},
        [PLACEFS_INO_GPU_DIR] = {"gpu", PLACEFS_INO_BYPL_DIR, PLACEFS_V_DIR, -1},
        [PLACEFS_INO_CPU_DIR] = {"cpu", PLACEFS_INO_BYPL_DIR, PLACEFS_V_DIR, -1},
        [PLACEFS_INO_COLUMNS] = {"columns.json", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE, TEXT_COLUMNS},
        [PLACEFS_INO_LAYOUT] = {"layout.json", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE, TEXT_LAYOUT},
        [PLACEFS_INO_SHARDS] = {"shards.json", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE, TEXT_SHARDS},
        [PLACEFS_INO_COLUMN_CHUNKS] = {"columns.jsonl", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE,
                                       TEXT_COLUMN_CHUNKS},
        [PLACEFS_INO_PACKED] = {"packed.tsv", PLACEFS_INO_CTL_DIR, PLACEFS_V_FILE, TEXT_PACKED},
};

/* Children of the fixed directories other than the root and the placement views. */
static const uint64_t ctl_children[] = {
        PLACEFS_INO_PLAN,     PLACEFS_INO_PLAN_JSON, PLACEFS_INO_COLUMNS, PLACEFS_INO_COLUMN_CHUNKS,
        PLACEFS_INO_LAYOUT,   PLACEFS_INO_PACKED,    PLACEFS_INO_SHARDS,  PLACEFS_INO_STATS,
        PLACEFS_INO_METADATA, PLACEFS_INO_BYPL_DIR,
};
#define N_CTL (sizeof(ctl_children) / sizeof(ctl_children[0]))
static const uint64_t bypl_children[] = {PLACEFS_INO_GPU_DIR, PLACEFS_INO_CPU_DIR};

static int format_metadata(const struct placefs_ckpt *ck, struct placefs_strbuf *sb)
{
	size_t i, j, ns = placefs_ckpt_shard_count(ck);
	int rc;

	if ((rc = placefs_strbuf_adds(sb, "{")) < 0)
		return rc;
	for (i = 0; i < ns; i++) {
		const struct placefs_shard *s = placefs_ckpt_shard(ck, i);
		const struct placefs_st_header *h = s->header;

		if ((i > 0 && (rc = placefs_strbuf_adds(sb, ", ")) < 0) ||
		    (rc = placefs_strbuf_add_json_string(sb, s->file)) < 0 ||
		    (rc = placefs_strbuf_adds(sb, ": ")) < 0)
			return rc;
		if (!placefs_st_header_has_meta(h)) {
			if ((rc = placefs_strbuf_adds(sb, "null")) < 0)
				return rc;
			continue;
		}
		if ((rc = placefs_strbuf_adds(sb, "{")) < 0)
			return rc;
		for (j = 0; j < placefs_st_header_meta_count(h); j++) {
			const struct placefs_st_meta *m = placefs_st_header_meta(h, j);

			if ((j > 0 && (rc = placefs_strbuf_adds(sb, ", ")) < 0) ||
			    (rc = placefs_strbuf_add_json_string(sb, m->key)) < 0 ||
			    (rc = placefs_strbuf_adds(sb, ": ")) < 0 ||
			    (rc = placefs_strbuf_add_json_string(sb, m->value)) < 0)
				return rc;
		}
		if ((rc = placefs_strbuf_adds(sb, "}")) < 0)
			return rc;
	}
	return placefs_strbuf_adds(sb, "}\n");
}

/*
 * shards.json: what each shard was when the daemon validated it, so that a
 * client that maps a shard itself (the Python loader's cpu="map") can tell
 * that it opened the same, unchanged file: {"<file>": {"path": P, "dev": N,
 * "ino": N, "size": N, "mtime_ns": N, "ctime_ns": N}, ...}.
 */
static int add_ns(struct placefs_strbuf *sb, const char *key, struct timespec ts)
{
	uint64_t ns = placefs_clock_ts_ns(&ts);

	/* Times before 1970 or past 2554 (saturated) do not fit: written as null, never matched. */
	if (ts.tv_sec < 0 || ns == UINT64_MAX)
		return placefs_strbuf_addf(sb, ", \"%s\": null", key);
	return placefs_strbuf_addf(sb, ", \"%s\": %" PRIu64, key, ns);
}

static int format_shards(const struct placefs_ckpt *ck, struct placefs_strbuf *sb)
{
	size_t i, ns = placefs_ckpt_shard_count(ck);
	int rc;

	if ((rc = placefs_strbuf_adds(sb, "{")) < 0)
		return rc;
	for (i = 0; i < ns; i++) {
		const struct placefs_shard *s = placefs_ckpt_shard(ck, i);

		if ((i > 0 && (rc = placefs_strbuf_adds(sb, ", ")) < 0) ||
		    (rc = placefs_strbuf_add_json_string(sb, s->file)) < 0 ||
		    (rc = placefs_strbuf_adds(sb, ": {\"path\": ")) < 0 ||
		    (rc = placefs_strbuf_add_json_string(sb, s->path)) < 0 ||
		    (rc = placefs_strbuf_addf(
		             sb, ", \"dev\": %" PRIu64 ", \"ino\": %" PRIu64 ", \"size\": %" PRIu64,
		             (uint64_t)s->dev, (uint64_t)s->ino, s->size)) < 0 ||
		    (rc = add_ns(sb, "mtime_ns", s->mtime)) < 0 ||
		    (rc = add_ns(sb, "ctime_ns", s->ctime)) < 0 ||
		    (rc = placefs_strbuf_adds(sb, "}")) < 0)
			return rc;
	}
	return placefs_strbuf_adds(sb, "}\n");
}

static int cmp_child(const void *a, const void *b)
{
	return strcmp(((const struct vchild *)a)->name, ((const struct vchild *)b)->name);
}

/* Numbers the views' nodes after the links and builds each view directory's listing. */
static int build_views(struct placefs_vtree *vt, const struct placefs_vtree_views *views,
                       struct placefs_error *err)
{
	struct vparts *v = &vt->v;
	uint64_t next;
	int k;

	v->on = 1;
	v->base = PLACEFS_INO_FIRST + 2 * (uint64_t)vt->n;
	v->naux = views->naux;
	v->aux = calloc(v->naux ? v->naux : 1, sizeof(*v->aux));
	if (!v->aux)
		goto nomem;
	if (v->naux)
		memcpy(v->aux, views->aux, v->naux * sizeof(*v->aux));
	for (size_t j = 0; j < v->naux; j++) {
		size_t len;

		vt->has_acls |= placefs_perm_mirror_acl(v->aux[j].perm, &len) != NULL;
	}
	next = v->base + 1 + PLACEFS_VIEW_KINDS + (uint64_t)v->naux;
	for (k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		const struct placefs_view *w = views->view[k];
		size_t nf = w ? placefs_view_file_count(w) : 0, at = 0;
		int has_index = w && placefs_view_has_index(w);

		v->view[k] = w;
		v->first[k] = next;
		v->nlist[k] = v->naux + nf + (size_t)has_index;
		v->list[k] = calloc(v->nlist[k] ? v->nlist[k] : 1, sizeof(struct vchild));
		v->sorted[k] = calloc(v->nlist[k] ? v->nlist[k] : 1, sizeof(struct vchild));
		if (!v->list[k] || !v->sorted[k])
			goto nomem;
		for (size_t j = 0; j < v->naux; j++)
			v->list[k][at++] = (struct vchild){v->aux[j].name,
			                                   v->base + 1 + PLACEFS_VIEW_KINDS + j};
		for (size_t i = 0; i < nf; i++)
			v->list[k][at++] = (struct vchild){placefs_view_file_name(w, i), next + i};
		if (has_index)
			v->list[k][at++] = (struct vchild){placefs_view_index_name(w), next + nf};
		memcpy(v->sorted[k], v->list[k], v->nlist[k] * sizeof(struct vchild));
		qsort(v->sorted[k], v->nlist[k], sizeof(struct vchild), cmp_child);
		for (size_t j = 1; j < v->nlist[k]; j++) {
			if (strcmp(v->sorted[k][j - 1].name, v->sorted[k][j].name) == 0)
				return placefs_error_set(
				        err, -EINVAL, PLACEFS_E_SOURCE,
				        "view %s: two files named %s",
				        placefs_view_kind_name((enum placefs_view_kind)k),
				        v->sorted[k][j].name);
		}
		next += nf + (uint64_t)has_index;
	}
	v->end = next;
	return 0;
nomem:
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
}

/* One control file's text, formatted on a thread of its own or inline. */
struct text_job {
	const struct placefs_ckpt *ck;
	const struct placefs_plan *plan;
	const char *source, *plan_note;
	int k; /* TEXT_* */
	struct placefs_strbuf sb;
	int rc;
	pthread_t tid;
	bool threaded;
};

static void text_format(struct text_job *j)
{
	switch (j->k) {
	case TEXT_PLAN:
		j->rc = placefs_plan_format_text(j->plan, j->source, &j->sb);
		if (j->rc == 0 && j->plan_note)
			j->rc = placefs_strbuf_adds(&j->sb, j->plan_note);
		break;
	case TEXT_PLAN_JSON: j->rc = placefs_plan_format_json(j->plan, j->source, &j->sb); break;
	case TEXT_COLUMNS: j->rc = placefs_plan_format_columns(j->plan, j->source, &j->sb); break;
	case TEXT_LAYOUT: j->rc = placefs_plan_format_layout(j->plan, &j->sb); break;
	case TEXT_COLUMN_CHUNKS:
		j->rc = placefs_plan_format_column_chunks(j->plan, PLACEFS_PLAN_COLUMN_CHUNK,
		                                          &j->sb);
		break;
	case TEXT_PACKED: j->rc = placefs_plan_format_packed(j->plan, &j->sb); break;
	case TEXT_SHARDS: j->rc = format_shards(j->ck, &j->sb); break;
	case TEXT_METADATA:
	default: j->rc = format_metadata(j->ck, &j->sb); break;
	}
}

static void *text_main(void *arg)
{
	text_format(arg);
	return NULL;
}

/*
 * Formats every control file's text into vt->text[]. The five that grow
 * with the plan (plan, plan.json, columns.json, columns.jsonl, packed.tsv:
 * megabytes for 100,000 tensors, a fifth of such a mount's time on one
 * thread) are formatted side by side, each on a thread of its own (inline
 * when a thread cannot be had); the formatters only read the plan and the
 * checkpoint.
 */
static int format_texts(struct placefs_vtree *vt, const char *source, const char *plan_note,
                        struct placefs_error *err)
{
	struct text_job jobs[N_TEXT];
	int k, rc = 0;

	for (k = 0; k < N_TEXT; k++) {
		jobs[k] = (struct text_job){.ck = vt->ck,
		                            .plan = vt->plan,
		                            .source = source,
		                            .plan_note = plan_note,
		                            .k = k};
		placefs_strbuf_init(&jobs[k].sb);
		if (k == TEXT_PLAN || k == TEXT_PLAN_JSON || k == TEXT_COLUMNS ||
		    k == TEXT_COLUMN_CHUNKS || k == TEXT_PACKED)
			jobs[k].threaded =
			        pthread_create(&jobs[k].tid, NULL, text_main, &jobs[k]) == 0;
	}
	for (k = 0; k < N_TEXT; k++)
		if (!jobs[k].threaded)
			text_format(&jobs[k]);
	for (k = 0; k < N_TEXT; k++) {
		if (jobs[k].threaded)
			pthread_join(jobs[k].tid, NULL);
		if (rc == 0 && jobs[k].rc < 0)
			rc = placefs_error_set(err, jobs[k].rc, PLACEFS_E_NOMEM,
			                       "cannot format the control files: %s",
			                       strerror(-jobs[k].rc));
	}
	for (k = 0; k < N_TEXT; k++) {
		if (rc == 0)
			vt->text[k] = placefs_strbuf_detach(&jobs[k].sb, &vt->text_len[k]);
		if (rc == 0 && !vt->text[k])
			rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
		placefs_strbuf_release(&jobs[k].sb);
	}
	return rc;
}

int placefs_vtree_create(const struct placefs_ckpt *ck, const struct placefs_plan *plan,
                         const struct placefs_perm *perms, const char *source,
                         const char *plan_note, uid_t uid, gid_t gid, struct timespec now,
                         const struct placefs_vtree_views *views, struct placefs_vtree **out,
                         struct placefs_error *err)
{
	struct placefs_vtree *vt;
	size_t i, ns;
	int rc, k;

	*out = NULL;
	vt = calloc(1, sizeof(*vt));
	if (!vt)
		goto nomem;
	vt->ck = ck;
	vt->plan = plan;
	vt->n = placefs_plan_count(plan);
	vt->uid = uid;
	vt->gid = gid;
	vt->now = now;
	/* Inode numbers must fit comfortably: two per tensor plus the fixed ones. */
	if (vt->n > (SIZE_MAX - PLACEFS_INO_FIRST) / 2 / sizeof(size_t)) {
		rc = placefs_error_set(err, -EOVERFLOW, PLACEFS_E_USAGE, "too many tensors (%zu)",
		                       vt->n);
		goto fail;
	}
	ns = placefs_ckpt_shard_count(ck);
	vt->perms = perms;
	atomic_init(&vt->acls, false);
	for (i = 0; i < ns; i++) {
		size_t len;

		vt->has_acls |= placefs_perm_mirror_acl(&perms[i], &len) != NULL;
	}
	for (k = 0; k < 2; k++) {
		vt->list[k] = malloc((vt->n ? vt->n : 1) * sizeof(size_t));
		if (!vt->list[k])
			goto nomem;
	}
	for (i = 0; i < vt->n; i++) {
		const struct placefs_plan_entry *e = placefs_plan_entry(plan, i);
		int p = e->placement == PLACEFS_PLACE_CPU;

		vt->list[p][vt->nlist[p]++] = i;
		vt->total_bytes += e->tensor->nbytes;
	}

	if ((rc = format_texts(vt, source, plan_note, err)) < 0)
		goto fail;
	if (views && (rc = build_views(vt, views, err)) < 0)
		goto fail;
	*out = vt;
	return 0;
nomem:
	rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
fail:
	placefs_vtree_free(vt);
	return rc;
}

void placefs_vtree_free(struct placefs_vtree *vt)
{
	int k;

	if (!vt)
		return;
	for (k = 0; k < 2; k++)
		free(vt->list[k]);
	for (k = 0; k < N_TEXT; k++)
		free(vt->text[k]);
	for (k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		free(vt->v.list[k]);
		free(vt->v.sorted[k]);
	}
	free(vt->v.aux);
	free(vt);
}

/* Decodes a tensor or link inode number into its plan entry index. */
static int split_ino(const struct placefs_vtree *vt, uint64_t ino, enum placefs_vkind *kind,
                     size_t *entry)
{
	uint64_t rel;

	if (ino < PLACEFS_INO_FIRST)
		return -ENOENT;
	rel = ino - PLACEFS_INO_FIRST;
	if (rel < vt->n) {
		*kind = PLACEFS_V_TENSOR;
		*entry = (size_t)rel;
		return 0;
	}
	if (rel - vt->n < vt->n) {
		*kind = PLACEFS_V_LINK;
		*entry = (size_t)(rel - vt->n);
		return 0;
	}
	return -ENOENT;
}

#define N_KINDS ((uint64_t)PLACEFS_VIEW_KINDS)

/* Decodes a number of the views part into *node. 0 or -ENOENT. */
static int view_node(const struct placefs_vtree *vt, uint64_t ino, struct placefs_vnode *node)
{
	const struct vparts *v = &vt->v;

	if (!v->on || ino < v->base || ino >= v->end)
		return -ENOENT;
	if (ino <= v->base + N_KINDS) {
		node->kind = PLACEFS_V_DIR;
		node->view = ino == v->base ? -1 : (int)(ino - v->base - 1);
		return 0;
	}
	if (ino < v->base + 1 + N_KINDS + v->naux) {
		node->kind = PLACEFS_V_AUX;
		node->entry = (size_t)(ino - v->base - 1 - N_KINDS);
		return 0;
	}
	for (int k = 0; k < PLACEFS_VIEW_KINDS; k++) {
		const struct placefs_view *w = v->view[k];
		uint64_t nf = w ? placefs_view_file_count(w) : 0;

		if (ino < v->first[k] || ino > v->first[k] + nf)
			continue;
		node->view = k;
		if (ino < v->first[k] + nf) {
			node->kind = PLACEFS_V_VIEW_SHARD;
			node->entry = (size_t)(ino - v->first[k]);
			return 0;
		}
		if (w && placefs_view_has_index(w)) {
			node->kind = PLACEFS_V_VIEW_INDEX;
			return 0;
		}
	}
	return -ENOENT;
}

const struct placefs_view *placefs_vtree_view(const struct placefs_vtree *vt, int kind)
{
	if (!vt->v.on || kind < 0 || kind >= PLACEFS_VIEW_KINDS)
		return NULL;
	return vt->v.view[kind];
}

int placefs_vtree_aux_count(const struct placefs_vtree *vt)
{
	return (int)vt->v.naux;
}

const struct placefs_vtree_aux *placefs_vtree_aux(const struct placefs_vtree *vt, size_t j)
{
	return j < vt->v.naux ? &vt->v.aux[j] : NULL;
}

int placefs_vtree_get(const struct placefs_vtree *vt, uint64_t ino, struct placefs_vnode *node)
{
	memset(node, 0, sizeof(*node));
	node->ino = ino;
	if (ino == 0)
		return -ENOENT;
	if (ino < PLACEFS_INO_FIRST) {
		node->kind = fixed[ino].kind;
		if (node->kind == PLACEFS_V_FILE) {
			node->data = vt->text[fixed[ino].text];
			node->len = vt->text_len[fixed[ino].text];
		}
		return 0;
	}
	if (split_ino(vt, ino, &node->kind, &node->entry) == 0)
		return 0;
	return view_node(vt, ino, node);
}

const struct placefs_perm *placefs_vtree_perm(const struct placefs_vtree *vt, uint64_t ino)
{
	const struct placefs_plan_entry *e;
	struct placefs_vnode node;

	if (placefs_vtree_get(vt, ino, &node) < 0)
		return NULL;
	switch (node.kind) {
	case PLACEFS_V_TENSOR:
		e = placefs_plan_entry(vt->plan, node.entry);
		return &vt->perms[e->tensor->shard];
	case PLACEFS_V_VIEW_SHARD:
		return &vt->perms[placefs_view_file_shard(vt->v.view[node.view], node.entry)];
	case PLACEFS_V_AUX: return vt->v.aux[node.entry].perm;
	default: return NULL;
	}
}

bool placefs_vtree_has_acls(const struct placefs_vtree *vt)
{
	return vt->has_acls;
}

void placefs_vtree_set_acls(struct placefs_vtree *vt, bool on)
{
	atomic_store(&vt->acls, on);
}

bool placefs_vtree_acls(const struct placefs_vtree *vt)
{
	return atomic_load_explicit(&vt->acls, memory_order_relaxed);
}

const struct placefs_plan_entry *placefs_vtree_entry(const struct placefs_vtree *vt, uint64_t ino)
{
	enum placefs_vkind kind;
	size_t entry;

	if (split_ino(vt, ino, &kind, &entry) < 0)
		return NULL;
	return placefs_plan_entry(vt->plan, entry);
}

static void fill_common(const struct placefs_vtree *vt, uint64_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = (ino_t)ino;
	st->st_uid = vt->uid;
	st->st_gid = vt->gid;
	st->st_atim = vt->now;
	st->st_mtim = vt->now;
	st->st_ctim = vt->now;
	st->st_nlink = 1;
}

/* A file of the mount that shows source permission p: its owner, group and read bits. */
static void show_perm(const struct placefs_vtree *vt, const struct placefs_perm *p, struct stat *st)
{
	st->st_mode = S_IFREG | placefs_perm_mirror_mode(
	                                p, atomic_load_explicit(&vt->acls, memory_order_relaxed));
	st->st_uid = p->uid;
	st->st_gid = p->gid;
}

static void set_size(struct stat *st, uint64_t size)
{
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)(size / 512 + (size % 512 != 0));
}

int placefs_vtree_stat(const struct placefs_vtree *vt, uint64_t ino, struct stat *st)
{
	struct placefs_vnode node;
	const struct placefs_plan_entry *e;
	const struct placefs_shard *s;
	int rc;

	rc = placefs_vtree_get(vt, ino, &node);
	if (rc < 0)
		return rc;
	fill_common(vt, ino, st);
	switch (node.kind) {
	case PLACEFS_V_DIR:
		st->st_mode = S_IFDIR | 0555;
		/* "." plus the entry in the parent, plus one ".." per subdirectory. */
		if (ino == PLACEFS_INO_BYPL_DIR)
			st->st_nlink = 4;
		else if (ino == PLACEFS_INO_CTL_DIR)
			st->st_nlink = 3 + (nlink_t)vt->v.on;
		else if (ino == PLACEFS_INO_ROOT)
			st->st_nlink = 3;
		else if (vt->v.on && ino == vt->v.base)
			st->st_nlink = 2 + PLACEFS_VIEW_KINDS;
		else
			st->st_nlink = 2;
		break;
	case PLACEFS_V_VIEW_SHARD: {
		const struct placefs_view *w = vt->v.view[node.view];
		uint32_t sh = placefs_view_file_shard(w, node.entry);

		s = placefs_ckpt_shard(vt->ck, sh);
		show_perm(vt, &vt->perms[sh], st);
		set_size(st, placefs_view_file_size(w, node.entry));
		st->st_atim = s->mtime;
		st->st_mtim = s->mtime;
		st->st_ctim = s->mtime;
		break;
	}
	case PLACEFS_V_VIEW_INDEX:
		st->st_mode = S_IFREG | 0444;
		set_size(st, placefs_view_index_size(vt->v.view[node.view]));
		break;
	case PLACEFS_V_AUX: {
		const struct placefs_vtree_aux *a = &vt->v.aux[node.entry];

		show_perm(vt, a->perm, st);
		st->st_nlink = PLACEFS_VIEW_KINDS;
		set_size(st, (uint64_t)a->st->st_size);
		st->st_atim = a->st->st_mtim;
		st->st_mtim = a->st->st_mtim;
		st->st_ctim = a->st->st_mtim;
		break;
	}
	case PLACEFS_V_FILE:
		st->st_mode = S_IFREG | 0444;
		set_size(st, node.len);
		break;
	case PLACEFS_V_STATS:
		/* Generated at each open and served direct_io, as /proc files are: size 0. */
		st->st_mode = S_IFREG | 0444;
		break;
	case PLACEFS_V_TENSOR:
		e = placefs_plan_entry(vt->plan, node.entry);
		s = placefs_ckpt_shard(vt->ck, e->tensor->shard);
		/* The shard's owner and read bits: default_permissions enforces its rules. */
		show_perm(vt, &vt->perms[e->tensor->shard], st);
		set_size(st, e->tensor->nbytes);
		st->st_atim = s->mtime;
		st->st_mtim = s->mtime;
		st->st_ctim = s->mtime;
		break;
	case PLACEFS_V_LINK:
		e = placefs_plan_entry(vt->plan, node.entry);
		st->st_mode = S_IFLNK | 0777;
		st->st_size = (off_t)(strlen(PLACEFS_LINK_PREFIX) + strlen(e->fname));
		break;
	default: return -ENOENT;
	}
	return 0;
}

static int is_dir(uint64_t ino)
{
	return ino > 0 && ino < PLACEFS_INO_FIRST && fixed[ino].kind == PLACEFS_V_DIR;
}

static int check_dir(const struct placefs_vtree *vt, uint64_t dir)
{
	if (is_dir(dir))
		return 0;
	if (vt->v.on && dir >= vt->v.base && dir <= vt->v.base + N_KINDS)
		return 0;
	if (dir == 0 || dir >= (vt->v.on ? vt->v.end : PLACEFS_INO_FIRST + 2 * (uint64_t)vt->n))
		return -ENOENT;
	return -ENOTDIR;
}

/* Lookup in the views directory or a view directory (check_dir() passed). */
static int64_t view_lookup(const struct placefs_vtree *vt, uint64_t parent, const char *name)
{
	const struct vparts *v = &vt->v;
	struct vchild key = {name, 0}, *hit;
	size_t k;

	if (parent == v->base) {
		for (k = 0; k < PLACEFS_VIEW_KINDS; k++)
			if (strcmp(name, placefs_view_kind_name((enum placefs_view_kind)k)) == 0)
				return (int64_t)(v->base + 1 + k);
		return 0;
	}
	k = (size_t)(parent - v->base - 1);
	hit = bsearch(&key, v->sorted[k], v->nlist[k], sizeof(key), cmp_child);
	return hit ? (int64_t)hit->ino : 0;
}

int64_t placefs_vtree_lookup(const struct placefs_vtree *vt, uint64_t parent, const char *name)
{
	const uint64_t *kids = NULL;
	size_t i, nkids = 0;
	long idx;
	int rc;

	rc = check_dir(vt, parent);
	if (rc < 0)
		return rc;
	if (vt->v.on && parent >= vt->v.base)
		return view_lookup(vt, parent, name);
	if (parent == PLACEFS_INO_CTL_DIR && vt->v.on && strcmp(name, PLACEFS_VIEWS_NAME) == 0)
		return (int64_t)vt->v.base;
	switch (parent) {
	case PLACEFS_INO_ROOT:
		if (strcmp(name, PLACEFS_CTL_NAME) == 0)
			return PLACEFS_INO_CTL_DIR;
		idx = placefs_plan_find(vt->plan, name);
		return idx < 0 ? 0 : (int64_t)(PLACEFS_INO_FIRST + (uint64_t)idx);
	case PLACEFS_INO_GPU_DIR:
	case PLACEFS_INO_CPU_DIR:
		idx = placefs_plan_find(vt->plan, name);
		if (idx < 0)
			return 0;
		if (placefs_plan_entry(vt->plan, (size_t)idx)->placement !=
		    (parent == PLACEFS_INO_CPU_DIR ? PLACEFS_PLACE_CPU : PLACEFS_PLACE_GPU))
			return 0;
		return (int64_t)(PLACEFS_INO_FIRST + vt->n + (uint64_t)idx);
	case PLACEFS_INO_CTL_DIR:
		kids = ctl_children;
		nkids = sizeof(ctl_children) / sizeof(ctl_children[0]);
		break;
	case PLACEFS_INO_BYPL_DIR:
		kids = bypl_children;
		nkids = sizeof(bypl_children) / sizeof(bypl_children[0]);
		break;
	}
	for (i = 0; i < nkids; i++)
		if (strcmp(name, fixed[kids[i]].name) == 0)
			return (int64_t)kids[i];
	return 0;
}

int64_t placefs_vtree_dir_count(const struct placefs_vtree *vt, uint64_t dir)
{
	int rc = check_dir(vt, dir);

	if (rc < 0)
		return rc;
	if (vt->v.on && dir == vt->v.base)
		return PLACEFS_VIEW_KINDS;
	if (vt->v.on && dir > vt->v.base)
		return (int64_t)vt->v.nlist[dir - vt->v.base - 1];
	switch (dir) {
	case PLACEFS_INO_ROOT: return (int64_t)(1 + vt->n);
	case PLACEFS_INO_CTL_DIR: return (int64_t)(N_CTL + (size_t)vt->v.on);
	case PLACEFS_INO_BYPL_DIR:
		return (int64_t)(sizeof(bypl_children) / sizeof(bypl_children[0]));
	case PLACEFS_INO_GPU_DIR: return (int64_t)vt->nlist[PLACEFS_PLACE_GPU];
	case PLACEFS_INO_CPU_DIR: return (int64_t)vt->nlist[PLACEFS_PLACE_CPU];
	}
	return -ENOENT;
}

int placefs_vtree_dir_child(const struct placefs_vtree *vt, uint64_t dir, size_t i, uint64_t *ino,
                            const char **name)
{
	int64_t count = placefs_vtree_dir_count(vt, dir);
	size_t idx;
	int p;

	if (count < 0)
		return (int)count;
	if ((uint64_t)i >= (uint64_t)count)
		return -ENOENT;
	if (vt->v.on && dir == vt->v.base) {
		*ino = vt->v.base + 1 + i;
		*name = placefs_view_kind_name((enum placefs_view_kind)i);
		return 0;
	}
	if (vt->v.on && dir > vt->v.base) {
		const struct vchild *c = &vt->v.list[dir - vt->v.base - 1][i];

		*ino = c->ino;
		*name = c->name;
		return 0;
	}
	if (dir == PLACEFS_INO_CTL_DIR && i == N_CTL) {
		*ino = vt->v.base;
		*name = PLACEFS_VIEWS_NAME;
		return 0;
	}
	switch (dir) {
	case PLACEFS_INO_ROOT:
		if (i == 0) {
			*ino = PLACEFS_INO_CTL_DIR;
			*name = PLACEFS_CTL_NAME;
			return 0;
		}
		*ino = PLACEFS_INO_FIRST + (uint64_t)(i - 1);
		*name = placefs_plan_entry(vt->plan, i - 1)->fname;
		return 0;
	case PLACEFS_INO_CTL_DIR: *ino = ctl_children[i]; break;
	case PLACEFS_INO_BYPL_DIR: *ino = bypl_children[i]; break;
	default:
		p = dir == PLACEFS_INO_CPU_DIR ? PLACEFS_PLACE_CPU : PLACEFS_PLACE_GPU;
		idx = vt->list[p][i];
		*ino = PLACEFS_INO_FIRST + vt->n + (uint64_t)idx;
		*name = placefs_plan_entry(vt->plan, idx)->fname;
		return 0;
	}
	*name = fixed[*ino].name;
	return 0;
}

uint64_t placefs_vtree_parent(const struct placefs_vtree *vt, uint64_t ino)
{
	const struct placefs_plan_entry *e;
	enum placefs_vkind kind;
	size_t entry;

	if (ino == 0)
		return 0;
	if (ino < PLACEFS_INO_FIRST)
		return fixed[ino].parent;
	if (split_ino(vt, ino, &kind, &entry) < 0) {
		struct placefs_vnode node;

		memset(&node, 0, sizeof(node));
		if (view_node(vt, ino, &node) < 0)
			return 0;
		if (ino == vt->v.base)
			return PLACEFS_INO_CTL_DIR;
		if (node.kind == PLACEFS_V_DIR)
			return vt->v.base;
		if (node.kind == PLACEFS_V_AUX)
			return vt->v.base + 1 + PLACEFS_VIEW_ALL;
		return vt->v.base + 1 + (uint64_t)node.view;
	}
	if (kind == PLACEFS_V_TENSOR)
		return PLACEFS_INO_ROOT;
	e = placefs_plan_entry(vt->plan, entry);
	return e->placement == PLACEFS_PLACE_CPU ? PLACEFS_INO_CPU_DIR : PLACEFS_INO_GPU_DIR;
}

int placefs_vtree_readlink(const struct placefs_vtree *vt, uint64_t ino, char *buf, size_t len)
{
	enum placefs_vkind kind;
	size_t entry;
	int n;

	if (ino < PLACEFS_INO_FIRST)
		return ino == 0 ? -ENOENT : -EINVAL;
	if (split_ino(vt, ino, &kind, &entry) < 0) {
		struct placefs_vnode node;

		return view_node(vt, ino, &node) == 0 ? -EINVAL : -ENOENT;
	}
	if (kind != PLACEFS_V_LINK)
		return -EINVAL;
	n = snprintf(buf, len, "%s%s", PLACEFS_LINK_PREFIX,
	             placefs_plan_entry(vt->plan, entry)->fname);
	return n < 0 ? -EINVAL : n;
}

uint64_t placefs_vtree_inode_count(const struct placefs_vtree *vt)
{
	if (vt->v.on)
		return vt->v.end - 1;
	return PLACEFS_INO_FIRST - 1 + 2 * (uint64_t)vt->n;
}

uint64_t placefs_vtree_total_bytes(const struct placefs_vtree *vt)
{
	return vt->total_bytes;
}
