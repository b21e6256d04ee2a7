#!/usr/bin/env bash
# `ckptscope convert --single-card` of the 1 GiB DDP checkpoint (512 float32 tensors, `module.`
# keys, storages saved on cuda:0) beside `cp` of the same file and Python's load-strip-save, in one
# run. Targets (issue 4): <= 1.5x the time of cp, >= 20x faster than Python, peak RSS <= 100 MB.
# Like cp, convert leaves flushing to the kernel by default; `convert --sync` (fsync before the
# rename) is shown beside `cp + sync`, its fair pairing. Usage: bench/convert/run.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
data=${CKPTSCOPE_BENCH_DIR:-$root/build/bench-data}
exe=$build/app/ckptscope
/usr/bin/python3 "$root/bench/make_checkpoints.py" "$data" >/dev/null
grep -m1 "model name" /proc/cpuinfo || true
src=$data/big_1gib.pt
out=$data/convert-out
mkdir -p "$out"
cat "$src" >/dev/null  # every contender starts from a warm page cache

# Peak RSS as /usr/bin/time -v reports it, from one run of the convert.
/usr/bin/time -v "$exe" convert "$src" -o "$out/single.pt" --single-card 2>"$out/time.txt" >/dev/null
rss_kb=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$out/time.txt")

/usr/bin/python3 - "$root" "$exe" "$src" "$out" "$rss_kb" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1] + "/bench")
from harness import measure
exe, src, out, rss_kb = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
strip_save = """
import sys, torch
from collections import OrderedDict
sd = torch.load(sys.argv[1], map_location='cpu')
sd = OrderedDict((k[len('module.'):] if k.startswith('module.') else k, v) for k, v in sd.items())
torch.save(sd, sys.argv[2])
"""

def fresh(path):
    """Each run writes a new file, as converting ddp.pt to model.pt does: replacing an existing 1 GiB
    file makes ext4 start writing the new one back at once (auto_da_alloc, on rename and on O_TRUNC
    alike), and the dirty data of earlier runs is flushed so no run pays for another's writeback."""
    def before():
        if os.path.exists(path):
            os.unlink(path)
        os.sync()
    return before

cs, cr = measure([exe, "convert", src, "-o", f"{out}/single.pt", "--single-card"], runs=5,
                 before=fresh(f"{out}/single.pt"))
ds, dr = measure([exe, "convert", src, "-o", f"{out}/durable.pt", "--single-card", "--sync"], runs=3,
                 before=fresh(f"{out}/durable.pt"))
ps, pr = measure(["cp", src, f"{out}/cp.pt"], runs=5, before=fresh(f"{out}/cp.pt"))
ss, sr = measure(["sh", "-c", f"cp '{src}' '{out}/cps.pt' && sync '{out}/cps.pt'"], runs=3,
                 before=fresh(f"{out}/cps.pt"))
ys, yr = measure(["/usr/bin/python3", "-c", strip_save, src, f"{out}/python.pt"], runs=2,
                 before=fresh(f"{out}/python.pt"))
print(f"{'contender':<34} {'seconds':>8} {'peak_MiB':>9}")
print(f"{'ckptscope convert --single-card':<34} {cs:8.3f} {cr:9.1f}   (/usr/bin/time -v: {rss_kb / 1024:.1f} MiB)")
print(f"{'cp':<34} {ps:8.3f} {pr:9.1f}")
print(f"{'convert --single-card --sync':<34} {ds:8.3f} {dr:9.1f}")
print(f"{'cp + sync':<34} {ss:8.3f} {sr:9.1f}")
print(f"{'python load-strip-save':<34} {ys:8.3f} {yr:9.1f}")
print()
print(f"convert / cp          = {cs / ps:5.2f}x   (target <= 1.5x)")
print(f"convert --sync / (cp + sync) = {ds / ss:5.2f}x")
print(f"python / convert      = {ys / cs:5.1f}x   (target >= 20x)")
print(f"convert peak RSS      = {max(cr, rss_kb / 1024):5.1f} MiB (target <= 100 MB)")
PY
rm -rf "$out"
