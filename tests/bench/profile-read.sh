#!/bin/sh
# SPDX-License-Identifier: MIT
# Where a read through the mount spends its CPU time: `perf record -a -g`
# around a first read (fresh mount) and a repeated read of every tensor of a
# checkpoint with T readers (readbench, as in cpu-read.sh), then the hottest
# symbols per process (self time) and the hottest call-graph nodes (children).
# Needs perf and root (system-wide sampling, kernel symbols).
#
#   tests/bench/profile-read.sh [--layers N] [--threads T] [--opts MOUNT_OPTIONS] [--top K]
#
# Default: 8 layers (1.07 GB), 1 reader, the top 40 lines. The perf data and
# reports go to ${OUT:-/tmp}/profile-read-T.{first,repeat}.{data,self,children}.
. "$(dirname "$0")/common.sh"
layers=8
t=1
opts=device=none
top_n=40
while [ $# -gt 0 ]; do
	case $1 in
	--layers) layers=$2; shift ;;
	--threads) t=$2; shift ;;
	--opts) opts="$opts,$2"; shift ;;
	--top) top_n=$2; shift ;;
	*) echo "usage: $0 [--layers N] [--threads T] [--opts O] [--top K]" >&2; exit 2 ;;
	esac
	shift
done
command -v perf >/dev/null || { echo "profile-read: perf is not installed" >&2; exit 2; }
out=${OUT:-/tmp}
bench_work=$(mktemp -d /dev/shm/placefs-prof.XXXXXX)
mnt=$bench_work/mnt
bench_llama_manifests "$layers"
"$READBENCH" -t 4 "$bench_work/direct.txt" >/dev/null
echo "profile-read: $t reader(s), -o $opts; direct: $("$READBENCH" -t "$t" "$bench_work/direct.txt")"
bench_mount "$bench_work/ckpt" "$mnt" -o "$opts"
for pass in first repeat; do
	base=$out/profile-read-$t.$pass
	res=$(perf record -q -a -g -F 2999 -o "$base.data" "$READBENCH" -t "$t" "$bench_work/mount.txt")
	perf report -i "$base.data" --stdio --no-children --sort comm,sym 2>/dev/null |
		grep -E '^ +[0-9]' | head -n "$top_n" >"$base.self"
	perf report -i "$base.data" --stdio --children --sort sym 2>/dev/null |
		grep -E '^ +[0-9]' | head -n "$top_n" >"$base.children"
	echo "== $pass read under perf: $res"
	cat "$base.self"
done
bench_umount "$mnt"
