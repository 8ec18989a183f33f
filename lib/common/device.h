/* SPDX-License-Identifier: MIT */
/*
 * device: the staging device, one typed value parsed once, and the list of
 * devices one mount stages to.
 *
 *   spec := "none" | "host" | "cuda:" N | "host:" N
 *           cuda: N decimal, 0..1023, at most 4 digits;
 *           host: N decimal, 0..63 (PLACEFS_DEVICES_MAX - 1), at most 2 digits
 *
 * "host:N" is the host backend standing in for device N of a node, so that
 * the ring-per-device logic runs (and is tested) without a GPU; plain "host"
 * is the single host ring of today (index -1).
 *
 *   list := "none" | "host" | "cuda:all" | item ("," item)*
 *   item := "cuda:" N | "host:" N       (all items of one kind, none twice)
 *
 * A list of one item is exactly that single device, so "host", "none" and
 * "cuda:N" mean what they always meant. "cuda:all" stands for every visible
 * CUDA device (cuda:0 .. cuda:n-1 under the process's CUDA_VISIBLE_DEVICES)
 * and is resolved against that count by placefs_devices_resolve() (the
 * stager set does it with placefs_backend_cuda_devices()).
 *
 * -o device= is parsed into a struct placefs_device by fs/opts.c; the daemon,
 * the stager and the backend pass that value along and never re-parse text.
 * The kinds are the wire values of <placefs/ioctl.h> (PLACEFS_IOC_BACKEND_*),
 * so RING_INFO reports them as they are.
 */
#ifndef PLACEFS_DEVICE_H
#define PLACEFS_DEVICE_H

#include <stddef.h>

#include "common/error.h"
#include "placefs/ioctl.h"

enum placefs_device_kind {
	PLACEFS_DEVICE_NONE = PLACEFS_IOC_BACKEND_NONE, /* no staging */
	PLACEFS_DEVICE_HOST = PLACEFS_IOC_BACKEND_HOST, /* the host backend (shared memory) */
	PLACEFS_DEVICE_CUDA = PLACEFS_IOC_BACKEND_CUDA, /* CUDA device `index` */
};

#define PLACEFS_DEVICE_INDEX_MAX 1023
/* At most this many devices in one list; host:N stand-ins have N < this. */
#define PLACEFS_DEVICES_MAX 64
/* The longest formatted list: 64 x "cuda:1023" with their commas, and a NUL. */
#define PLACEFS_DEVICES_NAME_MAX (PLACEFS_DEVICES_MAX * 10 + 1)
/* The longest formatted device, "cuda:1023", with its NUL. */
#define PLACEFS_DEVICE_NAME_MAX 16

struct placefs_device {
	enum placefs_device_kind kind;
	/*
	 * cuda: the CUDA ordinal; host: -1 for the single host ring, or
	 * 0..PLACEFS_DEVICES_MAX - 1 for the stand-in "host:N"; none: -1.
	 */
	int index;
};

/*
 * A list of devices: items[0..n) in the order given, all of one kind, none
 * twice. n is 0 for "none" and, until placefs_devices_resolve(), for
 * "cuda:all" (all == 1). Plain value: copy it freely.
 */
struct placefs_devices {
	unsigned n;
	int all; /* "cuda:all", not yet resolved */
	struct placefs_device items[PLACEFS_DEVICES_MAX];
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

/* Writes "none", "host", "host:N" or "cuda:N" into buf and returns buf. */
char *placefs_device_format(struct placefs_device dev, char buf[PLACEFS_DEVICE_NAME_MAX]);

/* 1 when a and b are the same device. */
int placefs_device_equal(struct placefs_device a, struct placefs_device b);

/*
 * Parses a device list (the grammar above) strictly: no empty item, no
 * space, no mixed kinds, no device twice, at most PLACEFS_DEVICES_MAX items,
 * "none", "host" and "cuda:all" only alone. NULL is the empty string.
 * Returns 0, or -EINVAL with kind PLACEFS_E_USAGE and a message quoting the
 * list (at most 64 bytes of it) and naming the rule broken.
 */
int placefs_devices_parse(const char *spec, struct placefs_devices *out, struct placefs_error *err);

/*
 * Resolves "cuda:all" into cuda:0 .. cuda:(cuda_count - 1); a list without
 * `all` is left as it is. cuda_count is the number of visible CUDA devices
 * (0 without CUDA). -ENODEV when it is 0 or less ("cuda:all: no CUDA device
 * is visible"), -EINVAL when it exceeds PLACEFS_DEVICES_MAX.
 */
int placefs_devices_resolve(struct placefs_devices *d, int cuda_count, struct placefs_error *err);

/* The position of dev in the list, or -1 when the list does not hold it. */
int placefs_devices_find(const struct placefs_devices *d, struct placefs_device dev);

/*
 * Writes the list as it parses ("cuda:0,cuda:1", "host", "none",
 * "cuda:all" while unresolved) into buf (len >= PLACEFS_DEVICES_NAME_MAX
 * always suffices; shorter buffers are truncated) and returns buf.
 */
char *placefs_devices_format(const struct placefs_devices *d, char *buf, size_t len);

#endif
