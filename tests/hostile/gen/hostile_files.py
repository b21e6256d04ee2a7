#!/usr/bin/env python3
"""Writes hostile and unlucky checkpoints for tests/hostile (no torch needed: the pickles and zips
are built byte by byte, the way ../shared/adversarial's scripts do).

Usage: hostile_files.py OUTDIR [NAME...]   (no NAME: all of them)

Each file exists to break one thing the reliability issue found; the comment on its writer says
what. Sizes are kept small so CI writes them in seconds; `big_transposed` (for the signal tests) is
the exception at 192 MiB.
"""
import os
import struct
import sys
import zipfile
import zlib


def S(b):
    """BINUNICODE: the bytes as given, valid UTF-8 or not."""
    return b'X' + struct.pack('<I', len(b)) + b


def L8(n):
    return b'\x8a\x08' + n.to_bytes(8, 'little', signed=True)


def K(n):
    """An int of any size the pickle can hold."""
    if 0 <= n < 256:
        return b'K' + bytes([n])
    if 0 <= n < 65536:
        return b'M' + struct.pack('<H', n)
    if -2**31 <= n < 2**31:
        return b'J' + struct.pack('<i', n)
    return L8(n)


def tup(items):
    return b'(' + b''.join(items) + b't'


def tensor(key, numel, shape, stride, offset=0, cls=b'FloatStorage', location=b'cpu'):
    """torch._utils._rebuild_tensor_v2(('storage', cls, key, location, numel), offset, shape, stride, False, {})."""
    pid = b'(' + S(b'storage') + b'ctorch\n' + cls + b'\n' + S(key) + S(location) + K(numel) + b'tQ'
    return (b'ctorch._utils\n_rebuild_tensor_v2\n(' + pid + K(offset) + tup([K(d) for d in shape]) +
            tup([K(d) for d in stride]) + b'\x89ccollections\nOrderedDict\n)Rt' + b'R')


def state_dict(items):
    """A protocol-2 pickle of {key: value, ...}."""
    body = b''.join(S(k) + v for k, v in items)
    return b'\x80\x02}(' + body + b'u.'


def write_zip(path, records, method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, 'w', method) as z:
        for name, data in records:
            z.writestr('a/' + name, data)


def patch_method(path, record, method):
    """Rewrites the compression method of one record in its local and central headers."""
    with open(path, 'r+b') as f:
        data = bytearray(f.read())
        name = ('a/' + record).encode()
        at = 0
        while True:
            at = data.find(name, at)
            if at < 0:
                break
            if data[at - 30:at - 26] == b'PK\x03\x04':
                struct.pack_into('<H', data, at - 30 + 8, method)
            if data[at - 46:at - 42] == b'PK\x01\x02':
                struct.pack_into('<H', data, at - 46 + 10, method)
            at += len(name)
        f.seek(0)
        f.write(data)


# ---- memory bombs ---------------------------------------------------------------------------------

def path_bomb(out):
    """1 MB: 2000 nested OrderedDicts, every level keyed by one memoized 1 MB string (11.9 GB, then
    bad_alloc, before the budget)."""
    od = b'ccollections\nOrderedDict\n)R'
    pkl = b'\x80\x02' + S(b'k' * 10**6) + b'q\x00' + b'0' + (od + b'h\x00') * 2000 + b'N' + b's' * 2000 + b'.'
    write_zip(os.path.join(out, 'path_bomb.pt'), [('data.pkl', pkl), ('version', b'3\n')])


def none_bomb(out):
    """97 KB deflated: 50 million NONE/POP pairs (4.3 GB of values before the old value limit)."""
    pkl = b'\x80\x02' + b'N0' * 50_000_001 + b'}.'
    write_zip(os.path.join(out, 'none_bomb.pt'), [('data.pkl', pkl), ('version', b'3\n')], zipfile.ZIP_DEFLATED)


def set_bomb(out):
    """2 MB: set(L) called 1000 times on one memoized list of a million items (2.3-3.8 GB)."""
    pkl = (b'\x80\x02(' + b'K\x01' * 1_000_000 + b'lq\x000]q\x01(' + b'cbuiltins\nset\n(h\x00tR' * 1000 +
           b'e.')
    write_zip(os.path.join(out, 'set_bomb.pt'), [('data.pkl', pkl), ('version', b'3\n')])


def deflate_bomb(out):
    """~0.5 MB: one deflated storage record of 512 MiB of zeros (inflated whole, in memory, by
    check --values and convert)."""
    numel = 128 * 2**20
    pkl = state_dict([(b'w', tensor(b'0', numel, [numel], [1]))])
    path = os.path.join(out, 'deflate_bomb.pt')
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        z.writestr('a/data.pkl', pkl)
        info = zipfile.ZipInfo('a/data/0')
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, 'w', force_zip64=True) as f:
            chunk = bytes(16 * 2**20)
            for _ in range(numel * 4 // len(chunk)):
                f.write(chunk)
        z.writestr('a/version', b'3\n')


# ---- views --------------------------------------------------------------------------------------

def stride0(out):
    """454 bytes: one float viewed as 2^40 elements with stride 0 (safetensors export heads for
    4 TiB, the value scan hangs)."""
    pkl = state_dict([(b'w', tensor(b'0', 1, [2**40], [0]))])
    write_zip(os.path.join(out, 'stride0.pt'),
              [('data.pkl', pkl), ('data/0', struct.pack('<f', 1.0)), ('version', b'3\n')])


# ---- text from the file -------------------------------------------------------------------------

def bad_utf8_key(out):
    """A key whose bytes are not UTF-8 (nlohmann's dump() threw type_error.316: SIGABRT)."""
    pkl = state_dict([(b'module.\xff\xfea', tensor(b'0', 3, [3], [1])), (b'module.b', tensor(b'1', 3, [3], [1]))])
    ones = struct.pack('<3f', 1, 1, 1)
    write_zip(os.path.join(out, 'bad_utf8_key.pt'),
              [('data.pkl', pkl), ('data/0', ones), ('data/1', ones), ('version', b'3\n')])


def escape_names(out):
    """A global named with terminal escapes beside os.system: ESC[8A ESC[J erased the finding above."""
    pkl = (b'\x80\x04}(' + S(b'a') + b'cos\nsystem\n(' + S(b'touch PWNED') + b'tR' + S(b'b') + S(b'zz') +
           S(b'y\x1b[8A\x1b[J\x1b[32mno findings\x1b[0m') + b'\x93u.')
    write_zip(os.path.join(out, 'escape_names.pt'), [('data.pkl', pkl), ('version', b'3\n')])


def newline_key(out):
    """A tensor whose storage key holds a newline and whose record is missing: the error line used
    to break in two."""
    pkl = state_dict([(b'w\nx', tensor(b'0\nrm -rf', 3, [3], [1]))])
    write_zip(os.path.join(out, 'newline_key.pt'), [('data.pkl', pkl), ('version', b'3\n')])


# ---- records torch.load cannot read -------------------------------------------------------------

def _one_tensor_records():
    pkl = state_dict([(b'w', tensor(b'0', 1024, [1024], [1]))])
    return pkl, struct.pack('<1024f', *range(1024))


def method12(out):
    """The storage record claims compression method 12 (bzip2)."""
    pkl, data = _one_tensor_records()
    path = os.path.join(out, 'method12.pt')
    write_zip(path, [('data.pkl', pkl), ('data/0', data), ('version', b'3\n')])
    patch_method(path, 'data/0', 12)


def corrupt_deflate(out):
    """A deflated storage record whose stream is garbage after its first bytes."""
    pkl, data = _one_tensor_records()
    path = os.path.join(out, 'corrupt_deflate.pt')
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        z.writestr('a/data.pkl', pkl)
        z.writestr('a/data/0', data, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr('a/version', b'3\n')
    with open(path, 'r+b') as f:
        blob = bytearray(f.read())
        at = blob.find(b'a/data/0') + len(b'a/data/0')  # the local header's name, then the data
        for i in range(at + 8, at + 40):
            blob[i] ^= 0x5A
        f.seek(0)
        f.write(blob)


def lying_size(out):
    """A deflated record whose stream holds 4096 bytes but whose headers declare 8192 (and the
    pickle asks for 8192)."""
    pkl = state_dict([(b'w', tensor(b'0', 2048, [2048], [1]))])
    path = os.path.join(out, 'lying_size.pt')
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        z.writestr('a/data.pkl', pkl)
        z.writestr('a/data/0', struct.pack('<1024f', *range(1024)), compress_type=zipfile.ZIP_DEFLATED)
        z.writestr('a/version', b'3\n')
    with open(path, 'r+b') as f:
        blob = bytearray(f.read())
        name = b'a/data/0'
        at = 0
        while True:
            at = blob.find(name, at)
            if at < 0:
                break
            if blob[at - 30:at - 26] == b'PK\x03\x04':
                struct.pack_into('<I', blob, at - 30 + 22, 8192)
            if blob[at - 46:at - 42] == b'PK\x01\x02':
                struct.pack_into('<I', blob, at - 46 + 24, 8192)
            at += len(name)
        f.seek(0)
        f.write(blob)


# ---- formats --------------------------------------------------------------------------------------

def safetensors_3c20(out):
    """A valid safetensors file whose header is 0x3C20 bytes long: its first bytes `20 3c` were
    taken for an HTML page. ckptscope's own writer made one (a key of 15,308 characters)."""
    header_len = 0x3C20
    base = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"pad":"'
    tail = b'"}}'
    pad = header_len - len(base) - len(tail)
    header = base + b'x' * pad + tail
    assert len(header) == header_len
    with open(os.path.join(out, 'safetensors_3c20.safetensors'), 'wb') as f:
        f.write(struct.pack('<Q', header_len) + header + struct.pack('<f', 2.5))


def complex128(out):
    """A complex128 tensor: safetensors has no such type (the error line named no file)."""
    pkl = state_dict([(b'z', tensor(b'0', 2, [2], [1], cls=b'ComplexDoubleStorage'))])
    write_zip(os.path.join(out, 'complex128.pt'),
              [('data.pkl', pkl), ('data/0', bytes(32)), ('version', b'3\n')])


def self_args(out):
    """An object that contains itself in its own arguments: it cannot be pickled back (the error
    line named no file)."""
    # o = foo.Bar(L), then L.append(o): the object's arguments hold the object.
    pkl = (b'\x80\x02}(' + S(b'w') + tensor(b'0', 1, [1], [1]) + S(b'o') +
           b'cfoo\nBar\n]q\x01\x85Rq\x02h\x01h\x02a0u.')
    write_zip(os.path.join(out, 'self_args.pt'),
              [('data.pkl', pkl), ('data/0', struct.pack('<f', 1.0)), ('version', b'3\n')])


def big_transposed(out):
    """192 MiB of transposed float32 matrices: a safetensors export gathers them, slowly enough to
    be interrupted mid-write by the signal tests."""
    n = 2048
    items = []
    records = [('data.pkl', None)]
    for i in range(12):
        items.append((b'w%d' % i, tensor(str(i).encode(), n * n, [n, n], [1, n])))
    pkl = state_dict(items)
    path = os.path.join(out, 'big_transposed.pt')
    row = struct.pack('<f', 0.5) * n
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        z.writestr('a/data.pkl', pkl)
        for i in range(12):
            with z.open('a/data/%d' % i, 'w', force_zip64=True) as f:
                for _ in range(n):
                    f.write(row)
        z.writestr('a/version', b'3\n')
    del records


def deep_nest(out):
    """{'x': [[[...[1]...]]]} 9000 lists deep: the reader takes it, convert's sanitizer recursed once
    per level and overflowed the stack from about 7700."""
    n = 9000
    pkl = b'\x80\x02}' + S(b'x') + b']' * n + b'K\x01a' + b'a' * (n - 1) + b's.'
    write_zip(os.path.join(out, 'deep_nest.pt'), [('data.pkl', pkl), ('version', b'3\n')])


def small(out):
    """A plain one-tensor state dict, for the convert-target tests."""
    pkl = state_dict([(b'w', tensor(b'0', 3, [3], [1]))])
    write_zip(os.path.join(out, 'small.pt'),
              [('data.pkl', pkl), ('data/0', struct.pack('<3f', 1, 2, 3)), ('version', b'3\n')])


WRITERS = {f.__name__: f for f in (path_bomb, none_bomb, set_bomb, deflate_bomb, stride0, bad_utf8_key,
                                    escape_names, newline_key, method12, corrupt_deflate, lying_size,
                                    safetensors_3c20, complex128, self_args, big_transposed, deep_nest, small)}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or WRITERS:
        WRITERS[name](out)


if __name__ == '__main__':
    main()
