#!/usr/bin/python3
"""Test-loads sets PyTorch 2.x wrote (tests/sharded/real/make_real_sets.py, run by the torch2 tests)
onto the CPU through the LibTorch helper, on the host, where the helper's LibTorch lives:

    testload_sets.py CKPTSCOPE HELPER SETS_DIR SET:ORACLE...

For each pair, `testload SET --device cpu --verify --json` must load every storage of the set read in
place (each storage's bytes on the device equal to the set's, `matches_file`), and every tensor must
hash as the same tensor of ORACLE (PyTorch's own consolidation of the set, or of its twin in the
default layout) hashes when that file is test-loaded the same way. Exit 0 when all holds, 1 with
each difference printed, 77 (not run) when SETS_DIR was not written.
"""
import json
import os
import subprocess
import sys


def testload(ckptscope, helper, path):
    env = dict(os.environ, CKPTSCOPE_TORCH_HELPER=helper)
    r = subprocess.run([ckptscope, "testload", path, "--device", "cpu", "--verify", "--json"], capture_output=True,
                       text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"testload {path} exited {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    ckptscope, helper, sets, pairs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if not os.path.isdir(sets):
        print(f"{sets}: not written (no PyTorch 2.x root): not run")
        return 77
    errors = []
    for pair in pairs:
        name, oracle = pair.split(":")
        got = testload(ckptscope, helper, os.path.join(sets, name))
        want = testload(ckptscope, helper, os.path.join(sets, oracle))
        if got.get("engine") != "torch":
            errors.append(f"{name}: loaded by the {got.get('engine')} engine, not the LibTorch helper")
        bad = [s for s in got.get("storage_checks", []) if not s.get("matches_file")]
        if not got.get("storage_checks") or bad:
            errors.append(f"{name}: {len(bad)} storage(s) on the device differ from the set: {bad[:3]}")
        mine = {c["path"]: c["sha256"] for c in got.get("checks", [])}
        theirs = {c["path"]: c["sha256"] for c in want.get("checks", [])}
        if mine != theirs:
            differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            errors.append(f"{name}: {len(differ)} tensor(s) differ from {oracle}: {differ[:5]}")
        print(f"{name}: {len(mine)} tensors loaded, {len(got.get('storage_checks', []))} storages checked")
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
