#!/bin/sh
# SPDX-License-Identifier: MIT
# Checkpoints of many small tensors: quantized mixtures of experts, where the
# cost per tensor, not the bytes, bounds a load. For each of two checkpoints,
# placefs-mkckpt --moe L:H:E:I:V --quant fp8 and --quant gptq (8 shards, an
# index, in /dev/shm; fp8: X.weight F8_E4M3 + X.weight_scale + X.input_scale
# per linear, gptq: X.qweight, X.qzeros, X.scales, X.g_idx), it prints the
# tensor count and the median and mean tensor bytes, then for each staging
# limit (512MiB and none), every figure on a fresh mount:
#   - load_state_dict and iter_weights (every tensor kept), three mounts each
#     (tests/bench/oneshot.py: from the return of the mount command to the
#     last tensor in place), each run's GB/s, tensors/s and ratio to the
#     pinned host-to-device ceiling, and the slowest of the three against
#     their median;
#   - one pass of placefs-stage --all (its default batches) and one of
#     tests/example-loader (the documented C loader), each timed by itself
#     from its first request to the return of its last, and from the return
#     of the mount command to its exit (process start, listing, sizes and
#     destination included);
# and, limit none, one row with -o ring_size=SIZE (--ring, default 1GiB)
# against the automatic ring: load_state_dict three times (placefs-stage
# --all when there is no torch), its median against the automatic ring's.
# The ceiling (tests/bench/gpu-ref.py) is measured before the rows and again
# after them.
#
#   tests/bench/many-tensors.sh [--moe L:H:E:I:V] [--quick] [--ring SIZE] [--quants "fp8 gptq"]
#                               [--limits "512MiB none"]
#
# Default shape 48:640:192:384:32000: fp8 83,667 tensors, 7.02 GB, median
# 1,536 bytes, mean 83,901; gptq 111,507 tensors, 3.73 GB, median 2,560,
# mean 33,421 (both: at least 50,000 tensors, a median under 4 KiB, a mean
# under 256 KiB). --quick a small one (for the dry run). Needs a CUDA build, a
# GPU and torch; BENCH_DEVICE=host is a dry run without a GPU (host ring, no
# ceiling; the torch rows only where torch imports, on the cpu), which
# scripts/test's bench layer runs with --quick. $ONESHOT_WORKERS is the
# loaders' workers (oneshot.py). Results: stdout and
# ${OUT:-/tmp}/many-tensors.txt.
. "$(dirname "$0")/common.sh"
moe=48:640:192:384:32000
quants="fp8 gptq"
limits="512MiB none"
ring=1GiB
while [ $# -gt 0 ]; do
	case $1 in
	--moe) moe=$2; shift ;;
	--quick) moe=4:128:32:128:1000 ;;
	--ring) ring=$2; shift ;;
	--quants) quants=$2; shift ;;
	--limits) limits=$2; shift ;;
	*) echo "usage: $0 [--moe L:H:E:I:V] [--quick] [--ring SIZE] [--quants LIST] [--limits LIST]" >&2; exit 2 ;;
	esac
	shift
done
LOADER=$B/tests/example-loader
# A check program: make builds it only for make check.
[ -x "$LOADER" ] || make -s -C "$B" tests/example-loader >/dev/null
out=${OUT:-/tmp}
mkdir -p "$out"
res=$out/many-tensors.txt
: >"$res"
say() {
	printf '%s\n' "$*" | tee -a "$res"
}
dev=${BENCH_DEVICE:-cuda:0}
case $dev in
host) pydev=cpu ;;
*) pydev=$dev ;;
esac
torch=1
if [ "$dev" = host ]; then
	python3 -c 'import torch' 2>/dev/null || torch=0
fi
bench_work=$(mktemp -d /dev/shm/placefs-many.XXXXXX)
mnt=$bench_work/mnt
mkdir -p "$mnt"
bench_mounts=$mnt
unset INSTANTTENSOR_BUFFER_SIZE INSTANTTENSOR_COPY

# secs A_NS B_NS: (B - A) in seconds.
secs() {
	python3 -c "print('%.3f' % (($2 - $1) / 1e9))"
}
# row WHAT LIMIT RUN SECS BYTES TENSORS [NOTE]: one table row (GB/s, tensors/s, x ceiling).
row() {
	_r_g=$(python3 -c "print('%.2f' % ($5 / $4 / 1e9 if $4 > 0 else 0))")
	_r_t=$(python3 -c "print('%.0f' % ($6 / $4 if $4 > 0 else 0))")
	say "$(printf '%-20s %-9s %3s %8s %7s %9s %6s  %s' "$1" "$2" "$3" "$4" "$_r_g" "$_r_t" \
		"$(ratio "$_r_g" "$ceil_g")" "${7:-}")"
	printf '%s|%s|%s\n' "$1" "$2" "$4" >>"$bench_work/runs"
}
# group WHAT LIMIT: the slowest run of WHAT at LIMIT against the median of its runs.
group() {
	python3 - "$bench_work/runs" "$1" "$2" <<'PY' | while IFS= read -r l; do say "$l"; done
import statistics, sys
s = [float(l.split("|")[2]) for l in open(sys.argv[1])
     if l.split("|")[:2] == [sys.argv[2], sys.argv[3]]]
if s:
    m = statistics.median(s)
    print("%-20s %-9s slowest of %d: %.3f s = %.2f x their median %.3f s"
          % (sys.argv[2], sys.argv[3], len(s), max(s), max(s) / m if m else 0, m))
PY
}
# median WHAT LIMIT: the median seconds of WHAT's runs at LIMIT.
median() {
	python3 - "$bench_work/runs" "$1" "$2" <<'PY'
import statistics, sys
s = [float(l.split("|")[2]) for l in open(sys.argv[1])
     if l.split("|")[:2] == [sys.argv[2], sys.argv[3]]]
print("%.3f" % statistics.median(s) if s else "-")
PY
}
# oneshot LABEL OPTS: load_state_dict and iter_weights three times each, a fresh mount each.
oneshot() {
	_o_lines=$(PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}" python3 \
		"$top/tests/bench/oneshot.py" "$PLACEFS" "$2" "$src" "$mnt" \
		--what "${3:-load,load,load,iter,iter,iter}" --device "$pydev") ||
		{ echo "many-tensors: oneshot.py failed for $2" >&2; exit 1; }
	printf '%s\n' "$_o_lines" >>"$bench_work/oneshot.log"
	_o_k=0
	printf '%s\n' "$_o_lines" | grep '^load:' | while IFS= read -r l; do
		_o_k=$((_o_k + 1))
		set -- "$1" $(printf '%s\n' "$l" |
			sed -n 's/.*: \([0-9]*\) gpu + \([0-9]*\) cpu bytes in \([0-9.]*\) s after.*/\1 \2 \3/p')
		row load_state_dict "$1" "$_o_k" "$4" $(($2 + $3)) "$ntensors"
	done
	printf '%s\n' "$_o_lines" | grep '^iter:' | while IFS= read -r l; do
		_o_k=$((_o_k + 1))
		set -- "$1" $(printf '%s\n' "$l" |
			sed -n 's/.*: \([0-9]*\) tensors, \([0-9]*\) bytes in \([0-9.]*\) s after.*/\1 \2 \3/p')
		row iter_weights "$1" "$_o_k" "$4" "$3" "$2"
	done
}
# fresh OPTS: mounts $src on $mnt afresh; t_mount is when the mount command returned.
fresh() {
	"$PLACEFS" -o "$1" "$src" "$mnt"
	t_mount=$(now_ns)
}
# stage LABEL OPTS: placefs-stage --all (its default batches) on a fresh mount.
stage() {
	fresh "$2"
	"$PLACEFS_STAGE" -q --all "$mnt" >"$bench_work/stage.out" 2>&1 ||
		{ echo "many-tensors: placefs-stage --all failed: $(cat "$bench_work/stage.out")" >&2; exit 1; }
	_s_end=$(now_ns)
	bench_umount "$mnt"
	_s_line=$(grep '^placefs-stage: ' "$bench_work/stage.out")
	set -- "$1" $(printf '%s\n' "$_s_line" |
		sed -n 's/^placefs-stage: \([0-9]*\) of \1 tensors staged (copy), \([0-9]*\) bytes .* in \([0-9.]*\) s: .*; \([0-9]*\) requests\{0,1\}; .*/\1 \2 \3 \4/p')
	[ -n "${5:-}" ] || { echo "many-tensors: placefs-stage said: $_s_line" >&2; exit 1; }
	row "placefs-stage --all" "$1" 1 "$4" "$3" "$2" \
		"$5 requests; from the mount's return to its exit $(secs "$t_mount" "$_s_end") s"
}
# example LABEL OPTS: tests/example-loader on a fresh mount.
example() {
	fresh "$2"
	_e_line=$("$LOADER" "$mnt") ||
		{ echo "many-tensors: example-loader failed: $_e_line" >&2; exit 1; }
	_e_end=$(now_ns)
	bench_umount "$mnt"
	set -- "$1" $(printf '%s\n' "$_e_line" |
		sed -n 's/^example-loader: \([0-9]*\) tensors, \([0-9]*\) bytes in \([0-9.]*\) s: .*(\([0-9]*\) requests\{0,1\} .*/\1 \2 \3 \4/p')
	[ -n "${5:-}" ] || { echo "many-tensors: example-loader said: $_e_line" >&2; exit 1; }
	row example-loader "$1" 1 "$4" "$3" "$2" \
		"$5 requests; from the mount's return to its exit $(secs "$t_mount" "$_e_end") s"
}

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
say "many-tensors bench: ${gpu:-no GPU}, $(nproc) cpus, $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'); -o device=$dev"
# No ceiling on a host ring: its x_ceil column says "-".
ceil_g=-
[ "$dev" = host ] || ceil_g=$(field gbps "$(h2d_ceiling)")
[ "$dev" = host ] || say "pinned H2D ceiling (torch, 4 GiB pinned, 64 MiB chunks): $ceil_g GB/s"
[ "$torch" = 1 ] || say "no torch: no load_state_dict or iter_weights rows"
for q in $quants; do
	src=$bench_work/$q
	rm -f "$bench_work/runs"
	"$MKCKPT" --quiet --moe "$moe" --quant "$q" --shards 8 --index "$src"
	# The tensors of the plan: how many, and their median and mean bytes.
	"$PLAN" --json "$src" >"$bench_work/plan.json"
	stats=$(python3 - "$bench_work/plan.json" <<'PY'
import json, statistics, sys
p = json.load(open(sys.argv[1]))
b = [t["nbytes"] for t in p["tensors"]]
print(len(b), sum(b), int(statistics.median(b)), "%.0f" % (sum(b) / len(b)), p["ring_bytes"])
PY
)
	set -- $stats
	ntensors=$1
	auto_ring=$5
	say ""
	say "== $q: --moe $moe --quant $q, 8 shards, index, in /dev/shm: $1 tensors, $2 bytes; tensor bytes median $3, mean $4"
	say "$(printf '%-20s %-9s %3s %8s %7s %9s %6s  %s' row limit run s GB/s tensors/s x_ceil note)"
	for limit in $limits; do
		opts=device=$dev
		[ "$limit" = none ] || opts=$opts,buffer_size=$limit
		if [ "$torch" = 1 ]; then
			oneshot "$limit" "$opts"
			group load_state_dict "$limit"
			group iter_weights "$limit"
		fi
		stage "$limit" "$opts"
		example "$limit" "$opts"
	done
	# -o ring_size against the automatic ring (limit none), when the size is at least it.
	if printf '%s\n' "$limits" | grep -qw none; then
		# placefs-plan refuses a ring below the automatic one, as the mount would.
		if ! "$PLAN" --json --ring-size "$ring" "$src" >/dev/null 2>&1; then
			say "ring_size=$ring: refused for this checkpoint (below its automatic ring of $auto_ring bytes?): no ring row"
		elif [ "$torch" = 1 ]; then
			oneshot "ring=$ring" "device=$dev,ring_size=$ring" load,load,load
			group load_state_dict "ring=$ring"
			a=$(median load_state_dict none)
			b=$(median load_state_dict "ring=$ring")
			say "ring_size=$ring: load_state_dict median $b s = $(ratio "$a" "$b") x the speed with the automatic ring ($auto_ring bytes, median $a s)"
		else
			stage "ring=$ring" "device=$dev,ring_size=$ring"
			a=$(median "placefs-stage --all" none)
			b=$(median "placefs-stage --all" "ring=$ring")
			say "ring_size=$ring: placefs-stage --all $b s = $(ratio "$a" "$b") x the speed with the automatic ring ($auto_ring bytes, $a s)"
		fi
	fi
	rm -rf "$src"
done
if [ "$dev" != host ]; then
	ceil2=$(h2d_ceiling)
	say ""
	say "pinned H2D ceiling after the rows: $(field gbps "$ceil2") GB/s ($(ratio "$(field gbps "$ceil2")" "$ceil_g") x the first)"
fi
say "(s: load_state_dict and iter_weights from the return of the mount command to the last tensor in"
say " place; placefs-stage and example-loader from their first request to the return of their last;"
say " x_ceil: GB/s over the pinned host-to-device ceiling)"
