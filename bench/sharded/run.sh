#!/usr/bin/env bash
# Consolidating sharded sets into one torch file (issue 13, "Fast"): for each kind of set, ckptscope
# `convert SET -o out.pt --single-card` beside `cat` of the same bytes into one file, beside `cp` of
# the files into a folder (coreutils 9's, with copy_file_range) and beside the Python route on the
# same set, each run RUNS times (default 3; the machine is shared):
#   hf     a Hugging Face .bin set (4 shards); Python: every shard torch.load'ed, merged, torch.save'd
#          (merge_python.py); also the way back, the output split into 1 GB shards (--shard-size);
#   dcp    a torch.distributed.checkpoint directory of 4 ranks; Python: dcp_to_torch_save's
#          algorithm over torch.load'ed items (dcp_to_torch_save.py);
#   zero2  a DeepSpeed ZeRO-2 folder of 4 ranks; Python: zero_to_fp32.py's algorithm (zero_to_fp32.py);
#          `cat` is of the four optimizer files, the fp32 partitions the consolidation reads.
# Sets are written by make_set.py (SIZE MiB of float32 weights, 16 MiB tensors). The page cache
# holds the set before every run. A write floor is timed too: dd writing the output's size of zeros
# from memory, which no tool that writes its output through the page cache can beat.
# Runs: each contender's runs are back to back, its previous output removed (and `sync`ed) just
# before each. On a VM that hands freed memory back to its host (virtio-balloon free page reporting,
# as on the development VM), a run that needs fresh memory seconds after memory was freed pays the
# host's page faults: up to 1.6 s more per GiB written here, growing with the idle time (1 GiB: 0.34
# s right after the removal, 1.97 s after 8 s of idle). Back to back, every contender's later runs
# reuse the memory its previous run freed, so the fastest run of each is compared; every run's time
# is printed. Printed per contender: fastest and slowest wall seconds, the fastest run's CPU seconds,
# and the largest peak RSS of all runs (wait4 ru_maxrss = VmHWM, file pages included), RssAnon and
# RssFile (measure.py). Then the outputs of ckptscope and of the Python route are compared
# (compare.py: torch.equal on every tensor, untimed) and the targets judged:
# <= 2x cat and cp, >= 10x faster than Python, peak RSS <= largest tensor + 64 MiB.
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
reps=${RUNS:-3}
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
    local floor_out="$work/out-floor.bin"
    # One contender's runs back to back, its last output removed just before each (see "Runs" above).
    # Prints one result line per run.
    runs() {
        local out=$1; shift
        for _ in $(seq "$reps"); do
            warm; rm -rf "$out"; sync
            [[ $out == "$kc_dir" ]] && mkdir -p "$kc_dir"
            measure "$@"
        done
    }
    local r_ck r_cp r_kc r_py r_floor
    r_ck=$(runs "$ck" "$bin" convert "$set_dir" -o "$ck" --single-card)
    # shellcheck disable=SC2016  # the inner shell expands them
    r_cp=$(runs "$cp_out" sh -c 'out=$1; shift; cat "$@" > "$out"' sh "$cp_out" "${files[@]}")
    r_kc=$(runs "$kc_dir" cp "${files[@]}" "$kc_dir/")
    r_py=$(runs "$py_out" "$py" "$here/$route" "$set_dir" "$py_out")
    # The least any tool can take to put the output's bytes in the page cache here: dd writing that
    # many zero bytes from memory in 4 MiB blocks, reading no file at all.
    r_floor=$(runs "$floor_out" dd if=/dev/zero of="$floor_out" bs=4M count="$(stat -c %s "$ck")" iflag=count_bytes \
        status=none)
    rm -rf "$cp_out" "$kc_dir" "$floor_out"
    echo "== $kind: $set_dir ($(du -sh --apparent-size "$set_dir" | cut -f1); ${#files[@]} files cat: $(du -ch --apparent-size "${files[@]}" | tail -1 | cut -f1))"
    printf '%-40s %8s %8s %8s %11s %11s %11s   %s\n' route best_s worst_s cpu_s maxRSS_MiB RssAnon_MiB RssFile_MiB \
        'every run: wall s'
    # best_s and cpu_s: the fastest run's; the RSS columns: the largest of all runs.
    row() {
        awk -v n="$1" '{ w[NR] = $1; if (NR == 1 || $1 < b) { b = $1; c = $5 } if ($1 > worst) worst = $1;
                         if ($2 > m) m = $2; if ($3 > an) an = $3; if ($4 > f) f = $4 }
            END { all = ""; for (i = 1; i <= NR; i++) all = all sprintf("%s%.2f", i > 1 ? ", " : "", w[i]);
                  printf "%-40s %8.2f %8.2f %8.2f %11.1f %11.1f %11.1f   %s\n", n, b, worst, c, m, an, f, all }' <<< "$2"
    }
    row "ckptscope convert --single-card" "$r_ck"
    row "cat of the ${#files[@]} files into one" "$r_cp"
    row "cp of the ${#files[@]} files (kernel copy)" "$r_kc"
    row "python $route" "$r_py"
    row "write floor: dd of the output's size" "$r_floor"
    if [ "$kind" = hf ]; then
        rm -rf "$work/split"; sync
        local r_split
        r_split=$(measure "$bin" convert "$ck" -o "$work/split" --shard-size 1GB)
        row "ckptscope split back (--shard-size 1GB)" "$r_split"
        rm -rf "$work/split"
    fi
    local check largest
    check=$("$py" "$here/compare.py" "$ck" "$py_out") || { echo "check: $check"; return 1; }
    echo "check (ckptscope's output against the Python route's): $check"
    largest=$(sed -n 's/.*largest tensor \([0-9]*\) bytes.*/\1/p' <<< "$check")
    best() { sort -n -k1,1 <<< "$1" | head -1; }
    awk -v ck="$(best "$r_ck")" -v cp="$(best "$r_cp")" -v kc="$(best "$r_kc")" -v py="$(best "$r_py")" \
        -v fl="$(best "$r_floor")" -v rss="$(awk '$2 > m { m = $2 } END { print m }' <<< "$r_ck")" -v big="$largest" 'BEGIN {
        split(ck, a, " "); split(cp, c, " "); split(kc, k, " "); split(py, p, " "); split(fl, f, " ");
        t = a[1]; lim = big / 1048576 + 64;
        printf "targets: convert / cat = %.2fx, convert / cp = %.2fx (<= 2x: %s); Python / convert = %.1fx (>= 10x: %s);",
               t / c[1], t / k[1], (t / c[1] <= 2 && t / k[1] <= 2 ? "met" : "NOT met"), p[1] / t, (p[1] / t >= 10 ? "met" : "NOT met");
        printf " peak RSS %.1f MiB (<= largest tensor %.1f MiB + 64 MiB = %.1f MiB: %s)\n",
               rss, big / 1048576, lim, (rss <= lim ? "met" : "NOT met");
        printf "Python / write floor = %.1fx (the most any tool that writes through the page cache could reach here);" \
               " convert / write floor = %.2fx\n", p[1] / f[1], t / f[1];
        printf "CPU seconds (fastest runs): convert %.2f, cat %.2f (%.2fx), Python %.2f (%.1fx)\n", a[5], c[5], a[5] / c[5], p[5],
               p[5] / a[5] }'
    rm -rf "$ck" "$py_out"
    if [ -n "${DROP_SETS:-}" ]; then rm -rf "$set_dir" "$set_dir.complete"; fi
}

for kind in "${kinds[@]}"; do
    bench_kind "$kind"
done
