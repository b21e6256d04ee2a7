#!/usr/bin/env python3
"""What PyTorch's own allocator-config parser makes of PYTORCH_ALLOC_CONF strings: the oracle for
ckptscope's model of it (core/device/torch_allocator.cpp, tst_torch_allocator::parsesAsTorchDoes).

  torch_alloc_conf_oracle.py OUT.json         (run with PyTorch 2.x: scripts/torch2-python.sh)

Each string goes through c10's parser itself (torch._C._accelerator_setAllocatorSettings, which is
c10::CachingAllocator::setAllocatorSettings), in a forked child of its own so nothing one string set
carries over to the next (the parser keeps large_segment_size_mb between calls). The child then reads
back what the parser stored: roundup_power2_divisions(size) through c10's exported function for one
size in each of its 16 intervals, and large_segment_size, max_split_size, max_non_split_rounding_size
and use_expandable_segments from the AcceleratorAllocatorConfig instance, at offsets found here
first by parsing known values and locating them (so no header and no guessed layout is needed).

The build may be CPU-only: the generic keys are parsed by the same c10 code a CUDA build runs. What a
CPU build cannot show is the CUDA hook (c10/cuda/CUDAAllocatorConfig.cpp), which also refuses keys it
does not know ("a:1, ..."): for those the values are compared, not the refusal."""
import ctypes
import json
import os
import struct
import sys

import torch

# The strings of issue 42 and their neighbours: whitespace, lists, zero divisions, limits, the keys
# that change what a load reserves, and malformed ones.
CASES = [
    "",
    "expandable_segments:True",
    "expandable_segments: True",
    " expandable_segments : True , max_split_size_mb : 128 ",
    "garbage_collection_threshold:0.6, max_split_size_mb:128",
    "pinned_use_background_threads:True, max_split_size_mb:128",
    "expandable_segments:true",
    "expandable_segments:maybe",
    "max_split_size_mb:20",
    "max_split_size_mb:19",
    "max_split_size_mb:5",
    "max_split_size_mb:0",
    "max_split_size_mb:-1",
    "max_split_size_mb:128abc",
    "max_split_size_mb:abc",
    "max_split_size_mb:99999999999999999999",
    "max_split_size_mb",
    "max_split_size_mb:",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:0",
    "roundup_power2_divisions:3",
    "roundup_power2_divisions:1",
    "roundup_power2_divisions:[1:4,64:8]",
    "roundup_power2_divisions:[64:8,>:2]",
    "roundup_power2_divisions:[>:4]",
    "roundup_power2_divisions:[256:1,>:4]",
    "roundup_power2_divisions:[64:2,>:8]",
    "roundup_power2_divisions:[64:0]",
    "roundup_power2_divisions:[ 64 : 0 , 128 : 16 ]",
    "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]",
    "roundup_power2_divisions:[65536:4]",
    "roundup_power2_divisions:[64:3]",
    "roundup_power2_divisions:[65:4]",
    "roundup_power2_divisions:[64:4",
    "max_non_split_rounding_mb:64",
    "max_non_split_rounding_mb:19",
    "large_segment_size_mb:40",
    "large_segment_size_mb:10",
    "large_segment_size_mb:11, max_split_size_mb:11",
    "max_split_size_mb:30,large_segment_size_mb:40",
    "max_split_size_mb:40,large_segment_size_mb:40,max_non_split_rounding_mb:100",
    "large_segment_size_mb:64,expandable_segments:True",
    "garbage_collection_threshold:1.5",
    "max_split_size_mb:128,",
    "expandable_segments:True,,max_split_size_mb:128",
    "a:1, max_split_size_mb:128",
    "backend:cudaMallocAsync",
]


def lib():
    return ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))


def instance_bytes(n=256):
    f = lib()._ZN3c1016CachingAllocator26AcceleratorAllocatorConfig8instanceEv
    f.restype = ctypes.c_void_p
    return ctypes.string_at(f(), n)


def divisions():
    f = lib()._ZN3c1016CachingAllocator26AcceleratorAllocatorConfig24roundup_power2_divisionsEm
    f.restype = ctypes.c_size_t
    f.argtypes = [ctypes.c_size_t]
    # One size in each interval: below 2 MiB, then [2^k, 2^(k+1)) MiB up to 32 GiB and beyond.
    return [f((1 << 20) if i == 0 else (1 << (20 + i))) for i in range(16)]


def in_child(work):
    """work() in a forked child; its JSON-able answer comes back through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = work()
        except BaseException as e:  # noqa: BLE001 - the parser's refusal is the answer
            out = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def calibrate():
    """The offsets of the four fields in the instance, from values only they can hold."""
    mb = 1 << 20
    probe = {"large_segment_size": 37 * mb, "max_split_size": 1234567 * mb, "max_non_split_rounding_size": 7654321 * mb}

    def read(expandable):
        def work():
            torch._C._accelerator_setAllocatorSettings(
                "large_segment_size_mb:37,max_split_size_mb:1234567,max_non_split_rounding_mb:7654321,"
                f"expandable_segments:{expandable}")
            return list(instance_bytes())
        return bytes(in_child(work))

    on, off = read("True"), read("False")
    offsets = {}
    for name, value in probe.items():
        hits = [o for o in range(0, len(on) - 7, 8) if struct.unpack_from("<Q", on, o)[0] == value]
        if len(hits) != 1:
            sys.exit(f"cannot find {name} in the allocator config instance ({hits})")
        offsets[name] = hits[0]
    # The one byte that is 1 with expandable segments and 0 without (the settings string differs too).
    diff = [o for o in range(len(on)) if on[o] == 1 and off[o] == 0]
    if len(diff) != 1:
        sys.exit(f"cannot find use_expandable_segments in the allocator config instance ({diff})")
    offsets["expandable_segments"] = diff[0]
    return offsets


# Which variable torch reads when several are set (an empty one counts as set): a fresh interpreter
# each, since c10 reads the environment once.
ENVIRONMENTS = [
    {"PYTORCH_ALLOC_CONF": "max_split_size_mb:100"},
    {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:200"},
    {"PYTORCH_ALLOC_CONF": "max_split_size_mb:100", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:200"},
    {"PYTORCH_ALLOC_CONF": "max_split_size_mb:100", "PYTORCH_CUDA_ALLOC_CONF": ""},
    {"PYTORCH_ALLOC_CONF": "max_split_size_mb:100", "PYTORCH_HIP_ALLOC_CONF": "max_split_size_mb:300"},
]

ENV_CHILD = r"""
import ctypes, os, struct, sys, torch
lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
f = lib._ZN3c1016CachingAllocator26AcceleratorAllocatorConfig8instanceEv
f.restype = ctypes.c_void_p
print(struct.unpack_from("<Q", ctypes.string_at(f(), 64), int(sys.argv[1]))[0])
"""


def environments(offsets):
    import subprocess
    out = []
    for env in ENVIRONMENTS:
        full = {k: v for k, v in os.environ.items() if not k.endswith("_ALLOC_CONF")}
        full.update(env)
        r = subprocess.run([sys.executable, "-c", ENV_CHILD, str(offsets["max_split_size"])], env=full,
                           capture_output=True, text=True, timeout=120, check=True)
        out.append({"environment": env, "max_split_size": int(r.stdout)})
        print(json.dumps(out[-1]), flush=True)
    return out


def main():
    offsets = calibrate()
    cases = []
    for conf in CASES:
        def work(conf=conf):
            torch._C._accelerator_setAllocatorSettings(conf)
            raw = instance_bytes()
            out = {k: struct.unpack_from("<Q", raw, o)[0] for k, o in offsets.items() if k != "expandable_segments"}
            out["expandable_segments"] = bool(raw[offsets["expandable_segments"]])
            out["roundup_power2_divisions"] = divisions()
            return out
        answer = in_child(work)
        answer["conf"] = conf
        cases.append(answer)
        print(json.dumps(answer), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(sys.argv[1])), exist_ok=True)
    with open(sys.argv[1], "w") as f:
        json.dump({"source": f"c10's allocator config parser of PyTorch {torch.__version__} "
                             "(tests/device/torch_alloc_conf_oracle.py)",
                   "offsets": offsets, "cases": cases, "environments": environments(offsets)}, f, indent=1)


if __name__ == "__main__":
    main()
