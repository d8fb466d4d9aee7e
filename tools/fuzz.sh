#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer, UndefinedBehavior-
# Sanitizer, leak checks), seeds each corpus from the committed fixtures and runs each target
# for SECONDS, one target per core at a time; fails when any finds a crash, a leak, a timeout
# or an out-of-memory, keeping the input that did it under BUILD_DIR/fuzz-artifacts
# (docs/reliability.md).
#
#   tools/fuzz.sh [BUILD_DIR] [SECONDS]     (defaults: build-fuzz, 60)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz} seconds=${2:-60}

TILEPLAN_BUILD_DIR=$build TILEPLAN_BUILD_TARGET=fuzzers \
  TILEPLAN_CMAKE_ARGS="-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTILEPLAN_SANITIZE=ON -DTILEPLAN_FUZZ=ON" \
  tools/bootstrap.sh

work=$build/fuzz-work artifacts=$build/fuzz-artifacts
rm -rf "$work"
mkdir -p "$work" "$artifacts"
# seeds NAME FILE...: the seed corpus of fuzzer NAME.
seeds() {
  local name=$1
  shift
  mkdir -p "$work/$name.seeds" "$work/$name.corpus"
  local i=0
  for f in "$@"; do
    [[ -f $f ]] && cp "$f" "$work/$name.seeds/$((i++))"
  done
}
seeds safetensors_header_fuzzer tests/data/*/model.safetensors tests/data/*/reference.safetensors
seeds safetensors_index_fuzzer tests/fuzz/seeds/index.json
seeds config_json_fuzzer tests/data/*/config.json models/configs/*.json
seeds json_reader_fuzzer tests/data/*/config.json models/configs/*.json tests/fuzz/seeds/index.json
seeds ir_text_fuzzer tests/regions/testdata/*.tpir tests/kernels/testdata/*.tpir
seeds target_textproto_fuzzer $(ls targets/*.textproto | grep -v "\.calibration\.textproto$")
seeds tactic_textproto_fuzzer tests/fuzz/seeds/tactics.textproto
seeds store_open_fuzzer tests/fuzz/seeds/store.db tests/tuner/testdata/*.db tests/fuzz/seeds/index.json
seeds plan_fuzzer tests/fuzz/seeds/plan.*

names=(safetensors_header_fuzzer safetensors_index_fuzzer config_json_fuzzer json_reader_fuzzer
       ir_text_fuzzer target_textproto_fuzzer tactic_textproto_fuzzer store_open_fuzzer
       plan_fuzzer)
# One target per core at a time; each leaves its log and exit status in the work directory.
run_target() {
  local name=$1 rc=0
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: one using 2.5 GB is a memory bug.
  "$build/tests/fuzz/$name" "$work/$name.corpus" "$work/$name.seeds" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -max_len=1048576 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$name-" > "$work/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$work/$name.rc"
}
parallel=$(nproc)
for name in "${names[@]}"; do
  while (( $(jobs -rp | wc -l) >= parallel )); do wait -n || true; done
  run_target "$name" &
done
wait

status=0
for name in "${names[@]}"; do
  log=$work/$name.log
  if [[ $(cat "$work/$name.rc" 2> /dev/null) == 0 ]]; then
    echo "fuzz: $name: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') inputs in ${seconds} s, corpus $(ls "$work/$name.corpus" | wc -l), no failure"
  else
    status=1
    echo "fuzz: $name FAILED:"
    grep -E -A25 'ERROR: |==ERROR|fuzz property broken|runtime error' "$log" | head -60
  fi
done
exit $status
