#!/usr/bin/python3
"""Hand-built torch.distributed.checkpoint (DCP) directories for tst_dcp.

No PyTorch 2.x is available here (Debian's 1.13 has no torch.distributed.checkpoint), so these
sets are written the way PyTorch 2.x's own source writes them, not by it:
- `.metadata` is `pickle.dump(Metadata)` (filesystem.py, FileSystemWriter.finish). The metadata
  classes below are stand-ins registered under their real module paths and qualified names, with
  the real pickled state: dataclass __dict__s, TensorProperties' 5-tuple __getstate__
  (metadata.py; the old path torch.distributed._shard.sharded_tensor.metadata), _StorageInfo's
  __getstate__ that drops None fields (filesystem.py), MetadataIndex's frozen __init__ that leaves
  `offset` unset when None, Enums reduced to (cls, (value,)).
- Items are written by _write_item (filesystem.py): bytes items first (a BytesIO holding
  torch.save(obj), default_planner.transform_object), then tensors largest first, each tensor
  chunk as a real torch.save (1.13) at the stream's position; offset/length go in _StorageInfo.
- Keys are flattened like _nested_dict.flatten_state_dict over _traverse.traverse_state_dict
  (2.4+: every Mapping descended, lists only when they hold tensors or mappings); planner_data
  is the flat key -> path mapping.
- Chunks follow planner_helpers: a plain tensor is one chunk at zero offsets; a sharded tensor one
  chunk per shard at its global offsets; replicated tensors are written once, in any rank's file.
Beside each set, `<name>.expected.pt` is what dcp_to_torch_save gives: the nested dict rebuilt with
_traverse.set_element, every tensor assembled in full.
"""
import dataclasses
import enum
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Optional

import torch


def module(name):
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
    return sys.modules[name]


def place(cls, modname):
    cls.__module__ = modname
    cls.__qualname__ = cls.__name__
    setattr(module(modname), cls.__name__, cls)
    return cls


MD = "torch.distributed.checkpoint.metadata"
FS = "torch.distributed.checkpoint.filesystem"
OLD_TP = "torch.distributed._shard.sharded_tensor.metadata"
for m in ("torch.distributed.checkpoint", MD, FS, "torch.distributed._shard.sharded_tensor", OLD_TP):
    module(m)


@dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


class MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


def make_tensor_properties(encoding):
    @dataclass
    class TensorProperties:
        dtype: torch.dtype = torch.float32
        layout: Any = torch.strided
        requires_grad: bool = False
        memory_format: Any = torch.contiguous_format
        pin_memory: bool = False

        def __getstate__(self):
            return (self.dtype, self.layout, self.requires_grad, encoding.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

        def __setstate__(self, state):
            self.dtype, self.layout, self.requires_grad, _, self.pin_memory = state
            self.memory_format = torch.contiguous_format

    return TensorProperties


@dataclass
class TensorStorageMetadata:
    properties: Any
    size: torch.Size
    chunks: list


@dataclass
class BytesStorageMetadata:
    pass


@dataclass
class StorageMeta:
    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: list = field(default_factory=list)


@dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[StorageMeta] = None
    version: Optional[str] = None


@dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: Optional[torch.Size] = None
    index: Optional[int] = field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "index", index)
        if offset is not None:
            object.__setattr__(self, "offset", torch.Size(offset))


@dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: Any = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}


NewTP = make_tensor_properties(_MEM_FORMAT_ENCODING)
OldTP = make_tensor_properties(MEM_FORMAT_ENCODING)
for c in (ChunkStorageMetadata, _MEM_FORMAT_ENCODING, NewTP, TensorStorageMetadata, BytesStorageMetadata,
          StorageMeta, Metadata, MetadataIndex):
    place(c, MD)
place(OldTP, OLD_TP)
place(MEM_FORMAT_ENCODING, OLD_TP)
place(_StorageInfo, FS)


def _keep_visiting_tensors(v):
    return isinstance(v, (torch.Tensor, Sharded))


def traverse_state_dict(sd, visitor):
    """_traverse.traverse_state_dict (2.4+)."""

    def is_terminal(value):
        if isinstance(value, dict):
            return False
        if not isinstance(value, list):
            return True
        for entry in value:
            if isinstance(entry, (dict, list)) and not is_terminal(entry):
                return False
            if _keep_visiting_tensors(entry):
                return False
        return True

    def walk(path, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(path + (str(k),), v)
        elif is_terminal(value):
            visitor(path, value)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(path + (i,), v)

    for k, v in sd.items():
        walk((str(k),), v)


def flatten_state_dict(sd):
    flat, mappings = {}, {}

    def visit(path, value):
        key = ".".join(map(str, path))
        flat[key] = value
        mappings[key] = path

    traverse_state_dict(sd, visit)
    return flat, mappings


def set_element(root, path, value):
    """_traverse.set_element: int path elements make lists padded with None."""
    cur = root
    for i in range(1, len(path)):
        prev, key = path[i - 1], path[i]
        default = {} if type(key) == str else []
        if isinstance(cur, dict):
            cur = cur.setdefault(prev, default)
        else:
            while len(cur) <= prev:
                cur.append(None)
            if cur[prev] is None:
                cur[prev] = default
            cur = cur[prev]
    key = path[-1]
    if type(key) == int:
        while len(cur) <= key:
            cur.append(None)
    cur[key] = value


class Sharded:
    """A global tensor and how the ranks hold it: [(rank, offsets, local tensor)]."""

    def __init__(self, full, shards):
        self.full = full
        self.shards = shards


def shard_dim(full, dim, world):
    pieces = torch.chunk(full, world, dim)  # torch.chunk semantics, as FSDP and DTensor Shard(d)
    out, at = [], 0
    for rank, p in enumerate(pieces):
        offs = [0] * full.dim()
        offs[dim] = at
        at += p.shape[dim]
        out.append((rank, offs, p.contiguous()))
    return Sharded(full, out)


def tensor_properties(tp_cls, t):
    return tp_cls(dtype=t.dtype, layout=torch.strided, requires_grad=t.requires_grad,
                  memory_format=torch.contiguous_format, pin_memory=False)


def zstd_frame(data):
    """One zstd frame without its content size, as zstandard's stream_writer leaves it (the
    ZStandard stream extension, _extension.py), by the zstd command line."""
    return subprocess.run(["zstd", "-q", "-c", "--no-content-size"], input=bytes(data), check=True,
                          stdout=subprocess.PIPE).stdout


ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
             torch.bool: "BOOL"}


def safetensors_blob(chunks):
    """safetensors.torch.save of a rank's tensor chunks as _write_files_from_queue calls it under
    SerializationFormat.SAFETENSORS: each chunk under its fqn, C-contiguous, and __metadata__ holding
    DCP_SHARDING_INFO (json {fqn: {"saved_offsets": offsets}}), DCP_VERSION and format."""
    header, data, info = {}, b"", {}
    for fqn, offsets, t in chunks:
        raw = t.detach().contiguous()
        raw = raw.view(torch.int16) if raw.dtype == torch.bfloat16 else raw
        b = raw.numpy().tobytes()
        header[fqn] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
        info[fqn] = {"saved_offsets": list(offsets)}
    header = {"__metadata__": {"DCP_SHARDING_INFO": json.dumps(info), "DCP_VERSION": "1.0", "format": "pt"}, **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data


def write_dcp(out, sd, *, world=2, replicated_rank=1, tp_cls=NewTP, new_metadata=True, single_file=True,
              transforms=True, expected=True, layout="torch_save"):
    """What save() with DefaultSavePlanner + FileSystemWriter writes for `sd` from `world` ranks.
    layout "zstd": every item a zstd frame (_extensions=[ZStandard()]); "safetensors": each rank's
    tensor chunks in one safetensors file after its BYTE_IO items (serialization_format=SAFETENSORS)."""
    os.makedirs(out, exist_ok=True)
    flat, mappings = flatten_state_dict(sd)
    md, storage, per_rank = {}, {}, {r: [] for r in range(world)}
    for key, v in flat.items():
        if isinstance(v, Sharded):
            chunks = [ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(t.shape)) for _, o, t in v.shards]
            md[key] = TensorStorageMetadata(tensor_properties(tp_cls, v.full), torch.Size(v.full.shape), chunks)
            for rank, o, t in v.shards:
                per_rank[rank].append(("tensor", MetadataIndex(key, o), t))
        elif isinstance(v, torch.Tensor):
            # dedup_replicated_tensors keeps one copy, in whichever plan is smallest
            md[key] = TensorStorageMetadata(tensor_properties(tp_cls, v), torch.Size(v.shape),
                                            [ChunkStorageMetadata(torch.Size([0] * v.dim()), torch.Size(v.shape))])
            per_rank[replicated_rank].append(("tensor", MetadataIndex(key, [0] * v.dim()), v))
        else:
            md[key] = BytesStorageMetadata()
            per_rank[0].append(("bytes", MetadataIndex(key), v))
    for rank, items in per_rank.items():
        byte_items = [i for i in items if i[0] == "bytes"]
        tensor_items = sorted((i for i in items if i[0] == "tensor"),
                              key=lambda i: i[2].numel() * i[2].element_size(), reverse=True)
        stream, name, count = None, None, 0
        pending = []
        for kind, index, value in byte_items + tensor_items:
            if stream is None or not single_file:
                if stream:
                    stream.close()
                name = f"__{rank}_{count}.distcp"
                count += 1
                stream = open(os.path.join(out, name), "wb")
            offset = stream.tell()
            buf = io.BytesIO()
            if kind == "bytes" and isinstance(value, io.BytesIO):
                buf.write(value.getvalue())  # written as it is, as Megatron's MCoreSavePlanner does
            elif kind == "bytes":
                torch.save(value, buf)
            else:
                t = value.detach().cpu()
                if t.storage().size() != t.numel():
                    t = t.clone()
                if layout == "safetensors":
                    # Nothing is written here: the chunk goes into the file's safetensors at its end,
                    # and _write_item records this offset and the chunk's bytes.
                    pending.append((index, t))
                    storage[index] = _StorageInfo(name, offset, t.numel() * t.element_size())
                    continue
                torch.save(t, buf)
            stream.write(zstd_frame(buf.getbuffer()) if layout == "zstd" else buf.getbuffer())
            length = stream.tell() - offset
            if layout == "zstd":
                info = _StorageInfo(name, offset, length, ["stream.zstd/1"])
            elif new_metadata:
                info = _StorageInfo(name, offset, length, [] if transforms else None)
            else:
                info = _StorageInfo(name, offset, length)
            storage[index] = info
        if pending:
            stream.write(safetensors_blob([(i.fqn, i.offset, t) for i, t in pending]))
        if stream:
            stream.close()
    if new_metadata:
        meta = Metadata(md, planner_data=mappings, storage_data=storage,
                        storage_meta=StorageMeta(checkpoint_id=out, save_id="0f9c", load_id=None), version="1.0.0")
    else:
        meta = Metadata(md, planner_data=mappings, storage_data=storage)
        del meta.__dict__["storage_meta"], meta.__dict__["version"]
    with open(os.path.join(out, ".metadata.tmp"), "wb") as f:
        pickle.dump(meta, f)
    os.rename(os.path.join(out, ".metadata.tmp"), os.path.join(out, ".metadata"))
    if expected:
        consolidated = {}
        for key, v in flat.items():
            value = v.full.clone() if isinstance(v, Sharded) else (v.clone() if isinstance(v, torch.Tensor) else v)
            set_element(consolidated, mappings[key], value)
        torch.save(consolidated, out + ".expected.pt")
        shapes = {k: {"shape": list(v.full.shape if isinstance(v, Sharded) else v.shape),
                      "dtype": str((v.full if isinstance(v, Sharded) else v).dtype).replace("torch.", ""),
                      "chunks": len(md[k].chunks)}
                  for k, v in flat.items() if isinstance(v, (Sharded, torch.Tensor))}
        with open(out + ".expected.json", "w") as f:
            json.dump({"tensors": shapes, "values": {k: repr(v) for k, v in flat.items()
                                                     if not isinstance(v, (Sharded, torch.Tensor))}}, f)


def model_state(seed):
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(9, 6, generator=g)  # 9 rows over 2 ranks: torch.chunk gives 5 + 4
    wq = torch.randn(4, 7, generator=g).to(torch.bfloat16)  # sharded along dim 1: 4 + 3 columns
    cube = torch.arange(2 * 6 * 4, dtype=torch.int64).reshape(2, 6, 4)  # dim 1 of a 3-d tensor
    norm = torch.randn(6, generator=g)
    # A transposed local shard keeps its strides (its storage is exactly its size, so not trimmed).
    head_full = torch.randn(8, 3, generator=g)
    head = Sharded(head_full, [(0, [0, 0], head_full[:4].t().contiguous().t()),
                               (1, [4, 0], head_full[4:].t().contiguous().t())])
    model = {
        "embed.weight": shard_dim(embed, 0, 2),
        "layers": [{"wq.weight": shard_dim(wq, 1, 2)}, {"cube": shard_dim(cube, 1, 2)}],
        "norm.bias": norm,
        "head.weight": head,
        "scalar": torch.tensor(3.5, dtype=torch.float64),
    }
    optim = {
        "state": {
            "model.embed.weight": {"exp_avg": shard_dim(torch.randn(9, 6, generator=g), 0, 2),
                                   "step": torch.tensor(12.0)},
        },
        "param_groups": [{"lr": 0.01, "betas": (0.9, 0.999), "params": ["model.embed.weight", "model.norm.bias"]}],
    }
    return {"model": model, "optim": optim, "epoch": 7}


def corrupt(kind):
    """A broken plan whose storage_data still matches it: only the boxes are wrong."""
    sd = model_state(4)
    embed = sd["model"]["embed.weight"]
    rank, offsets, local = embed.shards[1]
    if kind == "overlap":
        embed.shards[1] = (rank, [4, 0], local)
    elif kind == "bounds":
        embed.shards[1] = (rank, [6, 0], local)
    elif kind == "hole":
        # A tensor whose one chunk covers only part of it (the planner was given a wrong size).
        full = torch.zeros(7)
        sd["model"]["norm.bias"] = Sharded(full, [(1, [0], full[:6].clone())])
    return sd


def prototype(out):
    """The 1.12 prototype (torch/distributed/_shard/checkpoint/metadata.py): storage_key records."""
    os.makedirs(out, exist_ok=True)
    mod = "torch.distributed._shard.checkpoint.metadata"
    module("torch.distributed._shard.checkpoint")
    module(mod)

    @dataclass
    class TensorStorageMetadata:
        storage_key: str
        size: torch.Size

    @dataclass
    class Metadata:
        state_dict_metadata: dict

    place(TensorStorageMetadata, mod)
    place(Metadata, mod)
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(Metadata({"w": TensorStorageMetadata("w_0", torch.Size([2]))}), f)
    torch.save(torch.zeros(2), os.path.join(out, "__0_0.distcp"))


def unknown_transform_set(out):
    """An item through a transform torch's ExtensionRegistry does not know ("Unknown extension")."""
    write_dcp(out, {"w": torch.ones(3)}, world=1, replicated_rank=0, expected=False)
    meta = pickle.load(open(os.path.join(out, ".metadata"), "rb"))
    for info in meta.storage_data.values():
        info.transform_descriptors = ["stream.lz4/1"]
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(meta, f)


def main(root):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    write_dcp(os.path.join(root, "dcp_basic"), model_state(1))
    write_dcp(os.path.join(root, "dcp_old"), model_state(2), tp_cls=OldTP, new_metadata=False)
    write_dcp(os.path.join(root, "dcp_per_item"), model_state(3), single_file=False, transforms=False)
    for kind in ("overlap", "hole", "bounds"):
        write_dcp(os.path.join(root, "dcp_" + kind), corrupt(kind), expected=False)
    write_dcp(os.path.join(root, "dcp_missing_file"), model_state(5), expected=False)
    os.remove(os.path.join(root, "dcp_missing_file", "__1_0.distcp"))
    write_dcp(os.path.join(root, "dcp_truncated"), model_state(6), expected=False)
    cut = os.path.join(root, "dcp_truncated", "__1_0.distcp")
    os.truncate(cut, os.path.getsize(cut) // 2)
    prototype(os.path.join(root, "dcp_prototype"))
    write_dcp(os.path.join(root, "dcp_zstd"), model_state(7), layout="zstd")
    write_dcp(os.path.join(root, "dcp_safetensors"), model_state(8), layout="safetensors")
    unknown_transform_set(os.path.join(root, "dcp_unknown_transform"))
    # TransformerEngine _extra_state as Megatron-LM's torch_dist saves it: each layer's a BYTE_IO item
    # holding torch.save([state]) under `<key>/shard_<layer>_<layers>`, state None or a uint8 tensor.
    def sharded_object(state):
        b = io.BytesIO()
        torch.save([state], b)
        return b

    fp8 = torch.frombuffer(bytearray(pickle.dumps({"scale_fwd": [1.0, 1.0]})), dtype=torch.uint8)
    write_dcp(os.path.join(root, "dcp_extra_state"),
              {"decoder.layers.linear_fc1.weight": torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(9)),
               "decoder.layers.linear_fc1._extra_state/shard_0_2": sharded_object(None),
               "decoder.layers.linear_fc1._extra_state/shard_1_2": sharded_object(fp8)},
              world=1, replicated_rank=0, expected=False)


if __name__ == "__main__":
    main(sys.argv[1])
