#!/usr/bin/env python3
"""Oracle for the pickle tests: real Python pickles and torch.save files, and checks of what
ckptscope's pickler writes, judged by Python's own pickle module and torch.load.

  values DIR        write <case>.p<N>.pkl for protocols 0-5 plus <case>.p<N>.canon, the canonical
                    text of pickle.loads(data) (the same text tst_unpickler builds from the tree)
  check DIR         for every <x>.ours.pkl next to <x>.canon: pickletools.dis must succeed, only
                    weights_only opcodes (docs/format.md 5.3) may appear, and pickle.loads must give the
                    same canonical text
  torch DIR         write torch.save files <case>.pt, their data.pkl as <case>.data.pkl, and
                    <case>.expect (one line per tensor: what torch.load says about it)
  bigsd DIR N       a state dict of N small tensors, its data.pkl as bigsd.data.pkl
  torchcheck DIR    for every <case>.pt with <case>.ours.pkl: put ours back in place of data.pkl and
                    torch.load both: values, _metadata, identity and storage sharing must agree
"""
import argparse
import collections
import io
import os
import pickle
import pickletools
import struct
import sys
import zipfile

import numpy as np


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y


# ---------------------------------------------------------------------------------------------
# canonical text (mirrored in tests/pickle/canon.h)

def minimal_le(n):
    nbytes = (n.bit_length() >> 3) + 1
    b = n.to_bytes(nbytes, 'little', signed=True)
    if n < 0 and nbytes > 1 and b[-1] == 0xFF and (b[-2] & 0x80):
        b = b[:-1]
    return b


def canon(x, seen):
    if x is None:
        return 'N'
    if x is True:
        return 'T'
    if x is False:
        return 'F'
    if isinstance(x, np.generic) or isinstance(x, np.ndarray):
        shape = 'x'.join(str(d) for d in x.shape)
        return 'np:%s:%s:%s' % (x.dtype.str, shape, np.ascontiguousarray(x).tobytes().hex())
    if type(x) is int:
        if -2**63 <= x < 2**63:
            return 'i:%d' % x
        return 'I:' + minimal_le(x).hex()
    if type(x) is float:
        return 'f:' + struct.pack('>d', x).hex()
    if type(x) is complex:
        return 'cx(%s,%s)' % (canon(x.real, seen), canon(x.imag, seen))
    if type(x) is str:
        return 's:' + x.encode('utf-8', 'surrogatepass').hex()
    if type(x) is bytes:
        return 'b:' + x.hex()
    if type(x) is tuple:
        return '(' + ','.join(canon(i, seen) for i in x) + ')'
    # mutable values carry an identity: first sight '#n=', later '#n'
    if id(x) in seen:
        return '#%d' % seen[id(x)]
    seen[id(x)] = len(seen)
    tag = '#%d=' % seen[id(x)]
    if type(x) is bytearray:
        return tag + 'ba:' + bytes(x).hex()
    if type(x) is list:
        return tag + '[' + ','.join(canon(i, seen) for i in x) + ']'
    if type(x) in (set, frozenset):
        items = sorted(canon(i, seen) for i in x)
        return tag + ('set{' if type(x) is set else 'fset{') + ','.join(items) + '}'
    if type(x) is collections.OrderedDict:
        body = tag + 'od{' + ','.join(canon(k, seen) + ':' + canon(v, seen) for k, v in x.items()) + '}'
        if vars(x):
            body += '@' + canon(vars(x), seen)
        return body
    if type(x) is dict:
        return tag + '{' + ','.join(canon(k, seen) + ':' + canon(v, seen) for k, v in x.items()) + '}'
    cls = type(x)
    return tag + 'obj:%s.%s(%s)' % (cls.__module__, cls.__qualname__, canon(vars(x), seen))


def value_cases():
    shared = [1, 2]
    selfref = []
    selfref.append(selfref)
    selfdict = {}
    selfdict['me'] = selfdict
    rl = []
    rt = (rl, 1)
    rl.append(rt)
    od = collections.OrderedDict([('b', 1), ('a', 2)])
    od_attrs = collections.OrderedDict([('w', 1.5)])
    od_attrs._metadata = collections.OrderedDict([('', {'version': 1}), ('conv', {'version': 2})])
    cases = {
        'none': None,
        'bools': [True, False],
        'ints': [0, 1, 127, 128, 255, 256, 65535, 65536, -1, -128, -129, -256, 2**31 - 1, -2**31, 2**31,
                 2**32, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 2**100, -2**100, 10**50, 256**255 - 1,
                 256**300, -(256**300)],
        'floats': [0.0, -0.0, 1.5, 1e300, -1e-300, float('inf'), float('-inf'), 3.141592653589793, 1e16, 1e-5],
        'strings': ['', 'abc', 'h\u00e9llo', '\u65e5\u672c\u8a9e', '\U0001F600', 'quote\'s "x"',
                    'back\\slash\nnew\rline\x00\x1a', 'x' * 300, '\\u0041 not an escape'],
        'bytes': [b'', b'abc', bytes(range(256))],
        'bytearray': [bytearray(b'xyz'), bytearray()],
        'nested': {'a': [1, (2, 3), {'b': (4, 5, 6, 7)}], 'c': ((),), 1: 'int key', (1, 2): 'tuple key',
                   None: 'none key', 2.5: 'float key', 'deep': [[[[[]]]]]},
        'sets': [{1, 2, 3}, frozenset(['a', 'b']), set(), frozenset()],
        'shared': [shared, shared, {'x': shared}],
        'selfref_list': selfref,
        'selfref_dict': selfdict,
        'recursive_tuple': rt,
        'ordered': od,
        'ordered_attrs': od_attrs,
        'namespace': argparse.Namespace(lr=0.1, name='run', layers=[1, 2]),
        'object': Point(1, 'x'),
        'complex': [1 + 2j, complex(-0.5, 0)],
        'numpy_scalars': [np.float64(1.5), np.int64(-3), np.bool_(True), np.float32(2.5), np.uint8(7)],
        'numpy_arrays': [np.arange(6, dtype='<i4').reshape(2, 3), np.array([1.5, 2.5], dtype='<f8'),
                         np.zeros((0,), 'f4'), np.array(3.0)],
        'big_list': list(range(2500)),
        'big_dict': {str(i): i for i in range(2100)},
    }
    return cases


def cmd_values(out):
    os.makedirs(out, exist_ok=True)
    for name, value in value_cases().items():
        for proto in range(6):
            if name == 'numpy_arrays' and proto == 5:
                continue  # numpy uses out-of-band capable _frombuffer at protocol 5
            data = pickle.dumps(value, protocol=proto)
            stem = os.path.join(out, '%s.p%d' % (name, proto))
            with open(stem + '.pkl', 'wb') as f:
                f.write(data)
            with open(stem + '.canon', 'w') as f:
                f.write(canon(pickle.loads(data), {}))


ALLOWED = {'PROTO', 'STOP', 'GLOBAL', 'NEWOBJ', 'REDUCE', 'BUILD', 'APPEND', 'APPENDS', 'SETITEM', 'SETITEMS',
           'MARK', 'TUPLE', 'TUPLE1', 'TUPLE2', 'TUPLE3', 'NONE', 'NEWFALSE', 'NEWTRUE', 'EMPTY_TUPLE',
           'EMPTY_LIST', 'EMPTY_DICT', 'EMPTY_SET', 'BININT', 'BININT1', 'BININT2', 'BINFLOAT', 'BINUNICODE',
           'SHORT_BINSTRING', 'BINPERSID', 'BINGET', 'LONG_BINGET', 'BINPUT', 'LONG_BINPUT', 'LONG1'}


# Values protocol 2 cannot write with the weights_only set alone, written as CPython does:
# ints beyond 255 bytes need LONG4, a tuple that contains itself needs POP/POP_MARK + GET.
EXEMPT = {'ints': {'LONG4'}, 'recursive_tuple': {'POP', 'POP_MARK'}}


def check_opcodes(data, case=''):
    pickletools.dis(data, out=io.StringIO())
    ops = list(pickletools.genops(data))
    bad = sorted({op.name for op, _, _ in ops} - ALLOWED - EXEMPT.get(case.split('.')[0], set()))
    puts = [arg for op, arg, _ in ops if op.name in ('BINPUT', 'LONG_BINPUT')]
    if puts != list(range(len(puts))):
        bad.append('memo indices not consecutive')
    return bad


def cmd_check(d):
    failures = 0
    count = 0
    for fn in sorted(os.listdir(d)):
        if not fn.endswith('.ours.pkl'):
            continue
        count += 1
        stem = fn[:-len('.ours.pkl')]
        data = open(os.path.join(d, fn), 'rb').read()
        try:
            bad = check_opcodes(data, stem)
            if bad:
                print('FAIL %s: opcodes outside weights_only: %s' % (stem, bad))
                failures += 1
                continue
            got = canon(pickle.loads(data), {})
        except Exception as e:  # noqa: BLE001 - any failure is a finding
            print('FAIL %s: %s: %s' % (stem, type(e).__name__, e))
            failures += 1
            continue
        want = open(os.path.join(d, stem + '.canon')).read()
        if got != want:
            print('FAIL %s: loads differently\n  want %s\n  got  %s' % (stem, want[:300], got[:300]))
            failures += 1
    print('checked %d pickles, %d failures' % (count, failures))
    return 1 if failures or count == 0 else 0


# ---------------------------------------------------------------------------------------------
# torch

def torch_cases():
    import torch
    import torch.nn as nn

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3)
            self.bn = nn.BatchNorm2d(2)
            self.fc = nn.Linear(4, 2)

    Net.__module__ = '__main__'
    globals()['Net'] = Net
    Net.__qualname__ = 'Net'

    seq = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    base = torch.arange(10.0)
    tied = nn.Linear(3, 3)
    opt_model = nn.Linear(2, 2)
    opt = torch.optim.Adam(opt_model.parameters(), lr=0.01)
    opt_model(torch.randn(1, 2)).sum().backward()
    opt.step()
    qt = torch.quantize_per_tensor(torch.tensor([0.5, 1.0, -1.5]), 0.1, 2, torch.quint8)
    qc = torch.quantize_per_channel(torch.randn(2, 3), torch.tensor([0.1, 0.2], dtype=torch.double),
                                    torch.tensor([0, 1]), 0, torch.qint8)
    cases = {
        'state_dict': seq.state_dict(),
        'parameters': {'p': nn.Parameter(torch.randn(3)), 'frozen': nn.Parameter(torch.randn(2, 2), requires_grad=False)},
        'views': {'base': base, 'slice': base[2:8:2], 't': base.view(2, 5).t(), 'row': base.view(2, 5)[1]},
        'tied': {'a': tied.weight, 'b': tied.weight, 'w_data': tied.weight.data, 'bias': tied.bias},
        'dtypes': {str(t).split('.')[1]: torch.ones(2, 3).to(t) for t in
                   (torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
                    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)},
        'scalars': {'zero_d': torch.tensor(3.5), 'empty': torch.empty(0, 4), 'grad': torch.randn(2, requires_grad=True)},
        'quantized': {'per_tensor': qt, 'per_channel': qc},
        'sparse': {'coo': torch.randn(3, 3).relu().to_sparse(), 'csr': torch.eye(3).to_sparse_csr()},
        'meta': {'m': torch.empty(2, 3, device='meta')},
        'model': Net(),
        'checkpoint': {'model': seq.state_dict(), 'optimizer': opt.state_dict(), 'epoch': 5,
                       'args': argparse.Namespace(lr=0.1, arch='mlp'), 'best': np.float64(0.93),
                       'device': torch.device('cpu'), 'size': torch.Size([2, 3]), 'dtype': torch.float16},
    }
    return cases


def tensor_record(path, x, groups):
    import torch
    import torch.nn as nn
    if x.is_quantized:
        form = 'Quantized'
    elif x.layout != torch.strided:
        form = 'Sparse'
    elif x.device.type == 'meta':
        form = 'Meta'
    else:
        form = 'Strided'
    fields = [path, form, 'param' if isinstance(x, nn.Parameter) else 'tensor', str(x.dtype)[6:],
              ','.join(str(d) for d in x.shape), 'rg' if x.requires_grad else '-']
    if form in ('Strided', 'Quantized'):
        st = x.storage()
        ptr = st.data_ptr()
        groups.setdefault(ptr, len(groups))
        fields += [','.join(str(d) for d in x.stride()), str(x.storage_offset()), str(st.size()),
                   x.device.type, 'g%d' % groups[ptr]]
    return '|'.join(fields)


def walk(x, path, out, groups):
    import torch
    if isinstance(x, torch.Tensor):
        out.append(tensor_record('/'.join(path), x, groups))
    elif isinstance(x, dict):
        for k, v in x.items():
            walk(v, path + [k if isinstance(k, str) else repr(k)], out, groups)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            walk(v, path + [str(i)], out, groups)
    elif hasattr(x, '__dict__') and not isinstance(x, (type, np.generic, np.ndarray)):
        walk(vars(x), path, out, groups)


def data_pkl_name(z):
    return next(n for n in z.namelist() if n.endswith('/data.pkl'))


def cmd_torch(out):
    import torch
    os.makedirs(out, exist_ok=True)
    for name, value in torch_cases().items():
        stem = os.path.join(out, name)
        torch.save(value, stem + '.pt')
        with zipfile.ZipFile(stem + '.pt') as z:
            open(stem + '.data.pkl', 'wb').write(z.read(data_pkl_name(z)))
        records = []
        walk(torch.load(stem + '.pt'), [], records, {})
        open(stem + '.expect', 'w').write('\n'.join(records) + '\n')
    # legacy (<1.6) format: five pickles in a row; tests read the fourth with legacy pids
    legacy = {'legacy_sd': torch_cases()['state_dict'], 'legacy_model': torch_cases()['model']}
    for name, value in legacy.items():
        stem = os.path.join(out, name)
        torch.save(value, stem + '.legacy', _use_new_zipfile_serialization=False)
        records = []
        walk(torch.load(stem + '.legacy'), [], records, {})
        open(stem + '.expect', 'w').write('\n'.join(records) + '\n')
    # the same state dict at protocol 4 (FRAME, MEMOIZE, STACK_GLOBAL ...)
    torch.save(torch_cases()['state_dict'], os.path.join(out, 'proto4.pt'), pickle_protocol=4)
    with zipfile.ZipFile(os.path.join(out, 'proto4.pt')) as z:
        open(os.path.join(out, 'proto4.data.pkl'), 'wb').write(z.read(data_pkl_name(z)))
    records = []
    walk(torch.load(os.path.join(out, 'proto4.pt')), [], records, {})
    open(os.path.join(out, 'proto4.expect'), 'w').write('\n'.join(records) + '\n')
    return 0


def cmd_bigsd(out, n):
    import torch
    sd = collections.OrderedDict(('layer%d.weight' % i, torch.zeros(2)) for i in range(n))
    sd._metadata = collections.OrderedDict(('layer%d' % i, {'version': 1}) for i in range(n))
    path = os.path.join(out, 'bigsd.pt')
    torch.save(sd, path)
    with zipfile.ZipFile(path) as z:
        open(os.path.join(out, 'bigsd.data.pkl'), 'wb').write(z.read(data_pkl_name(z)))
    return 0


def same_tensor(a, b):
    import torch
    if type(a) is not type(b) or a.dtype != b.dtype or a.shape != b.shape or a.requires_grad != b.requires_grad:
        return False
    if a.device.type == 'meta':
        return b.device.type == 'meta'
    if a.is_quantized:
        return (a.qscheme() == b.qscheme() and torch.equal(a.int_repr(), b.int_repr())
                and a.stride() == b.stride())
    if a.layout != torch.strided:
        return a.layout == b.layout and torch.equal(a.to_dense(), b.to_dense())
    return (a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
            and a.storage().size() == b.storage().size() and torch.equal(a, b))


def compare(a, b, path, ids_a, ids_b, ptrs, problems):
    import torch
    where = '/'.join(path) or '<root>'
    if id(a) in ids_a:
        if ids_a[id(a)] is not b:
            problems.append('%s: identity not preserved' % where)
        return
    ids_a[id(a)] = b
    if isinstance(a, torch.Tensor):
        if not same_tensor(a, b):
            problems.append('%s: tensor differs' % where)
            return
        if a.layout == torch.strided and not a.is_quantized and a.device.type != 'meta':
            pa, pb = a.storage().data_ptr(), b.storage().data_ptr()
            if ptrs.setdefault(('a', pa), pb) != pb:
                problems.append('%s: storage sharing differs' % where)
        return
    if type(a) is not type(b):
        problems.append('%s: %s became %s' % (where, type(a).__name__, type(b).__name__))
        return
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            problems.append('%s: keys differ' % where)
            return
        for k in a:
            compare(a[k], b[k], path + [str(k)], ids_a, ids_b, ptrs, problems)
        if getattr(a, '_metadata', None) != getattr(b, '_metadata', None):
            problems.append('%s: _metadata differs' % where)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            problems.append('%s: length differs' % where)
            return
        for i, (x, y) in enumerate(zip(a, b)):
            compare(x, y, path + [str(i)], ids_a, ids_b, ptrs, problems)
    elif hasattr(a, '__dict__') and not isinstance(a, (type, np.generic, np.ndarray)):
        compare(vars(a), vars(b), path, ids_a, ids_b, ptrs, problems)
    elif isinstance(a, (np.generic, np.ndarray)):
        if a.dtype != b.dtype or not np.array_equal(a, b):
            problems.append('%s: numpy value differs' % where)
    elif a != b:
        problems.append('%s: %r != %r' % (where, a, b))


def cmd_torchcheck(d):
    import torch
    torch_cases()  # defines __main__.Net for the whole-model case
    failures = 0
    count = 0
    for fn in sorted(os.listdir(d)):
        if not fn.endswith('.ours.pkl') or not os.path.exists(os.path.join(d, fn[:-9] + '.pt')):
            continue
        count += 1
        stem = os.path.join(d, fn[:-9])
        ours = open(os.path.join(d, fn), 'rb').read()
        bad = check_opcodes(ours)
        if bad:
            print('FAIL %s: opcodes outside weights_only: %s' % (stem, bad))
            failures += 1
        with zipfile.ZipFile(stem + '.pt') as src, zipfile.ZipFile(stem + '.rt.pt', 'w', zipfile.ZIP_STORED) as dst:
            target = data_pkl_name(src)
            for info in src.infolist():
                dst.writestr(info.filename, ours if info.filename == target else src.read(info.filename))
        try:
            a = torch.load(stem + '.pt')
            b = torch.load(stem + '.rt.pt')
        except Exception as e:  # noqa: BLE001
            print('FAIL %s: torch.load: %s: %s' % (stem, type(e).__name__, e))
            failures += 1
            continue
        problems = []
        compare(a, b, [], {}, {}, {}, problems)
        if problems:
            print('FAIL %s: %s' % (stem, '; '.join(problems[:5])))
            failures += 1
    print('checked %d torch files, %d failures' % (count, failures))
    return 1 if failures or count == 0 else 0


if __name__ == '__main__':
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == 'values':
        sys.exit(cmd_values(args[0]))
    if cmd == 'check':
        sys.exit(cmd_check(args[0]))
    if cmd == 'torch':
        sys.exit(cmd_torch(args[0]))
    if cmd == 'bigsd':
        sys.exit(cmd_bigsd(args[0], int(args[1])))
    if cmd == 'torchcheck':
        sys.exit(cmd_torchcheck(args[0]))
    sys.exit('unknown command ' + cmd)
