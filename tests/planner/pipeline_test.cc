// The prefill and decode pipelines on the lowered graph of every bundled config: they
// verify, apply every fusion, and leave the expected regions per decoder layer.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/lowering.h"
#include "planner/pipelines.h"
#include "regions/printer.h"
#include "regions/verifier.h"
#include "tests/testing/tiny_models.h"

namespace tileplan::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

absl::StatusOr<ir::Graph> Lower(const std::string& name) {
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(name);
  if (!config.ok()) return config.status();
  return models::LowerModel(*config);
}

bool IsView(const ir::Region& r) { return r.kind == "reshape" || r.kind == "split"; }

// The layer a region belongs to, from its first result's name ("l3.attn" -> 3); -1 for
// regions outside the layers.
int LayerOf(const ir::Graph& g, const ir::Region& r) {
  const std::string& name = g.value(r.results[0]).name;
  if (!absl::StartsWith(name, "l")) return -1;
  const size_t dot = name.find('.');
  int layer = 0;
  if (dot == std::string::npos || !absl::SimpleAtoi(name.substr(1, dot - 1), &layer)) return -1;
  return layer;
}

// Non-view region kinds per layer, in order.
std::map<int, std::vector<std::string>> LayerKinds(const ir::Graph& g) {
  std::map<int, std::vector<std::string>> kinds;
  for (const ir::Region& r : g.regions()) {
    if (!IsView(r)) kinds[LayerOf(g, r)].push_back(r.kind);
  }
  return kinds;
}

// The non-view kinds of every decoder layer after the decode pipeline for `batch` (unbound
// when absent), and the kinds outside the layers.
void ExpectDecodeLayers(const std::string& model, std::optional<int64_t> batch,
                        const std::vector<std::string>& layer_kinds) {
  SCOPED_TRACE(absl::StrCat(model, " decode B=", batch ? absl::StrCat(*batch) : "B"));
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(model);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<ir::Graph> g = models::LowerModel(*config);
  ASSERT_TRUE(g.ok()) << g.status();
  PipelineOptions options;
  options.batch = batch;
  absl::StatusOr<PassPipeline> pipeline = BuildDecodePipeline(options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  absl::StatusOr<bool> changed = pipeline->Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(ir::Verify(*g).ok());
  const std::map<int, std::vector<std::string>> kinds = LayerKinds(*g);
  for (int layer = 0; layer < config->num_layers; ++layer) {
    ASSERT_TRUE(kinds.count(layer)) << "layer " << layer;
    EXPECT_THAT(kinds.at(layer), ElementsAreArray(layer_kinds)) << "layer " << layer;
  }
  EXPECT_THAT(kinds.at(-1), ElementsAre("embedding", "rms_norm", "lm_head"));
  for (const ir::Region& r : g->regions()) {
    EXPECT_EQ(r.phase, ir::Phase::kDecode) << ir::PrintRegion(*g, r);
  }
  EXPECT_EQ(g->value(g->FindValue("tokens")).type.ToString(),
            batch ? absl::StrCat("i32[", *batch, ",1]") : "i32[B,1]");
}

class BundledPipelineTest : public ::testing::TestWithParam<std::string> {};

// Batch 1 (up to the norm_linear_max_rows of 4): both norms of a layer fold into the GEMVs
// after them, six kernels per layer.
TEST_P(BundledPipelineTest, SmallBatchDecodeAppliesEveryFusion) {
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(GetParam());
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string rope =
      config->qk_norm ? "qk_norm_rope_kv_write_attention" : "rope_kv_write_attention";
  for (int64_t batch : {1, 4}) {
    ExpectDecodeLayers(
        GetParam(), batch,
        {"rms_norm_linear", rope, "linear_residual", "rms_norm_linear_swiglu", "linear_residual"});
  }
}

// A batch above the limits keeps the norms and the attention apart (eight kernels per layer:
// its linears and attention take the families made for many rows); a batch left unbound
// keeps the norms (its rows are unknown) but fuses the attention: seven.
TEST_P(BundledPipelineTest, LargeOrUnboundBatchDecodeKeepsTheNorms) {
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(GetParam());
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string rope = config->qk_norm ? "qk_norm_rope_kv_write" : "rope_kv_write";
  const std::vector<std::string> large = {"rms_norm",      "linear",          rope,
                                          "attention",     "linear_residual", "rms_norm",
                                          "linear_swiglu", "linear_residual"};
  ExpectDecodeLayers(GetParam(), 5, large);
  ExpectDecodeLayers(GetParam(), 16, large);
  ExpectDecodeLayers(GetParam(), std::nullopt,
                     {"rms_norm", "linear", rope + "_attention", "linear_residual", "rms_norm",
                      "linear_swiglu", "linear_residual"});
}

TEST_P(BundledPipelineTest, PrefillVerifiesWithBoundBucket) {
  absl::StatusOr<ir::Graph> g = Lower(GetParam());
  ASSERT_TRUE(g.ok()) << g.status();
  PipelineOptions options;
  options.tokens = 64;
  options.batch = 2;
  absl::StatusOr<PassPipeline> pipeline = BuildPrefillPipeline(options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(pipeline->Run(*g).ok());
  EXPECT_EQ(g->value(g->FindValue("positions")).type.ToString(), "i32[2,64]");
  EXPECT_EQ(g->value(g->FindValue("logits")).type.dims[1].extent(), 64);
  // Prefill keeps its norms (its linears run on cuBLASLt) and the RoPE + KV-write region
  // apart from the attention (the fused kind is a decode kernel).
  std::map<std::string, int> kinds;
  for (const ir::Region& r : g->regions()) {
    EXPECT_FALSE(absl::StartsWith(r.kind, "rms_norm_linear")) << ir::PrintRegion(*g, r);
    ++kinds[r.kind];
  }
  EXPECT_GT(kinds["attention"], 0);
  EXPECT_EQ(kinds["rope_kv_write_attention"] + kinds["qk_norm_rope_kv_write_attention"], 0);
  // A second run finds nothing left to do.
  absl::StatusOr<bool> again = pipeline->Run(*g);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
}

// The bundled configs of dense attention and MLP layers (MoE and MLA: MoePipelineTest).
std::vector<std::string> DenseBundledConfigs() {
  std::vector<std::string> dense;
  for (const std::string& name : models::BundledConfigNames()) {
    absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(name);
    if (config.ok() && !config->is_mla && config->moe.num_experts == 0) dense.push_back(name);
  }
  return dense;
}

INSTANTIATE_TEST_SUITE_P(Configs, BundledPipelineTest, ::testing::ValuesIn(DenseBundledConfigs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-' || c == '.') c = '_';
                           }
                           return name;
                         });

// Qwen3-0.6B decode at batch 1: the layer of docs/planner.md, region by region.
TEST(Qwen3DecodeTest, LayerHasTheFiveExpectedKernels) {
  absl::StatusOr<ir::Graph> g = Lower("qwen3-0.6b");
  ASSERT_TRUE(g.ok()) << g.status();
  PipelineOptions options;
  options.batch = 1;
  absl::StatusOr<PassPipeline> pipeline = BuildDecodePipeline(options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(pipeline->Run(*g).ok());

  std::vector<std::string> layer0;
  for (const ir::Region& r : g->regions()) {
    if (LayerOf(*g, r) == 0) {
      layer0.push_back(absl::StrCat(r.kind, IsView(r) ? " (view)" : "", " <- [",
                                    absl::StrJoin(r.fused_from, ", "), "]"));
    }
  }
  EXPECT_THAT(layer0,
              ElementsAre("rms_norm_linear <- [rms_norm, linear]",
                          "qk_norm_rope_kv_write_attention <- [split, reshape, reshape, reshape, "
                          "rms_norm, rms_norm, rope, rope, kv_write, kv_write, attention]",
                          "reshape (view) <- []", "linear_residual <- [linear, add]",
                          "rms_norm_linear_swiglu <- [rms_norm, linear, split, silu, mul]",
                          "linear_residual <- [linear, add]"));

  const ir::Value& qkv = g->value(g->FindValue("model.layers.0.self_attn.qkv_proj.weight"));
  EXPECT_THAT(qkv.checkpoint_tensors, ElementsAre("model.layers.0.self_attn.q_proj.weight",
                                                  "model.layers.0.self_attn.k_proj.weight",
                                                  "model.layers.0.self_attn.v_proj.weight"));
  EXPECT_EQ(qkv.type.ToString(), "bf16[4096,1024]");
  const ir::Value& gate_up = g->value(g->FindValue("model.layers.0.mlp.gate_up_proj.weight"));
  EXPECT_THAT(gate_up.checkpoint_tensors, ElementsAre("model.layers.0.mlp.gate_proj.weight",
                                                      "model.layers.0.mlp.up_proj.weight"));
  // Every checkpoint tensor is still bound exactly once.
  absl::StatusOr<ir::Graph> primitive = Lower("qwen3-0.6b");
  ASSERT_TRUE(primitive.ok());
  std::vector<std::string> before, after;
  for (ir::ValueId w : primitive->weights()) {
    for (const std::string& t : primitive->value(w).checkpoint_tensors) before.push_back(t);
  }
  for (ir::ValueId w : g->weights()) {
    for (const std::string& t : g->value(w).checkpoint_tensors) after.push_back(t);
  }
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(before, after);
}

// DeepSeek-V2-Lite and Qwen3-30B-A3B decode at batch 1: the dense parts fuse as in the dense
// models; each MoE block (router, top-k, experts, the shared experts of DeepSeek, and the
// residual add) becomes one moe region after its own rms_norm (with fuse_norm_moe, one
// rms_norm_moe region with it), and with the residual inside it the next layer's input norm
// folds into that layer's first GEMV.
TEST(MoePipelineTest, DecodeLayersOfTheBundledMoeModels) {
  for (const bool norm_moe : {false, true}) {
    SCOPED_TRACE(norm_moe ? "fuse_norm_moe" : "default");
    const std::vector<std::string> block = norm_moe ? std::vector<std::string>{"rms_norm_moe"}
                                                    : std::vector<std::string>{"rms_norm", "moe"};
    const std::vector<std::string> norm =
        norm_moe ? std::vector<std::string>{"rms_norm"} : std::vector<std::string>{};
    auto layer = [](std::vector<std::string> head, const std::vector<std::string>& tail) {
      head.insert(head.end(), tail.begin(), tail.end());
      return head;
    };
    // DeepSeek: q_proj and kv_a_proj_with_mqa packed behind the input norm; the query's RoPE,
    // the latent norm, the key's RoPE, both cache writes and the attention become one
    // mla_kv_write_attention.
    const std::vector<std::string> mla = {"rms_norm_linear", "mla_kv_write_attention",
                                          "linear_residual"};
    using Kinds = std::vector<std::string>;
    const Kinds qwen3 =
        layer({"rms_norm_linear", "qk_norm_rope_kv_write_attention", "linear_residual"}, block);
    const std::vector<std::string> routed = {"moe_router",    "moe_topk",   "expert_linear",
                                             "expert_linear", "silu",       "mul",
                                             "expert_linear", "moe_combine"};
    const std::vector<std::string> shared = {"linear", "linear", "silu", "mul", "linear", "add"};
    for (const auto& [model, layer0, moe_layer, fused_from] :
         std::vector<std::tuple<std::string, Kinds, Kinds, Kinds>>{
             {"deepseek-v2-lite", layer(mla, {"rms_norm_linear_swiglu", "linear_residual"}),
              layer(mla, block), layer(norm, layer(layer(routed, shared), {"add"}))},
             {"qwen3-30b-a3b", qwen3, qwen3, layer(norm, layer(routed, {"add"}))}}) {
      SCOPED_TRACE(model);
      absl::StatusOr<ir::Graph> g = Lower(model);
      ASSERT_TRUE(g.ok()) << g.status();
      PipelineOptions options;
      options.batch = 1;
      options.fuse_moe = true;
      options.fuse_norm_moe = norm_moe;
      absl::StatusOr<PassPipeline> pipeline = BuildDecodePipeline(options);
      ASSERT_TRUE(pipeline.ok()) << pipeline.status();
      ASSERT_TRUE(pipeline->Run(*g).ok());
      ASSERT_TRUE(ir::Verify(*g).ok());
      const std::map<int, std::vector<std::string>> kinds = LayerKinds(*g);
      EXPECT_THAT(kinds.at(0), ElementsAreArray(layer0));
      EXPECT_THAT(kinds.at(1), ElementsAreArray(moe_layer));
      EXPECT_THAT(kinds.at(2), ElementsAreArray(moe_layer));
      EXPECT_THAT(kinds.at(-1), ElementsAre("embedding", "rms_norm", "lm_head"));
      const ir::Region& moe = g->regions()[g->value(g->FindValue("l2.out")).producer];
      EXPECT_EQ(moe.kind, norm_moe ? "rms_norm_moe" : "moe");
      EXPECT_THAT(moe.fused_from, ElementsAreArray(fused_from));
      EXPECT_EQ(moe.attrs.Has("eps"), norm_moe);
    }
  }
}

// The regions of each kind in a bundled model's decode graph after the decode pipeline;
// empty after a test failure.
std::map<std::string, int> DecodeKinds(const std::string& model, const PipelineOptions& options) {
  std::map<std::string, int> kinds;
  absl::StatusOr<ir::Graph> g = Lower(model);
  EXPECT_TRUE(g.ok()) << g.status();
  absl::StatusOr<PassPipeline> pipeline = BuildDecodePipeline(options);
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  if (!g.ok() || !pipeline.ok()) return kinds;
  const absl::StatusOr<bool> run = pipeline->Run(*g);
  EXPECT_TRUE(run.ok()) << run.status();
  const absl::Status verified = ir::Verify(*g);
  EXPECT_TRUE(verified.ok()) << verified;
  if (!run.ok() || !verified.ok()) return kinds;
  for (const ir::Region& r : g->regions()) ++kinds[r.kind];
  return kinds;
}

// PipelineOptions::fuse_rope_attention off leaves every decode attention its own region
// (free to take any attention family), with the RoPE + KV write before it.
TEST(DecodePipelineTest, FuseRopeAttentionOffKeepsTheAttention) {
  PipelineOptions options;
  options.batch = 1;
  options.fuse_rope_attention = false;
  std::map<std::string, int> kinds = DecodeKinds("qwen3-30b-a3b", options);
  EXPECT_EQ(kinds["qk_norm_rope_kv_write_attention"], 0);
  EXPECT_EQ(kinds["qk_norm_rope_kv_write"], 48);
  EXPECT_EQ(kinds["attention"], 48);
}

// PipelineOptions::rope_attention_max_batch reaches the pass: a batch of 16 keeps its
// attention unfused under the default limit of 4 and fuses under a limit of 16.
TEST(DecodePipelineTest, RopeAttentionBatchLimitIsAnOption) {
  for (const int64_t limit : {int64_t{4}, int64_t{16}}) {
    SCOPED_TRACE(limit);
    PipelineOptions options;
    options.batch = 16;
    options.rope_attention_max_batch = limit;
    std::map<std::string, int> kinds = DecodeKinds("qwen3-0.6b", options);
    EXPECT_EQ(kinds["qk_norm_rope_kv_write_attention"], limit >= 16 ? 28 : 0);
    EXPECT_EQ(kinds["attention"], limit >= 16 ? 0 : 28);
  }
}

TEST(DecodePipelineTest, NormLinearRowLimitIsAnOption) {
  for (const int64_t limit : {int64_t{4}, int64_t{16}}) {
    SCOPED_TRACE(limit);
    PipelineOptions options;
    options.batch = 16;
    options.norm_linear_max_rows = limit;
    std::map<std::string, int> kinds = DecodeKinds("qwen3-0.6b", options);
    EXPECT_EQ(kinds["rms_norm_linear"], limit >= 16 ? 28 : 0);
    EXPECT_EQ(kinds["rms_norm_linear_swiglu"], limit >= 16 ? 28 : 0);
    EXPECT_EQ(kinds["rms_norm"], limit >= 16 ? 1 : 57);
  }
}

// The prefill pipeline keeps the MoE blocks' primitive regions (a grouped-GEMM form of the
// fused kind is still to come).
TEST(MoePipelineTest, PrefillKeepsThePrimitiveExperts) {
  for (const std::string model : {"deepseek-v2-lite", "qwen3-30b-a3b"}) {
    SCOPED_TRACE(model);
    absl::StatusOr<ir::Graph> g = Lower(model);
    ASSERT_TRUE(g.ok()) << g.status();
    PipelineOptions options;
    options.tokens = 128;
    options.batch = 1;
    absl::StatusOr<PassPipeline> pipeline = BuildPrefillPipeline(options);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    ASSERT_TRUE(pipeline->Run(*g).ok());
    std::map<std::string, int> kinds;
    for (const ir::Region& r : g->regions()) ++kinds[r.kind];
    EXPECT_EQ(kinds["moe"], 0);
    EXPECT_GT(kinds["moe_combine"], 0);
  }
}

}  // namespace
}  // namespace tileplan::planner
