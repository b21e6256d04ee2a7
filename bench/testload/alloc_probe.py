#!/usr/bin/env python3
"""Calibrates ckptscope's model of PyTorch's CUDA caching allocator (core/device/torch_allocator.cpp)
on a real GPU: allocates a deterministic list of storage sizes in order, as torch.load does (one
block per storage, nothing freed), under each PYTORCH_CUDA_ALLOC_CONF given, and prints what the
allocator reserved and allocated. One child process per configuration, since the allocator reads
its configuration once.

  python3 alloc_probe.py OUT.json [CONF ...]     ("" is the default configuration)

The size lists (seeded, so a test can replay them without a GPU) are in sizes_for()."""
import json
import os
import random
import subprocess
import sys


def sizes_for(name):
    rng = random.Random(name)
    if name == "mixed":  # many < 1 MiB and 1-10 MiB storages, plus a few large ones
        return [rng.choice([300, 70_000, 900_000, 1_500_000, 3_000_000, 7_000_000, 25_000_000]) for _ in range(400)]
    if name == "small":
        return [rng.randint(1, 1 << 20) for _ in range(1000)]
    if name == "large":
        return [rng.randint(1 << 20, 200 << 20) for _ in range(120)]
    raise ValueError(name)


CHILD = r"""
import json, sys, torch
from bench_sizes import sizes_for
out = {}
for name in sys.argv[1:]:
    torch.cuda.empty_cache()
    keep = [torch.empty(n, dtype=torch.uint8, device="cuda:0") for n in sizes_for(name)]
    torch.cuda.synchronize()
    out[name] = {"reserved": torch.cuda.memory_reserved(0), "allocated": torch.cuda.memory_allocated(0)}
    del keep
    torch.cuda.empty_cache()
print(json.dumps(out))
"""


def main():
    out_path = sys.argv[1]
    confs = sys.argv[2:] or [""]
    here = os.path.dirname(os.path.abspath(__file__))
    results = {}
    for conf in confs:
        env = dict(os.environ)
        env.pop("PYTORCH_ALLOC_CONF", None)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
        child = CHILD.replace("from bench_sizes import sizes_for", "from alloc_probe import sizes_for")
        r = subprocess.run([sys.executable, "-c", child, "mixed", "small", "large"], env=env,
                           capture_output=True, text=True, timeout=120)
        results[conf or "default"] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-2000:]}
        print(conf or "default", results[conf or "default"], flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
