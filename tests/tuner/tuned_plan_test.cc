// The tuner's choice and the planner's use of it, with measurements standing in for the GPU
// (a mock profiler): the fastest valid candidate wins, plans made for the measured
// environment take it (source TUNED with the measured time), plans for another environment
// or with a tactic that no longer validates keep the cost model's pick.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/families/registry.h"
#include "models/config.h"
#include "planner/plan_builder.h"
#include "planner/tactic_cache.h"
#include "regions/serialization.h"
#include "targets/target.h"
#include "tests/tuner/store_testing.h"
#include "tuner/region_tuner.h"
#include "tuner/tactic_store.h"

namespace tileplan::tuner {
namespace {

using ::testing::HasSubstr;

int32_t GemvVersion() { return kernels::GlobalKernelRegistry().Find("gemv")->version(); }

kernels::Tactic Gemv(int64_t rows, int64_t threads) {
  kernels::Tactic t;
  t.family = "gemv";
  t.family_version = GemvVersion();
  t.params = {{"rows_per_cta", rows}, {"split_k", 1}, {"threads", threads}, {"vec", 8}};
  return t;
}

TEST(ChooseWinnerTest, TheFastestValidCandidateWinsAndTheDefaultIsTheFirst) {
  RegionMeasurement m;
  m.candidates = {{Gemv(8, 128), CandidateStatus::kOk, "", 5.0},
                  {Gemv(4, 128), CandidateStatus::kWrongResult, "differs", 0},
                  {Gemv(2, 128), CandidateStatus::kOk, "", 3.0},
                  {Gemv(1, 128), CandidateStatus::kOk, "", 3.0},
                  {Gemv(1, 512), CandidateStatus::kOutOfResources, "too many", 0}};
  ChooseWinner(m, /*first_is_default=*/true);
  ASSERT_TRUE(m.winner.has_value());
  EXPECT_EQ(*m.winner, Gemv(2, 128));  // the first of equal times
  EXPECT_EQ(m.winner_us, 3.0);
  EXPECT_EQ(m.default_us, 5.0);

  m.candidates[0].status = CandidateStatus::kCompileError;
  ChooseWinner(m, true);
  EXPECT_EQ(m.default_us, 0.0);  // the default did not run
  for (CandidateMeasurement& c : m.candidates) c.status = CandidateStatus::kFault;
  ChooseWinner(m, true);
  EXPECT_FALSE(m.winner.has_value());
}

class TunedPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/tuned_plan_test.", ::getpid());
    std::filesystem::create_directories(dir_);
    config_ = *models::BundledModelConfig("qwen3-0.6b");
    target_ = *targets::FindTarget("h200");
    options_.prefill_tokens = {};
    options_.decode_batches = {1};
    options_.max_context = 64;
    // What the store changes, against the uncalibrated model: a bundled calibration would
    // make the untuned steps CALIBRATED (planner/cost_calibration_test.cc covers that).
    options_.calibrate = false;
    env_ = testing::TestEnvironment();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The decode phase's step `name` of a plan, and its tactic key in `env`.
  static const planner::proto::Step& Step(const planner::proto::ExecutionPlan& plan,
                                          absl::string_view name) {
    const planner::proto::Phase& phase = plan.phases(0);
    for (const planner::proto::Step& s : phase.steps()) {
      if (s.name() == name) return s;
    }
    ADD_FAILURE() << "no step " << name;
    return phase.steps(0);
  }

  planner::TacticKey KeyOf(const planner::proto::ExecutionPlan& plan, absl::string_view name) {
    const planner::proto::Phase& phase = plan.phases(0);
    graph_ = std::make_unique<ir::Graph>(*ir::GraphFromProto(phase.graph()));
    kernels::ShapeBindings bindings;
    for (const auto& b : phase.bindings()) bindings[b.symbol()] = b.extent();
    bound_ = std::make_unique<kernels::BoundGraph>(
        *kernels::BoundGraph::Create(*graph_, bindings, phase.context()));
    const kernels::BoundRegion region(*bound_, Step(plan, name).region());
    planner::TacticKey key;
    key.environment = env_.Fingerprint();
    key.region_signature = planner::RegionSignature(region);
    key.shape_bucket = kernels::BindingsString(bound_->bindings());
    key.phase = ir::Phase::kDecode;
    key.family = "gemv";
    key.family_version = GemvVersion();
    return key;
  }

  std::string dir_;
  models::ModelConfig config_;
  targets::TargetDescription target_;
  planner::PlanOptions options_;
  Environment env_;
  std::unique_ptr<ir::Graph> graph_;
  std::unique_ptr<kernels::BoundGraph> bound_;
};

TEST_F(TunedPlanTest, PlansForTheMeasuredEnvironmentTakeTheWinner) {
  absl::StatusOr<planner::proto::ExecutionPlan> cost =
      planner::BuildExecutionPlan(config_, target_, options_, nullptr);
  ASSERT_TRUE(cost.ok()) << cost.status();
  EXPECT_EQ(Step(*cost, "l0.qkv").source(), planner::proto::Step::SOURCE_COST_MODEL);

  auto store = TacticStore::Open(dir_ + "/tactics.db");
  ASSERT_TRUE(store.ok()) << store.status();
  RegionMeasurement m;
  m.key = KeyOf(*cost, "l0.qkv");
  m.environment = env_;
  m.candidates = {{Gemv(8, 128), CandidateStatus::kOk, "", 4.4},
                  {Gemv(4, 128), CandidateStatus::kOk, "", 4.2},
                  {Gemv(16, 64), CandidateStatus::kWrongResult, "differs", 0}};
  ChooseWinner(m, true);
  ASSERT_TRUE((*store)->Record(m).ok());

  planner::PlanOptions tuned_options = options_;
  tuned_options.environment = env_.Fingerprint();
  absl::StatusOr<planner::proto::ExecutionPlan> tuned =
      planner::BuildExecutionPlan(config_, target_, tuned_options, store->get());
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  // Every layer's QKV linear has the same key, so every one takes the measurement.
  for (const char* name : {"l0.qkv", "l27.qkv"}) {
    const planner::proto::Step& s = Step(*tuned, name);
    EXPECT_EQ(s.source(), planner::proto::Step::SOURCE_TUNED) << name;
    EXPECT_EQ(s.measured_us(), 4.2);
    EXPECT_EQ(*kernels::TacticFromProto(s.tactic()), Gemv(4, 128));
  }
  EXPECT_EQ(Step(*tuned, "l0.attn_residual").source(), planner::proto::Step::SOURCE_COST_MODEL);

  // Another driver: a different environment, so a miss, never an error.
  planner::PlanOptions other = options_;
  other.environment = testing::TestEnvironment(12080).Fingerprint();
  absl::StatusOr<planner::proto::ExecutionPlan> elsewhere =
      planner::BuildExecutionPlan(config_, target_, other, store->get());
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  EXPECT_EQ(Step(*elsewhere, "l0.qkv").source(), planner::proto::Step::SOURCE_COST_MODEL);
}

TEST_F(TunedPlanTest, AStoredTacticThatNoLongerValidatesFallsBackToTheCostModel) {
  absl::StatusOr<planner::proto::ExecutionPlan> cost =
      planner::BuildExecutionPlan(config_, target_, options_, nullptr);
  ASSERT_TRUE(cost.ok()) << cost.status();
  auto store = TacticStore::Open(dir_ + "/tactics.db");
  ASSERT_TRUE(store.ok()) << store.status();
  RegionMeasurement m;
  m.key = KeyOf(*cost, "l0.qkv");
  m.environment = env_;
  m.candidates = {{Gemv(33, 128), CandidateStatus::kOk, "", 1.0}};  // rows_per_cta 33: invalid
  ChooseWinner(m, true);
  ASSERT_TRUE((*store)->Record(m).ok());
  planner::PlanOptions tuned_options = options_;
  tuned_options.environment = env_.Fingerprint();
  absl::StatusOr<planner::proto::ExecutionPlan> plan =
      planner::BuildExecutionPlan(config_, target_, tuned_options, store->get());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const planner::proto::Step& s = Step(*plan, "l0.qkv");
  EXPECT_EQ(s.source(), planner::proto::Step::SOURCE_COST_MODEL);
  EXPECT_THAT(absl::StrJoin(s.provenance().considered(), "; "),
              HasSubstr("gemv: cached tactic rejected"));
}

}  // namespace
}  // namespace tileplan::tuner
