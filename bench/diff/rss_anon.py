#!/usr/bin/python3
"""Runs a command and prints the peak of its anonymous resident memory (RssAnon: heap, stacks,
buffers) and of its file-backed pages (RssFile: the mappings), sampled every millisecond from
/proc/PID/status. /usr/bin/time's maximum RSS counts both; the diff's own budget is the first.
Usage: rss_anon.py CMD..."""
import subprocess
import sys
import time

proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
anon = file = 0
while proc.poll() is None:
    try:
        with open(f"/proc/{proc.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = max(anon, int(line.split()[1]))
                elif line.startswith("RssFile:"):
                    file = max(file, int(line.split()[1]))
    except (FileNotFoundError, ProcessLookupError):
        break
    time.sleep(0.001)
print(f"{anon / 1024:.1f} {file / 1024:.1f}")
