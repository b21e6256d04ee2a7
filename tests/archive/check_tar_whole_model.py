#!/usr/bin/python3
"""A tar-format whole model (`torch.save(model)` in PyTorch 0.1.x) against torch 1.13's reading:

    check_tar_whole_model.py CKPTSCOPE WORKDIR

PyTorch 0.1's `persistent_id` named each `nn.Container` subclass, the first time it met it, as
`(class, source_file, source)`; the pickler then builds the module with NEWOBJ on that id and
BUILDs its `__dict__`, and `legacy_load`'s persistent_load returns `saved_id[0]`. No torch that
writes the tar format runs on Python 3, so the file is built as gen_tar_checkpoint.py builds its
state dict (members written as the reader reads them), with this pickler's own NEWOBJ for the
modules; torch 1.13's torch.load reads it back and is the oracle. Checks: inspect lists every tensor
torch.load gives, at the same path with the same dtype, shape, stride and offset; the pickled
module shows as a module of its class; check reports `not-weights-only` (weights_only refuses the
tar format).

Two files: one whose parameters are plain tensors, and one whose parameters are PyTorch 0.1's
Variables, as 0.1 pickled them: `Parameter` (then a Variable subclass) by plain object reduction,
NEWOBJ with no arguments and a BUILD of `(data, creator, backward_hooks, requires_grad, volatile)`,
which Tensor.__setstate__ still reads as "legacy serialization of Variable". torch.load gives a
Parameter at `weight` there, not `weight/__state__/0`, and `convert --unwrap` must write every one.
"""
import collections
import copyreg
import inspect
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import gen_tar_checkpoint as gen  # noqa: E402


class TarNet(nn.Module):
    def __init__(self):
        super().__init__()


class TarPickler(pickle._Pickler):  # the Python pickler: its save_reduce writes NEWOBJ for another class
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = set()

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, LegacyVariable):
            # obj=None: the object is not a Parameter, which save_reduce would otherwise refuse
            self.save_reduce(copyreg.__newobj__, (nn.Parameter,), obj.state(), obj=None)
            return
        super().save(obj, save_persistent_id)

    def persistent_id(self, obj):
        if isinstance(obj, gen.TensorRef):
            return str(obj.key)
        if isinstance(obj, type) and issubclass(obj, nn.Module) and obj not in self.seen:
            self.seen.add(obj)
            return (obj, inspect.getsourcefile(obj), inspect.getsource(obj))
        return None


class LegacyVariable:
    """Stands for a PyTorch 0.1 Parameter: TarPickler writes it as 0.1 did, `torch.nn.parameter.Parameter`
    NEWOBJ'd with no arguments, then BUILD with its 5-tuple state."""

    def __init__(self, key, requires_grad=True):
        self.key, self.requires_grad = key, requires_grad

    def state(self):
        return (gen.TensorRef(self.key), None, collections.OrderedDict(), self.requires_grad, False)


def module(cls, params, children):
    m = object.__new__(cls)
    m.__dict__.update(training=True, _parameters=collections.OrderedDict(params), _buffers=collections.OrderedDict(),
                      _backward_hooks=collections.OrderedDict(), _forward_hooks=collections.OrderedDict(),
                      _forward_pre_hooks=collections.OrderedDict(), _modules=collections.OrderedDict(children))
    return m


def build(path, legacy_variables=False):
    w, b, h = 140234567890112, 140234567890368, 140234567890624
    storages = io.BytesIO()
    pickle.dump(3, storages, protocol=2)
    gen.storage_record(storages, w, "cpu", torch.FloatStorage, [i / 4 - 1.0 for i in range(12)], "f")
    gen.storage_record(storages, b, "cpu", torch.FloatStorage, [0.5, -1.5, 2.25], "f")
    gen.storage_record(storages, h, "cpu", torch.FloatStorage, [1.0, 2.0, -3.0, 0.25], "f")
    pickle.dump([], storages, protocol=2)
    tensors = io.BytesIO()
    pickle.dump(3, tensors, protocol=2)
    gen.tensor_record(tensors, 1001, w, torch.FloatTensor, [3, 4], [4, 1], 0)
    gen.tensor_record(tensors, 1002, b, torch.FloatTensor, [3], [1], 0)
    gen.tensor_record(tensors, 1003, h, torch.FloatTensor, [2, 2], [2, 1], 0)
    param = LegacyVariable if legacy_variables else (lambda key: gen.TensorRef(key))
    fc1 = module(nn.Linear, {"weight": param(1001), "bias": param(1002)}, {})
    fc2 = module(nn.Linear, {"weight": param(1003), "bias": None}, {})
    fc1.__dict__.update(in_features=4, out_features=3)
    fc2.__dict__.update(in_features=2, out_features=2)
    model = module(TarNet, {}, {"fc1": fc1, "fc2": fc2})
    main = io.BytesIO()
    TarPickler(main, protocol=2).dump(model)
    sys_info = io.BytesIO()
    pickle.dump({"protocol_version": 1000, "little_endian": True,
                 "type_sizes": {"short": 2, "int": 4, "long": 8}}, sys_info, protocol=2)
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        gen.member(tar, "sys_info", sys_info.getvalue())
        gen.member(tar, "pickle", main.getvalue())
        gen.member(tar, "tensors", tensors.getvalue())
        gen.member(tar, "storages", storages.getvalue())


def walk(obj, path, out):
    if isinstance(obj, torch.Tensor):
        out[path] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            walk(v, f"{path}/{k}" if path else str(k), out)
    elif isinstance(obj, nn.Module):
        for k, v in vars(obj).items():
            walk(v, f"{path}/{k}" if path else str(k), out)
    return out


def check_one(tool, path, legacy_variables):
    build(path, legacy_variables)
    loaded = torch.load(path)
    errors = []
    if type(loaded) is not TarNet or type(loaded.fc1) is not nn.Linear:
        errors.append(f"torch.load gave {type(loaded)}")
    want = walk(loaded, "", {})
    r = subprocess.run([tool, "inspect", "--json", path], capture_output=True, text=True)
    if r.returncode != 0:
        return [f"inspect exited {r.returncode}: {r.stderr.strip()}"]
    info = json.loads(r.stdout)
    mine = {t["path"]: t for t in info["tensors"]}
    if set(mine) != set(want):
        errors.append(f"tensor paths: ckptscope {sorted(mine)}, torch {sorted(want)}")
    for p in sorted(set(mine) & set(want)):
        m, t = mine[p], want[p]
        got = (m["dtype"], m["shape"], m.get("stride"), m.get("storage_offset"), m["parameter"])
        exp = (str(t.dtype).removeprefix("torch."), list(t.shape), list(t.stride()), t.storage_offset(),
               isinstance(t, nn.Parameter))
        if got != exp:
            errors.append(f"{p}: ckptscope {got}, torch {exp}")
    types = {o.get("path", ""): o.get("type") for o in info.get("objects", [])}
    if types.get("") != "__main__.TarNet" and "__main__.TarNet" not in types.values():
        errors.append(f"the model's class is not shown: objects {types}")
    r = subprocess.run([tool, "check", "--json", path], capture_output=True, text=True)
    codes = [f["code"] for f in json.loads(r.stdout)["findings"]]
    if "not-weights-only" not in codes:
        errors.append(f"check: no not-weights-only ({codes})")
    # convert --unwrap writes model.state_dict(): every parameter, value for value
    out = path + ".unwrapped.pt"
    r = subprocess.run([tool, "convert", path, "-o", out, "--unwrap"], capture_output=True, text=True)
    if r.returncode != 0:
        return errors + [f"convert --unwrap exited {r.returncode}: {r.stderr.strip()}"]
    got = torch.load(out)
    sd = loaded.state_dict()
    if sorted(got) != sorted(sd):
        errors.append(f"convert --unwrap wrote {sorted(got)}, state_dict() has {sorted(sd)}")
    for k in set(got) & set(sd):
        if not torch.equal(got[k], sd[k]):
            errors.append(f"{k}: converted values differ")
    return errors


def main(tool, work):
    os.makedirs(work, exist_ok=True)
    failed = False
    for name, legacy in (("tar_whole_model.tar", False), ("tar_whole_model_variables.tar", True)):
        errors = check_one(tool, os.path.join(work, name), legacy)
        for e in errors:
            print(f"{name}: {e}")
        print(f"{name}:", "ok" if not errors else f"{len(errors)} difference(s)", f"(torch {torch.__version__})")
        failed |= bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
