#!/bin/sh
# SPDX-License-Identifier: MIT
# Staging throughput against the stager's knobs, side by side in one run:
# environment settings (e.g. PLACEFS_STAGE_ZC_STREAMS, PLACEFS_STAGE_ZC_WAIT)
# x I/O threads (PLACEFS_STAGE_IO_THREADS) x pinned host buffer
# (-o host_buffer, 16 chunks), copy and borrow mode, placefs-stage --all over
# the gpu-placed tensors of a Llama-shaped checkpoint in /dev/shm. Each
# setting gets its own mount and the best of two passes per mode after an
# unmeasured first one (warm figures; tests/bench/first-pass.sh measures the
# first pass after a mount). Zero-copy is off by default: --envs
# PLACEFS_STAGE_ZERO_COPY=1 measures it (its first pass registers the
# shards). The pinned host-to-device
# ceiling (tests/bench/gpu-ref.py, torch) is measured in the same run when
# torch is there. Needs a CUDA build and a GPU.
#
#   tests/bench/stage-sweep.sh [--layers N] [--limit SIZE] [--ring SIZE]
#       [--threads "0 8"] [--host-buffers "64M"] [--envs "- VAR=V,VAR2=W"]
#
# The daemon's .placefs/stats after each setting go to
# ${OUT:-/tmp}/stage-sweep-stats.txt.
# --threads 0 leaves PLACEFS_STAGE_IO_THREADS unset (the default); an --envs
# item is "-" (nothing) or comma-separated VAR=VALUE assignments.
. "$(dirname "$0")/common.sh"
layers=12
limit=128MiB
ring_size=
threads=0
hbs=64M
envs=-
while [ $# -gt 0 ]; do
	case $1 in
	--layers) layers=$2; shift ;;
	--limit) limit=$2; shift ;;
	--ring) ring_size=$2; shift ;;
	--threads) threads=$2; shift ;;
	--host-buffers) hbs=$2; shift ;;
	--envs) envs=$2; shift ;;
	*) echo "usage: $0 [--layers N] [--limit SIZE] [--ring SIZE] [--threads LIST] [--host-buffers LIST] [--envs LIST]" >&2; exit 2 ;;
	esac
	shift
done
bench_work=$(mktemp -d /dev/shm/placefs-sweep.XXXXXX)
src=$bench_work/ckpt
mnt=$bench_work/mnt
"$MKCKPT" --quiet --llama "$layers:4096:11008:32000" --shards 4 --index "$src"
ceil=
if python3 -c 'import torch' 2>/dev/null; then
	ceil=$(field gbps "$(h2d_ceiling)")
	echo "pinned H2D ceiling (torch): $ceil GB/s"
fi
echo "checkpoint: $layers layers, limit $limit, ring ${ring_size:-the limit}"

# best MODE: the better GB/s of two placefs-stage --all passes in MODE.
best() {
	b=0
	for _ in 1 2; do
		g=$("$PLACEFS_STAGE" --all "$mnt" --mode "$1" -q | gbps_of)
		b=$(python3 -c "print(max(float('$b'), float('${g:-0}')))")
	done
	echo "$b"
}
# x_ceil GBPS: against the ceiling of this run ("-" without one).
x_ceil() {
	ratio "$1" "$ceil"
}

printf '%-44s %-7s %-6s %8s %6s %8s %6s\n' env threads hbuf copy x_ceil borrow x_ceil
for ev in $envs; do
	for t in $threads; do
		for hb in $hbs; do
			(
				if [ "$ev" != - ]; then
					for kv in $(printf '%s' "$ev" | tr ',' ' '); do
						export "${kv?}"
					done
				fi
				if [ "$t" != 0 ]; then
					export PLACEFS_STAGE_IO_THREADS="$t"
				fi
				bench_mount "$src" "$mnt" -o \
					"device=cuda:0,buffer_size=$limit,host_buffer=$hb${ring_size:+,ring_size=$ring_size}"
				# The first pass registers the shards: not measured.
				"$PLACEFS_STAGE" --all "$mnt" --mode copy -q >/dev/null
				c=$(best copy)
				b=$(best borrow)
				# The daemon's counters for each setting, for the record.
				{
					echo "== env $ev threads $t host_buffer $hb"
					cat "$mnt/.placefs/stats"
					echo
				} >>"${OUT:-/tmp}/stage-sweep-stats.txt"
				bench_umount "$mnt"
				printf '%-44s %-7s %-6s %8s %6s %8s %6s\n' "$ev" "$t" "$hb" "$c" \
					"$(x_ceil "$c")" "$b" "$(x_ceil "$b")"
			)
		done
	done
done
