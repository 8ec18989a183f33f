# SPDX-License-Identifier: MIT
# Sourced by tools/demo and tools/test: installs the build and test
# dependencies on Debian/Ubuntu when they are missing, then builds placefs
# out of tree in build/$1 with configure flags $2...
PLACEFS_DEB_PACKAGES="build-essential autoconf automake pkg-config libfuse3-dev fuse3 \
libcjson-dev check python3 attr"

placefs_deps() {
	missing=
	for p in $PLACEFS_DEB_PACKAGES; do
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
