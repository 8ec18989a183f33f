#!/bin/sh
# SPDX-License-Identifier: MIT
# The daemon's device memory, phase by phase (nvidia-smi, per process): a
# daemon with a 4 KiB ring (the CUDA context alone), then for each ring size
# a daemon over a 20-layer 4096/11008 Llama checkpoint (staging limit
# 128 MiB) after mount, after `placefs-stage --all` in borrow mode and after
# the same in copy mode. The target: context + ring, nothing else.
#
#   tests/bench/devmem.sh [--rings "128MiB 256MiB"] [--layers N]
. "$(dirname "$0")/common.sh"
rings="128MiB 256MiB"
layers=20
while [ $# -gt 0 ]; do
	case $1 in
	--rings) rings=$2; shift ;;
	--layers) layers=$2; shift ;;
	*) echo "usage: $0 [--rings LIST] [--layers N]" >&2; exit 2 ;;
	esac
	shift
done
command -v nvidia-smi >/dev/null || { echo "devmem: nvidia-smi is not installed" >&2; exit 2; }
bench_work=$(mktemp -d /dev/shm/placefs-devmem.XXXXXX)
mnt=$bench_work/mnt
# mem_of PID: bench_gpu_mem once the driver has settled.
mem_of() {
	sleep 1
	bench_gpu_mem "$1"
}
"$MKCKPT" --quiet --tensor one:F32:4 "$bench_work/one.safetensors"
"$MKCKPT" --quiet --llama "$layers:4096:11008:32000" --shards 4 --index "$bench_work/ckpt"
bench_mount "$bench_work/one.safetensors" "$mnt" -o device=cuda:0,buffer_size=4K
ctx=$(mem_of "$(bench_daemon_pid "$mnt")")
bench_umount "$mnt"
echo "devmem: CUDA context (a daemon with a 4 KiB ring): ${ctx:-?} MiB"
for ring in $rings; do
	bench_mount "$bench_work/ckpt" "$mnt" -o "device=cuda:0,buffer_size=128MiB,ring_size=$ring"
	pid=$(bench_daemon_pid "$mnt")
	m0=$(mem_of "$pid")
	"$PLACEFS_STAGE" --all "$mnt" --mode borrow -q >/dev/null
	m1=$(mem_of "$pid")
	"$PLACEFS_STAGE" --all "$mnt" --mode copy -q >/dev/null
	m2=$(mem_of "$pid")
	bench_umount "$mnt"
	echo "devmem: ring $ring: after mount ${m0:-?} MiB, after borrow ${m1:-?} MiB," \
		"after copy ${m2:-?} MiB (context + ring: $((${ctx:-0} + $(numfmt --from=iec-i "${ring%B}") / 1048576)) MiB)"
done
