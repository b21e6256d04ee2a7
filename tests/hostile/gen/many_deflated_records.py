#!/usr/bin/env python3
"""Writes deflated.pt: a torch zip archive of 30k storages whose records are deflated (a
checkpoint re-zipped with compression; torch itself reads it). Reading every storage's bytes
(convert, check --values) parsed the central directory again for each one: 30k records took 50 s.

Usage: many_deflated_records.py OUT_DIR [N]"""
import os
import struct
import sys
import zipfile

out_dir = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 30_000
os.makedirs(out_dir, exist_ok=True)


def S(b):  # BINUNICODE
    return b'X' + struct.pack('<I', len(b)) + b


# A list of N FloatStorages of one float each, storage i holding float(i).
p = b'\x80\x02ctorch\nFloatStorage\nq\x00' + S(b'storage') + b'q\x01' + S(b'cpu') + b'q\x02]('
p += b''.join(b'(h\x01h\x00' + S(str(i).encode()) + b'h\x02K\x01tQ' for i in range(N)) + b'e.'
path = os.path.join(out_dir, 'deflated.pt')
with zipfile.ZipFile(path, 'w', compression=zipfile.ZIP_DEFLATED) as z:
    z.writestr('a/data.pkl', p)
    z.writestr('a/version', '3\n')
    for i in range(N):
        z.writestr(f'a/data/{i}', struct.pack('<f', float(i)))
print(path)
