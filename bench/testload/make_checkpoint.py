#!/usr/bin/env python3
"""Writes a multi-GB checkpoint for the test-load benchmark: a state dict of bf16/fp32 tensors of
mixed sizes (a few large matrices, many small vectors), saved as torch.save does (zip, 64-byte
aligned records), optionally from cuda:0 so plain torch.load would pin it there.

    make_checkpoint.py OUT.pt [--gib 4] [--from-cuda]
"""
import argparse

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--from-cuda", action="store_true", help="save the tensors from cuda:0")
    args = ap.parse_args()
    target = int(args.gib * (1 << 30))
    g = torch.Generator().manual_seed(0)
    sd, total, i = {}, 0, 0
    while total < target:
        # Transformer-ish: one 4096x4096 bf16 matrix (32 MiB), an fp32 4096 vector, a 4096x11008 bf16.
        for name, shape, dtype in (("attn.weight", (4096, 4096), torch.bfloat16),
                                   ("norm.weight", (4096,), torch.float32),
                                   ("mlp.weight", (4096, 11008), torch.bfloat16)):
            t = torch.empty(shape, dtype=dtype)
            t.uniform_(-1, 1, generator=g)
            if args.from_cuda:
                t = t.to("cuda:0")
            sd[f"layers.{i}.{name}"] = t
            total += t.numel() * t.element_size()
        i += 1
    torch.save(sd, args.out)
    print(f"wrote {args.out}: {len(sd)} tensors, {total / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
