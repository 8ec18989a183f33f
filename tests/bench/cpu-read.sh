#!/bin/sh
# SPDX-License-Identifier: MIT
# CPU-read benchmark: every tensor of a multi-GiB checkpoint read through a
# placefs mount with 1 MiB reads, against the same byte ranges read directly
# from the shard files, in the same run: first read (fresh mount), repeated
# read (the second, page cache warm) and a third read, with 1, 4 and 8
# concurrent readers. Readers take whole tensors, longest first (readbench).
# "daemon_reads" is how many READ requests reached the daemon during the
# repeated reads (0: the kernel served them from the page cache alone).
#
# A first read through a page-cached FUSE file writes every byte into newly
# allocated page-cache pages; the direct read allocates nothing. On a virtual
# machine that reports free memory to its host (page_reporting), the first
# write to a page that was free for a few seconds faults into the hypervisor,
# and what that costs depends on what the machine did just before. So each
# reader count runs the mount twice, in two memory states set up the same way
# every time:
#   backed:  right before the first read, touchbench writes and frees as much
#            anonymous memory as the checkpoint holds: the page cache is then
#            built from pages the host still backs (as on bare metal);
#   settled: the first read starts SETTLE seconds after the last large free,
#            so it gets pages the guest has had time to give back (as a
#            machine that has been idle).
# The run starts with touchbench's own figures: the first write to memory
# right after a free and after SETTLE seconds, and a rewrite.
#
#   tests/bench/cpu-read.sh [--short] [--layers N] [--dir DIR] [--threads "1 4 8"]
#                           [--opts MOUNT_OPTIONS] [--settle SECONDS]
#
# --short: a ~0.5 GiB checkpoint (CI); default 3.3 GiB (32 layers of a
# 2048/5504 Llama shape, 355 tensors). DIR (default /dev/shm) holds the
# source, so the direct reads are the memory-speed ceiling a FUSE read can
# approach. --opts: extra placefs -o options for the mount (e.g. readahead=64M).
. "$(dirname "$0")/common.sh"
layers=32
dir=/dev/shm
threads="1 4 8"
opts=device=none
settle=5
while [ $# -gt 0 ]; do
	case $1 in
	--short) layers=2 ;;
	--layers) layers=$2; shift ;;
	--dir) dir=$2; shift ;;
	--threads) threads=$2; shift ;;
	--opts) opts="$opts,$2"; shift ;;
	--settle) settle=$2; shift ;;
	*) echo "usage: $0 [--short] [--layers N] [--dir DIR] [--threads LIST] [--opts O] [--settle S]" >&2; exit 2 ;;
	esac
	shift
done
bench_work=$(mktemp -d "$dir/placefs-bench.XXXXXX")
src=$bench_work/ckpt
mnt=$bench_work/mnt
bench_llama_manifests "$layers"
total=$(python3 -c "import json,sys;print(sum(t['nbytes'] for t in json.load(open(sys.argv[1]))['tensors']))" "$bench_work/plan.json")
echo "cpu-read: $(python3 -c "print(round($total/2**30,2))") GiB in $(wc -l <"$bench_work/direct.txt") tensors, source in $dir, -o $opts"

# Warm the source so "direct" is the page-cache/memory ceiling.
"$READBENCH" -t 4 "$bench_work/direct.txt" >/dev/null
ref=$("$READBENCH" -c -t 4 "$bench_work/direct.txt")
refsum=$(field checksum "$ref")

daemon_reads() {
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["reads"])' "$mnt/.placefs/stats"
}
x() {
	python3 -c "print(round($1/$2,2))"
}
mib=$((total / 1048576 + 64))
tb=$("$TOUCHBENCH" -p "$settle" "$mib")
echo "first write to new memory ($mib MiB, one thread): just freed $(field freed_gbps "$tb")," \
	"settled ${settle} s $(field settled_gbps "$tb"), rewrite $(field rewrite_gbps "$tb") GB/s"
printf '%-7s %-8s %7s %7s %7s %7s %7s %7s %7s %12s %s\n' readers memory direct first first_x \
	repeat repeat_x third third_x daemon_reads bytes_ok
for t in $threads; do
	d=$("$READBENCH" -t "$t" "$bench_work/direct.txt")
	dg=$(field gbps "$d")
	for state in backed settled; do
		if [ $state = backed ]; then
			"$TOUCHBENCH" -q "$mib"
		else
			sleep "$settle"
		fi
		bench_mount "$src" "$mnt" -o "$opts"
		f=$("$READBENCH" -t "$t" "$bench_work/mount.txt")
		n0=$(daemon_reads)
		r=$("$READBENCH" -t "$t" "$bench_work/mount.txt")
		r3=$("$READBENCH" -t "$t" "$bench_work/mount.txt")
		n1=$(daemon_reads)
		# Checksums cost ~1 GB/s of CPU, so they run untimed, after the timed reads.
		v=$("$READBENCH" -c -t "$t" "$bench_work/mount.txt")
		bench_umount "$mnt"
		ok=yes
		[ "$(field checksum "$v")" = "$refsum" ] || ok=NO
		fg=$(field gbps "$f")
		rg=$(field gbps "$r")
		r3g=$(field gbps "$r3")
		printf '%-7s %-8s %7.2f %7.2f %7s %7.2f %7s %7.2f %7s %12s %s\n' "$t" $state "$dg" "$fg" \
			"$(x "$fg" "$dg")" "$rg" "$(x "$rg" "$dg")" "$r3g" "$(x "$r3g" "$dg")" "$((n1 - n0))" "$ok"
		[ $ok = yes ] || { echo "cpu-read: bytes through the mount differ from the source" >&2; exit 1; }
	done
done
