#!/usr/bin/python3
"""Fixtures only PyTorch 2.x writes, for the values ckptscope reports on them (issue 25).

Run with the python of the PyTorch 2.x root (scripts/torch2-python.sh, made by
scripts/modern-torch.sh):

    gen_torch2_values.py OUTDIR        writes the files below and OUTDIR/oracle.json, manifest.json last
    gen_torch2_values.py compare A B   exit 0 when torch.load(A) and torch.load(B) (weights_only, the
                                       2.x default) hold the same keys, dtypes, shapes and bytes

Files:
- untyped_dtypes.pt: one whole tensor of each dtype torch.save writes through an UntypedStorage
  (uint16/32/64, float8 kinds, complex32, bits16): nothing is stored that no tensor reaches.
- untyped_views.pt: views of such storages (a slice, a transposed 2-d tensor), so some bytes are
  stored that no view reaches; the oracle gives the bytes each view reaches and each storage holds.
- nested.pt: a torch.nested tensor of two components of different shapes, beside a plain tensor.

oracle.json: {file: {"tensors": {key: {...}}}}, each tensor with what torch says of it: dtype,
shape (nested: "components", each component's shape, and "numel"), "storage_nbytes", "reached"
(the bytes [begin, end) of the storage the view reaches, from torch's own offset and strides),
and for floating tensors "min", "max", "mean" over the real values.
"""
import json
import os
import sys

import torch


def reached(t):
    size = t.element_size()
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return [t.storage_offset() * size, (last + 1) * size]


def describe(t):
    if t.is_nested:
        comps = t.unbind()
        values = torch.cat([c.reshape(-1) for c in comps]).double()
        return {"dtype": str(t.dtype).removeprefix("torch."), "nested": True,
                "components": [list(c.shape) for c in comps], "numel": int(values.numel()),
                "min": values.min().item(), "max": values.max().item(), "mean": values.mean().item()}
    d = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
         "storage_nbytes": t.untyped_storage().nbytes(), "reached": reached(t)}
    if t.dtype.is_floating_point and t.numel() > 0:
        v = t.double()
        d.update({"min": v.min().item(), "max": v.max().item(), "mean": v.mean().item()})
    return d


def fixtures():
    u16 = torch.tensor([0, 1, 2, 65535, 7], dtype=torch.uint16)
    u32 = torch.tensor([0, 1, 2, 2 ** 32 - 1, 7], dtype=torch.uint32)
    u64 = torch.tensor([0, 1, 2, 2 ** 63, 7], dtype=torch.uint64)
    yield "untyped_dtypes.pt", {
        "u16": u16, "u32": u32, "u64": u64,
        "f8_e4m3fn": torch.tensor([0.5, -1.0, 2.0], dtype=torch.float8_e4m3fn),
        "f8_e5m2": torch.tensor([0.25, 4.0, -8.0], dtype=torch.float8_e5m2),
        "c32": torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex32),
        "bits16": torch.zeros(3, dtype=torch.bits16),
    }
    full = torch.tensor(list(range(10)), dtype=torch.uint64)
    f8 = torch.tensor([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0], dtype=torch.float8_e4m3fn)
    yield "untyped_views.pt", {
        "u64_slice": full[2:5],
        "f8_slice": f8[4:6],
        "u32_t": torch.tensor([[1, 2], [3, 4]], dtype=torch.uint32).t(),
    }
    nt = torch.nested.nested_tensor([torch.arange(6.0).reshape(2, 3), torch.arange(4.0).reshape(2, 2) - 10])
    yield "nested.pt", {"nested": nt, "plain": torch.ones(2)}


def generate(outdir):
    os.makedirs(outdir, exist_ok=True)
    manifest = os.path.join(outdir, "manifest.json")
    if os.path.exists(manifest):
        os.remove(manifest)
    oracle = {}
    for name, sd in fixtures():
        torch.save(sd, os.path.join(outdir, name))
        back = torch.load(os.path.join(outdir, name))
        oracle[name] = {"tensors": {k: describe(v) for k, v in back.items()}}
    with open(os.path.join(outdir, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=1)
    with open(manifest, "w") as f:
        json.dump({"torch": torch.__version__, "files": sorted(oracle)}, f)


def as_bytes(t):
    if t.is_nested:
        return b"".join(as_bytes(c) for c in t.unbind())
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def compare(a, b):
    x, y = torch.load(a), torch.load(b)
    problems = []
    if list(x) != list(y):
        problems.append(f"keys {list(x)} != {list(y)}")
    for k in x:
        if k not in y:
            continue
        if x[k].dtype != y[k].dtype or x[k].is_nested != y[k].is_nested:
            problems.append(f"{k}: {x[k].dtype} != {y[k].dtype}")
        elif not x[k].is_nested and x[k].shape != y[k].shape:
            problems.append(f"{k}: shape {list(x[k].shape)} != {list(y[k].shape)}")
        elif as_bytes(x[k]) != as_bytes(y[k]):
            problems.append(f"{k}: values differ")
    print("; ".join(problems) if problems else "equal")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    generate(sys.argv[1])
