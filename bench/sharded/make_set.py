#!/usr/bin/python3
"""Writes a Hugging Face sharded .bin set of SIZE MiB (idempotent) with real PyTorch: 4 shards of
float32 tensors of 16 MiB each, named and indexed as huggingface_hub names them.
Usage: make_set.py OUTDIR SIZE_MIB"""
import collections
import json
import os
import sys

import torch

out, size_mib = sys.argv[1], int(sys.argv[2])
folder = os.path.join(out, f"hf_{size_mib}m")
index = os.path.join(folder, "pytorch_model.bin.index.json")
if not os.path.exists(index):
    os.makedirs(folder, exist_ok=True)
    shards, per_tensor = 4, 4 * 1024 * 1024
    per_shard = max(1, size_mib // 16 // shards)
    weight_map, total = {}, 0
    for i in range(1, shards + 1):
        sd = collections.OrderedDict((f"layers.{i}.{j}.weight", torch.randn(per_tensor)) for j in range(per_shard))
        name = f"pytorch_model-{i:05d}-of-{shards:05d}.bin"
        torch.save(sd, os.path.join(folder, name))
        for k, t in sd.items():
            weight_map[k] = name
            total += t.numel() * 4
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, sort_keys=True)
print(folder)
