#!/usr/bin/python3
"""Every real checkpoint of a corpus through ckptscope, held against PyTorch 1.13.

    corpus_check.py CKPTSCOPE CORPUS_DIR WORK_DIR [--known FILE] [--only NAME]

For each file under CORPUS_DIR (recursively; SOURCES.tsv and .json files are skipped):
1. `ckptscope inspect --json` against PyTorch's own view of the file, read by a stubbing unpickler:
   torch's rebuild functions, storage classes, dtypes, OrderedDict and the other globals of
   PyTorch 2.6's weights_only allowlist are the real ones; every other GLOBAL becomes an inert
   stand-in class that only records its arguments and state (nothing the file names is imported or
   run). Storages are read as torch.load reads them (zip records, the legacy stream). Compared per
   tensor: path, dtype, shape, stride, storage offset, saved location and the bytes (C order).
   A file both sides refuse passes ("both refuse").
2. `ckptscope check --json` and `ckptscope convert --single-card --dry-run --json` must agree about
   weights_only: the `not-weights-only` finding is there exactly when the plan drops or converts a
   value for weights_only (or unwraps a pickled module), or the file needs only re-pickling at
   protocol 2 (opcodes the weights-only unpickler lacks).
3. `ckptscope convert --single-card` writes a file that loads under PyTorch 2.6's weights_only
   rules (torch_oracle.WeightsOnly26Unpickler: 2.6's allowlist and opcode set; torch 1.13's own
   weights_only=True refuses every float, so it cannot be the judge) with every storage tagged
   `cpu`, so torch.load needs no map_location on a CPU-only machine, and keeps the bytes of every
   tensor a state dict keeps (a module's plain tensor attributes may go, as model.state_dict()
   drops them): matched by dtype, shape and bytes, since unwrapping renames them.

A TorchScript archive (a zip with constants.pkl) is held instead against
torch.jit.load(f).state_dict(): inspect's `torchscript.state_dict` (keys in order, dtype, shape,
the bytes ckptscope locates) and the converted file (the same keys and values under 2.6's rules).

Prints one line per file, PASS or FAIL with the reasons, and a summary. Files named in --known
(one `NAME<TAB>reason` a line) may fail; a known file that passes is reported. Exit 0 when every
other file passes, 1 otherwise.
"""
import collections
import gzip
import hashlib
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

import torch  # noqa: E402
import torch_oracle as oracle  # noqa: E402

SKIP_SUFFIXES = (".json", ".tsv", ".txt", ".md")

# Callables besides 2.6's allowlist that are safe to call on the file's arguments.
SAFE_EXTRA = {
    "builtins.frozenset": frozenset,
    "builtins.bytes": bytes,
    "builtins.slice": slice,
    "builtins.range": range,
    "builtins.object": object,
    "torch._utils._rebuild_sparse_csr_tensor": getattr(torch._utils, "_rebuild_sparse_csr_tensor", None),
}


class Stand_in:  # noqa: N801 (the name shows in reprs)
    """An instance of a class the file names: its arguments, state and items, inert."""

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        object.__setattr__(self, "_ckpt_args", args)
        object.__setattr__(self, "_ckpt_items", [])
        object.__setattr__(self, "_ckpt_list", [])
        return self

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
            state = dict(state[0] or {}, **(state[1] or {}))
        if isinstance(state, dict):
            for k, v in state.items():
                self.__dict__[k] = v
        else:
            object.__setattr__(self, "_ckpt_state", state)

    def __setitem__(self, k, v):
        self._ckpt_items.append((k, v))

    def append(self, v):
        self._ckpt_list.append(v)

    def extend(self, vs):
        self._ckpt_list.extend(vs)


_stand_ins = {}


def stand_in(module, name):
    key = (module, name)
    if key not in _stand_ins:
        _stand_ins[key] = type(name, (Stand_in,), {"__module__": module, "__qualname__": name})
    return _stand_ins[key]


def reconstructor(cls, base, state):
    """copyreg._reconstructor without running any class: the object is a stand-in."""
    obj = cls.__new__(cls) if isinstance(cls, type) and issubclass(cls, Stand_in) else Stand_in.__new__(Stand_in)
    return obj


class StubUnpickler(pickle.Unpickler):
    def __init__(self, stream, persistent_load):
        super().__init__(stream, encoding="utf-8")
        self._pid = persistent_load

    def find_class(self, module, name):
        full = oracle.py3_global(module, name)
        if full in oracle.ALLOWED_26:
            return oracle.ALLOWED_26[full]
        if SAFE_EXTRA.get(full) is not None:
            return SAFE_EXTRA[full]
        if full == "copyreg._reconstructor":
            return reconstructor
        mod, _, short = full.rpartition(".")
        return stand_in(mod, short)

    def persistent_load(self, pid):
        return self._pid(pid)


class TorchScriptArchive(Exception):
    """torch.load reads it through torch.jit.load: its tensors are real, not a refusal."""


class Storages:
    """Storages as torch.load builds them, with the location each was saved with."""

    def __init__(self):
        self.by_key = {}
        self.location = {}  # untyped storage _cdata -> saved location

    def add(self, key, typed, location):
        self.by_key[key] = typed
        self.location[oracle.untyped_storage_of(typed)._cdata] = location
        return typed


def stub_load_zip(path, blob=None):
    records = oracle.zip_records(path) if blob is None else zip_records_from(blob)
    names = list(records)
    folder = names[0].split("/", 1)[0]
    st = Storages()

    def pid(p):
        if p[0] == "module":
            return p[1]
        _, storage_type, key, location, _numel = p
        if key not in st.by_key:
            st.add(key, oracle._typed_storage_from(records[f"{folder}/data/{key}"], storage_type), location)
        return st.by_key[key]

    return StubUnpickler(io.BytesIO(records[f"{folder}/data.pkl"]), pid).load(), st


def zip_records_from(blob):
    out = {}
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        for info in z.infolist():
            out[info.filename] = z.read(info)
    return out


def stub_load_legacy(blob):
    stream = io.BytesIO(blob)

    def no_pid(_p):
        raise pickle.UnpicklingError("persistent id outside the main pickle")

    magic = StubUnpickler(stream, no_pid).load()
    if magic != 0x1950A86A20F9469CFC6C:
        raise pickle.UnpicklingError("Invalid magic number; corrupt file?")
    if StubUnpickler(stream, no_pid).load() != 1001:
        raise pickle.UnpicklingError("Invalid protocol version")
    StubUnpickler(stream, no_pid).load()
    st = Storages()
    views = {}

    def pid(p):
        if p[0] == "module":
            return p[1]
        _, storage_type, root_key, location, numel, view = p
        if root_key not in st.by_key:
            dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
            st.add(root_key, torch.empty(numel, dtype=dtype).storage(), location)
        typed = st.by_key[root_key]
        if view is not None:
            view_key, offset, view_size = view
            if view_key not in views:
                views[view_key] = typed[offset:offset + view_size]
                st.location[oracle.untyped_storage_of(views[view_key])._cdata] = location
            return views[view_key]
        return typed

    result = StubUnpickler(stream, pid).load()
    keys = StubUnpickler(stream, no_pid).load()
    for key in keys:
        (count,) = struct.unpack("<q", stream.read(8))
        typed = st.by_key[key]
        nbytes = count * typed.element_size()
        data = stream.read(nbytes)
        if len(data) != nbytes:
            raise EOFError("storage data ends early")
        if nbytes:
            src = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            torch.empty(0, dtype=torch.uint8).set_(oracle.untyped_storage_of(typed)).copy_(src)
    # views were sliced before the bytes arrived; slices of an untyped storage share its memory
    return result, st


def file_bytes(path):
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:2] == b"\x1f\x8b":
        blob = gzip.decompress(blob)
    return blob


def is_torchscript(path):
    blob = file_bytes(path)
    if blob[:4] != b"PK\x03\x04":
        return False
    try:
        return any(n.endswith("/constants.pkl") for n in zip_records_from(blob))
    except zipfile.BadZipFile:
        return False  # a damaged zip: the ordinary check says how both sides take it


def stub_load(path):
    blob = file_bytes(path)
    if blob[:4] == b"PK\x03\x04":
        if any(n.endswith("/constants.pkl") for n in zip_records_from(blob)):
            raise TorchScriptArchive("a TorchScript archive: torch.load hands it to torch.jit.load")
        return stub_load_zip(path, blob)
    if len(blob) > 9 and blob[8:9] == b"{":
        tensors, _ = oracle.read_safetensors(path)
        st = Storages()
        for t in tensors.values():
            st.location[oracle.untyped_storage_of(t.storage())._cdata] = "cpu"
        return tensors, st
    return stub_load_legacy(blob)


def key_text(k):
    """torch_oracle's key text, except that a class key reads as its qualified name, as ckptscope
    shows it (repr() would be "<class 'x.Y'>")."""
    if isinstance(k, type):
        return f"{k.__module__}.{k.__qualname__}"
    return oracle.key_text(k)


def walk(obj, path="", out=None, optional=False, active=None):
    """(path, tensor, optional) in ckptscope's key-path scheme; `optional`: a module's plain attribute."""
    if out is None:
        out, active = [], set()
    if isinstance(obj, torch.Tensor):
        out.append((path, obj, optional))
        return out
    if isinstance(obj, oracle.SCALAR_TYPES) or isinstance(obj, (set, frozenset, type)):
        return out
    if id(obj) in active:
        return out
    active.add(id(obj))
    if isinstance(obj, dict):
        for k, v in obj.items():
            walk(v, oracle.join(path, key_text(k)), out, optional, active)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk(v, oracle.join(path, str(i)), out, optional, active)
    elif isinstance(obj, Stand_in):
        attrs = vars(obj)
        module = "_parameters" in attrs and "_modules" in attrs
        transient = set(attrs.get("_non_persistent_buffers_set", ()) or ()) if module else set()
        for k, v in attrs.items():
            sub = oracle.join(path, key_text(k))
            if module and k in ("_parameters", "_buffers") and isinstance(v, dict):
                active.add(id(v))
                for name, t in v.items():
                    walk(t, oracle.join(sub, key_text(name)), out,
                         optional or (k == "_buffers" and name in transient), active)
                active.discard(id(v))
            else:
                walk(v, sub, out, optional or (module and k != "_modules"), active)
        for k, v in obj._ckpt_items:
            walk(v, oracle.join(path, key_text(k)), out, optional, active)
        for i, v in enumerate(obj._ckpt_list):
            walk(v, oracle.join(path, str(i)), out, optional, active)
    active.discard(id(obj))
    return out


def sha(t):
    raw = oracle.element_bytes(t)
    return None if raw is None else hashlib.sha256(raw).hexdigest()


def oracle_tensors(path):
    value, st = stub_load(path)
    rows = []
    for p, t, optional in walk(value):
        row = {"path": p, "dtype": oracle.dtype_name(t.dtype), "shape": list(t.shape), "optional": optional,
               "sha": sha(t)}
        if t.is_sparse or t.is_meta or t.is_quantized:
            row.update(stride=None, offset=None, location=None)
            if t.is_quantized:
                row.update(location=st.location.get(oracle.untyped_storage_of(t.storage())._cdata))
        else:
            row.update(stride=list(t.stride()), offset=t.storage_offset(),
                       location=st.location.get(oracle.untyped_storage_of(t.storage())._cdata))
        rows.append(row)
    return rows


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def ckptscope_tensor_sha(blob, info, storages, records, t):
    """The tensor's bytes as ckptscope locates them: its storage's bytes, viewed by its geometry."""
    if t.get("layout") or t["storage"] is None:
        return None
    s = storages[t["storage"]]
    data = records[s["record"]] if s.get("record") else blob[s["file_offset"]:s["file_offset"] + s["nbytes"]]
    dtype = getattr(torch, t["dtype"])
    if s["nbytes"] == 0 or t["numel"] == 0:
        view = torch.empty(t["shape"], dtype=dtype)
    else:
        flat = torch.frombuffer(bytearray(data[:s["nbytes"]]), dtype=getattr(torch, s["dtype"]))
        view = flat.view(dtype).as_strided(t["shape"], t["stride"], t["storage_offset"])
    return sha(view)


def compare_inspect(path, info, expect):
    problems = []
    blob = file_bytes(path)
    records = zip_records_from(blob) if blob[:4] == b"PK\x03\x04" else {}
    storages = {s["key"]: s for s in info["storages"]}
    mine = {t["path"]: t for t in info["tensors"]}
    theirs = {r["path"]: r for r in expect}
    missing = sorted(set(theirs) - set(mine))
    extra = sorted(set(mine) - set(theirs))
    if missing:
        problems.append(f"{len(missing)} tensor(s) torch sees are missing, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} tensor(s) torch does not see, e.g. {extra[:3]}")
    for p in sorted(set(mine) & set(theirs)):
        m, r = mine[p], theirs[p]
        for field, ours in (("dtype", m["dtype"]), ("shape", m["shape"]), ("stride", m["stride"]),
                            ("offset", m["storage_offset"]), ("location", m["location"])):
            if r[field] is not None and r[field] != ours:
                problems.append(f"{p}: {field} {ours!r}, torch {r[field]!r}")
        if r["sha"] is not None and not m.get("layout"):
            try:
                got = ckptscope_tensor_sha(blob, info, storages, records, m)
            except Exception as e:  # noqa: BLE001 - reported as a difference
                got = f"unreadable ({e})"
            if got != r["sha"]:
                problems.append(f"{p}: bytes differ from torch's")
    return problems


def weights_only_plan_changes(plan):
    reasons = []
    for s in plan["steps"]:
        detail = s["detail"] + " " + s["after"]
        if s["kind"] in ("drop", "convert") and ("weights_only" in detail or "numpy" in s["before"]):
            reasons.append(f"{s['kind']} {s['path']}")
        elif s["kind"] == "unwrap":
            reasons.append(f"unwrap {s['path']}")
    return reasons


def load_converted(out_path):
    """The converted file under 2.6's weights_only rules; every storage must be tagged cpu."""
    locations = set()
    records = oracle.zip_records(out_path)
    folder = next(iter(records)).split("/", 1)[0]
    loaded = {}

    def pid(p):
        _, storage_type, key, location, _numel = p
        locations.add(location)
        if key not in loaded:
            loaded[key] = oracle._typed_storage_from(records[f"{folder}/data/{key}"], storage_type)
        return loaded[key]

    value = oracle.WeightsOnly26Unpickler(records[f"{folder}/data.pkl"], pid).load()
    return value, locations


def located_bytes(blob, info, path):
    """The C-order bytes ckptscope locates for the tensor at key path `path`."""
    storages = {s["key"]: s for s in info["storages"]}
    records = zip_records_from(blob)
    t = next(t for t in info["tensors"] if t["path"] == path)
    return ckptscope_tensor_sha(blob, info, storages, records, t)


def check_torchscript(tool, path, work, name):
    """A TorchScript archive against torch.jit.load(f).state_dict(): inspect's state dict (keys in
    order, dtype, shape, the bytes ckptscope locates) and the converted file under 2.6's weights_only
    rules (the same keys and values)."""
    try:
        want = torch.jit.load(path, map_location="cpu").state_dict()
    except Exception as e:  # noqa: BLE001 - torch's refusal is a result
        return [f"torch 1.13's torch.jit.load cannot load it ({type(e).__name__}: {str(e).strip()[:100]})"], []
    rc_i, out_i, err_i = run([tool, "inspect", "--json", path])
    if rc_i != 0:
        return [f"inspect failed where torch.jit.load reads it: {err_i.strip()[:200]}"], []
    info = json.loads(out_i)
    ts = info.get("torchscript", {})
    if "state_dict" not in ts:
        return [f"no TorchScript state dict: {ts.get('error', 'missing')}"], []
    problems = []
    rows = ts["state_dict"]
    if [r["key"] for r in rows] != list(want):
        problems.append(f"state-dict keys differ: {[r['key'] for r in rows][:4]} vs torch {list(want)[:4]}")
    blob = file_bytes(path)
    for r in rows:
        w = want.get(r["key"])
        if w is None:
            continue
        if r["dtype"] != oracle.dtype_name(w.dtype) or r["shape"] != list(w.shape):
            problems.append(f"{r['key']}: {r['dtype']} {r['shape']}, torch {w.dtype} {list(w.shape)}")
        elif located_bytes(blob, info, r["path"]) != sha(w):
            problems.append(f"{r['key']}: bytes differ from torch's")
    out_path = os.path.join(work, name.replace("/", "__") + ".converted.pt")
    rc_w, _out_w, err_w = run([tool, "convert", "--single-card", path, "-o", out_path])
    if rc_w != 0:
        return problems + [f"convert --single-card fails: {err_w.strip()[:240]}"], []
    try:
        value, locations = load_converted(out_path)
    except Exception as e:  # noqa: BLE001
        return problems + [f"the converted file does not load under 2.6's weights_only: {type(e).__name__}: {e}"], []
    if locations - {"cpu"}:
        problems.append(f"the converted file keeps storages on {sorted(locations - {'cpu'})}")
    if list(value) != list(want) or any(value[k].dtype != w.dtype or not torch.equal(value[k], w)
                                        for k, w in want.items()):
        problems.append("the converted file is not torch.jit.load(f).state_dict()")
    left = len(ts.get("left_out", []))
    return problems, [f"TorchScript: {len(want)} state-dict tensors match torch.jit.load" +
                      (f", {left} packed/getstate value(s) named as dropped" if left else "")]


def check_file(tool, path, work, name):
    problems = []
    notes = []
    if is_torchscript(path):
        return check_torchscript(tool, path, work, name)
    rc_i, out_i, err_i = run([tool, "inspect", "--json", path])
    try:
        expect = oracle_tensors(path)
        torch_error = None
    except TorchScriptArchive as e:
        if rc_i != 0:
            return [f"{e}, whose parameters ckptscope does not read: {err_i.strip()[:120]}"], notes
        expect, torch_error = None, str(e)
    except Exception as e:  # noqa: BLE001 - torch's refusal is a result
        expect, torch_error = None, f"{type(e).__name__}: {e}"
    if rc_i != 0:
        if torch_error is not None:
            return [], [f"both refuse (ckptscope: {err_i.strip()[:160]}; torch: {torch_error[:120]})"]
        return [f"inspect failed where torch reads it: {err_i.strip()[:200]}"], notes
    info = json.loads(out_i)
    if torch_error is not None:
        # A zip cut off before its central directory: ckptscope salvages what its local headers hold,
        # but it must call the file broken (truncated-archive) and convert must refuse it as it is.
        rc_c, out_c, _ = run([tool, "check", "--json", path])
        codes = [f["code"] for f in json.loads(out_c)["findings"]] if rc_c in (0, 1) and out_c else []
        if "truncated-archive" in codes:
            rc_v, _, err_v = run([tool, "convert", path, "-o", os.path.join(work, name + ".salvage.pt")])
            if rc_v != 2:
                return [f"convert of a truncated archive did not refuse it (rc {rc_v})"], notes
            return [], [f"both call it broken (ckptscope: truncated-archive, salvaged read-only; "
                        f"torch: {torch_error[:100]})"]
        return [f"torch's reader fails ({torch_error[:160]}) where ckptscope reads it"], notes
    problems += compare_inspect(path, info, expect)
    notes.append(f"{len(expect)} tensors match" if not problems else f"{len(expect)} tensors")

    rc_c, out_c, err_c = run([tool, "check", "--json", path])
    if rc_c not in (0, 1):
        problems.append(f"check failed: {err_c.strip()[:200]}")
        return problems, notes
    findings = json.loads(out_c)
    findings = findings.get("findings", findings) if isinstance(findings, dict) else findings
    wo = [f for f in findings if f["code"] == "not-weights-only"]
    rc_p, out_p, err_p = run([tool, "convert", "--single-card", "--dry-run", "--json", path])
    if rc_p != 0:
        problems.append(f"convert --single-card fails: {err_p.strip()[:240]}")
        return problems, notes
    plan = json.loads(out_p)
    changes = weights_only_plan_changes(plan)
    opcode_only = bool(wo) and "opcodes" in wo[0]["detail"] and "outside the default allowlist" not in wo[0]["detail"]
    if changes and not wo:
        problems.append(f"convert changes values for weights_only ({changes[:3]}) but check reports no "
                        "not-weights-only")
    if wo and not changes and not opcode_only and "persistent ids" not in wo[0]["detail"]:
        problems.append("check reports not-weights-only but the weights-only plan changes nothing")

    out_path = os.path.join(work, name.replace("/", "__") + ".converted.pt")
    rc_w, out_w, err_w = run([tool, "convert", "--single-card", path, "-o", out_path])
    if rc_w != 0:
        problems.append(f"convert --single-card fails: {err_w.strip()[:240]}")
        return problems, notes
    try:
        value, locations = load_converted(out_path)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the converted file does not load under 2.6's weights_only: {type(e).__name__}: {e}")
        return problems, notes
    if locations - {"cpu"}:
        problems.append(f"the converted file keeps storages on {sorted(locations - {'cpu'})}: needs map_location")
    kept = collections.Counter()
    for _p, t, _opt in walk(value):
        kept[(oracle.dtype_name(t.dtype), tuple(t.shape), sha(t))] += 1
    lost = []
    for r in expect:
        if r["optional"] or r["sha"] is None:
            continue
        k = (r["dtype"], tuple(r["shape"]), r["sha"])
        if kept[k] > 0:
            continue
        lost.append(r["path"])
    if lost:
        problems.append(f"the converted file lost {len(lost)} state-dict tensor(s), e.g. {lost[:3]}")
    notes.append(f"converted: {plan['tensors']} tensors, {plan.get('dropped', 0)} dropped")
    return problems, notes


def corpus_files(root):
    for dirpath, _dirs, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(SKIP_SUFFIXES) or f == "latest":
                continue
            full = os.path.join(dirpath, f)
            yield os.path.relpath(full, root), full


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    tool, root, work = argv[:3]
    known = {}
    only = None
    rest = argv[3:]
    while rest:
        if rest[0] == "--known":
            with open(rest[1], encoding="utf-8") as f:
                for line in f:
                    if line.strip() and not line.startswith("#"):
                        n, _, why = line.rstrip("\n").partition("\t")
                        known[n] = why
            rest = rest[2:]
        elif rest[0] == "--only":
            only = rest[1]
            rest = rest[2:]
        else:
            print(f"unknown argument {rest[0]}")
            return 2
    os.makedirs(work, exist_ok=True)
    passed, failed, known_failed = [], [], []
    for name, full in corpus_files(root):
        if only and only not in name:
            continue
        try:
            problems, notes = check_file(tool, full, work, name)
        except Exception as e:  # noqa: BLE001 - one file's crash is that file's failure
            problems, notes = [f"corpus check crashed: {type(e).__name__}: {e}"], []
        if problems:
            tag = "KNOWN" if name in known else "FAIL"
            (known_failed if name in known else failed).append(name)
            print(f"{tag} {name}: " + "; ".join(problems[:6]) + (f" [{known[name]}]" if name in known else ""))
        else:
            passed.append(name)
            print(f"PASS {name}" + (f" ({'; '.join(notes)})" if notes else "") +
                  (" [listed as known failure: remove it]" if name in known else ""))
        sys.stdout.flush()
    print(f"corpus: {len(passed)} pass, {len(failed)} fail, {len(known_failed)} known failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
