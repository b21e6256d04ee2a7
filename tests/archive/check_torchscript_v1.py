#!/usr/bin/python3
"""A TorchScript archive in PyTorch 1.0's first layout (model.json, tensors/N, attributes.pkl, no
data.pkl) is named as such in one line, exit 2:

    check_torchscript_v1.py CKPTSCOPE WORKDIR

Hand-built: no PyTorch that writes the layout (1.0-1.2) runs here. The records and model.json's
fields follow PyTorch 1.0's torch/csrc/jit/export.cpp (ScriptModuleSerializer: `convertModel`,
`convertParameter`, `writeTensorTable`) and caffe2/proto/torch.proto (ModelDef, ModuleDef,
TensorDef, RecordRef) as protobuf's JSON printer writes them (docs/format.md §11.1).
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
                            "name": "fc", "optimize": True}],
            "torchscriptArena": {"key": "code/archive.py"},
            "name": "archive", "optimize": True},
        "producerName": "pytorch", "producerVersion": "1.0",
        "tensors": [{"dims": ["3", "4"], "offset": "0", "strides": ["4", "1"], "requiresGrad": True,
                     "dataType": "FLOAT", "data": {"key": "tensors/0"}, "device": "cpu"},
                    {"dims": ["3"], "offset": "0", "strides": ["1"], "requiresGrad": True,
                     "dataType": "FLOAT", "data": {"key": "tensors/1"}, "device": "cpu"}]}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/version", "1\n")
        z.writestr("archive/model.json", json.dumps(model))
        z.writestr("archive/code/archive.py", "op_version_set = 0\n")
        z.writestr("archive/attributes.pkl", b"\x80\x02).")
        z.writestr("archive/tensors/0", struct.pack("<12f", *range(12)))
        z.writestr("archive/tensors/1", struct.pack("<3f", 0.5, 1.5, 2.5))


def main(tool, work):
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "torchscript_v1.pt")
    build(path)
    r = subprocess.run([tool, "inspect", path], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == 2 and len(lines) == 1 and "PyTorch 1.0-1.2" in lines[0] and "model.json" in lines[0]
    print(f"inspect: exit {r.returncode}, stderr {r.stderr.strip()!r}")
    print("torchscript v1:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
