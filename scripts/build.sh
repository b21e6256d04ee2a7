#!/usr/bin/env bash
# Configures (the `dev` preset of CMakePresets.json) and builds into build/ (or $CKPTSCOPE_BUILD_DIR)
# with Ninja; extra arguments go to CMake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CKPTSCOPE_BUILD_DIR:-$root/build}
jobs=${CKPTSCOPE_JOBS:-$(nproc)}
# Let ccache share objects between checkouts and build directories (debug info would otherwise
# tie each object to its directory).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
cd "$root"
cmake --preset dev -B "$build" "$@" >/dev/null
cmake --build "$build" -j "$jobs"
