#!/usr/bin/env bash
# ckptscope check on the bench files (bench/make_checkpoints.py), in one run.
# Targets (issue 3): `check` on the 40k-key file within 1 s; `check --values` on the 1 GiB file
# at >= 1 GB/s (NaN/Inf over every float32 byte). Reports best wall time over several runs and the
# CPU time, since a shared machine inflates wall time. Usage: bench/check/run.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
data=${CKPTSCOPE_BENCH_DIR:-$root/build/bench-data}
/usr/bin/python3 "$root/bench/make_checkpoints.py" "$data" >/dev/null
grep -m1 "model name" /proc/cpuinfo || true
/usr/bin/python3 - "$root" "$build/app/ckptscope" "$data" <<'PY'
import os, resource, subprocess, sys, time
sys.path.insert(0, sys.argv[1] + "/bench")
from harness import measure
exe, data = sys.argv[2], sys.argv[3]

def cpu_seconds(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

print(f"{'command':<34} {'wall_s':>8} {'cpu_s':>7} {'MiB':>7} {'GB/s(wall)':>11} {'GB/s(cpu)':>10}")
for label, args, f in (("check keys_40k.pt", ["check"], "keys_40k.pt"),
                       ("check big_1gib.pt", ["check"], "big_1gib.pt"),
                       ("check --values big_1gib.pt", ["check", "--values"], "big_1gib.pt")):
    path = f"{data}/{f}"
    cmd = [exe, *args, path]
    wall, rss = measure(cmd, runs=5)
    cpu = min(cpu_seconds(cmd) for _ in range(3))
    size = os.path.getsize(path) / 1e9
    rate = f"{size / wall:11.2f} {size / cpu:10.2f}" if "--values" in args else ""
    print(f"{label:<34} {wall:8.3f} {cpu:7.3f} {rss:7.1f} {rate}")
PY
