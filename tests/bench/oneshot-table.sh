#!/bin/sh
# SPDX-License-Identifier: MIT
# The one-shot table of issue #13 (doc/PERFORMANCE.md section 2.1) in one
# run, every figure from a fresh mount, the references in the same run:
#   - the pinned host-to-device ceiling (before and after every group, by
#     first-pass.sh) and the peer, safetensors.torch.load_file(device=cuda:0)
#     of every shard of the Llama;
#   - the mixture of experts (placefs-mkckpt --moe, 8 shards, index, in
#     /dev/shm), no limit: placefs-stage --all --batch 256's first pass, and in
#     a process that already has CUDA load_state_dict, iter_weights and the
#     first tensor (first-pass.sh --loader);
#   - the Llama (placefs-mkckpt --llama, 4 shards, index), limits 512 MiB and
#     none: placefs-stage --all's first pass, the same loader figures, and the
#     cpu part against a parallel pread;
#   - cold disk (cold-disk.sh: the page cache dropped before every row,
#     against a parallel O_DIRECT reader and buffered dd), unless --no-disk;
#     --disk-streams "0 1 2" repeats its rows per -o disk_streams value;
#   - the mount of 100,000 tensors with the default device (metadata.sh),
#     unless --no-metadata.
# Then a summary of the lines the table is made of; the exit status is 1 when
# a part failed (the parts after it still run). Needs root (cold disk), a
# CUDA build, a GPU and torch; BENCH_DEVICE=host is a dry run of the plumbing
# without a GPU (no ceiling, no loader rows, host ring). --quick uses small
# checkpoints (for that dry run). The full run is meant to fit one 10-minute
# call on the GPU machine (build included); --no-disk and --no-metadata
# shorten it: with both, 158 s on an NVIDIA H100 80GB HBM3 instance with 16
# vCPUs (the code of 248b1cb, build apart).
#
#   tests/bench/oneshot-table.sh [--quick] [--disk-dir DIR] [--disk-streams LIST] [--no-disk]
#                                [--no-metadata]
#
# Results: stdout and ${OUT:-/tmp}/oneshot-table.txt; each part's own file
# in ${OUT:-/tmp}/oneshot-table/.
. "$(dirname "$0")/common.sh"
llama=32:4096:14336:128256
moe=48:1024:352:256:32000
disk_llama=8:4096:14336:128256
meta_tensors=100000
disk_dir=/var/tmp
disk=1
disk_streams=-
meta=1
while [ $# -gt 0 ]; do
	case $1 in
	--quick) llama=2:1024:2048:8000; moe=4:64:16:16:1000; disk_llama=2:1024:2048:8000; meta_tensors=2000 ;;
	--disk-dir) disk_dir=$2; shift ;;
	--disk-streams) disk_streams=$2; shift ;;
	--no-disk) disk=0 ;;
	--no-metadata) meta=0 ;;
	*) echo "usage: $0 [--quick] [--disk-dir DIR] [--disk-streams LIST] [--no-disk] [--no-metadata]" >&2; exit 2 ;;
	esac
	shift
done
out=${OUT:-/tmp}
parts=$out/oneshot-table
mkdir -p "$parts/llama" "$parts/moe" "$parts/disk"
res=$out/oneshot-table.txt
: >"$res"
say() {
	printf '%s\n' "$*" | tee -a "$res"
}
host=0
failed=0
[ "${BENCH_DEVICE:-cuda:0}" != host ] || host=1
bench_work=$(mktemp -d /dev/shm/placefs-table.XXXXXX)
t0=$(now_ns)
el() {
	python3 -c "print('%.0f' % (($(now_ns) - $t0) / 1e9))"
}
say "one-shot table: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo no GPU), $(nproc) cpus, $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')"

# The mixture of experts first: the smaller part, whose rows are the least
# measured (a run cut short by the call limit still has them).
"$MKCKPT" --quiet --moe "$moe" --shards 8 --index "$bench_work/moe"
ONESHOT=load,iter,first OUT=$parts/moe sh "$top/tests/bench/first-pass.sh" \
	--source "$bench_work/moe" --prime --configs "none:-:-" --stage-batch 256 --verify none \
	--loader "none:-:-" >/dev/null
rm -rf "$bench_work/moe"
say "== mixture of experts done at $(el) s"

# The Llama, then the peer on the same shards (which first-pass.sh's --prime
# has read once, as it does before its own rows).
"$MKCKPT" --quiet --llama "$llama" --shards 4 --index "$bench_work/llama"
ONESHOT=load,iter,cpu,first OUT=$parts/llama sh "$top/tests/bench/first-pass.sh" \
	--source "$bench_work/llama" --prime --configs "512MiB:-:- none:-:-" --verify first \
	--loader "512MiB:-:- none:-:-" >/dev/null
peer=
if [ "$host" = 0 ]; then
	peer=$(python3 "$top/tests/bench/gpu-ref.py" peer "$bench_work/llama")
	say "$peer"
fi
rm -rf "$bench_work/llama"
say "== llama done at $(el) s"

if [ "$disk" = 1 ]; then
	OUT=$parts/disk sh "$top/tests/bench/cold-disk.sh" --dir "$disk_dir" --llama "$disk_llama" \
		--threads "8" --limits "512MiB none" --streams "$disk_streams" >/dev/null ||
		{ say "cold-disk.sh: exit $?"; failed=1; }
	say "== cold disk done at $(el) s"
fi
if [ "$meta" = 1 ]; then
	sh "$top/tests/bench/metadata.sh" --tensors "$meta_tensors" >"$parts/metadata.txt" 2>&1 ||
		{ say "metadata.sh: exit $? (its output: $parts/metadata.txt)"; failed=1; }
	say "== metadata done at $(el) s"
fi

# The summary: the lines the table is made of, each from its part's file.
say ""
say "== the Llama ($llama), /dev/shm, fresh mount per row"
[ -z "$peer" ] || say "peer (load_file, every shard): $(field gbps "$peer") GB/s"
grep -E "^pinned H2D|^one-shot|^limit|^512MiB|^none" "$parts/llama/first-pass.txt" | tee -a "$res"
if [ -n "$peer" ]; then
	# Each one-shot load_state_dict row against the peer measured beside it.
	grep -E "^one-shot" "$parts/llama/first-pass.txt" | while read -r line; do
		lim=$(printf '%s\n' "$line" | sed -n 's/.*limit \([^ ]*\) .*/\1/p')
		g=$(printf '%s\n' "$line" | sed -n 's/.*load_state_dict \([0-9.]*\) GB\/s.*/\1/p')
		[ -z "$g" ] || say "load_state_dict, limit $lim: $g GB/s = $(ratio "$g" "$(field gbps "$peer")") x load_file"
	done
fi
say "== the mixture of experts ($moe), /dev/shm, fresh mount per row"
grep -E "^pinned H2D|^one-shot|^limit|^none" "$parts/moe/first-pass.txt" | tee -a "$res"
grep -E "^loader .*first:" "$parts/moe/first-pass.txt" | tee -a "$res" || true
if [ "$disk" = 1 ] && [ -s "$parts/disk/cold-disk.txt" ]; then
	say "== cold disk ($disk_llama), page cache dropped before every row"
	sed -n '/^cold page cache before every row/,$p' "$parts/disk/cold-disk.txt" | tee -a "$res"
fi
if [ "$meta" = 1 ]; then
	say "== mount of $meta_tensors tensors"
	grep -E "^start to mounted" "$parts/metadata.txt" | tee -a "$res" || true
fi
say "== all done at $(el) s"
exit $failed
