#!/usr/bin/env bash
# One real-GPU session for the CUDA test-load, in two halves:
#
#   scripts/gpu-proof.sh bundle        here (Debian 12, no GPU): builds gpubin/, a portable headless
#                                      bundle: ckptscope and ckptscope-cuda-engine, Release, no Qt, no
#                                      LibTorch, libstdc++ and libgcc linked statically, so it runs on
#                                      a bare GPU box with no headers, apt or network;
#   scripts/gpu-proof.sh sets [OUTDIR] there, alone (about 3 minutes): step 10 below only;
#   scripts/gpu-proof.sh review [OUTDIR] there, alone (about 2 minutes): steps 11-12 only (issue 42);
#   scripts/gpu-proof.sh run [OUTDIR]  there, with gpubin/ beside it and PyTorch 2.x as the oracle:
#                                      every step below, in under 8 minutes; OUTDIR (default $OUT,
#                                      else /tmp/gpu-proof) gets proof.log (everything printed) and
#                                      results.json (every step's JSON without its timeline);
#                                      bench/RESULTS.md gets what it says, with the date and card.
#
# The steps, and what each settles that the fakes (tests/device/fake_*.c) cannot:
#   1. identity: nvidia-smi's view, the engine's UUID/bus id/NVML index for cuda:0, context and peak
#      sources on a bare host (nvml-process expected);
#   2. a PID namespace: with unshare (driver 580 translated PIDs into the namespace on the lent H100,
#      so NVML still found the engine there), then with NVML reporting every PID as foreign
#      (bench/testload/nvml_foreign_pids.c over the real driver, as a container without that
#      translation sees it): the engine must fall back (driver-meminfo / nvml-device) and still
#      measure the context and peak within a few MiB of the bare figures, never 0 B;
#   3. torch's truth on the same file: pinned bandwidth, torch.load time, reserved and process bytes;
#   4. --verify byte-exact, and one 3 GiB storage hashed under a 5 s silence limit (the heartbeat);
#   5. CUDA_VISIBLE_DEVICES by UUID (same card, same identity) and empty (exit 2, one line);
#   6. the allocator model on 400 mixed sizes, default and expandable_segments:True, against a fresh
#      torch.load's memory_reserved;
#   7. an out-of-memory DDP replay (20 ranks x 4 GiB): the table still comes back, and the GPU's
#      memory returns to its baseline;
#   8. kill -9 mid-load: memory back to baseline;
#   9. the staging ring byte-exact with 1 MiB buffers (many wrap-arounds), 1 and 16 host threads,
#      then GB/s on 4 GiB against pinned host-to-device bandwidth (best of 3), and the ring's depth
#      against its buffer size (CKPTSCOPE_CUDA_BUFFERS x CKPTSCOPE_CUDA_BUFFER_KIB);
#  10. a set read in place (issue 27): a 4 GiB Hugging Face .bin set, a ZeRO-2 and a DCP folder
#      (SET_KINDS, SET_MIB) test-loaded with --verify straight from their files, GB/s and the
#      engine's host memory against the one file convert writes (bench/testload/sets.py), nothing in
#      $TMPDIR; a 2-rank DDP replay of the HF set, its memory back to baseline.
#  11. thirty processes on one GPU (issue 42): a 30-rank replay with map_location=cpu, so each rank
#      holds only its context; every engine must find its own row among 30 in NVML's process list
#      (context_source nvml-process), and the per-rank context must match what nvidia-smi shows per
#      process (sampled every 100 ms while the ranks hold); then 8 ranks with NVML reporting every PID
#      as foreign (a container without PID translation): the context measured as the device's rise
#      shared among the ranks (device-rise), again against nvidia-smi's per-process figure; and a file
#      of 100 64 KiB tensors, bare and with foreign PIDs: the fallback's peak (driver-meminfo, the
#      driver packing small allocations into shared pages) against NVML's own figure;
#  12. allocator settings written with spaces, lists and the keys the model learned (issue 42),
#      predicted against a fresh torch.load's memory_reserved in the same run, or torch's own refusal.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

bundle() {
    local build=${CKPTSCOPE_GPU_BUILD_DIR:-$root/build-gpu}
    "$root/scripts/deps.sh"
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPTSCOPE_BUILD_GUI=OFF \
        -DCKPTSCOPE_WITH_TORCH=OFF -DBUILD_TESTING=OFF \
        "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc" >/dev/null || return 1
    cmake --build "$build" --target ckptscope ckptscope-cuda-engine -j "${CKPTSCOPE_JOBS:-$(nproc)}" || return 1
    rm -rf "$root/gpubin" && mkdir -p "$root/gpubin"
    cp "$build/app/ckptscope" "$build/app/cuda-engine/ckptscope-cuda-engine" "$root/gpubin/"
    strip "$root/gpubin/"*
    # NVML as a container shows it (every PID foreign), over the real driver: steps 2 and 11's fallback.
    cc -shared -fPIC -O2 -o "$root/gpubin/libnvml-foreign.so" "$root/bench/testload/nvml_foreign_pids.c" -ldl || return 1
    echo "gpubin/: $(du -sh "$root/gpubin" | cut -f1); shared libraries the bundle needs:"
    ldd "$root/gpubin/ckptscope" | awk '{print "  " $1}'
}

run() {
    local dest=${1:-${OUT:-/tmp/gpu-proof}}
    mkdir -p "$dest"
    steps 2>&1 | tee "$dest/proof.log"
    # Every step's JSON in one file, timelines left out (they are most of the bytes).
    "${PYTHON:-python3}" - "${WORK_DIR:-/tmp/gpu-proof-work}/json" "$dest/results.json" <<'PY'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
out = {}
for name in sorted(os.listdir(src)):
    try:
        d = json.load(open(os.path.join(src, name)))
    except (OSError, ValueError):
        d = open(os.path.join(src, name)).read()[:2000]
    if isinstance(d, dict):
        d.pop("timeline", None)
    out[name] = d
json.dump(out, open(dst, "w"), indent=1)
PY
}

steps() {
    local bin=$root/gpubin py=${PYTHON:-python3}
    local w=${WORK_DIR:-/tmp/gpu-proof-work}
    local out=$w/json
    mkdir -p "$out" "$w"
    export CKPTSCOPE_CUDA_ENGINE=$bin/ckptscope-cuda-engine
    local t0=$SECONDS
    step() { echo "== $* ($((SECONDS - t0)) s)"; }
    used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
    j() { "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in sys.argv[2:]})' "$@"; }

    step "0. the box"
    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,compute_mode,mig.mode.current,driver_version --format=csv
    echo "pid1=$(cat /proc/1/comm) $(grep NSpid /proc/self/status) CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    "$bin/ckptscope" --version

    step "1. identity on the bare host (1 GiB saved from cuda:0)"
    "$py" "$root/bench/testload/make_checkpoint.py" "$w/c1.pt" --gib 1 --from-cuda
    "$bin/ckptscope" testload "$w/c1.pt" --device cuda:0 --json >"$out/t1.json"; echo "rc=$?"
    j "$out/t1.json" device device_uuid peak_bytes peak_source context_bytes context_source pid_hidden \
        torch_load_peak_bytes gb_per_s other_devices_touched
    "$py" -c 'import json,sys; print([{k: g.get(k) for k in ("id","uuid","pci_bus_id","nvml_index","cuda_ordinal")} for g in json.load(open(sys.argv[1]))["gpus"]])' "$out/t1.json"

    step "2. inside a PID namespace (unshare): NVML's PIDs are not ours"
    if unshare --pid --fork --mount-proc true 2>/dev/null; then
        unshare --pid --fork --mount-proc "$bin/ckptscope" testload "$w/c1.pt" --device cuda:0 --json >"$out/t1_ns.json"
        echo "rc=$?"
        j "$out/t1_ns.json" peak_bytes peak_source peak_note context_bytes context_source pid_hidden torch_load_peak_bytes
    else
        echo "unshare --pid is not allowed here: skipped"
    fi
    CKPTSCOPE_NVML_LIBRARY=$bin/libnvml-foreign.so "$bin/ckptscope" testload "$w/c1.pt" --device cuda:0 --json \
        >"$out/t1_foreign.json"
    echo "foreign PIDs: rc=$?"
    j "$out/t1_foreign.json" peak_bytes peak_source peak_note context_bytes context_source pid_hidden torch_load_peak_bytes

    step "3. torch's truth for the same file"
    "$py" "$root/bench/testload/torch_baseline.py" "$w/c1.pt" | tee "$out/baseline1.json"

    step "4. --verify byte-exact; one 3 GiB storage under a 5 s silence limit"
    "$bin/ckptscope" testload "$w/c1.pt" --device cuda:0 --verify | tail -n 3; echo "rc=${PIPESTATUS[0]}"
    "$py" -c 'import torch,sys; torch.save({"flat": torch.ones(3 << 30, dtype=torch.uint8)}, sys.argv[1])' "$w/flat.pt"
    CKPTSCOPE_HELPER_TIMEOUT=5 "$bin/ckptscope" testload "$w/flat.pt" --device cuda:0 --verify | tail -n 2
    echo "rc=${PIPESTATUS[0]} (want 0)"
    rm -f "$w/flat.pt"

    step "5. CUDA_VISIBLE_DEVICES by UUID, and empty"
    local uuid
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
    CUDA_VISIBLE_DEVICES=$uuid "$bin/ckptscope" testload "$w/c1.pt" --device cuda:0 --json >"$out/t_uuid.json"
    echo "rc=$?"; j "$out/t_uuid.json" device device_uuid context_bytes peak_source
    CUDA_VISIBLE_DEVICES= "$bin/ckptscope" testload "$w/c1.pt" --device cuda:0; echo "rc=$? (want 2, one line)"

    step "6. the allocator model on mixed sizes, default and expandable_segments"
    "$py" - "$w/mixed.pt" <<'PY'
import random, sys, torch
random.seed(0)
sizes = [random.choice([300, 70_000, 900_000, 1_500_000, 3_000_000, 7_000_000, 25_000_000]) for _ in range(400)]
torch.save({f"t{i}": torch.empty(n, dtype=torch.uint8, device="cuda") for i, n in enumerate(sizes)}, sys.argv[1])
PY
    local conf
    for conf in "" "expandable_segments:True"; do
        env -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=$conf "$bin/ckptscope" testload "$w/mixed.pt" --device cuda:0 \
            --json >"$out/mixed_${conf:-default}.json"
        env -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=$conf "$py" -c \
            'import torch,sys; sd=torch.load(sys.argv[1],map_location="cuda:0"); print(torch.cuda.memory_reserved(0))' \
            "$w/mixed.pt" >"$out/mixed_${conf:-default}.torch"
        "$py" -c 'import json,sys; p=json.load(open(sys.argv[1]))["torch_load_reserved_bytes"]; t=int(open(sys.argv[2]).read()); print(sys.argv[3], "predicted", p, "torch", t, "%+.2f%%" % (100*(p-t)/t))' \
            "$out/mixed_${conf:-default}.json" "$out/mixed_${conf:-default}.torch" "${conf:-default}"
    done

    step "7. out of memory in the DDP replay (20 ranks x 4 GiB), then memory back"
    "$py" "$root/bench/testload/make_checkpoint.py" "$w/c4.pt" --gib 4 --from-cuda
    local base
    base=$(used)
    "$bin/ckptscope" testload "$w/c4.pt" --ddp-ranks 20 --json >"$out/oom.json"; echo "rc=$? (want 1)"
    "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("verdict") or d); print([(r["rank"], r.get("bytes_placed")) for r in d.get("ranks", []) if r.get("error")]); print(d.get("devices"))' "$out/oom.json"
    sleep 2; echo "memory.used MiB: before $base, after $(used)"

    step "8. kill -9 mid-load, then memory back"
    base=$(used)
    CKPTSCOPE_CUDA_THREADS=1 "$bin/ckptscope" testload "$w/c4.pt" --device cuda:0 & local p=$!
    sleep 0.8; echo "mid-load MiB: $(used) (engine alive: $(pgrep -c ckptscope-cuda))"; kill -9 "$p"; wait "$p" 2>/dev/null
    sleep 2; echo "memory.used MiB: before $base, after $(used)"
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader

    step "9. the ring byte-exact with 1 MiB buffers, then GB/s on 4 GiB (best of 3)"
    local t
    for t in 1 16; do
        CKPTSCOPE_CUDA_THREADS=$t CKPTSCOPE_CUDA_BUFFER_KIB=1024 "$bin/ckptscope" testload "$w/c1.pt" --device cuda:0 \
            --verify | tail -n 1; echo "threads=$t rc=${PIPESTATUS[0]}"
    done
    for t in 1 2 3; do
        "$bin/ckptscope" testload "$w/c4.pt" --device cuda:0 --json >"$out/t4_$t.json"
    done
    # The ring's depth against its buffer size (buffers x KiB), best of 2 each, on the same file.
    local ring
    for ring in 3x32768 6x32768 3x131072 4x65536 6x65536 8x65536; do
        for t in 1 2; do
            CKPTSCOPE_CUDA_BUFFERS=${ring%x*} CKPTSCOPE_CUDA_BUFFER_KIB=${ring#*x} "$bin/ckptscope" testload "$w/c4.pt" \
                --device cuda:0 --json >"$out/ring_${ring}_$t.json"
        done
    done
    "$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
base = json.load(open(os.path.join(out, "baseline1.json")))
runs = [json.load(open(os.path.join(out, f"t4_{i}.json"))) for i in (1, 2, 3)]
best = max(runs, key=lambda r: r["gb_per_s"])
pinned = base["pinned_h2d_gb_per_s"]
print(f"4 GiB: {best['gb_per_s']:.2f} GB/s, {100 * best['gb_per_s'] / pinned:.0f}% of pinned {pinned:.2f} GB/s "
      f"(target >= 70%); runs {[round(r['gb_per_s'], 2) for r in runs]}")
sweep = {}
for name in sorted(os.listdir(out)):
    if name.startswith("ring_"):
        r = json.load(open(os.path.join(out, name)))
        if "gb_per_s" in r:
            key = name[5:].rsplit("_", 1)[0]
            sweep[key] = max(sweep.get(key, 0), r["gb_per_s"])
for key, gbs in sorted(sweep.items(), key=lambda kv: -kv[1]):
    print(f"ring {key}: {gbs:.2f} GB/s ({100 * gbs / pinned:.0f}% of pinned)")
t1 = json.load(open(os.path.join(out, "t1.json")))
seen = base["torch_load_process_bytes"]
pred = t1["torch_load_peak_bytes"]
if seen and pred:
    print(f"torch.load peak on 1 GiB: predicted {pred}, driver saw {seen} ({100 * (pred - seen) / seen:+.2f}%; "
          f"target within 5%; the driver's figure from {base.get('torch_load_process_source')})")
PY
    review_steps "$w" "$out"
    step "done"
}

# Steps 11 and 12 (issue 42), on the 1 GiB and mixed files of steps 1 and 6 (made here when absent).
review_steps() {
    local w=$1 out=$2 bin=$root/gpubin py=${PYTHON:-python3}
    mkdir -p "$w" "$out"
    export CKPTSCOPE_CUDA_ENGINE=$bin/ckptscope-cuda-engine
    [ -f "$w/c1.pt" ] || "$py" "$root/bench/testload/make_checkpoint.py" "$w/c1.pt" --gib 1 --from-cuda
    echo "== 11. thirty processes on one GPU ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
    # nvidia-smi's per-process figures while the ranks hold their contexts.
    replay_against_smi() {  # NAME RANKS [ENV...]
        local name=$1 ranks=$2 smi
        shift 2
        smi=$out/smi_$name.csv
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 >"$smi" 2>/dev/null &
        local watcher=$!
        env "$@" "$bin/ckptscope" testload "$w/c1.pt" --ddp-ranks "$ranks" --map-location cpu --json \
            >"$out/replay_$name.json"
        echo "rc=$?"
        kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
        "$py" - "$out/replay_$name.json" "$smi" "$ranks" <<'PY'
import collections, json, statistics, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    d = {"error": "no JSON (see the line above)"}
peak = collections.defaultdict(int)
for line in open(sys.argv[2]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 2 and parts[1].isdigit():
        peak[parts[0]] = max(peak[parts[0]], int(parts[1]))
dev = (d.get("devices") or [{}])[0]
print("verdict:", d.get("verdict") or d.get("error"))
print("failed ranks:", d.get("failed_ranks"), "| device:", {k: dev.get(k) for k in
      ("device", "contexts", "context_bytes", "context_source", "expected_bytes", "measured_peak_bytes")})
ctx = dev.get("context_bytes") or d.get("context_bytes") or 0
if peak:
    smi = statistics.median(peak.values())
    print(f"nvidia-smi: {len(peak)} processes seen (want {sys.argv[3]}); per process median {smi} MiB, "
          f"min {min(peak.values())}, max {max(peak.values())}; replay's context {ctx / 2**20:.1f} MiB "
          f"({100 * (ctx / 2**20 - smi) / smi:+.1f}%)")
else:
    print("nvidia-smi showed no compute process")
PY
    }
    replay_against_smi bare 30
    echo "== 11b. the same with NVML reporting every PID as foreign (8 ranks: the device-rise fallback)"
    replay_against_smi foreign 8 CKPTSCOPE_NVML_LIBRARY="$bin/libnvml-foreign.so"
    echo "== 11c. 100 small tensors with every PID foreign: the peak from the driver's pages (driver-meminfo)"
    "$py" -c 'import sys, torch; torch.save({f"t{i}": torch.ones(16384) for i in range(100)}, sys.argv[1])' "$w/tiny.pt"
    "$bin/ckptscope" testload "$w/tiny.pt" --device cuda:0 --json >"$out/tiny_bare.json"
    CKPTSCOPE_NVML_LIBRARY="$bin/libnvml-foreign.so" "$bin/ckptscope" testload "$w/tiny.pt" --device cuda:0 --json \
        >"$out/tiny_foreign.json"
    "$py" - "$out/tiny_bare.json" "$out/tiny_foreign.json" <<'PY'
import json, sys
for name in sys.argv[1:]:
    try:
        d = json.load(open(name))
    except ValueError:
        print(name, "no JSON"); continue
    print(name.rsplit("/", 1)[-1], {k: d.get(k) for k in ("peak_bytes", "peak_source", "peak_note", "context_bytes",
                                                          "context_source", "pid_hidden")})
PY

    echo "== 12. allocator settings with spaces against torch's memory_reserved"
    if [ ! -f "$w/mixed.pt" ]; then
        "$py" - "$w/mixed.pt" <<'PY'
import random, sys, torch
random.seed(0)
sizes = [random.choice([300, 70_000, 900_000, 1_500_000, 3_000_000, 7_000_000, 25_000_000]) for _ in range(400)]
torch.save({f"t{i}": torch.empty(n, dtype=torch.uint8, device="cuda") for i, n in enumerate(sizes)}, sys.argv[1])
PY
    fi
    local conf i=0
    for conf in "expandable_segments: True" " max_split_size_mb : 128 , garbage_collection_threshold : 0.6" \
        "roundup_power2_divisions: [1:4, 64:8]" "roundup_power2_divisions:[64:0, >:4]" \
        "expandable_segments: True, roundup_power2_divisions: 4" "large_segment_size_mb: 64" \
        "large_segment_size_mb: 64, expandable_segments: True"; do
        i=$((i + 1))
        env -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF="$conf" "$bin/ckptscope" testload "$w/mixed.pt" \
            --device cuda:0 --json >"$out/conf_$i.json" 2>"$out/conf_$i.err"
        env -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF="$conf" "$py" -c '
import sys, torch
try:
    sd = torch.load(sys.argv[1], map_location="cuda:0")
    print(torch.cuda.memory_reserved(0))
except Exception as e:
    print("refused: " + str(e).splitlines()[0])' "$w/mixed.pt" >"$out/conf_$i.torch" 2>&1
        "$py" - "$out/conf_$i.json" "$out/conf_$i.torch" "$conf" "$out/conf_$i.err" <<'PY'
import json, sys
torch_said = open(sys.argv[2]).read().strip().splitlines()[-1:] or ["nothing"]
torch_said = torch_said[0]
try:
    pred = json.load(open(sys.argv[1]))["torch_load_reserved_bytes"]
except (ValueError, KeyError):
    pred = "refused: " + open(sys.argv[4]).read().strip()[:300]
if isinstance(pred, int) and torch_said.isdigit():
    t = int(torch_said)
    print(f"{sys.argv[3]!r}: predicted {pred}, torch {t} ({100 * (pred - t) / t:+.2f}%)")
else:
    print(f"{sys.argv[3]!r}: ckptscope {pred}; torch {torch_said}")
PY
    done
}

review() {
    local w=${WORK_DIR:-/tmp/gpu-proof-work}
    local t0=$SECONDS
    review_steps "$w" "$w/json"
    echo "== done ($((SECONDS - t0)) s)"
}

sets() {
    local bin=$root/gpubin py=${PYTHON:-python3}
    local w=${WORK_DIR:-/tmp/gpu-proof-work} size=${SET_MIB:-4096}
    mkdir -p "$w"
    export CKPTSCOPE_CUDA_ENGINE=$bin/ckptscope-cuda-engine
    local t0=$SECONDS
    echo "== 10. sets read in place ($size MiB; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
    "$py" "$root/bench/testload/sets.py" "$bin/ckptscope" "$w" "$size" "${SET_KINDS:-hf,zero2,dcp,dcp_cols}"; echo "rc=$?"
    echo "== 10b. a 2-rank DDP replay of the HF set, read in place ($((SECONDS - t0)) s)"
    local base
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    if [ -d "$w/hf_${size}m" ]; then
        "$bin/ckptscope" testload "$w/hf_${size}m" --ddp-ranks 2 | tail -n 4; echo "rc=${PIPESTATUS[0]}"
    fi
    sleep 2
    echo "memory.used MiB: before $base, after $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)"
    echo "== done ($((SECONDS - t0)) s)"
}

case "${1:-}" in
bundle) bundle ;;
run) shift; run "$@" ;;
review)
    shift
    mkdir -p "${1:-${OUT:-/tmp/gpu-proof}}"
    review 2>&1 | tee "${1:-${OUT:-/tmp/gpu-proof}}/review.log"
    cp -r "${WORK_DIR:-/tmp/gpu-proof-work}/json" "${1:-${OUT:-/tmp/gpu-proof}}/review-json" 2>/dev/null
    ;;
sets)
    shift
    mkdir -p "${1:-${OUT:-/tmp/gpu-proof}}"
    sets 2>&1 | tee "${1:-${OUT:-/tmp/gpu-proof}}/sets.log"
    ;;
*) echo "usage: scripts/gpu-proof.sh bundle | run [OUTDIR] | sets [OUTDIR] | review [OUTDIR]" >&2; exit 2 ;;
esac
