#!/bin/sh
# SPDX-License-Identifier: MIT
# python-package: the package installs the way README.md and doc/PYTHON.md
# say, `python3 -m pip install --no-build-isolation ./python`, with the
# setuptools already installed and no index (PIP_NO_INDEX=1: nothing may be
# downloaded), here into a fresh virtual environment that sees the system's
# packages (a venv, as doc/PYTHON.md offers). Then, from another directory:
# `import placefs` finds the installed copy with every module of python/placefs,
# its dist-info declares the placefs-load script, the script and
# `python -m placefs` run (--help; a directory that is not a mount is exit 1
# with one line), the stdlib reader imports; `pip uninstall` removes the
# package and the script. (make install with configure --enable-python is
# checked by make installcheck, which distcheck runs.)
# Skipped (77) only when this interpreter cannot build the package at all: no
# pip or venv, or setuptools older than 61, or older than 70.1 without the
# wheel package (CI installs python3-pip, python3-setuptools, python3-wheel).
. "$(dirname "$0")/lib.sh"

command -v "$PYTHON" >/dev/null 2>&1 || fail "python3 is required"
# can_build PY: why PY cannot build the package (empty and status 0 when it can).
can_build() {
	"$1" -W ignore - 2>&1 <<'EOF'
import importlib.util
import sys
try:
    import setuptools  # first: looking pip up makes setuptools' distutils shim step aside
except ImportError:
    sys.exit("no module setuptools")
for m in ("pip", "venv"):
    if importlib.util.find_spec(m) is None:
        sys.exit("no module %s" % m)
v = tuple(int(x) for x in setuptools.__version__.split(".")[:2] if x.isdigit())
if v < (61, 0):
    sys.exit("setuptools %s is older than 61" % setuptools.__version__)
if v < (70, 1):
    if importlib.util.find_spec("wheel") is None:
        sys.exit("setuptools %s without the wheel package" % setuptools.__version__)
EOF
}
# The python3 first on PATH may be a private build without the distribution's
# setuptools and wheel (pyenv): then the distribution's own interpreter, which
# the packages CI installs serve, is the one a user installs with.
why=$(can_build "$PYTHON") || {
	for alt in /usr/bin/python3 /usr/local/bin/python3; do
		[ -x "$alt" ] && [ "$alt" != "$(command -v "$PYTHON")" ] || continue
		if can_build "$alt" >/dev/null; then
			echo "note: $PYTHON cannot build the package ($why); using $alt"
			PYTHON=$alt
			why=
			break
		fi
	done
	if [ -n "$why" ]; then
		echo "SKIP: $PYTHON cannot build the package here: $why"
		exit 77
	fi
}

cd "$TMP" || fail "cd $TMP"
# A copy: pip writes build/ and *.egg-info next to the sources, which may be read-only.
mkdir work
cp -R "$top_srcdir/python" work/python || fail "copying python/"
chmod -R u+w work/python
rm -rf work/python/build work/python/*.egg-info
find work/python -name __pycache__ -type d -prune -exec rm -rf {} +

tmo 60 "$PYTHON" -m venv --system-site-packages --without-pip venv || fail "$PYTHON -m venv"
VPY=$TMP/venv/bin/python
[ -x "$VPY" ] || fail "no $VPY"
unset PYTHONPATH
(cd work && PIP_NO_INDEX=1 PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
	tmo 120 "$VPY" -m pip install --no-build-isolation ./python) >pip.log 2>&1 ||
	fail "pip install --no-build-isolation ./python failed: $(tail -n 20 pip.log)"

# import placefs from elsewhere: the installed copy, every module of the sources.
file=$(cd / && "$VPY" -c 'import placefs; print(placefs.__file__)') || fail "import placefs: $file"
case $file in
"$TMP"/venv/lib/python*/site-packages/placefs/__init__.py) ;;
*) fail "import placefs found $file, not the venv's copy" ;;
esac
pkg=${file%/__init__.py}
want=$(cd "$top_srcdir/python/placefs" && ls -- *.py | sort)
got=$(cd "$pkg" && ls -- *.py | sort)
[ "$want" = "$got" ] || fail "installed modules differ from python/placefs: $(echo "$got" | tr '\n' ' ')"
for f in $want; do
	cmp -s "$top_srcdir/python/placefs/$f" "$pkg/$f" || fail "installed $f differs from python/placefs/$f"
done
dist=$(ls -d "${pkg%/placefs}"/placefs-*.dist-info 2>/dev/null) || fail "no placefs dist-info beside $pkg"
grep -q '^placefs-load *= *placefs.cli:main$' "$dist/entry_points.txt" ||
	fail "dist-info declares no placefs-load script: $(cat "$dist/entry_points.txt" 2>&1)"
version=$(sed -n 's/^Version: //p' "$dist/METADATA")
pyver=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$top_srcdir/python/pyproject.toml")
[ -n "$version" ] && [ "$version" = "$pyver" ] || fail "installed version $version, pyproject.toml says $pyver"

# The script and the module run, with the stdlib alone.
export PLACEFS_NO_TORCH=1
LOAD=$TMP/venv/bin/placefs-load
[ -x "$LOAD" ] || fail "no executable $LOAD"
out=$(cd / && tmo 30 "$LOAD" --help) || fail "placefs-load --help: $out"
echo "$out" | grep -q '^usage: placefs-load ' || fail "placefs-load --help: $out"
echo "$out" | grep -q -- '--no-progress' || fail "placefs-load --help lacks --no-progress: $out"
st=0
(cd / && tmo 30 "$LOAD" /proc) >load.out 2>load.err || st=$?
[ "$st" -eq 1 ] || fail "placefs-load /proc: exit $st, want 1: $(cat load.err)"
grep -q '^placefs-load: .*not a placefs mount' load.err || fail "placefs-load /proc: $(cat load.err)"
[ "$(wc -l <load.err)" -eq 1 ] || fail "placefs-load /proc: want one line: $(cat load.err)"
out=$(cd / && tmo 30 "$VPY" -m placefs --help) || fail "python -m placefs --help: $out"
echo "$out" | grep -q '^usage: placefs-load ' || fail "python -m placefs --help: $out"
(cd / && tmo 30 "$VPY" -c 'from placefs import safetensors, iter_weights, load_state_dict') ||
	fail "importing the package's API"

# pip uninstall removes the package and the script.
tmo 60 "$VPY" -m pip uninstall -y placefs >uninstall.log 2>&1 || fail "pip uninstall: $(cat uninstall.log)"
(cd / && "$VPY" -c 'import placefs' 2>/dev/null) && fail "placefs still importable after pip uninstall"
[ -e "$LOAD" ] && fail "pip uninstall left $LOAD"
note "pip install --no-build-isolation ./python with $("$PYTHON" -c 'import setuptools; print("setuptools", setuptools.__version__)'): import placefs, placefs-load $version, uninstall"
exit 0
