#include "planner/cost_model.h"

#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/families/registry.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::planner {
namespace {

using kernels::testing::MustTarget;

// The H200 description: 4200 GB/s and 760 of 989 TFLOP/s achievable, 67 TFLOP/s fp32 peak,
// 4.3 us per host launch, 0.6 us per graph node, 132 SMs.
TEST(CostModelTest, MemoryBoundStepOnAFullGrid) {
  const targets::TargetDescription h200 = MustTarget("h200");
  kernels::WorkEstimate work;
  work.bytes = 4'200'000;  // 1 us at 4200 GB/s
  const CostEstimate e = EstimateCost(work, 1, 132, h200, LaunchMode::kGraph);
  EXPECT_DOUBLE_EQ(e.launch_us, 0.6);
  EXPECT_DOUBLE_EQ(e.memory_us, 1.0);
  EXPECT_DOUBLE_EQ(e.compute_us, 0.0);
  EXPECT_DOUBLE_EQ(e.utilization, 1.0);
  EXPECT_DOUBLE_EQ(e.us, 1.6);
  EXPECT_EQ(e.bytes, 4'200'000);
  EXPECT_EQ(e.launches, 1);
  // Host launches cost more than graph nodes.
  EXPECT_DOUBLE_EQ(EstimateCost(work, 1, 132, h200, LaunchMode::kHost).us, 5.3);
}

TEST(CostModelTest, ComputeBoundTensorCoreStepTakesTheLargerTerm) {
  const targets::TargetDescription h200 = MustTarget("h200");
  kernels::WorkEstimate work;
  work.bytes = 2'100'000;      // 0.5 us
  work.flops = 1'520'000'000;  // 2 us at 760 TFLOP/s
  work.tensor_core = true;
  const CostEstimate e = EstimateCost(work, 1, 1000, h200, LaunchMode::kGraph);
  EXPECT_DOUBLE_EQ(e.memory_us, 0.5);
  EXPECT_DOUBLE_EQ(e.compute_us, 2.0);
  EXPECT_DOUBLE_EQ(e.us, 2.6);  // max, not sum, plus one graph node
}

TEST(CostModelTest, CudaCoreRateIsTheFp32PeakScaledByTheAchievableShare) {
  const targets::TargetDescription h200 = MustTarget("h200");
  kernels::WorkEstimate work;
  work.flops = 67'000'000;  // 1 us at the 67 TFLOP/s fp32 peak
  const CostEstimate e = EstimateCost(work, 1, 132, h200, LaunchMode::kGraph);
  EXPECT_DOUBLE_EQ(e.compute_us, 989.0 / 760.0);
}

// A family whose CUDA-core loop reaches only part of that rate says so; the share scales the
// compute term alone and never applies to tensor-core work.
TEST(CostModelTest, CoreShareSlowsOnlyCudaCoreFlops) {
  const targets::TargetDescription h200 = MustTarget("h200");
  kernels::WorkEstimate work;
  work.flops = 67'000'000;
  work.bytes = 4'200'000;  // 1 us
  work.core_share = 0.25;
  const CostEstimate e = EstimateCost(work, 1, 132, h200, LaunchMode::kGraph);
  EXPECT_DOUBLE_EQ(e.compute_us, 4 * 989.0 / 760.0);
  EXPECT_DOUBLE_EQ(e.memory_us, 1.0);
  EXPECT_DOUBLE_EQ(e.us, 0.6 + 4 * 989.0 / 760.0);
  work.tensor_core = true;
  EXPECT_DOUBLE_EQ(EstimateCost(work, 1, 132, h200, LaunchMode::kGraph).compute_us, 67.0 / 760.0);
}

TEST(CostModelTest, SmallGridsReachOnlyTheirShareOfTheMachine) {
  const targets::TargetDescription h200 = MustTarget("h200");
  kernels::WorkEstimate work;
  work.bytes = 4'200'000;
  const CostEstimate e = EstimateCost(work, 2, 33, h200, LaunchMode::kGraph);
  EXPECT_DOUBLE_EQ(e.utilization, 0.25);
  EXPECT_DOUBLE_EQ(e.memory_us, 4.0);
  EXPECT_DOUBLE_EQ(e.us, 1.2 + 4.0);
}

// Reads through L2 beyond the DRAM bytes (the H200's 10000 GB/s): bounded by the L2's rate
// where they take longer than the DRAM bytes, and left out by a target that gives no rate.
TEST(CostModelTest, RereadsThroughL2AreBoundedByItsRate) {
  targets::TargetDescription h200 = MustTarget("h200");
  kernels::WorkEstimate work;
  work.bytes = 4'200'000;         // 1 us at 4200 GB/s
  work.cache_bytes = 30'000'000;  // 3 us at 10000 GB/s
  CostEstimate e = EstimateCost(work, 1, 132, h200, LaunchMode::kGraph);
  EXPECT_DOUBLE_EQ(e.memory_us, 3.0);
  EXPECT_DOUBLE_EQ(e.us, 3.6);
  EXPECT_DOUBLE_EQ(EstimateCost(work, 1, 66, h200, LaunchMode::kGraph).memory_us, 6.0);
  EXPECT_DOUBLE_EQ(IdealMicros(work, h200), 3.0);
  work.cache_bytes = 5'000'000;  // 0.5 us: the DRAM bytes bind
  EXPECT_DOUBLE_EQ(EstimateCost(work, 1, 132, h200, LaunchMode::kGraph).memory_us, 1.0);
  work.cache_bytes = 30'000'000;
  h200.set_achievable_l2_bandwidth_gbps(0);
  EXPECT_DOUBLE_EQ(EstimateCost(work, 1, 132, h200, LaunchMode::kGraph).memory_us, 1.0);
}

TEST(CostModelTest, ViewsCostNothing) {
  const CostEstimate e = EstimateCost({}, 0, 0, MustTarget("h200"), LaunchMode::kGraph);
  EXPECT_EQ(e.us, 0.0);
  EXPECT_EQ(e.launches, 0);
}

TEST(CostModelTest, EstimateStepValidatesTheTactic) {
  const ir::Graph graph = kernels::testing::MustParseVerified(R"(graph @g {
  input %x: bf16[1,1,4096]
  weight %w: bf16[4096,4096] = "w"
  %y: bf16[1,1,4096] = linear(%x, %w)
  output %y
})");
  const kernels::BoundGraph g = kernels::testing::MustBind(graph, {}, 0);
  const kernels::BoundRegion y(g, 0);
  const targets::TargetDescription h200 = MustTarget("h200");
  const kernels::KernelFamily& gemv = *kernels::GlobalKernelRegistry().Find("gemv");
  absl::StatusOr<kernels::CandidateTable> table = gemv.Candidates(y, h200);
  ASSERT_TRUE(table.ok());
  absl::StatusOr<CostEstimate> e =
      EstimateStep(gemv, table->default_tactic, y, h200, LaunchMode::kGraph);
  ASSERT_TRUE(e.ok()) << e.status();
  // 32 MiB of weight plus 16 KiB of activations over 4200 GB/s, on 1024 CTAs.
  const double bytes = 4096.0 * 4096 * 2 + 2 * 4096 * 2;
  EXPECT_DOUBLE_EQ(e->us, 0.6 + bytes / 4.2e6);
  kernels::Tactic bad = table->default_tactic;
  bad.params["threads"] = 7;
  EXPECT_FALSE(EstimateStep(gemv, bad, y, h200, LaunchMode::kGraph).ok());
}

}  // namespace
}  // namespace tileplan::planner
