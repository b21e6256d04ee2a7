#!/usr/bin/env python3
"""Writes the dequantization bench's input (run in the PyTorch 2.x root, scripts/torch2-python.sh):
a safetensors file of N MiB of float8_e4m3fn weights, each 4096 x 4096 (the last cut to fit) beside
its float32 weight_scale_inv (one scale per 128 x 128 block, the layout of DeepSeek-V3 and
transformers' FineGrainedFP8Config), and config.json with quantization_config beside it.

    make_fp8.py DIR MIB
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file


def main(out, mib):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.safetensors")
    if os.path.exists(path) and os.path.getsize(path) >= mib << 20:
        return
    g = torch.Generator().manual_seed(0)
    sd = {}
    left = mib << 20
    i = 0
    while left > 0:
        rows = min(4096, max(128, left // 4096 // 128 * 128))
        w = torch.randn(rows, 4096, generator=g) * 0.02
        blocks = w.reshape(rows // 128, 128, 32, 128).abs().amax(dim=(1, 3)).clamp(min=1e-12)
        scale = blocks / torch.finfo(torch.float8_e4m3fn).max
        q = (w / scale.repeat_interleave(128, 0).repeat_interleave(128, 1)).to(torch.float8_e4m3fn)
        sd[f"layers.{i}.mlp.weight"] = q
        sd[f"layers.{i}.mlp.weight_scale_inv"] = scale.float()
        left -= rows * 4096
        i += 1
    save_file(sd, path)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["BenchModel"], "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}},
            f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
