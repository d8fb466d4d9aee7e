// Tiny model configs for tests, one per architecture, each exercising that architecture's
// features (biases, QK-norm, fused projections, sliding windows shorter than test prompts,
// llama3 RoPE, tied embeddings, GQA), and a helper writing a random checkpoint for them.
#ifndef TILEPLAN_TESTS_TESTING_TINY_MODELS_H_
#define TILEPLAN_TESTS_TESTING_TINY_MODELS_H_

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/status/status.h"
#include "models/config.h"

namespace tileplan::testing {

// llama: llama3 RoPE, q/k/v/o and MLP biases, tied embeddings. qwen2: q/k/v biases.
// qwen3: QK-norm, head_dim 16 != hidden / heads, one KV head, tied embeddings. mistral:
// window 3 on both layers. phi3: fused projections, no GQA, window 5 on layer 1 only.
// deepseek_v2: MLA (latent 12, nope 6, rope 4, v 5, plain q_proj), interleaved yarn RoPE with
// attention_factor != 1, layer 0 dense, layer 1 six experts in three groups (two kept), top 2,
// scaling 1.5, shared experts. qwen3_moe: QK-norm, five experts, top 3 renormalised, both
// layers sparse.
// All: 2 layers, hidden 32, intermediate 48, 4 query heads, vocab 61, bf16.
models::ModelConfig TinyModelConfig(models::Architecture arch);

// The dense architectures (llama, qwen2, qwen3, mistral, phi3).
std::vector<models::Architecture> AllArchitectures();
// deepseek_v2 and qwen3_moe.
std::vector<models::Architecture> MoeArchitectures();
// Both lists: every architecture.
std::vector<models::Architecture> EveryArchitecture();

// Lowers `config` and writes DIR/model.safetensors with RandomWeights(graph, seed); a
// lowering error is returned, a write failure fails the current test.
absl::Status WriteRandomCheckpoint(const models::ModelConfig& config,
                                   const std::filesystem::path& dir, uint32_t seed);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_TINY_MODELS_H_
