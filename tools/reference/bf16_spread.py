#!/usr/bin/env python3
"""How far transformers itself lands from each fixture's float32 reference when it runs in
bfloat16: the yardstick for the bf16 thresholds of verify_model --backend gpu
(docs/fixtures.md).

For each fixture directory: the checkpoint run by transformers in bf16 on the GPU (eager
attention), its prompt logits compared with reference.safetensors (largest absolute
difference over the largest reference magnitude, argmax agreement) and its greedy
continuation compared token for token.

    python3 tools/reference/bf16_spread.py tests/data/*/
"""

import sys

import torch
import transformers
from safetensors.torch import load_file


@torch.no_grad()
def spread(model_dir):
    ref = load_file(f"{model_dir}/reference.safetensors")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()
    ids = ref["input_ids"].long().cuda()[None]
    out = model(input_ids=ids, use_cache=True)
    logits = out.logits[0].float().cpu()
    want = ref["logits"]
    relative = float((logits - want).abs().max() / want.abs().max())
    agree = int((logits.argmax(-1) == want.argmax(-1)).sum())
    cache = out.past_key_values
    greedy, nxt = [], int(logits[-1].argmax())
    for _ in range(len(ref["greedy_tokens"])):
        greedy.append(nxt)
        step = model(input_ids=torch.tensor([[nxt]], device="cuda"), past_key_values=cache,
                     use_cache=True)
        cache = step.past_key_values
        nxt = int(step.logits[0, -1].argmax())
    want_greedy = ref["greedy_tokens"].tolist()
    first = next((k for k, (a, b) in enumerate(zip(greedy, want_greedy)) if a != b), None)
    return relative, agree, len(want), first


def main():
    print(f"{'fixture':40s} {'relative':>9s} {'argmax':>8s} greedy")
    for model_dir in sys.argv[1:]:
        relative, agree, n, first = spread(model_dir.rstrip("/"))
        greedy = "match" if first is None else f"first mismatch at token {first}"
        print(f"{model_dir:40s} {relative:9.4f} {agree:3d}/{n:<4d} {greedy}")


if __name__ == "__main__":
    main()
