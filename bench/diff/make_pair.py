#!/usr/bin/python3
"""Writes two checkpoints of SIZE MiB that differ in a few tensors (idempotent), with real PyTorch:
  a.pt  256 float32 tensors under `module.` keys (a DDP save), plus epoch and lr
  b.pt  the same state dict without the prefix; 3 tensors with a few elements changed, one saved under
        another key, epoch and lr moved on
Usage: make_pair.py OUTDIR SIZE_MIB"""
import os
import sys
from collections import OrderedDict

import torch

out, size_mib = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
a_path, b_path = os.path.join(out, f"a_{size_mib}m.pt"), os.path.join(out, f"b_{size_mib}m.pt")
if not (os.path.exists(a_path) and os.path.exists(b_path)):
    torch.manual_seed(0)
    count = 256
    per = size_mib * (1 << 20) // count // 4
    sd = OrderedDict()
    for i in range(count):
        sd[f"layers.{i}.weight"] = torch.empty(per, dtype=torch.float32).uniform_().view(256, per // 256)
    torch.save({"state_dict": OrderedDict(("module." + k, v) for k, v in sd.items()), "epoch": 10, "lr": 0.1}, a_path)
    for i in (3, 100, 200):
        sd[f"layers.{i}.weight"][7, :5] += 1e-3
    sd["layers.250.renamed"] = sd.pop("layers.250.weight")
    torch.save({"state_dict": sd, "epoch": 11, "lr": 0.05}, b_path)
print(a_path)
print(b_path)
