#!/usr/bin/python3
"""Writes resources/sample/ddp_checkpoint.pt, the checkpoint the app opens as its bundled sample.

Run with Python + PyTorch (written with torch 1.13):  /usr/bin/python3 resources/sample/make_sample.py

It is what a DistributedDataParallel training script typically saves on rank 0: keys prefixed
with `module.`, every model and optimizer-moment storage saved from cuda:0, Adam's state, the
script's argparse.Namespace and the epoch. No GPU is needed: a storage tagger registered ahead of
torch's own stamps the `cuda:0` location the file would carry after a real GPU run.
"""
import argparse
import os
import sys

import torch
from torch import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_checkpoint.pt")


class SmallCnn(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


CUDA0 = set()  # StorageImpl pointers of the storages to stamp


def tag_cuda0(storage):
    return "cuda:0" if storage._cdata in CUDA0 else None


def main():
    torch.manual_seed(0)
    args = argparse.Namespace(arch="smallcnn", lr=1e-3, batch_size=64, epochs=90, world_size=4, seed=0)
    model = nn.DataParallel(SmallCnn())  # same state-dict keys as DistributedDataParallel: `module.`
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(torch.randn(8, 3, 16, 16)), torch.randint(0, 10, (8,)))
        loss.backward()
        opt.step()
    ckpt = {
        "epoch": 12,
        "arch": args.arch,
        "state_dict": model.state_dict(),
        "optimizer": opt.state_dict(),
        "best_acc1": 61.25,
        "args": args,
    }
    gpu = list(ckpt["state_dict"].values()) + [
        t for s in ckpt["optimizer"]["state"].values() for k, t in s.items() if k != "step"]
    CUDA0.update(t.storage()._storage._cdata for t in gpu)
    torch.serialization.register_package(0, tag_cuda0, lambda _storage, _location: None)
    torch.save(ckpt, OUT)
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
