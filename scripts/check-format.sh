#!/usr/bin/env bash
# Fails when a C++ file is not clang-format clean (the .clang-format at the root).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fmt=$(command -v clang-format-14 || command -v clang-format)
mapfile -t files < <(git ls-files '*.cpp' '*.h' | grep -v '^tests/fixtures/')
bad=0
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not clang-format clean: $f" >&2
    bad=1
  fi
done
exit $bad
