#!/usr/bin/env python3
"""DeepSpeed ZeRO folders for tests/sharded (tst_zero), hand-built: DeepSpeed is not installable here.

Every file is a real torch.save (PyTorch 1.13) of the dicts DeepSpeed writes (SHARDED.md section 2):
- model states as deepspeed/runtime/engine.py `_save_checkpoint` writes them: `module` (16-bit weights
  for stages 1/2, 0-element placeholders for stage 3), buffer_names, param_shapes (one OrderedDict
  per param group, in flat order), frozen_param_shapes/frozen_param_fragments, shared_params,
  dp_world_size, ds_config, ds_version, a builtin set, ...;
- optimizer states as `{optimizer_state_dict, ds_config, ds_version}`, the inner dict as
  stage_1_and_2.py `state_dict` (single_partition_of_fp32_groups, padding stripped from the last
  rank) or stage3.py `_rigid_state_dict` (fp32_flat_groups: each param padded to ceil(n/W) per rank,
  split into sub-groups at param boundaries), or bf16_optimizer.py's (no zero_stage);
- DeepSpeed's own classes pickled under their real module paths (ZeroStageEnum, LossScaler,
  DynamicLossScaler), registered here as stand-ins so pickle names them as DeepSpeed does.

The optimizer state is torch.optim.Adam's as DeepSpeed keeps it: per flat group (stage 3: per
sub-group) a step (a 0-dim tensor, an int, or FusedAdam's in the groups) and the moments, in the
torch state_dict form with Adam's own param_groups, or stage 1/2's elastic lean list (no groups);
`<set>.optimizer.pt` is what --keep-optimizer should write, built from the original moments.

The expected consolidated dict (`<set>.expected.pt`) is built from the original tensors (the fp32
masters, the buffers cast .float(), the frozen 16-bit weights, the tied alias), never by merging
the partitions back: the order is zero_to_fp32.py's (buffers, frozen, trainable, shared).

Usage: gen_zero.py OUTDIR            the test sets
       gen_zero.py --big OUTDIR MIB  one stage-3 set of about MIB MiB (4 ranks) for measurements
"""
import collections
import enum
import math
import os
import sys
import types

import torch


def _stand_in(module, cls):
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
    cls.__module__ = module
    setattr(sys.modules[module], cls.__name__, cls)
    return cls


class ZeroStageEnum(int, enum.Enum):
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3


class LossScaler:
    def __init__(self, scale):
        self.cur_scale = scale
        self.dynamic = False


class DynamicLossScaler:
    def __init__(self):
        self.cur_scale = 65536.0
        self.cur_iter = 3
        self.last_overflow_iter = -1
        self.scale_factor = 2.0
        self.scale_window = 1000
        self.min_scale = 1
        self.delayed_shift = 1
        self.cur_hysteresis = 1
        self.consecutive_hysteresis = False
        self.raise_error_at_min_scale = True
        self.dynamic = True


_stand_in("deepspeed.runtime.zero.config", ZeroStageEnum)
_stand_in("deepspeed.runtime.fp16.loss_scaler", LossScaler)
_stand_in("deepspeed.runtime.fp16.loss_scaler", DynamicLossScaler)

DS_VERSION = "0.16.4"


def model(half):
    """The original model: fp32 masters of the trainable params, frozen 16-bit params, buffers, a tie."""
    g = torch.Generator().manual_seed(3)
    masters = collections.OrderedDict()
    masters["embed.weight"] = torch.randn(50, 16, generator=g)
    masters["layers.0.attn.weight"] = torch.randn(16, 16, generator=g)
    masters["layers.0.attn.bias"] = torch.randn(15, generator=g)
    masters["layers.1.attn.weight"] = torch.randn(16, 16, generator=g)
    masters["layers.1.scale"] = torch.randn(1, generator=g)
    frozen = collections.OrderedDict()
    frozen["layers.0.norm.weight"] = torch.randn(17, generator=g).to(half)
    frozen["layers.1.proj.weight"] = torch.randn(5, 3, generator=g).to(half)
    buffers = collections.OrderedDict()
    buffers["layers.0.norm.running_mean"] = torch.randn(16, generator=g)
    buffers["layers.0.norm.num_batches_tracked"] = torch.tensor(12345, dtype=torch.int64)
    buffers["layers.1.rope"] = torch.randn(7, generator=g).to(half)
    # Module order, as named_parameters/named_buffers interleave them in the real module.
    order = ["embed.weight", "layers.0.attn.weight", "layers.0.attn.bias", "layers.0.norm.weight",
             "layers.0.norm.running_mean", "layers.0.norm.num_batches_tracked", "layers.1.attn.weight",
             "layers.1.scale", "layers.1.proj.weight", "layers.1.rope", "head.weight"]
    groups = [["embed.weight", "layers.0.attn.weight", "layers.0.attn.bias"], ["layers.1.attn.weight", "layers.1.scale"]]
    shared = {"head.weight": "embed.weight"}
    return masters, frozen, buffers, order, groups, shared


def adam_state(masters):
    """The original per-parameter Adam moments the optimizer partitions are cut from."""
    g = torch.Generator().manual_seed(5)
    return collections.OrderedDict(
        (key, collections.OrderedDict((k, torch.randn(v.shape, generator=g).abs() if key == "exp_avg_sq" else
                                       torch.randn(v.shape, generator=g)) for k, v in masters.items()))
        for key in ("exp_avg", "exp_avg_sq"))


def adam_param_groups(sizes, tensor_step):
    """torch.optim.Adam's own param_groups (torch 1.13's hyperparameters), one group per entry of
    `sizes` holding that many flat tensors, with different lrs; the flat tensors' indices run on
    across groups, as Optimizer.state_dict() numbers them."""
    flats = [[torch.nn.Parameter(torch.zeros(1)) for _ in range(n)] for n in sizes]
    opt = torch.optim.Adam([{"params": f, "lr": 1e-3 * (i + 1)} for i, f in enumerate(flats)],
                           betas=(0.8, 0.99), weight_decay=0.01)
    groups = opt.state_dict()["param_groups"]
    if not tensor_step:
        # DeepSpeed's FusedAdam keeps its step count in the group.
        for g in groups:
            g["step"] = 3
    return groups


def expected_with_optimizer(model_sd, moments, groups, step, param_groups, flat_groups):
    """{model, optimizer} as torch.optim.Adam's state_dict would hold it for the consolidated
    params, keyed by name: per param its step and moments (in their stored dtype), and the
    param_groups with `params` naming the params of the flat groups each group listed."""
    state = collections.OrderedDict()
    for g in groups:
        for k in g:
            entry = collections.OrderedDict()
            if step is not None:
                entry["step"] = step.clone() if torch.is_tensor(step) else step
            for key in moments:
                entry[key] = moments[key][k].clone()
            state[k] = entry
    optimizer = {"state": state}
    if param_groups is not None:
        optimizer["param_groups"] = [
            {k: [name for i in v for name in flat_groups[i]] if k == "params" else v for k, v in pg.items()}
            for pg in param_groups]
    return {"model": model_sd, "optimizer": optimizer}


def expected_fp32(masters, frozen, buffers, groups, shared):
    out = collections.OrderedDict()
    for k, v in buffers.items():
        out[k] = v.float()
    for k, v in frozen.items():
        out[k] = v.clone()
    for g in groups:
        for k in g:
            out[k] = masters[k].clone()
    for alias, name in shared.items():
        out[alias] = out[name]
    return out


def module_16bit(masters, frozen, buffers, order, shared, half):
    module = collections.OrderedDict()
    for k in order:
        if k in shared:
            module[k] = module[shared[k]]  # tied: the same tensor, one storage in the file
        elif k in masters:
            module[k] = masters[k].to(half)
        elif k in frozen:
            module[k] = frozen[k]
        else:
            module[k] = buffers[k]
    return module


def ds_config(stage, bf16):
    return {"train_batch_size": 8, "zero_optimization": {"stage": stage, "sub_group_size": 1000},
            "bf16": {"enabled": bf16}, "fp16": {"enabled": not bf16}}


def model_states(module, buffers, groups, masters, frozen, frozen_fragments, shared, stage, world, bf16, mp=1):
    return {
        "module": module,
        "buffer_names": list(buffers),
        "optimizer": None,
        "param_shapes": [collections.OrderedDict((k, masters[k].shape) for k in g) for g in groups],
        "frozen_param_shapes": collections.OrderedDict((k, v.shape) for k, v in frozen.items()),
        "shared_params": dict(shared),
        "frozen_param_fragments": frozen_fragments,
        "lr_scheduler": None,
        "data_sampler": None,
        "random_ltd": None,
        "sparse_tensor_module_names": set(),
        "skipped_steps": 0,
        "global_steps": 3,
        "global_samples": 24,
        "dp_world_size": world,
        "mp_world_size": mp,
        "ds_config": ds_config(stage, bf16),
        "ds_version": DS_VERSION,
    }


def partitions12(masters, groups, world):
    """stage_1_and_2.py: a group's flat fp32 buffer aligned to 2 x world, cut in equal partitions,
    the padding stripped from the last rank's."""
    parts = [[] for _ in range(world)]
    for g in groups:
        flat = torch.cat([masters[k].flatten() for k in g])
        align = 2 * world
        per = (flat.numel() + align - 1) // align * align // world
        for r in range(world):
            parts[r].append(flat[r * per:min((r + 1) * per, flat.numel())].clone())
    return parts


def partitions12_padded(tensors, groups, world):
    """As partitions12, the last rank's partition keeping its zero padding."""
    parts = [[] for _ in range(world)]
    for g in groups:
        flat = torch.cat([tensors[k].flatten() for k in g])
        align = 2 * world
        padded = (flat.numel() + align - 1) // align * align
        flat = torch.cat([flat, torch.zeros(padded - flat.numel(), dtype=flat.dtype)])
        per = padded // world
        for r in range(world):
            parts[r].append(flat[r * per:(r + 1) * per].clone())
    return parts


def partitions3(tensors, world):
    """stage3.py: each tensor on its own, ceil(n/W) elements per rank, zero-padded at the end."""
    per_rank = [[] for _ in range(world)]
    for t in tensors:
        flat = t.flatten()
        p = math.ceil(flat.numel() / world)
        padded = torch.cat([flat, torch.zeros(p * world - flat.numel(), dtype=flat.dtype)])
        for r in range(world):
            per_rank[r].append(padded[r * p:(r + 1) * p].clone())
    return per_rank


def write_set(out, name, stage, world, bf16=False, bf16_optimizer=False, drop_optim=False, stale_rank=False, mp=1,
              tensor_step=False, state_dtypes=None):
    """`tensor_step`: the base optimizer is torch.optim.Adam (step a 0-dim float tensor per flat
    group, since torch 1.12), else an int step in the state (DeepSpeedCPUAdam) for stage 3 and the
    lean states, in the groups for a torch state_dict (FusedAdam). `state_dtypes`: the moments'
    stored dtypes when not float32."""
    half = torch.bfloat16 if bf16 else torch.float16
    masters, frozen, buffers, order, groups, shared = model(half)
    dtypes = state_dtypes or {}
    step_value = torch.tensor(3.0) if tensor_step else 3
    # Stage 3's flat groups are sub-groups of sub_group_size elements cut at param boundaries:
    # here the first param group in two, and param_shapes lists them one by one (engine.py).
    flat_groups = [groups[0][:1], groups[0][1:], groups[1]] if stage == 3 else groups
    saved_groups = None
    folder = os.path.join(out, name)
    tag = os.path.join(folder, "global_step3")
    os.makedirs(tag, exist_ok=True)
    with open(os.path.join(folder, "latest"), "w") as f:
        f.write("global_step3")
    module = module_16bit(masters, frozen, buffers, order, shared, half)
    moments = adam_state(masters)
    for key, dtype in dtypes.items():
        moments[key] = collections.OrderedDict((k, v.to(dtype)) for k, v in moments[key].items())
    prefix = "bf16_" if bf16 else ""
    if stage == 3:
        placeholders = collections.OrderedDict(
            (k, v if k in buffers else torch.empty(0, dtype=half)) for k, v in module.items())
        frozen_parts = partitions3(list(frozen.values()), world)
        for r in range(world):
            fragments = collections.OrderedDict(zip(frozen, frozen_parts[r]))
            states = model_states(placeholders, buffers, flat_groups, masters, frozen, fragments, shared, 3, world,
                                  bf16)
            torch.save(states, os.path.join(tag, f"zero_pp_rank_{r}_mp_rank_00_model_states.pt"))
        names = [k for g in groups for k in g]
        flat = partitions3([masters[k] for k in names], world)
        flat_moments = {key: partitions3([m[k] for k in names], world) for key, m in moments.items()}
        bounds = [0, 1, 3, 5]  # the sub-groups' params in `names`
        # stage3.py's _rigid_state_dict: the base optimizer's state_dict while each param group holds
        # its sub-groups' fp32 flats, so the state is numbered by sub-group and the two param groups
        # list sub-groups [0, 1] and [2].
        saved_groups = adam_param_groups([2, 1], tensor_step)
        for r in range(world):
            sub = [torch.cat(flat[r][bounds[i]:bounds[i + 1]]) for i in range(3)]
            state = {i: {"step": step_value.clone() if tensor_step else 3,
                         **{key: torch.cat(f[r][bounds[i]:bounds[i + 1]]) for key, f in flat_moments.items()}}
                     for i in range(3)}
            osd = {"zero_stage": ZeroStageEnum.weights, "loss_scaler": DynamicLossScaler(), "dynamic_loss_scale": True,
                   "overflow": False, "partition_count": world,
                   "optimizer_state_dict": {"state": state, "param_groups": saved_groups},
                   "fp32_flat_groups": sub}
            if not drop_optim:
                torch.save({"optimizer_state_dict": osd, "ds_config": ds_config(3, bf16), "ds_version": DS_VERSION},
                           os.path.join(tag, f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    else:
        states = model_states(module, buffers, groups, masters, frozen, collections.OrderedDict(frozen), shared,
                              stage, world, bf16, mp)
        torch.save(states, os.path.join(tag, "mp_rank_00_model_states.pt"))
        parts = partitions12(masters, groups, world)
        moment_parts = {key: partitions12(m, groups, world) for key, m in moments.items()}
        for r in range(world + (1 if stale_rank else 0)):
            part = parts[min(r, world - 1)]
            if bf16:
                # The torch state_dict form (elastic_checkpoint off, DeepSpeed's default): moments
                # over the whole partition, the last rank's tail padding still in them; one flat
                # param per group.
                saved_groups = adam_param_groups([1] * len(groups), tensor_step)
                per = [partitions12_padded(m, groups, world)[min(r, world - 1)] for m in moments.values()]
                steps = {"step": step_value.clone()} if tensor_step else {}
                base = {"state": {g: {**steps, **{key: per[j][g] for j, key in enumerate(moments)}}
                                  for g in range(len(groups))},
                        "param_groups": saved_groups}
            else:
                # _get_base_optimizer_state: one lean state per group, padding stripped, and no
                # param_groups (elastic_checkpoint).
                base = [{"step": 3, **{key: moment_parts[key][min(r, world - 1)][g] for key in moments}}
                        for g in range(len(groups))]
            if bf16_optimizer:
                osd = {"clip_grad": 1.0, "base_optimizer_state": {}, "single_partition_of_fp32_groups": part,
                       "group_paddings": [0, 0], "partition_count": [world, world], "ds_version": DS_VERSION,
                       "param_slice_mappings": [{}, {}]}
            else:
                osd = {"loss_scaler": LossScaler(1.0), "dynamic_loss_scale": False, "overflow": False,
                       "clip_grad": 1.0, "base_optimizer_state": base,
                       "single_partition_of_fp32_groups": part,
                       "zero_stage": ZeroStageEnum.gradients if stage == 2 else ZeroStageEnum.optimizer_states,
                       "group_paddings": [0, 0], "partition_count": [world, world], "ds_version": DS_VERSION,
                       "param_slice_mappings": [{}, {}]}
            torch.save({"optimizer_state_dict": osd, "ds_config": ds_config(stage, bf16), "ds_version": DS_VERSION},
                       os.path.join(tag, f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    expected = expected_fp32(masters, frozen, buffers, groups, shared)
    torch.save(expected, os.path.join(out, name + ".expected.pt"))
    # The step torch.optim keeps per param: the state's (stage 3, lean states, Adam's tensor), or
    # none where FusedAdam keeps it in the groups.
    step = step_value if (stage == 3 or not bf16 or tensor_step) else None
    torch.save(expected_with_optimizer(expected, moments, groups, step, saved_groups, flat_groups),
               os.path.join(out, name + ".optimizer.pt"))
    torch.save(module, os.path.join(out, name + ".module.pt"))


def write_big(out, mib):
    """One stage-3 set, 4 ranks, of about `mib` MiB of fp32 masters: the largest tensor a quarter."""
    world = 4
    folder = os.path.join(out, "zero3_big")
    tag = os.path.join(folder, "global_step1")
    os.makedirs(tag, exist_ok=True)
    with open(os.path.join(folder, "latest"), "w") as f:
        f.write("global_step1")
    elems = mib * (1 << 20) // 4
    sizes = [elems // 4] + [elems // 16] * 12
    masters = collections.OrderedDict((f"w{i}", torch.full((n,), float(i))) for i, n in enumerate(sizes))
    groups = [list(masters)]
    module = collections.OrderedDict((k, torch.empty(0, dtype=torch.float16)) for k in masters)
    for r in range(world):
        states = model_states(module, {}, groups, masters, {}, {}, {}, 3, world, False)
        torch.save(states, os.path.join(tag, f"zero_pp_rank_{r}_mp_rank_00_model_states.pt"))
    flat = partitions3(list(masters.values()), world)
    for r in range(world):
        osd = {"zero_stage": ZeroStageEnum.weights, "partition_count": world, "fp32_flat_groups": [torch.cat(flat[r])]}
        torch.save({"optimizer_state_dict": osd, "ds_version": DS_VERSION},
                   os.path.join(tag, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    print("largest tensor", sizes[0] * 4, "bytes; total", sum(sizes) * 4, "bytes")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--big":
        write_big(sys.argv[2], int(sys.argv[3]))
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write_set(out, "zero3_w2", 3, 2)
    write_set(out, "zero3_w3", 3, 3, tensor_step=True)
    write_set(out, "zero3_bf16_w2", 3, 2, bf16=True, tensor_step=True, state_dtypes={"exp_avg": torch.bfloat16})
    write_set(out, "zero2_w3", 2, 3)
    write_set(out, "zero2_bf16_w2", 2, 2, bf16=True, tensor_step=True, state_dtypes={"exp_avg_sq": torch.float16})
    # The torch state_dict form with FusedAdam's step in the groups, not the state.
    write_set(out, "zero2_fused_w2", 2, 2, bf16=True)
    write_set(out, "zero1_w2", 1, 2)
    write_set(out, "bf16_optimizer_w2", 1, 2, bf16=True, bf16_optimizer=True)
    write_set(out, "zero3_no_optim", 3, 2, bf16=True, drop_optim=True)
    write_set(out, "zero2_stale_rank", 2, 2, stale_rank=True)
    # A tensor-parallel run's mp_rank_00 (its mp_rank_01 files left out: only the count matters).
    write_set(out, "zero2_tensor_parallel", 2, 2, mp=2)
    write_set(out, "zero3_truncated", 3, 2)
    cut = os.path.join(out, "zero3_truncated", "global_step3", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    with open(cut, "r+b") as f:
        f.truncate(os.path.getsize(cut) // 2)
    print("ZeRO fixtures written to", out)


if __name__ == "__main__":
    main()
