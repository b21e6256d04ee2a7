#!/usr/bin/env python3
"""Writes the files tests/hostile/tst_hostile_remote serves over loopback (issue 38, third pass).

Usage: remote_files.py OUTDIR

- legacy_forged_count.pt: a legacy torch.save stream (PyTorch < 1.6's format) of six 128 KiB
  tensors in which the second record holds 4 elements more than its pickle declares, and the
  8 bytes where the pickle says the third record starts hold the third record's declared count. A
  remote read stands each count in its image as the pickle declares it (the records themselves
  are not fetched), and checked only the record it read: the third tensor came from 16 bytes too
  early, with exit 0. Read from disk, the file is valid (a record may hold more than its tensors
  view), and the third tensor is what was saved.
  legacy_forged_count.victim names that tensor.
- legacy.pt: the same tensors, unforged; zip.pt: the same in today's zip format, which the
  transport tests serve. Each is under 1 MiB, the fuzzer's longest input (scripts/fuzz.sh seeds
  fuzz_remote with them), and longer than the 64 KiB a remote read fetches first.
"""
import collections
import os
import pickle
import struct
import sys

import torch


def records_start(path):
    """Where a legacy stream's first storage record starts (after its five pickles: the magic
    number, the protocol version, the system info, the object, the storage key list), the keys in
    record order, and each tensor's storage key."""
    with open(path, "rb") as f:
        for _ in range(3):
            pickle.load(f)

        class Keys(pickle.Unpickler):
            def find_class(self, module, name):
                if name.startswith("_rebuild"):
                    return lambda storage, *a: storage
                return super().find_class(module, name)

            def persistent_load(self, pid):
                return pid[2]  # ('storage', type, key, location, size)

        storage_of = Keys(f).load()
        keys = pickle.load(f)
        return f.tell(), keys, storage_of


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sd = collections.OrderedDict((f"layer{i}.weight", torch.arange(32768, dtype=torch.float32) + i) for i in range(6))
    plain = os.path.join(out, "legacy.pt")
    torch.save(sd, plain, _use_new_zipfile_serialization=False)
    torch.save(sd, os.path.join(out, "zip.pt"))
    data = bytearray(open(plain, "rb").read())
    at, keys, storage_of = records_start(plain)
    assert len(keys) == 6, keys
    second = at + 8 + struct.unpack_from("<q", data, at)[0] * 4
    count = struct.unpack_from("<q", data, second)[0]
    third = second + 8 + count * 4  # where the pickle (and a remote read) puts the third record
    third_count = struct.unpack_from("<q", data, third)[0]
    # Four more elements in the second record: the first two hold the third's declared count.
    struct.pack_into("<q", data, second, count + 4)
    data[third:third] = struct.pack("<qq", third_count, 0)
    with open(os.path.join(out, "legacy_forged_count.pt"), "wb") as f:
        f.write(bytes(data))
    # The tensor whose record is the third: the one a remote read took from the wrong place.
    victim = next(name for name, key in storage_of.items() if key == keys[2])
    with open(os.path.join(out, "legacy_forged_count.victim"), "w") as f:
        f.write(victim)


if __name__ == "__main__":
    main()
