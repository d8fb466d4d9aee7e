"""tileplan from Python: plan a decoder LLM for a GPU, read the plan, run it.

    import tileplan
    plan = tileplan.plan("qwen3-0.6b", target="h200")      # no GPU needed
    print(plan.to_text())
    model = tileplan.Model.from_pretrained("/path/to/checkpoint")
    new_tokens = model.generate(ids, max_new_tokens=32)     # torch tensors on the GPU

A thin layer over tileplan's C API (include/tileplan/tileplan.h, docs/embedding.md): the
plan's steps are read from its JSON form (docs/plan.md), and arrays cross through DLPack,
so torch tensors on the GPU and numpy arrays on the host are passed by pointer.
"""

import dataclasses
import json
import os
from typing import List, Optional, Sequence

from . import _tileplan

__version__ = _tileplan.version()
api_version = _tileplan.api_version()

__all__ = ["Error", "Model", "Phase", "Plan", "Step", "device_count", "load_plan", "plan"]

# The tools' default buckets (benchmark_transformer --prefill, --decode).
DEFAULT_BUCKETS = (128, 512, 2048)


class Error(RuntimeError):
    """A failed tileplan call: `code` is the C API's tileplan_code (absl::StatusCode)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self):
        return f"tileplan error {self.code}: {self.message}"


_tileplan._set_error_type(Error)


def device_count() -> int:
    """The CUDA devices tileplan can use; 0 without a GPU or driver."""
    return _tileplan.device_count()


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a phase (docs/plan.md, message Step)."""

    phase: str  # the phase's name, "decode B=1"
    region: int  # index into the phase graph's regions
    name: str  # the step's first result
    kind: str  # the region kind it runs, "rms_norm_matmul"
    fused_from: List[str]  # the primitive kinds fused into it
    family: str  # kernel family
    tactic: dict  # the tactic's parameters, name -> value
    # "tuned" (measured, from the tactic cache), "calibrated" (the cost model calibrated by
    # measurement, docs/planner.md) or "cost_model"
    source: str
    est_us: float  # estimated microseconds
    measured_us: Optional[float]  # tuned steps only
    bytes: int  # bytes moved
    flops: int
    launches: int
    bound: str  # "memory", "math", "launch", or "" for steps that launch nothing


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    kind: str  # "prefill" or "decode"
    steps: List[Step]
    launches: int
    est_us: float


def _int(v) -> int:
    return int(v) if v is not None else 0  # protobuf JSON writes int64 as strings


def _phase(p: dict) -> Phase:
    name = p.get("name", "")
    steps = []
    for s in p.get("steps", []):
        tactic = s.get("tactic", {})
        source = s.get("source", "SOURCE_UNSPECIFIED")
        steps.append(
            Step(
                phase=name,
                region=_int(s.get("region")),
                name=s.get("name", ""),
                kind=s.get("kind", ""),
                fused_from=list(s.get("fused_from", [])),
                family=tactic.get("family", ""),
                tactic={t["name"]: _int(t.get("value")) for t in tactic.get("params", [])},
                source={
                    "SOURCE_TUNED": "tuned",
                    "SOURCE_COST_MODEL": "cost_model",
                    "SOURCE_CALIBRATED": "calibrated",
                }.get(source, ""),
                est_us=float(s.get("estimated_us", 0.0)),
                measured_us=float(s["measured_us"]) if source == "SOURCE_TUNED" else None,
                bytes=_int(s.get("bytes")),
                flops=_int(s.get("flops")),
                launches=_int(s.get("launches")),
                bound={"BOUND_MEMORY": "memory", "BOUND_MATH": "math", "BOUND_LAUNCH": "launch",
                       "BOUND_LINK": "link"}.get(
                    s.get("bound", ""), ""
                ),
            )
        )
    kind = {"KIND_PREFILL": "prefill", "KIND_DECODE": "decode"}.get(p.get("kind", ""), "")
    return Phase(name, kind, steps, _int(p.get("launches")), float(p.get("estimated_us", 0.0)))


class Plan:
    """An execution plan (docs/plan.md). `phases` in plan order (prefill phases by token
    count, then decode phases); `steps` every phase's steps, in order."""

    def __init__(self, handle):
        self._handle = handle
        self._json = handle.serialize(_tileplan.FORMAT_JSON).decode()
        self.data = json.loads(self._json)
        # The prefill phases compute each sequence's last token's logits only.
        self.prefill_last_token_logits = bool(
            self.data.get("options", {}).get("prefill_last_token_logits", False))
        self.format_version = _int(self.data.get("format_version"))
        self.phases = [_phase(p) for p in self.data.get("phases", [])]
        self.steps = [s for p in self.phases for s in p.steps]

    @property
    def launches_per_decode_step(self) -> int:
        """Kernel launches of the first decode phase's step (0 when the plan has none)."""
        decode = [p for p in self.phases if p.kind == "decode"]
        return decode[0].launches if decode else 0

    def to_json(self) -> str:
        """The plan as protobuf JSON, field names as in plan.proto."""
        return self._json

    def to_text(self) -> str:
        """The `--show-plan` table: steps per phase, identical layers folded."""
        return self._handle.serialize(_tileplan.FORMAT_TABLE).decode()

    def to_textproto(self) -> str:
        return self._handle.serialize(_tileplan.FORMAT_TEXTPROTO).decode()

    def to_binary(self) -> bytes:
        """Protobuf wire bytes (deterministic): what examples/read_plan.py reads."""
        return self._handle.serialize(_tileplan.FORMAT_BINARY)

    def __repr__(self):
        return f"<tileplan.Plan {self.data.get('model', '')}: {[p.name for p in self.phases]}>"


def plan(
    model: str,
    target: Optional[str] = None,
    prefill: Sequence[int] = DEFAULT_BUCKETS,
    decode: Sequence[int] = DEFAULT_BUCKETS,
    batch: int = 1,
    tactic_cache: Optional[str] = None,
    max_context: int = 0,
    prefill_last_token_logits: bool = False,
    freeze: bool = False,
    tp: int = 1,
    rank: int = 0,
) -> Plan:
    """Plans `model` (a bundled config name such as "qwen3-0.6b", a checkpoint directory or
    its config.json) for `target` (a bundled target name or alias such as "h200" or "sm_90";
    None: this machine's GPU, or h200 without one). `prefill`: the token count of each prefill
    phase; `decode`: decode contexts (the longest sets where decode steps are estimated);
    `max_context`: KV-cache rows per sequence (0: the longest bucket). `tactic_cache`: a
    tactic store whose measured tactics the plan takes (`freeze`: fail on a miss). `tp`,
    `rank`: plan rank `rank` of `tp` tensor-parallel GPUs (docs/plan.md). Needs no GPU.
    Raises tileplan.Error with the planner's message."""
    handle = _tileplan.plan_create(
        str(model), target, [int(x) for x in prefill], [int(x) for x in decode], int(batch),
        int(max_context), bool(prefill_last_token_logits),
        None if tactic_cache is None else str(tactic_cache), bool(freeze), int(tp), int(rank),
    )
    return Plan(handle)


_FORMATS = {"json": _tileplan.FORMAT_JSON, "textproto": _tileplan.FORMAT_TEXTPROTO,
            "binary": _tileplan.FORMAT_BINARY}


def _format_of_path(path: str) -> str:
    if path.endswith(".json"):
        return "json"
    if path.endswith((".textproto", ".txtpb", ".pbtxt")):
        return "textproto"
    if path.endswith((".binpb", ".pb")):
        return "binary"
    raise ValueError(f"{path}: a plan file is read by its name: .json, .textproto (.txtpb, "
                     ".pbtxt) or .binpb (.pb)")


def load_plan(source, format: Optional[str] = None) -> Plan:
    """A plan read back from what Plan.to_json(), to_textproto() or to_binary() gave (here or
    in another process or build of the same format_version): `source` is those bytes (or
    str) with `format` "json", "textproto" or "binary", or a file path (str or os.PathLike)
    whose name gives the format (.json; .textproto, .txtpb, .pbtxt; .binpb, .pb) when `format`
    is None. The plan is checked as far as running needs without a GPU (docs/embedding.md);
    run it with Model(plan, checkpoint). Raises tileplan.Error (INVALID_ARGUMENT naming what
    does not parse or hold together, FAILED_PRECONDITION for another format_version)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, str) and format is not None:
        data = source.encode()
    else:
        path = os.fspath(source)
        format = format or _format_of_path(path)
        with open(path, "rb") as f:
            data = f.read()
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {sorted(_FORMATS)}; got {format!r}")
    return Plan(_tileplan.plan_deserialize(data, _FORMATS[format]))


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _is_torch(x) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


class Model:
    """A planned model running on one GPU: weights uploaded, kernels compiled, phases captured
    as CUDA Graphs, once, when it is made.

    forward and generate take token ids as a torch tensor (on this GPU or the host) or a numpy
    array, [T] or [B, T], and return the same kind: a torch tensor on the GPU when given one
    (the work enqueued on torch's current stream, results written in place through DLPack), a
    torch tensor on the host for one on the host, a numpy array for a numpy array. Both wait for their work and raise tileplan.Error for what the
    kernels reject (a token id outside the vocabulary) unless `sync=False`; then call
    synchronize() to see such errors."""

    def __init__(self, plan_: Plan, checkpoint: Optional[str], seed: int = 1, device: int = 0,
                 host_launches: bool = False):
        self.plan = plan_
        self.device = device
        self._rt = _tileplan.Runtime(plan_._handle, checkpoint, int(seed), int(device),
                                     bool(host_launches))
        self.vocab_size = self._rt.vocab_size
        self.max_context = self._rt.max_context
        self.batch = self._rt.prefill_batch

    @classmethod
    def from_pretrained(cls, path: str, tactic_cache: Optional[str] = None,
                        prefill: Sequence[int] = DEFAULT_BUCKETS,
                        decode: Sequence[int] = DEFAULT_BUCKETS, batch: int = 1,
                        max_context: int = 0, device: int = 0, **kwargs) -> "Model":
        """Plans the checkpoint directory `path` (config.json + safetensors) for GPU `device`
        and loads its weights. Prompts run in the smallest prefill bucket that holds them."""
        p = plan(path, target=None, prefill=prefill, decode=decode, batch=batch,
                 tactic_cache=tactic_cache, max_context=max_context, **kwargs)
        return cls(p, str(path), device=device)

    @classmethod
    def random(cls, model: str, seed: int = 1, tactic_cache: Optional[str] = None,
               prefill: Sequence[int] = DEFAULT_BUCKETS,
               decode: Sequence[int] = DEFAULT_BUCKETS, batch: int = 1, max_context: int = 0,
               device: int = 0, **kwargs) -> "Model":
        """A model of `model`'s geometry (a bundled name or a config) with random weights, as
        benchmark_transformer runs without a checkpoint."""
        p = plan(model, target=None, prefill=prefill, decode=decode, batch=batch,
                 tactic_cache=tactic_cache, max_context=max_context, **kwargs)
        return cls(p, None, seed=seed, device=device)

    # The ids as a C-contiguous int32 [B, T] array of the same kind, the stream to run on, and
    # a function making outputs of that kind.
    def _prepare(self, ids):
        if _is_torch(ids):
            torch = _torch()
            ids2 = ids.reshape(1, -1) if ids.dim() == 1 else ids
            if ids2.dim() != 2:
                raise ValueError(f"ids must be [T] or [B, T]; got shape {tuple(ids.shape)}")
            ids2 = ids2.to(torch.int32).contiguous()
            if ids2.is_cuda:
                stream = torch.cuda.current_stream(ids2.device).cuda_stream
                device = ids2.device
            else:
                stream, device = 0, "cpu"

            def empty(shape, float_dtype):
                return torch.empty(shape, dtype=torch.float32 if float_dtype else torch.int32,
                                   device=device)

            return ids2, stream, empty
        import numpy as np

        ids2 = np.asarray(ids)
        if ids2.ndim == 1:
            ids2 = ids2.reshape(1, -1)
        if ids2.ndim != 2:
            raise ValueError(f"ids must be [T] or [B, T]; got shape {ids2.shape}")
        ids2 = np.ascontiguousarray(ids2, dtype=np.int32)

        def empty(shape, float_dtype):
            return np.empty(shape, dtype=np.float32 if float_dtype else np.int32)

        return ids2, 0, empty

    def forward(self, ids, sync: bool = True):
        """Runs the prompts `ids` from an empty KV cache; returns float32 logits [B, T, V]
        (B = 1 for ids of shape [T]), or [B, 1, V] for a plan made with
        prefill_last_token_logits."""
        ids2, stream, empty = self._prepare(ids)
        b, t = ids2.shape
        rows = 1 if self.plan.prefill_last_token_logits else t
        logits = empty((b, rows, self.vocab_size), True)
        self._rt.prefill(stream, ids2, b, t, logits)
        if sync:
            self._rt.synchronize(stream)
        return logits

    def generate(self, ids, max_new_tokens: int, sync: bool = True):
        """Greedy generation, the whole loop on the GPU: returns the new tokens, int32
        [B, max_new_tokens]."""
        ids2, stream, empty = self._prepare(ids)
        b, t = ids2.shape
        out = empty((b, int(max_new_tokens)), False)
        self._rt.generate(stream, ids2, b, t, int(max_new_tokens), out)
        if sync:
            self._rt.synchronize(stream)
        return out

    def synchronize(self, stream: Optional[int] = None):
        """Waits for `stream` (default: torch's current stream when torch is loaded, else the
        legacy default stream) and raises what the kernels reported since the last check."""
        if stream is None:
            torch = _torch()
            stream = torch.cuda.current_stream(self.device).cuda_stream if torch else 0
        self._rt.synchronize(int(stream))
