#include "planner/cost_calibration.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/families/registry.h"
#include "planner/tactic_selection.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::planner {
namespace {

using kernels::BoundGraph;
using kernels::BoundRegion;
using kernels::testing::MustBind;
using kernels::testing::MustTarget;
using kernels::testing::RegionNamed;
using kernels::testing::TestGraph;
using ::testing::HasSubstr;

constexpr double kOverhead = 2.0;

class CostCalibrationTest : public ::testing::Test {
 protected:
  CostCalibrationTest()
      : graph_(TestGraph("typical_regions.tpir")),
        decode_(MustBind(graph_, {{"B", 1}, {"Smax", 4096}, {"T", 1}}, 512)),
        target_(MustTarget("h200")),
        qkv_(decode_, RegionNamed(graph_, "qkv")),
        gemv_(*kernels::GlobalKernelRegistry().Find("gemv")) {}

  kernels::Tactic Gemv(int64_t rows, int64_t threads) const {
    return kernels::Tactic{
        "gemv",
        gemv_.version(),
        {{"rows_per_cta", rows}, {"split_k", 1}, {"threads", threads}, {"vec", 8}}};
  }

  // A sample of `tactic` as if measured on a region `scale` times the qkv region's work,
  // taking kOverhead + ideal / efficiency beyond its graph node.
  proto::CalibrationSample Sample(const kernels::Tactic& tactic, double scale, double efficiency,
                                  bool is_default, const std::string& region) const {
    kernels::WorkEstimate w = gemv_.Work(tactic, qkv_);
    w.bytes = static_cast<int64_t>(static_cast<double>(w.bytes) * scale);
    w.flops = static_cast<int64_t>(static_cast<double>(w.flops) * scale);
    proto::CalibrationSample s;
    s.set_source("synthetic");
    s.set_kind("linear");
    s.set_region_signature(region);
    s.set_phase("decode");
    s.set_tactic(tactic.ParamsString());
    s.set_default_tactic(is_default);
    s.set_bytes(w.bytes);
    s.set_flops(w.flops);
    s.set_launches(1);
    s.set_ctas(1);
    s.set_median_us(target_.graph_node_overhead_us() + kOverhead +
                    IdealMicros(w, target_) / efficiency);
    return s;
  }

  proto::CostCalibration Calibration(std::vector<proto::CalibrationSample> samples) const {
    proto::CostCalibration c;
    c.set_schema(std::string(kCostCalibrationSchema));
    c.set_schema_version(kCostCalibrationSchemaVersion);
    c.set_target("h200");
    proto::FamilyCalibration* f = c.add_families();
    f->set_family("gemv");
    f->set_family_version(gemv_.version());
    for (proto::CalibrationSample& s : samples) *f->add_samples() = std::move(s);
    return c;
  }

  // The ideal-plus-overhead time of `tactic` on the qkv region at `efficiency`.
  double Expected(const kernels::Tactic& tactic, double efficiency) const {
    return target_.graph_node_overhead_us() + kOverhead +
           IdealMicros(gemv_.Work(tactic, qkv_), target_) / efficiency;
  }

  ir::Graph graph_;
  BoundGraph decode_;
  targets::TargetDescription target_;
  BoundRegion qkv_;
  const kernels::KernelFamily& gemv_;
};

TEST_F(CostCalibrationTest, FitRecoversTheOverheadAndEachSamplesEfficiency) {
  const kernels::Tactic t = Gemv(2, 128);
  proto::CostCalibration c =
      Calibration({Sample(t, 0.7, 0.1, false, "a"), Sample(t, 1.0, 0.1, false, "b"),
                   Sample(t, 1.4, 0.1, false, "c")});
  ASSERT_TRUE(FitCostCalibration(target_, c).ok());
  const proto::FamilyCalibration& f = c.families(0);
  EXPECT_DOUBLE_EQ(f.overhead_us(), kOverhead);
  EXPECT_NEAR(f.fit_log_error(), 0, 1e-9);
  for (const proto::CalibrationSample& s : f.samples()) EXPECT_NEAR(s.efficiency(), 0.1, 1e-9);
}

TEST_F(CostCalibrationTest, PredictsFromNearSamplesOfTheSameTacticOnly) {
  const kernels::Tactic near = Gemv(2, 128), far = Gemv(4, 128), unsampled = Gemv(1, 256);
  proto::CostCalibration c =
      Calibration({Sample(near, 0.8, 0.1, false, "a"), Sample(near, 1.25, 0.1, false, "b"),
                   Sample(far, 12.0, 0.05, false, "c"), Sample(far, 15.0, 0.05, false, "d")});
  ASSERT_TRUE(FitCostCalibration(target_, c).ok());
  absl::StatusOr<CostCalibration> cal = CostCalibration::FromProto(c, "test");
  ASSERT_TRUE(cal.ok()) << cal.status();
  std::optional<double> us = cal->Predict(gemv_, near, false, qkv_, target_, LaunchMode::kGraph);
  ASSERT_TRUE(us.has_value());
  EXPECT_NEAR(*us, Expected(near, 0.1), 1e-6);
  // Samples of `far` lie more than a factor 4 away; `unsampled` has none.
  EXPECT_FALSE(cal->Predict(gemv_, far, false, qkv_, target_, LaunchMode::kGraph));
  EXPECT_FALSE(cal->Predict(gemv_, unsampled, false, qkv_, target_, LaunchMode::kGraph));
  // As a default, a tactic with no near sample takes the family's median efficiency (of
  // 0.1, 0.1, 0.05, 0.05: the upper middle one).
  us = cal->Predict(gemv_, unsampled, true, qkv_, target_, LaunchMode::kGraph);
  ASSERT_TRUE(us.has_value());
  EXPECT_NEAR(*us, Expected(unsampled, 0.1), 1e-6);
  EXPECT_EQ(cal->SampledTactics(gemv_, "linear").size(), 2u);
  EXPECT_TRUE(cal->SampledTactics(gemv_, "linear_residual").empty());
}

TEST_F(CostCalibrationTest, ADefaultBeyondEverySampleTakesTheNearestDefaultSample) {
  // Many small samples of low efficiency and one larger of high efficiency, all more than a
  // factor 4 below the region: the default takes the nearest sample's efficiency (0.5), not
  // the family's median (0.02), which the small ones dominate.
  const kernels::Tactic t = Gemv(2, 128);
  proto::CostCalibration c =
      Calibration({Sample(t, 0.01, 0.02, true, "a"), Sample(t, 0.011, 0.02, true, "b"),
                   Sample(t, 0.012, 0.02, true, "c"), Sample(t, 0.2, 0.5, true, "d")});
  ASSERT_TRUE(FitCostCalibration(target_, c).ok());
  absl::StatusOr<CostCalibration> cal = CostCalibration::FromProto(c, "test");
  ASSERT_TRUE(cal.ok()) << cal.status();
  const std::optional<double> us = cal->Predict(gemv_, t, true, qkv_, target_, LaunchMode::kGraph);
  ASSERT_TRUE(us.has_value());
  // In the fit's terms: its overhead and sample d's efficiency.
  const proto::FamilyCalibration& f = c.families(0);
  const double nearest = f.samples(3).efficiency();
  EXPECT_NEAR(*us,
              target_.graph_node_overhead_us() + f.overhead_us() +
                  IdealMicros(gemv_.Work(t, qkv_), target_) / nearest,
              1e-6);
  const double median_efficiency = f.samples(1).efficiency();  // of the three small ones
  EXPECT_LT(median_efficiency, nearest / 5);
  // Not as a tactic of its own: its samples are all far.
  EXPECT_FALSE(cal->Predict(gemv_, t, false, qkv_, target_, LaunchMode::kGraph));
}

TEST_F(CostCalibrationTest, SelectionTakesTheFastestPredictedTacticTheTunerWouldTry) {
  SelectionContext context;
  context.registry = &kernels::GlobalKernelRegistry();
  context.target = &target_;
  context.phase = ir::Phase::kDecode;
  context.environment = EnvironmentFingerprint(target_);
  absl::StatusOr<kernels::Tactic> by_default = gemv_.DefaultTactic(qkv_, target_);
  ASSERT_TRUE(by_default.ok());
  const kernels::Tactic faster =
      by_default->params.at("threads") == 256 ? Gemv(1, 128) : Gemv(1, 256);
  // 96 threads validate but are not among the values the tuner tries: never chosen, however
  // fast its samples.
  const kernels::Tactic untried = Gemv(1, 96);
  ASSERT_TRUE(gemv_.ValidateTactic(untried, qkv_, target_).ok());
  proto::CostCalibration c = Calibration(
      {Sample(*by_default, 0.9, 0.04, true, "a"), Sample(*by_default, 1.1, 0.04, true, "b"),
       Sample(faster, 0.9, 0.1, false, "a"), Sample(faster, 1.1, 0.1, false, "b"),
       Sample(untried, 0.9, 0.2, false, "a"), Sample(untried, 1.1, 0.2, false, "b")});
  ASSERT_TRUE(FitCostCalibration(target_, c).ok());
  absl::StatusOr<CostCalibration> cal = CostCalibration::FromProto(c, "test");
  ASSERT_TRUE(cal.ok()) << cal.status();
  context.calibration = &*cal;
  // cuBLASLt has no samples here, so its estimate is the uncalibrated one: left off.
  context.excluded_families = {"cublaslt_gemm"};
  absl::StatusOr<TacticChoice> choice = SelectTactic(qkv_, context);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->family->name(), "gemv");
  EXPECT_EQ(choice->source, TacticSource::kCalibrated);
  EXPECT_EQ(choice->tactic, faster);
  EXPECT_NEAR(choice->estimate.us, Expected(faster, 0.1), 1e-6);
  EXPECT_THAT(absl::StrJoin(choice->considered, "; "),
              HasSubstr(absl::StrCat("gemv: ", absl::StrFormat("%.2f", choice->estimate.us),
                                     " us (calibrated: ", faster.ParamsString(), ")")));

  // Without the calibration: the cost model's default.
  context.calibration = nullptr;
  choice = SelectTactic(qkv_, context);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, TacticSource::kCostModel);
}

TEST_F(CostCalibrationTest, RefusesBadFilesNamingWhatIsWrong) {
  const std::string head =
      "schema: \"tileplan.cost_calibration\" schema_version: 1 target: \"h200\" ";
  const std::string family =
      absl::StrCat("families { family: \"gemv\" family_version: ", gemv_.version(), " ");
  const std::string sample =
      "samples { kind: \"linear\" tactic: \"threads=128\" median_us: 3 efficiency: 0.5 } ";
  struct Case {
    std::string text, error;
  };
  const std::vector<Case> cases = {
      {"schema: \"x\" schema_version: 1 target: \"h200\"", "schema \"x\""},
      {"schema: \"tileplan.cost_calibration\" schema_version: 7 target: \"h200\"",
       "schema_version 7"},
      {"schema: \"tileplan.cost_calibration\" schema_version: 1", "target is empty"},
      {head + family + "} " + family + "}", "appears twice"},
      {head + family + "overhead_us: -1 }", "overhead_us -1"},
      {head + family +
           "samples { kind: \"linear\" tactic: \"threads=128\" median_us: 3 efficiency: 0 } }",
       "efficiency must be positive"},
      {head + family +
           "samples { kind: \"linear\" tactic: \"threads=x\" median_us: 3 efficiency: 1 } }",
       "tactic \"threads=x\""},
      {head + family + "samples { tactic: \"-\" median_us: 3 efficiency: 1 } }", "has no kind"},
      {head + family +
           "samples { kind: \"linear\" tactic: \"-\" median_us: 3 efficiency: 1 "
           "core_share: 1.5 } }",
       "core_share 1.5 is outside [0, 1]"},
      {head + "families { nonsense: 1 }", "test:1:"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CostCalibration> cal = CostCalibration::Parse(c.text, "test");
    ASSERT_FALSE(cal.ok()) << c.text;
    EXPECT_THAT(cal.status().message(), HasSubstr(c.error)) << c.text;
  }
  EXPECT_TRUE(CostCalibration::Parse(head + family + sample + "}", "test").ok());
  EXPECT_FALSE(ParseTacticParams("a=1,a=2").ok());
  EXPECT_TRUE(ParseTacticParams("-")->empty());
}

TEST_F(CostCalibrationTest, TheH200AndTheH100AreCalibratedAndNoOtherTarget) {
  for (const char* name : {"h200", "h100"}) {
    const CostCalibration* c = CostCalibration::Bundled(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->proto().target(), name);
    EXPECT_GT(c->num_samples(), 0) << name;
  }
  EXPECT_EQ(CostCalibration::Bundled("a100"), nullptr);
  EXPECT_EQ(CostCalibration::Bundled("h200-like"), nullptr);
}

}  // namespace
}  // namespace tileplan::planner
