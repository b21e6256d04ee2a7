#!/usr/bin/env python3
"""The two numbers the test-load is compared with on a GPU machine:
  1. pinned host->device bandwidth (a 1 GiB pinned buffer copied to cuda:0, best of 5);
  2. torch.load(FILE, map_location='cuda:0') wall time (best of 3, page cache warm), with its peak
     allocated memory.
Prints one JSON line.

    torch_baseline.py FILE
"""
import json
import sys
import time

import torch


def pinned_bandwidth(nbytes=1 << 30, repeats=5):
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def torch_load_time(path, repeats=3):
    best, peak, nbytes = float("inf"), 0, 0
    for _ in range(repeats):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        sd = torch.load(path, map_location="cuda:0")
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
        peak = torch.cuda.max_memory_allocated(0)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values() if torch.is_tensor(t))
        del sd
    return best, peak, nbytes


def main():
    path = sys.argv[1]
    bw = pinned_bandwidth()
    seconds, peak, nbytes = torch_load_time(path)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                      "pinned_h2d_gb_per_s": bw, "torch_load_seconds": seconds,
                      "torch_load_gb_per_s": nbytes / seconds / 1e9, "torch_load_peak_bytes": peak,
                      "bytes": nbytes}))


if __name__ == "__main__":
    main()
