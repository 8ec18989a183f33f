#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-bytes: every tensor of several generated checkpoints, byte for byte,
# against its source range (whole files and random ranges): a sharded
# checkpoint with an index, overlay shards where the index picks one of two
# copies, a directory without an index, a custom index, thousands of tensors,
# multi-request tensors, and 16 concurrent readers (half of them O_DIRECT, so
# the daemon itself serves them in parallel).
. "$(dirname "$0")/lib.sh"
require_fuse

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt

# ---- sharded, with model.safetensors.index.json -----------------------------
tmo 20 "$MKCKPT" -q --seed 3 --llama 2:64:160:512 --tensor 'odd/name %:F32:3x3' \
	--shards 3 --index sharded || fail "mkckpt sharded"
mount_fs sharded "$MP" -o buffer_size=32K
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" sharded --limit 32768 --ranges 6 ||
	fail "sharded checkpoint differs"
tmo 30 "$SYSCALLS" "$MP" sharded || fail "test_syscalls on the sharded mount"
tmo 20 "$PLAN" --json --buffer-size 32K sharded | tmo 10 cmp - "$MP/.placefs/plan.json" ||
	fail "plan.json differs (sharded)"
umount_fs "$MP"

# ---- overlay shards: both files hold every name, the index picks one -------------
mkdir overlay
for s in a b; do
	tmo 20 "$MKCKPT" -q --seed "$([ $s = a ] && echo 11 || echo 12)" \
		--tensor 'w.0:F32:64x3' --tensor 'w.1:BF16:100' --tensor 'w.2:U8:4097' \
		--tensor 'w.3:F64:scalar' --tensor 'w.4:I16:0' --tensor "only.$s:F32:5" \
		"overlay/$s.safetensors" || fail "mkckpt overlay"
done
cat >overlay/model.safetensors.index.json <<'EOF'
{"metadata": {"total_size": 0}, "weight_map": {"w.0": "a.safetensors", "w.1": "b.safetensors",
 "w.2": "b.safetensors", "w.3": "a.safetensors", "w.4": "b.safetensors", "only.b": "b.safetensors"}}
EOF
mount_fs overlay "$MP"
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" overlay --ranges 6 || fail "overlay differs"
[ "$(tmo 10 getfattr --only-values -n user.placefs.source "$MP/w.1")" = b.safetensors ] ||
	fail "w.1 not served from the shard the index names"
[ -e "$MP/only.a" ] && fail "a tensor the index does not map is visible"
umount_fs "$MP"

# The same directory through another index file (-o index=, relative to the source).
cat >overlay/alt.json <<'EOF'
{"weight_map": {"w.0": "b.safetensors", "w.1": "a.safetensors", "only.a": "a.safetensors"}}
EOF
mount_fs overlay "$MP" -o index=alt.json
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" overlay --index alt.json --ranges 6 ||
	fail "overlay through -o index differs"
umount_fs "$MP"

# ---- a directory without an index: every *.safetensors ------------------------------
tmo 20 "$MKCKPT" -q --seed 4 --random 60 --max-bytes 8K --shards 4 noindex || fail "mkckpt noindex"
[ -e noindex/model.safetensors.index.json ] && fail "mkckpt wrote an index without --index"
mount_fs noindex "$MP" -o buffer_size=2K,prefix=random.1,prefix=random.2
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" noindex --limit 2048 --prefix random.1 \
	--prefix random.2 --ranges 6 || fail "directory without an index differs"
umount_fs "$MP"

# ---- thousands of tensors ----------------------------------------------------------------
tmo 30 "$MKCKPT" -q --seed 5 --random 3000 --max-bytes 600 many.safetensors || fail "mkckpt many"
# Tensor files show their shard's read bits: 0644 gives -r--r--r--, whatever the umask.
chmod 0644 many.safetensors
mount_fs many.safetensors "$MP" -o buffer_size=300
n=$(tmo 20 ls -l "$MP" | grep -c '^-r--r--r--')
[ "$n" -eq 3000 ] || fail "ls -l shows $n tensor files, expected 3000"
tmo 40 "$PYTHON" "$TMP/verify_mount.py" "$MP" many.safetensors --limit 300 --ranges 1 ||
	fail "3000-tensor checkpoint differs"
umount_fs "$MP"

# ---- tensors spanning many 1 MiB requests, 16 concurrent readers ----------------------
tmo 30 "$MKCKPT" -q --seed 6 --llama 2:256:704:2048 --tensor 'odd.size:U8:3145739' \
	--tensor 'tail:F32:1' conc.safetensors || fail "mkckpt conc"
mount_fs conc.safetensors "$MP" -o buffer_size=1M
tmo 40 "$PYTHON" "$TMP/verify_mount.py" "$MP" conc.safetensors --limit 1048576 --ranges 16 \
	--threads 16 || fail "concurrent readers saw differences"
tmo 10 "$PYTHON" - "$MP/.placefs/stats" <<'EOF' || fail "stats after the concurrent readers"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["read_errors"] == 0 and s["open_files"] == 0, s
assert s["bytes_read"]["cpu"] > 0 and s["bytes_read"]["gpu"] > 0, s
EOF
umount_fs "$MP"

note "ok"
exit 0
