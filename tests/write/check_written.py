#!/usr/bin/python3
"""Independent checks of files ckptscope wrote, with real PyTorch and Python's zipfile.

    check_written.py torch SRC OUT [SRC OUT ...]
                                        OUT loads with torch.load and equals SRC value by value:
                                        tensors (bytes, dtype, shape, stride, storage offset,
                                        requires_grad, Parameter), which tensors share a storage,
                                        which values are the same object, OrderedDict _metadata,
                                        every other value, and the saved locations; OUT is a zip
                                        that zipfile.testzip() accepts, stored only, records in
                                        torch's order with 64-byte aligned payloads.

Prints `OUT: ok ...` per pair and exits 0, or prints every difference and exits 1.
"""
import collections
import math
import os
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch_oracle  # noqa: E402


def load(path):
    if torch_oracle.detect_format(path) == "safetensors":
        # a safetensors source: its tensors by name (file order is not part of its meaning), on cpu
        sd, _ = torch_oracle.read_safetensors(path)
        return collections.OrderedDict(sorted(sd.items())), ["cpu"] * len(sd)
    locations = []

    def remember(storage, location):
        locations.append(location)
        return storage

    obj = torch.load(path, map_location=remember)
    return obj, sorted(locations)


class Comparer:
    def __init__(self):
        self.problems = []
        self.same_object = {}    # id(a) -> id(b): sharing in A must be sharing in B
        self.same_storage = {}   # storage ptr in A -> storage ptr in B
        self.tensors = 0
        self.keep = []           # keep compared objects alive so ids stay unique

    def problem(self, path, text):
        self.problems.append(f"{path or '<root>'}: {text}")

    def identity(self, path, a, b):
        self.keep.append((a, b))
        seen = self.same_object.get(id(a))
        if seen is None:
            self.same_object[id(a)] = id(b)
            return False
        if seen != id(b):
            self.problem(path, "the same object in the source is a different object in the output")
        return True

    def tensor(self, path, a, b):
        self.tensors += 1
        for field in ("dtype", "shape", "requires_grad", "is_quantized", "is_sparse", "is_meta"):
            if getattr(a, field) != getattr(b, field):
                self.problem(path, f"{field} {getattr(a, field)} != {getattr(b, field)}")
                return
        if a.is_sparse or a.is_meta:
            if a.is_sparse and not torch.equal(a.to_dense(), b.to_dense()):
                self.problem(path, "sparse values differ")
            return
        if a.stride() != b.stride() or a.storage_offset() != b.storage_offset():
            self.problem(path, f"view {a.stride()}+{a.storage_offset()} != {b.stride()}+{b.storage_offset()}")
        if a.is_quantized:
            if a.qscheme() != b.qscheme() or not torch.equal(a.int_repr(), b.int_repr()):
                self.problem(path, "quantized values differ")
            return
        if torch_oracle.element_bytes(a) != torch_oracle.element_bytes(b):
            self.problem(path, "element bytes differ")
        sa, sb = a.storage(), b.storage()
        if sa.nbytes() != sb.nbytes():
            self.problem(path, f"storage holds {sb.nbytes()} bytes, source {sa.nbytes()}")
        if sa.nbytes() > 0:
            pa, pb = sa.data_ptr(), sb.data_ptr()
            if self.same_storage.setdefault(pa, pb) != pb:
                self.problem(path, "tensors sharing a storage in the source do not share it in the output")
            if sa.nbytes() <= (1 << 20) and sa._storage.tolist() != sb._storage.tolist():
                self.problem(path, "storage bytes differ")

    def compare(self, path, a, b):
        if type(a) is not type(b):
            self.problem(path, f"type {type(a).__name__} != {type(b).__name__}")
            return
        if isinstance(a, torch.Tensor):
            if not self.identity(path, a, b):
                self.tensor(path, a, b)
            return
        if isinstance(a, dict):
            if self.identity(path, a, b):
                return
            if list(a.keys()) != list(b.keys()):
                self.problem(path, f"keys {list(a.keys())[:8]} != {list(b.keys())[:8]}")
                return
            self.compare(path + "/_metadata", getattr(a, "_metadata", None), getattr(b, "_metadata", None))
            for k in a:
                self.compare(f"{path}/{k}" if path else str(k), a[k], b[k])
            return
        if isinstance(a, (list, tuple)):
            if isinstance(a, list) and self.identity(path, a, b):
                return
            if len(a) != len(b):
                self.problem(path, f"length {len(a)} != {len(b)}")
                return
            for i, (x, y) in enumerate(zip(a, b)):
                self.compare(f"{path}/{i}", x, y)
            return
        if isinstance(a, np.ndarray) or isinstance(a, np.generic):
            if a.dtype != b.dtype or np.shape(a) != np.shape(b) or a.tobytes() != b.tobytes():
                self.problem(path, f"numpy value {a!r} != {b!r}")
            return
        if isinstance(a, float):
            if not (a == b or (math.isnan(a) and math.isnan(b))):
                self.problem(path, f"{a!r} != {b!r}")
            return
        if isinstance(a, (type(None), bool, int, str, bytes, bytearray, complex, set, frozenset, torch.dtype,
                          torch.device, torch.Size, type)):
            if a != b:
                self.problem(path, f"{a!r} != {b!r}")
            return
        if hasattr(a, "__dict__"):
            if self.identity(path, a, b):
                return
            self.compare(path, vars(a), vars(b))
            return
        if a != b:
            self.problem(path, f"{a!r} != {b!r}")


LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")


def check_zip(path, problems):
    # torch's rule: the basename without its last extension (`.pt` -> ""), `archive` when empty
    base = os.path.basename(path)
    folder = (base[:base.rindex(".")] if "." in base else base) or "archive"
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        if bad is not None:
            problems.append(f"zipfile.testzip: bad CRC in {bad}")
        infos = z.infolist()
        names = [i.filename for i in infos]
        data = [n for n in names if n.startswith(folder + "/data/")]
        expected = [folder + "/data.pkl", folder + "/byteorder"] + data + [folder + "/version"]
        if names != expected:
            problems.append(f"records {names[:6]}... not in torch's order under {folder}/")
        if z.read(folder + "/version") != b"3\n":
            problems.append("version record is not '3\\n'")
        with open(path, "rb") as f:
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED:
                    problems.append(f"{info.filename} is compressed")
                f.seek(info.header_offset)
                fields = LOCAL_HEADER.unpack(f.read(LOCAL_HEADER.size))
                start = info.header_offset + LOCAL_HEADER.size + fields[9] + fields[10]
                if start % 64 != 0:
                    problems.append(f"{info.filename} payload at {start}, not 64-byte aligned")
    return len(names)


def cmd_torch(pairs):
    failed = 0
    for src, out in pairs:
        try:
            problems, summary = check_pair(src, out)
        except Exception as e:  # noqa: BLE001
            problems, summary = [f"{type(e).__name__}: {e}"], ""
        for p in problems[:40]:
            print(f"{out} (from {os.path.basename(src)}): {p}")
        if problems:
            failed += 1
        else:
            print(f"{out}: ok {summary}")
    return 1 if failed else 0


def check_pair(src, out):
    a, la = load(src)
    b, lb = load(out)
    if torch_oracle.detect_format(src) == "safetensors":
        b = collections.OrderedDict(sorted(b.items()))
    c = Comparer()
    c.compare("", a, b)
    if la != lb:
        c.problems.append(f"saved locations {la[:8]} != {lb[:8]}")
    records = check_zip(out, c.problems)
    return c.problems, f"{c.tensors} tensors, {records} records"


def main(argv):
    import warnings
    warnings.simplefilter("ignore")
    if len(argv) >= 4 and len(argv) % 2 == 0 and argv[1] == "torch":
        return cmd_torch(list(zip(argv[2::2], argv[3::2])))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
