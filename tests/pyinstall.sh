# SPDX-License-Identifier: MIT
# Sourced by the Python tests after tests/lib.sh: py_install installs the
# package once with `make install-python` into $TMP/pyinst (DESTDIR, prefix
# /usr/local) and makes the tests use that installed copy, not python/:
#   PYTHONPATH   the installed site directory (and nothing of the source tree)
#   PLACEFS_LOAD the installed placefs-load script
# It fails the test when the tree lacks the package, its dist-info or the
# script, or when `import placefs` from another directory finds anything but
# the installed copy.
py_install() {
	local d=$TMP/pyinst init site file
	# A make of its own: no jobserver or flags of the make running the tests.
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL ${MAKE:-make} -s -C "$top_builddir" install-python \
		DESTDIR="$d" prefix=/usr/local PYTHON3="$PYTHON" >"$TMP/pyinst.log" 2>&1 ||
		fail "make install-python DESTDIR=$d failed: $(cat "$TMP/pyinst.log")"
	init=$(find "$d" -path '*/placefs/__init__.py' | head -n 1)
	[ -n "$init" ] || fail "make install-python: no placefs/__init__.py under $d"
	site=${init%/placefs/__init__.py}
	for f in cli.py loader.py _progress.py _torch.py; do
		[ -f "$site/placefs/$f" ] || fail "make install-python: $site/placefs/$f missing"
	done
	ls -d "$site"/placefs-*.dist-info >/dev/null 2>&1 || fail "make install-python: no dist-info in $site"
	PLACEFS_LOAD=$d/usr/local/bin/placefs-load
	[ -x "$PLACEFS_LOAD" ] || fail "make install-python: no executable $PLACEFS_LOAD"
	PYTHONPATH=$site
	export PYTHONPATH
	file=$(cd / && "$PYTHON" -c 'import placefs; print(placefs.__file__)') ||
		fail "import placefs from / with PYTHONPATH=$site failed"
	[ "$file" = "$site/placefs/__init__.py" ] || fail "import placefs found $file, not the installed $site"
	case $file in
	"$top_srcdir"/python/*) fail "import placefs found the source tree: $file" ;;
	esac
}
