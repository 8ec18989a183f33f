#!/bin/sh
# SPDX-License-Identifier: MIT
# hostile-shm: shared memory that a client, a full /dev/shm or another user
# controls cannot crash or block the daemon (issue 14, items 1, 2 and 7;
# doc/RELIABILITY.md, "Shared memory"). Against live -o device=host mounts:
#   - a copy-mode client that ftruncate()s its own shm destination to 0 and
#     back in a loop while 200 stages into it run: each stage succeeds or
#     fails with an errno, and the daemon stays alive and serving;
#   - the same in read mode (PLACEFS_IOC_STAGE_READ, the filler's mapped
#     copy): a read that the shrink cuts short fails with EINVAL, never
#     ENOSPC, and the daemon's log names the destination and says it "shrank
#     during the copy";
#   - -o ring_size=1T,device=host is refused before mounting (exit 12), the
#     message naming the ring's size and /dev/shm's free space;
#   - names another user (nobody, where the test runs as root) made first in
#     /dev/shm, placefs-<pid>-0 and placefs-client-<pid>-0 for the next 200
#     pids, stop neither a mount nor a copy-mode client;
#   - in a private mount namespace with a 16 MiB tmpfs on /dev/shm (root and
#     unshare(1) only; skipped with a note otherwise): a 32 MiB ring refused
#     with the message, an 8 MiB ring mounted, then /dev/shm filled with dd: a
#     copy into a sparse destination fails with an errno, a read-mode stage
#     into it with ENOSPC (the full /dev/shm told apart from a shrink), a
#     borrow from the reserved ring still works byte-exact, a new client
#     destination is
#     refused (ENOSPC), the daemon serves throughout, and with the space back
#     copies work again.
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"
require_fuse
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

STAGE=$top_builddir/tools/placefs-stage
[ -x "$STAGE" ] || fail "$STAGE is not built"
unset INSTANTTENSOR_COPY

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt
LIMIT=8388608
NBYTES=4194304
tmo 20 "$MKCKPT" -q --seed 11 --tensor 'a:F32:1048576' --tensor 'b:F32:65536' ck.safetensors ||
	fail "mkckpt"

# race.py TENSOR_FILE NBYTES ROUNDS [MODE [NEED]]: stages TENSOR_FILE ROUNDS
# times (copy mode, or MODE) into a shm destination of this process while a
# child ftruncate()s it to 0 and back; with NEED, goes on (at most 20 times
# ROUNDS) until NEED stages have failed with EINVAL. Prints the counts and
# the destination's name.
cat >race.py <<'EOF'
import errno, os, signal, sys
from placefs._ioctl import Destination, stage

path, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "copy"
need = int(sys.argv[5]) if len(sys.argv) > 5 else 0
name = "/placefs-race-%d" % os.getpid()
fd = os.open("/dev/shm" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, n)
child = os.fork()
if child == 0:
    try:
        while True:
            os.ftruncate(fd, 0)
            os.ftruncate(fd, n)
    finally:
        os._exit(0)
tfd = os.open(path, os.O_RDONLY)
ok, codes, dead, i = 0, {}, None, 0
while i < rounds or (codes.get("EINVAL", 0) < need and i < 20 * rounds):
    i += 1
    try:
        stage(tfd, mode, Destination.shm(name, 0, n), 10 * 10**9)
        ok += 1
    except OSError as e:
        if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            dead = "race %d: %s" % (i, e)
            break
        k = errno.errorcode.get(e.errno, str(e.errno))
        codes[k] = codes.get(k, 0) + 1
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
os.unlink("/dev/shm" + name)
if dead:
    sys.exit("the daemon is gone after %s" % dead)
print("%d races (%s): %d complete, refused: %s; destination %s" % (i, mode, ok,
      ", ".join("%s %d" % kv for kv in sorted(codes.items())) or "none", name))
EOF

# shrink.py TENSOR_FILE NBYTES ROUNDS: read-mode stages of TENSOR_FILE into a
# sparse shm destination of this process, whose size a child sets to 0 as soon
# as the daemon has written its first pages (so the copy has begun; the parent
# sets it back to NBYTES before the next stage), until one fails with EINVAL
# (at most ROUNDS). Prints the counts and the destination's name.
cat >shrink.py <<'EOF'
import errno, os, sys, time
from placefs._ioctl import Destination, stage

path, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
name = "/placefs-shrink-%d" % os.getpid()
fd = os.open("/dev/shm" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, n)
go_r, go_w = os.pipe()
done_r, done_w = os.pipe()
child = os.fork()
if child == 0:
    try:
        while os.read(go_r, 1) == b"s":
            end = time.monotonic() + 5
            while os.fstat(fd).st_blocks == 0 and time.monotonic() < end:
                pass
            os.ftruncate(fd, 0)
            os.write(done_w, b"d")
    finally:
        os._exit(0)
tfd = os.open(path, os.O_RDONLY)
ok, codes, i = 0, {}, 0
while i < rounds and not codes.get("EINVAL"):
    i += 1
    os.ftruncate(fd, 0)
    os.ftruncate(fd, n)
    os.write(go_w, b"s")
    try:
        stage(tfd, "read", Destination.shm(name, 0, n), 10 * 10**9)
        ok += 1
    except OSError as e:
        k = errno.errorcode.get(e.errno, str(e.errno))
        codes[k] = codes.get(k, 0) + 1
    os.read(done_r, 1)  # the child's ftruncate is done before the next round
os.write(go_w, b"q")
os.waitpid(child, 0)
os.unlink("/dev/shm" + name)
print("%d reads shrunk under them: %d complete, refused: %s; destination %s" % (
    i, ok, ", ".join("%s %d" % kv for kv in sorted(codes.items())) or "none", name))
EOF

# shmtool.py sparse NAME N | copy TENSOR NAME N | read TENSOR NAME N | borrow TENSOR
cat >shmtool.py <<'EOF'
import errno, os, sys
from placefs._ioctl import Destination, stage, release

op = sys.argv[1]
if op == "sparse":
    fd = os.open("/dev/shm" + sys.argv[2], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, int(sys.argv[3]))
elif op in ("copy", "read"):
    tfd = os.open(sys.argv[2], os.O_RDONLY)
    try:
        stage(tfd, op, Destination.shm(sys.argv[3], 0, int(sys.argv[4])), 10 * 10**9)
        print("OK")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
EOF
# The installed package (make install-python into $TMP), never python/ itself.
. "$top_srcdir/tests/pyinstall.sh"
py_install

daemon_alive() {
	kill -0 "$MOUNT_PID" 2>/dev/null && mount_serves "$MP"
}

# ---- in a private mount namespace: a 16 MiB /dev/shm -------------------------------------
if [ "${HOSTILE_SHM_INNER:-}" = 1 ]; then
	mount -t tmpfs -o size=16m tmpfs /dev/shm || fail "cannot mount a tmpfs on /dev/shm"
	mkdir -p "$MP"
	st=0
	out=$(tmo 20 "$PLACEFS" -f -o buffer_size=$LIMIT,ring_size=33554432,device=host \
		ck.safetensors "$MP" 2>&1) || st=$?
	[ "$st" -eq 12 ] || fail "a 32 MiB ring on a 16 MiB /dev/shm: exit $st: $out"
	echo "$out" | grep -Eq 'cannot reserve the 33554432-byte \(32 MiB\) ring "/placefs-[0-9]+-[0-9]+": /dev/shm has [0-9]+ bytes \([^)]*\) free of 16 MiB' ||
		fail "no message naming the ring's size and the free space: $out"
	is_mounted "$MP" && fail "a refused ring left a mount"
	note "16 MiB /dev/shm, 32 MiB ring: $(echo "$out" | tail -n 1)"

	mount_fs ck.safetensors "$MP" -o buffer_size=$LIMIT,device=host
	tmo 20 "$PYTHON" shmtool.py sparse /placefs-sparse-dest $NBYTES || fail "sparse destination"
	dd if=/dev/zero of=/dev/shm/fill bs=1M 2>/dev/null && fail "dd filled no /dev/shm"
	avail=$(df -k --output=avail /dev/shm | tail -n 1 | tr -d ' ')
	[ "$avail" -lt 4096 ] || fail "/dev/shm still has $avail kB free after dd"
	for i in 1 2 3; do
		r=$(tmo 20 "$PYTHON" shmtool.py copy "$MP/a" /placefs-sparse-dest $NBYTES) ||
			fail "copy into a sparse destination on a full /dev/shm: $r"
		[ "$r" = ENOSPC ] || [ "$r" = EIO ] ||
			fail "copy into a sparse destination on a full /dev/shm gave $r, not ENOSPC"
		daemon_alive || fail "the daemon died copying into a sparse destination ($i)"
	done
	note "full /dev/shm, sparse destination: the copy fails with $r, the daemon serves"
	# Read mode (the filler's mapped copy): a full /dev/shm, not a shrink.
	r=$(tmo 20 "$PYTHON" shmtool.py read "$MP/a" /placefs-sparse-dest $NBYTES) ||
		fail "read into a sparse destination on a full /dev/shm: $r"
	[ "$r" = ENOSPC ] || fail "read into a sparse destination on a full /dev/shm gave $r, not ENOSPC"
	grep -q 'destination shm "/placefs-sparse-dest" at byte [0-9]* cannot be had (is /dev/shm full?)' "$MOUNT_LOG" ||
		fail "no log line saying /dev/shm is full for the read"
	grep -q 'shrank during the copy' "$MOUNT_LOG" && fail "a full /dev/shm was logged as a shrink"
	daemon_alive || fail "the daemon died reading into a sparse destination"
	note "full /dev/shm, sparse destination: a read-mode stage fails with ENOSPC"
	# The ring is reserved: stages into it work with /dev/shm full.
	out=$(tmo 30 "$STAGE" --mode borrow --verify --all "$MP") ||
		fail "borrow on a full /dev/shm: $out"
	echo "$out" | grep -q '^verify: 2 of 2 tensors byte-exact$' || fail "borrow verify: $out"
	st=0
	out=$(tmo 30 "$STAGE" --mode copy "$MP/a" 2>&1) || st=$?
	[ "$st" -ne 0 ] && echo "$out" | grep -q 'ENOSPC\|No space left' ||
		fail "a client destination on a full /dev/shm: exit $st: $out"
	daemon_alive || fail "the daemon died on a full /dev/shm"
	rm -f /dev/shm/fill
	out=$(tmo 30 "$STAGE" --mode copy --verify --all "$MP") ||
		fail "copy after /dev/shm has room again: $out"
	echo "$out" | grep -q '^verify: 2 of 2 tensors byte-exact$' || fail "copy verify: $out"
	r=$(tmo 20 "$PYTHON" shmtool.py copy "$MP/a" /placefs-sparse-dest $NBYTES)
	[ "$r" = OK ] || fail "copy into the sparse destination with room: $r"
	rm -f /dev/shm/placefs-sparse-dest
	umount_fs "$MP"
	note "16 MiB /dev/shm: 8 MiB ring reserved, stages fail with an errno when full, daemon alive"
	exit 0
fi

# ---- a client shrinking its destination during stages ------------------------------------
mount_fs ck.safetensors "$MP" -o buffer_size=$LIMIT,device=host
out=$(tmo 120 "$PYTHON" race.py "$MP/a" $NBYTES 200 2>&1) || fail "shrinking destination: $out"
daemon_alive || fail "the daemon is gone after 200 shrink races: $out"
note "$out"
out=$(tmo 30 "$STAGE" --mode copy --verify --all "$MP") || fail "copy after the races: $out"
echo "$out" | grep -q '^verify: 2 of 2 tensors byte-exact$' || fail "verify after the races: $out"
umount_fs "$MP"

# ---- a client shrinking its destination during read-mode stages --------------------------
# A 64 MiB tensor (cpu-placed: read mode reads any), so that a read lasts long
# enough for the owner to shrink its destination in the middle of it; a fresh
# mount, so that the first failures' log lines are not held back by the rate limit.
tmo 60 "$MKCKPT" -q --seed 12 --tensor 'r:F32:16777216' big.safetensors || fail "mkckpt big"
mount_fs big.safetensors "$MP" -o buffer_size=$LIMIT,device=host
out=$(tmo 120 "$PYTHON" shrink.py "$MP/r" 67108864 50 2>&1) || fail "shrink during reads: $out"
note "$out"
echo "$out" | grep -q 'ENOSPC' && fail "a shrunk destination was reported as ENOSPC: $out"
echo "$out" | grep -Eq 'EINVAL [1-9]' || fail "no read-mode stage failed with EINVAL: $out"
dname=$(echo "$out" | sed -n 's/.*; destination \(.*\)$/\1/p')
grep -q "read of 'r' failed (Invalid argument): r: destination shm \"$dname\" shrank during the copy (to 0 bytes" "$MOUNT_LOG" ||
	fail "the log does not name the destination $dname and say it shrank during the copy: $(grep "read of" "$MOUNT_LOG" | head -n 3)"
# Shrunk to 0 and grown back at once, in a loop: never ENOSPC either.
out=$(tmo 120 "$PYTHON" race.py "$MP/r" 67108864 100 read 2>&1) ||
	fail "shrinking destination, read mode: $out"
daemon_alive || fail "the daemon is gone after the read-mode shrink races: $out"
note "$out"
echo "$out" | grep -q 'ENOSPC' && fail "a shrunk destination was reported as ENOSPC: $out"
grep -q 'is /dev/shm full' "$MOUNT_LOG" && fail "a shrink was logged as a full /dev/shm"
umount_fs "$MP"

# ---- a ring larger than /dev/shm can hold -------------------------------------------------
avail=$(df -k --output=avail /dev/shm | tail -n 1 | tr -d ' ')
if [ "$avail" -lt $((1 << 30)) ]; then
	st=0
	out=$(tmo 20 "$PLACEFS" -f -o ring_size=1T,device=host ck.safetensors "$MP" 2>&1) || st=$?
	[ "$st" -eq 12 ] || fail "-o ring_size=1T,device=host: exit $st: $out"
	echo "$out" | grep -Eq 'cannot reserve the 1099511627776-byte \(1 TiB\) ring "/placefs-[0-9]+-[0-9]+": /dev/shm has [0-9]+ bytes \([^)]*\) free of ' ||
		fail "-o ring_size=1T: no message naming the size and the free space: $out"
	is_mounted "$MP" && fail "-o ring_size=1T mounted"
	note "-o ring_size=1T refused: $(echo "$out" | tail -n 1)"
else
	note "/dev/shm has $avail kB free: the 1 TiB refusal is left to the small tmpfs below"
fi

# ---- names squatted by another user --------------------------------------------------------
SQUAT_FROM=$(($(cat /proc/sys/kernel/ns_last_pid) + 1))
SQUAT_TO=$((SQUAT_FROM + 199))
squat='i=$1; while [ "$i" -le "$2" ]; do : >"/dev/shm/placefs-$i-0"; : >"/dev/shm/placefs-client-$i-0"; i=$((i + 1)); done'
as=root
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1 &&
	setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
	setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "$squat" squat "$SQUAT_FROM" "$SQUAT_TO" ||
		fail "nobody cannot create names in /dev/shm"
	as=nobody
else
	sh -c "$squat" squat "$SQUAT_FROM" "$SQUAT_TO" || fail "cannot create names in /dev/shm"
fi
unsquat() {
	i=$SQUAT_FROM
	while [ "$i" -le "$SQUAT_TO" ]; do
		rm -f "/dev/shm/placefs-$i-0" "/dev/shm/placefs-client-$i-0"
		i=$((i + 1))
	done
}
trap 'unsquat; cleanup' EXIT
mount_fs ck.safetensors "$MP" -o buffer_size=$LIMIT,device=host
[ "$MOUNT_PID" -ge "$SQUAT_FROM" ] && [ "$MOUNT_PID" -le "$SQUAT_TO" ] ||
	note "(the daemon's pid $MOUNT_PID fell outside the squatted $SQUAT_FROM..$SQUAT_TO)"
grep -Eq "^placefs: staging: host \(/placefs-$MOUNT_PID-[0-9]+\)" "$MOUNT_LOG" ||
	fail "no host ring of pid $MOUNT_PID in the log"
grep -q "^placefs: staging: host (/placefs-$MOUNT_PID-0)" "$MOUNT_LOG" &&
	fail "the ring took the squatted name placefs-$MOUNT_PID-0"
out=$(tmo 30 "$STAGE" --mode copy --verify --all "$MP") || fail "copy with squatted names: $out"
echo "$out" | grep -q '^verify: 2 of 2 tensors byte-exact$' || fail "verify (squatted): $out"
# The start-up sweep removes names of processes that do not exist: another
# user's 400 names must not become 400 log lines.
n=$(grep -c '^placefs: removed /dev/shm/' "$MOUNT_LOG" || true)
[ "$n" -le 5 ] || fail "the shm sweep logged $n lines about removed names, expected at most 5"
if [ "$n" -eq 5 ]; then
	grep -Eq '^placefs: removed [0-9]+ more names of placefs processes' "$MOUNT_LOG" ||
		fail "the shm sweep logged 5 names and no summary of the rest"
fi
umount_fs "$MP"
unsquat
note "200 pids' ring and client names squatted by $as: the mount and a copy client work, $n sweep lines"

# ---- a small /dev/shm, in a private mount namespace ---------------------------------------
if [ "$(id -u)" -ne 0 ]; then
	note "SKIPPED the 16 MiB /dev/shm step: not root"
elif ! command -v unshare >/dev/null 2>&1 || ! unshare -m true 2>/dev/null; then
	note "SKIPPED the 16 MiB /dev/shm step: unshare -m is unavailable here"
else
	HOSTILE_SHM_INNER=1 unshare -m --propagation private "${BASH:-/bin/bash}" "$SELF" ||
		fail "the 16 MiB /dev/shm step failed"
fi
exit 0
