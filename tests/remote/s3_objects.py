#!/usr/bin/env python3
"""What the s3:// output tests ask of moto's server (s3_server.py) through boto3, in the PyTorch 2.x
root, so the objects ckptscope uploads are read by another S3 client and loaded by real torch.

  s3_objects.py ENDPOINT KEY_ID SECRET report BUCKET KEY...
      one JSON object: {"uploads": the bucket's multipart uploads in progress (ListMultipartUploads),
      KEY: {"sha256", "size", "load"} or null when no object is at KEY}; "load" is what
      torch.load(weights_only=True) gives for a .pt key (the number of its tensors) or its error.
  s3_objects.py ENDPOINT KEY_ID SECRET wait-upload BUCKET
      returns once the bucket holds a multipart upload in progress (at most 60 s; exit 1 if none).
"""
import hashlib
import io
import json
import sys
import time


def main():
    endpoint, key_id, secret, command, bucket = sys.argv[1:6]
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key_id,
                      aws_secret_access_key=secret, config=Config(s3={"addressing_style": "path"}))

    def uploads():
        return len(s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))

    if command == "wait-upload":
        until = time.monotonic() + 60
        while time.monotonic() < until:
            if uploads() > 0:
                return 0
            time.sleep(0.02)
        return 1
    report = {"uploads": uploads()}
    for key in sys.argv[6:]:
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except s3.exceptions.NoSuchKey:
            report[key] = None
            continue
        entry = {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
        if key.endswith(".pt"):
            import torch
            try:
                sd = torch.load(io.BytesIO(body), weights_only=True)
                entry["load"] = sum(1 for v in sd.values() if isinstance(v, torch.Tensor))
            except Exception as e:  # noqa: BLE001 - the test shows what torch said
                entry["load"] = f"{type(e).__name__}: {e}"
        report[key] = entry
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
