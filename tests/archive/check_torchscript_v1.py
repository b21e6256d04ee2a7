#!/usr/bin/python3
"""A TorchScript archive in PyTorch 1.0's first layout (model.json, tensors/N, attributes.pkl, no
data.pkl) is read as its modules' state dict, and named:

    check_torchscript_v1.py CKPTSCOPE WORKDIR

Hand-built: no PyTorch that writes the layout (1.0-1.2) runs here. The records and model.json's
fields follow PyTorch 1.0's torch/csrc/jit/export.cpp (ScriptModuleSerializer: `convertModel`,
`convertParameter`, `writeTensorTable`) and caffe2/proto/torch.proto (ModelDef, ModuleDef,
TensorDef, RecordRef) as protobuf's JSON printer writes them, and what 1.4's import_legacy.cpp
(LEGACY_deserialize, LEGACY_loadTensor, LEGACY_convertModule) reads (docs/format.md §11.1). Today's
torch.jit.load (1.13 and 2.14 as Debian builds them) refuses the layout ("Legacy model format is not
supported on mobile."), so the values written are the oracle: inspect lists each parameter at its
dotted name with its dtype, shape, stride and offset (one a view at offset 1 of a shared record), a
warning names the layout and its writer, and convert writes a file torch.load reads with
weights_only=True holding the same values.
"""
import json
import os
import struct
import subprocess
import sys
import zipfile


def build(path):
    model = {
        "protoVersion": "2",
        "mainModule": {
            "submodules": [{"parameters": [{"isBuffer": False, "tensorId": "0", "name": "weight"},
                                           {"isBuffer": False, "tensorId": "1", "name": "bias"}],
                            "name": "fc", "optimize": True},
                           {"parameters": [{"isBuffer": True, "tensorId": "2", "name": "running"}],
                            "name": "norm", "optimize": True}],
            "torchscriptArena": {"key": "code/archive.py"},
            "name": "archive", "optimize": True},
        "producerName": "pytorch", "producerVersion": "1.0",
        "tensors": [{"dims": ["3", "4"], "offset": "0", "strides": ["4", "1"], "requiresGrad": True,
                     "dataType": "FLOAT", "data": {"key": "tensors/0"}, "device": "cpu"},
                    {"dims": ["3"], "offset": "0", "strides": ["1"], "requiresGrad": True,
                     "dataType": "FLOAT", "data": {"key": "tensors/1"}, "device": "cpu"},
                    {"dims": ["2"], "offset": "1", "strides": ["1"], "requiresGrad": False,
                     "dataType": "INT64", "data": {"key": "tensors/2"}, "device": "cpu"}]}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/version", "1\n")
        z.writestr("archive/model.json", json.dumps(model))
        z.writestr("archive/code/archive.py", "op_version_set = 0\n")
        z.writestr("archive/attributes.pkl", b"\x80\x02].")  # protoVersion 2: a list
        z.writestr("archive/tensors/0", struct.pack("<12f", *range(12)))
        z.writestr("archive/tensors/1", struct.pack("<3f", 0.5, 1.5, 2.5))
        z.writestr("archive/tensors/2", struct.pack("<3q", 7, 8, 9))


WANT = {"fc.weight": ("float32", [3, 4], [4, 1], 0, [float(i) for i in range(12)]),
        "fc.bias": ("float32", [3], [1], 0, [0.5, 1.5, 2.5]),
        "norm.running": ("int64", [2], [1], 1, [8, 9])}


def main(tool, work):
    import torch
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "torchscript_v1.pt")
    build(path)
    errors = []
    r = subprocess.run([tool, "inspect", "--json", path], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"inspect exited {r.returncode}: {r.stderr.strip()}")
        return 1
    info = json.loads(r.stdout)
    got = {t["path"]: (t["dtype"], t["shape"], t["stride"], t["storage_offset"]) for t in info["tensors"]}
    want = {k: v[:4] for k, v in WANT.items()}
    if got != want:
        errors.append(f"inspect: {got}, written {want}")
    if not any("PyTorch 1.0-1.2" in w and "model.json" in w for w in info["warnings"]):
        errors.append(f"no warning names the layout: {info['warnings']}")
    out = os.path.join(work, "converted.pt")
    r = subprocess.run([tool, "convert", path, "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        errors.append(f"convert exited {r.returncode}: {r.stderr.strip()}")
    else:
        sd = torch.load(out, weights_only=True)
        values = {k: (str(v.dtype).removeprefix("torch."), list(v.shape), v.flatten().tolist()) for k, v in sd.items()}
        written = {k: (v[0], v[1], v[4]) for k, v in WANT.items()}
        if values != written:
            errors.append(f"convert: {values}, written {written}")
    for e in errors:
        print(e)
    print("torchscript v1:", "ok" if not errors else f"{len(errors)} difference(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
