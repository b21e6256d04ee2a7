#!/usr/bin/python3
"""The Python route for a DeepSpeed ZeRO-1/2 folder: deepspeed/utils/zero_to_fp32.py's algorithm
(get_fp32_state_dict_from_zero_checkpoint, stages 1 and 2) over torch.load, without DeepSpeed
installed (gen_zero.py's stand-ins for the pickled DeepSpeed classes). As it does: the model states
file torch.load'ed for buffer_names, param_shapes, frozen params and shared_params (buffers cast
.float()); every *_optim_states.pt torch.load'ed; each group's single_partition_of_fp32_groups of
all ranks concatenated (the whole model in RAM, twice while the partitions are alive), cut by
param_shapes with narrow().view(), the 2 x world alignment checked; shared params aliased; the
OrderedDict torch.save'd.
Usage: zero_to_fp32.py ZERO_DIR OUT"""
import collections
import glob
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "sharded"))
import gen_zero  # noqa: E402,F401  (registers DeepSpeed's pickled classes under their real paths)


def natural_keys(text):
    return [int(c) if c.isdigit() else c for c in re.split(r"(\d+)", text)]


def main(folder, out):
    with open(os.path.join(folder, "latest")) as f:
        tag = os.path.join(folder, f.read().strip())
    model = torch.load(os.path.join(tag, "mp_rank_00_model_states.pt"), map_location="cpu")
    buffers = {k: v.float() for k, v in model["module"].items() if k in model["buffer_names"]}
    param_shapes = model["param_shapes"]
    frozen_shapes = model.get("frozen_param_shapes") or {}
    frozen_fragments = model.get("frozen_param_fragments") or {}
    shared = [[k, v] for k, v in model["shared_params"].items()]
    del model
    files = sorted(glob.glob(os.path.join(tag, "*_optim_states.pt")), key=natural_keys)
    states = [torch.load(f, map_location="cpu") for f in files]
    world = states[0]["optimizer_state_dict"]["partition_count"]
    world = max(world) if isinstance(world, list) else world
    if world != len(files):
        raise ValueError(f"Expected {world} of '*_optim_states.pt' under '{tag}' but found {len(files)} files.")
    flat_groups = [s["optimizer_state_dict"]["single_partition_of_fp32_groups"] for s in states]
    del states
    state_dict = collections.OrderedDict()
    state_dict.update(buffers)
    for name in frozen_shapes:
        state_dict[name] = frozen_fragments[name]
    merged = [torch.cat([ranks[i] for ranks in flat_groups], 0) for i in range(len(flat_groups[0]))]
    align = 2 * world
    for shapes, vector in zip(param_shapes, merged):
        offset = 0
        for name, shape in shapes.items():
            numel = shape.numel()
            state_dict[name] = vector.narrow(0, offset, numel).view(shape)
            offset += numel
        if align * math.ceil(offset / align) != align * math.ceil(vector.numel() / align):
            raise ValueError(f"consumed {offset} numels out of {vector.numel()} - something is wrong")
    for alias, name in shared:
        if name in state_dict:
            state_dict[alias] = state_dict[name]
    torch.save(state_dict, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
