/* SPDX-License-Identifier: MIT */
#include "config.h"

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "staging/backend.h"
#include "staging/gate.h"
#include "opts.h"
#include "model/plan.h"
#include "common/size.h"

/* Raw option values, validated once the whole command line has been seen. */
struct parse_ctx {
	struct placefs_opts *o;
	char *buffer_size;
	char *index;
	char *device;
	char *read_mode;
	char *readahead;
	char *host_buffer;
	char *ring_size;
	char *push_threads;
	char *disk_streams;
	char *max_background;
	char *zero_copy;
	char *direct_copy;
	char *lookahead;
	char *direct_reads;
	char *stage_timeout;
	char *max_waiting;
	char *user_share;
	char *max_threads;      /* the value of max_threads=, also left for libfuse */
	char *max_idle_threads; /* the value of max_idle_threads=, also left for libfuse */
	int noprefetch;
	char *mountpoint;
	char *extra; /* the first surplus positional, for the message */
	int max_threads_given;
	char *no_perms; /* an option that would turn default_permissions off */
	char *misspelt; /* the first --name or -o name-with-dashes, refused (see misspelling()) */
	int nomem;
};

enum {
	KEY_PREFIX,
	KEY_MAX_THREADS,
	KEY_MAX_IDLE_THREADS,
	KEY_NO_DEFAULT_PERMISSIONS,
};

#define CTX_OPT(t, m)                                                                              \
	{                                                                                          \
		t, offsetof(struct parse_ctx, m), 0                                                \
	}

static const struct fuse_opt placefs_opt_spec[] = {
        CTX_OPT("buffer_size=%s", buffer_size),
        CTX_OPT("index=%s", index),
        CTX_OPT("device=%s", device),
        CTX_OPT("read_mode=%s", read_mode),
        CTX_OPT("readahead=%s", readahead),
        CTX_OPT("host_buffer=%s", host_buffer),
        CTX_OPT("ring_size=%s", ring_size),
        CTX_OPT("push_threads=%s", push_threads),
        CTX_OPT("disk_streams=%s", disk_streams),
        CTX_OPT("max_background=%s", max_background),
        CTX_OPT("zero_copy=%s", zero_copy),
        CTX_OPT("direct_copy=%s", direct_copy),
        CTX_OPT("lookahead=%s", lookahead),
        CTX_OPT("direct_reads=%s", direct_reads),
        CTX_OPT("stage_timeout=%s", stage_timeout),
        CTX_OPT("max_waiting=%s", max_waiting),
        CTX_OPT("user_share=%s", user_share),
        {"noprefetch", offsetof(struct parse_ctx, noprefetch), 1},
        FUSE_OPT_KEY("prefix=", KEY_PREFIX),
        /* Noted here, then kept for fuse_parse_cmdline() which parses the value. */
        FUSE_OPT_KEY("max_threads=", KEY_MAX_THREADS),
        FUSE_OPT_KEY("max_idle_threads=", KEY_MAX_IDLE_THREADS),
        /* Attempts to turn off the kernel's permission checks, refused by name. */
        FUSE_OPT_KEY("nodefault_permissions", KEY_NO_DEFAULT_PERMISSIONS),
        FUSE_OPT_KEY("no_default_permissions", KEY_NO_DEFAULT_PERMISSIONS),
        FUSE_OPT_KEY("default_permissions=", KEY_NO_DEFAULT_PERMISSIONS),
        FUSE_OPT_END,
};

static int add_prefix(struct placefs_opts *o, const char *p)
{
	char **v;
	char *copy;

	copy = strdup(p);
	if (!copy)
		return -ENOMEM;
	v = realloc(o->prefixes, (o->nprefixes + 1) * sizeof(*v));
	if (!v) {
		free(copy);
		return -ENOMEM;
	}
	v[o->nprefixes++] = copy;
	o->prefixes = v;
	return 0;
}

/* placefs's own -o option names, for the message of a misspelt one. */
static const char *const own_names[] = {
        "buffer_size",      "index",       "device",        "read_mode",
        "readahead",        "host_buffer", "ring_size",     "push_threads",
        "max_background",   "zero_copy",   "stage_timeout", "max_waiting",
        "user_share",       "noprefetch",  "prefix",        "max_threads",
        "max_idle_threads", "direct_copy", "disk_streams",  "lookahead",
        "direct_reads",
};

/*
 * Whether arg is a placefs option in a spelling placefs does not take:
 * "--buffer-size=8M" or "--ring_size" (GNU long options: placefs, like every
 * FUSE file system mounted by mount(8) or fstab, takes -o name=value), or
 * "-o buffer-size=8M" (dashes for underscores). "--help" and "--version"
 * are libfuse's own and stay.
 */
static int misspelling(const char *arg)
{
	char name[64];
	size_t i, n;
	int dashes = 0;

	if (strcmp(arg, "--help") == 0 || strcmp(arg, "--version") == 0)
		return 0;
	if (strncmp(arg, "--", 2) == 0 && arg[2] != '\0')
		return 1;
	if (arg[0] == '-')
		return 0;
	n = strcspn(arg, "=");
	if (n >= sizeof(name))
		return 0;
	for (i = 0; i < n; i++) {
		dashes += arg[i] == '-';
		name[i] = arg[i] == '-' ? '_' : arg[i];
	}
	name[n] = '\0';
	if (!dashes)
		return 0;
	for (i = 0; i < sizeof(own_names) / sizeof(own_names[0]); i++)
		if (strcmp(name, own_names[i]) == 0)
			return 1;
	return 0;
}

/* The usage error for a misspelt option, naming the -o spelling when there is one. */
static int misspelt_error(const char *arg, struct placefs_error *err)
{
	const char *p = arg + strspn(arg, "-");
	const char *eq = strchr(p, '=');
	size_t n = eq ? (size_t)(eq - p) : strlen(p), i;
	char name[64];

	if (n < sizeof(name)) {
		for (i = 0; i < n; i++)
			name[i] = p[i] == '-' ? '_' : p[i];
		name[n] = '\0';
		for (i = 0; i < sizeof(own_names) / sizeof(own_names[0]); i++) {
			if (strcmp(name, own_names[i]) != 0)
				continue;
			if (eq || strcmp(name, "noprefetch") == 0)
				return placefs_error_set(
				        err, -EINVAL, PLACEFS_E_USAGE,
				        "unknown option '%s%s': placefs takes its options as "
				        "-o name=value, as mount(8) and fstab pass them: use -o "
				        "%s%s",
				        arg[0] == '-' ? "" : "-o ", arg, name, eq ? eq : "");
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "unknown option '%s%s': placefs takes its options as "
			        "-o name=value, as mount(8) and fstab pass them: use "
			        "-o %s=VALUE",
			        arg[0] == '-' ? "" : "-o ", arg, name);
		}
	}
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "unknown option '%s': placefs takes its options as -o "
	                         "name=value (see placefs -h)",
	                         arg);
}

/* Whether arg is an item of a device list: "cuda:" or "host:" and 1 to 4 digits. */
static int device_item(const char *arg)
{
	size_t n;

	if (strncmp(arg, "cuda:", 5) != 0 && strncmp(arg, "host:", 5) != 0)
		return 0;
	n = strspn(arg + 5, "0123456789");
	return n >= 1 && n <= 4 && arg[5 + n] == '\0';
}

/* fuse_opt_parse() callback: -1 error, 0 discard the argument, 1 keep it. */
static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct parse_ctx *ctx = data;
	struct placefs_opts *o = ctx->o;
	char **slot = NULL;

	(void)outargs;
	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		if (!o->source)
			slot = &o->source;
		else if (!ctx->mountpoint)
			slot = &ctx->mountpoint;
		else if (!ctx->extra)
			slot = &ctx->extra;
		else
			return 0;
		*slot = strdup(arg);
		if (!*slot) {
			ctx->nomem = 1;
			return -1;
		}
		return 0;
	case KEY_PREFIX:
		if (add_prefix(o, arg + strlen("prefix=")) < 0) {
			ctx->nomem = 1;
			return -1;
		}
		return 0;
	case KEY_MAX_THREADS:
	case KEY_MAX_IDLE_THREADS:
		/* Checked here (libfuse reads "-1" as 4294967295), then left for libfuse. */
		slot = key == KEY_MAX_THREADS ? &ctx->max_threads : &ctx->max_idle_threads;
		free(*slot);
		*slot = strdup(strchr(arg, '=') + 1);
		if (!*slot) {
			ctx->nomem = 1;
			return -1;
		}
		if (key == KEY_MAX_THREADS)
			ctx->max_threads_given = 1;
		return 1;
	case KEY_NO_DEFAULT_PERMISSIONS:
		if (!ctx->no_perms && !(ctx->no_perms = strdup(arg))) {
			ctx->nomem = 1;
			return -1;
		}
		return 0;
	case FUSE_OPT_KEY_OPT:
		/*
		 * -o device=cuda:0,cuda:1: the option parser splits the list at
		 * its commas, so items after the first arrive as options of their
		 * own ("cuda:1", "host:1"); they continue the device= before them.
		 */
		if (ctx->device && device_item(arg)) {
			size_t n = strlen(ctx->device), k = strlen(arg);
			char *v = realloc(ctx->device, n + k + 2);

			if (!v) {
				ctx->nomem = 1;
				return -1;
			}
			v[n] = ',';
			memcpy(v + n + 1, arg, k + 1);
			ctx->device = v;
			return 0;
		}
		if (misspelling(arg)) {
			if (!ctx->misspelt && !(ctx->misspelt = strdup(arg))) {
				ctx->nomem = 1;
				return -1;
			}
			return 0;
		}
		return 1;
	default: return 1;
	}
}

/*
 * lib/common/device.h's list grammar (cuda:N, cuda:N,cuda:M,..., cuda:all, host,
 * host:N,..., none), parsed here once.
 */
static int parse_device(const char *text, struct placefs_opts *o, struct placefs_error *err)
{
	struct placefs_error e;

	placefs_error_clear(&e);
	if (placefs_devices_parse(text, &o->devices, &e) < 0)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "invalid -o device value: %s (expected cuda:N with N from "
		                         "0 to 1023, a list cuda:N,cuda:M,..., cuda:all, host, "
		                         "host:N,... or none)",
		                         e.msg);
	if (o->devices.all)
		o->device = (struct placefs_device){PLACEFS_DEVICE_CUDA, 0};
	else if (o->devices.n == 0)
		o->device = (struct placefs_device){PLACEFS_DEVICE_NONE, -1};
	else
		o->device = o->devices.items[0];
	o->device_auto = 0;
	return 0;
}

static int parse_read_mode(const char *text, struct placefs_opts *o, struct placefs_error *err)
{
	if (strcmp(text, "pread") == 0)
		o->read_mode = PLACEFS_READ_PREAD;
	else if (strcmp(text, "mmap") == 0)
		o->read_mode = PLACEFS_READ_MMAP;
	else
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "invalid -o read_mode value '%s' (expected pread or mmap)",
		                         text);
	return 0;
}

/*
 * Makes SOURCE absolute without resolving symbolic links: the shard names
 * (and so plan.json) must stay what the user's path says, as placefs-plan
 * prints them, while the daemon itself runs from "/".
 */
static int absolutize(const char *path, char **out)
{
	char cwd[PATH_MAX];
	size_t lc, lp;
	char *s;

	if (path[0] == '/') {
		*out = strdup(path);
		return *out ? 0 : -ENOMEM;
	}
	if (!getcwd(cwd, sizeof(cwd)))
		return -errno;
	lc = strlen(cwd);
	lp = strlen(path);
	s = malloc(lc + 1 + lp + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, cwd, lc);
	s[lc] = '/';
	memcpy(s + lc + 1, path, lp + 1);
	*out = s;
	return 0;
}

/*
 * A size as the size grammar (lib/common/size.h) reads it back, short: the largest
 * binary suffix that divides it exactly (64M) or the largest decimal one
 * (64MB), whichever is shorter (binary on a tie), else the bytes.
 */
static void compact_size(uint64_t v, char *buf, size_t len)
{
	static const char *const bin[] = {"T", "G", "M", "K"};
	static const char *const dec[] = {"TB", "GB", "MB", "KB"};
	static const uint64_t dscale[] = {1000000000000ULL, 1000000000ULL, 1000000ULL, 1000ULL};
	char b[32], d[32];
	size_t i;

	snprintf(b, sizeof(b), "%" PRIu64, v);
	snprintf(d, sizeof(d), "%" PRIu64, v);
	for (i = 0; v && i < 4; i++) {
		unsigned shift = (unsigned)(40 - 10 * i);

		if ((v & ((1ULL << shift) - 1)) == 0) {
			snprintf(b, sizeof(b), "%" PRIu64 "%s", v >> shift, bin[i]);
			break;
		}
	}
	for (i = 0; v && i < 4; i++) {
		if (v % dscale[i] == 0) {
			snprintf(d, sizeof(d), "%" PRIu64 "%s", v / dscale[i], dec[i]);
			break;
		}
	}
	snprintf(buf, len, "%s", strlen(d) < strlen(b) ? d : b);
}

int placefs_opts_fsname(const struct placefs_opts *o, char **out)
{
	char lim[32], pre[32] = "";

	if (o->has_limit)
		compact_size(o->limit, lim, sizeof(lim));
	else
		snprintf(lim, sizeof(lim), "none");
	if (o->nprefixes)
		snprintf(pre, sizeof(pre), ",prefixes=%zu", o->nprefixes);
	if (asprintf(out, "placefs:%s,buffer_size=%s%s", o->source, lim, pre) < 0) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* The mount options placefs always adds, last so that they win over the user's. */
static int add_forced_options(struct placefs_opts *o)
{
	char *opts = NULL;
	char *fsname = NULL;
	char *name = NULL;
	char num[32];
	int rc = -ENOMEM;

	if (placefs_opts_fsname(o, &name) < 0 || asprintf(&fsname, "fsname=%s", name) < 0) {
		fsname = NULL;
		goto out;
	}
	snprintf(num, sizeof(num), "max_read=%u", PLACEFS_MAX_READ);
	if (fuse_opt_add_opt(&opts, "ro") < 0 ||
	    fuse_opt_add_opt(&opts, "default_permissions") < 0 ||
	    fuse_opt_add_opt_escaped(&opts, fsname) < 0 ||
	    fuse_opt_add_opt(&opts, "subtype=placefs") < 0 || fuse_opt_add_opt(&opts, num) < 0)
		goto out;
	if (fuse_opt_add_arg(&o->args, "-o") < 0 || fuse_opt_add_arg(&o->args, opts) < 0)
		goto out;
	rc = 0;
out:
	free(opts);
	free(fsname);
	free(name);
	return rc;
}

/* -o NAME=0|1 into *out: -1 (0), 1 (1), untouched when not given (NULL). */
static int parse_switch(const char *text, const char *name, int *out, struct placefs_error *err)
{
	if (!text)
		return 0;
	if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) {
		*out = text[0] == '1' ? 1 : -1;
		return 0;
	}
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "invalid -o %s value '%s' (expected 0 or 1)", name, text);
}

/* A decimal count for -o NAME= within [min, max], or a usage error naming it. */
static int parse_count(const char *text, const char *name, unsigned min, unsigned max,
                       unsigned *out, struct placefs_error *err)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(text, &end, 10);
	if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || v < min || v > max)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "invalid -o %s value '%s' (from %u to %u)", name, text,
		                         min, max);
	*out = (unsigned)v;
	return 0;
}

int placefs_opts_parse(int argc, char **argv, struct placefs_opts *o, struct placefs_error *err)
{
	struct parse_ctx ctx = {.o = o};
	struct fuse_cmdline_opts cmd;
	char resolved[PATH_MAX];
	struct stat st;
	int rc;

	o->args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
	o->max_threads = PLACEFS_MIN_THREADS;
	o->read_mode = PLACEFS_READ_MMAP;
	o->readahead = PLACEFS_READAHEAD;
	o->max_idle_threads = UINT_MAX;
	o->device = (struct placefs_device){PLACEFS_DEVICE_CUDA, 0};
	o->devices.n = 1;
	o->devices.items[0] = o->device;
	o->device_auto = 1;
	o->prefetch = 1;
	o->push_threads = PLACEFS_PUSH_THREADS;
	o->disk_streams = PLACEFS_GATE_STREAMS_DEFAULT;
	o->max_background = PLACEFS_MAX_BACKGROUND;
	o->stage_timeout = PLACEFS_STAGE_TIMEOUT;
	o->max_waiting = PLACEFS_MAX_WAITING;
	o->user_share = PLACEFS_USER_SHARE;

	if (fuse_opt_parse(&o->args, &ctx, placefs_opt_spec, opt_proc) != 0) {
		if (ctx.nomem)
			rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
		else
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                       "invalid command line (see placefs -h)");
		goto out;
	}
	/* Before libfuse sees it: it would refuse it later as a FUSE failure (status 10). */
	if (ctx.misspelt) {
		rc = misspelt_error(ctx.misspelt, err);
		goto out;
	}
	memset(&cmd, 0, sizeof(cmd));
	if (fuse_parse_cmdline(&o->args, &cmd) != 0) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                       "invalid command line (see placefs -h)");
		goto out;
	}
	/* No positional is left for libfuse, so it never sets a mountpoint of its own. */
	free(cmd.mountpoint);
	o->foreground = cmd.foreground;
	o->debug = cmd.debug;
	o->singlethread = cmd.singlethread;
	o->clone_fd = cmd.clone_fd;
	o->max_idle_threads = cmd.max_idle_threads;
	o->show_help = cmd.show_help;
	o->show_version = cmd.show_version;
	if (ctx.max_threads_given)
		o->max_threads = cmd.max_threads;
	if (o->show_help || o->show_version) {
		rc = 0;
		goto out;
	}
	if (ctx.no_perms) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                       "-o %s: placefs always mounts with default_permissions, so "
		                       "that the kernel checks every access against the modes of "
		                       "the source files; it cannot be turned off",
		                       ctx.no_perms);
		goto out;
	}

	if (!o->source || !ctx.mountpoint) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                       "missing %s (usage: placefs [options] SOURCE MOUNTPOINT)",
		                       o->source ? "MOUNTPOINT" : "SOURCE and MOUNTPOINT");
		goto out;
	}
	if (ctx.extra) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                       "unexpected argument '%s' (usage: placefs [options] SOURCE "
		                       "MOUNTPOINT)",
		                       ctx.extra);
		goto out;
	}
	if (o->source[0] == '\0') {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE, "empty SOURCE");
		goto out;
	}
	if (ctx.max_threads_given && o->max_threads == 0) {
		rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                       "invalid -o max_threads value 0 (must be at least 1)");
		goto out;
	}
	if (ctx.max_threads &&
	    (rc = parse_count(ctx.max_threads, "max_threads", 1, PLACEFS_MAX_THREADS_MAX,
	                      &o->max_threads, err)) < 0)
		goto out;
	/* libfuse's own spelling of "no limit" is -1 (its default). */
	if (ctx.max_idle_threads && strcmp(ctx.max_idle_threads, "-1") != 0 &&
	    (rc = parse_count(ctx.max_idle_threads, "max_idle_threads", 0, PLACEFS_MAX_THREADS_MAX,
	                      &o->max_idle_threads, err)) < 0)
		goto out;
	if (ctx.stage_timeout &&
	    (rc = parse_count(ctx.stage_timeout, "stage_timeout", 0, PLACEFS_STAGE_TIMEOUT_MAX,
	                      &o->stage_timeout, err)) < 0)
		goto out;
	if (ctx.max_waiting &&
	    (rc = parse_count(ctx.max_waiting, "max_waiting", 1, PLACEFS_MAX_WAITING_MAX,
	                      &o->max_waiting, err)) < 0)
		goto out;
	if (ctx.user_share &&
	    (rc = parse_count(ctx.user_share, "user_share", 1, 100, &o->user_share, err)) < 0)
		goto out;

	/* The staging limit: the option wins over the environment. */
	rc = placefs_plan_limit_parse(ctx.buffer_size, "-o buffer_size", &o->has_limit, &o->limit,
	                              &o->limit_origin, err);
	if (rc < 0)
		goto out;
	if (ctx.device && (rc = parse_device(ctx.device, o, err)) < 0)
		goto out;
	if (ctx.read_mode && (rc = parse_read_mode(ctx.read_mode, o, err)) < 0)
		goto out;
	if (ctx.host_buffer) {
		rc = placefs_size_parse(ctx.host_buffer, "-o host_buffer", &o->host_buffer, err);
		if (rc == 0 && (o->host_buffer < PLACEFS_HOST_BUFFER_MIN ||
		                o->host_buffer > PLACEFS_HOST_BUFFER_MAX))
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                       "invalid -o host_buffer value '%s' (from 8K to 4G)",
			                       ctx.host_buffer);
		if (rc < 0) {
			/* Not the staging limit: a plain bad option value. */
			if (err)
				err->kind = PLACEFS_E_USAGE;
			goto out;
		}
	}
	if (ctx.ring_size) {
		/* Checked against the staging limit once the plan is made (fs/main.c). */
		rc = placefs_size_parse(ctx.ring_size, "-o ring_size", &o->ring_size, err);
		if (rc < 0) {
			/* Not the staging limit: a plain bad option value. */
			if (err)
				err->kind = PLACEFS_E_USAGE;
			goto out;
		}
	}
	o->prefetch = !ctx.noprefetch;
	if ((rc = parse_switch(ctx.zero_copy, "zero_copy", &o->zero_copy, err)) < 0 ||
	    (rc = parse_switch(ctx.direct_copy, "direct_copy", &o->direct_copy, err)) < 0 ||
	    (rc = parse_switch(ctx.lookahead, "lookahead", &o->lookahead, err)) < 0 ||
	    (rc = parse_switch(ctx.direct_reads, "direct_reads", &o->direct_reads, err)) < 0)
		goto out;
	if (ctx.push_threads &&
	    (rc = parse_count(ctx.push_threads, "push_threads", 0, PLACEFS_PUSH_THREADS_MAX,
	                      &o->push_threads, err)) < 0)
		goto out;
	o->disk_streams_given = ctx.disk_streams != NULL;
	if (ctx.disk_streams &&
	    (rc = parse_count(ctx.disk_streams, "disk_streams", 0, PLACEFS_GATE_STREAMS_MAX,
	                      &o->disk_streams, err)) < 0)
		goto out;
	if (ctx.max_background &&
	    (rc = parse_count(ctx.max_background, "max_background", 1, PLACEFS_MAX_BACKGROUND_MAX,
	                      &o->max_background, err)) < 0)
		goto out;
	if (ctx.readahead) {
		/* 0 keeps the kernel's default; anything else is a size. */
		if (strcmp(ctx.readahead, "0") == 0)
			o->readahead = 0;
		else if ((rc = placefs_size_parse(ctx.readahead, "-o readahead", &o->readahead,
		                                  err)) < 0) {
			/* Not the staging limit: a plain bad option value. */
			if (err)
				err->kind = PLACEFS_E_USAGE;
			goto out;
		}
		/* Rounded up to KiB for sysfs, a huge value would wrap to 0 (readahead off). */
		if (o->readahead > PLACEFS_READAHEAD_MAX) {
			rc = placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "invalid -o readahead value '%s' (at most 1G; 0 = the "
			        "kernel default)",
			        ctx.readahead);
			goto out;
		}
	}
	if (ctx.index) {
		if (ctx.index[0] == '\0') {
			rc = placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                       "empty -o index value");
			goto out;
		}
		o->index = ctx.index;
		ctx.index = NULL;
	}

	rc = absolutize(o->source, &o->source_abs);
	if (rc < 0) {
		placefs_error_set(err, rc, PLACEFS_E_SOURCE, "source '%s': %s", o->source,
		                  strerror(-rc));
		goto out;
	}
	if (!realpath(ctx.mountpoint, resolved)) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_USAGE, "mountpoint '%s': %s",
		                       ctx.mountpoint, strerror(errno));
		goto out;
	}
	if (stat(resolved, &st) != 0 || !S_ISDIR(st.st_mode)) {
		rc = placefs_error_set(err, -ENOTDIR, PLACEFS_E_USAGE,
		                       "mountpoint '%s' is not a directory", ctx.mountpoint);
		goto out;
	}
	o->mountpoint = strdup(resolved);
	if (!o->mountpoint || add_forced_options(o) < 0) {
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
		goto out;
	}
	rc = 0;
out:
	free(ctx.buffer_size);
	free(ctx.index);
	free(ctx.device);
	free(ctx.read_mode);
	free(ctx.readahead);
	free(ctx.push_threads);
	free(ctx.disk_streams);
	free(ctx.max_background);
	free(ctx.zero_copy);
	free(ctx.direct_copy);
	free(ctx.lookahead);
	free(ctx.direct_reads);
	free(ctx.stage_timeout);
	free(ctx.max_waiting);
	free(ctx.user_share);
	free(ctx.max_threads);
	free(ctx.max_idle_threads);
	free(ctx.host_buffer);
	free(ctx.ring_size);
	free(ctx.mountpoint);
	free(ctx.extra);
	free(ctx.no_perms);
	free(ctx.misspelt);
	return rc;
}

void placefs_opts_release(struct placefs_opts *o)
{
	size_t i;

	if (!o)
		return;
	free(o->source);
	free(o->source_abs);
	free(o->mountpoint);
	free(o->index);
	for (i = 0; i < o->nprefixes; i++)
		free(o->prefixes[i]);
	free(o->prefixes);
	fuse_opt_free_args(&o->args);
	memset(o, 0, sizeof(*o));
}

void placefs_opts_usage(FILE *f, const char *prog)
{
	char hbuf[32], hbuf_host[32], rahead[32];

	/* Every default printed comes from its one definition (opts.h, backend.h). */
	compact_size(PLACEFS_HOST_BUFFER_DEFAULT_CUDA, hbuf, sizeof(hbuf));
	compact_size(PLACEFS_HOST_BUFFER_DEFAULT_HOST, hbuf_host, sizeof(hbuf_host));
	compact_size(PLACEFS_READAHEAD, rahead, sizeof(rahead));
	fprintf(f,
	        "usage: %s [options] SOURCE MOUNTPOINT\n"
	        "\n"
	        "Mounts a safetensors checkpoint (one .safetensors file, or a directory with or\n"
	        "without model.safetensors.index.json) read-only: one file per selected tensor.\n"
	        "\n"
	        "placefs options:\n"
	        "    -o buffer_size=SIZE    staging limit: tensors of at most SIZE bytes are\n"
	        "                           placed on the gpu, larger ones on the cpu\n"
	        "                           (default: $INSTANTTENSOR_BUFFER_SIZE, else no limit)\n"
	        "    -o prefix=P            select only tensors whose name starts with P\n"
	        "                           (repeatable; default: every tensor)\n"
	        "    -o index=FILE          index file, relative to the source directory\n"
	        "                           (default: model.safetensors.index.json if present)\n"
	        "    -o device=DEV          staging device: cuda:N, host or none (default: cuda:0\n"
	        "                           when a CUDA device is present, else none); a list\n"
	        "                           cuda:0,cuda:1,... or cuda:all (host:0,host:1,...\n"
	        "                           without a GPU) stages through one ring per device\n"
	        "    -o host_buffer=SIZE    pinned bounce memory for staging (default: %s with\n"
	        "                           cuda, %s with host)\n"
	        "    -o ring_size=SIZE      device memory of the staging ring (default: the\n"
	        "                           staging limit); at least the limit\n"
	        "    -o noprefetch          stage only what is asked for, nothing ahead\n"
	        "    -o lookahead=0|1       while a shard is staged, start the storage client's\n"
	        "                           fetches of the next 128 MiB of shards (default: 1\n"
	        "                           for shards on s3fs, else 0)\n"
	        "    -o direct_reads=0|1    read the shards with O_DIRECT, around the page cache\n"
	        "                           (FUSE sources only; default: 1 for shards on s3fs,\n"
	        "                           else 0)\n"
	        "    -o read_mode=MODE      how tensor bytes are served: mmap (default: one copy,\n"
	        "                           from a read-only mapping of each shard) or pread\n"
	        "    -o readahead=SIZE      kernel readahead for this mount, set through sysfs\n"
	        "                           when permitted (default: %s; 0 = kernel default)\n"
	        "    -o zero_copy=0|1       cuda: DMA straight from registered shard mappings\n"
	        "                           (default 0: pinned memory stays within host_buffer;\n"
	        "                           1 registers the shards' page cache: faster after the\n"
	        "                           first pass, slower on it)\n"
	        "    -o direct_copy=0|1     copy mode: bounce chunks straight into the caller's\n"
	        "                           memory (default 1); 0 copies through the ring\n"
	        "    -o push_threads=N      threads that fill the page cache ahead of a reader\n"
	        "                           that starts a tensor at byte 0 (default: %d = off)\n"
	        "    -o disk_streams=N      staging threads reading from the disk at once, for\n"
	        "                           bytes not in the page cache (default: %d, 0 for\n"
	        "                           shards on a FUSE file system; 0 = no limit);\n"
	        "                           page-cache reads are never held back\n"
	        "    -o max_threads=N       worker threads (default: %d, at most %d)\n"
	        "    -o max_background=N    readahead requests in flight, all readers together\n"
	        "                           (default: %d; the kernel caps it for non-root\n"
	        "                           users at /proc/sys/fs/fuse/max_user_bgreq)\n"
	        "    -o stage_timeout=S     longest wait for ring space of a stage that gives\n"
	        "                           no timeout (default: %d s; 0 = no limit)\n"
	        "    -o max_waiting=N       stages waiting on threads of their own at once;\n"
	        "                           more fail with EAGAIN (default: %d)\n"
	        "    -o user_share=PCT      ring share one user other than root and the\n"
	        "                           daemon's keeps while other users stage through the\n"
	        "                           ring; more fail with EBUSY then (default: %d)\n"
	        "\n"
	        "Options take the -o name=value form (also -o a=1,b=2), as mount(8) and fstab\n"
	        "pass them; --buffer-size and the like are refused. SIZE is digits with an\n"
	        "optional K, M, G, T, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB\n"
	        "(powers of 1000) suffix: 64M = 67108864, 64MB = 64000000.\n"
	        "\n"
	        /*
	         * libfuse's generic options, written here rather than by
	         * fuse_cmdline_help(), which gives its own default for max_threads
	         * (above, with placefs's).
	         */
	        "FUSE options:\n"
	        "    -h   --help            print help\n"
	        "    -V   --version         print version\n"
	        "    -d   -o debug          enable debug output (implies -f)\n"
	        "    -f                     foreground operation\n"
	        "    -s                     disable multi-threaded operation\n"
	        "    -o clone_fd            use separate fuse device fd for each thread\n"
	        "                           (may improve performance)\n"
	        "    -o max_idle_threads=N  the maximum number of idle worker threads\n"
	        "                           allowed (default: -1, no limit; at most %d)\n",
	        prog, hbuf, hbuf_host, rahead, PLACEFS_PUSH_THREADS, PLACEFS_GATE_STREAMS_DEFAULT,
	        PLACEFS_MIN_THREADS, PLACEFS_MAX_THREADS_MAX, PLACEFS_MAX_BACKGROUND,
	        PLACEFS_STAGE_TIMEOUT, PLACEFS_MAX_WAITING, PLACEFS_USER_SHARE,
	        PLACEFS_MAX_THREADS_MAX);
}
