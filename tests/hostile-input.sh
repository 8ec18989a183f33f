#!/bin/sh
# shellcheck disable=SC3045 # ulimit -v: probed, and used only where it works
# SPDX-License-Identifier: MIT
# hostile-input: inputs made to hang, exhaust or mislead placefs, placefs-plan
# and placefs-mkckpt are refused quickly with a clear message (issue 14, items
# 3, 6, 8, 9, 11):
#  - a FIFO as the index (found in the source, or given with -o index= /
#    --index) is refused at once, never read forever;
#  - a header whose tensor has more dimensions than the cap is refused
#    without gigabytes of memory, naming the file, the tensor and the rule;
#  - a shard rewritten in place with the same size, swapped entries and its
#    mtime put back is never served as the old one (ESTALE or EIO, never the
#    other tensor's bytes);
#  - shard paths cannot leave the source through symbolic links, and a file
#    that is no safetensors file is reported without echoing its bytes;
#  - tensor names with C1 controls or bidirectional overrides become escaped
#    file names;
#  - numeric options of placefs-mkckpt and placefs-plan are range-checked
#    (exit status 2) before any memory is spent.
# Every step runs under a timeout, so a regression fails instead of hanging.
. "$(dirname "$0")/lib.sh"
require_fuse
[ -x "$PLAN" ] || fail "$PLAN is not built"

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt
mkdir -p "$MP"

# Sanitizer builds reserve terabytes of address space: memory limits and
# resident-size checks apply only to programs that run under a 256 MB limit.
LIMITED=0
(ulimit -v 262144 && exec "$PLAN" --version) >/dev/null 2>&1 &&
	(ulimit -v 262144 && exec "$MKCKPT" --version) >/dev/null 2>&1 && LIMITED=1
# vlimit CMD...: runs CMD under a 256 MB address-space limit where possible.
vlimit() {
	if [ "$LIMITED" -eq 1 ]; then
		(ulimit -v 262144 && exec "$@")
	else
		"$@"
	fi
}

# refuse STATUS REGEX placefs-arguments...: placefs must exit with STATUS within
# 20 s, say REGEX on stderr, and leave nothing mounted.
refuse() {
	want=$1 re=$2 st=0
	shift 2
	tmo 20 "$PLACEFS" -f "$@" >out.txt 2>err.txt || st=$?
	if is_mounted "$MP"; then
		fusermount3 -u -z "$MP" 2>/dev/null
		fail "placefs $* left a mount behind"
	fi
	[ "$st" -ne 124 ] || fail "placefs $* did not exit within 20 s (it hung, or mounted)"
	[ "$st" -eq "$want" ] || fail "placefs $*: exit status $st, expected $want ($(cat err.txt))"
	grep -Eq "$re" err.txt || fail "placefs $*: message '$(cat err.txt)' does not match /$re/"
	note "placefs refused (exit $st): $(head -n 1 err.txt)"
}

# plan_refuse STATUS REGEX placefs-plan-arguments...: the same for placefs-plan.
plan_refuse() {
	want=$1 re=$2 st=0
	shift 2
	tmo 20 "$PLAN" "$@" >out.txt 2>err.txt || st=$?
	[ "$st" -ne 124 ] || fail "placefs-plan $* hung (killed after 20 s)"
	[ "$st" -eq "$want" ] ||
		fail "placefs-plan $*: exit status $st, expected $want ($(cat err.txt))"
	grep -Eq "$re" err.txt || fail "placefs-plan $*: message '$(cat err.txt)' does not match /$re/"
	note "placefs-plan refused (exit $st): $(head -n 1 err.txt)"
}

# ---- item 6: a FIFO as the index -------------------------------------------------
mkdir fifo
tmo 20 "$MKCKPT" -q --seed 1 --tensor 'a:F32:4' fifo/a.safetensors || fail "mkckpt fifo"
mkfifo fifo/model.safetensors.index.json || fail "mkfifo"
mkfifo given.json || fail "mkfifo"
refuse 3 'index.*not a regular file' fifo "$MP"
refuse 3 'given\.json.*not a regular file' -o index="$TMP/given.json" fifo "$MP"
plan_refuse 3 'index.*not a regular file' fifo
plan_refuse 3 'given\.json.*not a regular file' --index "$TMP/given.json" fifo

# ---- item 3: one tensor with too many dimensions -----------------------------------
# 2,000,000 dimensions of 1 (a 4 MB header); before the cap, each cost a cJSON
# node and 8 bytes of shape, for the life of the mount.
"$PYTHON" - dims.safetensors <<'EOF' || fail "cannot write dims.safetensors"
import struct, sys
n = 2000000
hdr = b'{"w":{"dtype":"U8","shape":[' + b",".join([b"1"] * n) + b'],"data_offsets":[0,1]}}'
hdr += b" " * (-len(hdr) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(hdr)) + hdr + b"\0")
EOF
plan_refuse 3 'dims\.safetensors.*tensor "w": "shape" has more than 1024 elements.*at most 1024 dimensions per tensor' \
	dims.safetensors
refuse 3 'dims\.safetensors.*tensor "w".*at most 1024 dimensions' dims.safetensors "$MP"
# The refusal comes before the tree is built: well under 64 MB of memory.
rss=
[ "$LIMITED" -eq 1 ] && [ -x /usr/bin/time ] &&
	/usr/bin/time -o rss.txt -f '%M' "$PLAN" dims.safetensors >/dev/null 2>&1
[ -s rss.txt ] && rss=$(tail -n 1 rss.txt)
if [ -n "$rss" ] && [ "$rss" -eq "$rss" ] 2>/dev/null; then
	[ "$rss" -lt 65536 ] || fail "refusing a 4 MB header took $rss KB of memory"
	note "refusing 2,000,000 dimensions: $rss KB resident"
fi

# ---- item 9: numeric options of the tools -------------------------------------------
for a in "--random 99999999999" "--random 18446744073709551616" "--llama 99999999999:8:8:8" \
	"--llama 1:99999999999:1:1" "--max-bytes 2T --random 1" "--shards 100000"; do
	st=0
	# A limit on memory too: the refusal must come before any list is built.
	# shellcheck disable=SC2086
	vlimit timeout -k 3 10 "$MKCKPT" -q $a big.safetensors >out.txt 2>err.txt || st=$?
	[ "$st" -eq 2 ] || fail "placefs-mkckpt $a: exit status $st, expected 2 ($(cat err.txt))"
	grep -Eq 'limit|fit in 64 bits|between' err.txt ||
		fail "placefs-mkckpt $a: unclear message '$(cat err.txt)'"
	[ ! -e big.safetensors ] || fail "placefs-mkckpt $a wrote a file"
done
note "placefs-mkckpt: out-of-range counts refused with exit status 2"
tmo 20 "$MKCKPT" -q --tensor 'a:F32:4' small.safetensors || fail "mkckpt small"
plan_refuse 2 'ring-size.*too large' --ring-size 18446744073709551616 small.safetensors
plan_refuse 2 'ring-size.*greater than zero' --ring-size 0 small.safetensors
plan_refuse 4 'buffer-size.*too large' --buffer-size 99999999999999999999 small.safetensors

# ---- item 11: shard paths through symbolic links -------------------------------------
mkdir outside esc esc/real
tmo 20 "$MKCKPT" -q --seed 2 --tensor 'a:F32:4' outside/x.safetensors || fail "mkckpt outside"
ln -s ../outside/x.safetensors esc/x.safetensors
printf '{"weight_map": {"a": "x.safetensors"}}' >esc/model.safetensors.index.json
refuse 3 'x\.safetensors.*leads outside' esc "$MP"
plan_refuse 3 'x\.safetensors.*leads outside' esc
rm esc/x.safetensors
# A symlinked directory component.
ln -s ../outside esc/sub
printf '{"weight_map": {"a": "sub/x.safetensors"}}' >esc/model.safetensors.index.json
refuse 3 'sub/x\.safetensors.*leads outside' esc "$MP"
# Without an index, a listed link that leaves the source is refused as well.
rm esc/model.safetensors.index.json esc/sub
ln -s ../outside/x.safetensors esc/x.safetensors
refuse 3 'x\.safetensors.*leads outside' esc "$MP"
rm esc/x.safetensors
# A link that stays inside is followed.
cp outside/x.safetensors esc/real/y.safetensors
ln -s real/y.safetensors esc/x.safetensors
mount_fs esc "$MP"
[ -f "$MP/a" ] || fail "the tensor of a link inside the source is not served"
umount_fs "$MP"
rm -r esc
# A file that is no safetensors file: its first 8 bytes are not echoed as a length.
mkdir foreign
# shellcheck disable=SC2016
printf 'root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n' >foreign/model.safetensors
refuse 3 'model\.safetensors.*not a safetensors file' foreign "$MP"
grep -q '2609312867587944306' err.txt && fail "placefs echoed the file's first bytes: $(cat err.txt)"
plan_refuse 3 'not a safetensors file' foreign
grep -q 'header length is' err.txt && fail "placefs-plan echoed a header length: $(cat err.txt)"

# ---- item 11: names that hide or reorder what a listing shows --------------------------
RLO=$(printf 'evil\342\200\256gpj.exe')
C1=$(printf 'c1\302\205x')
tmo 20 "$MKCKPT" -q --tensor "$RLO:F32:4" --tensor "$C1:F32:4" names.safetensors ||
	fail "mkckpt names"
mount_fs names.safetensors "$MP"
tmo 20 "$PYTHON" - "$MP" "$RLO" "$C1" <<'EOF' || fail "hidden characters reached file names"
import os, sys
mp, names = sys.argv[1], [os.fsencode(a) for a in sys.argv[2:]]
want = {b"evil%E2%80%AEgpj.exe": names[0], b"c1%C2%85x": names[1]}
got = sorted(f for f in os.listdir(os.fsencode(mp)) if not f.startswith(b"."))
if got != sorted(want):
    sys.exit("FAIL: files %r, expected %r" % (got, sorted(want)))
for f, real in want.items():
    if os.getxattr(os.path.join(os.fsencode(mp), f), "user.placefs.name") != real:
        sys.exit("FAIL: user.placefs.name of %r is not the real name" % f)
print("escaped: %s" % b", ".join(got).decode())
EOF
umount_fs "$MP"

# ---- item 8: a same-size rewrite in place with the mtime put back ----------------------
tmo 20 "$MKCKPT" -q --seed 3 --tensor 'a:F32:4' --tensor 'b:F32:4' sw.safetensors ||
	fail "mkckpt sw"
mount_fs sw.safetensors "$MP"
tmo 20 "$PYTHON" - "$MP" sw.safetensors <<'EOF' || fail "a changed shard was served as the old one"
import errno, json, os, struct, sys, time
mp, shard = sys.argv[1], sys.argv[2]
raw = open(shard, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data = raw[8:8 + n], raw[8 + n:]
h = json.loads(hdr)
ra, rb = h["a"]["data_offsets"], h["b"]["data_offsets"]
want_a, bytes_b = data[ra[0]:ra[1]], data[rb[0]:rb[1]]
if want_a == bytes_b:
    sys.exit("FAIL: a and b hold the same bytes; the test cannot tell them apart")
with open(os.path.join(mp, "a"), "rb") as f:
    if f.read() != want_a:
        sys.exit("FAIL: a is not served right before the rewrite")
# Same header length, a and b swapped: a now lies where b was, and b where a was.
sa, sb = json.dumps(ra, separators=(",", ":")), json.dumps(rb, separators=(",", ":"))
new_hdr = hdr.replace(sa.encode(), b"@A@").replace(sb.encode(), sa.encode()).replace(b"@A@", sb.encode())
if len(new_hdr) != len(hdr) or new_hdr == hdr:
    sys.exit("FAIL: cannot build the swapped header")
new_data = bytearray(data)
new_data[rb[0]:rb[1]], new_data[ra[0]:ra[1]] = want_a, bytes_b
st = os.stat(shard)
time.sleep(0.05)  # timestamps are coarse: the rewrite must get a later ctime
with open(shard, "r+b") as f:
    f.write(raw[:8] + new_hdr + bytes(new_data))
os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -d, tar -x, cp -p
st2 = os.stat(shard)
if (st2.st_size, st2.st_mtime_ns, st2.st_ino) != (st.st_size, st.st_mtime_ns, st.st_ino):
    sys.exit("FAIL: the rewrite did not keep size, mtime and inode")
for flags in (os.O_RDONLY, os.O_RDONLY | os.O_DIRECT):
    try:
        fd = os.open(os.path.join(mp, "a"), flags)
        try:
            got = os.pread(fd, 16, 0)
        finally:
            os.close(fd)
    except OSError as e:
        if e.errno not in (errno.ESTALE, errno.EIO):
            sys.exit("FAIL: reading a after the rewrite: %s" % errno.errorcode.get(e.errno))
        print("read of a after a same-size rewrite with the mtime put back: %s"
              % errno.errorcode[e.errno])
        continue
    if got == bytes_b:
        sys.exit("FAIL: a returned b's bytes after the rewrite")
    if got != want_a:
        sys.exit("FAIL: a returned other bytes after the rewrite")
    sys.exit("FAIL: the rewritten shard was served as if unchanged")
EOF
grep -q 'sw\.safetensors.*rewritten since mount' "$MOUNT_LOG" ||
	fail "the log does not say that sw.safetensors was rewritten ($(cat "$MOUNT_LOG"))"
umount_fs "$MP"
note "all hostile inputs refused"
exit 0
