// calibrate_cost_model end to end, with no GPU: a tactic store export is made here for a small
// model's plan (every region's default tactic and, for GEMVs, one more, with times from a known
// overhead and efficiency), the tool turns it into a calibration file, a second run of the same
// source replaces its samples rather than adding them, bad inputs are refused naming what is
// wrong with --out left as it was, and benchmark_transformer plans with the file it wrote.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/families/registry.h"
#include "planner/cost_calibration.h"
#include "planner/plan_builder.h"
#include "targets/target.h"
#include "tests/testing/paths.h"
#include "tests/testing/tool_run.h"
#include "tests/tuner/store_testing.h"
#include "tools/tool_support.h"
#include "tuner/autotune.h"
#include "tuner/tactic_store_text.h"

namespace tileplan {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kModel[] = "smollm2-360m";
constexpr char kBuckets[] = "--prefill 64 --decode 128";

fs::path Scratch() { return testing::ScratchDir("calibrate_cost_model_test"); }

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

testing::ToolResult Calibrate(const std::string& args) {
  return testing::RunTool(testing::BuiltBinary(CALIBRATE_COST_MODEL_PATH).string(), args,
                          Scratch() / "output.txt");
}

testing::ToolResult Benchmark(const std::string& args) {
  return testing::RunTool(testing::BuiltBinary(BENCHMARK_TRANSFORMER_PATH).string(), args,
                          Scratch() / "output.txt");
}

// An export of kModel's plan (kBuckets) measured on `env`: each item's default tactic takes
// 3 us + ideal / 0.4 beyond a graph node, and a GEMV's tactic with twice the rows per CTA
// (where it validates) 3 us + ideal / 0.8.
fs::path WriteExport(const std::string& name, const tuner::Environment& env) {
  const targets::TargetDescription target = *targets::FindTarget("h200");
  planner::PlanOptions options = tools::BenchmarkPlanOptions({64}, {128}, 1, false);
  options.model_name = kModel;
  options.environment = env.Fingerprint();
  options.calibrate = false;
  const tools::ModelArgument model = *tools::LoadModelArgument(kModel);
  planner::proto::ExecutionPlan plan =
      *planner::BuildExecutionPlan(model.config, target, options, nullptr);
  const tuner::TuningWork work =
      *tuner::TuningWork::Collect(std::move(plan), target, options.environment);
  tuner::proto::TacticStoreFile file = tuner::NewTacticStoreFile();
  tuner::proto::StoredEnvironment* stored = file.add_environments();
  *stored = tuner::StoredEnvironmentOf(env, "2026-12-03T00:00:00Z");
  const double node = target.graph_node_overhead_us();
  for (const tuner::TuningItem& item : work.items()) {
    const kernels::BoundRegion region = work.Region(item);
    tuner::proto::StoredKey* key = stored->add_keys();
    *key = tuner::StoredKeyOf(item.key);
    auto add = [&](const kernels::Tactic& t, double efficiency) {
      tuner::proto::StoredCandidate* c = key->add_candidates();
      *c->mutable_tactic() = kernels::TacticToProto(t);
      c->set_status("ok");
      c->set_median_us(item.family->Launches(t, region) * node + 3.0 +
                       planner::IdealMicros(item.family->Work(t, region), target) / efficiency);
      c->set_measured_at("2026-12-03T00:00:00Z");
    };
    const kernels::Tactic by_default = *item.family->DefaultTactic(region, target);
    add(by_default, 0.4);
    if (item.family->name() == "gemv") {
      kernels::Tactic more = by_default;
      more.params["rows_per_cta"] *= 2;
      if (item.family->ValidateTactic(more, region, target).ok()) add(more, 0.8);
    }
  }
  const fs::path path = Scratch() / name;
  EXPECT_TRUE(tuner::WriteTacticStoreText(file, path.string()).ok());
  return path;
}

TEST(CalibrateCostModelTest, WritesAFittedCalibrationThatThePlannerUses) {
  const fs::path measurements =
      WriteExport("smollm2.textproto", tuner::testing::TestEnvironment(13000));
  const fs::path out = Scratch() / "h200.calibration.textproto";
  fs::remove(out);
  const std::string args = absl::StrCat("--measurements '", measurements.string(), "' --model ",
                                        kModel, " ", kBuckets, " --out '", out.string(), "'");
  testing::ToolResult r = Calibrate(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("samples from"));
  EXPECT_THAT(r.output, HasSubstr("of smollm2-360m's plan"));
  EXPECT_THAT(r.output, HasSubstr("prefill T=64"));
  EXPECT_THAT(r.output, HasSubstr("decode B=1"));
  EXPECT_THAT(r.output, HasSubstr("wrote"));
  absl::StatusOr<planner::CostCalibration> cal = planner::CostCalibration::Load(out.string());
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_EQ(cal->proto().target(), "h200");
  EXPECT_EQ(cal->proto().environment(), tuner::testing::TestEnvironment(13000).Fingerprint());
  const int64_t samples = cal->num_samples();
  EXPECT_GT(samples, 0);
  bool saw_gemv = false;
  for (const planner::proto::FamilyCalibration& f : cal->proto().families()) {
    for (const planner::proto::CalibrationSample& s : f.samples()) {
      EXPECT_EQ(s.source(), kModel);
      EXPECT_GT(s.efficiency(), 0);
      // The GEMV's work says its CUDA-core flops run at a quarter of the rate; the other
      // families leave the field out.
      EXPECT_EQ(s.core_share(), f.family() == "gemv" ? 0.25 : 0.0) << f.family();
      saw_gemv = saw_gemv || f.family() == "gemv";
    }
  }
  EXPECT_TRUE(saw_gemv);

  // The same source again: its samples are replaced, not added.
  r = Calibrate(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(planner::CostCalibration::Load(out.string())->num_samples(), samples);

  // --refit fits the file's own samples again: an efficiency edited by hand is recomputed,
  // and nothing is added.
  {
    std::string text = ReadFile(out);
    const size_t at = text.find("efficiency: ");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, text.find('\n', at) - at, "efficiency: 123");
    std::ofstream(out) << text;
  }
  r = Calibrate(absl::StrCat("--refit --out '", out.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("refitted ", samples, " samples for target h200")));
  EXPECT_EQ(ReadFile(out).find("efficiency: 123\n"), std::string::npos);
  EXPECT_EQ(planner::CostCalibration::Load(out.string())->num_samples(), samples);
  const std::string refitted = ReadFile(out);  // a second refit changes nothing
  EXPECT_EQ(Calibrate(absl::StrCat("--refit --out '", out.string(), "'")).exit_code, 0);
  EXPECT_EQ(ReadFile(out), refitted);

  // benchmark_transformer plans with it, or with none.
  r = Benchmark(absl::StrCat("--model ", kModel, " ", kBuckets, " --show-plan --calibration '",
                             out.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr(absl::StrCat("cost model calibrated (h200: ", samples, " samples of")));
  EXPECT_THAT(r.output, HasSubstr(" calibrated "));
  r = Benchmark(absl::StrCat("--model ", kModel, " ", kBuckets, " --show-plan --calibration none"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cost model uncalibrated"));
  r = Benchmark(absl::StrCat("--model ", kModel, " ", kBuckets, " --show-plan --calibration '",
                             (Scratch() / "absent").string(), "'"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--calibration: "));

  // --refit drops a family whose version the registry no longer has, naming it.
  int gemv_samples = 0;
  {
    std::string text = ReadFile(out);
    const size_t family = text.find("family: \"gemv\"");
    ASSERT_NE(family, std::string::npos);
    const size_t at = text.find("family_version: ", family);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, text.find('\n', at) - at, "family_version: 99");
    std::ofstream(out) << text;
    absl::StatusOr<planner::CostCalibration> edited = planner::CostCalibration::Load(out.string());
    ASSERT_TRUE(edited.ok()) << edited.status();
    for (const planner::proto::FamilyCalibration& f : edited->proto().families()) {
      if (f.family() == "gemv") gemv_samples = f.samples_size();
    }
  }
  ASSERT_GT(gemv_samples, 0);
  r = Calibrate(absl::StrCat("--refit --out '", out.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("dropping ", gemv_samples,
                                               " samples of gemv v99 (the family is now v")));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("refitted ", samples - gemv_samples, " samples")));
  EXPECT_EQ(planner::CostCalibration::Load(out.string())->num_samples(), samples - gemv_samples);
}

TEST(CalibrateCostModelTest, RefusesWhatItCannotCalibrateFromAndLeavesOutAlone) {
  const fs::path out = Scratch() / "kept.calibration.textproto";
  const std::string kept =
      "schema: \"tileplan.cost_calibration\"\nschema_version: 1\ntarget: \"a100\"\n";
  {
    std::ofstream f(out);
    f << kept;
  }
  tuner::Environment other_gpu = tuner::testing::TestEnvironment(13000);
  other_gpu.sm = 80;
  other_gpu.sm_count = 108;
  const fs::path h200 = WriteExport("h200.textproto", tuner::testing::TestEnvironment(13000));
  const fs::path a100 = WriteExport("a100.textproto", other_gpu);
  struct Case {
    std::string args, error;
  };
  const std::vector<Case> cases = {
      {absl::StrCat("--model ", kModel, " --out '", out.string(), "'"),
       "--measurements (or --from-samples) is required"},
      {absl::StrCat("--measurements '", h200.string(), "' --model ", kModel, " ", kBuckets),
       "--out is required"},
      {absl::StrCat("--measurements '", a100.string(), "' --model ", kModel, " ", kBuckets,
                    " --out '", out.string(), "'"),
       "not on target h200"},
      {absl::StrCat("--measurements '", h200.string(), "' --model ", kModel, " ", kBuckets,
                    " --out '", out.string(), "'"),
       "calibrates target a100, not h200"},
      {absl::StrCat("--measurements '", h200.string(), "' --model qwen3-0.6b ", kBuckets,
                    " --out '", (Scratch() / "new.textproto").string(), "'"),
       "holds no measurement of qwen3-0.6b's plan"},
      {absl::StrCat("--refit --measurements '", h200.string(), "' --out '", out.string(), "'"),
       "--refit adds no measurements"},
      {absl::StrCat("--refit --target h200 --out '", out.string(), "'"),
       "calibrates target a100, not h200"},
      {absl::StrCat("--refit --out '", (Scratch() / "new.textproto").string(), "'"),
       "new.textproto"},
      {absl::StrCat("--refit --from-samples x --out '", out.string(), "'"),
       "--refit takes no --from-samples"},
      {absl::StrCat("--from-samples x --measurements '", h200.string(), "' --model ", kModel,
                    " --out '", out.string(), "'"),
       "give one"},
      {absl::StrCat("--from-samples x --model ", kModel, " --out '", out.string(), "'"),
       "holds no samples of 'x'; its sources: none"},
      {absl::StrCat("--from-samples x --model ", kModel, " --out '",
                    (Scratch() / "new.textproto").string(), "'"),
       "new.textproto"},
  };
  for (const Case& c : cases) {
    const testing::ToolResult r = Calibrate(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.error)) << c.args;
  }
  EXPECT_EQ(ReadFile(out), kept);
  EXPECT_FALSE(fs::exists(Scratch() / "new.textproto"));
}

// The number in a report line "decode B=1 ... (1.010x 1.095x 1.007x of tuned)" at `column`
// (0: uncalibrated, 1: held out, 2: calibrated); -1 when the line is absent.
double RatioOfTuned(const std::string& output, const std::string& phase, int column) {
  const size_t line = output.find("\n" + phase + " ");
  if (line == std::string::npos) return -1;
  const size_t open = output.find('(', line);
  if (open == std::string::npos) return -1;
  std::istringstream in(output.substr(open + 1));
  double ratio = -1;
  for (int i = 0; i <= column; ++i) {
    std::string token;
    if (!(in >> token) || token.empty() || token.back() != 'x') return -1;
    ratio = std::stod(token.substr(0, token.size() - 1));
  }
  return ratio;
}

// --from-samples reports on a source the bundled calibrations hold, with no export and no
// GPU: the measurements taken on the H200 and H100 of Qwen3-0.6B's decode step. The defaults
// (the uncalibrated picks) and the calibrated picks must stay within 3% of the fastest
// measured candidates there (docs/PERF.md, "One-row decode linears": 1.010x and 1.004x; the
// earlier GEMV default gave 1.238x and 1.240x). --dry-run leaves the file as it was; without
// it, the source's samples are made again, the file keeps every sample.
TEST(CalibrateCostModelTest, FromSamplesReportsOnTheBundledMeasurements) {
  for (const char* target : {"h200", "h100"}) {
    SCOPED_TRACE(target);
    const fs::path bundled =
        testing::SourcePath(absl::StrCat("targets/", target, ".calibration.textproto"));
    const fs::path copy = Scratch() / absl::StrCat(target, ".copy.textproto");
    fs::copy_file(bundled, copy, fs::copy_options::overwrite_existing);
    const std::string args =
        absl::StrCat("--from-samples qwen3-0.6b --model qwen3-0.6b --prefill 512 --decode ",
                     "512,2048,8192,16384 --out '", copy.string(), "'");
    testing::ToolResult r = Calibrate(args + " --dry-run");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("'s samples of qwen3-0.6b:"));
    const double uncalibrated = RatioOfTuned(r.output, "decode B=1", 0);
    const double calibrated = RatioOfTuned(r.output, "decode B=1", 2);
    EXPECT_GE(uncalibrated, 1.0) << r.output;
    EXPECT_LE(uncalibrated, 1.03) << r.output;
    EXPECT_GE(calibrated, 1.0) << r.output;
    EXPECT_LE(calibrated, 1.03) << r.output;
    EXPECT_EQ(ReadFile(copy), ReadFile(bundled));
    // Another plan's buckets match none of the samples, and the error lists theirs.
    r = Calibrate(absl::StrCat("--from-samples qwen3-0.6b --model qwen3-0.6b --decode 512 --out '",
                               copy.string(), "' --dry-run"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("no sample of qwen3-0.6b matches a region of this plan"));
    EXPECT_THAT(r.output, HasSubstr("B=1,Smax=16384,T=1"));
    // Made again from the same plan's buckets, the samples come back one for one.
    absl::StatusOr<planner::CostCalibration> before =
        planner::CostCalibration::Load(bundled.string());
    ASSERT_TRUE(before.ok()) << before.status();
    r = Calibrate(absl::StrCat(
        "--from-samples qwen3-0.6b --model qwen3-0.6b --prefill 128,512,2048",
        std::string(target) == "h100" ? ",4096" : "", " --decode 512,2048,8192,16384 --out '",
        copy.string(), "'"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    absl::StatusOr<planner::CostCalibration> after = planner::CostCalibration::Load(copy.string());
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->num_samples(), before->num_samples());
  }
}

// The bundled calibrations are what the families make of their samples today: every source's
// samples made again from its plan (`--from-samples`, each with the buckets it was tuned
// with) give the file back byte for byte. A change to a default tactic, a work figure or a
// tactic's canonical form that leaves them stale (a sample flagged as the default that no
// longer is, which a default's prediction draws on) fails here until they are remade.
TEST(CalibrateCostModelTest, BundledCalibrationsAreCurrent) {
  struct Source {
    const char* name;
    const char* plan;  // the flags it was tuned with
  };
  const std::vector<std::pair<std::string, std::vector<Source>>> files = {
      {"h200",
       {{"llama-3.2-1b", "--model llama-3.2-1b --prefill 512 --decode 512"},
        {"mistral-7b B=16", "--model mistral-7b --batch 16 --prefill 128,512 --decode 512"},
        {"qwen2-7b B=16", "--model qwen2-7b --batch 16 --prefill 128,512 --decode 512"},
        {"qwen3-0.6b", "--model qwen3-0.6b --prefill 128,512,2048 --decode 512,2048,8192,16384"}}},
      {"h100",
       {{"qwen2-7b B=16", "--model qwen2-7b --batch 16 --prefill 512 --decode 512"},
        {"qwen3-0.6b",
         "--model qwen3-0.6b --prefill 128,512,2048,4096 --decode 512,2048,8192,16384"}}},
  };
  for (const auto& [target, sources] : files) {
    SCOPED_TRACE(target);
    const fs::path bundled =
        testing::SourcePath(absl::StrCat("targets/", target, ".calibration.textproto"));
    absl::StatusOr<planner::CostCalibration> cal = planner::CostCalibration::Load(bundled.string());
    ASSERT_TRUE(cal.ok()) << cal.status();
    std::set<std::string> held, listed;
    for (const planner::proto::FamilyCalibration& f : cal->proto().families()) {
      for (const planner::proto::CalibrationSample& s : f.samples()) held.insert(s.source());
    }
    for (const Source& s : sources) listed.insert(s.name);
    ASSERT_EQ(held, listed) << "a source of " << bundled << " is missing from this test's list";
    const fs::path copy = Scratch() / absl::StrCat(target, ".remade.textproto");
    fs::copy_file(bundled, copy, fs::copy_options::overwrite_existing);
    for (const Source& s : sources) {
      const testing::ToolResult r = Calibrate(
          absl::StrCat("--from-samples '", s.name, "' ", s.plan, " --out '", copy.string(), "'"));
      ASSERT_EQ(r.exit_code, 0) << s.name << "\n" << r.output;
    }
    EXPECT_TRUE(ReadFile(copy) == ReadFile(bundled))
        << bundled << " is not what its samples make today: remake it with calibrate_cost_model "
        << "--from-samples SOURCE <the source's plan flags> --out " << bundled
        << " for each source (docs/planner.md, \"Calibrated cost model\")";
  }
}

}  // namespace
}  // namespace tileplan
