#!/usr/bin/env python3
"""Writes upper.pt: a torch zip archive whose pickle names storages `data/<i>` while the records
are called `a/DATA/<i>`, so every storage is found only by the case-insensitive fallback (miniz,
torch's reader, compares names case-insensitively). 120k storages, ~15 MB. Issue 16: the fallback
was a linear scan per lookup, 40 s for this file.

Usage: big_upper_zip.py OUT_DIR [N]"""
import os
import struct
import sys
import zipfile

out_dir = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 120_000
os.makedirs(out_dir, exist_ok=True)


def S(b):  # BINUNICODE
    return b'X' + struct.pack('<I', len(b)) + b


# [FloatStorage persistent id ("storage", FloatStorage, "<i>", "cpu", 1) for i in range(N)],
# i.e. a list of N bare storages (each one float), memoized so the pickle stays small.
p = b'\x80\x02ctorch\nFloatStorage\nq\x00' + S(b'storage') + b'q\x01' + S(b'cpu') + b'q\x02]('
p += b''.join(b'(h\x01h\x00' + S(str(i).encode()) + b'h\x02K\x01tQ' for i in range(N)) + b'e.'
path = os.path.join(out_dir, 'upper.pt')
with zipfile.ZipFile(path, 'w') as z:
    z.writestr('a/data.pkl', p)
    for i in range(N):
        z.writestr(f'a/DATA/{i}', b'\0' * 4)
print(path)
