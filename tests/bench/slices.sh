#!/bin/sh
# SPDX-License-Identifier: MIT
# Tensor-parallel loads (issue #16): one rank's part against the whole
# checkpoint, side by side in one run, every load on a FRESH mount (mounted
# right before it, unmounted right after). Needs a CUDA build, a GPU and
# python3 with torch and safetensors; tests/bench/slices.py does the loads:
#   - the whole checkpoint, load_state_dict(mnt, device="cuda:0", mode="copy"),
#     and rank 0's part, shard=(0, N) (Llama split: q/k/v/gate/up, the
#     embedding and the head by rows, o/down by columns, norms whole; the
#     gpu-placed parts staged as slices), for each N of --worlds; each
#     printed with its seconds (the mount command's return to the last tensor
#     on the device, as tests/bench/oneshot.py times it), the GB/s of the
#     bytes it moved (the stats' staged and read bytes), x the ceiling, its
#     time against the whole load's (ideal: 1/N) and the bytes the daemon read
#     into its ring (a surplus: whole tensors prefetched beside the slices);
#     then the best of --repeat of each. Every result is compared with the
#     source after the clock stops (--no-verify skips that);
#   - the pinned host-to-device ceiling (tests/bench/gpu-ref.py), in the
#     same run.
# --devices cuda:0,cuda:1 (a machine of two GPUs or more): one mount of both
# (-o device=cuda:0,cuda:1) and two loader processes, one per GPU (each
# device="cuda:R"; CUDA_VISIBLE_DEVICES is not used), loading at the same
# time on a fresh mount: the whole checkpoint each, then shard=(R, 2) each;
# every result verified, the stats' bytes per device checked against each
# process's. Exit 77 with a message when the machine has fewer GPUs than
# listed.
#
#   tests/bench/slices.sh [--llama L:H:I:V] [--worlds "2 4 8"] [--repeat N]
#                         [--opts O] [--no-verify] [--devices LIST]
#
# Default checkpoint: Llama-3-8B shapes as placefs-mkckpt writes them
# (32:4096:14336:128256, bf16, 4 shards, index; 17.67 GB) in /dev/shm, no
# staging limit (every tensor staged; --opts adds mount options, e.g.
# buffer_size=512MiB). BENCH_DEVICE=host:0 or --devices host:0,host:1: a dry
# run on the host stand-ins (results in host memory; no GPU, torch or
# ceiling needed). Results: stdout and ${OUT:-/tmp}/slices.txt.
. "$(dirname "$0")/common.sh"
llama=32:4096:14336:128256
worlds="2 4 8"
repeat=2
opts=
verify=
devices=
usage() {
	echo "usage: $0 [--llama L:H:I:V] [--worlds LIST] [--repeat N] [--opts O] [--no-verify] [--devices LIST]" >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--llama) llama=${2:?}; shift ;;
	--worlds) worlds=${2:?}; shift ;;
	--repeat) repeat=${2:?}; shift ;;
	--opts) opts=${2:?}; shift ;;
	--no-verify) verify=--no-verify ;;
	--devices) devices=${2:?}; shift ;;
	*) usage ;;
	esac
	shift
done
list=${devices:-${BENCH_DEVICE:-cuda:0}}

# The devices: one kind, explicit indices; a cuda list needs that many GPUs.
kind=
n=0
maxidx=-1
for d in $(printf '%s' "$list" | tr ',' ' '); do
	case $d in
	cuda:*) k=cuda; i=${d#cuda:} ;;
	host:*) k=host; i=${d#host:} ;;
	host) k=host; i=0 ;;
	*) echo "slices: device '$d': expected cuda:N or host:N" >&2; exit 2 ;;
	esac
	case $i in '' | *[!0-9]*) echo "slices: device '$d': expected cuda:N or host:N" >&2; exit 2 ;; esac
	[ -z "$kind" ] || [ "$kind" = "$k" ] || { echo "slices: $list mixes cuda and host" >&2; exit 2; }
	kind=$k
	n=$((n + 1))
	[ "$i" -le "$maxidx" ] || maxidx=$i
done
[ "$n" -gt 0 ] || usage
if [ -n "$devices" ] && [ "$n" -lt 2 ]; then
	echo "slices: --devices takes two devices or more, got '$devices'" >&2
	exit 2
fi
if [ -z "$devices" ] && [ "$n" -ne 1 ]; then
	echo "slices: BENCH_DEVICE names one device ('$list'); use --devices for several" >&2
	exit 2
fi
if [ "$kind" = cuda ]; then
	if command -v nvidia-smi >/dev/null 2>&1; then
		have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
	else
		have=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
	fi
	if [ "$have" -le "$maxidx" ]; then
		echo "slices: $list needs GPUs 0 to $maxidx; this machine has $have GPU(s): not run" >&2
		exit 77
	fi
fi

out=${OUT:-/tmp}
res=$out/slices.txt
: >"$res"
say() {
	printf '%s\n' "$*" | tee -a "$res"
}
bench_work=$(mktemp -d /dev/shm/placefs-slices.XXXXXX)
src=$bench_work/ckpt
mnt=$bench_work/mnt
bench_mounts=$mnt
mkdir -p "$mnt"
unset INSTANTTENSOR_BUFFER_SIZE
"$MKCKPT" --quiet --llama "$llama" --shards 4 --index "$src"
gpu=$(nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>/dev/null | paste -sd';' -)
say "slices bench: ${gpu:-no GPU}, $(nproc) cpus"
say "checkpoint: --llama $llama, 4 shards, $(du -sb "$src" | cut -f1) bytes in /dev/shm; mount -o device=$list${opts:+,$opts}"
ceil_g=0
if [ "$kind" = cuda ]; then
	for d in $(printf '%s' "$list" | tr ',' ' '); do
		c=$(h2d_ceiling --device "$d")
		say "pinned H2D ceiling on $d (torch, 4 GiB pinned, 64 MiB chunks): $c"
		[ "$ceil_g" != 0 ] || ceil_g=$(field gbps "$c")
	done
else
	say "no ceiling: host stand-ins ($list)"
fi
ldev=cpu
[ "$kind" != cuda ] || ldev=$list
export PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}"
{
	rc=0
	if [ -n "$devices" ]; then
		python3 -u "$top/tests/bench/slices.py" pair "$PLACEFS" "device=$list${opts:+,$opts}" \
			"$src" "$mnt" --devices "$list" --repeat "$repeat" $verify 2>&1 || rc=$?
	else
		python3 -u "$top/tests/bench/slices.py" single "$PLACEFS" "device=$list${opts:+,$opts}" \
			"$src" "$mnt" --device "$ldev" --worlds "$(printf '%s' "$worlds" | tr ' ' ',')" \
			--repeat "$repeat" --ceiling "$ceil_g" $verify 2>&1 || rc=$?
	fi
	echo "$rc" >"$bench_work/rc"
} | tee -a "$res"
rc=$(cat "$bench_work/rc")
[ "$rc" -eq 0 ] || { echo "slices: slices.py failed (status $rc)" >&2; exit 1; }
