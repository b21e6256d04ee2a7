#!/usr/bin/env bash
# Regenerates every README screenshot in docs/screenshots from the current build (./scripts/build.sh
# first), so the pictures keep up with the window. The window runs under Xvfb with the openbox window
# manager, at the size it opens at for a new user on that screen, and is saved with its frame:
#   main, export, testload .png    the bundled sample, maximized on a 1600x1000 screen (a real CPU
#                                  test-load)
#   main-1024, export-1024 .png    the same window at its first size on a 1024x700 screen
#   main-model.png                 a pickled nn.Module, which opens in the Model view
#   main-zero-rank-file.png        a ZeRO rank file opened as its set, offering the file alone
#   ddp-replay.png                 four DDP ranks on the tests' fake two-GPU driver
#   compare.png, sharded-set.png   grabbed by tst_compareview and tst_setview (offscreen platform)
# Needs Xvfb, openbox, ImageMagick's `import`, xwininfo, libXtst and python3 with torch (for the
# model): apt-get install xvfb openbox imagemagick x11-utils libxtst6. Look at each picture before
# committing it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CKPTSCOPE_BUILD_DIR:-$root/build}
shots=$root/docs/screenshots
take=$shots/take_screenshots.py
sample=$root/resources/sample/ddp_checkpoint.pt
# The tests' torch oracle, as CMake found it, writes the model.
python=${CKPTSCOPE_PYTHON:-$(sed -n 's/^CKPTSCOPE_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)}
python=${python:-python3}

for tool in Xvfb openbox import xwininfo; do
    command -v "$tool" >/dev/null || { echo "screenshots.sh: $tool is missing (apt-get install xvfb openbox imagemagick x11-utils)" >&2; exit 2; }
done
[[ -x $build/app/ckptscope ]] || { echo "screenshots.sh: no build in $build (run scripts/build.sh)" >&2; exit 2; }

helper=()
for h in "$build"/app/torch-helper/ckptscope-torch-helper; do
    [[ -x $h ]] && helper=(--helper "$h")
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$python" "$take" "$build" "$sample" --maximize "${helper[@]}"
"$python" "$take" "$build" "$sample" --size 1024x700 --suffix -1024 --only main,export
"$python" "$take" "$build" "$sample" --maximize --fake-gpus

# A small CNN pickled whole (torch.save(model)), named as print(model) shows it.
"$python" - "$tmp/whole_model.pt" <<'EOF'
import sys
from collections import OrderedDict

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(OrderedDict(
    conv1=nn.Conv2d(1, 6, 5), bn1=nn.BatchNorm2d(6), act=nn.ReLU(), pool=nn.MaxPool2d(2),
    conv2=nn.Conv2d(6, 16, 5), flatten=nn.Flatten(),
    head=nn.Sequential(nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 10))))
torch.save(model, sys.argv[1])
EOF
"$python" "$take" "$build" "$tmp/whole_model.pt" --only main --suffix -model

# A DeepSpeed ZeRO rank file, which opens its set with the bar that offers the file alone.
"$python" "$root/tests/sharded/gen_zero.py" "$tmp/zero" >/dev/null
"$python" "$take" "$build" "$tmp/zero/zero2_w3/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt" \
    --only main --size 1366x768 --suffix -zero-rank-file

# The compare view and a sharded set, saved by their own tests (with the fixtures ctest makes).
CKPTSCOPE_COMPARE_SCREENSHOT=$shots/compare.png ctest --test-dir "$build" -R '^tst_compareview$' --output-on-failure >/dev/null
CKPTSCOPE_SET_SCREENSHOT=$shots/sharded-set.png ctest --test-dir "$build" -R '^tst_setview$' --output-on-failure >/dev/null
echo "wrote $shots/compare.png and $shots/sharded-set.png"
