#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-read: PLACEFS_IOC_STAGE_READ, the daemon's readers filling a caller's
# shm object with no ring: every tensor exact (gpu- and cpu-placed), on a
# host-ring mount and on a -o device=none mount; the documented errnos; the
# ring refused as a destination; a destination truncated under the copy
# (errors, the daemon stays up, bytes exact afterwards); eight concurrent
# callers into one object; the stats; load_state_dict bringing cpu-placed
# tensors by STAGE_READ, and iter_weights equal to it (copy and borrow, small
# windows, an early stop that leaves no lease or shm object behind), its
# contract (copy: owned items, no more than the window in flight; borrow: one
# lease ahead of the consumer's, two at most);
# PLACEFS_IOC_STAGE_BATCH (read and copy batches exact, per-entry EFBIG,
# ERANGE and EINVAL beside entries that land, malformed requests EINVAL,
# ENODEV for copy without staging); a small mixture of experts whose
# adjacent tensors are moved as a few ranges, bytes exact.
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
. "$(dirname "$0")/lib.sh"
require_fuse

# The installed package (make install-python into $TMP), never python/ itself.
. "$top_srcdir/tests/pyinstall.sh"
py_install
PLACEFS_NO_TORCH=1
export PLACEFS_NO_TORCH
T="$PYTHON $top_srcdir/tests/py/read_test.py"

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt

# Limit 8 MiB: small tensors on the gpu, a 24 MiB and a 9 MiB one on the cpu.
tmo 20 "$MKCKPT" -q --seed 11 --tensor 'emb:BF16:12582912' --tensor 'a:F32:262144' \
	--tensor 'b:F16:4096x513' --tensor 'head:F32:2359296' --tensor 'n:F32:7' \
	--tensor 'empty:F32:0' ck.safetensors || fail "mkckpt"

for dev in host none; do
	mount_fs ck.safetensors "$MP" -o buffer_size=8388608,device=$dev
	out=$(tmo 60 $T basic "$MP" ck.safetensors) || fail "basic ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T errors "$MP" ck.safetensors) || fail "errors ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T concurrent "$MP" ck.safetensors) || fail "concurrent ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T loader "$MP" ck.safetensors) || fail "loader ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T batch "$MP" ck.safetensors) || fail "batch ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T ranges "$MP" ck.safetensors) || fail "ranges ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T stream "$MP" ck.safetensors) || fail "stream ($dev): $out"
	note "$dev: $out"
	if [ $dev = host ]; then
		out=$(tmo 30 $T ring "$MP" ck.safetensors) || fail "ring: $out"
		note "$out"
		out=$(tmo 90 $T shrink "$MP" ck.safetensors) || fail "shrink: $out"
		note "$out"
		kill -0 "$MOUNT_PID" || fail "the daemon died in the shrink race"
	fi
	[ "$(stat_get "$MP" staging.read.now)" = 0 ] || fail "read.now not 0"
	umount_fs "$MP"
done

# A small mixture of experts (2 shards, 1,000 tensors of 4-16 KiB, most
# adjacent in their shard): batches move neighbours as one range.
tmo 20 "$MKCKPT" -q --moe 4:64:80:32:100 --shards 2 --index moe || fail "mkckpt --moe"
for dev in host none; do
	mount_fs moe "$MP" -o buffer_size=1048576,device=$dev
	out=$(tmo 60 $T runs "$MP" moe) || fail "runs ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T ranges "$MP" moe) || fail "ranges, moe ($dev): $out"
	note "$dev: $out"
	out=$(tmo 60 $T stream "$MP" moe) || fail "stream ($dev): $out"
	note "$dev: $out"
	umount_fs "$MP"
done
exit 0
