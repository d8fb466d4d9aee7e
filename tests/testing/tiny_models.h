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
// All: 2 layers, hidden 32, intermediate 48, 4 query heads, vocab 61, bf16.
models::ModelConfig TinyModelConfig(models::Architecture arch);

std::vector<models::Architecture> AllArchitectures();

// Lowers `config` and writes DIR/model.safetensors with RandomWeights(graph, seed); a
// lowering error is returned, a write failure fails the current test.
absl::Status WriteRandomCheckpoint(const models::ModelConfig& config,
                                   const std::filesystem::path& dir, uint32_t seed);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_TINY_MODELS_H_
