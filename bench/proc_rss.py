"""The one /proc sampler the benches share (bench/diff/rss_anon.py, bench/sharded/measure.py): a
running process's RssAnon (heap, stacks, buffers) and RssFile (mapped file pages), in KiB."""


def rss_kib(pid):
    """(RssAnon, RssFile) of `pid` now; (0, 0) once it is gone."""
    anon = file = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("RssFile:"):
                    file = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return anon, file
