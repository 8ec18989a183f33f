#!/bin/sh
# SPDX-License-Identifier: MIT
# nested-eio: real I/O errors from the source. The shard of mount B lives on
# another placefs mount A: A's checkpoint has one U8 tensor "inner" whose
# payload is itself a complete safetensors file, so A/inner is a valid
# single-file source for B. Once B serves correct bytes, A's daemon is killed
# (SIGKILL) and every read of A/inner that the page cache cannot answer fails
# with ENOTCONN in B's daemon. For both read modes of B:
#  - reads through B of bytes that must come from A fail with EIO (pread mode:
#    pread gets ENOTCONN and the daemon answers EIO; mmap mode: the kernel's
#    copy from the mapping faults, the daemon's writev gets EFAULT and the
#    reader EIO); bytes still mapped or cached may be served, and must then
#    be the source's; never other bytes;
#  - B's daemon stays alive, keeps serving .placefs/plan, counts the errors
#    in .placefs/stats, and unmounts with status 0; A's dead mount is cleaned
#    up with fusermount3 -u;
#  - a reader loop hitting the errors does not flood B's log: fs/ops.c logs
#    only changes of a shard's health, at most one line a second per shard, a
#    passing check does not make a shard that fails reads "validated again",
#    and in mmap mode the first faulting reply switches the shard to pread
#    (logged once), so libfuse's "fuse: writing device: Bad address" is
#    printed at most once per worker thread. (Checked last, after all of the
#    above, so that the rest is still exercised while it fails.)
TEST_TIMEOUT=${TEST_TIMEOUT:-90}
. "$(dirname "$0")/lib.sh"
require_fuse

SOAK=$top_builddir/tests/reliab/soak
STUTIL=$top_srcdir/tests/reliab/stutil.py
[ -x "$SOAK" ] || fail "$SOAK is not built"

cd "$TMP" || fail "cd $TMP"
A=$TMP/a
B=$TMP/b

summary() {
	printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# The inner checkpoint: t0 at the start, t3 (8 MiB) at the end, far apart.
tmo 20 "$MKCKPT" -q --seed 31 --tensor 't0:F32:1024x1024' --tensor 't1:BF16:2048x1024' \
	--random 40 --tensor 't2:F32:1024x1024' --tensor 't3:U8:8388608' inner.safetensors ||
	fail "mkckpt inner"
"$PYTHON" "$STUTIL" wrap inner.safetensors outer.safetensors inner || fail "wrap"
# B's files compared with the inner file itself, never through A.
"$PYTHON" "$STUTIL" manifest "$B" inner.safetensors >b.man || fail "manifest"
# Before A dies nothing reads t3 through B, so none of its pages are mapped in
# B's daemon (read_mode=mmap) and its bytes can only come from A afterwards.
grep -v "^$B/t3	" b.man >live.man

flood=""
for mode in pread mmap; do
	mount_fs outer.safetensors "$A"
	A_PID=$MOUNT_PID
	cmp -s "$A/inner" inner.safetensors || fail "A/inner differs from the inner file"
	mount_fs "$A/inner" "$B" -o read_mode=$mode
	B_PID=$MOUNT_PID
	B_LOG=$MOUNT_LOG

	# B serves the inner checkpoint exactly while A is alive.
	# (pread mode only: in mmap mode this would map t3's pages into B's daemon.)
	if [ "$mode" = pread ]; then
		tmo 40 "$PYTHON" "$TMP/verify_mount.py" "$B" "$A/inner" --ranges 3 ||
			fail "B serves wrong bytes through a live A"
	fi
	tmo 30 "$SOAK" -t 8 -s 1 -L 4194304 live.man >soak.out 2>&1 || {
		cat soak.out
		fail "read_mode=$mode: soak through a live A failed"
	}
	line=$(tail -n 1 soak.out)
	tmo 10 cat "$B/.placefs/plan" >plan.before || fail "cannot read B's plan"

	tmo 30 "$PYTHON" - "$A/inner" "$A_PID" "$B" inner.safetensors "$mode" <<'EOF' ||
import errno, mmap, os, signal, sys, time
a_inner, a_pid, bmnt, inner, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def expect(name):
    off = int(os.getxattr(os.path.join(bmnt, name), "user.placefs.offset"))
    n = os.path.getsize(os.path.join(bmnt, name))
    with open(inner, "rb") as f:
        f.seek(off)
        return f.read(n)
want = {n: expect(n) for n in ("t0", "t3")}
buf = mmap.mmap(-1, 1 << 20)
fd = os.open(os.path.join(bmnt, "t0"), os.O_RDONLY | os.O_DIRECT)
n = os.preadv(fd, [buf], 0)
os.close(fd)
assert buf[:n] == want["t0"][:1 << 20], "t0 through a live A differs"
# Drop A/inner's pages from the page cache (those mapped by B's daemon stay):
# what B asks for next has to come from A's daemon. First let the readahead
# that the reads above started on A/inner finish, or it could bring pages back.
time.sleep(0.3)
fd = os.open(a_inner, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
os.kill(a_pid, signal.SIGKILL)
# Wait (5 s at most) for the state: A's mount answers ENOTCONN, its daemon gone.
deadline = time.monotonic() + 5
while True:
    try:
        os.listdir(os.path.dirname(a_inner))
    except OSError as e:
        if e.errno == errno.ENOTCONN:
            break
    assert time.monotonic() < deadline, "A's mount still answers 5 s after its daemon's SIGKILL"
    time.sleep(0.02)
bad = []
def read_at(name, off):
    fd = os.open(os.path.join(bmnt, name), os.O_RDONLY | os.O_DIRECT)
    try:
        n = os.preadv(fd, [buf], off)
        return "OK" if buf[:n] == want[name][off:off + (1 << 20)] else "WRONG BYTES"
    except OSError as e:
        return errno.errorcode[e.errno]
    finally:
        os.close(fd)
# t3 was never read through B: its bytes must come from the dead A.
for off in (0, 4 << 20, (8 << 20) - (1 << 20)):
    r = read_at("t3", off)
    if r != "EIO":
        bad.append("t3 @ %d: %s, expected EIO" % (off, r))
r0 = read_at("t0", 0)
if r0 not in ("OK", "EIO"):
    bad.append("t0 @ 0 after A died: %s, expected the source's bytes or EIO" % r0)
for b in bad:
    print("FAIL: read_mode=%s: %s" % (mode, b))
print("read_mode=%s, A killed: t3 EIO x3, t0 (read before): %s" % (mode, "correct bytes" if r0 == "OK" else r0))
sys.exit(1 if bad else 0)
EOF
		fail "read_mode=$mode: reads through B after A died"
	wait_daemon "$A_PID"

	# Many readers after A died: correct bytes or EIO, nothing else.
	tmo 30 "$SOAK" -t 8 -s 1 -m direct,cached -L 4194304 -p -e EIO b.man >soak2.out 2>&1 || {
		cat soak2.out
		fail "read_mode=$mode: readers after A died saw wrong bytes or errors other than EIO"
	}
	line2=$(tail -n 1 soak2.out)
	[ "$(summary "$line2" tolerated)" -gt 0 ] || fail "no reader saw EIO after A died"

	kill -0 "$B_PID" || fail "B's daemon died"
	tmo 10 cat "$B/.placefs/plan" >plan.after || fail "B no longer serves .placefs/plan"
	cmp -s plan.before plan.after || fail "B's plan changed"
	tmo 10 cat "$B/.placefs/stats" >stats.json || fail "B no longer serves .placefs/stats"
	errs=$("$PYTHON" "$STUTIL" stats stats.json read_errors)
	[ "$errs" -ge 4 ] || fail "B's stats count $errs read errors, expected at least 4"
	grep -q "shard 'inner'" "$B_LOG" || fail "B's log does not name the failing shard"
	loglines=$(grep -c "shard 'inner'" "$B_LOG")
	[ "$loglines" -le 20 ] ||
		flood="$flood read_mode=$mode: $loglines log lines for $errs failed reads ($(grep "shard 'inner'" "$B_LOG" | sed -n '1p;2p' | tr '\n' '|'));"
	# libfuse prints "fuse: writing device: Bad address" for each reply whose copy
	# from a mapping faults; after the first fault the shard is served with pread,
	# so at most the requests already in flight then (one per worker) print it.
	faults=$(grep -c 'writing device' "$B_LOG")
	if [ "$mode" = mmap ]; then
		[ "$(grep -c "shard 'inner': replying from its mapping failed.*serving it with pread from now on" "$B_LOG")" -eq 1 ] ||
			fail "read_mode=mmap: the switch of the shard to pread is not logged once"
		[ "$faults" -le 16 ] ||
			flood="$flood read_mode=mmap: libfuse printed 'writing device' $faults times;"
	else
		[ "$faults" -eq 0 ] || fail "read_mode=pread: libfuse printed 'writing device' $faults times"
	fi
	# The shard failing reads is never logged as recovered while reads keep failing.
	grep -q "shard 'inner' matches what was validated again" "$B_LOG" &&
		flood="$flood read_mode=$mode: a passing check logged the failing shard as recovered;"
	total=$(wc -l <"$B_LOG")
	[ "$total" -le 40 ] || flood="$flood read_mode=$mode: $total lines in B's log;"

	umount_fs "$B"
	tmo 10 fusermount3 -u "$A" || fail "fusermount3 -u of the dead A failed"
	is_mounted "$A" && fail "A is still mounted"
	note "read_mode=$mode: live A: $(summary "$line" reads) reads ok; A killed: $(summary "$line2" reads) reads ok + $(summary "$line2" tolerated) EIO, mismatches 0; B alive, $errs read errors counted, $loglines log lines about the shard ($total in all, $faults from libfuse), exit 0"
done

[ -z "$flood" ] || fail "B's log is flooded (fs/ops.c must log only changes of a shard's health, at most one line a second, and serve a shard whose mapping faulted with pread):$flood"
note "ok"
exit 0
