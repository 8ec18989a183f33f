#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-fair: one user's load leaves room for another's (doc/RELIABILITY.md,
# "Threat model"; doc/STAGING.md, section 9). As root, with two users made for
# the test (useradd, removed at exit) on an allow_other -o device=host mount:
#   - batch slots: user A keeping 12 threads of 64-tensor read batches in
#     flight leaves user B's one-entry batches answered, none with EAGAIN
#     (each user holds at most half of the workers' batch and stage slots);
#     A alone with 4 threads, each sending its next batch as soon as the last
#     one is answered, never gets EAGAIN (a slot is free again before its
#     reply goes out);
#   - the ring share is work-conserving: A alone borrows a tensor of 6 MiB, more
#     than its 4 MiB share of the 8 MiB ring (-o user_share=50); while B's
#     borrow waits for ring space, A's next borrow beyond its share is refused
#     at once (EBUSY) even though the ring has room for it; once A releases,
#     B is served, and A, back under its share, borrows again.
# It needs root (to mount for two users and to make them): exit 77 otherwise.
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"
require_fuse
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: mount-fair makes users and mounts for them: it needs root"
	exit 77
fi
for c in useradd userdel setpriv; do
	command -v $c >/dev/null 2>&1 || fail "$c is required"
done

cd "$TMP" || fail "cd $TMP"
chmod 755 "$TMP"
MP=$TMP/mnt
mkdir -p "$MP"
# The helper runs as the test's users too: a system python, not a per-user shim.
SYSPY=$PYTHON
[ -x /usr/bin/python3 ] && SYSPY=/usr/bin/python3

# Two users of their own, removed at exit with whatever they left in /dev/shm
# (only theirs: another run of this test may have its own users' objects there).
UA=pffair$$a
UB=pffair$$b
users_gone() {
	for u in $UA $UB; do
		id "$u" >/dev/null 2>&1 || continue
		find /dev/shm -maxdepth 1 -user "$u" -name 'placefs-fair-*' -delete 2>/dev/null
		userdel "$u" >/dev/null 2>&1
	done
}
trap 'users_gone; cleanup' EXIT
for u in $UA $UB; do
	useradd -M -N -g nogroup -s /bin/sh -d / "$u" 2>/dev/null ||
		useradd -M -U -s /bin/sh -d / "$u" || fail "useradd $u"
done
AS_A="setpriv --reuid=$(id -u $UA) --regid=$(id -g $UA) --clear-groups"
AS_B="setpriv --reuid=$(id -u $UB) --regid=$(id -g $UB) --clear-groups"
$AS_A true || fail "setpriv cannot run as $UA"

. "$top_srcdir/tests/pyinstall.sh"
py_install

cat >fair.py <<'EOF'
# load MNT THREADS ENTRIES STOPFILE | light MNT N | borrow PATH TIMEOUT_MS | user
import errno, os, random, sys, threading, time
from placefs._ioctl import Destination, release, stage, stage_batch


def ename(e):
    return errno.errorcode.get(e, str(e))


def small(mnt):
    """The t.* tensors: [(path, plan index, bytes)] in name order."""
    out = []
    for n in sorted(os.listdir(mnt)):
        if n.startswith("t."):
            p = os.path.join(mnt, n)
            out.append((p, int(os.getxattr(p, "user.placefs.index")), os.stat(p).st_size))
    return out


def dest(tag, size):
    name = "/placefs-fair-%d-%s" % (os.getpid(), tag)
    fd = os.open("/dev/shm" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    os.close(fd)
    return name


cmd = sys.argv[1]
if cmd in ("load", "light"):
    mnt = sys.argv[2]
    ts = small(mnt)
    each = ts[0][2]
    if cmd == "load":
        nthreads, k, stop = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    else:
        nthreads, k, count = 1, 1, int(sys.argv[3])
    lock = threading.Lock()
    tot = {"requests": 0, "eagain": 0, "errors": 0}
    first = []
    started = threading.Barrier(nthreads + 1)

    def run(i):
        name = dest(str(i), k * each)
        fd = os.open(ts[0][0], os.O_RDONLY)
        rnd = random.Random(i)
        n = e = bad = 0
        try:
            while True:
                if cmd == "light" and n == count:
                    break
                if cmd == "load" and n and os.path.exists(stop):
                    break
                s = rnd.randrange(len(ts) - k + 1)
                entries = [(ts[s + j][1], j * each) for j in range(k)]
                n += 1
                try:
                    res = stage_batch(fd, "read", Destination.shm(name, 0, k * each), entries)
                    bad += sum(1 for r in res if r[1])
                    if bad and not first:
                        first.append("entry errno %s" % ename(next(r[1] for r in res if r[1])))
                except OSError as x:
                    if x.errno == errno.EAGAIN:
                        e += 1
                    else:
                        bad += 1
                        if not first:
                            first.append(str(x))
                if cmd == "load" and n == 1:
                    started.wait()
        finally:
            os.close(fd)
            try:
                os.unlink("/dev/shm" + name)
            except OSError as x:
                bad += 1
                first.append("%s: %s" % (name, x))
            with lock:
                tot["requests"] += n
                tot["eagain"] += e
                tot["errors"] += bad

    th = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    for t in th:
        t.start()
    if cmd == "load":
        started.wait()
        print("started", flush=True)
    for t in th:
        t.join()
    print("%s requests %d eagain %d errors %d%s" % (
        cmd, tot["requests"], tot["eagain"], tot["errors"],
        (" first: " + first[0]) if first else ""), flush=True)
elif cmd == "borrow":
    # One borrow that may wait; prints its result, then releases.
    fd = os.open(sys.argv[2], os.O_RDONLY)
    t0 = time.monotonic()
    try:
        r = stage(fd, "borrow", None, int(sys.argv[3]) * 10**6)
        print("borrow OK %d waited_ms %d" % (r.nbytes, (time.monotonic() - t0) * 1000),
              flush=True)
        release(fd, r.lease)
    except OSError as x:
        print("borrow %s" % ename(x.errno), flush=True)
elif cmd == "user":
    # Commands on stdin: "borrow PATH TIMEOUT_MS", "release PATH"; one line out each.
    held = {}
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] == "borrow":
            fd = os.open(w[1], os.O_RDONLY)
            t0 = time.monotonic()
            try:
                r = stage(fd, "borrow", None, int(w[2]) * 10**6)
                held[w[1]] = (fd, r.lease)
                print("borrow %s OK" % os.path.basename(w[1]), flush=True)
            except OSError as x:
                os.close(fd)
                print("borrow %s %s ms %d" % (os.path.basename(w[1]), ename(x.errno),
                                             (time.monotonic() - t0) * 1000), flush=True)
        elif w[0] == "release":
            fd, lease = held.pop(w[1])
            release(fd, lease)
            os.close(fd)
            print("release %s OK" % os.path.basename(w[1]), flush=True)
EOF
chmod 644 fair.py

# 256 tensors of 64 KiB for the batches; 6 MiB and 1 MiB ones for the ring share.
set -- --tensor 'big:F32:1572864' --tensor 'one:F32:262144'
i=0
while [ $i -lt 256 ]; do
	set -- "$@" --tensor "t.$(printf %03d $i):F32:16384"
	i=$((i + 1))
done
tmo 60 "$MKCKPT" -q --seed 9 "$@" fair.safetensors || fail "mkckpt"
chmod 644 fair.safetensors

mount_fs fair.safetensors "$MP" -o buffer_size=8M,device=host,allow_other
[ "$(stat_get "$MP" staging.ring_bytes)" = 8388608 ] || fail "the ring is not 8 MiB"

# ---- batch slots: one user's 12 threads of 64-tensor batches, another's one-entry batches ----
rm -f stop
$AS_A $SYSPY fair.py load "$MP" 12 64 "$TMP/stop" >load.out 2>&1 &
LOAD=$!
wait_line load.out '^started$' 60 || fail "the load did not start: $(cat load.out)"
out=$(tmo 120 $AS_B $SYSPY fair.py light "$MP" 300 2>&1) || fail "light user: $out"
: >stop
wait "$LOAD" || fail "load: $(cat load.out)"
load=$(grep '^load ' load.out)
note "$UA: $load"
note "$UB: $out (while $UA's 12 threads sent 64-tensor batches)"
echo "$load" | grep -q ' errors 0' || fail "the heavy user's batches failed: $load"
echo "$out" | grep -Eq '^light requests 300 eagain 0 errors 0$' ||
	fail "one-entry batches of a second user beside the heavy one: $out"

# ---- one user, 4 threads: never EAGAIN for its own previous request's slot ----------------------
rm -f stop
$AS_A $SYSPY fair.py load "$MP" 4 64 "$TMP/stop" >load4.out 2>&1 &
LOAD=$!
wait_line load4.out '^started$' 60 || fail "the 4-thread load did not start: $(cat load4.out)"
# Time is the scenario: as many back-to-back requests as 3 s allow.
sleep 3
: >stop
wait "$LOAD" || fail "4-thread load: $(cat load4.out)"
load=$(grep '^load ' load4.out)
note "$UA alone, 4 threads: $load"
echo "$load" | grep -Eq '^load requests [0-9]+ eagain 0 errors 0$' ||
	fail "4 threads of one user saw EAGAIN or errors: $load"
n=$(echo "$load" | awk '{ print $3 }')
[ "$n" -ge 100 ] || fail "only $n requests in 3 s: $load"

# ---- the ring share is work-conserving -------------------------------------------------------
# A alone: a 6 MiB borrow, beyond its 4 MiB share of the 8 MiB ring.
mkfifo a.in
chmod 644 a.in
$AS_A $SYSPY fair.py user <a.in >a.out 2>&1 &
USER_A=$!
exec 7>a.in
echo "borrow $MP/big 5000" >&7
wait_line a.out '^borrow big ' 20 || fail "A's borrow: $(cat a.out)"
grep -q '^borrow big OK$' a.out || fail "A alone could not borrow 6 MiB (share 4 MiB): $(cat a.out)"
[ "$(stat_get "$MP" staging.share_over)" = 1 ] ||
	fail "share_over $(stat_get "$MP" staging.share_over), expected 1"
# B's borrow of 6 MiB waits: 2 MiB of the ring are free.
waits=$(stat_get "$MP" staging.waits)
$AS_B $SYSPY fair.py borrow "$MP/big" 30000 >b.out 2>&1 &
BORROW_B=$!
wait_stat "$MP" staging.waits $((waits + 1)) 20
# A's next borrow, 1 MiB (the ring has room): beyond its share while B waits, refused at once.
echo "borrow $MP/one 5000" >&7
wait_line a.out '^borrow one ' 20 || fail "A's second borrow: $(cat a.out)"
grep -Eq '^borrow one EBUSY ms [0-9]+$' a.out ||
	fail "A over its share while B waits was not refused: $(cat a.out)"
ms=$(sed -n 's/^borrow one EBUSY ms //p' a.out)
[ "$ms" -lt 1000 ] || fail "the refusal took $ms ms, not at once"
grep -q "uid $(id -u $UA) holds more than its share of the ring" "$MOUNT_LOG" ||
	fail "no log line says why A was refused"
gone "$BORROW_B" && fail "B did not wait: $(cat b.out)"
# A releases: B is served; then A, back under its share, borrows again.
echo "release $MP/big" >&7
wait_line a.out '^release big OK$' 20 || fail "A's release: $(cat a.out)"
wait "$BORROW_B" || fail "B: $(cat b.out)"
grep -Eq '^borrow OK 6291456 waited_ms [0-9]+$' b.out || fail "B was not served: $(cat b.out)"
echo "borrow $MP/one 5000" >&7
wait_for 20 sh -c "grep -c '^borrow one ' a.out | grep -q 2" || fail "A's third borrow: $(cat a.out)"
[ "$(grep '^borrow one ' a.out | tail -n 1)" = "borrow one OK" ] ||
	fail "A back under its share could not borrow: $(cat a.out)"
echo "release $MP/one" >&7
wait_line a.out '^release one OK$' 20 || fail "A's last release: $(cat a.out)"
exec 7>&-
wait "$USER_A" || fail "A: $(cat a.out)"
note "ring share: $UA alone borrowed 6 of 8 MiB (share 4), then EBUSY at once while $UB waited ($(cat b.out)), then served again"
wait_stat "$MP" staging.leases 0
umount_fs "$MP"
exit 0
