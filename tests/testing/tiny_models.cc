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
    case models::Architecture::kDeepseekV2:
      c.is_mla = true;
      c.num_kv_heads = 4;
      c.mla = {.q_lora_rank = 0,
               .kv_lora_rank = 12,
               .qk_nope_head_dim = 6,
               .qk_rope_head_dim = 4,
               .v_head_dim = 5};
      c.head_dim = 4;
      c.rope = {.type = "yarn",
                .theta = 10000.0,
                .factor = 4.0,
                .original_max_position_embeddings = 8,
                .attention_factor = 1.1,
                .mscale_all_dim = 0.8,
                .interleaved = true};
      c.attention_scale = 0.35;
      c.moe = {.num_experts = 6,
               .top_k = 2,
               .moe_intermediate_size = 8,
               .shared_intermediate_size = 16,
               .routed_scaling_factor = 1.5,
               .num_groups = 3,
               .topk_groups = 2,
               .sparse_layers = {false, true}};
      break;
    case models::Architecture::kQwen3Moe:
      c.qk_norm = true;
      c.head_dim = 16;
      c.num_kv_heads = 2;
      c.moe = {.num_experts = 5,
               .top_k = 3,
               .moe_intermediate_size = 12,
               .norm_topk_prob = true,
               .rounded_logits = true,
               .sparse_layers = {true, true}};
      break;
  }
  return c;
}

std::vector<models::Architecture> MoeArchitectures() {
  return {models::Architecture::kDeepseekV2, models::Architecture::kQwen3Moe};
}

std::vector<models::Architecture> AllArchitectures() {
  return {models::Architecture::kLlama, models::Architecture::kQwen2, models::Architecture::kQwen3,
          models::Architecture::kMistral, models::Architecture::kPhi3};
}

std::vector<models::Architecture> EveryArchitecture() {
  std::vector<models::Architecture> all = AllArchitectures();
  for (models::Architecture arch : MoeArchitectures()) all.push_back(arch);
  return all;
}

absl::Status WriteRandomCheckpoint(const models::ModelConfig& config,
                                   const std::filesystem::path& dir, uint32_t seed) {
  TP_ASSIGN_OR_RETURN(ir::Graph graph, models::LowerModel(config));
  WriteWeights(dir / "model.safetensors", RandomWeights(graph, seed));
  return absl::OkStatus();
}

}  // namespace tileplan::testing
