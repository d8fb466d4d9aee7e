#!/usr/bin/env python3
"""Prints the steps of a serialized tileplan ExecutionPlan with the protobuf package alone.

The plan is a format (docs/plan.md): this script imports nothing of tileplan. It compiles the
plan's .proto files with protoc into a temporary directory, loads the generated modules, and
reads a plan written by `benchmark_transformer -o plan.binpb` (binary), `-o plan.json` or
`-o plan.textproto`.

  examples/read_plan.py PLAN [--protos DIR] [--phase NAME]

DIR is the directory holding planner/plan.proto and the files it imports (a tileplan source
tree, or an installed share/tileplan/proto); the default is this script's checkout. Needs
`protoc` on PATH and the Python protobuf package of the same major version (Debian 12:
protobuf-compiler and python3-protobuf).
"""

import argparse
import importlib
import pathlib
import signal
import subprocess
import sys
import tempfile

PROTOS = ["planner/plan.proto", "regions/ir.proto", "kernels/core/tactic.proto",
          "targets/target.proto"]
SUPPORTED_FORMAT_VERSION = 1


def load_plan_module(proto_root: pathlib.Path, out_dir: pathlib.Path):
    missing = [p for p in PROTOS if not (proto_root / p).is_file()]
    if missing:
        sys.exit(f"read_plan: {proto_root} lacks {', '.join(missing)}")
    subprocess.run(["protoc", f"-I{proto_root}", f"--python_out={out_dir}", *PROTOS], check=True)
    sys.path.insert(0, str(out_dir))
    return importlib.import_module("planner.plan_pb2")


def read(plan_pb2, path: pathlib.Path):
    from google.protobuf import json_format, text_format

    plan = plan_pb2.ExecutionPlan()
    data = path.read_bytes()
    if path.suffix == ".json":
        json_format.Parse(data.decode(), plan)
    elif path.suffix in (".textproto", ".txtpb", ".pbtxt"):
        text_format.Parse(data.decode(), plan)
    else:
        plan.ParseFromString(data)
    return plan


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=pathlib.Path)
    parser.add_argument("--protos", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--phase", help="only the phase of this name (e.g. 'decode B=1')")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan_pb2 = load_plan_module(args.protos, pathlib.Path(tmp))
        plan = read(plan_pb2, args.plan)
    if plan.format_version != SUPPORTED_FORMAT_VERSION:
        sys.exit(f"read_plan: format_version {plan.format_version}; this reader knows "
                 f"{SUPPORTED_FORMAT_VERSION}")
    t = plan.target
    print(f"plan {plan.model} for {t.name} ({t.gpu}, sm_{t.sm}), format_version "
          f"{plan.format_version}, {len(plan.phases)} phases, "
          f"{len(plan.weight_packing)} packed weights")
    step_kind = plan_pb2.Step.Source.Name
    for phase in plan.phases:
        if args.phase and phase.name != args.phase:
            continue
        bindings = ", ".join(f"{b.symbol}={b.extent}" for b in phase.bindings)
        print(f"\n{phase.name} ({bindings}): {len(phase.steps)} steps, {phase.launches} "
              f"launches, estimated {phase.estimated_us:.2f} us, arena "
              f"{phase.arena.arena_bytes} bytes")
        for i, s in enumerate(phase.steps):
            params = ",".join(f"{p.name}={p.value}" for p in s.tactic.params) or "-"
            grid = "x".join(str(g) for g in s.launch.grid) if any(s.launch.grid) else "-"
            print(f"  {i:4d}  {s.name:24s} {s.kind:32s} {s.tactic.family:18s} {params:48s} "
                  f"{step_kind(s.source):17s} {s.estimated_us:9.2f} us  grid {grid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
