#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tests/gpu/run.sh: GPU staging end to end on a machine with a GPU, in one go.
#
#   . .device-debs/prep.sh && tests/gpu/run.sh            # from the repo root
#   tests/gpu/run.sh --device host                          # the same without a GPU
#
# Steps, each with its own timeout and log ($OUT/NN-name.log):
#   build      autoreconf (when configure is missing or stale), configure
#              (--with-cuda for a cuda device), make
#   unit       every Check program (check_backend and check_stage run their
#              CUDA cases on a cuda device: the step fails if they say they
#              found no device)
#   ckpt       generates the checkpoints (seed, wrap, multi-shard, llama)
#   seed       limit 8 MiB: a 1 MiB tensor staged in copy and borrow mode with
#              --verify, the 9 MiB tensor refused (EFBIG) and read on the cpu
#   ioctl      every malformed request (tests/test_stage_ioctl bad)
#   wrap       five 4 MiB tensors through an 8 MiB ring, borrow mode
#   pressure   a leased ring makes a stage time out, then wait until the
#              release; a client killed with SIGKILL loses its leases
#   concurrent 8 placefs-stage --verify at once (copy and borrow)
#   llama      placefs-stage --all --verify in both modes (copy batched,
#              its default, and --batch 1), then the throughput of each
#              without --verify; the C client's
#              batches (placefs-stage --batch 64 --verify and its pace,
#              tests/test_stage_ioctl batch) into device memory
#   example-loader  tests/example-loader --verify on a mount of the llama
#              checkpoint (every gpu-placed tensor in batches into one device
#              allocation, byte-exact against read()), then its pace and
#              placefs-stage --all's, each on a fresh mount
#   devmem     the daemon's device memory (nvidia-smi) against the ring size
#              plus a CUDA context (a daemon with a 4 KiB ring)
#   mount-stage, python-loader, gpu-smoke: the repo's own scripts
#   hf-parity  save_file -> mount -> load_state_dict == load_file
#   views      the views and iter_weights with loaders nobody here wrote
#   slices     tensor-parallel slices (issue #16) of a Llama checkpoint of a
#              few hundred MB (small on host), staging limit 32 MiB (the
#              embedding and head on the cpu), for world 2 and 4 and every
#              rank: placefs-stage --slice r/N@0 and @1 --verify (copy,
#              borrow) and load_state_dict(device=cuda:N, shard=(r, N))
#              (copy, borrow) against torch slicing of load_file, the parts
#              joined against the whole, .placefs/stats (staging.devices[0],
#              staging.slices) grown by the slice bytes (tests/py/
#              slices_gpu.py); the daemon's device memory (nvidia-smi,
#              sampled every 0.1 s while it stages) within its CUDA context
#              plus its ring in borrow mode, and again once the copy
#              clients' imported destinations are swept
#
# Options:
#   --device SPEC   cuda:N (default cuda:0) or host
#   --build DIR     build directory (default /tmp/placefs-gpu-build)
#   --work DIR      checkpoints and mounts (default /tmp/placefs-gpu-work)
#   --size S        small or large llama checkpoint (default: large on cuda,
#                   small on host)
#   --jobs N        make -j (default: number of CPUs)
#   --steps LIST    run only these steps (comma-separated names, e.g.
#                   slices,devmem); build always runs
# Environment: OUT (logs, default /tmp/gpu-out).
#
# Exit status: 0 when every step passed (or was skipped for a stated reason),
# 1 when one failed, 2 for a bad command line.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEV=cuda:0
BUILD=/tmp/placefs-gpu-build
WORK=/tmp/placefs-gpu-work
SIZE=
JOBS=$(nproc 2>/dev/null || echo 4)
STEPS=
OUT=${OUT:-/tmp/gpu-out}

while [ $# -gt 0 ]; do
	case $1 in
	--device) DEV=${2:?--device needs a value}; shift ;;
	--build) BUILD=${2:?}; shift ;;
	--work) WORK=${2:?}; shift ;;
	--size) SIZE=${2:?}; shift ;;
	--jobs) JOBS=${2:?}; shift ;;
	--steps) STEPS=,${2:?},; shift ;;
	-h | --help) sed -n '2,/^set -eu/p' "$0" | sed 's/^# \{0,1\}//; /^set -eu/d'; exit 0 ;;
	*) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done
case $DEV in
cuda:[0-9]*) KIND=cuda ;;
host) KIND=host ;;
*) echo "run.sh: --device must be cuda:N or host, got '$DEV'" >&2; exit 2 ;;
esac
[ -n "$SIZE" ] || { [ "$KIND" = cuda ] && SIZE=large || SIZE=small; }
case $SIZE in small | large) ;; *) echo "run.sh: --size must be small or large" >&2; exit 2 ;; esac

mkdir -p "$OUT" "$BUILD" "$WORK"
OUT=$(cd "$OUT" && pwd)
BUILD=$(cd "$BUILD" && pwd)
WORK=$(cd "$WORK" && pwd)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
export ROOT DEV KIND BUILD WORK SIZE OUT

NSTEP=0
FAILED=0
ROWS=()

# step NAME TIMEOUT_S COMMAND...: runs one step, logs it, records a table row.
# A step prints "NOTE: ..." lines for the table and exits 77 to be skipped.
step() {
	local name=$1 t=$2 log st rc=0 t0 t1 note secs
	shift 2
	[ -z "$STEPS" ] || [ "$name" = build ] || case $STEPS in *,"$name",*) ;; *) return 0 ;; esac
	NSTEP=$((NSTEP + 1))
	log=$OUT/$(printf '%02d' "$NSTEP")-$name.log
	echo "== [$NSTEP] $name (timeout ${t}s) -> $log"
	t0=$(date +%s.%N)
	timeout -k 15 "$t" "$@" >"$log" 2>&1 || rc=$?
	t1=$(date +%s.%N)
	case $rc in
	0) st=ok ;;
	77) st=skipped ;;
	124 | 137) st=TIMEOUT; FAILED=1 ;;
	*) st="FAIL($rc)"; FAILED=1 ;;
	esac
	note=$(sed -n 's/^NOTE: //p' "$log" | paste -sd';' - | cut -c1-160)
	[ "$st" = ok ] || [ "$st" = skipped ] || { echo "-- last lines of $log:"; tail -n 25 "$log"; }
	[ "$st" = skipped ] && note=$(tail -n 1 "$log" | cut -c1-160)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	echo "   $st ${secs}s $note"
	ROWS+=("$(printf '%-14s %-10s %7ss  %s' "$name" "$st" "$secs" "$note")")
	return 0
}

# ---- the step bodies (each runs in its own bash, under set -eu) ----------------------

# HF parity: save_file -> mount -> load_state_dict == load_file, right devices.
do_hf_parity() {
	[ "$KIND" = cuda ] || { echo "hf-parity needs a GPU"; exit 77; }
	python3 -c 'import torch, safetensors' 2>/dev/null ||
		{ echo "NOTE: torch or safetensors missing"; exit 77; }
	python3 "$ROOT/tests/py/hf_parity.py" "$BUILD"
}
export -f do_hf_parity

# Loaders nobody here wrote on the views and iter_weights (issue #15): the
# installed package (make install-python), torch, safetensors, transformers.
do_views() {
	fuse_ok || exit 77
	[ "$KIND" = cuda ] || { echo "views needs a GPU"; exit 77; }
	python3 -c 'import torch, safetensors, transformers' 2>/dev/null ||
		{ echo "NOTE: torch, safetensors or transformers missing"; exit 77; }
	rm -rf "$OUT/pyinst"
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$BUILD" install-python \
		DESTDIR="$OUT/pyinst" prefix=/usr/local PYTHON3=python3 >"$OUT/pyinst.log" 2>&1 ||
		{ cat "$OUT/pyinst.log"; exit 1; }
	site=$(find "$OUT/pyinst" -path '*/placefs/__init__.py' | head -n 1)
	PYTHONPATH=${site%/placefs/__init__.py} python3 "$ROOT/tests/py/views_gpu.py" "$BUILD"
}
export -f do_views

B_MKCKPT() { "$BUILD/tools/placefs-mkckpt" "$@"; }

# fuse_ok: 0 when this machine can mount (for the steps that mount).
fuse_ok() {
	[ -c /dev/fuse ] || { echo "no /dev/fuse: nothing can be mounted"; return 1; }
	if [ "$(id -u)" -ne 0 ] && ! command -v fusermount3 >/dev/null; then
		echo "not root and no fusermount3: nothing can be mounted"
		return 1
	fi
	return 0
}

is_mounted() {
	awk -v m="$1" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") print $(i + 1) }' \
		/proc/self/mountinfo | grep -q '^fuse\.placefs$'
}

unmount() {
	local mp=$1 i
	is_mounted "$mp" || return 0
	fusermount3 -u "$mp" 2>/dev/null || umount "$mp" 2>/dev/null ||
		fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
	for i in $(seq 1 100); do
		is_mounted "$mp" || break
		sleep 0.1
	done
	if [ -n "${DPID:-}" ]; then
		for i in $(seq 1 100); do
			kill -0 "$DPID" 2>/dev/null || break
			sleep 0.1
		done
		wait "$DPID" 2>/dev/null || echo "daemon $DPID exited with status $?"
		DPID=
	fi
}

# mount_ckpt SRC MP OPTIONS: placefs -f in the background; DPID, DLOG.
mount_ckpt() {
	local src=$1 mp=$2 i
	mkdir -p "$mp"
	unmount "$mp"
	DLOG=$OUT/daemon.$(basename "$mp").$$.log
	"$BUILD/fs/placefs" -f -o "$3" "$src" "$mp" 2>"$DLOG" &
	DPID=$!
	for i in $(seq 1 600); do
		is_mounted "$mp" && { echo "mounted $src on $mp (-o $3), daemon $DPID"; return 0; }
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.1
	done
	echo "placefs did not mount $src (-o $3):"
	cat "$DLOG"
	return 1
}

# The daemon's log, shown at the end of every mounting step.
show_log() {
	[ -n "${DLOG:-}" ] && [ -s "$DLOG" ] && { echo "--- daemon log:"; tail -n 40 "$DLOG"; }
	return 0
}

# stats KEY.PATH of the mount on $MP
stat_get() {
	python3 - "$MP/.placefs/stats" "$1" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(v)
EOF
}

# last_line CMD...: runs CMD; prints the last line of its output; fails when CMD
# fails (with all of its output on stderr), which a pipe into tail would hide.
last_line() {
	local f rc=0
	f=$(mktemp)
	"$@" >"$f" 2>&1 || rc=$?
	tail -n 1 "$f"
	if [ "$rc" -ne 0 ]; then
		cat "$f" >&2
		echo "failed with status $rc: $*" >&2
	fi
	rm -f "$f"
	return "$rc"
}

expect_fail() {
	if "$@"; then
		echo "expected a failure: $*"
		return 1
	fi
	return 0
}

do_build() {
	local cfg=()
	cd "$ROOT"
	if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
		echo "autoreconf -fi"
		autoreconf -fi
	else
		echo "configure is up to date: no autoreconf"
	fi
	if [ "$KIND" = cuda ]; then
		local d dir=
		for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda \
			"$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x/x)")")"; do
			if [ -n "$d" ] && [ -f "$d/include/cuda_runtime_api.h" ]; then
				dir=$d
				break
			fi
		done
		[ -n "$dir" ] || { echo "no CUDA toolkit found (set CUDA_HOME)"; return 1; }
		echo "CUDA toolkit: $dir"
		cfg+=("--with-cuda=$dir")
	fi
	cd "$BUILD"
	local again=0
	[ -f Makefile ] || again=1
	[ "$again" -eq 1 ] || [ ! "$ROOT/configure" -nt Makefile ] || again=1
	if [ "$KIND" = cuda ] && ! grep -q -- '--with-cuda' config.status 2>/dev/null; then
		again=1
	fi
	if [ "$again" -eq 1 ]; then
		echo "configure ${cfg[*]:-}"
		"$ROOT/configure" -q ${cfg[@]+"${cfg[@]}"}
	else
		echo "configured already: no configure"
	fi
	grep -E 'define HAVE_CUDA 1' config.h && echo "NOTE: CUDA backend built" ||
		echo "NOTE: no CUDA backend in this build"
	if [ "$KIND" = cuda ] && ! grep -q 'define HAVE_CUDA 1' config.h; then
		echo "a cuda device was asked for but the build has no CUDA backend"
		return 1
	fi
	make -j"$JOBS"
	make -j"$JOBS" check TESTS= # builds the test programs without running them
	ls -l fs/placefs tools/placefs-stage tests/test_stage_ioctl tests/example-loader
}

do_unit() {
	local t fails=0 units
	cd "$BUILD"
	units=$(sed -n '/^UNIT_TESTS = /,/^$/p' "$ROOT/Makefile.am" | grep -o 'tests/check_[a-z_]*')
	for t in $units; do
		if CK_DEFAULT_TIMEOUT=120 "./$t" >"$OUT/unit-$(basename "$t").log" 2>&1; then
			echo "$t: $(grep -E '^[0-9]+%: Checks' "$OUT/unit-$(basename "$t").log")"
		else
			echo "$t FAILED:"
			tail -n 20 "$OUT/unit-$(basename "$t").log"
			fails=$((fails + 1))
		fi
	done
	if [ "$KIND" = cuda ]; then
		# The CUDA cases say so when they find no device: here that is a failure.
		if grep -l 'no CUDA device' "$OUT"/unit-check_stage.log; then
			echo "the CUDA unit cases found no device"
			fails=$((fails + 1))
		else
			echo "NOTE: check_backend and check_stage ran their CUDA cases"
		fi
	fi
	echo "NOTE: $(echo "$units" | wc -w) unit programs, $fails failed"
	[ "$fails" -eq 0 ]
}

do_ckpt() {
	cd "$WORK"
	rm -rf seed.safetensors wrap.safetensors multi llama
	B_MKCKPT -q --seed 7 --tensor 'small:F32:262144' --tensor 'large:F32:2359296' seed.safetensors
	B_MKCKPT -q --seed 8 --tensor 'w.0:BF16:2097152' --tensor 'w.1:BF16:2048x1024' \
		--tensor 'w.2:BF16:2097152' --tensor 'w.3:BF16:1024x2048' --tensor 'w.4:BF16:2097152' \
		--tensor 'full:U8:8388608' wrap.safetensors
	B_MKCKPT -q --seed 11 --tensor 'big.0:F32:600000' --tensor '.odd/name%x:BF16:333' \
		--tensor 'empty:F16:0' --random 60 --max-bytes 1536K --shards 3 --index multi
	if [ "$SIZE" = large ]; then
		B_MKCKPT -q --llama 8:2048:5632:32000 --shards 4 --index llama
	else
		B_MKCKPT -q --llama 2:512:1408:8000 --shards 2 --index llama
	fi
	du -sh seed.safetensors wrap.safetensors multi llama
	echo "NOTE: llama $(du -sb llama | cut -f1) bytes ($SIZE)"
}

do_seed() {
	local out st=0
	MP=$WORK/mnt
	fuse_ok || exit 77
	trap 'unmount "$MP"; show_log' EXIT
	mount_ckpt "$WORK/seed.safetensors" "$MP" "buffer_size=8388608,device=$DEV"
	grep "staging: " "$DLOG"
	tail -n 1 "$MP/.placefs/plan" | grep '^staging: device '
	[ "$(stat_get staging.backend)" = "$KIND" ]
	[ "$(stat_get staging.ring_bytes)" = 8388608 ]
	for mode in copy borrow; do
		out=$("$BUILD/tools/placefs-stage" --mode $mode --verify "$MP/small")
		echo "$out"
		echo "$out" | grep -q '^verify: 1 of 1 tensors byte-exact$'
	done
	out=$("$BUILD/tools/placefs-stage" --mode borrow "$MP/large" 2>&1) || st=$?
	echo "$out"
	[ "$st" -eq 1 ] && echo "$out" | grep -q EFBIG
	grep 'is placed on the cpu and is not staged' "$DLOG"
	python3 - "$MP" "$WORK/seed.safetensors" <<'EOF'
import json, struct, sys
mnt, src = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    base = 8 + n
    for name in ("small", "large"):
        b, e = h[name]["data_offsets"]
        f.seek(base + b)
        want = f.read(e - b)
        got = open("%s/%s" % (mnt, name), "rb").read()
        assert got == want, name + " differs on the cpu"
print("small and large read byte-exact on the cpu")
EOF
	echo "NOTE: 1 MiB staged copy+borrow verified; 9 MiB refused EFBIG, read on cpu"
}

do_ioctl() {
	MP=$WORK/mnt
	fuse_ok || exit 77
	trap 'unmount "$MP"; show_log' EXIT
	mount_ckpt "$WORK/seed.safetensors" "$MP" "buffer_size=8388608,device=$DEV"
	# Not through a pipe: a failed check must fail the step, not be tee's exit status.
	rc=0
	"$BUILD/tests/test_stage_ioctl" bad "$MP" "$MP/small" "$MP/large" >"$OUT/ioctl.txt" 2>&1 || rc=$?
	cat "$OUT/ioctl.txt"
	[ "$rc" -eq 0 ] || { echo "test_stage_ioctl bad exited $rc"; exit 1; }
	echo "NOTE: $(tail -n 1 "$OUT/ioctl.txt")"
}

do_wrap() {
	local out
	MP=$WORK/mnt
	fuse_ok || exit 77
	trap 'unmount "$MP"; show_log' EXIT
	mount_ckpt "$WORK/wrap.safetensors" "$MP" "buffer_size=8M,device=$DEV"
	out=$("$BUILD/tests/test_stage_ioctl" wrap "$MP/w.0" "$MP/w.1" "$MP/w.2" "$MP/w.3" "$MP/w.4")
	echo "$out"
	echo "$out" | grep -Eq '^wraps [1-9]'
	echo "NOTE: $(echo "$out" | grep '^wraps'), each verified before release"
}

do_pressure() {
	local out
	MP=$WORK/mnt
	hold=
	try=
	fuse_ok || exit 77
	trap 'exec 7>&-; [ -z "$hold" ] || kill -9 "$hold" 2>/dev/null || true; unmount "$MP"; show_log' EXIT
	mount_ckpt "$WORK/wrap.safetensors" "$MP" "buffer_size=8M,device=$DEV"
	rm -f "$WORK/hold.in"
	mkfifo "$WORK/hold.in"
	"$BUILD/tests/test_stage_ioctl" hold "$MP/w.0" "$MP/w.1" <"$WORK/hold.in" >"$WORK/hold.out" 2>&1 &
	hold=$!
	exec 7>"$WORK/hold.in"
	for _ in $(seq 1 100); do grep -q '^held$' "$WORK/hold.out" && break; sleep 0.1; done
	cat "$WORK/hold.out"
	grep -q '^held$' "$WORK/hold.out"
	out=$("$BUILD/tests/test_stage_ioctl" try "$MP/w.2" 300 2>/dev/null || true)
	echo "while leased, with a 300 ms timeout: $out"
	[ "$out" = ETIMEDOUT ]
	"$BUILD/tests/test_stage_ioctl" try "$MP/w.2" 0 >"$WORK/try.out" 2>&1 7>&- &
	try=$!
	for _ in $(seq 1 100); do grep -q '^waiting$' "$WORK/try.out" && break; sleep 0.1; done
	sleep 0.6
	kill -0 "$try"
	exec 7>&-
	wait "$hold"
	wait "$try"
	echo "after the release: $(cat "$WORK/try.out")"
	# SIGKILL with the whole ring leased; then the whole ring is stageable.
	"$BUILD/tests/test_stage_ioctl" hold "$MP/full" <"$WORK/hold.in" >"$WORK/hold.out" 2>&1 &
	hold=$!
	exec 7>"$WORK/hold.in"
	for _ in $(seq 1 100); do grep -q '^held$' "$WORK/hold.out" && break; sleep 0.1; done
	grep -q '^held$' "$WORK/hold.out"
	kill -9 "$hold"
	wait "$hold" 2>/dev/null || true
	exec 7>&-
	"$BUILD/tests/test_stage_ioctl" try "$MP/full" 5000 2>/dev/null
	hw=$(stat_get staging.ring_high_water)
	echo "ring high-water $hw"
	[ "$hw" -le 8388608 ]
	echo "NOTE: ETIMEDOUT while leased, served after release; SIGKILL frees leases; hw $hw <= 8 MiB"
}

do_concurrent() {
	local pids="" k p fails=0 mode ngpu hw
	MP=$WORK/mnt
	fuse_ok || exit 77
	trap 'unmount "$MP"; show_log' EXIT
	mount_ckpt "$WORK/multi" "$MP" "buffer_size=2M,device=$DEV"
	ngpu=$(ls "$MP/.placefs/by-placement/gpu" | wc -l)
	for k in 1 2 3 4 5 6 7 8; do
		mode=copy
		[ $((k % 2)) -eq 0 ] && mode=borrow
		"$BUILD/tools/placefs-stage" --mode $mode --verify -q --all "$MP" >"$WORK/conc.$k" 2>&1 &
		pids="$pids $!"
	done
	k=0
	for p in $pids; do
		k=$((k + 1))
		wait "$p" || { echo "client $k failed:"; cat "$WORK/conc.$k"; fails=$((fails + 1)); }
		grep -q "^verify: $ngpu of $ngpu tensors byte-exact$" "$WORK/conc.$k" || fails=$((fails + 1))
	done
	hw=$(stat_get staging.ring_high_water)
	[ "$hw" -le 2097152 ] || { echo "high-water $hw > 2 MiB"; fails=$((fails + 1)); }
	[ "$(stat_get staging.leases)" = 0 ] || { echo "leases left"; fails=$((fails + 1)); }
	cat "$MP/.placefs/stats"
	echo
	echo "NOTE: 8 clients x $ngpu tensors verified, $fails failures, high-water $hw"
	[ "$fails" -eq 0 ]
}

do_llama() {
	local out mode limit=64M
	MP=$WORK/mnt
	fuse_ok || exit 77
	trap 'unmount "$MP"; show_log' EXIT
	[ "$SIZE" = small ] && limit=4M
	mount_ckpt "$WORK/llama" "$MP" "buffer_size=$limit,device=$DEV"
	tail -n 5 "$MP/.placefs/plan"
	# Copy mode in batches (the default of --all) and one tensor a request (--batch 1).
	for mode in copy "copy --batch 1" borrow; do
		# shellcheck disable=SC2086 # the options are split on purpose
		out=$("$BUILD/tools/placefs-stage" --mode $mode --verify -q --all "$MP")
		echo "$out"
		echo "$out" | grep -Eq '^verify: ([0-9]+) of \1 tensors byte-exact$'
	done
	for mode in copy "copy --batch 1" borrow; do
		# Twice: the first run warms the page cache; the second is the number.
		# shellcheck disable=SC2086 # the options are split on purpose
		"$BUILD/tools/placefs-stage" --mode $mode -q --all "$MP" >/dev/null
		# shellcheck disable=SC2086
		out=$(last_line "$BUILD/tools/placefs-stage" --mode $mode -q --all "$MP")
		echo "$out"
		echo "NOTE: $mode $(echo "$out" | sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p') GB/s"
	done
	# The C client's batches into device memory: placefs-stage --batch (ranges of the
	# plan), byte-exact, and its pace; test_stage_ioctl batch on the first 40 gpu-placed
	# tensors in plan order and the first cpu-placed one (by index, as a range; entries
	# that fail alone; malformed requests).
	out=$("$BUILD/tools/placefs-stage" --mode copy --batch 64 --verify -q --all "$MP")
	echo "$out"
	echo "$out" | grep -Eq '^verify: ([0-9]+) of \1 tensors byte-exact$'
	out=$(last_line "$BUILD/tools/placefs-stage" --mode copy --batch 64 -q --all "$MP")
	echo "$out"
	echo "NOTE: copy --batch 64 $(echo "$out" | sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p') GB/s"
	python3 - "$MP" >"$WORK/llama.batch" <<'EOF'
import json, os, sys
p = json.load(open(os.path.join(sys.argv[1], ".placefs", "plan.json")))
f = [os.path.join(sys.argv[1], t["filename"]) for t in p["tensors"]]
print(next(x for x, t in zip(f, p["tensors"]) if t["placement"] == "cpu"))
print("\n".join([x for x, t in zip(f, p["tensors"]) if t["placement"] == "gpu"][:40]))
EOF
	# shellcheck disable=SC2046 # one file name per line, none with spaces
	"$BUILD/tests/test_stage_ioctl" batch $(cat "$WORK/llama.batch")
	cat "$MP/.placefs/stats"
	echo
	# Copies into device memory went through CUDA IPC imports, each timed.
	if [ "${DEV%%:*}" = cuda ]; then
		[ "$(stat_get staging.dest_imports)" -ge 1 ]
		[ "$(stat_get staging.dest_import_ns)" -gt 0 ]
		echo "NOTE: $(stat_get staging.dest_imports) CUDA IPC imports in" \
			"$(stat_get staging.dest_import_ns) ns, $(stat_get staging.dest_import_waits) waited"
	fi
}

# The documented C loader (tests/example-loader.c) on the Llama: every gpu-placed tensor
# into one device allocation in batches, --verify against read(), then its pace on a
# fresh mount beside placefs-stage --all's (default batches) on another.
do_example_loader() {
	local out sout limit=64M
	MP=$WORK/mnt
	fuse_ok || exit 77
	trap 'unmount "$MP"; show_log' EXIT
	[ "$SIZE" = small ] && limit=4M
	mount_ckpt "$WORK/llama" "$MP" "buffer_size=$limit,device=$DEV"
	out=$(last_line "$BUILD/tests/example-loader" --verify "$MP")
	echo "$out"
	echo "$out" | grep -Eq '^verify: ([0-9]+) of \1 tensors byte-exact$'
	unmount "$MP"
	mount_ckpt "$WORK/llama" "$MP" "buffer_size=$limit,device=$DEV"
	out=$(last_line "$BUILD/tests/example-loader" "$MP")
	echo "$out"
	unmount "$MP"
	mount_ckpt "$WORK/llama" "$MP" "buffer_size=$limit,device=$DEV"
	sout=$(last_line "$BUILD/tools/placefs-stage" -q --all "$MP")
	echo "$sout"
	echo "NOTE: fresh mounts: example-loader $(echo "$out" | sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p')" \
		"GB/s, placefs-stage --all $(echo "$sout" | sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p') GB/s;" \
		"verified byte-exact"
}

# The device memory of process $1 in MiB (nvidia-smi), or empty.
gpu_mem_of() {
	nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
		awk -F', *' -v p="$1" '$1 == p { print $2 }'
}
gpu_used() {
	nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${DEV#cuda:}" 2>/dev/null
}

# devmem_context SRC MP: "MIB HOW", the CUDA context alone: the device memory
# of a daemon whose ring is 4 KiB, mounted over SRC on MP and unmounted.
# HOW is pid (nvidia-smi lists the daemon's pid) or gpu (another pid
# namespace: nvidia-smi lists host pids, so the GPU's memory.used before and
# after). Nothing is printed when the mount fails; its messages go to stderr.
devmem_context() {
	local before m how=pid
	before=$(gpu_used)
	mount_ckpt "$1" "$2" "buffer_size=4K,device=$DEV" >&2 || return 1
	sleep 1
	m=$(gpu_mem_of "$DPID")
	if [ -z "$m" ]; then
		how=gpu
		m=$(($(gpu_used) - before))
	fi
	unmount "$2" >&2
	echo "$m $how"
}

# devmem_limit CONTEXT_MIB RING_BYTES: what a daemon may hold, in MiB: its
# context, its ring rounded up to 2 MiB, 8 MiB of slack.
devmem_limit() {
	echo $(($1 + ($2 + (2 << 20) - 1) / (2 << 20) * 2 + 8))
}

# devmem_watch PID FILE: appends gpu_mem_of PID to FILE every 0.1 s until killed.
devmem_watch() {
	while :; do
		gpu_mem_of "$1" >>"$2"
		sleep 0.1
	done
}

do_devmem() {
	local base=0 ring mem before after copy method per_pid=1 limit_mib how
	MP=$WORK/mnt
	[ "$KIND" = cuda ] || { echo "no GPU memory to measure with --device host"; exit 77; }
	fuse_ok || exit 77
	command -v nvidia-smi >/dev/null || { echo "nvidia-smi is not installed"; exit 77; }
	trap 'unmount "$MP"; show_log' EXIT
	read -r base how <<<"$(devmem_context "$WORK/seed.safetensors" "$MP")"
	[ -n "$base" ] || { echo "the daemon with a 4 KiB ring did not mount"; exit 1; }
	[ "$how" = pid ] || per_pid=0
	sleep 1
	before=$(gpu_used)
	mount_ckpt "$WORK/llama" "$MP" "buffer_size=64M,device=$DEV"
	sleep 1
	ring=$(stat_get staging.ring_bytes)
	if [ "$per_pid" -eq 1 ]; then
		mem=$(gpu_mem_of "$DPID")
		method="nvidia-smi --query-compute-apps (the daemon's pid)"
	else
		mem=$(($(gpu_used) - before))
		method="the GPU's memory.used before and after the mount (pid not visible)"
	fi
	# Borrow mode imports nothing: the daemon's memory must stay ring + context.
	last_line "$BUILD/tools/placefs-stage" --mode borrow -q --all "$MP"
	if [ "$per_pid" -eq 1 ]; then after=$(gpu_mem_of "$DPID"); else after=$(($(gpu_used) - before)); fi
	# Copy mode maps the client's destination (cudaIpcOpenMemHandle): the
	# driver may count that mapping for the daemon too, so it is reported only.
	last_line "$BUILD/tools/placefs-stage" --mode copy -q --all "$MP"
	if [ "$per_pid" -eq 1 ]; then copy=$(gpu_mem_of "$DPID"); else copy=$(($(gpu_used) - before)); fi
	limit_mib=$(devmem_limit "$base" "$ring")
	echo "method: $method"
	echo "CUDA context (a daemon with a 4 KiB ring): $base MiB"
	echo "ring: $ring bytes ($((ring >> 20)) MiB)"
	echo "daemon with the ring: after mount $mem MiB, after borrow traffic $after MiB," \
		"after copy traffic $copy MiB (includes mapped client buffers if counted)"
	echo "allowed: context + ring rounded up to 2 MiB + 8 MiB = $limit_mib MiB"
	[ "$copy" -le "$limit_mib" ] || echo "WARNING: after copy mode $copy MiB > $limit_mib MiB"
	echo "NOTE: daemon $mem MiB (borrow $after, copy $copy) vs ring $((ring >> 20)) MiB + context $base MiB"
	[ "$mem" -le "$limit_mib" ] && [ "$after" -le "$limit_mib" ]
}

do_mount_stage() {
	fuse_ok || exit 77
	cd "$BUILD"
	make check TESTS=tests/mount-stage.sh || { cat tests/mount-stage.log; exit 1; }
	cat tests/mount-stage.log
	echo "NOTE: $(grep -c '^mount-stage: ' tests/mount-stage.log) scenarios (host backend)"
}

do_python() {
	fuse_ok || exit 77
	# The loader's own tests need only the standard library (and a host mount).
	python3 -c 'import torch' 2>/dev/null && echo "torch is importable" ||
		echo "torch is not importable: the standard-library tests run"
	[ -f "$ROOT/tests/python-loader.sh" ] || { echo "tests/python-loader.sh is absent"; exit 77; }
	cd "$BUILD"
	make check TESTS=tests/python-loader.sh || { cat tests/python-loader.log; exit 1; }
	tail -n 20 tests/python-loader.log
	echo "NOTE: $(grep -c 'failures' tests/python-loader.log) python checks groups passed"
}

do_gpu_smoke() {
	fuse_ok || exit 77
	[ "$KIND" = cuda ] || { echo "gpu-smoke needs a GPU"; exit 77; }
	python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
		{ echo "torch with CUDA is not importable"; exit 77; }
	[ -f "$ROOT/tests/py/gpu-smoke.sh" ] || { echo "tests/py/gpu-smoke.sh is absent"; exit 77; }
	sh "$ROOT/tests/py/gpu-smoke.sh" "$BUILD"
}

# Tensor-parallel slices (issue #16) on the one device: tests/py/slices_gpu.py
# stages and checks each phase (placefs-stage --slice or load_state_dict with
# shard=, copy or borrow, every rank of the world); on a cuda device
# devmem_watch samples the daemon's device memory meanwhile.
do_slices() {
	local src=$WORK/tp shape=8:1024:2816:32000 limit=32M dev=cpu world phase what mode arg out
	local ctx='' how='' lim='' ring samples peak now x extra=0 pb=0 pc=0 sw=0
	MP=$WORK/mnt
	watch=
	fuse_ok || exit 77
	if [ "$KIND" = cuda ]; then
		python3 -c 'import torch, safetensors; assert torch.cuda.is_available()' 2>/dev/null ||
			{ echo "NOTE: torch with CUDA or safetensors missing"; exit 77; }
		dev=$DEV
	fi
	[ "$SIZE" = large ] || { shape=2:256:704:1024; limit=384K; }
	rm -rf "$src"
	B_MKCKPT -q --llama "$shape" --shards 4 --index "$src"
	B_MKCKPT -q --tensor one:F32:4 "$WORK/one.safetensors"
	echo "checkpoint: --llama $shape, $(du -sb "$src" | cut -f1) bytes; staging limit $limit"
	export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
	trap '[ -z "$watch" ] || kill "$watch" 2>/dev/null; unmount "$MP"; show_log' EXIT
	if [ "$KIND" = cuda ] && command -v nvidia-smi >/dev/null; then
		read -r ctx how <<<"$(devmem_context "$WORK/one.safetensors" "$MP")"
		[ -n "$ctx" ] || { echo "the daemon with a 4 KiB ring did not mount"; exit 1; }
		echo "CUDA context (a daemon with a 4 KiB ring): $ctx MiB"
		[ "$how" = pid ] || { echo "nvidia-smi does not list the daemon's pid: memory not checked"; ctx=; }
	fi
	mount_ckpt "$src" "$MP" "buffer_size=$limit,device=$DEV"
	ring=$(stat_get staging.ring_bytes)
	[ -z "$ctx" ] || lim=$(devmem_limit "$ctx" "$ring")
	[ -z "$lim" ] || echo "allowed: context + ring rounded up to 2 MiB + 8 MiB = $lim MiB"
	for world in 2 4; do
		for phase in stage-copy stage-borrow loader-copy loader-borrow; do
			what=${phase%-*}
			mode=${phase#*-}
			arg=$dev
			[ "$what" = loader ] || arg=$BUILD/tools/placefs-stage
			samples=$OUT/slices-devmem.$world.$phase
			if [ -n "$lim" ]; then
				: >"$samples"
				devmem_watch "$DPID" "$samples" &
				watch=$!
			fi
			out=$(python3 "$ROOT/tests/py/slices_gpu.py" "$what" "$MP" "$src" "$world" "$mode" "$arg") ||
				{ echo "$out"; echo "slices_gpu.py $what $MP $src $world $mode failed"; exit 1; }
			echo "$out"
			x=$(echo "$out" | sed -n 's/^RESULT .* extra=\(-\{0,1\}[0-9]*\)$/\1/p')
			extra=$((extra + ${x:-0}))
			[ -n "$watch" ] || continue
			kill "$watch" 2>/dev/null || true
			wait "$watch" 2>/dev/null || true
			watch=
			peak=$(sort -n "$samples" | tail -n 1)
			[ -n "$peak" ] || { echo "nvidia-smi did not list the daemon $DPID"; exit 1; }
			echo "daemon device memory while staging ($phase, world $world):" \
				"peak $peak MiB of $(wc -l <"$samples") samples"
			if [ "$mode" = borrow ]; then
				# Borrowers map the daemon's ring; the daemon imports nothing.
				[ "$peak" -gt "$pb" ] && pb=$peak
				[ "$peak" -le "$lim" ] || { echo "peak $peak MiB > $lim MiB in borrow mode"; exit 1; }
				continue
			fi
			# Copy clients' destinations, imported by the daemon (CUDA IPC),
			# may count for it (the devmem step saw so) until the sweep drops
			# them once their owner is gone: then it is context + ring again.
			[ "$peak" -gt "$pc" ] && pc=$peak
			for _ in $(seq 1 50); do
				now=$(gpu_mem_of "$DPID")
				[ "${now:-0}" -le "$lim" ] && break
				sleep 0.1
			done
			echo "after the sweep: $now MiB"
			[ "${now:-0}" -gt "$sw" ] && sw=$now
			[ "${now:-0}" -le "$lim" ] || { echo "after copy mode $now MiB > $lim MiB"; exit 1; }
		done
	done
	cat "$MP/.placefs/stats"
	echo
	[ "$extra" -eq 0 ] || echo "WARNING: the loader's loads had $extra bytes more read into the" \
		"ring than they staged (whole tensors prefetched beside the slices)"
	now="daemon $pb MiB borrow, $pc copy ($sw swept) <= $lim MiB"
	[ -n "$lim" ] || now="daemon memory not measured"
	echo "NOTE: world 2+4, stage+loader, copy+borrow byte-exact, stats = slices; loader" \
		"prefetch +$((extra >> 20)) MiB; $now"
}

export -f B_MKCKPT fuse_ok is_mounted unmount mount_ckpt show_log stat_get last_line expect_fail \
	do_build do_unit do_ckpt do_seed do_ioctl do_wrap do_pressure do_concurrent do_llama \
	do_example_loader gpu_mem_of gpu_used devmem_context devmem_limit devmem_watch do_devmem do_mount_stage \
	do_python do_gpu_smoke do_slices
export JOBS

# ---- run -----------------------------------------------------------------------------------
{
	echo "placefs GPU staging run: device $DEV, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "repo $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')), build $BUILD, work $WORK, logs $OUT"
	uname -srm
	command -v nvidia-smi >/dev/null &&
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
} | tee -a "$SUMMARY"

step build 1500 bash -c 'set -eu; do_build'
if [ "$FAILED" -ne 0 ]; then
	echo "the build failed: nothing else can run" | tee -a "$SUMMARY"
	printf '%s\n' "${ROWS[@]}" | tee -a "$SUMMARY"
	exit 1
fi
step unit 900 bash -c 'set -eu; do_unit'
step ckpt 600 bash -c 'set -eu; do_ckpt'
step seed 120 bash -c 'set -eu; do_seed'
step ioctl 120 bash -c 'set -eu; do_ioctl'
step wrap 120 bash -c 'set -eu; do_wrap'
step pressure 120 bash -c 'set -eu; do_pressure'
step concurrent 300 bash -c 'set -eu; do_concurrent'
step llama 600 bash -c 'set -eu; do_llama'
step example-loader 300 bash -c 'set -eu; do_example_loader'
step devmem 300 bash -c 'set -eu; do_devmem'
step mount-stage 400 bash -c 'set -eu; do_mount_stage'
step python-loader 400 bash -c 'set -eu; do_python'
step gpu-smoke 600 bash -c 'set -eu; do_gpu_smoke'
step hf-parity 300 bash -c 'set -eu; do_hf_parity'
step views 300 bash -c 'set -eu; do_views'
step slices 300 bash -c 'set -eu; do_slices'

{
	echo
	printf '%-14s %-10s %8s  %s\n' step status time notes
	printf '%s\n' "${ROWS[@]}"
	echo
	[ "$FAILED" -eq 0 ] && echo "RESULT: all steps passed or were skipped" ||
		echo "RESULT: FAILED (see the logs in $OUT)"
} | tee -a "$SUMMARY"
exit "$FAILED"
