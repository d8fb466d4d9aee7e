// benchmark_transformer end to end: --show-plan for the bundled configs on a machine without
// a GPU, its machine-readable forms, and the documented refusals (exit status 2).
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "tests/testing/paths.h"
#include "tests/testing/tool_run.h"

namespace tileplan {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using Result = testing::ToolResult;

// A scratch directory private to this process and test.
fs::path Scratch() { return testing::ScratchDir("benchmark_transformer_test"); }

// Runs the tool with every GPU hidden (these tests are about planning; a GPU would add a
// benchmark at real size to every run that shows a plan).
Result RunTool(const std::string& args, const std::string& env = "CUDA_VISIBLE_DEVICES=") {
  return testing::RunTool(testing::BuiltBinary(BENCHMARK_TRANSFORMER_PATH).string(), args,
                          Scratch() / "output.txt", env);
}

TEST(BenchmarkTransformerTest, PrintAfterShowsThePassOutputOfEveryPhase) {
  const Result r =
      RunTool("--model qwen3-0.6b --show-plan --prefill 128 --print-after=fuse_residual");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("// ===== prefill T=128\n// ----- IR after fuse_residual "
                                  "(pass 5 of 8)\ngraph @qwen3 {"));
  EXPECT_THAT(r.output, HasSubstr("// ===== decode B=1\n// ----- IR after fuse_residual"));
  EXPECT_THAT(r.output, HasSubstr("= linear_residual("));

  const Result bad = RunTool("--model qwen3-0.6b --show-plan --print-after=no_such_pass");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("cannot print after pass 'no_such_pass'"));
}

TEST(BenchmarkTransformerTest, ShowPlanQwen3OnSm90AppliesEveryFusion) {
  const Result r = RunTool("--model qwen3-0.6b --target sm_90 --show-plan");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plan qwen3-0.6b on h200 (NVIDIA H200, sm_90, 132 SMs)"));
  // Packed q/k/v and gate/up weights, and every fused kind with what it replaced.
  EXPECT_THAT(r.output, HasSubstr("packed weights: 56"));
  EXPECT_THAT(r.output, HasSubstr("qk_norm_rope_kv_write  split,reshape*3,rms_norm*2,rope*2,"
                                  "kv_write*2"));
  // Decode also takes the attention into the RoPE + KV-write region.
  EXPECT_THAT(r.output, HasSubstr("qk_norm_rope_kv_write_attention  split,reshape*3,rms_norm*2,"
                                  "rope*2,kv_write*2,attention"));
  EXPECT_THAT(r.output, HasSubstr("linear_swiglu          linear,split,silu,mul"));
  EXPECT_THAT(r.output, HasSubstr("linear_residual        linear,add"));
  // Decode at batch 1 folds both norms of a layer into the GEMVs after them.
  // (The kind column is as wide as the phase's longest kind.)
  EXPECT_THAT(r.output, ::testing::ContainsRegex("rms_norm_linear +rms_norm,linear "));
  EXPECT_THAT(r.output,
              ::testing::ContainsRegex("rms_norm_linear_swiglu +rms_norm,linear,split,silu,mul"));
  EXPECT_THAT(r.output, HasSubstr("prefill T=128 ("));
  EXPECT_THAT(r.output, HasSubstr("prefill T=2048 ("));
  EXPECT_THAT(r.output, HasSubstr("memory: arena "));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("launches per decode step: (\\d+)\n")))
      << r.output;
  // Five per layer, plus the embedding, the final norm and the LM head.
  EXPECT_EQ(std::stoi(m[1]), 5 * 28 + 3);
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr(" kv_write ")));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr(" silu ")));
}

TEST(BenchmarkTransformerTest, EveryBundledConfigShowsAPlan) {
  for (const std::string& name : models::BundledConfigNames()) {
    const Result r =
        RunTool(absl::StrCat("--model ", name, " --prefill 64 --decode 256 --show-plan"));
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("launches per decode step: ")) << name;
  }
}

// A committed two-layer fixture keeps the machine forms small.
std::string TinyModel() { return testing::SourcePath("tests/data/qwen3-tiny").string(); }

TEST(BenchmarkTransformerTest, MachineFormatsAreDeterministic) {
  for (const char* format : {"textproto", "json"}) {
    const std::string args =
        absl::StrCat("--model ", TinyModel(), " --prefill 16 --decode 16 --show-plan=", format);
    const Result a = RunTool(args);
    const Result b = RunTool(args);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    EXPECT_TRUE(a.output == b.output) << format;
    EXPECT_NE(a.output.find("SOURCE_COST_MODEL"), std::string::npos) << format;
    EXPECT_NE(a.output.find("qk_norm_rope_kv_write"), std::string::npos) << format;
  }
  EXPECT_THAT(
      RunTool(absl::StrCat("--model ", TinyModel(), " --prefill 16 --decode 16 --show-plan=json"))
          .output,
      ::testing::StartsWith("{"));
}

TEST(BenchmarkTransformerTest, ModelDirectoryIsReadAndNamesThePlan) {
  const fs::path dir = Scratch() / "my-qwen3";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << *models::BundledConfigJson("qwen3-0.6b");
  const Result r =
      RunTool(absl::StrCat("--model '", dir.string(), "' --prefill 16 --decode 16 --show-plan"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plan my-qwen3 on h200"));
}

TEST(BenchmarkTransformerTest, RefusalsExitWithTwo) {
  // Hide every GPU: the benchmark alone cannot run, the plan still can.
  Result r = RunTool("--model qwen3-0.6b");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no CUDA device"));
  EXPECT_THAT(r.output, HasSubstr("the benchmark needs a GPU (--show-plan prints the plan"));
  r = RunTool("--model qwen3-0.6b --prefill 16 --decode 16 --show-plan");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("benchmark skipped: no CUDA device"));
  r = RunTool(absl::StrCat("--model qwen3-0.6b --show-plan --tactic-cache '",
                           (Scratch() / "missing.db").string(), "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("missing.db does not exist (opened read-only)"));
  r = RunTool("--model qwen3-0.6b --show-plan --freeze");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--freeze needs --tactic-cache"));
  r = RunTool("--model qwen3-0.6b --show-plan=xml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown plan format 'xml'"));
  r = RunTool("--model no-such-model --show-plan");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--model no-such-model is neither an existing path"));
  r = RunTool("--model qwen3-0.6b --batch 0 --show-plan");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--batch needs a positive integer, got '0'"));
  r = RunTool("--model qwen3-0.6b --target sm_61 --show-plan");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown target 'sm_61'"));
  r = RunTool("--show-plan");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("usage: benchmark_transformer"));
  // head_dim 80 has no flash kernel, and 64 new tokens are too many for the split-KV decode
  // kernel.
  std::ifstream in(TinyModel() + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = config.find("\"head_dim\": 32");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, 14, "\"head_dim\": 80");
  const fs::path dir = Scratch() / "head-dim-80";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config;
  r = RunTool(absl::StrCat("--model '", dir.string(), "' --prefill 64 --decode 16 --show-plan"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("attention_prefill: head_dim 80"));
}

TEST(BenchmarkTransformerTest, AForeignTacticStoreWarnsAndPlansWithTheCostModel) {
  const fs::path junk = Scratch() / "junk.db";
  std::ofstream(junk) << std::string(4096, 'x');
  const std::string base = absl::StrCat(
      "--model qwen3-0.6b --prefill 16 --decode 16 --show-plan "
      "--tactic-cache '",
      junk.string(), "'");
  Result r = RunTool(base);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("is treated as empty and will not be written"));
  EXPECT_THAT(r.output, HasSubstr("cost model"));
  EXPECT_THAT(r.output, Not(HasSubstr(" tuned ")));
  // Without a GPU no measurement matches this machine: --freeze refuses every step.
  r = RunTool(base + " --freeze");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("lookups found no measured tactic"));
}

TEST(BenchmarkTransformerTest, TimePlanningReportsTheMedian) {
  const Result r = RunTool("--model qwen2.5-0.5b --prefill 64 --decode 64 --time-planning=2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("planning qwen2.5-0.5b for h200 (2 phases), 2 runs: median "));
  EXPECT_THAT(r.output, HasSubstr(" ms CPU\n"));
}

}  // namespace
}  // namespace tileplan
