# SPDX-License-Identifier: MIT
# Sourced by scripts/demo and scripts/test: installs the build and test
# dependencies on Debian/Ubuntu when they are missing, then builds placefs
# out of tree in build/$1 with configure flags $2...
# python3-pip (with python3-setuptools and python3-wheel) builds the Python package
# for `make install-python` and the Python tests, without network; util-linux
# gives script(1), the terminal of tests/progress-tty.sh; acl gives setfacl, the
# ACLs of tests/mount-perms.sh.
PLACEFS_DEB_PACKAGES="build-essential autoconf automake pkg-config libfuse3-dev fuse3 \
libcjson-dev check python3 python3-pip python3-setuptools python3-wheel attr acl util-linux"
# Test-only tools (scripts/test): sanitizer runtime, valgrind, libFuzzer, clang-format.
PLACEFS_DEB_TEST_PACKAGES="valgrind clang clang-format"

# placefs_deps [extra packages...]: installs whatever of the build packages
# and the given extras is missing.
placefs_deps() {
	missing=
	for p in $PLACEFS_DEB_PACKAGES "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	echo "placefs: installing missing packages:$missing"
	sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
}

# placefs_test_deps: the build packages, the test tools, and the libFuzzer
# runtime that matches the installed clang (libclang-rt-<major>-dev).
placefs_test_deps() {
	placefs_deps $PLACEFS_DEB_TEST_PACKAGES
	major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
	[ -z "$major" ] || placefs_deps "libclang-rt-$major-dev" || true
	return 0
}

placefs_build() {
	name=$1
	shift
	[ -x configure ] && [ configure -nt configure.ac ] && [ Makefile.in -nt Makefile.am ] ||
		autoreconf -fi
	mkdir -p "build/$name"
	(
		cd "build/$name"
		[ -f Makefile ] && [ config.status -nt ../../configure ] ||
			../../configure "$@"
		make -j"$(nproc)"
	)
}
