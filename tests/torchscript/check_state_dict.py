#!/usr/bin/python3
"""Holds ckptscope's view of a TorchScript archive to torch.jit.load(f).state_dict() (torch 1.13).

    check_state_dict.py inspect ARCHIVE INSPECT_JSON   the "torchscript" state dict of inspect --json:
                                                       keys in order, dtype, shape, and the bytes
                                                       ckptscope locates (storage record, geometry)
    check_state_dict.py convert ARCHIVE CONVERTED      torch.load(weights_only=True) of the converted
                                                       file: keys in order, dtype, shape, values
Prints "ok N" or fails with the first difference.
"""
import json
import sys
import zipfile

import torch


def expected(archive):
    return torch.jit.load(archive).state_dict()


def located(archive, info, row):
    tensors = {t["path"]: t for t in info["tensors"]}
    storages = {s["key"]: s for s in info["storages"]}
    t = tensors[row["path"]]
    s = storages[t["storage"]]
    with zipfile.ZipFile(archive) as z:
        raw = z.read(s["record"])[:s["nbytes"]]
    flat = torch.frombuffer(bytearray(raw), dtype=getattr(torch, s["dtype"])) if raw else torch.empty(0)
    return flat.as_strided(t["shape"], t["stride"], t["storage_offset"])


def check_inspect(archive, info_path):
    with open(info_path, encoding="utf-8") as f:
        info = json.load(f)
    want = expected(archive)
    rows = info["torchscript"]["state_dict"]
    assert [r["key"] for r in rows] == list(want), ([r["key"] for r in rows], list(want))
    for r in rows:
        w = want[r["key"]]
        assert r["dtype"] == str(w.dtype).replace("torch.", ""), (r, w.dtype)
        assert r["shape"] == list(w.shape), (r, w.shape)
        got = located(archive, info, r)
        assert got.dtype == w.dtype and torch.equal(got, w), r["key"]
    return len(rows)


def check_convert(archive, converted):
    want = expected(archive)
    got = torch.load(converted, weights_only=True)
    assert list(got) == list(want), (list(got), list(want))
    for k, w in want.items():
        assert got[k].dtype == w.dtype and got[k].shape == w.shape and torch.equal(got[k], w), k
    return len(want)


if __name__ == "__main__":
    mode, archive, other = sys.argv[1:4]
    n = check_inspect(archive, other) if mode == "inspect" else check_convert(archive, other)
    print(f"ok {n}")
