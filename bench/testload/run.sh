#!/bin/bash
# Test-load benchmark for a machine with an NVIDIA GPU and PyTorch 2.x (CUDA wheel). Not run by
# ctest and not runnable without a GPU.
#
#   bench/testload/run.sh [GIB]          (default 4)
#
# 1. builds the headless tool (no Qt needed) against the wheel's LibTorch, with CUDA:
#      cmake -DCKPTSCOPE_BUILD_GUI=OFF -DBUILD_TESTING=OFF -DCKPTSCOPE_WITH_CUDA=ON
#            -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
#    (find_package(Torch) of a CUDA wheel also looks for the CUDA toolkit: nvcc and the runtime
#    headers must be installed, or CUDAToolkit_ROOT set);
# 2. writes a GIB-GiB checkpoint (bench/testload/make_checkpoint.py), saved from cuda:0 when there
#    is one, so --compare-torch-load shows the pinning;
# 3. prints `ckptscope testload --device cuda:0` (GB/s, peak, other_devices_touched) beside the
#    pinned host->device bandwidth and torch.load(map_location='cuda:0') measured by
#    bench/testload/torch_baseline.py. Targets: >= 80% of the pinned bandwidth, >= 1.5x torch.load.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gib=${1:-4}
py=${PYTHON:-python3}
build=${BUILD_DIR:-$root/build-bench-cuda}
work=${WORK_DIR:-$(mktemp -d)}

prefix=$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')
abi=$("$py" -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
echo "== torch $("$py" -c 'import torch;print(torch.__version__, torch.version.cuda)'), C++11 ABI $abi"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCKPTSCOPE_BUILD_GUI=OFF -DBUILD_TESTING=OFF -DCKPTSCOPE_WITH_TORCH=ON -DCKPTSCOPE_WITH_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" \
    -DCMAKE_FIND_PACKAGE_TARGETS_GLOBAL=ON >"$work/cmake.log"
ninja -C "$build" ckptscope ckptscope-torch-helper
export CKPTSCOPE_TORCH_HELPER="$build/app/torch-helper/ckptscope-torch-helper"
export LD_LIBRARY_PATH="$prefix/../../lib:${LD_LIBRARY_PATH:-}"

ckpt="$work/bench-${gib}g.pt"
[ -f "$ckpt" ] || "$py" "$here/make_checkpoint.py" "$ckpt" --gib "$gib" --from-cuda
cat "$ckpt" >/dev/null  # page cache warm for both sides

echo "== baseline (python)"
"$py" "$here/torch_baseline.py" "$ckpt" | tee "$work/baseline.json"
echo "== ckptscope testload --device cuda:0 (best of 3)"
for i in 1 2 3; do
    "$build/app/ckptscope" testload "$ckpt" --device cuda:0 --json --compare-torch-load >"$work/testload$i.json"
done
"$py" - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
base = json.load(open(os.path.join(work, "baseline.json")))
runs = [json.load(open(os.path.join(work, f"testload{i}.json"))) for i in (1, 2, 3)]
best = max(runs, key=lambda r: r["gb_per_s"])
print(f"device              {base['device']}  (torch {base['torch']})")
print(f"bytes               {best['bytes'] / 1e9:.2f} GB in {best['tensors_loaded']} tensors")
print(f"pinned H2D          {base['pinned_h2d_gb_per_s']:.2f} GB/s")
print(f"ckptscope testload  {best['gb_per_s']:.2f} GB/s  {best['seconds']:.3f} s  "
      f"({100 * best['gb_per_s'] / base['pinned_h2d_gb_per_s']:.0f}% of pinned; target >= 80%)")
print(f"torch.load cuda:0   {base['torch_load_gb_per_s']:.2f} GB/s  {base['torch_load_seconds']:.3f} s  "
      f"(testload is {base['torch_load_seconds'] / best['seconds']:.2f}x faster; target >= 1.5x)")
print(f"peak on cuda:0      testload {best['peak_bytes'] / 2**30:.2f} GiB ({best['peak_source']}), "
      f"torch.load {base['torch_load_peak_bytes'] / 2**30:.2f} GiB")
print(f"other GPUs touched  {best['other_devices_touched']} {best['other_devices']}")
print(f"torch.load placement {best.get('torch_load')}")
PY
echo "results in $work"
