#!/usr/bin/python3
"""Writes the benchmark checkpoints with real PyTorch (idempotent):
  big_1gib.pt  512 float32 tensors, 1 GiB, `module.` keys, storages stamped cuda:0 (a DDP save)
  keys_40k.pt  a 40 000-key state dict of small tensors
  module_40k.pt  a DDP model's state dict as issue 29 met it: 40 000 tensors, one storage each,
               `module.` keys of a deep model, matrices and vectors of 15 MB in all
Usage: make_checkpoints.py OUTDIR"""
import os
import sys
from collections import OrderedDict

import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

_stamp = {}


def _tagger(obj):
    ptr = obj.data_ptr() if hasattr(obj, "data_ptr") else None
    return _stamp.get(ptr)


def _restore(obj, location):
    return None


torch.serialization.register_package(0, _tagger, _restore)

big = os.path.join(out, "big_1gib.pt")
if not os.path.exists(big):
    torch.manual_seed(0)
    sd = OrderedDict()
    per = (1 << 30) // 512 // 4  # float32 elements per tensor
    for i in range(512):
        t = torch.empty(per, dtype=torch.float32).uniform_()
        sd[f"module.layers.{i}.weight"] = t.view(512, per // 512)
        _stamp[t.storage().data_ptr()] = "cuda:0"
    torch.save(sd, big)
    _stamp.clear()

keys = os.path.join(out, "keys_40k.pt")
if not os.path.exists(keys):
    sd = OrderedDict((f"blocks.{i // 8}.layer{i % 8}.weight", torch.full((4,), float(i))) for i in range(40000))
    torch.save(sd, keys)
module = os.path.join(out, "module_40k.pt")
if not os.path.exists(module):
    torch.manual_seed(0)
    sd = OrderedDict()
    names = ("attention.self.query.weight", "attention.self.query.bias", "attention.output.dense.weight",
             "attention.output.LayerNorm.weight", "intermediate.dense.weight", "intermediate.dense.bias",
             "output.dense.weight", "output.LayerNorm.bias")
    for i in range(40000):
        name = names[i % len(names)]
        shape = (8, 12) if name.endswith("dense.weight") or name.endswith("query.weight") else (96,)
        sd[f"module.encoder.layer.{i // len(names)}.{name}"] = torch.randn(shape)
    torch.save(sd, module)
print(out)
