#!/usr/bin/env python3
"""Builds the parity fixtures under tests/data/ (format: docs/fixtures.md).

Each fixture is a tiny, randomly initialised (seeded) Hugging Face checkpoint of one
supported architecture plus reference.safetensors holding what transformers computes for
it. The reference is computed from the checkpoint *as reloaded from disk* (weights upcast
to float32, eager attention), so it describes exactly the files that are shipped.

Run where torch and transformers are installed (the GPU machine; a CPU is enough):
    python3 tools/reference/make_fixtures.py --out tests/data
"""

import argparse
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file

PROMPT_LEN = 24
GREEDY_TOKENS = 16

# Small geometries that still exercise every feature of each architecture: GQA/MQA, an
# explicit head_dim different from hidden/heads, biases, QK-norm, llama3 RoPE bands, sliding
# windows shorter than the prompt, fused projections, tied embeddings, and both config
# layouts (transformers 5 `rope_parameters` and the long-standing top-level `rope_theta`).
COMMON = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)

FIXTURES = {
    "llama-tiny": dict(
        cls="LlamaConfig", hub_layout=False,
        kw=dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0,
                                     low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=32))),
    "smollm2-tiny": dict(
        cls="LlamaConfig", hub_layout=True,
        kw=dict(num_key_value_heads=1, tie_word_embeddings=True,
                rope_parameters=dict(rope_type="default", rope_theta=100000.0))),
    "qwen2-tiny": dict(
        cls="Qwen2Config", hub_layout=False,
        kw=dict(tie_word_embeddings=True,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "qwen2-swa-tiny": dict(
        cls="Qwen2Config", hub_layout=True,
        kw=dict(tie_word_embeddings=False, use_sliding_window=True, sliding_window=6,
                max_window_layers=1,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    "qwen3-tiny": dict(
        cls="Qwen3Config", hub_layout=False,
        kw=dict(head_dim=32, tie_word_embeddings=True,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "mistral-tiny": dict(
        cls="MistralConfig", hub_layout=True,
        kw=dict(head_dim=16, sliding_window=8, tie_word_embeddings=False,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    "phi3-tiny": dict(
        cls="Phi3Config", hub_layout=False,
        kw=dict(num_key_value_heads=4, sliding_window=12, tie_word_embeddings=False,
                pad_token_id=0,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
}


# (linear gain, embedding std) pairs tried in order until greedy decoding is lively: with
# tied embeddings a weak residual branch makes the model predict its own input token.
INIT_CANDIDATES = [(1.5, 1.0), (2.5, 0.5), (4.0, 0.25), (6.0, 0.1)]


def init_weights(model, gen, gain, embed_std):
    """Non-trivial weights: layers must mix, or greedy decoding repeats one token.

    Draws on the generator's device: a CPU generator (the committed fixtures) gives exactly
    the values it always gave; a CUDA generator initialises a real-size model in place on
    the GPU (tools/reference/make_random_model.py)."""
    def randn(shape):
        return torch.randn(shape, generator=gen, device=gen.device)

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.15 * randn(p.shape))
            elif p.dim() == 1:  # biases
                p.copy_(0.2 * randn(p.shape))
            elif "embed_tokens" in name:
                p.copy_(embed_std * randn(p.shape))
            else:
                fan_in = p.shape[1]
                p.copy_(gain * randn(p.shape) / fan_in ** 0.5)


def lively(tokens):
    """At least 10 distinct tokens and no token three times in a row."""
    runs = any(tokens[i] == tokens[i + 1] == tokens[i + 2] for i in range(len(tokens) - 2))
    return len(set(tokens)) >= 10 and not runs


def to_hub_layout(path):
    """Rewrites config.json into the long-standing hub layout."""
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    rope_type = rope.pop("rope_type")
    cfg["rope_scaling"] = None if rope_type == "default" else dict(rope_type=rope_type, **rope)
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    cfg.pop("layer_types", None)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


@torch.no_grad()
def reference(model_dir, prompt, greedy_tokens=GREEDY_TOKENS, device="cpu"):
    """Float32 logits [T, V] (on the CPU) for `prompt`, its greedy continuation, and the
    float32 logits [G - 1, V] of the decode steps (row j: after feeding greedy token j, the
    row whose argmax is greedy token j + 1), from the checkpoint in `model_dir` as stored
    (upcast), eager attention, run on `device`."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    model.to(device)
    model.eval()
    ids = torch.tensor([prompt], device=device)
    out = model(input_ids=ids, use_cache=True)
    logits = out.logits[0].float().contiguous()
    cache = out.past_key_values
    greedy, steps = [], []
    nxt = int(torch.argmax(logits[-1]))
    for k in range(greedy_tokens):
        greedy.append(nxt)
        if k + 1 == greedy_tokens:
            break
        step = model(input_ids=torch.tensor([[nxt]], device=device), past_key_values=cache,
                     use_cache=True)
        cache = step.past_key_values
        steps.append(step.logits[0, -1].float())
        nxt = int(torch.argmax(step.logits[0, -1]))
    return logits.cpu(), greedy, torch.stack(steps).cpu().contiguous()


@torch.no_grad()
def bf16_spread(model_dir, prompt, greedy, logits, greedy_logits, device="cpu"):
    """How far transformers itself lands from the float32 reference when it runs the same
    checkpoint in bfloat16 (eager attention, on `device`): the largest absolute logit
    difference over the largest reference magnitude, for the prompt and for the decode steps
    fed the reference's greedy tokens. float32 [2]: the yardstick of bf16 backends."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, attn_implementation="eager")
    model.to(device)
    model.eval()
    out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
    ours = out.logits[0].float().cpu()
    cache = out.past_key_values
    steps = []
    for token in greedy[:-1]:
        step = model(input_ids=torch.tensor([[token]], device=device), past_key_values=cache,
                     use_cache=True)
        cache = step.past_key_values
        steps.append(step.logits[0, -1].float().cpu())
    steps = torch.stack(steps)

    def relative(a, b):
        return float((a - b).abs().max() / b.abs().max())

    return torch.tensor([relative(ours, logits), relative(steps, greedy_logits)],
                        dtype=torch.float32)


def make(name, spec, out_root, seed):
    for gain, embed_std in INIT_CANDIDATES:
        result = make_once(name, spec, out_root, seed, gain, embed_std)
        if lively(result["greedy"]):
            return result
    raise SystemExit(f"{name}: no initialisation gave a lively greedy continuation")


def make_once(name, spec, out_root, seed, gain, embed_std):
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    kw = dict(COMMON)
    kw.update(spec["kw"])
    config = getattr(transformers, spec["cls"])(**kw)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    init_weights(model, gen, gain, embed_std)
    model.to(torch.bfloat16).save_pretrained(out)
    for extra in ("generation_config.json",):
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)
    if spec["hub_layout"]:
        to_hub_layout(os.path.join(out, "config.json"))
    prompt = torch.randint(3, kw["vocab_size"], (PROMPT_LEN,), generator=gen).tolist()
    logits, greedy, greedy_logits = reference(out, prompt)
    spread = bf16_spread(out, prompt, greedy, logits, greedy_logits)
    save_file({
        "input_ids": torch.tensor(prompt, dtype=torch.int32),
        "logits": logits,
        "greedy_tokens": torch.tensor(greedy, dtype=torch.int32),
        "greedy_logits": greedy_logits,
        "bf16_relative": spread,
    }, os.path.join(out, "reference.safetensors"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    distinct = len(set(greedy))
    print(f"{name:14s} gain={gain} embed_std={embed_std} {size / 1024:7.1f} KiB "
          f"greedy={greedy} distinct={distinct} bf16_relative={spread.tolist()}")
    return dict(seed=seed, prompt_len=PROMPT_LEN, greedy_tokens=GREEDY_TOKENS, gain=gain,
                embed_std=embed_std, architecture=spec["cls"], hub_layout=spec["hub_layout"],
                greedy=greedy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", help="fixture names (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    manifest = {"transformers": transformers.__version__, "torch": torch.__version__,
                "fixtures": {}}
    for i, (name, spec) in enumerate(sorted(FIXTURES.items())):
        if args.only and name not in args.only:
            continue
        manifest["fixtures"][name] = make(name, spec, args.out, seed=1000 + i)
    with open(os.path.join(args.out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
