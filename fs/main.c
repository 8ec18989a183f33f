/* SPDX-License-Identifier: MIT */
/*
 * placefs: mounts a safetensors checkpoint read-only through libfuse3.
 *
 * Order: parse and validate the options -> open and validate the
 * checkpoint -> plan (and -o ring_size, checked against it) -> the mount
 * state (fs/mount.h) -> create the session (which rejects unknown libfuse
 * options) -> signal handlers -> fork the daemon -> create the staging
 * backend and the page-cache pushers -> build the tree (complete now: the
 * stager's line ends .placefs/plan) -> mount -> tell the waiting parent
 * (which exits 0 only now, once the mount is live) -> remove the shared
 * memory that killed placefs processes left -> log the plan summary and
 * staging line -> multithreaded loop -> end the staging waits and the
 * pushers -> unmount -> release in reverse order. Everything that can be
 * wrong with the command line, the checkpoint or the staging device is
 * found before anything is mounted.
 *
 * The fork comes before the staging backend because neither its threads nor
 * a CUDA context survive fork(); the parent waits for the child's verdict,
 * so failures still reach the terminal and the exit status.
 *
 * Exit status: 0 after a clean unmount (fusermount3 -u, umount, SIGTERM,
 * SIGINT, SIGHUP) or for -h/-V. Failures before mounting use placefs-plan's
 * statuses, so scripts can treat both tools alike: 1 other error, 2 bad
 * command line, 3 bad checkpoint, index or source, 4 invalid staging limit,
 * 5 empty selection, 6-8 duplicate or overlapping names, 9 a name that
 * cannot be a file name. Then 10: the FUSE session could not be set up or
 * mounted (libfuse says why: an unknown option, no /dev/fuse, ...), or
 * MOUNTPOINT is a mount point already (a live placefs, say); 11: the
 * session loop failed; 12: the staging backend could not be created (a
 * CUDA device asked for but absent, out of memory...).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "staging/backend.h"
#include "common/error.h"
#include "common/io.h"
#include "ioctl.h"
#include "log.h"
#include "mount.h"
#include "ops.h"
#include "opts.h"
#include "push.h"
#include "format/safetensors.h"
#include "common/size.h"

static void log_summary(const struct placefs_mount *m, const struct placefs_opts *o)
{
	struct placefs_strbuf sb;
	char lim[32];

	if (o->has_limit)
		placefs_size_format(o->limit, lim, sizeof(lim));
	placefs_log(LOG_INFO, "mounted '%s' on %s (read-only, %zu shard%s, staging limit %s%s%s%s)",
	            o->source, o->mountpoint, m->nshards, m->nshards == 1 ? "" : "s",
	            o->has_limit ? lim : "none", o->has_limit ? " from " : "",
	            o->has_limit ? o->limit_origin : "",
	            o->read_mode == PLACEFS_READ_MMAP ? ", read_mode=mmap" : ", read_mode=pread");
	placefs_strbuf_init(&sb);
	if (placefs_plan_format_summary(m->plan, &sb) == 0)
		placefs_log_lines(LOG_INFO, placefs_strbuf_cstr(&sb));
	placefs_strbuf_release(&sb);
	if (o->ring_size && !o->device_auto && o->device.kind == PLACEFS_DEVICE_NONE)
		placefs_log(LOG_NOTICE,
		            "-o ring_size=%llu ignored: staging is disabled (-o device=none), so "
		            "there is no ring",
		            (unsigned long long)o->ring_size);
}

/*
 * Whether fd lies on a FUSE file system (s3fs, sshfs, ...): with every shard
 * there the disk gate (-o disk_streams) is off unless the option is given. Such a
 * client answers each read over the network; more reads in flight help it,
 * and the gate's sweep in file order is meant for a disk (doc/STAGING.md,
 * "The disk gate on a network file system").
 */
static bool on_fuse(int fd)
{
	return placefs_io_on_fuse(fd);
}

/* Whether fd is on s3fs ("fuse.s3fs" in mountinfo): -o lookahead's default (lib/staging/lookahead.h). */
static bool on_s3fs(int fd)
{
	char type[64];

	return placefs_io_fs_type_name(fd, type, sizeof(type)) == 0 &&
	       strcmp(type, "fuse.s3fs") == 0;
}

/* Whether the checkpoint has shards and every one's descriptor passes `on`. */
static bool every_shard(const struct placefs_ckpt *ck, bool (*on)(int fd))
{
	size_t n = placefs_ckpt_shard_count(ck);

	for (size_t i = 0; i < n; i++)
		if (!on(placefs_ckpt_shard(ck, i)->fd))
			return false;
	return n > 0;
}

/*
 * -o direct_reads: O_DIRECT reads of every shard (lib/model/ckpt.h). Given
 * as 1, refused unless every shard lies on a FUSE file system (where O_DIRECT
 * reads need no alignment); by default on where every shard lies on s3fs
 * (all_s3fs, as main() found for the lookahead), which keeps what it fetched
 * in its own cache while the daemon holds the file open, so the page cache
 * would hold the checkpoint a second time.
 */
static int direct_reads_apply(struct placefs_mount *m, const struct placefs_ckpt *ck, int opt,
                              bool all_s3fs, struct placefs_error *err)
{
	size_t i, n = placefs_ckpt_shard_count(ck);
	int rc;

	if (opt < 0 || (opt == 0 && !all_s3fs))
		return 0;
	for (i = 0; i < n; i++)
		if (!on_fuse(placefs_ckpt_shard(ck, i)->fd))
			return placefs_error_set(
			        err, -EINVAL, PLACEFS_E_USAGE,
			        "-o direct_reads=1: shard %s is not on a FUSE file system "
			        "(O_DIRECT reads elsewhere must be aligned, and tensors are not)",
			        placefs_ckpt_shard(ck, i)->path);
	for (i = 0; i < n; i++) {
		rc = placefs_ckpt_shard_set_direct(ck, i, true, err);
		if (rc < 0)
			return rc;
	}
	m->direct_reads = true;
	return 0;
}

struct mount_at {
	const char *point;
	char *out;
	size_t len;
	bool found;
};

static int bdi_at(const struct placefs_mountinfo *mi, void *arg)
{
	struct mount_at *a = arg;

	if (strcmp(mi->point, a->point) == 0)
		snprintf(a->out, a->len, "%s", mi->dev);
	return 0;
}

/*
 * Finds the device number ("major:minor") of the mount on `mnt` in
 * /proc/self/mountinfo (the last entry wins: the top of a stack). Reading
 * mountinfo never touches the new mount, so this is safe before the loop runs.
 */
static void find_bdi(const char *mnt, char *out, size_t len)
{
	struct mount_at a = {.point = mnt, .out = out, .len = len};

	out[0] = '\0';
	placefs_io_mountinfo_each(bdi_at, &a);
}

static int type_at(const struct placefs_mountinfo *mi, void *arg)
{
	struct mount_at *a = arg;

	if (strcmp(mi->point, a->point) == 0) {
		a->found = true;
		snprintf(a->out, a->len, "%s", mi->type);
	}
	return 0;
}

/*
 * Whether `mnt` (a resolved path) is a mount point already, per
 * /proc/self/mountinfo: the file system type of the topmost mount there
 * into fstype, or "" when it is not one. libfuse3 would stack a second
 * mount on top of a live one without a word (it has no "nonempty" check).
 */
static bool mounted_on(const char *mnt, char *fstype, size_t len)
{
	struct mount_at a = {.point = mnt, .out = fstype, .len = len};

	fstype[0] = '\0';
	placefs_io_mountinfo_each(type_at, &a);
	return a.found;
}

/*
 * Replaces fuse_daemonize(), which forks after the mount: the staging
 * backend must be created in the process that serves, after the fork. In
 * the background the parent waits on a pipe and exits 0 when the child
 * calls daemon_ready(), or with the child's own exit status when it ends
 * first; the child keeps the terminal for its error messages until then.
 * Returns 0 in the child (or in the foreground), -1 when fork fails.
 */
static int daemon_start(int foreground, int *ready_fd)
{
	int p[2], st;
	ssize_t r;
	pid_t pid;
	char c;

	*ready_fd = -1;
	if (foreground)
		return chdir("/") == 0 ? 0 : -1;
	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid > 0) {
		/* Ctrl-C here ends the waiting parent, not the starting daemon. */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		close(p[1]);
		r = placefs_io_read_full(p[0], &c, 1);
		if (r == 1)
			_exit(PLACEFS_EXIT_OK);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : PLACEFS_EXIT_ERROR);
	}
	close(p[0]);
	setsid();
	if (chdir("/") != 0) {
		close(p[1]);
		return -1;
	}
	*ready_fd = p[1];
	return 0;
}

/* The mount is live: detach from the terminal and let the parent exit 0. */
static void daemon_ready(int *ready_fd)
{
	int fd;
	char c = 0;

	if (*ready_fd < 0)
		return;
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	if (placefs_io_write_full(*ready_fd, &c, 1) != 0)
		placefs_log(LOG_WARNING, "cannot tell the starting process that the mount is up");
	close(*ready_fd);
	*ready_fd = -1;
}

/*
 * Any local user can leave many names that look stale in /dev/shm: the
 * first PLACEFS_LOG_LIMIT_BURST removals are logged by name, the rest
 * counted and summed up in one line.
 */
struct stale_tally {
	uint64_t count, bytes;
};

static void report_stale(const char *name, uint64_t bytes, void *arg)
{
	struct stale_tally *t = arg;
	char sz[32];

	if (t->count++ >= PLACEFS_LOG_LIMIT_BURST) {
		t->bytes += bytes;
		return;
	}
	placefs_size_format(bytes, sz, sizeof(sz));
	placefs_log(LOG_NOTICE,
	            "removed /dev/shm/%s (%llu bytes, %s): left by a placefs process that no "
	            "longer exists",
	            name, (unsigned long long)bytes, sz);
}

/*
 * A daemon or client killed with SIGKILL cannot unlink its shared memory
 * (a host ring, a copy destination), which then holds its size of memory
 * until someone removes it: each daemon removes those of dead processes
 * when it starts.
 */
static void remove_stale_shm(void)
{
	struct stale_tally t = {0, 0};
	struct placefs_error err;
	char sz[32];

	placefs_error_clear(&err);
	if (placefs_shm_remove_stale(report_stale, &t, &err) < 0)
		placefs_log(LOG_WARNING, "%s", err.msg);
	if (t.count > PLACEFS_LOG_LIMIT_BURST) {
		placefs_size_format(t.bytes, sz, sizeof(sz));
		placefs_log(LOG_NOTICE,
		            "removed %llu more names of placefs processes that no longer exist "
		            "from /dev/shm (%llu bytes, %s)",
		            (unsigned long long)(t.count - PLACEFS_LOG_LIMIT_BURST),
		            (unsigned long long)t.bytes, sz);
	}
}

static int run_loop(struct fuse_session *se, const struct placefs_opts *o)
{
	struct fuse_loop_config *cfg;
	int ret;

	if (o->singlethread)
		return fuse_session_loop(se);
	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		placefs_log(LOG_ERR, "cannot create the loop configuration");
		return -ENOMEM;
	}
	fuse_loop_cfg_set_clone_fd(cfg, (unsigned int)o->clone_fd);
	fuse_loop_cfg_set_max_threads(cfg, o->max_threads);
	if (o->max_idle_threads != UINT_MAX)
		fuse_loop_cfg_set_idle_threads(cfg, o->max_idle_threads);
	ret = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return ret;
}

/*
 * CUDA's start for the devices the mount will stage to, beside the header
 * reads (placefs_backend_cuda_warm_start()): the first GPU by default (what
 * the default takes when there is one), every one for cuda:all, the CUDA
 * devices of a list; nothing for host or none.
 */
static int start_cuda(const struct placefs_opts *o, struct placefs_cuda_warm **out,
                      struct placefs_error *err)
{
	int devs[PLACEFS_DEVICES_MAX];
	unsigned n = 0;

	if (o->device_auto) {
		devs[n++] = 0;
	} else if (!o->devices.all) {
		for (unsigned i = 0; i < o->devices.n && i < PLACEFS_DEVICES_MAX; i++)
			if (o->devices.items[i].kind == PLACEFS_DEVICE_CUDA)
				devs[n++] = o->devices.items[i].index;
	}
	return placefs_backend_cuda_warm_start(devs, n, !o->device_auto && o->devices.all, out,
	                                       err);
}

int main(int argc, char *argv[])
{
	struct placefs_opts opts;
	struct placefs_error err;
	struct placefs_ckpt *ck = NULL;
	struct placefs_plan *plan = NULL;
	struct placefs_plan_options po;
	struct placefs_mount m;
	struct fuse_session *se = NULL;
	const struct fuse_lowlevel_ops *ops;
	size_t ops_size;
	int ready_fd = -1;
	int status = PLACEFS_EXIT_ERROR;
	bool gate_off_fuse = false, all_s3fs;
	struct placefs_cuda_warm *warm = NULL;
	int ret;

	memset(&opts, 0, sizeof(opts));
	memset(&m, 0, sizeof(m));
	placefs_error_clear(&err);

	if (placefs_opts_parse(argc, argv, &opts, &err) < 0) {
		fprintf(stderr, "placefs: %s\n", err.msg);
		status = placefs_error_exit_status(&err);
		goto out_opts;
	}
	if (opts.show_help) {
		/* Not fuse_cmdline_help(): its max_threads default is not placefs's. */
		placefs_opts_usage(stdout, "placefs");
		fflush(stdout);
		fuse_lowlevel_help();
		status = PLACEFS_EXIT_OK;
		goto out_opts;
	}
	if (opts.show_version) {
		/* The libraries as loaded now, and libfuse as built against. */
		printf("placefs %s\n"
		       "libfuse %s (built with %s)\n"
		       "cJSON %s\n",
		       PACKAGE_VERSION, fuse_pkgversion(), PLACEFS_BUILD_FUSE_VERSION,
		       placefs_json_version());
		fflush(stdout);
		fuse_lowlevel_version();
		status = PLACEFS_EXIT_OK;
		goto out_opts;
	}

	{
		char fstype[64];

		/* An autofs trigger (x-systemd.automount) is meant to be mounted over. */
		if (mounted_on(opts.mountpoint, fstype, sizeof(fstype)) &&
		    strcmp(fstype, "autofs") != 0) {
			fprintf(stderr,
			        "placefs: %s is already a mount point (%s); unmount it first "
			        "(fusermount3 -u %s) or choose another directory; nothing "
			        "mounted\n",
			        opts.mountpoint, fstype[0] ? fstype : "unknown type",
			        opts.mountpoint);
			status = PLACEFS_EXIT_MOUNT;
			goto out_opts;
		}
	}
	/*
	 * The daemon forks before it reads the checkpoint, so that work that
	 * does not need the plan runs beside the header reads (hundreds of
	 * milliseconds on a network file system) in the process that keeps it:
	 * a host ring's reservation, CUDA's start. Until daemon_ready() the child reports
	 * errors on this terminal and the starting process exits with its status.
	 */
	if (daemon_start(opts.foreground, &ready_fd) != 0) {
		fprintf(stderr, "placefs: cannot daemonize: %s\n", strerror(errno));
		status = PLACEFS_EXIT_MOUNT;
		goto out_opts;
	}
	if (start_cuda(&opts, &warm, &err) < 0) {
		fprintf(stderr, "placefs: %s; nothing mounted\n", err.msg);
		status = PLACEFS_EXIT_STAGING;
		goto out_opts;
	}
	if (!opts.device_auto && !opts.devices.all && opts.devices.n == 1 &&
	    opts.devices.items[0].kind == PLACEFS_DEVICE_HOST &&
	    placefs_host_reserve_start(opts.ring_size ? opts.ring_size : PLACEFS_PLAN_AUTO_RING,
	                               opts.host_buffer, &m.host_reserve, &err) < 0) {
		fprintf(stderr, "placefs: %s; nothing mounted\n", err.msg);
		status = PLACEFS_EXIT_STAGING;
		goto out_opts;
	}
	if (placefs_ckpt_open(opts.source_abs, opts.index, &ck, &err) < 0) {
		fprintf(stderr, "placefs: %s\n", err.msg);
		status = placefs_error_exit_status(&err);
		goto out_opts;
	}
	if (!opts.disk_streams_given && opts.disk_streams > 0 && every_shard(ck, on_fuse)) {
		opts.disk_streams = 0;
		gate_off_fuse = true;
	}
	memset(&po, 0, sizeof(po));
	po.prefixes = (const char *const *)opts.prefixes;
	po.nprefixes = opts.nprefixes;
	po.has_limit = opts.has_limit;
	po.limit = opts.limit;
	if (placefs_plan_create(placefs_ckpt_tensors(ck), placefs_ckpt_tensor_count(ck), &po, &plan,
	                        &err) < 0) {
		fprintf(stderr, "placefs: %s\n", err.msg);
		status = placefs_error_exit_status(&err);
		goto out_ckpt;
	}
	/* With -o device=none there is no ring: the option is noted in the log, not applied. */
	if (opts.ring_size && (opts.device_auto || opts.device.kind != PLACEFS_DEVICE_NONE) &&
	    placefs_plan_set_ring_bytes(plan, opts.ring_size, "-o ring_size", &err) < 0) {
		fprintf(stderr, "placefs: %s\n", err.msg);
		status = placefs_error_exit_status(&err);
		goto out_plan;
	}
	if (placefs_mount_init(&m, &opts, ck, plan, &err) < 0) {
		fprintf(stderr, "placefs: %s\n", err.msg);
		status = placefs_error_exit_status(&err);
		goto out_mount_state;
	}
	all_s3fs = every_shard(ck, on_s3fs);
	m.lookahead = opts.lookahead > 0 || (opts.lookahead == 0 && all_s3fs);
	if (direct_reads_apply(&m, ck, opts.direct_reads, all_s3fs, &err) < 0) {
		fprintf(stderr, "placefs: %s\n", err.msg);
		status = placefs_error_exit_status(&err);
		goto out_mount_state;
	}

	status = PLACEFS_EXIT_MOUNT;
	ops = placefs_ops_table(&ops_size);
	se = fuse_session_new(&opts.args, ops, ops_size, &m);
	if (!se) {
		/* libfuse has printed the reason (an unknown option, most often). */
		fprintf(stderr, "placefs: cannot create the FUSE session; nothing mounted\n");
		goto out_mount_state;
	}
	m.se = se;
	/*
	 * libfuse only takes over signals still at their default action, and a
	 * shell without job control starts background commands with SIGINT
	 * ignored: reset them so that SIGINT, SIGTERM and SIGHUP always end the
	 * daemon cleanly.
	 */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	/*
	 * Copies into client shared memory are pwrite()s: past RLIMIT_FSIZE they
	 * must fail with EFBIG for that client, not end the daemon with SIGXFSZ.
	 */
	signal(SIGXFSZ, SIG_IGN);
	if (fuse_set_signal_handlers(se) != 0) {
		fprintf(stderr, "placefs: cannot install signal handlers\n");
		goto out_session;
	}
	status = PLACEFS_EXIT_STAGING;
	placefs_backend_cuda_warm_free(warm);
	warm = NULL;
	if (placefs_ioctl_create(&m, &m.stage, &err) < 0) {
		fprintf(stderr, "placefs: %s; nothing mounted\n", err.msg);
		goto out_signals;
	}
	/* Taken by the host stager, or never to be: given back either way. */
	placefs_host_reserve_free(m.host_reserve);
	m.host_reserve = NULL;
	status = PLACEFS_EXIT_MOUNT;
	if (placefs_push_create(&m, opts.push_threads, &m.push, &err) < 0) {
		fprintf(stderr, "placefs: %s; nothing mounted\n", err.msg);
		goto out_stage;
	}
	/* The tree last, complete: nothing in it changes once the mount is live. */
	if (placefs_mount_make_tree(&m, placefs_ioctl_plan_line(m.stage), &err) < 0) {
		fprintf(stderr, "placefs: %s\n", err.msg);
		status = placefs_error_exit_status(&err);
		goto out_push;
	}
	if (fuse_session_mount(se, opts.mountpoint) != 0) {
		fprintf(stderr, "placefs: cannot mount on %s\n", opts.mountpoint);
		goto out_push;
	}
	find_bdi(opts.mountpoint, m.bdi, sizeof(m.bdi));
	daemon_ready(&ready_fd);
	if (!opts.foreground)
		placefs_log_to_syslog(1);
	remove_stale_shm();
	if (!m.check_reads)
		placefs_log(LOG_WARNING, "PLACEFS_TEST_SKIP_READ_CHECK is set: reads do not "
		                         "verify their shard first (testing only)");
	/*
	 * Every start-up line is written (stderr is unbuffered) before run_loop()
	 * answers the first request: tests/lib.sh takes a readable .placefs/stats
	 * to mean "mounted, and the start-up log complete".
	 */
	log_summary(&m, &opts);
	placefs_ioctl_log(m.stage);
	if (m.lookahead)
		placefs_log(LOG_INFO,
		            "lookahead: reading a shard starts the storage client's "
		            "fetches of the next 128 MiB of shards (%s)",
		            opts.lookahead > 0 ? "-o lookahead=1"
		                               : "shards on s3fs; -o lookahead=0 turns it off");
	if (m.direct_reads)
		placefs_log(LOG_INFO, "direct reads: the shards are read with O_DIRECT (%s)",
		            opts.direct_reads > 0
		                    ? "-o direct_reads=1"
		                    : "shards on s3fs, which caches them itself; -o direct_reads=0 "
		                      "reads through the page cache");
	if (gate_off_fuse && placefs_ioctl_plan_line(m.stage)[0])
		placefs_log(LOG_INFO, "the shards are on a FUSE file system: staging reads are not "
		                      "held back by the disk gate (-o disk_streams=N sets one)");

	ret = run_loop(se, &opts);
	if (ret == 0 || ret == SIGTERM || ret == SIGINT || ret == SIGHUP) {
		placefs_log(LOG_INFO, "unmounting %s", opts.mountpoint);
		status = PLACEFS_EXIT_OK;
	} else {
		placefs_log(LOG_ERR, "session loop failed (%d); unmounting %s", ret,
		            opts.mountpoint);
		status = PLACEFS_EXIT_LOOP;
	}
	/* Replies from staging threads must not outlive the session's descriptor. */
	placefs_ioctl_shutdown(m.stage);
	placefs_push_stop(m.push);
	fuse_session_unmount(se);
out_push:
	placefs_push_free(m.push);
	m.push = NULL;
out_stage:
	placefs_ioctl_free(m.stage);
	m.stage = NULL;
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_mount_state:
	placefs_mount_release(&m);
out_plan:
	placefs_plan_free(plan);
out_ckpt:
	placefs_ckpt_free(ck);
out_opts:
	placefs_backend_cuda_warm_free(warm);
	placefs_host_reserve_free(m.host_reserve);
	placefs_opts_release(&opts);
	return status;
}
