# SPDX-License-Identifier: MIT
# Shared by tests/remote-s3.sh and tests/remote-sshfs.sh (scripts/test remote):
# placefs stacked on a network file system whose server runs on the loopback
# address. Source it after tests/lib.sh and require_fuse.
#
#   remote_mount_fuse NAME MNT CMD...  starts a FUSE client in the foreground
#                                      (CMD must take -f), in the background; the
#                                      pid of the subshell that waits for it goes
#                                      into REMOTE_PID_<NAME>, its log into
#                                      $TMP/NAME.log; waits until MNT serves
#   remote_umount MNT                  fusermount3 -u, lazily if it is busy
#   remote_checks MNT SRC              every check of a healthy stack (below)
#   remote_read MNT SRC [ARGS...]      tests/py/remote_check.py read
#   wait_read SECS MNT SRC ARGS...     polls remote_read until it passes
#
# SRC is the local copy of what the server holds: every byte read through the
# stack is compared with it. The EXIT trap (remote_cleanup) unmounts the
# placefs mounts, then the network mounts (lazily: nothing under $TMP is
# removed through them), stops the servers listed in REMOTE_SERVERS, then
# runs tests/lib.sh's cleanup.

REMOTE_MOUNTS=""  # network file systems mounted by remote_mount_fuse
REMOTE_SERVERS="" # pids of servers to stop at exit (each with the processes it started)
CHECK=$top_srcdir/tests/py/remote_check.py
STAGE=$top_builddir/tools/placefs-stage
LIMIT=32768 # -o buffer_size of the mounts: a few tensors are cpu-placed, the rest gpu-placed
PYTHONPATH=$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH

# True when anything is mounted on $1 (any file system type).
mounted_any() {
	local e
	e=$(escape_mnt "$1")
	awk -v m="$e" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo
}

# The pids of process $1's descendants, deepest first.
descendants() {
	local c
	for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		descendants "$c"
		echo "$c"
	done
}

# stop_server PID: SIGTERM to a server this test started and to the
# processes it started (an sshd's sessions), by pid; waits (5 s) for them.
stop_server() {
	local p all
	all="$(descendants "$1") $1"
	for p in $all; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in $all; do
		wait_for 5 gone "$p" || kill -KILL "$p" 2>/dev/null
	done
	wait "$1" 2>/dev/null
	return 0
}

# placefs first, its daemons gone before the network mounts and the servers
# go (a daemon closing its shards waits for the network client, which could
# otherwise be retrying a stopped server), then the network mounts, then the
# servers.
remote_cleanup() {
	local m p
	for m in $MOUNTS; do
		is_mounted "$m" && { tmo 10 fusermount3 -u "$m" 2>/dev/null ||
			fusermount3 -u -z "$m" 2>/dev/null; }
	done
	for p in $DAEMONS; do
		kill -TERM "$p" 2>/dev/null
		wait_for 10 gone "$p" || kill -KILL "$p" 2>/dev/null
	done
	for m in $REMOTE_MOUNTS; do
		mounted_any "$m" && { tmo 10 fusermount3 -u "$m" 2>/dev/null ||
			fusermount3 -u -z "$m" 2>/dev/null; }
	done
	for p in $REMOTE_SERVERS; do
		kill -0 "$p" 2>/dev/null && stop_server "$p"
	done
	cleanup
}
trap remote_cleanup EXIT

_serves_dir() {
	mounted_any "$1" && tmo 5 ls "$1" >/dev/null 2>&1
}

remote_mount_fuse() {
	local name=$1 mnt=$2 pid
	shift 2
	mkdir -p "$mnt"
	# In a subshell of its own, which logs how the client ended (s3fs 1.90
	# aborts when the last file of a lazily unmounted mount is closed).
	(
		"$@"
		echo "$1 exited with status $?"
	) >"$TMP/$name.log" 2>&1 &
	pid=$!
	eval "REMOTE_PID_$name=$pid"
	REMOTE_MOUNTS="$REMOTE_MOUNTS $mnt"
	wait_for 20 _serves_dir "$mnt" || {
		cat "$TMP/$name.log" >&2
		fail "$name did not mount on $mnt: $*"
	}
}

remote_umount() {
	tmo 10 fusermount3 -u "$1" 2>/dev/null || tmo 10 fusermount3 -u -z "$1" ||
		fail "cannot unmount $1"
}

# A python3 that imports torch (the loader's torch results), else $PYTHON.
remote_python() {
	local p
	for p in "$PYTHON" /usr/bin/python3; do
		if [ -x "$(command -v "$p")" ] && "$p" -c 'import torch' >/dev/null 2>&1; then
			echo "$p"
			return
		fi
	done
	echo "$PYTHON"
}

remote_read() {
	tmo 120 "$PYTHON" "$CHECK" read "$@"
}

# wait_read SECS MNT SRC ARGS...: remote_read until it passes (its last
# output in $TMP/wait_read.out), polling every 100 ms; 1 when SECS run out.
# A read that returns bytes other than the source's fails the test at once.
wait_read() {
	local n=$(($1 * 10)) rc
	shift
	while :; do
		rc=0
		remote_read "$@" >"$TMP/wait_read.out" 2>&1 || rc=$?
		[ "$rc" -eq 0 ] && return 0
		[ "$rc" -eq 2 ] &&
			fail "a read of $1 returned bytes other than the source's: $(cat "$TMP/wait_read.out")"
		n=$((n - 1))
		[ "$n" -gt 0 ] || return 1
		sleep 0.1
	done
}

# remote_checks MNT SRC: the tensor files byte-exact through verify_mount
# (sizes, xattrs, ranges, the plan), cat (cmp with the source range), mmap,
# the staging ioctls on the mount's host ring (placefs-stage --all --verify),
# the Python loader (load_state_dict, iter_weights; device cpu) and the views
# read with the package's stdlib safetensors reader.
remote_checks() {
	local mnt=$1 src=$2 py n=0 name file off len
	tmo 120 "$PYTHON" "$TMP/verify_mount.py" "$mnt" "$src" --limit "$LIMIT" --ranges 2 ||
		fail "verify_mount $mnt against $src"
	"$PYTHON" - "$mnt" >"$TMP/ranges" <<'EOF' || fail "cannot read $mnt/.placefs/plan.json"
import json, os, sys
import placefs
p = json.load(open(os.path.join(sys.argv[1], ".placefs", "plan.json")))
for i, t in enumerate(p["tensors"]):
    print("%s\t%s\t%d\t%d" % (placefs.TensorInfo(sys.argv[1], i, t).path, t["file"],
                              t["offset"], t["nbytes"]))
EOF
	while IFS='	' read -r name file off len; do
		tail -c +$((off + 1)) "$src/$file" | head -c "$len" >"$TMP/want"
		tmo 20 cat "$name" >"$TMP/got" || fail "cat $name"
		cmp -s "$TMP/want" "$TMP/got" || fail "cat $name differs from $file@$off (+$len)"
		n=$((n + 1))
	done <"$TMP/ranges"
	note "cat: $n tensor files equal their source ranges"
	tmo 60 "$PYTHON" "$CHECK" mmap "$mnt" "$src" || fail "mmap of the tensor files"
	tmo 60 "$STAGE" --all "$mnt" --verify -q >"$TMP/stage.out" 2>&1 || {
		cat "$TMP/stage.out"
		fail "placefs-stage --all --verify on $mnt"
	}
	note "$(tail -n 1 "$TMP/stage.out")"
	py=$(remote_python)
	[ "$py" = "$PYTHON" ] && ! "$py" -c 'import torch' >/dev/null 2>&1 &&
		note "torch does not import here: the loader checks run without it (PlacedTensor values)"
	tmo 120 "$py" -W ignore::RuntimeWarning "$CHECK" loader "$mnt" "$src" ||
		fail "the Python loader on $mnt"
	tmo 60 "$PYTHON" "$CHECK" views "$mnt" "$src" || fail "the views of $mnt"
}
# now_ms: the wall clock in milliseconds; since T: seconds from now_ms T to now.
now_ms() {
	echo $(($(date +%s%N) / 1000000))
}
since() {
	awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'
}
# flipped FILE: $TMP/flipped, a copy of FILE with every 4096th payload byte flipped, header kept.
flipped() {
	"$PYTHON" - "$1" "$TMP/flipped" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
for i in range(8 + n, len(b), 4096):
    b[i] ^= 0xFF
open(sys.argv[2], "wb").write(b)
EOF
}
