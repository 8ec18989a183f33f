#!/bin/sh
# SPDX-License-Identifier: MIT
# Cold disk (issue #13): a checkpoint on a local disk with the page cache
# dropped before every measurement, each on a fresh mount. In one run:
#   - the disk's own ceiling: readbench -d, a parallel O_DIRECT reader
#     (8 MiB reads, the shards cut into 64 MiB pieces), the best over the
#     thread counts of --threads (default "1 4 8 16");
#   - buffered dd of the shards one after another (bs=16M), before the
#     rows and again after each limit's rows: a row's "x dd" is against the
#     mean of the dd passes just before and just after it (a virtual disk
#     drifts by a third within a run);
#   - placefs-stage --all --mode copy, the first pass after the mount;
#   - the one-shot load of tests/bench/oneshot.py (load_state_dict into
#     cuda:0 and host memory), per staging limit and per loader cpu= mode of
#     --cpu (default "auto"; "auto read" measures the mapped cpu part
#     against the daemon's reads, each from a cold cache).
# Every placefs figure is printed with its ratio to the O_DIRECT reader and
# to dd. --streams "0 2" repeats each limit's rows per -o disk_streams value
# (lib/staging/gate.h; default: the daemon's default only). Needs root (drop_caches); the loader rows need torch, and a CUDA
# build and a GPU unless BENCH_DEVICE=host (then into host memory, --device
# cpu, on a machine without a GPU).
#
#   tests/bench/cold-disk.sh [--dir DIR] [--llama L:H:I:V | --source PATH]
#                            [--threads "N ..."] [--limits "512MiB none"] [--cpu "auto read"]
#                            [--streams "N ..."]
#
# DIR (default /var/tmp) must be on the disk to measure, not tmpfs; the
# checkpoint is written there. --source measures a checkpoint of yours where
# it lies instead (a .safetensors file or a directory on a disk; nothing is
# written to it or removed).
# Results: stdout and ${OUT:-/tmp}/cold-disk.txt.
. "$(dirname "$0")/common.sh"
dir=/var/tmp
llama=8:4096:14336:128256
threads="1 4 8 16"
limits="512MiB none"
cpu_modes=auto
streams=-
source=
while [ $# -gt 0 ]; do
	case $1 in
	--dir) dir=$2; shift ;;
	--llama) llama=$2; shift ;;
	--source) source=$2; shift ;;
	--threads) threads=$2; shift ;;
	--limits) limits=$2; shift ;;
	--cpu) cpu_modes=$2; shift ;;
	--streams) streams=$2; shift ;;
	*) echo "usage: $0 [--dir DIR] [--llama L:H:I:V | --source PATH] [--threads "N ..."] [--limits LIST] [--cpu MODES] [--streams LIST]" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" -eq 0 ] || { echo "cold-disk: needs root to drop the page cache" >&2; exit 77; }
if [ -n "$source" ]; then
	source=$(bench_source cold-disk "$source")
	dir=$(dirname "$source")
fi
case $(stat -f -c %T "$dir") in
tmpfs | ramfs) echo "cold-disk: $dir is $(stat -f -c %T "$dir"), not a disk" >&2; exit 2 ;;
esac
res=${OUT:-/tmp}/cold-disk.txt
: >"$res"
say() {
	printf '%s\n' "$*" | tee -a "$res"
}
cold() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}
if [ -n "$source" ]; then
	bench_work=$(mktemp -d /tmp/placefs-cold.XXXXXX)
	src=$source
else
	bench_work=$(mktemp -d "$dir/placefs-cold.XXXXXX")
	src=$bench_work/ckpt
fi
mnt=$(mktemp -d /tmp/placefs-cold-mnt.XXXXXX)
bench_mounts=$mnt
trap 'bench_cleanup; rmdir "$mnt" 2>/dev/null || true' EXIT INT TERM
[ -n "$source" ] || "$MKCKPT" --quiet --llama "$llama" --shards 4 --index "$src"
# The checkpoint's shards: the file itself, or a directory's .safetensors files.
if [ -d "$src" ]; then set -- "$src"/*.safetensors; else set -- "$src"; fi
total=$(bench_bytes cold-disk "$src" "$@")
for f in "$@"; do
	printf '%s\t0\t%s\n' "$f" "$(stat -c %s "$f")"
done >"$bench_work/manifest"
say "cold-disk bench: $(stat -f -c %T "$dir") at $dir ($(df -P "$dir" | awk 'NR == 2 {print $1}')), $(nproc) cpus"
if [ -n "$source" ]; then
	say "checkpoint: $src ($# shard file(s), $total bytes)"
else
	say "checkpoint: --llama $llama, 4 shards, $total bytes"
fi

# The disk's ceiling: the best of the O_DIRECT reader over thread counts
# (a virtual disk may serve one sequential stream faster than many).
ref_g=0
ref_t=
for t in $threads; do
	cold
	ref=$("$READBENCH" -d -t "$t" -b $((8 << 20)) -p $((64 << 20)) "$bench_work/manifest")
	g=$(field gbps "$ref")
	say "O_DIRECT reader, $t threads, 8 MiB reads, 64 MiB pieces: $g GB/s"
	if python3 -c "import sys; sys.exit(0 if float('$g') > float('$ref_g') else 1)"; then
		ref_g=$g
		ref_t=$t
	fi
done
say "reference: the parallel O_DIRECT reader at its best ($ref_t threads): $ref_g GB/s"

# dd_pass: buffered dd of every shard from a cold cache; prints GB/s.
dd_pass() {
	cold
	t0=$(now_ns)
	for f in "$@"; do
		dd if="$f" of=/dev/null bs=16M status=none
	done
	t1=$(now_ns)
	python3 -c "print('%.2f' % ($total / (($t1 - $t0) / 1e9) / 1e9))"
}
dd_g=$(dd_pass "$@")
dd_all=$dd_g
say "buffered dd bs=16M, shards one after another: $dd_g GB/s"

rows=
for lim in $limits; do
	for ds in $streams; do
		opts=device=${BENCH_DEVICE:-cuda:0}
		[ "$lim" = none ] || opts="$opts,buffer_size=$lim"
		lab=$lim
		[ "$ds" = - ] || { opts="$opts,disk_streams=$ds"; lab="$lim s=$ds"; }
		cold
		mkdir -p "$mnt"
		"$PLACEFS" -o "$opts" "$src" "$mnt"
		line=$("$PLACEFS_STAGE" --all "$mnt" --mode copy -q | tail -n 1)
		fusermount3 -u "$mnt"
		sg=$(printf '%s\n' "$line" | gbps_of)
		say "limit $lab: placefs-stage --all copy, first pass, cold: $line"
		dev=cuda:0
		[ "${BENCH_DEVICE:-cuda:0}" != host ] || dev=cpu
		for cm in $cpu_modes; do
			cold
			lline=$(ONESHOT_CPU=$cm PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}" python3 \
				"$top/tests/bench/oneshot.py" "$PLACEFS" "$opts" "$src" "$mnt" --what load \
				--device "$dev")
			say "limit $lab: $lline"
			lg=$(printf '%s\n' "$lline" | gbps_of)
			rows="$rows$lab cpu=$cm|$sg|$lg|$dd_g
"
		done
	done
	# dd again: the rows of this limit are compared with the mean of the
	# passes around them.
	dd_n=$(dd_pass "$@")
	say "buffered dd bs=16M after the rows of limit $lim: $dd_n GB/s"
	rows=$(printf '%s' "$rows" | awk -F'|' -v n="$dd_n" 'BEGIN { OFS = "|" }
		NF == 4 && $4 !~ /=$/ { $4 = sprintf("%.2f", ($4 + n) / 2); $4 = $4 "=" } { print }')
	rows="$rows
"
	dd_g=$dd_n
	dd_all="$dd_all $dd_n"
done

say ""
say "cold page cache before every row, fresh mount; ratios to the O_DIRECT reader at its best ($ref_g GB/s) and to the mean of the buffered dd passes just before and after the row (dd passes in order: $dd_all GB/s)"
say "$(printf '%-22s | %-28s | %-28s | %s' 'limit, loader cpu' 'placefs-stage --all (GB/s)' 'one-shot load (GB/s)' 'dd')"
printf '%s' "$rows" | while IFS='|' read -r l s g d; do
	[ -n "$l" ] || continue
	d=${d%=}
	say "$(printf '%-22s | %6s %5s x ref %5s x dd | %6s %5s x ref %5s x dd | %s' "$l" "$s" \
		"$(ratio "$s" "$ref_g")" "$(ratio "$s" "$d")" "$g" "$(ratio "$g" "$ref_g")" \
		"$(ratio "$g" "$d")" "$d")"
done
