#!/usr/bin/env bash
# Every file of the real-checkpoint corpus through ckptscope (inspect, check, convert --single-card),
# held against PyTorch 1.13 read with a stubbing unpickler (tests/corpus/corpus_check.py says how),
# then against PyTorch 2.x the same way where scripts/modern-torch.sh's root exists.
#   scripts/corpus.sh [CKPTSCOPE] [--only NAME]
# The corpus is $CKPTSCOPE_CORPUS, or ../shared/corpus beside the checkout; without it the run is
# skipped (exit 77, which ctest reports as skipped). Files listed in tests/corpus/known_failures.tsv
# may fail (each line says why); any other failure exits 1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tool=${1:-$root/build/app/ckptscope}
shift || true
corpus=${CKPTSCOPE_CORPUS:-$root/../shared/corpus}
if [[ ! -d $corpus ]]; then
    echo "corpus.sh: no corpus at $corpus (set CKPTSCOPE_CORPUS): skipped"
    exit 77
fi
python=${CKPTSCOPE_PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/ckptscope-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
"$python" "$root/tests/corpus/corpus_check.py" "$tool" "$corpus" "$work" \
    --known "$root/tests/corpus/known_failures.tsv" "$@" || status=1
# The same checks under today's PyTorch, in the root of scripts/modern-torch.sh: its python sees the
# corpus through a bind mount, and the work folder through the root's own /tmp or $TMPDIR binds (a
# bind of the folder itself would stay mounted and keep it from being removed). Without the root
# this half is not run, and says so; the 1.13 half still decides the exit code alone then.
. "$root/scripts/torch2-common.sh"
if [[ -f $torch2_stamp ]]; then
    echo "corpus.sh: the same checks under the PyTorch 2.x root ($torch2_root)"
    mkdir -p "$work/torch2"
    CKPTSCOPE_TORCH2_BIND="$(realpath "$corpus")${CKPTSCOPE_TORCH2_BIND:+:$CKPTSCOPE_TORCH2_BIND}" \
        "$root/scripts/torch2-python.sh" "$root/tests/corpus/corpus_check.py" "$tool" "$(realpath "$corpus")" \
        "$work/torch2" --known "$root/tests/corpus/known_failures.tsv" "$@" || status=1
else
    echo "corpus.sh: no PyTorch 2.x root at $torch2_root (scripts/modern-torch.sh): the 2.x half is not run"
fi
exit $status
