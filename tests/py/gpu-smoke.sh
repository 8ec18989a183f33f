#!/bin/sh
# SPDX-License-Identifier: MIT
# gpu-smoke: the package placefs (installed from python/ with make
# install-python into a temporary DESTDIR) with torch against CUDA mounts (-o device=cuda:0)
# and, with torch enabled, against host mounts; first views_bulk_test.py (the
# loader's bulk views, no mount). This is not part of `make
# check` (CI has no GPU); run it by hand on a machine with a GPU, torch and
# /dev/fuse:
#
#   tests/py/gpu-smoke.sh BUILDDIR
#
# BUILDDIR holds fs/placefs and tools/placefs-mkckpt built with CUDA. As root
# the mounts need no fusermount3 (libfuse mounts directly).
set -eu
B=$(cd "$1" && pwd)
S=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON3:-python3}
W=$(mktemp -d /tmp/placefs-gpu.XXXXXX)
MP=$W/mnt
PID=""
mkdir -p "$MP"
# The package as `make install-python` installs it (into $W), not python/ itself.
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL ${MAKE:-make} -s -C "$B" install-python \
	DESTDIR="$W/pyinst" prefix=/usr/local PYTHON3="$PYTHON" >"$W/pyinst.log" 2>&1 || {
	cat "$W/pyinst.log" >&2
	echo "gpu-smoke: make install-python failed" >&2
	exit 1
}
SITE=$(find "$W/pyinst" -path '*/placefs/__init__.py' | head -n 1)
SITE=${SITE%/placefs/__init__.py}
[ -n "$SITE" ] || { echo "gpu-smoke: make install-python installed no package" >&2; exit 1; }
export PYTHONPATH="$SITE:$S/tests/py"
unset INSTANTTENSOR_COPY PLACEFS_NO_TORCH INSTANTTENSOR_BUFFER_SIZE

unmount() {
	if grep -q " $MP fuse" /proc/mounts; then
		fusermount3 -u -z "$MP" 2>/dev/null || umount -l "$MP"
	fi
	if [ -n "$PID" ]; then
		wait "$PID" || echo "gpu-smoke: placefs exited with status $?" >&2
		PID=""
	fi
}
cleanup() {
	unmount
	rm -rf "$W"
}
trap cleanup EXIT

# mount SOURCE OPTIONS
mount_it() {
	"$B/fs/placefs" -f -o "$2" "$1" "$MP" 2>"$W/daemon.log" &
	PID=$!
	for _ in $(seq 1 100); do
		grep -q " $MP fuse" /proc/mounts && return 0
		kill -0 "$PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$W/daemon.log" >&2
	echo "gpu-smoke: placefs did not mount $1 -o $2" >&2
	exit 1
}

cd "$W"
"$B/tools/placefs-mkckpt" -q --seed 7 --tensor 'small:F32:262144' --tensor 'large:F32:2359296' \
	seed.safetensors
"$B/tools/placefs-mkckpt" -q --seed 8 --tensor 'w.0:BF16:2097152' --tensor 'w.1:BF16:2048x1024' \
	--tensor 'w.2:BF16:2097152' --tensor 'w.3:BF16:1024x2048' --tensor 'w.4:BF16:2097152' \
	wrap.safetensors
"$B/tools/placefs-mkckpt" -q --seed 9 --tensor '.hidden/x%y:F16:3x5' --tensor 'scalar:F64:scalar' \
	--tensor 'empty:I32:0x3' --tensor 'big.one:U8:70000' --random 40 --max-bytes 48K \
	--shards 3 --index mixed
"$B/tools/placefs-mkckpt" -q --seed 10 --llama 4:1024:2816:32000 --shards 2 --index llama

rc=0
run() {
	echo "== gpu-smoke: $*"
	"$PYTHON" "$@" || rc=1
}

# The loader's bulk views (no mount): on the host and on the GPU.
run "$S/tests/py/views_bulk_test.py" cpu
run "$S/tests/py/views_bulk_test.py" cuda:0

mount_it seed.safetensors device=cuda:0,buffer_size=8M
run "$S/tests/py/gpu_smoke.py" "$MP" seed.safetensors 8388608
unmount
mount_it wrap.safetensors device=cuda:0,buffer_size=8M
run "$S/tests/py/gpu_smoke.py" "$MP" wrap.safetensors 8388608
unmount
mount_it mixed device=cuda:0,buffer_size=16K
run "$S/tests/py/gpu_smoke.py" "$MP" mixed 16384
unmount
mount_it llama device=cuda:0,buffer_size=64M
run "$S/tests/py/gpu_smoke.py" "$MP" llama 67108864
run -m placefs "$MP" --device cuda:0 --mode copy --verify
run -m placefs "$MP" --device cuda:0 --mode borrow --verify
unmount

# The host backend with torch present (CPU tensors through torch).
mount_it seed.safetensors device=host,buffer_size=8388608
run "$S/tests/py/loader_test.py" seed "$MP" seed.safetensors 8388608
unmount
mount_it wrap.safetensors device=host,buffer_size=8M
run "$S/tests/py/loader_test.py" wrap "$MP" wrap.safetensors
unmount
mount_it mixed device=host,buffer_size=16K
run "$S/tests/py/loader_test.py" mixed "$MP" mixed 16384
unmount
exit $rc
