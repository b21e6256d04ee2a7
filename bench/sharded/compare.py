#!/usr/bin/python3
"""Checks that two consolidated files hold the same thing: the same nested keys, torch.equal on every
tensor (dtype and shape too), == on everything else; the order of keys is not compared. Prints one line (with the largest tensor's bytes); exit 1 on any difference.
Usage: compare.py A.pt B.pt"""
import sys

import torch


def walk(a, b, path, out, sizes):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if isinstance(a, torch.Tensor):
            sizes.append(a.numel() * a.element_size())
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dtype != b.dtype \
                or a.shape != b.shape or not torch.equal(a, b):
            out.append(path)
        return 1
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            out.append(f"{path} keys {sorted(set(a) ^ set(b))[:5]}")
            return 0
        return sum(walk(a[k], b[k], f"{path}.{k}" if path else str(k), out, sizes) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return sum(walk(x, y, f"{path}.{i}", out, sizes) for i, (x, y) in enumerate(zip(a, b)))
    if a != b:
        out.append(f"{path} ({a!r} != {b!r})")
    return 0


def main(x, y):
    a = torch.load(x, map_location="cpu")
    b = torch.load(y, map_location="cpu")
    bad, sizes = [], []
    n = walk(a, b, "", bad, sizes)
    if bad:
        print(f"DIFFER: {len(bad)} of {n} tensors or values differ, first: {bad[:3]}")
        sys.exit(1)
    print(f"equal: {n} tensors, torch.equal on each; largest tensor {max(sizes, default=0)} bytes")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
