#!/usr/bin/env bash
# Builds everything under AddressSanitizer + UndefinedBehaviorSanitizer (the `asan` preset of
# CMakePresets.json, into build-asan/ or $CKPTSCOPE_ASAN_BUILD_DIR) and runs every test there. A
# sanitizer report fails the test it happens in. Extra arguments go to ctest (e.g. -R tst_reader).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CKPTSCOPE_ASAN_BUILD_DIR:-$root/build-asan}
jobs=${CKPTSCOPE_JOBS:-$(nproc)}
"$root/scripts/deps.sh"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
cd "$root"
cmake --preset asan -B "$build" >/dev/null
cmake --build "$build" -j "$jobs"
ctest --preset asan --test-dir "$build" -j "$jobs" "$@"
