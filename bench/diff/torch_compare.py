#!/usr/bin/python3
"""What people do today: load both files and compare every common key with torch.equal, then
torch.allclose for those that differ. The prefix is stripped by hand. Usage: torch_compare.py A B"""
import sys

import torch

a = torch.load(sys.argv[1], map_location="cpu")
b = torch.load(sys.argv[2], map_location="cpu")
sa = {k[len("module."):] if k.startswith("module.") else k: v for k, v in a["state_dict"].items()}
sb = b["state_dict"]
changed = [k for k in sa.keys() & sb.keys() if not torch.equal(sa[k], sb[k])]
close = [k for k in changed if torch.allclose(sa[k], sb[k])]
print(f"only in A {len(sa.keys() - sb.keys())}, only in B {len(sb.keys() - sa.keys())}, "
      f"changed {len(changed)} ({len(close)} allclose), epoch {a['epoch']} -> {b['epoch']}")
