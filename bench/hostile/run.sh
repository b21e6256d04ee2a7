#!/usr/bin/env bash
# Issue 16's hostile inputs, each of which once made a reader quadratic: ckptscope inspect --json
# and check against the 1 s target, with Python torch.load beside them where it can read the file.
#   upper.pt                120k storages named data/N in the pickle, records named DATA/N
#                           (every lookup is the case-insensitive fallback; was 40 s)
#   many.safetensors        200k tensors (was over 30 s)
#   legacy_storages.pt      torch.save(_use_new_zipfile_serialization=False) of 180k tensors
#   legacy_bare_storages.pt the same format holding 180k bare storages (the issue's file: was 65 s)
# The files come from tests/hostile/gen/ (written once into the bench data dir). Reports the best
# wall time of five runs, the least CPU time of three (a shared machine inflates wall time) and
# peak RSS. Usage: bench/hostile/run.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
data=${CKPTSCOPE_BENCH_DIR:-$root/build/bench-data}/hostile
mkdir -p "$data"
for gen in big_upper_zip:upper.pt many_safetensors:many.safetensors many_legacy_storages:legacy_storages.pt \
           legacy_bare_storages:legacy_bare_storages.pt; do
  script=${gen%%:*} file=${gen#*:}
  if [ ! -s "$data/$file" ]; then
    /usr/bin/python3 "$root/tests/hostile/gen/$script.py" "$data" >/dev/null
  fi
done
grep -m1 "model name" /proc/cpuinfo || true
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
/usr/bin/python3 - "$root" "$build/app/ckptscope" "$data" <<'PY'
import os, resource, subprocess, sys
sys.path.insert(0, sys.argv[1] + "/bench")
from harness import measure
exe, data = sys.argv[2], sys.argv[3]
TARGET = 1.0

def cpu_seconds(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

torch_load = ["/usr/bin/python3", "-c", "import torch,sys; torch.load(sys.argv[1], map_location='cpu')"]
# Why torch itself cannot open the other two (checked with torch 1.13).
no_torch = {
    "upper.pt": "torch.load fails: no 'version' record (as in issue 16's reproduction)",
    "many.safetensors": "torch.load cannot read safetensors (the safetensors package is not installed)",
}
print(f"{'file':<20} {'MB':>5} {'command':<15} {'wall_s':>7} {'cpu_s':>6} {'MiB':>6}  target {TARGET:.0f} s")
for f in ("upper.pt", "many.safetensors", "legacy_storages.pt", "legacy_bare_storages.pt"):
    path = f"{data}/{f}"
    mb = os.path.getsize(path) / 1e6
    for args in (["inspect", "--json"], ["check"]):
        cmd = [exe, *args, path]
        wall, rss = measure(cmd, runs=5)
        cpu = min(cpu_seconds(cmd) for _ in range(3))
        verdict = "met" if wall < TARGET else "MISSED"
        print(f"{f:<20} {mb:5.1f} {' '.join(args):<15} {wall:7.3f} {cpu:6.3f} {rss:6.1f}  {verdict}")
    if f in no_torch:
        print(f"{'':<20} {'':>5} {'torch.load':<15} {'-':>7} {'-':>6} {'-':>6}  {no_torch[f]}")
    else:
        wall, rss = measure([*torch_load, path], runs=3)
        print(f"{'':<20} {'':>5} {'torch.load':<15} {wall:7.3f} {'':>6} {rss:6.1f}")
PY
