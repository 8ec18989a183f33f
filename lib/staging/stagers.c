/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "staging/stagers.h"

/* Leases: the stager's id in bits 0..55, the position in bits 56..61. */
#define POS_SHIFT 56
#define ID_MASK   ((1ULL << POS_SHIFT) - 1)

struct placefs_stagers {
	struct placefs_devices devices; /* resolved */
	unsigned n;
	struct placefs_stager *st[PLACEFS_DEVICES_MAX];
};

int placefs_stagers_create(const struct placefs_stagers_config *cfg, struct placefs_stagers **out,
                           struct placefs_error *err)
{
	struct placefs_devices devs = cfg->devices;
	struct placefs_stagers *s;
	unsigned i, j;
	int rc;

	*out = NULL;
	if (devs.all) {
		struct placefs_error ce;
		int count;

		placefs_error_clear(&ce);
		count = placefs_backend_cuda_devices(&ce);
		if (count < 0)
			return placefs_error_set(err, -ENODEV, PLACEFS_E_USAGE,
			                         "cuda:all: no CUDA device is visible: %s", ce.msg);
		rc = placefs_devices_resolve(&devs, count, err);
		if (rc != 0)
			return rc;
	}
	if (devs.n > PLACEFS_DEVICES_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "staging: %u devices, at most %d", devs.n,
		                         PLACEFS_DEVICES_MAX);
	for (i = 0; i < devs.n; i++) {
		char name[PLACEFS_DEVICE_NAME_MAX];

		rc = placefs_device_check(devs.items[i], err);
		if (rc != 0)
			return rc;
		if (devs.items[i].kind == PLACEFS_DEVICE_NONE)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "staging: none cannot be one device of several");
		for (j = 0; j < i; j++)
			if (placefs_device_equal(devs.items[i], devs.items[j]))
				return placefs_error_set(
				        err, -EINVAL, PLACEFS_E_USAGE,
				        "staging: %s is listed twice",
				        placefs_device_format(devs.items[i], name));
	}
	if (devs.n == 0)
		return 0; /* none: staging disabled */
	s = calloc(1, sizeof(*s));
	if (!s)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "staging: out of memory");
	s->devices = devs;
	for (i = 0; i < devs.n; i++) {
		struct placefs_stager_config c = cfg->stager;
		char name[PLACEFS_DEVICE_NAME_MAX];

		c.device = devs.items[i];
		/* One registry of zero-copy shards for all: stager 0's (it is freed last). */
		if (i > 0)
			c.zero_copy_shared = placefs_stager_zero_copy(s->st[0]);
		rc = placefs_stager_create(&c, &s->st[i], err);
		if (rc == 0 && !s->st[i])
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                       "staging: %s made no stager",
			                       placefs_device_format(devs.items[i], name));
		if (rc != 0) {
			if (devs.n > 1)
				placefs_error_prefix(err, "device %s (%u of %u)",
				                     placefs_device_format(devs.items[i], name),
				                     i + 1, devs.n);
			placefs_stagers_free(s);
			return rc;
		}
		s->n = i + 1;
	}
	*out = s;
	return 0;
}

void placefs_stagers_free(struct placefs_stagers *s)
{
	unsigned i;

	if (!s)
		return;
	for (i = s->n; i-- > 0;)
		placefs_stager_free(s->st[i]);
	free(s);
}

unsigned placefs_stagers_count(const struct placefs_stagers *s)
{
	return s ? s->n : 0;
}

const struct placefs_devices *placefs_stagers_devices(const struct placefs_stagers *s)
{
	return &s->devices;
}

struct placefs_stager *placefs_stagers_at(const struct placefs_stagers *s, unsigned i)
{
	return i < s->n ? s->st[i] : NULL;
}

int placefs_stagers_find(const struct placefs_stagers *s, struct placefs_device dev,
                         struct placefs_error *err)
{
	char name[PLACEFS_DEVICE_NAME_MAX], list[PLACEFS_DEVICES_NAME_MAX];
	int pos = placefs_devices_find(&s->devices, dev);

	if (pos >= 0)
		return pos;
	return placefs_error_set(err, -ENODEV, PLACEFS_E_USAGE,
	                         "%s: this mount does not stage to that device (it stages to "
	                         "%.300s)",
	                         placefs_device_format(dev, name),
	                         placefs_devices_format(&s->devices, list, sizeof(list)));
}

int placefs_stagers_route(struct placefs_stagers *s, const struct placefs_device *dev,
                          const struct placefs_dest *dest, struct placefs_error *err)
{
	char list[PLACEFS_DEVICES_NAME_MAX], name[PLACEFS_DEVICE_NAME_MAX];
	struct placefs_device where;
	int rc;

	if (dev)
		return placefs_stagers_find(s, *dev, err);
	if (s->n == 1)
		return 0;
	placefs_devices_format(&s->devices, list, sizeof(list));
	if (!dest || dest->kind != PLACEFS_IOC_HANDLE_CUDA_IPC)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "this mount stages to %u devices (%.300s): the request "
		                         "must name one",
		                         s->n, list);
	/* The allocation's device, asked of the first stager's backend. */
	rc = placefs_backend_dest_device((struct placefs_backend *)placefs_stager_backend(s->st[0]),
	                                 dest, &where, err);
	if (rc != 0) {
		placefs_error_prefix(err,
		                     "cannot tell which of %.300s the destination lives on "
		                     "(name the device)",
		                     list);
		return rc;
	}
	rc = placefs_devices_find(&s->devices, where);
	if (rc >= 0)
		return rc;
	return placefs_error_set(err, -ENODEV, PLACEFS_E_USAGE,
	                         "the destination lives on %s, which this mount does not stage "
	                         "to (it stages to %.300s)",
	                         placefs_device_format(where, name), list);
}

static uint64_t lease_encode(unsigned pos, uint64_t id)
{
	return id ? id | (uint64_t)pos << POS_SHIFT : 0;
}

int placefs_stagers_lease_pos(const struct placefs_stagers *s, uint64_t lease)
{
	uint64_t pos = lease >> POS_SHIFT;

	if (!s || lease == 0 || (lease & ID_MASK) == 0 || pos >= s->n)
		return -1;
	return (int)pos;
}

int placefs_stagers_stage(struct placefs_stagers *s, unsigned pos, int fd, uint64_t file_offset,
                          uint64_t nbytes, const struct placefs_stage_opts *opts,
                          struct placefs_stage_span *out, struct placefs_error *err)
{
	int rc;

	if (pos >= s->n)
		return placefs_error_set(err, -ENODEV, PLACEFS_E_USAGE,
		                         "staging: no device at position %u of %u", pos, s->n);
	rc = placefs_stager_stage(s->st[pos], fd, file_offset, nbytes, opts, out, err);
	if (rc == 0)
		out->lease = lease_encode(pos, out->lease);
	return rc;
}

int placefs_stagers_stage_copy(struct placefs_stagers *s, unsigned pos, int fd,
                               uint64_t file_offset, uint64_t nbytes,
                               const struct placefs_stage_opts *opts,
                               const struct placefs_dest *dest, struct placefs_stage_span *out,
                               struct placefs_error *err)
{
	if (pos >= s->n)
		return placefs_error_set(err, -ENODEV, PLACEFS_E_USAGE,
		                         "staging: no device at position %u of %u", pos, s->n);
	return placefs_stager_stage_copy(s->st[pos], fd, file_offset, nbytes, opts, dest, out, err);
}

int placefs_stagers_copy_out(struct placefs_stagers *s, uint64_t lease,
                             const struct placefs_dest *dest, struct placefs_error *err)
{
	int pos = placefs_stagers_lease_pos(s, lease);

	if (pos < 0)
		return placefs_error_set(err, -ENOENT, PLACEFS_E_USAGE, "no lease %llu",
		                         (unsigned long long)lease);
	return placefs_stager_copy_out(s->st[pos], lease & ID_MASK, dest, err);
}

int placefs_stagers_release(struct placefs_stagers *s, uint64_t lease, uint64_t owner)
{
	int pos = placefs_stagers_lease_pos(s, lease);

	if (pos < 0)
		return -ENOENT;
	return placefs_stager_release(s->st[pos], lease & ID_MASK, owner);
}

size_t placefs_stagers_release_owner(struct placefs_stagers *s, uint64_t owner)
{
	size_t n = 0;
	unsigned i;

	for (i = 0; i < s->n; i++)
		n += placefs_stager_release_owner(s->st[i], owner);
	return n;
}

void placefs_stagers_wake(struct placefs_stagers *s)
{
	unsigned i;

	for (i = 0; i < s->n; i++)
		placefs_stager_wake(s->st[i]);
}

unsigned placefs_stagers_sweep(const struct placefs_stagers *s)
{
	unsigned i, n = 0;

	for (i = 0; i < s->n; i++)
		n += placefs_backend_sweep(placefs_stager_backend(s->st[i]));
	return n;
}

unsigned placefs_stagers_dest_count(const struct placefs_stagers *s)
{
	struct placefs_backend_dest_stats st;

	placefs_stagers_dest_stats(s, &st);
	return (unsigned)st.held;
}

void placefs_stagers_dest_stats(const struct placefs_stagers *s,
                                struct placefs_backend_dest_stats *out)
{
	struct placefs_backend_dest_stats one;
	unsigned i;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < s->n; i++) {
		placefs_backend_dest_stats(placefs_stager_backend(s->st[i]), &one);
		out->held += one.held;
		out->imports += one.imports;
		out->import_ns += one.import_ns;
		out->import_waits += one.import_waits;
	}
}

void placefs_stagers_stats(const struct placefs_stagers *s, struct placefs_stager_stats *total)
{
	struct placefs_stager_stats one;
	uint64_t *t = (uint64_t *)total;
	const uint64_t *o = (const uint64_t *)&one;
	size_t k, nf = sizeof(*total) / sizeof(uint64_t);
	uint64_t chunk = 0, zc = 0, direct = 0;
	struct placefs_stager_stats zs;
	unsigned i;

	_Static_assert(sizeof(struct placefs_stager_stats) % sizeof(uint64_t) == 0,
	               "placefs_stager_stats is made of uint64_t counters only");
	memset(total, 0, sizeof(*total));
	for (i = 0; i < s->n; i++) {
		placefs_stager_stats(s->st[i], &one);
		for (k = 0; k < nf; k++)
			t[k] += o[k];
		if (i == 0)
			chunk = one.chunk_bytes;
		zc |= one.zero_copy;
		direct |= one.direct;
	}
	total->direct = direct ? 1 : 0;
	total->chunk_bytes = chunk;
	total->zero_copy = zc ? 1 : 0;
	/* The registry is shared: its counters once (each stager reports all of them). */
	if (s->n > 1 && zc) {
		placefs_stager_stats(s->st[0], &zs);
		total->zero_copy_bytes = zs.zero_copy_bytes;
		total->zero_copy_registrations = zs.zero_copy_registrations;
		total->zero_copy_registration_ns = zs.zero_copy_registration_ns;
		total->zero_copy_registered_bytes = zs.zero_copy_registered_bytes;
		total->zero_copy_refused = zs.zero_copy_refused;
		total->zero_copy_stale = zs.zero_copy_stale;
	}
}
