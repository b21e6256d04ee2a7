#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test (ctest: fixtures are written
# by real PyTorch first, then the Qt Test suites run, GUI ones under the offscreen platform).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh"
build=${CKPTSCOPE_BUILD_DIR:-$root/build}
cd "$root"
ctest --preset dev --test-dir "$build" -j "${CKPTSCOPE_JOBS:-$(nproc)}" "$@"
