#!/usr/bin/env bash
# Installs what is missing, builds, and opens the bundled DDP sample checkpoint: in the window
# when a display exists, otherwise as `ckptscope inspect` and `ckptscope check` in the terminal.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh"
build=${CKPTSCOPE_BUILD_DIR:-$root/build}
sample="$root/resources/sample/ddp_checkpoint.pt"
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec "$build/app/ckptscope" "$sample"
fi
echo "(no display: showing the sample headless)"
"$build/app/ckptscope" inspect "$sample"
echo
# The sample is meant to have findings: check's exit 1 is its answer, not a failure.
"$build/app/ckptscope" check "$sample" || [ $? -eq 1 ]
