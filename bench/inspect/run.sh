#!/usr/bin/env bash
# ckptscope inspect --json vs torch.load(map_location='cpu') on the same files, in one run.
# Targets (issue 2): the whole inspect process on the 1 GiB file <= 60 ms and independent of
# tensor bytes; <= 1 s for 40k keys. Usage: bench/inspect/run.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
data=${CKPTSCOPE_BENCH_DIR:-$root/build/bench-data}
exe="$build/app/ckptscope"
/usr/bin/python3 "$root/bench/make_checkpoints.py" "$data" >/dev/null

measure() {  # prints "seconds peak_rss_kib" of a command, best of 5 for time
  local best=999 rss=0
  for _ in 1 2 3 4 5; do
    local t
    t=$( { /usr/bin/time -f "%e %M" "$@" >/dev/null 2>/dev/null; } 2>&1 | tail -1)
    local s=${t% *} m=${t#* }
    best=$(python3 -c "print(min($best, $s))")
    rss=$m
  done
  echo "$best $rss"
}
py_load() { /usr/bin/python3 -c "import torch,sys; torch.load(sys.argv[1], map_location='cpu')" "$1"; }
export -f py_load

printf "%-14s %12s %12s %12s %12s %8s\n" file ckpt_s ckpt_rss_MiB torch_s torch_rss_MiB speedup
for f in big_1gib.pt keys_40k.pt; do
  read -r cs cr < <(measure "$exe" inspect --json "$data/$f")
  read -r ts tr < <(measure bash -c "py_load $data/$f")
  python3 - "$f" "$cs" "$cr" "$ts" "$tr" <<'PY'
import sys
f, cs, cr, ts, tr = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
print(f"{f:<14} {cs:12.3f} {cr/1024:12.1f} {ts:12.3f} {tr/1024:12.1f} {ts/max(cs,1e-3):7.0f}x")
PY
done
