#!/usr/bin/env python3
"""Writes checkpoint sets with the real writers: PyTorch 2.x's torch.distributed.checkpoint (DCP)
under FSDP2 and under 2-D FSDP2 + tensor parallelism (DTensor with _StridedShard), accelerate's FSDP
save_state, transformers' save_pretrained(max_shard_size=...), and a Lightning 2.x .ckpt.

Run on a machine with PyTorch 2.x, transformers, accelerate and lightning:

    make_real_sets.py OUT                   every set, each step in its own process
    make_real_sets.py OUT --only S1,S2,...  those steps, each in its own process (exit 1 if one fails)
    make_real_sets.py OUT --step S          one step

The sets it wrote with PyTorch 2.11 on the lent GPU machine are checked in under
tests/sharded/real/sets; the torch2 tests (tests/torch2) run it again at test time in the PyTorch
2.x root of scripts/modern-torch.sh, which has no Lightning. Beside each set is its oracle: `*.dcp_to_torch_save.pt` is what
torch.distributed.checkpoint.format_utils.dcp_to_torch_save made of the directory, `*.state_dict.pt`
the model's own state_dict() saved with torch.save. Ranks run as processes on the CPU with gloo, so
one GPU (or none) is enough; accelerate and Lightning run on cuda:0 when there is one, which leaves
real cuda:0 storage locations in their files.
"""
import argparse
import json
import os
import subprocess
import sys
import traceback

import torch
from torch import nn

STEPS = ("fsdp2", "fsdp2_tp", "transformers", "lightning", "accelerate", "dcp_layouts", "errors")


class Net(nn.Module):
    """Uneven first dimension (7 rows over 2 ranks), a buffer, an embedding: what FSDP pads."""

    def __init__(self, hidden=7):
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.fc1 = nn.Linear(6, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, 5)
        self.register_buffer("scale", torch.arange(5.0))

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(self.embed(x)))) * self.scale


def fake_step(model, opt):
    # Gradients set by hand: an optimizer step then needs no collective, which gloo may lack for FSDP2.
    for p in model.parameters():
        p.grad = torch.ones_like(p) * 0.5
    opt.step()


def init_pg(rank, world, port):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return dist


def oracle(dcp_dir):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(dcp_dir, dcp_dir + ".dcp_to_torch_save.pt")


def fsdp2_trained(world):
    """Net under FSDP2 over `world` gloo ranks after one AdamW step: the model and its sharded model
    and optimizer state dicts (get_state_dict)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = Net()
    for m in (model.fc1, model.fc2):
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    fake_step(model, opt)
    msd, osd = get_state_dict(model, opt)
    return model, msd, osd


def fsdp2_worker(rank, world, out, port):
    dist = init_pg(rank, world, port)
    import torch.distributed.checkpoint as dcp
    model, msd, osd = fsdp2_trained(world)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=f"{out}/dcp_fsdp2")
    # The same with FileSystemWriter(thread_count=2): each rank's items spread over more files.
    from torch.distributed.checkpoint import FileSystemWriter
    dcp.save({"model": msd, "optim": osd}, storage_writer=FileSystemWriter(f"{out}/dcp_fsdp2_threads", thread_count=2))
    os.makedirs(f"{out}/fsdp2_rank_pickles", exist_ok=True)
    torch.save(model.state_dict(), f"{out}/fsdp2_rank_pickles/rank{rank}.pt")
    import inspect
    if "use_collectives" in inspect.signature(dcp.save).parameters:
        dcp.save({"model": msd}, checkpoint_id=f"{out}/dcp_fsdp2_no_collectives", use_collectives=False)
    dist.barrier()
    dist.destroy_process_group()


def fsdp2_tp_worker(rank, world, out, port):
    dist = init_pg(rank, world, port)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Net(hidden=8)
    parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    for m in (model.fc1, model.fc2):
        fully_shard(m, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    sd = model.state_dict()
    with open(f"{out}/fsdp2_tp_placements.rank{rank}.txt", "w") as f:
        for k, v in sd.items():
            f.write(f"{k} {type(v).__name__} {getattr(v, 'placements', None)} "
                    f"{tuple(v.shape)} local={tuple(getattr(v, '_local_tensor', v).shape)}\n")
    dcp.save({"model": sd}, checkpoint_id=f"{out}/dcp_fsdp2_tp")
    os.makedirs(f"{out}/fsdp2_tp_rank_pickles", exist_ok=True)
    torch.save(sd, f"{out}/fsdp2_tp_rank_pickles/rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def dcp_layouts_worker(rank, world, out, port):
    """The same FSDP2 model and AdamW state through FileSystemWriter's newer layouts: data files in
    safetensors (serialization_format=SAFETENSORS) and items through the ZStandard stream extension,
    beside the default layout of the same state dict, whose dcp_to_torch_save is the oracle of both
    (PyTorch's own FileSystemReader cannot read the safetensors one back: it torch.loads the bytes
    .metadata gives, which are the safetensors header)."""
    dist = init_pg(rank, world, port)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint._extension import ZStandard
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    _, msd, osd = fsdp2_trained(world)
    sd = {"model": msd, "optim": osd}
    dcp.save(sd, storage_writer=FileSystemWriter(f"{out}/dcp_layouts_torch_save"))
    dcp.save(sd, storage_writer=FileSystemWriter(f"{out}/dcp_safetensors",
                                                 serialization_format=SerializationFormat.SAFETENSORS))
    dcp.save(sd, storage_writer=FileSystemWriter(f"{out}/dcp_zstd", _extensions=[ZStandard()]))
    # Both: each chunk's item an empty zstd frame, the safetensors file after the last of them.
    dcp.save(sd, storage_writer=FileSystemWriter(f"{out}/dcp_safetensors_zstd", _extensions=[ZStandard()],
                                                 serialization_format=SerializationFormat.SAFETENSORS))
    # Two threads a rank: each rank's chunks over two data files, each ending in its own safetensors file.
    dcp.save(sd, storage_writer=FileSystemWriter(f"{out}/dcp_safetensors_threads", thread_count=2,
                                                 serialization_format=SerializationFormat.SAFETENSORS))
    dist.barrier()
    dist.destroy_process_group()


MCORE_PLANNER_SRC = '''
from torch.distributed.checkpoint import DefaultSavePlanner


class MCoreSavePlanner(DefaultSavePlanner):
    """megatron/core/dist_checkpointing/strategies/torch.py: a ShardedObject's io.BytesIO is
    written as it is, not torch.save'd again."""

    def transform_object(self, write_item, object):
        return object
'''


def write_megatron_extra_state(out):
    """A Megatron-LM torch_dist folder of a model with TransformerEngine layers: stacked layer
    weights, and each layer's _extra_state as megatron-core saves a ShardedObject
    (_mcore_to_torch_sharded_object: torch.save([state]) into an io.BytesIO, keyed
    `<key>/shard_<offset>_<shape>`), written by MCoreSavePlanner (defined under megatron-core's module
    name, which Debian does not package), with common.pt and metadata.json beside it. `state` is what
    TransformerEngine versions return from get_extra_state: None, an io.BytesIO of torch.save(None),
    an empty uint8 tensor (no FP8), or a uint8 tensor of the pickled FP8 state."""
    import io
    import pickle
    import torch.distributed.checkpoint as dcp
    stub = os.path.join(out + ".megatron", "megatron", "core", "dist_checkpointing", "strategies")
    os.makedirs(stub, exist_ok=True)
    for d in (stub, os.path.dirname(stub), os.path.dirname(os.path.dirname(stub)),
              os.path.dirname(os.path.dirname(os.path.dirname(stub)))):
        open(os.path.join(d, "__init__.py"), "a").close()
    with open(os.path.join(stub, "torch.py"), "w") as f:
        f.write(MCORE_PLANNER_SRC)
    sys.path.insert(0, out + ".megatron")
    from megatron.core.dist_checkpointing.strategies.torch import MCoreSavePlanner

    def sharded_object(state):
        b = io.BytesIO()
        torch.save([state], b)
        return b

    old_te = io.BytesIO()
    torch.save(None, old_te)
    fp8 = torch.frombuffer(bytearray(pickle.dumps({"scale_fwd": torch.ones(3), "amax_history_fwd": torch.zeros(4, 3)})),
                           dtype=torch.uint8)
    torch.manual_seed(0)
    sd = {"embedding.word_embeddings.weight": torch.randn(16, 8),
          "decoder.layers.mlp.linear_fc1.weight": torch.randn(2, 32, 8),
          "decoder.layers.mlp.linear_fc1._extra_state/shard_0_2": sharded_object(None),
          "decoder.layers.mlp.linear_fc1._extra_state/shard_1_2": sharded_object(old_te),
          "decoder.layers.self_attention.linear_proj.weight": torch.randn(2, 8, 8),
          "decoder.layers.self_attention.linear_proj._extra_state/shard_0_2":
              sharded_object(torch.empty(0, dtype=torch.uint8)),
          "decoder.layers.self_attention.linear_proj._extra_state/shard_1_2": sharded_object(fp8)}
    dcp.save(sd, checkpoint_id=out, planner=MCoreSavePlanner())
    torch.save({"checkpoint_version": 3.0, "iteration": 10}, os.path.join(out, "common.pt"))
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
                   "common_backend_version": 1}, f)


def step_dcp_layouts(out):
    spawn(dcp_layouts_worker, 2, out, 29514)
    oracle(f"{out}/dcp_layouts_torch_save")
    oracle(f"{out}/dcp_zstd")
    # What PyTorch's own reader makes of the safetensors layout, for the finding's words.
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    try:
        dcp_to_torch_save(f"{out}/dcp_safetensors", f"{out}/dcp_safetensors.dcp_to_torch_save.pt")
        said = "OK"
    except BaseException as e:  # noqa: BLE001 - CheckpointException is no Exception; its message is recorded
        said = f"{type(e).__name__}: {e}"[-2000:]
    with open(f"{out}/dcp_safetensors.torch_reads.txt", "w") as f:
        f.write(said + "\n")
    write_megatron_extra_state(f"{out}/dcp_megatron_extra_state")
    oracle(f"{out}/dcp_megatron_extra_state")


def spawn(fn, world, out, port):
    import torch.multiprocessing as mp
    mp.spawn(fn, args=(world, out, port), nprocs=world, join=True)


def step_fsdp2(out):
    spawn(fsdp2_worker, 2, out, 29511)
    torch.manual_seed(0)
    torch.save(Net().state_dict(), f"{out}/dcp_fsdp2.init_state_dict.pt")
    oracle(f"{out}/dcp_fsdp2")
    if os.path.isdir(f"{out}/dcp_fsdp2_no_collectives"):
        oracle(f"{out}/dcp_fsdp2_no_collectives")
    # Saved with no process group (dcp.save then runs as one rank, no_dist), and a torch.save
    # file turned into DCP by torch_save_to_dcp: both hold the initial model's state dict.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import torch_save_to_dcp
    dcp.save({"model": torch.load(f"{out}/dcp_fsdp2.init_state_dict.pt")}, checkpoint_id=f"{out}/dcp_no_pg")
    torch_save_to_dcp(f"{out}/dcp_fsdp2.init_state_dict.pt", f"{out}/dcp_torch_save_to_dcp")


def step_fsdp2_tp(out):
    spawn(fsdp2_tp_worker, 4, out, 29512)
    torch.manual_seed(0)
    torch.save(Net(hidden=8).state_dict(), f"{out}/dcp_fsdp2_tp.state_dict.pt")
    oracle(f"{out}/dcp_fsdp2_tp")


def step_transformers(out):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    gpt2.save_pretrained(f"{out}/hf_gpt2_safetensors", max_shard_size="50KB")
    torch.save(gpt2.state_dict(), f"{out}/hf_gpt2.state_dict.pt")
    try:
        gpt2.save_pretrained(f"{out}/hf_gpt2_bin", max_shard_size="50KB", safe_serialization=False)
    except Exception:  # transformers 5 writes safetensors only
        traceback.print_exc()
    torch.manual_seed(1)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=64)).to(torch.bfloat16)
    llama.save_pretrained(f"{out}/hf_llama_bf16", max_shard_size="40KB")
    torch.save(llama.state_dict(), f"{out}/hf_llama_bf16.state_dict.pt")


LIGHTNING_SRC = '''
import sys, torch
import lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class TinyRegressor(L.LightningModule):
    def __init__(self, hidden=8, lr=0.01):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))
    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(16, 8), torch.randn(16, 4)), batch_size=4)
gpu = torch.cuda.is_available()
trainer = L.Trainer(max_epochs=1, accelerator="gpu" if gpu else "cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
model = TinyRegressor()
trainer.fit(model, data)
trainer.save_checkpoint(sys.argv[1] + "/lightning2.ckpt")
torch.save({k: v.cpu() for k, v in model.state_dict().items()}, sys.argv[1] + "/lightning2.state_dict.pt")
'''


def step_lightning(out):
    subprocess.run([sys.executable, "-c", LIGHTNING_SRC, out], check=True)


ACCELERATE_SRC = '''
import sys, torch
from torch import nn
from accelerate import Accelerator, FullyShardedDataParallelPlugin
sys.path.insert(0, sys.argv[2])
from make_real_sets import Net, fake_step
plugin = FullyShardedDataParallelPlugin(state_dict_type="SHARDED_STATE_DICT")
acc = Accelerator(fsdp_plugin=plugin)
torch.manual_seed(0)
model = acc.prepare(Net(hidden=8))  # FSDP wraps the model before the optimizer sees its parameters
opt = acc.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
x = torch.randint(0, 10, (4,), device=acc.device)
acc.backward(model(x).sum())
opt.step()
acc.save_state(sys.argv[1] + "/accelerate_fsdp")
'''


def step_accelerate(out):
    env = dict(os.environ, ACCELERATE_USE_FSDP="true", FSDP_STATE_DICT_TYPE="SHARDED_STATE_DICT")
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(out, "accelerate_job.py")
    with open(script, "w") as f:
        f.write(ACCELERATE_SRC)
    # One process, given the environment torchrun would give it: torchrun's own rendezvous store
    # asks for libuv, which Debian's PyTorch is built without, whatever USE_LIBUV says.
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT="29513")
    r = subprocess.run([sys.executable, script, out, here], env=env, capture_output=True, text=True)
    print(r.stdout[-6000:], r.stderr[-6000:])
    r.check_returncode()
    os.remove(script)
    for d in sorted(os.listdir(f"{out}/accelerate_fsdp")):
        p = f"{out}/accelerate_fsdp/{d}"
        if os.path.isdir(p) and os.path.exists(p + "/.metadata"):
            oracle(p)


def step_errors(out):
    """What torch.load itself says about these files outside a process group, for the findings' text."""
    said = {"torch": torch.__version__}
    for name in ("fsdp2_rank_pickles/rank0.pt", "fsdp2_tp_rank_pickles/rank0.pt", "lightning2.ckpt"):
        path = f"{out}/{name}"
        if not os.path.exists(path):
            continue
        for wo in (True, False):
            code = ("import torch,sys\ntry:\n  x=torch.load(sys.argv[1], map_location='cpu', weights_only=%s)\n"
                    "  print('OK', type(x).__name__)\nexcept Exception as e:\n  print(type(e).__name__ + ': ' + str(e))"
                    % wo)
            r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120)
            said[f"{name} weights_only={wo}"] = (r.stdout + r.stderr)[-3000:]
    with open(f"{out}/torch_load_errors.json", "w") as f:
        json.dump(said, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--step", choices=STEPS)
    ap.add_argument("--only", type=lambda v: v.split(","), default=STEPS)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.step:
        globals()["step_" + args.step](args.out)
        return 0
    failed = 0
    for s in args.only:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), args.out, "--step", s],
                           capture_output=True, text=True, timeout=240)
        status = "ok" if r.returncode == 0 else f"FAILED rc={r.returncode}"
        print(f"== {s}: {status}", flush=True)
        with open(f"{args.out}/log_{s}.txt", "w") as f:
            f.write(r.stdout + r.stderr)
        if r.returncode:
            print((r.stdout + r.stderr)[-2500:], flush=True)
            failed = 1
    return failed if args.only is not STEPS else 0


if __name__ == "__main__":
    sys.exit(main())
