#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-views: the model-directory views MNT/.placefs/views/{all,gpu,cpu}/
# (doc/SEMANTICS.md "Views") on live mounts of checkpoints made with
# placefs-mkckpt: several shards with an index (its metadata extended), a
# directory without an index, a single-file source; with extra top-level
# files (config.json, tokenizer.json, a link inside the source, a link out of
# it, a nested directory, a FIFO, a hidden file, a stale *.safetensors), a
# staging limit that puts tensors on the cpu, a prefix filter, both read
# modes. For each view: the aux files cmp-equal to the source; every view
# shard parses with the package's stdlib reader (python/placefs/safetensors.py)
# and with the C reference-rules checker (tests/test_viewcheck, through the
# mount, the file size included), every tensor's bytes equal its source
# range, through read() and through a MAP_SHARED mapping; the names per view
# are the plan's placement (.placefs/plan.json); the index's weight_map and
# total_size; `ls -l` sizes equal the bytes read. An index that leaves
# tensors of its shards out (all is the selection); iter_weights (the
# package's stdlib path) equal to the views' tensors and placements; reading
# the views costs no more READs, bytes or time than the tensor files. Then an
# aux file and a shard changed under the mount: ESTALE, never other bytes.
TEST_TIMEOUT=${TEST_TIMEOUT:-150}
. "$(dirname "$0")/lib.sh"
require_fuse

VIEWCHECK=$top_builddir/tests/test_viewcheck
[ -x "$VIEWCHECK" ] || fail "$VIEWCHECK is not built"
# The installed package (make install-python into $TMP), never python/ itself.
. "$top_srcdir/tests/pyinstall.sh"
py_install

cd "$TMP" || fail "cd $TMP"

# The stdlib reader keeps the reference rules: tests/corpus/good-safetensors all
# accepted, bad-safetensors all refused but for placefs's own caps (cap-*).
tmo 30 "$PYTHON" - "$top_srcdir/tests/corpus" <<'EOF' || fail "placefs.safetensors and the corpus disagree"
import os, sys
from placefs import safetensors as st
bad = 0
for kind in ("good", "bad"):
    d = os.path.join(sys.argv[1], kind + "-safetensors")
    names = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    assert len(names) > 10, d
    for f in names:
        try:
            st.read(os.path.join(d, f))
            ok = True
        except st.SafetensorsError:
            ok = False
        if ok != (kind == "good") and not f.startswith("cap-"):
            print("FAIL: %s/%s %s" % (kind, f, "accepted" if ok else "refused"), file=sys.stderr)
            bad += 1
sys.exit(bad)
EOF

# ---- the checkpoints ------------------------------------------------------------
# A: 3 shards + index, a small Llama (bf16: every subset stays aligned) and
# random tensors of every dtype; the index gains metadata of its own.
tmo 30 "$MKCKPT" -q --seed 11 --llama 2:64:160:128 --random 300 --max-bytes 6K \
	--shards 3 --index --metadata format=pt --metadata note=views A || fail "mkckpt A"
"$PYTHON" - A/model.safetensors.index.json <<'EOF' || fail "extending A's index"
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["metadata"] = {"total_parameters": 4242, "total_size": d["metadata"]["total_size"],
                 "note": {"nested": ["x", 1]}}
json.dump(d, open(p, "w"), indent=2, sort_keys=True)
EOF
printf '{"model_type": "llama", "hidden_size": 64}\n' >A/config.json
printf '{"bos_token_id": 1}\n' >A/generation_config.json
head -c 70000 /dev/urandom >A/tokenizer.json
printf 'tok\n' >A/real-tokenizer.model
ln -s real-tokenizer.model A/tokenizer.model
echo outside >outside.txt
ln -s ../outside.txt A/leads-out.txt
ln -s nowhere A/dangling.json
mkdir A/nested && echo x >A/nested/inner.json
mkfifo A/fifo
echo hidden >A/.hidden
cp A/model-00001-of-00003.safetensors A/stale.safetensors
# B: 2 shards, no index.
tmo 30 "$MKCKPT" -q --seed 12 --random 40 --max-bytes 9K --shards 2 B || fail "mkckpt B"
printf '{"b": 2}\n' >B/config.json
# C: one file given as the source (no aux files: its directory is not the checkpoint's).
tmo 30 "$MKCKPT" -q --seed 13 --random 25 --max-bytes 5K C.safetensors || fail "mkckpt C"
printf '{"c": 3}\n' >config.json

# ---- the checker ----------------------------------------------------------------
cat >"$TMP/check_views.py" <<'PYEOF'
import json, mmap, os, stat, subprocess, sys
from placefs import safetensors as st

viewcheck, mnt, src = sys.argv[1], sys.argv[2], sys.argv[3]
expect_all_equal = "--all-is-source" in sys.argv
failures = []

def fail(msg):
    failures.append(msg)
    if len(failures) <= 20:
        print("FAIL: " + msg, file=sys.stderr)

plan = json.load(open(os.path.join(mnt, ".placefs", "plan.json")))
isdir = os.path.isdir(src)
srcdir = src if isdir else os.path.dirname(os.path.abspath(src))
index = os.path.join(src, "model.safetensors.index.json") if isdir else None
if index and not os.path.exists(index):
    index = None
shards = sorted({t["file"] for t in plan["tensors"]} |
                (set(json.load(open(index))["weight_map"].values()) if index else set()))

# The aux files, worked out independently: top-level regular files (links
# followed, but not out of the source), not hidden, no safetensors file or index.
aux = {}
if isdir:
    real = os.path.realpath(src)
    for n in sorted(os.listdir(src)):
        p = os.path.join(src, n)
        if n.startswith(".") or n.endswith(".safetensors") or n.endswith(".safetensors.index.json"):
            continue
        if n in shards or n == "model.safetensors.index.json":
            continue
        if not os.path.exists(p) or not stat.S_ISREG(os.stat(p).st_mode):
            continue
        if not os.path.realpath(p).startswith(real + os.sep):
            continue
        aux[n] = p

def wanted(view, t):
    return view == "all" or t["placement"] == view

src_cache = {}
def src_bytes(shard, off, n):
    if shard not in src_cache:
        src_cache[shard] = open(os.path.join(srcdir, shard) if isdir else src, "rb").read()
    return src_cache[shard][off:off + n]

def ls_sizes(d):
    out = subprocess.run(["ls", "-ln", d], check=True, capture_output=True, text=True).stdout
    sizes = {}
    for line in out.splitlines()[1:]:
        f = line.split(None, 8)
        sizes[f[8]] = int(f[4])
    return sizes

views_dir = os.path.join(mnt, ".placefs", "views")
got = sorted(os.listdir(views_dir))
if got != ["all", "cpu", "gpu"]:
    fail("views lists %r" % got)
totals = {}
same = 0
for view in ("all", "gpu", "cpu"):
    d = os.path.join(views_dir, view)
    ts = [t for t in plan["tensors"] if wanted(view, t)]
    by_shard = {}
    for t in ts:
        by_shard.setdefault(t["file"], []).append(t)
    names = set(os.listdir(d))
    want = set(aux) | set(by_shard) | ({"model.safetensors.index.json"} if index else set())
    if names != want:
        fail("%s lists %r, expected %r" % (view, sorted(names), sorted(want)))
    sizes = ls_sizes(d)
    for n in sorted(names):
        p = os.path.join(d, n)
        data = open(p, "rb").read()
        if sizes.get(n) != len(data) or os.stat(p).st_size != len(data):
            fail("%s/%s: ls -l says %s bytes, reading gives %d" % (view, n, sizes.get(n), len(data)))
        if len(data):
            with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED,
                                               prot=mmap.PROT_READ) as m:
                if m[:] != data:
                    fail("%s/%s: MAP_SHARED mapping differs from read()" % (view, n))
        # Small unaligned reads give the same bytes as one big read.
        with open(p, "rb", buffering=0) as f:
            parts, off = [], 0
            while True:
                b = os.pread(f.fileno(), 4093, off)
                if not b:
                    break
                parts.append(b)
                off += len(b)
            if b"".join(parts) != data:
                fail("%s/%s: 4093-byte reads differ from one read" % (view, n))
    for n, p in aux.items():
        if open(os.path.join(d, n), "rb").read() != open(p, "rb").read():
            fail("%s/%s differs from the source's %s" % (view, n, p))
    files = []
    for shard, lst in sorted(by_shard.items()):
        p = os.path.join(d, shard)
        files.append(p)
        try:
            a = st.read(p)
            b = st.read(p, use_mmap=True)
            h = st.header(p)
        except (OSError, st.SafetensorsError) as e:
            fail("%s/%s: %s" % (view, shard, e))
            continue
        if a != b:
            fail("%s/%s: tensors read through mmap differ from read()" % (view, shard))
        if set(a) != {t["name"] for t in lst}:
            fail("%s/%s holds %r, the plan places %r here" % (view, shard, sorted(a),
                                                              sorted(t["name"] for t in lst)))
        for t in lst:
            if t["name"] not in a:
                continue
            dt, shape, by = a[t["name"]]
            if dt != t["dtype"] or shape != t["shape"]:
                fail("%s/%s: %s is %s %r, the plan says %s %r" % (view, shard, t["name"], dt, shape,
                                                                  t["dtype"], t["shape"]))
            if by != src_bytes(shard, t["offset"], t["nbytes"]):
                fail("%s/%s: %s: bytes differ from the source" % (view, shard, t["name"]))
        srch = st.header(os.path.join(srcdir, shard) if isdir else src)
        if h.metadata != srch.metadata:
            fail("%s/%s: __metadata__ %r, the source has %r" % (view, shard, h.metadata, srch.metadata))
        if h.n % 8:
            fail("%s/%s: header length %d is not a multiple of 8" % (view, shard, h.n))
        # A shard selected whole whose tensors are aligned (the reference writer's
        # order) is, in all/, the source file itself.
        aligned = all(t.begin % min(max(st.DTYPE_BITS[t.dtype] // 8, 1), 8) == 0
                      for t in srch.tensors)
        if view == "all" and aligned and len(lst) == len(srch.tensors):
            same += 1
            if open(p, "rb").read() != open(os.path.join(srcdir, shard) if isdir else src, "rb").read():
                fail("all/%s differs from the source shard (aligned, selected whole)" % shard)
    if files:
        r = subprocess.run([viewcheck] + files, capture_output=True, text=True)
        if r.returncode != 0:
            fail("test_viewcheck on %s: %s%s" % (view, r.stdout, r.stderr))
    total = sum(t["nbytes"] for t in ts)
    totals[view] = total
    if index:
        vi = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        wm = {t["name"]: t["file"] for t in ts}
        if vi.get("weight_map") != wm:
            fail("%s index: weight_map differs from the view's tensors" % view)
        if list(vi["weight_map"]) != sorted(vi["weight_map"]):
            fail("%s index: weight_map is not sorted by name" % view)
        meta = vi.get("metadata", {})
        if meta.get("total_size") != total:
            fail("%s index: total_size %r, the view's tensors hold %d" % (view, meta.get("total_size"), total))
        srcmeta = json.load(open(index)).get("metadata") or {}
        for k, v in srcmeta.items():
            if k != "total_size" and meta.get(k) != v:
                fail("%s index: metadata %s is %r, the source's is %r" % (view, k, meta.get(k), v))
if expect_all_equal and same == 0:
    fail("no shard of %s was compared whole with its all/ file" % src)
if totals.get("gpu", 0) + totals.get("cpu", 0) != totals.get("all"):
    fail("gpu + cpu bytes != all bytes: %r" % totals)
print("views: %s; aux files %d; bytes all %d, gpu %d, cpu %d" % (
    src, len(aux), totals["all"], totals["gpu"], totals["cpu"]))
sys.exit(1 if failures else 0)
PYEOF
check_views() {
	tmo 60 "$PYTHON" "$TMP/check_views.py" "$VIEWCHECK" "$@" || fail "check_views $* found differences"
}

# ---- A: index, limit, both read modes ------------------------------------------
MP=$TMP/mnt
for mode in mmap pread; do
	mount_fs A "$MP" -o device=none,buffer_size=3K,read_mode=$mode
	cpu=$(tmo 10 ls "$MP/.placefs/by-placement/cpu" | wc -l)
	gpu=$(tmo 10 ls "$MP/.placefs/by-placement/gpu" | wc -l)
	[ "$cpu" -gt 0 ] && [ "$gpu" -gt 0 ] || fail "limit 3K: $gpu gpu, $cpu cpu tensors"
	check_views "$MP" A
	for f in nested fifo .hidden stale.safetensors leads-out.txt dangling.json; do
		[ -e "$MP/.placefs/views/all/$f" ] && fail "views/all/$f is shown"
	done
	grep -q 'leads-out.txt: a symbolic link that leads outside the source directory' "$MOUNT_LOG" ||
		fail "the link out of the source was not logged"
	grep -q 'dangling.json: No such file or directory; not shown in the views' "$MOUNT_LOG" ||
		fail "the dangling link was not logged"
	reads=$(stat_get "$MP" view_reads)
	[ "$reads" -gt 0 ] || fail "stats view_reads is $reads"
	note "A ($mode): $gpu gpu and $cpu cpu tensors; view_reads $reads"
	umount_fs "$MP"
done

# Without a limit every tensor is gpu: cpu is empty.
mount_fs A "$MP" -o device=none
check_views "$MP" A
[ -z "$(ls "$MP/.placefs/views/cpu" | grep '\.safetensors$')" ] || fail "cpu view not empty without a limit"
umount_fs "$MP"

# D: a Llama alone (bf16, aligned): each all/ file is its source shard, byte for byte.
tmo 30 "$MKCKPT" -q --seed 14 --llama 2:64:160:128 --shards 2 --index D || fail "mkckpt D"
mount_fs D "$MP" -o device=none,buffer_size=10K
check_views "$MP" D --all-is-source
umount_fs "$MP"

# E: 3000 tiny tensors split by a 32-byte limit: view files of more pieces than
# one READ sends from the mapping in one writev (the daemon copies those).
tmo 30 "$MKCKPT" -q --seed 15 --random 3000 --max-bytes 64 E.safetensors || fail "mkckpt E"
mount_fs E.safetensors "$MP" -o device=none,buffer_size=32
check_views "$MP" E.safetensors
umount_fs "$MP"

# ---- A with a prefix filter: all is the selection ---------------------------------
mount_fs A "$MP" -o device=none,buffer_size=1K,prefix=model.layers.1.,prefix=random.1
check_views "$MP" A
umount_fs "$MP"

# ---- an index that leaves tensors of its shards out: all is the selection ------------
# D's index without two of its tensors: the views neither show them nor count them.
cp -R D F
"$PYTHON" - F/model.safetensors.index.json <<'EOF' || fail "editing F's index"
import json, sys
p = sys.argv[1]
d = json.load(open(p))
for k in ("model.layers.0.mlp.up_proj.weight", "model.layers.1.input_layernorm.weight"):
    del d["weight_map"][k]
json.dump(d, open(p, "w"))
EOF
mount_fs F "$MP" -o device=none,buffer_size=10K
check_views "$MP" F
for v in all gpu cpu; do
	grep -q -e 'model.layers.0.mlp.up_proj.weight' -e 'model.layers.1.input_layernorm.weight' \
		"$MP/.placefs/views/$v/model.safetensors.index.json" &&
		fail "views/$v: the index names a tensor the source index leaves out"
done
umount_fs "$MP"

# ---- iter_weights through the package's stdlib path equals the views ------------------
# What a loader streams from the mount and what safe_open would read from the
# views (here the stdlib reader) are the same tensors, in each view's placement.
mount_fs A "$MP" -o device=host,buffer_size=3K
PLACEFS_NO_TORCH=1 tmo 60 "$PYTHON" - "$MP" <<'EOF' || fail "iter_weights differs from the views"
import os, sys
import placefs
from placefs import safetensors as st
mnt = sys.argv[1]
views = {}
for v in ("all", "gpu", "cpu"):
    d = os.path.join(mnt, ".placefs", "views", v)
    views[v] = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            views[v].update(st.read(os.path.join(d, f)))
got = 0
for mode in ("copy", "borrow"):
    for name, t in placefs.iter_weights(mnt, device="cpu", mode=mode):
        dt, shape, data = views["all"][name]
        assert (t.dtype, list(t.shape), bytes(t.data)) == (dt, shape, data), (mode, name)
        other = "cpu" if t.placement == "gpu" else "gpu"
        assert name in views[t.placement] and name not in views[other], (mode, name)
        got += 1
assert got == 2 * len(views["all"]) and views["gpu"] and views["cpu"], got
print("iter_weights equals the views: %d tensors, %d gpu, %d cpu" % (
    len(views["all"]), len(views["gpu"]), len(views["cpu"])))
EOF
umount_fs "$MP"

# ---- reading through a view costs no more than reading the tensor files -----------------
# A Llama of 3 shards split by a 1 MiB limit; each round on fresh mounts (nothing
# of them in the page cache; the source warm for both): the gpu tensor files then
# the cpu ones, against views/gpu, views/cpu and views/all. The views must move
# the tensors' bytes plus their headers, no more, in no more FUSE READs than the
# tensor files take besides one per view file for its header, and in no more
# time (the best of 3 rounds; 1.5 times the tensor files' plus 50 ms for noise).
tmo 30 "$MKCKPT" -q --seed 16 --llama 2:512:1408:8192 --shards 3 --index G || fail "mkckpt G"
cat G/*.safetensors >/dev/null
cat >"$TMP/cost.py" <<'PYEOF'
import json, os, sys, time
mnt, what, out = sys.argv[1], sys.argv[2], sys.argv[3]


def stats():
    with open(os.path.join(mnt, ".placefs", "stats")) as f:
        return json.load(f)


def read_all(paths):
    """Reads each file through in 1 MiB reads: bytes, seconds, each file's first 8 bytes."""
    n, heads = 0, []
    t0 = time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            first = True
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                if first:
                    heads.append(b[:8])
                    first = False
                n += len(b)
        finally:
            os.close(fd)
    return n, time.perf_counter() - t0, heads


plan = json.load(open(os.path.join(mnt, ".placefs", "plan.json")))
res = {}
if what == "tensors":
    for pl in ("gpu", "cpu"):
        paths = [os.path.join(mnt, t["filename"]) for t in plan["tensors"]
                 if t["placement"] == pl]
        s0 = stats()
        n, secs, _ = read_all(paths)
        s1 = stats()
        res[pl] = {"secs": secs, "reads": s1["reads"] - s0["reads"], "files": len(paths),
                   "payload": n}
    res["all"] = {k: res["gpu"][k] + res["cpu"][k] for k in res["gpu"]}
else:
    for v in ("gpu", "cpu", "all"):
        d = os.path.join(mnt, ".placefs", "views", v)
        paths = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]
        s0 = stats()
        n, secs, heads = read_all(paths)
        s1 = stats()
        hdr = sum(8 + int.from_bytes(h, "little") for h in heads)
        res[v] = {"secs": secs, "reads": s1["view_reads"] - s0["view_reads"],
                  "files": len(paths), "payload": n - hdr}
with open(out, "a") as f:
    f.write(json.dumps({"what": what, "res": res}) + "\n")
PYEOF
for mode in mmap pread; do
	rm -f cost.$mode
	for round in 1 2 3; do
		mount_fs G "$MP" -o device=none,buffer_size=1M,read_mode=$mode
		tmo 30 "$PYTHON" "$TMP/cost.py" "$MP" tensors cost.$mode || fail "reading G's tensor files"
		umount_fs "$MP"
		mount_fs G "$MP" -o device=none,buffer_size=1M,read_mode=$mode
		tmo 30 "$PYTHON" "$TMP/cost.py" "$MP" views cost.$mode || fail "reading G's views"
		umount_fs "$MP"
	done
	tmo 10 "$PYTHON" - cost.$mode $mode <<'EOF' || fail "the views cost more than the tensor files ($mode)"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
t = [r["res"] for r in rows if r["what"] == "tensors"]
v = [r["res"] for r in rows if r["what"] == "views"]
bad = 0
for k in ("gpu", "cpu", "all"):
    tb, vb = min(x[k]["secs"] for x in t), min(x[k]["secs"] for x in v)
    tr, vr = max(x[k]["reads"] for x in t), max(x[k]["reads"] for x in v)
    nf = v[0][k]["files"]
    print("mount-views: cost (%s) %s: %d tensor files, %d READs, %.1f ms; %d view files, "
          "%d READs, %.1f ms" % (sys.argv[2], k, t[0][k]["files"], tr, tb * 1e3, nf, vr, vb * 1e3))
    if any(x[k]["payload"] != t[0][k]["payload"] for x in t + v):
        print("FAIL: %s: payload bytes differ: %r" % (k, [x[k]["payload"] for x in t + v]))
        bad += 1
    if vr > tr + nf:
        print("FAIL: %s: %d READs through the views, %d through the tensor files" % (k, vr, tr))
        bad += 1
    if vb > 1.5 * tb + 0.05:
        print("FAIL: %s: %.1f ms through the views, %.1f ms through the tensor files"
              % (k, vb * 1e3, tb * 1e3))
        bad += 1
sys.exit(bad)
EOF
done

# ---- B: no index --------------------------------------------------------------------
mount_fs B "$MP" -o device=none,buffer_size=2K
check_views "$MP" B
[ -e "$MP/.placefs/views/all/model.safetensors.index.json" ] && fail "an index without one in the source"
umount_fs "$MP"

# ---- C: a file source ---------------------------------------------------------------
mount_fs C.safetensors "$MP" -o device=none,buffer_size=2K
check_views "$MP" C.safetensors
[ "$(ls "$MP/.placefs/views/gpu")" = "C.safetensors" ] || fail "gpu view of C: $(ls "$MP/.placefs/views/gpu")"
umount_fs "$MP"

# ---- changed under the mount: never other bytes ------------------------------------------
mount_fs A "$MP" -o device=none,buffer_size=3K
# The checkers can fail: a view file cut by one byte, or with a hole, is refused by both.
f=$(ls "$MP/.placefs/views/gpu" | grep '\.safetensors$' | head -n 1)
cp "$MP/.placefs/views/gpu/$f" cut.safetensors
truncate -s -1 cut.safetensors
"$VIEWCHECK" cut.safetensors >/dev/null 2>&1 && fail "test_viewcheck accepts a file cut short"
"$PYTHON" -c 'import sys; from placefs import safetensors as st; st.read(sys.argv[1])' \
	cut.safetensors 2>/dev/null && fail "placefs.safetensors accepts a file cut short"
"$PYTHON" - "$MP/.placefs/views/gpu/$f" hole.safetensors <<'EOF' || fail "making hole.safetensors"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
k = [k for k in h if k != "__metadata__"][0]
h[k]["data_offsets"] = [h[k]["data_offsets"][0] + 1, h[k]["data_offsets"][1] + 1]
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:] + b"\0")
EOF
"$VIEWCHECK" hole.safetensors >/dev/null 2>&1 && fail "test_viewcheck accepts a file with a hole"
"$PYTHON" -c 'import sys; from placefs import safetensors as st; st.read(sys.argv[1])' \
	hole.safetensors 2>/dev/null && fail "placefs.safetensors accepts a file with a hole"
cmp -s "$MP/.placefs/views/all/config.json" A/config.json || fail "config.json differs"
printf '{"model_type": "LLAMA", "hidden_size": 64}\n' >A/config.json # same size, new bytes
r=$(py_read_errno "$MP/.placefs/views/gpu/config.json")
[ "$r" = ESTALE ] || fail "a rewritten aux file read as $r, expected ESTALE"
grep -q 'config.json of the views: it was changed since mount' "$MOUNT_LOG" ||
	fail "the changed aux file was not logged"
f=$(ls "$MP/.placefs/views/cpu" | grep '\.safetensors$' | head -n 1)
touch "A/$f"
r=$(py_read_errno "$MP/.placefs/views/cpu/$f")
[ "$r" = ESTALE ] || fail "cpu/$f of a touched shard read as $r, expected ESTALE"
umount_fs "$MP"
# A shard path that cannot be a file name of the views: exit 9 before mounting, named.
long=$(printf 'd%.0s' $(seq 200))
mkdir -p "L/$long"
tmo 20 "$MKCKPT" -q --tensor w:F32:4 "L/$long/$(printf 'e%.0s' $(seq 60)).safetensors" || fail "mkckpt L"
printf '{"weight_map": {"w": "%s"}}' "$long/$(printf 'e%.0s' $(seq 60)).safetensors" \
	>L/model.safetensors.index.json
st=0
tmo 20 "$PLACEFS" -o device=none L "$MP" 2>long.err || st=$?
[ "$st" -eq 9 ] || fail "a shard name too long for the views: exit $st, expected 9 ($(cat long.err))"
grep -q 'cannot be a file name in the views: encoded, it is longer than 255 bytes' long.err ||
	fail "no message for the shard name too long: $(cat long.err)"
is_mounted "$MP" && fail "mounted despite the error"
note "views checked: A (index, limit, mmap and pread, prefix), B (no index), C (file source)"
exit 0
