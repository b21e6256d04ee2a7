#!/usr/bin/env python3
"""Folders that hold one model beside a run's other state, written by today's writers in the root of
scripts/modern-torch.sh, and ckptscope naming the folder where a file is taken
(core/checkpoint/model_folder.h).

    torch2_folders.py write OUT            every folder below, by the real writers
    torch2_folders.py check CKPTSCOPE OUT  each folder checked

The folders:
- accelerate_safetensors, accelerate_bin: accelerate's Accelerator.save_state after one AdamW step
  with a LambdaLR scheduler (model.safetensors or pytorch_model.bin, optimizer.bin, scheduler.bin,
  random_states_0.pkl);
- accelerate_two_models: save_state of two prepared models (model.safetensors, model_1.safetensors):
  ambiguous, so refused with exit 2 naming both;
- trainer: transformers' Trainer after two steps (checkpoint-2/: model.safetensors, optimizer.pt,
  scheduler.pt, rng_state.pth, training_args.bin, trainer_state.json);
- save_pretrained: a model's save_pretrained, unsharded (config.json, model.safetensors);
- olmo_layout: torch.save of model, optimizer and trainer state as model.pt, optim.pt, train.pt;
- peft_adapter: adapter_model.safetensors and adapter_config.json in PEFT's names (peft is not
  packaged in Debian, so the safetensors writer writes the LoRA tensors under the keys peft gives);
  adapter_config.json as peft 0.13's LoraConfig.save_pretrained writes it, peft not being in the root
  either); the folder opens as the adapter it is, which needs its base model, not as "its model", and
  inspect, --json and check name that base model (base_model_name_or_path) and the adapter (LORA, r);
- megatron_torch_dist: a DCP folder whose .metadata is Megatron-LM's MCoreMetadata (the dataclass
  subclass megatron-core pickles, adding mcore_data; defined here under megatron-core's module name
  as megatron-core defines it, since Debian does not package it), with common.pt and metadata.json
  beside it. inspect and convert must give the saved state dict, and check must name the
  subclass, what it adds, and the two files (megatron-torch-dist).

For each folder with one model, ckptscope must:
- `inspect --json DIR`: list exactly the model file's tensors as its loader gives them (a
  save_pretrained file through from_pretrained, the names its model ties included);
- `check --json DIR`: report `model-folder`, naming the model and every other member;
- `convert DIR -o OUT.pt`: write a file whose default torch.load holds every tensor bit for bit;
- `diff DIR MODELFILE`: say they are the same (exit 0).
Exit 0 when all holds; each difference is printed otherwise, and the exit code is 1.
"""
import json
import os
import shutil
import sys

import torch
from torch import nn

from torch2_cases import Writers, check_cases, run

WRITERS = Writers()
writer = WRITERS


class Net(nn.Module):
    def __init__(self, hidden=7):
        super().__init__()
        self.fc1 = nn.Linear(6, hidden)
        self.fc2 = nn.Linear(hidden, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def one_step(model, opt):
    model(torch.randn(4, 6)).sum().backward()
    opt.step()


def accelerate_state(out, safe, models=1):
    from accelerate import Accelerator

    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    prepared = []
    for i in range(models):
        m = Net(hidden=7 + i)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.9**step)
        m, opt, sched = acc.prepare(m, opt, sched)
        one_step(m, opt)
        sched.step()
        prepared.append(m)
    acc.save_state(out, safe_serialization=safe)


@writer
def write_accelerate_safetensors(out):
    accelerate_state(out, True)


@writer
def write_accelerate_bin(out):
    accelerate_state(out, False)


@writer
def write_accelerate_two_models(out):
    accelerate_state(out, True, models=2)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=32, n_positions=16, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


@writer
def write_trainer(out):
    from transformers import Trainer, TrainingArguments

    model = tiny_gpt2()
    data = [{"input_ids": torch.randint(0, 32, (8,)), "labels": torch.randint(0, 32, (8,))} for _ in range(4)]
    args = TrainingArguments(output_dir=out + ".run", per_device_train_batch_size=2, max_steps=2, save_steps=2,
                             use_cpu=True, report_to=[], logging_steps=1)
    Trainer(model=model, args=args, train_dataset=data).train()
    os.rename(os.path.join(out + ".run", "checkpoint-2"), out)
    shutil.rmtree(out + ".run")


@writer
def write_save_pretrained(out):
    tiny_gpt2().save_pretrained(out)


@writer
def write_olmo_layout(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    one_step(model, opt)
    torch.save(model.state_dict(), os.path.join(out, "model.pt"))
    torch.save(opt.state_dict(), os.path.join(out, "optim.pt"))
    torch.save({"global_step": 1, "rng": torch.get_rng_state()}, os.path.join(out, "train.pt"))


@writer
def write_peft_adapter(out):
    from safetensors.torch import save_file

    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    tensors = {}
    for layer in ("fc1", "fc2"):
        tensors[f"base_model.model.{layer}.lora_A.weight"] = torch.randn(4, 6)
        tensors[f"base_model.model.{layer}.lora_B.weight"] = torch.zeros(7, 4)
    save_file(tensors, os.path.join(out, "adapter_model.safetensors"), metadata={"format": "pt"})
    # LoraConfig.to_dict() as peft 0.13's save_pretrained writes it (json.dumps(indent=2, sort_keys=True);
    # target_modules, a set in the config, as a list).
    config = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": PEFT_BASE_MODEL,
              "bias": "none", "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
              "layer_replication": None, "layers_pattern": None, "layers_to_transform": None,
              "loftq_config": {}, "lora_alpha": 8, "lora_dropout": 0.0, "megatron_config": None,
              "megatron_core": "megatron.core", "modules_to_save": None, "peft_type": "LORA", "r": 4,
              "rank_pattern": {}, "revision": None, "target_modules": ["fc2", "fc1"], "task_type": None,
              "use_dora": False, "use_rslora": False}
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True))


PEFT_BASE_MODEL = "openai-community/gpt2"


MCORE_SRC = '''
from dataclasses import dataclass, field
from torch.distributed.checkpoint.metadata import Metadata


@dataclass
class MCoreMetadata(Metadata):
    mcore_data: dict = field(default_factory=dict)
'''


@writer
def write_megatron_torch_dist(out):
    import pickle
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    sd = {"embedding.word_embeddings.weight": torch.randn(16, 8),
          "decoder.layers.mlp.linear_fc1.weight": torch.randn(2, 32, 8),  # layers stacked, as Megatron saves
          "decoder.final_layernorm.weight": torch.ones(8, dtype=torch.bfloat16)}
    dcp.save(sd, checkpoint_id=out)
    stub = os.path.join(out + ".megatron", "megatron", "core", "dist_checkpointing")
    os.makedirs(stub)
    for d in (os.path.dirname(os.path.dirname(stub)), os.path.dirname(stub), stub):
        open(os.path.join(d, "__init__.py"), "w").close()
    with open(os.path.join(stub, "mapping.py"), "w") as f:
        f.write(MCORE_SRC)
    sys.path.insert(0, out + ".megatron")
    from megatron.core.dist_checkpointing.mapping import MCoreMetadata

    with open(os.path.join(out, ".metadata"), "rb") as f:
        base = pickle.load(f)
    mcore = MCoreMetadata(mcore_data={k: {"nd_reformulated_orig_global_shape": None} for k in sd}, **vars(base))
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(mcore, f)
    torch.save({"checkpoint_version": 3.0, "iteration": 10, "num_floating_point_operations_so_far": 0},
               os.path.join(out, "common.pt"))
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
                   "common_backend_version": 1}, f)
    torch.save(sd, out + ".expected.pt")


def model_file(folder):
    for name in ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "model.pt"):
        if os.path.exists(os.path.join(folder, name)):
            return name
    raise RuntimeError(f"{folder}: no model file")


def load_model(path):
    """The model's state dict as its loader gives it: a save_pretrained file (config.json beside it
    naming a transformers class) through from_pretrained, whose state_dict() holds the names the
    model ties and the file leaves out (issue 40); any other file through its own reader."""
    config = os.path.join(os.path.dirname(path), "config.json")
    if path.endswith(".safetensors") and os.path.exists(config):
        import transformers
        with open(config) as f:
            arch = (json.load(f).get("architectures") or [None])[0]
        if arch and hasattr(transformers, arch):
            return getattr(transformers, arch).from_pretrained(os.path.dirname(path)).state_dict()
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path)
    return torch.load(path)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8),
                                                                      b.contiguous().view(-1).view(torch.uint8))


def check_adapter_named(tool, folder, info):
    """A PEFT adapter names the base model adapter_config.json gives, and what adapter it is, in
    inspect's text and --json."""
    errors = []
    with open(os.path.join(folder, "adapter_config.json")) as f:
        config = json.load(f)
    adapter = info.get("folder", {}).get("adapter")
    want = {"base_model_name_or_path": config["base_model_name_or_path"], "peft_type": config["peft_type"],
            "r": config["r"], "target_modules": config["target_modules"], "target_modules_left_out": 0,
            "problem": None}
    if adapter != want:
        errors.append(f"inspect --json: folder.adapter {adapter}, adapter_config.json says {want}")
    text = run(tool, "inspect", folder).stdout
    if f"base model '{config['base_model_name_or_path']}'" not in text or "LORA, r 4" not in text:
        errors.append(f"inspect does not name the base model and the adapter: {text[:400]}")
    return errors


def check_folder(tool, folder, work):
    errors = []
    name = model_file(folder)
    want = load_model(os.path.join(folder, name))
    info = json.loads(run(tool, "inspect", "--json", folder).stdout)
    mine = {t["path"]: t for t in info["tensors"]}
    if set(mine) != set(want):
        errors.append(f"inspect: keys differ: only ckptscope {sorted(set(mine) - set(want))[:4]}, "
                      f"only the writer's loader {sorted(set(want) - set(mine))[:4]}")
    for k in sorted(set(mine) & set(want)):
        got = (mine[k]["dtype"], mine[k]["shape"])
        exp = (str(want[k].dtype).removeprefix("torch."), list(want[k].shape))
        if got != exp:
            errors.append(f"inspect: {k}: ckptscope {got}, writer {exp}")

    if name.startswith("adapter_model"):
        errors += check_adapter_named(tool, folder, info)
    checked = run(tool, "check", "--json", folder, ok=(0, 1))
    found = [f for f in json.loads(checked.stdout)["findings"] if f["code"] == "model-folder"]
    members = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
    if len(found) != 1:
        errors.append(f"check: {len(found)} model-folder findings, 1 expected")
    elif name not in found[0]["title"]:
        errors.append(f"check: the model-folder finding does not name {name}: {found[0]['title']}")
    elif name.startswith("adapter_model") and "needs its base model" not in found[0]["title"]:
        errors.append(f"check: a PEFT adapter is called a model: {found[0]['title']}")
    elif name.startswith("adapter_model") and f"'{PEFT_BASE_MODEL}'" not in found[0]["title"]:
        errors.append(f"check: the PEFT adapter's finding does not name its base model: {found[0]['title']}")
    else:
        listed = found[0]["detail"]
        missing = [m for m in members if m not in listed and not m.endswith((".md", ".txt"))]
        if missing:
            errors.append(f"check: the model-folder finding leaves out {missing}")

    out = os.path.join(work, os.path.basename(folder) + ".pt")
    run(tool, "convert", folder, "-o", out)
    got = torch.load(out)
    for k, t in want.items():
        if k not in got or not same(got[k], t):
            errors.append(f"convert: {k} is not in the output bit for bit")
    if set(got) - set(want):
        errors.append(f"convert: the output has keys the model has not: {sorted(set(got) - set(want))[:4]}")

    d = run(tool, "diff", "--strict", folder, os.path.join(folder, name), ok=(0, 1))
    if d.returncode != 0:
        errors.append(f"diff: the folder and its model file differ: {d.stdout.strip()[:200]}")
    return errors


def check_ambiguous(tool, folder, _work):
    r = run(tool, "inspect", folder, ok=(2,))
    line = r.stderr.strip()
    errors = []
    if "\n" in line or "model.safetensors" not in line or "model_1.safetensors" not in line:
        errors.append(f"inspect: not one line naming both models: {line[:300]}")
    return errors


def check_megatron(tool, folder, work):
    errors = []
    want = torch.load(folder + ".expected.pt")
    info = json.loads(run(tool, "inspect", "--json", folder).stdout)
    got = {t.get("key", t.get("path")): (t["dtype"], t["shape"]) for t in info["tensors"]}
    exp = {k: (str(t.dtype).removeprefix("torch."), list(t.shape)) for k, t in want.items()}
    if got != exp:
        errors.append(f"inspect: ckptscope {got}, saved {exp}")
    findings = json.loads(run(tool, "check", "--json", folder).stdout)["findings"]
    mega = [f for f in findings if f["code"] == "megatron-torch-dist"]
    if len(mega) != 1:
        errors.append(f"check: {len(mega)} megatron-torch-dist findings, 1 expected: {findings}")
    else:
        text = mega[0]["title"] + " " + mega[0]["detail"]
        for part in ("MCoreMetadata", "mcore_data", "common.pt", "metadata.json", "torch_dist version 1"):
            if part not in text:
                errors.append(f"check: megatron-torch-dist does not say {part!r}: {text}")
    out = os.path.join(work, "megatron.pt")
    run(tool, "convert", folder, "-o", out)
    back = torch.load(out)
    for k, t in want.items():
        if k not in back or not same(back[k], t):
            errors.append(f"convert: {k} is not in the output bit for bit")
    return errors


CHECKS = {"accelerate_two_models": check_ambiguous, "megatron_torch_dist": check_megatron}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        out = sys.argv[2]
        shutil.rmtree(out, ignore_errors=True)  # the Trainer's run folder is renamed into place
        os.makedirs(out)
        print("torch", torch.__version__)
        for name, fn in WRITERS.items():
            fn(os.path.join(out, name))
        return 0
    if len(sys.argv) != 4 or sys.argv[1] != "check":
        print(__doc__, file=sys.stderr)
        return 2
    tool, out = sys.argv[2], sys.argv[3]
    work = os.path.join(out, "work")
    os.makedirs(work, exist_ok=True)
    return check_cases(WRITERS, lambda name: CHECKS.get(name, check_folder)(tool, os.path.join(out, name), work))


if __name__ == "__main__":
    sys.exit(main())
