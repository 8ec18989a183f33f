#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-faults: what must fail, fails cleanly. Bad checkpoints, limits and
# options are refused before mounting (non-zero exit, nothing in /proc/mounts);
# write-class calls are refused with EROFS; a shard truncated, replaced or
# rewritten under a live mount makes reads of its tensors fail with EIO or
# ESTALE (logged, naming the shard) while the other shards keep serving, and
# a restored shard serves again.
. "$(dirname "$0")/lib.sh"
require_fuse

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt
mkdir -p "$MP"

# refuse EXPECTED_STATUS MESSAGE_REGEX placefs-arguments...: runs placefs in the
# foreground; it must exit with that status, say so on stderr, and mount nothing.
refuse() {
	local want=$1 re=$2 st=0
	shift 2
	tmo 20 "$PLACEFS" -f "$@" >out.txt 2>err.txt || st=$?
	if is_mounted "$MP" || grep -qF " $MP " /proc/mounts; then
		fusermount3 -u -z "$MP" 2>/dev/null
		fail "placefs $* left a mount behind"
	fi
	[ "$st" -eq "$want" ] || fail "placefs $*: exit status $st, expected $want ($(cat err.txt))"
	grep -Eq "$re" err.txt || fail "placefs $*: message '$(cat err.txt)' does not match /$re/"
	note "refused (exit $st): $(head -n 1 err.txt)"
}

tmo 20 "$MKCKPT" -q --seed 9 --tensor 'a:F32:16' --tensor 'b:BF16:4x4' good.safetensors ||
	fail "mkckpt good"

# ---- bad checkpoints (exit 3), empty selection (exit 5) ------------------------------------------------------
printf 'not a safetensors file at all' >garbage.safetensors
refuse 3 'garbage\.safetensors' garbage.safetensors "$MP"
head -c 100 good.safetensors >short.safetensors
refuse 3 'short\.safetensors' short.safetensors "$MP"
"$PYTHON" - <<'EOF'
import struct
h = b'{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 15]}}'
open("badoffsets.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 15)
EOF
refuse 3 'badoffsets\.safetensors' badoffsets.safetensors "$MP"
printf 'version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 1\n' >lfs.safetensors
refuse 3 'lfs\.safetensors' lfs.safetensors "$MP"
refuse 3 'nonexistent' nonexistent.safetensors "$MP"
mkdir empty
refuse 3 'empty' empty "$MP"
mkdir badindex && cp good.safetensors badindex/a.safetensors
echo '{"weight_map": {"a": "missing.safetensors"}}' >badindex/model.safetensors.index.json
refuse 3 'missing\.safetensors' badindex "$MP"
refuse 5 'zzz' -o prefix=zzz good.safetensors "$MP"
refuse 3 'index' -o index=x.json good.safetensors "$MP"
# No name in a checkpoint reaches outside its directory: an index naming a shard
# "../x.safetensors" (which exists) or by an absolute path is refused before
# anything is mounted.
mkdir escape && cp good.safetensors escape/a.safetensors && cp good.safetensors x.safetensors
echo '{"weight_map": {"a": "../x.safetensors"}}' >escape/model.safetensors.index.json
refuse 3 'escape/model\.safetensors\.index\.json.*"\.\./x\.safetensors".*"\.\."' escape "$MP"
printf '{"weight_map": {"a": "%s"}}\n' "$TMP/x.safetensors" >escape/model.safetensors.index.json
refuse 3 'escape/model\.safetensors\.index\.json.*is absolute' escape "$MP"
printf '{"weight_map": {"a": "a.safetensors", "b": "sub/../../x.safetensors"}}\n' \
	>escape/model.safetensors.index.json
refuse 3 '"\.\." component' escape "$MP"

# ---- invalid limits (exit 4) ------------------------------------------------------------
for v in 0 abc -1 1.5M 0x10 12Q 99999999999999999999 20000000T; do
	refuse 4 "buffer_size.*$(printf '%s' "$v" | sed 's/[.]/[.]/g')" -o "buffer_size=$v" \
		good.safetensors "$MP"
done
export INSTANTTENSOR_BUFFER_SIZE=lots
refuse 4 'INSTANTTENSOR_BUFFER_SIZE.*lots' good.safetensors "$MP"
export INSTANTTENSOR_BUFFER_SIZE=
refuse 4 'INSTANTTENSOR_BUFFER_SIZE' good.safetensors "$MP"
unset INSTANTTENSOR_BUFFER_SIZE

# ---- bad command lines (exit 2), options libfuse does not know (exit 10) --------------------
refuse 2 'device' -o device=gpu0 good.safetensors "$MP"
refuse 2 'device' -o device=cuda: good.safetensors "$MP"
refuse 2 'read_mode' -o read_mode=fast good.safetensors "$MP"
refuse 2 'readahead' -o readahead=lots good.safetensors "$MP"
refuse 2 'MOUNTPOINT' good.safetensors
refuse 2 'unexpected argument' good.safetensors "$MP" extra
refuse 2 'not a directory' good.safetensors good.safetensors
refuse 2 'mountpoint' good.safetensors "$TMP/no/such/dir"
refuse 10 'unknown option' -o no_such_option good.safetensors "$MP"
# The kernel's permission checks cannot be turned off.
refuse 2 'default_permissions.*cannot be turned off' -o nodefault_permissions good.safetensors "$MP"
refuse 2 'default_permissions.*cannot be turned off' -o ro,no_default_permissions \
	good.safetensors "$MP"
tmo 10 "$PLACEFS" -h >help.txt 2>&1 || fail "placefs -h failed"
grep -q 'buffer_size=SIZE' help.txt || fail "placefs -h lacks the placefs options"
# -V and --version: placefs's version, libfuse's (loaded, and built against) and cJSON's.
for v in -V --version; do
	tmo 10 "$PLACEFS" $v >version.txt 2>&1 || fail "placefs $v failed"
	grep -qx "placefs $(sed -n 's/^AC_INIT(\[placefs\], \[\([^]]*\)\].*/\1/p' "$top_srcdir/configure.ac")" version.txt ||
		fail "placefs $v: no 'placefs VERSION' line: $(cat version.txt)"
	fuse_pc=$(pkg-config --modversion fuse3 2>/dev/null || echo '[0-9.]*')
	grep -Eqx "libfuse [0-9]+\.[0-9]+(\.[0-9]+)? \(built with $fuse_pc\)" version.txt ||
		fail "placefs $v: no libfuse line: $(cat version.txt)"
	cjson_pc=$(pkg-config --modversion libcjson 2>/dev/null || echo '[0-9.]*')
	grep -Eqx "cJSON $cjson_pc" version.txt || fail "placefs $v: no cJSON line: $(cat version.txt)"
done
note "placefs -V: $(head -n 3 version.txt | tr '\n' ';')"

# ---- write-class calls on a live mount ------------------------------------------------------
mount_fs good.safetensors "$MP"
tmo 20 "$PYTHON" - "$MP" <<'EOF' || fail "a write-class call was not refused with EROFS"
import errno, os, sys
m = sys.argv[1]
f = os.path.join(m, "a")
calls = {
    "open O_WRONLY": lambda: os.open(f, os.O_WRONLY),
    "open O_RDWR": lambda: os.open(f, os.O_RDWR),
    "open O_TRUNC": lambda: os.open(f, os.O_RDONLY | os.O_TRUNC),
    "create": lambda: os.open(os.path.join(m, "new"), os.O_CREAT | os.O_WRONLY, 0o644),
    "unlink": lambda: os.unlink(f),
    "rename": lambda: os.rename(f, os.path.join(m, "c")),
    "mkdir": lambda: os.mkdir(os.path.join(m, "d")),
    "rmdir": lambda: os.rmdir(os.path.join(m, ".placefs", "by-placement", "gpu")),
    "symlink": lambda: os.symlink("a", os.path.join(m, "l")),
    "link": lambda: os.link(f, os.path.join(m, "h")),
    "chmod": lambda: os.chmod(f, 0o600),
    "chown": lambda: os.chown(f, 1, 1),
    "truncate": lambda: os.truncate(f, 0),
    "utime": lambda: os.utime(f, (0, 0)),
    "setxattr": lambda: os.setxattr(f, "user.placefs.placement", b"cpu"),
    "removexattr": lambda: os.removexattr(f, "user.placefs.dtype"),
    "write .placefs/plan": lambda: open(os.path.join(m, ".placefs", "plan"), "w"),
}
bad = 0
for what, call in calls.items():
    try:
        call()
        print("FAIL: %s succeeded" % what)
        bad += 1
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EPERM):
            print("FAIL: %s: %s, expected EROFS" % (what, errno.errorcode.get(e.errno)))
            bad += 1
print("%d write-class calls refused" % (len(calls) - bad))
sys.exit(1 if bad else 0)
EOF
for cmd in "touch $MP/new" "rm -f $MP/a" "mv $MP/a $MP/z" "mkdir $MP/d" "chmod 600 $MP/a" \
	"setfattr -n user.placefs.placement -v cpu $MP/a" "cp good.safetensors $MP/"; do
	if tmo 10 sh -c "$cmd" 2>/dev/null; then
		fail "'$cmd' succeeded on a read-only mount"
	fi
done
umount_fs "$MP"

# ---- who may read a tensor: its shard's owner and read bits ------------------------------
# Four shards: 0644, 0600, 0640 with another group, and 0640 with a POSIX ACL
# that grants user nobody and not the owning group (its group bits are the
# ACL mask). Each tensor file shows its shard's owner, group and read bits,
# the ACL shard's its ACL too (doc/SEMANTICS.md; tests/mount-perms.sh has
# the whole matrix), and the kernel (default_permissions) enforces them:
# with allow_other, user nobody reads the 0644 shard's tensors and the ACL
# shard's (a named user), not the others, not even their xattrs; the
# owning group of the ACL shard does not; the control files stay 0444.
# Without allow_other nobody cannot reach the mount.
tmo 20 "$MKCKPT" -q --seed 12 --random 16 --max-bytes 4K --shards 4 --index perm ||
	fail "mkckpt perm"
P1=model-00001-of-00004.safetensors
P2=model-00002-of-00004.safetensors
P3=model-00003-of-00004.safetensors
P4=model-00004-of-00004.safetensors
chmod 0644 "perm/$P1"
chmod 0600 "perm/$P2"
chmod 0640 "perm/$P3"
chmod 0640 "perm/$P4"
acl=none
if [ "$(id -u)" -eq 0 ]; then
	chgrp 4242 "perm/$P3" || fail "chgrp"
	acl=$("$PYTHON" - "perm/$P4" <<'EOF'
import os, struct, sys
# user::rw- user:65534:r-- group::--- mask::r-- other::---
e = [(0x01, 6, 0xffffffff), (0x02, 4, 65534), (0x04, 0, 0xffffffff), (0x10, 4, 0xffffffff),
     (0x20, 0, 0xffffffff)]
try:
    os.setxattr(sys.argv[1], "system.posix_acl_access",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *x) for x in e))
    print("set")
except OSError as ex:
    print("unsupported (%s)" % ex.strerror)
EOF
)
fi
chmod 0755 "$TMP"
mount_fs perm "$MP" -o buffer_size=2K
tmo 20 "$PYTHON" - "$MP" perm "$acl" <<'EOF' || fail "tensor files do not show their shard's owner and read bits"
import os, stat, struct, sys
mnt, src, acl = sys.argv[1], sys.argv[2], sys.argv[3]
bad, seen = [], {}
for f in os.listdir(mnt):
    if f == ".placefs":
        continue
    p = os.path.join(mnt, f)
    shard = os.getxattr(p, "user.placefs.source").decode()
    st, ss = os.stat(p), os.stat(os.path.join(src, shard))
    want = ss.st_mode & 0o444
    if shard.endswith("00004-of-00004.safetensors") and acl == "set":
        # 0440 with the ACL mirrored, each entry cut to its read bit (the
        # mask is r--): the kernel evaluates it as the shard's
        want = 0o440
        def entries(v):
            return [(t, q & 4, i) for t, q, i in struct.iter_unpack("<HHI", v[4:])]
        if entries(os.getxattr(p, "system.posix_acl_access")) != entries(
                os.getxattr(os.path.join(src, shard), "system.posix_acl_access")):
            bad.append("%s: its ACL is not its shard's" % f)
    got = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    if got != (want, ss.st_uid, ss.st_gid):
        bad.append("%s (%s): mode %o uid %d gid %d, expected %o %d %d" % (
            f, shard, got[0], got[1], got[2], want, ss.st_uid, ss.st_gid))
    seen[shard] = "%o" % got[0]
for c in ("plan", "plan.json", "columns.json", "columns.jsonl", "layout.json", "packed.tsv",
          "shards.json", "stats", "metadata.json"):
    m = stat.S_IMODE(os.stat(os.path.join(mnt, ".placefs", c)).st_mode)
    if m != 0o444:
        bad.append(".placefs/%s: mode %o, expected 444" % (c, m))
for b in bad:
    print("FAIL: " + b)
print("tensor modes by shard: %s" % ", ".join("%s %s" % kv for kv in sorted(seen.items())))
sys.exit(1 if bad else 0)
EOF
# pick SHARD: one tensor file of that shard
pick() {
	(cd "$MP" && for f in random.*; do
		[ "$(getfattr --only-values -n user.placefs.source "$f" 2>/dev/null)" = "$1" ] &&
			[ "$(stat -c %s "$f")" -gt 0 ] && echo "$f" && break
	done)
}
f1=$(pick "$P1")
f2=$(pick "$P2")
f3=$(pick "$P3")
f4=$(pick "$P4")
[ -n "$f1" ] && [ -n "$f2" ] && [ -n "$f3" ] && [ -n "$f4" ] || fail "no tensor in some shard"
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
	# Without allow_other only the mounting user gets in at all.
	out=$(tmo 10 $NOBODY ls "$MP" 2>&1) && fail "nobody listed a mount made without allow_other"
	echo "$out" | grep -q 'Permission denied' || fail "nobody listing the mount: $out"
	umount_fs "$MP"
	mount_fs perm "$MP" -o buffer_size=2K,allow_other
	mount_line "$MP" | grep -q 'default_permissions' || fail "no default_permissions: $(mount_line "$MP")"
	readable=$f1
	private="$f2 $f3"
	if [ "$acl" = set ]; then
		readable="$f1 $f4"
	else
		private="$private $f4"
	fi
	for f in $readable; do
		tmo 10 $NOBODY cat "$MP/$f" >nobody.out || fail "nobody cannot read $f (0644, or an ACL naming it)"
		cmp -s nobody.out "$MP/$f" || fail "nobody read other bytes of $f"
	done
	for f in $private; do
		out=$(tmo 10 $NOBODY cat "$MP/$f" 2>&1) && fail "nobody read $f, whose shard it may not read"
		echo "$out" | grep -q 'Permission denied' || fail "nobody reading $f: $out"
		out=$(tmo 10 $NOBODY getfattr -n user.placefs.name "$MP/$f" 2>&1) &&
			fail "nobody read the xattrs of $f"
	done
	# The group of the 0640 shard reads it; with the ACL, the owning group does not.
	tmo 10 setpriv --reuid=65534 --regid=4242 --clear-groups cat "$MP/$f3" >/dev/null ||
		fail "group 4242 cannot read $f3 (its shard is 0640, group 4242)"
	if [ "$acl" = set ]; then
		# (uid 4243: 65534 is the ACL's named user, whose entry comes before the group's.)
		out=$(setpriv --reuid=4243 --regid="$(stat -c %g "perm/$P4")" --clear-groups \
			cat "$MP/$f4" 2>&1) && fail "the owning group read $f4 (its ACL group entry is ---)"
	fi
	tmo 10 $NOBODY cat "$MP/.placefs/plan" >/dev/null || fail "nobody cannot read .placefs/plan"
	note "allow_other: nobody reads the 0644 shard's tensors and those of the ACL naming it, gets EACCES on the 0600 and 0640 ones (ACL: $acl)"
else
	note "not root: the allow_other checks as user nobody are skipped"
fi
umount_fs "$MP"
chmod 0700 "$TMP"

# ---- a shard changing under a live mount ---------------------------------------------
tmo 20 "$MKCKPT" -q --seed 10 --random 30 --max-bytes 40K --shards 3 --index live ||
	fail "mkckpt live"
SHARD3=model-00003-of-00003.safetensors
mount_fs live "$MP" -o buffer_size=16K

# Files of the third shard, and of the others.
in3=$(cd "$MP" && for f in random.*; do
	[ "$(getfattr --only-values -n user.placefs.source "$f" 2>/dev/null)" = "$SHARD3" ] &&
		[ "$(stat -c %s "$f")" -gt 0 ] && echo "$f"
done | head -n 3)
in1=$(cd "$MP" && for f in random.*; do
	[ "$(getfattr --only-values -n user.placefs.source "$f" 2>/dev/null)" != "$SHARD3" ] &&
		[ "$(stat -c %s "$f")" -gt 0 ] && echo "$f"
done | head -n 3)
[ -n "$in3" ] && [ -n "$in1" ] || fail "no tensors found in the shards"
t3=$(echo "$in3" | head -n 1)
t3b=$(echo "$in3" | sed -n 2p)
t1=$(echo "$in1" | head -n 1)

# The shard's mtime as validated at mount, to put back later.
mtime_ns=$("$PYTHON" -c 'import os, sys; print(os.stat(sys.argv[1]).st_mtime_ns)' "live/$SHARD3")
set_mtime() {
	"$PYTHON" -c 'import os, sys; n = int(sys.argv[2]); os.utime(sys.argv[1], ns=(n, n))' "$1" "$2" ||
		fail "cannot set the mtime of $1"
}

# (1) Truncated: a file opened before (O_DIRECT, so no cached page can answer) and
# fresh opens both fail with EIO; the log names the shard; other shards serve.
tmo 20 "$PYTHON" - "$MP/$t3" "live/$SHARD3" <<'EOF' || fail "truncation not reported as EIO"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
size = os.path.getsize(sys.argv[2])
os.truncate(sys.argv[2], size - 100)
import mmap
buf = mmap.mmap(-1, 1 << 20)
try:
    os.preadv(fd, [buf], 0)
    print("FAIL: read after truncation succeeded")
    sys.exit(1)
except OSError as e:
    if e.errno not in (errno.EIO, errno.ESTALE):
        print("FAIL: read after truncation: %s" % errno.errorcode.get(e.errno))
        sys.exit(1)
    print("read of an open file after truncation: %s" % errno.errorcode[e.errno])
EOF
r=$(py_read_errno "$MP/$t3b")
case $r in EIO|ESTALE) ;; *) fail "open+read of $t3b after truncation: $r" ;; esac
[ "$(py_read_errno "$MP/$t1")" = OK ] || fail "other shard stopped serving after truncation"
grep -q "$SHARD3" "$MOUNT_LOG" || fail "the log does not name the truncated shard"
tmo 10 grep -q "\"stale_shards\": \[\"$SHARD3\"\]" "$MP/.placefs/stats" ||
	fail "stats does not list the stale shard"
note "truncated shard: $r, logged: $(grep "$SHARD3" "$MOUNT_LOG" | head -n 1)"

# (2) Restored in place (same inode, content and mtime): it serves again.
tmo 20 "$MKCKPT" -q --seed 10 --random 30 --max-bytes 40K --shards 3 --index fresh ||
	fail "mkckpt fresh"
cmp -s "fresh/$SHARD3" "live/$SHARD3" && fail "the truncation did not change the shard"
"$PYTHON" - "fresh/$SHARD3" "live/$SHARD3" <<'EOF' || fail "restore failed"
import sys
data = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "r+b") as f:
    f.write(data)
EOF
set_mtime "live/$SHARD3" "$mtime_ns"
r=$(py_read_errno "$MP/$t3b")
if [ "$r" = OK ]; then
	note "restored shard serves again"
	tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" live --limit 16384 --ranges 2 ||
		fail "restored shard serves wrong bytes"
else
	fail "restored shard still refused: $r"
fi

# (3) Rewritten in place with the same size but a new mtime: ESTALE.
touch -d '2001-01-01 00:00:00' "live/$SHARD3"
r=$(py_read_errno "$MP/$t3")
[ "$r" = ESTALE ] || fail "read after an in-place rewrite: $r, expected ESTALE"
set_mtime "live/$SHARD3" "$mtime_ns"
[ "$(py_read_errno "$MP/$t3")" = OK ] || fail "shard not served after its mtime came back"

# (4) Replaced by another file (rename over it): ESTALE, other shards fine.
cp "fresh/$SHARD3" "live/$SHARD3.new"
set_mtime "live/$SHARD3.new" "$mtime_ns"
mv "live/$SHARD3.new" "live/$SHARD3"
r=$(py_read_errno "$MP/$t3")
[ "$r" = ESTALE ] || fail "read after the shard was replaced: $r, expected ESTALE"
[ "$(py_read_errno "$MP/$t1")" = OK ] || fail "other shard stopped serving after a replace"
note "replaced shard: ESTALE"

umount_fs "$MP"

# ---- a shard truncated under active readers ----------------------------------------
# (5) The default read mode (mmap) with its checks: 8 threads read the tail tensor
# with O_DIRECT in a loop while the shard is cut at a page boundary inside it.
# Every read must return the original bytes or fail with EIO/ESTALE; never others.
tmo 20 "$MKCKPT" -q --seed 13 --tensor 'head:F32:262144' --tensor 'tail:F32:262144' \
	cut.safetensors || fail "mkckpt cut"
mount_fs cut.safetensors "$MP"
tmo 30 "$PYTHON" - "$MP" cut.safetensors <<'EOF' || fail "readers saw wrong bytes or no error"
import errno, mmap, os, sys, threading, time
mnt, shard = sys.argv[1], sys.argv[2]
want = {}
for name in ("head", "tail"):
    off = int(os.getxattr(os.path.join(mnt, name), "user.placefs.offset"))
    with open(shard, "rb") as f:
        f.seek(off)
        want[name] = f.read(1 << 20)
errors, wrong, stop = [], [], threading.Event()
def reader(k):
    buf = mmap.mmap(-1, 1 << 20)
    fd = os.open(os.path.join(mnt, "tail"), os.O_RDONLY | os.O_DIRECT)
    while not stop.is_set():
        try:
            n = os.preadv(fd, [buf], 0)
            if buf[:n] != want["tail"][:n] or n != len(want["tail"]):
                wrong.append(n)
        except OSError as e:
            errors.append(e.errno)
            break
    os.close(fd)
th = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
for t in th:
    t.start()
# The scenario: 0.2 s of reads before the truncation, 0.3 s of reads after it.
time.sleep(0.2)
size = os.path.getsize(shard)
os.truncate(shard, (size - (1 << 19)) & ~4095)
time.sleep(0.3)
stop.set()
for t in th:
    t.join()
if wrong:
    print("FAIL: %d reads returned bytes other than the source's" % len(wrong))
    sys.exit(1)
if not errors or any(e not in (errno.EIO, errno.ESTALE) for e in errors):
    print("FAIL: readers ended with %r, expected EIO/ESTALE" % errors)
    sys.exit(1)
print("8 readers under truncation: %s" % sorted(set(errno.errorcode[e] for e in errors)))
EOF
kill -0 "$MOUNT_PID" || fail "daemon died under truncation"
[ "$(py_read_errno "$MP/.placefs/plan")" = OK ] || fail "daemon stopped serving"
umount_fs "$MP"

# (6) Both read modes with the per-read check switched off (testing knob), so the
# truncation reaches the data path itself: mmap's writev faults (EFAULT to the
# daemon, EIO to the reader) and pread comes back short (EIO); the daemon
# survives, logs the shard, and keeps serving the intact part.
for mode in mmap pread; do
	tmo 20 "$MKCKPT" -q --seed 13 --tensor 'head:F32:262144' --tensor 'tail:F32:262144' \
		cut.safetensors || fail "mkckpt cut"
	export PLACEFS_TEST_SKIP_READ_CHECK=1
	mount_fs cut.safetensors "$MP" -o read_mode=$mode
	unset PLACEFS_TEST_SKIP_READ_CHECK
	tmo 20 "$PYTHON" - "$MP" cut.safetensors <<'EOF' || fail "read_mode=$mode: truncation not EIO"
import errno, mmap, os, sys
mnt, shard = sys.argv[1], sys.argv[2]
buf = mmap.mmap(-1, 1 << 20)
fds = {n: os.open(os.path.join(mnt, n), os.O_RDONLY | os.O_DIRECT) for n in ("head", "tail")}
assert os.preadv(fds["tail"], [buf], 0) == 1 << 20
size = os.path.getsize(shard)
os.truncate(shard, size - (1 << 19))
try:
    n = os.preadv(fds["tail"], [buf], 1 << 19)
    print("FAIL: read past the new end returned %d bytes" % n)
    sys.exit(1)
except OSError as e:
    if e.errno != errno.EIO:
        print("FAIL: read past the new end: %s" % errno.errorcode[e.errno])
        sys.exit(1)
with open(shard, "rb") as f:
    f.seek(int(os.getxattr(os.path.join(mnt, "head"), "user.placefs.offset")))
    want = f.read(1 << 20)
n = os.preadv(fds["head"], [buf], 0)
if buf[:n] != want or n != len(want):
    print("FAIL: the intact tensor is no longer served")
    sys.exit(1)
print("truncated under an open file: EIO; intact tensor still served")
EOF
	kill -0 "$MOUNT_PID" || fail "read_mode=$mode: the daemon died"
	case $mode in
	mmap) grep -q "replying from its mapping failed" "$MOUNT_LOG" ||
		fail "read_mode=mmap: the failed reply is not logged" ;;
	pread) grep -q "short read" "$MOUNT_LOG" || fail "read_mode=pread: short read not logged" ;;
	esac
	umount_fs "$MP"
	note "read_mode=$mode with the check off: EIO, daemon alive, exit 0"
done

note "ok"
exit 0
