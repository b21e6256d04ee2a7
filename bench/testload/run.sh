#!/bin/bash
# The GPU test-load benchmark, for a machine with an NVIDIA GPU, its driver and PyTorch 2.x (the
# oracle). Not run by ctest; nothing here can run without a GPU.
#
#   bench/testload/run.sh [GIB]          (default 4)
#
# 1. builds the headless tool there (CMake and Ninja; no Qt, no LibTorch: the CUDA engine needs only
#    the driver). It needs the nlohmann-json and CLI11 headers; without them on the machine, point
#    THIRD_PARTY_INCLUDE at a folder holding nlohmann/ and CLI/ (copied from /usr/include of a
#    Debian 12 machine), or set CKPTSCOPE_BIN to a folder with prebuilt ckptscope and
#    ckptscope-cuda-engine;
# 2. writes a GIB-GiB checkpoint saved from cuda:0 (make_checkpoint.py);
# 3. prints, in one run on that file: the engine's GB/s against the pinned host-to-device bandwidth
#    (target >= 70%, since issue 24), its time against torch.load(map_location='cuda:0') (target >= 2x
#    faster), the peak torch.load would reach as ckptscope predicts it against what the driver saw
#    torch.load hold (target: within 5%), other_devices_touched, and the DDP replay with 4 ranks
#    without and with map_location=cpu;
# 4. the engine alone (its protocol on stdin) with each host-thread count in THREADS_SWEEP (default
#    "1 default") and each staging buffer size in BUFFER_SWEEP_KIB (default: none), printing the
#    threads and pinned staging it used and its GB/s: CKPTSCOPE_CUDA_THREADS and
#    CKPTSCOPE_CUDA_BUFFER_KIB, which also steer step 3 when set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gib=${1:-4}
py=${PYTHON:-python3}
build=${BUILD_DIR:-$root/build-bench-cuda}
work=${WORK_DIR:-$(mktemp -d)}
mkdir -p "$work"

if [ -n "${CKPTSCOPE_BIN:-}" ]; then
    bin=$CKPTSCOPE_BIN
else
    extra=()
    [ -z "${THIRD_PARTY_INCLUDE:-}" ] || extra+=("-DCMAKE_INCLUDE_PATH=$THIRD_PARTY_INCLUDE")
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPTSCOPE_BUILD_GUI=OFF \
        -DCKPTSCOPE_WITH_TORCH=OFF -DBUILD_TESTING=OFF "${extra[@]}" >"$work/cmake.log"
    ninja -C "$build" ckptscope ckptscope-cuda-engine
    bin=$build/app
    export CKPTSCOPE_CUDA_ENGINE="$build/app/cuda-engine/ckptscope-cuda-engine"
fi
[ -x "$bin/ckptscope" ] || bin=$bin/..
export CKPTSCOPE_CUDA_ENGINE=${CKPTSCOPE_CUDA_ENGINE:-$bin/ckptscope-cuda-engine}
echo "== torch $("$py" -c 'import torch;print(torch.__version__, torch.version.cuda)'), $(nvidia-smi -L | head -n 4)"

ckpt="$work/bench-${gib}g.pt"
[ -f "$ckpt" ] || "$py" "$here/make_checkpoint.py" "$ckpt" --gib "$gib" --from-cuda
cat "$ckpt" >/dev/null  # page cache warm for both sides

echo "== baseline (python)"
"$py" "$here/torch_baseline.py" "$ckpt" | tee "$work/baseline.json"
echo "== ckptscope testload --device cuda:0 (best of 3)"
for i in 1 2 3; do
    "$bin/ckptscope" testload "$ckpt" --device cuda:0 --json >"$work/testload$i.json"
done
echo "== ckptscope testload --ddp-ranks 4, without and with map_location=cpu"
"$bin/ckptscope" testload "$ckpt" --ddp-ranks 4 --json >"$work/ddp.json"
"$bin/ckptscope" testload "$ckpt" --ddp-ranks 4 --map-location cpu --json >"$work/ddp_cpu.json"

# The engine alone, one request line each (best of 3): its result event says what staging it used.
engine_run() {  # NAME THREADS BUFFER_KIB ("default": the engine's own choice)
    local env=(env -u CKPTSCOPE_CUDA_THREADS -u CKPTSCOPE_CUDA_BUFFER_KIB) i
    [ "$2" = default ] || env+=("CKPTSCOPE_CUDA_THREADS=$2")
    [ "$3" = default ] || env+=("CKPTSCOPE_CUDA_BUFFER_KIB=$3")
    for i in 1 2 3; do
        "$py" -c 'import json, sys; print(json.dumps({"cmd": "testload", "path": sys.argv[1], "device": "cuda:0"}))' \
            "$ckpt" | "${env[@]}" "$CKPTSCOPE_CUDA_ENGINE" | tail -n 1 >"$work/engine_$1.$i.json"
    done
}
echo "== ckptscope-cuda-engine alone: threads ${THREADS_SWEEP:-1 default}; buffers KiB ${BUFFER_SWEEP_KIB:-default}"
rm -f "$work"/engine_*.json
for t in ${THREADS_SWEEP:-1 default}; do
    engine_run "t$t" "$t" default
done
for b in ${BUFFER_SWEEP_KIB:-}; do
    engine_run "b$b" default "$b"
done
"$py" - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
load = lambda name: json.load(open(os.path.join(work, name)))
base = load("baseline.json")
runs = [load(f"testload{i}.json") for i in (1, 2, 3)]
best = max(runs, key=lambda r: r["gb_per_s"])
gib = 2**30
print(f"device               {base['device']}  (torch {base['torch']})")
print(f"bytes                {best['bytes'] / 1e9:.2f} GB in {best['tensors_loaded']} tensors")
print(f"pinned H2D           {base['pinned_h2d_gb_per_s']:.2f} GB/s")
print(f"ckptscope testload   {best['gb_per_s']:.2f} GB/s  {best['seconds']:.3f} s  "
      f"({100 * best['gb_per_s'] / base['pinned_h2d_gb_per_s']:.0f}% of pinned; target >= 70%)")
print(f"torch.load cuda:0    {base['torch_load_gb_per_s']:.2f} GB/s  {base['torch_load_seconds']:.3f} s  "
      f"(testload {base['torch_load_seconds'] / best['seconds']:.2f}x faster; target >= 2x)")
print(f"context              {(best['context_bytes'] or 0) / gib:.3f} GiB ({best.get('context_source')})")
print(f"peak on cuda:0       testload {(best['peak_bytes'] or 0) / gib:.3f} GiB ({best['peak_source']})")
pred, seen = best["torch_load_peak_bytes"], base["torch_load_process_bytes"]
if pred and seen:
    print(f"torch.load peak      predicted {pred / gib:.3f} GiB, driver saw {seen / gib:.3f} GiB "
          f"({100 * (pred - seen) / seen:+.1f}%; target within 5%; {base.get('torch_load_process_source')})")
else:
    print(f"torch.load peak      predicted {pred}, driver saw {seen}: one side unmeasured here")
print(f"reserved             predicted {best['torch_load_reserved_bytes'] / gib:.3f}, torch says "
      f"{base['torch_load_reserved_bytes'] / gib:.3f} GiB")
print(f"other GPUs touched   {best['other_devices_touched']} {best['other_devices']}")
for name in ("ddp.json", "ddp_cpu.json"):
    r = load(name)
    print(f"DDP replay ({r['map_location'] or 'no map_location'}): {r['verdict']}")
    for d in r["devices"]:
        print(f"    {d['device']}: {d['contexts']} contexts, {d['weight_copies']} copies, expected "
              f"{d['expected_bytes'] / gib:.2f} GiB, measured {d['measured_peak_bytes'] / gib:.2f} GiB")
sweep = {}
for name in sorted(f for f in os.listdir(work) if f.startswith("engine_")):
    sweep.setdefault(name[7:].split(".")[0], []).append(load(name))
for name, rs in sorted(sweep.items(), key=lambda kv: (kv[0][0], int(kv[0][1:]) if kv[0][1:].isdigit() else 1e9)):
    ok = [r for r in rs if r.get("event") == "result"]
    if not ok:
        print(f"engine {name:>8}  {rs[0].get('message', rs[0])}")
        continue
    r = max(ok, key=lambda r: r["gb_per_s"])
    print(f"engine {name:>8}  {r['host_threads']:2d} host threads, {r['staging_buffers']} x "
          f"{r['staging_bytes'] / r['staging_buffers'] / 2**20:g} MiB pinned: {r['gb_per_s']:.2f} GB/s "
          f"{r['seconds']:.3f} s ({100 * r['gb_per_s'] / base['pinned_h2d_gb_per_s']:.0f}% of pinned)")
PY
echo "results in $work"
