#!/bin/sh
# SPDX-License-Identifier: MIT
# A cold one-shot load over s3fs: the checkpoint in a bucket of s3rver (an
# S3-compatible server from the npm registry, installed into build/s3rver as
# scripts/test's remote layer does) on 127.0.0.1, read through s3fs mounted
# as README.md's fstab line mounts it (ro,stat_cache_expire=1, no local cache
# directory: s3fs's default use_cache=""). In one run, rows in turn, each on
# a fresh s3fs mount with the page cache dropped first (echo 3 >
# /proc/sys/vm/drop_caches; s3fs keeps what it fetched for an object only
# while a descriptor of it is open, so a fresh mount fetches everything
# again):
#   - cat: every shard file of the s3fs mount to /dev/null, one after another;
#   - reader: every shard read straight from the s3fs mount by
#     safetensors.torch.load_file where that imports, else by the package's
#     stdlib reader (placefs.safetensors.read: one read() of the file, each
#     tensor's bytes cut from it), timed in the process once it is imported;
#   - placefs load: from the placefs command that mounts the s3fs mount to
#     the return of placefs.load_state_dict(mnt, device="cpu") (every tensor
#     in host memory, staged through a host ring; torch tensors where torch
#     imports, else PlacedTensor copies), timed in the process, torch and the
#     package imported before;
#   - placefs-stage: from the mount to the end of placefs-stage --all --mode
#     copy (the C client, the same ring).
# Each placefs row is repeated per -o disk_streams value of --streams
# (default "-": the daemon's default, which leaves the gate off for shards on
# FUSE). --opts "O ..." repeats them per set of mount options O ("-": none;
# several sets: an A/B within each round, rows in turn), e.g. --opts
# "- lookahead=0" or "- direct_reads=0" against the defaults on s3fs.
# --timeline adds, under each row, the server's CPU over the row in
# 50 ms bins (its share of one CPU, from /proc/PID/stat sampled every 20 ms by
# one extra process; USER_HZ ticks make a bin coarse) and, for placefs rows,
# the bin in which the mount command returned: where the server waits; and,
# from the server's request log (each line stamped as it comes), the gaps
# of over 5 ms in which no request was outstanding: the server waiting for
# the client. (A row on a fresh s3fs mount, `cat` as well, may open with
# 0.2-0.35 s of empty CPU bins although its first request reaches the
# server within 5 ms.)
# GB/s is the tensor bytes (placefs rows) or the shard files' bytes (cat,
# reader) over the wall time; every round prints each row with its
# ratio to cat of the same round and the machine's CPU over it (busy share,
# CPU-seconds per GB: what the server, s3fs, placefs and the reader took, and
# the server's own CPU-seconds);
# the summary gives each row's median.
# Needs root (drop_caches), s3fs, node and npm (or build/s3rver already).
#
#   tests/bench/remote.sh [--llama L:H:I:V] [--shards N] [--rounds N] [--streams "N ..."]
#                         [--opts "O ..."] [--timeline]
#
# Results: stdout and ${OUT:-/tmp}/remote.txt.
. "$(dirname "$0")/common.sh"
llama=3:2048:5504:8192
shards=4
rounds=3
streams=-
optsets=-
timeline=0
while [ $# -gt 0 ]; do
	case $1 in
	--llama) llama=$2; shift ;;
	--shards) shards=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--streams) streams=$2; shift ;;
	--opts) optsets=$2; shift ;;
	--timeline) timeline=1 ;;
	*) echo "usage: $0 [--llama L:H:I:V] [--shards N] [--rounds N] [--streams \"N ...\"] [--opts \"O ...\"] [--timeline]" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" -eq 0 ] || { echo "remote: needs root to drop the page cache" >&2; exit 77; }
command -v s3fs >/dev/null 2>&1 || { echo "remote: s3fs is not installed (apt-get install s3fs)" >&2; exit 2; }
. "$top/scripts/deps.sh"
S3RVER_DIR=${PLACEFS_S3RVER_DIR:-$top/build/s3rver}
placefs_s3rver "$S3RVER_DIR" || exit 2
S3RVER=$S3RVER_DIR/node_modules/.bin/s3rver
# A python3 with torch (the loader's torch results and load_file), else python3.
PY=python3
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
res=${OUT:-/tmp}/remote.txt
: >"$res"
say() {
	printf '%s\n' "$*" | tee -a "$res"
}
cold() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

bench_work=$(mktemp -d /var/tmp/placefs-remote.XXXXXX)
W=$bench_work/w
R=$bench_work/r
mnt=$bench_work/mnt
s3pid=
remote_cleanup() {
	set +e
	for m in $mnt $R $W; do
		grep -qs " $m fuse" /proc/self/mounts && { fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m"; }
	done
	[ -z "$s3pid" ] || { kill "$s3pid" 2>/dev/null; wait "$s3pid" 2>/dev/null; }
	rm -rf "$bench_work"
}
trap remote_cleanup EXIT INT TERM

"$MKCKPT" --quiet --llama "$llama" --shards "$shards" --index "$bench_work/ckpt"
printf 'S3RVER:S3RVER\n' >"$bench_work/passwd"
chmod 600 "$bench_work/passwd"
if [ "$timeline" = 1 ]; then
	# The server's request log, each line stamped (ns) as it comes: the
	# request timeline under each row (bins()).
	"$S3RVER" -d "$bench_work/s3data" -a 127.0.0.1 -p 0 --configure-bucket ckpt 2>&1 |
		python3 -u -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write("%d %s" % (time.time_ns(), line))' >"$bench_work/s3rver.log" &
else
	"$S3RVER" -d "$bench_work/s3data" -a 127.0.0.1 -p 0 --configure-bucket ckpt -s >"$bench_work/s3rver.log" 2>&1 &
	s3pid=$!
fi
i=0
until grep -q 'listening on' "$bench_work/s3rver.log"; do
	i=$((i + 1))
	[ $i -lt 200 ] || { echo "remote: s3rver did not start" >&2; cat "$bench_work/s3rver.log" >&2; exit 1; }
	sleep 0.05
done
if [ -z "$s3pid" ]; then
	for p in $(pgrep -f -- "$bench_work/s3data"); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" != node ] || s3pid=$p
	done
	[ -n "$s3pid" ] || { echo "remote: cannot find the s3rver process" >&2; exit 1; }
fi
port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$bench_work/s3rver.log")
s3mount() { # MNT [OPTIONS]
	mkdir -p "$1"
	s3fs ckpt "$1" -o "passwd_file=$bench_work/passwd,url=http://127.0.0.1:$port,use_path_request_style${2:+,$2}"
	i=0
	until grep -qs " $1 fuse.s3fs" /proc/self/mounts && ls "$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 200 ] || { echo "remote: s3fs did not mount on $1" >&2; exit 1; }
		sleep 0.05
	done
}
s3mount "$W"
cp "$bench_work/ckpt"/* "$W"/
fusermount3 -u "$W"
set -- "$bench_work/ckpt"/*.safetensors
files=$(for f in "$@"; do basename "$f"; done)
total=$(bench_bytes remote "$bench_work/ckpt" "$@")
tensor_bytes=$("$PLAN" --json "$bench_work/ckpt" | python3 -c 'import json, sys; print(sum(t["nbytes"] for t in json.load(sys.stdin)["tensors"]))')
say "remote bench: $(nproc) cpus, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo), $(uname -r)," \
	"s3rver $("$S3RVER" --version) (node $(node --version)) and $(s3fs --version 2>&1 | head -n 1 | sed 's/ (commit.*//') on 127.0.0.1"
say "checkpoint: --llama $llama, $shards shards, $total bytes in the shard files, $tensor_bytes tensor bytes; rounds $rounds"
ROPTS=ro,stat_cache_expire=1

# row NAME BYTES CMD...: on a fresh s3fs mount of the bucket at $R, cold; prints "NAME: G GB/s".
row() {
	name=$1 bytes=$2
	shift 2
	s3mount "$R" "$ROPTS"
	cold
	c0=$(cpu_ticks)
	v0=$(proc_ticks "$s3pid")
	: >"$bench_work/row.tl"
	if [ "$timeline" = 1 ]; then
		n0=$(wc -l <"$bench_work/s3rver.log")
		# Sampling from before the clock starts (the sampler's start is not the row's).
		sampler "$s3pid" >"$bench_work/tl" &
		tlpid=$!
		until [ -s "$bench_work/tl" ]; do sleep 0.01; done
	fi
	t0=$(now_ns)
	"$@" >"$bench_work/row.out" 2>&1 || { cat "$bench_work/row.out" >&2; echo "remote: $name failed" >&2; exit 1; }
	t1=$(now_ns)
	[ "$timeline" = 0 ] || { kill "$tlpid"; wait "$tlpid" 2>/dev/null || :; sleep 0.1; bins "$t0" "$t1" "$n0" >"$bench_work/row.tl"; }
	# A command that times itself (past its interpreter's start) says so: "elapsed_ns=N".
	e=$(sed -n 's/^elapsed_ns=//p' "$bench_work/row.out")
	[ -z "$e" ] || t1=$((t0 + e))
	e=$(sed -n 's/^cpu_at_start=//p' "$bench_work/row.out")
	[ -z "$e" ] || c0=$e
	c1=$(cpu_ticks)
	v1=$(proc_ticks "$s3pid")
	# The machine's CPU over the row (every process: the server, s3fs, placefs, the
	# reader), and the server's own.
	python3 -c "
b0, a0 = map(int, '$c0'.split()); b1, a1 = map(int, '$c1'.split()); hz = $(getconf CLK_TCK)
print('cpu %.0f%% busy, %.2f CPU-s per GB, s3rver %.2f CPU-s' % (100 * (b1 - b0) / max(1, a1 - a0),
      (b1 - b0) / hz / ($bytes / 1e9), ($v1 - $v0) / hz))" >"$bench_work/row.cpu"
	grep -qs " $mnt fuse" /proc/self/mounts && fusermount3 -u "$mnt"
	# The daemon closes its shards as it exits: s3fs is busy until then.
	i=0
	until fusermount3 -u "$R" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 100 ] || { echo "remote: cannot unmount $R" >&2; exit 1; }
		sleep 0.05
	done
	python3 -c "print('%.3f' % ($bytes / (($t1 - $t0) / 1e9) / 1e9))"
}
# sampler PID: "NS TICKS" lines, PID's CPU ticks every 20 ms, until killed.
sampler() {
	exec python3 -c '
import sys, time
path = "/proc/%s/stat" % sys.argv[1]
while True:
    with open(path) as f:
        s = f.read().rsplit(")", 1)[1].split()
    sys.stdout.write("%d %d\n" % (time.time_ns(), int(s[11]) + int(s[12])))
    sys.stdout.flush()
    time.sleep(0.02)' "$1"
}
# bins T0 T1 N0: the sampler's ticks of [T0, T1] as a share of one CPU per 50
# ms, from "start_ns=N" to that plus "elapsed_ns=N" in row.out where a row
# times itself (past its interpreter's start, before its exit), and the bin
# of "mounted_ns=N" (a placefs row's mount returning); then the requests of
# the server's log past its line N0 (each a response's end stamp and its
# duration): where none was outstanding for over 5 ms, in ms from the row's
# start, the server waiting for the client.
bins() {
	python3 - "$1" "$2" "$bench_work/tl" "$bench_work/row.out" "$(getconf CLK_TCK)" \
		"$bench_work/s3rver.log" "$3" <<'PY'
import re, sys
t0, t1, hz = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[5])
out = open(sys.argv[4]).read()
st = re.search(r"^start_ns=(\d+)", out, re.M)
if st:
    t0 = int(st.group(1))
    # The row's end as it timed itself, not its process's exit (an
    # interpreter tearing down torch and its mappings is not in the row).
    el = re.search(r"^elapsed_ns=(\d+)", out, re.M)
    if el:
        t1 = t0 + int(el.group(1))
pts = [tuple(map(int, l.split())) for l in open(sys.argv[3]) if len(l.split()) == 2]
b = {}
for (ta, va), (tb, vb) in zip(pts, pts[1:]):
    if t0 <= tb <= t1:
        k = (tb - t0) // 50_000_000
        b[k] = b.get(k, 0) + vb - va
n = (t1 - t0) // 50_000_000 + 1
m = re.search(r"^mounted_ns=(\d+)", out, re.M)
line = "  server CPU per 50 ms (%%): %s" % " ".join(
    "%d" % round(100 * b.get(k, 0) / hz / 0.05) for k in range(n))
if m:
    line += "; mounted in bin %d" % ((int(m.group(1)) - t0) // 50_000_000)
print(line)
iv = []
for raw in open(sys.argv[6]).read().splitlines()[int(sys.argv[7]):]:
    r = re.match(r"(\d+) info: \S+ \d{3} (\d+)ms", re.sub(r"\x1b\[[0-9;]*m", "", raw))
    if r:
        end = (int(r.group(1)) - t0) / 1e6
        iv.append((end - int(r.group(2)), end))
iv.sort()
gaps, reach = [], None
for a, b in iv:
    if reach is not None and a > reach + 5:
        gaps.append((reach, a))
    reach = b if reach is None else max(reach, b)
if iv:
    print("  requests: %d, the first at %.0f ms, the last done at %.0f ms; none outstanding "
          "for %.0f ms in %d gaps over 5 ms: %s" % (
              len(iv), iv[0][0], reach, sum(b - a for a, b in gaps), len(gaps),
              " ".join("%.0f-%.0f" % g for g in gaps)))
PY
}
# proc_ticks PID: the user and system ticks of process PID so far.
proc_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}
# cpu_ticks: busy and all ticks of every CPU so far (/proc/stat's cpu line).
cpu_ticks() {
	awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}
cat_all() {
	for f in $files; do cat "$R/$f"; done >/dev/null
}
reader() {
	PYTHONPATH="$top/python" "$PY" - "$R" $files <<'EOF'
import os, sys, time
d = sys.argv[1]
try:
    from safetensors.torch import load_file as read
    how = "safetensors.torch.load_file"
except ImportError:
    from placefs.safetensors import read
    how = "placefs.safetensors.read"
with open("/proc/stat") as f:
    v = [int(x) for x in f.readline().split()[1:9]]
print("cpu_at_start=%d %d" % (v[0] + v[1] + v[2] + v[5] + v[6] + v[7], sum(v)))
print("start_ns=%d" % time.time_ns())
t0 = time.perf_counter_ns()
for f in sys.argv[2:]:
    read(os.path.join(d, f))
print(how)
print("elapsed_ns=%d" % (time.perf_counter_ns() - t0))
EOF
}
placefs_load() {
	# $1: the placefs options. Timed from the mount command, torch and the package imported first.
	PYTHONPATH="$top/python" "$PY" -W ignore::RuntimeWarning - "$PLACEFS" "$1" "$R" "$mnt" <<'EOF'
import subprocess, sys, time
import placefs
try:
    import torch  # noqa: F401
except ImportError:
    pass
placefs_bin, opts, src, mnt = sys.argv[1:5]
with open("/proc/stat") as f:
    v = [int(x) for x in f.readline().split()[1:9]]
print("cpu_at_start=%d %d" % (v[0] + v[1] + v[2] + v[5] + v[6] + v[7], sum(v)))
print("start_ns=%d" % time.time_ns())
t0 = time.perf_counter_ns()
subprocess.run([placefs_bin, "-o", opts, src, mnt], check=True)
print("mounted_ns=%d" % time.time_ns())
sd = placefs.load_state_dict(mnt, device="cpu")
print("elapsed_ns=%d" % (time.perf_counter_ns() - t0))
EOF
}
placefs_stage() {
	"$PLACEFS" -o "$1" "$R" "$mnt" && echo "mounted_ns=$(now_ns)" &&
		"$PLACEFS_STAGE" --all "$mnt" --mode copy -q
}

mkdir -p "$mnt"
rows=
for r in $(seq 1 "$rounds"); do
	c=$(row cat "$total" cat_all) || exit 1
	say "round $r: cat of the shard files: $c GB/s; $(cat "$bench_work/row.cpu")"
	[ ! -s "$bench_work/row.tl" ] || say "$(cat "$bench_work/row.tl")"
	g=$(row reader "$total" reader) || exit 1
	say "round $r: reader on the s3fs mount ($(grep -v = "$bench_work/row.out" | head -n 1)): $g GB/s ($(ratio "$g" "$c") x cat); $(cat "$bench_work/row.cpu")"
	[ ! -s "$bench_work/row.tl" ] || say "$(cat "$bench_work/row.tl")"
	rows="${rows}cat $c
reader $g
"
	for ov in $optsets; do
	for ds in $streams; do
		extra=
		[ "$ov" = - ] || extra=,$ov
		opts=device=host$extra
		lab=${extra:+ ${extra#,}}
		[ "$ds" = - ] || { opts="$opts,disk_streams=$ds"; lab="$lab disk_streams=$ds"; }
		l=$(row load "$tensor_bytes" placefs_load "$opts") || exit 1
		say "round $r: placefs load_state_dict(device=cpu)$lab: $l GB/s ($(ratio "$l" "$c") x cat); $(cat "$bench_work/row.cpu")"
		[ ! -s "$bench_work/row.tl" ] || say "$(cat "$bench_work/row.tl")"
		s=$(row stage "$tensor_bytes" placefs_stage "$opts") || exit 1
		say "round $r: placefs-stage --all --mode copy$lab: $s GB/s ($(ratio "$s" "$c") x cat); $(cat "$bench_work/row.cpu")"
		[ ! -s "$bench_work/row.tl" ] || say "$(cat "$bench_work/row.tl")"
		rows="${rows}load$lab $l
stage$lab $s
"
	done
	done
done
say "median over $rounds rounds (GB/s, and x the median of cat):"
printf '%s' "$rows" | python3 -c '
import statistics, sys
by = {}
for line in sys.stdin:
    name, g = line.rsplit(" ", 1)
    by.setdefault(name, []).append(float(g))
cat = statistics.median(by["cat"])
for name, v in by.items():
    m = statistics.median(v)
    print("  %-28s %.3f  %.2f x cat  (%s)" % (name, m, m / cat, " ".join("%.3f" % x for x in v)))
' | tee -a "$res"
