"""Model.generate's decode throughput beside benchmark_transformer's decode step, one run
(docs/PERF.md, "Embedding"). Random weights of a bundled geometry, the plan both make for
--prefill P --decode C --max-context M; generate's time per new token is the slope between
generating 1 and N + 1 tokens after a prompt of P tokens (so the prefill cancels), contexts
P..P + N, centred on C when P + N / 2 = C. Medians of --reps runs each.

    python3 tools/gpu/generate_throughput.py --bench-json BENCH.json [--model qwen3-0.6b]
"""
import argparse
import json
import statistics
import time

import torch

import tileplan


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--prompt", type=int, default=448)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--max-context", type=int, default=640)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--bench-json", required=True, help="benchmark_transformer --json output")
    a = ap.parse_args()

    model = tileplan.Model.random(a.model, prefill=[a.prompt], decode=[a.context],
                                  max_context=a.max_context)
    ids = torch.randint(0, model.vocab_size, (1, a.prompt), dtype=torch.int32, device="cuda")

    def timed(new_tokens):
        model.generate(ids, new_tokens)  # warm
        ms = []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            model.generate(ids, new_tokens)
            ms.append(1e3 * (time.perf_counter() - start))
        return statistics.median(ms)

    one = timed(1)
    many = timed(a.new + 1)
    per_token = (many - one) / a.new
    with open(a.bench_json) as f:
        bench = json.load(f)
    decode = [r for r in bench["results"] if r["phase"] == "decode" and r["size"] == a.context]
    theirs = decode[0]["median_ms"]
    ratio = per_token / theirs
    print(f"Model.generate: prompt {a.prompt}: 1 token {one:.3f} ms, {a.new + 1} tokens "
          f"{many:.3f} ms -> {per_token:.4f} ms per decode token ({1e3 / per_token:.1f} tok/s)")
    print(f"benchmark_transformer decode at context {a.context}: {theirs:.4f} ms "
          f"({1e3 / theirs:.1f} tok/s)")
    print(f"generate / benchmark_transformer: {ratio:.4f} ({100 * (ratio - 1):+.2f}%)"
          f" -> {'within' if abs(ratio - 1) <= 0.03 else 'NOT within'} 3%")


if __name__ == "__main__":
    main()
