#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the libFuzzer binaries that `make fuzz` built; called by that target:
#   fuzz.sh SRCDIR BUILDDIR TARGET...      (FUZZ_SECONDS per target, default 60)
# Each target runs for FUZZ_SECONDS with a work corpus in
# BUILDDIR/tests/fuzz/work/TARGET (kept between runs), seeded read-only from
# SRCDIR/tests/fuzz/corpus/TARGET and SRCDIR/tests/corpus. A crash, leak,
# timeout or out-of-memory input is copied to
# SRCDIR/tests/fuzz/corpus/TARGET/crash-<sha1> so that the replay test in
# `make check` keeps it, and the run fails.
set -u
srcdir=$1
builddir=$2
shift 2
secs=${FUZZ_SECONDS:-60}
status=0
summary=

for t in "$@"; do
	case $t in
	safetensors) maxlen=1048576 dict=json.dict ;;
	index) maxlen=65536 dict=json.dict ;;
	size) maxlen=64 dict=size.dict ;;
	name) maxlen=1024 dict=name.dict ;;
	*) echo "fuzz.sh: unknown target '$t'" >&2; exit 2 ;;
	esac
	bin=$builddir/tests/fuzz/fuzz-$t
	work=$builddir/tests/fuzz/work/$t
	art=$builddir/tests/fuzz/artifacts/$t
	log=$builddir/tests/fuzz/fuzz-$t.log
	mkdir -p "$work" "$art"
	# Artifacts of earlier runs were already copied into the source tree.
	rm -f "$art"/*
	seeds=$srcdir/tests/fuzz/corpus/$t
	[ -d "$srcdir/tests/corpus" ] && seeds="$seeds $srcdir/tests/corpus"
	echo "fuzz: $t for ${secs}s (max_len $maxlen), log in $log"
	# shellcheck disable=SC2086
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
		"$bin" -max_total_time="$secs" -max_len="$maxlen" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -dict="$srcdir/tests/fuzz/$dict" \
		-artifact_prefix="$art/" "$work" $seeds >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	# libFuzzer's own corpus size (seeds included) from its last status line.
	corpus=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' "$log" | tail -n 1)
	saved=$(find "$work" -type f | wc -l)
	found=
	for f in "$art"/*; do
		[ -f "$f" ] || continue
		sha=$(sha1sum "$f" | cut -d' ' -f1)
		kind=$(basename "$f" | sed 's/-.*//')
		dest=$srcdir/tests/fuzz/corpus/$t/crash-$sha
		if cp "$f" "$dest" 2>/dev/null; then
			echo "fuzz: $t: $kind input saved as $dest" >&2
		else
			echo "fuzz: $t: $kind input $f (could not copy it to $dest)" >&2
		fi
		found="$found $kind"
	done
	if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
		status=1
		result="FAILED (exit $rc${found:+,$found})"
		tail -n 60 "$log" >&2
	else
		result=ok
	fi
	summary="$summary$(printf '%-12s %5ss %12s execs  corpus %6s units (%s in work dir)  %s' \
		"$t" "$secs" "${execs:-?}" "${corpus:-?}" "$saved" "$result")
"
done

echo "fuzz: summary"
printf '%s' "$summary"
exit $status
