#!/bin/sh
# SPDX-License-Identifier: MIT
# Metadata-scale benchmark: a checkpoint of N tensors (default 100,000) in 100
# shards with an index. Measures, in one run: start to mounted, `ls -l` of the
# root, `getfattr -d` of 1,000 files (the same calls from Python where getfattr is
# not installed), `cat .placefs/plan.json`, the daemon's
# RSS; and, as the reference, `ls -l` of a tmpfs directory holding N empty
# files. RSS per tensor = (RSS with N tensors - RSS of the same daemon over a
# one-tensor checkpoint) / N. Staging is off (-o device=none) so a CUDA
# context does not hide the metadata's own memory; `mount-default` repeats the
# mount time with the default device.
#
# `ls -l` of coreutils 9.4 and later calls listxattr() on every file (an ACL
# probe); on FUSE each call is a LISTXATTR round trip, and the kernel caches
# none. xattrbench makes that one call per file, on the mount and on the tmpfs
# directory, so the run also prints the floor of any such listing over FUSE:
# the tmpfs `ls -l` plus N times the difference per call.
#
#   tests/bench/metadata.sh [--tensors N] [--shards K] [--opts MOUNT_OPTIONS]
. "$(dirname "$0")/common.sh"
n=100000
shards=100
opts=device=none
while [ $# -gt 0 ]; do
	case $1 in
	--tensors) n=$2; shift ;;
	--shards) shards=$2; shift ;;
	--opts) opts="$opts,$2"; shift ;;
	*) echo "usage: $0 [--tensors N] [--shards K] [--opts O]" >&2; exit 2 ;;
	esac
	shift
done
bench_work=$(mktemp -d /dev/shm/placefs-meta.XXXXXX)
src=$bench_work/ckpt
mnt=$bench_work/mnt
ref=$bench_work/ref
"$MKCKPT" --quiet --random "$n" --max-bytes 256 --shards "$shards" --index "$src"
mkdir -p "$ref"
(cd "$ref" && seq 1 "$n" | sed 's/^/random./' | xargs touch)

secs() {
	python3 -c "import sys; print('%.3f' % ((int(sys.argv[2]) - int(sys.argv[1])) / 1e9))" "$1" "$2"
}

rss_of() {
	awk '/VmRSS/ {print $2}' "/proc/$1/status"
}
"$MKCKPT" --quiet --tensor one:F32:4 "$bench_work/one.safetensors"
bench_mount "$bench_work/one.safetensors" "$mnt" -o device=none
ls -l "$mnt" >/dev/null
base=$(rss_of "$(bench_daemon_pid "$mnt")")
bench_umount "$mnt"
d0=$(now_ns)
bench_mount "$src" "$mnt"
d1=$(now_ns)
bench_umount "$mnt"

t0=$(now_ns)
bench_mount "$src" "$mnt" -o "$opts"
t1=$(now_ns)
ls -l "$mnt" >/dev/null
t2=$(now_ns)
ls -l "$mnt" >/dev/null
t3=$(now_ns)
if command -v getfattr >/dev/null 2>&1; then
	xtool="getfattr -d"
	ls "$mnt" | head -n 1000 | (cd "$mnt" && xargs getfattr -d >/dev/null)
else
	# The same calls as getfattr -d (listxattr, then getxattr of each name)
	# where the attr package is not installed (the GPU machine's image).
	xtool="listxattr+getxattr"
	ls "$mnt" | head -n 1000 | (cd "$mnt" && python3 -c '
import os, sys
for f in sys.stdin.read().split("\n"):
    if f:
        for k in os.listxattr(f):
            os.getxattr(f, k)
')
fi
t4=$(now_ns)
cat "$mnt/.placefs/plan.json" >/dev/null
t5=$(now_ns)
rss=$(rss_of "$(bench_daemon_pid "$mnt")")
cnt=$(ls "$mnt" | wc -l)
xm=$("$XATTRBENCH" "$mnt")
bench_umount "$mnt"
r0=$(now_ns)
ls -l "$ref" >/dev/null
r1=$(now_ns)
xr=$("$XATTRBENCH" "$ref")

echo "metadata: $n tensors in $shards shards ($cnt files listed), -o $opts, $(ls --version | head -n 1)"
printf '%-34s %10s\n' operation seconds
printf '%-34s %10s\n' "start to mounted (default device)" "$(secs "$d0" "$d1")"
printf '%-34s %10s\n' "start to mounted (device=none)" "$(secs "$t0" "$t1")"
printf '%-34s %10s\n' "ls -l root (first)" "$(secs "$t1" "$t2")"
printf '%-34s %10s\n' "ls -l root (second)" "$(secs "$t2" "$t3")"
printf '%-34s %10s\n' "$xtool of 1000 files" "$(secs "$t3" "$t4")"
printf '%-34s %10s\n' "cat .placefs/plan.json" "$(secs "$t4" "$t5")"
printf '%-34s %10s\n' "reference: ls -l tmpfs $n files" "$(secs "$r0" "$r1")"
printf '%-34s %10s\n' "ratio ls -l first / reference" \
	"$(python3 -c "print(round(($t2-$t1)/max(1,$r1-$r0),2))")"
xm_us=$(field us_per_call "$xm")
xr_us=$(field us_per_call "$xr")
printf '%-34s %10s\n' "listxattr per file, mount" "$xm_us us"
printf '%-34s %10s\n' "listxattr per file, tmpfs" "$xr_us us"
floor=$(python3 -c "print(round(($r1-$r0)/1e9 + $n*($xm_us-$xr_us)/1e6, 3))")
printf '%-34s %10s\n' "floor, ls -l + listxattr per file" "$floor"
printf '%-34s %10s\n' "floor / reference" "$(python3 -c "print(round($floor*1e9/max(1,$r1-$r0),2))")"
printf '%-34s %10s\n' "daemon RSS, base (1 tensor)" "$base kB"
printf '%-34s %10s\n' "daemon RSS, $n tensors" "$rss kB"
printf '%-34s %10s\n' "RSS per tensor beyond base" "$(( (rss - base) * 1024 / n )) B"
[ "$cnt" -eq "$n" ] || { echo "metadata: expected $n files, listed $cnt" >&2; exit 1; }
