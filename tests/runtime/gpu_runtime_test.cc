// The GPU runtime end to end on a fixture checkpoint (label gpu; every test skips with the
// reason on a machine without a usable GPU): CUDA Graph replay against host launches, the
// device-side greedy loop against host-driven steps, padded prefill buckets, and the errors
// a user can run into.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/safetensors.h"
#include "planner/plan_builder.h"
#include "runtime/gpu/device_target.h"
#include "runtime/gpu/gpu_runtime.h"
#include "runtime/gpu/tensor_parallel.h"
#include "targets/target.h"
#include "tests/testing/paths.h"

namespace tileplan::runtime::gpu {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

fs::path Fixture() { return tileplan::testing::SourcePath("tests/data/qwen3-tiny"); }

class GpuRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(0);
    if (!device.ok()) GTEST_SKIP() << device.status().message();
    device_ = *std::move(device);
    absl::StatusOr<targets::TargetDescription> target = TargetForDevice(*device_);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *target;
    absl::StatusOr<models::ModelConfig> config = models::LoadModelConfig(Fixture().string());
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    absl::StatusOr<std::unique_ptr<models::Checkpoint>> checkpoint =
        models::Checkpoint::Open(Fixture());
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    checkpoint_ = *std::move(checkpoint);
  }

  absl::StatusOr<std::unique_ptr<GpuRuntime>> Make(
      std::vector<int64_t> prefill, int64_t max_context, bool graphs = true, int64_t batch = 1,
      GpuOptions::ProgrammaticLaunch programmatic = GpuOptions::ProgrammaticLaunch::kDecode,
      bool last_token_logits = false,
      planner::proto::PlanOptions::DecodeBackend backend =
          planner::proto::PlanOptions::DECODE_BACKEND_KERNELS,
      int stream_slots = planner::kDefaultStreamSlots, bool trace = false,
      std::vector<int64_t> decode_batches = {}) {
    planner::PlanOptions options;
    options.decode_backend = backend;
    options.persistent_stream_slots = stream_slots;
    options.prefill_last_token_logits = last_token_logits;
    options.prefill_tokens = std::move(prefill);
    options.prefill_batch = batch;
    options.decode_batches = decode_batches.empty() ? std::vector<int64_t>{batch} : decode_batches;
    options.max_context = max_context;
    absl::StatusOr<planner::proto::ExecutionPlan> plan =
        planner::BuildExecutionPlan(config_, target_, options, nullptr);
    if (!plan.ok()) return plan.status();
    GpuOptions gpu;
    gpu.cuda_graphs = graphs;
    gpu.programmatic_launch = programmatic;
    gpu.persistent_trace = trace;
    return GpuRuntime::Create(*device_, *plan, checkpoint_.get(), gpu);
  }

  // The device greedy loop of `rt` (16 tokens after a 24-token prompt) against host-driven
  // decode steps of the same runtime, which it must match token for token; `stepped` gets
  // the host steps' tokens.
  void ExpectGreedyLoopMatchesHostSteps(GpuRuntime& rt, std::vector<int32_t>& stepped) {
    const std::vector<int32_t> prompt = Prompt(24, 3);
    auto loop = rt.Generate(prompt, 1, 16);
    ASSERT_TRUE(loop.ok()) << loop.status();
    auto logits = rt.Prefill(prompt, 1);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const int64_t v = config_.vocab_size;
    auto argmax = [&](const float* row) {
      return static_cast<int32_t>(std::max_element(row, row + v) - row);
    };
    stepped = {argmax(logits->data() + 23 * v)};
    while (stepped.size() < 16) {
      auto step = rt.Decode({stepped.back()}, {static_cast<int32_t>(24 + stepped.size() - 1)});
      ASSERT_TRUE(step.ok()) << step.status();
      stepped.push_back(argmax(step->data()));
    }
    EXPECT_EQ(*loop, stepped);
  }

  // Each prompt (of 16 tokens) alone on a runtime of one sequence, teacher-forced with its own
  // greedy tokens: per prompt the last prompt logits, then each of `steps` decode steps'
  // logits (want), the tokens fed (fed), the largest logit magnitude seen (max_ref), and the
  // prompts one after another, a batch's prefill input (joined).
  struct SingleRuns {
    std::vector<std::vector<std::vector<float>>> want;
    std::vector<std::vector<int32_t>> fed;
    double max_ref = 0;
    std::vector<int32_t> joined;
  };
  void RunAlone(const std::vector<std::vector<int32_t>>& prompts, int steps, SingleRuns& out) {
    auto single = Make({16}, 32, true, 1);
    ASSERT_TRUE(single.ok()) << single.status();
    const size_t v = static_cast<size_t>(config_.vocab_size);
    out.want.assign(prompts.size(), {});
    out.fed.assign(prompts.size(), {});
    out.joined.clear();
    for (size_t s = 0; s < prompts.size(); ++s) {
      out.joined.insert(out.joined.end(), prompts[s].begin(), prompts[s].end());
      auto logits = (*single)->Prefill(prompts[s], 1);
      ASSERT_TRUE(logits.ok()) << logits.status();
      out.want[s].emplace_back(logits->end() - static_cast<std::ptrdiff_t>(v), logits->end());
      for (int k = 0; k < steps; ++k) {
        const std::vector<float>& last = out.want[s].back();
        out.fed[s].push_back(
            static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
        auto step = (*single)->Decode({out.fed[s].back()}, {16 + k});
        ASSERT_TRUE(step.ok()) << step.status();
        out.want[s].push_back(*std::move(step));
      }
      for (const std::vector<float>& row : out.want[s]) {
        for (float x : row) out.max_ref = std::max(out.max_ref, std::fabs(double{x}));
      }
    }
  }

  std::vector<int32_t> Prompt(int n, int salt = 0) const {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) {
      ids.push_back(static_cast<int32_t>((i * 37 + salt * 11 + 5) % config_.vocab_size));
    }
    return ids;
  }

  std::unique_ptr<device::Device> device_;
  targets::TargetDescription target_;
  models::ModelConfig config_;
  std::unique_ptr<models::Checkpoint> checkpoint_;
};

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double{a[i]} - double{b[i]}));
  return d;
}

TEST_F(GpuRuntimeTest, GraphReplayMatchesHostLaunchesExactly) {
  auto graphs = Make({24}, 48, true);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  auto host = Make({24}, 48, false);
  ASSERT_TRUE(host.ok()) << host.status();
  const std::vector<int32_t> prompt = Prompt(24);
  auto a = (*graphs)->Prefill(prompt, 1);
  auto b = (*host)->Prefill(prompt, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), 24u * static_cast<size_t>(config_.vocab_size));
  EXPECT_EQ(*a, *b);  // the same kernels on the same data: bit for bit
  auto ga = (*graphs)->Generate(prompt, 1, 12);
  auto gb = (*host)->Generate(prompt, 1, 12);
  ASSERT_TRUE(ga.ok()) << ga.status();
  ASSERT_TRUE(gb.ok()) << gb.status();
  EXPECT_EQ(*ga, *gb);
}

TEST_F(GpuRuntimeTest, ProgrammaticDependentLaunchChangesNoBit) {
  auto plain = Make({24}, 48, true, 1, GpuOptions::ProgrammaticLaunch::kNever);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (bool graphs : {true, false}) {
    auto pdl = Make({24}, 48, graphs, 1, GpuOptions::ProgrammaticLaunch::kAlways);
    ASSERT_TRUE(pdl.ok()) << pdl.status();
    const std::vector<int32_t> prompt = Prompt(24, 7);
    auto a = (*plain)->Prefill(prompt, 1);
    auto b = (*pdl)->Prefill(prompt, 1);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << (graphs ? "graphs" : "host launches");
    auto ga = (*plain)->Generate(prompt, 1, 12);
    auto gb = (*pdl)->Generate(prompt, 1, 12);
    ASSERT_TRUE(ga.ok() && gb.ok());
    EXPECT_EQ(*ga, *gb);
  }
}

TEST_F(GpuRuntimeTest, DeviceGreedyLoopMatchesHostSteps) {
  auto rt = Make({24}, 48);
  ASSERT_TRUE(rt.ok()) << rt.status();
  std::vector<int32_t> stepped;
  ExpectGreedyLoopMatchesHostSteps(**rt, stepped);
  // Lively: not one token repeated.
  EXPECT_GT(std::set<int32_t>(stepped.begin(), stepped.end()).size(), 3u);
}

TEST_F(GpuRuntimeTest, PaddedBucketGivesTheSameLogits) {
  auto exact = Make({20}, 40);
  ASSERT_TRUE(exact.ok()) << exact.status();
  auto padded = Make({32}, 40);
  ASSERT_TRUE(padded.ok()) << padded.status();
  const std::vector<int32_t> prompt = Prompt(20, 5);
  auto a = (*exact)->Prefill(prompt, 1);
  auto b = (*padded)->Prefill(prompt, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), b->size());
  double max_ref = 0;
  for (float x : *a) max_ref = std::max(max_ref, std::fabs(double{x}));
  // GEMMs of 20 and 32 rows may take different cuBLASLt algos: bf16-level agreement.
  EXPECT_LE(MaxAbsDiff(*a, *b), 2e-2 * max_ref);
  // And the continuation after a padded prefill reads only the real cache rows.
  auto ga = (*exact)->Generate(prompt, 1, 8);
  auto gb = (*padded)->Generate(prompt, 1, 8);
  ASSERT_TRUE(ga.ok() && gb.ok());
  EXPECT_EQ(*ga, *gb);
}

TEST_F(GpuRuntimeTest, LastTokenLogitsMatchTheFullPrefill) {
  // Every token's logits from an exact bucket, against a plan keeping the last token's only
  // over a larger bucket (the runtime puts the padding before each prompt), at batch 2.
  auto full = Make({20}, 40, true, 2);
  ASSERT_TRUE(full.ok()) << full.status();
  auto last = Make({32}, 40, true, 2, GpuOptions::ProgrammaticLaunch::kDecode, true);
  ASSERT_TRUE(last.ok()) << last.status();
  std::vector<int32_t> prompts = Prompt(20, 2);
  const std::vector<int32_t> second = Prompt(20, 9);
  prompts.insert(prompts.end(), second.begin(), second.end());
  auto a = (*full)->Prefill(prompts, 2);
  auto b = (*last)->Prefill(prompts, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const size_t v = static_cast<size_t>(config_.vocab_size);
  ASSERT_EQ(a->size(), 2 * 20 * v);
  ASSERT_EQ(b->size(), 2 * v);
  std::vector<float> want;
  for (size_t s = 0; s < 2; ++s) {
    want.insert(want.end(), a->begin() + ((s + 1) * 20 - 1) * v, a->begin() + (s + 1) * 20 * v);
  }
  double max_ref = 0;
  for (float x : want) max_ref = std::max(max_ref, std::fabs(double{x}));
  // As PaddedBucketGivesTheSameLogits: other GEMM shapes (the LM head of 2 rows is a GEMV
  // here), so bf16-level agreement.
  EXPECT_LE(MaxAbsDiff(want, *b), 2e-2 * max_ref);
  auto ga = (*full)->Generate(prompts, 2, 8);
  auto gb = (*last)->Generate(prompts, 2, 8);
  ASSERT_TRUE(ga.ok()) << ga.status();
  ASSERT_TRUE(gb.ok()) << gb.status();
  EXPECT_EQ(*ga, *gb);
}

TEST_F(GpuRuntimeTest, BatchedPromptsMatchSinglePrompts) {
  // Two prompts in one batch against each alone, teacher-forced: both runtimes take the
  // single runs' greedy tokens, step after step. The batch has other GEMM shapes and GEMV
  // reductions over two rows, so the logits agree at bf16 level, not bit for bit (greedy
  // tokens compared free-running would part at the first near-tie).
  auto batched = Make({16}, 32, true, 2);
  ASSERT_TRUE(batched.ok()) << batched.status();
  constexpr int kSteps = 8;
  const size_t v = static_cast<size_t>(config_.vocab_size);
  SingleRuns alone;
  ASSERT_NO_FATAL_FAILURE(RunAlone({Prompt(16, 1), Prompt(16, 2)}, kSteps, alone));
  const auto& [want, fed, max_ref, both] = alone;
  auto logits = (*batched)->Prefill(both, 2);
  ASSERT_TRUE(logits.ok()) << logits.status();
  for (size_t s = 0; s < 2; ++s) {
    const std::vector<float> got(logits->begin() + ((s + 1) * 16 - 1) * v,
                                 logits->begin() + (s + 1) * 16 * v);
    EXPECT_LE(MaxAbsDiff(got, want[s][0]), 2e-2 * max_ref) << "prompt " << s;
  }
  for (int k = 0; k < kSteps; ++k) {
    auto step = (*batched)->Decode({fed[0][k], fed[1][k]}, {16 + k, 16 + k});
    ASSERT_TRUE(step.ok()) << step.status();
    for (size_t s = 0; s < 2; ++s) {
      const std::vector<float> got(step->begin() + s * v, step->begin() + (s + 1) * v);
      EXPECT_LE(MaxAbsDiff(got, want[s][k + 1]), 2e-2 * max_ref) << "step " << k << " prompt " << s;
    }
  }
}

TEST_F(GpuRuntimeTest, DecodeBucketsOfSeveralBatchesShareTheKvCache) {
  // One plan with decode buckets of one and two sequences: its KV cache holds two, and the
  // bucket of one runs the first. Two prompts prefilled together, then teacher-forced with
  // the single runs' greedy tokens: each step decodes the first sequence alone, then both;
  // the first's logits agree with the runs of one prompt alone at bf16 level, and so do the
  // second's, whose cache rows the bucket of one never touches.
  auto buckets = Make({16}, 32, true, 2, GpuOptions::ProgrammaticLaunch::kDecode, false,
                      planner::proto::PlanOptions::DECODE_BACKEND_KERNELS,
                      planner::kDefaultStreamSlots, false, {1, 2});
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  constexpr int kSteps = 6;
  const size_t v = static_cast<size_t>(config_.vocab_size);
  SingleRuns alone;
  ASSERT_NO_FATAL_FAILURE(RunAlone({Prompt(16, 3), Prompt(16, 4)}, kSteps, alone));
  const auto& [want, fed, max_ref, both] = alone;
  ASSERT_TRUE((*buckets)->Prefill(both, 2).ok());
  for (int k = 0; k < kSteps; ++k) {
    auto first = (*buckets)->Decode({fed[0][k]}, {16 + k});
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_LE(MaxAbsDiff(*first, want[0][k + 1]), 2e-2 * max_ref) << "step " << k;
    auto step = (*buckets)->Decode({fed[0][k], fed[1][k]}, {16 + k, 16 + k});
    ASSERT_TRUE(step.ok()) << step.status();
    for (size_t s = 0; s < 2; ++s) {
      const std::vector<float> got(step->begin() + s * v, step->begin() + (s + 1) * v);
      EXPECT_LE(MaxAbsDiff(got, want[s][k + 1]), 2e-2 * max_ref) << "step " << k << " prompt " << s;
    }
  }
}

TEST_F(GpuRuntimeTest, PersistentDecodeMatchesKernels) {
  // The persistent kernel runs the same bodies as the kernels, but its GEMVs at the run's
  // block size (other reduction orders), so the logits agree at bf16 level; teacher-forced
  // with the kernels' greedy tokens, step after step, at one and three sequences; with the
  // weights streamed through shared memory (the default) and without.
  const size_t v = static_cast<size_t>(config_.vocab_size);
  auto argmax = [&](const float* row) {
    return static_cast<int32_t>(std::max_element(row, row + v) - row);
  };
  for (int slots : {planner::kDefaultStreamSlots, 0})
    for (int64_t batch : {1, 3}) {
      SCOPED_TRACE(absl::StrCat("batch ", batch, ", ", slots, " stream slots"));
      auto kernels = Make({16}, 40, true, batch);
      ASSERT_TRUE(kernels.ok()) << kernels.status();
      auto persistent = Make({16}, 40, true, batch, GpuOptions::ProgrammaticLaunch::kDecode, false,
                             planner::proto::PlanOptions::DECODE_BACKEND_PERSISTENT, slots);
      ASSERT_TRUE(persistent.ok()) << persistent.status();
      std::vector<int32_t> prompts;
      for (int64_t s = 0; s < batch; ++s) {
        const std::vector<int32_t> p = Prompt(16, static_cast<int>(s) + 4);
        prompts.insert(prompts.end(), p.begin(), p.end());
      }
      auto a = (*kernels)->Prefill(prompts, batch);
      auto b = (*persistent)->Prefill(prompts, batch);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(*a, *b);  // prefill phases have no persistent runs
      std::vector<int32_t> fed(static_cast<size_t>(batch));
      for (int64_t s = 0; s < batch; ++s) {
        fed[static_cast<size_t>(s)] = argmax(a->data() + ((s + 1) * 16 - 1) * v);
      }
      for (int k = 0; k < 16; ++k) {
        const std::vector<int32_t> positions(static_cast<size_t>(batch), 16 + k);
        auto want = (*kernels)->Decode(fed, positions);
        auto got = (*persistent)->Decode(fed, positions);
        ASSERT_TRUE(want.ok()) << want.status();
        ASSERT_TRUE(got.ok()) << got.status();
        double max_ref = 0;
        for (float x : *want) max_ref = std::max(max_ref, std::fabs(double{x}));
        EXPECT_LE(MaxAbsDiff(*got, *want), 2e-2 * max_ref) << "step " << k;
        for (int64_t s = 0; s < batch; ++s) {
          fed[static_cast<size_t>(s)] = argmax(want->data() + s * static_cast<int64_t>(v));
        }
      }
    }
  // The device greedy loop replays the persistent kernel's graph step after step: the same
  // tokens as host-driven steps of the same runtime.
  auto rt = Make({24}, 48, true, 1, GpuOptions::ProgrammaticLaunch::kDecode, false,
                 planner::proto::PlanOptions::DECODE_BACKEND_PERSISTENT);
  ASSERT_TRUE(rt.ok()) << rt.status();
  std::vector<int32_t> stepped;
  ExpectGreedyLoopMatchesHostSteps(**rt, stepped);
}

TEST_F(GpuRuntimeTest, PersistentTraceGivesEveryStageOfTheLastStep) {
  // With the trace, the last decode step's stages in plan order, each with its tasks, a span
  // that covers its handover, and the same logits as without the trace; without it, or for a
  // phase with no persistent run, a clear refusal.
  auto traced = Make({16}, 40, true, 1, GpuOptions::ProgrammaticLaunch::kDecode, false,
                     planner::proto::PlanOptions::DECODE_BACKEND_PERSISTENT,
                     planner::kDefaultStreamSlots, /*trace=*/true);
  ASSERT_TRUE(traced.ok()) << traced.status();
  auto plain = Make({16}, 40, true, 1, GpuOptions::ProgrammaticLaunch::kDecode, false,
                    planner::proto::PlanOptions::DECODE_BACKEND_PERSISTENT);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<int32_t> prompt = Prompt(16, 5);
  ASSERT_TRUE((*traced)->Prefill(prompt, 1).ok());
  ASSERT_TRUE((*plain)->Prefill(prompt, 1).ok());
  auto a = (*traced)->Decode({7}, {16});
  auto b = (*plain)->Decode({7}, {16});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto stages = (*traced)->PersistentDecodeTrace(1);
  ASSERT_TRUE(stages.ok()) << stages.status();
  ASSERT_FALSE(stages->empty());
  int previous = -1;
  for (const GpuRuntime::StageTrace& s : *stages) {
    EXPECT_GT(s.step, previous);
    previous = s.step;
    EXPECT_GT(s.tasks, 0) << s.name;
    EXPECT_GT(s.span_us, 0) << s.name;
    EXPECT_GE(s.span_us, s.handover_us) << s.name;
    EXPECT_GE(s.run_us, 0) << s.name;
    // The task released last ends the span: past its wait within it, and running within it.
    EXPECT_GE(s.last_ready_us, s.handover_us) << s.name;
    EXPECT_GE(s.last_run_us, 0) << s.name;
    EXPECT_LE(s.last_ready_us + s.last_run_us, s.span_us + 1e-3) << s.name;
  }
  EXPECT_EQ((*plain)->PersistentDecodeTrace(1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto kernels = Make({16}, 40);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  EXPECT_THAT((*kernels)->PersistentDecodeTrace(1).status().message(),
              HasSubstr("has no persistent run to trace"));
}

TEST_F(GpuRuntimeTest, UserErrorsAreClearAndLeaveTheRuntimeUsable) {
  auto rt = Make({24}, 30);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const std::vector<int32_t> prompt = Prompt(24);
  absl::StatusOr<std::vector<int32_t>> g = (*rt)->Generate(prompt, 1, 10);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("need 33 KV-cache rows per sequence"));
  auto d = (*rt)->Decode({1}, {30});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("position 30 is outside the KV cache of 30"));
  auto p = (*rt)->Prefill(Prompt(25), 1);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("no prefill bucket holds 25 tokens"));
  std::vector<int32_t> bad = prompt;
  bad[7] = 1 << 20;
  p = (*rt)->Prefill(bad, 1);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("outside the vocabulary"));
  EXPECT_THAT(p.status().message(), HasSubstr("index 7"));
  // Still usable.
  EXPECT_TRUE((*rt)->Generate(prompt, 1, 4).ok());
}

TEST_F(GpuRuntimeTest, PlanForAnotherArchitectureIsRefused) {
  absl::StatusOr<targets::TargetDescription> other =
      targets::FindTarget(device_->sm() == 80 ? "sm_90" : "sm_80");
  ASSERT_TRUE(other.ok());
  planner::PlanOptions options;
  options.prefill_tokens = {8};
  options.max_context = 16;
  auto plan = planner::BuildExecutionPlan(config_, *other, options, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto rt = GpuRuntime::Create(*device_, *plan, checkpoint_.get(), {});
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(rt.status().message(), HasSubstr("plan for this device's target"));
}

// A tensor-parallel rank's plan runs only with a communicator of its ranks; over two GPUs
// (skipped with fewer) the ranks' prefill and greedy loop match one GPU's.
TEST_F(GpuRuntimeTest, TensorParallelRanksNeedACommunicatorAndMatchOneGpu) {
  planner::PlanOptions options;
  options.prefill_tokens = {24};
  options.max_context = 40;
  options.tensor_parallel = 2;
  std::vector<planner::proto::ExecutionPlan> plans;
  for (int64_t rank = 0; rank < 2; ++rank) {
    options.rank = rank;
    auto plan = planner::BuildExecutionPlan(config_, target_, options, nullptr);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plans.push_back(*std::move(plan));
  }
  auto alone = GpuRuntime::Create(*device_, plans[0], checkpoint_.get(), {});
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(alone.status().message(), HasSubstr("it runs with a communicator of its ranks"));

  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "the two-rank run needs 2 GPUs; this machine has " << devices;
  auto one = Make({24}, 40);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = TensorParallelGpu::Create(plans, checkpoint_.get(), {});
  ASSERT_TRUE(two.ok()) << two.status();
  const std::vector<int32_t> prompt = Prompt(24, 3);
  auto want = (*one)->Prefill(prompt, 1);
  auto got = (*two)->Prefill(prompt, 1);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  double diff = 0, scale = 0;
  for (size_t k = 0; k < want->size(); ++k) {
    diff = std::max(diff, std::fabs(double{(*got)[k]} - (*want)[k]));
    scale = std::max(scale, std::fabs(double{(*want)[k]}));
  }
  EXPECT_LE(diff, 2e-2 * scale);  // bf16 activations, summed in another order
  auto loop = (*two)->Generate(prompt, 1, 16);
  ASSERT_TRUE(loop.ok()) << loop.status();
  EXPECT_EQ(loop->size(), 16u);
}

// A plan the target's memory holds but the device's free memory does not (here most of it is
// taken first) is refused before anything is allocated, naming the sizes. (A context beyond
// the target's memory or the model's positions is refused by the planner already.)
TEST_F(GpuRuntimeTest, APlanBeyondTheFreeMemoryNamesTheSizes) {
  absl::StatusOr<device::Device::MemoryInfo> memory = device_->GetMemoryInfo();
  ASSERT_TRUE(memory.ok()) << memory.status();
  absl::StatusOr<device::DeviceBuffer> taken =
      device::DeviceBuffer::Allocate(*device_, memory->free_bytes - (int64_t{16} << 20));
  ASSERT_TRUE(taken.ok()) << taken.status();
  auto rt = Make({8}, 128);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kResourceExhausted) << rt.status();
  EXPECT_THAT(rt.status().message(), HasSubstr("KV cache "));
  EXPECT_THAT(rt.status().message(), HasSubstr("bytes are free"));
}

TEST_F(GpuRuntimeTest, RandomWeightsRunWithoutACheckpoint) {
  planner::PlanOptions options;
  options.prefill_tokens = {16};
  options.max_context = 32;
  auto plan = planner::BuildExecutionPlan(config_, target_, options, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto rt = GpuRuntime::Create(*device_, *plan, nullptr, {});
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto logits = (*rt)->Prefill(Prompt(16), 1);
  ASSERT_TRUE(logits.ok()) << logits.status();
  double sum = 0;
  for (float x : *logits) {
    ASSERT_TRUE(std::isfinite(x));
    sum += std::fabs(x);
  }
  EXPECT_GT(sum, 0);
  auto times = (*rt)->TimeDecode(1, 20, 2, 5);
  ASSERT_TRUE(times.ok()) << times.status();
  EXPECT_EQ(times->size(), 5u);
}

}  // namespace
}  // namespace tileplan::runtime::gpu
