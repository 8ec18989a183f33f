# SPDX-License-Identifier: MIT
# Shared by the benchmark scripts. B = build directory (default build/dev).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-$top/build/dev}
[ -x "$B/fs/placefs" ] || { echo "bench: build first (scripts/test dev, or B=...)" >&2; exit 2; }
PLACEFS=$B/fs/placefs
PLAN=$B/tools/placefs-plan
MKCKPT=$B/tools/placefs-mkckpt
READBENCH=$B/tests/bench/readbench
TOUCHBENCH=$B/tests/bench/touchbench
XATTRBENCH=$B/tests/bench/xattrbench
PLACEFS_STAGE=$B/tools/placefs-stage

# bench_source WHO PATH: a --source PATH made absolute; exit 2, naming WHO, when
# it does not exist.
bench_source() {
	[ -e "$2" ] || { echo "$1: --source $2: no such file or directory" >&2; exit 2; }
	printf '%s/%s' "$(cd "$(dirname "$2")" && pwd)" "$(basename "$2")"
}

# bench_bytes WHO SRC SHARD...: the bytes of a checkpoint's shards (SHARD... as
# "$SRC"/*.safetensors gives them, or SRC itself); exit 2, naming WHO and SRC,
# when a directory holds none.
bench_bytes() {
	[ -e "$3" ] || { echo "$1: $2 holds no .safetensors file" >&2; exit 2; }
	shift 2
	stat -L -c %s "$@" | awk '{ s += $1 } END { print s }'
}

bench_mounts=
bench_cleanup() {
	for m in $bench_mounts; do
		fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null || true
	done
	if [ -n "${bench_work:-}" ]; then rm -rf "$bench_work"; fi
}
trap bench_cleanup EXIT INT TERM

# bench_mount SOURCE MNT [placefs options...]: mounts and waits until live.
# (POSIX sh has no locals: the names below start with _bm_ so they cannot
# clobber a caller's variables.)
bench_mount() {
	_bm_src=$1
	_bm_mnt=$2
	shift 2
	mkdir -p "$_bm_mnt"
	"$PLACEFS" "$@" "$_bm_src" "$_bm_mnt"
	bench_mounts="$bench_mounts $_bm_mnt"
	_bm_i=0
	until grep -qs " $_bm_mnt fuse" /proc/self/mounts; do
		_bm_i=$((_bm_i + 1))
		[ $_bm_i -lt 100 ] || { echo "bench: $_bm_mnt did not mount" >&2; exit 1; }
		sleep 0.05
	done
}

# bench_llama_manifests LAYERS: writes a checkpoint of LAYERS layers of a
# 2048/5504 Llama shape to $bench_work/ckpt (4 shards, indexed), its plan to
# plan.json, and two readbench manifests of the same bytes: direct.txt (each
# tensor's range in its shard) and mount.txt (each tensor file under
# $bench_work/mnt).
bench_llama_manifests() {
	"$MKCKPT" --quiet --llama "$1:2048:5504:32000" --shards 4 --index "$bench_work/ckpt"
	"$PLAN" --json "$bench_work/ckpt" >"$bench_work/plan.json"
	python3 - "$bench_work" "$top/python" <<'PY'
import json, sys
w = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from placefs import TensorInfo
plan = json.load(open(w + "/plan.json"))
with open(w + "/direct.txt", "w") as d, open(w + "/mount.txt", "w") as m:
    for i, t in enumerate(plan["tensors"]):
        d.write("%s/ckpt/%s\t%d\t%d\n" % (w, t["file"], t["offset"], t["nbytes"]))
        # The tensor's file under the mount, as the loader finds it (plan.json's name).
        m.write("%s\t0\t%d\n" % (TensorInfo(w + "/mnt", i, t).path, t["nbytes"]))
PY
}

# bench_daemon_pid MNT: the pid of the placefs daemon mounted on MNT.
bench_daemon_pid() {
	pgrep -f "placefs.* $1\$" | head -n 1
}

# bench_gpu_mem PID: the device memory nvidia-smi counts for PID, in MiB.
bench_gpu_mem() {
	nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
		awk -F', *' -v p="$1" '$1 == p {print $2}'
}

bench_umount() {
	fusermount3 -u "$1"
}

# now_ns: monotonic-ish wall clock in nanoseconds.
now_ns() {
	date +%s%N
}

# h2d_ceiling [--device D]: the pinned host-to-device ceiling every bench
# measures beside its rows (tests/bench/gpu-ref.py ceiling: 4 GiB pinned,
# copied in 64 MiB chunks), as its "name=ceiling ... gbps=G" line; needs torch.
h2d_ceiling() {
	python3 "$top/tests/bench/gpu-ref.py" ceiling --bytes $((4 << 30)) --chunk $((64 << 20)) "$@"
}

# field NAME LINE: value of NAME=... in a readbench output line.
field() {
	printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}
# gbps_of: the first "N GB/s" figure of standard input.
gbps_of() {
	sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p' | head -n 1
}
# ratio A B: A / B to two decimals; "-" when either is missing or not a
# number (a row that measured nothing), 0 when B is 0.
ratio() {
	python3 -c "
import sys
try:
    a, b = float(sys.argv[1]), float(sys.argv[2])
    print('%.2f' % (a / b if b else 0))
except ValueError:
    print('-')" "$1" "$2"
}
