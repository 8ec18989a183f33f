#!/bin/sh
# SPDX-License-Identifier: MIT
# hostile-daemon: what clients on a shared host can do to the daemon
# (doc/RELIABILITY.md, "Threat model"), through live mounts with the host
# backend. As any user:
#   - numeric options out of range are refused with status 2 (readahead that
#     would wrap to 0, max_threads=-1, the staging limits);
#   - a second placefs on a live mountpoint is refused with status 10 and the
#     first mount keeps serving;
#   - xattr values are formatted once per inode (stats xattr_formats), and a
#     shape longer than the kernel's 64 KiB limit answers E2BIG;
#   - 5,000 malformed STAGE ioctls: each counted in client_errors, the log
#     rate-limited (a burst, then one line a second, log_suppressed);
#   - with the ring leased, 200 blocked stages: the daemon's threads stay
#     within max_threads + max_waiting + its own, the rest answer EAGAIN at
#     once, reads and the holder's RELEASE are served, and a stage without a
#     timeout ends after -o stage_timeout (ETIMEDOUT).
# As root, with an ordinary user (uid 65534 through setpriv) on an allow_other
# mount:
#   - the user alone may go beyond its -o user_share of the ring (the share
#     is work-conserving: tests/mount-fair.sh holds it back while another
#     user waits), and root still stages beside it;
#   - a user who may not read every shard gets EACCES for a borrow and no ring
#     handle from RING_INFO, and copy mode still works.
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"
require_fuse

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt
mkdir -p "$MP"
# The helper runs as the ordinary user too: a system python, not a per-user shim.
SYSPY=$PYTHON
[ -x /usr/bin/python3 ] && SYSPY=/usr/bin/python3

cat >"$TMP/hostile.py" <<'EOF'
# Staging ioctls by hand (include/placefs/ioctl.h): bad N, borrow, copy,
# ringinfo, hold FILE..., stagers FILE N (N threads, one borrow each).
import errno, fcntl, os, struct, sys, threading

def iowr(nr, size):
    return (3 << 30) | (size << 16) | (0xB9 << 8) | nr

RING_INFO = iowr(1, 256)
STAGE = iowr(2, 320)
RELEASE = (1 << 30) | (64 << 16) | (0xB9 << 8) | 3
STAGE_FMT = "<6I2Q128s8Q2I10Q"

def stage(fd, mode=0, timeout_ns=0, version=1, dest=b"", dest_size=0):
    kind = 2 if dest else 0
    hb = len(dest) + 1 if dest else 0
    buf = bytearray(struct.pack(STAGE_FMT, version, 320, mode, 0, kind, hb, 0, dest_size,
                                dest, timeout_ns, 0, 0, 0, 0, 0, 0, 0, 0, 0, *([0] * 10)))
    fcntl.ioctl(fd, STAGE, buf, True)
    return struct.unpack(STAGE_FMT, buf)

def release(fd, lease):
    fcntl.ioctl(fd, RELEASE, bytearray(struct.pack("<2IQ6Q", 1, 64, lease, *([0] * 6))), True)

def result(fn):
    try:
        fn()
        return "OK"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

cmd = sys.argv[1]
if cmd == "bad":
    fd = os.open(sys.argv[2], os.O_RDONLY)
    n = int(sys.argv[3])
    einval = 0
    for _ in range(n):
        try:
            stage(fd, version=7)
        except OSError as e:
            einval += e.errno == errno.EINVAL
    print("bad %d einval %d" % (n, einval))
elif cmd == "borrow":
    fd = os.open(sys.argv[2], os.O_RDONLY)
    def b():
        out = stage(fd, timeout_ns=int(sys.argv[3]) if len(sys.argv) > 3 else 0)
        release(fd, out[12])
    print(result(b))
elif cmd == "copy":
    fd = os.open(sys.argv[2], os.O_RDONLY)
    size = os.fstat(fd).st_size
    name = "placefs-hostile-%d" % os.getpid()
    d = os.open("/dev/shm/" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(d, size)
    def c():
        stage(fd, mode=1, dest=("/" + name).encode(), dest_size=size)
        got = os.pread(d, size, 0)
        if got != os.pread(fd, size, 0):
            raise OSError(errno.EBADMSG, "copied bytes differ")
    r = result(c)
    os.unlink("/dev/shm/" + name)
    print(r)
elif cmd == "ringinfo":
    fd = os.open(sys.argv[2], os.O_RDONLY)
    buf = bytearray(struct.pack("<2I", 1, 256) + bytes(248))
    fcntl.ioctl(fd, RING_INFO, buf, True)
    kind, hbytes = struct.unpack_from("<2I", buf, 40)
    print("handle_kind %d handle_bytes %d" % (kind, hbytes))
elif cmd == "hold":
    held = []
    for f in sys.argv[2:]:
        fd = os.open(f, os.O_RDONLY)
        try:
            held.append((fd, stage(fd, timeout_ns=2000000000)[12]))
            print("lease %s" % f, flush=True)
        except OSError as e:
            print("refused %s %s" % (f, errno.errorcode.get(e.errno)), flush=True)
    print("held", flush=True)
    sys.stdin.read()
    print("releases %s" % " ".join(result(lambda: release(fd, l)) for fd, l in held), flush=True)
elif cmd == "stagers":
    n = int(sys.argv[3])
    fds = [os.open(sys.argv[2], os.O_RDONLY) for _ in range(n)]
    res = []
    lock = threading.Lock()
    def one(fd):
        def b():
            out = stage(fd, timeout_ns=int(sys.argv[4]))
            release(fd, out[12])
        r = result(b)
        with lock:
            res.append(r)
    ts = [threading.Thread(target=one, args=(fd,)) for fd in fds]
    for t in ts:
        t.start()
    print("started", flush=True)
    for t in ts:
        t.join()
    print(" ".join("%s=%d" % (k, res.count(k)) for k in sorted(set(res))), flush=True)
EOF
chmod 755 "$TMP"
chmod 644 "$TMP/hostile.py"
H="$SYSPY $TMP/hostile.py"
# The holders hold their leases until this FIFO is closed (exec 7>&-).
mkfifo hold.in
chmod 666 hold.in

tmo 20 "$MKCKPT" -q --seed 3 --tensor 'full:F32:2097152' --tensor 'w.0:F32:262144' \
	--tensor 'w.1:F32:262144' --tensor 'w.2:F32:262144' --tensor 'w.3:F32:262144' \
	--tensor 'w.4:F32:262144' ring.safetensors || fail "mkckpt ring"
chmod 644 ring.safetensors

# ---- numeric options: out of range is a usage error (2), before anything is mounted -----------
refuse_opt() {
	local st=0 out
	out=$(tmo 10 "$PLACEFS" -f -o "$1" ring.safetensors "$MP" 2>&1) || st=$?
	[ "$st" -eq 2 ] || fail "-o $1: exit status $st, expected 2: $out"
	echo "$out" | grep -q "$2" || fail "-o $1: the message does not name $2: $out"
	is_mounted "$MP" && fail "-o $1 mounted"
	return 0
}
refuse_opt readahead=18446744073709551615 'readahead'
refuse_opt readahead=2G 'readahead'
refuse_opt max_threads=-1 'max_threads'
refuse_opt max_threads=4294967296 'max_threads'
refuse_opt max_threads=100000 'max_threads'
refuse_opt max_idle_threads=-2 'max_idle_threads'
refuse_opt stage_timeout=-1 'stage_timeout'
refuse_opt stage_timeout=99999999999 'stage_timeout'
refuse_opt max_waiting=0 'max_waiting'
refuse_opt max_waiting=4097 'max_waiting'
refuse_opt user_share=0 'user_share'
refuse_opt user_share=101 'user_share'
note "13 out-of-range numeric options refused with status 2"

# ---- a second placefs on a live mountpoint: status 10, the first keeps serving -----------------
mount_fs ring.safetensors "$MP" -o buffer_size=8M,device=host
st=0
out=$(tmo 10 "$PLACEFS" -f ring.safetensors "$MP" 2>&1) || st=$?
[ "$st" -eq 10 ] || fail "a second placefs on a live mount: exit $st, expected 10: $out"
echo "$out" | grep -q 'is already a mount point' || fail "stacked mount message: $out"
n=$(awk -v mp="$(escape_mnt "$MP")" '$5 == mp' /proc/self/mountinfo | wc -l)
[ "$n" -eq 1 ] || fail "$n mounts on $MP after the refused second placefs"
stat_get "$MP" reads >/dev/null || fail "the first mount stopped serving"
note "stacked mount refused (10): $(echo "$out" | head -n 1)"
umount_fs "$MP"

# ---- xattrs formatted once per inode; a shape over 64 KiB answers E2BIG --------------------------
# mkdims OUT NDIM: tensor "long" of NDIM dimensions of 1 and "short" of [1, 1].
mkdims() {
	"$PYTHON" - "$1" "$2" <<'EOF' || fail "writing $1"
import json, struct, sys
h = {"long": {"dtype": "F32", "shape": [1] * int(sys.argv[2]), "data_offsets": [0, 4]},
     "short": {"dtype": "F32", "shape": [1, 1], "data_offsets": [4, 8]}}
b = json.dumps(h).encode()
b += b" " * (-len(b) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(b)) + b + bytes(8))
EOF
}
# xattr_check MOUNTPOINT NDIM: 5 rounds of getxattr and listxattr, one formatting per inode.
xattr_check() {
	"$PYTHON" - "$1" "$2" <<'EOF' || fail "xattr checks ($2 dimensions)"
import errno, json, os, sys
mp, ndim = sys.argv[1], int(sys.argv[2])
def formats():
    return json.load(open(os.path.join(mp, ".placefs", "stats")))["xattr_formats"]
assert formats() == 0, formats()
for _ in range(5):
    assert os.getxattr(os.path.join(mp, "short"), "user.placefs.shape") == b"[1, 1]"
    assert os.getxattr(os.path.join(mp, "short"), "user.placefs.dtype") == b"F32"
    assert len(os.listxattr(os.path.join(mp, "short"))) == 8
assert formats() == 1, "after 10 getxattr of one inode: %d formattings" % formats()
want = ("[" + ", ".join(["1"] * ndim) + "]").encode()
for _ in range(5):
    try:
        got = os.getxattr(os.path.join(mp, "long"), "user.placefs.shape")
        assert len(want) <= 65536 and got == want, "shape of %d bytes" % len(got)
    except OSError as e:
        assert e.errno == errno.E2BIG and len(want) > 65536, e
    assert os.getxattr(os.path.join(mp, "long"), "user.placefs.nbytes") == b"4"
assert formats() == 2, "two inodes asked: %d formattings" % formats()
EOF
}
mkdims dims.safetensors 1000
mount_fs dims.safetensors "$MP"
xattr_check "$MP" 1000
umount_fs "$MP"
note "xattrs: 20 getxattr and 5 listxattr on two inodes, 2 formattings"
# 30,000 dimensions: a 90 KB shape, more than getxattr(2) can return. Either the
# parser refuses it at mount (status 3: a cap on dimensions), or getxattr says E2BIG.
mkdims huge.safetensors 30000
"$PLACEFS" -f huge.safetensors "$MP" 2>huge.log &
HUGE_PID=$!
DAEMONS="$DAEMONS $HUGE_PID"
if wait_mounted "$MP" "$HUGE_PID" && wait_ready "$MP" "$HUGE_PID"; then
	MOUNT_PID=$HUGE_PID
	MOUNT_LOG=$TMP/huge.log
	xattr_check "$MP" 30000
	umount_fs "$MP"
	note "xattrs: a 30,000-dimension shape answers E2BIG, formatted once"
else
	st=0
	wait "$HUGE_PID" || st=$?
	[ "$st" -eq 3 ] || fail "huge.safetensors: placefs exited $st: $(cat huge.log)"
	note "a 30,000-dimension tensor is refused at mount: $(head -n 1 huge.log)"
fi

# ---- 5,000 malformed STAGE ioctls: counted, the log rate-limited ------------------------------
mount_fs ring.safetensors "$MP" -o buffer_size=8M,device=host
before=$(wc -l <"$MOUNT_LOG")
out=$(tmo 60 $H bad "$MP/w.0" 5000) || fail "bad ioctls: $out"
[ "$out" = "bad 5000 einval 5000" ] || fail "bad ioctls: $out"
n=$(($(wc -l <"$MOUNT_LOG") - before))
[ "$n" -lt 50 ] || fail "5000 bad ioctls wrote $n log lines"
[ "$(stat_get "$MP" client_errors)" = 5000 ] ||
	fail "client_errors $(stat_get "$MP" client_errors), expected 5000"
sup=$(stat_get "$MP" log_suppressed)
[ "$sup" -eq $((5000 - n)) ] || [ "$sup" -ge $((5000 - 50)) ] ||
	fail "log_suppressed $sup with $n lines logged"
# The daemon still answers a good request, and the next line says what was held back.
out=$(tmo 10 $H borrow "$MP/w.1") && [ "$out" = OK ] || fail "borrow after the flood: $out"
note "5000 bad ioctls: $n log lines, client_errors 5000, log_suppressed $sup"
umount_fs "$MP"

# ---- blocked stages: bounded threads, EAGAIN beyond, reads and RELEASE served -------------------
mount_fs ring.safetensors "$MP" -o buffer_size=8M,device=host,max_waiting=16,stage_timeout=2
DPID=$MOUNT_PID
rm -f hold.out # wait_line must not see a previous client's line
$H hold "$MP/full" <hold.in >hold.out 2>&1 &
HOLD=$!
exec 7>hold.in
wait_line hold.out '^held$' || fail "holder: $(cat hold.out)"
grep -q '^lease ' hold.out || fail "holder got no lease: $(cat hold.out)"
base=$(awk '/^Threads:/ { print $2 }' /proc/$DPID/status)
io=$(stat_get "$MP" staging.io_threads)
# The two fixed pools, whatever the load: read-mode readers and batch threads.
pools=$(($(stat_get "$MP" staging.read.threads) + $(stat_get "$MP" staging.batch.threads)))
rm -f stagers.out # wait_line must not see a previous client's line
$H stagers "$MP/w.0" 200 20000000000 >stagers.out 2>&1 7>&- &
STAGERS=$!
wait_line stagers.out '^started$' 20 || fail "stagers: $(cat stagers.out)"
# Every stage that can wait is waiting once stage_threads_now reaches max_waiting.
wait_stat "$MP" staging.stage_threads_now 16 10
peak=$(awk '/^Threads:/ { print $2 }' /proc/$DPID/status)
bound=$((16 + 16 + io + pools + 4))
[ "$peak" -le "$bound" ] ||
	fail "$peak daemon threads with 200 blocked stages (bound $bound: 16 workers + 16 waiting + $io io + $pools read/batch + 4)"
# Reads, stats and the holder's RELEASE are still served.
[ "$(tmo 10 cat "$MP/w.3" | wc -c)" -eq 1048576 ] || fail "w.3 not read whole while stages wait"
busy=$(stat_get "$MP" staging.busy)
[ "$busy" -ge 150 ] || fail "only $busy stages refused at once (EAGAIN) beyond max_waiting"
exec 7>&-
wait "$HOLD" || fail "holder: $(cat hold.out)"
grep -q '^releases OK$' hold.out || fail "the holder's RELEASE: $(cat hold.out)"
wait "$STAGERS" || fail "stagers: $(cat stagers.out)"
res=$(tail -n 1 stagers.out)
echo "$res" | grep -Eq 'EAGAIN=[0-9]+' || fail "stagers: no EAGAIN: $res"
ok=$(echo "$res" | sed -n 's/.*OK=\([0-9]*\).*/\1/p')
[ "${ok:-0}" -ge 16 ] || fail "stagers: fewer than 16 were served after the release: $res"
note "200 blocked stages: $peak daemon threads (base $base, bound $bound), $res"
# A stage that gives no timeout ends after -o stage_timeout=2 (ETIMEDOUT), not never.
rm -f hold.out # wait_line must not see a previous client's line
$H hold "$MP/full" <hold.in >hold.out 2>&1 &
HOLD=$!
exec 7>hold.in
wait_line hold.out '^held$' || fail "holder: $(cat hold.out)"
t0=$(date +%s)
out=$(tmo 20 $H borrow "$MP/w.2" 0 7>&-)
t1=$(date +%s)
[ "$out" = ETIMEDOUT ] || fail "a stage without timeout while the ring is held: $out"
[ $((t1 - t0)) -le 6 ] || fail "the default stage timeout took $((t1 - t0)) s"
exec 7>&-
wait "$HOLD" || fail "holder: $(cat hold.out)"
note "a stage without a timeout: ETIMEDOUT after $((t1 - t0)) s (-o stage_timeout=2)"
umount_fs "$MP"

# ---- an ordinary user: ring share and borrowing ---------------------------------------------------
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null 2>&1; then
	note "SKIP the ordinary-user cases: they need root and setpriv"
	exit 0
fi
U="setpriv --reuid=65534 --regid=65534 --clear-groups"
$U true || fail "setpriv cannot run as uid 65534"

mount_fs ring.safetensors "$MP" -o buffer_size=8M,device=host,allow_other
rm -f hold.out # wait_line must not see a previous client's line
$U $H hold "$MP/w.0" "$MP/w.1" "$MP/w.2" "$MP/w.3" "$MP/w.4" <hold.in >hold.out 2>&1 &
HOLD=$!
exec 7>hold.in
wait_line hold.out '^held$' || fail "user holder: $(cat hold.out)"
# Alone on the mount, the user gets all 5 MiB: beyond its 4 MiB share only while nobody else stages.
[ "$(grep -c '^lease ' hold.out)" -eq 5 ] || fail "the user alone got less than 5 MiB: $(cat hold.out)"
[ "$(stat_get "$MP" staging.share_over)" = 1 ] ||
	fail "share_over $(stat_get "$MP" staging.share_over), expected 1 (the fifth MiB)"
# Root, not capped, still stages in the rest of the ring.
out=$(tmo 10 $H borrow "$MP/w.4" 1000000000) && [ "$out" = OK ] ||
	fail "root could not stage with the user at its share: $out"
exec 7>&-
wait "$HOLD" || fail "user holder: $(cat hold.out)"
grep -q '^releases OK OK OK OK OK$' hold.out || fail "user releases: $(cat hold.out)"
# Its share is back once released.
out=$(tmo 10 $U $H borrow "$MP/w.4" 1000000000) && [ "$out" = OK ] || fail "user borrow after: $out"
note "uid 65534 alone held 5 of the 8 MiB ring (-o user_share=50: 4 MiB); root staged meanwhile"
umount_fs "$MP"

mkdir -p perm
tmo 20 "$MKCKPT" -q --seed 5 --tensor 'pub:F32:262144' perm/a.safetensors || fail "mkckpt a"
tmo 20 "$MKCKPT" -q --seed 6 --tensor 'priv:F32:262144' perm/b.safetensors || fail "mkckpt b"
chmod 755 perm
chmod 644 perm/a.safetensors
chmod 600 perm/b.safetensors
mount_fs perm "$MP" -o buffer_size=8M,device=host,allow_other
out=$($U $H borrow "$MP/pub" 1000000000)
[ "$out" = EACCES ] || fail "borrow by a user who may not read every shard: $out"
out=$($U $H copy "$MP/pub")
[ "$out" = OK ] || fail "copy by that user: $out"
out=$($U $H ringinfo "$MP/pub")
[ "$out" = "handle_kind 0 handle_bytes 0" ] || fail "ring info for that user: $out"
out=$($U $H borrow "$MP/priv" 2>&1 | tail -n 1)
echo "$out" | grep -q 'PermissionError\|EACCES' || fail "the user opened the private tensor: $out"
out=$(tmo 10 $H borrow "$MP/pub" 1000000000)
[ "$out" = OK ] || fail "root borrow: $out"
out=$(tmo 10 $H ringinfo "$MP/pub")
echo "$out" | grep -Eq '^handle_kind 2 handle_bytes [1-9]' || fail "root's ring info: $out"
[ "$(stat_get "$MP" staging.borrow_refused)" = 1 ] || fail "stats borrow_refused"
# Once every shard is readable, the user may borrow (decided per uid, from the modes at mount).
umount_fs "$MP"
chmod 644 perm/b.safetensors
mount_fs perm "$MP" -o buffer_size=8M,device=host,allow_other
out=$($U $H borrow "$MP/pub" 1000000000)
[ "$out" = OK ] || fail "borrow with every shard readable: $out"
note "uid 65534: borrow EACCES and no ring handle while a shard is private; copy OK"
umount_fs "$MP"
exit 0
