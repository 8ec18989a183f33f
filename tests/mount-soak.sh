#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-soak: a bounded load test of one mount (doc/RELIABILITY.md).
#
# A checkpoint of ~3000 tensors plus a few of several MiB (4 shards and an
# index), mounted with -o device=host,noprefetch and a 1 MiB staging limit.
# For PLACEFS_SOAK_SECONDS (default 20): 64 reader threads (tests/reliab/soak)
# read random ranges of random tensors (O_DIRECT, cached and mmap) and compare
# every byte with the source file, while 8 stager loops run placefs-stage
# --verify on random GPU-placed files (copy and borrow modes in turn) through
# the 1 MiB ring. Then:
#  - no mismatch, no error, every placefs-stage run succeeded and verified;
#  - .placefs/stats agrees with the clients: reads >= the readers' O_DIRECT
#    reads, bytes read per placement >= their O_DIRECT bytes, opens >= their
#    opens, no read error, open_files back to its starting value, tensors
#    staged = what placefs-stage staged, no staging error, no lease left, the
#    ring's bytes in use back to 0 and its high-water mark <= its capacity;
#  - the daemon's descriptors are back to their count before the load; its
#    anonymous memory (RssAnon) grew by at most the bounce buffers
#    (host_buffer) + 32 MiB; no copy destination of the exited stagers is
#    still imported (stats staging.dests 0) and its shared memory (RssShmem)
#    is at most the ring + 1 MiB; its file-backed memory (RssFile) at most
#    the shards' mappings + 32 MiB.
: "${PLACEFS_SOAK_SECONDS:=20}"
TEST_TIMEOUT=${TEST_TIMEOUT:-$((PLACEFS_SOAK_SECONDS + 60))}
. "$(dirname "$0")/lib.sh"
require_fuse

SOAK=$top_builddir/tests/reliab/soak
STUTIL=$top_srcdir/tests/reliab/stutil.py
STAGE=$top_builddir/tools/placefs-stage
[ -x "$SOAK" ] || fail "$SOAK is not built"
[ -x "$STAGE" ] || fail "$STAGE is not built"
SECS=$PLACEFS_SOAK_SECONDS
READERS=64
STAGERS=8
HOST_BUFFER=$((8 * 1024 * 1024))
RSS_SLACK_KB=$((32 * 1024))

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt

tmo 30 "$MKCKPT" -q --seed 41 --tensor 'big.a:F32:1024x1024' --tensor 'big.b:BF16:1536x1024' \
	--tensor 'big.c:U8:3145728' --tensor 'big.d:F16:512x1024' --tensor 'big.e:F32:2048x1024' \
	--random 3000 --max-bytes 32K --shards 4 --index ck || fail "mkckpt"
ckpt_bytes=$(cat ck/*.safetensors | wc -c)
mount_fs ck "$MP" -o buffer_size=1M,device=host,noprefetch,host_buffer=$HOST_BUFFER
PID=$MOUNT_PID
"$PYTHON" "$STUTIL" manifest "$MP" ck --limit 1048576 >soak.man || fail "manifest"
[ "$(wc -l <soak.man)" -eq 3005 ] || fail "the manifest has $(wc -l <soak.man) tensors, not 3005"
awk -F '\t' '$2 == "gpu" { print $1 }' soak.man >gpu.list

proc_kb() {
	sed -n "s/^$2:[[:space:]]*\\([0-9]*\\) kB/\\1/p" "/proc/$1/status"
}
fd_count() {
	ls "/proc/$1/fd" | wc -l
}
stat_of() {
	"$PYTHON" "$STUTIL" stats "$1" "$2"
}
summary() {
	printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

tmo 10 cat "$MP/.placefs/stats" >stats.before || fail "cannot read stats"
fds0=$(fd_count "$PID")
rss0=$(proc_kb "$PID" VmRSS)
anon0=$(proc_kb "$PID" RssAnon)
file0=$(proc_kb "$PID" RssFile)

# The stagers: placefs-stage --verify on 40 random GPU-placed files per run.
stager() {
	local k=$1 n=0 mode end
	end=$(($(date +%s) + SECS))
	while [ "$(date +%s)" -lt "$end" ]; do
		mode=copy
		[ $((n % 2)) -eq 1 ] && mode=borrow
		# shellcheck disable=SC2046
		if ! "$STAGE" --mode "$mode" --verify -q $(shuf -n 40 gpu.list) >"stage.$k.$n.out" 2>&1; then
			echo "stager $k run $n ($mode) failed:" >>stage.failed
			cat "stage.$k.$n.out" >>stage.failed
		fi
		n=$((n + 1))
	done
}
pids=""
for k in $(seq 1 $STAGERS); do
	stager "$k" &
	pids="$pids $!"
done
st=0
tmo $((SECS + 30)) "$SOAK" -t $READERS -s "$SECS" -L 4194304 soak.man >soak.out 2>&1 || st=$?
wait $pids
cat soak.out
[ "$st" -eq 0 ] || fail "readers saw wrong bytes or errors (soak exit $st)"
[ -e stage.failed ] && fail "placefs-stage failed: $(head -n 20 stage.failed)"
line=$(tail -n 1 soak.out)
[ "$(summary "$line" mismatches)" -eq 0 ] && [ "$(summary "$line" errors)" -eq 0 ] ||
	fail "soak summary: $line"

# What the stagers did, from their own summaries.
runs=$(ls stage.*.out | wc -l)
staged=$(cat stage.*.out | sed -n 's/^placefs-stage: \([0-9]*\) of \([0-9]*\) tensors staged.*/\1/p' |
	awk '{ s += $1 } END { print s + 0 }')
verified=$(cat stage.*.out | sed -n 's/^verify: \([0-9]*\) of [0-9]* tensors byte-exact/\1/p' |
	awk '{ s += $1 } END { print s + 0 }')
[ "$runs" -gt 0 ] && [ "$staged" -eq $((runs * 40)) ] && [ "$verified" -eq "$staged" ] ||
	fail "placefs-stage: $runs runs, $staged tensors staged, $verified verified (40 per run)"

# Releases reach the daemon after close() returns, and it drops the copy
# destinations of exited clients once a second: wait (5 s at most) until it
# has settled; the checks below say what is left if it has not.
settled() {
	tmo 10 cat "$MP/.placefs/stats" >stats.after || fail "cannot read stats"
	[ "$(stat_of stats.after open_files)" = "$(stat_of stats.before open_files)" ] &&
		[ "$(stat_of stats.after staging.leases)" = 0 ] &&
		[ "$(stat_of stats.after staging.ring_used)" = 0 ] &&
		[ "$(stat_of stats.after staging.dests)" = 0 ] &&
		[ "$(fd_count "$PID")" -eq "$fds0" ]
}
wait_for 5 settled || note "not settled within 5 s"
fds1=$(fd_count "$PID")
rss1=$(proc_kb "$PID" VmRSS)
anon1=$(proc_kb "$PID" RssAnon)
file1=$(proc_kb "$PID" RssFile)
shm1=$(proc_kb "$PID" RssShmem)

"$PYTHON" - stats.before stats.after "$line" "$staged" <<'EOF' || fail "stats disagree with the clients"
import json, sys
b, a = (json.load(open(p)) for p in sys.argv[1:3])
c = dict(kv.split("=", 1) for kv in sys.argv[3].split())
staged = int(sys.argv[4])
d = lambda *k: _get(a, k) - _get(b, k)
def _get(doc, keys):
    for k in keys:
        doc = doc[k]
    return doc
checks = [
    ("reads", d("reads"), ">=", int(c["direct_reads"])),
    ("bytes_read.gpu", d("bytes_read", "gpu"), ">=", int(c["direct_bytes_gpu"])),
    ("bytes_read.cpu", d("bytes_read", "cpu"), ">=", int(c["direct_bytes_cpu"])),
    ("opens", d("opens"), ">=", int(c["opens"])),
    ("read_errors", d("read_errors"), "==", 0),
    ("stale_refusals", d("stale_refusals"), "==", 0),
    ("open_files", a["open_files"], "==", b["open_files"]),
    ("staged tensors", d("staging", "staged", "copy", "tensors") +
     d("staging", "staged", "borrow", "tensors"), "==", staged),
    ("staging.errors", d("staging", "errors"), "==", 0),
    ("staging.leases", a["staging"]["leases"], "==", 0),
    ("staging.ring_used", a["staging"]["ring_used"], "==", 0),
    # The stagers have exited: none of their destinations stays mapped.
    ("staging.dests", a["staging"]["dests"], "==", 0),
    ("staging.ring_high_water <= ring_bytes", a["staging"]["ring_high_water"], "<=",
     a["staging"]["ring_bytes"]),
    # Every span is given back: by the copy itself, or by the borrower's release.
    # Direct copies (copy mode without the ring) hold none.
    ("staging.released", d("staging", "released"), "==",
     staged - d("staging", "direct", "stages")),
    ("staging.direct.stages <= copies", d("staging", "direct", "stages"), "<=",
     d("staging", "staged", "copy", "tensors")),
]
bad = 0
for name, got, op, want in checks:
    ok = got >= want if op == ">=" else got <= want if op == "<=" else got == want
    print("%-40s %14d %s %d%s" % (name, got, op, want, "" if ok else "   FAIL"))
    bad += not ok
print("staging: %d waits for ring space, high-water %d of %d bytes" % (
    d("staging", "waits"), a["staging"]["ring_high_water"], a["staging"]["ring_bytes"]))
sys.exit(1 if bad else 0)
EOF

[ "$fds1" -eq "$fds0" ] || fail "daemon descriptors: $fds0 before the load, $fds1 after"
# AddressSanitizer keeps freed memory in quarantine (256 MiB): there the
# anonymous memory bound means nothing, and LeakSanitizer checks the exit.
if grep -q __asan_init "$PLACEFS"; then
	note "sanitizer build: RssAnon $anon0 -> $anon1 kB not bounded (ASan quarantine)"
else
	[ "$anon1" -le $((anon0 + HOST_BUFFER / 1024 + RSS_SLACK_KB)) ] ||
		fail "daemon RssAnon grew from $anon0 kB to $anon1 kB (bound: + host_buffer + 32 MiB)"
fi
[ "$shm1" -le $((1024 + 1024)) ] ||
	fail "daemon RssShmem is $shm1 kB (bound: ring 1 MiB + 1 MiB; no exited client's destination stays mapped)"
[ "$file1" -le $((file0 + ckpt_bytes / 1024 + RSS_SLACK_KB)) ] ||
	fail "daemon RssFile grew from $file0 kB to $file1 kB (bound: + checkpoint + 32 MiB)"
ring_name=$(stat_of stats.after staging.device | sed -n 's/^host (\(.*\))$/\1/p')
[ -n "$ring_name" ] && [ -e "/dev/shm$ring_name" ] || fail "no host ring /dev/shm$ring_name"
umount_fs "$MP"
[ -e "/dev/shm$ring_name" ] && fail "the host ring /dev/shm$ring_name is left after unmounting"

printf 'mount-soak: readers=%s seconds=%s reads=%s bytes=%s GB/s=%s mismatches=%s errors=%s stagers=%s stage_runs=%s staged=%s fds=%s/%s rss_kb=%s/%s rss_anon_kb=%s/%s rss_file_kb=%s/%s rss_shmem_kb=%s\n' \
	"$READERS" "$(summary "$line" seconds)" "$(summary "$line" reads)" "$(summary "$line" bytes)" \
	"$(summary "$line" gbps)" "$(summary "$line" mismatches)" "$(summary "$line" errors)" \
	"$STAGERS" "$runs" "$staged" "$fds0" "$fds1" "$rss0" "$rss1" "$anon0" "$anon1" "$file0" "$file1" \
	"$shm1"
note "ok"
exit 0
