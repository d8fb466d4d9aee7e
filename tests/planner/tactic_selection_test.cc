#include "planner/tactic_selection.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/families/registry.h"
#include "planner/plan_builder.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::planner {
namespace {

using kernels::BoundGraph;
using kernels::BoundRegion;
using kernels::testing::MustBind;
using kernels::testing::MustTarget;
using kernels::testing::RegionNamed;
using kernels::testing::TestGraph;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TacticSelectionTest : public ::testing::Test {
 protected:
  TacticSelectionTest()
      : graph_(TestGraph("typical_regions.tpir")),
        decode_(MustBind(graph_, {{"B", 1}, {"Smax", 4096}, {"T", 1}}, 512)),
        target_(MustTarget("h200")) {
    context_.registry = &kernels::GlobalKernelRegistry();
    context_.target = &target_;
    context_.phase = ir::Phase::kDecode;
    context_.environment = EnvironmentFingerprint(target_);
  }

  ir::Graph graph_;
  BoundGraph decode_;
  targets::TargetDescription target_;
  SelectionContext context_;
};

TEST_F(TacticSelectionTest, MissUsesTheCostModelOverEveryFamily) {
  InMemoryTacticCache cache;
  context_.cache = &cache;
  const BoundRegion qkv(decode_, RegionNamed(graph_, "qkv"));
  absl::StatusOr<TacticChoice> choice = SelectTactic(qkv, context_);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, TacticSource::kCostModel);
  EXPECT_EQ(choice->family->name(), "gemv");
  EXPECT_FALSE(choice->measured_us.has_value());
  EXPECT_GT(choice->estimate.us, 0);
  ASSERT_EQ(choice->considered.size(), 4u);
  EXPECT_THAT(choice->considered[0], HasSubstr("cublaslt_gemm: "));
  EXPECT_THAT(choice->considered[0], HasSubstr("(cost model)"));
  EXPECT_THAT(choice->considered[1], HasSubstr("gemv: "));
  EXPECT_THAT(choice->considered[2], HasSubstr("gemv_mma: cannot implement: M = 1 rows"));
  EXPECT_THAT(choice->considered[3], HasSubstr("wgmma_gemm: cannot implement: M = 1 rows"));
  EXPECT_EQ(choice->key.family, "gemv");
  EXPECT_EQ(choice->key.environment, "h200/sm_90/132sm");
  EXPECT_EQ(choice->key.shape_bucket, "B=1,Smax=4096,T=1");
  EXPECT_EQ(choice->key.region_signature,
            "linear(bf16[1,1,128], bf16[256,128]) -> (bf16[1,1,256]) {}");
}

// The planner looks up exactly the keys TacticKeyFor builds (what the tuner measures under),
// one per family that can implement the region; a recording cache sees each lookup.
TEST_F(TacticSelectionTest, LookupsAreTheKeysOfTacticKeyFor) {
  const BoundRegion qkv(decode_, RegionNamed(graph_, "qkv"));
  InMemoryTacticCache inner;
  const kernels::KernelFamily& gemv = *kernels::GlobalKernelRegistry().Find("gemv");
  const TacticKey gemv_key = TacticKeyFor(qkv, ir::Phase::kDecode, gemv, "env");
  inner.Insert(gemv_key, MeasuredTactic{*gemv.DefaultTactic(qkv, target_), 1.5});
  const RecordingTacticCache recording(&inner);
  context_.cache = &recording;
  context_.environment = "env";
  absl::StatusOr<TacticChoice> choice = SelectTactic(qkv, context_);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, TacticSource::kTuned);
  EXPECT_EQ(choice->key, gemv_key);
  const TacticKey cublaslt_key = TacticKeyFor(
      qkv, ir::Phase::kDecode, *kernels::GlobalKernelRegistry().Find("cublaslt_gemm"), "env");
  const std::map<TacticKey, RecordingTacticCache::Record> records = recording.records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_TRUE(records.at(gemv_key).hit);
  EXPECT_EQ(records.at(gemv_key).lookups, 1);
  EXPECT_FALSE(records.at(cublaslt_key).hit);
  // The key's fields.
  EXPECT_EQ(gemv_key.environment, "env");
  EXPECT_EQ(gemv_key.region_signature, RegionSignature(qkv));
  EXPECT_EQ(gemv_key.shape_bucket, "B=1,Smax=4096,T=1");
  EXPECT_EQ(gemv_key.phase, ir::Phase::kDecode);
  EXPECT_EQ(gemv_key.family, "gemv");
  EXPECT_EQ(gemv_key.family_version, gemv.version());

  // Without an inner cache every lookup misses, and is still recorded.
  const RecordingTacticCache alone(nullptr);
  context_.cache = &alone;
  ASSERT_TRUE(SelectTactic(qkv, context_).ok());
  ASSERT_TRUE(SelectTactic(qkv, context_).ok());
  EXPECT_EQ(alone.records().size(), 2u);
  EXPECT_EQ(alone.records().at(gemv_key).lookups, 2);
  EXPECT_FALSE(alone.records().at(gemv_key).hit);
}

TEST_F(TacticSelectionTest, HitReturnsTheMeasuredTacticAsTuned) {
  const BoundRegion qkv(decode_, RegionNamed(graph_, "qkv"));
  absl::StatusOr<TacticChoice> modeled = SelectTactic(qkv, context_);
  ASSERT_TRUE(modeled.ok());
  // A measurement of cuBLASLt for exactly this key wins over gemv's estimate.
  TacticKey key = modeled->key;
  key.family = "cublaslt_gemm";
  key.family_version = kernels::GlobalKernelRegistry().Find("cublaslt_gemm")->version();
  kernels::Tactic measured{"cublaslt_gemm",
                           key.family_version,
                           {{"algo_id", 21},
                            {"reduction_scheme", 0},
                            {"split_k", 1},
                            {"stages", 3},
                            {"swizzle", 1},
                            {"tile_m", 64},
                            {"tile_n", 64}}};
  InMemoryTacticCache cache;
  cache.Insert(key, MeasuredTactic{measured, 9.5});
  context_.cache = &cache;
  absl::StatusOr<TacticChoice> tuned = SelectTactic(qkv, context_);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ(tuned->source, TacticSource::kTuned);
  EXPECT_EQ(tuned->family->name(), "cublaslt_gemm");
  EXPECT_EQ(tuned->tactic, measured);
  EXPECT_EQ(tuned->measured_us, 9.5);
  EXPECT_EQ(tuned->key, key);
  EXPECT_THAT(tuned->considered,
              ElementsAre("cublaslt_gemm: 9.50 us (tuned)", ::testing::StartsWith("gemv: "),
                          ::testing::StartsWith("gemv_mma: cannot implement: "),
                          ::testing::StartsWith("wgmma_gemm: cannot implement: ")));
  EXPECT_EQ(TacticSourceName(tuned->source), "tuned");
}

TEST_F(TacticSelectionTest, AnyKeyDifferenceIsAMiss) {
  const BoundRegion qkv(decode_, RegionNamed(graph_, "qkv"));
  absl::StatusOr<TacticChoice> modeled = SelectTactic(qkv, context_);
  ASSERT_TRUE(modeled.ok());
  for (int field = 0; field < 5; ++field) {
    TacticKey key = modeled->key;
    switch (field) {
      case 0:
        key.environment = "h100/sm_90/132sm";
        break;
      case 1:
        key.region_signature += " ";
        break;
      case 2:
        key.shape_bucket = "B=2,Smax=4096,T=1";
        break;
      case 3:
        key.phase = ir::Phase::kPrefill;
        break;
      case 4:
        key.family_version += 1;
        break;
    }
    InMemoryTacticCache cache;
    cache.Insert(key, MeasuredTactic{modeled->tactic, 1.0});
    context_.cache = &cache;
    absl::StatusOr<TacticChoice> choice = SelectTactic(qkv, context_);
    ASSERT_TRUE(choice.ok());
    EXPECT_EQ(choice->source, TacticSource::kCostModel) << "field " << field;
  }
}

TEST_F(TacticSelectionTest, InvalidCachedTacticIsRejectedNotFatal) {
  const BoundRegion qkv(decode_, RegionNamed(graph_, "qkv"));
  absl::StatusOr<TacticChoice> modeled = SelectTactic(qkv, context_);
  ASSERT_TRUE(modeled.ok());
  kernels::Tactic bad = modeled->tactic;
  bad.params["threads"] = 3;
  InMemoryTacticCache cache;
  cache.Insert(modeled->key, MeasuredTactic{bad, 0.1});
  context_.cache = &cache;
  absl::StatusOr<TacticChoice> choice = SelectTactic(qkv, context_);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->source, TacticSource::kCostModel);
  EXPECT_THAT(choice->considered,
              ::testing::Contains(HasSubstr("gemv: cached tactic rejected: gemv tactic: "
                                            "parameter 'threads' is 3")));
}

TEST_F(TacticSelectionTest, NoFamilyIsAnErrorWithEveryReason) {
  const ir::Graph graph = kernels::testing::MustParseVerified(R"(graph @g {
  input %q: f32[B,T,2,32]
  input %positions: i32[B,T]
  state %k: f32[B,1,Smax,32]
  state %v: f32[B,1,Smax,32]
  %a: f32[B,T,2,32] = attention(%q, %k, %v, %positions) {scale = 0.17, sliding_window = 0}
  output %a
})");
  const BoundGraph prefill = MustBind(graph, {{"B", 1}, {"Smax", 256}, {"T", 64}}, 64);
  absl::StatusOr<TacticChoice> choice = SelectTactic(BoundRegion(prefill, 0), context_);
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(choice.status().message(),
              HasSubstr("region #0 'attention' (%a): no kernel family can implement it: "
                        "attention_decode: T = 64 new tokens exceed 16"));
  EXPECT_THAT(choice.status().message(),
              HasSubstr("attention_prefill: dtype f32 has no tensor-core path"));
}

TEST_F(TacticSelectionTest, DecodeAttentionPrefersSplitKv) {
  const BoundRegion attn(decode_, RegionNamed(graph_, "attn"));
  absl::StatusOr<TacticChoice> choice = SelectTactic(attn, context_);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->family->name(), "attention_decode");
}

// Decode linears of 16 rows (batch 16): the GEMV's CUDA-core walk runs them at about a
// quarter of the fp32 rate (measured, docs/PERF.md), so without a calibration they go to
// cuBLASLt on the Hopper targets, where that was measured, while one row stays on the GEMV. Before
// the GEMV said so, the uncalibrated H100 plan of Qwen2-7B at batch 16 put them on it and
// decoded 3.6x slower (docs/PERF.md). gemv_mma, whose estimate would win, is taken only as
// tuned.
TEST_F(TacticSelectionTest, SixteenRowDecodeLinearsGoToTheLibraryWithoutCalibration) {
  context_.excluded_families = PlanOptions().excluded_families;
  const ir::Graph graph = kernels::testing::MustParseVerified(R"(graph @g {
  input %x: bf16[B,1,3584]
  weight %w: bf16[37888,3584] = "gate_up"
  %y: bf16[B,1,18944] = linear_swiglu(%x, %w)
  output %y
})");
  for (const char* name : {"h200", "h100"}) {
    const targets::TargetDescription target = MustTarget(name);
    context_.target = &target;
    context_.environment = EnvironmentFingerprint(target);
    for (const int64_t batch : {1, 16}) {
      SCOPED_TRACE(absl::StrCat(name, ", batch ", batch));
      const BoundGraph bound = MustBind(graph, {{"B", batch}}, 512);
      absl::StatusOr<TacticChoice> choice = SelectTactic(BoundRegion(bound, 0), context_);
      ASSERT_TRUE(choice.ok()) << choice.status();
      EXPECT_EQ(choice->source, TacticSource::kCostModel);
      EXPECT_EQ(choice->family->name(), batch == 1 ? "gemv" : "cublaslt_gemm");
    }
  }
}

// gemv_mma is chosen by measurement only: without a store hit it is "not measured" and the
// cost model's pick stands even where its own estimate is lower; with one it competes as any
// tuned family.
TEST_F(TacticSelectionTest, MeasuredOnlyFamiliesNeedAStoreHit) {
  const ir::Graph graph = kernels::testing::MustParseVerified(R"(graph @g {
  input %x: bf16[B,1,3584]
  weight %w: bf16[37888,3584] = "gate_up"
  %y: bf16[B,1,18944] = linear_swiglu(%x, %w)
  output %y
})");
  const BoundGraph bound = MustBind(graph, {{"B", 16}}, 512);
  const BoundRegion region(bound, 0);
  const kernels::KernelFamily& mma = *kernels::GlobalKernelRegistry().Find("gemv_mma");
  ASSERT_TRUE(mma.chosen_by_measurement_only());
  absl::StatusOr<TacticChoice> modeled = SelectTactic(region, context_);
  ASSERT_TRUE(modeled.ok()) << modeled.status();
  EXPECT_EQ(modeled->family->name(), "cublaslt_gemm");
  EXPECT_THAT(modeled->considered,
              ::testing::Contains("gemv_mma: not measured (taken only as tuned)"));
  const TacticKey key = TacticKeyFor(region, ir::Phase::kDecode, mma, context_.environment);
  InMemoryTacticCache cache;
  cache.Insert(key, MeasuredTactic{*mma.DefaultTactic(region, target_), 94.7});
  context_.cache = &cache;
  absl::StatusOr<TacticChoice> tuned = SelectTactic(region, context_);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ(tuned->family->name(), "gemv_mma");
  EXPECT_EQ(tuned->source, TacticSource::kTuned);
  EXPECT_THAT(tuned->considered, ::testing::Contains("gemv_mma: 94.70 us (tuned)"));
}

// A prompt's latent attention takes the un-absorbed family by the cost model, unless the
// plan options leave it off; then the absorbed kernels serve it, and the reason is listed.
TEST_F(TacticSelectionTest, ExcludedFamiliesAreNeverChosen) {
  const BoundGraph prefill = MustBind(graph_, {{"B", 1}, {"Smax", 4096}, {"T", 512}}, 512);
  const BoundRegion mla(prefill, RegionNamed(graph_, "mla"));
  context_.phase = ir::Phase::kPrefill;
  absl::StatusOr<TacticChoice> open = SelectTactic(mla, context_);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->family->name(), "mla_prefill");
  context_.excluded_families = {"mla_prefill"};
  absl::StatusOr<TacticChoice> excluded = SelectTactic(mla, context_);
  ASSERT_TRUE(excluded.ok()) << excluded.status();
  EXPECT_EQ(excluded->family->name(), "mla_attention");
  EXPECT_THAT(excluded->considered,
              ::testing::Contains("mla_prefill: left off by the plan options"));
  // Excluding every family of the kind is the no-family error, naming the reason.
  context_.excluded_families = {"mla_attention", "mla_prefill"};
  absl::StatusOr<TacticChoice> none = SelectTactic(mla, context_);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("left off by the plan options"));
}

// Qwen3-30B-A3B's routed experts (128 experts of [768, 2048], top 8): a decode step's few
// selections stream their experts' weights on expert_gemv in one launch; a prefill of 128
// tokens (1024 selections, each expert read by about 8 of them) or 2048 is a grouped GEMM on
// tensor cores: the GEMV would read each expert once per selection, 3.2 GB through L2 at 128
// tokens, though its DRAM bytes are the same. Either way the bytes are the weights of the
// experts the step can select, min(E, tokens·K) of them.
TEST_F(TacticSelectionTest, ExpertLinearsAreGemvForDecodeAndGroupedGemmForPrefill) {
  const ir::Graph graph = kernels::testing::MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,2048]
  input %ids: i32[B,T,8]
  weight %w: bf16[128,768,2048] = "gate"
  %y: bf16[B,T,8,768] = expert_linear(%x, %ids, %w)
  output %y
})");
  const int64_t weight = 768 * 2048 * 2;
  for (const char* name : {"h200", "h100"}) {
    const targets::TargetDescription target = MustTarget(name);
    context_.target = &target;
    for (const int64_t tokens : {1, 128, 2048}) {
      SCOPED_TRACE(absl::StrCat(name, ", ", tokens, " tokens"));
      const BoundGraph bound = MustBind(graph, {{"B", 1}, {"T", tokens}}, tokens);
      context_.phase = tokens == 1 ? ir::Phase::kDecode : ir::Phase::kPrefill;
      absl::StatusOr<TacticChoice> choice = SelectTactic(BoundRegion(bound, 0), context_);
      ASSERT_TRUE(choice.ok()) << choice.status();
      EXPECT_EQ(choice->family->name(), tokens == 1 ? "expert_gemv" : "expert_gemm");
      ASSERT_EQ(choice->considered.size(), 2u);
      const int64_t activations = tokens * 2048 * 2 + tokens * 8 * 4 + tokens * 8 * 768 * 2;
      EXPECT_EQ(choice->estimate.bytes, activations + std::min<int64_t>(128, tokens * 8) * weight);
    }
  }
  context_.target = &target_;
}

}  // namespace
}  // namespace tileplan::planner
