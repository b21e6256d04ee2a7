#!/usr/bin/python3
"""A set test-loaded in place (issue 27) on a real GPU: for a Hugging Face .bin set, a ZeRO-2 folder
and 4-rank DCP folders (dim-0 chunks; dcp_cols: dim-1 chunks, each weight assembled in a buffer) of
SIZE MiB (bench/sharded/make_set.py; KINDS picks some), `ckptscope testload SET --device cuda:0` against the
same command on the one file `ckptscope convert SET -o` writes from it, in the same run:
- --verify: every storage as it sits on the GPU hashes to what the set's files hold (read in place);
- GB/s of the CUDA engine (best of 3 each), and set/file;
- the engine's peak RssAnon (sampled every 5 ms from /proc), set against file: what reading the set
  in place costs on the host beyond the file's load (target: the largest tensor + 64 MiB);
- the GPU peak and torch.load's predicted peak: the same model, so the same figures;
- what $TMPDIR holds afterwards (nothing: no consolidated copy);
- for the HF set, torch's way to put it on the GPU: each shard torch.load(map_location="cuda:0"),
  wall time and max_memory_reserved, for scale.
Prints one line per measurement and a JSON summary last. Needs torch with CUDA for the reference.
Usage: sets.py CKPTSCOPE WORKDIR [SIZE_MIB (default 4096)] [KINDS (default hf,zero2,dcp,dcp_cols)]"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from proc_rss import rss_kib  # noqa: E402

ENGINE = "ckptscope-cuda-engine"


def engine_pids():
    pids = []
    for status in glob.glob("/proc/[0-9]*/comm"):
        try:
            with open(status) as f:
                if f.read().strip() == ENGINE[:15]:  # comm is cut at 15 characters
                    pids.append(int(status.split("/")[2]))
        except OSError:
            pass
    return pids


def run_testload(bin_, path, env, extra=()):
    """Runs `ckptscope testload PATH --device cuda:0 --json`; returns (json, wall s, engine peak RssAnon MiB)."""
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            for pid in engine_pids():
                peak[0] = max(peak[0], rss_kib(pid)[0])
            time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    start = time.monotonic()
    p = subprocess.run([bin_, "testload", path, "--device", "cuda:0", "--json", *extra], env=env,
                       capture_output=True, text=True)
    wall = time.monotonic() - start
    done.set()
    t.join()
    if p.returncode != 0:
        sys.exit(f"sets.py: testload {path} failed ({p.returncode}): {p.stderr.strip()}")
    return json.loads(p.stdout), wall, peak[0] / 1024


def torch_shards(folder):
    """torch's way: every shard of an HF .bin set torch.load-ed onto cuda:0."""
    import torch
    shards = sorted(glob.glob(os.path.join(folder, "*.bin")))
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats(0)
    start = time.monotonic()
    sd = {}
    for s in shards:
        sd.update(torch.load(s, map_location="cuda:0", weights_only=True))
    torch.cuda.synchronize()
    wall = time.monotonic() - start
    reserved = torch.cuda.max_memory_reserved(0)
    n = sum(t.numel() * t.element_size() for t in sd.values())
    del sd
    torch.cuda.empty_cache()
    return {"wall_s": round(wall, 3), "gb_per_s": round(n / wall / 1e9, 2), "max_reserved": reserved}


def main():
    bin_, work = sys.argv[1], sys.argv[2]
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    kinds = sys.argv[4].split(",") if len(sys.argv) > 4 else ["hf", "zero2", "dcp", "dcp_cols"]
    os.makedirs(work, exist_ok=True)
    summary = {}
    for kind in kinds:
        folder = subprocess.run([sys.executable, os.path.join(HERE, "..", "sharded", "make_set.py"), work, str(size),
                                 kind], check=True, capture_output=True, text=True).stdout.strip()
        whole = folder + ".pt"
        if not os.path.exists(whole):
            subprocess.run([bin_, "convert", folder, "-o", whole], check=True, capture_output=True)
        for f in glob.glob(os.path.join(folder, "**", "*"), recursive=True) + [whole]:
            if os.path.isfile(f):
                with open(f, "rb") as h:  # both in the page cache, as a second load finds them
                    while h.read(1 << 24):
                        pass
        tmp = tempfile.mkdtemp(prefix="sets-tmpdir-")
        env = dict(os.environ, TMPDIR=tmp)
        v, _, _ = run_testload(bin_, folder, env, ["--verify"])
        checks = v.get("storage_checks", [])
        exact = bool(checks) and all(c.get("matches_file") for c in checks)
        print(f"{kind}: --verify: {len(checks)} storages, all match the set's files: {exact}", flush=True)
        runs = {"set": [], "file": []}
        for _ in range(3):
            runs["set"].append(run_testload(bin_, folder, env))
            runs["file"].append(run_testload(bin_, whole, env))
        row = {"verify_exact": exact, "storages": len(checks), "tmpdir_left": os.listdir(tmp)}
        for side, rs in runs.items():
            best = max(rs, key=lambda r: r[0]["gb_per_s"])
            row[side] = {"gb_per_s": round(best[0]["gb_per_s"], 2), "runs_gb_per_s":
                         [round(r[0]["gb_per_s"], 2) for r in rs], "wall_s": round(min(r[1] for r in rs), 3),
                         "engine_anon_mib": round(max(r[2] for r in rs), 1), "peak_bytes": best[0].get("peak_bytes"),
                         "peak_source": best[0].get("peak_source"),
                         "torch_load_peak_bytes": best[0].get("torch_load_peak_bytes"),
                         "bytes": best[0]["bytes"], "tensors": best[0]["tensors_loaded"]}
            print(f"{kind} {side}: {row[side]}", flush=True)
        row["ratio_gb_per_s"] = round(row["set"]["gb_per_s"] / row["file"]["gb_per_s"], 3)
        row["extra_anon_mib"] = round(row["set"]["engine_anon_mib"] - row["file"]["engine_anon_mib"], 1)
        if kind == "hf":
            try:
                row["torch_shards"] = torch_shards(folder)
                print(f"{kind} torch.load of each shard onto cuda:0: {row['torch_shards']}", flush=True)
            except Exception as e:  # noqa: BLE001 - the reference is optional
                row["torch_shards"] = str(e)
        os.rmdir(tmp) if not os.listdir(tmp) else None
        print(f"{kind}: set/file GB/s {row['ratio_gb_per_s']}, engine RssAnon set - file {row['extra_anon_mib']} MiB, "
              f"$TMPDIR left {row['tmpdir_left']}", flush=True)
        summary[kind] = row
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
