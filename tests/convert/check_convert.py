#!/usr/bin/python3
"""Checks `ckptscope convert` outputs against their sources with real PyTorch 1.13.

    check_convert.py JOBS.json   ->  {"results": [{"ok", "problems", "tensors"}]} on stdout

Each job is {"out", "src" (or null), "model", "dp", "select", "exact", "metadata"}; one Python start
checks them all (importing torch costs seconds).

1. OUT loads with the PyTorch 2.6 weights_only stand-in (torch_oracle.weights_only_load).
2. OUT loads with plain torch.load(OUT), no map_location, on this GPU-less machine.
3. Every tensor of OUT equals a tensor of SRC at the same path, once wrapper prefixes are set
   aside and whole-model paths (`_modules/conv/_parameters/weight`) are read as state-dict keys
   (`conv.weight`): dtype, shape and bytes (sha256). A state-dict source keeps every tensor.
   With "exact", paths must match as they are, and requires_grad/Parameter/stride too (a round
   trip); with "metadata", the state dicts' `_metadata` must be equal.
4. With "model", OUT (or its "select" value) loads into fixture_models.<model> with strict=True
   (wrapped in nn.DataParallel with "dp").
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch_oracle  # noqa: E402

WRAPPERS = ("module.", "_orig_mod.", "_module.")


def strip_wrappers(name):
    changed = True
    while changed:
        changed = False
        for w in WRAPPERS:
            if name.startswith(w):
                name, changed = name[len(w):], True
    return name


def state_key(path):
    """A tensor path as the state-dict key it stands for."""
    parts = path.split("/")
    if "_parameters" in parts or "_buffers" in parts:
        names = [p for p in parts if p not in ("_modules", "_parameters", "_buffers")]
        return strip_wrappers(".".join(names))
    return "/".join(strip_wrappers(p) for p in parts)


def check(job):
    src, out = job.get("src"), job["out"]
    exact = job.get("exact", False)
    problems = []

    try:
        torch_oracle.weights_only_load(out)
    except Exception as e:  # noqa: BLE001
        problems.append(f"weights-only load failed: {e}")
    try:
        loaded = torch.load(out)
    except Exception as e:  # noqa: BLE001
        problems.append(f"torch.load failed: {e}")
        loaded = None

    o = torch_oracle.oracle(out)
    for t in o["tensors"]:
        if t["location"] not in ("cpu", "meta", None) and not exact:
            problems.append(f"{t['path']}: saved on {t['location']}")
    if src:
        s = torch_oracle.oracle(src)
        src_value = torch_oracle.load_recorded(src)[0] if torch_oracle.detect_format(src) != "safetensors" else None
        converted = 0
        key = (lambda p: p) if exact else state_key
        by_src = {}
        for t in s["tensors"]:
            by_src.setdefault(key(t["path"]), t)
        whole_model = any("_parameters" in t["path"].split("/") for t in s["tensors"])
        for t in o["tensors"]:
            k = key(t["path"])
            ref = by_src.get(k)
            if ref is None and src_value is not None:
                # --weights-only turns a numeric numpy array into a tensor of the same values and shape.
                try:
                    arr = torch_oracle.select(src_value, t["path"])
                except (KeyError, IndexError, AttributeError):
                    arr = None
                if isinstance(arr, np.ndarray):
                    got = torch_oracle.select(loaded, t["path"]) if loaded is not None else None
                    if got is None or list(got.shape) != list(arr.shape) or not np.array_equal(got.numpy(), arr):
                        problems.append(f"{t['path']}: numpy array not kept with its values and shape")
                    converted += 1
                    continue
            if ref is None:
                problems.append(f"{t['path']}: no source tensor at {k}")
                continue
            fields = ["dtype", "shape", "sha256", "form"] + (["requires_grad", "is_parameter", "stride"] if exact else [])
            for f in fields:
                if t[f] != ref[f]:
                    problems.append(f"{t['path']}: {f} {t[f]} != source {ref[f]}")
        if not whole_model and len(o["tensors"]) != len(s["tensors"]) + converted:
            problems.append(f"{len(o['tensors'])} tensors written, the source has {len(s['tensors'])}")
        if job.get("metadata") and o.get("state_dict_metadata") != s.get("state_dict_metadata"):
            problems.append(f"_metadata {o.get('state_dict_metadata')} != source {s.get('state_dict_metadata')}")

    if job.get("model") and loaded is not None:
        import fixture_models
        from torch import nn
        model = fixture_models.make(job["model"])
        if job.get("dp"):
            model = nn.DataParallel(model)
        state = torch_oracle.select(loaded, job["select"]) if job.get("select") else loaded
        try:
            model.load_state_dict(state, strict=True)
        except Exception as e:  # noqa: BLE001
            problems.append(f"strict load failed: {e}")
    return {"ok": not problems, "problems": problems, "tensors": len(o["tensors"])}


def main(argv):
    with open(argv[1]) as f:
        jobs = json.load(f)
    results = []
    for job in jobs:
        try:
            results.append(check(job))
        except Exception as e:  # noqa: BLE001
            results.append({"ok": False, "problems": [f"checker failed: {e!r}"], "tensors": 0})
    print(json.dumps({"results": results}))
    return 0


if __name__ == "__main__":
    import warnings
    warnings.simplefilter("ignore")
    sys.exit(main(sys.argv))
