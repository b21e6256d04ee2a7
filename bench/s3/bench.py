#!/usr/bin/python3
"""Object-store reads and writes (issue 41) against moto's S3 server on loopback, with 50 ms added
to every request, beside downloading with s3cmd and working locally.

The store is tests/remote/s3_server.py (Debian testing's python3-moto, run in the PyTorch 2.x root
by scripts/torch2-python.sh), in its --no-auth mode: moto 5.1 refuses every signed ListObjectsV2
whose prefix holds a '/', which is every folder listing (see s3_server.py), so the requests here
are unsigned (--no-sign-request, s3cmd with any key). Signing changes headers, not the bytes or
the requests counted. A delaying proxy (tests/remote/nginx_server.py's) sits between the clients
and the store: every chunk a client sends waits 50 ms, a far region's round trip.

Writes, once, under WORKDIR: a 1 GiB torch zip (512 float32 tensors of 2 MiB, as torch.save
writes it, the file bench/remote/bench.py measures over HTTP) and a 1 GiB DCP folder of 4 ranks
(bench/sharded/make_set.py dcp: 16 MiB weights split along dim 0). Then prints:
  - bytes and requests of `inspect` and `check` of each, from the `remote` member of --json;
  - wall time of each, against `s3cmd get` of the object or folder and the same command locally;
  - wall time of `convert` of the folder from S3 to S3 (one object), against s3cmd get, a local
    convert and s3cmd put.
moto answers each ranged GET of a 1 GiB object in about 0.75 s on this 2-core VM (`curl -r
0-65535` of it, measured 2026-12-07), as it copies the stored value, so the wall times here hold
that cost per request on both sides: the bytes and requests are the transport's own figures, the
wall ratios a floor. A command ckptscope refuses (a feature not there yet) is printed as refused with its message, so
the table says what is missing rather than leaving it out.

Usage: bench.py [--counts-only] BUILD_DIR [WORKDIR]      (needs s3cmd: apt-get install s3cmd)
--counts-only: the bytes and requests table alone, with each command's single wall time (minutes
instead of the half hour the best-of runs take against moto on a 2-core machine).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "remote"))

from nginx_server import delaying_proxy  # noqa: E402  (the one delaying proxy of the benches)


def _http_bench():
    """bench/remote/bench.py, by its path: this file's own name would shadow it on sys.path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("http_bench", os.path.join(ROOT, "bench", "remote", "bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_http = _http_bench()
make_files, fmt, best = _http.make_files, _http.fmt, _http.best  # its 1 GiB file, its units, best-of-N

BUCKET = "bench"
DELAY_MS = 50


def make_dcp(work):
    """make_set.py's folder (it prints where; idempotent)."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sharded", "make_set.py"),
                        os.path.join(work, "dcp"), "1024", "dcp"], check=True, stdout=subprocess.PIPE, text=True)
    return p.stdout.strip().splitlines()[-1]


class Store:
    """moto's server holding the objects, behind the delaying proxy."""

    def __init__(self, objects):
        args = [os.path.join(ROOT, "scripts", "torch2-python.sh"), os.path.join(ROOT, "tests", "remote", "s3_server.py"),
                "--no-auth"]
        for key, path in objects:
            args += ["--object", "%s/%s=%s" % (BUCKET, key, path)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            sys.exit("the S3 server did not start (scripts/modern-torch.sh makes the PyTorch 2.x root with moto)")
        self.store_port = int(line.split()[0])
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=delaying_proxy, args=(self.port, self.store_port, DELAY_MS / 1000, self.stop),
                         daemon=True).start()
        time.sleep(0.2)

    def env(self):
        e = dict(os.environ)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            e.pop(k, None)
        e.update({"AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % self.port, "AWS_REGION": "us-east-1",
                  "CKPTSCOPE_PROGRESS_AFTER_MS": "999999999"})
        return e

    def s3cmd(self, *args):
        host = "127.0.0.1:%d" % self.port
        return ["s3cmd", "--no-ssl", "--host=" + host, "--host-bucket=" + host, "--access_key=x",
                "--secret_key=x", "--region=us-east-1", "--no-progress", "--config=/dev/null"] + list(args)

    def close(self):
        self.stop.set()
        self.proc.stdin.close()
        self.proc.wait(30)


def run(cmd, env=None):
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return time.perf_counter() - t, p


def refused(p):
    lines = p.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "exit %d" % p.returncode


def measured(cli, store, args):
    """(wall, bytes, requests) of one --json command, or (None, message, None) where refused."""
    wall, p = run([cli] + args + ["--no-sign-request", "--json"], store.env())
    if p.returncode == 2:
        return None, refused(p), None
    r = json.loads(p.stdout).get("remote", {})
    return wall, r.get("bytes_read"), r.get("requests")


def main():
    counts_only = "--counts-only" in sys.argv[1:]
    argv = [a for a in sys.argv if a != "--counts-only"]
    if len(argv) < 2:
        sys.exit(__doc__)
    if not shutil.which("s3cmd"):
        sys.exit("bench.py: needs s3cmd (apt-get install s3cmd)")
    cli = os.path.join(argv[1], "app", "ckptscope")
    work = argv[2] if len(argv) > 2 else os.path.join(tempfile.gettempdir(), "ckptscope-s3-bench")
    big = make_files(os.path.join(work, "root"))
    dcp = make_dcp(work)
    members = sorted(os.listdir(dcp))
    objects = [("big_1gib.pt", big)] + [("dcp/" + m, os.path.join(dcp, m)) for m in members]
    dcp_bytes = sum(os.path.getsize(os.path.join(dcp, m)) for m in members)
    local = os.path.join(work, "local")
    store = Store(objects)
    rows, times = [], []
    print_header()
    try:
        file_url, dir_url = "s3://%s/big_1gib.pt" % BUCKET, "s3://%s/dcp/" % BUCKET
        for what, url, size, local_input in (("1 GiB torch zip", file_url, os.path.getsize(big), big),
                                             ("4-rank 1 GiB DCP folder", dir_url, dcp_bytes, dcp)):
            for cmd in ("inspect", "check"):
                wall, b, r = measured(cli, store, [cmd, url])
                rows.append(("%s %s" % (cmd, what), b, r, size, wall))
                print_row(rows[-1])
                if wall is None or counts_only:
                    continue

                def fetch_then_local():
                    shutil.rmtree(local, ignore_errors=True)
                    os.makedirs(local)
                    get = ["get", "--recursive", url, local + "/"] if url.endswith("/") else ["get", url, local + "/"]
                    w1, p = run(store.s3cmd(*get))
                    assert p.returncode == 0, p.stderr.decode()
                    target = local if url.endswith("/") else os.path.join(local, os.path.basename(url))
                    w2, p = run([cli, cmd, target])
                    assert p.returncode in (0, 1), p.stderr.decode()
                    return w1 + w2

                t_s3 = best(lambda: run([cli, cmd, url, "--no-sign-request"], store.env())[0])
                times.append(("%s %s" % (cmd, what), t_s3, best(fetch_then_local, 2)))
                print_time(times[-1])

        # The folder, consolidated from the store into one object of the store.
        runs = iter(range(100))  # each convert writes a key of its own: none is replaced

        def convert_to_store():
            url = "s3://%s/out/model-%d.pt" % (BUCKET, next(runs))
            return run([cli, "convert", dir_url, "-o", url, "--no-sign-request"], store.env())

        wall, p = convert_to_store()
        if p.returncode != 0:
            rows.append(("convert the DCP folder, S3 to S3", refused(p), None, dcp_bytes, None))
            print_row(rows[-1])
        elif counts_only:
            print("| convert the DCP folder, S3 to S3 (one run) | | %s | | %.3f s |" % (fmt(dcp_bytes), wall), flush=True)
        else:
            def fetch_convert_put():
                shutil.rmtree(local, ignore_errors=True)
                os.makedirs(local)
                w1, p = run(store.s3cmd("get", "--recursive", dir_url, local + "/"))
                assert p.returncode == 0, p.stderr.decode()
                out = os.path.join(work, "converted.pt")
                w2, p = run([cli, "convert", local, "-o", out])
                assert p.returncode == 0, p.stderr.decode()
                w3, p = run(store.s3cmd("put", out, "s3://%s/out/by-s3cmd.pt" % BUCKET))
                assert p.returncode == 0, p.stderr.decode()
                os.unlink(out)
                return w1 + w2 + w3

            t = best(lambda: convert_to_store()[0], 2)
            times.append(("convert the DCP folder, S3 to S3", t, best(fetch_convert_put, 2)))
            print_time(times[-1])
    finally:
        store.close()
        shutil.rmtree(local, ignore_errors=True)

    if counts_only:
        return
    print("\nBest of 3 (s3cmd: of 2) above; the tables again:\n")
    print_header()
    for row in rows:
        print_row(row)
    if times:
        print("\n| task | ckptscope on s3:// | s3cmd get, then local | ratio |")
        print("|---|---|---|---|")
        for t in times:
            print_time(t)


def print_header():
    print("moto on loopback, %d ms added to every request; bytes and requests from --json's `remote`\n" % DELAY_MS)
    print("| command | bytes read | of | requests | wall |")
    print("|---|---|---|---|---|", flush=True)


def print_row(row):
    label, b, r, of, wall = row
    if wall is None:
        print("| %s | refused: %s | %s | | |" % (label, b, fmt(of)), flush=True)
    else:
        print("| %s | %s | %s | %d | %.3f s |" % (label, fmt(b), fmt(of), r, wall), flush=True)


def print_time(t):
    label, ours, theirs = t
    print("| %s (s3cmd get, then local) | %.3f s | %.3f s | %.1fx |" % (label, ours, theirs, theirs / ours), flush=True)

if __name__ == "__main__":
    main()
