#!/usr/bin/env bash
# Runs every GPU check from binaries staged by tools/gpu/stage.sh, on the GPU machine, in one
# go: the device and driver, then each GPU test binary. Full logs go to OUT_DIR; a short
# table is printed last. Exit status: non-zero when any check failed.
#
#   tools/gpu/run_gpu_checks.sh STAGED_DIR OUT_DIR TEST_BINARY...
set -uo pipefail
staged=$(cd "$1" && pwd) out=$2
shift 2
mkdir -p "$out"
export LD_LIBRARY_PATH="$staged/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TILEPLAN_CACHE_DIR="$out/module_cache"

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

summary=()
status=0
for test in "$@"; do
  log="$out/$test.log"
  start=$SECONDS
  "$staged/$test" --gtest_output="json:$out/$test.json" > "$log" 2>&1
  rc=$?
  secs=$((SECONDS - start))
  passed=$(grep -c '^\[       OK \]' "$log")
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$log")
  skipped=$(grep -c '^\[  SKIPPED \] .* ms)$' "$log")
  summary+=("$(printf '%-32s rc=%-3s passed=%-4s failed=%-4s skipped=%-4s %5ss' \
    "$test" "$rc" "$passed" "$failed" "$skipped" "$secs")")
  ((rc == 0)) || status=1
  grep -E '^\[  FAILED  \]|Failure|error' "$log" | head -40
done
printf '\n%s\n' "${summary[@]}"
exit $status
