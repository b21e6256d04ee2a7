#!/usr/bin/python3
"""Checks ckptscope against the sets the real writers made (tests/sharded/real/sets, written by
make_real_sets.py with PyTorch 2.11, transformers 5.17, accelerate 1.15 and Lightning 2.6 on the
lent GPU machine).

    compare.py CKPTSCOPE CASE

For each case:
- `convert SET --single-card` must give every tensor, bit for bit, and every plain value of the
  oracle beside the set: what PyTorch 2.11's own dcp_to_torch_save made of the directory, or the
  model's state_dict() as torch.save wrote it;
- `check --json` must report exactly the codes listed for the case;
- where tests/sharded/gen_dcp.py or gen_fsdp.py (the hand-built writers every other DCP and FSDP test
  uses) can write the same layout, they write it from the oracle's tensors, and ckptscope must read
  both the same: the same keys, nested paths, dtypes, global shapes and chunk boxes in
  `inspect --json`, and the same consolidated values. That is the evidence that the hand-built
  fixtures stand for the real writers.
Exit 0 when all holds; otherwise each difference is printed and the exit code is 1.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# The checked-in sets, or those the torch2 tests write at test time (CKPTSCOPE_REAL_SETS).
SETS = os.environ.get("CKPTSCOPE_REAL_SETS") or os.path.join(HERE, "sets")
sys.path.insert(0, os.path.dirname(HERE))


def run(ckptscope, *args, ok=(0,)):
    r = subprocess.run([ckptscope, *args], capture_output=True, text=True)
    if r.returncode not in ok:
        raise SystemExit(f"ckptscope {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def flatten(obj, prefix=()):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(flatten(v, prefix + (str(k),)))
        return out
    if isinstance(obj, (list, tuple)) and any(isinstance(v, (dict, torch.Tensor)) for v in obj):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, prefix + (str(i),)))
        return out
    return {prefix: obj}


def same_values(label, got, want, drop=()):
    """Every tensor bit-equal (dtype too) and every other leaf equal."""
    errors = []
    g, w = flatten(got), flatten(want)
    for k in drop:
        w.pop(k, None)
    for k in sorted(set(g) | set(w)):
        if k not in g or k not in w:
            errors.append(f"{label}: {'.'.join(k)} only in {'ours' if k in g else 'the oracle'}")
            continue
        a, b = g[k], w[k]
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            errors.append(f"{label}: {'.'.join(k)} is a tensor on one side only")
        elif isinstance(a, torch.Tensor):
            if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                errors.append(f"{label}: {'.'.join(k)} differs ({a.dtype} {list(a.shape)} vs {b.dtype} {list(b.shape)})")
        elif a != b and not (isinstance(a, (list, tuple)) and list(a) == list(b)):
            errors.append(f"{label}: {'.'.join(k)} = {a!r}, the oracle has {b!r}")
    return errors


def consolidated(ckptscope, path, tmp, name):
    out = os.path.join(tmp, name + ".pt")
    run(ckptscope, "convert", path, "-o", out, "--single-card")
    import zipfile
    with zipfile.ZipFile(out) as z:  # every record's CRC, including those combined from the inputs'
        bad = z.testzip()
    if bad is not None:
        raise SystemExit(f"{out}: record {bad} fails its CRC")
    return torch.load(out, map_location="cpu")


def converted(ckptscope, path, tmp, name):
    """`convert SET -o OUT` with no option: what dcp_to_torch_save writes, read by 2.x's default
    torch.load (weights_only=True)."""
    out = os.path.join(tmp, name + ".as_is.pt")
    run(ckptscope, "convert", path, "-o", out)
    return torch.load(out)


def plain(obj):
    """io.BytesIO values by their bytes (two loads of one never compare equal as objects)."""
    import io
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    if isinstance(obj, io.BytesIO):
        return ("BytesIO", obj.getvalue())
    return obj


def tree(ckptscope, path):
    """What inspect --json says of each tensor, without file names (the writers place replicated
    items on different ranks) and in key order."""
    d = json.loads(run(ckptscope, "inspect", "--json", path))
    rows = {}
    for t in d["tensors"]:
        boxes = sorted((tuple(c["offsets"]), tuple(c["sizes"])) for c in t.get("pieces", []))
        rows[t["path"]] = (t["dtype"], tuple(t["shape"]), tuple(boxes))
    values = {v["path"]: v["value"] for v in d.get("values", [])}
    return rows, values


def same_tree(ckptscope, real, hand):
    errors = []
    (rt, rv), (ht, hv) = tree(ckptscope, real), tree(ckptscope, hand)
    for k in sorted(set(rt) | set(ht)):
        if rt.get(k) != ht.get(k):
            errors.append(f"tree: {k}: real {rt.get(k)} vs hand-built {ht.get(k)}")
    for k in sorted(set(rv) | set(hv)):
        if rv.get(k) != hv.get(k):
            errors.append(f"value: {k}: real {rv.get(k)} vs hand-built {hv.get(k)}")
    return errors


def codes(ckptscope, path):
    d = json.loads(run(ckptscope, "check", "--json", path, ok=(0, 1)))
    return sorted({f["code"] for f in d["findings"]})


def fsdp2_shard(sd):
    """FSDP2 (fully_shard) shards every parameter and its optimizer moments on dim 0 with
    torch.chunk over the ranks; buffers and the scalar `step` stay whole."""
    import gen_dcp
    out = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            out[k] = fsdp2_shard(v)
        elif isinstance(v, list):
            out[k] = [fsdp2_shard(x) if isinstance(x, dict) else x for x in v]
        elif isinstance(v, torch.Tensor) and v.dim() >= 1 and k != "scale":
            out[k] = gen_dcp.shard_dim(v, 0, 2)
        else:
            out[k] = v
    return out


def hand_dcp(oracle, tmp):
    import gen_dcp
    out = os.path.join(tmp, "hand_dcp")
    gen_dcp.write_dcp(out, fsdp2_shard(oracle), world=2, replicated_rank=0, expected=False)
    return out


def hand_fsdp2_pickles(model_sd, tmp):
    import gen_fsdp
    out = os.path.join(tmp, "hand_fsdp")
    gen_fsdp.write_set(out, "rank", model_sd, 2,
                       lambda k, v, r, w: v.clone() if k == "scale" else gen_fsdp.dtensor(v, r, w, 0))
    return out


def case(ckptscope, name, tmp):
    s = lambda p: os.path.join(SETS, p)
    load = lambda p: torch.load(s(p), map_location="cpu")
    errors = []
    if name == "dcp_fsdp2":
        oracle = load("dcp_fsdp2.dcp_to_torch_save.pt")
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        hand = hand_dcp(oracle, tmp)
        errors += same_tree(ckptscope, s(name), hand)
        errors += same_values("hand-built " + name, consolidated(ckptscope, hand, tmp, "hand"), oracle)
        want = []
    elif name == "dcp_fsdp2_threads":
        # FileSystemWriter(thread_count=2): the same values as the one-thread save.
        oracle = load("dcp_fsdp2.dcp_to_torch_save.pt")
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        want = []
    elif name in ("dcp_no_pg", "dcp_torch_save_to_dcp"):
        # Written by one process without a process group, and by torch_save_to_dcp: the initial
        # state dict, under `model` for the former.
        init = load("dcp_fsdp2.init_state_dict.pt")
        oracle = {"model": init} if name == "dcp_no_pg" else init
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        want = []
    elif name == "dcp_fsdp2_no_collectives":
        # The same save with use_collectives=False: one __R.metadata per rank. PyTorch's own
        # dcp_to_torch_save reads __0.metadata alone here, so the oracle is the collective save.
        oracle = {"model": load("dcp_fsdp2.dcp_to_torch_save.pt")["model"]}
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        want = ["dcp-rank-local-metadata"]
    elif name == "dcp_rank_metadata_lost":
        # One rank's __R.metadata lost: its chunks are unknown, which check names and convert refuses.
        import shutil
        lost = os.path.join(tmp, "lost")
        shutil.copytree(s("dcp_fsdp2_no_collectives"), lost)
        os.remove(os.path.join(lost, "__1.metadata"))
        r = subprocess.run([ckptscope, "convert", lost, "-o", os.path.join(tmp, "lost.pt"), "--single-card"],
                           capture_output=True, text=True)
        if r.returncode == 0 or os.path.exists(os.path.join(tmp, "lost.pt")):
            errors.append(f"convert of a set missing __1.metadata exited {r.returncode}")
        got = codes(ckptscope, lost)
        if got != ["chunk-hole", "dcp-rank-local-metadata", "shard-missing"]:
            errors.append(f"check codes {got}")
        return errors
    elif name == "dcp_split":
        # convert FILE -o DIR --format dcp: a single-rank folder. Read back, it gives every value of
        # the file; it has the layout gen_dcp.py writes for one rank; every item is a torch.save
        # that torch.load opens at its offset, as FileSystemReader.read_data does.
        import io
        import pickle
        import gen_dcp
        oracle = load("dcp_fsdp2.dcp_to_torch_save.pt")
        out = os.path.join(tmp, "split")
        run(ckptscope, "convert", s("dcp_fsdp2.dcp_to_torch_save.pt"), "-o", out, "--format", "dcp")
        errors += same_values(name, consolidated(ckptscope, out, tmp, name), oracle)
        hand = os.path.join(tmp, "hand_one_rank")
        gen_dcp.write_dcp(hand, oracle, world=1, replicated_rank=0, expected=False)
        errors += same_tree(ckptscope, out, hand)
        with open(os.path.join(out, ".metadata"), "rb") as f:
            md = pickle.load(f)
        blob = open(os.path.join(out, "__0_0.distcp"), "rb").read()
        for index, info in md.storage_data.items():
            want = md.state_dict_metadata[index.fqn]
            # Tensors load with weights_only=True (read_data); BYTE_IO items with load_bytes'
            # weights_only=False (1.13's allowlist has no BINFLOAT either).
            item = torch.load(io.BytesIO(blob[info.offset:info.offset + info.length]),
                              weights_only=hasattr(want, "chunks"))
            if isinstance(item, torch.Tensor) != hasattr(want, "chunks"):
                errors.append(f"{name}: item {index.fqn} is {type(item).__name__}")
            elif isinstance(item, torch.Tensor) and list(item.shape) != list(want.size):
                errors.append(f"{name}: item {index.fqn} has shape {list(item.shape)}")
        return errors
    elif name in ("dcp_safetensors", "dcp_safetensors_threads", "dcp_safetensors_zstd"):
        # FileSystemWriter(serialization_format=SAFETENSORS), one data file a rank or two: PyTorch's own
        # reader fails on it (the oracle's step records how), so the oracle is dcp_to_torch_save of the
        # same state dict saved in the default layout in the same run; ckptscope reads both alike.
        oracle = load("dcp_layouts_torch_save.dcp_to_torch_save.pt")
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        errors += same_values(name + " as it is", converted(ckptscope, s(name), tmp, name), oracle)
        errors += same_tree(ckptscope, s(name), s("dcp_layouts_torch_save"))
        said = open(s("dcp_safetensors.torch_reads.txt")).read()
        if "Weights only load failed" not in said:
            errors.append(f"{name}: PyTorch's own reader said {said[-300:]!r}, not what the finding tells")
        info = json.loads(run(ckptscope, "inspect", "--json", s(name)))["set"]
        if info.get("serialization_format") != "safetensors":
            errors.append(f"{name}: inspect --json says serialization_format {info.get('serialization_format')!r}")
        want = ["dcp-safetensors-format"]
    elif name == "dcp_zstd":
        # The ZStandard stream extension: every item a zstd frame, which PyTorch reads back itself.
        oracle = load("dcp_zstd.dcp_to_torch_save.pt")
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        errors += same_values(name + " as it is", converted(ckptscope, s(name), tmp, name), oracle)
        errors += same_values(name + " vs the default layout", oracle, load("dcp_layouts_torch_save.dcp_to_torch_save.pt"))
        errors += same_tree(ckptscope, s(name), s("dcp_layouts_torch_save"))
        info = json.loads(run(ckptscope, "inspect", "--json", s(name)))["set"]
        if info.get("zstd_items", 0) == 0:
            errors.append(f"{name}: inspect --json counts {info.get('zstd_items')!r} zstd items")
        want = []
    elif name == "dcp_megatron_extra_state":
        # TransformerEngine _extra_state as Megatron-LM saves it: convert keeps every value as
        # dcp_to_torch_save writes it (a uint8 tensor inside one as a tensor), --drop-extra-state
        # leaves them out, and both say so.
        oracle = torch.load(s(name + ".dcp_to_torch_save.pt"), weights_only=False)
        out = os.path.join(tmp, "kept.pt")
        said = run(ckptscope, "convert", s(name), "-o", out)
        if "4 _extra_state values kept" not in said:
            errors.append(f"{name}: convert does not say it kept them: {said!r}")
        errors += same_values(name, plain(torch.load(out, weights_only=False)), plain(oracle))
        # Kept as the writer saved it, the io.BytesIO is what 2.14's default torch.load refuses: said,
        # with the two options whose output it loads (--weights-only makes that value None).
        if "refuses the output, which holds _io.BytesIO" not in said or "--weights-only" not in said:
            errors.append(f"{name}: convert does not say the default torch.load refuses its output: {said!r}")
        plained = os.path.join(tmp, "weights_only.pt")
        run(ckptscope, "convert", s(name), "-o", plained, "--weights-only")

        def none_for_bytesio(obj):
            import io
            if isinstance(obj, dict):
                return {k: none_for_bytesio(v) for k, v in obj.items()}
            if isinstance(obj, list):
                return [none_for_bytesio(v) for v in obj]
            return None if isinstance(obj, io.BytesIO) else obj
        errors += same_values(name + " --weights-only", torch.load(plained), none_for_bytesio(oracle))
        dropped = os.path.join(tmp, "dropped.pt")
        said = run(ckptscope, "convert", s(name), "-o", dropped, "--drop-extra-state")
        if said.count("drop ") != 4:
            errors.append(f"{name}: convert --drop-extra-state names {said.count('drop ')} drops: {said!r}")
        want_dropped = {k: v for k, v in oracle.items() if "_extra_state" not in k}
        errors += same_values(name + " --drop-extra-state", torch.load(dropped), want_dropped)
        info = json.loads(run(ckptscope, "inspect", "--json", s(name)))["set"]
        if info.get("extra_state_values") != 4:
            errors.append(f"{name}: inspect --json says extra_state_values {info.get('extra_state_values')!r}")
        found = [f for f in json.loads(run(ckptscope, "check", "--json", s(name), ok=(0, 1)))["findings"]
                 if f["code"] == "extra-state"]
        if len(found) != 1 or found[0].get("fix", {}).get("drop_extra_state") is not True:
            errors.append(f"{name}: check's extra-state finding is {found!r}")
        want = ["extra-state", "megatron-torch-dist", "not-weights-only"]
    elif name == "dcp_fsdp2_tp":
        oracle = load("dcp_fsdp2_tp.dcp_to_torch_save.pt")
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        errors += same_values(name + " vs state_dict", oracle, {"model": load("dcp_fsdp2_tp.state_dict.pt")})
        want = []
    elif name == "fsdp2_rank_pickles":
        oracle = load("dcp_fsdp2.dcp_to_torch_save.pt")["model"]
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), oracle)
        hand = hand_fsdp2_pickles(oracle, tmp)
        errors += same_tree(ckptscope, s(name), hand)
        errors += same_values("hand-built " + name, consolidated(ckptscope, hand, tmp, "hand"), oracle)
        want = ["dtensor-rank-files"]
    elif name == "fsdp2_tp_rank_pickles":
        # 2-D FSDP2 over tensor parallelism: _StridedShard placements, sub-meshes, 2.9+ _MeshLayout.
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), load("dcp_fsdp2_tp.state_dict.pt"))
        want = ["dtensor-rank-files"]
    elif name == "accelerate_fsdp":
        # accelerate 1.15's save_state under FSDP (SHARDED_STATE_DICT): the folder opens as its
        # model's DCP folder; the optimizer's is a DCP folder of its own.
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name),
                              load("accelerate_fsdp/pytorch_model_fsdp_0.dcp_to_torch_save.pt"))
        errors += same_values(name + "/optimizer_0",
                              consolidated(ckptscope, s("accelerate_fsdp/optimizer_0"), tmp, "optimizer"),
                              load("accelerate_fsdp/optimizer_0.dcp_to_torch_save.pt"))
        want = []
    elif name == "hf_gpt2_safetensors":
        # transformers stores the tied lm_head.weight not at all (safetensors cannot alias); config.json
        # says tie_word_embeddings, so the consolidation writes it back as the model's state_dict() has
        # it: a view of transformer.wte.weight (the other keys follow the index's sorted weight_map, not
        # the state_dict's order). check still warns: the files themselves lack the key; and, as for
        # the consolidated file, says the tie is one storage (shared-storage).
        oracle = load("hf_gpt2.state_dict.pt")
        got = consolidated(ckptscope, s(name), tmp, name)
        errors += same_values(name, got, oracle)
        head, wte = got.get("lm_head.weight"), got.get("transformer.wte.weight")
        if head is None or wte is None or head.data_ptr() != wte.data_ptr() or head.stride() != wte.stride():
            errors.append(f"{name}: lm_head.weight is not the same tensor as transformer.wte.weight")
        want = ["shared-storage", "tied-weight-missing"]
    elif name == "hf_llama_bf16":
        errors += same_values(name, consolidated(ckptscope, s(name), tmp, name), load("hf_llama_bf16.state_dict.pt"))
        want = []
    elif name == "lightning2.ckpt":
        # A single file: its model is under "state_dict", beside loops, callbacks and optimizer_states.
        got = consolidated(ckptscope, s(name), tmp, name)
        errors += same_values(name, got["state_dict"], load("lightning2.state_dict.pt"))
        if got.get("hyper_parameters") != {"hidden": 8, "lr": 0.01}:
            errors.append(f"{name}: hyper_parameters {got.get('hyper_parameters')!r}")
        want = []
    else:
        raise SystemExit(f"unknown case {name}")
    if codes(ckptscope, s(name)) != want:
        errors.append(f"check codes {codes(ckptscope, s(name))}, expected {want}")
    return errors


def main():
    ckptscope, name = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        errors = case(ckptscope, name, tmp)
    for e in errors:
        print(e)
    print(f"{name}: {'ok' if not errors else str(len(errors)) + ' difference(s)'}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
