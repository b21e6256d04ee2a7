"""Writes the two DCP folders the fuzz_dcp_safetensors and fuzz_dcp_zstd targets mutate, with the real
writer of PyTorch 2.x (run in the root of scripts/modern-torch.sh: scripts/torch2-python.sh
make_templates.py OUT): one process, FileSystemWriter with serialization_format=SAFETENSORS, and
with _extensions=[ZStandard()]. Each holds a float, a bf16 and an int tensor, a nested dict and a
BYTE_IO value, so both a value and tensor chunks sit in its one data file."""
import os
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.filesystem import SerializationFormat

out = sys.argv[1]
torch.manual_seed(0)
sd = {"w": torch.randn(3, 4), "h": torch.randn(2, 3).to(torch.bfloat16), "b": torch.arange(5),
      "nested": {"x": torch.ones(2)}, "step": 3}
dcp.save(sd, storage_writer=FileSystemWriter(os.path.join(out, "safetensors"),
                                             serialization_format=SerializationFormat.SAFETENSORS))
dcp.save(sd, storage_writer=FileSystemWriter(os.path.join(out, "zstd"), _extensions=[ZStandard()]))
