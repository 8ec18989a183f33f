#!/bin/sh
# SPDX-License-Identifier: MIT
# make check: replays every fuzz corpus (tests/fuzz/corpus/<target>/, seeds
# and saved crash-* inputs) and the parser corpus (tests/corpus/) through
# each fuzz target built without libFuzzer (tests/fuzz/replay-<target>).
# A crash, a sanitizer report, a broken invariant or a non-zero exit fails.
set -u
: "${top_srcdir:?run me from make check}" "${top_builddir:?run me from make check}"
status=0
for t in safetensors index size name; do
	bin=$top_builddir/tests/fuzz/replay-$t
	own=$top_srcdir/tests/fuzz/corpus/$t
	if ! [ -x "$bin" ]; then
		echo "FAIL: $bin is not built"
		status=1
		continue
	fi
	if [ -z "$(ls "$own" 2>/dev/null)" ]; then
		echo "FAIL: seed corpus $own is missing or empty"
		status=1
		continue
	fi
	set -- "$own"
	[ -d "$top_srcdir/tests/corpus" ] && set -- "$@" "$top_srcdir/tests/corpus"
	if "$bin" "$@"; then
		echo "PASS: replay-$t"
	else
		echo "FAIL: replay-$t exited with status $?"
		status=1
	fi
done
exit $status
