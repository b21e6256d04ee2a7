"""Pairs of checkpoints for tests/diff, written by real PyTorch, with an oracle (oracle.json) of what
torch says about each pair: which keys differ how, and for tensors whose values differ torch's own
max abs difference, count of differing elements and allclose (as float64).

Usage: gen_diff_fixtures.py OUTDIR
"""
import argparse
import json
import os
import struct
import sys

import torch
from collections import OrderedDict

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(14)


def base_state():
    return {
        "fc.weight": torch.randn(4, 3),
        "fc.bias": torch.randn(4),
        "emb.weight": torch.randn(10, 8),
        "bn.running_mean": torch.randn(8),
        "bn.num_batches_tracked": torch.tensor(7),
    }


BASE = base_state()


def clone(sd):
    return {k: v.clone() for k, v in sd.items()}


def ckpt(sd, epoch=10, lr=0.1):
    return {"state_dict": sd, "epoch": epoch, "lr": lr, "args": {"hidden": 8, "opt": "adam"}}


def write_safetensors(path, tensors):
    """docs/format.md section 10, in the reference writer's order (alignment descending, then name)."""
    codes = {torch.float32: "F32", torch.int64: "I64", torch.bfloat16: "BF16", torch.float16: "F16"}
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header, chunks, offset = {}, [], 0
    for name in order:
        t = tensors[name].contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


oracle = {}


def value_oracle(a, b, rtol=1e-5, atol=1e-8):
    x, y = a.double(), b.double()
    d = (x - y).abs()
    return {"max_abs": d.max().item(), "differing": int((x != y).sum().item()),
            "allclose": bool(torch.allclose(x, y, rtol=rtol, atol=atol))}


def save(name, obj, **kw):
    torch.save(obj, os.path.join(OUT, name), **kw)


save("base.pt", ckpt(BASE))
save("same.pt", ckpt(clone(BASE)))
save("base_legacy.pt", ckpt(clone(BASE)), _use_new_zipfile_serialization=False)
write_safetensors(os.path.join(OUT, "base.safetensors"), BASE)
oracle["same"] = {"equal": True}

# DataParallel's and torch.compile's prefixes on every state-dict key.
save("ddp.pt", ckpt({"module." + k: v.clone() for k, v in BASE.items()}))
save("compiled.pt", ckpt({"_orig_mod." + k: v.clone() for k, v in BASE.items()}))
save("fsdp.pt", ckpt({"_fsdp_wrapped_module." + k: v.clone() for k, v in BASE.items()}))

save("opacus.pt", ckpt({"_module." + k: v.clone() for k, v in BASE.items()}))

# The same arguments as an argparse.Namespace (what training scripts save, and what a weights-only
# conversion turns into a dict): every leaf is equal, the value's type is not.
namespace = ckpt(clone(BASE))
namespace["args"] = argparse.Namespace(**namespace["args"])
save("args_namespace.pt", namespace)

# Sparse COO tensors: the same, and one stored value changed (its indices and dense shape are not).
def sparse(values):
    return torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [2, 0, 1]]), torch.tensor(values), (3, 3))


save("sparse_a.pt", {"s": sparse([1.0, 2.0, 3.0])})
save("sparse_same.pt", {"s": sparse([1.0, 2.0, 3.0])})
save("sparse_b.pt", {"s": sparse([1.0, 2.0, 4.0])})

# A bf16 copy: every float tensor changes dtype and is close by value under a loose tolerance.
bf = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v.clone()) for k, v in BASE.items()}
save("bf16.pt", ckpt(bf))
oracle["bf16"] = {k: value_oracle(BASE[k], bf[k], rtol=1e-2, atol=1e-2)
                  for k in BASE if BASE[k].is_floating_point()}
oracle["bf16_strict"] = {k: value_oracle(BASE[k], bf[k]) for k in BASE if BASE[k].is_floating_point()}

# A later epoch: non-tensor values differ, tensors do not.
save("epoch20.pt", ckpt(clone(BASE), epoch=20, lr=0.01))

# fc.weight saved under another key.
ren = clone(BASE)
ren["head.weight"] = ren.pop("fc.weight")
save("renamed.pt", ckpt(ren))

# A few elements of one tensor changed.
chg = clone(BASE)
chg["emb.weight"][3, 4] += 0.5
chg["emb.weight"][7, 0] -= 2.0
save("changed.pt", ckpt(chg))
oracle["changed"] = {"emb.weight": value_oracle(BASE["emb.weight"], chg["emb.weight"])}

# One key dropped, one added, one reshaped.
ext = clone(BASE)
del ext["bn.running_mean"]
ext["bn.running_var"] = torch.ones(8)
ext["fc.bias"] = ext["fc.bias"].reshape(2, 2)
save("extra.pt", ckpt(ext))

# The same values through a transposed view: the stride changes, the values do not.
tr = clone(BASE)
tr["fc.weight"] = BASE["fc.weight"].t().contiguous().t()
save("strided.pt", ckpt(tr))


# Every category at once (the README's screenshot): renamed, changed values, a bf16 copy, a key
# dropped and one added, a later epoch.
mix = clone(BASE)
mix["head.weight"] = mix.pop("fc.weight")
mix["emb.weight"][3, 4] += 0.5
mix["emb.weight"][7, 0] -= 2.0
mix["bn.running_mean"] = mix["bn.running_mean"].to(torch.bfloat16)
del mix["fc.bias"]
mix["fc2.bias"] = torch.zeros(4)
save("mixed.pt", ckpt(mix, epoch=20, lr=0.01))

# Per-rank files of a DDP run: identical replicas, and a run where rank 2 drifted.
for d, drift in (("ranks_same", None), ("ranks_drift", 2)):
    os.makedirs(os.path.join(OUT, d), exist_ok=True)
    for r in (0, 1, 2, 10):
        sd = clone(BASE)
        if r == drift:
            sd["fc.bias"][1] += 1e-3
        torch.save(ckpt(sd), os.path.join(OUT, d, f"rank_{r}.pt"))

# Big enough that a comparison is still running when the window's Cancel is pressed.
big = OrderedDict((f"layer{i}.weight", torch.rand(1024, 1024)) for i in range(16))
save("big_a.pt", big)
big["layer9.weight"][0, 0] += 1
save("big_b.pt", big)

# Hugging Face sharded sets (transformers' naming and index): BASE split over two .bin shards, and
# the changed state over two safetensors shards. A set is compared as the state dict it makes up.
def write_hf_set(folder, sd, safetensors):
    os.makedirs(os.path.join(OUT, folder), exist_ok=True)
    keys = list(sd)
    halves = [keys[: len(keys) // 2], keys[len(keys) // 2:]]
    stem, ext = ("model", "safetensors") if safetensors else ("pytorch_model", "bin")
    weight_map, total = {}, 0
    for i, part in enumerate(halves):
        name = f"{stem}-{i + 1:05d}-of-{len(halves):05d}.{ext}"
        shard = {k: sd[k].contiguous() for k in part}
        if safetensors:
            write_safetensors(os.path.join(OUT, folder, name), shard)
        else:
            torch.save(shard, os.path.join(OUT, folder, name))
        for k in part:
            weight_map[k] = name
            total += sd[k].numel() * sd[k].element_size()
    with open(os.path.join(OUT, folder, f"{stem}.{ext}.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


write_hf_set("hf_bin", clone(BASE), False)
write_hf_set("hf_st_changed", clone(chg), True)
save("flat.pt", clone(BASE))
write_hf_set("hf_incomplete", clone(BASE), False)
os.remove(os.path.join(OUT, "hf_incomplete", "pytorch_model-00002-of-00002.bin"))

# float8 (torch 1.13 has none): safetensors files written by hand with bytes whose values the
# formats fix (e4m3fn 0x38 = 1.0, 0x40 = 2.0, 0x30 = 0.5, 0xB8 = -1.0; e5m2 0x3C = 1.0, 0x40 = 2.0,
# 0x38 = 0.5, 0xBC = -1.0), beside a float32 file of the same values.
def write_raw_safetensors(path, name, dtype, shape, raw):
    text = json.dumps({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, len(raw)]}},
                      separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(OUT, path), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + raw)


write_raw_safetensors("fp8_e4m3.safetensors", "w", "F8_E4M3", [4], bytes([0x38, 0x40, 0x30, 0xB8]))
write_raw_safetensors("fp8_e5m2.safetensors", "w", "F8_E5M2", [4], bytes([0x3C, 0x40, 0x38, 0xBC]))
write_raw_safetensors("fp8_e5m2_off.safetensors", "w", "F8_E5M2", [4], bytes([0x3C, 0x40, 0x38, 0xC0]))
write_raw_safetensors("fp8_as_f32.safetensors", "w", "F32", [4], struct.pack("<4f", 1.0, 2.0, 0.5, -1.0))

# Quantized tensors: the same integers under another scale are other values; per-channel
# quantizers compare by their scale and zero-point tensors.
xq = torch.randn(6, 5)
q = torch.quantize_per_tensor(xq, 0.05, 3, torch.qint8)
q_scaled = torch._make_per_tensor_quantized_tensor(q.int_repr(), 0.1, 3)
save("quant_a.pt", {"w": q})
save("quant_same.pt", {"w": q.clone()})
save("quant_scale.pt", {"w": q_scaled})
deq_a, deq_b = q.dequantize().double(), q_scaled.dequantize().double()
oracle["quant_scale"] = {"w": {"max_abs": (deq_a - deq_b).abs().max().item(),
                               "differing": int((deq_a != deq_b).sum().item()),
                               "allclose": bool(torch.allclose(deq_a, deq_b))}}
scales = torch.rand(6, dtype=torch.float64) / 10 + 0.01
zps = torch.zeros(6, dtype=torch.int64)
qc = torch.quantize_per_channel(xq, scales, zps, 0, torch.qint8)
qc_scaled = torch._make_per_channel_quantized_tensor(qc.int_repr(), scales * 2, zps, 0)
save("quant_pc_a.pt", {"w": qc})
save("quant_pc_same.pt", {"w": qc.clone()})
save("quant_pc_scale.pt", {"w": qc_scaled})

# base.pt with its largest storage record deflated and then damaged: the file opens (records are
# inflated when read), but that tensor's bytes fail their CRC (torch 1.13 reads them without a word).
import zipfile
with zipfile.ZipFile(os.path.join(OUT, "base.pt")) as src, \
        zipfile.ZipFile(os.path.join(OUT, "bad_record.pt"), "w", zipfile.ZIP_STORED) as dst:
    largest = max((i for i in src.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    for info in src.infolist():
        method = zipfile.ZIP_DEFLATED if info.filename == largest.filename else zipfile.ZIP_STORED
        dst.writestr(info.filename, src.read(info.filename), compress_type=method)
with zipfile.ZipFile(os.path.join(OUT, "bad_record.pt")) as z:
    info = z.getinfo(largest.filename)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
with open(os.path.join(OUT, "bad_record.pt"), "r+b") as f:
    f.seek(start + info.compress_size // 2)
    byte = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([byte[0] ^ 0xFF]))

with open(os.path.join(OUT, "oracle.json"), "w") as f:
    json.dump(oracle, f, indent=1)
