#!/bin/sh
# SPDX-License-Identifier: MIT
# remote-sshfs: placefs stacked on sshfs, served by a private sshd on a high
# port of 127.0.0.1 (its own host key and configuration under the test's
# directory, an authorized key made for the test; stopped at the end). Not in
# make check (it needs openssh-server and sshfs): scripts/test's remote layer
# runs it. It exits 77 only where /dev/fuse or fusermount3 is absent.
#
# The checkpoint (placefs-mkckpt, 3 shards, an index, a config.json) lies in
# the server's directory; placefs mounts it through sshfs (S: ro,reconnect,
# ServerAliveInterval=2,ServerAliveCountMax=2,dir_cache=no, as README.md's
# fstab line) with a host ring and a staging limit that leaves a few tensors
# cpu-placed. The checks of tests/remote-common.sh (verify_mount, cat, mmap,
# placefs-stage --all --verify, load_state_dict and iter_weights on the cpu,
# the views with the stdlib safetensors reader), then the faults, every read
# compared with the source (other bytes fail the test at once):
#  1. a shard rewritten on the server with another size, then with the same
#     size and other bytes (a new mtime): ESTALE once sshfs shows it (the
#     time it took is printed), the others keep serving, the log names the
#     shard; put back with cp -p, it serves again;
#  2. sshd and its session stopped during a load of a 16 MiB shard and
#     started again: reads get the source's bytes or EIO, the log names the
#     shard, the daemon stays up, and once sshfs has reconnected every
#     tensor reads again (placefs opens the shard again when reads through
#     the descriptor it had fail: sshfs answers EIO on descriptors opened
#     before the reconnection);
#  3. S lazily unmounted under placefs: ESTALE; sshfs mounted again on the
#     same directory: every tensor and the views' config.json serve again,
#     the old sshfs process exits;
#  4. a measurement, not a check: with sshfs's default attribute cache
#     (dcache_timeout=20) a same-size rewrite stays invisible to stat(2) for
#     up to 20 s; the tensors then read with the new bytes are counted.
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
. "$(dirname "$0")/lib.sh"
require_fuse
. "$top_srcdir/tests/remote-common.sh"

command -v sshfs >/dev/null 2>&1 || fail "sshfs is not installed (Debian: apt-get install sshfs)"
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
[ -x "$SSHD" ] || fail "sshd is not installed (Debian: apt-get install openssh-server)"
command -v ssh-keygen >/dev/null 2>&1 || fail "ssh-keygen is not installed (openssh-client)"

cd "$TMP" || fail "cd $TMP"
SRC=$TMP/src
SERVED=$TMP/served
S1=model-00001-of-00003.safetensors
S2=model-00002-of-00003.safetensors
tmo 30 "$MKCKPT" -q --moe 2:256:4:128:512 --quant fp8 --shards 3 --index "$SRC" ||
	fail "placefs-mkckpt"
printf '{"architectures": ["TestForCausalLM"], "model_type": "test"}\n' >"$SRC/config.json"
mkdir -p "$SERVED" && cp -p "$SRC"/* "$SERVED"/ || fail "copy to the server's directory"

mkdir -p ssh && chmod 700 ssh
ssh-keygen -q -t ed25519 -N '' -f ssh/host_ed25519 || fail "ssh-keygen (host key)"
ssh-keygen -q -t ed25519 -N '' -f ssh/id_ed25519 || fail "ssh-keygen (user key)"
cp ssh/id_ed25519.pub ssh/authorized_keys
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
USER_NAME=$(id -un)
cat >ssh/sshd_config <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $TMP/ssh/host_ed25519
PidFile $TMP/ssh/sshd.pid
AuthorizedKeysFile $TMP/ssh/authorized_keys
AllowUsers $USER_NAME
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
EOF
# The privilege separation directory sshd wants when it runs as root.
[ "$(id -u)" -ne 0 ] || mkdir -p /run/sshd
"$SSHD" -t -f ssh/sshd_config || fail "sshd refuses its configuration"
port_open() {
	"$PYTHON" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' \
		"$PORT" 2>/dev/null
}
sshd_start() {
	"$SSHD" -D -e -f "$TMP/ssh/sshd_config" >>"$TMP/sshd.log" 2>&1 &
	SSHD_PID=$!
	REMOTE_SERVERS="$REMOTE_SERVERS $SSHD_PID"
	wait_for 10 port_open || fail "sshd does not listen on port $PORT: $(cat "$TMP/sshd.log")"
}
SSH_OPTS="IdentityFile=$TMP/ssh/id_ed25519,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null"
SSH_OPTS="$SSH_OPTS,BatchMode=yes,LogLevel=ERROR"
SOPTS=ro,reconnect,ServerAliveInterval=2,ServerAliveCountMax=2,dir_cache=no
# sshmount NAME MNT [OPTIONS]: the server's directory on MNT through sshfs.
sshmount() {
	remote_mount_fuse "$1" "$2" sshfs -f -p "$PORT" -o "$SSH_OPTS${3:+,$3}" \
		"$USER_NAME@127.0.0.1:$SERVED" "$2"
}

sshd_start
note "$("$SSHD" -V 2>&1 | head -n 1) on 127.0.0.1:$PORT; $(sshfs --version 2>&1 | grep -i '^sshfs version')"
S=$TMP/s
P=$TMP/p
sshmount S "$S" "$SOPTS"
mount_fs "$S" "$P" -o device=host,buffer_size=$LIMIT
P_PID=$MOUNT_PID
P_LOG=$MOUNT_LOG
grep -q 'FUSE file system: staging reads are not held back' "$P_LOG" ||
	fail "placefs did not leave the disk gate off for shards on sshfs"
remote_checks "$P" "$SRC"
! grep -q 'lookahead:' "$P_LOG" || fail "the lookahead is on for shards on sshfs (only s3fs's default)"
[ "$(stat_get "$P" staging.lookahead_reads)" = 0 ] || fail "lookahead reads on sshfs"
[ "$(stat_get "$P" direct_reads)" = 0 ] || fail "direct reads are on for shards on sshfs (only s3fs's default)"
# -o direct_reads=1 on another FUSE client: every byte still the source's.
D=$TMP/d
mount_fs "$S" "$D" -o device=host,buffer_size=$LIMIT,direct_reads=1
[ "$(stat_get "$D" direct_reads)" = 1 ] || fail "-o direct_reads=1 on sshfs: direct_reads is not 1"
tmo 120 "$PYTHON" "$TMP/verify_mount.py" "$D" "$SRC" --limit "$LIMIT" --ranges 2 ||
	fail "verify_mount with -o direct_reads=1 on sshfs"
tmo 60 "$STAGE" --all "$D" --verify -q >"$TMP/stage.out" 2>&1 || {
	cat "$TMP/stage.out"
	fail "placefs-stage --all --verify with -o direct_reads=1 on sshfs"
}
umount_fs "$D"
note "-o direct_reads=1 on sshfs: bytes exact"

# ---- 1. a shard rewritten on the server ----
{
	cat "$SRC/$S2"
	head -c 4096 /dev/zero
} >"$SERVED/$S2"
t=$(now_ms)
wait_read 15 "$P" "$SRC" --shard "$S2" --direct --expect ESTALE ||
	fail "reads of $S2 did not all fail with ESTALE within 15 s of its rewrite: $(cat wait_read.out)"
note "another size: every tensor of $S2 fails with ESTALE $(since "$t") s after the rewrite"
remote_read "$P" "$SRC" --shard "$S1" --direct >/dev/null || fail "$S1 does not read while $S2 is stale"
grep -q "shard $S/$S2 changed since mount" "$P_LOG" || fail "the log does not name $S2"
cp -p "$SRC/$S2" "$SERVED/$S2"
wait_read 15 "$P" "$SRC" --shard "$S2" --direct ||
	fail "$S2 put back (cp -p) does not serve again: $(cat wait_read.out)"
flipped "$SRC/$S2"
[ "$(date +%s)" -gt "$(stat -c %Y "$SRC/$S2")" ] || sleep 1
cp flipped "$SERVED/$S2"
t=$(now_ms)
wait_read 15 "$P" "$SRC" --shard "$S2" --direct --expect ESTALE ||
	fail "reads of $S2 did not all fail with ESTALE within 15 s of a same-size rewrite: $(cat wait_read.out)"
note "same size, other bytes, a new mtime: ESTALE $(since "$t") s after the rewrite" \
	"(every read before that returned the source's bytes)"
cp -p "$SRC/$S2" "$SERVED/$S2"
wait_read 15 "$P" "$SRC" --shard "$S2" --direct || fail "$S2 does not serve again: $(cat wait_read.out)"

# ---- 2. sshd stopped during a load, then started again ----
# BIG: one shard of 16 tensors of 1 MiB. The load during the outage reads the
# first 12 only, so the last 4 are not in the page cache whenever sshd stops
# (a load that ended first left nothing to read after the reconnection): they
# must come through sshfs after it reconnected, on a descriptor opened again.
BIG=$SERVED/big
# shellcheck disable=SC2046
tmo 30 "$MKCKPT" -q --seed 5 $(for i in $(seq 10 25); do
	printf -- '--tensor t%s:U8:1048576 ' "$i"
done) --shards 1 --index "$BIG" || fail "mkckpt big"
PB=$TMP/pb
mount_fs "$S/big" "$PB" -o device=host
PB_PID=$MOUNT_PID
PB_LOG=$MOUNT_LOG
remote_read "$PB" "$BIG" --first 2 --direct >/dev/null || fail "the first tensors of big"
(
	for i in 1 2 3; do
		remote_read "$PB" "$BIG" --first 12 --direct --expect OK,EIO || exit $?
	done
) >load.out 2>&1 &
LOAD=$!
sleep 0.2
stop_server "$SSHD_PID"
st=0
wait "$LOAD" || st=$?
[ "$st" -ne 2 ] || fail "a read during the outage returned other bytes: $(cat load.out)"
[ "$st" -eq 0 ] || fail "reads during the outage: $(cat load.out)"
remote_read "$PB" "$BIG" --last 4 --direct --expect EIO >out ||
	fail "with sshd stopped, reads of $PB: $(cat out), expected EIO"
note "sshd stopped during a load: every read got the source's bytes or EIO" \
	"($(tr '\n' ' ' <load.out)), then EIO"
kill -0 "$PB_PID" 2>/dev/null || fail "placefs died with sshd stopped"
# The daemon names the shard with the error its reads met, or, where sshfs's
# stat answered a smaller size meanwhile (seen once in CI, 16778416 -> 12697600
# bytes), with that: either way its readers now get EIO.
grep -Eq "shard (/.*|'.*'): .*(Input/output error|Bad address)|shard /.* shrank from [0-9]+ to [0-9]+ bytes: reads of its tensors now fail with EIO" \
	"$PB_LOG" || fail "the log does not name the shard that failed"
sshd_start
t=$(now_ms)
wait_read 30 "$PB" "$BIG" --direct ||
	fail "every tensor does not read once sshd is back: $(cat wait_read.out)"
note "sshd back: every tensor reads again after $(since "$t") s"
grep -q "opened again, its reads failing" "$PB_LOG" ||
	fail "the log does not say the shard was opened again after sshfs reconnected"
umount_fs "$PB"
# $P's descriptors also predate the reconnect: its first read may meet EIO and
# open the shard again (once per shard and quiet period), as $PB's did.
wait_read 30 "$P" "$SRC" --direct ||
	fail "$P after sshfs reconnected: $(cat "$TMP/wait_read.out")"

# ---- 3. S lazily unmounted under placefs, then mounted again ----
old=$REMOTE_PID_S
tmo 10 fusermount3 -u -z "$S" || fail "fusermount3 -u -z $S (umount -l)"
wait_read 10 "$P" "$SRC" --direct --expect ESTALE,EIO ||
	fail "with sshfs gone, reads of $P: $(cat wait_read.out)"
kill -0 "$P_PID" 2>/dev/null || fail "placefs died when sshfs was unmounted"
sshmount S "$S" "$SOPTS"
t=$(now_ms)
wait_read 15 "$P" "$SRC" --direct || fail "sshfs mounted again: $(cat wait_read.out)"
wait_for 5 tmo 5 cmp -s "$P/.placefs/views/all/config.json" "$SRC/config.json" ||
	fail "views/all/config.json does not serve again"
note "sshfs mounted again: every tensor reads again after $(since "$t") s"
grep -q "is back on a file system mounted again" "$P_LOG" ||
	fail "the log does not say the shards are read from the new mount"
wait_for 10 gone "$old" ||
	fail "the sshfs unmounted with umount -l still runs: placefs holds its files"
remote_checks "$P" "$SRC"

# ---- 4. sshfs's default attribute cache hides a same-size rewrite (measured) ----
S0=$TMP/s0
P0=$TMP/p0
sshmount S0 "$S0" ro
mount_fs "$S0" "$P0" -o device=host,buffer_size=$LIMIT
remote_read "$P0" "$SRC" --shard "$S2" --first 1 --direct >/dev/null || fail "$S2 through S0"
flipped "$SRC/$S2"
[ "$(date +%s)" -gt "$(stat -c %Y "$SRC/$S2")" ] || sleep 1
cp flipped "$SERVED/$S2"
sleep 2
m=$(remote_read "$P0" "$SRC" --shard "$S2" --direct --measure)
wrong=$(printf '%s\n' "$m" | sed -n 's/.*"WRONG": \([0-9]*\).*/\1/p')
note "sshfs's default attribute cache (dcache_timeout=20): 2 s after a same-size rewrite" \
	"the tensors of $S2 read $m: ${wrong:-0} with the new bytes, since stat(2) still shows" \
	"the old mtime; hence dir_cache=no on S"
cp -p "$SRC/$S2" "$SERVED/$S2"
umount_fs "$P0"
remote_umount "$S0"

MOUNT_PID=$P_PID
umount_fs "$P"
note "ok"
