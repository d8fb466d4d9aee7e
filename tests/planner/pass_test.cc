// The pass registry, PassPipeline (verification, errors, IR printing) and the pipelines'
// composition.
#include "planner/pass.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/pipelines.h"
#include "regions/parser.h"
#include "regions/printer.h"

namespace tileplan::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kGraph[] = R"(graph @g {
  input %x: f32[B,T,8]
  %y: f32[B,T,8] = silu(%x)
  %unused: f32[B,T,8] = silu(%y)
  output %y
}
)";

ir::Graph Parse(const char* text) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : ir::Graph();
}

// Test passes with fixed behaviour.
class FailingPass : public Pass {
 public:
  absl::string_view name() const override { return "failing"; }
  absl::StatusOr<bool> Run(ir::Graph&) override {
    return absl::FailedPreconditionError("region #0 'silu' (%y): not supported");
  }
};

class BreakingPass : public Pass {
 public:
  absl::string_view name() const override { return "breaking"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    graph.mutable_value(graph.FindValue("y")).type.dims[2] = ir::Dim::Static(9);
    return true;
  }
};

class NoOpPass : public Pass {
 public:
  absl::string_view name() const override { return "no_op"; }
  absl::StatusOr<bool> Run(ir::Graph&) override { return false; }
};

PassFactory Factory(std::unique_ptr<Pass> (*make)()) {
  return [make](const PassOptions&) -> absl::StatusOr<std::unique_ptr<Pass>> { return make(); };
}

TEST(PassRegistryTest, GlobalRegistryHasEveryPass) {
  EXPECT_THAT(GlobalPassRegistry().Names(),
              ElementsAre("dce", "fuse_mla_kv_write", "fuse_mla_kv_write_attention", "fuse_moe",
                          "fuse_norm_linear", "fuse_qk_norm_rope_kv_write", "fuse_residual",
                          "fuse_rope_kv_write_attention", "fuse_swiglu", "last_token_logits",
                          "pack_gate_up", "pack_qkv", "specialize_phase"));
  for (const std::string& name : GlobalPassRegistry().Names()) {
    EXPECT_FALSE(GlobalPassRegistry().Summary(name).empty()) << name;
    absl::StatusOr<std::unique_ptr<Pass>> pass = GlobalPassRegistry().Create(name, PassOptions());
    ASSERT_TRUE(pass.ok()) << pass.status();
    EXPECT_EQ((*pass)->name(), name);
  }
}

TEST(PassRegistryTest, UnknownPassListsTheKnownOnes) {
  absl::StatusOr<std::unique_ptr<Pass>> pass =
      GlobalPassRegistry().Create("fuse_everything", PassOptions());
  EXPECT_EQ(pass.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(pass.status().message(),
              HasSubstr("unknown pass 'fuse_everything' (known passes: dce, "));
}

TEST(PassRegistryTest, RejectsDuplicatesAndBadNames) {
  PassRegistry registry;
  auto make = Factory([]() -> std::unique_ptr<Pass> { return std::make_unique<NoOpPass>(); });
  ASSERT_TRUE(registry.Register("no_op", "does nothing", make).ok());
  EXPECT_EQ(registry.Register("no_op", "again", make).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register("no-op", "", make).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("other", "", nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.Has("no_op"));
  EXPECT_FALSE(registry.Has("other"));
}

TEST(PassRegistryTest, FactoryErrorsNameThePass) {
  PassOptions options;
  options.phase = ir::Phase::kDecode;
  options.tokens = 4;
  absl::StatusOr<std::unique_ptr<Pass>> pass =
      GlobalPassRegistry().Create("specialize_phase", options);
  EXPECT_EQ(pass.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pass.status().message(),
              HasSubstr("pass 'specialize_phase': decode binds T = 1, got a token count of 4"));
  options.phase = ir::Phase::kGeneral;
  EXPECT_FALSE(GlobalPassRegistry().Create("specialize_phase", options).ok());
  options.phase = ir::Phase::kPrefill;
  options.batch = 0;
  EXPECT_THAT(GlobalPassRegistry().Create("specialize_phase", options).status().message(),
              HasSubstr("the batch (B) must be positive, got 0"));
  options = PassOptions();
  options.norm_linear_max_rows = -1;
  pass = GlobalPassRegistry().Create("fuse_norm_linear", options);
  EXPECT_EQ(pass.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pass.status().message(),
              HasSubstr("pass 'fuse_norm_linear': norm_linear_max_rows must be >= 0, got -1"));
}

TEST(PassPipelineTest, ReportsWhetherAnyPassChanged) {
  ir::Graph g = Parse(kGraph);
  PassPipeline pipeline;
  pipeline.Add(std::make_unique<NoOpPass>());
  absl::StatusOr<bool> changed = pipeline.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  ASSERT_TRUE(pipeline.Add("dce", PassOptions()).ok());
  changed = pipeline.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_THAT(pipeline.PassNames(), ElementsAre("no_op", "dce"));
  EXPECT_EQ(g.regions().size(), 1u);
}

TEST(PassPipelineTest, PassErrorsCarryThePassName) {
  ir::Graph g = Parse(kGraph);
  PassPipeline pipeline;
  pipeline.Add(std::make_unique<FailingPass>());
  absl::StatusOr<bool> changed = pipeline.Run(g);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(changed.status().message(), "pass 'failing': region #0 'silu' (%y): not supported");
}

TEST(PassPipelineTest, VerifiesAfterEveryPass) {
  ir::Graph g = Parse(kGraph);
  PassPipeline pipeline;
  pipeline.Add(std::make_unique<BreakingPass>());
  pipeline.Add(std::make_unique<NoOpPass>());
  absl::StatusOr<bool> changed = pipeline.Run(g);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(changed.status().message(),
              HasSubstr("pass 'breaking' produced a graph that does not verify: region #0 "
                        "'silu' (%y): result 0 (%y) has type f32[B,T,9]"));
}

TEST(PassPipelineTest, RejectsAnInputThatDoesNotVerify) {
  ir::Graph g = Parse("graph @g {\n  input %x: f32[4]\n  %y: f32[8] = silu(%x)\n}\n");
  PassPipeline pipeline;
  pipeline.Add(std::make_unique<NoOpPass>());
  absl::StatusOr<bool> changed = pipeline.Run(g);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(changed.status().message(), HasSubstr("input graph: region #0 'silu' (%y)"));
}

TEST(PassPipelineTest, PrintsAfterChangedPassesAndMarksUnchangedOnes) {
  ir::Graph g = Parse(kGraph);
  PassPipeline pipeline;
  pipeline.Add(std::make_unique<NoOpPass>());
  ASSERT_TRUE(pipeline.Add("dce", PassOptions()).ok());
  std::ostringstream out;
  PrintOptions print;
  print.after_all = true;
  print.out = &out;
  ASSERT_TRUE(pipeline.Run(g, print).ok());
  EXPECT_EQ(out.str(),
            "// ----- IR after no_op (pass 1 of 2): unchanged\n"
            "// ----- IR after dce (pass 2 of 2)\n" +
                ir::PrintGraph(g));

  ir::Graph g2 = Parse(kGraph);
  std::ostringstream only_dce;
  print.after_all = false;
  print.after = {"dce"};
  print.out = &only_dce;
  ASSERT_TRUE(pipeline.Run(g2, print).ok());
  EXPECT_EQ(only_dce.str(), "// ----- IR after dce (pass 2 of 2)\n" + ir::PrintGraph(g2));
}

TEST(PassPipelineTest, RejectsBadPrintOptions) {
  ir::Graph g = Parse(kGraph);
  PassPipeline pipeline;
  pipeline.Add(std::make_unique<NoOpPass>());
  PrintOptions print;
  print.after = {"dce"};
  std::ostringstream out;
  print.out = &out;
  EXPECT_THAT(pipeline.Run(g, print).status().message(),
              HasSubstr("cannot print after pass 'dce': the pipeline runs no_op"));
  print.after = {"no_op"};
  print.out = nullptr;
  EXPECT_EQ(pipeline.Run(g, print).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PipelinesTest, RunTheFusionPassesThenSpecializeThenFoldDecodeNorms) {
  PipelineOptions options;
  options.tokens = 32;
  absl::StatusOr<PassPipeline> prefill = BuildPrefillPipeline(options);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_THAT(prefill->PassNames(),
              ElementsAre("pack_qkv", "pack_gate_up", "fuse_swiglu", "fuse_qk_norm_rope_kv_write",
                          "fuse_mla_kv_write", "fuse_residual", "dce", "specialize_phase",
                          "fuse_norm_linear"));
  // Decode also fuses the RoPE + KV-write regions into the attention that follows them
  // (dense and latent), and (by default) a MoE block first, while its shared MLP is still
  // whole.
  absl::StatusOr<PassPipeline> decode = BuildDecodePipeline(PipelineOptions());
  ASSERT_TRUE(decode.ok()) << decode.status();
  EXPECT_THAT(decode->PassNames(),
              ElementsAre("fuse_moe", "pack_qkv", "pack_gate_up", "fuse_swiglu",
                          "fuse_qk_norm_rope_kv_write", "fuse_rope_kv_write_attention",
                          "fuse_mla_kv_write", "fuse_mla_kv_write_attention", "fuse_residual",
                          "dce", "specialize_phase", "fuse_norm_linear"));
  PipelineOptions unfused;
  unfused.fuse_moe = false;
  unfused.fuse_rope_attention = false;
  absl::StatusOr<PassPipeline> unfused_decode = BuildDecodePipeline(unfused);
  ASSERT_TRUE(unfused_decode.ok()) << unfused_decode.status();
  EXPECT_THAT(unfused_decode->PassNames(),
              ElementsAre("pack_qkv", "pack_gate_up", "fuse_swiglu", "fuse_qk_norm_rope_kv_write",
                          "fuse_mla_kv_write", "fuse_residual", "dce", "specialize_phase",
                          "fuse_norm_linear"));
}

TEST(PipelinesTest, MoeFusionServesDecodeOnly) {
  PassOptions options;
  options.phase = ir::Phase::kPrefill;
  options.tokens = 16;
  absl::StatusOr<std::unique_ptr<Pass>> pass = GlobalPassRegistry().Create("fuse_moe", options);
  EXPECT_EQ(pass.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pass.status().message(),
              HasSubstr("pass 'fuse_moe': fuse_moe forms decode kernels; it does not run for the "
                        "prefill phase"));
  options = PassOptions();
  options.moe_max_batch = -1;
  pass = GlobalPassRegistry().Create("fuse_moe", options);
  EXPECT_EQ(pass.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pass.status().message(), HasSubstr("moe_max_batch must be >= 0, got -1"));
}

// A MoE block of four tokens: fused while the bound batch is within moe_max_batch, left alone
// above it.
TEST(PipelinesTest, MoeFusionHonoursItsBatchLimit) {
  constexpr char kMoe[] = R"(graph @moe {
  input %x: f32[B,T,8]
  weight %router: f32[4,8] = "router"
  weight %gate: f32[4,4,8] = "gate"
  weight %up: f32[4,4,8] = "up"
  weight %down: f32[4,8,4] = "down"
  %l: f32[B,T,4] = moe_router(%x, %router)
  %ids: i32[B,T,2], %w: f32[B,T,2] = moe_topk(%l) {norm_topk_prob = true, num_groups = 1, scaling = 1.0, top_k = 2, topk_groups = 1}
  %g: f32[B,T,2,4] = expert_linear(%x, %ids, %gate)
  %u: f32[B,T,2,4] = expert_linear(%x, %ids, %up)
  %a: f32[B,T,2,4] = silu(%g)
  %h: f32[B,T,2,4] = mul(%a, %u)
  %y: f32[B,T,2,8] = expert_linear(%h, %ids, %down)
  %c: f32[B,T,8] = moe_combine(%y, %w)
  output %c
}
)";
  for (const auto& [batch, limit, fuses] :
       std::vector<std::tuple<int64_t, int64_t, bool>>{{4, 4, true}, {5, 4, false}}) {
    PassOptions options;
    options.batch = batch;
    options.moe_max_batch = limit;
    absl::StatusOr<std::unique_ptr<Pass>> pass = GlobalPassRegistry().Create("fuse_moe", options);
    ASSERT_TRUE(pass.ok()) << pass.status();
    ir::Graph g = Parse(kMoe);
    absl::StatusOr<bool> changed = (*pass)->Run(g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(*changed, fuses) << "batch " << batch << ", limit " << limit;
  }
}

TEST(PipelinesTest, RopeKvWriteAttentionFusionsServeDecodeOnly) {
  PassOptions options;
  options.phase = ir::Phase::kPrefill;
  options.tokens = 16;
  for (const char* name : {"fuse_rope_kv_write_attention", "fuse_mla_kv_write_attention"}) {
    absl::StatusOr<std::unique_ptr<Pass>> pass = GlobalPassRegistry().Create(name, options);
    EXPECT_EQ(pass.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(pass.status().message(),
                HasSubstr(absl::StrCat(name,
                                       " forms decode kernels; it does not run for the "
                                       "prefill phase")));
  }
}

TEST(PipelinesTest, LastTokenLogitsEndsThePrefillPipelineOnly) {
  PipelineOptions options;
  options.tokens = 32;
  options.last_token_logits = true;
  absl::StatusOr<PassPipeline> prefill = BuildPrefillPipeline(options);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  ASSERT_FALSE(prefill->PassNames().empty());
  EXPECT_EQ(prefill->PassNames().back(), "last_token_logits");
  absl::StatusOr<PassPipeline> decode = BuildDecodePipeline(options);
  ASSERT_TRUE(decode.ok()) << decode.status();
  const std::vector<std::string> names = decode->PassNames();
  EXPECT_EQ(std::count(names.begin(), names.end(), "last_token_logits"), 0);
}

TEST(PipelinesTest, PrefillNeedsAPositiveBucket) {
  absl::StatusOr<PassPipeline> prefill = BuildPrefillPipeline(PipelineOptions());
  EXPECT_EQ(prefill.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(prefill.status().message(), HasSubstr("the token count (T) must be positive"));
  PipelineOptions options;
  options.cache_capacity = -1;
  EXPECT_FALSE(BuildDecodePipeline(options).ok());
}

TEST(PipelinesTest, BindTheSymbols) {
  PipelineOptions options;
  options.tokens = 8;
  options.batch = 2;
  absl::StatusOr<PassPipeline> prefill = BuildPrefillPipeline(options);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  ir::Graph g = Parse(kGraph);
  ASSERT_TRUE(prefill->Run(g).ok());
  EXPECT_EQ(ir::PrintGraph(g), R"(graph @g {
  input %x: f32[2,8,8]
  %y: f32[2,8,8] = silu(%x) phase(prefill)
  output %y
}
)");
  absl::StatusOr<PassPipeline> decode = BuildDecodePipeline(options);
  ASSERT_TRUE(decode.ok()) << decode.status();
  ir::Graph d = Parse(kGraph);
  ASSERT_TRUE(decode->Run(d).ok());
  EXPECT_EQ(ir::PrintGraph(d), R"(graph @g {
  input %x: f32[2,1,8]
  %y: f32[2,1,8] = silu(%x) phase(decode)
  output %y
}
)");
}

}  // namespace
}  // namespace tileplan::planner
