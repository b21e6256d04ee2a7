#!/usr/bin/env bash
# A set read in place (issue 27, core/sharded/set_view.h, box_view.h): for a Hugging Face .bin set,
# a ZeRO-2 folder and a 4-rank DCP folder (dim-0 chunks) of SIZE MiB (make_set.py), `check --values`, `diff` against the set's own consolidated file
# and `convert` with an edit to safetensors, each on the set beside the same command on the
# consolidated file (made first by `convert SET -o`, untimed). Printed per command: wall seconds,
# peak RSS, peak RssAnon and RssFile (MiB, measure.py), CPU seconds, and the set/file ratios of wall
# time and of RssAnon, which is what the set costs beyond the file pages both map. Also what the
# set's convert left in its output folder besides the output (nothing: no staged copy).
# Target (issue 27): peak anonymous memory on a set within the largest tensor (16 MiB here) + 64 MiB.
# Usage: views.sh [SIZE_MIB (default 512)] [WORKDIR (default /tmp/ckptscope-bench-views)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
size=${1:-512}
work=${2:-/tmp/ckptscope-bench-views}
bin=${CKPTSCOPE:-$here/../../build/app/ckptscope}
py=/usr/bin/python3
mkdir -p "$work"
echo "$(date -u '+%F %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $bin"
for kind in hf zero2 dcp; do
    set_dir=$("$py" "$here/make_set.py" "$work" "$size" "$kind")
    whole="$set_dir.pt"
    [ -f "$whole" ] || "$bin" convert "$set_dir" -o "$whole" >/dev/null
    find "$set_dir" "$whole" -type f -exec cat {} + >/dev/null  # both in the page cache
    for cmd in "check --values" "diff" "convert"; do
        rm -rf "$work/out" && mkdir -p "$work/out"
        args=()
        case $cmd in
            "check --values") args=(check --values) ;;
            diff) args=(diff) ;;
            convert) args=(convert --add-prefix m. -o "$work/out/edited.safetensors") ;;
        esac
        # diff compares the input with the consolidated file; the others read the input alone.
        on_set=$("$py" "$here/measure.py" "$bin" "${args[@]:0:1}" "${args[@]:1}" "$set_dir" \
                 $([ "$cmd" = diff ] && echo "$whole") | tail -1)
        left=$(find "$work/out" -mindepth 1 ! -name edited.safetensors | wc -l)
        rm -rf "$work/out" && mkdir -p "$work/out"
        on_file=$("$py" "$here/measure.py" "$bin" "${args[@]:0:1}" "${args[@]:1}" "$whole" \
                  $([ "$cmd" = diff ] && echo "$whole") | tail -1)
        read -r ws _ as _ _ <<<"$on_set"
        read -r wf _ af _ _ <<<"$on_file"
        printf '%-5s %-15s set: %s | file: %s | wall %.2fx, anon %+.1f MiB; left beside the output: %s\n' \
            "$kind" "$cmd" "$on_set" "$on_file" "$(echo "$ws / ($wf + 0.001)" | bc -l)" \
            "$(echo "$as - $af" | bc -l)" "$left"
    done
done
