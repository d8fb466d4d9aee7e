#include "tests/testing/tiny_models.h"

#include "base/status_macros.h"
#include "models/lowering.h"
#include "tests/testing/random_weights.h"

namespace tileplan::testing {

models::ModelConfig TinyModelConfig(models::Architecture arch) {
  models::ModelConfig c;
  c.arch = arch;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 61;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope.theta = 10000.0;
  c.sliding_window = {0, 0};
  c.dtype = ir::DType::kBF16;
  switch (arch) {
    case models::Architecture::kLlama:
      c.rope.type = "llama3";
      c.rope.factor = 8.0;
      c.rope.low_freq_factor = 1.0;
      c.rope.high_freq_factor = 4.0;
      c.rope.original_max_position_embeddings = 16;
      c.qkv_bias = true;
      c.o_bias = true;
      c.mlp_bias = true;
      c.tie_word_embeddings = true;
      break;
    case models::Architecture::kQwen2:
      c.qkv_bias = true;
      c.rope.theta = 1000000.0;
      break;
    case models::Architecture::kQwen3:
      c.qk_norm = true;
      c.head_dim = 16;
      c.num_kv_heads = 1;
      c.tie_word_embeddings = true;
      break;
    case models::Architecture::kMistral:
      c.sliding_window = {3, 3};
      break;
    case models::Architecture::kPhi3:
      c.fused_qkv = true;
      c.num_kv_heads = 4;
      c.sliding_window = {0, 5};
      break;
  }
  return c;
}

std::vector<models::Architecture> AllArchitectures() {
  return {models::Architecture::kLlama, models::Architecture::kQwen2, models::Architecture::kQwen3,
          models::Architecture::kMistral, models::Architecture::kPhi3};
}

absl::Status WriteRandomCheckpoint(const models::ModelConfig& config,
                                   const std::filesystem::path& dir, uint32_t seed) {
  TP_ASSIGN_OR_RETURN(ir::Graph graph, models::LowerModel(config));
  WriteWeights(dir / "model.safetensors", RandomWeights(graph, seed));
  return absl::OkStatus();
}

}  // namespace tileplan::testing
