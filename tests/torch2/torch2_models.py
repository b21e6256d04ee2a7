#!/usr/bin/env python3
"""Model files whose values need more than their bytes, written by today's writers (PyTorch 2.14,
transformers 5.12, accelerate 1.14 in the root of scripts/modern-torch.sh), and ckptscope held
against those libraries' own reading of them (issue 40).

    torch2_models.py write OUT [NAME...]          every case below (or those named), by the real writers
    torch2_models.py check CKPTSCOPE OUT NAME...  each named case

The cases:
- ties (transformers' _tied_weights_keys, decided by the config): t5_folder, t5_sharded, gpt2_folder,
  bart_folder, llama_tied, llama_untied are save_pretrained folders of tiny models. `inspect --json`
  must list exactly the keys of from_pretrained(DIR).state_dict() (restored names with `tied_to`),
  `check` must report tied-weight-missing where save_pretrained left a tie out, and `convert DIR -o
  OUT.pt` must write every key, value for value, loading under the default torch.load and into a
  fresh model with load_state_dict(strict=True), tied names sharing one storage, and say which names
  it writes as ties (a set too, consolidated directly or planned in place). t5_alone (the
  model.safetensors without its config.json) and custom_class (config.json naming a class
  transformers does not have) must say the tie cannot be known (tie-unknown) and restore nothing.
- meta tensors: meta_device (a model built under torch.device("meta")), meta_accelerate (accelerate's
  init_empty_weights, whose buffers stay real), each torch.save(model.state_dict()): check reports
  meta-tensors quoting what load_state_dict raises, inspect says "no data", convert to torch writes
  meta tensors again (the plan saying so), convert to safetensors fails naming the meta tensor.
- quantized: per-tensor and per-channel quantized tensors (torch.quantize_per_tensor/_channel): the
  quantizer in inspect --json equals q_scale()/q_zero_point()/q_per_channel_*(); dynamic_quantized,
  torch.save of quantize_dynamic(model): every tensor torch.load gives is listed.
- numpy_rng: numpy's RandomState state (a uint32 [624] array) beside weights: inspect shows the array
  as `ndarray <u4 [624]`, and convert --weights-only writes its values, loading under the default
  torch.load, the plan saying truthfully what torch.from_numpy gives.
- tar_whole_model: a PyTorch 0.1 tar whole model whose parameters are 0.1's Variables (NEWOBJ and a
  5-tuple state): inspect lists each tensor where torch.load puts it, convert --unwrap writes them all.
- FP8 block quantization: fp8_set (a tiny Llama's weights quantized by transformers' own Fp8Quantize,
  128x128 blocks, written as a sharded set by huggingface_hub's save_torch_state_dict with
  quantization_config in config.json), fp8_ragged (one file whose weights do not divide into
  128-blocks, quantized with the documented layout: ceil-sized scale grids), fp8_bad_scale (a scale
  of the wrong shape). inspect shows each weight's scale and block, check reports fp8-block-quantized
  (fp8-scale-shape for the bad one), and `convert --dequantize bf16|float16|float32` (a file, and a
  sharded safetensors set) equals torch's dequantization `(w.float() * s).to(dtype)` bit for bit, and
  transformers' Fp8Dequantize where it applies; the output loads under the default torch.load.
Exit 0 when all holds; each difference is printed otherwise, and the exit code is 1.
"""
import collections
import io
import json
import os
import pickle
import shutil
import sys
import tarfile
import types

import torch
from torch import nn

from torch2_cases import Writers, check_cases, run

HERE = os.path.dirname(os.path.abspath(__file__))
# The tar whole model pickles its module classes from check_tar_whole_model (by name, as 0.1 did).
sys.path.insert(0, os.path.join(HERE, "..", "archive"))
WRITERS = Writers()
writer = WRITERS


# --- ties ----------------------------------------------------------------------------------------

def tiny(name, **extra):
    import transformers
    configs = {
        "t5": (transformers.T5Config, transformers.T5ForConditionalGeneration,
               dict(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)),
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel,
                 dict(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)),
        "bart": (transformers.BartConfig, transformers.BartForConditionalGeneration,
                 dict(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                      decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                  dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2)),
    }
    config_class, model_class, kwargs = configs[name]
    torch.manual_seed(len(name))
    return model_class(config_class(**kwargs, **extra))


@writer
def write_t5_folder(out):
    tiny("t5").save_pretrained(out)


@writer
def write_t5_sharded(out):
    tiny("t5").save_pretrained(out, max_shard_size="4KB")


@writer
def write_gpt2_folder(out):
    tiny("gpt2").save_pretrained(out)


@writer
def write_bart_folder(out):
    tiny("bart").save_pretrained(out)


@writer
def write_llama_tied(out):
    tiny("llama", tie_word_embeddings=True).save_pretrained(out)


@writer
def write_llama_untied(out):
    tiny("llama", tie_word_embeddings=False).save_pretrained(out)


@writer
def write_t5_alone(out):
    tiny("t5").save_pretrained(out)
    os.remove(os.path.join(out, "config.json"))
    os.remove(os.path.join(out, "generation_config.json"))


@writer
def write_custom_class(out):
    tiny("gpt2").save_pretrained(out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["architectures"] = ["MyTinyLMHeadModel"]
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_my.MyTinyLMHeadModel"}
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def ckpt_json(tool, *args):
    return json.loads(run(tool, *args, "--json", ok=(0, 1)).stdout)


def codes_of(tool, path):
    return [f["code"] for f in ckpt_json(tool, "check", path)["findings"]]


def load_pretrained(path):
    import transformers
    with open(os.path.join(path, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    return getattr(transformers, arch).from_pretrained(path)


def check_tied(tool, path, work, want_codes):
    errors = []
    model = load_pretrained(path)
    want = model.state_dict()
    info = ckpt_json(tool, "inspect", path)
    listed = {t["path"]: t for t in info["tensors"]}
    if set(listed) != set(want):
        errors.append(f"inspect lists {sorted(set(listed) - set(want))} more, {sorted(set(want) - set(listed))} fewer "
                      "than from_pretrained's state_dict()")
    codes = codes_of(tool, path)
    for code in want_codes:
        if code not in codes:
            errors.append(f"check: no {code} ({codes})")
    if not want_codes and any(c.startswith("tie") for c in codes):
        errors.append(f"check: tie findings for a model that stores every key ({codes})")
    text = run(tool, "check", path, ok=(0, 1)).stdout
    if "No findings" in text and want_codes:
        errors.append("check says No findings")
    out = os.path.join(work, "out.pt")
    said = run(tool, "convert", path, "-o", out).stdout
    restored = sorted(name for name, t in listed.items() if t.get("tied_to"))

    def says_restored(said, how):
        # the conversion says which names it writes that the file or set does not store, in one line
        notes = [line for line in said.splitlines() if line.lstrip().startswith("note") and "tied by the model" in line]
        named = sorted(n for n in restored if notes and f"'{n}' = " in notes[0])
        if named != restored:
            errors.append(f"{how} names {named} as restored ties, inspect lists {restored}: {said[:300]}")
    says_restored(said, "convert")
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        # a set: consolidated directly above; read in place (the plan) here, with the same line
        says_restored(run(tool, "convert", path, "-o", os.path.join(work, "planned.pt"), "--dry-run").stdout,
                      "convert --dry-run of the set")
    got = torch.load(out)  # the default: weights_only=True
    if set(got) != set(want):
        errors.append(f"convert wrote {sorted(set(got) - set(want))} more, {sorted(set(want) - set(got))} fewer keys")
    for k in set(got) & set(want):
        if got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k]):
            errors.append(f"{k}: converted value differs from from_pretrained's")
    fresh = type(model)(model.config)
    try:
        fresh.load_state_dict(got, strict=True)
    except RuntimeError as e:
        errors.append(f"load_state_dict(strict=True) of the converted file: {str(e)[:200]}")
    for name, t in listed.items():
        if "tied_to" in t and got[name].data_ptr() != got[t["tied_to"]].data_ptr():
            errors.append(f"{name} is tied to {t['tied_to']} but the converted file stores it apart")
    return errors


def check_unknown_tie(tool, path, work, severity):
    errors = []
    findings = {f["code"]: f for f in ckpt_json(tool, "check", path)["findings"]}
    f = findings.get("tie-unknown")
    if f is None:
        errors.append(f"check: no tie-unknown ({sorted(findings)})")
    elif f["severity"] != severity:
        errors.append(f"tie-unknown is {f['severity']}, not {severity}")
    if "tied-weight-missing" in findings:
        errors.append("check claims to know the tie")
    from safetensors.torch import load_file
    stored = load_file(path if os.path.isfile(path) else os.path.join(path, "model.safetensors"))
    out = os.path.join(work, "out.pt")
    run(tool, "convert", path, "-o", out)
    got = torch.load(out)
    if set(got) != set(stored):
        errors.append(f"convert restored a tie it cannot know: {sorted(set(got) - set(stored))}")
    return errors


# --- meta tensors --------------------------------------------------------------------------------

@writer
def write_meta_device(path):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64))
    torch.save(model.state_dict(), path)


@writer
def write_meta_accelerate(path):
    from accelerate import init_empty_weights
    with init_empty_weights():
        model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
    torch.save(model.state_dict(), path)  # the BatchNorm's buffers stay real: include_buffers=False


def check_meta(tool, path, work):
    errors = []
    sd = torch.load(path)
    meta = sorted(k for k, v in sd.items() if v.device.type == "meta")
    real = sorted(k for k, v in sd.items() if v.device.type != "meta")
    findings = {f["code"]: f for f in ckpt_json(tool, "check", path)["findings"]}
    f = findings.get("meta-tensors")
    if f is None or f["severity"] != "error":
        errors.append(f"check: no meta-tensors error ({sorted(findings)})")
    else:
        if sorted(f["paths"]) != meta:
            errors.append(f"meta-tensors names {f['paths']}, torch.load gives meta {meta}")
        # what load_state_dict says of the first one, quoted by the finding word for word: a module
        # of the file's own keys and shapes, with data, loading the file
        module = nn.Module()
        for k, v in sd.items():
            *parents, name = k.split(".")
            m = module
            for p in parents:
                if not hasattr(m, p):
                    m.add_module(p, nn.Module())
                m = getattr(m, p)
            m.register_parameter(name, nn.Parameter(torch.zeros(v.shape, dtype=v.dtype), requires_grad=False))
        try:
            module.load_state_dict(sd)
            errors.append("load_state_dict of meta tensors did not fail")
        except RuntimeError as e:
            first = next(k for k, v in sd.items() if v.device.type == "meta")  # in the file's order
            said = [line.strip() for line in str(e).splitlines() if f'"{first}"' in line]
            if not said or said[0] not in f["detail"]:
                errors.append(f"load_state_dict says {said}, which the finding does not quote: {f['detail'][:400]}")
    info = ckpt_json(tool, "inspect", path)
    nodata = sorted(t["path"] for t in info["tensors"] if t.get("has_data") is False)
    if nodata != meta:
        errors.append(f"inspect --json has_data false on {nodata}, torch.load gives meta {meta}")
    real_bytes = sum(v.numel() * v.element_size() for v in sd.values() if v.device.type != "meta")
    if info["totals"]["tensor_bytes"] != real_bytes:
        errors.append(f"totals.tensor_bytes {info['totals']['tensor_bytes']}, the file holds {real_bytes}")
    text = run(tool, "inspect", path).stdout
    for k in meta:
        rows = [line for line in text.splitlines() if line.split()[:1] == [k]]
        if not rows or not all(line.rstrip().endswith("no data") for line in rows):
            errors.append(f"inspect's row of {k} does not say no data: {rows}")
    out = os.path.join(work, "out.pt")
    r = run(tool, "convert", path, "-o", out)
    if "no data" not in r.stdout:
        errors.append(f"convert does not say the meta tensors hold no data: {r.stdout.strip()[:300]}")
    got = torch.load(out)
    for k in meta:
        if got[k].device.type != "meta" or got[k].shape != sd[k].shape:
            errors.append(f"{k}: converted as {got[k].device} {tuple(got[k].shape)}")
    for k in real:
        if not torch.equal(got[k], sd[k]):
            errors.append(f"{k}: the real tensor's values changed")
    r = run(tool, "convert", path, "-o", os.path.join(work, "out.safetensors"), ok=(1, 2))
    if "meta" not in r.stderr or os.path.exists(os.path.join(work, "out.safetensors")):
        errors.append(f"convert to safetensors did not fail naming the meta tensor: {r.stderr.strip()[:200]}")
    return errors


# --- quantized tensors ---------------------------------------------------------------------------

@writer
def write_quantized(path):
    x = torch.linspace(-2, 2, 24).reshape(4, 6)
    scales = torch.tensor([0.01, 0.02, 0.03, 0.05], dtype=torch.float64)
    zero_points = torch.tensor([0, 1, -2, 3])
    torch.save({"per_tensor": torch.quantize_per_tensor(x, 0.05, 10, torch.quint8),
                "per_channel": torch.quantize_per_channel(x, scales, zero_points, 0, torch.qint8),
                "plain": x}, path)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 6)
        self.fc2 = nn.Linear(6, 4)
        self.norm = nn.LayerNorm(4)


@writer
def write_dynamic_quantized(path):
    torch.manual_seed(3)
    torch.save(torch.ao.quantization.quantize_dynamic(Small(), {nn.Linear}, dtype=torch.qint8), path)


def tensors_of(obj, path="", out=None):
    """Every tensor torch.load gives, by the key path ckptscope uses (attributes of objects too)."""
    out = {} if out is None else out
    if isinstance(obj, torch.Tensor):
        out[path] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            tensors_of(v, f"{path}/{k}" if path else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            tensors_of(v, f"{path}/{i}" if path else str(i), out)
    return out


def check_quantized(tool, path, work):
    errors = []
    sd = torch.load(path, weights_only=False)
    info = ckpt_json(tool, "inspect", path)
    listed = {t["path"]: t for t in info["tensors"]}
    for k, t in sd.items():
        if not t.is_quantized:
            continue
        q = listed.get(k, {}).get("quantizer")
        if q is None:
            errors.append(f"{k}: no quantizer in inspect --json")
            continue
        if t.qscheme() == torch.per_tensor_affine:
            if (q.get("scale"), q.get("zero_point")) != (t.q_scale(), t.q_zero_point()):
                errors.append(f"{k}: scale/zero point {q.get('scale')}/{q.get('zero_point')}, torch "
                              f"{t.q_scale()}/{t.q_zero_point()}")
        else:
            scales = t.q_per_channel_scales().tolist()
            zps = t.q_per_channel_zero_points().tolist()
            got = (q.get("axis"), q["scales"]["first"], q["scales"]["min"], q["scales"]["max"],
                   q["zero_points"]["first"], q["zero_points"]["count"])
            exp = (t.q_per_channel_axis(), scales[:8], min(scales), max(scales), [float(z) for z in zps[:8]],
                   len(zps))
            if got != exp:
                errors.append(f"{k}: quantizer {got}, torch {exp}")
    text = run(tool, "inspect", path).stdout
    for needle in ("scale 0.05, zero point 10", "per_channel_affine on axis 0: 4 scales 0.01 to 0.05"):
        if needle not in text:
            errors.append(f"inspect's text lacks {needle!r}")
    return errors


def check_dynamic_quantized(tool, path, work):
    errors = []
    model = torch.load(path, weights_only=False)
    want = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    for k, v in model.state_dict().items():
        if isinstance(v, tuple):  # the packed params: (weight, bias)
            for i, t in enumerate(v):
                if isinstance(t, torch.Tensor):
                    want[f"{k}/{i}"] = t
    info = ckpt_json(tool, "inspect", path)
    quantized = [t for t in info["tensors"] if "quantizer" in t]
    n_quantized = sum(1 for v in want.values() if v.is_quantized)
    if len(quantized) != n_quantized:
        errors.append(f"inspect lists {len(quantized)} quantized tensors, the model holds {n_quantized}")
    for t in quantized:
        if "scale" not in t["quantizer"] and "scales" not in t["quantizer"]:
            errors.append(f"{t['path']}: quantizer without its scale: {t['quantizer']}")
    return errors


# --- numpy ---------------------------------------------------------------------------------------

@writer
def write_numpy_rng(path):
    import numpy as np
    rs = np.random.RandomState(7)
    torch.save({"weight": torch.arange(6.0).reshape(2, 3), "rng_keys": rs.get_state()[1],
                "rng_state": rs.get_state()}, path)


def check_numpy_rng(tool, path, work):
    errors = []
    text = run(tool, "inspect", path).stdout
    if "ndarray <u4 [624]" not in text:
        errors.append("inspect does not show the uint32 array as ndarray <u4 [624]")
    if "_reconstruct(" in text:
        errors.append("inspect still shows numpy's _reconstruct call")
    out = os.path.join(work, "out.pt")
    r = run(tool, "convert", path, "-o", out, "--weights-only")
    if "torch.from_numpy gives uint32" not in r.stdout:
        errors.append(f"the plan does not say what torch.from_numpy gives: {r.stdout.strip()[:400]}")
    import numpy as np
    if torch.from_numpy(np.zeros(1, dtype=np.uint32)).dtype != torch.uint32:
        errors.append("this torch.from_numpy does not give uint32: the plan's words are out of date")
    got = torch.load(out)
    src = torch.load(path, weights_only=False)
    if not torch.equal(got["rng_keys"], torch.from_numpy(src["rng_keys"].astype("int64"))):
        errors.append("the converted RNG keys differ")
    return errors


# --- a PyTorch 0.1 tar whole model with 0.1's Variables ---------------------------------------------

@writer
def write_tar_whole_model(path):
    import check_tar_whole_model as tar
    tar.build(path, legacy_variables=True)


def check_tar_whole_model(tool, path, work):
    errors = []
    model = torch.load(path, weights_only=False)
    want = {}
    for name, module in model.named_modules():
        for k, v in vars(module).get("_parameters", {}).items():
            if v is not None:
                want[f"{name}.{k}" if name else k] = v
    out = os.path.join(work, "out.pt")
    run(tool, "convert", path, "-o", out, "--unwrap")
    got = torch.load(out)
    if set(got) != set(want):
        errors.append(f"convert --unwrap wrote {sorted(got)}, the model's parameters are {sorted(want)}")
    for k in set(got) & set(want):
        if not torch.equal(got[k], want[k].detach()):
            errors.append(f"{k}: values differ")
    info = ckpt_json(tool, "inspect", path)
    if any("__state__" in t["path"] for t in info["tensors"]):
        errors.append(f"tensors shown under __state__: {[t['path'] for t in info['tensors']]}")
    return errors


# --- FP8 block quantization -----------------------------------------------------------------------

def fp8_quantizer():
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    return Fp8Quantize(types.SimpleNamespace(quantization_config=FineGrainedFP8Config(weight_block_size=[128, 128])))


def fp8_config(out, model_config=None):
    from transformers import FineGrainedFP8Config
    config = dict(model_config or {"model_type": "llama"})
    config["architectures"] = config.get("architectures") or ["LlamaForCausalLM"]
    config["quantization_config"] = FineGrainedFP8Config(weight_block_size=[128, 128]).to_dict()
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


@writer
def write_fp8_set(out):
    """A tiny Llama's weights through transformers' own FP8 quantization op (Fp8Quantize: the
    weight's 128x128 tiles scaled to float8_e4m3fn, the inverse scales beside them), as a sharded
    safetensors set by huggingface_hub's writer."""
    import transformers
    from huggingface_hub import save_torch_state_dict
    torch.manual_seed(11)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=384, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
    quantize = fp8_quantizer()
    sd = {}
    for k, v in model.state_dict().items():
        if k.endswith(".weight") and v.dim() == 2 and "embed" not in k and "norm" not in k:
            sd.update(quantize.convert({k: v.detach().clone()}))
        else:
            sd[k] = v.detach().clone()
    os.makedirs(out, exist_ok=True)
    save_torch_state_dict(sd, out, max_shard_size="200KB")
    fp8_config(out, config.to_dict())


def block_quantize(w, block=128):
    """The documented layout where a weight does not divide into blocks (DeepSeek-V3's): a
    ceil(rows / 128) x ceil(cols / 128) grid of float32 inverse scales, each the block's max-abs over
    float8_e4m3fn's largest value, the weight divided by it and cast to float8_e4m3fn."""
    rows, cols = w.shape
    br, bc = -(-rows // block), -(-cols // block)
    fmax = torch.finfo(torch.float8_e4m3fn).max
    scale = torch.ones(br, bc)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(br):
        for j in range(bc):
            tile = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s = tile.abs().max().clamp(min=1e-12) / fmax
            scale[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = (tile / s).to(torch.float8_e4m3fn)
    return q, scale


@writer
def write_fp8_ragged(out):
    from safetensors.torch import save_file
    torch.manual_seed(12)
    os.makedirs(out, exist_ok=True)
    sd = {}
    for name, shape in (("proj.weight", (300, 200)), ("head.weight", (130, 257)), ("tall.weight", (64, 48))):
        q, s = block_quantize(torch.randn(*shape) * 3)
        sd[name] = q
        sd[name.replace(".weight", ".weight_scale_inv")] = s
    sd["proj.bias"] = torch.randn(300)
    save_file(sd, os.path.join(out, "model.safetensors"))
    fp8_config(out)


@writer
def write_fp8_bad_scale(out):
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    q, s = block_quantize(torch.randn(300, 200))
    save_file({"proj.weight": q, "proj.weight_scale_inv": s[:2]}, os.path.join(out, "model.safetensors"))
    fp8_config(out)


def stored_state(path):
    """Every stored tensor of a safetensors file or set, by key."""
    from safetensors.torch import load_file
    files = [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".safetensors")]
    sd = {}
    for f in files:
        sd.update(load_file(f))
    return sd


def reference_dequantize(q, s, dtype, block=(128, 128)):
    """torch's dequantization: every element times its block's scale, in float32, cast as .to() casts."""
    rows, cols = q.shape
    full = s.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return (q.to(torch.float32) * full).to(dtype)


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.float32:
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def check_fp8(tool, path, work, bad=False):
    errors = []
    stored = stored_state(path)
    pairs = {k: k.replace(".weight", ".weight_scale_inv") for k, v in stored.items()
             if v.dtype == torch.float8_e4m3fn and k.replace(".weight", ".weight_scale_inv") in stored}
    findings = {f["code"]: f for f in ckpt_json(tool, "check", path)["findings"]}
    if bad:
        if "fp8-scale-shape" not in findings:
            errors.append(f"check: no fp8-scale-shape ({sorted(findings)})")
        r = run(tool, "convert", path, "-o", os.path.join(work, "bad.pt"), "--dequantize", "bf16", ok=(1, 2))
        if "cannot be dequantized" not in r.stderr:
            errors.append(f"convert --dequantize of a bad scale: {r.stderr.strip()[:200]}")
        return errors
    if "fp8-block-quantized" not in findings:
        errors.append(f"check: no fp8-block-quantized ({sorted(findings)})")
    info = ckpt_json(tool, "inspect", path)
    listed = {t["path"]: t for t in info["tensors"]}
    for w, s in pairs.items():
        b = listed.get(w, {}).get("block_scale")
        if not b or b["scale"] != s or b["block"] != [128, 128] or b["problem"] is not None:
            errors.append(f"{w}: block_scale {b}")
        if listed.get(s, {}).get("scale_of") != w:
            errors.append(f"{s}: scale_of {listed.get(s, {}).get('scale_of')}")
    text = run(tool, "inspect", path).stdout
    if "128x128 blocks" not in text:
        errors.append("inspect's text does not show the blocks")
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize
    hf = Fp8Dequantize(types.SimpleNamespace(quantization_config=None))
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "float16"), (torch.float32, "float32")):
        out = os.path.join(work, f"deq-{name}.pt")
        run(tool, "convert", path, "-o", out, "--dequantize", name)
        got = torch.load(out)  # the default torch.load
        want_keys = set(stored) - set(pairs.values())
        if set(got) != want_keys:
            errors.append(f"--dequantize {name}: keys {sorted(set(got) ^ want_keys)} differ")
        for k in want_keys & set(got):
            if k in pairs:
                want = reference_dequantize(stored[k], stored[pairs[k]], dtype)
                if not same_bits(got[k], want):
                    diff = (got[k].float() - want.float()).abs().max().item()
                    errors.append(f"--dequantize {name}: {k} differs from torch's (max abs {diff})")
                rows, cols = stored[k].shape
                if rows % 128 == 0 and cols % 128 == 0:
                    theirs = hf._dequantize_one(stored[k], stored[pairs[k]], output_dtype=dtype)
                    if not same_bits(got[k], theirs):
                        errors.append(f"--dequantize {name}: {k} differs from transformers' Fp8Dequantize")
            elif not torch.equal(got[k], stored[k]):
                errors.append(f"--dequantize {name}: {k} changed")
    # A sharded safetensors set out, as a model repository holds it.
    split = os.path.join(work, "bf16-set")
    run(tool, "convert", path, "-o", split, "--dequantize", "bf16", "--format", "safetensors", "--shard-size", "100KB")
    got = stored_state(split)
    for k in pairs:
        if not same_bits(got.get(k, torch.empty(0)), reference_dequantize(stored[k], stored[pairs[k]], torch.bfloat16)):
            errors.append(f"the dequantized set's {k} differs from torch's")
    if any(k in got for k in pairs.values()):
        errors.append("the dequantized set still holds scales")
    errors += check_fp8_from_pretrained(path, split, stored, pairs)
    return errors


def check_fp8_from_pretrained(path, split, stored, pairs):
    """The dequantized folder carries the input's config.json without quantization_config and with
    dtype bfloat16, and (where the input's config is a whole model's) transformers' from_pretrained
    loads it as it is, every weight equal to torch's dequantization and every other tensor unchanged."""
    errors = []
    with open(os.path.join(path, "config.json")) as f:
        given = json.load(f)
    try:
        with open(os.path.join(split, "config.json")) as f:
            written = json.load(f)
    except OSError as e:
        return [f"the dequantized set has no config.json: {e}"]
    want = {k: v for k, v in given.items() if k != "quantization_config"}
    want["dtype"] = "bfloat16"
    if "torch_dtype" in given:
        want["torch_dtype"] = "bfloat16"
    if written != want:
        differ = sorted(k for k in set(written) | set(want) if written.get(k, "(absent)") != want.get(k, "(absent)"))
        errors.append(f"the dequantized set's config.json differs from the input's without quantization_config "
                      f"in {differ[:6]}")
    if "hidden_size" not in given:
        return errors  # a config naming the class alone, which no model can be built from
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(split)
    if getattr(model.config, "quantization_config", None) is not None:
        errors.append("from_pretrained of the dequantized set still sees a quantization_config")
    loaded = model.state_dict()
    want_keys = set(stored) - set(pairs.values())
    if set(loaded) != want_keys:
        errors.append(f"from_pretrained: keys {sorted(set(loaded) ^ want_keys)[:6]} differ")
    for k in want_keys & set(loaded):
        if k in pairs:
            want_value = reference_dequantize(stored[k], stored[pairs[k]], torch.bfloat16)
        else:
            want_value = stored[k].to(torch.bfloat16)
        if not same_bits(loaded[k].to(torch.bfloat16), want_value):
            errors.append(f"from_pretrained of the dequantized set: {k} differs from torch's dequantization")
    return errors


CHECKS = {
    "t5_folder": lambda t, p, w: check_tied(t, p, w, ["tied-weight-missing"]),
    "t5_sharded": lambda t, p, w: check_tied(t, p, w, ["tied-weight-missing"]),
    "gpt2_folder": lambda t, p, w: check_tied(t, p, w, ["tied-weight-missing"]),
    "bart_folder": lambda t, p, w: check_tied(t, p, w, ["tied-weight-missing"]),
    "llama_tied": lambda t, p, w: check_tied(t, p, w, ["tied-weight-missing"]),
    "llama_untied": lambda t, p, w: check_tied(t, p, w, []),
    "t5_alone": lambda t, p, w: check_unknown_tie(t, os.path.join(p, "model.safetensors"), w, "info"),
    "custom_class": lambda t, p, w: check_unknown_tie(t, p, w, "warning"),
    "meta_device": check_meta,
    "meta_accelerate": check_meta,
    "quantized": check_quantized,
    "dynamic_quantized": check_dynamic_quantized,
    "numpy_rng": check_numpy_rng,
    "tar_whole_model": check_tar_whole_model,
    "fp8_set": check_fp8,
    "fp8_ragged": check_fp8,
    "fp8_bad_scale": lambda t, p, w: check_fp8(t, p, w, bad=True),
}
FILES = {"meta_device": ".pt", "meta_accelerate": ".pt", "quantized": ".pt", "dynamic_quantized": ".pt",
         "numpy_rng": ".pt", "tar_whole_model": ".tar"}


def main():
    if sys.argv[1] == "write":
        out, only = sys.argv[2], sys.argv[3:]
        if not only:
            shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out, exist_ok=True)
        for name, write in WRITERS.items():
            if not only or name in only:
                target = os.path.join(out, name + FILES.get(name, ""))
                shutil.rmtree(target, ignore_errors=True)
                write(target)
        return 0
    tool, out, names = sys.argv[2], sys.argv[3], sys.argv[4:]

    def check(name):
        work = os.path.join(out, "work", name)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        return CHECKS[name](tool, os.path.join(out, name + FILES.get(name, "")), work)

    return check_cases(names or list(CHECKS), check)


if __name__ == "__main__":
    sys.exit(main())
