// Strict parsing of Hugging Face config.json for the decoder architectures tileplan plans.
//
// Supported model_type values: "llama" (also SmolLM2), "qwen2" (QKV bias), "qwen3"
// (QK-norm), "mistral" (sliding window), "phi3" (fused qkv_proj / gate_up_proj). Both the
// transformers-5 layout (`rope_parameters`, `dtype`) and the long-standing hub layout
// (`rope_theta`, `rope_scaling`, `torch_dtype`) are read.
//
// Strict means: a field that changes the computation and that tileplan does not implement
// (MoE fields, partial rotary, quantization_config, an unknown RoPE type or activation,
// attention/MLP biases where the architecture has none, ...) is refused with an
// InvalidArgument error naming the field. Known metadata fields (token ids, architectures,
// transformers_version, initializer_range, ...) are accepted and listed in
// `ignored_fields`; an unknown field is refused, naming it.
#ifndef TILEPLAN_MODELS_CONFIG_H_
#define TILEPLAN_MODELS_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "regions/ir.h"

namespace tileplan::models {

enum class Architecture { kLlama, kQwen2, kQwen3, kMistral, kPhi3 };
absl::string_view ArchitectureName(Architecture arch);  // the model_type string

struct RopeConfig {
  std::string type = "default";  // "default" or "llama3"
  double theta = 10000.0;
  // llama3 only:
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // defaults to num_heads when absent
  int64_t head_dim = 0;      // defaults to hidden_size / num_heads when absent or null
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;   // q_proj/k_proj/v_proj have biases (qwen2; llama attention_bias)
  bool o_bias = false;     // o_proj has a bias (llama attention_bias)
  bool mlp_bias = false;   // gate/up/down have biases (llama mlp_bias)
  bool qk_norm = false;    // per-head RMSNorm on q and k before RoPE (qwen3)
  bool fused_qkv = false;  // phi3: self_attn.qkv_proj, mlp.gate_up_proj
  // Per layer: attention window in tokens (a query at position p sees keys in
  // (p - window, p]), or 0 for full causal attention. Size num_layers.
  std::vector<int64_t> sliding_window;
  ir::DType dtype = ir::DType::kBF16;  // the checkpoint's dtype (torch_dtype / dtype)
  std::vector<std::string> ignored_fields;  // sorted metadata keys that were accepted
};

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);
// Reads DIR/config.json (or the file itself when given a file).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path);

// Bundled public geometries, embedded in the binary: "qwen3-0.6b", "qwen2-7b",
// "qwen2.5-0.5b", "llama-3.2-1b", "smollm2-360m", "phi-3-mini-4k", "mistral-7b".
std::vector<std::string> BundledConfigNames();
absl::StatusOr<std::string> BundledConfigJson(absl::string_view name);
absl::StatusOr<ModelConfig> BundledModelConfig(absl::string_view name);

}  // namespace tileplan::models

#endif  // TILEPLAN_MODELS_CONFIG_H_
