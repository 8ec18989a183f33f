#!/bin/sh
# SPDX-License-Identifier: MIT
# Time to the first tensor after a fresh mount, in a process that is already
# running (issue #13): oneshot.py --what first, --repeat times, on a
# mixture-of-experts checkpoint (default 51,027 tensors: placefs-mkckpt --moe
# 48:64:352:16:1000, 8 shards, index). Each repeat mounts twice: once to
# choose the tensor (untimed), once to time Mount(), borrow() and the copy out
# of the ring from the return of the mount command. The reference in the
# same run: reading the whole plan (Mount().tensors) on that mount, which the
# first tensor does not wait for.
#
# --device cpu (the default): a host ring, no torch needed (scripts/test's
# bench layer). --device cuda:0 on a GPU machine (the mount's default device),
# which also times iter_weights' first item (oneshot.py iter) on a fresh mount.
#
#   tests/bench/first-tensor.sh [--moe L:H:E:I:V] [--repeat N] [--device D] [--dir DIR]
. "$(dirname "$0")/common.sh"
moe=48:64:352:16:1000
repeat=3
device=cpu
dir=${TMPDIR:-/tmp}
while [ $# -gt 0 ]; do
	case $1 in
	--moe) moe=$2; shift ;;
	--repeat) repeat=$2; shift ;;
	--device) device=$2; shift ;;
	--dir) dir=$2; shift ;;
	*) echo "usage: $0 [--moe L:H:E:I:V] [--repeat N] [--device cpu|cuda:N] [--dir DIR]" >&2; exit 2 ;;
	esac
	shift
done
# With a GPU (torch there) also iter_weights' first item on a fresh mount.
case $device in
cpu) opts=device=host what=first ;;
*) opts=device=$device what=first,iter ;;
esac
bench_work=$(mktemp -d "$dir/placefs-first.XXXXXX")
src=$bench_work/ckpt
mnt=$bench_work/mnt
mkdir -p "$mnt"
bench_mounts=$mnt
"$MKCKPT" --quiet --moe "$moe" --shards 8 --index "$src"
echo "first-tensor: --moe $moe ($(ls "$src" | wc -l) files), -o $opts, --device $device, $(nproc) cpus"
i=0
while [ $i -lt "$repeat" ]; do
	PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$top/tests/bench/oneshot.py" \
		"$PLACEFS" "$opts" "$src" "$mnt" --what "$what" --device "$device" | tee -a "$bench_work/lines"
	i=$((i + 1))
done
python3 - "$bench_work/lines" <<'PY'
import re, statistics, sys
first, plan, items = [], [], []
for l in open(sys.argv[1]):
    m = re.search(r"the first item ([0-9.]+) ms after it", l)
    if m:
        items.append(float(m.group(1)))
    m = re.search(r" ([0-9.]+) ms after the mount returned \(without reading the plan; the whole "
                  r"plan of ([0-9]+) tensors then read in ([0-9.]+) ms", l)
    if m:
        first.append(float(m.group(1)))
        plan.append(float(m.group(3)))
        n = int(m.group(2))
if not first:
    sys.exit("first-tensor: no measurement without the plan read (the loader read the plan)")
print("first-tensor: median %.1f ms to the first tensor (%s); the whole plan of %d tensors "
      "%.1f ms (%s): %.1f x" % (statistics.median(first), ", ".join("%.1f" % x for x in first), n,
                                statistics.median(plan), ", ".join("%.1f" % x for x in plan),
                                statistics.median(plan) / statistics.median(first)))
if items:
    print("first-tensor: iter_weights' first item, median %.1f ms (%s)"
          % (statistics.median(items), ", ".join("%.1f" % x for x in items)))
PY
