// One GPU runtime serving many generate calls (label gpu; skips with the reason without a
// usable GPU): TILEPLAN_SOAK_CALLS calls (10,000 by default) with prompts of varied lengths
// and contents and varied numbers of new tokens, on a dense fixture and on a latent-attention
// MoE one. The device's free memory after the last call must equal what it was after the first
// hundred, and a sample of the calls replayed on a fresh runtime must give the same tokens.
// docs/reliability.md gives the figures of a run.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "device/device.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/safetensors.h"
#include "planner/plan_builder.h"
#include "runtime/gpu/device_target.h"
#include "runtime/gpu/gpu_runtime.h"
#include "tests/testing/paths.h"

namespace tileplan::runtime::gpu {
namespace {

struct Call {
  std::vector<int32_t> prompt;
  int new_tokens = 0;
  std::vector<int32_t> tokens;
};

class GpuSoakTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuSoakTest, ManyGenerateCallsKeepMemoryAndOutputs) {
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(0);
  if (!device.ok()) GTEST_SKIP() << device.status().message();
  int calls = 10000;
  if (const char* s = std::getenv("TILEPLAN_SOAK_CALLS"); s != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(s, &calls) && calls > 100) << s;
  }
  const std::string fixture = tileplan::testing::SourcePath("tests/data/" + GetParam()).string();
  absl::StatusOr<models::ModelConfig> config = models::LoadModelConfig(fixture);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<models::Checkpoint>> checkpoint =
      models::Checkpoint::Open(fixture);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  absl::StatusOr<targets::TargetDescription> target = TargetForDevice(**device);
  ASSERT_TRUE(target.ok()) << target.status();

  constexpr int64_t kMaxContext = 64;
  constexpr int kMaxPrompt = 32;
  planner::PlanOptions options;
  options.prefill_tokens = {8, 16, kMaxPrompt};
  options.decode_batches = {1};
  options.max_context = kMaxContext;
  absl::StatusOr<planner::proto::ExecutionPlan> plan =
      planner::BuildExecutionPlan(*config, *target, options, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto make = [&] { return GpuRuntime::Create(**device, *plan, checkpoint->get(), {}); };
  absl::StatusOr<std::unique_ptr<GpuRuntime>> runtime = make();
  ASSERT_TRUE(runtime.ok()) << runtime.status();

  std::mt19937 rng(1202);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config->vocab_size - 1));
  std::vector<Call> sample;
  int64_t free_after_warmup = 0, tokens_generated = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    Call call;
    call.prompt.resize(std::uniform_int_distribution<int>(1, kMaxPrompt)(rng));
    for (int32_t& t : call.prompt) t = token(rng);
    const int room = static_cast<int>(kMaxContext - static_cast<int64_t>(call.prompt.size())) + 1;
    call.new_tokens = std::uniform_int_distribution<int>(1, std::min(room, 24))(rng);
    absl::StatusOr<std::vector<int32_t>> out =
        (*runtime)->Generate(call.prompt, 1, call.new_tokens);
    ASSERT_TRUE(out.ok()) << "call " << i << ": " << out.status();
    ASSERT_EQ(out->size(), static_cast<size_t>(call.new_tokens));
    tokens_generated += call.new_tokens;
    if (i == 99) {
      absl::StatusOr<device::Device::MemoryInfo> memory = (*device)->GetMemoryInfo();
      ASSERT_TRUE(memory.ok()) << memory.status();
      free_after_warmup = memory->free_bytes;
    }
    if (i % 97 == 0) {
      call.tokens = *std::move(out);
      sample.push_back(std::move(call));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::StatusOr<device::Device::MemoryInfo> memory = (*device)->GetMemoryInfo();
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->free_bytes, free_after_warmup)
      << "device memory changed between call 100 and call " << calls;
  std::cout << GetParam() << ": " << calls << " generate calls, " << tokens_generated
            << " tokens in " << seconds << " s; free device memory " << free_after_warmup
            << " bytes after call 100, " << memory->free_bytes << " after the last\n";

  // The same calls on a fresh runtime give the same tokens.
  runtime->reset();
  absl::StatusOr<std::unique_ptr<GpuRuntime>> fresh = make();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  int differing = 0;
  for (const Call& call : sample) {
    absl::StatusOr<std::vector<int32_t>> out = (*fresh)->Generate(call.prompt, 1, call.new_tokens);
    ASSERT_TRUE(out.ok()) << out.status();
    if (*out != call.tokens) ++differing;
  }
  EXPECT_EQ(differing, 0) << "of " << sample.size() << " sampled calls";
  std::cout << GetParam() << ": " << sample.size() << " sampled calls replayed on a fresh runtime, "
            << differing << " differing\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuSoakTest, ::testing::Values("qwen3-tiny", "deepseek-v2-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace tileplan::runtime::gpu
