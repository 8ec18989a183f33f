# SPDX-License-Identifier: MIT
# placefs-plan end to end: checkpoints built with placefs-mkckpt, the text,
# JSON and sweep outputs, the staging-limit sources and every exit status the
# tool can reach from a real checkpoint. Needs no FUSE.
set -eu

: "${top_builddir:?top_builddir must be set (run through make check)}"
: "${top_srcdir:?top_srcdir must be set (run through make check)}"
PLAN="$top_builddir/tools/placefs-plan"
MK="$top_builddir/tools/placefs-mkckpt"
ENVVAR=INSTANTTENSOR_BUFFER_SIZE

T=$(mktemp -d "${TMPDIR:-/tmp}/placefs-tools-plan.XXXXXX")
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM HUP
unset INSTANTTENSOR_BUFFER_SIZE

ntests=0
fail() {
	echo "FAIL: $*" >&2
	if [ -s "$T/err" ]; then
		echo "--- stderr:" >&2
		cat "$T/err" >&2
	fi
	exit 1
}

# run CMD...: runs a command, keeping stdout in $T/out, stderr in $T/err and
# the exit status in $rc.
run() {
	rc=0
	"$@" >"$T/out" 2>"$T/err" || rc=$?
}

# expect STATUS CMD...: runs CMD and checks its exit status. A failure must
# print exactly one line, "placefs-plan: <message>", on stderr.
expect() {
	want=$1
	shift
	run "$@"
	ntests=$((ntests + 1))
	[ "$rc" -eq "$want" ] || fail "exit $rc, want $want: $*"
	if [ "$want" -ne 0 ]; then
		[ "$(wc -l <"$T/err")" -eq 1 ] || fail "want one line on stderr: $*"
		grep -q '^placefs-plan: ' "$T/err" || fail "stderr lacks the prefix: $*"
	fi
	if [ "$want" -eq 0 ]; then
		[ ! -s "$T/err" ] || fail "unexpected stderr: $*"
	fi
}

# err_has TEXT: the last stderr contains TEXT (fixed string).
err_has() {
	grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1'"
}

# out_has TEXT: the last stdout contains TEXT (fixed string).
out_has() {
	grep -qF -- "$1" "$T/out" || fail "stdout lacks '$1'"
}

# placement NAME: the placement column of tensor NAME in a text plan.
placement() {
	awk -v n="$1" '$NF == n && ($1 == "gpu" || $1 == "cpu") { print $1 }' "$T/out"
}

# columns FILE: the file with every run of two or more spaces turned into '|'.
columns() {
	sed -e 's/   */|/g' "$1"
}

have_python=no
if command -v python3 >/dev/null 2>&1; then
	have_python=yes
else
	echo "note: python3 not found; JSON is checked with grep only" >&2
fi

# pyjson CODE: validates $T/out as JSON and runs CODE with it loaded as `d`.
pyjson() {
	ntests=$((ntests + 1))
	[ "$have_python" = yes ] || return 0
	python3 -m json.tool "$T/out" >/dev/null || fail "invalid JSON"
	python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$1" "$T/out" || fail "JSON check failed: $1"
}

# ---- the seed's case: 1 MiB, 9 MiB and exactly 8 MiB of F32, limit 8 MiB ----
SEED="$T/seed.safetensors"
"$MK" -q --tensor small:F32:262144 --tensor big:F32:2359296 --tensor edge:F32:2097152 "$SEED"

expect 0 "$PLAN" --buffer-size 8388608 "$SEED"
[ "$(placement small)" = gpu ] || fail "small should be gpu"
[ "$(placement big)" = cpu ] || fail "big should be cpu"
[ "$(placement edge)" = gpu ] || fail "edge (exactly the limit) should be gpu"
out_has "source: $SEED"
out_has "gpu: 2 tensors, 9437184 bytes (9 MiB), largest 8388608 bytes (8 MiB)"
out_has "cpu: 1 tensor, 9437184 bytes (9 MiB), largest 9437184 bytes (9 MiB)"
out_has "staging limit: 8388608 bytes (8 MiB)"
out_has "ring: 8388608 bytes (8 MiB), sized to the staging limit"
columns "$T/out" | grep -qxF 'gpu|1048576|F32|[262144]|seed.safetensors|small' ||
	fail "text line of small"
columns "$T/out" | grep -qxF 'cpu|9437184|F32|[2359296]|seed.safetensors|big' ||
	fail "text line of big"

# The same through the environment, as JSON.
expect 0 env "$ENVVAR=8388608" "$PLAN" --json "$SEED"
[ "$(wc -l <"$T/out")" -eq 1 ] || fail "JSON is not one line"
out_has '"buffer_size": 8388608, "ring_bytes": 8388608, "tensors": [{"name": "small", '
pyjson "
assert list(d) == ['source', 'buffer_size', 'ring_bytes', 'tensors', 'totals'], list(d)
assert d['source'] == '$SEED'
assert d['buffer_size'] == 8388608 and d['ring_bytes'] == 8388608
names = [t['name'] for t in d['tensors']]
assert names == ['small', 'big', 'edge'], names
assert [t['placement'] for t in d['tensors']] == ['gpu', 'cpu', 'gpu']
assert [t['nbytes'] for t in d['tensors']] == [1048576, 9437184, 8388608]
assert [t['shape'] for t in d['tensors']] == [[262144], [2359296], [2097152]]
for t in d['tensors']:
    assert list(t) == ['name', 'filename', 'file', 'dtype', 'shape', 'nbytes', 'offset', 'placement']
    assert t['dtype'] == 'F32' and t['file'] == 'seed.safetensors'
    assert t['filename'] == t['name']
offs = [t['offset'] for t in d['tensors']]
assert offs[1] == offs[0] + 1048576 and offs[2] == offs[1] + 9437184, offs
import os
assert offs[2] + 8388608 == os.path.getsize('$SEED')
assert d['totals'] == {'gpu': {'count': 2, 'bytes': 9437184}, 'cpu': {'count': 1, 'bytes': 9437184}}
"

# ---- where the limit comes from ----
# Unset: no limit, everything on the GPU, an automatic ring (18 MiB here).
expect 0 "$PLAN" --json "$SEED"
out_has '"buffer_size": null, "ring_bytes": 18874368,'
pyjson "
assert d['buffer_size'] is None
assert all(t['placement'] == 'gpu' for t in d['tensors'])
assert d['totals']['cpu'] == {'count': 0, 'bytes': 0}
"
expect 0 "$PLAN" "$SEED"
out_has "staging limit: none"
out_has "sized automatically"
# The option wins over the environment, which is then not even parsed.
expect 0 env "$ENVVAR=1" "$PLAN" --buffer-size 8M --json "$SEED"
out_has '"buffer_size": 8388608,'
expect 0 env "$ENVVAR=garbage" "$PLAN" --buffer-size 8MiB --json "$SEED"
out_has '"buffer_size": 8388608,'
expect 0 env "$ENVVAR=" "$PLAN" --buffer-size 9M --json "$SEED"
out_has '"buffer_size": 9437184,'
# KB, MB, GB, TB are powers of 1000 (Hugging Face's max_shard_size), K, M, G, T
# and KiB... powers of 1024, in the option and in the environment alike.
expect 0 "$PLAN" --buffer-size 64MB --json "$SEED"
out_has '"buffer_size": 64000000,'
expect 0 env "$ENVVAR=5GB" "$PLAN" --json "$SEED"
out_has '"buffer_size": 5000000000,'
expect 0 env "$ENVVAR=8MB" "$PLAN" --json "$SEED"
out_has '"buffer_size": 8000000,'
# 8 MB is below the 8 MiB tensor: edge moves to the cpu, as 8M keeps it on the gpu.
expect 0 "$PLAN" --buffer-size 8MB "$SEED"
[ "$(placement edge)" = cpu ] || fail "--buffer-size 8MB: edge (8 MiB) should be cpu"
expect 0 "$PLAN" --buffer-size 8M "$SEED"
[ "$(placement edge)" = gpu ] || fail "--buffer-size 8M: edge (8 MiB) should be gpu"
expect 0 "$PLAN" --buffer-size 1KB --ring-size 12MB --json "$SEED"
out_has '"buffer_size": 1000, "ring_bytes": 12001280,'
expect 0 "$PLAN" --buffer-size 1TB --json "$SEED"
out_has '"buffer_size": 1000000000000,'
# The environment alone, with a suffix; limit 1 puts everything on the CPU.
expect 0 env "$ENVVAR=1" "$PLAN" --json "$SEED"
pyjson "assert [t['placement'] for t in d['tensors']] == ['cpu'] * 3 and d['ring_bytes'] == 1"
expect 0 env "$ENVVAR=16M" "$PLAN" --json "$SEED"
pyjson "assert d['buffer_size'] == 16777216 and d['totals']['cpu']['count'] == 0"

# ---- invalid limits: exit 4, naming the origin and quoting the value ----
expect 4 env "$ENVVAR=" "$PLAN" "$SEED"
err_has "$ENVVAR=\"\""
expect 4 env "$ENVVAR=8.0" "$PLAN" "$SEED"
err_has "placefs-plan: $ENVVAR=\"8.0\": not a whole number of bytes"
expect 4 env "$ENVVAR=-5" "$PLAN" "$SEED"
err_has "$ENVVAR=\"-5\": must be greater than zero"
expect 4 env "$ENVVAR= 8 " "$PLAN" "$SEED"
expect 4 env "$ENVVAR=8mb" "$PLAN" "$SEED"
err_has "$ENVVAR=\"8mb\": unknown suffix \"mb\" (digits with an optional suffix: K, M, G, T, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000))"
expect 4 "$PLAN" --buffer-size 8QB "$SEED"
err_has 'unknown suffix "QB"'
err_has 'KB, MB, GB, TB (powers of 1000)'
expect 4 "$PLAN" --buffer-size 0 "$SEED"
err_has '--buffer-size="0": must be greater than zero'
expect 4 "$PLAN" --buffer-size 0x10 "$SEED"
expect 4 "$PLAN" --buffer-size 1e6 "$SEED"
expect 4 "$PLAN" --buffer-size 8_388_608 "$SEED"
expect 4 "$PLAN" --buffer-size 16777216T "$SEED"
err_has "too large"
expect 4 "$PLAN" --buffer-size 18446744073709551616 "$SEED"
expect 0 "$PLAN" --buffer-size 18446744073709551615 --json "$SEED"
out_has '"buffer_size": 18446744073709551615,'
# The limit is checked before the checkpoint is opened.
expect 4 "$PLAN" --buffer-size 8.0 "$T/does-not-exist"

# ---- sweep ----
expect 0 "$PLAN" --sweep "$SEED"
columns "$T/out" >"$T/got"
# The powers of two from 1 MiB and, besides them, each size at which a tensor
# changes side (9 MiB: big), listed exactly below the table.
cat >"$T/want" <<'EOF'
limit|gpu tensors|gpu bytes|cpu tensors|cpu bytes|ring bytes
1 MiB|1|1 MiB|2|17 MiB|1 MiB
2 MiB|1|1 MiB|2|17 MiB|2 MiB
4 MiB|1|1 MiB|2|17 MiB|4 MiB
8 MiB|2|9 MiB|1|9 MiB|8 MiB
9 MiB|3|18 MiB|0|0 B|9 MiB
16 MiB|3|18 MiB|0|0 B|16 MiB
none|3|18 MiB|0|0 B|18 MiB

placement changes (a limit of at least SIZE stages them on the gpu):
|1048576 bytes (1 MiB): 1 tensor, small
|8388608 bytes (8 MiB): 1 tensor, edge
|9437184 bytes (9 MiB): 1 tensor, big
EOF
cmp -s "$T/got" "$T/want" || fail "default sweep: $(cat "$T/out")"
# A limit in the environment does not change the candidates.
expect 0 env "$ENVVAR=1" "$PLAN" --sweep "$SEED"
columns "$T/out" | cmp -s - "$T/want" || fail "sweep with the variable set"
expect 0 "$PLAN" --sweep=16M,1K,8388608 "$SEED"
columns "$T/out" >"$T/got"
cat >"$T/want" <<'EOF'
limit|gpu tensors|gpu bytes|cpu tensors|cpu bytes|ring bytes
16 MiB|3|18 MiB|0|0 B|16 MiB
1 KiB|0|0 B|3|18 MiB|1 KiB
8 MiB|2|9 MiB|1|9 MiB|8 MiB
none|3|18 MiB|0|0 B|18 MiB
EOF
cmp -s "$T/got" "$T/want" || fail "sweep list: $(cat "$T/out")"
expect 0 "$PLAN" --sweep=8MB,8M "$SEED"
columns "$T/out" | grep -qxF '7.63 MiB|1|1 MiB|2|17 MiB|7.63 MiB' || fail "--sweep=8MB: $(cat "$T/out")"
expect 4 "$PLAN" --sweep=1M,8.0 "$SEED"
err_has '--sweep="8.0"'
expect 4 "$PLAN" --sweep=1M,,2M "$SEED"
expect 4 "$PLAN" --sweep= "$SEED"
expect 2 "$PLAN" --sweep --json "$SEED"

# ---- the change sizes on a Llama-shaped model: the largest layer tensor (the
# MLP's 1408 x 512 BF16 = 1441792 bytes) and the embedding (8192 x 512 = 8 MiB).
# At each, that many tensors change side: a limit one byte below puts them on the
# cpu. Checked against plain plans at SIZE and SIZE - 1.
LS="$T/llama-sweep"
"$MK" -q --llama 2:512:1408:8192 --shards 2 --index "$LS"
expect 0 "$PLAN" --sweep "$LS"
out_has "  1441792 bytes (1.38 MiB): 6 tensors, the first model.layers.0.mlp.gate_proj.weight"
out_has "  8388608 bytes (8 MiB): 2 tensors, the first model.embed_tokens.weight"
columns "$T/out" | grep -q '^1.38 MiB|19|' || fail "sweep row of 1441792: $(cat "$T/out")"
cp "$T/out" "$T/sweep"
# gpu_count FILE: the gpu count of a JSON plan.
gpu_count() {
	python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['totals']['gpu']['count'])" "$1"
}
nchg=0
# Without python3 (a build dependency on Debian) the JSON checks are left out.
[ "$have_python" = yes ] || sed -i -e '/^  [0-9]* bytes /d' "$T/sweep"
[ "$have_python" = yes ] || nchg=4
for sz in $(sed -n 's/^  \([0-9]*\) bytes .*/\1/p' "$T/sweep"); do
	expect 0 "$PLAN" --buffer-size "$sz" --json "$LS"
	at=$(gpu_count "$T/out")
	expect 0 "$PLAN" --buffer-size "$((sz - 1))" --json "$LS"
	below=$(gpu_count "$T/out")
	n=$(sed -n "s/^  $sz bytes ([^)]*): \([0-9]*\) tensors*.*/\1/p" "$T/sweep")
	[ "$((at - below))" -eq "$n" ] ||
		fail "sweep: $n tensors change side at $sz bytes; the plans say $((at - below))"
	nchg=$((nchg + 1))
done
[ "$nchg" -eq 4 ] || fail "sweep: want 4 change sizes (1 KiB, 512 KiB, 1441792, 8 MiB), got $nchg"

# ---- histogram: log2 buckets, the limit marked, count and bytes on each side ----
expect 0 "$PLAN" --buffer-size 8M --histogram "$SEED"
columns "$T/out" >"$T/got"
cat >"$T/want" <<EOF
tensor sizes of $SEED: 3 tensors, staging limit 8388608 bytes (8 MiB)
SIZE|COUNT|BYTES|PLACE
[1 MiB, 2 MiB)|1|1 MiB|gpu|########################################
[2 MiB, 8 MiB)|0|0 B
[8 MiB, 8 MiB]|1|8 MiB|gpu|########################################
---- staging limit 8 MiB: gpu above (2 tensors, 9 MiB), cpu below (1 tensor, 9 MiB) ----
(8 MiB, 16 MiB)|1|9 MiB|cpu|########################################
EOF
cmp -s "$T/got" "$T/want" || fail "histogram: $(cat "$T/out")"
expect 0 "$PLAN" --histogram "$SEED"
out_has "no staging limit (every tensor is staged on the gpu)"
out_has "gpu: 3 tensors, 18 MiB; cpu: none"
columns "$T/out" | grep -qxF '[8 MiB, 16 MiB)|2|17 MiB|gpu|########################################' ||
	fail "histogram without a limit: $(cat "$T/out")"
# Random sizes and an empty tensor: the rows add up to the plan's counts on each side.
RND="$T/random.safetensors"
"$MK" -q --seed 3 --tensor e:F32:0 --tensor x:F32:3x5 --random 30 --max-bytes 3MB "$RND"
for lim in $([ "$have_python" = no ] || echo 100K 1MB 2M 3000000 1); do
	expect 0 "$PLAN" --buffer-size $lim --json "$RND"
	counts=$(python3 -c "import json, sys; t = json.load(open(sys.argv[1]))['totals']; print(t['gpu']['count'], t['cpu']['count'])" "$T/out")
	expect 0 "$PLAN" --buffer-size $lim --histogram "$RND"
	columns "$T/out" >"$T/got"
	rows=$(awk -F'|' 'BEGIN { side = 0 } /^---- staging limit/ { side = 1; next }
		/^[[(0]/ { n[side] += $2 } END { print n[0] + 0, n[1] + 0 }' "$T/got")
	[ "$rows" = "$counts" ] || fail "histogram at $lim: rows $rows, the plan $counts: $(cat "$T/out")"
	[ "$(grep -c '^---- staging limit' "$T/out")" -eq 1 ] || fail "histogram at $lim: one marker"
	! grep -q ' $' "$T/out" || fail "histogram at $lim: trailing blanks"
done
# More distinct sizes than the default sweep lists (16): the 16 largest, where
# the big tensors (the largest layer tensor among them) change side, each also
# a row of the table.
if [ "$have_python" = yes ]; then
	expect 0 "$PLAN" --json "$RND"
	cp "$T/out" "$T/rnd.json"
	expect 0 "$PLAN" --sweep "$RND"
	python3 - "$T/rnd.json" "$T/out" <<'EOF' || fail "sweep of $RND: $(cat "$T/out")"
import json, re, sys
sizes = sorted({t["nbytes"] for t in json.load(open(sys.argv[1]))["tensors"] if t["nbytes"]})
out = open(sys.argv[2]).read()
changes = re.findall(r"^  (\d+) bytes \(([^)]*)\)", out, re.M)
assert len(sizes) > 16, sizes
assert [int(n) for n, _ in changes] == sizes[-16:], (changes, sizes)
table = out.split("\n\n")[0]
for n, human in changes:
    assert re.search(r"^%s +\d" % re.escape(human), table, re.M), (n, human)
EOF
fi
expect 2 "$PLAN" --histogram --json "$SEED"
err_has "--histogram cannot be combined with --json"
expect 2 "$PLAN" --histogram --columns "$SEED"
err_has "--histogram cannot be combined with --columns"
expect 2 "$PLAN" --json --columns "$SEED"
err_has "--json and --columns cannot be combined"
expect 2 "$PLAN" --columns --sweep "$SEED"
err_has "--columns and --sweep cannot be combined"

# ---- --columns: the entries of --json, one array per field ----
expect 0 "$PLAN" --json --buffer-size 8M "$SEED"
cp "$T/out" "$T/plan.json"
expect 0 "$PLAN" --columns --buffer-size 8M "$SEED"
out_has '"version": 1, "count": 3,'
pyjson "
p = json.load(open('$T/plan.json'))
for k in ('source', 'buffer_size', 'ring_bytes', 'totals'):
    assert p[k] == d[k], k
rows = [{'name': d['name'][i], 'filename': d['filename'].get(str(i), d['name'][i]),
         'file': d['files'][d['file'][i]], 'dtype': d['dtypes'][d['dtype'][i]],
         'shape': d['shape'][i], 'nbytes': d['nbytes'][i], 'offset': d['offset'][i],
         'placement': {'g': 'gpu', 'c': 'cpu'}[d['placement'][i]]} for i in range(d['count'])]
assert rows == p['tensors'], (rows, p['tensors'])
"
expect 2 "$PLAN" --histogram --sweep "$SEED"

# ---- --ring-size: a ring larger than the limit ----
# Rounded up to 4 KiB; plan.json's ring_bytes and the text's ring line follow.
expect 0 "$PLAN" --buffer-size 8M --ring-size 25165825 "$SEED"
out_has "staging limit: 8388608 bytes (8 MiB): larger tensors are read on the cpu"
out_has "ring: 25169920 bytes (24.00 MiB), set by --ring-size (at least 8 MiB, the staging limit)"
[ "$(placement edge)" = gpu ] || fail "--ring-size: edge should stay gpu"
[ "$(placement big)" = cpu ] || fail "--ring-size: big should stay cpu"
expect 0 "$PLAN" --buffer-size 8M --ring-size 24M --json "$SEED"
out_has '"buffer_size": 8388608, "ring_bytes": 25165824, "tensors": ['
# Exactly the limit is accepted; without a limit the minimum is the automatic 18 MiB.
expect 0 "$PLAN" --buffer-size 8M --ring-size 8M --json "$SEED"
out_has '"buffer_size": 8388608, "ring_bytes": 8388608, '
expect 0 env "$ENVVAR=8M" "$PLAN" --ring-size 16M --json "$SEED"
out_has '"buffer_size": 8388608, "ring_bytes": 16777216, '
expect 0 "$PLAN" --ring-size 36M "$SEED"
out_has "ring: 37748736 bytes (36 MiB), set by --ring-size (at least 18 MiB, the automatic size)"
# Too small, malformed or unroundable: exit 2 (a bad option value), naming --ring-size.
expect 2 "$PLAN" --buffer-size 8M --ring-size 4M "$SEED"
err_has "placefs-plan: --ring-size: 4194304 bytes (4 MiB) is below the 8388608-byte (8 MiB) staging limit: every gpu tensor up to the limit must fit the ring"
expect 2 env "$ENVVAR=8M" "$PLAN" --ring-size 8388607 "$SEED"
err_has "--ring-size: 8388607 bytes"
expect 2 "$PLAN" --ring-size 17M "$SEED"
err_has "--ring-size: 17825792 bytes (17 MiB) is below the 18874368-byte (18 MiB) automatic ring"
expect 2 "$PLAN" --ring-size 18446744073709551615 "$SEED"
err_has "cannot be rounded up to a multiple of 4096 bytes"
expect 2 "$PLAN" --ring-size 8.5M "$SEED"
err_has '--ring-size="8.5M"'
expect 2 "$PLAN" --ring-size 0 "$SEED"
expect 2 "$PLAN" --ring-size 16M --sweep "$SEED"
err_has "--ring-size and --sweep cannot be combined"
expect 2 "$PLAN" "$SEED" --ring-size

# ---- mkckpt --moe: the mixture-of-experts layout, and its limits ----
MOE="$T/moe"
"$MK" -q --moe 2:64:5:32:100 --shards 2 --index "$MOE"
expect 0 "$PLAN" --json "$MOE"
pyjson "
names = [t['name'] for t in d['tensors']]
# embed + 2 x (4 attention + router + 5 experts x 3 + 2 norms) + norm + head
assert len(names) == 47, len(names)
sh = {t['name']: t['shape'] for t in d['tensors']}
assert sh['model.layers.1.mlp.gate.weight'] == [5, 64], sh['model.layers.1.mlp.gate.weight']
assert sh['model.layers.0.mlp.experts.4.up_proj.weight'] == [32, 64]
assert sh['model.layers.0.mlp.experts.4.down_proj.weight'] == [64, 32]
"
run "$MK" --moe 2:64:5:32 "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --moe 2:64:5:32: exit $rc, want 2"
err_has "expected L:H:E:I:V (five non-negative integers)"
run "$MK" --moe 2:64:100001:1:1 "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --moe 2:64:100001:1:1: exit $rc, want 2"
err_has "E (experts) is more than the limit of 100000"
run "$MK" --moe 1000:64:667:1:1 "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --moe 1000:64:667:1:1: exit $rc, want 2"
err_has "L x E x 3 expert tensors is more than 2000000"

# ---- mkckpt --quant: fp8 and gptq layouts of every linear projection ----
# want_layout Q L H E I V: the exact {name: [dtype, shape]} that --moe L:H:E:I:V
# --quant Q must write (E empty: --llama L:H:I:V), compared with the plan.
want_layout() {
	pyjson "
q, L, H, E, I, V = '$1', $2, $3, '$4', $5, $6
want = {}
def lin(x, i, o):
    if q == 'fp8':
        want[x + '.weight'] = ['F8_E4M3', [o, i]]
        want[x + '.weight_scale'] = ['F32', [o, 1]]
        want[x + '.input_scale'] = ['F32', [1]]
    else:
        want[x + '.qweight'] = ['I32', [i // 8, o]]
        want[x + '.qzeros'] = ['I32', [i // 128, o // 8]]
        want[x + '.scales'] = ['F16', [i // 128, o]]
        want[x + '.g_idx'] = ['I32', [i]]
def mlp(b):
    lin(b + '.gate_proj', H, I); lin(b + '.up_proj', H, I); lin(b + '.down_proj', I, H)
want['model.embed_tokens.weight'] = ['BF16', [V, H]]
for l in range(L):
    p = 'model.layers.%d.' % l
    for a in 'qkvo':
        lin(p + 'self_attn.%s_proj' % a, H, H)
    if E:
        want[p + 'mlp.gate.weight'] = ['BF16', [int(E), H]]
        for x in range(int(E)):
            mlp(p + 'mlp.experts.%d' % x)
    else:
        mlp(p + 'mlp')
    want[p + 'input_layernorm.weight'] = ['BF16', [H]]
    want[p + 'post_attention_layernorm.weight'] = ['BF16', [H]]
want['model.norm.weight'] = ['BF16', [H]]
want['lm_head.weight'] = ['BF16', [V, H]]
got = {t['name']: [t['dtype'], t['shape']] for t in d['tensors']}
assert len(got) == len(d['tensors'])
diff = [k for k in set(got) | set(want) if got.get(k) != want.get(k)]
assert not diff, sorted(diff)[:10]
"
}
QF="$T/moe-fp8"
"$MK" -q --moe 2:256:4:128:512 --quant fp8 --shards 3 --index "$QF"
expect 0 "$PLAN" --json "$QF"
# embed + 2 x (4 x 3 attention + router + 4 experts x 3 x 3 + 2 norms) + norm + head
pyjson "assert len(d['tensors']) == 1 + 2 * (4 * 3 + 1 + 4 * 3 * 3 + 2) + 2 == 105, len(d['tensors'])"
pyjson "
t = {t['name']: (t['dtype'], t['shape'], t['nbytes']) for t in d['tensors']}
x = 'model.layers.1.mlp.experts.3.down_proj'
assert t[x + '.weight'] == ('F8_E4M3', [256, 128], 32768), t[x + '.weight']
assert t[x + '.weight_scale'] == ('F32', [256, 1], 1024), t[x + '.weight_scale']
assert t[x + '.input_scale'] == ('F32', [1], 4), t[x + '.input_scale']
assert t['model.layers.1.mlp.gate.weight'] == ('BF16', [4, 256], 2048)
assert [n for n in t if n.startswith(x)] == [x + '.weight', x + '.weight_scale', x + '.input_scale']
"
want_layout fp8 2 256 4 128 512
QG="$T/moe-gptq"
"$MK" -q --moe 2:256:4:128:512 --quant gptq --shards 3 --index "$QG"
expect 0 "$PLAN" --json "$QG"
# embed + 2 x (4 x 4 attention + router + 4 experts x 3 x 4 + 2 norms) + norm + head
pyjson "assert len(d['tensors']) == 1 + 2 * (4 * 4 + 1 + 4 * 3 * 4 + 2) + 2 == 137, len(d['tensors'])"
pyjson "
t = {t['name']: (t['dtype'], t['shape'], t['nbytes']) for t in d['tensors']}
x = 'model.layers.1.mlp.experts.3.down_proj'
assert t[x + '.qweight'] == ('I32', [16, 256], 16384), t[x + '.qweight']
assert t[x + '.qzeros'] == ('I32', [1, 32], 128), t[x + '.qzeros']
assert t[x + '.scales'] == ('F16', [1, 256], 512), t[x + '.scales']
assert t[x + '.g_idx'] == ('I32', [128], 512), t[x + '.g_idx']
g = 'model.layers.0.mlp.experts.0.gate_proj'
assert t[g + '.qweight'] == ('I32', [32, 128], 16384), t[g + '.qweight']
assert t[g + '.qzeros'] == ('I32', [2, 16], 128), t[g + '.qzeros']
assert t[g + '.scales'] == ('F16', [2, 128], 512), t[g + '.scales']
assert t[g + '.g_idx'] == ('I32', [256], 1024), t[g + '.g_idx']
assert x + '.weight' not in t and 'model.layers.0.self_attn.q_proj.weight' not in t
"
want_layout gptq 2 256 4 128 512
# The headers themselves, read with python3's json from the first 8 + N bytes.
if [ "$have_python" = yes ]; then
	python3 - "$QG" <<'EOF' || fail "gptq headers"
import glob, json, struct, sys
seen = {}
for f in sorted(glob.glob(sys.argv[1] + "/model-*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(n))
    h.pop("__metadata__")
    seen.update({k: (v["dtype"], v["shape"]) for k, v in h.items()})
idx = json.load(open(sys.argv[1] + "/model.safetensors.index.json"))["weight_map"]
assert sorted(seen) == sorted(idx) and len(seen) == 137, len(seen)
x = "model.layers.0.self_attn.o_proj"
assert seen[x + ".qweight"] == ("I32", [32, 256]) and seen[x + ".qzeros"] == ("I32", [2, 32])
assert seen[x + ".scales"] == ("F16", [2, 256]) and seen[x + ".g_idx"] == ("I32", [256])
EOF
fi
# --llama too: the attention and the dense MLP.
"$MK" -q --llama 2:256:384:100 --quant gptq "$T/llama-gptq"
expect 0 "$PLAN" --json "$T/llama-gptq"
pyjson "assert len(d['tensors']) == 1 + 2 * (7 * 4 + 2) + 2 == 63, len(d['tensors'])"
want_layout gptq 2 256 '' 384 100
"$MK" -q --llama 1:64:96:100 --quant fp8 "$T/llama-fp8"
expect 0 "$PLAN" --json "$T/llama-fp8"
want_layout fp8 1 64 '' 96 100
# --quant none is the default: bf16 as before.
"$MK" -q --moe 1:256:2:128:512 --quant none "$T/moe-none"
expect 0 "$PLAN" --json "$T/moe-none"
pyjson "assert all(t['dtype'] == 'BF16' for t in d['tensors']) and len(d['tensors']) == 16, d"
# gptq's rule, in % 128 == 0 and out % 8 == 0: a usage error naming the linear.
run "$MK" --moe 1:100:2:64:512 --quant gptq "$T/bad-gptq"
[ "$rc" -eq 2 ] || fail "mkckpt --moe 1:100:2:64:512 --quant gptq: exit $rc, want 2"
err_has 'placefs-mkckpt: --quant gptq: linear "model.layers.0.self_attn.q_proj" (in 100, out 100): gptq needs in % 128 == 0 (group size 128) and out % 8 == 0'
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "--quant gptq: want one line on stderr"
[ ! -e "$T/bad-gptq" ] || fail "--quant gptq: a refused shape wrote $T/bad-gptq"
run "$MK" --moe 1:128:2:64:512 --quant gptq "$T/bad-gptq"
[ "$rc" -eq 2 ] || fail "mkckpt --moe 1:128:2:64:512 --quant gptq: exit $rc, want 2"
err_has 'linear "model.layers.0.mlp.experts.0.down_proj" (in 64, out 128)'
run "$MK" --llama 1:128:132:10 --quant gptq "$T/bad-gptq"
[ "$rc" -eq 2 ] || fail "mkckpt --llama 1:128:132:10 --quant gptq: exit $rc, want 2"
err_has 'linear "model.layers.0.mlp.gate_proj" (in 128, out 132)'
# fp8 has no such rule.
"$MK" -q --moe 1:100:2:64:512 --quant fp8 "$T/fp8-odd"
# Unknown names, no layout to quantize, and the tensor-count limits with --quant.
run "$MK" --moe 2:256:4:128:512 --quant x "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --quant x: exit $rc, want 2"
err_has "placefs-mkckpt: --quant x: unknown quantization (want fp8 or gptq)"
run "$MK" --moe 2:256:4:128:512 --quant FP8 "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --quant FP8: exit $rc, want 2"
run "$MK" --moe 2:256:4:128:512 "$T/x" --quant
[ "$rc" -eq 2 ] || fail "mkckpt --quant without a value: exit $rc, want 2"
run "$MK" --quant fp8 --tensor a:F32:1 "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --quant without --llama or --moe: exit $rc, want 2"
err_has "--quant fp8 applies to --llama and --moe"
run "$MK" --quant gptq --moe 1000:128:167:128:8 "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --moe 1000:128:167:128:8 --quant gptq: exit $rc, want 2"
err_has "L x E x 3 x 4 expert tensors is more than 2000000"
run "$MK" --llama 100000:128:128:8 --quant fp8 "$T/x"
[ "$rc" -eq 2 ] || fail "mkckpt --llama 100000:128:128:8 --quant fp8: exit $rc, want 2"
err_has "L x 23 layer tensors is more than 2000000"
[ ! -e "$T/x" ] || fail "a refused --quant wrote $T/x"

# ---- prefixes, on a small Llama-shaped model in two shards with an index ----
LL="$T/llama"
"$MK" -q --llama 2:64:128:256 --shards 2 --index "$LL"
[ -f "$LL/model.safetensors.index.json" ] || fail "mkckpt wrote no index"
expect 0 "$PLAN" --json "$LL"
pyjson "
assert len(d['tensors']) == 21, len(d['tensors'])
files = sorted(set(t['file'] for t in d['tensors']))
assert files == ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'], files
assert d['tensors'][0]['name'] == 'model.embed_tokens.weight'
"
expect 0 "$PLAN" --prefix model.layers.0. --json "$LL"
pyjson "
names = [t['name'] for t in d['tensors']]
assert len(names) == 9 and all(n.startswith('model.layers.0.') for n in names), names
"
expect 0 "$PLAN" --prefix lm_head --prefix model.layers.1. "$LL"
[ "$(grep -c '^[gc]pu ' "$T/out")" -eq 10 ] || fail "two prefixes should select 10 tensors"
out_has "lm_head.weight"
if grep -qF "model.layers.0." "$T/out"; then fail "layer 0 selected"; fi
# Case-sensitive, no globs: nothing matches, exit 5 listing the prefixes.
expect 5 "$PLAN" --prefix Model. --prefix 'model.layers.*' "$LL"
err_has 'the selection matched no tensors (prefixes: "Model.", "model.layers.*")'
# Prefix selection comes before placement: a limit of 8 KiB keeps layer 0's
# 8 KiB attention weights on the GPU and its 16 KiB MLP weights on the CPU.
expect 0 "$PLAN" --prefix model.layers.0. --buffer-size 8K --json "$LL"
pyjson "
p = {t['name'].split('.')[-2]: t['placement'] for t in d['tensors']}
assert p['q_proj'] == 'gpu' and p['gate_proj'] == 'cpu' and p['input_layernorm'] == 'gpu', p
assert d['totals']['gpu']['count'] == 6 and d['totals']['cpu']['count'] == 3, d['totals']
"

# ---- --index ----
ONE="$T/one"
"$MK" -q --tensor a.w:F32:4 --tensor b.w:F32:8 --tensor c.w:BF16:2x3 --index "$ONE"
[ -f "$ONE/model.safetensors" ] || fail "mkckpt: want model.safetensors for one shard"
printf '{"metadata": {}, "weight_map": {"c.w": "model.safetensors", "a.w": "model.safetensors"}}' \
	>"$ONE/subset.json"
expect 0 "$PLAN" --json "$ONE"
pyjson "assert [t['name'] for t in d['tensors']] == ['a.w', 'b.w', 'c.w']"
# Relative to the source directory, and absolute; only mapped tensors appear.
expect 0 "$PLAN" --index subset.json --json "$ONE"
pyjson "assert [t['name'] for t in d['tensors']] == ['a.w', 'c.w'], d['tensors']"
expect 0 "$PLAN" --index "$ONE/subset.json" "$ONE"
out_has "c.w"
if grep -q 'b\.w' "$T/out"; then fail "b.w is not in the index"; fi
expect 3 "$PLAN" --index missing.json "$ONE"
printf '{"weight_map": {"a.w": "nope.safetensors"}}' >"$ONE/bad.json"
expect 3 "$PLAN" --index bad.json "$ONE"
printf 'not json' >"$ONE/junk.json"
expect 3 "$PLAN" --index junk.json "$ONE"
expect 3 "$PLAN" --index subset.json "$SEED"

# ---- bad checkpoints and sources: exit 3 ----
expect 3 "$PLAN" "$T/does-not-exist"
printf 'this is not a safetensors file' >"$T/junk.safetensors"
expect 3 "$PLAN" "$T/junk.safetensors"
mkdir "$T/empty-dir"
expect 3 "$PLAN" "$T/empty-dir"
mkdir "$T/dup"
"$MK" -q --tensor x:F32:2 "$T/dup/a.safetensors"
"$MK" -q --tensor x:F32:2 "$T/dup/b.safetensors"
expect 3 "$PLAN" "$T/dup"
err_has '"x"'

# ---- an empty selection: exit 5 ----
"$MK" -q "$T/none.safetensors"
expect 5 "$PLAN" "$T/none.safetensors"
err_has "the selection matched no tensors (no prefixes; the checkpoint has no tensors)"

# ---- tensor names that cannot be file names: exit 9 ----
"$MK" -q --tensor ok:F32:1 --tensor "$(printf 'bad\001name')":F32:1 "$T/ctl.safetensors"
expect 9 "$PLAN" "$T/ctl.safetensors"
err_has 'ctl.safetensors: tensor "bad\x01name": name contains control character \x01'
# Outside the selection it does not matter.
expect 0 "$PLAN" --prefix ok "$T/ctl.safetensors"
long=$(printf '%0300d' 0)
"$MK" -q --tensor "$long":U8:1 "$T/long.safetensors"
expect 9 "$PLAN" "$T/long.safetensors"
err_has "encoded file name is 300 bytes"
# Names with '/', '%' and a leading '.' are fine; JSON shows them unencoded.
# shellcheck disable=SC1003 # the backslash is part of the name
"$MK" -q --tensor a/b:U8:1 --tensor '.x%':U8:2 --tensor 'q"uote\':U8:3 "$T/odd.safetensors"
expect 0 "$PLAN" --json "$T/odd.safetensors"
pyjson "assert [t['name'] for t in d['tensors']] == ['a/b', '.x%', 'q\"uote\\\\'], d"
# Each tensor's "filename" is its file's name in the mount (lib/common/name.h's
# encoding), so that no client encodes names itself.
pyjson "assert [t['filename'] for t in d['tensors']] == ['a%2Fb', '%2Ex%25', 'q\"uote\\\\'], d"
out_has '{"name": "a/b", "filename": "a%2Fb", "file": "odd.safetensors", '
"$MK" -q --tensor '100%/slash/.dot':U8:4 --tensor '..%2F':U8:1 --tensor p.lain:U8:5 \
	"$T/enc.safetensors"
expect 0 "$PLAN" --json "$T/enc.safetensors"
pyjson "assert [(t['name'], t['filename']) for t in d['tensors']] == [('100%/slash/.dot', '100%25%2Fslash%2F.dot'), ('..%2F', '%2E.%252F'), ('p.lain', 'p.lain')], d"

# ---- usage: exit 2 ----
expect 2 "$PLAN"
expect 2 "$PLAN" "$SEED" "$SEED"
expect 2 "$PLAN" --no-such-option "$SEED"
expect 2 "$PLAN" "$SEED" --buffer-size
expect 2 "$PLAN" --json=yes "$SEED"

# ---- other errors: exit 1 ----
if [ -w /dev/full ]; then
	# shellcheck disable=SC2016 # expanded by the inner shell
	expect 1 sh -c '"$1" "$2" >/dev/full' sh "$PLAN" "$SEED"
	err_has "standard output"
fi

# ---- help and version ----
expect 0 "$PLAN" --help
out_has "usage: placefs-plan"
out_has "$ENVVAR"
out_has "--ring-size SIZE"
expect 0 "$PLAN" -h
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$top_builddir/config.h")
expect 0 "$PLAN" --version
[ "$(cat "$T/out")" = "placefs-plan $version" ] || fail "version: $(cat "$T/out")"
expect 0 "$PLAN" -V
[ "$(cat "$T/out")" = "placefs-plan $version" ] || fail "-V"

# Exit statuses 6, 7 and 8 (duplicate names) cannot come from a checkpoint
# placefs-ckpt accepts: it refuses duplicates itself (exit 3 above). They are
# covered with hand-built tensor lists in check_plan.

echo "tools-plan: $ntests checks passed"
