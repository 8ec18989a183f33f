#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-perms: who may read what, through every path of the mount, compared
# with what the kernel answers the same user for the shard itself. As root,
# on a mount with -o allow_other,device=host (the host ring):
#   - users and groups made for the test (a unique prefix, removed on exit):
#     the shards' owner; a member of group "sec" by its primary group; one in
#     "sec" as a supplementary group only; an outsider; a member of "sec" whom
#     an ACL names and denies; a member of group "team" (supplementary);
#   - one shard (one 32x32 F32 tensor) per cell: owner only (0600); group
#     sec 0640; group sec 0604 (the group may not, others may); other (0644);
#     a POSIX ACL naming the outsider (allow); one denying the named member of
#     sec; one naming group team (allow); one whose mask (-w-) takes a named
#     user's read away while other may read;
#   - for each cell and user: open+read, mmap, the xattrs and the views file
#     (the kernel's check on the mount: default_permissions over the tensor
#     file's mode and mirrored ACL), then STAGE copy, read and a sliced copy
#     and a borrow on a descriptor root opened and handed over (the daemon's
#     own check: a descriptor carries no right), STAGE_BATCH copy and read
#     of every cell's tensor sent on the public tensor (each entry on its
#     own), RING_INFO's handle and opening the ring: every answer must be
#     the shard's (a borrow and the handle: every shard, and a ring the user
#     can open);
#   - the daemon in a PID namespace of its own, so that callers outside come
#     with pid 0 and their supplementary groups cannot be read: a read batch
#     grants only what no group list could refuse;
#   - a second mount whose shards group sec may all read: its members (by
#     primary or supplementary group) borrow with placefs-stage --mode borrow
#     --verify, mapping the ring read-only; the others get EACCES.
# It skips (77) only without root, /dev/fuse, fusermount3 or useradd.
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"
require_fuse
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: mount-perms makes users and groups: it needs root"
	exit 77
fi
for c in useradd userdel groupadd groupdel; do
	if ! command -v $c >/dev/null 2>&1; then
		echo "SKIP: $c is absent"
		exit 77
	fi
done
command -v setpriv >/dev/null 2>&1 || fail "setpriv (util-linux) is required"
command -v setfacl >/dev/null 2>&1 || fail "setfacl (the Debian package acl) is required"
. "$top_srcdir/tests/pyinstall.sh"
py_install
STAGE=$top_builddir/tools/placefs-stage
[ -x "$STAGE" ] || fail "$STAGE is not built"

# ---- users and groups ----------------------------------------------------------------------
PFX=pp$(printf %04x $(($$ % 65536)))
PUSERS=""
PGROUPS=""
perm_cleanup() {
	local u g
	for u in $PUSERS; do userdel "$u" >/dev/null 2>&1; done
	for g in $PGROUPS; do groupdel "$g" >/dev/null 2>&1; done
}
trap 'perm_cleanup; cleanup' EXIT
mkgroup() {
	groupadd "$1" || fail "groupadd $1"
	PGROUPS="$PGROUPS $1"
}
# mkuser NAME PRIMARY [SUPPLEMENTARY]
mkuser() {
	if [ -n "${3:-}" ]; then
		useradd -M -N -s /usr/sbin/nologin -g "$2" -G "$3" "$1" || fail "useradd $1"
	else
		useradd -M -N -s /usr/sbin/nologin -g "$2" "$1" || fail "useradd $1"
	fi
	PUSERS="$PUSERS $1"
}
SEC=${PFX}sec
TEAM=${PFX}team
mkgroup "$SEC"
mkgroup "$TEAM"
for u in own sup out tm; do mkgroup "$PFX$u"; done
mkuser "${PFX}own" "${PFX}own"      # owns every shard
mkuser "${PFX}pri" "$SEC"           # sec by its primary group
mkuser "${PFX}sup" "${PFX}sup" "$SEC" # sec as a supplementary group only
mkuser "${PFX}out" "${PFX}out"      # in no group of the shards
mkuser "${PFX}nmd" "$SEC"           # sec by its primary group, named (denied) by an ACL
mkuser "${PFX}tm" "${PFX}tm" "$TEAM" # team as a supplementary group only
USERS="own pri sup out nmd tm"
# as USER CMD...: runs CMD with the user's uid, primary group and groups (30 s at most).
as() {
	local u=$PFX$1
	shift
	tmo 30 setpriv --reuid="$(id -u "$u")" --regid="$(id -g "$u")" \
		--groups="$(id -G "$u" | tr ' ' ,)" "$@"
}
as out true || fail "setpriv cannot run as ${PFX}out"
# The interpreter itself (python3 may be a wrapper the users cannot run).
PYU=$("$PYTHON" -c 'import sys; print(sys.executable)')

# ---- the shards: one cell each -------------------------------------------------------------------
chmod 0755 "$TMP"
CK=$TMP/ck
mkdir -p "$CK"
chmod 0755 "$CK"
CELLS="owner g0640 g0604 other uallow udeny gallow mask"
seed=1
for c in $CELLS; do
	tmo 20 "$MKCKPT" -q --seed $seed --tensor "$c:F32:32x32" "$CK/$c.safetensors" ||
		fail "mkckpt $c"
	seed=$((seed + 1))
	chown "${PFX}own:$SEC" "$CK/$c.safetensors" || fail "chown $c"
done
chown "${PFX}own:${PFX}own" "$CK/owner.safetensors" "$CK/other.safetensors"
chmod 0600 "$CK/owner.safetensors"
chmod 0640 "$CK/g0640.safetensors"
chmod 0604 "$CK/g0604.safetensors"
chmod 0644 "$CK/other.safetensors"
chmod 0640 "$CK/uallow.safetensors" "$CK/udeny.safetensors" "$CK/gallow.safetensors"
chmod 0644 "$CK/mask.safetensors"
setfacl -m "u:${PFX}out:r,g::-,o::-" "$CK/uallow.safetensors" || fail "setfacl uallow"
setfacl -m "u:${PFX}nmd:-,g::r,o::-" "$CK/udeny.safetensors" || fail "setfacl udeny"
setfacl -m "g:$TEAM:r,g::-,o::-" "$CK/gallow.safetensors" || fail "setfacl gallow"
setfacl -m "u:${PFX}out:r,g::r,o::r" "$CK/mask.safetensors" || fail "setfacl mask"
setfacl -n -m "m::w" "$CK/mask.safetensors" || fail "setfacl mask::-w-"
note "cells: $(cd "$CK" && for c in $CELLS; do printf '%s: %s; ' "$c" "$(getfacl -cpE "$c.safetensors" 2>/dev/null | tr -s '\n' ' ')"; done)"

MP=$TMP/mnt
mount_fs "$CK" "$MP" -o allow_other,device=host,buffer_size=1M

# ---- the probe: runs as each user with descriptors root opened ----------------------------------
cat >"$TMP/probe.py" <<'PYEOF'
import errno, json, mmap, os, struct, sys
from placefs import _ioctl as ioc
from placefs import Destination

a = json.loads(sys.argv[1])
mnt, ck, ring = a["mnt"], a["ck"], a["ring"]
out = {"cells": {}, "user": {}}

def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))

def attempt(f):
    try:
        f()
        return "OK"
    except OSError as e:
        return err(e)

def payload(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.seek(8 + n)
        return f.read()

# A destination the user owns: one shm object, 64 KiB.
name = "/%s-%d" % (a["user"], os.getpid())
dfd = os.open("/dev/shm" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(dfd, 65536)
dest = Destination.shm(name, 0, 65536)

def dest_bytes(n):
    return os.pread(dfd, n, 0)

for c in a["cells"]:
    r = {}
    shard = os.path.join(ck, c["name"] + ".safetensors")
    r["shard"] = attempt(lambda: payload(shard))  # the kernel's answer for the shard
    want = payload(shard) if r["shard"] == "OK" else None
    p = os.path.join(mnt, c["name"])

    # Served bytes are compared where the user may read them (else served at all is wrong).
    def read_file():
        with open(p, "rb", buffering=0) as f:
            if f.read() != want and want is not None:
                raise OSError(errno.EBADMSG, "other bytes")
    r["open"] = attempt(read_file)

    def map_file():
        fd = os.open(p, os.O_RDONLY)
        try:
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as m:
                if m[:] != want and want is not None:
                    raise OSError(errno.EBADMSG, "other bytes")
        finally:
            os.close(fd)
    r["mmap"] = attempt(map_file)
    r["xattr"] = attempt(lambda: os.getxattr(p, "user.placefs.name"))

    def read_view():
        with open(os.path.join(mnt, ".placefs/views/all", c["name"] + ".safetensors"), "rb") as f:
            if payload_of(f.read()) != want and want is not None:
                raise OSError(errno.EBADMSG, "other bytes")
    def payload_of(b):
        n = struct.unpack("<Q", b[:8])[0]
        return b[8 + n:]
    r["view"] = attempt(read_view)

    # The daemon's own checks, on the descriptor root opened.
    fd = c["fd"]
    def staged(mode, sl=None):
        os.pwrite(dfd, b"\0" * 4096, 0)
        res = ioc.stage(fd, mode, dest, slice=sl)
        n = 2048 if sl else 4096
        if want is not None and (res.nbytes != n or dest_bytes(n) != want[:n]):
            raise OSError(errno.EBADMSG, "other bytes")
    r["copy"] = attempt(lambda: staged("copy"))
    r["read"] = attempt(lambda: staged("read"))
    r["slice"] = attempt(lambda: staged("copy", (0, 0, 16)))

    def borrow():
        res = ioc.stage(fd, "borrow")
        ioc.release(fd, res.lease)
    r["borrow"] = attempt(borrow)
    out["cells"][c["name"]] = r

# Batches of every cell's tensor, sent on the public tensor.
for mode in ("copy", "read"):
    entries = [(c["index"], 4096 * i) for i, c in enumerate(a["cells"])]
    try:
        res = ioc.stage_batch(a["pub_fd"], mode, dest, entries)
        for i, c in enumerate(a["cells"]):
            e = res[i][1]
            got = "OK" if e == 0 else errno.errorcode.get(e, str(e))
            if got == "OK":
                want = payload(os.path.join(ck, c["name"] + ".safetensors")) \
                    if out["cells"][c["name"]]["shard"] == "OK" else None
                if want is not None and dest_bytes(4096 * (i + 1))[4096 * i:] != want:
                    got = "EBADMSG"
            out["cells"][c["name"]]["b" + mode] = got
    except OSError as e:
        for c in a["cells"]:
            out["cells"][c["name"]]["b" + mode] = "batch " + err(e)

info = ioc.ring_info(a["pub_fd"])
out["user"]["handle"] = "handle" if info.handle_kind == ioc.HANDLE_HOST_SHM else "none"
out["user"]["ringopen"] = attempt(lambda: os.close(os.open("/dev/shm" + ring, os.O_RDONLY)))
os.close(dfd)
os.unlink("/dev/shm" + name)
print(json.dumps(out))
PYEOF

# launch.py USER...: for each user, opens every cell's tensor as root and runs
# the probe as the user with those descriptors; then compares and prints the matrix.
cat >"$TMP/launch.py" <<'PYEOF'
import json, os, subprocess, sys
from placefs import _ioctl as ioc

mnt, ck, pfx, cells, users = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), \
    sys.argv[5].split()
pub = os.open(os.path.join(mnt, "other"), os.O_RDONLY)
ring = ioc.ring_info(pub).shm_name
ops = ["open", "mmap", "xattr", "view", "copy", "read", "slice", "bcopy", "bread", "borrow"]
bad, rows = [], {}
for u in users:
    name = pfx + u
    fds = {c: os.open(os.path.join(mnt, c), os.O_RDONLY) for c in cells}
    upub = os.open(os.path.join(mnt, "other"), os.O_RDONLY)
    arg = {"mnt": mnt, "ck": ck, "ring": ring, "user": name, "pub_fd": upub,
           "cells": [{"name": c, "fd": fds[c],
                      "index": int(os.getxattr(os.path.join(mnt, c), "user.placefs.index"))}
                     for c in cells]}
    groups = subprocess.check_output(["id", "-G", name]).decode().split()
    cmd = ["setpriv", "--reuid=" + subprocess.check_output(["id", "-u", name]).decode().strip(),
           "--regid=" + subprocess.check_output(["id", "-g", name]).decode().strip(),
           "--groups=" + ",".join(groups), sys.executable, os.environ["PROBE"], json.dumps(arg)]
    p = subprocess.run(cmd, pass_fds=list(fds.values()) + [upub], capture_output=True, text=True)
    for fd in list(fds.values()) + [upub]:
        os.close(fd)
    if p.returncode != 0:
        bad.append("%s: the probe failed: %s" % (u, p.stderr.strip()[-2000:]))
        continue
    r = json.loads(p.stdout)
    every = all(r["cells"][c]["shard"] == "OK" for c in cells)
    ringopen = r["user"]["ringopen"] == "OK"
    may_borrow = every and ringopen
    for c in cells:
        cr = r["cells"][c]
        for op in ops:
            want = cr["shard"]
            if op == "borrow":
                want = "OK" if may_borrow else "EACCES"
            if cr[op] != want:
                bad.append("%s, %s: %s %s, the shard's answer %s" % (c, u, op, cr[op], want))
        rows.setdefault(c, []).append(("" if cr["shard"] == "OK" else "x") + "".join(
            "." if cr[op] == "OK" else "-" for op in ops))
    want_handle = "handle" if may_borrow else "none"
    if r["user"]["handle"] != want_handle:
        bad.append("%s: RING_INFO %s, expected %s (reads every shard: %s, opens the ring: %s)"
                   % (u, r["user"]["handle"], want_handle, every, ringopen))
    print("%s: reads every shard %s, opens the ring %s, RING_INFO %s" % (
        u, every, ringopen, r["user"]["handle"]))
print("per cell and user, one mark per operation (%s): . served, - refused; "
      "x first: the kernel refuses the user the shard itself" % " ".join(ops))
print("%-8s %s" % ("", " ".join("%-11s" % u for u in users)))
for c in cells:
    print("%-8s %s" % (c, " ".join("%-11s" % x for x in rows.get(c, []))))
for b in bad:
    print("FAIL: " + b)
sys.exit(1 if bad else 0)
PYEOF
out=$(PROBE=$TMP/probe.py tmo 120 "$PYTHON" "$TMP/launch.py" "$MP" "$CK" "$PFX" "$CELLS" "$USERS" 2>&1)
st=$?
echo "$out"
[ "$st" -eq 0 ] || fail "the mount's answers differ from the shards' (above)"
# The ring: no group of users reads every shard here, so it stays the daemon's alone.
ring=$(stat -c '%a' /dev/shm/placefs-"$MOUNT_PID"-* 2>/dev/null)
[ "$ring" = 600 ] || fail "the ring's shm object is mode $ring, expected 600"
umount_fs "$MP"

# ---- a caller whose groups the daemon cannot read ------------------------------------------------
# The daemon in a PID namespace of its own: a caller outside it comes with pid 0, so its
# supplementary groups cannot be read (fuse_req_getgroups fails); then only what no group
# list could refuse is granted: never a shard the kernel refuses the caller.
if command -v unshare >/dev/null 2>&1 && unshare --pid --fork true 2>/dev/null; then
	MP3=$TMP/mnt3
	mkdir -p "$MP3"
	MOUNT_LOG=$TMP/ns.log
	unshare --pid --kill-child=TERM "$PLACEFS" -f -o allow_other,device=host,buffer_size=1M \
		"$CK" "$MP3" 2>"$MOUNT_LOG" &
	NSPID=$!
	DAEMONS="$DAEMONS $NSPID"
	MOUNTS="$MOUNTS $MP3"
	wait_ready "$MP3" "$NSPID" || fail "placefs in a PID namespace did not mount"
	cat >"$TMP/nsbatch.py" <<'PYEOF'
import errno, json, os, sys
from placefs import _ioctl as ioc
from placefs import Destination
mnt, cells = sys.argv[1], sys.argv[2:]
name = "/pfns-%d" % os.getpid()
fd = os.open("/dev/shm" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, 65536)
pub = os.open(os.path.join(mnt, "other"), os.O_RDONLY)
idx = {c: int(x) for c, x in (a.split("=") for a in cells)}
res = ioc.stage_batch(pub, "read", Destination.shm(name, 0, 65536),
                      [(i, 4096 * k) for k, i in enumerate(idx.values())])
os.unlink("/dev/shm" + name)
print(" ".join("%s=%s" % (c, "OK" if r[1] == 0 else errno.errorcode.get(r[1], r[1]))
               for c, r in zip(idx, res)))
PYEOF
	args=""
	for c in g0640 g0604 other uallow; do
		args="$args $c=$(getfattr --absolute-names --only-values -n user.placefs.index "$MP3/$c")"
	done
	for u in pri sup out; do
		got=$(as $u "$PYU" "$TMP/nsbatch.py" "$MP3" $args 2>&1) || fail "$u's batch: $got"
		case $u in
		pri) want="g0640=OK g0604=EACCES other=OK uallow=EACCES" ;;
		# sec by a supplementary group: g0640 the kernel grants, but only a group
		# list could tell; g0604 it refuses: both refused here.
		sup) want="g0640=EACCES g0604=EACCES other=OK uallow=EACCES" ;;
		# Not in sec, which only a group list could tell: g0604 refused here.
		out) want="g0640=EACCES g0604=EACCES other=OK uallow=OK" ;;
		esac
		[ "$got" = "$want" ] || fail "$u in a PID namespace the daemon cannot see: $got, expected $want"
	done
	note "callers the daemon cannot see (pid 0): only what no group list refuses (pri, sup, out as expected)"
	tmo 10 fusermount3 -u "$MP3" || fail "fusermount3 -u $MP3"
	wait_for 10 gone "$NSPID" || fail "the daemon in the PID namespace did not exit"
else
	note "SKIP the PID namespace case: unshare --pid is not available"
fi

# ---- borrowing: every shard readable by group sec --------------------------------------------------
CK2=$TMP/ck2
mkdir -p "$CK2"
chmod 0755 "$CK2"
tmo 20 "$MKCKPT" -q --seed 21 --tensor "a:F32:256x256" "$CK2/a.safetensors" || fail "mkckpt a"
tmo 20 "$MKCKPT" -q --seed 22 --tensor "b:F32:256x256" "$CK2/b.safetensors" || fail "mkckpt b"
chown "${PFX}own:$SEC" "$CK2/a.safetensors" "$CK2/b.safetensors"
chmod 0640 "$CK2/a.safetensors"
chmod 0644 "$CK2/b.safetensors"
mount_fs "$CK2" "$MP" -o allow_other,device=host,buffer_size=1M
ring=$(stat -c '%a %G' /dev/shm/placefs-"$MOUNT_PID"-* 2>/dev/null)
[ "$ring" = "640 $SEC" ] || fail "the ring's shm object is '$ring', expected '640 $SEC'"
for u in pri sup nmd; do
	out=$(as $u "$STAGE" --mode borrow --verify "$MP/a" "$MP/b" 2>&1) ||
		fail "$u (in $SEC) cannot borrow: $out"
	echo "$out" | grep -q '^verify: 2 of 2 tensors byte-exact$' || fail "$u borrow --verify: $out"
done
for u in out tm; do
	out=$(as $u "$STAGE" --mode borrow "$MP/b" 2>&1) && fail "$u (not in $SEC) borrowed: $out"
	echo "$out" | grep -q 'EACCES' || fail "$u's borrow: $out"
	out=$(as $u "$STAGE" --mode copy --verify "$MP/b" 2>&1) || fail "$u cannot copy b: $out"
done
note "group $SEC may read every shard: the ring is group $SEC, mode 0640; pri, sup and nmd borrowed (--verify), out and tm got EACCES and copied"
umount_fs "$MP"
exit 0
