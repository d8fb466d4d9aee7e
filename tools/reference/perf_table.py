#!/usr/bin/env python3
"""The one-run comparison table (docs/PERF.md): tileplan's benchmark_transformer results beside
the PyTorch references of torch_baselines.py measured in the same session, with the ratio to
each reference and the share of the physical floor.

    python3 tools/reference/perf_table.py --torch torch.json --tileplan bench.json \
        [--tileplan bench_tuned.json --label tuned ...] [--markdown]

Each --tileplan file is a `benchmark_transformer --json` output; --label names it (default:
the file name). The floors are the ones torch_baselines.py measured in that session (copy
bandwidth, bf16 GEMM rate); a size without a PyTorch record shows "-". Standard library only,
so it runs anywhere.
"""

import argparse
import json
import os
import sys

VARIANTS = ["eager", "static", "compile", "compile-graphs"]


def fail(message):
    print(f"perf_table: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", required=True, help="torch_baselines.py --json output")
    ap.add_argument("--tileplan", action="append", required=True,
                    help="benchmark_transformer --json output (repeatable)")
    ap.add_argument("--label", action="append", default=[],
                    help="a name per --tileplan file, in order")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = ap.parse_args()
    if args.label and len(args.label) != len(args.tileplan):
        fail("give one --label per --tileplan file, or none")

    torch = load(args.torch)
    ref = {}
    for r in torch.get("records", []):
        ref[(r["variant"], r["phase"], r["tokens_or_context"], r["batch"])] = r["median_ms"]
    floors = {}
    for phase in ("decode", "prefill"):
        for f in torch.get("floors", {}).get(phase, []):
            size = f.get("context", f.get("tokens"))
            floors[(phase, size, f["batch"])] = f["floor_ms"]

    header = ["config", "phase", "size", "batch", "ms"]
    header += [f"x {v}" for v in VARIANTS] + ["floor ms", "% floor"]
    rows = []
    theirs_logits = torch.get("settings", {}).get("prefill_logits", "all")
    for i, path in enumerate(args.tileplan):
        ours = load(path)
        label = args.label[i] if args.label else os.path.basename(path)
        ours_logits = ours.get("prefill_logits", "all")
        if ours_logits != theirs_logits and any(r["phase"] == "prefill"
                                                for r in ours.get("results", [])):
            fail(f"{path} computes prefill logits for '{ours_logits}' tokens, the PyTorch "
                 f"references for '{theirs_logits}': not the same work")
        batch = ours.get("batch", 1)
        for r in ours.get("results", []):
            phase, size, ms = r["phase"], r["size"], r["median_ms"]
            row = [label, phase, str(size), str(batch), f"{ms:.3f}"]
            for v in VARIANTS:
                theirs = ref.get((v, phase, size, batch))
                row.append(f"{theirs / ms:.2f}" if theirs else "-")
            floor = floors.get((phase, size, batch))
            row += [f"{floor:.3f}", f"{100 * floor / ms:.0f}%"] if floor else ["-", "-"]
            rows.append(row)

    gpu = torch.get("gpu", {})
    print(f"{gpu.get('name', '?')}, driver {gpu.get('driver', '?')}; torch {torch.get('torch', '?')}, "
          f"transformers {torch.get('transformers', '?')}; ratios are the reference's median "
          f"over ours (above 1: we are faster)")
    for v in VARIANTS:
        got = [k for k in ref if k[0] == v]
        if not got:
            print(f"(no {v} records: {torch.get('errors', {}).get(v, 'not run')})")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for row in rows:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
