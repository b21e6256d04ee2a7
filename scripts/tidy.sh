#!/usr/bin/env bash
# Runs clang-tidy-14 with the repo's .clang-tidy over every C++ source of core/, app/ and ui/ (their
# headers come in through them), using the dev build's compile_commands.json. Any finding fails:
# .clang-tidy makes every warning an error. Extra arguments go to run-clang-tidy (e.g. -fix).
#
# tests/ is left out on purpose: QtTest's macros and the fixtures' literal values trip readability
# checks by design, and the tests run under ASan/UBSan instead (scripts/test-asan.sh). So is
# app/torch-helper/torch_load.cpp: clang 14 cannot compile LibTorch 1.13's headers against GCC 12's
# libstdc++ (c10::IValue is incomplete where std::vector needs it), so it could not check it anyway.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CKPTSCOPE_BUILD_DIR:-$root/build}
jobs=${CKPTSCOPE_JOBS:-$(nproc)}
command -v run-clang-tidy-14 >/dev/null || "$root/scripts/deps.sh"
# The sources include headers that moc and rcc generate: a configured tree is not enough.
[ -f "$build/compile_commands.json" ] || "$root/scripts/build.sh"
# run-clang-tidy takes a regular expression over the database's absolute file names.
rootre=$(printf '%s' "$root" | sed 's/[][\.*^$+?(){}|]/\\&/g')
run-clang-tidy-14 -clang-tidy-binary clang-tidy-14 -p "$build" -j "$jobs" -quiet "$@" \
  "^$rootre/(core|ui|app/(?!torch-helper/torch_load\.cpp$))"
