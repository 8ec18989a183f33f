#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-example-loader: tests/example-loader (the documented C loader of
# doc/STAGING.md, built against <placefs/client.h> and libplacefs-client.a
# alone) on live mounts with the host ring (-o device=host):
#   - a 3-shard checkpoint with a cpu-placed tensor, a 0-byte one and a name
#     with odd characters: --verify loads every gpu-placed tensor (the count
#     and bytes of .placefs/plan.json's gpu entries, the same as
#     placefs-stage --all's), each byte-exact against read() of its file;
#   - a mixture of experts of some thousand small tensors (quantized with
#     placefs-mkckpt --quant fp8 where the tool has it): batches of 256, the
#     count, bytes and requests checked, byte-exact;
#   - refusals: a bad command line (exit 2), a directory that is no placefs
#     mount, a mount without staging (-o device=none) and one of two rings
#     (a batch names no device), each exit 1 with a message.
TEST_TIMEOUT=${TEST_TIMEOUT:-180}
. "$(dirname "$0")/lib.sh"
require_fuse

LOADER=$top_builddir/tests/example-loader
STAGE=$top_builddir/tools/placefs-stage
[ -x "$LOADER" ] || fail "$LOADER is not built"
[ -x "$STAGE" ] || fail "$STAGE is not built"
unset INSTANTTENSOR_COPY

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt

# gpu_counts: "COUNT BYTES" of the gpu-placed entries of $MP/.placefs/plan.json.
gpu_counts() {
	tmo 20 "$PYTHON" - "$MP/.placefs/plan.json" <<'EOF'
import json, sys
t = [t for t in json.load(open(sys.argv[1]))["tensors"] if t["placement"] == "gpu"]
print(len(t), sum(x["nbytes"] for x in t))
EOF
}

# check_load NAME: example-loader --verify on $MP: every gpu-placed tensor, its bytes, byte-exact.
check_load() {
	set -- "$1" $(gpu_counts)
	[ "$2" -gt 0 ] || fail "$1: no gpu-placed tensors to load"
	tmo 60 "$LOADER" --verify "$MP" >load.out 2>&1 &
	pid=$!
	wait "$pid" || fail "$1: example-loader --verify: $(cat load.out)"
	out=$(cat load.out)
	# Its shared-memory destination is gone with it.
	for f in /dev/shm/placefs-client-"$pid"-*; do
		[ ! -e "$f" ] || fail "$1: example-loader left $f behind"
	done
	echo "$out" | grep -Eq "^example-loader: $2 tensors, $3 bytes in [0-9.]+ s: [0-9.]+ GB/s, [0-9]+ tensors/s \(([0-9]+) requests? into shared memory\)$" ||
		fail "$1: the load line: $out (want $2 tensors, $3 bytes)"
	echo "$out" | grep -q "^verify: $2 of $2 tensors byte-exact$" || fail "$1: verify: $out"
	reqs=$(echo "$out" | sed -n 's/.*(\([0-9]*\) requests\{0,1\} into .*/\1/p')
	# Batches of at most 256 tensors and 64 MiB: never more requests than tensors, at least
	# one per 256.
	[ "$reqs" -ge $((($2 + 255) / 256)) ] && [ "$reqs" -le "$2" ] ||
		fail "$1: $reqs requests for $2 tensors"
	# placefs-stage --all counts the same tensors and bytes.
	sout=$(tmo 60 "$STAGE" -q --all "$MP") || fail "$1: placefs-stage --all: $sout"
	echo "$sout" | grep -q "^placefs-stage: $2 of $2 tensors staged (copy), $3 bytes" ||
		fail "$1: placefs-stage --all: $sout"
	note "$1: $(echo "$out" | head -n 1); $(echo "$out" | tail -n 1)"
}

# ---- a multi-shard checkpoint: cpu-placed, empty and oddly named tensors ---------------------
tmo 30 "$MKCKPT" -q --seed 11 --tensor 'big.0:F32:600000' --tensor '.odd/name%x:BF16:333' \
	--tensor 'empty:F16:0' --random 60 --max-bytes 1536K --shards 3 --index multi ||
	fail "mkckpt multi"
mount_fs multi "$MP" -o buffer_size=2M,device=host
check_load multi
umount_fs "$MP"

# ---- a mixture of experts of small tensors, in batches of 256 --------------------------------
quant=
"$MKCKPT" --help 2>&1 | grep -q -- '--quant' && quant="--quant fp8"
# shellcheck disable=SC2086 # $quant is empty or two words
tmo 60 "$MKCKPT" -q --moe 2:128:64:128:1000 $quant --shards 4 --index moe || fail "mkckpt moe"
mount_fs moe "$MP" -o device=host
check_load "moe${quant:+ ($quant)}"
umount_fs "$MP"

# ---- refusals -----------------------------------------------------------------------------
st=0
out=$(tmo 10 "$LOADER" 2>&1) || st=$?
[ "$st" -eq 2 ] && echo "$out" | grep -q '^usage: example-loader' || fail "no arguments: exit $st: $out"
st=0
out=$(tmo 10 "$LOADER" --fast "$TMP" 2>&1) || st=$?
[ "$st" -eq 2 ] || fail "--fast: exit $st: $out"
st=0
out=$(tmo 10 "$LOADER" "$TMP" 2>&1) || st=$?
[ "$st" -eq 1 ] && echo "$out" | grep -q 'not a placefs mount' || fail "a plain directory: exit $st: $out"
mount_fs multi "$MP" -o buffer_size=2M,device=none
st=0
out=$(tmo 30 "$LOADER" "$MP" 2>&1) || st=$?
[ "$st" -eq 1 ] && echo "$out" | grep -q 'stages nothing' || fail "-o device=none: exit $st: $out"
umount_fs "$MP"
mount_fs multi "$MP" -o buffer_size=2M,device=host:0,host:1
st=0
out=$(tmo 30 "$LOADER" "$MP" 2>&1) || st=$?
[ "$st" -eq 1 ] && echo "$out" | grep -q 'stages to 2 devices' || fail "two rings: exit $st: $out"
umount_fs "$MP"
note "refused: no arguments and an unknown option (exit 2), a plain directory, -o device=none, two rings (exit 1)"
