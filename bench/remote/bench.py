#!/usr/bin/python3
"""Remote reads (issue 28) against Debian's nginx on loopback (tests/remote/nginx_server.py).

Writes, once, under WORKDIR: a 1 GiB torch zip (512 float32 tensors of 2 MiB, as torch.save
writes it) and a 20-shard safetensors set (16 MiB per shard, with its index). Then measures:
  - bytes and requests of `inspect`, `check` and `check --values` of the 1 GiB file, of `check`
    of each of the 20 shards, and of `check`/`inspect` of the set by its index URL (the `remote`
    member of --json);
  - wall time of the same with 50 ms added to every request (a delaying proxy in front of nginx),
    against downloading the whole file first with `curl -o` through the same proxy.
Usage: bench.py BUILD_DIR [WORKDIR]   (prints a Markdown table and the ratios)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "..", "tests", "remote", "nginx_server.py")


def make_files(root):
    files = os.path.join(root, "files")
    os.makedirs(os.path.join(files, "set"), exist_ok=True)
    big = os.path.join(files, "big_1gib.pt")
    if not os.path.exists(big):
        import torch
        from collections import OrderedDict
        sd = OrderedDict((f"module.layer{i}.weight", torch.full((512, 1024), float(i))) for i in range(512))
        torch.save(sd, big + ".tmp")
        os.rename(big + ".tmp", big)
    index = os.path.join(files, "set", "model.safetensors.index.json")
    if not os.path.exists(index):
        weight_map = {}
        for s in range(20):
            name = "model-%05d-of-00020.safetensors" % (s + 1)
            hdr, off = {}, 0
            for t in range(8):
                key = "layers.%d.mlp.w%d" % (s, t)
                hdr[key] = {"dtype": "F32", "shape": [512, 1024], "data_offsets": [off, off + (2 << 20)]}
                off += (2 << 20)
                weight_map[key] = name
            h = json.dumps(hdr).encode()
            h += b" " * ((8 - len(h) % 8) % 8)
            with open(os.path.join(files, "set", name), "wb") as f:
                f.write(struct.pack("<Q", len(h)) + h)
                f.write(b"\0" * off)
        with open(index, "w") as f:
            json.dump({"metadata": {"total_size": 20 * 16 << 20}, "weight_map": weight_map}, f)
    return big


class Nginx:
    def __init__(self, root, delay_ms=0):
        args = [sys.executable, SERVER, root] + (["--delay-ms", str(delay_ms)] if delay_ms else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().split()[0])

    def url(self, path):
        return "http://127.0.0.1:%d/files/%s" % (self.port, path)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


def run(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return time.perf_counter() - t, p


def remote_of(cli, args):
    wall, p = run([cli] + args + ["--json"])
    if p.returncode == 2:
        sys.exit("failed: %s: %s" % (" ".join(args), p.stderr.decode()))
    doc = json.loads(p.stdout)
    return wall, doc["remote"]["bytes_read"], doc["remote"]["requests"]


def best(f, n=3):
    return min(f() for _ in range(n))


def main():
    build = sys.argv[1]
    work = sys.argv[2] if len(sys.argv) > 2 else os.path.join(tempfile.gettempdir(), "ckptscope-remote-bench")
    cli = os.path.join(build, "app", "ckptscope")
    root = os.path.join(work, "root")
    big = make_files(root)
    size = os.path.getsize(big)
    shards = sorted(f for f in os.listdir(os.path.join(root, "files", "set")) if f.endswith(".safetensors"))
    shard_bytes = sum(os.path.getsize(os.path.join(root, "files", "set", s)) for s in shards)
    rows = []

    n = Nginx(root)
    try:
        for label, args in [("inspect 1 GiB torch zip", ["inspect"]), ("check 1 GiB torch zip", ["check"]),
                            ("check --values 1 GiB torch zip", ["check", "--values"])]:
            wall, b, r = remote_of(cli, args + [n.url("big_1gib.pt")])
            rows.append((label, b, r, size, wall))
        tb = tr = worst = 0
        wall_all = 0.0
        for s in shards:
            wall, b, r = remote_of(cli, ["check", n.url("set/" + s)])
            tb, tr, worst, wall_all = tb + b, tr + r, max(worst, r), wall_all + wall
        rows.append(("check each of 20 shards", tb, tr, shard_bytes, wall_all))
        wall, b, r = remote_of(cli, ["check", n.url("set/model.safetensors.index.json")])
        rows.append(("check the 20-shard set (its index URL)", b, r, shard_bytes, wall))
        wall, b, r = remote_of(cli, ["inspect", n.url("set/model.safetensors.index.json")])
        rows.append(("inspect the 20-shard set", b, r, shard_bytes, wall))
    finally:
        n.close()

    print("| command | bytes read | of | requests | wall (loopback) |")
    print("|---|---|---|---|---|")
    for label, b, r, of, wall in rows:
        print("| %s | %s | %s | %d | %.3f s |" % (label, fmt(b), fmt(of), r, wall))
    print("\nmost requests for one shard: %d" % worst)

    d = Nginx(root, delay_ms=50)
    out = os.path.join(work, "download.tmp")
    try:
        t_inspect = best(lambda: run([cli, "inspect", d.url("big_1gib.pt")])[0])
        t_check = best(lambda: run([cli, "check", d.url("big_1gib.pt")])[0])

        def download_then_inspect():
            w1, p = run(["curl", "-s", "-f", "-o", out, d.url("big_1gib.pt")])
            assert p.returncode == 0, p.stderr
            w2, _ = run([cli, "inspect", out])
            os.unlink(out)
            return w1 + w2

        t_curl = best(download_then_inspect, 2)
        t_shards = best(lambda: sum(run([cli, "check", d.url("set/" + s)])[0] for s in shards), 2)
        t_set = best(lambda: run([cli, "check", d.url("set/model.safetensors.index.json")])[0])

        def download_shards():
            total = 0.0
            for s in shards:
                w, p = run(["curl", "-s", "-f", "-o", out, d.url("set/" + s)])
                assert p.returncode == 0
                total += w
                os.unlink(out)
            return total

        t_curl_shards = best(download_shards, 2)
    finally:
        d.close()
        if os.path.exists(out):
            os.unlink(out)
    print("\nWith 50 ms added to every request (delaying proxy in front of nginx), best of 3 (curl: of 2):\n")
    print("| task | ckptscope over HTTP | curl -o whole file, then local | ratio |")
    print("|---|---|---|---|")
    print("| inspect 1 GiB torch zip | %.3f s | %.3f s | %.0fx |" % (t_inspect, t_curl, t_curl / t_inspect))
    print("| check 1 GiB torch zip | %.3f s | %.3f s | %.0fx |" % (t_check, t_curl, t_curl / t_check))
    print("| check 20 shards one by one | %.3f s | %.3f s (download only) | %.1fx |"
          % (t_shards, t_curl_shards, t_curl_shards / t_shards))
    print("| check the 20-shard set | %.3f s | %.3f s (download only) | %.1fx |"
          % (t_set, t_curl_shards, t_curl_shards / t_set))


def fmt(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n


if __name__ == "__main__":
    main()
