"""Shared by the bench scripts: run a command several times and report its best wall time and
peak RSS (of that child process alone), measured with wait4()."""
import os
import subprocess
import time


def measure(cmd, runs=5, env=None, before=None):
    """`before` runs ahead of each run, untimed (e.g. removing the previous run's output)."""
    best, peak = float("inf"), 0
    for _ in range(runs):
        if before:
            before()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"{cmd} failed with status {status}")
        best = min(best, elapsed)
        peak = max(peak, usage.ru_maxrss)
    return best, peak / 1024.0  # seconds, MiB
