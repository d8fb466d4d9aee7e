#!/usr/bin/env bash
# compute-sanitizer over the GPU conformance suite and a decode of every fixture, on the GPU
# machine (docs/reliability.md): for each tool, kernels_gpu_test in shards (GTEST_TOTAL_SHARDS)
# and verify_model --backend gpu on each fixture under tests/data (its prompt and decode
# steps), all jobs in parallel on the one GPU, each stopped at the deadline. A job passes when
# the program exits 0 and the tool reports no error; the summary gives, per job, the exit
# code, the tool's error count, the tests passed and the seconds, and per tool the totals.
#
#   tools/gpu/sanitize.sh STAGED_DIR OUT_DIR [SECONDS] [TOOLS]
#
# SECONDS (default 540) bounds the whole run; TOOLS (default "racecheck memcheck initcheck
# synccheck") names compute-sanitizer's tools. SHARDS (default 8) and JOBS (default 16) in the
# environment set the shards per tool and the jobs run at once; FILTER a gtest filter for
# kernels_gpu_test (memcheck leaves out by default the one test that makes cudaMalloc fail on
# purpose, which memcheck reports as an API error). memcheck also checks for leaks (every
# device allocation freed by exit); racecheck's hazards count as errors, warnings included. Exit 0 when every job passed, 1 otherwise (a job cut by the deadline
# included).
set -uo pipefail
staged=$(cd "$1" && pwd) out=$2
budget=${3:-540}
tools=${4:-racecheck memcheck initcheck synccheck}
shards=${SHARDS:-8} jobs=${JOBS:-16}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${WORK_DIR:-/tmp/tileplan-sanitize}
mkdir -p "$work/logs"
export LD_LIBRARY_PATH="$staged/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TILEPLAN_CACHE_DIR="$work/module_cache"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
deadline=$(($(date +%s) + budget))
summary="$out/sanitize.txt"
: > "$summary"
"$sanitizer" --version | tail -1 | tee -a "$summary"

# One job: TOOL KIND ARG, KIND "shard" (ARG its index) or "fixture" (ARG its directory).
run_job() {
  local tool=$1 kind=$2 arg=$3 name log left start rc errors passed
  left=$((deadline - $(date +%s)))
  if [[ $kind == shard ]]; then name="$tool.kernels_gpu_test.$arg"; else name="$tool.$(basename "$arg")"; fi
  log="$work/logs/$name.log"
  if ((left < 5)); then echo "$name rc=skipped (deadline)"; return; fi
  local extra=() filter=${FILTER:-}
  if [[ $tool == memcheck ]]; then
    extra=(--leak-check full)
    # This test makes cudaMalloc fail on purpose, which memcheck reports as an API error.
    [[ -z $filter ]] && filter=-KernelsGpuDeviceTest.OutOfMemoryNamesTheSizes
  fi
  start=$(date +%s)
  if [[ $kind == shard ]]; then
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$arg timeout -s INT "$left" \
      "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 86 --print-limit 50 \
      "$staged/kernels_gpu_test" ${filter:+--gtest_filter=$filter} > "$log" 2>&1
  else
    timeout -s INT "$left" "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 86 \
      --print-limit 50 "$staged/verify_model" --model "$arg" \
      --reference "$arg/reference.safetensors" --backend gpu > "$log" 2>&1
  fi
  rc=$?
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  # racecheck counts hazards as errors and warnings, and fails on either.
  [[ -z $errors ]] && errors=$(grep -oE 'RACECHECK SUMMARY: .*' "$log" | tail -1 |
    sed -nE 's/.*\(([0-9]+) errors?, ([0-9]+) warnings?\).*/\1 \2/p' | awk '{print $1 + $2}')
  passed=$(grep -c '^\[       OK \]' "$log")
  echo "$name rc=$rc errors=${errors:-none} tests_passed=$passed seconds=$(($(date +%s) - start))"
}
export -f run_job
export sanitizer staged shards deadline work FILTER

# Every tool's first shard, then every tool's second, ..., then the fixtures: a deadline cuts
# the same share of each tool.
{
  for ((s = 0; s < shards; ++s)); do
    for tool in $tools; do echo "$tool shard $s"; done
  done
  for dir in tests/data/*/; do
    [[ -f $dir/reference.safetensors ]] || continue
    for tool in $tools; do echo "$tool fixture ${dir%/}"; done
  done
} | xargs -P "$jobs" -L 1 bash -c 'run_job "$@"' _ | sort | tee -a "$summary"

status=0
for tool in $tools; do
  jobs_run=$(grep -c "^$tool\." "$summary")
  clean=$(grep "^$tool\." "$summary" | grep -c 'rc=0 errors=0 ')
  errors=$(grep "^$tool\." "$summary" | grep -oE 'errors=[0-9]+' | cut -d= -f2 |
    awk '{s += $1} END {print s + 0}')
  note="$tool: $clean of $jobs_run jobs clean, $errors errors reported"
  echo "$note" | tee -a "$summary"
  ((clean == jobs_run)) || status=1
done
# The first reports of each failing job.
grep -v 'rc=0 errors=0 ' "$summary" | grep -oE '^[a-z]+\.[^ ]+' | while read -r name; do
  [[ -f $work/logs/$name.log ]] || continue
  echo "== $name" >> "$summary"
  grep -E -m 40 -A6 '^========= (Invalid|Uninitialized|Race|Barrier|ERROR|Error|Program hit|Leaked|Warning)' \
    "$work/logs/$name.log" | head -80 >> "$summary"
  tail -5 "$work/logs/$name.log" >> "$summary"
done
exit $status
