/* SPDX-License-Identifier: MIT */
/*
 * opts: the placefs command line.
 *
 *   placefs [options] SOURCE MOUNTPOINT [options]
 *
 * SOURCE and MOUNTPOINT may appear anywhere among the options, as
 * mount.fuse3 puts them first and the options after. placefs's own options
 * are taken out of the argument list; everything else (-f, -d, -s, -h, -V,
 * max_threads, clone_fd and libfuse's mount options) is left for
 * fuse_parse_cmdline() and fuse_session_new(), which reject what they do
 * not know before anything is mounted.
 */
#ifndef PLACEFS_FS_OPTS_H
#define PLACEFS_FS_OPTS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_opt.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/device.h"
#include "common/error.h"

#define PLACEFS_PUSH_THREADS     0 /* page-cache pushers (fs/push.h) unless -o push_threads= */
#define PLACEFS_PUSH_THREADS_MAX 64
#define PLACEFS_MIN_THREADS      16 /* worker threads unless -o max_threads= says otherwise */
#define PLACEFS_MAX_READ         (1u << 20)   /* bytes per FUSE READ request */
#define PLACEFS_READAHEAD        (16u << 20)  /* default -o readahead= (kernel: 128 KiB) */
#define PLACEFS_READAHEAD_MAX    (1ull << 30) /* the largest -o readahead= accepted */
#define PLACEFS_MAX_THREADS_MAX  1024 /* the largest -o max_threads= (and max_idle_threads=) */

/*
 * Staging limits on a shared host (doc/RELIABILITY.md, "Threat model"):
 * a stage that gives no timeout waits at most -o stage_timeout= seconds
 * (0: without limit); at most -o max_waiting= stages run on threads of
 * their own at once (more answer EAGAIN at once); and a user other than
 * root and the daemon's own holds at most -o user_share= percent of the
 * ring in leases and stages in progress while another user's stage through
 * the ring is in progress (more answer EBUSY at once; alone it may hold
 * more).
 */
#define PLACEFS_STAGE_TIMEOUT     60 /* seconds */
#define PLACEFS_STAGE_TIMEOUT_MAX (365u * 24 * 3600)
#define PLACEFS_MAX_WAITING       64
#define PLACEFS_MAX_WAITING_MAX   4096
#define PLACEFS_USER_SHARE        50 /* percent of the ring */

/*
 * FUSE background requests (readahead READs) in flight, unless
 * -o max_background=; the congestion threshold is three quarters of it. Once
 * the threshold is reached the kernel drops each async readahead window after
 * allocating its page-cache pages, and frees them again, so it must cover
 * every concurrent reader's window: 384 = 24 readers x 16 MiB of readahead in
 * 1 MiB requests (doc/PERFORMANCE.md, section 3.6).
 */
#define PLACEFS_MAX_BACKGROUND     512
#define PLACEFS_MAX_BACKGROUND_MAX 65535 /* the protocol's field is 16 bits */

/*
 * How READ replies get their bytes. mmap is the default: one copy instead of
 * two, and mount-faults.sh proves that a shard truncated under it makes the
 * reply fail (EIO to the reader) without harming the daemon.
 */
enum placefs_read_mode {
	PLACEFS_READ_PREAD = 0, /* pread into a per-thread buffer, then one writev */
	PLACEFS_READ_MMAP,      /* one writev straight from a read-only mapping of the shard */
};

struct placefs_opts {
	char *source;     /* SOURCE exactly as given (plan.json, fsname) */
	char *source_abs; /* SOURCE made absolute (the daemon changes directory to /) */
	char *mountpoint; /* MOUNTPOINT, resolved with realpath() */
	char *index;      /* -o index=, or NULL */
	char **prefixes;  /* -o prefix=, in order */
	size_t nprefixes;
	int has_limit; /* -o buffer_size= or INSTANTTENSOR_BUFFER_SIZE */
	uint64_t limit;
	const char *limit_origin; /* "-o buffer_size" or "INSTANTTENSOR_BUFFER_SIZE" */
	/*
	 * -o device=, parsed once (lib/common/device.h). device_auto: not given, so
	 * staging goes to cuda:0 when a CUDA device is present, else is off.
	 */
	struct placefs_device device;
	int device_auto;
	/*
	 * The whole -o device= list (cuda:0,cuda:1 / cuda:all / host:0,host:1):
	 * one stager per item (lib/staging/stagers.h). `device` is its first item
	 * (cuda:0 for cuda:all), so code asking "staging or not" reads it.
	 */
	struct placefs_devices devices;
	uint64_t host_buffer; /* -o host_buffer=, bytes; 0 = PLACEFS_HOST_BUFFER_DEFAULT */
	uint64_t ring_size;   /* -o ring_size=, bytes; 0 = the plan's own ring (lib/model/plan.h) */
	int prefetch;         /* 1 unless -o noprefetch */
	int zero_copy;        /* -o zero_copy=: 0 not given (the stager default), 1 on, -1 off */
	int direct_copy;      /* -o direct_copy=: 0 not given (the stager default), 1 on, -1 off */
	int lookahead;        /* -o lookahead=: 0 not given (on for shards on s3fs), 1 on, -1 off */
	int direct_reads; /* -o direct_reads=: 0 not given (on for shards on s3fs), 1 on, -1 off */
	unsigned push_threads; /* -o push_threads=, PLACEFS_PUSH_THREADS unless given; 0 = off */
	unsigned disk_streams; /* -o disk_streams=; 0 = no gate */
	/* -o disk_streams= was given; else 0 for shards on a FUSE file system (fs/main.c) */
	int disk_streams_given;
	enum placefs_read_mode read_mode;
	uint64_t readahead;      /* bytes; 0 = leave the kernel's default */
	unsigned max_background; /* -o max_background=, PLACEFS_MAX_BACKGROUND unless given */
	unsigned stage_timeout;  /* -o stage_timeout=, seconds; 0 = stages without one wait on */
	unsigned max_waiting;    /* -o max_waiting=, stages on threads of their own at once */
	unsigned user_share;     /* -o user_share=, percent of the ring per capped user */

	/* Standard options, as fuse_parse_cmdline() found them. */
	int foreground;
	int debug;
	int singlethread;
	int clone_fd;
	unsigned max_threads; /* PLACEFS_MIN_THREADS unless given; 1..PLACEFS_MAX_THREADS_MAX */
	unsigned max_idle_threads;
	int show_help;
	int show_version;

	/* What is left for fuse_session_new(), with placefs's forced mount options appended. */
	struct fuse_args args;
};

/*
 * Parses argv into o (which the caller zeroes first) and validates every
 * value: sizes through lib/common/size.h, the device, the read mode, the
 * positionals (exactly two unless -h/-V), that MOUNTPOINT is a directory.
 * Returns 0 or a negative errno with a message (kind PLACEFS_E_USAGE, or
 * PLACEFS_E_LIMIT for a bad size). The checkpoint itself is not opened here.
 */
int placefs_opts_parse(int argc, char **argv, struct placefs_opts *o, struct placefs_error *err);

/* Frees what placefs_opts_parse() allocated; safe on a zeroed or partly filled struct. */
void placefs_opts_release(struct placefs_opts *o);

/*
 * The file system name placefs mounts with, shown by /proc/mounts, findmnt
 * and df as the mount's SOURCE (malloc'd into *out; 0 or -ENOMEM):
 *
 *   placefs:SOURCE,buffer_size=LIMIT                (LIMIT: 64M, 5GB, 1000, none)
 *   placefs:SOURCE,buffer_size=LIMIT,prefixes=N     (with N -o prefix= options)
 *
 * SOURCE as given, LIMIT the staging limit from -o buffer_size or
 * INSTANTTENSOR_BUFFER_SIZE in the size grammar (lib/common/size.h), exact and
 * short. The kernel shows it as given except for space, tab, newline and
 * backslash (octal escapes, as in every /proc/mounts field); its limit is
 * one page (mount(2)). The options come last, from the last
 * ",buffer_size=" on, so that a SOURCE with commas still reads back. (Not in
 * brackets: findmnt writes a bind mount's root as SOURCE[/dir].) The prefixes themselves, the ring and the device are
 * in .placefs/plan and the start-up log: a name with arbitrary bytes in it
 * would no longer be short or stable.
 */
int placefs_opts_fsname(const struct placefs_opts *o, char **out);

/*
 * Prints placefs's usage, its own options and libfuse's generic ones
 * (-h, -V, -d, -f, -s, clone_fd, max_idle_threads; max_threads once, with
 * placefs's default); the caller adds fuse_lowlevel_help() for the mount
 * options.
 */
void placefs_opts_usage(FILE *f, const char *prog);

#endif
