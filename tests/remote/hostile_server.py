#!/usr/bin/env python3
"""A misbehaving HTTP server on 127.0.0.1 for the remote tests (python3 stdlib only).

Serves FILE (a real checkpoint) under paths that each break one rule:
  /good/F          ranges as they should be (the baseline)
  /ignore-range/F  answers every Range with 200 and the whole body, followed by endless zeros
  /no-ranges/F     answers every request with 200 and the whole file (a server without ranges)
  /endless/F       answers with 206 and a correct Content-Range, then never stops sending
  /redirect-loop/F 302 to /redirect-loop2/F, which redirects back
  /wrong-range/F   206 with a Content-Range that is not the range asked for
  /etag/F          a new ETag on every reply
  /grow/F          the size in Content-Range grows by one on every reply
  /stall/F         good for the first reply; then headers and a few bytes, and silence
  /stall-big/F     the same for every range of 1 MiB or more (storage bytes), good for the rest
  /truncated/F     Content-Length as asked, half the bytes, then the connection closes
  /trickle/F       ranges as they should be, sent 4 KiB every 20 ms (about 200 KiB/s): an open
                   that lasts seconds while bytes keep coming (the window's progress)
  /status-500/F    always 500;  /status-429/F: 429 twice, then good
  /retry-after/F   429 with `Retry-After: 2` on the first request, and again (with the seconds
                   left) to any request before those 2 s have passed; then good
  /retry-after-long/F  429 with `Retry-After: 3600`, always
  /need-token/F    401 unless `Authorization: Bearer secret`; logs every Authorization it saw
  http://127.0.0.1:PORT/...  as a forward proxy (absolute-form requests), to loopback only,
                   logging each URL to $HOSTILE_PROXY_LOG
Hostile replies to what a Hub client asks (HF_ENDPOINT pointing here), each request's path
(percent-decoded, dot segments resolved) logged to $HOSTILE_PATH_LOG:
  /api/models/hub/CASE/revision/REV  the Hub API's listing of repository hub/CASE, bent per CASE
                   (LISTINGS below); /hub/CASE/resolve/REV/NAME serves FILE
  /set/CASE/NAME   a sharded set whose index (model.safetensors.index.json) names the shards of
                   SET_INDEXES[CASE]; any other NAME serves FILE
S3-compatible replies (AWS_ENDPOINT_URL pointing here, path-style), bucket CASE in S3_CASES:
  /CASE/?list-type=2...  a ListObjectsV2 reply bent per CASE; /CASE/KEY serves FILE with ranges
S3 writes (convert -o s3://CASE/KEY, a multipart upload), bucket CASE in S3_WRITES, every request
logged as "METHOD PATH?QUERY" to $HOSTILE_METHOD_LOG: HEAD (404: no object there), POST ?uploads,
PUT ?partNumber, POST ?uploadId (complete), DELETE ?uploadId (abort), each bent per CASE.
Prints its port on stdout, then serves until stdin closes.
"""
import http.server
import itertools
import json
import os
import posixpath
import re
import socketserver
import sys
import threading
import time
import urllib.parse

DATA = b""
COUNTS = {}


def s3_page(keys, token=None, truncated=False):
    contents = "".join(f"<Contents><Key>{k}</Key><Size>{len(DATA)}</Size></Contents>" for k in keys)
    more = f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
    if token:
        more += f"<NextContinuationToken>{token}</NextContinuationToken>"
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>{contents}{more}'
            "</ListBucketResult>").encode()


LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
          + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i else b"&lol;") * 10) for i in range(10))
          + b"]><ListBucketResult><Contents><Key>&lol9;</Key></Contents></ListBucketResult>")

# What a bucket named CASE answers to ListObjectsV2 (its prefix "dir/"), by the continuation token
# asked with (None for the first page).
S3_CASES = {
    # A new token on every page, for ever: the listing stops at its page bound.
    "s3-endless": lambda token: s3_page([], token=f"t{int((token or 't0')[1:]) + 1}", truncated=True),
    # The first page's token again on the second: a loop.
    "s3-loop": lambda token: s3_page([f"dir/f{token}.txt"], token="again", truncated=True),
    "s3-no-token": lambda token: s3_page(["dir/a.txt"], truncated=True),
    "s3-laughs": lambda token: LAUGHS,
    "s3-deep": lambda token: b"<ListBucketResult>" + b"<a>" * 100000 + b"</a>" * 100000 + b"</ListBucketResult>",
    "s3-not-xml": lambda token: b"{\"this\": \"is json\"}",
    "s3-huge": lambda token: s3_page([f"dir/{i:09d}.txt" for i in range(400000)]),
    "s3-bad-size": lambda token: b"<ListBucketResult><Contents><Key>dir/m.pt</Key><Size>-1</Size></Contents>"
                                 b"<IsTruncated>false</IsTruncated></ListBucketResult>",
    # Good listings of one checkpoint file, served only after two 503 SlowDown replies.
    "s3-slowdown": lambda token: s3_page(["dir/model.pt"]),
}


def siblings(names):
    return json.dumps({"id": "hub/x", "siblings": [{"rfilename": n} for n in names]}).encode()


# The Hub API's reply for repository hub/CASE. A name from a listing must be a path inside the
# repository: requested as exactly that file, never one of another repository.
LISTINGS = {
    "deep": b'{"siblings": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    "many": siblings(f"w{i}.pt" for i in range(300000)),
    "traversal": siblings(["../../../hub/other/resolve/main/model.safetensors"]),
    "absolute": siblings(["/hub/other/resolve/main/model.safetensors"]),
    "percent": siblings(["..%2F..%2F..%2Fhub%2Fother%2Fresolve%2Fmain%2Fmodel.safetensors"]),
    "query": siblings(["model.safetensors?x=../../../../hub/other"]),
    "escapes": siblings(["\x1b[2Ja.pt", "b\x1b]0;title\x07.pt", "c\u009b2J.pt"]),
    "not-json": b"<html><body>Hub maintenance</body></html>",
    "no-siblings": b'{"id": "hub/x", "siblings": {"rfilename": "model.safetensors"}}',
}

# The weight_map of the set /set/CASE/: every shard name must be a file beside the index.
SET_INDEXES = {
    "dotdot": {"w": "../escape.safetensors"},
    "slash": {"w": "sub/../../escape.safetensors"},
    "dot": {"w": "."},
    "encoded": {"w": "%2e%2e%2fescape.safetensors"},
    "query": {"w": "model.safetensors?../../escape"},
}
# What each bucket of an S3 write does wrong (Handler.s3_write); the others answer as S3 does.
S3_WRITES = {
    "s3w-complete-error",   # CompleteMultipartUpload: 200, then an <Error> body (S3 does this)
    "s3w-part-slowdown",    # UploadPart: 503 SlowDown twice, then good
    "s3w-part-500",         # UploadPart: 500, always
    "s3w-no-etag",          # UploadPart: 200 without an ETag
    "s3w-no-upload-id",     # CreateMultipartUpload: a result without an UploadId
    "s3w-laughs",           # CreateMultipartUpload: the billion laughs
    "s3w-exists",           # HEAD: an object is there
    "s3w-precondition",     # CompleteMultipartUpload: 412 (an object appeared at the key)
    "s3w-region",           # HEAD: 301 with x-amz-bucket-region
    "s3w-good",             # as S3
}
LOCK = threading.Lock()
ETAGS = itertools.count()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def count(self, key):
        with LOCK:
            COUNTS[key] = COUNTS.get(key, 0) + 1
            return COUNTS[key]

    def range(self, size):
        m = re.match(r"bytes=(\d*)-(\d*)$", self.headers.get("Range", ""))
        if not m:
            return None
        if m.group(1) == "":
            n = int(m.group(2))
            return max(0, size - n), size - 1
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else size - 1
        return first, min(last, size - 1)

    def start_good_range(self):
        """The headers of a correct reply to the Range asked for (the whole file without one);
        returns the body they announce, for the caller to send as it misbehaves."""
        r = self.range(len(DATA)) or (0, len(DATA) - 1)
        body = DATA[r[0]:r[1] + 1]
        self.send_response(206)
        self.send_header("Content-Range", "bytes %d-%d/%d" % (r[0], r[1], len(DATA)))
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"fixed"')
        self.end_headers()
        return body

    def send_range(self, etag='"fixed"', total=None, body_cut=None, content_range=None):
        size = len(DATA)
        r = self.range(size)
        if r is None:
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(DATA)
            return
        first, last = r
        body = DATA[first:last + 1]
        self.send_response(206)
        self.send_header("Content-Range", content_range or "bytes %d-%d/%d" % (first, last, total or size))
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(body if body_cut is None else body[:body_cut])

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def s3_write(self, kind):
        with open(os.environ.get("HOSTILE_METHOD_LOG", os.devnull), "a") as f:
            f.write(f"{self.command} {self.path}\n")
        self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query, keep_blank_values=True)
        error = b"<Error><Code>%s</Code><Message>%s</Message></Error>"
        if self.command == "HEAD":
            if kind == "s3w-exists":
                return self.reply(200, headers=[("ETag", '"there"')])
            if kind == "s3w-region":
                return self.reply(301, headers=[("x-amz-bucket-region", "eu-west-1")])
            return self.reply(404)
        if self.command == "POST" and "uploads" in query:
            if kind == "s3w-no-upload-id":
                return self.reply(200, b"<InitiateMultipartUploadResult><Bucket>b</Bucket>"
                                       b"</InitiateMultipartUploadResult>")
            if kind == "s3w-laughs":
                return self.reply(200, LAUGHS)
            return self.reply(200, b'<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult>'
                                   b"<UploadId>up-1</UploadId></InitiateMultipartUploadResult>")
        if self.command == "PUT" and "partNumber" in query:
            if kind == "s3w-part-slowdown" and self.count(kind) <= 2:
                return self.reply(503, error % (b"SlowDown", b"Please reduce your request rate."))
            if kind == "s3w-part-500":
                return self.reply(500, error % (b"InternalError", b"We encountered an internal error."))
            if kind == "s3w-no-etag":
                return self.reply(200)
            return self.reply(200, headers=[("ETag", '"part-%s"' % query["partNumber"][0])])
        if self.command == "POST" and "uploadId" in query:
            if kind == "s3w-precondition":
                return self.reply(412, error % (b"PreconditionFailed", b"At least one of the pre-conditions "
                                                                       b"you specified did not hold"))
            # S3 answers 200 at once and sends spaces while it assembles the parts.
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b" " * 100)
            if kind == "s3w-complete-error":
                self.wfile.write(error % (b"InternalError", b"We encountered an internal error. Please try again."))
            else:
                self.wfile.write(b'<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult>'
                                 b'<ETag>"done-1"</ETag></CompleteMultipartUploadResult>')
            return None
        if self.command == "DELETE" and "uploadId" in query:
            return self.reply(204)
        return self.reply(400, error % (b"InvalidRequest", b"not a request of a multipart upload"))

    def do_HEAD(self):
        self.write_request()

    def do_PUT(self):
        self.write_request()

    def do_POST(self):
        self.write_request()

    def do_DELETE(self):
        self.write_request()

    def write_request(self):
        kind = (self.path.split("/") + ["", ""])[1]
        try:
            if kind in S3_WRITES:
                self.s3_write(kind)
            else:
                self.reply(405)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):
        if self.path.startswith("http://"):
            return self.proxy()
        with open(os.environ.get("HOSTILE_PATH_LOG", os.devnull), "a") as f:
            f.write(posixpath.normpath(urllib.parse.unquote(self.path)) + "\n")
        parts = self.path.split("/")
        kind = parts[1] if len(parts) > 1 else ""
        try:
            self.route(kind)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def proxy(self):
        """A forward proxy for http://127.0.0.1 only (the tests set http_proxy to it); logs each URL."""
        import urllib.request
        with open(os.environ.get("HOSTILE_PROXY_LOG", os.devnull), "a") as f:
            f.write(self.path + "\n")
        if not self.path.startswith("http://127.0.0.1:"):
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        req = urllib.request.Request(self.path, headers={k: v for k, v in self.headers.items()
                                                         if k.lower() in ("range", "authorization")})
        try:
            resp = urllib.request.urlopen(req)
        except urllib.error.HTTPError as e:
            resp = e
        body = resp.read()
        self.send_response(resp.status if hasattr(resp, "status") else resp.code)
        for k in ("Content-Range", "ETag", "Location"):
            if resp.headers.get(k):
                self.send_header(k, resp.headers[k])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def s3(self, kind):
        parsed = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(parsed.query)
        if kind == "s3-slowdown" and self.count(kind) <= 2:
            body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif kind == "s3-region":
            body = (b"<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting to access must be "
                    b"addressed using the specified endpoint.</Message><Endpoint>s3-region.s3.eu-west-1.amazonaws.com"
                    b"</Endpoint></Error>")
            self.send_response(301)
            self.send_header("x-amz-bucket-region", "eu-west-1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif kind == "s3-expired":
            body = b"<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>"
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif "list-type" in query:
            body = S3_CASES[kind](query.get("continuation-token", [None])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_range()

    def route(self, kind):
        if kind.startswith("s3-"):
            self.s3(kind)
        elif kind == "good":
            self.send_range()
        elif kind == "ignore-range":
            self.send_response(200)
            self.end_headers()  # no length: the body runs until the connection closes
            self.wfile.write(DATA)
            while True:
                self.wfile.write(b"\0" * 65536)
        elif kind == "no-ranges":
            self.send_response(200)
            self.send_header("Content-Length", str(len(DATA)))
            self.end_headers()
            self.wfile.write(DATA)
        elif kind == "endless":
            r = self.range(len(DATA)) or (0, len(DATA) - 1)
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (r[0], r[1], len(DATA)))
            self.send_header("Connection", "close")
            self.end_headers()
            while True:
                self.wfile.write(b"\0" * 65536)
        elif kind in ("redirect-loop", "redirect-loop2"):
            other = "redirect-loop2" if kind == "redirect-loop" else "redirect-loop"
            self.send_response(302)
            self.send_header("Location", "/" + other + "/" + self.path.split("/", 2)[2])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif kind == "wrong-range":
            r = self.range(len(DATA)) or (0, len(DATA) - 1)
            shifted = "bytes %d-%d/%d" % (r[0] + 1, r[1], len(DATA)) if r[0] + 1 <= r[1] else "bytes 5-4/3"
            self.send_range(content_range=shifted)
        elif kind == "etag":
            self.send_range(etag='"v%d"' % next(ETAGS))
        elif kind == "grow":
            n = self.count("grow")
            self.send_range(total=len(DATA) + n - 1)
        elif kind in ("stall", "stall-big"):
            r = self.range(len(DATA)) or (0, len(DATA) - 1)
            small = r[1] - r[0] + 1 < (1 << 20)
            if (kind == "stall" and self.count("stall") == 1) or (kind == "stall-big" and small):
                self.send_range()
                return
            body = self.start_good_range()
            self.wfile.write(body[:10])
            self.wfile.flush()
            time.sleep(120)
        elif kind == "trickle":
            body = self.start_good_range()
            for at in range(0, len(body), 4096):
                self.wfile.write(body[at:at + 4096])
                self.wfile.flush()
                time.sleep(0.02)
        elif kind == "truncated":
            body = self.start_good_range()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
        elif kind == "status-500":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif kind == "status-429":
            if self.count("429") <= 2:
                self.send_response(429)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_range()
        elif kind == "retry-after":
            with LOCK:
                until = COUNTS.setdefault("retry-after-until", time.monotonic() + 2)
            left = until - time.monotonic()
            if left > 0:
                self.send_response(429)
                self.send_header("Retry-After", str(max(1, round(left))))
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_range()
        elif kind == "retry-after-long":
            self.send_response(429)
            self.send_header("Retry-After", "3600")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif kind == "api":
            case = self.path.split("/")[4] if self.path.count("/") >= 4 else ""
            if case == "endless":
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                while True:
                    self.wfile.write(b" " * 65536)
            body = LISTINGS.get(case, siblings(["model.safetensors"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif kind == "hub":
            self.send_range()
        elif kind == "set":
            case, name = (self.path.split("/", 3)[2:] + [""])[:2]
            if name == "model.safetensors.index.json" and case in SET_INDEXES:
                body = json.dumps({"metadata": {}, "weight_map": SET_INDEXES[case]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_range()
        elif kind == "need-token":
            auth = self.headers.get("Authorization", "")
            with open(os.environ.get("HOSTILE_AUTH_LOG", os.devnull), "a") as f:
                f.write(auth + "\n")
            if auth != "Bearer secret":
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_range()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hung up on purpose (the tests' whole point) is no error here


def main():
    global DATA
    DATA = open(sys.argv[1], "rb").read()
    srv = Server(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        sys.stdin.read()
    except (OSError, ValueError):
        pass
    srv.shutdown()


if __name__ == "__main__":
    main()
