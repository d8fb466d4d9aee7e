#!/usr/bin/env bash
# Installs a built tree into a scratch prefix, then builds and runs the examples against the
# installed package alone (find_package(tileplan CONFIG), no source-tree include path):
# examples/c_plan (the shared library) and examples/cpp_plan (the static archives) plan a
# bundled config with no GPU, write the plan, print its table, and fail with the planner's
# message for a bad model name; examples/c_generate builds and says it has no GPU to run on;
# plan_model.c built again with nothing but pkg-config's flags runs too; and the shared
# library exports the C API's symbols only (docs/embedding.md, "Installing"). CI runs it after
# the tests.
#
#   tools/install_check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scratch="$build/install-check"
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" > /dev/null
for example in c_plan cpp_plan c_generate; do
  cmake -S "examples/$example" -B "$scratch/$example" -G Ninja \
    -DCMAKE_PREFIX_PATH="$PWD/$scratch/prefix" > /dev/null
  cmake --build "$scratch/$example" > /dev/null
  if grep -q -- "-I$PWD" "$scratch/$example/build.ninja"; then
    echo "install_check: $example was compiled with a source-tree include path" >&2
    exit 1
  fi
done
export CUDA_VISIBLE_DEVICES=
"$scratch/c_plan/plan_model" qwen3-0.6b "$scratch/plan.json" h200 > "$scratch/plan_model.txt"
grep -q '"format_version": 1' "$scratch/plan.json"
grep -q "^read back: 2 phases, 143 launches per decode step$" "$scratch/plan_model.txt"
"$scratch/cpp_plan/plan_table" qwen3-0.6b h200 > "$scratch/table.txt"
grep -q "^launches per decode step: 143$" "$scratch/table.txt"
if "$scratch/c_plan/plan_model" no-such-model 2> "$scratch/error.txt"; then
  echo "install_check: planning no-such-model succeeded" >&2
  exit 1
fi
grep -q "neither an existing path nor a bundled config" "$scratch/error.txt"
if "$scratch/cpp_plan/plan_table" qwen3-0.6b sm_7 2> "$scratch/error2.txt"; then
  echo "install_check: planning for target sm_7 succeeded" >&2
  exit 1
fi
grep -q "^plan_table: tileplan error 5: " "$scratch/error2.txt"
rc=0
"$scratch/c_generate/generate" tests/data/qwen3-tiny 4 1 2 3 > "$scratch/generate.txt" || rc=$?
if ((rc != 77)) || ! grep -q "no CUDA device here" "$scratch/generate.txt"; then
  echo "install_check: c_generate without a GPU exited $rc, not 77" >&2
  exit 1
fi

# pkg-config alone (the .pc file is relocatable: it finds the prefix from its own place).
export PKG_CONFIG_PATH="$PWD/$scratch/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -o "$scratch/plan_model_pc" examples/c_plan/plan_model.c \
  $(pkg-config --cflags --libs tileplan) -Wl,-rpath,"$PWD/$scratch/prefix/lib"
"$scratch/plan_model_pc" qwen3-0.6b "$scratch/plan_pc.json" h200 > /dev/null
cmp "$scratch/plan.json" "$scratch/plan_pc.json"

# The shared library's dynamic symbols: the C API's functions and nothing else of ours.
library=$(ls "$scratch"/prefix/lib/libtileplan.so.*.*)
others=$(nm -D --defined-only "$library" | awk '$2 ~ /[TtWwDdBbRrVv]/ {print $3}' |
         grep -v '^tileplan_' | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' || true)
if [[ -n $others ]]; then
  echo "install_check: $library exports more than the C API:" >&2
  echo "$others" | head -20 >&2
  exit 1
fi
echo "install_check: the installed package builds and runs examples/c_plan, examples/cpp_plan" \
  "and examples/c_generate, with pkg-config too; libtileplan.so exports the C API only"
