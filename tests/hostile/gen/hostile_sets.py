#!/usr/bin/env python3
"""Writes hostile multi-file checkpoints for tests/hostile/tst_hostile_sets (issue 29, second pass):
each set is written by the project's own hand-built writers (tests/fixtures/gen_sharded.py,
tests/sharded/gen_dcp.py, gen_zero.py, gen_fsdp.py), then bent the way a crafted folder is.

Usage: hostile_sets.py OUTDIR

OUTDIR/<name>/ for each case; symlinks and FIFOs are made by the test itself (they depend on paths
the test owns). Every file is small: the huge tensors are only declared.
"""
import collections
import dataclasses
import json
import os
import io
import pickle
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "sharded"))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))

import torch  # noqa: E402

import gen_dcp  # noqa: E402  (registers the DCP stand-in classes under their real module paths)
import gen_fsdp  # noqa: E402
import gen_sharded  # noqa: E402
import gen_tar_checkpoint  # noqa: E402
import gen_zero  # noqa: E402


def hf_sets(out):
    sd = gen_sharded.model_state()
    gen_sharded.write_set(os.path.join(out, "hf_st"), sd, ".safetensors", 2000)
    gen_sharded.write_set(os.path.join(out, "hf_bin"), sd, ".bin", 2000)
    # A 100 000-deep `metadata` subtree: copying it recursed once per level (SIGSEGV).
    deep = os.path.join(out, "hf_deep")
    gen_sharded.write_set(deep, sd, ".safetensors", 2000)
    index = os.path.join(deep, "model.safetensors.index.json")
    with open(index) as f:
        text = f.read()
    depth = 100000
    nested = "[" * depth + "]" * depth
    text = text.replace('"metadata": {', '"metadata": {"deep": ' + nested + ', ', 1)
    with open(index, "w") as f:
        f.write(text)


def hf_total_sizes(out):
    """metadata.total_size as Python's json reads it: 1e400 (inf), NaN, and a wrong count."""
    sd = gen_sharded.model_state()
    for name, value in (("inf", "1e400"), ("nan", "NaN"), ("wrong", "12345")):
        folder = os.path.join(out, "hf_total_size_" + name)
        gen_sharded.write_set(folder, sd, ".safetensors", 2000)
        index = os.path.join(folder, "model.safetensors.index.json")
        with open(index) as f:
            j = json.load(f)
        j["metadata"]["total_size"] = "@@"
        with open(index, "w") as f:
            f.write(json.dumps(j).replace('"@@"', value))


def hf_huge_index(out):
    """200 000 weight_map entries (a real 92k-entry index took 40 s) and a flood of 300 000 metadata
    keys: each key was inserted with a linear scan."""
    folder = os.path.join(out, "hf_huge_index")
    gen_sharded.write_set(folder, gen_sharded.model_state(), ".safetensors", 2000)
    index = os.path.join(folder, "model.safetensors.index.json")
    with open(index) as f:
        j = json.load(f)
    shard = next(iter(j["weight_map"].values()))
    j["weight_map"].update((f"missing.{i}.weight", shard) for i in range(200000))
    j["metadata"].update((f"key{i}", "v") for i in range(300000))
    with open(index, "w") as f:
        json.dump(j, f)


def dcp_metadata(folder):
    with open(os.path.join(folder, ".metadata"), "rb") as f:
        return pickle.load(f)


def dump_metadata(folder, md):
    with open(os.path.join(folder, ".metadata"), "wb") as f:
        pickle.dump(md, f)


def write(folder, sd):
    gen_dcp.write_dcp(folder, sd, world=1, replicated_rank=0, expected=False)


def dcp_sets(out):
    sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(3)}
    write(os.path.join(out, "dcp"), sd)
    # [2^32, 2^32] with no chunks: its element count wrapped to 0, so check saw no hole.
    folder = os.path.join(out, "dcp_wraps")
    write(folder, sd)
    md = dcp_metadata(folder)
    md.state_dict_metadata["w"].size = torch.Size([2 ** 32, 2 ** 32])
    md.state_dict_metadata["w"].chunks = []
    dump_metadata(folder, md)
    # Chunks whose end wraps past 2^63: [2^63 - 1, 0] + [2, 4] would come round to row 0 and cover
    # the rows the first chunk leaves, so coverage found no hole in a tensor no chunk fills.
    folder = os.path.join(out, "dcp_chunk_wraps")
    write(folder, sd)
    md = dcp_metadata(folder)
    tsm = md.state_dict_metadata["w"]
    tsm.chunks = [gen_dcp.ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([1, 4])),
                  gen_dcp.ChunkStorageMetadata(torch.Size([2 ** 63 - 1, 0]), torch.Size([3, 4]))]
    dump_metadata(folder, md)
    # A float32 tensor of 2^62 elements whose one chunk is a stride-0 view of one element: the
    # assembly buffer's size (numel * 4) wrapped, and placeBox wrote past it. 2^40 elements (4 TiB)
    # do not overflow, but no machine holds them.
    for name, numel in (("dcp_stride0", 2 ** 62), ("dcp_stride0_4tib", 2 ** 40)):
        folder = os.path.join(out, name)
        write(folder, {"w": torch.zeros(1)})
        data = os.path.join(folder, "__0_0.distcp")
        torch.save(torch.zeros(1).expand(numel), data)
        md = dcp_metadata(folder)
        tsm = md.state_dict_metadata["w"]
        tsm.size = torch.Size([numel])
        tsm.chunks = [gen_dcp.ChunkStorageMetadata(torch.Size([0]), torch.Size([numel]))]
        for info in md.storage_data.values():
            info.offset, info.length = 0, os.path.getsize(data)
        dump_metadata(folder, md)
    # A chunk whose byte range runs past the end of its data file: check said "no findings".
    folder = os.path.join(out, "dcp_past_end")
    write(folder, sd)
    md = dcp_metadata(folder)
    for index, info in md.storage_data.items():
        if index.fqn == "w":
            info.offset += 1 << 20
    dump_metadata(folder, md)
    # A data file named outside the folder's __R_N.distcp files.
    folder = os.path.join(out, "dcp_other_name")
    write(folder, sd)
    md = dcp_metadata(folder)
    for info in md.storage_data.values():
        info.relative_path = "../" + info.relative_path
    dump_metadata(folder, md)


def dcp_many_chunks(out):
    """One tensor of [1, 120000] in 120 000 one-element chunks, all at row 0: the overlap sweep along
    dim 0 compared every pair. Each chunk's storage_data points at the one real record (check reads
    no chunk)."""
    folder = os.path.join(out, "dcp_many_chunks")
    write(folder, {"w": torch.zeros(1, 1)})
    md = dcp_metadata(folder)
    n = 120000
    (index, info), = md.storage_data.items()
    tsm = md.state_dict_metadata["w"]
    tsm.size = torch.Size([1, n])
    tsm.chunks = [gen_dcp.ChunkStorageMetadata(torch.Size([0, i]), torch.Size([1, 1])) for i in range(n)]
    md.storage_data = {gen_dcp.MetadataIndex("w", torch.Size([0, i])): info for i in range(n)}
    dump_metadata(folder, md)


def zero_sets(out):
    gen_zero.write_set(out, "zero2", 2, 2)
    gen_zero.write_set(out, "zero_dotdot", 2, 2)
    with open(os.path.join(out, "zero_dotdot", "latest"), "w") as f:
        f.write("..")
    # A param of shape [2^62, 4]: its element count overflowed, and it was written over 0 bytes.
    gen_zero.write_set(out, "zero_huge", 2, 2)
    path = os.path.join(out, "zero_huge", "global_step3", "mp_rank_00_model_states.pt")
    states = torch.load(path)
    first = states["param_shapes"][0]
    name = next(iter(first))
    first[name] = torch.Size([2 ** 62, 4])
    torch.save(states, path)


    # Partitions that do not tile the flat group: rank 0's two elements longer, rank 1's two shorter,
    # the total unchanged (zero_to_fp32's only check); every param after the cut was shifted.
    gen_zero.write_set(out, "zero_untiled", 2, 2)
    tag = os.path.join(out, "zero_untiled", "global_step3")
    paths = [os.path.join(tag, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt") for r in range(2)]
    states = [torch.load(p) for p in paths]
    parts = [s["optimizer_state_dict"]["single_partition_of_fp32_groups"] for s in states]
    parts[0][0], parts[1][0] = torch.cat([parts[0][0], parts[1][0][:2]]), parts[1][0][2:].clone()
    for s, p in zip(states, paths):
        torch.save(s, p)


def fsdp_sets(out):
    gen_fsdp.write_set(os.path.join(out, "fsdp"), "pytorch_model_fsdp_0", gen_fsdp.model(1), 2,
                       lambda k, v, r, w: gen_fsdp.chunk_sharded(v, r, w))


class Payload:
    """Pickles as a call of os.system (posix.system): what torch.load or dcp.load would run. Writing
    it runs nothing."""

    def __reduce__(self):
        return (os.system, ("echo owned > /dev/null",))


def hostile_code_sets(out):
    """Each set carries os.system in one of the pickles it is read from."""
    sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(3)}
    # DCP: in .metadata's storage_meta, in an extra field of Metadata, in a BYTE_IO value.
    folder = os.path.join(out, "dcp_code_storage_meta")
    write(folder, sd)
    md = dcp_metadata(folder)
    md.storage_meta = Payload()
    dump_metadata(folder, md)
    folder = os.path.join(out, "dcp_code_extra_field")
    write(folder, sd)
    md = dcp_metadata(folder)
    md.extra = Payload()
    dump_metadata(folder, md)
    write(os.path.join(out, "dcp_code_bytes_item"), dict(sd, step=Payload()))
    # An FSDP rank file, a ZeRO rank file, a Hugging Face .bin shard, each with one more value.
    folder = os.path.join(out, "fsdp_code")
    os.makedirs(folder)
    for rank in range(2):  # gen_fsdp.write_set's files, rank 1's with one more value
        states = collections.OrderedDict(
            (k, gen_fsdp.chunk_sharded(v, rank, 2)) for k, v in gen_fsdp.model(1).items())
        if rank == 1:
            states["hook"] = Payload()
        torch.save(states, os.path.join(folder, f"pytorch_model_fsdp_0_rank{rank}.bin"))
    gen_zero.write_set(out, "zero_code", 2, 2)
    path = os.path.join(out, "zero_code", "global_step3", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    states = torch.load(path)
    states["hook"] = Payload()
    torch.save(states, path)
    folder = os.path.join(out, "hf_bin_code")
    gen_sharded.write_set(folder, gen_sharded.model_state(), ".bin", 2000)
    shard = sorted(n for n in os.listdir(folder) if n.endswith(".bin"))[-1]
    states = torch.load(os.path.join(folder, shard))
    states["hook"] = Payload()
    torch.save(states, os.path.join(folder, shard))


class AttributeOfCall:
    """getattr on a call's result: the gadget that reaches what no GLOBAL names."""

    def __reduce__(self):
        return (getattr, (collections.OrderedDict(), "keys"))


class HandedOn:
    """getattr handed to map(), which would call it on anything."""

    def __reduce__(self):
        return (map, (getattr, [collections.OrderedDict], ["fromkeys"]))


class EnumByName:
    """What an enum member pickled by name looks like (DeepSpeed's ZeroStageEnum): harmless."""

    def __reduce__(self):
        return (getattr, (collections.OrderedDict, "fromkeys"))


def getattr_files(out):
    w = torch.ones(2)
    torch.save({"w": w, "e": AttributeOfCall()}, os.path.join(out, "getattr_of_call.pt"))
    torch.save({"w": w, "e": HandedOn()}, os.path.join(out, "getattr_handed_on.pt"))
    torch.save({"w": w, "e": EnumByName()}, os.path.join(out, "getattr_enum_by_name.pt"))


def control_names(out):
    """Tensor names carrying C1 CSI (U+009B), DEL and ESC: JSON escapes only C0, so they printed raw."""
    torch.save({"w\u009b2J": torch.ones(1), "x\x7f\x1b[31m": torch.ones(1)}, os.path.join(out, "control_names.pt"))


def script_sources_bomb(out):
    """A TorchScript archive with 8 more code/ sources of 16 MiB each (the cap per source), 0.6 MB
    deflated: with no cap on the total, 500 of them were 8 GiB to inflate. Past the total cap the
    rest are left unread, with a warning."""
    import zipfile
    base = os.path.join(out, "script_base.pt")
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), base)
    with zipfile.ZipFile(base) as z:
        entries = [(i, z.read(i)) for i in z.infolist()]
    folder = entries[0][0].filename.split("/")[0]
    source = b"#" * (16 << 20)
    with zipfile.ZipFile(os.path.join(out, "script_sources_bomb.pt"), "w") as z:
        for info, data in entries:
            z.writestr(info, data)
        for i in range(8):
            z.writestr(zipfile.ZipInfo(f"{folder}/code/__torch__/bomb{i}.py"), source,
                       compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)


def tar_files(out):
    """A tar-era checkpoint with a second `pickle` member: tarfile (and torch.load) reads the last."""
    base = os.path.join(out, "tar_base.pt")
    gen_tar_checkpoint.build(base)
    with tarfile.open(base) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    hidden = io.BytesIO()
    pickle.dump({"w": Payload()}, hidden, protocol=2)
    with tarfile.open(os.path.join(out, "tar_two_pickles.pt"), "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members + [("pickle", hidden.getvalue())]:
            gen_tar_checkpoint.member(tar, name, data)


def tar_view_bomb(out):
    """A tar-era file whose storage view list is one memoized view tuple 5,000,000 times (10 MB of
    pickle): each view became a storage entry of its own (1.7 GB)."""
    with tarfile.open(os.path.join(out, "tar_base.pt")) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    storages = io.BytesIO()
    pickle.dump(1, storages, protocol=2)
    key = 140234567890112
    gen_tar_checkpoint.storage_record(storages, key, "cpu", torch.FloatStorage, [0.0] * 16, "f")
    pickle.dump([(key + 1, key, 0, 16)] * 5000000, storages, protocol=2)
    members["storages"] = storages.getvalue()
    with tarfile.open(os.path.join(out, "tar_view_bomb.pt"), "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            gen_tar_checkpoint.member(tar, name, data)


def many_members(out):
    """Sets with more member files than `ulimit -n 1024` lets a process hold open: every member was
    opened (and mapped) up front, so opening them failed with EMFILE. A DCP save of 5,000 ranks, one
    tensor sharded over all of them; the same save with each rank's own __R.metadata
    (use_collectives=False), whose merge was quadratic in the ranks; a Hugging Face set of 10,000
    one-tensor shards (1.9 GB of peak memory before); a ZeRO stage 2 folder of 2,000 ranks and 2,000
    FSDP2 rank files (each parsed rank file was held: 3,000 ZeRO ranks took 1.5 GB)."""
    gen_zero.write_set(out, "zero_many_ranks", 2, 2000)
    # FSDP2's DTensor rank files (a ShardedTensor's would carry every rank's metadata in each file).
    full = collections.OrderedDict(w=torch.arange(4000, dtype=torch.float32).reshape(2000, 2))
    gen_fsdp.write_set(os.path.join(out, "fsdp_many_ranks"), "model", full, 2000,
                       lambda k, v, r, w: gen_fsdp.dtensor(v, r, w, 0))
    torch.save(full, os.path.join(out, "fsdp_many_ranks.expected.pt"))
    n = 5000
    full = torch.arange(n, dtype=torch.float32)
    folder = os.path.join(out, "dcp_many_ranks")
    gen_dcp.write_dcp(folder, {"w": gen_dcp.shard_dim(full, 0, n)}, world=n, replicated_rank=0, expected=False)
    torch.save({"w": full}, os.path.join(out, "dcp_many_ranks.expected.pt"))
    local = os.path.join(out, "dcp_many_rank_metadata")
    gen_dcp.write_dcp(local, {"w": gen_dcp.shard_dim(full, 0, n)}, world=n, replicated_rank=0, expected=False)
    md = dcp_metadata(local)
    tsm = md.state_dict_metadata["w"]
    for index, info in md.storage_data.items():
        rank = int(info.relative_path[2:].split("_")[0])
        chunks = [c for c in tsm.chunks if list(c.offsets) == list(index.offset)]
        part = dataclasses.replace(md, state_dict_metadata={"w": dataclasses.replace(tsm, chunks=chunks)},
                                   storage_data={index: info})
        with open(os.path.join(local, f"__{rank}.metadata"), "wb") as f:
            pickle.dump(part, f)
    os.remove(os.path.join(local, ".metadata"))
    sd = collections.OrderedDict((f"layers.{i}.weight", torch.full((2,), float(i))) for i in range(10000))
    gen_sharded.write_set(os.path.join(out, "hf_many_shards"), sd, ".safetensors", 8)
    # 1,200 .bin shards, the last holding a quantized tensor: no one state dict (the consolidation
    # writes plain tensors only), so diff compares the set file by file, and held every shard open
    # (EMFILE past `ulimit -n 1024`), where inspect, check and convert hold a few.
    sd = collections.OrderedDict((f"layers.{i}.weight", torch.full((2,), float(i))) for i in range(1199))
    sd["q.weight"] = torch.quantize_per_tensor(torch.arange(4, dtype=torch.float32), 0.5, 1, torch.qint8)
    gen_sharded.write_set(os.path.join(out, "hf_quantized_many_shards"), sd, ".bin", 8)


def dcp_memory_bombs(out):
    """Small .metadata files that made gigabytes: 4,000 planner_data paths naming one memoized 1 MiB
    string (each item's path was a copy: 4.0 GB), and list indices of 2^24 - 1 that set_element pads
    with None (16 million nodes per list: 2.3 GB, then "internal error")."""
    folder = os.path.join(out, "dcp_path_amplified")
    write(folder, {"w": torch.zeros(1)})
    md = dcp_metadata(folder)
    tsm = md.state_dict_metadata["w"]
    long = "k" * (1 << 20)  # pickled once, then memo references
    for i in range(4000):
        md.state_dict_metadata[f"w{i}"] = tsm
        md.planner_data[f"w{i}"] = (long, f"x{i}")
    dump_metadata(folder, md)
    # The same memoized string as every MetadataIndex's fqn in storage_data (4,000 entries): each
    # key was a copy (4.0 GB and 25 s, exit 0). The set is valid (entries no item uses are ignored,
    # as dcp.load ignores them) and reads in the memory of its one item.
    folder = os.path.join(out, "dcp_fqn_amplified")
    write(folder, {"w": torch.zeros(1)})
    md = dcp_metadata(folder)
    (index, info), = md.storage_data.items()
    for i in range(4000):
        md.storage_data[gen_dcp.MetadataIndex(long, torch.Size([i]))] = info
    dump_metadata(folder, md)
    folder = os.path.join(out, "dcp_planner_index")
    sd = {f"l{i}": torch.zeros(1) for i in range(64)}
    write(folder, sd)
    md = dcp_metadata(folder)
    for i in range(64):
        md.planner_data[f"l{i}"] = (f"l{i}", (1 << 24) - 1)
    dump_metadata(folder, md)


def gzip_sparse_hole(out):
    """A gzip member of 256 MiB of zeros (256 KiB on disk) followed by a sparse 1 GiB hole: the
    inflate limit was 64x the file's size, hole included, so the member inflated whole (1-2 GB,
    then "internal error"). Streamed: nothing here holds 256 MiB."""
    import zlib
    path = os.path.join(out, "gzip_sparse_hole.pt.gz")
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    with open(path, "wb") as f:
        for _ in range(256):
            f.write(z.compress(block))
        f.write(z.flush())
        f.truncate(f.tell() + (1 << 30))


def zstd_rle_frame(blocks, block_size=128 * 1024, claims=None):
    """A zstd frame built by hand (RFC 8878): no checksum, a 1 MiB window, `blocks` RLE blocks of
    `block_size` zero bytes (4 bytes each: the most a frame can inflate per byte), and when `claims`
    is given a Frame_Content_Size field saying so (8 bytes)."""
    fhd = (3 << 6) if claims is not None else 0
    out = bytearray(b"\x28\xb5\x2f\xfd") + bytes([fhd, 10 << 3])
    if claims is not None:
        out += claims.to_bytes(8, "little")
    for i in range(blocks):
        last = 1 if i == blocks - 1 else 0
        out += (last | (1 << 1) | (block_size << 3)).to_bytes(3, "little") + b"\x00"
    return bytes(out)


def dcp_layout_sets(out):
    """DCP's newer layouts bent: zstd items that claim or inflate to far more than their chunk holds,
    or are cut short; safetensors data files whose DCP_SHARDING_INFO or header lie."""
    sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": 7}

    def zstd_set(name, frame_of):
        folder = os.path.join(out, name)
        gen_dcp.write_dcp(folder, sd, world=1, replicated_rank=0, expected=False, layout="zstd")
        md = dcp_metadata(folder)
        data = open(os.path.join(folder, "__0_0.distcp"), "rb").read()
        blob, at = b"", 0
        for index in sorted(md.storage_data, key=lambda i: md.storage_data[i].offset):
            info = md.storage_data[index]
            item = data[info.offset:info.offset + info.length]
            item = frame_of(index.fqn, item)
            info.offset, info.length = len(blob), len(item)
            blob += item
        open(os.path.join(folder, "__0_0.distcp"), "wb").write(blob)
        dump_metadata(folder, md)

    # A 4-byte RLE block under a header claiming 1 TiB: refused before a byte is inflated.
    zstd_set("dcp_zstd_claims_tib", lambda fqn, item: zstd_rle_frame(1, 1024, claims=1 << 40) if fqn == "w" else item)
    # 64 MiB of zeros in 2 KiB where .metadata says the chunk holds 48 bytes: stops at its limit.
    zstd_set("dcp_zstd_bomb", lambda fqn, item: zstd_rle_frame(512) if fqn == "w" else item)
    # The same for a BYTE_IO value: 16 GiB of zeros in 512 KiB (the value's limit is 64 MiB + 64x).
    zstd_set("dcp_zstd_value_bomb", lambda fqn, item: zstd_rle_frame(131072) if fqn == "step" else item)
    # A real frame cut in half.
    zstd_set("dcp_zstd_truncated", lambda fqn, item: item[:len(item) // 2] if fqn == "w" else item)

    def safetensors_set(name, bend):
        folder = os.path.join(out, name)
        gen_dcp.write_dcp(folder, sd, world=1, replicated_rank=0, expected=False, layout="safetensors")
        path = os.path.join(folder, "__0_0.distcp")
        data = open(path, "rb").read()
        start = dcp_metadata(folder).storage_data[gen_dcp.MetadataIndex("w", torch.Size([0, 0]))].offset
        n = int.from_bytes(data[start:start + 8], "little")
        header = json.loads(data[start + 8:start + 8 + n])
        bend(header)
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        open(path, "wb").write(data[:start] + len(text).to_bytes(8, "little") + text + data[start + 8 + n:])

    def moved(header):
        header["__metadata__"]["DCP_SHARDING_INFO"] = json.dumps({"w": {"saved_offsets": [1, 0]}})

    def reshaped(header):
        header["w"]["shape"] = [4, 3]

    def no_info(header):
        del header["__metadata__"]["DCP_SHARDING_INFO"]

    def past_end(header):
        header["w"]["data_offsets"] = [0, 1 << 40]

    safetensors_set("dcp_safetensors_moved", moved)
    safetensors_set("dcp_safetensors_reshaped", reshaped)
    safetensors_set("dcp_safetensors_no_info", no_info)
    safetensors_set("dcp_safetensors_past_end", past_end)


def write_safetensors(path, tensors):
    """A safetensors file by hand: tensors is [(name, dtype, shape, bytes)], in that order."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(t[3] for t in tensors))


def model_config_sets(out):
    """A model folder (model.safetensors and the config.json of a tied Llama) and an FP8
    block-quantized one (a float8_e4m3fn weight of [256, 256], its [2, 2] weight_scale_inv and a
    FineGrainedFP8Config quantization_config, weight_block_size [128, 128]): the test replaces each
    config.json with a hostile one (tst_hostile_sets hostileConfigJson)."""
    one = b"\x00\x00\x80\x3f"  # float32 1.0, little-endian
    plain = os.path.join(out, "cfg_model")
    os.makedirs(plain)
    write_safetensors(os.path.join(plain, "model.safetensors"), [
        ("model.embed_tokens.weight", "F32", [8, 4], one * 32),
        ("model.norm.weight", "F32", [4], one * 4),
    ])
    with open(os.path.join(plain, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "tie_word_embeddings": True}, f)
    fp8 = os.path.join(out, "cfg_fp8")
    os.makedirs(fp8)
    write_safetensors(os.path.join(fp8, "model.safetensors"), [
        ("model.embed_tokens.weight", "F32", [8, 4], one * 32),
        ("model.layers.0.mlp.up_proj.weight", "F8_E4M3", [256, 256], b"\x38" * 65536),  # 1.0 each
        ("model.layers.0.mlp.up_proj.weight_scale_inv", "F32", [2, 2], one * 4),
    ])
    with open(os.path.join(fp8, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "tie_word_embeddings": False,
                   "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                           "weight_block_size": [128, 128]}}, f, indent=2)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: hostile_sets.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    hf_sets(out)
    hf_total_sizes(out)
    hf_huge_index(out)
    dcp_sets(out)
    dcp_layout_sets(out)
    dcp_many_chunks(out)
    zero_sets(out)
    fsdp_sets(out)
    hostile_code_sets(out)
    getattr_files(out)
    tar_files(out)
    tar_view_bomb(out)
    control_names(out)
    script_sources_bomb(out)
    many_members(out)
    dcp_memory_bombs(out)
    gzip_sparse_hole(out)
    model_config_sets(out)
    print("hostile sets written to", out)


if __name__ == "__main__":
    main()
