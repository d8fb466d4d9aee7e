#!/usr/bin/env bash
# autotune_regions tuning a fixture on the GPU, killed with SIGKILL at random points
# (docs/reliability.md): each round tunes the plan for another --max-context (so it has keys
# of its own to measure) into one store and is killed; after each kill no worker may be left,
# the store must pass SQLite's integrity check and export, and hold at least the winners it
# held before; then the last round's tuning must complete when run again, and a frozen plan
# (benchmark_transformer --freeze, which refuses any key the store does not answer) be made
# from the store.
#
#   tools/gpu/tuner_kills.sh STAGED_DIR OUT_DIR [ROUNDS] [MODEL]
#
# ROUNDS defaults to 50, MODEL to tests/data/qwen3-tiny; the kill points are uniform over a
# span that starts at the length of one full tuning run, measured first on a scratch store,
# and follows the rounds' length (RANDOM_SEED seeds them).
# With SECONDS_LEFT set, the rounds stop when that many seconds have passed (the summary says
# after how many), leaving time for the rerun.
set -uo pipefail
staged=$(cd "$1" && pwd) out=$2
rounds=${3:-50} model=${4:-tests/data/qwen3-tiny}
mkdir -p "$out"
work=${WORK_DIR:-/tmp/tileplan-kills}
rm -rf "$work" && mkdir -p "$work"
export LD_LIBRARY_PATH="$staged/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TILEPLAN_CACHE_DIR="$work/module_cache"
summary="$out/tuner_kills.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
RANDOM=${RANDOM_SEED:-1202}
plan=(--model "$model" --prefill 16 --decode 32 --max-candidates 8 --repeats 3)
context=32
store="$work/store.db"

winners() {  # winners in the store, or -1 when it does not export
  "$staged/autotune_regions" --tactic-cache "$1" --export "$work/export.textproto" \
    > "$work/export.log" 2>&1 || { echo -1; return; }
  grep -c '^    winner {' "$work/export.textproto"
}
integrity() {
  python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA integrity_check").fetchone()[0])' "$1"
}

start=$(date +%s.%N)
"$staged/autotune_regions" "${plan[@]}" --tactic-cache "$work/calibration.db" \
  > "$work/calibration.log" 2>&1
rc=$?
span=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
full=$(winners "$work/calibration.db")
note "calibration: rc=$rc, $full winners in ${span} s (module cache cold)"
start=$(date +%s.%N)
"$staged/autotune_regions" "${plan[@]}" --tactic-cache "$work/calibration2.db" \
  > "$work/calibration2.log" 2>&1
span=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
note "calibration, module cache warm: ${span} s; kill points uniform in [0, ${span}] s"

status=0 before=0 mid=0
done_rounds=0
for ((r = 1; r <= rounds; ++r)); do
  if [[ -n ${SECONDS_LEFT:-} ]] && ((SECONDS > SECONDS_LEFT)); then
    note "stopped after $done_rounds rounds: SECONDS_LEFT=$SECONDS_LEFT reached"
    break
  fi
  ((++done_rounds))
  delay=$(awk -v s="$span" -v r="$RANDOM" 'BEGIN {printf "%.3f", s * r / 32767}')
  context=$((32 + r))
  "$staged/autotune_regions" "${plan[@]}" --max-context $context --tactic-cache "$store" \
    > "$work/round$r.log" 2>&1 &
  pid=$!
  sleep "$delay"
  # The kill points follow the rounds' length: a kill after the round ended shortens the span
  # to that point, one near the span's end lengthens it.
  if kill -9 "$pid" 2> /dev/null; then
    ((++mid))
    span=$(awk -v s="$span" -v d="$delay" 'BEGIN {printf "%.3f", (d > 0.8 * s ? 1.25 * s : s)}')
  else
    span=$(awk -v s="$span" -v d="$delay" 'BEGIN {printf "%.3f", (d < s ? (d > 0.5 ? d : 0.5) : s)}')
  fi
  wait "$pid" 2> /dev/null
  sleep 0.3
  left=$(pgrep -fc -- '--worker' || true)
  check=$( [[ -f $store ]] && integrity "$store" || echo "no store yet")
  now=$(winners "$store")
  [[ ! -f $store ]] && now=0
  line="round $r: killed at ${delay} s, winners $before -> $now, integrity $check, workers left $left"
  if [[ $check != ok && $check != "no store yet" ]] || ((now < before)) || ((left > 0)); then
    line="$line  FAILED"
    status=1
    pkill -9 -f -- '--worker'
  fi
  echo "$line" >> "$summary"
  ((now > before)) && before=$now
done
"$staged/autotune_regions" "${plan[@]}" --max-context $context --tactic-cache "$store" \
  > "$work/rerun.log" 2>&1
rc=$?
final=$(winners "$store")
note "$done_rounds kills ($mid while the tuner ran); the last round's tuning run again: rc=$rc," \
  "$final winners in the store (a full run of one plan: $full)"
((rc == 0)) || status=1
"$staged/benchmark_transformer" --model "$model" --prefill 16 --decode 32 --max-context $context \
  --tactic-cache "$store" --freeze --show-plan > "$work/frozen.log" 2>&1
rc=$?
note "frozen plan from the store: rc=$rc"
((rc == 0)) || { status=1; tail -5 "$work/frozen.log" >> "$summary"; }
tail -n +1 "$work/rerun.log" | tail -3 >> "$summary"
exit $status
