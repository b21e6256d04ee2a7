#!/usr/bin/env python3
"""Writes legacy_storages.pt: torch.save(..., _use_new_zipfile_serialization=False) of a dict of
180k distinct one-element tensors (`t<i>`), so the legacy stream holds 180k storages, ~8.6 MB.
Issue 16: opening it took 47 s (the storage key list was matched by a linear search per key).

Usage: many_legacy_storages.py OUT_DIR [N]"""
import os
import sys

import torch

out_dir = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 180_000
os.makedirs(out_dir, exist_ok=True)

obj = {f't{i}': torch.tensor([float(i)]) for i in range(N)}
path = os.path.join(out_dir, 'legacy_storages.pt')
torch.save(obj, path, _use_new_zipfile_serialization=False)
print(path)
