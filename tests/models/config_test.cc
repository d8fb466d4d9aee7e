#include "models/config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/models/safetensors_builder.h"
#include "tests/testing/docs.h"

namespace tileplan::models {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

ModelConfig Bundled(absl::string_view name) {
  absl::StatusOr<ModelConfig> config = BundledModelConfig(name);
  EXPECT_TRUE(config.ok()) << name << ": " << config.status();
  return config.ok() ? *std::move(config) : ModelConfig();
}

// A config as an ordered map from field to raw JSON value, so cases can add, replace or drop
// single fields.
using Fields = std::map<std::string, std::string>;

std::string ToJson(const Fields& fields) {
  std::vector<std::string> members;
  for (const auto& [key, value] : fields) members.push_back(absl::StrCat("\"", key, "\": ", value));
  return absl::StrCat("{", absl::StrJoin(members, ", "), "}");
}

Fields TinyLlama() {
  return {{"model_type", "\"llama\""},  {"hidden_size", "64"},
          {"intermediate_size", "128"}, {"num_hidden_layers", "3"},
          {"num_attention_heads", "4"}, {"num_key_value_heads", "2"},
          {"vocab_size", "100"},        {"max_position_embeddings", "256"},
          {"rms_norm_eps", "1e-05"}};
}

Fields Tiny(absl::string_view model_type) {
  Fields fields = TinyLlama();
  fields["model_type"] = absl::StrCat("\"", model_type, "\"");
  return fields;
}

// A small deepseek_v2: 4 heads of [8 nope | 4 rope] queries and 8-wide values over a 16-wide
// latent, 8 routed experts (2 per token) and one shared one, the first layer dense.
Fields TinyDeepseek() {
  Fields fields = Tiny("deepseek_v2");
  fields.erase("num_key_value_heads");
  fields["kv_lora_rank"] = "16";
  fields["q_lora_rank"] = "24";
  fields["qk_nope_head_dim"] = "8";
  fields["qk_rope_head_dim"] = "4";
  fields["v_head_dim"] = "8";
  fields["n_routed_experts"] = "8";
  fields["num_experts_per_tok"] = "2";
  fields["moe_intermediate_size"] = "32";
  fields["n_shared_experts"] = "1";
  fields["first_k_dense_replace"] = "1";
  return fields;
}

// A small qwen3_moe: 8 experts, 2 per token.
Fields TinyQwen3Moe() {
  Fields fields = Tiny("qwen3_moe");
  fields["num_experts"] = "8";
  fields["num_experts_per_tok"] = "2";
  fields["moe_intermediate_size"] = "32";
  return fields;
}

// transformers' yarn get_mscale.
double Mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

Fields With(Fields fields, const std::string& key, const std::string& value) {
  fields[key] = value;
  return fields;
}

Fields Without(Fields fields, const std::string& key) {
  fields.erase(key);
  return fields;
}

ModelConfig ParseOk(const Fields& fields) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(ToJson(fields));
  EXPECT_TRUE(config.ok()) << ToJson(fields) << "\n" << config.status();
  return config.ok() ? *std::move(config) : ModelConfig();
}

std::string ParseError(const Fields& fields) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(ToJson(fields));
  EXPECT_FALSE(config.ok()) << "accepted: " << ToJson(fields);
  return config.ok() ? "" : std::string(config.status().message());
}

struct RefusalCase {
  std::string field;
  std::string value;
  std::string expected;  // substring of the error, which always names the field
};

// Each case's field set to its value in `base` is refused, naming the field.
void ExpectRefusals(const Fields& base, const std::vector<RefusalCase>& cases) {
  for (const RefusalCase& c : cases) {
    const std::string error = ParseError(With(base, c.field, c.value));
    EXPECT_THAT(error, HasSubstr(absl::StrCat("field \"", c.field, "\"")))
        << c.field << " = " << c.value;
    EXPECT_THAT(error, HasSubstr(c.expected)) << c.field << " = " << c.value;
  }
}

std::string LayerTypes(const std::vector<absl::string_view>& types) {
  std::vector<std::string> quoted;
  for (absl::string_view t : types) quoted.push_back(absl::StrCat("\"", t, "\""));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

std::string FullAttention(int layers) {
  return LayerTypes(std::vector<absl::string_view>(layers, "full_attention"));
}

// --- Bundled configs -----------------------------------------------------------------------------

TEST(BundledConfigTest, ListsEveryBundledModel) {
  EXPECT_THAT(BundledConfigNames(), ElementsAre("deepseek-v2-lite", "llama-3.2-1b", "mistral-7b",
                                                "phi-3-mini-4k", "qwen2-72b", "qwen2-7b",
                                                "qwen2.5-0.5b",
                                                "qwen3-0.6b", "qwen3-30b-a3b", "smollm2-360m"));
  for (const std::string& name : BundledConfigNames()) {
    absl::StatusOr<std::string> json = BundledConfigJson(name);
    ASSERT_TRUE(json.ok()) << name;
    EXPECT_THAT(*json, HasSubstr("\"model_type\"")) << name;
  }
}

TEST(BundledConfigTest, UnknownNameIsNotFound) {
  absl::StatusOr<std::string> json = BundledConfigJson("gpt-5");
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(json.status().message(), HasSubstr("\"gpt-5\""));
  EXPECT_THAT(json.status().message(), HasSubstr("qwen3-0.6b"));
  EXPECT_FALSE(BundledModelConfig("gpt-5").ok());
}

TEST(BundledConfigTest, Qwen3_0_6B) {
  const ModelConfig c = Bundled("qwen3-0.6b");
  EXPECT_EQ(c.arch, Architecture::kQwen3);
  EXPECT_EQ(c.num_layers, 28);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.fused_qkv);
  EXPECT_EQ(c.dtype, ir::DType::kBF16);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(28, 0));
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(128.0));
  EXPECT_FALSE(c.is_mla);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_EQ(c.moe.num_experts, 0);
  EXPECT_EQ(c.moe.sparse_layers, std::vector<bool>(28, false));
  EXPECT_THAT(c.ignored_fields,
              ElementsAre("architectures", "attention_dropout", "bos_token_id", "eos_token_id",
                          "initializer_range", "max_window_layers", "sliding_window",
                          "transformers_version", "use_cache"));
}

TEST(BundledConfigTest, Qwen2_7B) {
  const ModelConfig c = Bundled("qwen2-7b");
  EXPECT_EQ(c.arch, Architecture::kQwen2);
  EXPECT_EQ(c.num_layers, 28);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.num_heads, 28);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qk_norm);
  // sliding_window is set but use_sliding_window is false: full attention everywhere.
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(28, 0));
  EXPECT_THAT(c.ignored_fields, ::testing::Contains("sliding_window"));
}

TEST(BundledConfigTest, Qwen2_5_0_5B) {
  const ModelConfig c = Bundled("qwen2.5-0.5b");
  EXPECT_EQ(c.arch, Architecture::kQwen2);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_heads, 14);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(24, 0));
}

TEST(BundledConfigTest, Llama3_2_1B) {
  const ModelConfig c = Bundled("llama-3.2-1b");
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(16, 0));
}

TEST(BundledConfigTest, SmolLM2_360M) {
  const ModelConfig c = Bundled("smollm2-360m");
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.hidden_size, 960);
  EXPECT_EQ(c.intermediate_size, 2560);
  EXPECT_EQ(c.num_heads, 15);
  EXPECT_EQ(c.num_kv_heads, 5);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(BundledConfigTest, Phi3Mini4k) {
  const ModelConfig c = Bundled("phi-3-mini-4k");
  EXPECT_EQ(c.arch, Architecture::kPhi3);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.hidden_size, 3072);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.vocab_size, 32064);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(32, 2047));
  EXPECT_THAT(c.ignored_fields,
              ElementsAre("_name_or_path", "architectures", "attention_dropout", "auto_map",
                          "bos_token_id", "embd_pdrop", "eos_token_id", "initializer_range",
                          "original_max_position_embeddings", "pad_token_id", "resid_pdrop",
                          "transformers_version", "use_cache"));
}

TEST(BundledConfigTest, Mistral7B) {
  const ModelConfig c = Bundled("mistral-7b");
  EXPECT_EQ(c.arch, Architecture::kMistral);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(32, 4096));
  EXPECT_THAT(c.ignored_fields,
              ElementsAre("architectures", "bos_token_id", "eos_token_id", "initializer_range",
                          "transformers_version", "use_cache"));
}

TEST(BundledConfigTest, DeepseekV2Lite) {
  const ModelConfig c = Bundled("deepseek-v2-lite");
  EXPECT_EQ(c.arch, Architecture::kDeepseekV2);
  EXPECT_EQ(c.num_layers, 27);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 10944);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 16);
  EXPECT_EQ(c.head_dim, 64);  // qk_rope_head_dim, as transformers sets it
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.fused_qkv);
  EXPECT_EQ(c.dtype, ir::DType::kBF16);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(27, 0));

  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_TRUE(c.rope.truncate);
  EXPECT_EQ(c.rope.attention_factor, 1.0);  // mscale == mscale_all_dim: exactly 1
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);
  EXPECT_TRUE(c.rope.interleaved);

  EXPECT_TRUE(c.is_mla);
  EXPECT_EQ(c.mla.q_lora_rank, 0);  // null: a plain q_proj
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla.v_head_dim, 128);
  const double mscale = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(c.attention_scale, mscale * mscale / std::sqrt(192.0));
  EXPECT_NEAR(c.attention_scale, 0.1147, 1e-4);

  EXPECT_EQ(c.moe.num_experts, 64);
  EXPECT_EQ(c.moe.top_k, 6);
  EXPECT_EQ(c.moe.moe_intermediate_size, 1408);
  EXPECT_EQ(c.moe.shared_intermediate_size, 2 * 1408);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_FALSE(c.moe.rounded_logits);  // the router casts to float32
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.moe.num_groups, 1);
  EXPECT_EQ(c.moe.topk_groups, 1);
  std::vector<bool> sparse(27, true);
  sparse[0] = false;
  EXPECT_EQ(c.moe.sparse_layers, sparse);
  EXPECT_THAT(c.ignored_fields,
              ElementsAre("architectures", "attention_dropout", "aux_loss_alpha", "bos_token_id",
                          "eos_token_id", "initializer_range", "pretraining_tp", "seq_aux",
                          "transformers_version", "use_cache"));
}

TEST(BundledConfigTest, Qwen3_30B_A3B) {
  const ModelConfig c = Bundled("qwen3-30b-a3b");
  EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 6144);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.is_mla);
  EXPECT_EQ(c.dtype, ir::DType::kBF16);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(48, 0));
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(128.0));
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 768);
  EXPECT_EQ(c.moe.shared_intermediate_size, 0);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_TRUE(c.moe.rounded_logits);  // the router is a linear in the activation dtype
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.moe.num_groups, 1);
  EXPECT_EQ(c.moe.topk_groups, 1);
  EXPECT_EQ(c.moe.sparse_layers, std::vector<bool>(48, true));
  EXPECT_THAT(
      c.ignored_fields,
      ElementsAre("architectures", "attention_dropout", "bos_token_id", "eos_token_id",
                  "initializer_range", "max_window_layers", "output_router_logits",
                  "router_aux_loss_coef", "sliding_window", "transformers_version", "use_cache"));
}

TEST(BundledConfigTest, AttentionScaleIsSetForEveryModel) {
  for (const std::string& name : BundledConfigNames()) {
    const ModelConfig c = Bundled(name);
    if (c.is_mla) continue;
    EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(static_cast<double>(c.head_dim))) << name;
    EXPECT_EQ(c.moe.sparse_layers.size(), static_cast<size_t>(c.num_layers)) << name;
  }
}

// --- Both layouts
// ---------------------------------------------------------------------------------

void ExpectSameModel(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope.type, b.rope.type);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor);
  EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor);
  EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.o_bias, b.o_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.fused_qkv, b.fused_qkv);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.rope.beta_fast, b.rope.beta_fast);
  EXPECT_EQ(a.rope.beta_slow, b.rope.beta_slow);
  EXPECT_EQ(a.rope.truncate, b.rope.truncate);
  EXPECT_EQ(a.rope.attention_factor, b.rope.attention_factor);
  EXPECT_EQ(a.rope.mscale_all_dim, b.rope.mscale_all_dim);
  EXPECT_EQ(a.rope.interleaved, b.rope.interleaved);
  EXPECT_EQ(a.is_mla, b.is_mla);
  EXPECT_EQ(a.mla.q_lora_rank, b.mla.q_lora_rank);
  EXPECT_EQ(a.mla.kv_lora_rank, b.mla.kv_lora_rank);
  EXPECT_EQ(a.mla.qk_nope_head_dim, b.mla.qk_nope_head_dim);
  EXPECT_EQ(a.mla.qk_rope_head_dim, b.mla.qk_rope_head_dim);
  EXPECT_EQ(a.mla.v_head_dim, b.mla.v_head_dim);
  EXPECT_EQ(a.moe.num_experts, b.moe.num_experts);
  EXPECT_EQ(a.moe.top_k, b.moe.top_k);
  EXPECT_EQ(a.moe.moe_intermediate_size, b.moe.moe_intermediate_size);
  EXPECT_EQ(a.moe.shared_intermediate_size, b.moe.shared_intermediate_size);
  EXPECT_EQ(a.moe.norm_topk_prob, b.moe.norm_topk_prob);
  EXPECT_EQ(a.moe.routed_scaling_factor, b.moe.routed_scaling_factor);
  EXPECT_EQ(a.moe.num_groups, b.moe.num_groups);
  EXPECT_EQ(a.moe.topk_groups, b.moe.topk_groups);
  EXPECT_EQ(a.moe.sparse_layers, b.moe.sparse_layers);
  EXPECT_EQ(a.attention_scale, b.attention_scale);
}

ModelConfig ParseText(const std::string& text) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text);
  EXPECT_TRUE(config.ok()) << config.status() << "\n" << text;
  return config.ok() ? *std::move(config) : ModelConfig();
}

// Qwen3-0.6B as transformers 5 saves it: rope_parameters, dtype, layer_types, token ids.
TEST(LayoutTest, Qwen3Transformers5LayoutMatchesHubLayout) {
  const std::string v5 = absl::StrCat(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
    "intermediate_size": 3072, "layer_types": )",
                                      FullAttention(28), R"(,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "pad_token_id": null, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
    "sliding_window": null, "tie_word_embeddings": true, "transformers_version": "5.0.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
  ExpectSameModel(ParseText(v5), Bundled("qwen3-0.6b"));
}

TEST(LayoutTest, Llama3Transformers5LayoutMatchesHubLayout) {
  const std::string v5 = R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "dtype": "bfloat16", "eos_token_id": 128001, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192, "rope_theta": 500000.0,
                        "rope_type": "llama3"},
    "tie_word_embeddings": true, "transformers_version": "5.0.0", "use_cache": true,
    "vocab_size": 128256})";
  ExpectSameModel(ParseText(v5), Bundled("llama-3.2-1b"));
}

TEST(LayoutTest, Phi3Transformers5LayoutMatchesHubLayout) {
  const std::string v5 = R"({
    "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "dtype": "bfloat16", "embd_pdrop": 0.0, "eos_token_id": 32000,
    "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_parameters": {"partial_rotary_factor": 1.0, "rope_theta": 10000.0,
                        "rope_type": "default"},
    "sliding_window": 2047, "tie_word_embeddings": false, "transformers_version": "5.0.0",
    "use_cache": true, "vocab_size": 32064})";
  ExpectSameModel(ParseText(v5), Bundled("phi-3-mini-4k"));
}

TEST(LayoutTest, MistralTransformers5LayoutMatchesHubLayout) {
  const std::string v5 = R"({
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "dtype": "bfloat16", "eos_token_id": 2, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pad_token_id": null,
    "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "sliding_window": 4096, "tie_word_embeddings": false, "transformers_version": "5.0.0",
    "use_cache": true, "vocab_size": 32000})";
  ExpectSameModel(ParseText(v5), Bundled("mistral-7b"));
}

TEST(LayoutTest, Qwen2Transformers5LayoutMatchesHubLayout) {
  const std::string v5 = absl::StrCat(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "dtype": "bfloat16", "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "layer_types": )",
                                      FullAttention(24), R"(,
    "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "pad_token_id": null, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "sliding_window": null, "tie_word_embeddings": true, "transformers_version": "5.0.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
  ExpectSameModel(ParseText(v5), Bundled("qwen2.5-0.5b"));
}

// DeepSeek-V2-Lite as transformers 5 saves it: rope_parameters (with rope_theta and rope_type),
// dtype, head_dim written as qk_rope_head_dim, n_group/topk_group null.
TEST(LayoutTest, DeepseekV2Transformers5LayoutMatchesHubLayout) {
  const std::string v5 = R"({
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "dtype": "bfloat16", "eos_token_id": 100001,
    "first_k_dense_replace": 1, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "mlp_bias": false, "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": null, "n_routed_experts": 64,
    "n_shared_experts": 2, "norm_topk_prob": false, "num_attention_heads": 16,
    "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
    "pad_token_id": null, "pretraining_tp": 1, "q_lora_rank": null, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 40.0, "mscale": 0.707,
                        "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                        "rope_theta": 10000.0, "rope_type": "yarn"},
    "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
    "tie_word_embeddings": false, "topk_group": null, "topk_method": "greedy",
    "transformers_version": "5.17.0", "use_cache": true, "v_head_dim": 128,
    "vocab_size": 102400})";
  ExpectSameModel(ParseText(v5), Bundled("deepseek-v2-lite"));
}

// Qwen3-30B-A3B as transformers 5 saves it: rope_parameters, dtype, num_local_experts.
TEST(LayoutTest, Qwen3MoeTransformers5LayoutMatchesHubLayout) {
  const std::string v5 = R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "dtype": "bfloat16",
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "num_local_experts": 128, "output_router_logits": false, "pad_token_id": null,
    "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
    "transformers_version": "5.17.0", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})";
  ExpectSameModel(ParseText(v5), Bundled("qwen3-30b-a3b"));
}

TEST(LayoutTest, LegacyTypeKeyAndTopLevelThetaAreRead) {
  const ModelConfig legacy =
      ParseOk(With(With(TinyLlama(), "rope_theta", "500000"), "rope_scaling",
                   R"({"type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
               "original_max_position_embeddings": 8192})"));
  const ModelConfig v5 = ParseOk(
      With(TinyLlama(), "rope_parameters",
           R"({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
  ExpectSameModel(legacy, v5);
  EXPECT_EQ(legacy.rope.type, "llama3");
  EXPECT_EQ(legacy.rope.factor, 8.0);
  // Both type keys may be present when they agree.
  ParseOk(With(TinyLlama(), "rope_scaling", R"({"type": "default", "rope_type": "default"})"));
}

// --- Defaults
// -------------------------------------------------------------------------------------

TEST(DefaultsTest, TransformersDefaultsApply) {
  const ModelConfig c = ParseOk(Without(TinyLlama(), "num_key_value_heads"));
  EXPECT_EQ(c.num_kv_heads, 4);  // num_attention_heads
  EXPECT_EQ(c.head_dim, 16);     // hidden_size / num_attention_heads
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.dtype, ir::DType::kF32);  // transformers loads float32 when no dtype is given
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(3, 0));
  EXPECT_TRUE(c.ignored_fields.empty());

  EXPECT_EQ(ParseOk(With(TinyLlama(), "num_key_value_heads", "null")).num_kv_heads, 4);
  EXPECT_EQ(ParseOk(With(TinyLlama(), "head_dim", "null")).head_dim, 16);
  EXPECT_EQ(ParseOk(With(TinyLlama(), "head_dim", "32")).head_dim, 32);
  EXPECT_EQ(ParseOk(With(TinyLlama(), "rope_scaling", "null")).rope.type, "default");
  EXPECT_EQ(ParseOk(With(TinyLlama(), "torch_dtype", "\"float16\"")).dtype, ir::DType::kF16);
  EXPECT_EQ(ParseOk(With(TinyLlama(), "dtype", "\"float32\"")).dtype, ir::DType::kF32);
  EXPECT_EQ(ParseOk(With(With(TinyLlama(), "dtype", "\"bfloat16\""), "torch_dtype", "\"bfloat16\""))
                .dtype,
            ir::DType::kBF16);
}

TEST(DefaultsTest, ClassDefaultsPerModelType) {
  // Absent num_key_value_heads takes the class default of Qwen2/Qwen3 (32) and Mistral (8).
  Fields wide = With(With(TinyLlama(), "num_attention_heads", "32"), "hidden_size", "2048");
  wide.erase("num_key_value_heads");
  EXPECT_EQ(ParseOk(With(wide, "model_type", "\"qwen2\"")).num_kv_heads, 32);
  EXPECT_EQ(ParseOk(With(wide, "model_type", "\"mistral\"")).num_kv_heads, 8);
  EXPECT_EQ(ParseOk(With(wide, "model_type", "\"phi3\"")).num_kv_heads, 32);
  // Absent head_dim is 128 for Qwen3 (its class default), hidden_size / heads elsewhere.
  EXPECT_EQ(ParseOk(Tiny("qwen3")).head_dim, 128);
  EXPECT_EQ(ParseOk(Tiny("qwen2")).head_dim, 16);
  EXPECT_THAT(ParseError(With(Tiny("qwen3"), "head_dim", "null")),
              HasSubstr("field \"head_dim\": null is not valid"));
}

// --- Sliding windows
// ------------------------------------------------------------------------------

TEST(SlidingWindowTest, MistralAppliesToEveryLayer) {
  EXPECT_THAT(ParseOk(Tiny("mistral")).sliding_window, ElementsAre(4096, 4096, 4096));
  EXPECT_THAT(ParseOk(With(Tiny("mistral"), "sliding_window", "null")).sliding_window, Each(0));
  EXPECT_THAT(ParseOk(With(Tiny("mistral"), "sliding_window", "1024")).sliding_window,
              ElementsAre(1024, 1024, 1024));
}

TEST(SlidingWindowTest, Phi3AppliesToEveryLayer) {
  EXPECT_THAT(ParseOk(Tiny("phi3")).sliding_window, Each(0));
  EXPECT_THAT(ParseOk(With(Tiny("phi3"), "sliding_window", "2047")).sliding_window,
              ElementsAre(2047, 2047, 2047));
}

TEST(SlidingWindowTest, QwenNeedsUseSlidingWindowAndStartsAtMaxWindowLayers) {
  for (const char* type : {"qwen2", "qwen3"}) {
    const Fields base = With(Tiny(type), "sliding_window", "512");
    const ModelConfig off = ParseOk(With(base, "max_window_layers", "1"));
    EXPECT_THAT(off.sliding_window, Each(0)) << type;
    EXPECT_THAT(off.ignored_fields, ElementsAre("max_window_layers", "sliding_window"));

    const Fields on = With(base, "use_sliding_window", "true");
    EXPECT_THAT(ParseOk(With(on, "max_window_layers", "1")).sliding_window,
                ElementsAre(0, 512, 512))
        << type;
    EXPECT_THAT(ParseOk(With(on, "max_window_layers", "0")).sliding_window,
                ElementsAre(512, 512, 512));
    EXPECT_THAT(ParseOk(on).sliding_window, Each(0));  // max_window_layers defaults to 28
    EXPECT_THAT(ParseOk(With(on, "sliding_window", "null")).sliding_window, Each(0));
    EXPECT_THAT(
        ParseOk(Without(With(on, "max_window_layers", "0"), "sliding_window")).sliding_window,
        ElementsAre(4096, 4096, 4096));
  }
}

TEST(SlidingWindowTest, LayerTypesDecidePerLayerForQwen) {
  const Fields on =
      With(With(Tiny("qwen3"), "use_sliding_window", "true"), "sliding_window", "256");
  const ModelConfig c =
      ParseOk(With(With(on, "layer_types",
                        LayerTypes({"full_attention", "sliding_attention", "full_attention"})),
                   "max_window_layers", "0"));
  EXPECT_THAT(c.sliding_window, ElementsAre(0, 256, 0));
  EXPECT_THAT(c.ignored_fields, ElementsAre("max_window_layers"));
  EXPECT_THAT(
      ParseError(With(Tiny("qwen2"), "layer_types",
                      LayerTypes({"full_attention", "sliding_attention", "full_attention"}))),
      HasSubstr("field \"layer_types[1]\": is \"sliding_attention\" but no sliding window"));
}

TEST(SlidingWindowTest, LayerTypesMustAgreeWithFixedArchitectures) {
  EXPECT_THAT(
      ParseOk(With(Tiny("mistral"), "layer_types",
                   LayerTypes({"sliding_attention", "sliding_attention", "sliding_attention"})))
          .sliding_window,
      ElementsAre(4096, 4096, 4096));
  EXPECT_THAT(ParseError(With(Tiny("mistral"), "layer_types", FullAttention(3))),
              HasSubstr("field \"layer_types[0]\": \"full_attention\" contradicts"));
  EXPECT_THAT(ParseOk(With(TinyLlama(), "layer_types", FullAttention(3))).sliding_window, Each(0));
}

TEST(SlidingWindowTest, RejectsBadLayerTypes) {
  EXPECT_THAT(ParseError(With(Tiny("qwen2"), "layer_types", FullAttention(2))),
              HasSubstr("field \"layer_types\": must be a list of num_hidden_layers (3)"));
  EXPECT_THAT(ParseError(With(Tiny("qwen2"), "layer_types", "\"full_attention\"")),
              HasSubstr("field \"layer_types\""));
  EXPECT_THAT(
      ParseError(With(Tiny("qwen2"), "layer_types",
                      LayerTypes({"full_attention", "chunked_attention", "full_attention"}))),
      HasSubstr("field \"layer_types[1]\": must be \"full_attention\" or"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "sliding_window", "4096")),
              HasSubstr("field \"sliding_window\": model_type \"llama\" has no sliding window"));
  EXPECT_THAT(ParseError(With(Tiny("mistral"), "sliding_window", "0")),
              HasSubstr("field \"sliding_window\""));
  EXPECT_THAT(ParseError(With(With(Tiny("qwen2"), "use_sliding_window", "true"),
                              "max_window_layers", "-1")),
              HasSubstr("field \"max_window_layers\""));
}

// --- Biases and per-architecture features
// ---------------------------------------------------------

TEST(FeaturesTest, Biases) {
  const ModelConfig attention = ParseOk(With(TinyLlama(), "attention_bias", "true"));
  EXPECT_TRUE(attention.qkv_bias);
  EXPECT_TRUE(attention.o_bias);
  EXPECT_FALSE(attention.mlp_bias);
  const ModelConfig mlp = ParseOk(With(TinyLlama(), "mlp_bias", "true"));
  EXPECT_FALSE(mlp.qkv_bias);
  EXPECT_TRUE(mlp.mlp_bias);
  const ModelConfig qwen2 = ParseOk(With(Tiny("qwen2"), "attention_bias", "false"));
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.o_bias);
  for (const char* type : {"qwen2", "qwen3", "mistral", "phi3"}) {
    EXPECT_THAT(ParseError(With(Tiny(type), "attention_bias", "true")),
                HasSubstr("field \"attention_bias\": true is not supported"))
        << type;
    EXPECT_THAT(ParseError(With(Tiny(type), "mlp_bias", "true")),
                HasSubstr("field \"mlp_bias\": true is not supported"))
        << type;
  }
  EXPECT_THAT(ParseError(With(TinyLlama(), "attention_bias", "1")),
              HasSubstr("field \"attention_bias\": must be true or false"));
}

TEST(FeaturesTest, QkNormAndFusedQkv) {
  EXPECT_TRUE(ParseOk(Tiny("qwen3")).qk_norm);
  EXPECT_FALSE(ParseOk(Tiny("qwen2")).qk_norm);
  EXPECT_TRUE(ParseOk(Tiny("phi3")).fused_qkv);
  EXPECT_FALSE(ParseOk(Tiny("mistral")).fused_qkv);
  EXPECT_EQ(ArchitectureName(Architecture::kPhi3), "phi3");
  EXPECT_EQ(ArchitectureName(Architecture::kQwen2), "qwen2");
  EXPECT_EQ(ArchitectureName(Architecture::kLlama), "llama");
}

// --- YaRN RoPE
// ------------------------------------------------------------------------------------

TEST(YarnTest, BothLayoutsAndTheLegacyTypeKey) {
  const Fields base = With(Tiny("qwen2"), "max_position_embeddings", "131072");
  const ModelConfig legacy = ParseOk(
      With(With(base, "rope_theta", "1000000.0"), "rope_scaling",
           R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})"));
  const ModelConfig typed = ParseOk(
      With(With(base, "rope_theta", "1000000.0"), "rope_scaling",
           R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})"));
  const ModelConfig v5 = ParseOk(With(base, "rope_parameters",
                                      R"({"rope_type": "yarn", "rope_theta": 1000000.0,
                                          "factor": 4.0, "original_max_position_embeddings": 32768})"));
  ExpectSameModel(legacy, v5);
  ExpectSameModel(typed, v5);
  EXPECT_EQ(v5.rope.type, "yarn");
  EXPECT_EQ(v5.rope.theta, 1e6);
  EXPECT_EQ(v5.rope.factor, 4.0);
  EXPECT_EQ(v5.rope.original_max_position_embeddings, 32768);
  EXPECT_EQ(v5.rope.beta_fast, 32.0);
  EXPECT_EQ(v5.rope.beta_slow, 1.0);
  EXPECT_TRUE(v5.rope.truncate);
  EXPECT_EQ(v5.rope.mscale_all_dim, 0.0);
  EXPECT_FALSE(v5.rope.interleaved);
  // Neither mscale nor mscale_all_dim: mscale(factor, 1).
  EXPECT_DOUBLE_EQ(v5.rope.attention_factor, 0.1 * std::log(4.0) + 1.0);
  // The softmax scale of a non-MLA model is not touched by yarn.
  EXPECT_DOUBLE_EQ(v5.attention_scale, 0.25);
}

TEST(YarnTest, AcceptedForQwenAndTheMoeArchitectures) {
  const std::string yarn = R"({"type": "yarn", "factor": 2.0})";
  for (const Fields& fields : {Tiny("qwen2"), Tiny("qwen3"), TinyQwen3Moe(), TinyDeepseek()}) {
    EXPECT_EQ(ParseOk(With(fields, "rope_scaling", yarn)).rope.type, "yarn")
        << fields.at("model_type");
  }
  for (const char* type : {"llama", "mistral", "phi3"}) {
    EXPECT_THAT(ParseError(With(Tiny(type), "rope_scaling", yarn)),
                HasSubstr("field \"rope_scaling.type\": RoPE type \"yarn\" is not supported for "
                          "model_type"))
        << type;
  }
  EXPECT_THAT(ParseError(With(Tiny("qwen2"), "rope_scaling", R"({"type": "linear", "factor": 2})")),
              HasSubstr("(only \"default\", \"llama3\" and \"yarn\")"));
}

TEST(YarnTest, AttentionFactor) {
  const auto parse = [](const std::string& rope) {
    return ParseOk(With(TinyQwen3Moe(), "rope_parameters", rope)).rope;
  };
  // Given: taken as is.
  EXPECT_EQ(
      parse(R"({"rope_type": "yarn", "factor": 8.0, "attention_factor": 1.25})").attention_factor,
      1.25);
  // mscale and mscale_all_dim both non-zero: their ratio.
  EXPECT_DOUBLE_EQ(
      parse(R"({"rope_type": "yarn", "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 0.5})")
          .attention_factor,
      Mscale(8.0, 1.0) / Mscale(8.0, 0.5));
  EXPECT_EQ(parse(R"({"rope_type": "yarn", "factor": 8.0, "mscale": 0.707,
                      "mscale_all_dim": 0.707})")
                .attention_factor,
            1.0);
  // One of them 0 or null: mscale(factor, 1).
  for (const char* rope :
       {R"({"rope_type": "yarn", "factor": 8.0, "mscale": 1.0})",
        R"({"rope_type": "yarn", "factor": 8.0, "mscale": 0, "mscale_all_dim": 1.0})",
        R"({"rope_type": "yarn", "factor": 8.0, "mscale": null, "mscale_all_dim": null,
            "attention_factor": null})"}) {
    EXPECT_DOUBLE_EQ(parse(rope).attention_factor, Mscale(8.0, 1.0)) << rope;
  }
  EXPECT_EQ(parse(R"({"rope_type": "yarn", "factor": 8.0, "mscale_all_dim": 0.5})").mscale_all_dim,
            0.5);
  // factor 1: no correction.
  EXPECT_EQ(parse(R"({"rope_type": "yarn", "factor": 1})").attention_factor, 1.0);
}

TEST(YarnTest, DefaultsAndDerivedValues) {
  const auto parse = [](const Fields& fields, const std::string& rope) {
    return ParseOk(With(fields, "rope_scaling", rope)).rope;
  };
  const Fields moe = With(TinyQwen3Moe(), "max_position_embeddings", "1024");
  // original_max_position_embeddings defaults to max_position_embeddings.
  EXPECT_EQ(parse(moe, R"({"type": "yarn", "factor": 4})").original_max_position_embeddings, 1024);
  // A null factor is max_position_embeddings / original_max_position_embeddings.
  const RopeConfig derived =
      parse(moe, R"({"type": "yarn", "factor": null, "original_max_position_embeddings": 256})");
  EXPECT_EQ(derived.factor, 4.0);
  EXPECT_DOUBLE_EQ(derived.attention_factor, Mscale(4.0, 1.0));
  // A top-level original_max_position_embeddings takes priority.
  const Fields top = With(moe, "original_max_position_embeddings", "128");
  EXPECT_EQ(parse(top, R"({"type": "yarn", "factor": 2, "original_max_position_embeddings": 256})")
                .original_max_position_embeddings,
            128);
  EXPECT_EQ(parse(top, R"({"type": "yarn", "factor": null})").factor, 8.0);
  // ... and is metadata when the RoPE is not yarn.
  EXPECT_THAT(ParseOk(top).ignored_fields, ::testing::Contains("original_max_position_embeddings"));
  // beta_fast / beta_slow: null or 0 take 32 and 1.
  const RopeConfig betas =
      parse(moe, R"({"type": "yarn", "factor": 4, "beta_fast": null, "beta_slow": 0})");
  EXPECT_EQ(betas.beta_fast, 32.0);
  EXPECT_EQ(betas.beta_slow, 1.0);
  const RopeConfig given = parse(
      moe, R"({"type": "yarn", "factor": 4, "beta_fast": 16, "beta_slow": 2, "truncate": false})");
  EXPECT_EQ(given.beta_fast, 16.0);
  EXPECT_EQ(given.beta_slow, 2.0);
  EXPECT_FALSE(given.truncate);
}

TEST(YarnTest, MalformedYarnIsRefusedNamingTheKey) {
  const auto error = [](const std::string& rope) {
    return ParseError(With(TinyQwen3Moe(), "rope_scaling", rope));
  };
  EXPECT_THAT(error(R"({"type": "yarn"})"),
              HasSubstr("field \"rope_scaling.factor\": required for RoPE type \"yarn\""));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 0.5})"),
              HasSubstr("field \"rope_scaling.factor\": must be at least 1, got 0.5"));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 0})"),
              HasSubstr("field \"rope_scaling.factor\": must be a positive number"));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": null, "original_max_position_embeddings": 512})"),
              HasSubstr("field \"rope_scaling.factor\": must be at least 1"));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 2, "low_freq_factor": 1})"),
              HasSubstr("field \"rope_scaling.low_freq_factor\": unknown field for RoPE type "
                        "\"yarn\""));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 2, "beta_fast": -1})"),
              HasSubstr("field \"rope_scaling.beta_fast\": must be a non-negative number"));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 2, "mscale": "big"})"),
              HasSubstr("field \"rope_scaling.mscale\""));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 2, "attention_factor": 0})"),
              HasSubstr("field \"rope_scaling.attention_factor\""));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 2, "truncate": null})"),
              HasSubstr("field \"rope_scaling.truncate\": must be true or false"));
  EXPECT_THAT(error(R"({"type": "yarn", "factor": 2, "original_max_position_embeddings": 0})"),
              HasSubstr("field \"rope_scaling.original_max_position_embeddings\""));
  EXPECT_THAT(
      ParseError(With(With(TinyQwen3Moe(), "rope_scaling", R"({"type": "yarn", "factor": 2})"),
                      "original_max_position_embeddings", "-1")),
      HasSubstr("field \"original_max_position_embeddings\""));
  // Another architecture's field stays unknown.
  EXPECT_THAT(ParseError(With(TinyLlama(), "original_max_position_embeddings", "4096")),
              HasSubstr("field \"original_max_position_embeddings\": unknown field"));
}

// --- deepseek_v2
// -----------------------------------------------------------------------------------

TEST(DeepseekV2Test, TinyConfig) {
  const ModelConfig c = ParseOk(TinyDeepseek());
  EXPECT_EQ(c.arch, Architecture::kDeepseekV2);
  EXPECT_EQ(ArchitectureName(Architecture::kDeepseekV2), "deepseek_v2");
  EXPECT_TRUE(c.is_mla);
  EXPECT_EQ(c.num_kv_heads, 4);  // absent: num_attention_heads
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.mla.q_lora_rank, 24);
  EXPECT_EQ(c.mla.kv_lora_rank, 16);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 8);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 4);
  EXPECT_EQ(c.mla.v_head_dim, 8);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(12.0));
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.moe_intermediate_size, 32);
  EXPECT_EQ(c.moe.shared_intermediate_size, 32);
  EXPECT_THAT(c.moe.sparse_layers, ElementsAre(false, true, true));
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(3, 0));
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.ignored_fields.empty());
}

TEST(DeepseekV2Test, ClassDefaults) {
  Fields fields = TinyDeepseek();
  for (const char* key :
       {"kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "n_routed_experts", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace"}) {
    fields.erase(key);
  }
  const ModelConfig c = ParseOk(fields);
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla.v_head_dim, 128);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.moe.num_experts, 64);
  EXPECT_EQ(c.moe.moe_intermediate_size, 1407);
  EXPECT_EQ(c.moe.shared_intermediate_size, 2 * 1407);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.routed_scaling_factor, 1.0);
  EXPECT_THAT(c.moe.sparse_layers, Each(true));  // first_k_dense_replace 0
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(192.0));

  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "n_shared_experts", "null")).moe.shared_intermediate_size,
            0);
  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "q_lora_rank", "null")).mla.q_lora_rank, 0);
  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "num_key_value_heads", "null")).num_kv_heads, 4);
  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "num_key_value_heads", "4")).num_kv_heads, 4);
  EXPECT_THAT(ParseOk(With(TinyDeepseek(), "first_k_dense_replace", "5")).moe.sparse_layers,
              Each(false));
  EXPECT_EQ(
      ParseOk(With(TinyDeepseek(), "routed_scaling_factor", "16.0")).moe.routed_scaling_factor,
      16.0);
}

TEST(DeepseekV2Test, HeadDimIsQkRopeHeadDim) {
  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "head_dim", "4")).head_dim, 4);
  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "head_dim", "null")).head_dim, 4);
  EXPECT_THAT(ParseError(With(TinyDeepseek(), "head_dim", "16")),
              HasSubstr("field \"head_dim\": must be null or qk_rope_head_dim (4)"));
}

TEST(DeepseekV2Test, NumExpertsIsAnAliasOfNRoutedExperts) {
  EXPECT_EQ(ParseOk(With(Without(TinyDeepseek(), "n_routed_experts"), "num_experts", "16"))
                .moe.num_experts,
            16);
  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "num_experts", "8")).moe.num_experts, 8);
  EXPECT_THAT(ParseError(With(TinyDeepseek(), "num_experts", "16")),
              HasSubstr("field \"num_experts\": 16 disagrees with n_routed_experts 8"));
}

TEST(DeepseekV2Test, TopkMethods) {
  // greedy ignores n_group and topk_group.
  const ModelConfig greedy = ParseOk(With(With(TinyDeepseek(), "n_group", "4"), "topk_group", "3"));
  EXPECT_EQ(greedy.moe.num_groups, 1);
  EXPECT_EQ(greedy.moe.topk_groups, 1);
  const Fields grouped =
      With(With(With(TinyDeepseek(), "topk_method", "\"group_limited_greedy\""), "n_group", "4"),
           "topk_group", "2");
  const ModelConfig c = ParseOk(grouped);
  EXPECT_EQ(c.moe.num_groups, 4);
  EXPECT_EQ(c.moe.topk_groups, 2);
  // Absent or null n_group and topk_group: 1.
  const ModelConfig one = ParseOk(With(TinyDeepseek(), "topk_method", "\"group_limited_greedy\""));
  EXPECT_EQ(one.moe.num_groups, 1);
  EXPECT_EQ(one.moe.topk_groups, 1);

  EXPECT_THAT(ParseError(With(grouped, "n_group", "3")),
              HasSubstr("field \"n_group\": 3 does not divide n_routed_experts 8"));
  EXPECT_THAT(ParseError(With(grouped, "topk_group", "5")),
              HasSubstr("field \"topk_group\": 5 exceeds n_group 4"));
  // 1 group of 2 experts cannot give 3.
  EXPECT_THAT(ParseError(With(With(grouped, "topk_group", "1"), "num_experts_per_tok", "3")),
              HasSubstr("field \"num_experts_per_tok\": 3 exceeds the 2 experts"));
  EXPECT_THAT(ParseError(With(TinyDeepseek(), "topk_method", "\"noaux_tc\"")),
              HasSubstr("field \"topk_method\": \"noaux_tc\" is not supported"));
  EXPECT_THAT(ParseError(With(TinyDeepseek(), "topk_method", "null")),
              HasSubstr("field \"topk_method\""));
}

TEST(DeepseekV2Test, YarnScalesTheSoftmax) {
  const std::string yarn = R"({"type": "yarn", "factor": 40, "mscale": 0.707,
                              "mscale_all_dim": 0.707, "original_max_position_embeddings": 64})";
  const ModelConfig c = ParseOk(With(TinyDeepseek(), "rope_scaling", yarn));
  const double mscale = Mscale(40.0, 0.707);
  EXPECT_DOUBLE_EQ(c.attention_scale, mscale * mscale / std::sqrt(12.0));
  EXPECT_EQ(c.rope.attention_factor, 1.0);
  EXPECT_TRUE(c.rope.interleaved);
  // Without mscale_all_dim the softmax scale is plain; cos/sin carry mscale(factor, 1).
  const ModelConfig plain =
      ParseOk(With(TinyDeepseek(), "rope_scaling", R"({"type": "yarn", "factor": 40})"));
  EXPECT_DOUBLE_EQ(plain.attention_scale, 1.0 / std::sqrt(12.0));
  EXPECT_DOUBLE_EQ(plain.rope.attention_factor, Mscale(40.0, 1.0));
  // mscale_all_dim 1 alone (DeepSeek-V3 style): the squared correction, and cos/sin get
  // mscale(factor, 1) since mscale is absent.
  const ModelConfig all_dim = ParseOk(With(
      TinyDeepseek(), "rope_scaling", R"({"type": "yarn", "factor": 4, "mscale_all_dim": 1})"));
  EXPECT_DOUBLE_EQ(all_dim.attention_scale, Mscale(4.0, 1.0) * Mscale(4.0, 1.0) / std::sqrt(12.0));
}

TEST(DeepseekV2Test, UnsupportedFeaturesAreRefusedNamingTheField) {
  const std::vector<RefusalCase> cases = {
      {"norm_topk_prob", "true", "does not renormalise"},
      {"attention_bias", "true", "true is not supported for model_type \"deepseek_v2\""},
      {"mlp_bias", "true", "true is not supported"},
      {"num_key_value_heads", "2", "must equal num_attention_heads (4)"},
      {"num_nextn_predict_layers", "1", "multi-token prediction"},
      {"quantization_config", R"({"quant_method": "fp8"})", "quantized weights"},
      {"ep_size", "2", "only 1 is supported"},
      {"moe_layer_freq", "2", "only 1 is supported"},
      {"scoring_func", "\"sigmoid\"", "router scoring \"sigmoid\" is not supported"},
      {"num_experts_per_tok", "9", "must be an integer in [1, 8]"},
      {"num_experts_per_tok", "null", "required for model_type \"deepseek_v2\""},
      {"n_routed_experts", "0", "must be an integer in [1, "},
      {"kv_lora_rank", "0", "must be an integer in [1, "},
      {"qk_nope_head_dim", "0", "must be an integer in [1, "},
      {"qk_rope_head_dim", "-4", "must be an integer in [1, "},
      {"qk_rope_head_dim", "5", "rotary embedding needs an even width"},
      {"v_head_dim", "0", "must be an integer in [1, "},
      {"q_lora_rank", "0", "must be an integer in [1, "},
      {"n_shared_experts", "-1", "must be an integer in [0, "},
      {"moe_intermediate_size", "4194304", "experts exceeds"},
      {"routed_scaling_factor", "0", "must be a positive number"},
      {"first_k_dense_replace", "-1", "must be an integer in [0, "},
      {"hidden_act", "\"gelu\"", "is not supported"},
      {"sliding_window", "4096", "model_type \"deepseek_v2\" has no sliding window"},
      {"rope_interleave", "true", "multi-head latent attention is not supported"},
      {"num_local_experts", "8", "mixture-of-experts is not supported"},
      {"use_sliding_window", "false", "unknown field for model_type \"deepseek_v2\""},
      {"qk_head_dim", "13", "must be qk_nope_head_dim + qk_rope_head_dim (12)"},
  };
  ExpectRefusals(TinyDeepseek(), cases);
  // transformers 5 saves the derived qk_head_dim; its true value is accepted.
  EXPECT_EQ(ParseOk(With(TinyDeepseek(), "qk_head_dim", "12")).mla.qk_nope_head_dim, 8);
  EXPECT_THAT(ParseError(Without(TinyDeepseek(), "num_experts_per_tok")),
              HasSubstr("field \"num_experts_per_tok\": required"));
  EXPECT_THAT(ParseError(With(TinyDeepseek(), "hidden_size", "66")),
              HasSubstr("field \"num_attention_heads\": 4 does not divide hidden_size 66"));
  // The neutral values are accepted.
  Fields neutral = TinyDeepseek();
  for (const auto& [key, value] : Fields{{"norm_topk_prob", "false"},
                                         {"attention_bias", "false"},
                                         {"mlp_bias", "false"},
                                         {"num_nextn_predict_layers", "0"},
                                         {"quantization_config", "null"},
                                         {"ep_size", "1"},
                                         {"moe_layer_freq", "1"},
                                         {"scoring_func", "\"softmax\""},
                                         {"topk_method", "\"greedy\""},
                                         {"aux_loss_alpha", "0.001"},
                                         {"seq_aux", "true"},
                                         {"pretraining_tp", "1"},
                                         {"auto_map", R"({"AutoConfig": "x.y"})"}}) {
    neutral[key] = value;
  }
  EXPECT_THAT(ParseOk(neutral).ignored_fields,
              ElementsAre("auto_map", "aux_loss_alpha", "pretraining_tp", "seq_aux"));
}

// --- qwen3_moe
// -------------------------------------------------------------------------------------

TEST(Qwen3MoeTest, TinyConfig) {
  const ModelConfig c = ParseOk(TinyQwen3Moe());
  EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
  EXPECT_EQ(ArchitectureName(Architecture::kQwen3Moe), "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.is_mla);
  EXPECT_EQ(c.head_dim, 16);  // absent: hidden_size / num_attention_heads, unlike qwen3
  EXPECT_DOUBLE_EQ(c.attention_scale, 0.25);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.moe_intermediate_size, 32);
  EXPECT_EQ(c.moe.shared_intermediate_size, 0);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.moe.num_groups, 1);
  EXPECT_EQ(c.moe.topk_groups, 1);
  EXPECT_THAT(c.moe.sparse_layers, ElementsAre(true, true, true));
  EXPECT_TRUE(c.ignored_fields.empty());
  EXPECT_EQ(ParseOk(With(TinyQwen3Moe(), "head_dim", "32")).head_dim, 32);
  EXPECT_EQ(ParseOk(With(TinyQwen3Moe(), "head_dim", "null")).head_dim, 16);
  EXPECT_TRUE(ParseOk(With(TinyQwen3Moe(), "norm_topk_prob", "true")).moe.norm_topk_prob);
}

TEST(Qwen3MoeTest, ClassDefaults) {
  Fields fields = Tiny("qwen3_moe");
  fields.erase("num_key_value_heads");
  const ModelConfig c = ParseOk(fields);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 768);
  EXPECT_THAT(c.moe.sparse_layers, Each(true));
}

TEST(Qwen3MoeTest, NumExpertsAndNumLocalExperts) {
  EXPECT_EQ(ParseOk(With(Without(TinyQwen3Moe(), "num_experts"), "num_local_experts", "16"))
                .moe.num_experts,
            16);
  const ModelConfig both = ParseOk(With(TinyQwen3Moe(), "num_local_experts", "8"));
  EXPECT_EQ(both.moe.num_experts, 8);
  EXPECT_TRUE(both.ignored_fields.empty());
  EXPECT_THAT(ParseError(With(TinyQwen3Moe(), "num_local_experts", "16")),
              HasSubstr("field \"num_local_experts\": 16 disagrees with num_experts 8"));
}

TEST(Qwen3MoeTest, SparseLayers) {
  const auto sparse = [](const Fields& fields) { return ParseOk(fields).moe.sparse_layers; };
  const Fields six = With(TinyQwen3Moe(), "num_hidden_layers", "6");
  EXPECT_THAT(sparse(With(six, "decoder_sparse_step", "2")),
              ElementsAre(false, true, false, true, false, true));
  EXPECT_THAT(sparse(With(six, "decoder_sparse_step", "3")),
              ElementsAre(false, false, true, false, false, true));
  EXPECT_THAT(sparse(With(six, "mlp_only_layers", "[0, 4]")),
              ElementsAre(false, true, true, true, false, true));
  EXPECT_THAT(sparse(With(With(six, "mlp_only_layers", "[1]"), "decoder_sparse_step", "2")),
              ElementsAre(false, false, false, true, false, true));
  EXPECT_THAT(sparse(With(six, "mlp_only_layers", "null")), Each(true));
  EXPECT_THAT(sparse(With(six, "mlp_only_layers", "[]")), Each(true));
  EXPECT_THAT(sparse(With(six, "decoder_sparse_step", "7")), Each(false));
  // No experts: every layer dense, whatever num_experts_per_tok says.
  const ModelConfig dense = ParseOk(With(six, "num_experts", "0"));
  EXPECT_THAT(dense.moe.sparse_layers, ElementsAre(false, false, false, false, false, false));
  EXPECT_EQ(dense.moe.num_experts, 0);
  EXPECT_EQ(dense.moe.top_k, 0);
}

TEST(Qwen3MoeTest, AttentionBiasAndSlidingWindow) {
  const ModelConfig bias = ParseOk(With(TinyQwen3Moe(), "attention_bias", "true"));
  EXPECT_TRUE(bias.qkv_bias);
  EXPECT_TRUE(bias.o_bias);
  EXPECT_FALSE(bias.mlp_bias);
  EXPECT_FALSE(ParseOk(TinyQwen3Moe()).qkv_bias);
  // use_sliding_window: sliding_window on every layer (no max_window_layers rule).
  const Fields on =
      With(With(TinyQwen3Moe(), "use_sliding_window", "true"), "max_window_layers", "1");
  EXPECT_THAT(ParseOk(on).sliding_window, ElementsAre(4096, 4096, 4096));
  EXPECT_THAT(ParseOk(on).ignored_fields, ElementsAre("max_window_layers"));
  EXPECT_THAT(ParseOk(With(on, "sliding_window", "64")).sliding_window, ElementsAre(64, 64, 64));
  EXPECT_THAT(ParseOk(With(on, "sliding_window", "null")).sliding_window, Each(0));
  EXPECT_THAT(ParseOk(With(TinyQwen3Moe(), "sliding_window", "64")).sliding_window, Each(0));
  EXPECT_THAT(ParseError(With(on, "layer_types", FullAttention(3))),
              HasSubstr("field \"layer_types[0]\": \"full_attention\" contradicts"));
}

TEST(Qwen3MoeTest, RefusalsNameTheField) {
  const std::vector<RefusalCase> cases = {
      {"num_experts_per_tok", "9", "must be an integer in [1, 8]"},
      {"num_experts_per_tok", "0", "must be an integer in [1, 8]"},
      {"num_experts", "-1", "must be an integer in [0, "},
      {"decoder_sparse_step", "0", "must be an integer in [1, "},
      {"moe_intermediate_size", "0", "must be an integer in [1, "},
      {"mlp_only_layers", "2", "must be a list of layer indices"},
      {"shared_expert_intermediate_size", "768", "a shared expert (qwen2_moe) is not supported"},
      {"norm_topk_prob", "null", "must be true or false"},
      {"mlp_bias", "true", "true is not supported for model_type \"qwen3_moe\""},
      {"n_routed_experts", "8", "mixture-of-experts is not supported"},
      {"kv_lora_rank", "512", "multi-head latent attention is not supported"},
      {"first_k_dense_replace", "1", "mixture-of-experts is not supported"},
      {"quantization_config", R"({"quant_method": "fp8"})", "quantized weights"},
  };
  ExpectRefusals(TinyQwen3Moe(), cases);
  EXPECT_THAT(ParseError(With(TinyQwen3Moe(), "mlp_only_layers", "[0, 3]")),
              HasSubstr("field \"mlp_only_layers[1]\": must be an integer in [0, 2], got 3"));
  EXPECT_THAT(ParseError(With(TinyQwen3Moe(), "mlp_only_layers", "[-1]")),
              HasSubstr("field \"mlp_only_layers[0]\": must be an integer in [0, 2]"));
  for (const char* value : {"0", "null"}) {
    EXPECT_TRUE(ParseOk(With(TinyQwen3Moe(), "shared_expert_intermediate_size", value))
                    .ignored_fields.empty());
  }
  // Metadata of the MoE training.
  EXPECT_THAT(ParseOk(With(With(TinyQwen3Moe(), "output_router_logits", "false"),
                           "router_aux_loss_coef", "0.001"))
                  .ignored_fields,
              ElementsAre("output_router_logits", "router_aux_loss_coef"));
}

// --- Refusals
// --------------------------------------------------------------------------------------

TEST(RefusalTest, UnsupportedComputationsAreRefusedNamingTheField) {
  const std::vector<RefusalCase> cases = {
      {"num_experts", "8", "mixture-of-experts is not supported"},
      {"num_local_experts", "8", "mixture-of-experts"},
      {"num_experts_per_tok", "2", "mixture-of-experts"},
      {"moe_intermediate_size", "768", "mixture-of-experts"},
      {"decoder_sparse_step", "1", "mixture-of-experts"},
      {"shared_expert_intermediate_size", "20480", "mixture-of-experts"},
      {"router_aux_loss_coef", "0.001", "mixture-of-experts"},
      {"output_router_logits", "false", "mixture-of-experts"},
      {"n_routed_experts", "64", "mixture-of-experts"},
      {"norm_topk_prob", "true", "mixture-of-experts"},
      {"kv_lora_rank", "512", "multi-head latent attention is not supported"},
      {"q_lora_rank", "1536", "multi-head latent attention"},
      {"qk_rope_head_dim", "64", "multi-head latent attention"},
      {"partial_rotary_factor", "0.5", "partial rotary embedding is not supported"},
      {"quantization_config", R"({"quant_method": "gptq", "bits": 4})", "quantized weights"},
      {"attn_logit_softcapping", "50.0", "logit soft-capping"},
      {"final_logit_softcapping", "30.0", "logit soft-capping"},
      {"per_layer_config", R"({"0": {"head_dim": 32}})", "per-layer configuration"},
      {"hidden_act", "\"gelu\"", "activation \"gelu\" is not supported"},
      {"hidden_act", "\"gelu_pytorch_tanh\"", "is not supported"},
      {"is_encoder_decoder", "true", "only false is supported"},
      {"add_cross_attention", "true", "only false is supported"},
      {"pruned_heads", R"({"0": [1]})", "only {} is supported"},
      {"rope_interleaved", "true", "only false is supported"},
  };
  ExpectRefusals(TinyLlama(), cases);
  EXPECT_THAT(ParseError(With(Tiny("qwen2"), "use_mrope", "true")),
              HasSubstr("field \"use_mrope\": only false is supported"));
  // The MoE and MLA fields the MoE architectures read stay refused for the dense ones.
  for (const char* type : {"qwen2", "qwen3", "mistral", "phi3"}) {
    for (const auto& [field, value] : Fields{{"num_experts", "8"},
                                             {"mlp_only_layers", "[]"},
                                             {"decoder_sparse_step", "1"},
                                             {"n_routed_experts", "64"},
                                             {"kv_lora_rank", "512"}}) {
      EXPECT_THAT(ParseError(With(Tiny(type), field, value)),
                  HasSubstr(absl::StrCat("field \"", field, "\"")))
          << type << " " << field;
    }
  }
}

TEST(RefusalTest, NeutralValuesOfRefusedFieldsAreAccepted) {
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, std::string>>{{"partial_rotary_factor", "1.0"},
                                                        {"quantization_config", "null"},
                                                        {"final_logit_softcapping", "null"},
                                                        {"num_experts", "null"},
                                                        {"is_encoder_decoder", "false"},
                                                        {"pruned_heads", "{}"}}) {
    const ModelConfig c = ParseOk(With(TinyLlama(), field, value));
    EXPECT_TRUE(c.ignored_fields.empty()) << field;
  }
}

TEST(RefusalTest, UnsupportedRopeTypesAreRefused) {
  for (const char* type : {"linear", "dynamic", "yarn", "longrope", "su", "ntk", "mrope"}) {
    EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling",
                                absl::StrCat(R"({"type": ")", type, R"(", "factor": 2.0})"))),
                HasSubstr(absl::StrCat("field \"rope_scaling.type\": RoPE type \"", type,
                                       "\" is not supported")));
    EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling",
                                absl::StrCat(R"({"rope_type": ")", type, R"(", "factor": 2.0})"))),
                HasSubstr("field \"rope_scaling.rope_type\""));
    EXPECT_THAT(ParseError(With(TinyLlama(), "rope_parameters",
                                absl::StrCat(R"({"rope_type": ")", type,
                                             R"(", "rope_theta": 10000.0, "factor": 2.0})"))),
                HasSubstr("field \"rope_parameters.rope_type\""));
  }
}

TEST(RefusalTest, MalformedRopeParametersAreRefused) {
  const std::string llama3_missing_factor =
      R"({"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192})";
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling", llama3_missing_factor)),
              HasSubstr("field \"rope_scaling.factor\": required"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling",
                              R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})")),
              HasSubstr("field \"rope_scaling.high_freq_factor\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling", R"({"rope_type": "default", "f": 1})")),
              HasSubstr("field \"rope_scaling.f\": unknown field for RoPE type \"default\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling", R"({"type": "default", "factor": 2})")),
              HasSubstr("field \"rope_scaling.factor\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling", "\"llama3\"")),
              HasSubstr("field \"rope_scaling\": must be an object or null"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_scaling", R"({"type": "llama3",
                                                                 "rope_type": "default"})")),
              HasSubstr("field \"rope_scaling.type\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_parameters",
                              R"({"rope_type": "default", "partial_rotary_factor": 0.5})")),
              HasSubstr("field \"rope_parameters.partial_rotary_factor\""));
  EXPECT_THAT(ParseError(With(With(TinyLlama(), "rope_parameters", R"({"rope_type": "default"})"),
                              "rope_scaling", R"({"rope_type": "default"})")),
              HasSubstr("field \"rope_scaling\": given together with rope_parameters"));
  EXPECT_THAT(ParseError(With(With(TinyLlama(), "rope_parameters",
                                   R"({"rope_type": "default", "rope_theta": 1000.0})"),
                              "rope_theta", "2000.0")),
              HasSubstr("field \"rope_theta\": 2000 disagrees with 1000"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_theta", "0")),
              HasSubstr("field \"rope_theta\": must be a positive number"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rope_parameters", R"({"rope_theta": "big"})")),
              HasSubstr("field \"rope_parameters.rope_theta\""));
}

// Metadata that real hub checkpoints carry and that cannot change the math (fine-tuning tools'
// stamps, the outputs to ignore at inference) is accepted and reported, for every model_type.
TEST(MetadataTest, HarmlessMetadataIsAcceptedAndReported) {
  for (const char* model_type : {"llama", "qwen2", "qwen3", "mistral", "phi3", "qwen3_moe"}) {
    SCOPED_TRACE(model_type);
    Fields fields = Tiny(model_type);
    fields["unsloth_version"] = "\"2025.3.1\"";
    fields["unsloth_fixed"] = "true";
    fields["keys_to_ignore_at_inference"] = "[\"past_key_values\"]";
    fields["_from_model_config"] = "true";
    absl::StatusOr<ModelConfig> c = ParseModelConfig(ToJson(fields));
    ASSERT_TRUE(c.ok()) << c.status();
    for (const char* field :
         {"unsloth_version", "unsloth_fixed", "keys_to_ignore_at_inference", "_from_model_config"}) {
      EXPECT_THAT(c->ignored_fields, ::testing::Contains(field));
    }
  }
}

// docs/models.md lists exactly the accepted metadata fields, in order.
TEST(MetadataTest, DocumentedMetadataFieldsMatchTheCode) {
  const std::vector<std::string> documented =
      tileplan::testing::DocumentedNames("docs/models.md", "### Metadata fields", "- `");
  const std::vector<std::string> names = MetadataFieldNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(documented, names);
}

TEST(RefusalTest, UnknownFieldsAreRefusedNamingThem) {
  EXPECT_THAT(ParseError(With(TinyLlama(), "num_hiden_layers", "3")),
              HasSubstr("field \"num_hiden_layers\": unknown field for model_type \"llama\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rms_norm_epsilon", "1e-5")),
              HasSubstr("field \"rms_norm_epsilon\": unknown field"));
  // Fields of another architecture are unknown here.
  EXPECT_THAT(ParseError(With(TinyLlama(), "use_sliding_window", "false")),
              HasSubstr("field \"use_sliding_window\": unknown field"));
  EXPECT_THAT(ParseError(With(Tiny("qwen2"), "pretraining_tp", "1")),
              HasSubstr("field \"pretraining_tp\": unknown field for model_type \"qwen2\""));
}

TEST(RefusalTest, RequiredFieldsAndRanges) {
  for (const char* field :
       {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "vocab_size", "max_position_embeddings", "rms_norm_eps", "model_type"}) {
    EXPECT_THAT(ParseError(Without(TinyLlama(), field)),
                HasSubstr(absl::StrCat("field \"", field, "\": required but missing")));
  }
  for (const char* value : {"0", "-64", "64.0", "\"64\"", "null", "true", "16777217"}) {
    EXPECT_THAT(ParseError(With(TinyLlama(), "hidden_size", value)),
                HasSubstr("field \"hidden_size\": must be an integer in [1, 16777216]"))
        << value;
  }
  EXPECT_THAT(ParseError(With(TinyLlama(), "num_hidden_layers", "100000")),
              HasSubstr("field \"num_hidden_layers\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rms_norm_eps", "0")),
              HasSubstr("field \"rms_norm_eps\": must be a positive number"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "rms_norm_eps", "\"1e-5\"")),
              HasSubstr("field \"rms_norm_eps\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "num_key_value_heads", "3")),
              HasSubstr("field \"num_key_value_heads\": 3 does not divide num_attention_heads 4"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "num_key_value_heads", "0")),
              HasSubstr("field \"num_key_value_heads\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "head_dim", "7")),
              HasSubstr("field \"head_dim\": rotary embedding needs an even head_dim"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "hidden_size", "66")),
              HasSubstr("field \"num_attention_heads\": 4 does not divide hidden_size 66"));
  EXPECT_TRUE(
      ParseModelConfig(ToJson(With(With(TinyLlama(), "hidden_size", "66"), "head_dim", "16")))
          .ok());
  EXPECT_THAT(ParseError(With(TinyLlama(), "tie_word_embeddings", "\"yes\"")),
              HasSubstr("field \"tie_word_embeddings\""));
}

TEST(RefusalTest, ModelTypeAndDType) {
  EXPECT_THAT(ParseError(Tiny("gemma2")),
              HasSubstr("field \"model_type\": \"gemma2\" is not supported"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "model_type", "3")), HasSubstr("field \"model_type\""));
  EXPECT_THAT(ParseError(With(TinyLlama(), "torch_dtype", "\"float64\"")),
              HasSubstr("field \"torch_dtype\": dtype \"float64\" is not supported"));
  EXPECT_THAT(ParseError(With(TinyLlama(), "dtype", "\"auto\"")), HasSubstr("field \"dtype\""));
  EXPECT_THAT(
      ParseError(With(With(TinyLlama(), "dtype", "\"bfloat16\""), "torch_dtype", "\"float16\"")),
      HasSubstr("field \"torch_dtype\": disagrees with dtype"));
}

TEST(RefusalTest, NotAnObjectOrNotJson) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig("[]");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("config is a JSON array"));
  config = ParseModelConfig("{\"model_type\": \"llama\",}");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("at byte"));
  config = ParseModelConfig(R"({"model_type": "llama", "model_type": "qwen2"})");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("duplicate object key \"model_type\""));
}

TEST(RefusalTest, MetadataIsAcceptedAndListedSorted) {
  Fields fields = TinyLlama();
  fields["transformers_version"] = "\"5.0.0\"";
  fields["bos_token_id"] = "1";
  fields["eos_token_id"] = "[2, 3]";
  fields["pad_token_id"] = "null";
  fields["architectures"] = "[\"LlamaForCausalLM\"]";
  fields["initializer_range"] = "0.02";
  fields["use_cache"] = "true";
  fields["attention_dropout"] = "0.1";
  fields["_name_or_path"] = "\"x\"";
  fields["pretraining_tp"] = "1";
  fields["output_hidden_states"] = "false";
  const ModelConfig c = ParseOk(fields);
  EXPECT_THAT(c.ignored_fields,
              ElementsAre("_name_or_path", "architectures", "attention_dropout", "bos_token_id",
                          "eos_token_id", "initializer_range", "output_hidden_states",
                          "pad_token_id", "pretraining_tp", "transformers_version", "use_cache"));
}

// --- Files
// ----------------------------------------------------------------------------------------

TEST(LoadModelConfigTest, ReadsDirectoryOrFile) {
  const std::filesystem::path dir = testing::MakeTempDir("config");
  testing::WriteFile(dir / "config.json", *BundledConfigJson("qwen3-0.6b"));
  absl::StatusOr<ModelConfig> from_dir = LoadModelConfig(dir);
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  EXPECT_EQ(from_dir->num_layers, 28);
  absl::StatusOr<ModelConfig> from_file = LoadModelConfig(dir / "config.json");
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(from_file->hidden_size, 1024);
}

TEST(LoadModelConfigTest, ErrorsNameTheFile) {
  const std::filesystem::path dir = testing::MakeTempDir("config_bad");
  absl::StatusOr<ModelConfig> missing = LoadModelConfig(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr((dir / "config.json").string()));

  testing::WriteFile(dir / "config.json", ToJson(With(TinyLlama(), "num_experts", "8")));
  absl::StatusOr<ModelConfig> refused = LoadModelConfig(dir);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr((dir / "config.json").string() + ": field \"num_experts\""));
}

}  // namespace
}  // namespace tileplan::models
