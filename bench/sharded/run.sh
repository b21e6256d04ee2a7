#!/usr/bin/env bash
# Consolidating sharded sets into one torch file (issue 13, "Fast"): for each kind of set, ckptscope
# `convert SET -o out.pt --single-card` beside `cat` of the same bytes into one file, beside `cp` of
# the files into a folder (coreutils 9's, with copy_file_range) and beside the Python route on the
# same set, each run twice (the machine is shared):
#   hf     a Hugging Face .bin set (4 shards); Python: every shard torch.load'ed, merged, torch.save'd
#          (merge_python.py); also the way back, the output split into 1 GB shards (--shard-size);
#   dcp    a torch.distributed.checkpoint directory of 4 ranks; Python: dcp_to_torch_save's
#          algorithm over torch.load'ed items (dcp_to_torch_save.py);
#   zero2  a DeepSpeed ZeRO-2 folder of 4 ranks; Python: zero_to_fp32.py's algorithm (zero_to_fp32.py);
#          `cat` is of the four optimizer files, the fp32 partitions the consolidation reads.
# Sets are written by make_set.py (SIZE MiB of float32 weights, 16 MiB tensors). Each contender's
# output is removed and `sync`ed before each run (untimed; ext4 would otherwise start writing back a
# replaced file at once), the page cache is warm. Printed per run: wall and CPU seconds, peak RSS (wait4
# ru_maxrss = VmHWM, file pages included) and the peaks of RssAnon and RssFile (measure.py). Then the
# outputs of ckptscope and of the Python route are compared (compare.py: torch.equal on every
# tensor, untimed) and the targets judged on the faster of the two runs and the larger peak
# (the CPU-time ratios are printed too: steadier than wall time on a shared machine):
# <= 2x cat, >= 10x faster than Python, peak RSS <= largest tensor + 64 MiB.
# The sets stay (make_set.py reuses them; remove WORKDIR when done) unless DROP_SETS=1, which
# removes each once measured: then the disk and the page cache hold one set and two outputs at a
# time (three 4 GiB sets, the Python route's 4-8 GiB and the outputs do not fit a 24 GB machine's
# memory together, and evicted set pages would be read from disk in later runs).
# 4 GiB: `DROP_SETS=1 run.sh 4096 /tmp/bench-sets-4g` (not run in CI).
# Usage: run.sh [SIZE_MIB (default 1024)] [WORKDIR (default /tmp/ckptscope-bench-sharded)] [KIND...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
size=${1:-1024}
work=${2:-/tmp/ckptscope-bench-sharded}
shift $(($# < 2 ? $# : 2))
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(hf dcp zero2)
bin=${CKPTSCOPE:-$here/../../build/app/ckptscope}
py=/usr/bin/python3
measure() { "$py" "$here/measure.py" "$@"; }
mkdir -p "$work"
echo "$(date -u '+%F %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$(awk '/MemAvailable/ {printf "%.1f", $2/1048576}' /proc/meminfo) GiB available; $bin"

bench_kind() {
    local kind=$1 set_dir route files=()
    set_dir=$("$py" "$here/make_set.py" "$work" "$size" "$kind")
    case $kind in
        hf) files=("$set_dir"/*.bin); route=merge_python.py ;;
        dcp) files=("$set_dir"/*.distcp); route=dcp_to_torch_save.py ;;
        zero2) files=("$set_dir"/global_step*/*_optim_states.pt); route=zero_to_fp32.py ;;
        *) echo "unknown kind $kind (hf, dcp or zero2)" >&2; return 2 ;;
    esac
    sync  # a set just written is flushed before anything is timed
    # Every file of the set in the page cache before every run, for every route alike (ZeRO's model
    # states too, which only the Python route reads whole).
    warm() { find "$set_dir" -type f -exec cat {} + > /dev/null; }
    local ck="$work/out-ck.pt" cp_out="$work/out-cat.bin" py_out="$work/out-py.pt" kc_dir="$work/out-cp"
    local -a r_ck r_cp r_kc r_py
    for _ in 1 2; do
        rm -f "$ck"; sync; warm
        r_ck+=("$(measure "$bin" convert "$set_dir" -o "$ck" --single-card)")
        rm -f "$cp_out"; sync; warm
        # shellcheck disable=SC2016  # the inner shell expands them
        r_cp+=("$(measure sh -c 'out=$1; shift; cat "$@" > "$out"' sh "$cp_out" "${files[@]}")")
        rm -rf "$cp_out" "$kc_dir"; mkdir -p "$kc_dir"; sync; warm
        r_kc+=("$(measure cp "${files[@]}" "$kc_dir/")")
        rm -rf "$kc_dir" "$py_out"; sync; warm
        r_py+=("$(measure "$py" "$here/$route" "$set_dir" "$py_out")")
    done
    echo "== $kind: $set_dir ($(du -sh --apparent-size "$set_dir" | cut -f1); ${#files[@]} files cat: $(du -ch --apparent-size "${files[@]}" | tail -1 | cut -f1))"
    printf '%-40s %8s %8s %8s %8s %11s %11s %11s\n' route run1_s run2_s cpu1_s cpu2_s maxRSS_MiB RssAnon_MiB \
        RssFile_MiB
    row() {
        local name=$1 a=$2 b=$3
        awk -v n="$name" -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
            m = x[2] > y[2] ? x[2] : y[2]; an = x[3] > y[3] ? x[3] : y[3]; f = x[4] > y[4] ? x[4] : y[4];
            printf "%-40s %8.2f %8.2f %8.2f %8.2f %11.1f %11.1f %11.1f\n", n, x[1], y[1], x[5], y[5], m, an, f }'
    }
    row "ckptscope convert --single-card" "${r_ck[0]}" "${r_ck[1]}"
    row "cat of the ${#files[@]} files into one" "${r_cp[0]}" "${r_cp[1]}"
    row "cp of the ${#files[@]} files (kernel copy)" "${r_kc[0]}" "${r_kc[1]}"
    row "python $route" "${r_py[0]}" "${r_py[1]}"
    if [ "$kind" = hf ]; then
        rm -rf "$work/split"; sync
        local r_split
        r_split=$(measure "$bin" convert "$ck" -o "$work/split" --shard-size 1GB)
        row "ckptscope split back (--shard-size 1GB)" "$r_split" "$r_split"
        rm -rf "$work/split"
    fi
    local check largest
    check=$("$py" "$here/compare.py" "$ck" "$py_out") || { echo "check: $check"; return 1; }
    echo "check (ckptscope's output against the Python route's): $check"
    largest=$(sed -n 's/.*largest tensor \([0-9]*\) bytes.*/\1/p' <<< "$check")
    awk -v ck="${r_ck[*]}" -v cp="${r_cp[*]}" -v kc="${r_kc[*]}" -v py="${r_py[*]}" -v big="$largest" 'BEGIN {
        split(ck, a, " "); split(cp, c, " "); split(kc, k, " "); split(py, p, " ");
        t = a[1] < a[6] ? a[1] : a[6]; tc = c[1] < c[6] ? c[1] : c[6]; tp = p[1] < p[6] ? p[1] : p[6];
        tk = k[1] < k[6] ? k[1] : k[6];
        u = a[5] < a[10] ? a[5] : a[10]; uc = c[5] < c[10] ? c[5] : c[10]; up = p[5] < p[10] ? p[5] : p[10];
        rss = a[2] > a[7] ? a[2] : a[7]; lim = big / 1048576 + 64;
        printf "targets: convert / cat = %.2fx, convert / cp = %.2fx (<= 2x: %s); Python / convert = %.1fx (>= 10x: %s);",
               t / tc, t / tk, (t / tc <= 2 && t / tk <= 2 ? "met" : "NOT met"), tp / t, (tp / t >= 10 ? "met" : "NOT met");
        printf " peak RSS %.1f MiB (<= largest tensor %.1f MiB + 64 MiB = %.1f MiB: %s)\n",
               rss, big / 1048576, lim, (rss <= lim ? "met" : "NOT met");
        printf "CPU seconds (least of two): convert %.2f, cat %.2f (%.2fx), Python %.2f (%.1fx)\n", u, uc, u / uc, up, up / u }'
    rm -rf "$ck" "$py_out" "$cp_out" "$kc_dir"
    if [ -n "${DROP_SETS:-}" ]; then rm -rf "$set_dir" "$set_dir.complete"; fi
}

for kind in "${kinds[@]}"; do
    bench_kind "$kind"
done
