#!/usr/bin/env bash
# Runs the same commands with two builds of `ckptscope` on the test fixtures, without a terminal
# (stdout and stderr to files, stdin from /dev/null, as a script runs them), and compares what each
# printed, its exit code and the files it wrote, byte for byte. For a change that must leave
# non-terminal output alone (issue 43's progress line) or change only some lines of it.
#
#   scripts/compare-cli-output.sh OLD_BINARY NEW_BINARY FIXTURE_DIR [WORK_DIR]
#
# Prints one line per command that differs, with the diff of its output; then a count. Exit 0 when
# every command's output, exit code and written files are the same, 1 otherwise. Environment passed
# to both: CKPTSCOPE_PROGRESS_AFTER_MS=0, so a progress line that leaked into non-terminal output
# would show even on small fixtures.
set -uo pipefail
old=${1:?old binary}
new=${2:?new binary}
fixtures=$(cd "${3:?fixture dir (build/fixtures, after ctest -R generate_)}" && pwd) || exit 2
work=${4:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
export CKPTSCOPE_PROGRESS_AFTER_MS=0
unset CKPTSCOPE_PROGRESS

files=()
for f in "$fixtures"/*.pt "$fixtures"/*.safetensors "$fixtures"/bad/*.pt; do
    [ -f "$f" ] && files+=("$f")
done
sets=()
for d in "$fixtures"/sharded/*/ "$fixtures"/dcp/*/ "$fixtures"/fsdp/*/ "$fixtures"/zero/*/; do
    [ -d "$d" ] && sets+=("${d%/}")
done

commands=()  # one command line each, OUT standing for the output path
for f in "${files[@]}"; do
    commands+=("inspect $f" "inspect $f --json" "check $f" "check $f --values" "check $f --json --values"
        "convert $f -o OUT.pt --single-card" "convert $f -o OUT.pt --single-card --dry-run"
        "convert $f -o OUT.pt --single-card --json" "convert $f -o OUT.safetensors --single-card"
        "convert $f -o OUT.pt" "convert $f -o OUT.pt --multi-card -q" "convert $f -o OUT.pt --weights-only --compact"
        "convert $f -o OUT.pt --drop optimizer --drop args --drop epoch --map-location cpu --unwrap"
        "diff $f $fixtures/ddp_sd.pt"
        "diff $f $f --summary")
done
for d in "${sets[@]}"; do
    commands+=("inspect $d" "check $d --values" "convert $d -o OUT.pt" "convert $d -o OUT.pt --strip-prefix model."
        "convert $d -o OUT.safetensors" "convert $d -o OUT --shard-size 100KB" "convert $d -o OUT --format dcp"
        "convert $d -o OUT.pt --dry-run" "diff $d $d")
done

# Runs one command with one binary into $work/<side>: out, err, rc, and the files it wrote (a
# listing with each file's sha256).
run_one() {
    local bin=$1 side=$2 cmd=$3
    local dir="$work/$side"
    rm -rf "$dir" && mkdir -p "$dir/o"
    local line=${cmd//OUT/$work/o/out}
    # shellcheck disable=SC2086  # the command line is split into words on purpose
    (cd "$work" && timeout 300 "$bin" $line </dev/null >"$dir/out" 2>"$dir/err"; echo $? >"$dir/rc")
    # A DCP folder's .metadata carries save_id, a fresh uuid4 on every save (as PyTorch writes it).
    (cd "$work/o" && find . -type f -print0 | sort -z | while IFS= read -r -d '' f; do
        if [ "$(basename "$f")" = .metadata ]; then
            echo "$(LC_ALL=C sed -E 's/[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}/UUID/g' "$f" |
                sha256sum | cut -d' ' -f1)  $f (save_id masked)"
        else
            sha256sum "$f"
        fi
    done) >"$dir/files"
    rm -rf "$work/o" && mkdir -p "$work/o"
}

same=0
differ=0
succeeded=0  # commands the old build ran with exit 0: a broken path would make everything "the same"
for cmd in "${commands[@]}"; do
    mkdir -p "$work/o"
    run_one "$old" old "$cmd"
    run_one "$new" new "$cmd"
    [ "$(cat "$work/old/rc")" = 0 ] && succeeded=$((succeeded + 1))
    if cmp -s "$work/old/out" "$work/new/out" && cmp -s "$work/old/err" "$work/new/err" &&
        cmp -s "$work/old/rc" "$work/new/rc" && cmp -s "$work/old/files" "$work/new/files"; then
        same=$((same + 1))
        continue
    fi
    differ=$((differ + 1))
    echo "=== differs: ckptscope $cmd"
    for part in out err rc files; do
        diff -u --label "old $part" --label "new $part" "$work/old/$part" "$work/new/$part"
    done
done
echo "compare-cli-output: ${#commands[@]} commands ($succeeded exit 0 with the old build), $same the same, $differ differ"
[ "$differ" -eq 0 ]
