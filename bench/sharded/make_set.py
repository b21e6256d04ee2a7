#!/usr/bin/python3
"""Writes a sharded set of SIZE MiB of float32 weights (idempotent), in one of three layouts:
- hf:    a Hugging Face .bin set written by torch 1.13: 4 shards of 16 MiB tensors, indexed as
         huggingface_hub names them;
- dcp:   a torch.distributed.checkpoint directory of 4 ranks, as FSDP (sharded state dict) or
         accelerate save it: {"model": {...}, "step": N}, each 2048 x 2048 weight sharded along
         dim 0 (torch.chunk, FSDP's layout), each 2048-element norm weight replicated (written once),
         written by tests/sharded/gen_dcp.py's write_dcp (PyTorch 2.x's writer, followed from its
         source: there is no torch.distributed.checkpoint in 1.13);
- zero2: a DeepSpeed ZeRO-2 folder of 4 ranks (tests/sharded/gen_zero.py's model-states dict and
         stand-in classes): two param groups (2048 x 2048 weights; 2048-element norm weights) whose
         flat fp32 masters are cut into 4 equal partitions as stage_1_and_2.py does, the fp16
         `module` in mp_rank_00_model_states.pt. The Adam moments are left out of the optimizer files
         (they would add 2 x SIZE to the disk and to what zero_to_fp32 loads, and nothing to what a
         consolidation reads).
- dcp_cols: the same DCP folder with each weight sharded along dim 1 (Shard(1), tensor parallel's
         column split): no chunk is a run of whole rows, so a reader assembles each weight in memory.
Prints the set's folder. Usage: make_set.py OUTDIR SIZE_MIB [hf|dcp|dcp_cols|zero2]"""
import collections
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "sharded"))

SIDE = 2048  # a 2048 x 2048 float32 weight is 16 MiB


def layers(size_mib):
    return max(4, size_mib // 16)


def make_hf(folder, size_mib):
    shards, per_tensor = 4, 4 * 1024 * 1024
    per_shard = max(1, size_mib // 16 // shards)
    weight_map, total = {}, 0
    for i in range(1, shards + 1):
        sd = collections.OrderedDict((f"layers.{i}.{j}.weight", torch.randn(per_tensor)) for j in range(per_shard))
        name = f"pytorch_model-{i:05d}-of-{shards:05d}.bin"
        torch.save(sd, os.path.join(folder, name))
        for k, t in sd.items():
            weight_map[k] = name
            total += t.numel() * 4
    with open(os.path.join(folder, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, sort_keys=True)


def make_dcp(folder, size_mib, dim=0):
    import gen_dcp

    g = torch.Generator().manual_seed(13)
    model = {}
    for i in range(layers(size_mib)):
        model[f"layers.{i}.weight"] = gen_dcp.shard_dim(torch.randn(SIDE, SIDE, generator=g), dim, 4)
        model[f"layers.{i}.norm.weight"] = torch.randn(SIDE, generator=g)
    gen_dcp.write_dcp(folder, {"model": model, "step": 1000}, world=4, replicated_rank=1, expected=False)


def make_zero2(folder, size_mib):
    import gen_zero

    world, n = 4, layers(size_mib)
    g = torch.Generator().manual_seed(13)
    # One flat buffer per group, the masters views of it: the partitions are slices, never a second copy.
    weights = torch.randn(n * SIDE * SIDE, generator=g)
    norms = torch.randn(n * SIDE, generator=g)
    masters = collections.OrderedDict()
    for i in range(n):
        masters[f"layers.{i}.weight"] = weights[i * SIDE * SIDE:(i + 1) * SIDE * SIDE].view(SIDE, SIDE)
    for i in range(n):
        masters[f"layers.{i}.norm.weight"] = norms[i * SIDE:(i + 1) * SIDE]
    groups = [[f"layers.{i}.weight" for i in range(n)], [f"layers.{i}.norm.weight" for i in range(n)]]
    buffers = collections.OrderedDict((f"layers.{i}.rope.inv_freq", torch.rand(64, generator=g)) for i in range(n))
    tag = os.path.join(folder, "global_step1000")
    os.makedirs(tag, exist_ok=True)
    module = collections.OrderedDict()
    for i in range(n):
        module[f"layers.{i}.weight"] = masters[f"layers.{i}.weight"].half()
        module[f"layers.{i}.norm.weight"] = masters[f"layers.{i}.norm.weight"].half()
        module[f"layers.{i}.rope.inv_freq"] = buffers[f"layers.{i}.rope.inv_freq"]
    states = gen_zero.model_states(module, buffers, groups, masters, {}, collections.OrderedDict(), {}, 2, world,
                                   False)
    torch.save(states, os.path.join(tag, "mp_rank_00_model_states.pt"))
    del states, module
    for r in range(world):
        part = []
        for flat in (weights, norms):
            # stage_1_and_2.py: the group's flat buffer padded to 2 x world, cut in equal partitions,
            # the padding stripped from the last rank's (none here: both are multiples of 8).
            per = (flat.numel() + 2 * world - 1) // (2 * world) * (2 * world) // world
            part.append(flat[r * per:min((r + 1) * per, flat.numel())].clone())
        osd = {"loss_scaler": gen_zero.LossScaler(1.0), "dynamic_loss_scale": False, "overflow": False,
               "clip_grad": 1.0, "base_optimizer_state": [{"step": 1000}, {"step": 1000}],
               "single_partition_of_fp32_groups": part, "zero_stage": gen_zero.ZeroStageEnum.gradients,
               "group_paddings": [0, 0], "partition_count": [world, world], "ds_version": gen_zero.DS_VERSION,
               "param_slice_mappings": [{}, {}]}
        torch.save({"optimizer_state_dict": osd, "ds_config": gen_zero.ds_config(2, False),
                    "ds_version": gen_zero.DS_VERSION},
                   os.path.join(tag, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
        del part, osd
    with open(os.path.join(folder, "latest"), "w") as f:
        f.write("global_step1000")


def main():
    out, size_mib = sys.argv[1], int(sys.argv[2])
    kind = sys.argv[3] if len(sys.argv) > 3 else "hf"
    makers = {"hf": make_hf, "dcp": make_dcp, "dcp_cols": lambda f, s: make_dcp(f, s, 1), "zero2": make_zero2}
    folder = os.path.join(out, f"{kind}_{size_mib}m")
    done = folder + ".complete"  # beside the set: a stray file inside would be part of it
    if not os.path.exists(done):
        os.makedirs(folder, exist_ok=True)
        makers[kind](folder, size_mib)
        open(done, "w").close()
    print(folder)


if __name__ == "__main__":
    main()
