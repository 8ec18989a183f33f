/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "staging/lookahead.h"

#define NONE SIZE_MAX

struct placefs_lookahead {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* the reader moved, or stop */
	struct placefs_lookahead_shard *shards;
	uint64_t *next; /* per shard: the next offset to read, from lo to hi */
	size_t n;
	uint64_t stride;
	uint64_t window;
	size_t cur; /* the reader's shard; NONE until placefs_lookahead_at(); atomic stores, lock held */
	bool stop;
	bool in_read;    /* the walker is in a read (its lock released) */
	unsigned refs;   /* the owner's and the walker's */
	uint64_t probes; /* atomic */
};

static void la_destroy(struct placefs_lookahead *la)
{
	pthread_cond_destroy(&la->cond);
	pthread_mutex_destroy(&la->lock);
	free(la->next);
	free(la->shards);
	free(la);
}

/*
 * The shard to read next: the first after the reader's with bytes left to
 * read whose next read lies within `window` bytes of the shards' ranges
 * after the reader's; NONE when there is none. Lock held.
 */
static size_t target(const struct placefs_lookahead *la)
{
	uint64_t before = 0; /* range bytes of the shards between the reader's and k */

	if (la->cur == NONE)
		return NONE;
	for (size_t k = la->cur + 1; k < la->n && before < la->window; k++) {
		const struct placefs_lookahead_shard *s = &la->shards[k];

		if (la->next[k] < s->hi)
			return la->next[k] - s->lo < la->window - before ? k : NONE;
		before += s->hi - s->lo;
	}
	return NONE;
}

/* Drops one reference; the last frees la. Lock held on entry, released. */
static void la_unref(struct placefs_lookahead *la)
{
	bool last = --la->refs == 0;

	pthread_mutex_unlock(&la->lock);
	if (last)
		la_destroy(la);
}

static void *walk_main(void *arg)
{
	struct placefs_lookahead *la = arg;
	uint8_t b;

	pthread_mutex_lock(&la->lock);
	while (!la->stop) {
		size_t k = target(la);
		uint64_t off;
		int fd;

		if (k == NONE) {
			pthread_cond_wait(&la->cond, &la->lock);
			continue;
		}
		off = la->next[k];
		fd = la->shards[k].fd;
		la->next[k] =
		        la->shards[k].hi - off > la->stride ? off + la->stride : la->shards[k].hi;
		la->in_read = true;
		pthread_mutex_unlock(&la->lock);
		/* A hit in the client's cache, or the fetch the reader will want. */
		(void)!pread(fd, &b, 1, (off_t)off);
		__atomic_fetch_add(&la->probes, 1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&la->lock);
		la->in_read = false;
	}
	la_unref(la);
	return NULL;
}

int placefs_lookahead_create(const struct placefs_lookahead_shard *shards, size_t n,
                             uint64_t stride, uint64_t window, struct placefs_lookahead **out,
                             struct placefs_error *err)
{
	struct placefs_lookahead *la;
	int rc;

	*out = NULL;
	if ((n && !shards) || stride == 0 || window == 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "lookahead: invalid arguments");
	for (size_t i = 0; i < n; i++)
		if (shards[i].lo > shards[i].hi || shards[i].hi > (uint64_t)INT64_MAX)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "lookahead: shard %zu has the range %llu..%llu", i,
			                         (unsigned long long)shards[i].lo,
			                         (unsigned long long)shards[i].hi);
	la = calloc(1, sizeof(*la));
	if (!la)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "lookahead: out of memory");
	la->shards = calloc(n ? n : 1, sizeof(*la->shards));
	la->next = calloc(n ? n : 1, sizeof(*la->next));
	if (!la->shards || !la->next) {
		free(la->shards);
		free(la->next);
		free(la);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "lookahead: out of memory");
	}
	if (n)
		memcpy(la->shards, shards, n * sizeof(*shards));
	for (size_t i = 0; i < n; i++)
		la->next[i] = shards[i].lo;
	la->n = n;
	la->stride = stride;
	la->window = window;
	la->cur = NONE;
	la->refs = 2;
	if (pthread_mutex_init(&la->lock, NULL) != 0)
		goto fail_lock;
	if (pthread_cond_init(&la->cond, NULL) != 0)
		goto fail_cond;
	rc = pthread_create(&la->th, NULL, walk_main, la);
	if (rc != 0) {
		la_destroy(la);
		return placefs_error_set(err, -rc, PLACEFS_E_IO,
		                         "lookahead: cannot start its thread: %s", strerror(rc));
	}
	*out = la;
	return 0;

fail_cond:
	pthread_mutex_destroy(&la->lock);
fail_lock:
	free(la->next);
	free(la->shards);
	free(la);
	return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "lookahead: out of memory");
}

void placefs_lookahead_at(struct placefs_lookahead *la, size_t i)
{
	if (!la || i >= la->n)
		return;
	/* Every stage and batch run calls this: no lock while the reader stays put. */
	if (__atomic_load_n(&la->cur, __ATOMIC_RELAXED) == i)
		return;
	pthread_mutex_lock(&la->lock);
	if (la->cur != i) {
		__atomic_store_n(&la->cur, i, __ATOMIC_RELAXED);
		pthread_cond_signal(&la->cond);
	}
	pthread_mutex_unlock(&la->lock);
}

uint64_t placefs_lookahead_probes(const struct placefs_lookahead *la)
{
	return la ? __atomic_load_n(&la->probes, __ATOMIC_RELAXED) : 0;
}

void placefs_lookahead_free(struct placefs_lookahead *la)
{
	if (!la)
		return;
	pthread_mutex_lock(&la->lock);
	la->stop = true;
	pthread_cond_signal(&la->cond);
	if (la->in_read) {
		/* Not waited for: a client may hold the read for long. The walker frees la. */
		pthread_detach(la->th);
		la_unref(la);
		return;
	}
	pthread_mutex_unlock(&la->lock);
	pthread_join(la->th, NULL); /* it drops its reference as it ends */
	la_destroy(la);
}
