#!/usr/bin/env bash
# Installs what is missing, builds the programs (the `ckptscope` command, the window and the test-load
# engines; not the tests, which ./scripts/test.sh builds), and opens the bundled DDP sample
# checkpoint: in the window when a display exists, otherwise as `ckptscope inspect` and `ckptscope
# check` in the terminal. Each step says what it is doing: a first run on a small machine takes minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
echo "run-sample: checking the packages it needs (scripts/deps.sh installs any that are missing)" >&2
"$root/scripts/deps.sh"
# The target's dependencies are declared in app/CMakeLists.txt, beside the programs.
CKPTSCOPE_TARGETS=ckptscope-programs "$root/scripts/build.sh"
build=${CKPTSCOPE_BUILD_DIR:-$root/build}
sample="$root/resources/sample/ddp_checkpoint.pt"
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  echo "run-sample: opening $sample in the window" >&2
  exec "$build/app/ckptscope" "$sample"
fi
echo "(no display: showing the sample headless)"
"$build/app/ckptscope" inspect "$sample"
echo
# The sample is meant to have findings: check's exit 1 is its answer, not a failure.
"$build/app/ckptscope" check "$sample" || [ $? -eq 1 ]
