#!/usr/bin/env bash
# `ckptscope convert --dequantize bf16` of a block-quantized FP8 safetensors file (MIB MiB of
# float8_e4m3fn weights with their 128x128-block float32 scales, bench/dequantize/make_fp8.py) beside
# the torch reference users run today (bench/dequantize/torch_dequantize.py: the file loaded whole,
# every weight dequantized in float32 and cast, saved with safetensors), in one run: wall and CPU
# seconds, GB/s of FP8 weights read, peak RSS (and ckptscope's peak RssAnon, sampled), ckptscope's
# ratios to torch, and whether the two outputs are equal bit for bit. torch's figures are its work
# after `import torch` (the process's wall time, interpreter start included, is shown beside); CPU
# seconds are steadier than wall time on a shared machine. Needs the PyTorch 2.x root.
# Usage: bench/dequantize/run.sh [BUILD_DIR] [MIB]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
mib=${2:-256}
data=${CKPTSCOPE_BENCH_DIR:-$root/build/bench-data}/fp8-$mib
exe=$build/app/ckptscope
py=$root/scripts/torch2-python.sh
"$py" "$root/bench/dequantize/make_fp8.py" "$data" "$mib"
grep -m1 "model name" /proc/cpuinfo || true
uptime
cat "$data/model.safetensors" >/dev/null  # both start from a warm page cache

/usr/bin/python3 - "$root" "$exe" "$py" "$data" <<'PY'
import json, os, struct, subprocess, sys, time
root, exe, py, data = sys.argv[1:5]
src = f"{data}/model.safetensors"
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
fp8_bytes = sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items()
                if k != "__metadata__" and v["dtype"] == "F8_E4M3")

def fresh(path):
    if os.path.exists(path):
        os.unlink(path)
    os.sync()

mine = []
for _ in range(3):
    fresh(f"{data}/ckptscope.safetensors")
    r = subprocess.run(["/usr/bin/python3", f"{root}/bench/sharded/measure.py", exe, "convert", data, "-o",
                        f"{data}/ckptscope.safetensors", "--dequantize", "bf16"], capture_output=True, text=True,
                       check=True)
    mine.append([float(x) for x in r.stdout.split()])  # wall, maxrss, anon, file, cpu
cw = min(m[0] for m in mine)
cc = min(m[4] for m in mine)
crss, canon = max(m[1] for m in mine), max(m[2] for m in mine)
theirs = []
for _ in range(2):
    fresh(f"{data}/torch.safetensors")
    start = time.perf_counter()
    r = subprocess.run([py, f"{root}/bench/dequantize/torch_dequantize.py", src, f"{data}/torch.safetensors"],
                       capture_output=True, text=True, check=True)
    whole = time.perf_counter() - start
    theirs.append([float(x) for x in r.stdout.split()[-3:]] + [whole])  # wall, cpu, maxrss, process wall
tw = min(t[0] for t in theirs)
tc = min(t[1] for t in theirs)
trss = max(t[2] for t in theirs)
tproc = min(t[3] for t in theirs)
check = subprocess.run([py, "-c", """
import sys, torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
bad = [k for k in a if not torch.equal(a[k].view(torch.int16), b[k].view(torch.int16))]
print('bit-identical' if not bad else f'{len(bad)} tensors differ: {bad[:3]}')
""", f"{data}/ckptscope.safetensors", f"{data}/torch.safetensors"], capture_output=True, text=True)
gb = fp8_bytes / 1e9
print(f"input: {fp8_bytes / 2**20:.0f} MiB of float8_e4m3fn weights, 128x128 blocks; output bf16")
print(f"{'contender':<36} {'wall_s':>7} {'GB/s':>6} {'cpu_s':>6} {'GB/cpu_s':>8} {'peak_RSS_MiB':>12}")
print(f"{'ckptscope convert --dequantize bf16':<36} {cw:7.2f} {gb / cw:6.2f} {cc:6.2f} {gb / cc:8.2f} {crss:12.1f}"
      f"   (RssAnon peak {canon:.1f} MiB)")
print(f"{'torch (load_file, dequantize, save)':<36} {tw:7.2f} {gb / tw:6.2f} {tc:6.2f} {gb / tc:8.2f} {trss:12.1f}"
      f"   (whole process {tproc:.1f} s)")
print(f"ckptscope/torch: wall {cw / tw:.2f}x, cpu {cc / tc:.2f}x, peak RSS {crss / trss:.2f}x; "
      f"outputs: {check.stdout.strip() or check.stderr.strip()[-300:]}")
PY
