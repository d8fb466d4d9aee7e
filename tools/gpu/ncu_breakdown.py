#!/usr/bin/env python3
"""Per-kernel breakdown of benchmark_transformer's phases from Nsight Compute (docs/PERF.md).

    ncu --clock-control none --graph-profiling node --csv --page raw \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
launch__grid_size,launch__block_size,launch__registers_per_thread \
        benchmark_transformer --model qwen3-0.6b --prefill 512 --decode 512 --iters 1 \
        --warmup 1 > ncu.csv
    python3 tools/gpu/ncu_breakdown.py ncu.csv --phases prefill512,decode512 [--markdown]

ncu serializes kernels and flushes the caches before each one, so every figure is one kernel
alone and cold: the weights come from DRAM as in a real step, and a small kernel's duration
includes the fixed cost of a launch that a CUDA graph with programmatic dependent launch
partly hides. The sum over a phase is therefore an upper bound of the phase's kernel time,
and the per-kernel bytes against the duration say how close each kernel is to the copy
bandwidth.

Phases are found in launch order: the runtime's random-weight fills (`fill_uniform`) come
first, then each phase's warm-up run, each starting with the embedding gather; --phases
names them in that order (benchmark_transformer runs the prefill buckets, then the decode
contexts). Kernels after the named phases are left out. The warm-up run of a decode phase
runs at the runtime's warm-up position, not at the benchmark's context, so decode attention
reads almost no cache there. Standard library only.
"""

import argparse
import collections
import csv
import io
import re
import sys

METRICS = {
    "time_ns": "gpu__time_duration.sum",
    "read": "dram__bytes_read.sum",
    "write": "dram__bytes_write.sum",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
}


def fail(message):
    print(f"ncu_breakdown: {message}", file=sys.stderr)
    sys.exit(2)


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        fail(f"not a number in the ncu CSV: {text!r}")


def read_kernels(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"cannot read {path}: {e}")
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        fail(f"{path}: no ncu --csv --page raw table (a header row starting with \"ID\")")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    missing = [m for m in list(METRICS.values()) + ["Kernel Name"] if m not in col]
    if missing:
        fail(f"{path}: the ncu run lacks the metrics {', '.join(missing)} (see --help)")
    kernels = []
    for row in rows[2:]:  # rows[1] holds the units
        if len(row) != len(header):
            continue
        full = row[col["Kernel Name"]]
        kernels.append({
            "name": re.sub(r"\(.*", "", re.sub(r"^void ", "", full)),
            "family": re.sub(r"[<(].*", "", re.sub(r"^void (tileplan::)?", "", full)),
            "us": number(row[col[METRICS["time_ns"]]]) / 1e3,
            "read_mb": number(row[col[METRICS["read"]]]) / 1e6,
            "write_mb": number(row[col[METRICS["write"]]]) / 1e6,
            "grid": row[col[METRICS["grid"]]].replace(",", ""),
            "block": row[col[METRICS["block"]]].replace(",", ""),
        })
    return kernels


def split_phases(kernels, names):
    body = [k for k in kernels if k["family"] != "fill_uniform"]
    starts = [i for i, k in enumerate(body) if k["family"] == "embedding_gather"]
    if len(starts) < len(names):
        fail(f"{len(names)} phases named but {len(starts)} found (one embedding gather each)")
    phases = []
    for n, name in enumerate(names):
        end = starts[n + 1] if n + 1 < len(starts) else len(body)
        phases.append((name, body[starts[n]:end]))
    return phases


def print_phase(name, kernels, markdown):
    groups = collections.OrderedDict()
    for k in kernels:
        # Instances differ by template arguments and launch shape (e.g. the QKV and the
        # residual GEMVs); cuBLASLt kernels by their own names.
        key = (k["name"][:160], k["grid"], k["block"])
        groups.setdefault(key, []).append(k)
    total = sum(k["us"] for k in kernels)
    print(f"{name}: {len(kernels)} kernels, {total:.1f} us summed (each alone, cold caches)")
    head = ["calls", "total us", "share", "us/call", "DRAM MB/call", "GB/s", "grid", "block",
            "kernel"]
    rows = []
    for (kname, grid, block), ks in sorted(groups.items(), key=lambda kv: -sum(
            k["us"] for k in kv[1])):
        us = sum(k["us"] for k in ks)
        mb = sum(k["read_mb"] + k["write_mb"] for k in ks)
        rows.append([str(len(ks)), f"{us:.1f}", f"{100 * us / total:.1f}%",
                     f"{us / len(ks):.2f}", f"{mb / len(ks):.2f}",
                     f"{1e3 * mb / us:.0f}" if us > 0 else "-", grid, block, kname])
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            r[-1] = f"`{r[-1]}`"
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head[:-1])]
        print("  ".join(h.rjust(w) for h, w in zip(head, widths)) + "  kernel")
        for r in rows:
            print("  ".join(v.rjust(w) for v, w in zip(r, widths)) + "  " + r[-1])
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --csv --page raw output with the metrics above")
    ap.add_argument("--phases", required=True,
                    help="names of the phases in launch order, comma-separated")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    names = [n for n in args.phases.split(",") if n]
    if not names:
        fail("--phases names no phase")
    for name, kernels in split_phases(read_kernels(args.csv), names):
        print_phase(name, kernels, args.markdown)


if __name__ == "__main__":
    main()
