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
# Test-only tools (scripts/test): sanitizer runtime, valgrind, libFuzzer, clang-format;
# the network file systems of the remote layer (s3fs, sshfs and a private sshd).
PLACEFS_DEB_TEST_PACKAGES="valgrind clang clang-format s3fs sshfs openssh-server"
# The S3-compatible server of tests/remote-s3.sh, from the npm registry.
PLACEFS_S3RVER_VERSION=3.7.1

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

# placefs_test_deps: the build packages, the test tools, node and npm (Debian's
# nodejs and npm, unless a node with its npm is installed already: NodeSource's
# nodejs carries npm and conflicts with Debian's), and the libFuzzer runtime
# that matches the installed clang (libclang-rt-<major>-dev).
placefs_test_deps() {
	placefs_deps $PLACEFS_DEB_TEST_PACKAGES
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || placefs_deps nodejs npm
	major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
	[ -z "$major" ] || placefs_deps "libclang-rt-$major-dev" || true
	return 0
}

# placefs_s3rver DIR: s3rver $PLACEFS_S3RVER_VERSION installed with npm into DIR
# (its node_modules, and npm's cache under DIR: nothing global), unless it is
# there already. Fails, saying why, when npm or the registry is unreachable.
placefs_s3rver() {
	if [ -x "$1/node_modules/.bin/s3rver" ] &&
		[ "$("$1/node_modules/.bin/s3rver" --version 2>/dev/null)" = "$PLACEFS_S3RVER_VERSION" ]; then
		return 0
	fi
	command -v npm >/dev/null 2>&1 || {
		echo "placefs: npm is not installed; s3rver comes from the npm registry (apt-get install nodejs npm)" >&2
		return 1
	}
	echo "placefs: installing s3rver@$PLACEFS_S3RVER_VERSION with npm into $1"
	mkdir -p "$1" || return 1
	timeout 300 npm install --prefix "$1" --cache "$1/npm-cache" --no-audit --no-fund \
		--loglevel=error "s3rver@$PLACEFS_S3RVER_VERSION" >"$1/npm-install.log" 2>&1 || {
		echo "placefs: cannot install s3rver@$PLACEFS_S3RVER_VERSION from the npm registry" \
			"($(npm config get registry 2>/dev/null)) into $1:" >&2
		tail -n 20 "$1/npm-install.log" >&2
		return 1
	}
	"$1/node_modules/.bin/s3rver" --version >/dev/null 2>&1 || {
		echo "placefs: $1/node_modules/.bin/s3rver does not run with node $(node --version 2>&1)" >&2
		return 1
	}
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
