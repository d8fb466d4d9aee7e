// Candidate enumeration of the tuner (no GPU): the default tactic first, every candidate
// valid for the region and target, no duplicates, the cap respected; cuBLASLt's candidates
// are its default and the library's configurations.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/cublaslt/cublaslt_runner.h"
#include "kernels/families/registry.h"
#include "tests/kernels/kernels_testing.h"
#include "tuner/region_tuner.h"

namespace tileplan::tuner {
namespace {

using kernels::BoundGraph;
using kernels::BoundRegion;
using kernels::testing::MustBind;
using kernels::testing::MustParseVerified;
using kernels::testing::MustTarget;

constexpr char kLinear[] = R"(graph @g {
  input %x: bf16[B,T,1024]
  weight %w: bf16[4096,1024] = "w"
  %y: bf16[B,T,4096] = linear(%x, %w)
  output %y
})";

TEST(EnumerateCandidatesTest, DefaultFirstEveryCandidateValidNoDuplicates) {
  const ir::Graph graph = MustParseVerified(kLinear);
  const BoundGraph decode = MustBind(graph, {{"B", 1}, {"T", 1}}, 1);
  const BoundRegion region(decode, 0);
  const targets::TargetDescription h200 = MustTarget("h200");
  const kernels::KernelFamily& gemv = *kernels::GlobalKernelRegistry().Find("gemv");
  const std::vector<kernels::Tactic> all = EnumerateCandidates(gemv, region, h200, 1000);
  ASSERT_FALSE(all.empty());
  absl::StatusOr<kernels::Tactic> def = gemv.DefaultTactic(region, h200);
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(all.front(), *def);
  std::set<std::string> seen;
  for (const kernels::Tactic& t : all) {
    EXPECT_TRUE(gemv.ValidateTactic(t, region, h200).ok()) << t.ParamsString();
    EXPECT_TRUE(seen.insert(t.ParamsString()).second) << "duplicate " << t.ParamsString();
  }
  // rows_per_cta {1..16} x threads {64..512}: 4096 outputs give every SM of the H200 a CTA
  // even at 16 outputs per CTA, so no split of K is worth measuring (WorthMeasuring).
  EXPECT_EQ(all.size(), 20u);
  for (const kernels::Tactic& t : all) EXPECT_EQ(t.params.at("split_k"), 1) << t.ParamsString();

  // A budget below the product spreads it: the candidates are among the uncapped ones, and
  // they do not all hold the first tunable (rows_per_cta) at its first values, as a prefix of
  // the product would.
  const std::vector<kernels::Tactic> capped = EnumerateCandidates(gemv, region, h200, 7);
  ASSERT_EQ(capped.size(), 7u);
  EXPECT_EQ(capped.front(), *def);
  std::set<int64_t> rows;
  for (const kernels::Tactic& t : capped) {
    EXPECT_NE(std::find(all.begin(), all.end(), t), all.end()) << t.ParamsString();
    rows.insert(t.params.at("rows_per_cta"));
  }
  EXPECT_GE(rows.size(), 4u);
  EXPECT_EQ(EnumerateCandidates(gemv, region, h200, 7), capped);  // deterministic
}

// 1024 outputs: 16 per CTA leave 64 CTAs for 132 SMs (2 and 4 slices of K are measured),
// 8 per CTA leave 128 (2 slices), 4 per CTA already fill the GPU (none).
TEST(EnumerateCandidatesTest, SplitsOfKOnlyWhereTheGridLeavesSmsIdle) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,2048]
  weight %w: bf16[1024,2048] = "w"
  %y: bf16[B,T,1024] = linear(%x, %w)
  output %y
})");
  const BoundGraph decode = MustBind(graph, {{"B", 1}, {"T", 1}}, 1);
  const BoundRegion region(decode, 0);
  const kernels::KernelFamily& gemv = *kernels::GlobalKernelRegistry().Find("gemv");
  std::set<std::pair<int64_t, int64_t>> rows_and_splits;
  for (const kernels::Tactic& t : EnumerateCandidates(gemv, region, MustTarget("h200"), 1000)) {
    rows_and_splits.insert({t.params.at("rows_per_cta"), t.params.at("split_k")});
  }
  EXPECT_EQ(rows_and_splits,
            (std::set<std::pair<int64_t, int64_t>>{
                {1, 1}, {2, 1}, {4, 1}, {8, 1}, {8, 2}, {16, 1}, {16, 2}, {16, 4}}));
}

// attention_decode's optional `cluster` and `mma` at 0 mean their absence: the candidates come
// in that one form (the product's values never repeat the default written out with zeros),
// and Canonical drops exactly those.
TEST(EnumerateCandidatesTest, DecodeAttentionCandidatesAreCanonical) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %q: bf16[B,T,32,128]
  state %k: bf16[B,4,Smax,128]
  state %v: bf16[B,4,Smax,128]
  input %positions: i32[B,T]
  %o: bf16[B,T,32,128] = attention(%q, %k, %v, %positions) {scale = 0.088, sliding_window = 0}
  output %o
})");
  const BoundGraph decode = MustBind(graph, {{"B", 1}, {"Smax", 512}, {"T", 1}}, 512);
  const BoundRegion region(decode, 0);
  const kernels::KernelFamily& family =
      *kernels::GlobalKernelRegistry().Find("attention_decode");
  const std::vector<kernels::Tactic> all =
      EnumerateCandidates(family, region, MustTarget("h100"), 1000);
  ASSERT_GT(all.size(), 10u);
  std::set<std::string> seen;
  for (const kernels::Tactic& t : all) {
    EXPECT_EQ(family.Canonical(t), t) << t.ParamsString();
    EXPECT_TRUE(seen.insert(t.ParamsString()).second) << t.ParamsString();
  }
  kernels::Tactic t = all.front();
  t.params["cluster"] = 0;
  t.params["mma"] = 0;
  kernels::Tactic bare = t;
  bare.params.erase("cluster");
  bare.params.erase("mma");
  EXPECT_EQ(family.Canonical(t), bare);
  t.params["cluster"] = 1;
  bare.params["cluster"] = 1;
  EXPECT_EQ(family.Canonical(t), bare);  // an optional parameter that is on stays
}

TEST(EnumerateCandidatesTest, CublasLtWithoutLibraryConfigsOffersItsDefaultOnly) {
  const ir::Graph graph = MustParseVerified(kLinear);
  const BoundGraph prefill = MustBind(graph, {{"B", 1}, {"T", 512}}, 512);
  const BoundRegion region(prefill, 0);
  const targets::TargetDescription h200 = MustTarget("h200");
  const kernels::KernelFamily& lt = *kernels::GlobalKernelRegistry().Find("cublaslt_gemm");
  const std::vector<kernels::Tactic> all = EnumerateCandidates(lt, region, h200, 1000);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all.front(), *lt.DefaultTactic(region, h200));
}

// The heuristic's answers (as CublasLtRunner::Candidates gives them) follow the default in
// their order; one the family does not accept, and a repeated one, are left out.
TEST(EnumerateCandidatesTest, CublasLtOffersTheLibraryConfigsAfterItsDefault) {
  const ir::Graph graph = MustParseVerified(kLinear);
  const BoundGraph prefill = MustBind(graph, {{"B", 1}, {"T", 512}}, 512);
  const BoundRegion region(prefill, 0);
  const targets::TargetDescription h200 = MustTarget("h200");
  const kernels::KernelFamily& lt = *kernels::GlobalKernelRegistry().Find("cublaslt_gemm");
  const kernels::Tactic def = *lt.DefaultTactic(region, h200);
  std::vector<kernels::Tactic> configs;
  for (uint32_t tile :
       {CUBLASLT_MATMUL_TILE_192x128, CUBLASLT_MATMUL_TILE_64x96, CUBLASLT_MATMUL_TILE_256x128}) {
    kernels::ResolvedAlgo algo;
    algo.algo_id = 66;
    algo.tile_id = tile;
    algo.stages_id = CUBLASLT_MATMUL_STAGES_64xAUTO;
    algo.cluster_shape_id = CUBLASLT_CLUSTER_SHAPE_1x1x1;
    configs.push_back(kernels::ConfigTactic(algo, def));
  }
  configs.insert(configs.begin() + 1, configs.front());  // a duplicate
  kernels::Tactic wrong = configs.back();
  wrong.params["tile_m"] = 96;  // not the tile's size
  configs.insert(configs.begin() + 2, wrong);

  const std::vector<kernels::Tactic> all = EnumerateCandidates(lt, region, h200, 1000, configs);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], def);
  EXPECT_EQ(all[1], configs[0]);
  EXPECT_EQ(all[2].params.at("tile_id"), CUBLASLT_MATMUL_TILE_64x96);
  EXPECT_EQ(all[2].params.at("tile_m"), 96);
  EXPECT_EQ(all[2].params.at("tile_n"), 64);
  EXPECT_EQ(all[3].params.at("tile_id"), CUBLASLT_MATMUL_TILE_256x128);
  for (const kernels::Tactic& t : all) {
    EXPECT_TRUE(lt.ValidateTactic(t, region, h200).ok()) << t.ParamsString();
  }
  const std::vector<kernels::Tactic> capped = EnumerateCandidates(lt, region, h200, 2, configs);
  ASSERT_EQ(capped.size(), 2u);
  EXPECT_EQ(capped[1], configs[0]);
}

TEST(EnumerateCandidatesTest, AFamilyThatCannotImplementTheRegionOffersNothing) {
  const ir::Graph graph = MustParseVerified(kLinear);
  const BoundGraph prefill = MustBind(graph, {{"B", 1}, {"T", 512}}, 512);
  const BoundRegion region(prefill, 0);
  const kernels::KernelFamily& gemv = *kernels::GlobalKernelRegistry().Find("gemv");
  EXPECT_TRUE(EnumerateCandidates(gemv, region, MustTarget("h200"), 100).empty());
}

TEST(RandomRoutingTest, EachTokenPicksDistinctExpertsSpreadOverAll) {
  constexpr int64_t kTokens = 512, kTopK = 8, kExperts = 128;
  const std::vector<int32_t> ids = RandomRouting(kTokens * kTopK, kTopK, kExperts, 7);
  ASSERT_EQ(ids.size(), static_cast<size_t>(kTokens * kTopK));
  std::vector<int> rows(kExperts, 0);
  for (int64_t t = 0; t < kTokens; ++t) {
    std::set<int32_t> token;
    for (int64_t k = 0; k < kTopK; ++k) {
      const int32_t e = ids[static_cast<size_t>(t * kTopK + k)];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, kExperts);
      token.insert(e);
      ++rows[static_cast<size_t>(e)];
    }
    EXPECT_EQ(token.size(), static_cast<size_t>(kTopK)) << "token " << t;
  }
  // 32 rows per expert on average: no expert idle, none with three times its share.
  EXPECT_GT(*std::min_element(rows.begin(), rows.end()), 0);
  EXPECT_LT(*std::max_element(rows.begin(), rows.end()), 3 * 32);
  EXPECT_EQ(RandomRouting(kTokens * kTopK, kTopK, kExperts, 7), ids);
  EXPECT_NE(RandomRouting(kTokens * kTopK, kTopK, kExperts, 8), ids);
}

TEST(RandomRoutingTest, MoreSelectionsThanExpertsRepeatOnlyPastE) {
  const std::vector<int32_t> ids = RandomRouting(2 * 6, 6, 4, 1);
  for (int t = 0; t < 2; ++t) {
    std::set<int32_t> first(ids.begin() + 6 * t, ids.begin() + 6 * t + 4);
    EXPECT_EQ(first.size(), 4u);
  }
  for (int32_t e : ids) EXPECT_TRUE(e >= 0 && e < 4) << e;
}

}  // namespace
}  // namespace tileplan::tuner
