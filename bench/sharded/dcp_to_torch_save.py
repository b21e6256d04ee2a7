#!/usr/bin/python3
"""The Python route for a DCP directory: torch.distributed.checkpoint.format_utils.dcp_to_torch_save
written out over torch.load, since PyTorch 1.13 has no torch.distributed.checkpoint. As it does:
_EmptyStateDictLoadPlanner allocates every tensor of .metadata in full (the whole model in RAM),
FileSystemReader.read_data reads each item's [offset, offset + length) of its file into a BytesIO
and torch.loads it, a tensor chunk is copied into its box (narrow_tensor_by_index), a bytes item
is the loaded object; the flat keys are nested again through planner_data (_traverse.set_element)
and the whole dict is torch.save'd. The metadata classes are gen_dcp.py's stand-ins, registered
under their real module paths so that .metadata unpickles.
Usage: dcp_to_torch_save.py DCP_DIR OUT"""
import collections
import io
import os
import pickle
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "sharded"))
import gen_dcp  # noqa: E402  (the stand-in metadata classes and set_element)


def main(folder, out):
    with open(os.path.join(folder, ".metadata"), "rb") as f:
        meta = pickle.load(f)
    flat = {}
    for fqn, md in meta.state_dict_metadata.items():
        if isinstance(md, gen_dcp.TensorStorageMetadata):
            flat[fqn] = torch.empty(md.size, dtype=md.properties.dtype)
    by_file = collections.defaultdict(list)
    for index, info in meta.storage_data.items():
        by_file[info.relative_path].append((index, info))
    for name, items in by_file.items():
        with open(os.path.join(folder, name), "rb") as stream:
            for index, info in sorted(items, key=lambda i: i[1].offset):
                stream.seek(info.offset)
                obj = torch.load(io.BytesIO(stream.read(info.length)), map_location="cpu")
                if isinstance(meta.state_dict_metadata[index.fqn], gen_dcp.BytesStorageMetadata):
                    flat[index.fqn] = obj
                    continue
                box = flat[index.fqn]
                for dim, (at, length) in enumerate(zip(index.offset, obj.size())):
                    box = box.narrow(dim, at, length)
                box.copy_(obj)
    nested = {}
    for fqn, value in flat.items():
        gen_dcp.set_element(nested, meta.planner_data[fqn], value)
    torch.save(nested, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
