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
# One target per fuzz_*.cpp, but fuzz_dcp_layout.cpp is built twice, a DCP layout each (fuzz.cmake).
targets="$(cd "$root/tests/fuzz" && ls fuzz_*.cpp | sed 's/\.cpp$//' | grep -vx fuzz_dcp_layout) fuzz_dcp_safetensors fuzz_dcp_zstd"
cmake --build "$build" -j "${CKPTSCOPE_JOBS:-$(nproc)}" --target $targets
fixtures="$build/fixtures"
/usr/bin/python3 "$root/tests/fixtures/gen_fixtures.py" "$fixtures" >/dev/null
hostile="$build/hostile-seeds"
/usr/bin/python3 "$root/tests/hostile/gen/hostile_files.py" "$hostile" stride0 bad_utf8_key escape_names newline_key \
  method12 corrupt_deflate lying_size safetensors_3c20 complex128 self_args small
# The older and wrapped forms reach their own readers: a tar-format checkpoint (PyTorch < 0.1.10)
# and gzip-wrapped copies of it and of a zip and a legacy fixture.
formats="$build/format-seeds"
mkdir -p "$formats"
/usr/bin/python3 "$root/tests/fixtures/gen_tar_checkpoint.py" "$formats/tar_format.pt" "$build/tar_oracle.json" >/dev/null
for f in "$formats/tar_format.pt" $(ls "$fixtures"/*.pt | head -2); do
  gzip -c "$f" >"$formats/$(basename "$f").gz"
done
# fuzz_pickle reads bare pickles: the data.pkl of every zip fixture.
pickles="$build/pickle-seeds"
/usr/bin/python3 - "$fixtures" "$pickles" <<'PY'
import os, sys, zipfile
src, dst = sys.argv[1:3]
os.makedirs(dst, exist_ok=True)
for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    if not os.path.isfile(path) or not zipfile.is_zipfile(path):
        continue
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if info.filename.endswith("/data.pkl"):
                with open(os.path.join(dst, name + ".pkl"), "wb") as f:
                    f.write(z.read(info))
PY
# fuzz_dcp reads DCP .metadata pickles: those of tests/sharded/gen_dcp.py's sets.
dcpseeds="$build/dcp-seeds"
/usr/bin/python3 "$root/tests/sharded/gen_dcp.py" "$build/dcp-sets" >/dev/null
mkdir -p "$dcpseeds"
for d in "$build"/dcp-sets/*/; do cp "$d/.metadata" "$dcpseeds/$(basename "$d").metadata"; done
# fuzz_hf_index reads index JSON, fuzz_zero a ZeRO rank-0 model states file: those of the hostile
# sets (tests/hostile/gen/hostile_sets.py: deep, NaN/1e400 total_size, huge) and gen_zero.py's.
setseeds="$build/hostile-sets"
rm -rf "$setseeds"  # its writer makes each set's folder, and refuses one a run before left
/usr/bin/python3 "$root/tests/hostile/gen/hostile_sets.py" "$setseeds" >/dev/null
indexseeds="$build/index-seeds"
zeroseeds="$build/zero-seeds"
mkdir -p "$indexseeds" "$zeroseeds"
for f in "$setseeds"/hf_*/*.index.json; do
  [ "$(stat -c %s "$f")" -le 4194304 ] && cp "$f" "$indexseeds/$(basename "$(dirname "$f")").json"
done
for f in "$setseeds"/zero*/global_step*/mp_rank_00_model_states.pt; do
  cp "$f" "$zeroseeds/$(basename "$(dirname "$(dirname "$f")")").pt"
done
# fuzz_dcp_safetensors and fuzz_dcp_zstd mutate the one data file of a real PyTorch 2.x save in that
# layout (tests/fuzz/dcp_templates): seeded with it.
layoutseeds="$build/dcp-layout-seeds"
for l in safetensors zstd; do
  mkdir -p "$layoutseeds/$l"
  cp "$root/tests/fuzz/dcp_templates/$l/__0_0.distcp" "$layoutseeds/$l/"
done
# fuzz_remote also reads, over its in-memory server, tests/hostile/gen/remote_files.py's files (a
# legacy stream whose count is forged further along, its unforged twin, a zip), the hostile Hub
# listings of tests/remote/hostile_server.py (those under 1 MiB) and two range replies as its
# checkReplies reads them (asked range, status, Content-Range, ETag; twice).
remoteseeds="$build/remote-seeds"
/usr/bin/python3 "$root/tests/hostile/gen/remote_files.py" "$remoteseeds" >/dev/null
rm -f "$remoteseeds"/*.victim
/usr/bin/python3 - "$root/tests/remote" "$remoteseeds" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import hostile_server
for name, body in hostile_server.LISTINGS.items():
    if len(body) <= 1 << 20:
        with open(os.path.join(sys.argv[2], "listing-" + name + ".json"), "wb") as f:
            f.write(body)
with open(os.path.join(sys.argv[2], "replies.txt"), "w") as f:
    f.write('-65536\n206\nbytes 934-66469/66470\n"e"\n0 65536\n206\nbytes 0-65535/66470\n"e"\n')
PY
# fuzz_s3_xml reads the bent S3 listings of tests/remote/hostile_server.py (those under 1 MiB) and
# one good page and one error document.
s3seeds="$build/s3-seeds"
mkdir -p "$s3seeds"
/usr/bin/python3 - "$root/tests/remote" "$s3seeds" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import hostile_server
hostile_server.DATA = b"x" * 100
for name, page in hostile_server.S3_CASES.items():
    body = page("t1")
    if len(body) <= 1 << 20:
        with open(os.path.join(sys.argv[2], name + ".xml"), "wb") as f:
            f.write(body)
with open(os.path.join(sys.argv[2], "good.xml"), "wb") as f:
    f.write(hostile_server.s3_page(["dir/a.pt", "dir/b.pt"], token="abc", truncated=True))
with open(os.path.join(sys.argv[2], "error.xml"), "wb") as f:
    f.write(b"<Error><Code>ExpiredToken</Code><Message>expired</Message><Region>eu-west-1</Region></Error>")
PY
# fuzz_model_config reads a model folder's config.json: real transformers 5.12 save_pretrained ones
# (tests/fuzz/config_seeds: tied and untied classes, a composite text_config, FP8 block-quantized
# quantization_configs with weight_block_size).
configseeds="$root/tests/fuzz/config_seeds"
mkdir -p "$build/crashes"
# ASan keeps 256 MB of freed memory in quarantine, and it counts against -rss_limit_mb: the 4 MB
# pickle of a 40k-key state dict went "out of memory" with 101 MB live and 244 MB quarantined.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=64"
# One fuzzer per core at a time: each is one process on one core, and CI has two.
parallel=${CKPTSCOPE_JOBS:-$(nproc)}
fuzz_one() {
  local name=$1 fz="$build/$1" corpus="$build/corpus-$1" maxlen=4194304
  mkdir -p "$corpus"
  local seeds=("$corpus")
  case "$name" in
    fuzz_pickle) seeds+=("$pickles") ;;
    fuzz_dcp) seeds+=("$dcpseeds") ;;
    fuzz_dcp_safetensors) seeds+=("$layoutseeds/safetensors") ;;
    fuzz_dcp_zstd) seeds+=("$layoutseeds/zstd") ;;
    fuzz_hf_index) seeds+=("$indexseeds") ;;
    fuzz_s3_xml) seeds+=("$s3seeds") ;;
    fuzz_model_config) seeds+=("$configseeds") ;;
    fuzz_zero) seeds+=("$zeroseeds") ;;
    # It parses each input twice (over its in-memory server and from memory, to compare the
    # storages): inputs up to 1 MiB, past the remote reader's 64 KiB first range and merge gaps,
    # keep both parses and libFuzzer's corpus inside the memory limit.
    fuzz_remote)
      seeds+=("$fixtures" "$fixtures/bad" "$hostile" "$formats" "$remoteseeds")
      maxlen=1048576
      ;;
    *) seeds+=("$fixtures" "$fixtures/bad" "$hostile" "$formats") ;;
  esac
  # A seed folder that is missing or empty would leave the fuzzer starting from nothing, silently.
  local s
  for s in "${seeds[@]:1}"; do
    if [ -z "$(ls -A "$s" 2>/dev/null)" ]; then
      echo "fuzz: seed folder $s for $name is missing or empty" >&2
      return 1
    fi
  done
  echo "fuzz: $name for ${secs}s" >&2
  if ! "$fz" -max_total_time="$secs" -rss_limit_mb=512 -max_len="$maxlen" -timeout=10 \
       -artifact_prefix="$build/crashes/$name-" -print_final_stats=1 "${seeds[@]}" \
       >"$build/$name.log" 2>&1; then
    echo "fuzz: $name FAILED, see $build/$name.log and $build/crashes/" >&2
    tail -30 "$build/$name.log" >&2
    return 1
  fi
  echo "fuzz: $name: $(grep -E "stat::number_of_executed_units" "$build/$name.log" | tail -1)" >&2
}
status=0
running=0
# By name, not by globbing $build/fuzz_*: that also matches the fuzz_*.log of an earlier run.
for name in $targets; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  fuzz_one "$name" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
