#!/usr/bin/env python3
"""The PyTorch references of docs/PERF.md, measured side by side on one GPU.

Variants (same weights, bf16, batch --batch):
  eager           HF transformers model, default attention (sdpa), DynamicCache
  static          the same model with transformers' StaticCache, no compile
  compile         the static-cache model's forward under torch.compile(mode="default")
  compile-graphs  the same under torch.compile(mode="reduce-overhead") (CUDA graphs)

Phases: prefill T = one forward of T tokens from an empty cache, logits for every token
(--prefill-logits last: for each sequence's last token only, transformers' logits_to_keep=1,
as generation computes them);
decode at context C = one forward of one new token per sequence at position C-1, the cache
holding C-1 tokens (filled once by a prefill; the DynamicCache is cropped back to C-1 and
the static cache's length reset to C-1 before every timed step). Each figure is the median
(p10, p90) over --iters calls, each timed alone with CUDA events after --warmup calls.

The physical floors are measured in the same run: device-to-device copy bandwidth (1 GiB
cudaMemcpy, median) and bf16 GEMM rate (8192^3 torch.matmul, median). Decode floor = (all
weight bytes + KV bytes at the context) / copy bandwidth; prefill floor = 2 * params * T * B
/ GEMM rate. A mixture-of-experts model counts only the weights a step touches (attention,
dense MLPs, routers, shared experts, LM head, and E * (1 - (1 - K/E)^B) distinct routed
experts per MoE layer at batch B: each sequence's K experts assumed uniform and independent)
and the parameters one token multiplies by; MLA caches kv_lora_rank + qk_rope_head_dim values
per token and layer. --floor-only prints those bytes and FLOPs from a MoE config, no GPU.

Every variant runs in its own process, so a crash or hang in one (a compiler or CUDA-graph
failure) is recorded in the JSON and the others still run; the exit status is non-zero only
when every variant failed. Output format: docs/reference.md.

    python3 tools/reference/torch_baselines.py --config models/configs/qwen3-0.6b.json \\
        --prefill 128,512,2048 --decode 128,512,2048 --json /tmp/baselines.json
"""

import argparse
import datetime
import inspect
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch._dynamo  # config, mark_static_address and the compile counters
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402  (the fixtures' weight recipe)
from make_random_model import check_tied, fail, load_config  # noqa: E402

VARIANTS = ("eager", "static", "compile", "compile-graphs")
COMPILE_MODES = {"compile": "default", "compile-graphs": "reduce-overhead"}
COPY_BYTES = 1 << 30
GEMM_N = 8192
FLOOR_ITERS = 20
FLOOR_WARMUP = 3
# CUDA graph trees run a new shape eagerly once, record it on the next call, replay after.
GRAPHS_MIN_WARMUP = 3
RECOMPILE_LIMIT = 64


class BaselineError(RuntimeError):
    """A measurement that cannot be trusted: the variant fails with this message."""


def parse_sizes(text, flag):
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{flag} {text!r}: expected comma-separated integers")
    if any(s < 1 for s in sizes):
        fail(f"{flag} {text!r}: sizes must be positive")
    return sizes


def percentiles(times_ms):
    """(median, p10, p90) by linear interpolation between order statistics."""
    s = sorted(times_ms)

    def at(q):
        pos = q * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return at(0.5), at(0.1), at(0.9)


def time_call(call, prepare, iters, warmup):
    """Times `call` alone with CUDA events; `prepare` runs untimed before every call.

    The first warm-up call is timed on the wall clock (for compiled variants it includes
    compilation). Before each timed call the device is idle, so a call's time includes its
    host-side launch cost. Returns ((median, p10, p90) in ms, first call in s)."""
    t0 = time.perf_counter()
    prepare()
    call()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    for _ in range(warmup - 1):
        prepare()
        call()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        prepare()
        torch.cuda.synchronize()
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return percentiles(times), first_s


def time_copy(iters):
    src = torch.randint(0, 256, (COPY_BYTES,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    stats, _ = time_call(lambda: dst.copy_(src), lambda: None, iters, FLOOR_WARMUP)
    if not torch.equal(dst[:4096], src[:4096]):
        raise BaselineError("the device-to-device copy did not copy")
    return stats


def time_gemm(iters):
    a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
    stats, _ = time_call(lambda: torch.matmul(a, b, out=c), lambda: None, iters, FLOOR_WARMUP)
    return stats


def measure_floors(iters):
    """Copy bandwidth (read + write bytes per second) and bf16 GEMM rate, medians."""
    copy_ms, copy_p10, copy_p90 = time_copy(iters)
    gemm_ms, gemm_p10, gemm_p90 = time_gemm(iters)
    torch.cuda.empty_cache()
    return {
        "copy": {"bytes": COPY_BYTES, "median_ms": copy_ms, "p10_ms": copy_p10,
                 "p90_ms": copy_p90, "GBps": 2 * COPY_BYTES / (copy_ms * 1e-3) / 1e9,
                 "counts": "bytes read + bytes written, per second"},
        "gemm": {"m": GEMM_N, "n": GEMM_N, "k": GEMM_N, "dtype": "bfloat16",
                 "median_ms": gemm_ms, "p10_ms": gemm_p10, "p90_ms": gemm_p90,
                 "TFLOPs": 2 * GEMM_N ** 3 / (gemm_ms * 1e-3) / 1e12},
    }


def gpu_info():
    props = torch.cuda.get_device_properties(0)
    driver = None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and out.stdout.strip():
            driver = out.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    if driver is None:
        try:
            import pynvml
            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        except Exception:  # pynvml absent or NVML unusable: say so in the JSON
            driver = "unknown (nvidia-smi and pynvml unavailable)"
    return {"name": torch.cuda.get_device_name(0), "driver": driver,
            "capability": f"{props.major}.{props.minor}",
            "memory_GiB": round(props.total_memory / 2 ** 30, 1),
            "multiprocessors": props.multi_processor_count}


def kv_geometry(config):
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return text.num_hidden_layers, text.num_key_value_heads, head_dim


def kv_bytes_per_token(config, element_bytes=2):
    """Cache bytes one token of one sequence adds, bf16. Multi-head latent attention
    (DeepSeek-V2: kv_lora_rank set) caches the compressed latent and the shared RoPE key,
    kv_lora_rank + qk_rope_head_dim values per layer (as transformers' cache holds them);
    every other attention caches K and V of every KV head."""
    text = config.get_text_config()
    if getattr(text, "kv_lora_rank", None):
        return text.num_hidden_layers * (text.kv_lora_rank + text.qk_rope_head_dim) * element_bytes
    layers, kv_heads, head_dim = kv_geometry(config)
    return layers * 2 * kv_heads * head_dim * element_bytes


def moe_geometry(config):
    """(routed experts E, experts per token K) of a mixture-of-experts config, else None."""
    text = config.get_text_config()
    experts = None
    for key in ("n_routed_experts", "num_experts", "num_local_experts"):
        experts = experts or getattr(text, key, None)
    top_k = getattr(text, "num_experts_per_tok", None)
    return (int(experts), int(top_k)) if experts and top_k else None


EXPECTED_EXPERTS = ("a decode step of batch B reads E * (1 - (1 - K/E)^B) distinct routed experts "
                    "per MoE layer: the expected count when each sequence picks its K experts "
                    "uniformly and independently of the others (K at batch 1)")


def expected_experts(experts, top_k, batch):
    """Expected distinct experts B sequences touch in one MoE layer (EXPECTED_EXPERTS)."""
    return min(float(experts), experts * (1.0 - (1.0 - top_k / experts) ** batch))


def active_weights(config, batch, element_bytes=2):
    """The weight bytes one decode step of `batch` sequences reads from a mixture-of-experts
    model, from its parameter shapes (the model is built on the meta device: no memory).

    Every MoE layer's router and shared experts, the routed experts the batch is expected to
    touch (EXPECTED_EXPERTS), attention and dense-MLP layers, norms, the LM head and one
    embedding row per sequence. Also the parameters one token multiplies by (K routed experts
    per MoE layer, no embedding table), for the prefill FLOP floor. None for a dense model,
    whose floors count every weight byte."""
    moe = moe_geometry(config)
    if moe is None:
        return None
    experts, top_k = moe
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    head = model.get_output_embeddings().weight
    embed = model.get_input_embeddings().weight
    counts = {"routed": 0, "router": 0, "shared": 0, "other": 0}
    moe_layers = set()
    for name, p in model.named_parameters():  # a tied matrix is listed once
        if p is embed or p is head:
            continue
        if ".mlp.experts." in name:
            counts["routed"] += p.numel()
            moe_layers.add(name.split(".mlp.experts.")[0])
        elif ".mlp.gate." in name:
            counts["router"] += p.numel()
        elif ".shared_expert" in name:  # shared_experts (DeepSeek), shared_expert(_gate) (Qwen2-MoE)
            counts["shared"] += p.numel()
        else:
            counts["other"] += p.numel()
    if not moe_layers:
        return None
    per_expert = counts["routed"] // (len(moe_layers) * experts)
    distinct = expected_experts(experts, top_k, batch)
    vocab, hidden = head.shape
    elements = {
        "attention_dense_norms": counts["other"], "routers": counts["router"],
        "shared_experts": counts["shared"],
        "routed_experts": round(len(moe_layers) * distinct * per_expert),
        "lm_head": head.numel(), "embedding_rows": batch * embed.shape[1],
    }
    token_params = (counts["other"] + counts["router"] + counts["shared"]
                    + len(moe_layers) * top_k * per_expert + head.numel())
    return {
        "batch": batch, "experts": experts, "experts_per_token": top_k,
        "moe_layers": len(moe_layers), "params_per_expert": per_expert,
        "expected_distinct_experts_per_layer": distinct, "assumption": EXPECTED_EXPERTS,
        "bytes": {k: v * element_bytes for k, v in elements.items()},
        "weight_bytes": sum(elements.values()) * element_bytes,
        "params_per_token": token_params,
        "all_weight_bytes": (sum(counts.values()) + embed.numel()
                             + (head.numel() if head is not embed else 0)) * element_bytes,
        "vocab": vocab, "hidden": hidden,
    }


# ---------------------------------------------------------------------------------------------
# One variant, in a child process.


def build_model(args, config):
    """The bf16 model on the GPU: DIR's checkpoint, or the config with seeded random weights."""
    if args.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
        model.to("cuda")
        weights = f"checkpoint {args.model}"
    else:
        torch.manual_seed(args.seed)
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.to("cuda")
        gain, embed_std = make_fixtures.INIT_CANDIDATES[0]
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        make_fixtures.init_weights(model, gen, gain, embed_std)
        weights = (f"random: seed {args.seed}, make_fixtures.init_weights gain {gain} "
                   f"embed_std {embed_std}")
    tied = check_tied(model, model.config)
    model.eval()
    model.requires_grad_(False)
    for name, p in model.named_parameters():
        if p.device.type != "cuda" or p.dtype != torch.bfloat16:
            raise BaselineError(f"{name} is {p.dtype} on {p.device}, expected bf16 on the GPU")
        if not bool(torch.isfinite(p).all()):
            raise BaselineError(f"{name} holds NaN or Inf")
        if p.dim() > 1 and not bool(p.any()):
            raise BaselineError(f"{name} is all zeros: timing zeros is not a measurement")
    info = {"weights": weights, "tied_embeddings": tied,
            "params": sum(p.numel() for p in model.parameters()),
            "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "attn_implementation": model.config._attn_implementation}
    return model, info


def cache_length(cache):
    return int(cache.get_seq_length())


def expect_length(cache, n, what):
    got = cache_length(cache)
    if got != n:
        raise BaselineError(f"{what}: the cache holds {got} tokens, expected {n}; this "
                            f"transformers version keeps its cache length differently")


def static_layers(cache):
    layers = getattr(cache, "layers", None)
    if not layers:
        raise BaselineError("StaticCache has no per-layer list (.layers): unsupported transformers")
    for layer in layers:
        if not getattr(layer, "is_initialized", False) or not isinstance(layer.keys, torch.Tensor):
            raise BaselineError("StaticCache layers were not initialised by a forward")
    return layers


def length_counters(layer):
    """The layer's own write-position counters. transformers >= 5.5 (5.17 included) writes a
    StaticLayer at its `cumulative_length`, a device tensor it advances in place, and takes the
    attention mask's query offset from it; sliding layers also keep `cumulative_length_int`.
    Earlier versions write at `cache_position` and keep no counter for full attention."""
    return [name for name in ("cumulative_length", "cumulative_length_int")
            if isinstance(getattr(layer, name, None), (int, torch.Tensor))]


def set_cache_length(cache, n):
    """Rewinds the static cache to hold n tokens (in place: CUDA graphs keep the address)."""
    for layer in cache.layers:
        for name in length_counters(layer):
            value = getattr(layer, name)
            if isinstance(value, torch.Tensor):
                value.fill_(n)
            else:
                setattr(layer, name, n)


def clear_static_cache(cache):
    for layer in cache.layers:
        layer.keys.zero_()
        layer.values.zero_()
    set_cache_length(cache, 0)


def crop_to(cache, n):
    """Drops the DynamicCache's newest tokens down to n. A negative count means "remove that
    many" in every transformers 4.56+ (5.17 deprecates the absolute, positive form)."""
    extra = cache_length(cache) - n
    if extra > 0:
        cache.crop(-extra)


def logits_kwargs(model, args):
    """The prefill forward's extra arguments for --prefill-logits."""
    if args.prefill_logits == "all":
        return {}
    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        raise BaselineError(f"{type(model).__name__}.forward takes no logits_to_keep: "
                            f"--prefill-logits last cannot be honoured")
    return {"logits_to_keep": 1}


def run_dynamic(model, args, inputs, report):
    """HF eager: DynamicCache, positions derived by the model from the cache."""
    records = []
    holder = {}

    def fresh_cache():
        holder["cache"] = transformers.DynamicCache(config=model.config)

    for t in args.prefill_sizes:
        x = inputs["prefill"][t]
        keep = logits_kwargs(model, args)
        stats, first_s = time_call(
            lambda x=x: model(input_ids=x, past_key_values=holder["cache"], use_cache=True,
                              **keep),
            fresh_cache, args.iters, args.warmup)
        expect_length(holder["cache"], t, f"eager prefill {t}")
        records.append(report("prefill", t, stats, first_s))
    for c in args.decode_sizes:
        cache = transformers.DynamicCache(config=model.config)
        model(input_ids=inputs["fill"][c], past_key_values=cache, use_cache=True)
        expect_length(cache, c - 1, f"eager fill for context {c}")
        stats, first_s = time_call(
            lambda cache=cache: model(input_ids=inputs["token"], past_key_values=cache,
                                      use_cache=True),
            lambda cache=cache, c=c: crop_to(cache, c - 1), args.iters, args.warmup)
        expect_length(cache, c, f"eager decode at context {c}")
        records.append(report("decode", c, stats, first_s))
        del cache
    return records


def run_static(variant, model, args, inputs, report):
    """StaticCache, uncompiled or under torch.compile; positions given explicitly."""
    batch = args.batch
    max_len = max(args.prefill_sizes + args.decode_sizes) + 1
    cache = transformers.StaticCache(config=model.config, max_cache_len=max_len)
    with_cache_position = "cache_position" in inspect.signature(model.forward).parameters

    def kwargs_at(start, x):
        n = x.shape[1]
        pos = torch.arange(start, start + n, device="cuda")
        kw = dict(input_ids=x, past_key_values=cache, use_cache=True,
                  position_ids=pos.unsqueeze(0).expand(batch, n).contiguous())
        if with_cache_position:
            kw["cache_position"] = pos
        return kw

    # Allocate the cache with an eager forward, outside any compiled region, so its tensors
    # are marked as static addresses (CUDA graphs then read and write them in place).
    model(**kwargs_at(0, inputs["token"]))
    layers = static_layers(cache)
    counted = bool(length_counters(layers[0]))
    for layer in layers:
        for t in (layer.keys, layer.values, getattr(layer, "cumulative_length", None)):
            if isinstance(t, torch.Tensor):
                torch._dynamo.mark_static_address(t)
    clear_static_cache(cache)
    print(f"  StaticCache: {len(layers)} layers x {max_len} slots, write position from "
          f"{'the layer counter' if counted else 'cache_position'}", flush=True)

    if variant == "static":
        forward = model
    else:
        forward = torch.compile(model.forward, mode=COMPILE_MODES[variant], dynamic=False)
    graphs = variant == "compile-graphs"
    warmup = max(args.warmup, GRAPHS_MIN_WARMUP) if graphs else args.warmup

    def rewind(n):
        set_cache_length(cache, n)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()

    records = []
    for t in args.prefill_sizes:
        kw = dict(kwargs_at(0, inputs["prefill"][t]), **logits_kwargs(model, args))
        stats, first_s = time_call(lambda kw=kw: forward(**kw), lambda: rewind(0), args.iters,
                                   warmup)
        if counted:
            expect_length(cache, t, f"{variant} prefill {t}")
        records.append(report("prefill", t, stats, first_s))
    for c in args.decode_sizes:
        clear_static_cache(cache)
        model(**kwargs_at(0, inputs["fill"][c]))  # eager fill: the cache holds c-1 tokens
        expect_length(cache, c - 1, f"{variant} fill for context {c}")
        kw = kwargs_at(c - 1, inputs["token"])
        stats, first_s = time_call(lambda kw=kw: forward(**kw), lambda c=c: rewind(c - 1),
                                   args.iters, warmup)
        expect_length(cache, c, f"{variant} decode at context {c}")
        records.append(report("decode", c, stats, first_s))
    return records, warmup


def compiler_counters():
    from torch._dynamo.utils import counters  # process-wide: this child compiled one variant
    return {"graph_breaks": int(sum(counters["graph_break"].values())),
            "unique_graphs": int(counters["stats"]["unique_graphs"]),
            "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"])}


def run_variant(variant, model, args):
    vocab = model.config.get_text_config().vocab_size
    gen = torch.Generator().manual_seed(args.seed + 1)

    def ids(n):
        return torch.randint(3, vocab, (args.batch, n), generator=gen).to("cuda")

    inputs = {"prefill": {t: ids(t) for t in args.prefill_sizes},
              "fill": {c: ids(c - 1) for c in args.decode_sizes},
              "token": ids(1)}
    extra = {"warnings": []}

    def report(phase, size, stats, first_s):
        median, p10, p90 = stats
        print(f"  {variant:14s} {phase:7s} {size:6d}  median {median:9.3f} ms  p10 {p10:9.3f}  "
              f"p90 {p90:9.3f}  (first call {first_s:.2f} s)", flush=True)
        return {"variant": variant, "phase": phase, "tokens_or_context": size,
                "batch": args.batch, "median_ms": median, "p10_ms": p10, "p90_ms": p90,
                "iters": args.iters, "first_call_s": first_s}

    if variant == "eager":
        records = run_dynamic(model, args, inputs, report)
        extra["warmup"] = args.warmup
    else:
        records, extra["warmup"] = run_static(variant, model, args, inputs, report)
    if variant in COMPILE_MODES:
        counts = compiler_counters()
        extra["compiler"] = counts
        print(f"  compiler: {counts}", flush=True)
        if counts["graph_breaks"]:
            extra["warnings"].append(f"{counts['graph_breaks']} graph breaks: parts of the "
                                     f"forward ran eagerly (TORCH_LOGS=graph_breaks says where)")
        if variant == "compile-graphs" and counts["cudagraph_skips"]:
            extra["warnings"].append(
                f"inductor skipped CUDA graphs {counts['cudagraph_skips']} times: these timings "
                f"are not all graph replays (the log above says why)")
    return records, extra


def child_main(args):
    """Runs one variant; writes {records, model, ...} or {error, traceback} to --child-out."""
    result = {"variant": args.child}
    status = 0
    try:
        if not torch.cuda.is_available():
            raise BaselineError("torch sees no CUDA device")
        dynamo = torch._dynamo.config
        if hasattr(dynamo, "recompile_limit"):
            dynamo.recompile_limit = RECOMPILE_LIMIT
        else:
            dynamo.cache_size_limit = RECOMPILE_LIMIT
        config = None if args.model else load_config(args.config)
        t0 = time.perf_counter()
        model, result["model"] = build_model(args, config)
        print(f"  model ready in {time.perf_counter() - t0:.1f} s: {result['model']}", flush=True)
        with torch.no_grad():
            result["records"], extra = run_variant(args.child, model, args)
        result.update(extra)
    except (Exception, SystemExit) as e:  # recorded for the parent, which carries on
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
        status = 1
    with open(args.child_out, "w") as f:
        json.dump(result, f)
    return status


# ---------------------------------------------------------------------------------------------
# The parent: floors, one child per variant, the JSON and the table.


def run_child(args, variant, out_path):
    cmd = [sys.executable, os.path.abspath(__file__), "--config", args.config,
           "--prefill", args.prefill, "--decode", args.decode, "--batch", str(args.batch),
           "--prefill-logits", args.prefill_logits,
           "--iters", str(args.iters), "--warmup", str(args.warmup), "--seed", str(args.seed),
           "--child", variant, "--child-out", out_path]
    if args.model:
        cmd += ["--model", args.model]
    t0 = time.perf_counter()
    # Its own process group, so a timeout also ends the compiler's worker processes.
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        status = proc.wait(timeout=args.variant_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"variant": variant, "error": f"timed out after {args.variant_timeout} s",
                "wall_s": time.perf_counter() - t0}
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    result = None
    if os.path.exists(out_path) and os.path.getsize(out_path) > 0:
        with open(out_path) as f:
            result = json.load(f)
    if result is None:
        how = f"killed by signal {-status}" if status < 0 else f"exited with status {status}"
        result = {"variant": variant, "error": f"the variant's process {how} without a result"}
    elif status != 0 and "error" not in result:
        result["error"] = f"the variant's process exited with status {status}"
    result["wall_s"] = time.perf_counter() - t0
    return result


def floor_table(floors, model, config, args):
    """Per-size floors from the measured rates and the model's bytes and parameters.

    Dense models: every weight byte per decode step, 2 x parameters FLOPs per token.
    Mixture-of-experts models: only what a step touches (active_weights: the routed experts
    the batch is expected to read, EXPECTED_EXPERTS) and the parameters one token multiplies
    by. Both add the KV cache at the context (kv_bytes_per_token; MLA caches its latent)."""
    floor_bytes(floors, model, config, args)
    bandwidth = floors["copy"]["GBps"] * 1e9
    flops_rate = floors["gemm"]["TFLOPs"] * 1e12
    for f in floors["decode"]:
        f["floor_ms"] = f["bytes"] / bandwidth * 1e3
    for f in floors["prefill"]:
        f["floor_ms"] = f["flops"] / flops_rate * 1e3


def floor_bytes(floors, model, config, args):
    """The bytes of each decode floor and the FLOPs of each prefill floor (no GPU needed):
    fills floors with weight_bytes, params, kv_bytes_per_token, active_weights (MoE only),
    decode [{context, batch, bytes}] and prefill [{tokens, batch, flops}]. `model` holds the
    built model's params and weight_bytes (dense models), or None for a MoE model's config
    alone."""
    kv = kv_bytes_per_token(config)
    active = active_weights(config, args.batch)
    if active is None and model is None:
        raise BaselineError("a dense model's floors need its built parameters")
    floors["weight_bytes"] = model["weight_bytes"] if model else active["all_weight_bytes"]
    floors["params"] = model["params"] if model else active["all_weight_bytes"] // 2
    floors["kv_bytes_per_token"] = kv
    step_bytes = floors["weight_bytes"]
    token_params = floors["params"]
    if active is not None:
        floors["active_weights"] = active
        step_bytes = active["weight_bytes"]
        token_params = active["params_per_token"]
    floors["decode"] = [{"context": c, "batch": args.batch,
                         "bytes": step_bytes + args.batch * c * kv} for c in args.decode_sizes]
    floors["prefill"] = [{"tokens": t, "batch": args.batch,
                          "flops": 2 * token_params * t * args.batch} for t in args.prefill_sizes]


def print_table(doc):
    floors = doc["floors"]
    floor_ms = {("decode", f["context"]): f["floor_ms"] for f in floors.get("decode", [])}
    floor_ms.update({("prefill", f["tokens"]): f["floor_ms"] for f in floors.get("prefill", [])})
    eager = {(r["phase"], r["tokens_or_context"]): r["median_ms"]
             for r in doc["records"] if r["variant"] == "eager"}
    print()
    print(f"{doc['gpu']['name']}, driver {doc['gpu']['driver']}; torch {doc['torch']}, "
          f"transformers {doc['transformers']}; batch {doc['settings']['batch']}, "
          f"{doc['settings']['iters']} timed calls each")
    print(f"floors: copy {floors['copy']['GBps']:.0f} GB/s (read + write), "
          f"bf16 GEMM {floors['gemm']['TFLOPs']:.0f} TFLOP/s")
    if "active_weights" in floors:
        print_active(floors)
    header = (f"{'variant':15s} {'phase':8s} {'T/ctx':>6s} {'median ms':>10s} {'p10':>9s} "
              f"{'p90':>9s} {'floor ms':>9s} {'% floor':>8s} {'x eager':>8s}")
    print(header)
    print("-" * len(header))
    for phase in ("prefill", "decode"):
        for r in doc["records"]:
            if r["phase"] != phase:
                continue
            key = (phase, r["tokens_or_context"])
            floor = floor_ms.get(key)
            median = r["median_ms"]
            floor_text = f"{floor:9.3f}" if floor else "-".rjust(9)
            pct = f"{100 * floor / median:7.1f}%" if floor else "-".rjust(8)
            speedup = f"{eager[key] / median:7.2f}x" if key in eager else "-".rjust(8)
            print(f"{r['variant']:15s} {phase:8s} {r['tokens_or_context']:6d} {median:10.3f} "
                  f"{r['p10_ms']:9.3f} {r['p90_ms']:9.3f} {floor_text} {pct} {speedup}")
    for variant, error in doc["errors"].items():
        print(f"FAILED {variant}: {error}")
    for warning in doc["warnings"]:
        print(f"WARNING {warning}")


def print_active(floors):
    a = floors["active_weights"]
    print(f"MoE decode floor: {a['weight_bytes'] / 1e9:.3f} GB of weights per step at batch "
          f"{a['batch']} (of {a['all_weight_bytes'] / 1e9:.3f} GB): "
          + ", ".join(f"{k} {v / 1e9:.3f}" for k, v in a["bytes"].items())
          + f"; {a['expected_distinct_experts_per_layer']:.2f} of {a['experts']} routed experts "
          f"per layer ({a['moe_layers']} MoE layers, top {a['experts_per_token']}); KV "
          f"{floors['kv_bytes_per_token']} bytes per token")
    print(f"  assumption: {a['assumption']}")
    for f in floors["decode"]:
        print(f"  decode context {f['context']:6d} batch {f['batch']}: {f['bytes'] / 1e9:.4f} GB")


def floor_only(args, config):
    """--floor-only: the bytes and FLOPs of the floors from the config alone (no GPU, no
    weights; mixture-of-experts configs only, a dense model's floors count its built
    parameters)."""
    floors = {}
    if moe_geometry(config) is None:
        fail("--floor-only needs a mixture-of-experts config (dense floors count the built model)")
    floor_bytes(floors, None, config, args)
    print_active(floors)
    for f in floors["prefill"]:
        print(f"  prefill {f['tokens']:6d} batch {f['batch']}: {f['flops'] / 1e12:.3f} TFLOP")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": shlex.join([sys.executable] + sys.argv),
                       "model": {"config": args.config, "model_type": config.model_type},
                       "floors": floors}, f, indent=2)
            f.write("\n")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="a model config JSON (models/configs/*.json)")
    ap.add_argument("--model", help="a checkpoint directory to time instead of random weights")
    ap.add_argument("--prefill", default="128,512,2048", help="prefill token counts")
    ap.add_argument("--decode", default="128,512,2048", help="decode contexts")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prefill-logits", choices=("all", "last"), default="all",
                    help="prefill logits for every token, or each sequence's last only")
    ap.add_argument("--iters", type=int, default=50, help="timed calls per figure")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls before them (>= 1)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seed", type=int, default=7, help="seed of the random weights and inputs")
    ap.add_argument("--variant-timeout", type=int, default=480,
                    help="seconds before a variant's process is killed and recorded as failed")
    ap.add_argument("--json", help="where to write the results (required)")
    ap.add_argument("--floor-only", action="store_true",
                    help="print a mixture-of-experts config's floor bytes and FLOPs and stop "
                         "(no GPU, no weights)")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.prefill_sizes = parse_sizes(args.prefill, "--prefill")
    args.decode_sizes = parse_sizes(args.decode, "--decode")
    if not args.prefill_sizes and not args.decode_sizes:
        fail("nothing to measure: --prefill and --decode are both empty")
    if any(c < 2 for c in args.decode_sizes):
        fail("--decode contexts must be at least 2 (the cache holds context - 1 tokens)")
    if args.batch < 1 or args.iters < 1 or args.warmup < 1:
        fail("--batch, --iters and --warmup must be at least 1")
    args.variant_list = [v for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variant_list if v not in VARIANTS]
    if unknown or not args.variant_list:
        fail(f"--variants {args.variants!r}: choose from {', '.join(VARIANTS)}")
    if args.child and not args.child_out:
        fail("--child needs --child-out")
    if not args.child and not args.json and not args.floor_only:
        fail("--json OUT.json is required")
    if args.model and not os.path.isdir(args.model):
        fail(f"--model {args.model}: not a directory")
    return args


def main():
    args = parse_args()
    if args.child:
        sys.exit(child_main(args))
    t_start = time.perf_counter()
    config = (transformers.AutoConfig.from_pretrained(args.model) if args.model
              else load_config(args.config))
    if args.floor_only:
        floor_only(args, config)
        return
    if not torch.cuda.is_available():
        fail("torch sees no CUDA device")
    longest = max(args.prefill_sizes + args.decode_sizes)
    if longest > config.get_text_config().max_position_embeddings:
        fail(f"size {longest} exceeds max_position_embeddings")
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable] + sys.argv),
        "gpu": gpu_info(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "model": {"config": args.config, "checkpoint": args.model,
                  "model_type": config.model_type},
        "settings": {"batch": args.batch, "iters": args.iters, "warmup": args.warmup,
                     "prefill_logits": args.prefill_logits,
                     "prefill": args.prefill_sizes, "decode": args.decode_sizes,
                     "variants": args.variant_list, "static_cache_len": longest + 1},
        "floors": {}, "records": [], "variants": {}, "errors": {}, "warnings": [],
    }
    print(f"{doc['gpu']['name']} (driver {doc['gpu']['driver']}), torch {doc['torch']}, "
          f"transformers {doc['transformers']}", flush=True)
    doc["floors"] = measure_floors(FLOOR_ITERS)
    print(f"floors: copy {doc['floors']['copy']['GBps']:.0f} GB/s (read + write, "
          f"{doc['floors']['copy']['median_ms']:.3f} ms per GiB), bf16 GEMM "
          f"{doc['floors']['gemm']['TFLOPs']:.0f} TFLOP/s", flush=True)

    with tempfile.TemporaryDirectory(prefix="torch_baselines_") as tmp:
        for variant in args.variant_list:
            print(f"== {variant}", flush=True)
            result = run_child(args, variant, os.path.join(tmp, f"{variant}.json"))
            summary = {"wall_s": round(result["wall_s"], 1)}
            for key in ("warmup", "compiler"):
                if key in result:
                    summary[key] = result[key]
            doc["variants"][variant] = summary
            if "model" in result and "params" not in doc["model"]:
                doc["model"].update(result["model"])
            if "error" in result:
                doc["errors"][variant] = result["error"]
                print(f"  FAILED after {result['wall_s']:.0f} s: {result['error']}", flush=True)
                continue
            doc["records"].extend(result["records"])
            doc["warnings"].extend(f"{variant}: {w}" for w in result.get("warnings", []))
            print(f"  done in {result['wall_s']:.0f} s", flush=True)

    if "params" in doc["model"]:
        floor_table(doc["floors"], doc["model"], config, args)
    else:
        doc["warnings"].append("no variant built the model: per-size floors are missing")
    doc["total_s"] = round(time.perf_counter() - t_start, 1)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print_table(doc)
    print(f"wrote {args.json} in {doc['total_s']:.0f} s")
    if not doc["records"]:
        fail("every variant failed")


if __name__ == "__main__":
    main()
