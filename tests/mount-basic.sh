#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-basic: one live mount end to end. The mount table entry, the start-up
# log, the tree against an independent reading of the checkpoint, plan.json and
# plan against placefs-plan, packed.tsv against columns.json (the packed layouts
# computed again, also on a quantized mixture of experts whose neighbours join
# and break), xattrs through getfattr, stats, the syscall
# checker (and that it does fail on a wrong source), then every way of ending
# the daemon (fusermount3 -u, SIGTERM, SIGINT, umount) with exit status 0,
# options after the positionals, daemonized mode, mount.fuse3 and an fstab line.
. "$(dirname "$0")/lib.sh"
require_fuse

cd "$TMP" || fail "cd $TMP"
tmo 20 "$MKCKPT" -q --seed 7 \
	--tensor 'model.embed.weight:BF16:256x64' \
	--tensor 'odd name with spaces:F32:3x5' \
	--tensor '100%/slash/.dot:F16:7' \
	--tensor '.leading.dot:U8:9' \
	--tensor 'unicode.é.π.张量:I32:4x4' \
	--tensor 'colon:name:F32:2' \
	--tensor 'scalar:F64:scalar' \
	--tensor 'empty:F32:0x3' \
	--tensor 'empty2:I8:0' \
	--random 24 --max-bytes 20K \
	--metadata format=pt --metadata note=basic \
	ckpt.safetensors || fail "placefs-mkckpt failed"
tmo 20 "$MKCKPT" -q --seed 8 \
	--tensor 'model.embed.weight:BF16:256x64' \
	--tensor 'odd name with spaces:F32:3x5' \
	--tensor '100%/slash/.dot:F16:7' \
	--tensor '.leading.dot:U8:9' \
	--tensor 'unicode.é.π.张量:I32:4x4' \
	--tensor 'colon:name:F32:2' \
	--tensor 'scalar:F64:scalar' \
	--tensor 'empty:F32:0x3' \
	--tensor 'empty2:I8:0' \
	--random 24 --max-bytes 20K \
	--metadata format=pt --metadata note=basic \
	other.safetensors || fail "placefs-mkckpt failed"
MP=$TMP/mnt

# ---- mount, mount table, start-up log -------------------------------------
# Staging off explicitly: with it on (the default on a GPU machine),
# .placefs/plan gains a "staging:" line and is no longer placefs-plan's alone.
mount_fs ckpt.safetensors "$MP" -o buffer_size=4K,device=none
line=$(mount_line "$MP")
note "mountinfo: $line"
echo "$line" | awk '{ print $6 }' | grep -Eq '(^|,)ro(,|$)' || fail "mount is not ro: $line"
# The fsname carries the staging limit (tests/opts-friction.sh: every form of it).
echo "$line" | grep -q ' - fuse\.placefs placefs:ckpt\.safetensors,buffer_size=4K ' ||
	fail "wrong type or fsname: $line"
echo "$line" | grep -q 'default_permissions' || fail "no default_permissions: $line"
echo "$line" | grep -q 'max_read=1048576' || fail "no max_read=1048576: $line"
grep -q '^placefs: mounted .ckpt.safetensors. on ' "$MOUNT_LOG" || fail "no start-up line in the log"
grep -q '^placefs: gpu: ' "$MOUNT_LOG" || fail "no plan summary in the log"
grep -q '^placefs: cpu: ' "$MOUNT_LOG" || fail "no plan summary in the log"

# Readahead: 16 MiB by default, set through sysfs on the first request (root only).
tmo 10 ls "$MP" >/dev/null || fail "ls failed"
bdi=$(mount_line "$MP" | awk '{ print $3 }')
if [ "$(id -u)" -eq 0 ] && [ -w "/sys/class/bdi/$bdi/read_ahead_kb" ]; then
	[ "$(cat "/sys/class/bdi/$bdi/read_ahead_kb")" -eq 16384 ] ||
		fail "read_ahead_kb is $(cat "/sys/class/bdi/$bdi/read_ahead_kb"), expected 16384"
	grep -q 'readahead set to 16384 KiB' "$MOUNT_LOG" || fail "readahead not logged"
fi

# Background (readahead) requests: 512 in flight, congested from 384, as
# negotiated and as the kernel holds them (fusectl, mounted here if root may).
# conn_limits MNT: "max_background congestion_threshold" of MNT's connection.
conn_limits() {
	_c=/sys/fs/fuse/connections/$(mount_line "$1" | awk '{ print $3 }' | cut -d: -f2)
	[ -r "$_c/max_background" ] && echo "$(cat "$_c/max_background") $(cat "$_c/congestion_threshold")"
}
grep -q 'readahead requests in flight: at most 512, congested from 384$' "$MOUNT_LOG" ||
	fail "max_background not logged"
if [ "$(id -u)" -eq 0 ] && ! grep -qs ' /sys/fs/fuse/connections fusectl ' /proc/self/mounts; then
	mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null || true
fi
limits=$(conn_limits "$MP" || true)
if [ -n "$limits" ]; then
	[ "$limits" = "512 384" ] || fail "kernel max_background/congestion_threshold: $limits"
	note "kernel: max_background 512, congestion_threshold 384"
else
	note "fusectl not readable: kernel limits not checked (the log line was)"
fi

# ---- the tree against the checkpoint ----------------------------------------
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" ckpt.safetensors --limit 4096 --ranges 8 ||
	fail "verify_mount found differences"

# plan.json is byte for byte what placefs-plan --json prints for the same inputs.
tmo 20 "$PLAN" --json --buffer-size 4K ckpt.safetensors >plan.expected.json ||
	fail "placefs-plan --json failed"
tmo 10 cmp "$MP/.placefs/plan.json" plan.expected.json || fail "plan.json differs from placefs-plan --json"
# columns.json likewise, from placefs-plan --columns.
tmo 20 "$PLAN" --columns --buffer-size 4K ckpt.safetensors >columns.expected.json ||
	fail "placefs-plan --columns failed"
tmo 10 cmp "$MP/.placefs/columns.json" columns.expected.json ||
	fail "columns.json differs from placefs-plan --columns"
# columns.jsonl: a header line, then the same columns in chunks of at most
# 1024 entries, each with its own tables; merged, they are columns.json's.
tmo 20 "$PYTHON" - "$MP/.placefs/columns.jsonl" "$MP/.placefs/columns.json" <<'EOF' ||
import json, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
whole = json.load(open(sys.argv[2]))
assert lines[-1] == b"", "columns.jsonl does not end with a newline"
head = json.loads(lines[0])
chunks = [json.loads(x) for x in lines[1:-1]]
assert head == {"version": 1, "count": whole["count"], "chunk": 1024,
                "chunks": len(chunks)} and chunks, head
got = {k: [] for k in ("name", "file", "dtype", "shape", "nbytes", "offset")}
place, names = "", {}
for c in chunks:
    first, n = c["first"], c["count"]
    assert first == len(place) and 0 < n <= 1024, (first, n)
    for k in got:
        col = c[k]
        assert len(col) == n, k
        if k == "file":
            col = [whole["files"].index(c["files"][i]) for i in col]
        elif k == "dtype":
            col = [whole["dtypes"].index(c["dtypes"][i]) for i in col]
        got[k] += col
    place += c["placement"]
    names.update({str(int(i) + first): v for i, v in c["filename"].items()})
for k in got:
    assert got[k] == whole[k], k
assert place == whole["placement"] and names == whole["filename"]
print("columns.jsonl: %d entries in %d chunks, as columns.json" % (len(place), len(chunks)))
EOF
	fail "columns.jsonl is not columns.json in chunks"
tmo 20 "$PLAN" --buffer-size 4K ckpt.safetensors >plan.expected.txt || fail "placefs-plan failed"
tmo 10 cmp "$MP/.placefs/plan" plan.expected.txt || fail ".placefs/plan differs from placefs-plan"

# packed.tsv: a header, then per plan entry its placement, its offset in the placement's
# packed layout, nbytes, dtype, shape and file name. check_packed MOUNTPOINT [--both]
# computes the layouts from columns.json by the rule of lib/model/plan.h ("runs", as
# tests/py/read_test.py's packed_layout does) and wants packed.tsv and layout.json to
# agree; with --both, some tensors must join the one before them off a multiple of 256
# and some must move on to the next multiple.
cat >"$TMP/check_packed.py" <<'EOF'
import json, os, sys
mnt = sys.argv[1]
ctl = os.path.join(mnt, ".placefs")
cols = json.load(open(os.path.join(ctl, "columns.json")))
lay = json.load(open(os.path.join(ctl, "layout.json")))
raw = open(os.path.join(ctl, "packed.tsv"), "rb").read()
assert lay["align"] == 256 and lay["pack"] == "runs", lay
# Element sizes of the safetensors dtypes (lib/common/dtype.c), at least 1 byte.
bits = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
        "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
        "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
        "C64": 64, "F64": 64, "I64": 64, "U64": 64}
# The packed layouts from the columns, by the rule of lib/model/plan.h ("runs"), as
# tests/py/read_test.py's packed_layout computes it.
end, prev, want = {"g": 0, "c": 0}, {"g": None, "c": None}, []
joined = cut = 0
for i in range(cols["count"]):
    p, dt = cols["placement"][i], cols["dtypes"][cols["dtype"][i]]
    shard, off, nb = cols["file"][i], cols["offset"][i], cols["nbytes"][i]
    elem = max(bits[dt] // 8, 1)
    q = prev[p]
    if q is not None and q[0] == shard and q[1] + q[2] == off and end[p] % elem == 0:
        at = end[p]
        joined += at % 256 != 0
    else:
        at = -(-end[p] // 256) * 256
        cut += at != end[p]
    want.append(at)
    end[p], prev[p] = at + nb, (shard, off, nb)
assert raw.endswith(b"\n"), "packed.tsv does not end with a newline"
lines = raw.decode("utf-8").split("\n")[:-1]
assert lines[0] == "# placement\tpacked\tnbytes\tdtype\tshape\tfile", lines[0]
assert len(lines) == cols["count"] + 1, (len(lines), cols["count"])
for i, line in enumerate(lines[1:]):
    f = line.split("\t")
    exp = ["gpu" if cols["placement"][i] == "g" else "cpu", str(want[i]),
           str(cols["nbytes"][i]), cols["dtypes"][cols["dtype"][i]],
           ",".join(str(d) for d in cols["shape"][i]),
           cols["filename"].get(str(i), cols["name"][i])]
    assert f == exp, "packed.tsv line %d: %r, expected %r" % (i + 2, f, exp)
for p, k in (("g", "gpu"), ("c", "cpu")):
    assert lay[k]["packed"] == end[p], (k, lay[k], end[p])
print("packed.tsv: %d tensors as columns.json and the rule give them; %d joined to the "
      "one before off a multiple of 256, %d moved on to the next one" % (cols["count"], joined, cut))
if len(sys.argv) > 2 and sys.argv[2] == "--both" and not (joined and cut):
    print("FAIL: want tensors that join and tensors that do not")
    sys.exit(1)
EOF
check_packed() {
	tmo 20 "$PYTHON" "$TMP/check_packed.py" "$@"
}
out=$(check_packed "$MP") || fail "packed.tsv: $out"
note "$out"

# getfattr -d shows the xattrs; the placement views answer "what went to the cpu".
tmo 10 getfattr -d "$MP/model.embed.weight" >xattrs.txt 2>/dev/null || fail "getfattr -d failed"
for k in placement dtype shape nbytes source offset name index; do
	grep -q "^user\.placefs\.$k=" xattrs.txt || fail "getfattr -d lacks user.placefs.$k"
done
grep -q '^user\.placefs\.placement="cpu"' xattrs.txt || fail "model.embed.weight should be cpu"
grep -q '^user\.placefs\.shape="\[256, 64\]"' xattrs.txt || fail "wrong shape xattr"
[ "$(tmo 10 getfattr --only-values -n user.placefs.name "$MP/100%25%2Fslash%2F.dot")" = "100%/slash/.dot" ] ||
	fail "name xattr of an encoded file name"
tmo 10 ls "$MP/.placefs/by-placement/cpu" | grep -qx 'model.embed.weight' ||
	fail "model.embed.weight not under by-placement/cpu"
[ "$(readlink "$MP/.placefs/by-placement/cpu/model.embed.weight")" = "../../../model.embed.weight" ] ||
	fail "wrong link target"
tmo 10 ls -l "$MP" >/dev/null || fail "ls -l failed"
# ls -l probes security.selinux and the access ACL of every file unless the
# filesystem says "not supported" (EOPNOTSUPP), which it then remembers: a
# listing of the 33 files may cost a few xattr round trips, not one per file.
xattr_requests() {
	tmo 10 "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["xattr_requests"])' \
		"$MP/.placefs/stats"
}
x0=$(xattr_requests) || fail "no xattr_requests in stats"
tmo 10 ls -l "$MP" >/dev/null || fail "ls -l failed"
x1=$(xattr_requests)
note "ls -l of the root: $((x1 - x0)) xattr requests"
[ $((x1 - x0)) -le 4 ] || fail "ls -l sent $((x1 - x0)) xattr requests to the daemon (at most 4 expected)"

# The dd/cmp recipe of the README.
off=$(tmo 10 getfattr --only-values -n user.placefs.offset "$MP/model.embed.weight")
tmo 10 dd if=ckpt.safetensors bs=1 skip="$off" count=32768 status=none >embed.expected
tmo 10 cmp "$MP/model.embed.weight" embed.expected || fail "dd skip=offset recipe differs"

# stats: valid JSON, counters moved, nothing left open.
tmo 10 "$PYTHON" - "$MP/.placefs/stats" <<'EOF' || fail "bad stats"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["reads"] > 0, s
assert s["bytes_read"]["cpu"] > 0 and s["bytes_read"]["gpu"] > 0, s
assert s["open_files"] == 0, s
assert s["read_errors"] == 0 and s["stale_shards"] == [], s
EOF

# An O_DIRECT open keeps the tensor's page cache (FOPEN_KEEP_CACHE with direct_io):
# a cached re-read costs no daemon READ, before and after an O_DIRECT open, read
# and close of the same file ("reads" counts the READ requests that reach the daemon).
tmo 20 "$PYTHON" - "$MP" <<'EOF' || fail "an O_DIRECT open dropped the page cache"
import json, mmap, os, sys, time
mnt = sys.argv[1]
f = os.path.join(mnt, "model.embed.weight")
def reads_now():
    with open(os.path.join(mnt, ".placefs", "stats")) as s:
        return json.load(s)["reads"]
def reads():
    # The daemon counts a READ just after replying to it: wait until the
    # counter has stood still for 0.2 s.
    last, since = reads_now(), time.monotonic()
    while time.monotonic() - since < 0.2:
        time.sleep(0.05)
        v = reads_now()
        if v != last:
            last, since = v, time.monotonic()
    return last
def cached_read():
    with open(f, "rb") as x:
        return x.read()
want = cached_read()
r0 = reads()
assert cached_read() == want
r1 = reads()
fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 16)
n = os.preadv(fd, [buf], 0)
os.close(fd)
assert buf[:n] == want, "O_DIRECT read differs"
r2 = reads()
assert cached_read() == want
r3 = reads()
print("daemon reads: cached re-read %d, O_DIRECT read %d, cached re-read after it %d" % (
    r1 - r0, r2 - r1, r3 - r2))
if r1 != r0 or r2 == r1 or r3 != r2:
    print("FAIL: expected 0, >0, 0")
    sys.exit(1)
EOF

# ---- the syscall checker, and proof that it can fail ---------------------------
tmo 30 "$SYSCALLS" "$MP" ckpt.safetensors || fail "test_syscalls failed"
if tmo 30 "$SYSCALLS" "$MP" other.safetensors >checker-neg.txt 2>&1; then
	fail "test_syscalls passed against the wrong source"
fi
grep -q 'differ' checker-neg.txt || fail "test_syscalls did not report differing bytes"

# ---- ending the daemon: fusermount3 -u ------------------------------------------
umount_fs "$MP"
note "fusermount3 -u: exit 0"

# ---- packed.tsv of a quantized mixture of experts ----------------------------------
# 4-byte F32 scales between fp8 weights join their neighbours; a shard's first tensor
# and one after a cpu-placed tensor (the 48K limit places the 64 KiB fp8 weights on the
# cpu) start at the next multiple of 256.
tmo 60 "$MKCKPT" -q --moe 2:256:4:128:512 --quant fp8 --shards 2 --index moe ||
	fail "placefs-mkckpt --moe failed"
mount_fs moe "$MP" -o buffer_size=48K,device=none
out=$(check_packed "$MP" --both) || fail "packed.tsv of the mixture of experts: $out"
note "moe (--quant fp8): $out"
umount_fs "$MP"

# ---- options after the positionals (mount.fuse3 order), then SIGTERM -------------
mkdir -p "$MP"
"$PLACEFS" ckpt.safetensors "$MP" -o buffer_size=64K,prefix=model.,prefix=random.1,readahead=0 -f \
	-o max_background=100 2>"$TMP/late.log" &
pid=$!
DAEMONS="$DAEMONS $pid"
MOUNT_LOG=$TMP/late.log
wait_ready "$MP" "$pid" || fail "options-last mount failed"
tmo 10 grep -q '"buffer_size": 65536' "$MP/.placefs/plan.json" || fail "-o after positionals ignored"
bdi=$(mount_line "$MP" | awk '{ print $3 }')
[ "$(cat "/sys/class/bdi/$bdi/read_ahead_kb")" -eq 16384 ] &&
	fail "-o readahead=0 did not keep the kernel default"
grep -q 'at most 100, congested from 75$' "$MOUNT_LOG" || fail "-o max_background=100 not logged"
limits=$(conn_limits "$MP" || true)
[ -z "$limits" ] || [ "$limits" = "100 75" ] || fail "-o max_background=100: kernel has $limits"
for v in 0 65536 -1 x ''; do
	st=0
	mkdir -p "$TMP/badmnt"
	tmo 10 "$PLACEFS" -f -o max_background="$v" ckpt.safetensors "$TMP/badmnt" >bad.out 2>&1 || st=$?
	[ "$st" -eq 2 ] && grep -q "invalid -o max_background value '$v' (from 1 to 65535)" bad.out ||
		fail "-o max_background=$v: exit $st: $(cat bad.out)"
done
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" ckpt.safetensors --limit 65536 \
	--prefix model. --prefix random.1 --ranges 2 || fail "prefix-filtered mount differs"
kill -TERM "$pid"
st=0
wait_daemon "$pid" || st=$?
[ "$st" -eq 0 ] || fail "exit status $st after SIGTERM"
wait_unmounted "$MP" || fail "still mounted after SIGTERM"
note "SIGTERM: exit 0, unmounted"

# ---- SIGINT, with INSTANTTENSOR_BUFFER_SIZE as the limit ----------------------------
export INSTANTTENSOR_BUFFER_SIZE=1K
mount_fs ckpt.safetensors "$MP"
unset INSTANTTENSOR_BUFFER_SIZE
tmo 10 grep -q '"buffer_size": 1024' "$MP/.placefs/plan.json" ||
	fail "INSTANTTENSOR_BUFFER_SIZE ignored"
grep -q 'from INSTANTTENSOR_BUFFER_SIZE' "$MOUNT_LOG" || fail "limit origin not logged"
kill -INT "$MOUNT_PID"
st=0
wait_daemon "$MOUNT_PID" || st=$?
[ "$st" -eq 0 ] || fail "exit status $st after SIGINT"
wait_unmounted "$MP" || fail "still mounted after SIGINT"
note "SIGINT: exit 0, unmounted"

# ---- daemonized: returns once the mount is live; umount ends it ---------------------
MOUNTS="$MOUNTS $MP"
tmo 20 "$PLACEFS" -o buffer_size=4K "$TMP/ckpt.safetensors" "$MP" || fail "daemonized mount failed"
is_mounted "$MP" || fail "placefs returned before the mount was live"
[ "$(tmo 10 cat "$MP/.placefs/by-placement/gpu/scalar" | wc -c)" -eq 8 ] ||
	fail "daemonized mount does not serve"
tmo 10 umount "$MP" || fail "umount failed"
wait_unmounted "$MP" || fail "still mounted after umount"
# daemon_on MOUNTPOINT: true while a placefs process names MOUNTPOINT.
daemon_on() {
	ps -eo args | grep -F "$1" | grep -q '^[^ ]*placefs '
}
no_daemon_on() {
	! daemon_on "$1"
}
wait_for 5 no_daemon_on "$MP" || fail "daemon still running after umount"
note "daemonized: mounted, served, gone after umount"

# ---- mount.fuse3 (what mount -t fuse.placefs runs) and an fstab line ----------------
if command -v mount.fuse3 >/dev/null 2>&1; then
	PATH=$top_builddir/fs:$PATH tmo 20 mount.fuse3 "$TMP/ckpt.safetensors" "$MP" \
		-t fuse.placefs -o rw,nodev,nosuid,buffer_size=4K,prefix=model. ||
		fail "mount.fuse3 failed"
	is_mounted "$MP" || fail "mount.fuse3 did not mount"
	mount_line "$MP" | awk '{ print $6 }' | grep -Eq '(^|,)ro(,|$)' || fail "rw won over ro"
	[ "$(ls "$MP")" = "model.embed.weight" ] || fail "mount.fuse3 options not applied"
	tmo 10 fusermount3 -u "$MP" || fail "fusermount3 -u failed"
	wait_unmounted "$MP" || fail "still mounted"

	printf '%s#%s %s fuse buffer_size=4K,prefix=scalar 0 0\n' "$PLACEFS" \
		"$TMP/ckpt.safetensors" "$MP" >"$TMP/fstab"
	tmo 20 mount --fstab "$TMP/fstab" "$MP" || fail "mount --fstab failed"
	is_mounted "$MP" || fail "fstab mount not live"
	[ "$(ls "$MP")" = "scalar" ] || fail "fstab options not applied"
	tmo 10 umount "$MP" || fail "umount failed"
	wait_unmounted "$MP" || fail "still mounted"
	note "mount.fuse3 and fstab: ok"
fi

note "ok"
exit 0
