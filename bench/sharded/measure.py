#!/usr/bin/python3
"""Runs a command once and prints `WALL_S MAXRSS_MIB ANON_MIB FILE_MIB CPU_S`: wall seconds, the peak
resident set as the kernel counts it for the child (wait4 ru_maxrss, what /usr/bin/time -v calls
"Maximum resident set size", i.e. VmHWM), and the peaks of its RssAnon (heap, buffers) and RssFile
(mapped file pages) sampled every 2 ms from /proc/PID/status, and its CPU seconds (user + system,
wait4; on a shared machine far steadier than the wall time). A failing command fails the script.
Usage: measure.py CMD..."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from proc_rss import rss_kib  # noqa: E402

start = time.monotonic()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
anon = file = 0
while True:
    now_anon, now_file = rss_kib(proc.pid)
    anon, file = max(anon, now_anon), max(file, now_file)
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid:
        break
    time.sleep(0.002)
wall = time.monotonic() - start
if os.waitstatus_to_exitcode(status) != 0:
    sys.exit(f"measure.py: {sys.argv[1:]} failed ({os.waitstatus_to_exitcode(status)})")
print(f"{wall:.2f} {usage.ru_maxrss / 1024:.1f} {anon / 1024:.1f} {file / 1024:.1f} "
      f"{usage.ru_utime + usage.ru_stime:.2f}")
