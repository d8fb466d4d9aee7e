#!/usr/bin/env python3
"""Builds a real-size, randomly initialised (seeded) checkpoint and its parity reference.

From one of the bundled configs (models/configs/*.json) this writes, into --out:
  config.json, model.safetensors   the checkpoint, bf16 (save_pretrained; no generation_config)
  reference.safetensors            input_ids int32 [P], logits float32 [P, V], greedy_tokens
                                   int32 [G] -- exactly the fixture format of docs/fixtures.md

Weights are drawn like the committed fixtures (make_fixtures.init_weights: norms near 1,
linear weights with a gain over 1/sqrt(fan_in)); the gain is raised until the greedy
continuation is lively (make_fixtures.lively). The reference is computed from the checkpoint
as reloaded from disk, upcast to float32, eager attention, on --device with TF32 disabled.
Tied embeddings follow the config (Qwen3-0.6B ties lm_head to embed_tokens).

Run where torch and transformers are installed (the GPU machine):
    python3 tools/reference/make_random_model.py --config models/configs/qwen3-0.6b.json \\
        --out /tmp/qwen3-0.6b-random
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402  (shares the fixture recipe: init_weights, lively, reference)

# Files this script writes into --out (and the only ones it will replace there).
OWN_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json",
             "reference.safetensors", "generation_config.json")


def fail(msg):
    """Exits with status 1 and `msg` on stderr (SystemExit carries the message)."""
    raise SystemExit(f"error: {msg}")


def load_config(config_path):
    """A transformers config from one JSON file (hub layout or transformers 5 layout).

    AutoConfig reads a directory holding config.json, so the file is staged as one."""
    if not os.path.isfile(config_path):
        fail(f"--config {config_path}: no such file")
    with tempfile.TemporaryDirectory() as d:
        shutil.copyfile(config_path, os.path.join(d, "config.json"))
        return transformers.AutoConfig.from_pretrained(d)


def check_tied(model, config):
    """The model ties lm_head to the embeddings exactly when the config says so."""
    want = bool(getattr(config.get_text_config(), "tie_word_embeddings", False))
    out_emb = model.get_output_embeddings()
    if out_emb is None:
        fail(f"{type(model).__name__} has no output embeddings")
    tied = out_emb.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if tied != want:
        fail(f"tie_word_embeddings={want} in the config but lm_head is "
             f"{'tied' if tied else 'untied'} in the built model")
    return tied


def disable_tf32():
    """Full float32 matmuls: the reference must not carry TF32 rounding (~1e-3 relative).

    Sets the flags, then proves it: a float32 GEMM must match float64 to IEEE accuracy."""
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except (AttributeError, RuntimeError):  # a torch that kept only the fp32_precision API
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(512, 512, device="cuda", generator=gen)
    b = torch.randn(512, 512, device="cuda", generator=gen)
    exact = a.double() @ b.double()
    rel = float(((a @ b).double() - exact).abs().max() / exact.abs().max())
    # IEEE float32 lands near 1e-7 here; TF32 (10-bit mantissa) near 1e-4.
    if rel > 1e-5:
        fail(f"float32 matmul still rounds like TF32 (relative error {rel:.2e}) after disabling "
             f"TF32; the reference would not be float32")
    print(f"TF32 off: float32 GEMM relative error vs float64 {rel:.1e}")


def prepare_out(out):
    """Creates --out, or clears this script's own files from it; refuses anything else there."""
    os.makedirs(out, exist_ok=True)
    foreign = [f for f in os.listdir(out)
               if f not in OWN_FILES and not (f.startswith("model-") and f.endswith(".safetensors"))]
    if foreign:
        fail(f"--out {out} holds files this script did not write ({', '.join(sorted(foreign)[:5])}); "
             f"use an empty or new directory")
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))


def with_layers(config, layers):
    """`config` cut to its first `layers` decoder layers (the real widths, fewer layers: a
    parity reference at real geometry that fits the disk). Per-layer lists are cut too."""
    text = config.get_text_config()
    if layers > text.num_hidden_layers:
        fail(f"--layers {layers} exceeds the config's {text.num_hidden_layers} layers")
    text.num_hidden_layers = layers
    if getattr(text, "layer_types", None):
        text.layer_types = list(text.layer_types)[:layers]
    if getattr(text, "mlp_only_layers", None):
        text.mlp_only_layers = [i for i in text.mlp_only_layers if i < layers]
    return config


def build_and_save(config, out, seed, gain, embed_std, device, router_gain=None,
                   dtype=torch.bfloat16):
    """Random weights on `device`, saved to `out` in `dtype`. Returns (parameter count, tied)."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.to(device)  # a no-op where from_config already built on the device
    tied = check_tied(model, config)
    gen = torch.Generator(device=device).manual_seed(seed)
    make_fixtures.init_weights(model, gen, gain, embed_std, router_gain)
    params = sum(p.numel() for p in model.parameters())  # a tied matrix counts once
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_init = time.perf_counter() - t0
    model.to(dtype)
    model.save_pretrained(out)
    gen_cfg = os.path.join(out, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    t_total = time.perf_counter() - t0
    print(f"  built and initialised on {device} in {t_init:.1f} s, saved in {t_total - t_init:.1f} s")
    return params, tied


def dir_bytes(out, names):
    return sum(os.path.getsize(os.path.join(out, f)) for f in names)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="a model config JSON (models/configs/*.json)")
    ap.add_argument("--out", required=True, help="directory for the checkpoint and reference")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--greedy-tokens", type=int, default=16)
    ap.add_argument("--device", default="cuda", help="where to build and run the reference")
    ap.add_argument("--layers", type=int, default=0,
                    help="keep only the first N decoder layers (0: all), real widths")
    ap.add_argument("--router-gain", type=float, default=None,
                    help="gain of MoE router weights (default: the linear gain)")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                    help="the checkpoint's dtype (float32: a backend's kernels checked without "
                         "bf16 rounding)")
    args = ap.parse_args()
    if args.prompt_len < 1:
        fail("--prompt-len must be positive")
    if args.greedy_tokens < 10:
        fail("--greedy-tokens must be at least 10: a lively continuation has 10 distinct tokens")

    t_start = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            fail("--device cuda but torch sees no CUDA device (use --device cpu to run slowly)")
        disable_tf32()
    config = load_config(args.config)
    if args.layers < 0:
        fail("--layers must be >= 0")
    if args.layers:
        config = with_layers(config, args.layers)
    vocab = config.get_text_config().vocab_size
    if args.prompt_len + args.greedy_tokens > config.get_text_config().max_position_embeddings:
        fail("--prompt-len + --greedy-tokens exceeds max_position_embeddings")
    prepare_out(args.out)
    print(f"{args.config}: {config.model_type}, vocab {vocab}; transformers "
          f"{transformers.__version__}, torch {torch.__version__}")

    prompt_gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(3, vocab, (args.prompt_len,), generator=prompt_gen).tolist()

    for gain, embed_std in make_fixtures.INIT_CANDIDATES:
        print(f"gain={gain} embed_std={embed_std}:")
        prepare_out(args.out)
        params, tied = build_and_save(config, args.out, args.seed, gain, embed_std, device,
                                      args.router_gain, getattr(torch, args.dtype))
        t0 = time.perf_counter()
        logits, greedy, greedy_logits = make_fixtures.reference(args.out, prompt,
                                                                args.greedy_tokens, device)
        print(f"  reference (reload, float32 eager, {args.prompt_len} + {args.greedy_tokens} "
              f"tokens) in {time.perf_counter() - t0:.1f} s; greedy={greedy}")
        if not torch.isfinite(logits).all():
            fail("the reference logits hold NaN or Inf")
        if make_fixtures.lively(greedy):
            break
        print("  not lively (needs >= 10 distinct tokens and no token three times in a row)")
    else:
        fail("no initialisation gave a lively greedy continuation")

    if tuple(logits.shape) != (args.prompt_len, vocab):
        fail(f"reference logits have shape {tuple(logits.shape)}, expected "
             f"({args.prompt_len}, {vocab})")
    t0 = time.perf_counter()
    spread = make_fixtures.bf16_spread(args.out, prompt, greedy, logits, greedy_logits, device)
    print(f"  transformers in bf16 lands at relative {spread.tolist()} (prompt, decode) in "
          f"{time.perf_counter() - t0:.1f} s")
    save_file({
        "input_ids": torch.tensor(prompt, dtype=torch.int32),
        "logits": logits.float().contiguous(),
        "greedy_tokens": torch.tensor(greedy, dtype=torch.int32),
        "greedy_logits": greedy_logits.float().contiguous(),
        "bf16_relative": spread,
    }, os.path.join(args.out, "reference.safetensors"))

    files = sorted(os.listdir(args.out))
    weights = [f for f in files if f.endswith(".safetensors") and f != "reference.safetensors"]
    if "config.json" not in files or not weights:
        fail(f"save_pretrained wrote {files}: expected config.json and model weights")
    print(f"wrote {args.out}: {', '.join(files)}")
    print(f"  {params / 1e6:.1f} M parameters ({'tied' if tied else 'untied'} embeddings), "
          f"weights {dir_bytes(args.out, weights) / 2**20:.1f} MiB, reference "
          f"{dir_bytes(args.out, ['reference.safetensors']) / 2**20:.1f} MiB")
    print(f"  seed {args.seed}, gain {gain}, embed_std {embed_std}, prompt {args.prompt_len}, "
          f"greedy {args.greedy_tokens} ({len(set(greedy))} distinct)")
    print(f"total {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
