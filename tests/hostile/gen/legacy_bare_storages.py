#!/usr/bin/env python3
"""Writes legacy_bare_storages.pt: torch.save(..., _use_new_zipfile_serialization=False) of a list
of 180k one-element FloatStorages: the issue-16 shape of "a legacy file with 180k storages"
(~12 MB with torch 1.13; the issue's was 8.6 MB), where every record is a storage and nothing else.
Opening it took 65 s (a linear search of the storage table per key).

Usage: legacy_bare_storages.py OUT_DIR [N]"""
import os
import sys

import torch

out_dir = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 180_000
os.makedirs(out_dir, exist_ok=True)
path = os.path.join(out_dir, 'legacy_bare_storages.pt')
torch.save([torch.FloatStorage([float(i)]) for i in range(N)], path, _use_new_zipfile_serialization=False)
print(path)
