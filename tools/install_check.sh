#!/usr/bin/env bash
# Installs a built tree into a scratch prefix, then builds and runs examples/c_plan and
# examples/cpp_plan against the installed package alone (find_package(tileplan CONFIG), no
# source-tree include path): plans a bundled config with no GPU, writes the plan, prints its
# table, and checks that a bad model name fails with the planner's message (docs/embedding.md,
# "Installing"). CI runs it after the tests.
#
#   tools/install_check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scratch="$build/install-check"
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" > /dev/null
for example in c_plan cpp_plan; do
  cmake -S "examples/$example" -B "$scratch/$example" -G Ninja \
    -DCMAKE_PREFIX_PATH="$PWD/$scratch/prefix" > /dev/null
  cmake --build "$scratch/$example" > /dev/null
  if grep -q -- "-I$PWD" "$scratch/$example/build.ninja"; then
    echo "install_check: $example was compiled with a source-tree include path" >&2
    exit 1
  fi
done
export CUDA_VISIBLE_DEVICES=
"$scratch/c_plan/plan_model" qwen3-0.6b "$scratch/plan.json" h200
grep -q '"format_version": 1' "$scratch/plan.json"
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
echo "install_check: the installed package builds and runs examples/c_plan and examples/cpp_plan"
