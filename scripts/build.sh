#!/usr/bin/env bash
# Configures (the `dev` preset of CMakePresets.json) and builds into build/ (or $CKPTSCOPE_BUILD_DIR)
# with Ninja; extra arguments go to CMake. Builds every target, or only those named in
# $CKPTSCOPE_TARGETS (space-separated; run-sample.sh builds the programs alone).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CKPTSCOPE_BUILD_DIR:-$root/build}
jobs=${CKPTSCOPE_JOBS:-$(nproc)}
# Let ccache share objects between checkouts and build directories (debug info would otherwise
# tie each object to its directory).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
cd "$root"
echo "build: configuring $build (CMake preset dev)" >&2
cmake --preset dev -B "$build" "$@" >/dev/null
targets=()
if [ -n "${CKPTSCOPE_TARGETS:-}" ]; then
  read -r -a targets <<<"$CKPTSCOPE_TARGETS"
  echo "build: building ${targets[*]} with $jobs jobs (Ninja counts the steps as [N/M])" >&2
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
else
  echo "build: building every target with $jobs jobs (Ninja counts the steps as [N/M])" >&2
  cmake --build "$build" -j "$jobs"
fi
