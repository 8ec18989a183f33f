#!/bin/sh
# SPDX-License-Identifier: MIT
# remote-s3: placefs stacked on s3fs, the bucket served by s3rver (an
# S3-compatible server from the npm registry, its version pinned in
# scripts/deps.sh) on 127.0.0.1. Not in make check (it needs a server and
# packages): scripts/test's remote layer runs it. s3rver is installed with
# npm into $PLACEFS_S3RVER_DIR (default $top_builddir/s3rver) when it is not
# there yet; the test fails, saying why, when that cannot be done. It exits 77 only where /dev/fuse or
# fusermount3 is absent.
#
# A sharded checkpoint with an index and a config.json is written with
# placefs-mkckpt and uploaded through a writable s3fs mount (W). placefs
# mounts the bucket through a read-only s3fs (R: ro,stat_cache_expire=1, as
# README.md's fstab line) with a host ring and a staging limit that leaves a
# few tensors cpu-placed. Checked (tests/remote-common.sh): every tensor
# byte-exact through verify_mount, cat, mmap, placefs-stage --all --verify,
# load_state_dict and iter_weights (device cpu) and the views read with the
# package's stdlib safetensors reader; the disk gate off (shards on FUSE);
# the lookahead on (shards on s3fs), its reads counted.
# Then the faults, each with every read compared with the source (a read
# that returns other bytes fails the test at once):
#  1. an object rewritten in the bucket with another size, then with the same
#     size and other bytes (a new mtime): its tensors fail with ESTALE once
#     s3fs shows the new object (the time it took is printed), the others
#     keep serving, the log names the shard; put back with cp -p (its mtime
#     too), it serves again;
#  2. the server stopped mid-load and restarted (a one-shard checkpoint of
#     16 MiB through R2: s3fs's default stat cache, retries=1, 5 MB fetched
#     at a time): a tensor s3fs had not fetched fails with EIO and the log
#     names the shard, the daemon stays up, and once the server is back
#     every tensor reads again;
#  3. R lazily unmounted under placefs (umount -l): ESTALE; s3fs mounted
#     again on the same directory: every tensor and the views' config.json
#     serve again from the new mount (the log says so), and the old s3fs
#     process exits once placefs no longer holds its files;
#  4. a measurement, not a check: through R2 (s3fs's default stat cache,
#     900 s) a same-size rewrite stays invisible to stat(2), so placefs
#     cannot see it; the number of the 16 MiB shard's tensors then read with
#     the new object's bytes (where s3fs had not fetched the range yet) is
#     printed.
TEST_TIMEOUT=${TEST_TIMEOUT:-170}
. "$(dirname "$0")/lib.sh"
require_fuse
. "$top_srcdir/tests/remote-common.sh"
. "$top_srcdir/scripts/deps.sh"
command -v s3fs >/dev/null 2>&1 || fail "s3fs is not installed (Debian: apt-get install s3fs)"
command -v node >/dev/null 2>&1 || fail "node is not installed (Debian: apt-get install nodejs npm)"
S3RVER_DIR=${PLACEFS_S3RVER_DIR:-$top_builddir/s3rver}
S3RVER=$S3RVER_DIR/node_modules/.bin/s3rver
placefs_s3rver "$S3RVER_DIR" >"$TMP/s3rver-install.log" 2>&1 ||
	fail "s3rver: $(cat "$TMP/s3rver-install.log")"
v=$("$S3RVER" --version 2>/dev/null) || fail "$S3RVER does not run with node $(node --version)"

cd "$TMP" || fail "cd $TMP"
SRC=$TMP/src
S1=model-00001-of-00003.safetensors
S2=model-00002-of-00003.safetensors
S3=model-00003-of-00003.safetensors
tmo 30 "$MKCKPT" -q --moe 2:256:4:128:512 --quant fp8 --shards 3 --index "$SRC" ||
	fail "placefs-mkckpt"
printf '{"architectures": ["TestForCausalLM"], "model_type": "test"}\n' >"$SRC/config.json"
printf 'S3RVER:S3RVER\n' >s3.passwd
chmod 600 s3.passwd

# s3rver on a port it picks the first time, the same one after a restart.
S3_PORT=0
S3_RUNS=0
s3_start() {
	S3_RUNS=$((S3_RUNS + 1))
	"$S3RVER" -d "$TMP/s3data" -a 127.0.0.1 -p "$S3_PORT" --configure-bucket ckpt -s \
		>"$TMP/s3rver.$S3_RUNS.log" 2>&1 &
	S3_PID=$!
	REMOTE_SERVERS="$REMOTE_SERVERS $S3_PID"
	wait_line "$TMP/s3rver.$S3_RUNS.log" 'listening on' 20 ||
		fail "s3rver did not start: $(cat "$TMP/s3rver.$S3_RUNS.log")"
	S3_PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/s3rver.$S3_RUNS.log")
}
s3_stop() {
	stop_server "$S3_PID"
}
# s3mount NAME MNT [OPTIONS]: the bucket on MNT through s3fs (foreground, pid in REMOTE_PID_NAME).
s3mount() {
	remote_mount_fuse "$1" "$2" s3fs ckpt "$2" -f -o \
		"passwd_file=$TMP/s3.passwd,url=http://127.0.0.1:$S3_PORT,use_path_request_style${3:+,$3}"
}

s3_start
note "s3rver $v (node $(node --version)) on 127.0.0.1:$S3_PORT; $(s3fs --version 2>&1 | head -n 1)"
W=$TMP/w
R=$TMP/r
P=$TMP/p
s3mount W "$W"
# cp -p: the objects carry the files' mtimes (s3fs keeps them in x-amz-meta-mtime).
tmo 60 cp -p "$SRC"/* "$W"/ || fail "upload through s3fs"
ROPTS=ro,stat_cache_expire=1
s3mount R "$R" "$ROPTS"
mount_fs "$R" "$P" -o device=host,buffer_size=$LIMIT
P_PID=$MOUNT_PID
P_LOG=$MOUNT_LOG
grep -q 'FUSE file system: staging reads are not held back' "$P_LOG" ||
	fail "placefs did not leave the disk gate off for shards on s3fs"
remote_checks "$P" "$SRC"
[ "$(stat_get "$P" staging.disk.streams)" = 0 ] || fail "staging.disk.streams is not 0 on s3fs"
grep -q 'lookahead: reading a shard starts .* (shards on s3fs' "$P_LOG" ||
	fail "placefs did not turn the lookahead on for shards on s3fs"
n=0
i=0
while [ "$n" -eq 0 ] && [ $i -lt 100 ]; do
	n=$(stat_get "$P" staging.lookahead_reads)
	i=$((i + 1))
	[ "$n" -gt 0 ] || sleep 0.05
done
[ "$n" -gt 0 ] || fail "no lookahead reads on s3fs after the loads"
note "lookahead on (shards on s3fs): $n reads"
# Direct reads: on by default for shards on s3fs; every shard descriptor of
# the daemon has O_DIRECT (040000 in fdinfo's octal flags), and the checks
# above read every byte through them.
[ "$(stat_get "$P" direct_reads)" = 1 ] || fail "direct_reads is not 1 for shards on s3fs"
grep -q 'direct reads: the shards are read with O_DIRECT (shards on s3fs' "$P_LOG" ||
	fail "placefs did not log direct reads for shards on s3fs"
n=0
for fd in /proc/"$P_PID"/fd/*; do
	case $(readlink "$fd") in "$R"/*.safetensors) ;; *) continue ;; esac
	fl=$(sed -n 's/^flags:[[:space:]]*//p' /proc/"$P_PID"/fdinfo/"${fd##*/}")
	[ $((0$fl & 040000)) -ne 0 ] || fail "shard descriptor $fd ($(readlink "$fd")) has flags $fl, no O_DIRECT"
	n=$((n + 1))
done
[ "$n" -eq 3 ] || fail "found $n shard descriptors of the daemon, expected 3 (every shard)"
note "direct reads on (shards on s3fs): $n shard descriptors with O_DIRECT"

# ---- 1. objects rewritten in the bucket ----
{
	cat "$SRC/$S2"
	head -c 4096 /dev/zero
} >grown
tmo 30 cp grown "$W/$S2" || fail "rewrite $S2"
t=$(now_ms)
wait_read 15 "$P" "$SRC" --shard "$S2" --direct --expect ESTALE ||
	fail "reads of $S2 did not all fail with ESTALE within 15 s of its rewrite: $(cat wait_read.out)"
note "another size: every tensor of $S2 fails with ESTALE $(since "$t") s after the upload ended"
remote_read "$P" "$SRC" --shard "$S1" --shard "$S3" --direct >/dev/null ||
	fail "the other shards do not read while $S2 is stale"
grep -q "shard $R/$S2 changed since mount" "$P_LOG" || fail "the log does not name $S2"
tmo 30 cp -p "$SRC/$S2" "$W/$S2" || fail "put $S2 back"
wait_read 15 "$P" "$SRC" --shard "$S2" --direct ||
	fail "$S2 put back (cp -p) does not serve again: $(cat wait_read.out)"
note "put back with cp -p: $S2 serves again"

flipped "$SRC/$S2"
[ "$(date +%s)" -gt "$(stat -c %Y "$SRC/$S2")" ] || sleep 1
tmo 30 cp flipped "$W/$S2" || fail "rewrite $S2"
t=$(now_ms)
wait_read 15 "$P" "$SRC" --shard "$S2" --direct --expect ESTALE ||
	fail "reads of $S2 did not all fail with ESTALE within 15 s of a same-size rewrite: $(cat wait_read.out)"
note "same size, other bytes, a new mtime: ESTALE $(since "$t") s after the upload ended" \
	"(every read before that returned the source's bytes)"
tmo 30 cp -p "$SRC/$S2" "$W/$S2" || fail "put $S2 back"
wait_read 15 "$P" "$SRC" --shard "$S2" --direct || fail "$S2 does not serve again: $(cat wait_read.out)"
remote_read "$P" "$SRC" --direct >/dev/null || fail "a full read after the rewrites"

# ---- 2. the server stopped mid-load, then restarted ----
# Through R2: s3fs's default stat cache, retries=1 (a refused connection
# costs s3fs 4 s a try), and 5 MB fetched at a time (multipart_size=5,
# parallel_count=1; its default is 50 MB, which fetches the small shards
# above whole when placefs reads their headers at mount). BIG: one shard
# of 16 tensors of 1 MiB.
BIG=$TMP/big
BIGF=model.safetensors
# shellcheck disable=SC2046
tmo 30 "$MKCKPT" -q --seed 5 $(for i in $(seq 10 25); do
	printf -- '--tensor t%s:U8:1048576 ' "$i"
done) --shards 1 --index "$BIG" || fail "mkckpt big"
mkdir -p "$W/big" && tmo 30 cp -p "$BIG"/* "$W/big/" || fail "upload big"
R2=$TMP/r2
P2=$TMP/p2
s3mount R2 "$R2" ro,retries=1,multipart_size=5,parallel_count=1
# read_mode=pread: one s3fs read per failing request (from a mapping, the
# kernel tries the pages again, each costing s3fs its retries).
mount_fs "$R2/big" "$P2" -o device=host,read_mode=pread
P2_PID=$MOUNT_PID
P2_LOG=$MOUNT_LOG
remote_read "$P2" "$BIG" --first 2 --direct >/dev/null || fail "the first tensors of big"
s3_stop
t=$(now_ms)
remote_read "$P2" "$BIG" --last 1 --direct --expect EIO >out2 ||
	fail "the last tensor of big (never fetched) with the server down: $(cat out2), expected EIO"
note "server stopped: a tensor s3fs had not fetched fails with EIO after $(since "$t") s" \
	"(s3fs retries=1)"
kill -0 "$P2_PID" 2>/dev/null || fail "placefs died with the server down"
grep -Eq "shard '$BIGF'.*(Input/output error|Bad address)" "$P2_LOG" ||
	fail "the log does not name the shard that failed"
s3_start
t=$(now_ms)
wait_read 30 "$P2" "$BIG" --direct ||
	fail "every tensor does not read once the server is back: $(cat wait_read.out)"
note "server back: every tensor reads again after $(since "$t") s; read_errors" \
	"$(stat_get "$P2" read_errors)"
umount_fs "$P2"

# ---- 3. R lazily unmounted under placefs, then mounted again ----
old=$REMOTE_PID_R
tmo 10 fusermount3 -u -z "$R" || fail "fusermount3 -u -z $R (umount -l)"
wait_read 10 "$P" "$SRC" --direct --expect ESTALE,EIO ||
	fail "with s3fs gone, reads of $P: $(cat wait_read.out)"
tmo 5 cat "$P/.placefs/views/all/config.json" >/dev/null 2>&1 &&
	fail "views/all/config.json still reads with s3fs unmounted"
kill -0 "$P_PID" 2>/dev/null || fail "placefs died when s3fs was unmounted"
grep -q "shard $R/$S1 was removed or replaced" "$P_LOG" || fail "the log does not name $S1"
s3mount R "$R" "$ROPTS"
t=$(now_ms)
wait_read 15 "$P" "$SRC" --direct || fail "s3fs mounted again: $(cat wait_read.out)"
wait_for 5 tmo 5 cmp -s "$P/.placefs/views/all/config.json" "$SRC/config.json" ||
	fail "views/all/config.json does not serve again"
note "s3fs mounted again: every tensor reads again after $(since "$t") s"
grep -q "shard '$S1' is back on a file system mounted again" "$P_LOG" ||
	fail "the log does not say $S1 is read from the new mount"
grep -q "config.json of the views is back on a file system mounted again" "$P_LOG" ||
	fail "the log does not say config.json is read from the new mount"
wait_for 10 gone "$old" ||
	fail "the s3fs unmounted with umount -l (pid $old) still runs: placefs holds its files"
note "the lazily unmounted s3fs (pid $old) exited"
remote_checks "$P" "$SRC"
kill -0 "$P_PID" 2>/dev/null || fail "placefs on R died"

# ---- 4. s3fs's default stat cache hides a same-size rewrite (measured, reported) ----
# A fresh mount of big through R2 (its first 5 MB fetched at mount), the
# object rewritten with the same size and a new mtime.
mount_fs "$R2/big" "$P2" -o device=host
remote_read "$P2" "$BIG" --first 1 --direct >/dev/null || fail "the first tensor of big"
flipped "$BIG/$BIGF"
[ "$(date +%s)" -gt "$(stat -c %Y "$BIG/$BIGF")" ] || sleep 1
tmo 30 cp flipped "$W/big/$BIGF" || fail "rewrite big"
sleep 2
m=$(remote_read "$P2" "$BIG" --direct --measure)
wrong=$(printf '%s\n' "$m" | sed -n 's/.*"WRONG": \([0-9]*\).*/\1/p')
note "s3fs's default stat cache (900 s): 2 s after a same-size rewrite, the 16 tensors read" \
	"$m: ${wrong:-0} with the new object's bytes, since stat(2) still shows the old size" \
	"and mtime; hence stat_cache_expire=1 on R"
umount_fs "$P2"
remote_umount "$R2"

MOUNT_PID=$P_PID
umount_fs "$P"
note "ok"
