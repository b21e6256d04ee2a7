#!/usr/bin/env bash
# Builds the Debian packages: a Release build (window and LibTorch helper on, tests off) in
# build-package/ (or $CKPTSCOPE_PACKAGE_DIR), then `cpack -G DEB`; prints the two .debs' paths on
# stdout, ckptscope's first (the command, the window, the CUDA engine), then ckptscope-torch's.
# Needs dpkg-dev (dpkg-shlibdeps computes the Depends line). Extra arguments go to CMake, e.g.
# -DCMAKE_PREFIX_PATH=/opt/libtorch for a LibTorch other than Debian's.
#
#   scripts/test-deb.sh $(scripts/package.sh)
#
# It builds the working tree as it is. For a package of exactly one commit (a tree others are
# editing can hand the build a half-written file), build a snapshot instead:
#   git archive HEAD | tar -x -C /tmp/src && CKPTSCOPE_PACKAGE_DIR=$PWD/build-package-head /tmp/src/scripts/package.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CKPTSCOPE_PACKAGE_DIR:-$root/build-package}
jobs=${CKPTSCOPE_JOBS:-$(nproc)}
command -v dpkg-shlibdeps >/dev/null || {
    echo "package: dpkg-shlibdeps is missing (apt-get install dpkg-dev)" >&2
    exit 2
}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
    -DCKPTSCOPE_BUILD_GUI=ON -DCKPTSCOPE_WITH_TORCH=ON -DBUILD_TESTING=OFF "$@" >&2
cmake --build "$build" -j "$jobs" >&2
rm -f "$build"/ckptscope_*.deb "$build"/ckptscope-torch_*.deb
(cd "$build" && cpack -G DEB >&2)
ls "$build"/ckptscope_*.deb
ls "$build"/ckptscope-torch_*.deb
