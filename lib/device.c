/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "device.h"

const char *placefs_device_kind_name(enum placefs_device_kind kind)
{
	switch (kind) {
	case PLACEFS_DEVICE_NONE: return "none";
	case PLACEFS_DEVICE_HOST: return "host";
	case PLACEFS_DEVICE_CUDA: return "cuda";
	}
	return "unknown";
}

int placefs_device_parse(const char *spec, struct placefs_device *out, struct placefs_error *err)
{
	const char *p;
	int v = 0;

	if (!spec)
		spec = "";
	if (strcmp(spec, "none") == 0 || strcmp(spec, "host") == 0) {
		out->kind = spec[0] == 'n' ? PLACEFS_DEVICE_NONE : PLACEFS_DEVICE_HOST;
		out->index = -1;
		return 0;
	}
	if (strncmp(spec, "cuda:", 5) != 0 || spec[5] == '\0')
		goto bad;
	/* Decimal digits only: no sign, no spaces, no hex, at most 4 digits. */
	for (p = spec + 5; *p; p++) {
		if (*p < '0' || *p > '9' || p - (spec + 5) >= 4)
			goto bad;
		v = v * 10 + (*p - '0');
	}
	if (v > PLACEFS_DEVICE_INDEX_MAX)
		goto bad;
	out->kind = PLACEFS_DEVICE_CUDA;
	out->index = v;
	return 0;
bad:
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "device spec \"%.64s\": expected cuda:N (N from 0 to 1023), host "
	                         "or none",
	                         spec);
}

int placefs_device_check(struct placefs_device dev, struct placefs_error *err)
{
	switch (dev.kind) {
	case PLACEFS_DEVICE_NONE:
	case PLACEFS_DEVICE_HOST:
		if (dev.index == -1)
			return 0;
		break;
	case PLACEFS_DEVICE_CUDA:
		if (dev.index >= 0 && dev.index <= PLACEFS_DEVICE_INDEX_MAX)
			return 0;
		break;
	}
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "device {kind %d, index %d}: expected none, host or cuda:N (N "
	                         "from 0 to 1023)",
	                         (int)dev.kind, dev.index);
}

char *placefs_device_format(struct placefs_device dev, char buf[PLACEFS_DEVICE_NAME_MAX])
{
	if (dev.kind == PLACEFS_DEVICE_CUDA)
		snprintf(buf, PLACEFS_DEVICE_NAME_MAX, "cuda:%d", dev.index);
	else
		snprintf(buf, PLACEFS_DEVICE_NAME_MAX, "%s", placefs_device_kind_name(dev.kind));
	return buf;
}
