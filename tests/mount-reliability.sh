#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-reliability: the daemon and its clients dying, and shards deleted, under
# a live mount (doc/RELIABILITY.md). Every reader compares what it gets with the
# source: correct bytes or an error, never other bytes.
#
#  1. A shard unlinked while mounted, with files open and O_DIRECT reads in
#     flight: every request that reaches the daemon fails with ESTALE (the
#     path check of placefs_ckpt_shard_check), new opens fail with ESTALE, pages
#     already cached stay readable and correct, other shards keep serving; a
#     shard renamed away and back serves again.
#  2. SIGKILL of the daemon (-o device=host) with 8 O_DIRECT readers in
#     flight: readers get correct bytes then ENOTCONN/ECONNABORTED; the mount
#     answers ENOTCONN; fusermount3 -u cleans it up; a remount on the same
#     directory serves correct bytes, and at its start removes (and logs) the
#     host ring the killed daemon left in /dev/shm, with other dead processes'
#     leftovers, but nothing of a live or flock-holding process.
#  3. SIGTERM with 8 O_DIRECT readers of large tensors in flight: the daemon
#     exits 0 and leaves no mount; readers get correct bytes or an error.
#     The same while placefs-stage --all copies on a -o device=host mount
#     (batched, and one tensor a request).
#  4. A client killed (SIGKILL) while it reads and while it holds staging
#     leases: open_files, leases and the ring's bytes in use come back to 0,
#     the daemon's descriptors come back to their count, and it keeps serving.
TEST_TIMEOUT=${TEST_TIMEOUT:-90}
. "$(dirname "$0")/lib.sh"
require_fuse

SOAK=$top_builddir/tests/reliab/soak
STUTIL=$top_srcdir/tests/reliab/stutil.py
STAGE=$top_builddir/tools/placefs-stage
[ -x "$SOAK" ] || fail "$SOAK is not built"
[ -x "$STAGE" ] || fail "$STAGE is not built"

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt
mkdir -p "$MP"

# Stats come from lib.sh's stat_get and wait_stat (releases reach the daemon
# asynchronously after close(): wait for the counters, do not read them once).

fd_count() {
	ls "/proc/$1/fd" | wc -l
}

# fds_are PID N: true when process PID has N open descriptors.
fds_are() {
	[ "$(fd_count "$1")" -eq "$2" ]
}

# summary LINE KEY: the value of KEY=... in soak's summary line.
summary() {
	printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# ---- 1. a shard unlinked while mounted -----------------------------------------------------------
tmo 20 "$MKCKPT" -q --seed 21 --tensor 'v.a:F32:512x1024' --tensor 'v.b:F32:512x1024' \
	--tensor 'w.a:F32:512x1024' --tensor 'w.b:F32:512x1024' \
	--tensor 'x.a:F32:512x1024' --tensor 'x.b:F32:512x1024' --shards 3 --index del ||
	fail "mkckpt del"
mount_fs del "$MP"
S1=$(getfattr --absolute-names --only-values -n user.placefs.source "$MP/v.a") || fail "getfattr v.a"
S2=$(getfattr --absolute-names --only-values -n user.placefs.source "$MP/w.a") || fail "getfattr w.a"
S3=$(getfattr --absolute-names --only-values -n user.placefs.source "$MP/x.a") || fail "getfattr x.a"
[ "$S1" != "$S2" ] && [ "$S2" != "$S3" ] && [ "$S1" != "$S3" ] ||
	fail "the tensors are not one pair per shard ($S1 $S2 $S3)"
fds_before=$(fd_count "$MOUNT_PID")

tmo 30 "$PYTHON" - "$MP" del "$S1" <<'EOF' || fail "unlinking a shard: see above"
import errno, mmap, os, sys, threading, time
mnt, src, shard = sys.argv[1], sys.argv[2], sys.argv[3]
bad = []
def expect(name):
    off = int(os.getxattr(os.path.join(mnt, name), "user.placefs.offset"))
    n = os.path.getsize(os.path.join(mnt, name))
    with open(os.path.join(src, os.getxattr(os.path.join(mnt, name), "user.placefs.source").decode()), "rb") as f:
        f.seek(off)
        return f.read(n)
want = {n: expect(n) for n in ("v.a", "v.b", "w.a", "x.a")}

# Readers of the victim's v.a (O_DIRECT: every read reaches the daemon) and of
# another shard's w.a, all opened before the unlink.
stop = threading.Event()
ends, wrong, other_errors, counts = [], [], [], {"victim": 0, "other": 0}
def reader(name, victim):
    buf = mmap.mmap(-1, 1 << 20)
    fd = os.open(os.path.join(mnt, name), os.O_RDONLY | os.O_DIRECT)
    try:
        while not stop.is_set():
            for off in range(0, len(want[name]), 1 << 20):
                try:
                    n = os.preadv(fd, [buf], off)
                except OSError as e:
                    if victim:
                        ends.append(e.errno)
                        return
                    other_errors.append(e.errno)
                    return
                if buf[:n] != want[name][off:off + (1 << 20)]:
                    wrong.append((name, off, n))
                counts["victim" if victim else "other"] += 1
    finally:
        os.close(fd)
th = [threading.Thread(target=reader, args=("v.a", True)) for _ in range(8)]
th += [threading.Thread(target=reader, args=("w.a", False)) for _ in range(4)]
for t in th:
    t.start()
# The scenario: 0.3 s of reads of both shards before the unlink.
time.sleep(0.3)

# v.b opened (cached) and read in full before the unlink; an O_DIRECT descriptor too.
cached = os.open(os.path.join(mnt, "v.b"), os.O_RDONLY)
direct = os.open(os.path.join(mnt, "v.b"), os.O_RDONLY | os.O_DIRECT)
got = b""
while len(got) < len(want["v.b"]):
    c = os.pread(cached, 1 << 20, len(got))
    if not c:
        break
    got += c
if got != want["v.b"]:
    bad.append("v.b read before the unlink differs from the source")

os.unlink(os.path.join(src, shard))
# A bounded wait for the state: every victim reader has ended (5 s at most).
deadline = time.time() + 5
while len(ends) < 8 and time.time() < deadline:
    time.sleep(0.02)
# The scenario: the other shard's readers go on 0.2 s after the unlink.
time.sleep(0.2)
stop.set()
for t in th:
    t.join()

if wrong:
    bad.append("%d reads returned bytes other than the source's: %r" % (len(wrong), wrong[:3]))
if sorted(set(ends)) != [errno.ESTALE] or len(ends) != 8:
    bad.append("victim readers ended with %r, expected 8 x ESTALE" % ends)
if other_errors:
    bad.append("readers of another shard failed: %r" % other_errors)
if counts["other"] == 0 or counts["victim"] == 0:
    bad.append("readers did not run: %r" % counts)

def err_of(f):
    try:
        f()
        return "OK"
    except OSError as e:
        return errno.errorcode[e.errno]
r = err_of(lambda: os.preadv(direct, [mmap.mmap(-1, 4096)], 0))
if r != "ESTALE":
    bad.append("O_DIRECT read of an open file after the unlink: %s, expected ESTALE" % r)
r = err_of(lambda: os.open(os.path.join(mnt, "v.a"), os.O_RDONLY))
if r != "ESTALE":
    bad.append("open after the unlink: %s, expected ESTALE" % r)
# The pages read before the unlink are the validated bytes; the kernel serves
# them without asking the daemon. Anything it has to ask for fails.
try:
    c = os.pread(cached, 65536, 0)
    cached_result = "correct bytes" if c == want["v.b"][:65536] else "WRONG BYTES"
    if c != want["v.b"][:65536]:
        bad.append("cached read after the unlink returned other bytes")
except OSError as e:
    cached_result = errno.errorcode[e.errno]
    if e.errno != errno.ESTALE:
        bad.append("cached read after the unlink: %s" % cached_result)
os.close(cached)
os.close(direct)
with open(os.path.join(mnt, "x.a"), "rb") as f:
    if f.read() != want["x.a"]:
        bad.append("x.a (third shard) differs after the unlink")
for b in bad:
    print("FAIL: " + b)
print("unlink: %d victim reads then 8 x ESTALE, %d reads of another shard, cached pages: %s"
      % (counts["victim"], counts["other"], cached_result))
sys.exit(1 if bad else 0)
EOF
grep -q "$S1 was removed or replaced since mount" "$MOUNT_LOG" ||
	fail "the log does not say that $S1 was removed"
[ "$(stat_get "$MP" stale_shards)" = "['$S1']" ] || fail "stats stale_shards is not ['$S1']"

# Renamed away: ESTALE; renamed back (same inode, size, mtime): served again.
mv "del/$S2" "del/$S2.away"
r=$(py_read_errno "$MP/w.b")
[ "$r" = ESTALE ] || fail "read of w.b with its shard renamed away: $r, expected ESTALE"
mv "del/$S2.away" "del/$S2"
r=$(py_read_errno "$MP/w.b")
[ "$r" = OK ] || fail "read of w.b with its shard renamed back: $r, expected OK"
grep -q "shard '$S2' matches what was validated again" "$MOUNT_LOG" ||
	fail "the recovery of $S2 is not logged"
wait_stat "$MP" open_files 0
[ "$(fd_count "$MOUNT_PID")" -eq "$fds_before" ] || fail "daemon descriptors changed"
kill -0 "$MOUNT_PID" || fail "the daemon died"
umount_fs "$MP"
note "unlinked shard: ESTALE for every request that reaches the daemon; other shards served"

# ---- 2. SIGKILL of the daemon with reads in flight ---------------------------------------------------------
tmo 20 "$MKCKPT" -q --seed 22 --tensor 'l0:F32:1048576' --tensor 'l1:BF16:2097152' \
	--tensor 'l2:U8:4194304' --tensor 'l3:F32:1048576' --random 40 --shards 2 --index big ||
	fail "mkckpt big"
"$PYTHON" "$STUTIL" manifest "$MP" big >big.man || fail "manifest big"
grep -E "^$MP/l[0-3]	" big.man >large.man
[ "$(wc -l <large.man)" -eq 4 ] || fail "large.man has not 4 lines"

mount_fs big "$MP" -o device=host
LIVE_RINGS=$(ls /dev/shm/ | grep -c "^placefs-$MOUNT_PID-")
[ "$LIVE_RINGS" -gt 0 ] || fail "the daemon has no host ring in /dev/shm"
tmo 30 "$SOAK" -t 8 -s 20 -m direct -L 4194304 -x -p -e ENOTCONN,ECONNABORTED,EIO \
	large.man >soak.out 2>&1 &
SOAK_PID=$!
# The scenario: 1 s of reads, so that the SIGKILL finds them in flight.
sleep 1
kill -KILL "$MOUNT_PID"
wait_daemon "$MOUNT_PID"
st=$?
[ "$st" -eq 137 ] || fail "the SIGKILLed daemon ended with status $st"
# Nothing can unlink the host ring of a SIGKILLed daemon; the next daemon to
# start removes it (below, at the remount).
KILLED_RINGS=""
for f in /dev/shm/placefs-"$MOUNT_PID"-*; do
	[ -e "$f" ] || continue
	KILLED_RINGS="$KILLED_RINGS $f"
done
# A daemon of a test running in parallel may already have swept them: any
# daemon that starts removes the rings of dead ones. Then there is nothing
# left to check at the remount below, which is what that sweep guarantees.
[ -n "$KILLED_RINGS" ] || note "the SIGKILLed daemon's ring was already swept by another daemon"
st=0
wait "$SOAK_PID" || st=$?
cat soak.out
[ "$st" -eq 0 ] || fail "readers saw wrong bytes or unexpected errors after SIGKILL"
line=$(tail -n 1 soak.out)
[ "$(summary "$line" tolerated)" -eq 8 ] || fail "not every reader ended with an error"
[ "$(summary "$line" reads)" -gt 0 ] || fail "no reads before the SIGKILL"
is_mounted "$MP" || fail "the dead mount is gone before fusermount3 -u"
r=$("$PYTHON" -c 'import errno, os, sys
try:
    os.listdir(sys.argv[1]); print("OK")
except OSError as e:
    print(errno.errorcode[e.errno])' "$MP")
[ "$r" = ENOTCONN ] || fail "listing the dead mount: $r, expected ENOTCONN"
ls "$MP" 2>&1 | grep -q "Transport endpoint is not connected" ||
	fail "ls does not say 'Transport endpoint is not connected'"
r=$(py_read_errno "$MP/l0")
[ "$r" = ENOTCONN ] || fail "reading through the dead mount: $r, expected ENOTCONN"
tmo 10 fusermount3 -u "$MP" || fail "fusermount3 -u of the dead mount failed"
is_mounted "$MP" && fail "the dead mount is still there after fusermount3 -u"
# Leftovers of other dead processes, as a killed daemon or client leaves them:
# a ring and a client destination of a pid that no longer exists are removed;
# one of a live pid, one of a dead pid that a live process holds a flock on (a
# process of another PID namespace), and a name placefs does not make stay.
dead=$(sh -c 'echo $$')
while kill -0 "$dead" 2>/dev/null; do dead=$(sh -c 'echo $$'); done
sleep 30 & # a live process (its pid names a leftover that must stay)
LIVE=$!
LOCKER=""
FAKES="placefs-$dead-7 placefs-client-$dead-3 placefs-$LIVE-9 placefs-x$dead-1 placefs-test-$dead-1"
trap 'kill $LIVE $LOCKER 2>/dev/null; for n in $FAKES placefs-$dead-8 $KILLED_RINGS; do rm -f "/dev/shm/${n#/dev/shm/}"; done; cleanup' EXIT
for n in $FAKES; do
	head -c 8192 /dev/zero >"/dev/shm/$n" || fail "cannot create /dev/shm/$n"
done
# The locked one is locked before it gets its name (other tests' daemons may
# start at any time and would take it unlocked).
"$PYTHON" -c 'import fcntl, os, sys, time
tmp = sys.argv[1] + ".tmp"
fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, 8192)
fcntl.flock(fd, fcntl.LOCK_SH)
os.rename(tmp, sys.argv[1])
print("locked", flush=True)
time.sleep(30)' "/dev/shm/placefs-$dead-8" >lock.out &
LOCKER=$!
wait_line lock.out '^locked$' 5 || fail "the flock holder did not start"
mount_fs big "$MP"
logged=0
for f in $KILLED_RINGS "/dev/shm/placefs-$dead-7" "/dev/shm/placefs-client-$dead-3"; do
	[ -e "$f" ] && fail "$f of a dead process survived the next daemon's start"
	# Under make -j, another test's daemon starting meanwhile may have removed it.
	grep -q "removed $f (.*left by a placefs process that no longer exists" "$MOUNT_LOG" &&
		logged=$((logged + 1))
done
[ "$logged" -gt 0 ] || note "the leftovers were removed by another daemon starting meanwhile"
for n in "placefs-$LIVE-9" "placefs-$dead-8" "placefs-x$dead-1" "placefs-test-$dead-1"; do
	[ -e "/dev/shm/$n" ] || fail "/dev/shm/$n was removed, but it is not a dead process's leftover"
	rm -f "/dev/shm/$n"
done
kill "$LIVE" "$LOCKER" 2>/dev/null
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" big --ranges 2 || fail "remount serves wrong bytes"
umount_fs "$MP"
note "SIGKILL: $(summary "$line" reads) reads ok, then $(sed -n 's/^soak: tolerated errors: //p' soak.out); ENOTCONN; fusermount3 -u; remount ok, and it removed the killed daemon's ring$KILLED_RINGS and a dead client's leftovers"

# ---- 3. SIGTERM with reads in flight -------------------------------------------------------------------
mount_fs big "$MP"
tmo 30 "$SOAK" -t 8 -s 20 -m direct -L 4194304 -x -p -e ENOTCONN,ECONNABORTED,EIO,ENOENT \
	large.man >soak.out 2>&1 &
SOAK_PID=$!
# The scenario: 1 s of reads, so that the SIGTERM finds them in flight.
sleep 1
kill -TERM "$MOUNT_PID"
st=0
wait_daemon "$MOUNT_PID" || st=$?
[ "$st" -eq 0 ] || fail "placefs exited with status $st after SIGTERM with reads in flight"
is_mounted "$MP" && fail "a mount is left after SIGTERM"
grep -qF " $MP " /proc/mounts && fail "/proc/mounts still lists $MP after SIGTERM"
st=0
wait "$SOAK_PID" || st=$?
cat soak.out
[ "$st" -eq 0 ] || fail "readers saw wrong bytes or unexpected errors during SIGTERM"
line=$(tail -n 1 soak.out)
[ "$(summary "$line" tolerated)" -eq 8 ] || fail "not every reader ended with an error"
note "SIGTERM: exit 0, no mount left; readers: $(summary "$line" reads) reads ok, then $(sed -n 's/^soak: tolerated errors: //p' soak.out)"

# SIGTERM while placefs-stage --all copies on a -o device=host mount: four loops
# of placefs-stage --verify with a 4 MiB limit (the 4 MiB tensors fill the ring
# alone), two in batches (the default: a SIGTERM finds batch requests in
# flight) and two one tensor a request (--batch 1), so stagers are always copying.
mount_fs big "$MP" -o device=host,buffer_size=4M
ring_name=$(stat_get "$MP" staging.device | sed -n 's/^host (\(.*\))$/\1/p')
[ -n "$ring_name" ] && [ -e "/dev/shm$ring_name" ] || fail "no host ring in /dev/shm ($ring_name)"
loops=""
for k in 1 2 3 4; do
	batch=
	[ $((k % 2)) -eq 0 ] && batch="--batch 1"
	(
		n=0
		# shellcheck disable=SC2086 # $batch is empty or two words
		while is_mounted "$MP" && "$STAGE" $batch --verify -q --all "$MP" >"stage.$k.last" 2>&1; do
			n=$((n + 1))
		done
		echo "runs=$n" >"stage.$k.runs"
	) &
	loops="$loops $!"
done
# The scenario: 1 s of staging, so that the SIGTERM finds stagers busy.
sleep 1
kill -TERM "$MOUNT_PID"
st=0
wait_daemon "$MOUNT_PID" || st=$?
[ "$st" -eq 0 ] || fail "placefs -o device=host exited with $st after SIGTERM while staging"
is_mounted "$MP" && fail "a mount is left after SIGTERM while staging"
wait $loops
runs=$(awk -F= '{ s += $2 } END { print s + 0 }' stage.*.runs)
[ "$runs" -gt 0 ] || fail "no placefs-stage run completed before the SIGTERM: $(cat stage.*.last)"
grep -h "differ" stage.*.last && fail "placefs-stage saw staged bytes that differ"
[ -e "/dev/shm$ring_name" ] && fail "the host ring /dev/shm$ring_name was left behind"
interrupted=$(grep -h '^placefs-stage: [0-9]* of [0-9]* tensors' stage.*.last | sed 's/ staged.*//' |
	sed 's/^placefs-stage: //' | paste -sd, -)
note "SIGTERM while staging: exit 0, no mount, ring unlinked; $runs verified placefs-stage --all runs before it; interrupted runs: ${interrupted:-none with a summary}"

# ---- 4. clients killed while reading and while holding leases -------------------------------------------------
mount_fs big "$MP" -o device=host,noprefetch
fds_before=$(fd_count "$MOUNT_PID")
"$PYTHON" "$STUTIL" manifest "$MP" big >big.man || fail "manifest big"
"$SOAK" -t 16 -s 30 big.man >/dev/null 2>&1 &
SOAK_PID=$!
rm -f borrow.out # wait_line must not see a previous client's line
"$PYTHON" - "$MP" >borrow.out 2>&1 <<'EOF' &
import fcntl, os, struct, sys, time
mnt = sys.argv[1]
fds = []
for name in sorted(os.listdir(mnt))[:10]:
    if name.startswith("."):
        continue
    fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
    buf = bytearray(320)
    struct.pack_into("<IIII", buf, 0, 1, 320, 0, 0)
    fcntl.ioctl(fd, 0xC140B902, buf, True)
    fds.append(fd)
print("borrowed %d" % len(fds), flush=True)
time.sleep(60)
EOF
BORROW_PID=$!
wait_line borrow.out '^borrowed' 5 || fail "the borrower did not borrow: $(cat borrow.out)"
[ "$(stat_get "$MP" staging.leases)" -gt 0 ] || fail "no lease held while borrowing"
# The scenario: 1 s of reads and held leases before the clients are killed.
sleep 1
kill -KILL "$SOAK_PID" "$BORROW_PID"
wait "$SOAK_PID" "$BORROW_PID" 2>/dev/null
wait_stat "$MP" open_files 0
wait_stat "$MP" staging.leases 0
wait_stat "$MP" staging.ring_used 0
[ "$(stat_get "$MP" read_errors)" -eq 0 ] || fail "read errors after the clients died"
hw=$(stat_get "$MP" staging.ring_high_water)
cap=$(stat_get "$MP" staging.ring_bytes)
[ "$hw" -le "$cap" ] || fail "ring high-water $hw > capacity $cap"
wait_for 5 fds_are "$MOUNT_PID" "$fds_before" ||
	fail "daemon descriptors: $(fd_count "$MOUNT_PID") after, $fds_before before"
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" big --ranges 2 ||
	fail "the daemon serves wrong bytes after its clients died"
umount_fs "$MP"
note "clients killed: open_files, leases and ring bytes back to 0, descriptors $fds_before"

note "ok"
exit 0
