// A tuning run serves the benchmark run with the same flags: autotune_regions --print-keys
// (the keys it measures) and benchmark_transformer --print-keys (the keys its plan looks up,
// for the families a tuning run measures) print the same lines, with the default flags as
// with others. Without a GPU both key on the target description's environment.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/tool_run.h"

namespace tileplan {
namespace {

using ::testing::HasSubstr;

testing::ToolResult RunWith(const std::string& tool, const std::string& args) {
  return testing::RunTool(tool, args, testing::ScratchDir("tactic_keys_test") / "out.txt",
                          "CUDA_VISIBLE_DEVICES=");
}

// Runs both tools with `args` and --print-keys; returns what they printed when they agree.
std::string SameKeys(const std::string& args) {
  const testing::ToolResult bench = RunWith(BENCHMARK_TRANSFORMER_PATH, args + " --print-keys");
  const testing::ToolResult tune = RunWith(AUTOTUNE_REGIONS_PATH, args + " --print_keys");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_EQ(tune.exit_code, 0) << tune.output;
  EXPECT_EQ(bench.output, tune.output) << args;
  return tune.output;
}

TEST(TacticKeysTest, TheDefaultTuningRunServesTheDefaultBenchmark) {
  const std::string keys = SameKeys("--model qwen3-0.6b --target sm_90");
  // Every default prefill bucket and the default KV-cache length (the longest bucket).
  for (const char* bucket :
       {"| B=1,Smax=2048,T=128 | prefill |", "| B=1,Smax=2048,T=512 | prefill |",
        "| B=1,Smax=2048,T=2048 | prefill |", "| B=1,Smax=2048,T=1 | decode |"}) {
    EXPECT_THAT(keys, HasSubstr(bucket));
  }
  EXPECT_THAT(keys, HasSubstr("NVIDIA H200|sm_90|132sm|l2=62914560|bw=4200|driver=0|"));
  // Views have nothing to measure.
  EXPECT_THAT(keys, ::testing::Not(HasSubstr("| view v")));
  // One line per distinct key, identical layers sharing one.
  const std::vector<std::string> lines = absl::StrSplit(keys, '\n', absl::SkipEmpty());
  EXPECT_GT(lines.size(), 20u);
  EXPECT_LT(lines.size(), 100u);
}

TEST(TacticKeysTest, TheSameFlagsGiveTheSameKeys) {
  const std::string keys = SameKeys(
      "--model qwen2.5-0.5b --target h100 --batch 4 --prefill 64 --decode 128,256 "
      "--max-context 512 --prefill-logits last");
  EXPECT_THAT(keys, HasSubstr("| B=4,Smax=512,T=64 | prefill |"));
  EXPECT_THAT(keys, HasSubstr("| B=4,Smax=512,T=1 | decode |"));
  EXPECT_THAT(keys, ::testing::Not(HasSubstr("T=128")));
}

// --only keeps the keys whose region label or key holds the text: Qwen3-30B-A3B's expert
// linears (gate and up share a key, the down projection has its own, for each family that can
// run them), a subset of every key. The batch-1 decode phase has none by default: each MoE
// block is one rms_norm_moe region there (the block with its norm; moe with
// --nofuse_norm_moe), whose key names moe_gemv; --nofuse_moe keeps its expert linears.
TEST(TacticKeysTest, OnlyListsTheMatchingKeys) {
  const std::string args = "--model qwen3-30b-a3b --target sm_90 --prefill 512 --decode 512";
  const testing::ToolResult all = RunWith(AUTOTUNE_REGIONS_PATH, args + " --print-keys");
  const testing::ToolResult only =
      RunWith(AUTOTUNE_REGIONS_PATH, args + " --print-keys --only expert_linear");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  ASSERT_EQ(only.exit_code, 0) << only.output;
  const std::vector<std::string> every = absl::StrSplit(all.output, '\n', absl::SkipEmpty());
  const std::vector<std::string> matching = absl::StrSplit(only.output, '\n', absl::SkipEmpty());
  ASSERT_FALSE(matching.empty());
  EXPECT_LT(matching.size(), every.size());
  for (const std::string& key : matching) {
    EXPECT_THAT(key, HasSubstr("expert_linear"));
    EXPECT_THAT(every, ::testing::Contains(key));
  }
  EXPECT_THAT(only.output, HasSubstr("| prefill | expert_gemm v"));
  EXPECT_THAT(only.output, ::testing::Not(HasSubstr("| decode |")));
  const testing::ToolResult unfused_experts =
      RunWith(AUTOTUNE_REGIONS_PATH, args + " --nofuse_moe --print-keys --only expert_linear");
  ASSERT_EQ(unfused_experts.exit_code, 0) << unfused_experts.output;
  EXPECT_THAT(unfused_experts.output, HasSubstr("| prefill | expert_gemm v"));
  EXPECT_THAT(unfused_experts.output, HasSubstr("| decode | expert_gemv v"));
  const testing::ToolResult fused =
      RunWith(AUTOTUNE_REGIONS_PATH, args + " --print-keys --only moe_gemv");
  ASSERT_EQ(fused.exit_code, 0) << fused.output;
  const std::vector<std::string> moe = absl::StrSplit(fused.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(moe.size(), 1u) << fused.output;  // the 48 layers' moe regions share one key
  EXPECT_THAT(moe[0], HasSubstr("| rms_norm_moe(bf16[1,1,2048], bf16[2048], "));
  EXPECT_THAT(moe[0], HasSubstr("| decode | moe_gemv v"));
  const testing::ToolResult unnormed = RunWith(
      AUTOTUNE_REGIONS_PATH, args + " --nofuse_norm_moe --print-keys --only moe_gemv");
  ASSERT_EQ(unnormed.exit_code, 0) << unnormed.output;
  EXPECT_THAT(unnormed.output, HasSubstr("| moe(bf16[1,1,2048], "));
}

}  // namespace
}  // namespace tileplan
