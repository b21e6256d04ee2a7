"""What torch2_files.py and torch2_folders.py share: the registry their writers join, running
ckptscope, and the loop that checks each case and prints its differences (exit 1 on any)."""

import os
import subprocess

import torch


class Writers(dict):
    """name -> writer; used as a decorator, a `write_NAME` function registers as NAME."""

    def __call__(self, fn):
        self[fn.__name__.removeprefix("write_")] = fn
        return fn


def run(*cmd, ok=(0,)):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode not in ok:
        raise RuntimeError(f"{' '.join(os.path.basename(c) for c in cmd[:2])} ... exited {r.returncode}: "
                           f"{r.stderr.strip()[:300]}")
    return r


def check_cases(names, check):
    """check(name) gives the case's differences; an exception is the case's failure."""
    failed = False
    for name in names:
        try:
            errors = check(name)
        except Exception as e:  # noqa: BLE001 - reported as the case's failure
            errors = [f"{type(e).__name__}: {e}"]
        for e in errors:
            print(f"{name}: {e}")
        print(f"{name}: {'ok' if not errors else str(len(errors)) + ' difference(s)'} (torch {torch.__version__})")
        failed |= bool(errors)
    return 1 if failed else 0
