#!/bin/sh
# SPDX-License-Identifier: MIT
# mount-stage: GPU staging end to end through live mounts, with the host
# backend (-o device=host: the ring is a shared-memory object, so the whole
# protocol runs without a GPU):
#   - the seed: limit 8 MiB, a 1 MiB tensor staged in copy and borrow mode and
#     a 9 MiB one refused for staging (EFBIG, logged) and read on the cpu,
#     both byte-exact; the ring and host buffer in the log, plan and stats;
#   - every malformed ioctl refused with its errno, the daemon still serving
#     (tests/test_stage_ioctl bad);
#   - five 4 MiB tensors through an 8 MiB ring in borrow mode (it wraps), each
#     checked before release;
#   - backpressure: with the ring leased, a second client times out, and
#     without a timeout waits until the first releases; a signal ends a wait
#     (EINTR); a client killed with SIGKILL loses its leases and the whole
#     ring is stageable again; SIGTERM ends a daemon with a client waiting;
#   - a multi-shard checkpoint: placefs-stage --all --verify in both modes in
#     checkpoint order, copy mode batched (its default) and one a request
#     (--batch 1), with --batch N (ranges of the plan, or entries by index;
#     a cpu file in a batch fails alone), the client library's batches
#     (test_stage_ioctl batch), 8 concurrent clients, 2 worker threads with 4 clients,
#     the ring's high-water mark within its size;
#   - the disk gate: shards dropped from the page cache staged through
#     -o disk_streams=1 (never two readers in the disk at once), =2 with four
#     clients at once, =0 no gate;
#   - -o ring_size three times the limit: the ring's size in the plan, stats,
#     ring info ioctl and log, every gpu tensor staged byte-exact; below the
#     limit refused (exit 2); ignored with -o device=none;
#   - -o device=none, the default device, cuda:0 without a GPU (exit 12),
#     bad -o device/host_buffer/ring_size values, the daemonized start.
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"
require_fuse
# The installed package (make install-python into $TMP), never python/ itself.
. "$top_srcdir/tests/pyinstall.sh"
py_install

STAGE=$top_builddir/tools/placefs-stage
TSI=$top_builddir/tests/test_stage_ioctl
[ -x "$STAGE" ] || fail "$STAGE is not built"
[ -x "$TSI" ] || fail "$TSI is not built"
unset INSTANTTENSOR_COPY

cd "$TMP" || fail "cd $TMP"
MP=$TMP/mnt

# ---- the seed: 8 MiB limit, 1 MiB staged, 9 MiB read on the cpu ------------------------------
tmo 20 "$MKCKPT" -q --seed 7 --tensor 'small:F32:262144' --tensor 'large:F32:2359296' \
	seed.safetensors || fail "mkckpt seed"
mount_fs seed.safetensors "$MP" -o buffer_size=8388608,device=host
grep -Eq '^placefs: staging: host \(/placefs-[0-9]+-[0-9]+\): ring 8388608 bytes \(8 MiB, one allocation\), host buffer 67108864 bytes \(64 MiB: 32 chunks of 2 MiB\), prefetch on, direct copies on, zero-copy off, at most 2 staging reads in the disk at once \(-o disk_streams\)$' \
	"$MOUNT_LOG" || fail "no staging line in the log"
# .placefs/plan is placefs-plan's text plus one staging line; plan.json is untouched.
tmo 20 "$PLAN" --buffer-size 8388608 seed.safetensors >plan.txt || fail "placefs-plan"
tmo 20 "$PLAN" --json --buffer-size 8388608 seed.safetensors >plan.json || fail "placefs-plan --json"
head -n "$(wc -l <plan.txt)" "$MP/.placefs/plan" | cmp -s - plan.txt ||
	fail ".placefs/plan does not start with placefs-plan's plan"
[ "$(($(wc -l <"$MP/.placefs/plan") - $(wc -l <plan.txt)))" -eq 1 ] ||
	fail ".placefs/plan has more than one line added"
tail -n 1 "$MP/.placefs/plan" | grep -Eq '^staging: device host \(/placefs-[0-9]+-[0-9]+\), ring 8388608 bytes \(8 MiB\), host buffer 67108864 bytes \(64 MiB\)$' ||
	fail "staging line of .placefs/plan: $(tail -n 1 "$MP/.placefs/plan")"
cmp -s "$MP/.placefs/plan.json" plan.json || fail "plan.json differs from placefs-plan --json"
[ "$(stat_get "$MP" staging.ring_bytes)" = 8388608 ] || fail "stats: ring_bytes"
[ "$(stat_get "$MP" staging.host_buffer_bytes)" = 67108864 ] || fail "stats: host_buffer_bytes"
[ "$(stat_get "$MP" staging.backend)" = host ] || fail "stats: backend"

for mode in copy borrow; do
	out=$(tmo 30 "$STAGE" --mode $mode --verify "$MP/small") || fail "placefs-stage $mode: $out"
	echo "$out" | grep -q "^placefs-stage: 1 of 1 tensors staged ($mode), 1048576 bytes" ||
		fail "placefs-stage $mode summary: $out"
	echo "$out" | grep -q '^verify: 1 of 1 tensors byte-exact$' || fail "verify line: $out"
	note "$(echo "$out" | tail -n 2 | head -n 1)"
	out=$(tmo 30 "$STAGE" --mode $mode --verify --all "$MP") || fail "--all $mode: $out"
	echo "$out" | grep -q '^verify: 1 of 1 tensors byte-exact$' || fail "--all $mode: $out"
done
# The cpu-placed tensor is refused (EFBIG, with a log line naming it and the limit) ...
st=0
out=$(tmo 30 "$STAGE" --mode borrow "$MP/large" 2>&1) || st=$?
[ "$st" -eq 1 ] || fail "placefs-stage of the cpu tensor: exit $st: $out"
echo "$out" | grep -q 'EFBIG' || fail "placefs-stage of the cpu tensor: $out"
grep -q 'staging: tensor "large" (9437184 bytes) is placed on the cpu and is not staged: staging limit 8 MiB' \
	"$MOUNT_LOG" || fail "no log line for the refused cpu tensor"
# ... and both read byte-exact on the cpu.
tmo 30 "$PYTHON" "$TMP/verify_mount.py" "$MP" seed.safetensors --limit 8388608 ||
	fail "verify_mount on the seed"
# The mode comes from INSTANTTENSOR_COPY unless --mode says.
out=$(INSTANTTENSOR_COPY=0 tmo 30 "$STAGE" "$MP/small") || fail "INSTANTTENSOR_COPY=0: $out"
echo "$out" | grep -q '(borrow)' || fail "INSTANTTENSOR_COPY=0 did not borrow: $out"
out=$(INSTANTTENSOR_COPY=1 tmo 30 "$STAGE" "$MP/small") || fail "INSTANTTENSOR_COPY=1: $out"
echo "$out" | grep -q '(copy)' || fail "INSTANTTENSOR_COPY=1 did not copy: $out"
st=0
out=$(INSTANTTENSOR_COPY=maybe tmo 30 "$STAGE" "$MP/small" 2>&1) || st=$?
[ "$st" -eq 2 ] && echo "$out" | grep -q "INSTANTTENSOR_COPY must be 0 or 1, got 'maybe'" ||
	fail "INSTANTTENSOR_COPY=maybe: exit $st: $out"
st=0
out=$(tmo 30 "$STAGE" --mode steal "$MP/small" 2>&1) || st=$?
[ "$st" -eq 2 ] || fail "--mode steal: exit $st: $out"

# Copy destinations of clients that exited do not stay mapped in the daemon: 20
# placefs-stage copy runs (each maps a fresh 1 MiB shm destination, which the
# daemon imports) leave no client mapping, no cached destination, and RssShmem
# within the 8 MiB ring, within a few seconds (the daemon sweeps once a second).
client_maps() {
	grep -c '/dev/shm/placefs-client-' "/proc/$MOUNT_PID/maps"
}
for i in $(seq 1 20); do
	tmo 30 "$STAGE" -q --mode copy "$MP/small" >/dev/null || fail "placefs-stage copy run $i"
done
no_client_dests() {
	[ "$(client_maps)" -eq 0 ] && [ "$(stat_get "$MP" staging.dests)" -eq 0 ]
}
ok=0
wait_for 6 no_client_dests && ok=1
shmem=$(awk '/^RssShmem:/ { print $2 }' "/proc/$MOUNT_PID/status")
[ "$ok" -eq 1 ] || fail "after 20 copy runs exited, the daemon still maps $(client_maps) client destinations ($(stat_get "$MP" staging.dests) cached; RssShmem $shmem kB)"
[ "$shmem" -le $((8192 + 1024)) ] || fail "daemon RssShmem is $shmem kB after the copy runs exited (ring: 8192 kB)"
note "20 copy clients exited: 0 destinations mapped, RssShmem $shmem kB (ring 8192 kB)"
# shm destinations are no CUDA IPC imports: the import counters are there, and 0.
for k in dest_imports dest_import_ns dest_import_waits; do
	[ "$(stat_get "$MP" staging.$k)" = 0 ] || fail "staging.$k is '$(stat_get "$MP" staging.$k)' after shm copies, want 0"
done

# Every malformed request, with the daemon serving after each.
out=$(tmo 60 "$TSI" bad "$MP" "$MP/small" "$MP/large") || fail "bad ioctls: $out"
note "$out"
[ "$(stat_get "$MP" staging.refused)" -gt 50 ] || fail "stats: refused requests not counted"
umount_fs "$MP"
ls /dev/shm | grep -q "^placefs-$MOUNT_PID-" && fail "the ring's shm object outlived the mount"

# ---- an 8 MiB ring: wrap-around, backpressure, killed clients ---------------------------------
tmo 20 "$MKCKPT" -q --seed 8 --tensor 'w.0:BF16:2097152' --tensor 'w.1:BF16:2048x1024' \
	--tensor 'w.2:BF16:2097152' --tensor 'w.3:BF16:1024x2048' --tensor 'w.4:BF16:2097152' \
	--tensor 'full:U8:8388608' wrap.safetensors || fail "mkckpt wrap"
mount_fs wrap.safetensors "$MP" -o buffer_size=8M,device=host
W="$MP/w.0 $MP/w.1 $MP/w.2 $MP/w.3 $MP/w.4"
# shellcheck disable=SC2086
out=$(tmo 60 "$TSI" wrap $W) || fail "wrap: $out"
echo "$out" | grep -Eq '^wraps [1-9]' || fail "the ring did not wrap: $out"
note "$(echo "$out" | tail -n 1), $(echo "$out" | grep wraps)"

# A holder leases the whole ring until its stdin (a fifo whose writer is fd 7)
# closes; the clients started meanwhile must not inherit fd 7.
mkfifo hold.in
rm -f hold.out # wait_line must not see a previous client's line
"$TSI" hold "$MP/w.0" "$MP/w.1" <hold.in >hold.out 2>&1 &
HOLD=$!
exec 7>hold.in
wait_line hold.out '^held$' || fail "holder: $(cat hold.out)"
[ "$(stat_get "$MP" staging.leases)" = 2 ] || fail "stats: 2 leases expected"
out=$(tmo 10 "$TSI" try "$MP/w.2" 300) && fail "a stage with the ring leased did not wait: $out"
[ "$out" = ETIMEDOUT ] || fail "stage with the ring leased: $out, expected ETIMEDOUT"
# Without a timeout the second client waits for the release.
rm -f try.out # wait_line must not see a previous client's line
"$TSI" try "$MP/w.2" 0 >try.out 2>&1 7>&- &
TRY=$!
wait_line try.out '^waiting$' || fail "second client: $(cat try.out)"
# The scenario, not a wait for a state: the client must still be waiting
# 0.6 s later (and report a wait of 0.4 s or more once served).
sleep 0.6
kill -0 "$TRY" 2>/dev/null || fail "the second client did not wait: $(cat try.out)"
exec 7>&-
wait "$HOLD" || fail "holder: $(cat hold.out)"
wait "$TRY" || fail "the waiting client failed: $(cat try.out)"
wait_ns=$(sed -n 's/^ok wait_ns=\([0-9]*\) .*/\1/p' try.out)
[ -n "$wait_ns" ] && [ "$wait_ns" -ge 400000000 ] || fail "waited $wait_ns ns: $(cat try.out)"
note "backpressure: ETIMEDOUT while leased, then served after $wait_ns ns"

# A signal ends a wait with EINTR (FUSE interrupt), and the daemon goes on.
rm -f hold.out # wait_line must not see a previous client's line
"$TSI" hold "$MP/full" <hold.in >hold.out 2>&1 &
HOLD=$!
exec 7>hold.in
wait_line hold.out '^held$' || fail "holder of full: $(cat hold.out)"
rm -f try.out # wait_line must not see a previous client's line
"$TSI" try "$MP/w.3" 0 --sigusr1 >try.out 2>&1 7>&- &
TRY=$!
wait_line try.out '^waiting$' || fail "interrupted client: $(cat try.out)"
# A signal every 0.1 s until the client ends (4 s at most): one sent before the
# client's request reached the daemon would interrupt nothing.
for i in $(seq 1 40); do
	sleep 0.1
	kill -USR1 "$TRY" 2>/dev/null || break
done
wait "$TRY" && fail "the interrupted stage succeeded: $(cat try.out)"
grep -q '^EINTR$' try.out || fail "interrupted stage: $(cat try.out), expected EINTR"
note "a signal ends a wait with EINTR"

# SIGKILL of a client in the middle of a stage (waiting for ring space): the
# daemon drops the request; the checks after the holder's SIGKILL below (the
# whole ring stages again, no lease left) prove nothing of it stayed behind.
rm -f try.out # wait_line must not see a previous client's line
"$TSI" try "$MP/w.3" 0 >try.out 2>&1 7>&- &
TRY=$!
wait_line try.out '^waiting$' || fail "client to kill mid-stage: $(cat try.out)"
kill -9 "$TRY"
wait "$TRY" 2>/dev/null && fail "the client killed mid-stage exited 0"
kill -0 "$MOUNT_PID" || fail "the daemon died with a client killed mid-stage"
note "a client killed mid-stage: the daemon keeps serving"

# SIGKILL: the holder's leases end with its file handles.
kill -9 "$HOLD"
wait "$HOLD" 2>/dev/null
exec 7>&-
out=$(tmo 10 "$TSI" try "$MP/full" 5000) || fail "the ring did not come back after SIGKILL: $out"
wait_stat "$MP" staging.leases 0
note "leases of a killed client reclaimed: the full 8 MiB ring staged again"
for mode in copy borrow; do
	out=$(tmo 60 "$STAGE" --mode $mode --verify -q --all "$MP") || fail "--all $mode: $out"
	echo "$out" | grep -q '^verify: 6 of 6 tensors byte-exact$' || fail "--all $mode: $out"
done
hw=$(stat_get "$MP" staging.ring_high_water)
[ "$hw" -le 8388608 ] && [ "$hw" -gt 0 ] || fail "ring high-water $hw outside (0, 8 MiB]"
[ "$(stat_get "$MP" staging.errors)" -ge 1 ] || fail "stats: the timeout was not counted as an error"
[ "$(stat_get "$MP" staging.waits)" -ge 2 ] || fail "stats: waits not counted"

# SIGTERM with a client waiting: the wait ends and the daemon exits 0.
rm -f hold.out # wait_line must not see a previous client's line
"$TSI" hold "$MP/full" <hold.in >hold.out 2>&1 &
HOLD=$!
exec 7>hold.in
wait_line hold.out '^held$' || fail "holder of full: $(cat hold.out)"
waits0=$(stat_get "$MP" staging.waits)
rm -f try.out # wait_line must not see a previous client's line
"$TSI" try "$MP/w.0" 0 >try.out 2>&1 7>&- &
TRY=$!
wait_line try.out '^waiting$' || fail "waiting client: $(cat try.out)"
# The client says "waiting" just before its request; the request is in the
# daemon's wait once the ring has counted one more wait.
waits_above() {
	[ "$(stat_get "$MP" staging.waits)" -gt "$1" ]
}
wait_for 10 waits_above "$waits0" || fail "the waiting client's stage never waited for the ring"
kill -TERM "$MOUNT_PID"
st=0
wait_daemon "$MOUNT_PID" || st=$?
[ "$st" -eq 0 ] || fail "daemon exit status $st after SIGTERM with a waiting client"
wait "$TRY" && fail "the waiting client succeeded after SIGTERM"
note "SIGTERM with a waiting client: daemon exited 0, client got $(cat try.out)"
exec 7>&-
kill -9 "$HOLD" 2>/dev/null
wait "$HOLD" 2>/dev/null
wait_unmounted "$MP" || fusermount3 -u -z "$MP"
MOUNT_LOG=""

# Few workers: two waiting stages would take both of -o max_threads=2 (and the
# one of -s) and leave none for the RELEASE that ends their wait; stages
# beyond half of the workers run on threads of their own instead.
for opts in max_threads=2 -s; do
	if [ "$opts" = -s ]; then
		mount_fs wrap.safetensors "$MP" -s -o buffer_size=8M,device=host
	else
		mount_fs wrap.safetensors "$MP" -o "buffer_size=8M,device=host,$opts"
	fi
		rm -f hold.out # wait_line must not see a previous client's line
		"$TSI" hold "$MP/full" <hold.in >hold.out 2>&1 &
	HOLD=$!
	exec 7>hold.in
	wait_line hold.out '^held$' || fail "$opts: holder: $(cat hold.out)"
	pids=""
	for k in 0 1 2; do
		rm -f try.$k.out # wait_line must not see a previous client's line
		"$TSI" try "$MP/w.$k" 0 >try.$k.out 2>&1 7>&- &
		pids="$pids $!"
	done
	for k in 0 1 2; do
		wait_line try.$k.out '^waiting$' || fail "$opts: client $k: $(cat try.$k.out)"
	done
	# The scenario: 0.5 s later every stage must still be waiting.
	sleep 0.5
	for p in $pids; do
		kill -0 "$p" 2>/dev/null || fail "$opts: a stage did not wait for the leased ring: $(cat try.0.out try.1.out try.2.out | tr "\n" " ")"
	done
	exec 7>&-
	wait "$HOLD" || fail "$opts: the holder could not release: $(cat hold.out)"
	k=0
	for p in $pids; do
		wait "$p" || fail "$opts: waiting stage $k failed: $(cat try.$k.out)"
		k=$((k + 1))
	done
	n=$(stat_get "$MP" staging.stage_threads)
	[ "$n" -ge 2 ] || fail "$opts: $n stages ran on threads of their own, expected 2 or more"
	note "$opts: 3 stages waited for the ring and were served after the release ($n on threads)"
	umount_fs "$MP"
done

# ---- a multi-shard checkpoint: --all in checkpoint order, concurrent clients ------------------
tmo 30 "$MKCKPT" -q --seed 11 --tensor 'big.0:F32:600000' --tensor '.odd/name%x:BF16:333' \
	--tensor 'empty:F16:0' --random 60 --max-bytes 1536K --shards 3 --index multi ||
	fail "mkckpt multi"
mount_fs multi "$MP" -o buffer_size=2M,device=host
"$PYTHON" - "$MP" >gpu.order <<'EOF' || fail "plan.json"
import json, os, sys
p = json.load(open(os.path.join(sys.argv[1], ".placefs", "plan.json")))
for t in p["tensors"]:
    if t["placement"] == "gpu":
        print(os.path.join(sys.argv[1], t["filename"]))
EOF
ngpu=$(wc -l <gpu.order)
[ "$ngpu" -gt 40 ] || fail "multi: only $ngpu gpu tensors"
# Copy mode batches by default (up to 256 a request into one destination: here all of them
# fit one); --batch 1 is one tensor a request, as borrow mode always is.
for how in copy "copy --batch 1" borrow; do
	# shellcheck disable=SC2086 # the options are split on purpose
	out=$(tmo 60 "$STAGE" --mode $how --verify --all "$MP") || fail "multi --all $how: $out"
	echo "$out" | grep -q "^verify: $ngpu of $ngpu tensors byte-exact$" || fail "multi $how: $out"
	echo "$out" | awk '$NF ~ /^\// { print $NF }' | cmp -s - gpu.order ||
		fail "multi $how: --all did not go in checkpoint order"
	reqs=$(echo "$out" | sed -n 's/^placefs-stage: .*; \([0-9]*\) requests\{0,1\}; ring .*/\1/p')
	if [ "$how" = copy ]; then
		[ "$reqs" = 1 ] || fail "multi copy: $reqs requests, want 1 batch of $ngpu: $out"
		[ "$(echo "$out" | grep -c " batch 1 of $ngpu  verified  ")" = "$ngpu" ] ||
			fail "multi copy: not one batch of $ngpu: $out"
	else
		[ "$reqs" = "$ngpu" ] || fail "multi $how: $reqs requests, want $ngpu (one a tensor): $out"
		! echo "$out" | grep -q " batch [0-9]* of " || fail "multi $how batched: $out"
	fi
	note "multi $how: $(echo "$out" | grep '^placefs-stage: ')"
done
# --batch: the same tensors, up to N a request (--all: ranges of the plan; files: by index).
for b in 16 7; do
	out=$(tmo 60 "$STAGE" --mode copy --batch $b --verify --all "$MP") || fail "--batch $b: $out"
	echo "$out" | grep -q "^verify: $ngpu of $ngpu tensors byte-exact$" || fail "--batch $b: $out"
	echo "$out" | awk '$NF ~ /^\// { print $NF }' | cmp -s - gpu.order ||
		fail "--batch $b: --all did not go in checkpoint order"
	echo "$out" | grep -q " batch [0-9]* of $b  verified  " || fail "--batch $b lines: $out"
	note "multi --batch $b: $(echo "$out" | grep '^placefs-stage: ')"
done
# shellcheck disable=SC2046 # one file name per line, none with spaces
set -- $(head -n 9 gpu.order)
st=0
out=$(tmo 60 "$STAGE" --batch 4 --verify "$@" "$MP/big.0" "$MP/random.0" 2>&1) || st=$?
[ "$st" -eq 1 ] || fail "--batch with a cpu file: exit $st: $out"
echo "$out" | grep -q "big.0: File too large (not staged: placed on the cpu) \[EFBIG\]" ||
	fail "--batch with a cpu file: $out"
echo "$out" | grep -q "^placefs-stage: 10 of 11 tensors staged (copy)" || fail "--batch: $out"
echo "$out" | grep -q "^verify: 10 of 11 tensors byte-exact$" || fail "--batch verify: $out"
for bad in "--batch 0" "--batch 257" "--batch 2x" "--batch 4 --mode borrow" \
	"--batch 4 --slice 0:0:1"; do
	st=0
	# shellcheck disable=SC2086 # the options are split on purpose
	out=$(tmo 30 "$STAGE" $bad "$MP/random.0" 2>&1) || st=$?
	[ "$st" -eq 2 ] && echo "$out" | grep -q -- "--batch" || fail "$bad: exit $st: $out"
done
# The client library's batches: every gpu tensor by plan index and as one range of the plan,
# byte-exact; entries that fail alone (cpu-placed, past the plan, past the destination).
# shellcheck disable=SC2046 # one file name per line, none with spaces
out=$(tmo 60 "$TSI" batch "$MP/big.0" $(cat gpu.order) 2>&1) || fail "client batches: $out"
note "$out"
# clients NAME COUNT VERIFIED OPTION...: COUNT placefs-stage --verify -q --all clients
# of $MP at once (the even ones in borrow mode when OPTION is "alternate"), each
# output in NAME.K.out; each must succeed and, unless VERIFIED is -, say it
# verified VERIFIED tensors.
clients() {
	_cl_name=$1 _cl_n=$2 _cl_v=$3
	shift 3
	_cl_pids=
	_cl_k=1
	while [ "$_cl_k" -le "$_cl_n" ]; do
		if [ "$1" = alternate ]; then
			_cl_mode=copy
			[ $((_cl_k % 2)) -eq 0 ] && _cl_mode=borrow
			"$STAGE" --mode $_cl_mode --verify -q --all "$MP" >"$_cl_name.$_cl_k.out" 2>&1 &
		else
			"$STAGE" "$@" --verify -q --all "$MP" >"$_cl_name.$_cl_k.out" 2>&1 &
		fi
		_cl_pids="$_cl_pids $!"
		_cl_k=$((_cl_k + 1))
	done
	_cl_k=0
	for _cl_p in $_cl_pids; do
		_cl_k=$((_cl_k + 1))
		wait "$_cl_p" || fail "$_cl_name client $_cl_k failed: $(cat "$_cl_name.$_cl_k.out")"
		[ "$_cl_v" = - ] ||
			grep -q "^verify: $_cl_v of $_cl_v tensors byte-exact$" "$_cl_name.$_cl_k.out" ||
			fail "$_cl_name client $_cl_k: $(cat "$_cl_name.$_cl_k.out")"
	done
}
clients concurrent 8 "$ngpu" alternate
hw=$(stat_get "$MP" staging.ring_high_water)
[ "$hw" -le 2097152 ] || fail "ring high-water $hw > its 2 MiB"
[ "$(stat_get "$MP" staging.leases)" = 0 ] || fail "leases left after the concurrent clients"
[ "$(stat_get "$MP" staging.ring_used)" -le 2097152 ] || fail "ring_used beyond the ring"
note "8 concurrent clients: $ngpu tensors each verified, high-water $hw of 2097152"
# 12 batch clients at once: more than the daemon's workers lend to batches, so some requests
# are answered EAGAIN; the client library sends those again, and every client completes.
clients batch 12 "$ngpu" --batch 4
note "12 concurrent batch clients: $ngpu tensors each verified ($(stat_get "$MP" staging.busy) busy answers)"
# The cpu tensor of this checkpoint is refused by name.
out=$(tmo 30 "$STAGE" "$MP/big.0" 2>&1) && fail "big.0 (cpu) was staged: $out"
umount_fs "$MP"

# Two workers: stages beyond one waiting worker run on threads of their own.
mount_fs multi "$MP" -o buffer_size=2M,device=host,host_buffer=256K,max_threads=2,noprefetch
grep -q 'host buffer 262144 bytes (256 KiB: 32 chunks of 8 KiB), prefetch off, direct copies on, zero-copy off, at most 2 staging' "$MOUNT_LOG" ||
	fail "-o host_buffer=256K,noprefetch not in the log"
clients two-workers 4 - --mode borrow
[ "$(stat_get "$MP" staging.prefetch.issued)" = 0 ] || fail "-o noprefetch: prefetches were issued"
note "4 clients on 2 workers, 256 KiB host buffer, no prefetch: ok"
umount_fs "$MP"

# ---- the disk gate: bytes not in the page cache, at most -o disk_streams readers ---------------
# The multi-shard checkpoint with its shards dropped from the page cache
# (where the file system lets them go: not tmpfs), staged whole with one disk
# stream: the bytes exact, the stats' staging.disk counting the reads that
# took the slot and never more than one at once; disk_streams=0, no gate.
evict_multi() {
	"$PYTHON" - multi/*.safetensors <<'EOF' || fail "evicting the shards"
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
EOF
}
evict_multi
mount_fs multi "$MP" -o buffer_size=2M,device=host,disk_streams=1,noprefetch
grep -q 'zero-copy off, at most 1 staging reads in the disk at once (-o disk_streams)$' "$MOUNT_LOG" ||
	fail "disk_streams=1: not in the staging line of the log"
out=$(tmo 60 "$STAGE" --mode copy --all "$MP") || fail "disk_streams=1: $out"
out=$(tmo 60 "$STAGE" --mode copy --verify --all "$MP") || fail "disk_streams=1 --verify: $out"
echo "$out" | grep -q "^verify: $ngpu of $ngpu tensors byte-exact$" || fail "disk_streams=1: $out"
[ "$(stat_get "$MP" staging.disk.streams)" = 1 ] || fail "stats: staging.disk.streams"
peak=$(stat_get "$MP" staging.disk.peak)
dreads=$(stat_get "$MP" staging.disk.disk_reads)
creads=$(stat_get "$MP" staging.disk.cached_reads)
unknown=$(stat_get "$MP" staging.disk.unknown_reads)
seq=$(stat_get "$MP" staging.disk.sequential)
[ "$peak" -le 1 ] || fail "disk_streams=1: $peak readers in the disk at once"
[ "$seq" -le "$dreads" ] || fail "disk_streams=1: $seq sequential of $dreads gated reads"
[ "$(stat_get "$MP" staging.disk.waiting)" = 0 ] || fail "disk_streams=1: readers left waiting"
if [ "$unknown" -gt 0 ]; then
	note "disk gate: this kernel cannot tell cached bytes (no cachestat(2)): $unknown reads ungated"
elif [ "$(stat -f -c %T multi)" = tmpfs ]; then
	[ "$dreads" -eq 0 ] && [ "$creads" -gt 0 ] || fail "tmpfs: $dreads gated reads, $creads cached"
	note "disk gate: the shards are on tmpfs, $creads reads all cached, none gated"
else
	# The first pass found the shards cold, the second (--verify) in the page cache.
	[ "$dreads" -gt 0 ] && [ "$peak" -eq 1 ] && [ "$creads" -gt 0 ] ||
		fail "cold shards: $dreads gated reads (peak $peak), $creads cached"
	note "disk gate: $dreads cold reads through 1 stream ($seq where the one before ended), then $creads from the page cache"
fi
umount_fs "$MP"
# The default (2 streams), prefetch on, four clients at once on cold shards:
# every byte exact, never more than two readers in the disk, nobody left waiting.
evict_multi
mount_fs multi "$MP" -o buffer_size=2M,device=host
grep -q 'at most 2 staging reads in the disk at once (-o disk_streams)$' "$MOUNT_LOG" ||
	fail "default: not 2 disk streams in the staging line of the log"
[ "$(stat_get "$MP" staging.disk.streams)" = 2 ] || fail "default: staging.disk.streams is not 2"
pids=
for c in 1 2 3 4; do
	tmo 60 "$STAGE" --mode copy --verify --all "$MP" >gate.$c.out 2>&1 &
	pids="$pids $!"
done
c=0
for p in $pids; do
	c=$((c + 1))
	wait "$p" || fail "disk_streams=2, client $c: $(cat gate.$c.out)"
	grep -q "^verify: $ngpu of $ngpu tensors byte-exact$" gate.$c.out ||
		fail "disk_streams=2, client $c: $(cat gate.$c.out)"
done
[ "$(stat_get "$MP" staging.disk.peak)" -le 2 ] || fail "disk_streams=2: more than 2 in the disk"
[ "$(stat_get "$MP" staging.disk.waiting)" = 0 ] || fail "disk_streams=2: readers left waiting"
note "disk gate, 2 streams, 4 clients: $(stat_get "$MP" staging.disk.disk_reads) gated reads, peak $(stat_get "$MP" staging.disk.peak)"
umount_fs "$MP"
mount_fs multi "$MP" -o buffer_size=2M,device=host,disk_streams=0
out=$(tmo 60 "$STAGE" --mode copy --verify --all "$MP") || fail "disk_streams=0: $out"
[ "$(stat_get "$MP" staging.disk.streams)" = 0 ] || fail "disk_streams=0: a gate"
[ "$(stat_get "$MP" staging.disk.disk_reads)" = 0 ] || fail "disk_streams=0: gated reads"
umount_fs "$MP"

# ---- -o ring_size: a ring three times the limit ----------------------------------------------
# A 2000000-byte limit with -o ring_size=6000000: the ring is 6000000 rounded up
# to 4 KiB (6000640 bytes) everywhere it shows (plan, plan.json, stats, the
# ring info ioctl, the log), and every gpu tensor still stages byte-exact.
mount_fs multi "$MP" -o buffer_size=2000000,ring_size=6000000,device=host
grep -Eq '^placefs: staging: host \(/placefs-[0-9]+-[0-9]+\): ring 6000640 bytes \(5\.72 MiB, one allocation\)' \
	"$MOUNT_LOG" || fail "ring_size: no staging line with the 6000640-byte ring in the log"
grep -q '^placefs: ring: 6000640 bytes (5.72 MiB), set by -o ring_size (at least 1.91 MiB, the staging limit)$' \
	"$MOUNT_LOG" || fail "ring_size: the plan summary in the log does not say who set the ring"
grep -q '^ring: 6000640 bytes (5.72 MiB), set by -o ring_size ' "$MP/.placefs/plan" ||
	fail "ring_size: .placefs/plan: $(grep '^ring' "$MP/.placefs/plan")"
[ "$(stat_get "$MP" staging.ring_bytes)" = 6000640 ] ||
	fail "ring_size: stats ring_bytes $(stat_get "$MP" staging.ring_bytes), expected 6000640"
"$PYTHON" - "$MP" <<'EOF' || fail "ring_size: plan.json or the ring info ioctl"
import json, os, sys
import placefs
mnt = sys.argv[1]
p = json.load(open(os.path.join(mnt, ".placefs", "plan.json")))
assert p["buffer_size"] == 2000000 and p["ring_bytes"] == 6000640, (p["buffer_size"], p["ring_bytes"])
gpu = [t for t in p["tensors"] if t["placement"] == "gpu"]
with open(os.path.join(mnt, gpu[0]["filename"]), "rb") as f:
    ri = placefs.ring_info(f)
assert ri.ring_bytes == 6000640, ri
EOF
# placefs-plan --ring-size with the same values prints the same plan.json.
tmo 20 "$PLAN" --json --buffer-size 2000000 --ring-size 6000000 multi >ring.json ||
	fail "placefs-plan --ring-size"
cmp -s "$MP/.placefs/plan.json" ring.json ||
	fail "ring_size: plan.json differs from placefs-plan --ring-size"
ngpu=$("$PYTHON" -c 'import json, sys
print(sum(t["placement"] == "gpu" for t in json.load(open(sys.argv[1]))["tensors"]))' ring.json)
for mode in copy borrow; do
	out=$(tmo 60 "$STAGE" --mode $mode --verify -q --all "$MP") || fail "ring_size --all $mode: $out"
	echo "$out" | grep -q "^verify: $ngpu of $ngpu tensors byte-exact$" ||
		fail "ring_size --all $mode: $out"
done
hw=$(stat_get "$MP" staging.ring_high_water)
[ "$hw" -gt 0 ] && [ "$hw" -le 6000640 ] || fail "ring_size: high-water $hw outside (0, 6000640]"
note "-o ring_size=6000000, limit 2000000: ring 6000640 bytes, $ngpu tensors verified in both modes, high-water $hw"
umount_fs "$MP"

# Below the limit: exit 2 (a bad option value), a message naming ring_size, nothing mounted.
for opts in buffer_size=2000000,ring_size=1999999,device=host buffer_size=2M,ring_size=1M; do
	st=0
	tmo 20 "$PLACEFS" -f -o "$opts" multi "$MP" >bad.out 2>&1 || st=$?
	[ "$st" -eq 2 ] || fail "-o $opts: exit $st, expected 2: $(cat bad.out)"
	grep -q '^placefs: -o ring_size: [0-9]* bytes (.*) is below the [0-9]*-byte (.*) staging limit: every gpu tensor up to the limit must fit the ring$' \
		bad.out || fail "-o $opts: message $(cat bad.out)"
	is_mounted "$MP" && fail "-o $opts left a mount"
done
note "ring_size below the limit refused: $(cat bad.out)"
# With -o device=none there is no ring: the option is ignored (and logged), even a small one.
mount_fs multi "$MP" -o buffer_size=2M,ring_size=1M,device=none
grep -q '^placefs: -o ring_size=1048576 ignored: staging is disabled (-o device=none), so there is no ring$' \
	"$MOUNT_LOG" || fail "device=none: ring_size not reported as ignored"
grep -q '^ring: 2097152 bytes (2 MiB), sized to the staging limit$' "$MP/.placefs/plan" ||
	fail "device=none: ring_size applied to the plan"
umount_fs "$MP"

# ---- staging off, the default, a CUDA device that is not there, bad values -------------------
mount_fs seed.safetensors "$MP" -o buffer_size=8M,device=none
grep -q '^placefs: staging: disabled (-o device=none)$' "$MOUNT_LOG" || fail "device=none log"
cmp -s "$MP/.placefs/plan" plan.txt || fail "device=none: .placefs/plan differs from placefs-plan"
out=$(tmo 10 "$TSI" try "$MP/small" 0) && fail "device=none staged: $out"
[ "$out" = ENODEV ] || fail "device=none stage: $out, expected ENODEV"
st=0
out=$(tmo 10 "$STAGE" "$MP/small" 2>&1) || st=$?
[ "$st" -eq 1 ] && echo "$out" | grep -q 'staging is disabled' || fail "device=none: $out"
[ "$(stat_get "$MP" staging.device)" = none ] || fail "device=none: stats"
umount_fs "$MP"

mount_fs seed.safetensors "$MP" -o buffer_size=8M
if [ "$(stat_get "$MP" staging.device)" = none ]; then
	grep -q '^placefs: staging: disabled (no -o device given' "$MOUNT_LOG" ||
		fail "default device: staging off, but the log does not say why"
	note "default device: staging off ($(grep 'staging: disabled' "$MOUNT_LOG"))"
	cmp -s "$MP/.placefs/plan" plan.txt || fail "default device: .placefs/plan differs"
else
	grep -q '^placefs: staging: cuda:0 ' "$MOUNT_LOG" || fail "default device: no staging line"
	note "default device: cuda:0"
fi
umount_fs "$MP"

# cuda:0, daemonized: either it mounts (a GPU is here) or the start fails with 12 and says why.
st=0
tmo 60 "$PLACEFS" -o buffer_size=8M,device=cuda:0 seed.safetensors "$MP" >cuda.out 2>&1 || st=$?
if [ "$st" -eq 0 ]; then
	is_mounted "$MP" || fail "cuda:0: exit 0 but nothing mounted"
	tmo 10 fusermount3 -u "$MP" || fail "cuda:0: unmount"
	note "cuda:0: mounted (a CUDA device is present)"
else
	[ "$st" -eq 12 ] || fail "cuda:0 without a GPU: exit $st, expected 12: $(cat cuda.out)"
	grep -Eq 'cuda:0 requested but (no CUDA device is available|placefs was built without CUDA).*nothing mounted' \
		cuda.out || fail "cuda:0 without a GPU: $(cat cuda.out)"
	is_mounted "$MP" && fail "cuda:0 without a GPU left a mount"
	note "cuda:0 refused: $(cat cuda.out)"
fi
for opt in device=cuda:1024 device=cuda:-1 device=gpu host_buffer=1K host_buffer=8G \
	host_buffer=lots ring_size=lots ring_size=0 ring_size=1M zero_copy=2 zero_copy=on \
	direct_copy=2 direct_copy=yes direct_copy= disk_streams=65 disk_streams=-1 disk_streams=two \
	lookahead=2 lookahead=on lookahead= direct_reads=2 direct_reads=on direct_reads=; do
	st=0
	tmo 20 "$PLACEFS" -f -o "$opt" seed.safetensors "$MP" >bad.out 2>&1 || st=$?
	[ "$st" -eq 2 ] || fail "-o $opt: exit $st, expected 2: $(cat bad.out)"
	grep -q "${opt%%=*}" bad.out || fail "-o $opt: message $(cat bad.out)"
done

# -o zero_copy: the host backend has no zero-copy path; asking for it says so,
# turning it off is silent, and staging works either way.
for zc in 1 0; do
	mount_fs seed.safetensors "$MP" -o buffer_size=8M,device=host,zero_copy=$zc
	if [ $zc = 1 ]; then
		grep -q 'zero-copy off (host (.*): this backend cannot stage without bounce buffers (zero-copy)), at most 2 staging' \
			"$MOUNT_LOG" || fail "-o zero_copy=1 on host: not in the log"
	else
		grep -q 'zero-copy off, at most 2 staging' "$MOUNT_LOG" || fail "-o zero_copy=0: not in the log"
	fi
	out=$(tmo 30 "$STAGE" --mode copy --verify "$MP/small") || fail "zero_copy=$zc: $out"
	[ "$(stat_get "$MP" staging.zero_copy.on)" = 0 ] || fail "zero_copy=$zc: zero-copy on, on host"
	umount_fs "$MP"
done
note "-o zero_copy=1 and 0 on the host backend: bounce buffers, logged"

# -o direct_copy: copy mode straight into the caller's memory (default, 1) or
# through the ring (0, or PLACEFS_STAGE_DIRECT=0 without the option): the same
# bytes either way; only the ring path leases and releases a span, and the
# option wins over the environment.
for dc in - 1 0 env0 env0+1; do
	case $dc in
	-) o=; e= ;;
	env0) o=; e=PLACEFS_STAGE_DIRECT=0 ;;
	env0+1) o=,direct_copy=1; e=PLACEFS_STAGE_DIRECT=0 ;;
	*) o=,direct_copy=$dc; e= ;;
	esac
	[ -z "$e" ] || export "${e?}"
	mount_fs seed.safetensors "$MP" -o "buffer_size=8M,device=host$o"
	unset PLACEFS_STAGE_DIRECT
	case $dc in
	- | 1 | env0+1) grep -q 'prefetch on, direct copies on, zero-copy' "$MOUNT_LOG" ;;
	*) grep -q 'prefetch on, direct copies off, zero-copy' "$MOUNT_LOG" ;;
	esac || fail "direct_copy $dc: the log says $(grep 'staging:' "$MOUNT_LOG")"
	rel0=$(stat_get "$MP" staging.released)
	out=$(tmo 30 "$STAGE" --mode copy --verify "$MP/small") || fail "direct_copy $dc: $out"
	on=$(stat_get "$MP" staging.direct.on)
	n=$(stat_get "$MP" staging.direct.stages)
	rel=$(($(stat_get "$MP" staging.released) - rel0))
	case $dc in
	- | 1 | env0+1) want_on=1 ;;
	*) want_on=0 ;;
	esac
	[ "$on" = "$want_on" ] || fail "direct_copy $dc: staging.direct.on $on, expected $want_on"
	if [ "$want_on" = 1 ]; then
		[ "$n" -ge 1 ] && [ "$rel" -eq 0 ] ||
			fail "direct_copy $dc: $n direct stages, $rel spans released (expected >= 1, 0)"
	else
		[ "$n" -eq 0 ] && [ "$rel" -ge 1 ] ||
			fail "direct_copy $dc: $n direct stages, $rel spans released (expected 0, >= 1)"
	fi
	umount_fs "$MP"
done
note "-o direct_copy: default and 1 direct, 0 and PLACEFS_STAGE_DIRECT=0 through the ring, bytes exact"

# -o lookahead: reading a shard reads one byte per MiB of the next 128 MiB (for
# s3fs, where that starts the fetches; on by default only there). On a local
# directory: off by default (no such reads), on when asked, and the bytes
# staged are the source's either way.
tmo 60 "$MKCKPT" -q --llama 2:256:512:4096 --shards 3 --index la-ckpt ||
	fail "placefs-mkckpt for the lookahead checkpoint"
for la in - 1; do
	o=
	[ "$la" = - ] || o=,lookahead=$la
	mount_fs la-ckpt "$MP" -o "device=host$o"
	out=$(tmo 30 "$STAGE" --all "$MP" --mode copy --verify -q) || fail "lookahead $la: $out"
	# A stage that stays on the first shard: the walk then reads the others
	# (a reader that is already on the last shard by the time the walk looks
	# leaves nothing after it to read).
	out=$(tmo 30 "$STAGE" --mode copy --verify "$MP/model.embed_tokens.weight") ||
		fail "lookahead $la: $out"
	n=$(stat_get "$MP" staging.lookahead_reads)
	if [ "$la" = 1 ]; then
		grep -q 'lookahead: reading a shard starts the storage client.s fetches of the next 128 MiB of shards (-o lookahead=1)' \
			"$MOUNT_LOG" || fail "-o lookahead=1: not in the log"
		# The walk runs beside the stages: it may end after them.
		i=0
		while [ "$n" -eq 0 ] && [ $i -lt 100 ]; do
			sleep 0.05
			i=$((i + 1))
			n=$(stat_get "$MP" staging.lookahead_reads)
		done
		[ "$n" -gt 0 ] || fail "-o lookahead=1: no lookahead reads after placefs-stage --all"
	else
		grep -q 'lookahead:' "$MOUNT_LOG" && fail "lookahead on for a local directory"
		[ "$n" -eq 0 ] || fail "lookahead off: $n lookahead reads"
	fi
	umount_fs "$MP"
done
note "-o lookahead: off by default on a local directory, on with =1 ($n reads), bytes exact"

# -o direct_reads: O_DIRECT reads of the shards, for FUSE sources only (their
# reads need no alignment; ext4's and tmpfs's would). Off by default here; =1
# on a local directory is refused, naming the shard; =0 mounts.
mount_fs la-ckpt "$MP" -o device=host
[ "$(stat_get "$MP" direct_reads)" = 0 ] || fail "direct_reads is not 0 on a local directory"
grep -q 'direct reads:' "$MOUNT_LOG" && fail "direct reads on for a local directory"
umount_fs "$MP"
st=0
tmo 20 "$PLACEFS" -f -o device=host,direct_reads=1 la-ckpt "$MP" >bad.out 2>&1 || st=$?
[ "$st" -eq 2 ] || fail "-o direct_reads=1 on a local directory: exit $st, expected 2: $(cat bad.out)"
grep -q -- '-o direct_reads=1: shard .*/la-ckpt/model-00001-of-00003.safetensors is not on a FUSE file system' \
	bad.out || fail "-o direct_reads=1 on a local directory: $(cat bad.out)"
is_mounted "$MP" && fail "-o direct_reads=1 on a local directory left a mount"
mount_fs la-ckpt "$MP" -o device=host,direct_reads=0
out=$(tmo 30 "$STAGE" --all "$MP" --mode copy --verify -q) || fail "direct_reads=0: $out"
umount_fs "$MP"
note "-o direct_reads: off on a local directory, =1 refused there ($(cat bad.out))"

# Daemonized with staging: returns once the mount is live, stages, unmounts.
tmo 30 "$PLACEFS" -o buffer_size=8M,device=host seed.safetensors "$MP" ||
	fail "daemonized mount with device=host failed"
is_mounted "$MP" || fail "daemonized mount is not live when placefs returns"
out=$(tmo 30 "$STAGE" --mode borrow --verify "$MP/small") || fail "daemonized: $out"
tmo 10 fusermount3 -u "$MP" || fail "daemonized: unmount"
wait_unmounted "$MP" || fail "daemonized: still mounted"
note "daemonized with device=host: ok"
exit 0
