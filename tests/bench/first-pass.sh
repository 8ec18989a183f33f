#!/bin/sh
# SPDX-License-Identifier: MIT
# The first pass after a fresh mount (issue #13), side by side in one run.
# Needs a CUDA build, a GPU and python3 with torch (for the ceiling and the
# loader). For every configuration LIMIT:ZC:HB[:THREADS[:VAR=VALUE]] (LIMIT
# a staging limit or "none"; ZC 0/1 for -o zero_copy, or "-" for the
# default; HB the -o host_buffer, or "-" for the default; THREADS sets PLACEFS_STAGE_IO_THREADS, 0, "-"
# or absent = the default; VAR=VALUE one more environment setting of the
# daemon) it mounts the checkpoint afresh and measures:
#   - time to the first tensor: from the return of the mount command to the
#     end of placefs-stage --mode borrow of one small gpu-placed tensor file
#     (process start included; the tool needs no CUDA context);
#   - placefs-stage --all --mode copy, the FIRST pass on that mount, then a
#     second pass (labelled: page cache and registrations warm);
#   - the daemon's pinned host memory: the bounce buffer (stats
#     staging.host_buffer_bytes) plus the shard bytes registered for
#     zero-copy (staging.zero_copy.registered_bytes), and VmLck/VmPin;
#   - with --verify (default: the first configuration of each zero_copy
#     value), a third pass with --verify: every byte compared with read().
# Then, per --loader configuration, tests/bench/oneshot.py in a process that
# already has CUDA, each on a fresh mount: load_state_dict(device="cuda:0"),
# iter_weights(device="cuda:0"), and the cpu-placed tensors by STAGE_READ
# and mapped (the loader's cpu="read" and "map") against a parallel pread()
# of the same bytes, and the time to the first tensor in a process already
# running (oneshot.py's "first"; $ONESHOT picks among load,iter,cpu,first). A loader row's
# ENV reaches the loader too: PLACEFS_CPU=read makes its cpu-placed tensors
# new memory filled by the daemon instead of mappings of the source shards.
# The pinned host-to-device ceiling (tests/bench/gpu-ref.py) is measured in
# the same run, before the rows (every GB/s is printed with its ratio to it)
# and again after them (a drifting machine shows).
#
#   tests/bench/first-pass.sh [--llama L:H:I:V | --moe L:H:E:I:V | --source PATH] [--prime]
#                             [--configs "LIMIT:ZC:HB ..."] [--stage-batch N]
#                             [--loader "LIMIT:ZC:HB[:THREADS[:ENV]] ..."] [--verify all|first|none]
#
# Default checkpoint: Llama-3-8B shapes as placefs-mkckpt writes them
# (32:4096:14336:128256, bf16, 4 shards, index; 17.67 GB) in /dev/shm; --moe
# gives a mixture-of-experts checkpoint (placefs-mkckpt --moe, 8 shards, index);
# --source measures a checkpoint of yours as it is (a .safetensors file or a
# directory, where it lies; nothing is written to it or removed).
# --stage-batch N: the placefs-stage passes stage N tensors a request
# (placefs-stage --batch N; default the tool's: 256 a request for --all in
# copy mode; --stage-batch 1 is one a request).
# Results: stdout and ${OUT:-/tmp}/first-pass.txt; the stats of every mount
# in ${OUT:-/tmp}/first-pass-stats.txt.
. "$(dirname "$0")/common.sh"
llama=32:4096:14336:128256
moe=
source=
sbatch=
prime=
configs="512MiB:-:- 512MiB:1:- 512MiB:0:64M 512MiB:0:256M 512MiB:0:1G 512MiB:-:-:8 none:-:- none:1:- 128MiB:-:-"
loader="512MiB:-:- none:-:-"
verify=first
while [ $# -gt 0 ]; do
	case $1 in
	--llama) llama=$2; shift ;;
	--moe) moe=$2; shift ;;
	--source) source=$2; shift ;;
	--prime) prime=1 ;;
	--stage-batch) sbatch="--batch $2"; shift ;;
	--configs) configs=$2; shift ;;
	--loader) loader=$2; shift ;;
	--verify) verify=$2; shift ;;
	*) echo "usage: $0 [--llama L:H:I:V | --moe L:H:E:I:V | --source PATH] [--prime] [--configs LIST] [--stage-batch N] [--loader LIST] [--verify all|first|none]" >&2; exit 2 ;;
	esac
	shift
done
out=${OUT:-/tmp}
res=$out/first-pass.txt
stats=$out/first-pass-stats.txt
: >"$res"
: >"$stats"
say() {
	printf '%s\n' "$*" | tee -a "$res"
}
# stat_of MNT KEY.PATH: one value of the mount's .placefs/stats.
stat_of() {
	python3 - "$1/.placefs/stats" "$2" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v.get(k, {}) if isinstance(v, dict) else {}
print(v if not isinstance(v, dict) else "")
PY
}
# row_env THREADS VAR=VALUE: a row's daemon environment (in the row's subshell).
row_env() {
	if [ -n "$1" ] && [ "$1" != 0 ] && [ "$1" != - ]; then
		export PLACEFS_STAGE_IO_THREADS="$1"
	fi
	if [ -n "$2" ]; then
		export "${2?}"
	fi
}
# mount_opts LIMIT ZC HB: the -o argument of one configuration.
mount_opts() {
	_o="device=${BENCH_DEVICE:-cuda:0}"
	[ "$3" = - ] || _o="$_o,host_buffer=$3"
	[ "$1" = none ] || _o="$_o,buffer_size=$1"
	[ "$2" = - ] || _o="$_o,zero_copy=$2"
	printf '%s' "$_o"
}
mib() {
	python3 -c "print('%.0f' % (int('${1:-0}' or 0) / 2**20))"
}

if [ -n "$source" ]; then
	source=$(bench_source first-pass "$source")
fi
bench_work=$(mktemp -d /dev/shm/placefs-first.XXXXXX)
src=$bench_work/ckpt
mnt=$bench_work/mnt
bench_mounts=$mnt
unset INSTANTTENSOR_BUFFER_SIZE
if [ -n "$source" ]; then
	src=$source
elif [ -n "$moe" ]; then
	"$MKCKPT" --quiet --moe "$moe" --shards 8 --index "$src"
else
	"$MKCKPT" --quiet --llama "$llama" --shards 4 --index "$src"
fi
# The checkpoint's shards: the file itself, or a directory's .safetensors files.
if [ -d "$src" ]; then set -- "$src"/*.safetensors; else set -- "$src"; fi
total=$(bench_bytes first-pass "$src" "$@")
# The first read of freshly written pages costs the kernel more (LRU
# activation, doc/PERFORMANCE.md 3.1): --prime reads the shards once first, so
# that every row sees the page cache as a checkpoint read before leaves it.
if [ -n "$prime" ]; then
	cat "$@" >/dev/null
	say "page cache: the shards were read once before the first row (--prime)"
else
	say "page cache: as the writer left it; the first row is the first read after the write"
fi
say "first-pass bench: $(nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>/dev/null || echo no GPU), $(nproc) cpus"
if [ -n "$source" ]; then
	say "checkpoint: $src ($# shard file(s), $total bytes, on $(stat -f -c %T "$src"))"
elif [ -n "$moe" ]; then
	say "checkpoint: --moe $moe, 8 shards, $total bytes in /dev/shm"
else
	say "checkpoint: --llama $llama, 4 shards, $total bytes in /dev/shm"
fi
# BENCH_DEVICE=host (a dry run of the script without a GPU) skips torch.
ceil="gbps=0 (no ceiling: BENCH_DEVICE=${BENCH_DEVICE:-})"
[ "${BENCH_DEVICE:-cuda:0}" = host ] || ceil=$(h2d_ceiling)
say "$ceil"
ceil_g=$(field gbps "$ceil")
rows=
seen_zc=
for c in $configs; do
	limit=$(printf '%s' "$c" | cut -d: -f1)
	zc=$(printf '%s' "$c" | cut -d: -f2)
	hb=$(printf '%s' "$c" | cut -d: -f3)
	thr=$(printf '%s' "$c" | cut -d: -f4)
	cenv=$(printf '%s' "$c" | cut -d: -f5)
	opts=$(mount_opts "$limit" "$zc" "$hb")
	(
		row_env "$thr" "$cenv"
		mkdir -p "$mnt"
		# The first small gpu-placed tensor in plan order (a norm), from the plan.
		if [ "$limit" = none ]; then
			"$PLAN" --json "$src" >"$bench_work/plan.json"
		else
			"$PLAN" --json --buffer-size "$limit" "$src" >"$bench_work/plan.json"
		fi
		first_file=$(python3 - "$top/python" "$top/tests/bench" "$mnt" "$bench_work/plan.json" <<'PY'
import json, sys
sys.path[:0] = sys.argv[1:3]
from placefs import TensorInfo
from oneshot import first_small
plan = json.load(open(sys.argv[4]))
t = first_small([TensorInfo(sys.argv[3], i, t) for i, t in enumerate(plan["tensors"])])
if t is not None:
    print(t.path)
PY
)
		t0=$(now_ns)
		"$PLACEFS" -o "$opts" "$src" "$mnt"
		t1=$(now_ns)
		until "$PLACEFS_STAGE" --mode borrow -q "$first_file" >/dev/null 2>&1; do
			[ $(( ($(now_ns) - t1) / 1000000 )) -lt 10000 ] || { echo "bench: first tensor failed" >&2; exit 1; }
		done
		t2=$(now_ns)
		pid=$(bench_daemon_pid "$mnt")
		first=$("$PLACEFS_STAGE" --all "$mnt" --mode copy $sbatch -q | tail -n 1)
		pinned_after_first=$(awk '/VmLck|VmPin/ {printf "%s%s%s ", $1, $2, $3}' "/proc/$pid/status")
		second=$("$PLACEFS_STAGE" --all "$mnt" --mode copy $sbatch -q | tail -n 1)
		v=-
		if [ "$verify" = all ] || { [ "$verify" = first ] && [ "$(cat "$bench_work/seen_$zc" 2>/dev/null)" != 1 ]; }; then
			echo 1 >"$bench_work/seen_$zc"
			vout=$("$PLACEFS_STAGE" --all "$mnt" --mode copy $sbatch --verify -q | tail -n 2)
			printf '%s\n' "$vout" | grep -q '^verify: \([0-9]*\) of \1 tensors byte-exact' ||
				{ echo "bench: --verify failed for $c: $vout" >&2; exit 1; }
			v=ok
		fi
		hbb=$(stat_of "$mnt" staging.host_buffer_bytes)
		regb=$(stat_of "$mnt" staging.zero_copy.registered_bytes)
		regns=$(stat_of "$mnt" staging.zero_copy.registration_ns)
		zon=$(stat_of "$mnt" staging.zero_copy.on)
		nthr=$(stat_of "$mnt" staging.io_threads)
		chunk=$(stat_of "$mnt" staging.chunk_bytes)
		{
			echo "== $c ($opts) threads ${thr:-default} ${cenv:-}"
			echo "first: $first"
			echo "second: $second"
			echo "VmLck/VmPin after the first pass: $pinned_after_first"
			cat "$mnt/.placefs/stats"
			echo
		} >>"$stats"
		fusermount3 -u "$mnt"
		fg=$(printf '%s\n' "$first" | gbps_of)
		sg=$(printf '%s\n' "$second" | gbps_of)
		printf '%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s\n' "$limit" "${zc}/${zon:-?}" "$hb" \
			"$(python3 -c "c=int('${chunk:-0}' or 0); print('%dM' % (c >> 20) if c >= 1 << 20 else '%dK' % (c >> 10))")" "$nthr" "$fg" "$(ratio "$fg" "$ceil_g")" "$sg" "$(ratio "$sg" "$ceil_g")" \
			"$(python3 -c "print('%.0f' % (($t1-$t0)/1e6))")" "$(python3 -c "print('%.0f' % (($t2-$t1)/1e6))")" \
			"$(mib "$hbb")+$(mib "$regb")" "$(python3 -c "print('%.2f' % (int('${regns:-0}' or 0)/1e9))")" "$v" \
			>>"$bench_work/rows"
		say "config $c: first pass: $first"
		say "config $c: second pass: $second"
	)
done

# load_state_dict on a fresh mount, made by a process that already has CUDA.
[ "${BENCH_DEVICE:-cuda:0}" != host ] || loader=
for c in $loader; do
	limit=$(printf '%s' "$c" | cut -d: -f1)
	zc=$(printf '%s' "$c" | cut -d: -f2)
	hb=$(printf '%s' "$c" | cut -d: -f3)
	thr=$(printf '%s' "$c" | cut -d: -f4)
	cenv=$(printf '%s' "$c" | cut -d: -f5)
	opts=$(mount_opts "$limit" "$zc" "$hb")
	mkdir -p "$mnt"
	lines=$(
		row_env "$thr" "$cenv"
		PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$top/tests/bench/oneshot.py" \
			"$PLACEFS" "$opts" "$src" "$mnt" --what "${ONESHOT:-load,iter,cpu,first}"
	) || { echo "bench: oneshot.py failed for $c" >&2; exit 1; }
	printf '%s\n' "$lines" | while IFS= read -r l; do say "loader $c: $l"; done
	line=$(printf '%s\n' "$lines" | grep '^load:' || true)
	iline=$(printf '%s\n' "$lines" | grep '^iter:' || true)
	cline=$(printf '%s\n' "$lines" | grep '^cpu:' || true)
	mline=$(printf '%s\n' "$lines" | grep '^cpu-map:' || true)
	ig=$(printf '%s\n' "$iline" | gbps_of)
	cr=$(printf '%s\n' "$cline" | sed -n 's/.* \([0-9.]*\) x the reference.*/\1/p')
	mr=$(printf '%s\n' "$mline" | sed -n 's/.* \([0-9.]*\) x the reference.*/\1/p')
	fms=$(printf '%s\n' "$lines" | sed -n 's/^first: .* \([0-9.]*\) ms after the mount returned.*/\1/p')
	lg=$(printf '%s\n' "$line" | gbps_of)
	printf '%s|%s|%s|%s|%s|%s|%s|%s\n' "$limit" "$zc" "$hb${thr:+:$thr}${cenv:+:$cenv}" "$lg" "${ig:--}" "${cr:--}" "${mr:--}" "${fms:--}" >>"$bench_work/lrows"
done

# The ceiling again after the rows: a machine whose pace drifts during the
# run (a busy host shares the last-level cache and the memory bus) shows it.
ceil2_g=
if [ "${BENCH_DEVICE:-cuda:0}" != host ]; then
	ceil2=$(h2d_ceiling)
	ceil2_g=$(field gbps "$ceil2")
fi
say ""
say "pinned H2D ceiling (torch, 4 GiB pinned, 64 MiB chunks): $ceil_g GB/s${ceil2_g:+; after the rows $ceil2_g GB/s ($(ratio "$ceil2_g" "$ceil_g") x)}"
# With --configs "" there are no stage rows, only loader rows.
if [ -s "$bench_work/rows" ]; then
	say "placefs-stage --all --mode copy${sbatch:+ $sbatch} on a FRESH mount per row; GB/s and x ceiling"
	say "$(printf '%-7s %-5s %-5s %-5s %-3s | %6s %5s | %6s %5s | %5s %5s | %-11s %5s %s' \
		limit zc/on hbuf chunk thr first x 2nd x mntms 1stms pinMiB+reg reg_s verify)"
	while IFS='|' read -r l z h ch n fg fr sg sr mt ft pm rs v; do
		say "$(printf '%-7s %-5s %-5s %-5s %-3s | %6s %5s | %6s %5s | %5s %5s | %-11s %5s %s' \
			"$l" "$z" "$h" "$ch" "$n" "$fg" "$fr" "$sg" "$sr" "$mt" "$ft" "$pm" "$rs" "$v")"
	done <"$bench_work/rows"
	say "(mntms: mount command; 1stms: mount returned -> first tensor staged (borrow, one norm, incl."
	say " process start); pinMiB+reg: bounce buffer + shard bytes registered for zero-copy, MiB)"
fi
if [ -s "$bench_work/lrows" ]; then
	while IFS='|' read -r l z h g ig cr mr fm; do
		say "one-shot, fresh mount, limit $l zc $z hbuf $h: load_state_dict $g GB/s ($(ratio "$g" "$ceil_g") x ceiling), iter_weights $ig GB/s ($(ratio "$ig" "$ceil_g") x), cpu-placed by STAGE_READ $cr x parallel pread, mapped $mr x; first tensor $fm ms in-process"
	done <"$bench_work/lrows"
fi
