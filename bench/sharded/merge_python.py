#!/usr/bin/python3
"""The Python route for a Hugging Face set: every shard torch.load'ed, merged, torch.save'd.
Usage: merge_python.py SET_DIR OUT"""
import collections
import json
import os
import sys

import torch

folder, out = sys.argv[1], sys.argv[2]
with open(os.path.join(folder, "pytorch_model.bin.index.json")) as f:
    weight_map = json.load(f)["weight_map"]
sd = collections.OrderedDict()
for shard in sorted(set(weight_map.values())):
    sd.update(torch.load(os.path.join(folder, shard), map_location="cpu"))
torch.save(sd, out)
