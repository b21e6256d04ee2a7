#!/usr/bin/env python3
"""Single files written by today's PyTorch (the root of scripts/modern-torch.sh), and ckptscope held
against that PyTorch reading them. Runs inside the root (scripts/torch2-python.sh), where it also
runs the host's ckptscope through the bind-mounted build tree.

    torch2_files.py write OUT                    every file, written by the real writers
    torch2_files.py check CKPTSCOPE OUT NAME...  each named file (its stem under OUT, or its path
                                                 under OUT: a file another writer made)

For each file, `check` asks:
- `inspect --json` lists exactly the tensors torch.load(weights_only=False) gives, at the same key
  paths, with the same dtype, shape, stride and storage offset;
- `check --json` reports `not-weights-only` exactly when PyTorch's default torch.load
  (weights_only=True since 2.6) refuses the file;
- `convert --single-card` writes a file that the default torch.load reads, every storage on the CPU,
  holding every tensor of the input, bit for bit (matched by key path, or by dtype, shape and bytes
  where the conversion renamed it: a stripped `module.` or `_orig_mod.`).
A DTensor rank file opened alone (the FSDP2 case) is checked for what issue 25 asks instead (see
check_rank_file). Exit 0 when all holds; each difference is printed otherwise and the exit code is 1.
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys

import torch
from torch import nn

from torch2_cases import Writers, check_cases, run

USE = Writers()
writer = USE


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 7)
        self.norm = nn.LayerNorm(7)
        self.fc2 = nn.Linear(7, 5)
        self.register_buffer("scale", torch.arange(5.0))

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x))) * self.scale


def all_dtypes():
    """Every dtype this PyTorch can save, each in a small tensor with distinct values."""
    base = torch.tensor([[0.5, -1.25, 3.0], [2.0, 0.0, -0.75]])
    out = {}
    names = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
             "uint16", "uint32", "uint64", "bool", "complex32", "complex64", "complex128",
             "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]
    for name in names:
        dt = getattr(torch, name, None)
        if dt is None:
            continue
        if name == "bool":
            t = base > 0
        elif name.startswith("complex"):
            t = torch.complex(base, -base).to(dt)
        elif name.startswith(("uint", "int")):
            t = (base * 4).abs().to(torch.int64).to(dt) if name.startswith("u") else (base * 4).to(dt)
        elif name == "float8_e8m0fnu":
            t = base.abs().add(1).to(dt)
        else:
            t = base.to(dt)
        out[name] = t
    return out


@writer
def write_dtypes(path):
    torch.save(all_dtypes(), path)


@writer
def write_views(path):
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    torch.save({"base": base, "rows": base[2:5], "col": base[:, 3], "t": base.t(), "narrow": base.narrow(1, 2, 4),
                "every_other": base[::2, 1::3], "expanded": torch.tensor([1.0, 2.0]).expand(3, 2),
                "scalar": base[1, 1], "u16_view": torch.arange(12).to(torch.uint16).reshape(3, 4)[1:],
                "f8_view": torch.linspace(-2, 2, 12).to(torch.float8_e4m3fn).reshape(4, 3).t()}, path)


@writer
def write_training(path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        loss = model(torch.randn(3, 6)).square().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad()
    args = argparse.Namespace(lr=1e-2, epochs=3, name="run", betas=(0.9, 0.999))
    torch.save({"epoch": 2, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "scaler": scaler.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
                "args": args}, path)


@writer
def write_legacy(path):
    # No uint16/32/64 or float8 here: 2.14 writes them through UntypedStorage in the legacy format
    # too, and then cannot read its own file (_legacy_load asks UntypedStorage for its .dtype).
    torch.manual_seed(0)
    sd = Net().state_dict()
    base = torch.arange(12, dtype=torch.int16).reshape(3, 4)
    sd.update(bf16=torch.ones(3, dtype=torch.bfloat16), view=base[1:], base=base,
              c64=torch.complex(torch.ones(2), torch.ones(2)))
    torch.save(sd, path, _use_new_zipfile_serialization=False)


@writer
def write_compiled(path):
    torch.manual_seed(0)
    torch.save(torch.compile(Net()).state_dict(), path)  # `_orig_mod.` keys; nothing is compiled


@writer
def write_ddp(path):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    torch.save(nn.parallel.DistributedDataParallel(Net()).state_dict(), path)
    dist.destroy_process_group()


@writer
def write_whole_model(path):
    torch.manual_seed(0)
    torch.save(Net(), path)  # refused by the default torch.load: a pickled module


def fsdp2_rank_worker(rank, world, out, port):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = Net()
    for m in (model.fc1, model.fc2):
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    torch.save(model.state_dict(), f"{out}/fsdp2_dtensor.rank{rank}.tmp")
    dist.barrier()
    dist.destroy_process_group()


@writer
def write_dtensor_alone(path):
    """Rank 0's torch.save(model.state_dict()) under FSDP2, saved under a name that is not a rank
    file's: the DTensors of one rank with no set to belong to."""
    import torch.multiprocessing as mp
    out = os.path.dirname(path)
    mp.spawn(fsdp2_rank_worker, args=(2, out, 29562), nprocs=2, join=True)
    os.replace(f"{out}/fsdp2_dtensor.rank0.tmp", path)
    os.remove(f"{out}/fsdp2_dtensor.rank1.tmp")


@writer
def write_sparse(path):
    i = torch.tensor([[0, 1, 3], [2, 0, 1]])
    torch.save({"coo": torch.sparse_coo_tensor(i, torch.tensor([1.5, -2.0, 4.0]), (4, 3)),
                "dense": torch.ones(2)}, path)


@writer
def write_nested(path):
    torch.save({"nested": torch.nested.nested_tensor([torch.arange(3.0), torch.arange(5.0)]),
                "dense": torch.ones(2)}, path)


@writer
def write_jagged(path):
    """Jagged nested tensors (layout=torch.jagged, pickled through _rebuild_njt): a contiguous one of
    three [*, 4] components, and a narrow()ed one, whose offsets and lengths name its components."""
    comps = [torch.arange(12.0).reshape(3, 4), torch.arange(4.0).reshape(1, 4), torch.arange(20.0).reshape(5, 4)]
    base = torch.arange(24.0).reshape(4, 6)
    narrowed = torch.nested.narrow(base, 1, torch.tensor([0, 1, 2, 0]), torch.tensor([3, 2, 4, 1]),
                                   layout=torch.jagged)
    torch.save({"jagged": torch.nested.nested_tensor(comps, layout=torch.jagged), "narrowed": narrowed,
                "dense": torch.ones(2)}, path)


@writer
def write_quantized(path):
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    torch.save({"per_tensor": torch.quantize_per_tensor(x, 0.01, 3, torch.qint8),
                "per_channel": torch.quantize_per_channel(x, torch.tensor([0.01, 0.02, 0.04]),
                                                          torch.tensor([0, 1, 2]), 0, torch.quint8),
                "dense": torch.ones(2)}, path)


class ExportNet(Net):
    """Net with what an export sorts apart: a non-persistent buffer and a tensor attribute (both
    constants of the program), a bf16 buffer and a buffer that views part of a larger storage."""

    def __init__(self):
        super().__init__()
        self.register_buffer("rows", torch.arange(24.0).reshape(4, 6)[1:3])
        self.register_buffer("half_scale", torch.linspace(0, 1, 5).to(torch.bfloat16))
        self.register_buffer("temp", torch.ones(5), persistent=False)
        self.offset = torch.full((5,), 0.5)

    def forward(self, x):
        y = super().forward(x + self.rows.sum(0)) * self.half_scale.float()
        return y + self.temp + self.offset


def write_export_pair(path):
    """torch.export.save of ExportNet into NAME.pt2, the model's state_dict() beside it."""
    torch.manual_seed(0)
    model = ExportNet()
    ep = torch.export.export(model, (torch.randn(2, 6),))
    torch.save(model.state_dict(), path.removesuffix(".pt") + ".model_state_dict.pt")
    return ep


@writer
def write_export(path):
    torch.export.save(write_export_pair(path), path.removesuffix(".pt") + ".pt2")


@writer
def write_export_root(path):
    """The layout torch.export.save wrote in 2.1-2.5 (torch/_export/__init__.py `save`): records at
    the zip's root, the state dict and constants as torch.save files. No such PyTorch is here, so the
    zip is assembled as that `save` did, from this PyTorch's own serializer (`serialize`, the same
    SerializedArtifact), and 2.14's torch.export.load, which still reads the layout, is the oracle."""
    import zipfile
    from torch._export.serde.schema import SCHEMA_VERSION
    from torch._export.serde.serialize import serialize
    artifact = serialize(write_export_pair(path))
    with zipfile.ZipFile(path.removesuffix(".pt") + ".pt2", "w") as z:
        z.writestr("serialized_exported_program.json", artifact.exported_program)
        z.writestr("serialized_state_dict.pt", artifact.state_dict)
        z.writestr("serialized_constants.pt", artifact.constants)
        z.writestr("serialized_example_inputs.pt", artifact.example_inputs)
        z.writestr("version", ".".join(map(str, SCHEMA_VERSION)))


@writer
def write_jit(path):
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(Net()), path)


# ---------------------------------------------------------------------------------------------

def key_text(k):
    return k if isinstance(k, str) else str(k) if type(k) is int else repr(k)


def walk(obj, path="", out=None, active=None):
    """(key path, tensor) in ckptscope's scheme ("/"-joined), as torch.load's result iterates."""
    if out is None:
        out, active = [], set()
    join = lambda name: name if path == "" else f"{path}/{name}"  # noqa: E731
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
        return out
    if id(obj) in active or isinstance(obj, (str, bytes, int, float, complex, type(None))):
        return out
    active.add(id(obj))
    if isinstance(obj, dict):
        for k, v in obj.items():
            walk(v, join(key_text(k)), out, active)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk(v, join(str(i)), out, active)
    elif hasattr(obj, "__dict__"):  # a module's _parameters, _buffers, _modules; a Namespace's fields
        for k, v in vars(obj).items():
            walk(v, join(key_text(k)), out, active)
    active.discard(id(obj))
    return out


def raw(t):
    """The tensor's elements in C order as bytes (dtype-agnostic, float8 and uint64 included); a
    sparse tensor's dense form, a nested tensor's components one after another."""
    if t.is_sparse:
        t = t.to_dense()
    elif t.is_nested:
        t = torch.cat([c.reshape(-1) for c in t.unbind()])
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def value_key(t):
    """(dtype, shape, bytes, layout) of a tensor: what a conversion must keep."""
    shape = tuple(c.shape for c in t.unbind()) if t.is_nested else tuple(t.shape)
    return dtype_name(t.dtype), shape, raw(t), "nested" if t.is_nested else str(t.layout)


def dtype_name(dt):
    return str(dt).removeprefix("torch.")


def default_load(path):
    """What PyTorch's default torch.load does: (value, None) or (None, the error)."""
    try:
        return torch.load(path), None
    except Exception as e:  # noqa: BLE001 - the refusal is the result
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def check_file(tool, path, work):
    errors = []
    # What a fresh process's default torch.load says, asked first: loading a jagged nested tensor with
    # weights_only=False imports torch._dynamo, after which weights_only=True accepts NJTs too.
    _, refused = default_load(path)
    want = walk(torch.load(path, weights_only=False, map_location="cpu"))
    info = json.loads(run(tool, "inspect", "--json", path).stdout)
    mine = {t["path"]: t for t in info["tensors"]}
    theirs = {p: t for p, t in want}
    for p in sorted(set(mine) ^ set(theirs)):
        errors.append(f"inspect: {p!r} is {'only in ckptscope' if p in mine else 'missing (torch has it)'}")
    for p in sorted(set(mine) & set(theirs)):
        m, t = mine[p], theirs[p]
        got = (m["dtype"], m["shape"], m.get("stride"), m.get("storage_offset"))
        exp = (dtype_name(t.dtype), list(t.shape), list(t.stride()), t.storage_offset()) if t.layout == torch.strided \
            and not t.is_nested else None
        if t.is_sparse:  # no strides or offset: its layout, dtype and dense shape
            got, exp = (m.get("layout"), m["dtype"], m["shape"]), ("sparse", dtype_name(t.dtype), list(t.shape))
        elif t.is_nested:  # no one shape: its layout, dtype and components' shapes (issue 25)
            got = (m.get("layout"), m["dtype"], m.get("components"))
            exp = ("jagged" if t.layout == torch.jagged else "nested", dtype_name(t.dtype),
                   [list(c.shape) for c in t.unbind()])
        if got != exp:
            errors.append(f"inspect: {p}: ckptscope {got}, torch {exp}")

    findings = json.loads(run(tool, "check", "--json", path, ok=(0, 1)).stdout)["findings"]
    flagged = any(f["code"] == "not-weights-only" for f in findings)
    if flagged != (refused is not None):
        errors.append(f"check: not-weights-only {'reported' if flagged else 'not reported'}, but the default "
                      f"torch.load {'refuses it (' + refused + ')' if refused else 'reads it'}")

    out = os.path.join(work, os.path.basename(path) + ".single-card.pt")
    run(tool, "convert", path, "--single-card", "-o", out)
    got, refused = default_load(out)
    if refused:
        return errors + [f"convert: the default torch.load refuses the output: {refused}"]
    locations = {s.get("location") for s in json.loads(run(tool, "inspect", "--json", out).stdout)["storages"]}
    if locations - {"cpu"}:
        errors.append(f"convert: the output keeps storages on {sorted(locations - {'cpu'})}")
    kept = {p: t for p, t in walk(got)}
    by_value = collections.Counter(value_key(t) for t in kept.values())
    for p, t in want:
        k = value_key(t)
        if p in kept and value_key(kept[p]) == k:
            continue
        if by_value[k] > 0:
            by_value[k] -= 1
            continue
        errors.append(f"convert: {p} ({k[0]} {list(k[1])}) is not in the output, bit for bit")
    return errors


def check_rank_file(tool, path, work):
    """One FSDP2 rank's DTensors alone (issue 25): inspect shows each tensor's local piece (shape
    and bytes) beside the global shape; check raises dtensor-rank-files; convert --single-card
    never writes a file without the rank's data: read as an ordinary file, it writes each local
    piece as a plain tensor, bit for bit, and says so; named as a rank file (rank0.pt), it is read
    as one rank of a set, and convert refuses it (exit 2, nothing written)."""
    import shutil
    from torch.distributed.tensor import DTensor
    errors = []
    sd = torch.load(path, weights_only=False, map_location="cpu")
    local = {k: v.to_local() if isinstance(v, DTensor) else v for k, v in sd.items()}
    info = json.loads(run(tool, "inspect", "--json", path).stdout)
    mine = {t["path"]: t for t in info["tensors"]}
    for k, v in sd.items():
        m = mine.get(k)
        if m is None:
            errors.append(f"inspect: {k} missing")
            continue
        piece = m.get("dtensor", {"local_shape": m["shape"], "local_bytes": m["nbytes"]})
        got = (m["shape"], piece["local_shape"], piece["local_bytes"])
        exp = (list(v.shape), list(local[k].shape), local[k].numel() * local[k].element_size())
        if got != exp:
            errors.append(f"inspect: {k}: ckptscope (shape, local shape, local bytes) {got}, torch {exp}")
    # The header's total is what the file holds: the local pieces, not the global shapes' bytes.
    held = sum(v.numel() * v.element_size() for v in local.values())
    header = run(tool, "inspect", path).stdout.splitlines()[0]
    held_text = f"{held} B" if held < 1024 else f"{held / 1024:.1f} KiB"
    if f"tensors ({held_text} held: this rank's DTensor pieces of " not in header:
        errors.append(f"inspect: the header does not count the {held} bytes held: {header}")
    codes = [f["code"] for f in json.loads(run(tool, "check", "--json", path, ok=(0, 1)).stdout)["findings"]]
    if "dtensor-rank-files" not in codes:
        errors.append(f"check: no dtensor-rank-files ({codes})")
    out = os.path.join(work, os.path.basename(path) + ".single-card.pt")
    r = run(tool, "convert", path, "--single-card", "-o", out)
    got, refused = default_load(out)
    if refused:
        return errors + [f"convert: the default torch.load refuses the output: {refused}"]
    for k, want in local.items():
        g = got.get(k)
        if g is None or g.dtype != want.dtype or g.shape != want.shape or raw(g) != raw(want):
            errors.append(f"convert: {k} is not rank 0's local piece {list(want.shape)} "
                          f"(got {None if g is None else list(g.shape)})")
    if "one rank's piece" not in r.stdout:
        errors.append(f"convert did not say the output holds one rank's pieces: {r.stdout.strip()[:200]}")

    ranked = os.path.join(work, "ranked")
    os.makedirs(ranked, exist_ok=True)
    shutil.copy(path, os.path.join(ranked, "rank0.pt"))
    info = json.loads(run(tool, "inspect", "--json", os.path.join(ranked, "rank0.pt")).stdout)
    for t in info["tensors"]:
        want = local[t["path"]]
        got = [(s["sizes"], s["bytes"], s["file"]) for s in t["pieces"]]
        if got != [(list(want.shape), want.numel() * want.element_size(), "rank0.pt")]:
            errors.append(f"inspect rank0.pt: {t['path']}: local pieces {got}")
    if "dtensor-rank-files" not in [f["code"] for f in info["set"]["findings"]]:
        errors.append("inspect rank0.pt: no dtensor-rank-files")
    out = os.path.join(ranked, "out.pt")
    r = subprocess.run([tool, "convert", os.path.join(ranked, "rank0.pt"), "--single-card", "-o", out],
                       capture_output=True, text=True)
    if r.returncode != 2 or os.path.exists(out) or len(r.stderr.strip().splitlines()) != 1:
        errors.append(f"convert rank0.pt alone: exit {r.returncode}, output {'written' if os.path.exists(out) else 'none'}, "
                      f"stderr {r.stderr.strip()[:200]!r}")
    return errors


def compare_values(errors, what, got, want):
    """Every tensor of `want` in `got` under its key, with the same dtype, shape and bytes."""
    for k in sorted(set(got) ^ set(want)):
        errors.append(f"{what}: {k!r} is {'only in ckptscope' if k in got else 'missing (torch has it)'}")
    for k in sorted(set(got) & set(want)):
        g, w = got[k], want[k]
        if (dtype_name(g.dtype), tuple(g.shape), raw(g)) != (dtype_name(w.dtype), tuple(w.shape), raw(w)):
            errors.append(f"{what}: {k}: {dtype_name(g.dtype)} {list(g.shape)} differs from torch's "
                          f"{dtype_name(w.dtype)} {list(w.shape)}")


def check_index(errors, mine, want, prefix=""):
    """inspect's tensors at `prefix + key` hold each of torch's with its dtype, shape, stride and
    storage offset."""
    for k, t in want.items():
        m = mine.get(prefix + k)
        if m is None:
            errors.append(f"inspect: {prefix + k} missing")
            continue
        got = (m["dtype"], m["shape"], m.get("stride"), m.get("storage_offset"))
        exp = (dtype_name(t.dtype), list(t.shape), list(t.stride()), t.storage_offset())
        if got != exp:
            errors.append(f"inspect: {prefix + k}: ckptscope {got}, torch {exp}")


def check_refused(errors, tool, path, code):
    """The default torch.load refuses the archive, and `check` says why with `code`."""
    _, refused = default_load(path)
    findings = json.loads(run(tool, "check", "--json", path, ok=(0, 1)).stdout)["findings"]
    codes = [f["code"] for f in findings]
    if refused is None or code not in codes or "not-weights-only" in codes:
        errors.append(f"check: findings {codes}, the default torch.load {refused or 'reads it'}")
    # A package's users have no docs/ folder: a finding explains itself, never cites one.
    cited = [f["code"] for f in findings if "docs/" in f["title"] + f["detail"]]
    if cited:
        errors.append(f"check: findings {cited} cite the project's docs/, which users of the package do not have")


def check_convert(errors, tool, path, work, want):
    out = os.path.join(work, os.path.basename(path) + ".state_dict.pt")
    run(tool, "convert", path, "-o", out)
    got, refused = default_load(out)
    if refused:
        errors.append(f"convert: the default torch.load refuses the output: {refused}")
    else:
        compare_values(errors, "convert", got, want)


def check_export(tool, path, work):
    """A torch.export archive: inspect lists the program's state dict at the top level and its
    constants under [constants] as torch.export.load gives them, and the graph signature as torch
    prints it; check names the archive (torch.load refuses it); convert writes the model's
    state_dict(), every tensor equal, which the default torch.load reads; diff finds the archive
    equal to that state_dict()."""
    errors = []
    pt2 = path.removesuffix(".pt") + ".pt2"
    ep = torch.export.load(pt2)
    info = json.loads(run(tool, "inspect", "--json", pt2).stdout)
    mine = {t["path"]: t for t in info["tensors"]}
    check_index(errors, mine, ep.state_dict)
    check_index(errors, mine, {k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}, "[constants]/")
    extra = sorted(set(mine) - set(ep.state_dict) - {"[constants]/" + k for k in ep.constants})
    if extra:
        errors.append(f"inspect: tensors torch.export.load does not give: {extra}")
    text = run(tool, "inspect", pt2).stdout
    # Each spec is a row under [graph_signature]: its argument's name, then the rest of torch's line
    # as a string value (shown quoted, its quotes escaped).
    rows = {tuple(r.split(None, 2)[::2]) for r in text.splitlines() if len(r.split()) > 2}
    rows = {(k, v.strip().replace("\\'", "'")) for k, v in rows}
    for line in str(ep.graph_signature).splitlines():
        if ": " in line and not line.startswith("#"):
            name, spec = line.strip().split(": ", 1)
            if (name, f"'{spec}'") not in rows:
                errors.append(f"inspect: graph signature entry {line.strip()!r} not shown")
    check_refused(errors, tool, pt2, "export-archive")
    model = torch.load(path.removesuffix(".pt") + ".model_state_dict.pt")
    compare_values(errors, "torch.export.load", dict(ep.state_dict), model)
    check_convert(errors, tool, pt2, work, model)
    # diff compares the archive as its state dict: equal to the model's.
    r = subprocess.run([tool, "diff", "--strict", pt2, path.removesuffix(".pt") + ".model_state_dict.pt"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        errors.append(f"diff against the model's state_dict(): exit {r.returncode}: {r.stdout.strip()[-300:]}")
    if os.path.basename(pt2) == "export.pt2":
        errors += check_export_damaged(tool, pt2, work)
        errors += check_export_pickled(tool, pt2, work)
    return errors


def check_export_damaged(tool, pt2, work):
    """Damaged weights configs of a real archive: each is refused in one line with exit 2 (sizes
    whose product overflows, a negative stride, a symbolic size, an unknown scalar type, a record
    outside the weights folder, an entry that is no object, one without tensor_meta)."""
    import zipfile
    errors = []

    def first(cfg):
        return cfg["config"][next(iter(cfg["config"]))]

    def meta(key, value):
        return lambda cfg: first(cfg)["tensor_meta"].__setitem__(key, value)

    damage = {
        "overflow": meta("sizes", [{"as_int": 2 ** 62}, {"as_int": 2 ** 62}]),
        "negative_stride": lambda cfg: first(cfg)["tensor_meta"]["strides"][0].__setitem__("as_int", -1),
        "symbolic": lambda cfg: first(cfg)["tensor_meta"]["sizes"].__setitem__(0, {"as_expr": {"expr_str": "s0"}}),
        "scalar_type": meta("dtype", 99),
        "traversal": lambda cfg: first(cfg).__setitem__("path_name", "../../etc/passwd"),
        "not_object": lambda cfg: cfg["config"].__setitem__(next(iter(cfg["config"])), 5),
        "no_meta": lambda cfg: first(cfg).pop("tensor_meta"),
    }
    with zipfile.ZipFile(pt2) as src:
        names = src.namelist()
        for case, mutate in damage.items():
            out = os.path.join(work, f"damaged_{case}.pt2")
            with zipfile.ZipFile(out, "w") as z:
                for n in names:
                    data = src.read(n)
                    if n.endswith("_weights_config.json"):
                        cfg = json.loads(data)
                        mutate(cfg)
                        data = json.dumps(cfg).encode()
                    z.writestr(n, data)
            r = subprocess.run([tool, "inspect", out], capture_output=True, text=True)
            if r.returncode != 2 or len(r.stderr.strip().splitlines()) != 1:
                errors.append(f"damaged ({case}): exit {r.returncode}, stderr {r.stderr.strip()[:200]!r}")
    return errors


def check_export_pickled(tool, pt2, work):
    """A weight stored as torch.export stores a tensor subclass (use_pickle: a torch.save file as
    its record), made from the real archive by re-storing one weight so, since no subclass this
    PyTorch exports plainly is at hand: inspect and convert give what torch.export.load gives."""
    import io
    import zipfile
    errors = []
    out = os.path.join(work, "pickled_weight.pt2")
    with zipfile.ZipFile(pt2) as src, zipfile.ZipFile(out, "w") as z:
        names = src.namelist()
        folder = names[0].split("/")[0]
        cfg_name = f"{folder}/data/weights/model_weights_config.json"
        cfg = json.loads(src.read(cfg_name))
        fqn = next(iter(cfg["config"]))
        buf = io.BytesIO()
        torch.save(torch.nn.Parameter(torch.arange(6.0).reshape(2, 3)), buf)
        cfg["config"][fqn].update(path_name="weight_pickled", use_pickle=True)
        for n in names:
            z.writestr(n, json.dumps(cfg).encode() if n == cfg_name else src.read(n))
        z.writestr(f"{folder}/data/weights/weight_pickled", buf.getvalue())
    want = dict(torch.export.load(out).state_dict)
    info = json.loads(run(tool, "inspect", "--json", out).stdout)
    check_index(errors, {t["path"]: t for t in info["tensors"]}, want)
    check_convert(errors, tool, out, work, want)
    return [f"pickled weight: {e}" for e in errors]


def check_jit(tool, path, work):
    """torch.jit.save: inspect's TorchScript state dict is torch.jit.load(f).state_dict() (keys,
    dtypes, shapes); check names the archive (the default torch.load refuses it); convert writes
    that state dict, every tensor equal."""
    errors = []
    archive = path
    want = torch.jit.load(archive).state_dict()
    info = json.loads(run(tool, "inspect", "--json", archive).stdout)
    got = {e["key"]: (e["dtype"], e["shape"]) for e in info.get("torchscript", {}).get("state_dict", [])}
    exp = {k: (dtype_name(v.dtype), list(v.shape)) for k, v in want.items()}
    if got != exp:
        errors.append(f"inspect: TorchScript state dict {got}, torch.jit.load {exp}")
    check_refused(errors, tool, archive, "torchscript-archive")
    check_convert(errors, tool, archive, work, dict(want))
    return errors


CHECKS = {"dtensor_alone": check_rank_file, "export": check_export, "export_root": check_export, "jit": check_jit}


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    c = sub.add_parser("check")
    c.add_argument("tool")
    c.add_argument("out")
    c.add_argument("names", nargs="+")
    args = ap.parse_args()
    if args.cmd == "write":
        os.makedirs(args.out, exist_ok=True)
        print("torch", torch.__version__)
        for name, fn in USE.items():
            fn(os.path.join(args.out, name + ".pt"))
        return 0
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)

    def check(name):
        path = os.path.join(args.out, name)
        return CHECKS.get(name, check_file)(args.tool, path if os.path.isfile(path) else path + ".pt", work)

    return check_cases(args.names, check)


if __name__ == "__main__":
    sys.exit(main())
