#!/usr/bin/python3
"""Hand-built per-rank FSDP pickles for tst_fsdp.

Debian's PyTorch 1.13 cannot import its sharded-tensor module on Python 3.11 and has no DTensor,
so these files are written the way PyTorch 2.x's source writes them, not by it: each rank's
`torch.save(model.state_dict())` under StateDictType.SHARDED_STATE_DICT (as accelerate's
`pytorch_model_fsdp_0_rank{R}.bin`), with stand-in classes registered under the real module
paths and qualified names:
- ShardedTensor (torch/distributed/_shard/sharded_tensor/api.py) reduces through
  Tensor.__reduce_ex__ (registered as a sharded op, _ops/tensor_ops.py) to
  torch._tensor._rebuild_from_type_v2(torch._utils._rebuild_wrapper_subclass, ShardedTensor,
  (cls, dtype, size, stride, storage_offset, layout, device, requires_grad), state) where state
  is its __getstate__ tuple (local_shards, ShardedTensorMetadata, ProcessGroupState,
  sharding_spec, init_rrefs). Shard and ShardMetadata are slotted dataclasses (state
  (None, {slot: value})); shards follow fsdp/_shard_utils.py _create_chunk_sharded_tensor
  (torch.chunk along dim 0, placements "rank:R/cuda:R").
- DTensor (torch/distributed/tensor/_api.py) has __slots__ ["_local_tensor", "_spec"] and reduces
  the same way with state (None, {"_local_tensor": ..., "_spec": DTensorSpec}); DTensorSpec holds
  the DeviceMesh (its __dict__: mesh, _coordinate_on_dim, ...), placements (Shard(dim),
  Replicate()) and TensorMeta (a NamedTuple).
The local tensors are real torch.save storages (1.13). `<set>.expected.pt` is the consolidated
state dict (every global tensor in full), saved by torch.
"""
import collections
import os
import shutil
import sys
import types
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch._tensor
import torch._utils


def module(name):
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
    return sys.modules[name]


def place(cls, modname, qualname=None):
    cls.__module__ = modname
    cls.__qualname__ = qualname or cls.__name__
    obj = module(modname)
    parts = cls.__qualname__.split(".")
    for p in parts[:-1]:
        obj = getattr(obj, p)
    setattr(obj, parts[-1], cls)
    return cls


API = "torch.distributed._shard.sharded_tensor.api"
STMD = "torch.distributed._shard.sharded_tensor.metadata"
SHARD = "torch.distributed._shard.sharded_tensor.shard"
SMD = "torch.distributed._shard.metadata"
SPEC = "torch.distributed._shard.sharding_spec.chunk_sharding_spec"
REMOTE = "torch.distributed.remote_device"
DT_API = "torch.distributed.tensor._api"
DT_SPEC = "torch.distributed.tensor._dtensor_spec"
DT_PLACE = "torch.distributed.tensor.placement_types"
MESH = "torch.distributed.device_mesh"


class _remote_device:
    def __init__(self, text):
        worker, device = text.split("/")
        self._worker_name = None
        self._rank = int(worker.split(":")[1])
        self._device = torch.device(device)


class MEM_FORMAT_ENCODING(__import__("enum").Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


@dataclass
class TensorProperties:
    dtype: Any
    layout: Any = torch.strided
    requires_grad: bool = False
    memory_format: Any = torch.contiguous_format
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad, MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT,
                self.pin_memory)


@dataclass
class ShardMetadata:
    __slots__ = ["shard_offsets", "shard_sizes", "placement"]
    shard_offsets: list
    shard_sizes: list
    placement: Any


@dataclass
class Shard:
    __slots__ = ["tensor", "metadata"]
    tensor: torch.Tensor
    metadata: ShardMetadata


@dataclass
class ShardedTensorMetadata:
    shards_metadata: list
    size: torch.Size
    tensor_properties: TensorProperties


@dataclass
class ChunkShardingSpec:
    dim: Any
    placements: list


class ShardedTensor:
    @dataclass
    class ProcessGroupState:
        local_rank: int
        global_rank: int
        local_world_size: int
        global_world_size: int

    def __init__(self, size, dtype, local_shards, metadata, pg_state, spec):
        self.size, self.dtype = size, dtype
        self.state = (local_shards, metadata, pg_state, spec, False)

    def __reduce_ex__(self, proto):
        stride = torch.empty(self.size, device="meta").stride()
        args = (type(self), self.dtype, tuple(self.size), stride, 0, torch.strided, torch.device("cpu"), False)
        return (torch._tensor._rebuild_from_type_v2, (torch._utils._rebuild_wrapper_subclass, type(self), args,
                                                      self.state))


class DeviceMesh:
    def __init__(self, world, rank):
        self.device_type = "cuda"
        self.mesh = torch.arange(world)
        self.mesh_dim_names = None
        self._coordinate_on_dim = [rank]


@dataclass(frozen=True)
class Shard_:
    dim: int


@dataclass(frozen=True)
class Replicate:
    pass


class TensorMeta(NamedTuple):
    shape: torch.Size
    stride: tuple
    dtype: torch.dtype


@dataclass
class DTensorSpec:
    mesh: DeviceMesh
    placements: tuple
    tensor_meta: Any = None


class DTensor:
    def __init__(self, local, spec, size):
        self.local, self.spec, self.size = local, spec, size

    def __reduce_ex__(self, proto):
        stride = torch.empty(self.size, device="meta").stride()
        args = (type(self), self.local.dtype, tuple(self.size), stride, 0, torch.strided, torch.device("cuda", 0),
                False)
        state = (None, {"_local_tensor": self.local, "_spec": self.spec})
        return (torch._tensor._rebuild_from_type_v2, (torch._utils._rebuild_wrapper_subclass, type(self), args,
                                                      state))


place(_remote_device, REMOTE)
place(MEM_FORMAT_ENCODING, STMD)
place(TensorProperties, STMD)
place(ShardedTensorMetadata, STMD)
place(ShardMetadata, SMD)
place(Shard, SHARD)
place(ChunkShardingSpec, SPEC)
place(ShardedTensor, API)
place(ShardedTensor.ProcessGroupState, API, "ShardedTensor.ProcessGroupState")
place(DeviceMesh, MESH)
Shard_.__name__ = "Shard"
place(Shard_, DT_PLACE)
place(Replicate, DT_PLACE)
place(TensorMeta, DT_SPEC)
place(DTensorSpec, DT_SPEC)
place(DTensor, DT_API)


def chunk_sharded(full, rank, world):
    """fsdp/_shard_utils.py _create_chunk_sharded_tensor."""
    chunks = full.chunk(world, dim=0)
    sizes = [list(c.size()) for c in chunks]
    offsets0 = [0]
    for s in sizes[:-1]:
        offsets0.append(offsets0[-1] + s[0])
    offsets = [[o] + [0] * (full.dim() - 1) for o in offsets0]
    placements = [f"rank:{r}/cuda:{r}" for r in range(len(sizes))]
    metas = [ShardMetadata(o, s, _remote_device(p)) for o, s, p in zip(offsets, sizes, placements)]
    local = [Shard(chunks[rank].clone(), metas[rank])] if len(chunks) > rank else []
    md = ShardedTensorMetadata(metas, full.size(), TensorProperties(full.dtype))
    pg = ShardedTensor.ProcessGroupState(rank, rank, world, world)
    spec = ChunkShardingSpec(0, [_remote_device(p) for p in placements])
    return ShardedTensor(full.size(), full.dtype, local, md, pg, spec)


def dtensor(full, rank, world, dim):
    """Shard(dim) on a 1-D mesh: torch.chunk semantics (placement_types.Shard._split_tensor)."""
    chunks = list(torch.chunk(full, world, dim))
    local = chunks[rank].contiguous() if rank < len(chunks) else full.narrow(dim, 0, 0).contiguous()
    spec = DTensorSpec(DeviceMesh(world, rank), (Shard_(dim),),
                       TensorMeta(full.size(), full.stride(), full.dtype))
    return DTensor(local, spec, full.size())


def replicated(full, rank, world):
    spec = DTensorSpec(DeviceMesh(world, rank), (Replicate(),), TensorMeta(full.size(), full.stride(), full.dtype))
    return DTensor(full.clone(), spec, full.size())


def model(seed):
    g = torch.Generator().manual_seed(seed)
    return collections.OrderedDict([
        ("embed.weight", torch.randn(9, 6, generator=g)),
        ("layers.0.w", torch.randn(5, 3, generator=g).to(torch.bfloat16)),
        ("one_row", torch.randn(1, 4, generator=g)),  # fewer chunks than ranks: rank 1 holds nothing
        ("norm.bias", torch.randn(6, generator=g)),
    ])


def write_set(out, name, full, world, make, keep=None):
    os.makedirs(out, exist_ok=True)
    for rank in range(world):
        if keep is not None and rank not in keep:
            continue
        sd = collections.OrderedDict((k, make(k, v, rank, world)) for k, v in full.items())
        torch.save(sd, os.path.join(out, f"{name}_rank{rank}.bin"))


def main(root):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    full = model(1)
    write_set(os.path.join(root, "fsdp_st"), "pytorch_model_fsdp_0", full, 2,
              lambda k, v, r, w: chunk_sharded(v, r, w))
    torch.save(full, os.path.join(root, "fsdp_st.expected.pt"))
    full2 = model(2)
    write_set(os.path.join(root, "fsdp_dtensor"), "pytorch_model_fsdp_0", full2, 2,
              lambda k, v, r, w: replicated(v, r, w) if k == "norm.bias" else dtensor(v, r, w, 1 if k == "layers.0.w" else 0))
    torch.save(full2, os.path.join(root, "fsdp_dtensor.expected.pt"))
    # Three ranks saved, one rank file lost: the files disagree with the saved world size.
    write_set(os.path.join(root, "fsdp_lost_rank"), "pytorch_model_fsdp_0", model(3), 3,
              lambda k, v, r, w: chunk_sharded(v, r, w), keep={0, 1})
    # A sharded optimizer state dict (FSDP.optim_state_dict under SHARDED_STATE_DICT): tensors plus
    # steps and param_groups, which consolidation must not drop silently.
    os.makedirs(os.path.join(root, "fsdp_optim"))
    moment = torch.randn(9, 6)
    for rank in range(2):
        osd = {"state": {"embed.weight": {"exp_avg": chunk_sharded(moment, rank, 2), "step": torch.tensor(5.0)}},
               "param_groups": [{"lr": 0.1, "params": ["embed.weight"]}]}
        torch.save(osd, os.path.join(root, "fsdp_optim", f"optimizer_0_rank{rank}.bin"))
    # LOCAL_STATE_DICT: one 1-D ShardedTensor per FSDP unit, the flat parameter's unpadded range.
    os.makedirs(os.path.join(root, "fsdp_local"))
    flat = torch.cat([v.float().flatten() for v in model(4).values()])
    for rank in range(2):
        st = chunk_sharded(flat, rank, 2)
        torch.save(collections.OrderedDict([("_fsdp_wrapped_module._flat_param", st)]),
                   os.path.join(root, "fsdp_local", f"local_rank{rank}.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
