#!/bin/sh
# SPDX-License-Identifier: MIT
# python-torch: the package placefs with torch, on the host (no GPU needed),
# installed with `make install-python` (tests/pyinstall.sh):
#   - tests/py/views_bulk_test.py: the loader's bulk result views
#     (_torch.typed_views: runs of one shape cut by one unbind) against
#     typed() one tensor at a time, on random and mixture-of-experts layouts;
#   - tests/py/loader_test.py's seed, wrap and mixed scenarios on -o
#     device=host mounts with torch present: the results are torch tensors
#     (typed values, views of the shm destination), byte-exact with the
#     checkpoint, as tests/py/gpu-smoke.sh runs them on a GPU machine;
#   - its cpumap scenario: cpu-placed tensors mapped from the source shards
#     (cpu="auto", "map", "read"; private, and refused for a shard its group
#     may write or that changed since the mount).
# The interpreter is the one the tests use when it imports torch, else the
# distribution's /usr/bin/python3 (CI installs python3-torch where the
# distribution has it); exit 77 only when neither imports torch.
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"
require_fuse

. "$top_srcdir/tests/pyinstall.sh"

# A python3 whose torch placefs uses (placefs._torch.TORCH_MIN or newer).
has_torch() {
	"$1" -c 'import sys, torch
v = torch.__version__.split(".")
sys.exit(0 if (int(v[0]), int("".join(c for c in v[1] if c.isdigit()) or 0)) >= (1, 13) else 1)' \
		>/dev/null 2>&1
}
if ! has_torch "$PYTHON"; then
	for alt in /usr/bin/python3 /usr/local/bin/python3; do
		if [ -x "$alt" ] && has_torch "$alt"; then
			note "$PYTHON has no torch; using $alt"
			PYTHON=$alt
			break
		fi
	done
fi
has_torch "$PYTHON" || { echo "SKIP: no python3 here imports torch 1.13 or newer"; exit 77; }
PYDIR=$top_srcdir/tests/py
py_install
unset PLACEFS_NO_TORCH INSTANTTENSOR_COPY INSTANTTENSOR_BUFFER_SIZE
note "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') with $PYTHON"

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt

tmo 120 "$PYTHON" "$PYDIR/views_bulk_test.py" cpu || fail "views_bulk_test.py"

tmo 20 "$MKCKPT" -q --seed 7 --tensor 'small:F32:262144' --tensor 'large:F32:2359296' \
	seed.safetensors || fail "mkckpt seed"
tmo 20 "$MKCKPT" -q --seed 8 --tensor 'w.0:BF16:2097152' --tensor 'w.1:BF16:2048x1024' \
	--tensor 'w.2:BF16:2097152' --tensor 'w.3:BF16:1024x2048' --tensor 'w.4:BF16:2097152' \
	wrap.safetensors || fail "mkckpt wrap"
tmo 20 "$MKCKPT" -q --seed 9 --tensor '.hidden/x%y:F16:3x5' --tensor 'scalar:F64:scalar' \
	--tensor 'empty:I32:0x3' --tensor 'big.one:U8:70000' --random 40 --max-bytes 48K \
	--shards 3 --index mixed || fail "mkckpt mixed"

mount_fs seed.safetensors "$MP" -o buffer_size=8388608,device=host
tmo 60 "$PYTHON" "$PYDIR/loader_test.py" seed "$MP" seed.safetensors 8388608 ||
	fail "seed scenario with torch"
umount_fs "$MP"
mount_fs wrap.safetensors "$MP" -o buffer_size=8M,device=host
tmo 90 "$PYTHON" "$PYDIR/loader_test.py" wrap "$MP" wrap.safetensors || fail "wrap scenario with torch"
umount_fs "$MP"
mount_fs mixed "$MP" -o buffer_size=16K,device=host
tmo 60 "$PYTHON" "$PYDIR/loader_test.py" mixed "$MP" mixed 16384 || fail "mixed scenario with torch"
umount_fs "$MP"
# cpu="auto"/"map"/"read": a copy of mixed whose second shard its group may write.
cp -r mixed mixedmap || fail "cp mixed"
chmod 644 mixedmap/*.safetensors && chmod 664 mixedmap/model-00002-of-00003.safetensors ||
	fail "chmod mixedmap"
mount_fs mixedmap "$MP" -o buffer_size=16K,device=host
tmo 90 "$PYTHON" "$PYDIR/loader_test.py" cpumap "$MP" mixedmap 16384 \
	model-00002-of-00003.safetensors || fail "cpumap scenario with torch"
umount_fs "$MP"
# iter_weights from the head of a long plan.json, cpu-placed tensors mapped (torch).
tmo 20 "$MKCKPT" -q --seed 10 --tensor '.enc/od%d:F32:7' --random 1500 --max-bytes 4K \
	--shards 3 --index bigplan || fail "mkckpt bigplan"
mount_fs bigplan "$MP" -o buffer_size=2K,device=host
tmo 120 "$PYTHON" "$PYDIR/loader_test.py" bigplan "$MP" bigplan || fail "bigplan scenario with torch"
umount_fs "$MP"
exit 0
