/* SPDX-License-Identifier: MIT */
/*
 * device: the staging device, one typed value parsed once.
 *
 *   spec := "none" | "host" | "cuda:" N      N decimal, 0..1023, at most 4 digits
 *
 * -o device= is parsed into a struct placefs_device by fs/opts.c; the daemon,
 * the stager and the backend pass that value along and never re-parse text.
 * The kinds are the wire values of <placefs/ioctl.h> (PLACEFS_IOC_BACKEND_*),
 * so RING_INFO reports them as they are.
 */
#ifndef PLACEFS_DEVICE_H
#define PLACEFS_DEVICE_H

#include <stddef.h>

#include "error.h"
#include "placefs/ioctl.h"

enum placefs_device_kind {
	PLACEFS_DEVICE_NONE = PLACEFS_IOC_BACKEND_NONE, /* no staging */
	PLACEFS_DEVICE_HOST = PLACEFS_IOC_BACKEND_HOST, /* the host backend (shared memory) */
	PLACEFS_DEVICE_CUDA = PLACEFS_IOC_BACKEND_CUDA, /* CUDA device `index` */
};

#define PLACEFS_DEVICE_INDEX_MAX 1023
/* The longest formatted device, "cuda:1023", with its NUL. */
#define PLACEFS_DEVICE_NAME_MAX 16

struct placefs_device {
	enum placefs_device_kind kind;
	int index; /* the CUDA ordinal; -1 unless kind is PLACEFS_DEVICE_CUDA */
};

/* "none", "host", "cuda"; "unknown" for a value outside the enum. */
const char *placefs_device_kind_name(enum placefs_device_kind kind);

/*
 * Parses spec strictly (no sign, space, hex or leading "+"; NULL is the
 * empty string). Returns 0, or -EINVAL with kind PLACEFS_E_USAGE and a
 * message quoting the spec (at most 64 bytes of it).
 */
int placefs_device_parse(const char *spec, struct placefs_device *out, struct placefs_error *err);

/*
 * Checks a value built by hand: a known kind, and an index that is -1 for
 * none and host, 0..PLACEFS_DEVICE_INDEX_MAX for cuda. Returns 0 or -EINVAL
 * with a message.
 */
int placefs_device_check(struct placefs_device dev, struct placefs_error *err);

/* Writes "none", "host" or "cuda:N" into buf and returns buf. */
char *placefs_device_format(struct placefs_device dev, char buf[PLACEFS_DEVICE_NAME_MAX]);

#endif
