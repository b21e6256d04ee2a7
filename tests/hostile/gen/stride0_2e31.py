#!/usr/bin/env python3
"""Writes OUTDIR/stride0_2e31.pt: one float32 storage of a single element viewed as shape (2**31,)
stride (0,), an expanded view whose C-order bytes are 8 GiB while the file holds 4 of them.

Usage: stride0_2e31.py OUTDIR

The pickle is written by hand (as /work/shared/adversarial/r_stride0.py does for 2**40) so the
generator needs no torch and the view is exactly what torch.save writes for
torch.zeros(1).expand(2**31): {'w': _rebuild_tensor_v2(storage, 0, (2**31,), (0,), False, {})}.
"""
import os
import struct
import sys
import zipfile

NUMEL = 2 ** 31


def unicode_op(b):
    return b"X" + struct.pack("<I", len(b)) + b


def long8_op(n):
    # LONG1 with 8 bytes: 2**31 does not fit BININT's signed 32 bits.
    return b"\x8a\x08" + n.to_bytes(8, "little")


def pickle_bytes():
    persistent_id = (b"(" + unicode_op(b"storage") + b"ctorch\nFloatStorage\n" + unicode_op(b"0") +
                     unicode_op(b"cpu") + b"K\x01tQ")
    return (b"\x80\x02}" + unicode_op(b"w") + b"ctorch._utils\n_rebuild_tensor_v2\n(" + persistent_id +
            b"K\x00(" + long8_op(NUMEL) + b"t(K\x00t\x89ccollections\nOrderedDict\n)Rt" + b"Rs.")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: stride0_2e31.py OUTDIR")
    os.makedirs(sys.argv[1], exist_ok=True)
    out = os.path.join(sys.argv[1], "stride0_2e31.pt")
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("stride0_2e31/data.pkl", pickle_bytes())
        z.writestr("stride0_2e31/data/0", struct.pack("<f", 1.5))
        z.writestr("stride0_2e31/version", "3\n")
    print(out)


if __name__ == "__main__":
    main()
