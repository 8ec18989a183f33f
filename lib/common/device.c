/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/device.h"

const char *placefs_device_kind_name(enum placefs_device_kind kind)
{
	switch (kind) {
	case PLACEFS_DEVICE_NONE: return "none";
	case PLACEFS_DEVICE_HOST: return "host";
	case PLACEFS_DEVICE_CUDA: return "cuda";
	}
	return "unknown";
}

/* Decimal digits only: no sign, no spaces, no hex, at most max_digits; -1 otherwise. */
static int parse_index(const char *p, int max_digits)
{
	int v = 0, n = 0;

	if (*p == '\0')
		return -1;
	for (; *p; p++, n++) {
		if (*p < '0' || *p > '9' || n >= max_digits)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

int placefs_device_parse(const char *spec, struct placefs_device *out, struct placefs_error *err)
{
	int v;

	if (!spec)
		spec = "";
	if (strcmp(spec, "none") == 0 || strcmp(spec, "host") == 0) {
		out->kind = spec[0] == 'n' ? PLACEFS_DEVICE_NONE : PLACEFS_DEVICE_HOST;
		out->index = -1;
		return 0;
	}
	if (strncmp(spec, "cuda:", 5) == 0) {
		v = parse_index(spec + 5, 4);
		if (v < 0 || v > PLACEFS_DEVICE_INDEX_MAX)
			goto bad;
		out->kind = PLACEFS_DEVICE_CUDA;
		out->index = v;
		return 0;
	}
	if (strncmp(spec, "host:", 5) == 0) {
		v = parse_index(spec + 5, 2);
		if (v < 0 || v >= PLACEFS_DEVICES_MAX)
			goto bad;
		out->kind = PLACEFS_DEVICE_HOST;
		out->index = v;
		return 0;
	}
bad:
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "device spec \"%.64s\": expected cuda:N (N from 0 to 1023), host "
	                         "or none (or host:N, N from 0 to %d)",
	                         spec, PLACEFS_DEVICES_MAX - 1);
}

int placefs_device_check(struct placefs_device dev, struct placefs_error *err)
{
	switch (dev.kind) {
	case PLACEFS_DEVICE_NONE:
		if (dev.index == -1)
			return 0;
		break;
	case PLACEFS_DEVICE_HOST:
		if (dev.index >= -1 && dev.index < PLACEFS_DEVICES_MAX)
			return 0;
		break;
	case PLACEFS_DEVICE_CUDA:
		if (dev.index >= 0 && dev.index <= PLACEFS_DEVICE_INDEX_MAX)
			return 0;
		break;
	}
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "device {kind %d, index %d}: expected none, host or cuda:N (N "
	                         "from 0 to 1023) (or host:N, N from 0 to %d)",
	                         (int)dev.kind, dev.index, PLACEFS_DEVICES_MAX - 1);
}

char *placefs_device_format(struct placefs_device dev, char buf[PLACEFS_DEVICE_NAME_MAX])
{
	if (dev.kind == PLACEFS_DEVICE_CUDA)
		snprintf(buf, PLACEFS_DEVICE_NAME_MAX, "cuda:%d", dev.index);
	else if (dev.kind == PLACEFS_DEVICE_HOST && dev.index >= 0)
		snprintf(buf, PLACEFS_DEVICE_NAME_MAX, "host:%d", dev.index);
	else
		snprintf(buf, PLACEFS_DEVICE_NAME_MAX, "%s", placefs_device_kind_name(dev.kind));
	return buf;
}

int placefs_device_equal(struct placefs_device a, struct placefs_device b)
{
	return a.kind == b.kind && a.index == b.index;
}

static int list_bad(struct placefs_error *err, const char *spec, const char *why)
{
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "device list \"%.64s%s\": %s", spec,
	                         strlen(spec) > 64 ? "..." : "", why);
}

int placefs_devices_parse(const char *spec, struct placefs_devices *out, struct placefs_error *err)
{
	char item[PLACEFS_DEVICE_NAME_MAX + 1], why[160];
	const char *p, *comma;
	struct placefs_device dev;
	size_t len;

	if (!spec)
		spec = "";
	memset(out, 0, sizeof(*out));
	if (strcmp(spec, "none") == 0)
		return 0;
	if (strcmp(spec, "cuda:all") == 0) {
		out->all = 1;
		return 0;
	}
	for (p = spec;; p = comma + 1) {
		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == 0)
			return list_bad(err, spec, "an empty item (a stray comma)");
		if (len >= sizeof(item))
			goto bad_item;
		memcpy(item, p, len);
		item[len] = '\0';
		if (placefs_device_parse(item, &dev, NULL) != 0)
			goto bad_item;
		if (dev.kind == PLACEFS_DEVICE_NONE ||
		    (dev.kind == PLACEFS_DEVICE_HOST && dev.index < 0)) {
			if (out->n > 0 || comma)
				return list_bad(
				        err, spec,
				        "none and host stand alone (host:N lists host rings)");
		} else if (out->n > 0 && out->items[0].kind != dev.kind) {
			return list_bad(err, spec, "cuda:N and host:N cannot be mixed in one list");
		}
		if (placefs_devices_find(out, dev) >= 0) {
			char name[PLACEFS_DEVICE_NAME_MAX];

			snprintf(why, sizeof(why), "%s is listed twice",
			         placefs_device_format(dev, name));
			return list_bad(err, spec, why);
		}
		if (out->n == PLACEFS_DEVICES_MAX) {
			snprintf(why, sizeof(why), "more than %d devices", PLACEFS_DEVICES_MAX);
			return list_bad(err, spec, why);
		}
		out->items[out->n++] = dev;
		if (!comma)
			break;
	}
	return 0;
bad_item:
	snprintf(why, sizeof(why),
	         "item \"%.*s\" is not cuda:N (N from 0 to 1023), host:N (N from 0 to %d), "
	         "host, none or cuda:all (alone)",
	         (int)(len > 24 ? 24 : len), p, PLACEFS_DEVICES_MAX - 1);
	return list_bad(err, spec, why);
}

int placefs_devices_resolve(struct placefs_devices *d, int cuda_count, struct placefs_error *err)
{
	int i;

	if (!d->all)
		return 0;
	if (cuda_count <= 0)
		return placefs_error_set(err, -ENODEV, PLACEFS_E_USAGE,
		                         "cuda:all: no CUDA device is visible");
	if (cuda_count > PLACEFS_DEVICES_MAX)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "cuda:all: %d CUDA devices are visible, at most %d can be "
		                         "listed (name them, or narrow CUDA_VISIBLE_DEVICES)",
		                         cuda_count, PLACEFS_DEVICES_MAX);
	for (i = 0; i < cuda_count; i++)
		d->items[i] = (struct placefs_device){PLACEFS_DEVICE_CUDA, i};
	d->n = (unsigned)cuda_count;
	d->all = 0;
	return 0;
}

int placefs_devices_find(const struct placefs_devices *d, struct placefs_device dev)
{
	unsigned i;

	for (i = 0; i < d->n; i++)
		if (placefs_device_equal(d->items[i], dev))
			return (int)i;
	return -1;
}

char *placefs_devices_format(const struct placefs_devices *d, char *buf, size_t len)
{
	char name[PLACEFS_DEVICE_NAME_MAX];
	size_t at = 0;
	unsigned i;

	if (len == 0)
		return buf;
	buf[0] = '\0';
	if (d->all) {
		snprintf(buf, len, "cuda:all");
		return buf;
	}
	if (d->n == 0) {
		snprintf(buf, len, "none");
		return buf;
	}
	for (i = 0; i < d->n && at < len; i++) {
		int w = snprintf(buf + at, len - at, "%s%s", i ? "," : "",
		                 placefs_device_format(d->items[i], name));

		if (w < 0)
			break;
		at += (size_t)w;
	}
	return buf;
}
