// Strict parsing of Hugging Face config.json for the decoder architectures tileplan plans.
//
// Supported model_type values: "llama" (also SmolLM2), "qwen2" (QKV bias), "qwen3"
// (QK-norm), "mistral" (sliding window), "phi3" (fused qkv_proj / gate_up_proj),
// "deepseek_v2" (multi-head latent attention, routed + shared experts, YaRN RoPE) and
// "qwen3_moe" (qwen3 attention, routed experts). Both the
// transformers-5 layout (`rope_parameters`, `dtype`) and the long-standing hub layout
// (`rope_theta`, `rope_scaling`, `torch_dtype`) are read.
//
// Strict means: a field that changes the computation and that tileplan does not implement
// (MoE and MLA fields outside the MoE architectures, partial rotary, quantization_config, an
// unknown RoPE type or activation, attention/MLP biases where the architecture has none, ...)
// is refused with an InvalidArgument error naming the field. Known metadata fields (token ids,
// architectures, transformers_version, initializer_range, training-only MoE settings such as
// router_aux_loss_coef, ...) are accepted and listed in `ignored_fields`; an unknown field is
// refused, naming it.
//
// Absent fields take the defaults of the transformers config class of the model_type (see the
// field comments below); rms_norm_eps, max_position_embeddings and the sizes are required, and
// so is num_experts_per_tok for deepseek_v2.
// Sliding windows: mistral and phi3 apply `sliding_window` to every layer (mistral's default is
// 4096 when the field is absent, phi3 has none); qwen2/qwen3 apply it only when
// `use_sliding_window` is true, to layers i >= `max_window_layers` (default 28); qwen3_moe
// applies it to every layer when `use_sliding_window` is true (default 4096; it does not read
// max_window_layers); llama and deepseek_v2 have none. A `layer_types` list decides per layer
// for qwen2/qwen3 and must agree with the rule above for the others, which do not read it.
//
// RoPE type "yarn" (rope_type, or the legacy key `type`) is accepted for qwen2, qwen3,
// deepseek_v2 and qwen3_moe, whose checkpoints ship it; a top-level
// `original_max_position_embeddings` takes priority over the RoPE object's, as in transformers.
// deepseek_v2 refuses what transformers 5 ignores or tileplan does not implement, naming the
// field: norm_topk_prob true (transformers' router does not renormalise, so its meaning is
// ambiguous), attention or MLP biases, num_key_value_heads != num_attention_heads, MTP layers
// (num_nextn_predict_layers > 0), ep_size != 1, moe_layer_freq != 1, scoring_func other than
// "softmax", topk_method other than "greedy" and "group_limited_greedy", and a head_dim other
// than qk_rope_head_dim. qwen3_moe refuses a shared expert (shared_expert_intermediate_size > 0,
// which is qwen2_moe).
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

enum class Architecture { kLlama, kQwen2, kQwen3, kMistral, kPhi3, kDeepseekV2, kQwen3Moe };
absl::string_view ArchitectureName(Architecture arch);  // the model_type string

struct RopeConfig {
  std::string type = "default";  // "default", "llama3" or "yarn" (see the top of the file)
  double theta = 10000.0;
  // llama3 and yarn:
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // yarn only (transformers' _compute_yarn_parameters): the correction range bounds
  // (beta_fast, beta_slow; 32 and 1 when absent, null or 0), whether the range is truncated to
  // whole dims (`truncate`, default true), and the factor applied to cos and sin:
  // `attention_factor` when given, else mscale(factor, mscale) / mscale(factor,
  // mscale_all_dim) when both are given and non-zero, else mscale(factor, 1), where
  // mscale(s, m) = 1 for s <= 1 and 0.1 * m * ln(s) + 1 otherwise.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 1.0;
  // yarn's `mscale_all_dim` (0 when absent): deepseek_v2 multiplies its softmax scale by
  // mscale(factor, mscale_all_dim)^2 (ModelConfig::attention_scale).
  double mscale_all_dim = 0.0;
  // Rotate interleaved pairs (x[2i], x[2i+1]) instead of halves (x[i], x[i + D/2]):
  // deepseek_v2's complex-number RoPE.
  bool interleaved = false;
};

// Multi-head latent attention (deepseek_v2). Per head, queries are
// [qk_nope_head_dim | qk_rope_head_dim] wide; keys and values are up-projected from a
// kv_lora_rank-wide latent (kv_a_proj_with_mqa, then kv_a_layernorm), which with the
// rotated qk_rope_head_dim-wide key shared by all heads is all the cache holds.
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0 (null): a plain q_proj; else q_a_proj, q_a_layernorm, q_b_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// Routed experts (deepseek_v2, qwen3_moe). Per token: the router's logits (float32) over
// num_experts, softmax, the top_k experts (deepseek_v2 `group_limited_greedy`: only within the
// topk_groups best of num_groups equal groups of experts, a group scored by its best expert),
// their probabilities renormalised to sum 1 when norm_topk_prob, times routed_scaling_factor;
// the output is the weighted sum of the selected experts' SwiGLU MLPs (width
// moe_intermediate_size), plus, unweighted, the shared experts' MLP (width
// shared_intermediate_size; 0 = none).
struct MoeConfig {
  int64_t num_experts = 0;  // 0: no MoE layers
  int64_t top_k = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_intermediate_size = 0;  // deepseek_v2: n_shared_experts * moe_intermediate_size
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int64_t num_groups = 1;   // n_group (1: plain greedy top-k)
  int64_t topk_groups = 1;  // topk_group
  // Whether the router's logits, and so the routing weights, are rounded to the activation
  // dtype (qwen3_moe: its router is a linear in that dtype) instead of kept in float32
  // (deepseek_v2 casts input and weight to float32).
  bool rounded_logits = false;
  // Per layer: whether its MLP is the routed experts (else a dense MLP of intermediate_size).
  // deepseek_v2: layers >= first_k_dense_replace; qwen3_moe: (L + 1) % decoder_sparse_step == 0
  // and L not in mlp_only_layers. Size num_layers, or empty: no MoE layers.
  std::vector<bool> sparse_layers;
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  // num_key_value_heads; null means num_heads, and so does an absent field for llama, phi3 and
  // deepseek_v2 (qwen2/qwen3 classes default to 32, mistral to 8, qwen3_moe to 4).
  int64_t num_kv_heads = 0;
  // head_dim; hidden_size / num_heads when absent or null (qwen3: 128 when absent, as its
  // class default; null refused; deepseek_v2: qk_rope_head_dim, see is_mla).
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  // q_proj/k_proj/v_proj have biases (qwen2; llama and qwen3_moe attention_bias)
  bool qkv_bias = false;
  bool o_bias = false;     // o_proj has a bias (llama and qwen3_moe attention_bias)
  bool mlp_bias = false;   // gate/up/down have biases (llama mlp_bias)
  bool qk_norm = false;    // per-head RMSNorm on q and k before RoPE (qwen3, qwen3_moe)
  bool fused_qkv = false;  // phi3: self_attn.qkv_proj, mlp.gate_up_proj
  // deepseek_v2: attention is multi-head latent attention (`mla` holds its geometry; head_dim
  // is qk_rope_head_dim, as transformers sets it).
  bool is_mla = false;
  MlaConfig mla;
  MoeConfig moe;
  // The softmax scale of attention: 1 / sqrt(head_dim), or for MLA
  // 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim), times mscale(factor, mscale_all_dim)^2 for
  // yarn with a non-zero mscale_all_dim (transformers' yarn_apply_mscale). 0 (a config built
  // by hand) means that default without the yarn correction.
  double attention_scale = 0.0;
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

// The config.json fields that cannot change the forward pass (bookkeeping, token ids,
// training-only and generation settings, tool stamps such as unsloth_version), accepted with
// any value for every model_type and reported in ModelConfig::ignored_fields; sorted. Any
// other field the architecture does not read is refused by name. docs/models.md lists them.
std::vector<std::string> MetadataFieldNames();

// Bundled public geometries, embedded in the binary: "qwen3-0.6b", "qwen2-7b",
// "qwen2.5-0.5b", "llama-3.2-1b", "smollm2-360m", "phi-3-mini-4k", "mistral-7b",
// "deepseek-v2-lite", "qwen3-30b-a3b".
std::vector<std::string> BundledConfigNames();
absl::StatusOr<std::string> BundledConfigJson(absl::string_view name);
absl::StatusOr<ModelConfig> BundledModelConfig(absl::string_view name);

}  // namespace tileplan::models

#endif  // TILEPLAN_MODELS_CONFIG_H_
