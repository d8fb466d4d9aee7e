#!/usr/bin/env bash
# Every GPU check and benchmark of the runtime in one go, on the GPU machine (docs/gpu.md):
# the `gpu` test binaries, verify_model --backend gpu on every fixture (and on a real-size
# random model when tools/reference can make one), then benchmark_transformer and the
# PyTorch references. Logs go to WORK_DIR; the summary, the benchmark JSON files and the
# failing logs are copied to OUT_DIR.
#
#   tools/gpu/runtime_checks.sh STAGED_DIR OUT_DIR [--tests] [--fixtures] [--fixtures-tp2] [--q06]
#       [--random NAME ARGS] [--spread] [--autotune ARGS] [--bench ARGS] [--bench-tuned ARGS]
#       [--bench-as NAME ARGS] [--torch ARGS] [--table] [--ncu ARGS PHASES] [--embedding]
#       [--cache-faults FIXTURE] [--soak]
#
# --embedding (docs/embedding.md) needs STAGED_DIR/prefix (an installed package: header,
# libtileplan.so, its CMake files) and STAGED_DIR/generate (examples/c_generate built against
# it): the C example on every fixture against the fixture's greedy tokens; the Python module
# built here against the prefix and its GPU tests (forward equal to verify_model's logits);
# Model.generate's throughput beside benchmark_transformer's for Qwen3-0.6B, in one run.
set -uo pipefail
staged=$(cd "$1" && pwd) out=$2
shift 2
mkdir -p "$out"
work=${WORK_DIR:-/tmp/tileplan-gpu}
mkdir -p "$work"
export LD_LIBRARY_PATH="$staged/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TILEPLAN_CACHE_DIR="$work/module_cache"
summary="$out/summary.txt"
status=0
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv |
  tee -a "$summary"

while (($#)); do
  case $1 in
    --tests)
      for t in kernels_gpu_test gpu_runtime_test tuner_environment_gpu_test \
               autotune_regions_test; do
        [[ -x $staged/$t ]] || continue
        start=$SECONDS
        "$staged/$t" > "$work/$t.log" 2>&1
        rc=$?
        note "$(printf '%-20s rc=%-3s passed=%-4s failed=%-4s skipped=%-4s %4ss' "$t" "$rc" \
          "$(grep -c '^\[       OK \]' "$work/$t.log")" \
          "$(grep -c '^\[  FAILED  \] [A-Za-z]' "$work/$t.log")" \
          "$(grep -c '^\[  SKIPPED \] .* ms)$' "$work/$t.log")" $((SECONDS - start)))"
        if ((rc != 0)); then
          status=1
          grep -E -B2 -A12 '^\[ RUN|Failure|error' "$work/$t.log" | grep -v '^\[       OK' |
            head -150 >> "$summary"
        fi
      done ;;
    --fixtures|--fixtures-pdl)
      extra=()
      [[ $1 == --fixtures-pdl ]] && extra=(--pdl=always)
      for dir in tests/data/*/; do
        name=$(basename "$dir")
        "$staged/verify_model" --model "$dir" --reference "$dir/reference.safetensors" \
          --backend gpu "${extra[@]}" > "$work/verify.$name.log" 2>&1
        rc=$?
        ((rc == 0)) || status=1
        note "verify_model gpu ${extra[*]} $name: rc=$rc"
        ((rc == 0)) || cat "$work/verify.$name.log" >> "$summary"
        grep -E 'logits|argmax|greedy|row' "$work/verify.$name.log" | sed 's/^/    /' >> "$summary"
      done ;;
    --fixtures-tp2)
      # Tensor parallelism over 2 GPUs (the nvidia-h200-x2 machine): every fixture whose heads
      # divide; the others are refused naming the field, which is no failure.
      for dir in tests/data/*/; do
        name=$(basename "$dir")
        "$staged/verify_model" --model "$dir" --reference "$dir/reference.safetensors" \
          --backend gpu --tp 2 > "$work/verify_tp2.$name.log" 2>&1
        rc=$?
        if ((rc == 2)) && grep -q 'is not a multiple of 2' "$work/verify_tp2.$name.log"; then
          note "verify_model gpu --tp 2 $name: refused (geometry)"
          continue
        fi
        ((rc == 0)) || status=1
        note "verify_model gpu --tp 2 $name: rc=$rc"
        ((rc == 0)) || cat "$work/verify_tp2.$name.log" >> "$summary"
        grep -E 'logits|argmax|greedy|row' "$work/verify_tp2.$name.log" | sed 's/^/    /' >> "$summary"
      done ;;
    --q06)
      start=$SECONDS
      python3 tools/reference/make_random_model.py --config models/configs/qwen3-0.6b.json \
        --out "$work/qwen3-0.6b-random" > "$work/make_random_model.log" 2>&1
      rc=$?
      note "make_random_model: rc=$rc ($((SECONDS - start)) s)"
      tail -5 "$work/make_random_model.log" >> "$summary"
      if ((rc == 0)); then
        "$staged/verify_model" --model "$work/qwen3-0.6b-random" \
          --reference "$work/qwen3-0.6b-random/reference.safetensors" --backend gpu \
          > "$work/verify.q06.log" 2>&1
        rc=$?
        note "verify_model gpu qwen3-0.6b-random: rc=$rc"
        cat "$work/verify.q06.log" >> "$summary"
      fi
      ((rc == 0)) || status=1 ;;
    --random)
      # --random NAME ARGS: make_random_model.py ARGS (e.g. "--config C --layers 3") into
      # WORK_DIR/NAME, then verify_model --backend gpu on it.
      start=$SECONDS
      python3 tools/reference/make_random_model.py $3 --out "$work/$2" > "$work/random.$2.log" 2>&1
      rc=$?
      note "make_random_model $2 ($3): rc=$rc ($((SECONDS - start)) s)"
      tail -5 "$work/random.$2.log" >> "$summary"
      if ((rc == 0)); then
        "$staged/verify_model" --model "$work/$2" --reference "$work/$2/reference.safetensors" \
          --backend gpu > "$work/verify.$2.log" 2>&1
        rc=$?
        note "verify_model gpu $2: rc=$rc"
        cat "$work/verify.$2.log" >> "$summary"
        rm -rf "${work:?}/$2"
      fi
      ((rc == 0)) || status=1
      shift 2 ;;
    --embedding)
      prefix="$staged/prefix"
      export LD_LIBRARY_PATH="$prefix/lib:$LD_LIBRARY_PATH"
      for dir in tests/data/*/; do
        name=$(basename "$dir")
        read -r -a prompt <<< "$(python3 -c "from safetensors.numpy import load_file
r = load_file('$dir/reference.safetensors'); print(' '.join(map(str, r['input_ids'])))")"
        greedy=$(python3 -c "from safetensors.numpy import load_file
r = load_file('$dir/reference.safetensors'); print(' '.join(map(str, r['greedy_tokens'])))")
        count=$(wc -w <<< "$greedy")
        # The tools' tokens: verify_model's device loop prints them when they leave the
        # reference's (after a near-tie), else they are the reference's.
        "$staged/verify_model" --model "$dir" --reference "$dir/reference.safetensors" \
          --backend gpu > "$work/verify.embedding.$name.log" 2>&1
        tools=$(grep -A1 '^greedy (device loop): first mismatch' "$work/verify.embedding.$name.log" |
                sed -n 's/^  ours: *//p')
        [[ -n $tools ]] || tools=$greedy
        "$staged/generate" "$dir" "$count" "${prompt[@]}" > "$work/generate.$name.log" 2>&1
        rc=$?
        ours=$(sed -n 's/^device loop: //p' "$work/generate.$name.log")
        verdict="equal to verify_model's"
        [[ $ours == "$tools" ]] || verdict="DIFFER from verify_model's: ours '$ours', verify_model '$tools'"
        [[ $tools == "$greedy" ]] && verdict+=" and the fixture's" ||
          verdict+=" (which leave the fixture's after a near-tie)"
        ((rc == 0)) && [[ $ours == "$tools" ]] || status=1
        note "c_generate $name: rc=$rc, $count tokens, device loop and host steps agree: $( ((rc == 0)) && echo yes || echo no); tokens $verdict"
        ((rc == 0)) || tail -5 "$work/generate.$name.log" >> "$summary"
      done
      start=$SECONDS
      cmake -S python -B "$work/python-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
        -DPython_EXECUTABLE="$(command -v python3)" > "$work/python-build.log" 2>&1 &&
        cmake --build "$work/python-build" >> "$work/python-build.log" 2>&1
      rc=$?
      note "python module built against the installed package: rc=$rc ($((SECONDS - start)) s)"
      if ((rc != 0)); then
        status=1
        tail -30 "$work/python-build.log" >> "$summary"
      else
        fixture=tests/data/qwen3-tiny
        "$staged/verify_model" --model "$fixture" --reference "$fixture/reference.safetensors" \
          --backend gpu --logits_out "$work/qwen3-tiny.logits.npy" > "$work/verify.logits.log" 2>&1
        note "verify_model gpu qwen3-tiny --logits_out: rc=$?"
        PYTHONPATH="$work/python-build" TILEPLAN_FIXTURE="$fixture" \
          TILEPLAN_VERIFY_LOGITS="$work/qwen3-tiny.logits.npy" \
          python3 -m pytest -q -rs -s python/tests > "$work/pytest.log" 2>&1
        rc=$?
        ((rc == 0)) || status=1
        note "pytest python/tests: rc=$rc"
        grep -E 'passed|failed|skipped|SKIPPED|forward|Error|assert' "$work/pytest.log" | tail -25 |
          sed 's/^/    /' >> "$summary"
        "$staged/benchmark_transformer" --model qwen3-0.6b --prefill 448 --decode 512 \
          --max_context 640 --json "$out/bench_generate.json" > "$work/bench_generate.log" 2>&1
        note "benchmark_transformer qwen3-0.6b --prefill 448 --decode 512 --max_context 640: rc=$?"
        grep -E '^(prefill|decode) ' "$work/bench_generate.log" | sed 's/^/    /' >> "$summary"
        PYTHONPATH="$work/python-build" python3 tools/gpu/generate_throughput.py \
          --bench-json "$out/bench_generate.json" 2>&1 | tee -a "$summary"
      fi ;;
    --spread)
      extra=()
      [[ -d $work/qwen3-0.6b-random ]] && extra=("$work/qwen3-0.6b-random/")
      python3 tools/reference/bf16_spread.py tests/data/*/ "${extra[@]}" 2>&1 |
        grep -v -E 'Warning|Loading weights' | tail -12 | tee -a "$summary" ;;
    --autotune)
      # Cold (a fresh store), then warm (every key already measured).
      rm -f "$work/tactics.db"*
      for run in cold warm; do
        start=$(date +%s%N)
        "$staged/autotune_regions" $2 --tactic-cache "$work/tactics.db" > "$work/autotune.$run.log" 2>&1
        rc=$?
        end=$(date +%s%N)
        note "autotune_regions ($run): rc=$rc, $(((end - start) / 1000000)) ms wall"
        ((rc == 0)) || status=1
        if [[ $run == cold ]]; then
          grep -v -E '^  worker: (begin|candidate)' "$work/autotune.$run.log" | tail -60 >> "$summary"
        else
          tail -4 "$work/autotune.$run.log" >> "$summary"
        fi
      done
      "$staged/autotune_regions" --tactic-cache "$work/tactics.db" --export "$out/tactics.textproto" \
        >> "$summary" 2>&1
      shift ;;
    --bench-tuned)
      "$staged/benchmark_transformer" $2 --tactic-cache "$work/tactics.db" \
        --json "$out/bench_tuned.json" 2>&1 | tee -a "$summary"
      ((PIPESTATUS[0] == 0)) || status=1
      shift ;;
    --bench)
      "$staged/benchmark_transformer" $2 --json "$out/bench.json" 2>&1 | tee -a "$summary"
      ((PIPESTATUS[0] == 0)) || status=1
      shift ;;
    --bench-as)
      # --bench-as NAME ARGS: another benchmark_transformer run, into NAME.json.
      "$staged/benchmark_transformer" $3 --json "$out/$2.json" 2>&1 | tee -a "$summary"
      ((PIPESTATUS[0] == 0)) || status=1
      shift 2 ;;
    --torch)
      python3 tools/reference/torch_baselines.py $2 --json "$out/torch.json" 2>&1 |
        tail -40 | tee -a "$summary"
      ((PIPESTATUS[0] == 0)) || status=1
      shift ;;
    --table)
      # The one-run table: every benchmark JSON of this run beside the PyTorch references.
      benches=()
      for f in "$out"/bench*.json; do benches+=(--tileplan "$f" --label "$(basename "$f" .json)"); done
      python3 tools/reference/perf_table.py --torch "$out/torch.json" "${benches[@]}" |
        tee -a "$summary" ;;
    --ncu)
      # --ncu ARGS PHASES: one benchmark_transformer run (ARGS; add --iters 1 --warmup 1)
      # under Nsight Compute, every kernel alone, then the per-phase breakdown
      # (tools/gpu/ncu_breakdown.py; PHASES names the phases in launch order).
      metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
      metrics+=,launch__grid_size,launch__block_size
      timeout 300 ncu --clock-control none --graph-profiling node --csv --page raw \
        --metrics "$metrics" "$staged/benchmark_transformer" $2 > "$work/ncu.csv" \
        2> "$work/ncu.err"
      rc=$?
      note "ncu benchmark_transformer $2: rc=$rc"
      if ((rc == 0)); then
        cp "$work/ncu.csv" "$out/ncu.csv"
        python3 tools/gpu/ncu_breakdown.py "$work/ncu.csv" --phases "$3" | tee -a "$summary"
      else
        status=1
        tail -20 "$work/ncu.err" >> "$summary"
      fi
      shift 2 ;;
    --cache-faults)
      # --cache-faults FIXTURE: verify_model on the fixture fills the module cache; then its
      # entries are damaged in turn (emptied, cut in half, a foreign magic, another entry's
      # bytes, a FIFO) and verify_model must pass again, each damaged entry (but the FIFO,
      # which is never replaced) written anew, whole.
      dir=tests/data/$2 cache="$work/cache_faults"
      rm -rf "$cache"
      TILEPLAN_CACHE_DIR="$cache" "$staged/verify_model" --model "$dir" \
        --reference "$dir/reference.safetensors" --backend gpu > "$work/cache_faults.0.log" 2>&1
      rc=$?
      entries=("$cache"/*.tpmod)
      n=${#entries[@]} damaged=0 fifo=""
      for ((i = 0; i < n; ++i)); do
        f=${entries[i]}
        case $((i % 5)) in
          0) : > "$f" ;;
          1) head -c $(($(stat -c %s "$f") / 2)) "$f" > "$f.cut" && mv "$f.cut" "$f" ;;
          2) printf 'FOREIGN!' | dd of="$f" bs=8 count=1 conv=notrunc status=none ;;
          3) cp "${entries[(i + 1) % n]}" "$f" ;;
          4) if [[ -z $fifo ]]; then rm -f "$f" && mkfifo "$f" && fifo=$f; else : > "$f"; fi ;;
        esac
        ((++damaged))
      done
      regular=()
      for f in "${entries[@]}"; do [[ $f == "$fifo" ]] || regular+=("$f"); done
      sums=$(md5sum "${regular[@]}")
      TILEPLAN_CACHE_DIR="$cache" timeout 300 "$staged/verify_model" --model "$dir" \
        --reference "$dir/reference.safetensors" --backend gpu > "$work/cache_faults.1.log" 2>&1
      rc2=$?
      rewritten=0 whole=0
      for f in "${regular[@]}"; do
        grep -qF "$(md5sum "$f")" <<< "$sums" || ((++rewritten))
        [[ $(head -c 8 "$f") == TPMODC01 ]] && ((++whole))
      done
      note "module cache faults ($2): first run rc=$rc, $n entries, $damaged damaged" \
        "(one a FIFO); run after the damage rc=$rc2, $rewritten rewritten, $whole with the" \
        "cache's magic, the FIFO $([[ -p $fifo ]] && echo 'left as it was' || echo 'replaced')"
      ((rc == 0 && rc2 == 0 && n > 0 && rewritten == ${#regular[@]} && whole == ${#regular[@]})) || {
        status=1
        tail -20 "$work/cache_faults.1.log" >> "$summary"
      }
      shift ;;
    --soak)
      # 10,000 generate calls on one runtime per fixture (tests/runtime/gpu_soak_test.cc).
      start=$SECONDS
      "$staged/gpu_soak_test" > "$work/gpu_soak_test.log" 2>&1
      rc=$?
      note "gpu_soak_test: rc=$rc ($((SECONDS - start)) s)"
      grep -E 'generate calls|sampled calls|OK|FAILED|Failure' "$work/gpu_soak_test.log" \
        | head -40 | sed 's/^/    /' >> "$summary"
      ((rc == 0)) || { status=1; tail -30 "$work/gpu_soak_test.log" >> "$summary"; } ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
exit $status
