#!/bin/sh
# SPDX-License-Identifier: MIT
# A foreground request behind a large speculative read: how long a borrow of
# a small tensor takes when the prefetcher has just started reading a tensor
# as large as the ring (the embedding of a Llama shape). One mount, default
# device unless BENCH_DEVICE is set (host on a machine without a GPU); the
# same 8 KiB norm weight is borrowed --repeat times by placefs-stage (process
# start included), each borrow making the prefetcher start on the tensors
# after it. Prints each borrow's time and the daemon's prefetch counters
# (issued, hits, evicted, cancelled, held).
#
#   tests/bench/borrow-latency.sh [--llama L:H:I:V] [--repeat N]
#
# Default checkpoint: --llama 4:4096:14336:128256 (4 shards, index; 4.05 GB,
# the embedding and head 1 GiB each) in /dev/shm. The ring is the largest
# tensor (no limit).
. "$(dirname "$0")/common.sh"
llama=4:4096:14336:128256
repeat=6
while [ $# -gt 0 ]; do
	case $1 in
	--llama) llama=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	*) echo "usage: $0 [--llama L:H:I:V] [--repeat N]" >&2; exit 2 ;;
	esac
done
bench_work=$(mktemp -d /dev/shm/placefs-borrow-lat.XXXXXX)
"$MKCKPT" --quiet --llama "$llama" --shards 4 --index "$bench_work/ckpt"
mnt=$bench_work/mnt
opts=
[ -z "${BENCH_DEVICE:-}" ] || opts="-o device=$BENCH_DEVICE"
# shellcheck disable=SC2086 # opts is empty or one option pair
bench_mount "$bench_work/ckpt" "$mnt" $opts
f=$mnt/model.norm.weight
[ -f "$f" ] || { echo "bench: $f is not in the mount" >&2; exit 1; }
i=0
while [ $i -lt "$repeat" ]; do
	t0=$(now_ns)
	"$PLACEFS_STAGE" --mode borrow -q "$f" >/dev/null
	t1=$(now_ns)
	echo "borrow $((i + 1)) of model.norm.weight: $(((t1 - t0) / 1000)) us"
	i=$((i + 1))
done
python3 - "$mnt" <<'PY'
import json, sys
st = json.load(open(sys.argv[1] + "/.placefs/stats"))["staging"]
print("device %s, ring %d bytes; prefetch %s" % (st["device"], st["ring_bytes"],
                                                json.dumps(st["prefetch"])))
PY
bench_umount "$mnt"
