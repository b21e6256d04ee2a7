#!/usr/bin/env bash
# Every file of the real-checkpoint corpus through ckptscope (inspect, check, convert --single-card),
# held against PyTorch 1.13 read with a stubbing unpickler (tests/corpus/corpus_check.py says how).
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
"$python" "$root/tests/corpus/corpus_check.py" "$tool" "$corpus" "$work" \
    --known "$root/tests/corpus/known_failures.tsv" "$@"
