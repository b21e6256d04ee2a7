#!/usr/bin/env python3
"""Runs moto's S3 server (Debian's python3-moto, in the PyTorch 2.x root) on 127.0.0.1 for the s3://
tests, with signatures checked.

  s3_server.py [--no-auth] [--object BUCKET/KEY=PATH ...] [--listing BUCKET/PREFIX=COUNT]
               [--in-flight FILE]

Makes an IAM user whose key is printed (moto then checks every request's Signature Version 4
against it: INITIAL_NO_AUTH_ACTION_COUNT lets the setup below through, and nothing after it),
the buckets the objects name, and the objects from local files. --listing puts COUNT empty
objects under BUCKET/PREFIX (listings over many pages).

--no-auth: no signature is checked and every bucket and object is public-read, for unsigned
requests and listings. With
checks on, moto 5.1 cannot serve either: an unsigned request to a public bucket is its own
KeyError (HTTP 500), and it refuses every signed ListObjectsV2 whose prefix or delimiter holds a
'/' (it signs the query with '/' decoded: botocore's own list_objects_v2(Prefix='m/') is refused
the same way), which is every folder listing.
--in-flight FILE: clients reach moto through nginx_server.py's proxy, which writes the most requests
in flight at once to FILE (its InFlight: each request held until another is in flight, or 1 s).
Prints "PORT ACCESS_KEY SECRET_KEY" once it answers (PORT: the proxy's, with --in-flight), then runs until stdin closes.
"""
import argparse
import json
import os
import socket
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--object", action="append", default=[])
    ap.add_argument("--no-auth", action="store_true")
    ap.add_argument("--listing", action="append", default=[])
    ap.add_argument("--in-flight", metavar="FILE")
    args = ap.parse_args()

    objects = []
    for spec in args.object:
        target, path = spec.split("=", 1)
        bucket, key = target.split("/", 1)
        objects.append((bucket, key, path))
    listings = []
    for spec in args.listing:
        target, count = spec.split("=", 1)
        bucket, prefix = target.split("/", 1)
        listings.append((bucket, prefix, int(count)))
    buckets = sorted({b for b, _, _ in objects} | {b for b, _, _ in listings})
    # The setup's actions: the user, its policy, its key, then per bucket one create, and per
    # object one put.
    setup = 3 + len(buckets) + len(objects) + sum(c for _, _, c in listings)
    if not args.no_auth:
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(setup)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(k, None)

    import logging

    import boto3
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # The setup is signed with a key of no user (moto tells services apart by the signature's scope)
    # and let through uncounted by INITIAL_NO_AUTH_ACTION_COUNT.
    setup_key = {"aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
    path_style = Config(s3={"addressing_style": "path"})
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", **setup_key)
    iam.create_user(UserName="ckptscope")
    iam.put_user_policy(UserName="ckptscope", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="ckptscope")["AccessKey"]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=path_style, **setup_key)
    # Without checks the store still keeps objects private from unsigned requests, as S3 does:
    # they are made public-read, a public bucket's objects.
    acl = {"ACL": "public-read"} if args.no_auth else {}
    for b in buckets:
        s3.create_bucket(Bucket=b, **acl)
    for b, k, path in objects:
        with open(path, "rb") as f:
            s3.put_object(Bucket=b, Key=k, Body=f.read(), **acl)
    for b, prefix, count in listings:
        for i in range(count):
            s3.put_object(Bucket=b, Key=f"{prefix}{i:06d}", Body=b"", **acl)
    shown = port
    if args.in_flight:
        import threading
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from nginx_server import InFlight, delaying_proxy
        shown = free_port()
        threading.Thread(target=delaying_proxy, args=(shown, port, 0, threading.Event(), InFlight(args.in_flight)),
                         daemon=True).start()
        import time
        time.sleep(0.2)  # the proxy listens
    print(shown, key["AccessKeyId"], key["SecretAccessKey"], flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
