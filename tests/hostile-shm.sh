#!/bin/sh
# SPDX-License-Identifier: MIT
# hostile-shm: shared memory that a client, a full /dev/shm or another user
# controls cannot crash or block the daemon (issue 14, items 1, 2 and 7;
# doc/RELIABILITY.md, "Shared memory"). Against live -o device=host mounts:
#   - a copy-mode client that ftruncate()s its own shm destination to 0 and
#     back in a loop while 200 stages into it run: each stage succeeds or
#     fails with an errno, and the daemon stays alive and serving;
#   - -o ring_size=1T,device=host is refused before mounting (exit 12), the
#     message naming the ring's size and /dev/shm's free space;
#   - names another user (nobody, where the test runs as root) made first in
#     /dev/shm, placefs-<pid>-0 and placefs-client-<pid>-0 for the next 200
#     pids, stop neither a mount nor a copy-mode client;
#   - in a private mount namespace with a 16 MiB tmpfs on /dev/shm (root and
#     unshare(1) only; skipped with a note otherwise): a 32 MiB ring refused
#     with the message, an 8 MiB ring mounted, then /dev/shm filled with dd: a
#     copy into a sparse destination fails with an errno, a borrow from the
#     reserved ring still works byte-exact, a new client destination is
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

# race.py TENSOR_FILE NBYTES ROUNDS: stages TENSOR_FILE ROUNDS times into a shm
# destination of this process while a child ftruncate()s it to 0 and back.
cat >race.py <<'EOF'
import errno, os, signal, sys
from placefs._ioctl import Destination, stage

path, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
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
ok, codes, dead = 0, {}, None
for i in range(rounds):
    try:
        stage(tfd, "copy", Destination.shm(name, 0, n), 10 * 10**9)
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
print("%d races: %d copies complete, refused: %s" % (rounds, ok,
      ", ".join("%s %d" % kv for kv in sorted(codes.items())) or "none"))
EOF

# shmtool.py sparse NAME N | copy TENSOR NAME N | borrow TENSOR
cat >shmtool.py <<'EOF'
import errno, os, sys
from placefs._ioctl import Destination, stage, release

op = sys.argv[1]
if op == "sparse":
    fd = os.open("/dev/shm" + sys.argv[2], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, int(sys.argv[3]))
elif op == "copy":
    tfd = os.open(sys.argv[2], os.O_RDONLY)
    try:
        stage(tfd, "copy", Destination.shm(sys.argv[3], 0, int(sys.argv[4])), 10 * 10**9)
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
