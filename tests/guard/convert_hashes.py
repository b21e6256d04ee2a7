#!/usr/bin/env python3
"""The restructuring's guard rail (issue 37): SHA-256 of every `convert` output the test fixtures
produce, under a fixed set of option sets, against the committed list convert_hashes.tsv.

    convert_hashes.py check CKPTSCOPE BUILD_DIR   # exit 1 and the differing rows when any differs
    convert_hashes.py write CKPTSCOPE BUILD_DIR   # rewrites convert_hashes.tsv (say why in the commit)

Inputs: every file directly in the build's fixtures/ (written by tests/fixtures/gen_fixtures.py with
PyTorch 1.13; two legacy files, whose bytes differ at each generation, are checked-in copies in
tests/guard/inputs), every set the sharded, DCP, FSDP, ZeRO and TorchScript generators write under
fixtures/, and the sets real PyTorch 2.11 wrote (tests/sharded/real/sets, checked in). A row holds
the input (relative to its root), the option set, convert's exit code and the output's hash: of
the file, or for a folder of the sorted "name hash" lines of its files; "-" when nothing was
written. Only the bytes written are compared: what convert prints may change without changing them.
"""
import hashlib
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
LIST = os.path.join(HERE, "convert_hashes.tsv")

# (name, output name, extra arguments); a set's inputs also get the split and DCP rows.
VARIANTS = [
    ("as-is", "out.pt", []),
    ("single-card", "out.pt", ["--single-card"]),
    ("multi-card", "out.pt", ["--multi-card"]),
    ("weights-only-compact", "out.pt", ["--weights-only", "--compact"]),
    ("safetensors", "out.safetensors", ["--single-card", "--format", "safetensors"]),
]
SET_VARIANTS = [
    ("split-1MB", "split", ["--single-card", "--format", "safetensors", "--shard-size", "1MB"]),
    ("dcp", "dcp", ["--single-card", "--format", "dcp"]),
]
SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".tar", ".pkl", ".gz", ".pt2", ".ptl", ".th")


# A DCP .metadata's save_id is a fresh uuid4 each save, as torch's FileSystemWriter writes it.
UUID4 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
# Written by torch 1.13's legacy save, whose storage keys are object addresses: another run of the
# generator writes other bytes. Checked-in copies (tests/guard/inputs) stand in for them.
UNSTABLE = ("legacy_sd.pt", "legacy_whole_model.pt")


def digest(path, top=None):
    """A file's SHA-256; a folder's is that of its files' sorted "name hash" lines. A DCP .metadata
    is hashed with its save_id and checkpoint_id (the output's own path) blanked."""
    if os.path.isdir(path):
        lines = []
        for dirpath, _, files in os.walk(path):
            for f in files:
                full = os.path.join(dirpath, f)
                lines.append(f"{os.path.relpath(full, path)} {digest(full, path)}")
        return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if os.path.basename(path) == ".metadata":
            data = UUID4.sub(b"0" * 36, f.read())
            h.update(data.replace(os.fsencode(top), b"<output>") if top else data)
        else:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def inputs(build):
    """(shown name, path, is a set) of every input, in a stable order."""
    out = []
    fixtures = os.path.join(build, "fixtures")
    for name in sorted(os.listdir(fixtures)):
        path = os.path.join(fixtures, name)
        if os.path.isfile(path) and name.endswith(SUFFIXES) and name not in UNSTABLE:
            out.append((f"fixtures/{name}", path, False))
    stable = os.path.join(HERE, "inputs")
    for name in sorted(os.listdir(stable)):
        out.append((f"guard/{name}", os.path.join(stable, name), False))
    for group in ("sharded", "dcp", "fsdp", "zero", "torchscript"):
        root = os.path.join(fixtures, group)
        if not os.path.isdir(root):
            sys.exit(f"convert_hashes: {root} is missing (its generator did not run)")
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isdir(path) or name.endswith(SUFFIXES):
                out.append((f"fixtures/{group}/{name}", path, os.path.isdir(path)))
    real = os.path.join(SOURCE, "tests", "sharded", "real", "sets")
    for name in sorted(os.listdir(real)):
        path = os.path.join(real, name)
        if os.path.isdir(path) or name.endswith(SUFFIXES):
            out.append((f"real/{name}", path, os.path.isdir(path)))
    return out


def run(tool, build):
    rows = []
    env = dict(os.environ, LC_ALL="C")
    with tempfile.TemporaryDirectory(prefix="ckptscope-guard-") as work:
        for shown, path, is_set in inputs(build):
            for variant, outname, args in VARIANTS + (SET_VARIANTS if is_set else []):
                target = os.path.join(work, variant + "-" + outname)
                r = subprocess.run([tool, "convert", path, "-o", target, "--quiet", *args], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
                written = os.path.exists(target)
                rows.append((shown, variant, str(r.returncode), digest(target) if written else "-"))
                if written:
                    subprocess.run(["rm", "-rf", target], check=True)
    return rows


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("check", "write"):
        sys.exit(__doc__)
    mode, tool, build = sys.argv[1:]
    rows = run(tool, build)
    text = "".join("\t".join(r) + "\n" for r in rows)
    if mode == "write":
        with open(LIST, "w") as f:
            f.write(text)
        print(f"convert_hashes: wrote {len(rows)} rows to {LIST}")
        return
    with open(LIST) as f:
        want = {tuple(line.rstrip("\n").split("\t")[:2]): line.rstrip("\n") for line in f if line.strip()}
    got = {r[:2]: "\t".join(r) for r in rows}
    bad = 0
    for key in sorted(set(want) | set(got)):
        if want.get(key) != got.get(key):
            bad += 1
            print(f"differs: want {want.get(key, '(no row)')}\n         got  {got.get(key, '(no row)')}")
    print(f"convert_hashes: {len(rows)} outputs, {bad} differ from {os.path.relpath(LIST, SOURCE)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
