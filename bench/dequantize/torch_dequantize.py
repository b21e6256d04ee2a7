#!/usr/bin/env python3
"""The torch reference of the dequantization bench (run in the PyTorch 2.x root): what users run
today, the file loaded whole, every weight times its block's scale in float32, cast to bf16, saved.
Prints the wall and CPU seconds of that work (after `import torch`, which the bench reports apart)
and the process's peak RSS in MiB.

    torch_dequantize.py IN.safetensors OUT.safetensors
"""
import resource
import sys
import time

import torch
from safetensors.torch import load_file, save_file


def main(src, dst):
    start, cpu = time.perf_counter(), time.process_time()
    sd = load_file(src)
    out = {}
    for k, v in sd.items():
        if k.endswith("_scale_inv"):
            continue
        s = sd.get(k + "_scale_inv")
        if v.dtype == torch.float8_e4m3fn and s is not None:
            rows, cols = v.shape
            full = s.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
            out[k] = (v.to(torch.float32) * full).to(torch.bfloat16)
        else:
            out[k] = v
    save_file(out, dst)
    print(f"{time.perf_counter() - start:.3f} {time.process_time() - cpu:.3f} "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
