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
//
// Absent fields take the defaults of the transformers config class of the model_type (see the
// field comments below); rms_norm_eps, max_position_embeddings and the sizes are required.
// Sliding windows: mistral and phi3 apply `sliding_window` to every layer (mistral's default is
// 4096 when the field is absent, phi3 has none); qwen2/qwen3 apply it only when
// `use_sliding_window` is true, to layers i >= `max_window_layers` (default 28); a
// `layer_types` list decides per layer for qwen2/qwen3 and must agree with the rule above for
// the others, which do not read it.
#ifndef TILEPLAN_MODELS_CONFIG_H_
#define TILEPLAN_MODELS_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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
  // num_key_value_heads; null means num_heads, and so does an absent field for llama and phi3
  // (qwen2/qwen3 classes default to 32, mistral to 8).
  int64_t num_kv_heads = 0;
  // head_dim; hidden_size / num_heads when absent or null (qwen3: 128 when absent, as its
  // class default; null refused).
  int64_t head_dim = 0;
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
  // The checkpoint's dtype (`dtype`, or `torch_dtype` in the hub layout): bfloat16, float16 or
  // float32. float32 when the config names none, which is what transformers loads then.
  ir::DType dtype = ir::DType::kF32;
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
