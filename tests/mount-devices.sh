#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-devices: one daemon, one staging ring per device, and tensor-parallel
# slices, with the host backend's stand-ins for GPUs (-o device=host:0,host:1):
# RING_INFO per device and position; each ring bounded by the staging limit
# and independent of the other (a lease filling ring 0 leaves ring 1 free);
# a borrow naming no device EINVAL, a device the mount does not serve ENODEV;
# slices of dim 0 and 1, copy and borrow, equal to slicing the source bytes;
# .placefs/stats per device (bytes moved = slice bytes); the Python loader's
# shard=(rank, world, dims) for load_state_dict and iter_weights; the mount
# refusing bad device lists; a single-device mount behaving as before
# (tests/py/shard_test.py does the checks).
TEST_TIMEOUT=${TEST_TIMEOUT:-180}
. "$(dirname "$0")/lib.sh"
require_fuse

. "$top_srcdir/tests/pyinstall.sh"
py_install
PLACEFS_NO_TORCH=1
export PLACEFS_NO_TORCH
T="$PYTHON $top_srcdir/tests/py/shard_test.py"

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt

# Limit 1 MiB: every tensor but 'big' is gpu-placed; 'fill' takes most of a ring.
tmo 20 "$MKCKPT" -q --seed 16 --tensor 'a.col:F32:64x96' --tensor 'a.row:BF16:128x256' \
	--tensor 'c.col:F16:96x40x3' --tensor 'bias.col:F32:256' --tensor 'u.row:U8:33x8' \
	--tensor 'emb:F32:40x7' --tensor 'fill:F32:200x1024' --tensor 'n:F32:5' \
	--tensor 'big:F32:512x1024' ck.safetensors || fail "mkckpt"

mount_fs ck.safetensors "$MP" -o buffer_size=1048576,device=host:0,host:1
[ "$(stat_get "$MP" staging.ndevices)" = 2 ] || fail "staging.ndevices is not 2"
[ "$(stat_get "$MP" staging.device)" = "host:0,host:1" ] ||
	fail "staging.device is '$(stat_get "$MP" staging.device)'"
grep -q "host:0,host:1" "$MP/.placefs/plan" || fail ".placefs/plan does not name both devices"
for s in daemon rings loader; do
	out=$(tmo 120 $T $s "$MP" ck.safetensors) || fail "$s: $out"
	note "$out"
done
# placefs-stage --slice/--device: slices verified against read() of the file.
STAGE=$top_builddir/tools/placefs-stage
out=$(tmo 30 "$STAGE" -q --verify --device 1 --slice 1/2@0 "$MP/a.col" "$MP/a.row" "$MP/fill") ||
	fail "placefs-stage --slice 1/2@0 --device 1: $out"
case $out in *"verify: 3 of 3 tensors byte-exact"*) ;; *) fail "placefs-stage: $out" ;; esac
out=$(tmo 30 "$STAGE" -q --verify --mode borrow --device 0 --slice 1:8:48 "$MP/a.col" "$MP/a.row") ||
	fail "placefs-stage --mode borrow --slice 1:8:48: $out"
case $out in *"verify: 2 of 2 tensors byte-exact"*) ;; *) fail "placefs-stage borrow: $out" ;; esac
tmo 30 "$STAGE" -q --mode borrow "$MP/a.col" >"$TMP/st.out" 2>&1 &&
	fail "placefs-stage: a borrow naming no device on a mount of two succeeded"
grep -q EINVAL "$TMP/st.out" || fail "placefs-stage: no EINVAL: $(cat "$TMP/st.out")"
tmo 30 "$STAGE" -q --device 5 "$MP/a.col" >"$TMP/st.out" 2>&1 &&
	fail "placefs-stage --device 5 succeeded"
grep -q "No such device" "$TMP/st.out" || fail "placefs-stage --device 5: $(cat "$TMP/st.out")"
note "placefs-stage --slice/--device: verified"
kill -0 "$MOUNT_PID" || fail "the daemon died"
umount_fs "$MP"

# One device named in a list of one: exactly the single ring of before
# (a borrow needs no device; naming its own works, another is ENODEV).
mount_fs ck.safetensors "$MP" -o buffer_size=1048576,device=host:3
[ "$(stat_get "$MP" staging.ndevices)" = 1 ] || fail "host:3: staging.ndevices is not 1"
out=$(tmo 30 "$PYTHON" - "$MP" <<'PY'
import errno, os, sys
import placefs
from placefs import stage
from placefs._ioctl import release, ring_info
m = placefs.Mount(sys.argv[1])
t = m.tensor("a.col")
fd = os.open(t.path, os.O_RDONLY)
ri = ring_info(fd)
assert ri.ndevices == 1 and ri.device == 3 and ri.position == 0, ri
r = stage(fd, "borrow")
assert r.device == 3 and r.nbytes == t.nbytes, r
release(fd, r.lease)
r = stage(fd, "borrow", device=3, slice=(1, 0, 48))
assert r.nbytes == t.nbytes // 2, r
release(fd, r.lease)
try:
    stage(fd, "borrow", device=0)
    sys.exit("device 0 on a host:3 mount was not refused")
except OSError as e:
    assert e.errno == errno.ENODEV, e
print("host:3: one ring, borrows without a device")
PY
) || fail "host:3: $out"
note "$out"
umount_fs "$MP"

# Bad lists are refused at mount, naming the rule.
for bad in "host:0,host:0" "host:0,cuda:1" "host:64" "cuda:all,cuda:0" "host,host:1"; do
	tmo 10 "$PLACEFS" -f -o device="$bad" ck.safetensors "$MP" >"$TMP/bad.out" 2>&1 &&
		fail "-o device=$bad was accepted"
	grep -q "device" "$TMP/bad.out" || fail "-o device=$bad: no message naming the option: $(cat "$TMP/bad.out")"
done
exit 0
