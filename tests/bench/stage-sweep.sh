#!/bin/sh
# SPDX-License-Identifier: MIT
# Staging throughput against the stager's knobs: I/O threads
# (PLACEFS_STAGE_IO_THREADS) x pinned host buffer (-o host_buffer, 16 chunks),
# copy and borrow mode, placefs-stage --all over the gpu-placed tensors of a
# Llama-shaped checkpoint in /dev/shm. Needs a CUDA build and a GPU.
#
#   tests/bench/stage-sweep.sh [--layers N] [--threads "8 14"] [--host-buffers "64M 256M"]
. "$(dirname "$0")/common.sh"
layers=12
threads="8 14"
hbs="64M 256M"
while [ $# -gt 0 ]; do
	case $1 in
	--layers) layers=$2; shift ;;
	--threads) threads=$2; shift ;;
	--host-buffers) hbs=$2; shift ;;
	*) echo "usage: $0 [--layers N] [--threads LIST] [--host-buffers LIST]" >&2; exit 2 ;;
	esac
	shift
done
bench_work=$(mktemp -d /dev/shm/placefs-sweep.XXXXXX)
src=$bench_work/ckpt
mnt=$bench_work/mnt
"$MKCKPT" --quiet --llama "$layers:4096:11008:32000" --shards 4 --index "$src"
printf '%-8s %-12s %10s %10s\n' threads host_buffer copy_GBps borrow_GBps
for t in $threads; do
	for hb in $hbs; do
		PLACEFS_STAGE_IO_THREADS=$t bench_mount "$src" "$mnt" \
			-o "device=cuda:0,buffer_size=128M,host_buffer=$hb"
		c=$("$PLACEFS_STAGE" --all "$mnt" --mode copy -q | sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p')
		b=$("$PLACEFS_STAGE" --all "$mnt" --mode borrow -q | sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p')
		bench_umount "$mnt"
		printf '%-8s %-12s %10s %10s\n' "$t" "$hb" "$c" "$b"
	done
done
