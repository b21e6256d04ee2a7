#!/usr/bin/env python3
"""The numbers the test-load is compared with on a GPU machine:
  1. pinned host->device bandwidth (a 1 GiB pinned buffer copied to cuda:0, best of 5);
  2. torch.load(FILE, map_location='cuda:0') wall time (best of 3, page cache warm);
  3. what that load holds on the GPU, in a fresh process: the caching allocator's reserved bytes
     and the whole process's use as the driver reports it (nvidia-smi: context + segments), which
     is what ckptscope's predicted `torch_load_peak_bytes` is compared with.
Prints one JSON line.

    torch_baseline.py FILE
"""
import json
import subprocess
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


def process_gpu_bytes(pid):
    """This process's memory on the GPUs, from the driver (what NVML and nvidia-smi see); 0 when
    the driver does not list this PID (inside a container's PID namespace it lists host PIDs)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout
    used = 0
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            used += int(fields[1]) << 20  # MiB
    return used


def device_used_bytes():
    """cuda:0's whole use as the driver reports it (no context needed)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=False).stdout.strip()
    return int(out.splitlines()[0]) << 20 if out else 0


def fresh_load_footprint(path):
    """In a new process: torch.load onto cuda:0, then its reserved bytes and the driver's view."""
    # The process's own row where the driver lists it; else cuda:0's rise from before this process
    # touched CUDA (right while nothing else runs there), so a container never reads 0.
    code = ("import json, os, sys, torch, subprocess\n"
            "sys.path.insert(0, os.path.dirname(sys.argv[2]))\n"
            "from torch_baseline import process_gpu_bytes, device_used_bytes\n"
            "before = device_used_bytes()\n"
            "sd = torch.load(sys.argv[1], map_location='cuda:0'); torch.cuda.synchronize()\n"
            "own = process_gpu_bytes(os.getpid())\n"
            "rise = device_used_bytes() - before\n"
            "print(json.dumps({'reserved': torch.cuda.memory_reserved(0), 'process': own or rise,\n"
            "                  'source': 'nvidia-smi process' if own else 'nvidia-smi device rise'}))\n")
    out = subprocess.run([sys.executable, "-c", code, path, __file__], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    path = sys.argv[1]
    bw = pinned_bandwidth()
    seconds, peak, nbytes = torch_load_time(path)
    fresh = fresh_load_footprint(path)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                      "pinned_h2d_gb_per_s": bw, "torch_load_seconds": seconds,
                      "torch_load_gb_per_s": nbytes / seconds / 1e9, "torch_load_peak_allocated": peak,
                      "torch_load_reserved_bytes": fresh["reserved"],
                      "torch_load_process_bytes": fresh["process"],
                      "torch_load_process_source": fresh["source"], "bytes": nbytes}))


if __name__ == "__main__":
    main()
