#!/bin/sh
# SPDX-License-Identifier: MIT
# progress-tty: the progress bars (lib/common/progress.h, python/placefs/_progress.py).
#   - the Python bar formats every line exactly as the C one (3000 cases
#     through tests/progress-fmt), draws at most every 0.1 s, is thread-safe
#     and writes nothing when disabled or not on a terminal;
#   - on a terminal (script(1) gives the command a pty) placefs-stage --verify,
#     the installed placefs-load, load(progress=True) and
#     iter_weights(progress=True) draw a bar with bytes, rate and ETA and end
#     with a final line; with stderr on a file or a pipe (or progress=False)
#     they draw nothing, and their other output is unchanged.
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
. "$(dirname "$0")/lib.sh"
require_fuse
. "$top_srcdir/tests/pyinstall.sh"

STAGE=$top_builddir/tools/placefs-stage
FMT=$top_builddir/tests/progress-fmt
T="$PYTHON $top_srcdir/tests/py/progress_test.py"
command -v script >/dev/null 2>&1 || fail "script (util-linux) is needed to give a command a terminal"
cd "$TMP" || fail "cd $TMP"
py_install
PLACEFS_NO_TORCH=1
export PLACEFS_NO_TORCH
unset INSTANTTENSOR_COPY

tmo 60 $T same "$FMT" || fail "the Python and the C bar disagree"
tmo 60 $T bar || fail "the Python bar"

# on_tty OUT CMD...: runs CMD with a pty as its stdin, stdout and stderr
# (everything it writes lands in OUT), and returns its status.
on_tty() {
	local out=$1 cmd="" a
	shift
	for a in "$@"; do
		cmd="$cmd '$a'"
	done
	tmo 60 script -qefc "$cmd" /dev/null </dev/null >"$out"
}

# bar_ok FILE LABEL: FILE holds LABEL's bar: redraws starting with "\r", the
# fields of the layout, and the final line ending in "in M:SS".
bar_ok() {
	tr '\r' '\n' <"$1" >"$1.lines"
	grep -Eq "^$2 \[[#.]{20}\] +[0-9]+%  [0-9.]+ [KMGT]?i?B/[0-9.]+ [KMGT]?i?B  ([0-9.]+ [KMGT]?i?B|--)/s  ETA [0-9:-]+.\[K$" \
		"$1.lines" || fail "no running $2 bar in: $(cat -v "$1" | head -c 600)"
	grep -Eq "^$2 \[#{20}\] 100%  ([0-9.]+ [KMGT]?i?B)/\1  ([0-9.]+ [KMGT]?i?B|--)/s  in [0-9]+:[0-9][0-9].\[K$" \
		"$1.lines" || fail "no final $2 line in: $(cat -v "$1" | tail -c 600)"
}

tmo 20 "$MKCKPT" -q --seed 11 --random 60 --max-bytes 2M ckpt.safetensors || fail "mkckpt"
MP=$TMP/mnt
mount_fs ckpt.safetensors "$MP" -o buffer_size=4M,device=host

# ---- placefs-stage --verify ----------------------------------------------------------
on_tty stage.tty "$STAGE" --verify -q --all "$MP" || fail "placefs-stage on a terminal: $(cat -v stage.tty)"
bar_ok stage.tty verify
grep -q '^verify: [0-9]* of [0-9]* tensors byte-exact' stage.tty || fail "no verify line: $(cat -v stage.tty)"
# Per-tensor lines erase the bar first; the bar comes back after them.
on_tty stage2.tty "$STAGE" --all "$MP" || fail "placefs-stage (per-tensor lines) on a terminal"
bar_ok stage2.tty stage
# Not a terminal: not one byte of a bar, on a file or on a pipe.
tmo 60 "$STAGE" --verify -q --all "$MP" >stage.out 2>stage.err || fail "placefs-stage: $(cat stage.err)"
[ ! -s stage.err ] || fail "placefs-stage wrote to a non-terminal stderr: $(cat -v stage.err)"
! grep -q "$(printf '\r')" stage.out || fail "a carriage return in placefs-stage's output"
out=$(tmo 60 "$STAGE" --verify -q --all "$MP" 2>&1 | cat) || fail "placefs-stage into a pipe"
echo "$out" | grep -q '^verify: ' || fail "placefs-stage into a pipe: $out"
! echo "$out" | grep -q '\[#' || fail "a bar into a pipe: $out"
tr '\r' '\n' <stage.tty | grep -v '^verify \[' | grep -v '^.\[K$' | grep -v '^$' |
	sed -e 's/ in [0-9.]* s: [0-9.]* GB\/s; [0-9.]* s in the ioctls; [0-9]* prefetched/ T/' >a
sed -e 's/ in [0-9.]* s: [0-9.]* GB\/s; [0-9.]* s in the ioctls; [0-9]* prefetched/ T/' stage.out >b
cmp -s a b || fail "placefs-stage's output differs on a terminal: $(diff a b | head)"

# ---- placefs-load (the installed script) -----------------------------------------------
on_tty load.tty "$PLACEFS_LOAD" "$MP" --device cpu --verify || fail "placefs-load on a terminal: $(cat -v load.tty)"
bar_ok load.tty placefs-load
grep -q '^verify: 60 of 60 tensors byte-exact' load.tty || fail "placefs-load --verify: $(cat -v load.tty)"
on_tty load2.tty "$PLACEFS_LOAD" "$MP" --device cpu --no-progress || fail "placefs-load --no-progress"
! grep -q '\[#' load2.tty || fail "placefs-load --no-progress drew a bar: $(cat -v load2.tty)"
tmo 60 "$PLACEFS_LOAD" "$MP" --device cpu --verify >load.out 2>load.err || fail "placefs-load: $(cat load.err)"
[ ! -s load.err ] || fail "placefs-load wrote to a non-terminal stderr: $(cat -v load.err)"
grep -q '^verify: 60 of 60 tensors byte-exact' load.out || fail "placefs-load: $(cat load.out)"
# ---- the package's API: load(progress=True), iter_weights(progress=True) -----------------
# On a terminal a bar labelled with the mount's name; without progress=True, or
# with stderr not a terminal, not one byte on stderr.
LOAD='import sys, placefs; sd, r = placefs.load(sys.argv[1], device="cpu", progress=sys.argv[2] == "1"); print("loaded", len(sd))'
ITER='import sys, placefs; n = sum(1 for _ in placefs.iter_weights(sys.argv[1], device="cpu", progress=sys.argv[2] == "1")); print("streamed", n)'
on_tty api.tty $PYTHON -c "$LOAD" "$MP" 1 || fail "load(progress=True) on a terminal: $(cat -v api.tty)"
bar_ok api.tty mnt
grep -q '^loaded 60' api.tty || fail "load(progress=True): $(cat -v api.tty)"
on_tty iter.tty $PYTHON -c "$ITER" "$MP" 1 || fail "iter_weights(progress=True) on a terminal: $(cat -v iter.tty)"
bar_ok iter.tty mnt
grep -q '^streamed 60' iter.tty || fail "iter_weights(progress=True): $(cat -v iter.tty)"
for code in "$LOAD" "$ITER"; do
	on_tty off.tty $PYTHON -c "$code" "$MP" 0 || fail "progress=False on a terminal: $(cat -v off.tty)"
	! grep -q '\[[#.]' off.tty || fail "progress=False drew a bar: $(cat -v off.tty)"
	tmo 60 $PYTHON -c "$code" "$MP" 1 >api.out 2>api.err || fail "progress=True off a terminal: $(cat api.err)"
	[ ! -s api.err ] || fail "progress=True wrote to a non-terminal stderr: $(cat -v api.err)"
done
# The Python bar on a real pty.
on_tty py.tty $PYTHON "$top_srcdir/tests/py/progress_test.py" tty || fail "the Python bar on a pty: $(cat -v py.tty)"
bar_ok py.tty pybar
umount_fs "$MP"
note "bars on a terminal for placefs-stage, placefs-load, load() and iter_weights(), none elsewhere"
