# SPDX-License-Identifier: MIT
# Shared helpers for the live-mount tests (tests/mount-*.sh). Source it first:
#
#   . "$top_srcdir/tests/lib.sh"
#   require_fuse
#
# It re-runs the calling script under timeout(1) (TEST_TIMEOUT seconds, 50 by
# default) so that a hang fails instead of blocking `make check`; the signal
# goes to the whole process group, so a reader stuck on the mount dies too.
# An EXIT trap lazily unmounts every mount made through mount_fs, stops the
# daemons still running and removes the temporary directory.
#
# Tests wait for states, not for time: wait_for SECS CMD polls a condition
# (wait_mounted, wait_ready, wait_unmounted, wait_daemon, wait_stat and
# wait_line are built on it), and a mount is ready when it serves its
# .placefs/stats (mount_serves), never when the daemon's log says so. A sleep
# is left only where the time itself is the scenario, with a comment saying so.

: "${top_builddir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_srcdir:=$top_builddir}"
: "${TEST_TIMEOUT:=50}"

if [ -z "${PLACEFS_TEST_UNDER_TIMEOUT:-}" ] && command -v timeout >/dev/null 2>&1; then
	PLACEFS_TEST_UNDER_TIMEOUT=1
	export PLACEFS_TEST_UNDER_TIMEOUT top_builddir top_srcdir
	exec timeout -k 5 "$TEST_TIMEOUT" "${BASH:-/bin/bash}" "$0" "$@"
fi

set -u

PLACEFS=$top_builddir/fs/placefs
MKCKPT=$top_builddir/tools/placefs-mkckpt
PLAN=$top_builddir/tools/placefs-plan
SYSCALLS=$top_builddir/tests/test_syscalls
PYTHON=${PYTHON3:-python3}
TEST_NAME=$(basename "$0" .sh)

# The staging limit must come only from what each test passes.
unset INSTANTTENSOR_BUFFER_SIZE

TMP=$(mktemp -d "/tmp/placefs-$TEST_NAME.XXXXXX")
MOUNTS=""       # mountpoints made by mount_fs, for the EXIT trap
DAEMONS=""      # pids of foreground daemons started by mount_fs
MOUNT_PID=""    # pid of the last daemon started by mount_fs -f
MOUNT_LOG=""    # its stderr

cleanup() {
	local m p
	for m in $MOUNTS; do
		if is_mounted "$m"; then
			fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
		fi
	done
	for p in $DAEMONS; do
		kill -TERM "$p" 2>/dev/null
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "FAIL: $TEST_NAME interrupted (timeout?)" >&2; exit 124' TERM INT

fail() {
	echo "FAIL: $TEST_NAME: $*" >&2
	if [ -n "$MOUNT_LOG" ] && [ -s "$MOUNT_LOG" ]; then
		echo "--- daemon log ($MOUNT_LOG):" >&2
		if [ "$(wc -l <"$MOUNT_LOG")" -gt 60 ]; then
			head -n 45 "$MOUNT_LOG" >&2
			echo "..." >&2
			tail -n 10 "$MOUNT_LOG" >&2
		else
			cat "$MOUNT_LOG" >&2
		fi
	fi
	exit 1
}

note() {
	echo "$TEST_NAME: $*"
}

# Exits 77 (skip) only when FUSE is truly unavailable here.
require_fuse() {
	if [ ! -c /dev/fuse ]; then
		echo "SKIP: /dev/fuse is absent"
		exit 77
	fi
	if ! command -v fusermount3 >/dev/null 2>&1; then
		echo "SKIP: fusermount3 is absent"
		exit 77
	fi
	[ -x "$PLACEFS" ] || fail "$PLACEFS is not built"
	[ -x "$MKCKPT" ] || fail "$MKCKPT is not built"
	command -v "$PYTHON" >/dev/null 2>&1 || fail "python3 is required"
}

# Runs a command with a timeout (seconds, then the command).
tmo() {
	local secs=$1
	shift
	timeout -k 3 "$secs" "$@"
}

# Mount points in /proc/self/mountinfo are octal-escaped (space is \040).
escape_mnt() {
	printf '%s' "$1" | sed -e 's/\\/\\134/g' -e 's/ /\\040/g' -e 's/\t/\\011/g'
}

# True if a placefs mount sits on $1.
is_mounted() {
	local e
	e=$(escape_mnt "$1")
	awk -v m="$e" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { print $(i + 1); exit } }' \
		/proc/self/mountinfo | grep -q '^fuse\.placefs$'
}

# The mountinfo line of the mount on $1.
mount_line() {
	local e
	e=$(escape_mnt "$1")
	awk -v m="$e" '$5 == m' /proc/self/mountinfo
}

# wait_for SECS CMD [ARG...]: runs CMD until it succeeds (returns 0), polling
# every 50 ms, at most SECS*20 times (returns 1: the caller fails, saying what
# it waited for). For states, not time: a daemon that exits, a counter that
# reaches a value, a line or a file that appears. CMD must not block; wrap a
# read of the mount in tmo.
wait_for() {
	local n=$(($1 * 20))
	shift
	while ! "$@"; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || return 1
		sleep 0.05
	done
	return 0
}

# True if process $1 is gone (false for an empty $1: no process to watch).
gone() {
	[ -n "$1" ] && ! kill -0 "$1" 2>/dev/null
}

not_mounted() {
	! is_mounted "$1"
}

# mount_serves MOUNTPOINT: true when a placefs mount sits on MOUNTPOINT and
# answers through it (its .placefs/stats reads). The daemon writes its
# start-up lines to its log before it serves the first request, so from then
# on the log holds them all.
mount_serves() {
	is_mounted "$1" && tmo 5 cat "$1/.placefs/stats" >/dev/null 2>&1
}

# wait_mounted MOUNTPOINT [PID]: waits (10 s) until a placefs mount sits on
# MOUNTPOINT. Returns 1 on timeout or when daemon PID died first.
wait_mounted() {
	wait_for 10 _mounted_or_gone "$1" "${2:-}" && is_mounted "$1"
}
_mounted_or_gone() {
	is_mounted "$1" || gone "$2"
}

# wait_ready MOUNTPOINT [PID]: waits (10 s each) until MOUNTPOINT is mounted,
# then until it serves (mount_serves). Returns 1 on timeout or when daemon PID
# died first.
wait_ready() {
	wait_mounted "$1" "${2:-}" || return 1
	wait_for 10 _serves_or_gone "$1" "${2:-}" && mount_serves "$1"
}
_serves_or_gone() {
	mount_serves "$1" || gone "$2"
}

# Waits (10 s) until nothing is mounted on $1.
wait_unmounted() {
	wait_for 10 not_mounted "$1"
}

# mount_fs SOURCE MOUNTPOINT [placefs options...]
# Starts placefs in the foreground (-f) in the background, records its pid in
# MOUNT_PID and its stderr in MOUNT_LOG, and waits until the mount serves
# (wait_ready), so that tests can read the mount and grep the log at once.
mount_fs() {
	local src=$1 mp=$2
	shift 2
	mkdir -p "$mp"
	MOUNT_LOG=$TMP/daemon.$$.$RANDOM.log
	"$PLACEFS" -f "$@" "$src" "$mp" 2>"$MOUNT_LOG" &
	MOUNT_PID=$!
	DAEMONS="$DAEMONS $MOUNT_PID"
	MOUNTS="$MOUNTS $mp"
	wait_mounted "$mp" "$MOUNT_PID" || fail "placefs did not mount $src on $mp"
	wait_ready "$mp" "$MOUNT_PID" ||
		fail "placefs mounted $src on $mp, but $mp/.placefs/stats cannot be read through it (within 10 s)"
}

# umount_fs MOUNTPOINT: fusermount3 -u, then waits for the daemon started by
# the last mount_fs and checks that it exits with status 0.
umount_fs() {
	local mp=$1 st=0
	tmo 10 fusermount3 -u "$mp" || fail "fusermount3 -u $mp failed"
	wait_daemon "$MOUNT_PID" || st=$?
	[ "$st" -eq 0 ] || fail "placefs exited with status $st after fusermount3 -u"
	is_mounted "$mp" && fail "$mp still mounted after fusermount3 -u"
	return 0
}

# wait_daemon PID: waits (at most 10 s) for a background daemon; returns its status.
wait_daemon() {
	local pid=$1 st=0
	if ! wait_for 10 gone "$pid"; then
		echo "daemon $pid did not exit" >&2
		return 124
	fi
	wait "$pid" || st=$?
	DAEMONS=$(echo "$DAEMONS" | sed "s/\\b$pid\\b//")
	return $st
}

# stat_get MOUNTPOINT KEY.PATH: prints one value of the mount's .placefs/stats
# ("staging.ring_bytes") as Python prints it; returns 1, saying why on
# stderr, when the file cannot be read or lacks the key.
stat_get() {
	tmo 10 "$PYTHON" - "$1/.placefs/stats" "$2" <<'EOF'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
    for k in sys.argv[2].split("."):
        v = v[k]
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit("stat_get: %s in %s: %r" % (sys.argv[2], sys.argv[1], e))
print(v)
EOF
}

# stat_is MOUNTPOINT KEY.PATH VALUE: true when the stats say KEY is VALUE.
stat_is() {
	[ "$(stat_get "$1" "$2")" = "$3" ]
}

# wait_stat MOUNTPOINT KEY.PATH VALUE [SECS]: waits (5 s by default) until the
# stats say KEY is VALUE; fails the test otherwise, with the value last seen.
wait_stat() {
	wait_for "${4:-5}" stat_is "$1" "$2" "$3" ||
		fail "stats $2 is $(stat_get "$1" "$2"), expected $3 (within ${4:-5} s)"
}

# has_line FILE REGEX: true when FILE has a line matching the extended REGEX.
has_line() {
	grep -Eq "$2" "$1" 2>/dev/null
}

# wait_line FILE REGEX [SECS]: waits (10 s by default) until FILE has a line
# matching the extended REGEX. Returns 1 on timeout.
wait_line() {
	wait_for "${3:-10}" has_line "$1" "$2"
}

# The error name python gives for opening and reading a file ("OK" when it works).
py_read_errno() {
	"$PYTHON" - "$1" <<'EOF'
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    try:
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
EOF
}

# verify_mount MOUNTPOINT SOURCE [--index F] [--prefix P]... [--limit BYTES]
#              [--seed N] [--ranges K] [--threads T]
# Works out independently (its own safetensors header parser, index rules,
# prefix filter, placement and name encoding) what the mount must show, then
# checks: the root listing in checkpoint order, every tensor's size, xattrs and
# bytes against its source range, K random ranges per tensor (reads at and
# past the end included), the by-placement links, plan.json's tensors and
# metadata.json. With --threads T, T threads also read every tensor
# concurrently and compare SHA-256 digests.
verify_mount() {
	"$PYTHON" "$TMP/verify_mount.py" "$@"
}

cat >"$TMP/verify_mount.py" <<'PYEOF'
import argparse, hashlib, json, mmap, os, random, struct, sys, threading

ap = argparse.ArgumentParser()
ap.add_argument("mnt")
ap.add_argument("source")
ap.add_argument("--index")
ap.add_argument("--prefix", action="append", default=[])
ap.add_argument("--limit", type=int)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--ranges", type=int, default=4)
ap.add_argument("--threads", type=int, default=0)
a = ap.parse_args()
failures = []

def fail(msg):
    failures.append(msg)
    if len(failures) <= 20:
        print("FAIL: " + msg, file=sys.stderr)

def encode(name):
    out = name.replace("%", "%25").replace("/", "%2F")
    return "%2E" + out[1:] if out.startswith(".") else out

def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n), object_pairs_hook=dict)
    meta = h.pop("__metadata__", None)
    ts = []
    for name, v in h.items():
        b, e = v["data_offsets"]
        ts.append({"name": name, "dtype": v["dtype"], "shape": v["shape"],
                   "begin": b, "end": e, "offset": 8 + n + b, "nbytes": e - b})
    return meta, ts

if os.path.isdir(a.source):
    d = a.source
    idx = a.index
    if idx is None and os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        idx = "model.safetensors.index.json"
    if idx is not None:
        with open(os.path.join(d, idx)) as f:
            wmap = json.load(f)["weight_map"]
        files = sorted(set(wmap.values()), key=lambda s: s.encode())
    else:
        wmap = None
        files = sorted((x for x in os.listdir(d) if x.endswith(".safetensors")),
                       key=lambda s: s.encode())
else:
    d = os.path.dirname(a.source) or "."
    files = [os.path.basename(a.source)]
    wmap = None

tensors, metas = [], []
for f in files:
    meta, ts = header(os.path.join(d, f))
    metas.append((f, meta))
    ts.sort(key=lambda t: (t["begin"], t["end"], t["name"].encode()))
    for t in ts:
        if wmap is not None and wmap.get(t["name"]) != f:
            continue
        t["file"] = f
        t["path"] = os.path.join(d, f)
        tensors.append(t)
sel = [t for t in tensors if not a.prefix or any(t["name"].startswith(p) for p in a.prefix)]
for i, t in enumerate(sel):
    t["index"] = i  # the plan's entry number: the oracle's order is the plan's
    t["placement"] = "gpu" if a.limit is None or t["nbytes"] <= a.limit else "cpu"
    t["fname"] = encode(t["name"])

maps = {}
def src(t):
    if t["path"] not in maps:
        with open(t["path"], "rb") as f:
            maps[t["path"]] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return maps[t["path"]]

listing = os.listdir(a.mnt)
want = [".placefs"] + [t["fname"] for t in sel]
if listing != want:
    fail("root listing differs: %d entries, expected %d; first difference: %r" % (
        len(listing), len(want),
        next(((x, y) for x, y in zip(listing, want) if x != y), None)))

rng = random.Random(a.seed)
nranges = 0
for t in sel:
    p = os.path.join(a.mnt, t["fname"])
    try:
        st = os.stat(p)
    except OSError as e:
        fail("%s: stat: %s" % (t["fname"], e))
        continue
    if st.st_size != t["nbytes"]:
        fail("%s: size %d, expected %d" % (t["fname"], st.st_size, t["nbytes"]))
    xa = {k[len("user.placefs."):]: os.getxattr(p, k).decode() for k in os.listxattr(p)}
    exp = {"placement": t["placement"], "dtype": t["dtype"], "nbytes": str(t["nbytes"]),
           "source": t["file"], "offset": str(t["offset"]), "name": t["name"],
           "index": str(t["index"])}
    for k, v in exp.items():
        if xa.get(k) != v:
            fail("%s: xattr %s = %r, expected %r" % (t["fname"], k, xa.get(k), v))
    if "shape" not in xa or json.loads(xa["shape"]) != t["shape"]:
        fail("%s: xattr shape %r, expected %r" % (t["fname"], xa.get("shape"), t["shape"]))
    s = src(t)
    body = s[t["offset"]:t["offset"] + t["nbytes"]]
    with open(p, "rb", buffering=0) as f:
        chunks = []
        while True:
            c = f.read(1 << 20)
            if not c:
                break
            chunks.append(c)
        if b"".join(chunks) != body:
            fail("%s: content differs from %s@%d (+%d)" % (t["fname"], t["file"],
                                                         t["offset"], t["nbytes"]))
        n = t["nbytes"]
        fd = f.fileno()
        for _ in range(a.ranges):
            off = rng.randint(0, n + 16)
            ln = rng.randint(0, min(2 * n + 1, 3 << 20))
            r = os.pread(fd, ln, off)
            if r != body[off:off + ln]:
                fail("%s: pread(%d @ %d) returned %d bytes, not the source's" % (
                    t["fname"], ln, off, len(r)))
            nranges += 1

for pl in ("gpu", "cpu"):
    dp = os.path.join(a.mnt, ".placefs", "by-placement", pl)
    w = [t["fname"] for t in sel if t["placement"] == pl]
    got = os.listdir(dp)
    if got != w:
        fail("by-placement/%s lists %d links, expected %d" % (pl, len(got), len(w)))
    for x in got:
        if os.readlink(os.path.join(dp, x)) != "../../../" + x:
            fail("by-placement/%s/%s: wrong target" % (pl, x))

with open(os.path.join(a.mnt, ".placefs", "plan.json")) as f:
    pj = json.load(f)
ptens = [(x["name"], x["file"], x["offset"], x["nbytes"], x["placement"]) for x in pj["tensors"]]
etens = [(t["name"], t["file"], t["offset"], t["nbytes"], t["placement"]) for t in sel]
if ptens != etens:
    fail("plan.json tensors differ from the expected plan")
with open(os.path.join(a.mnt, ".placefs", "metadata.json")) as f:
    md = json.load(f, object_pairs_hook=lambda kv: kv)
md = [(k, dict(v) if v is not None else None) for k, v in md]
if md != metas:
    fail("metadata.json %r, expected %r" % (md, metas))

if a.threads:
    digests = {t["fname"]: hashlib.sha256(src(t)[t["offset"]:t["offset"] + t["nbytes"]]).hexdigest()
               for t in sel}
    errs = []
    def reader(k):
        # Even readers use O_DIRECT so that every read reaches the daemon
        # (the page cache is warm by now); odd ones read through the cache.
        order = list(sel)
        random.Random(k).shuffle(order)
        buf = mmap.mmap(-1, 1 << 20)
        flags = os.O_RDONLY | (os.O_DIRECT if k % 2 == 0 else 0)
        for t in order:
            h = hashlib.sha256()
            fd = os.open(os.path.join(a.mnt, t["fname"]), flags)
            try:
                off = 0
                while True:
                    n = os.preadv(fd, [buf], off)
                    if n <= 0:
                        break
                    h.update(buf[:n])
                    off += n
            finally:
                os.close(fd)
            if h.hexdigest() != digests[t["fname"]]:
                errs.append("reader %d: %s: digest differs" % (k, t["fname"]))
    th = [threading.Thread(target=reader, args=(k,)) for k in range(a.threads)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    for e in errs:
        fail(e)

total = sum(t["nbytes"] for t in sel)
print("verified %d tensors (%d bytes), %d random ranges%s: %s" % (
    len(sel), total, nranges, ", %d concurrent readers" % a.threads if a.threads else "",
    "%d failures" % len(failures) if failures else "ok"))
sys.exit(1 if failures else 0)
PYEOF
