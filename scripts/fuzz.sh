#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 under ASan + UBSan and runs each for
# $CKPTSCOPE_FUZZ_SECONDS (default 60) seconds, seeded with the real-PyTorch fixtures and the small
# hostile inputs of tests/hostile/gen. Memory past 512 MB or 10 s on one input is a finding like a
# crash (a bomb must not pass). A finding fails the script and leaves the reproducer in
# build-fuzz/crashes/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CKPTSCOPE_FUZZ_BUILD_DIR:-$root/build-fuzz}
secs=${CKPTSCOPE_FUZZ_SECONDS:-60}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCKPTSCOPE_FUZZ=ON -DCKPTSCOPE_BUILD_GUI=OFF -DCKPTSCOPE_WITH_TORCH=OFF -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target $(cd "$root/tests/fuzz" && ls fuzz_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')
fixtures="$build/fixtures"
/usr/bin/python3 "$root/tests/fixtures/gen_fixtures.py" "$fixtures" >/dev/null
hostile="$build/hostile-seeds"
/usr/bin/python3 "$root/tests/hostile/gen/hostile_files.py" "$hostile" stride0 bad_utf8_key escape_names newline_key \
  method12 corrupt_deflate lying_size safetensors_3c20 complex128 self_args small
mkdir -p "$build/crashes"
status=0
for fz in "$build"/fuzz_*; do
  name=$(basename "$fz")
  case "$name" in *.log) continue ;; esac  # the logs of earlier runs sit beside the targets
  corpus="$build/corpus-$name"
  mkdir -p "$corpus"
  seeds=("$corpus")
  case "$name" in
    fuzz_pickle) seeds+=("$fixtures/pickles") ;;
    *) seeds+=("$fixtures" "$fixtures/bad" "$hostile") ;;
  esac
  existing=()
  for s in "${seeds[@]}"; do [ -d "$s" ] && existing+=("$s"); done
  echo "fuzz: $name for ${secs}s" >&2
  if ! "$fz" -max_total_time="$secs" -rss_limit_mb=512 -max_len=4194304 -timeout=10 \
       -artifact_prefix="$build/crashes/$name-" -print_final_stats=1 "${existing[@]}" \
       >"$build/$name.log" 2>&1; then
    echo "fuzz: $name FAILED, see $build/$name.log and $build/crashes/" >&2
    tail -30 "$build/$name.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build/$name.log" | tail -2 >&2 || true
  fi
done
exit $status
