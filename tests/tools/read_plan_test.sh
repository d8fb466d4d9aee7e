#!/usr/bin/env bash
# examples/read_plan.py, a reader that imports nothing of tileplan, reads the plans
# benchmark_transformer writes in all three machine forms alike, lists every step, and refuses
# a format_version it does not know.
#
#   tests/tools/read_plan_test.sh BENCHMARK_TRANSFORMER SOURCE_DIR
set -euo pipefail
bench=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" > /dev/null && "$candidate" -c "import google.protobuf" 2> /dev/null
  then
    py=$candidate
    break
  fi
done
if [[ -z $py ]]; then
  echo "SKIPPED: no python3 with the protobuf package (Debian: python3-protobuf)"
  exit 77
fi
if ! command -v protoc > /dev/null; then
  echo "SKIPPED: no protoc on PATH (Debian: protobuf-compiler)"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }

model="$src/tests/data/qwen3-tiny"
for ext in binpb json textproto; do
  "$bench" --model "$model" --prefill 16 --decode 16 -o "$tmp/plan.$ext" 2> /dev/null
  "$py" "$src/examples/read_plan.py" "$tmp/plan.$ext" > "$tmp/out.$ext"
done
cmp -s "$tmp/out.binpb" "$tmp/out.json" || fail "the json plan reads differently from the binary one"
cmp -s "$tmp/out.binpb" "$tmp/out.textproto" || fail "the textproto plan reads differently"
out="$tmp/out.binpb"
grep -q "^plan qwen3-tiny for h200 (NVIDIA H200, sm_90), format_version 1, 2 phases" "$out" ||
  fail "no plan header in: $(head -3 "$out")"
grep -q "^decode B=1 (B=1, Smax=16, T=1): " "$out" || fail "no decode phase line"
grep -q " qk_norm_rope_kv_write_attention " "$out" || fail "no fused decode attention step"
# One line per step: the phase lines' step counts add up to the step lines.
declared=0
for n in $(sed -n 's/^[a-z].*): \([0-9]*\) steps, .*/\1/p' "$out"); do declared=$((declared + n)); done
listed=$(grep -c '^ *[0-9][0-9]*  ' "$out")
[[ $declared -eq $listed ]] || fail "$declared steps declared, $listed listed"

sed 's/^format_version: 1$/format_version: 2/' "$tmp/plan.textproto" > "$tmp/v2.textproto"
if "$py" "$src/examples/read_plan.py" "$tmp/v2.textproto" > "$tmp/v2.out" 2>&1; then
  fail "a format_version 2 plan was read"
fi
grep -q "format_version 2; this reader knows 1" "$tmp/v2.out" || fail "$(cat "$tmp/v2.out")"
echo "read_plan: $listed steps read from each form"
