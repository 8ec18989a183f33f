#!/bin/sh
# SPDX-License-Identifier: MIT
# GPU staging benchmark (needs a CUDA build, a GPU, python3 with torch and
# safetensors). Everything in one run, side by side:
#   - ceiling: cudaMemcpyAsync from one large pinned host buffer (torch);
#   - peer: safetensors.torch.load_file(shard, device="cuda:0") for every shard;
#   - placefs copy and borrow mode over every gpu-placed tensor (placefs-stage
#     --all, from the first ioctl to the last byte on the device), and
#     load_state_dict from python/placefs;
#   - time to the first tensor, the daemon's device memory and peak RSS;
#   - from local disk with the page cache dropped, against dd iflag=direct of
#     the same shard files (the storage ceiling);
#   - last, tests/bench/first-pass.sh: a fresh mount for every configuration
#     (limit 512 MiB and none, zero_copy on and off, several host_buffer
#     sizes), the FIRST pass after the mount beside the second, time to the
#     first tensor, pinned host memory, load_state_dict on a fresh mount,
#     then tests/bench/first-tensor.sh on a 51,027-tensor mixture of experts
#     (--no-first-pass skips both; --first-pass-configs LIST replaces
#     first-pass.sh's configurations). The placefs-stage figures above are the best of four
#     passes on one mount, so warm ones.
#
# --oneshot [OPTIONS] runs tests/bench/oneshot-table.sh instead: the one-shot
# table of issue #13 (doc/PERFORMANCE.md section 2.1), every figure from
# a fresh mount, in one run.
#
#   tests/bench/gpu.sh --oneshot [--quick] [--disk-dir DIR] [--disk-streams LIST] [--no-disk] [--no-metadata]
#   tests/bench/gpu.sh [--layers N] [--limit SIZE] [--ring SIZE] [--disk-layers N]
#                      [--disk-dir DIR] [--no-first-pass] [--first-pass-configs LIST]
#
# Default: 20 layers of a 4096/11008 Llama shape in bf16 (8.6 GB) in /dev/shm,
# limit 128 MiB (the 250 MiB embedding and head go to the cpu). --ring adds
# -o ring_size=SIZE to both mounts (default: none, the ring is the limit), and
# then also measures copy and borrow mode with the default ring (= the limit)
# on the same checkpoint, side by side. --disk-layers 0 skips the disk part.
# Results go to stdout and ${OUT:-/tmp}/gpu-bench.txt.
. "$(dirname "$0")/common.sh"
layers=20
limit=128MiB
ring_size=
disk_layers=8
disk_dir=/var/tmp
first_pass=1
fp_configs=
while [ $# -gt 0 ]; do
	case $1 in
	--oneshot) shift; exec sh "$top/tests/bench/oneshot-table.sh" "$@" ;;
	--no-first-pass) first_pass=0 ;;
	--first-pass-configs) fp_configs=$2; shift ;;
	--layers) layers=$2; shift ;;
	--limit) limit=$2; shift ;;
	--ring) ring_size=$2; shift ;;
	--disk-layers) disk_layers=$2; shift ;;
	--disk-dir) disk_dir=$2; shift ;;
	*) echo "usage: $0 [--oneshot ...] [--layers N] [--limit SIZE] [--ring SIZE] [--disk-layers N] [--disk-dir DIR] [--no-first-pass] [--first-pass-configs LIST]" >&2; exit 2 ;;
	esac
	shift
done
# The same staging options for both mounts; the ring only when --ring says.
mount_opts="device=cuda:0,buffer_size=$limit${ring_size:+,ring_size=$ring_size}"
out=${OUT:-/tmp}
res=$out/gpu-bench.txt
: >"$res"
say() {
	printf '%s\n' "$*" | tee -a "$res"
}
# stage_passes VAR LABEL: placefs-stage --all on $mnt in copy, borrow, copy,
# borrow mode; the best GB/s of each mode goes to ${VAR}_copy / ${VAR}_borrow.
stage_passes() {
	for mode in copy borrow copy borrow; do
		line=$("$PLACEFS_STAGE" --all "$mnt" --mode "$mode" -q | tail -n 1)
		say "placefs-stage $mode$2: $line"
		g=$(printf '%s\n' "$line" | gbps_of)
		eval "$1_$mode=\$(python3 -c \"print(max(float('\${$1_$mode:-0}'), float('$g')))\")"
	done
}
bench_work=$(mktemp -d /dev/shm/placefs-gpu.XXXXXX)
src=$bench_work/ckpt
mnt=$bench_work/mnt
"$MKCKPT" --quiet --llama "$layers:4096:11008:32000" --shards 4 --index "$src"
total=$(du -sb "$src" | cut -f1)
say "gpu-bench: $(nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader)"
say "checkpoint: $layers layers, $total bytes in /dev/shm, staging limit $limit, ring ${ring_size:-the limit}"
"$PLAN" --buffer-size "$limit" ${ring_size:+--ring-size "$ring_size"} "$src" | tail -n 4 | tee -a "$res"

ceil=$(h2d_ceiling)
say "$ceil"
ceil_g=$(field gbps "$ceil")
peer=$(python3 "$top/tests/bench/gpu-ref.py" peer "$src")
say "$peer"
peer_g=$(field gbps "$peer")

t0=$(now_ns)
bench_mount "$src" "$mnt" -o "$mount_opts"
t1=$(now_ns)
pid=$(bench_daemon_pid "$mnt")
say "mount (cuda ring + pinned buffers): $(python3 -c "print('%.3f' % (($t1-$t0)/1e9))") s"
first=$(python3 - "$top/python" "$mnt" <<'PY'
import os, sys, time
sys.path.insert(0, sys.argv[1])
import placefs
m = placefs.Mount(sys.argv[2])
gpu = [t for t in m.tensors if t.placement == "gpu" and t.nbytes > 0]
t0 = time.perf_counter()
fd = os.open(gpu[0].path, os.O_RDONLY)
r = placefs.stage(fd, mode="borrow")
placefs.release(fd, r.lease)
os.close(fd)
print("%.3f" % ((time.perf_counter() - t0) * 1e3))
PY
)
say "time to first tensor (open + borrow stage + release): $first ms"
stage_passes best ""
mem=$(bench_gpu_mem "$pid")
hwm=$(awk '/VmHWM/ {print $2 " " $3}' "/proc/$pid/status")
py=$(python3 - "$top/python" "$mnt" <<'PY'
import sys, time
sys.path.insert(0, sys.argv[1])
import torch, placefs
torch.empty(1, device="cuda:0")
for mode in ("copy", "borrow"):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    sd = placefs.load_state_dict(sys.argv[2], device="cuda:0", mode=mode)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    gb = sum(t.numel() * t.element_size() for t in sd.values() if t.is_cuda)
    cb = sum(t.numel() * t.element_size() for t in sd.values() if not t.is_cuda)
    print("load_state_dict %s: %d gpu bytes + %d cpu bytes in %.3f s: %.2f GB/s overall"
          % (mode, gb, cb, dt, (gb + cb) / dt / 1e9))
    del sd
PY
)
say "$py"
ring=$(python3 -c "import json;print(json.load(open('$mnt/.placefs/plan.json'))['ring_bytes'])")
say "daemon device memory (nvidia-smi, incl. CUDA context): ${mem:-?} MiB; ring $ring bytes; peak RSS $hwm"
cat "$mnt/.placefs/stats" >>"$res"
echo >>"$res"
bench_umount "$mnt"

# With --ring: the same passes with the default ring (the staging limit).
if [ -n "$ring_size" ]; then
	bench_mount "$src" "$mnt" -o "device=cuda:0,buffer_size=$limit"
	stage_passes lim ", ring = limit"
	bench_umount "$mnt"
fi

[ "$disk_layers" -gt 0 ] || disk_dir=
# Disk with a cold page cache.
if [ -n "$disk_dir" ]; then
	dsrc=$(mktemp -d "$disk_dir/placefs-disk.XXXXXX")
	bench_mounts="$bench_mounts"
	trap 'bench_cleanup; rm -rf "$dsrc"' EXIT INT TERM
	"$MKCKPT" --quiet --llama "$disk_layers:4096:11008:32000" --shards 4 --index "$dsrc/ckpt"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(now_ns)
	for f in "$dsrc"/ckpt/*.safetensors; do
		dd if="$f" of=/dev/null bs=16M iflag=direct status=none
	done
	t1=$(now_ns)
	dbytes=$(cat "$dsrc"/ckpt/*.safetensors | wc -c)
	dd_g=$(python3 -c "print('%.2f' % ($dbytes/(($t1-$t0)/1e9)/1e9))")
	say "disk ceiling: dd iflag=direct bs=16M of $dbytes bytes in $disk_dir: $dd_g GB/s"
	echo 3 >/proc/sys/vm/drop_caches
	bench_mount "$dsrc/ckpt" "$mnt" -o "$mount_opts"
	line=$("$PLACEFS_STAGE" --all "$mnt" --mode copy -q | tail -n 1)
	say "placefs-stage copy, cold cache from disk: $line"
	cold_g=$(printf '%s\n' "$line" | gbps_of)
	bench_umount "$mnt"
fi

say ""
say "figure                               GB/s    ratio"
say "$(printf '%-34s %7s  %s' 'pinned H2D ceiling (torch)' "$ceil_g" '1.00')"
say "$(printf '%-34s %7s  %s' 'peer: safetensors load_file' "$peer_g" "$(ratio "$peer_g" "$ceil_g") x ceiling")"
say "$(printf '%-34s %7s  %s' 'placefs copy (stage, best pass)' "$best_copy" "$(ratio "$best_copy" "$ceil_g") x ceiling, $(ratio "$best_copy" "$peer_g") x peer")"
say "$(printf '%-34s %7s  %s' 'placefs borrow (stage, best pass)' "$best_borrow" "$(ratio "$best_borrow" "$best_copy") x copy")"
if [ -n "$ring_size" ]; then
	say "$(printf '%-34s %7s  %s' 'copy, ring = limit' "$lim_copy" "$(ratio "$lim_copy" "$ceil_g") x ceiling")"
	say "$(printf '%-34s %7s  %s' 'borrow, ring = limit' "$lim_borrow" "$(ratio "$lim_borrow" "$lim_copy") x copy")"
fi
if [ -n "$disk_dir" ]; then
	say "$(printf '%-34s %7s  %s' 'disk ceiling: dd iflag=direct' "$dd_g" '1.00')"
	say "$(printf '%-34s %7s  %s' 'placefs copy, cold, from disk' "$cold_g" "$(ratio "$cold_g" "$dd_g") x dd")"
fi
# Fresh mounts: the first pass after each mount (tests/bench/first-pass.sh).
if [ "$first_pass" = 1 ]; then
	say ""
	bench_cleanup
	bench_work=
	sh "$top/tests/bench/first-pass.sh" ${fp_configs:+--configs "$fp_configs"}
	cat "$out/first-pass.txt" >>"$res"
	# The first tensor of a mount of 51,027 tensors (the plan it need not read).
	sh "$top/tests/bench/first-tensor.sh" --device cuda:0 --dir /dev/shm | tee -a "$res"
fi
