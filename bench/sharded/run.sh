#!/usr/bin/env bash
# Consolidating a Hugging Face sharded set (bench/sharded/make_set.py) into one torch file:
# ckptscope convert beside `cat` of the same bytes and beside the Python route (merge_python.py).
# Peak memory is RssAnon (bench/diff/rss_anon.py): the mapped shards' page-cache pages are not the
# process's own memory. Then the other way: the consolidated file split back into a set of 1 GB
# shards (convert --shard-size). Each output is removed once measured, so the disk holds at most the
# set, one output and the split (3 x SIZE). The 4 GiB case is `run.sh 4096` (not run in CI).
# Usage: run.sh [SIZE_MIB (default 1024)] [WORKDIR (default /tmp/ckptscope-bench-sharded)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
size=${1:-1024}
work=${2:-/tmp/ckptscope-bench-sharded}
bin=${CKPTSCOPE:-$here/../../build/app/ckptscope}
set_dir=$(/usr/bin/python3 "$here/make_set.py" "$work" "$size")
cat "$set_dir"/*.bin > /dev/null  # warm the page cache for every route alike
t() { local s e; s=$(date +%s.%N); "$@" > /dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
rm -rf "$work/out.pt" "$work/cat.bin" "$work/py.pt" "$work/split"
echo "set: $set_dir ($(du -sh "$set_dir" | cut -f1))"
echo "ckptscope convert: $(t "$bin" convert "$set_dir" -o "$work/out.pt") s, peak RssAnon/RssFile MiB:" \
     "$(rm -f "$work/out.pt"; /usr/bin/python3 "$here/../diff/rss_anon.py" "$bin" convert "$set_dir" -o "$work/out.pt")"
echo "ckptscope split:   $(t "$bin" convert "$work/out.pt" -o "$work/split" --shard-size 1GB) s, peak RssAnon/RssFile MiB:" \
     "$(rm -rf "$work/split"; /usr/bin/python3 "$here/../diff/rss_anon.py" "$bin" convert "$work/out.pt" -o "$work/split" --shard-size 1GB)"
rm -rf "$work/out.pt" "$work/split"
echo "cat of the shards: $(t sh -c "cat '$set_dir'/*.bin > '$work/cat.bin'") s"
rm -f "$work/cat.bin"
echo "python route:      $(t /usr/bin/python3 "$here/merge_python.py" "$set_dir" "$work/py.pt") s, peak RssAnon/RssFile MiB:" \
     "$(/usr/bin/python3 "$here/../diff/rss_anon.py" /usr/bin/python3 "$here/merge_python.py" "$set_dir" "$work/py.pt")"
rm -f "$work/out.pt" "$work/cat.bin" "$work/py.pt"
