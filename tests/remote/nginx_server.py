#!/usr/bin/env python3
"""Runs Debian's nginx on 127.0.0.1 for the remote tests and bench, from a temporary config.

Serves ROOT with range requests on two free ports:
  PORT   /files/NAME                        ROOT/files/NAME
         /private/NAME                      ROOT/files/NAME, only with `Authorization: Bearer secret`
         /slow/NAME                         ROOT/files/NAME at 16 MB/s
         /ORG/REPO/resolve/REV/PATH         302 to PORT2 /cdn/ORG/REPO/REV/PATH (the Hub's redirect to its CDN)
         /gated/REPO/resolve/REV/PATH       401 with the Hub's X-Error-Message unless `Bearer hf_secret`
         /api/models/ORG/REPO/revision/REV  ROOT/api/models/ORG/REPO/revision/REV (JSON)
  PORT2  /cdn/...                           ROOT/cdn/..., 400 to any request carrying Authorization
  PORT3  /files/NAME over TLS with HTTP/2, a self-signed certificate for 127.0.0.1 (TMP/cert.pem)
Prints "PORT PORT2 PORT3 CERT" on stdout once nginx answers, then runs until stdin closes or SIGTERM; nginx,
its config, pid, logs and temp dirs go with it. --delay-ms adds that latency to every request
(a proxy in front of nginx, for the bench); the printed PORT is then the proxy's. --in-flight FILE
puts the proxy in front too (with no delay unless --delay-ms), counting requests sent and not yet
answered across its connections; the most at once is written to FILE (see InFlight).
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONFIG = """
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    types {{ application/json json; }}
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location /files/ {{ }}
        # 16 MB/s: a storage read that lasts past a second (the progress line)
        location /slow/ {{
            limit_rate 16m;
            alias {root}/files/;
        }}
        location /private/ {{
            if ($http_authorization != "Bearer secret") {{ return 401; }}
            alias {root}/files/;
        }}
        location /api/models/ {{ default_type application/json; }}
        location ~ ^/gated/([^/]+)/resolve/([^/]+)/(.*)$ {{
            if ($http_authorization != "Bearer hf_secret") {{
                add_header X-Error-Code GatedRepo always;
                add_header X-Error-Message "Access to model gated/$1 is restricted. You must have access to it and be authenticated to access it. Please log in." always;
                return 401;
            }}
            return 302 http://127.0.0.1:{port2}/cdn/gated/$1/$2/$3;
        }}
        location ~ ^/([^/]+)/([^/]+)/resolve/([^/]+)/(.*)$ {{
            return 302 http://127.0.0.1:{port2}/cdn/$1/$2/$3/$4;
        }}
    }}
    server {{
        listen 127.0.0.1:{port3} ssl http2;
        ssl_certificate {tmp}/cert.pem;
        ssl_certificate_key {tmp}/key.pem;
        root {root};
        location /files/ {{ }}
    }}
    server {{
        listen 127.0.0.1:{port2};
        root {root};
        # The CDN is another host: a client that forwards the Hub's Authorization here is wrong.
        location /cdn/ {{
            if ($http_authorization != "") {{ return 400; }}
        }}
    }}
}}
"""


class InFlight:
    """Requests sent and not answered yet, over all of a proxy's connections; the most at once is
    written to `path` as it grows. Each request is held until another is in flight beside it, or
    HOLD_S has passed: a client with several requests out at once is seen to have them however its
    threads and this one's are scheduled, and one that sends them one after another is seen to as
    well (its requests each wait HOLD_S, and never overlap). Removing the file starts a new count."""
    HOLD_S = 1.0

    def __init__(self, path):
        self.path = path
        self.now = 0
        self.most = 0
        self.cond = threading.Condition()

    def asked(self):
        with self.cond:
            self.now += 1
            if not os.path.exists(self.path):
                self.most = 0
            if self.now > self.most:
                self.most = self.now
                with open(self.path, "w") as f:
                    f.write("%d\n" % self.most)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.now > 1, timeout=self.HOLD_S)

    def answered(self):
        with self.cond:
            self.now -= 1


def delaying_proxy(listen_port, target_port, delay_s, stop, in_flight=None):
    """Forwards each connection to the server; each request waits delay_s, a round trip: the first
    bytes a client sends after the server's last answer wait, the rest of a request (an upload's
    body) flows on. (Waiting on every chunk would charge a 1 GiB upload 16,384 round trips.)
    `in_flight` (an InFlight): told when each request is sent and when its answer starts."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen_port))
    srv.listen(64)
    srv.settimeout(0.5)

    def pipe(src, dst, state, from_client):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if from_client and state["answered"]:
                    if in_flight:
                        in_flight.asked()
                    time.sleep(delay_s)
                elif not from_client and not state["answered"] and in_flight:
                    in_flight.answered()
                state["answered"] = not from_client
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while not stop.is_set():
        try:
            client, _ = srv.accept()
        except socket.timeout:
            continue
        upstream = socket.create_connection(("127.0.0.1", target_port))
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state = {"answered": True}  # a new connection's first request waits too
        threading.Thread(target=pipe, args=(client, upstream, state, True), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client, state, False), daemon=True).start()
    srv.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--in-flight", metavar="FILE")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ckptscope-nginx-")
    port, port2, port3 = free_port(), free_port(), free_port()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", os.path.join(tmp, "key.pem"),
                    "-out", os.path.join(tmp, "cert.pem")], check=True, capture_output=True)
    with open(os.path.join(tmp, "nginx.conf"), "w") as f:
        f.write(CONFIG.format(tmp=tmp, root=os.path.abspath(args.root), port=port, port2=port2, port3=port3))
    proc = subprocess.Popen([args.nginx, "-e", os.path.join(tmp, "error.log"), "-p", tmp, "-c",
                             os.path.join(tmp, "nginx.conf")], stdin=subprocess.DEVNULL)
    stop = threading.Event()

    def finish(*_):
        stop.set()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    for _ in range(200):
        if proc.poll() is not None:
            sys.stderr.write(open(os.path.join(tmp, "error.log")).read())
            shutil.rmtree(tmp, ignore_errors=True)
            sys.exit(1)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    shown = port
    if args.delay_ms > 0 or args.in_flight:
        shown = free_port()
        counted = InFlight(args.in_flight) if args.in_flight else None
        threading.Thread(target=delaying_proxy, args=(shown, port, args.delay_ms / 1000, stop, counted),
                         daemon=True).start()
        time.sleep(0.2)
    print(shown, port2, port3, os.path.join(tmp, "cert.pem"), flush=True)
    try:
        sys.stdin.read()
    except (OSError, ValueError):
        pass
    finish()


if __name__ == "__main__":
    main()
