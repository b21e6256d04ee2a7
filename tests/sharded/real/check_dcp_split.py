#!/usr/bin/env python3
"""On a machine with PyTorch 2.x: proves that the single-rank DCP folders `ckptscope convert FILE -o
DIR --format dcp` writes are what torch.distributed.checkpoint loads.

    check_dcp_split.py CKPTSCOPE OUT FILE...

For each FILE: convert it, then (1) format_utils.dcp_to_torch_save(DIR) must give back every value
of torch.load(FILE), tensors bit for bit; (2) dcp.load into a state dict of zeros shaped like the
file's tensors (the DefaultLoadPlanner path a training script uses, no process group) must fill it
with the file's tensors. Prints one line per file and exits 1 on any difference.
"""
import subprocess
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


def flat(d, p=()):
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            out.update(flat(v, p + (str(k),)))
        return out
    if isinstance(d, list) and any(isinstance(v, (dict, list, torch.Tensor)) for v in d):
        out = {}
        for i, v in enumerate(d):
            out.update(flat(v, p + (str(i),)))
        return out
    return {p: d}


def differences(got, want):
    g, w = flat(got), flat(want)
    bad = [".".join(k) for k in set(g) | set(w) if k not in g or k not in w]
    for k in set(g) & set(w):
        a, b = g[k], w[k]
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.dtype != b.dtype or not torch.equal(a, b):
                bad.append(".".join(k))
        elif a != b and not (isinstance(a, (list, tuple)) and list(a) == list(b)):
            bad.append(".".join(k))
    return sorted(bad)


def zeros_like_tree(d):
    if isinstance(d, dict):
        return {k: zeros_like_tree(v) for k, v in d.items() if isinstance(v, (dict, torch.Tensor))}
    return torch.zeros_like(d)


def main():
    ckptscope, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    failed = 0
    for i, f in enumerate(files):
        d = f"{out}/split{i}"
        r = subprocess.run([ckptscope, "convert", f, "-o", d, "--format", "dcp"], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {f}: convert exited {r.returncode}: {r.stderr.strip()}")
            failed += 1
            continue
        want = torch.load(f, map_location="cpu", weights_only=False)
        dcp_to_torch_save(d, d + ".pt")
        back = torch.load(d + ".pt", weights_only=False)
        bad = differences(back, want)
        template = zeros_like_tree(want)
        dcp.load(template, checkpoint_id=d, no_dist=True)
        tensors_only = zeros_like_tree(want)
        bad_load = [k for k in differences(template, {k: v for k, v in want.items()}) if k in
                    {".".join(p) for p in flat(tensors_only)}]
        n = sum(isinstance(v, torch.Tensor) for v in flat(want).values())
        status = "ok" if not bad and not bad_load else "FAIL"
        failed += status != "ok"
        print(f"{status} {f}: {n} tensors; dcp_to_torch_save differs in {bad[:5]}; dcp.load differs in {bad_load[:5]}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
