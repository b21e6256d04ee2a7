#!/usr/bin/python3
"""Runs a command and prints the peak of its anonymous resident memory (RssAnon: heap, stacks,
buffers) and of its file-backed pages (RssFile: the mappings), sampled every millisecond from
/proc/PID/status. /usr/bin/time's maximum RSS counts both; the diff's own budget is the first.
Usage: rss_anon.py CMD..."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from proc_rss import rss_kib  # noqa: E402

proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
anon = file = 0
while proc.poll() is None:
    now_anon, now_file = rss_kib(proc.pid)
    anon, file = max(anon, now_anon), max(file, now_file)
    time.sleep(0.001)
print(f"{anon / 1024:.1f} {file / 1024:.1f}")
