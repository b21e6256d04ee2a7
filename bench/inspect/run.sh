#!/usr/bin/env bash
# ckptscope inspect --json vs torch.load(map_location='cpu') on the same files, in one run.
# Targets (issue 2): the whole inspect process on the 1 GiB file <= 60 ms and independent of
# tensor bytes; <= 1 s for 40k keys. Issue 12: on the 40k-key file at least 5x faster than
# torch.load and <= 64 MB (65536 KiB) peak RSS; issue 29: the same on module_40k.pt, the shape a DDP
# model's state dict has (`module.` keys, a storage per tensor). Usage: bench/inspect/run.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
data=${CKPTSCOPE_BENCH_DIR:-$root/build/bench-data}
/usr/bin/python3 "$root/bench/make_checkpoints.py" "$data" >/dev/null
cat /proc/cpuinfo | grep -m1 "model name" || true
/usr/bin/python3 - "$root" "$build/app/ckptscope" "$data" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/bench")
from harness import measure
exe, data = sys.argv[2], sys.argv[3]
print(f"{'file':<14} {'inspect_s':>10} {'inspect_MiB':>12} {'torch_s':>9} {'torch_MiB':>10} {'faster':>7}")
for f in ("big_1gib.pt", "keys_40k.pt", "module_40k.pt"):
    path = f"{data}/{f}"
    cs, cr = measure([exe, "inspect", "--json", path], runs=7)
    ts, tr = measure(["/usr/bin/python3", "-c", "import torch,sys; torch.load(sys.argv[1], map_location='cpu')", path], runs=3)
    print(f"{f:<14} {cs:10.3f} {cr:12.1f} {ts:9.3f} {tr:10.1f} {ts/cs:6.0f}x")
    if f in ("keys_40k.pt", "module_40k.pt"):
        print(f"issue 12 targets on {f}: {ts/cs:.1f}x faster than torch.load (>= 5x: "
              f"{'met' if ts / cs >= 5 else 'NOT met'}), peak RSS {cr:.1f} MiB "
              f"(<= 64 MB: {'met' if cr * 1024 * 1024 <= 64e6 else 'NOT met'})")
PY
# Today's PyTorch (scripts/modern-torch.sh's root), where it is made: torch.load as 2.6+ defaults to
# (weights_only=True), on the two 40k-key files. The chroot's start is in its time (about 0.1 s).
if "$root/scripts/torch2-python.sh" -c "import torch" >/dev/null 2>&1; then
/usr/bin/python3 - "$root" "$build/app/ckptscope" "$data" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/bench")
from harness import measure
root, exe, data = sys.argv[1], sys.argv[2], sys.argv[3]
t2 = [f"{root}/scripts/torch2-python.sh", "-c", "import torch,sys; torch.load(sys.argv[1], map_location='cpu')"]
version = __import__("subprocess").run([t2[0], "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                       text=True).stdout.strip()
for f in ("keys_40k.pt", "module_40k.pt"):
    path = f"{data}/{f}"
    cs, cr = measure([exe, "inspect", "--json", path], runs=7)
    ts, tr = measure(t2 + [path], runs=3)
    print(f"{f} against torch {version}: inspect {cs:.3f} s, torch.load {ts:.3f} s: {ts/cs:.1f}x "
          f"(>= 5x: {'met' if ts / cs >= 5 else 'NOT met'})")
PY
fi
