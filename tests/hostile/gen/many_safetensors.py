#!/usr/bin/env python3
"""Writes many.safetensors: a valid safetensors file with 200k one-element float32 tensors
(`layers.<i>.weight`), ~15 MB, written directly (8-byte little-endian header length, JSON header,
data) without the safetensors package. Issue 16: opening it took over 30 s (40k tensors: 2.5 s).

Usage: many_safetensors.py OUT_DIR [N]"""
import json
import os
import struct
import sys

out_dir = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
os.makedirs(out_dir, exist_ok=True)

header = {'__metadata__': {'format': 'pt'}}
for i in range(N):
    header[f'layers.{i}.weight'] = {'dtype': 'F32', 'shape': [1], 'data_offsets': [4 * i, 4 * i + 4]}
text = json.dumps(header, separators=(',', ':')).encode()
text += b' ' * (-len(text) % 8)
data = b''.join(struct.pack('<f', float(i)) for i in range(N))
path = os.path.join(out_dir, 'many.safetensors')
with open(path, 'wb') as f:
    f.write(struct.pack('<Q', len(text)))
    f.write(text)
    f.write(data)
print(path)
