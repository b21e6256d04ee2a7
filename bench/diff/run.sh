#!/usr/bin/env bash
# ckptscope diff beside Python torch on two checkpoints that differ in a few tensors
# (bench/diff/make_pair.py). Targets (issue 14): >= 2 GB/s of compared tensor bytes, >= 10x faster
# than loading both with torch and comparing with torch.equal/allclose, peak RSS <= 64 MiB plus the
# mapped pages. Prints the best wall time of RUNS runs and the peak RSS (/usr/bin/time -v).
# Usage: bench/diff/run.sh [BUILD_DIR] [SIZE_MIB (default 1024; 64 for a quick run)]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
size=${2:-1024}
runs=${RUNS:-3}
data=${CKPTSCOPE_BENCH_DIR:-$root/build/bench-data}
mapfile -t pair < <(/usr/bin/python3 "$root/bench/diff/make_pair.py" "$data" "$size")
grep -m1 "model name" /proc/cpuinfo || true

# Best wall time and largest peak RSS over $runs runs of "$@" (exit 1 = "differ" is success here).
measure() {
    local best="" peak=0 log
    log=$(mktemp)
    for _ in $(seq "$runs"); do
        /usr/bin/time -v "$@" >/dev/null 2>"$log" || [ $? -eq 1 ] || { cat "$log"; exit 1; }
        local wall rss
        wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' "$log")
        rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
        if [ -z "$best" ] || awk "BEGIN{exit !($wall < $best)}"; then best=$wall; fi
        if [ "$rss" -gt "$peak" ]; then peak=$rss; fi
    done
    rm -f "$log"
    echo "$best $peak"
}

bytes=$({ "$build/app/ckptscope" diff "${pair[0]}" "${pair[1]}" --json || true; } | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["compared_bytes"])')
"$build/app/ckptscope" diff "${pair[0]}" "${pair[1]}" --summary || true
read -r dwall drss < <(measure "$build/app/ckptscope" diff "${pair[0]}" "${pair[1]}" --summary)
read -r danon dfile < <(/usr/bin/python3 "$root/bench/diff/rss_anon.py" "$build/app/ckptscope" diff "${pair[0]}" "${pair[1]}" --summary)
read -r pwall prss < <(runs=1 measure /usr/bin/python3 "$root/bench/diff/torch_compare.py" "${pair[0]}" "${pair[1]}")
awk -v b="$bytes" -v dw="$dwall" -v dr="$drss" -v pw="$pwall" -v pr="$prss" -v da="$danon" -v df="$dfile" 'BEGIN {
    printf "%-28s %9s %10s %9s\n", "command", "wall_s", "peak_MiB", "GB/s";
    printf "%-28s %9.3f %10.1f %9.2f\n", "ckptscope diff", dw, dr/1024, b/dw/1e9;
    printf "%-28s %9.3f %10.1f %9.2f\n", "python torch.equal/allclose", pw, pr/1024, b/pw/1e9;
    printf "compared tensor bytes %d; ckptscope is %.1fx faster\n", b, pw/dw;
    printf "ckptscope diff peak RssAnon %.1f MiB, RssFile (mapped pages) %.1f MiB (sampled every ms)\n", da, df }'
