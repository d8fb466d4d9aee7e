#!/usr/bin/env bash
# An A/B of two builds of benchmark_transformer on the GPU machine (docs/PERF.md, "Method": a
# lever is proven by the old and new build alternated in one device session). Each build is a
# folder staged by tools/gpu/stage.sh. With --autotune, each build first tunes into its own
# store (autotune_regions AUTOTUNE_ARGS and the store) and every benchmark plans with it; the
# builds then run ROUNDS times each, A B B A A B ..., with the same benchmark arguments, so
# that neither build always runs first (whatever the position in a pair does to a run falls
# on both). Prints the medians of each build's runs per phase and size, and their ratio (B
# over A).
#
#   tools/gpu/ab_bench.sh STAGED_A STAGED_B OUT_DIR ROUNDS "BENCH ARGS" [--autotune "ARGS"]
set -uo pipefail
a=$(cd "$1" && pwd) b=$(cd "$2" && pwd) out=$3 rounds=$4 bench=$5
shift 5
autotune=""
if [[ ${1:-} == --autotune ]]; then autotune=$2; fi
mkdir -p "$out"
work=${WORK_DIR:-/tmp/tileplan-ab}
mkdir -p "$work"
status=0
for side in a b; do
  dir=${!side}
  export TILEPLAN_CACHE_DIR="$work/module_cache_$side"
  if [[ -n $autotune ]]; then
    rm -f "$work/tactics_$side.db"*
    start=$SECONDS
    # The store's flag: --tactic-cache, or --cache in builds before the tools shared flags.
    store_flag=--tactic-cache
    help=$(LD_LIBRARY_PATH="$dir/lib" "$dir/autotune_regions" --help 2>&1)
    [[ $help == *--tactic-cache* ]] || store_flag=--cache
    LD_LIBRARY_PATH="$dir/lib" "$dir/autotune_regions" $autotune "$store_flag" \
      "$work/tactics_$side.db" > "$out/autotune_$side.log" 2>&1
    rc=$?
    ((rc == 0)) || status=1
    echo "autotune $side: rc=$rc ($((SECONDS - start)) s)"
  fi
done
for ((r = 1; r <= rounds; ++r)); do
  order=(a b)
  ((r % 2 == 0)) && order=(b a)
  for side in "${order[@]}"; do
    dir=${!side}
    export TILEPLAN_CACHE_DIR="$work/module_cache_$side"
    cache_args=()
    [[ -n $autotune ]] && cache_args=(--tactic-cache "$work/tactics_$side.db")
    LD_LIBRARY_PATH="$dir/lib" "$dir/benchmark_transformer" $bench "${cache_args[@]}" \
      --json "$out/bench_${side}_$r.json" > "$out/bench_${side}_$r.log" 2>&1 || status=1
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {}
for side in "ab":
    for r in range(1, rounds + 1):
        try:
            with open(f"{out}/bench_{side}_{r}.json") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"run {side}{r}: {e}")
            continue
        for res in data.get("results", []):
            runs.setdefault((res["phase"], res["size"]), {}).setdefault(side, []).append(
                res["median_ms"])
print(f"{'phase':>8} {'size':>6} {'A ms':>9} {'B ms':>9} {'B/A':>6}   (median of {rounds} runs each)")
for (phase, size), sides in sorted(runs.items()):
    if "a" not in sides or "b" not in sides:
        continue
    ma, mb = statistics.median(sides["a"]), statistics.median(sides["b"])
    print(f"{phase:>8} {size:>6} {ma:9.3f} {mb:9.3f} {mb / ma:6.3f}   "
          f"A {' '.join(f'{x:.3f}' for x in sides['a'])} | B {' '.join(f'{x:.3f}' for x in sides['b'])}")
PY
exit $status
