// Tensor parallelism on the CPU backend: every architecture run as 2 ranks (each on its slices
// of a random checkpoint, meeting in-process at the collectives) computes the logits of the
// whole model, through a prompt and decode steps; the in-process group refuses mismatched
// collectives and releases every rank when one fails.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/lowering.h"
#include "models/safetensors.h"
#include "regions/parser.h"
#include "runtime/cpu/collectives.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/tensor_parallel.h"
#include "tests/models/safetensors_builder.h"
#include "tests/testing/compare.h"
#include "tests/testing/tiny_models.h"

namespace tileplan::runtime::cpu {
namespace {

using models::Architecture;
using ::testing::HasSubstr;
using tileplan::testing::MaxRelativeDifference;

TEST(CpuTensorParallel, TwoRanksComputeTheWholeModelsLogits) {
  for (Architecture arch : testing::EveryArchitecture()) {
    SCOPED_TRACE(models::ArchitectureName(arch));
    models::ModelConfig c = testing::TinyModelConfig(arch);
    c.vocab_size = 64;
    if (c.num_kv_heads % 2 != 0) c.num_kv_heads = 2;
    const std::filesystem::path dir = testing::MakeTempDir("tp_model");
    ASSERT_TRUE(testing::WriteRandomCheckpoint(c, dir, 11).ok());
    auto checkpoint = models::Checkpoint::Open(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    auto whole_graph = models::LowerModel(c);
    ASSERT_TRUE(whole_graph.ok()) << whole_graph.status();
    auto whole = CpuBackend::Create(*whole_graph, **checkpoint, {1, 8, 1});
    ASSERT_TRUE(whole.ok()) << whole.status();
    std::vector<TensorParallelCpu::RankGraphs> ranks;
    for (int64_t rank = 0; rank < 2; ++rank) {
      auto g = models::LowerModel(c, models::TensorParallel{2, rank});
      ASSERT_TRUE(g.ok()) << g.status();
      ranks.push_back({*std::move(g), std::nullopt});
    }
    auto tp = TensorParallelCpu::Create(std::move(ranks), **checkpoint, {1, 8, 2});
    ASSERT_TRUE(tp.ok()) << tp.status();
    EXPECT_EQ((*tp)->ranks(), 2);
    EXPECT_EQ((*tp)->threads_per_rank(), 1);

    const std::vector<int32_t> prompt = {3, 17, 42, 5, 60};
    const std::vector<int32_t> positions = {0, 1, 2, 3, 4};
    auto want = (*whole)->Run(prompt, positions);
    auto got = (*tp)->Run(prompt, positions);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(MaxRelativeDifference(*got, *want), 1e-5);
    for (int32_t step = 0; step < 2; ++step) {
      want = (*whole)->Run({7 + step}, {5 + step});
      got = (*tp)->Run({7 + step}, {5 + step});
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_LE(MaxRelativeDifference(*got, *want), 1e-5) << "decode step " << step;
    }
  }
}

TEST(CpuTensorParallel, ARankErrorFailsTheRunAndReleasesTheOthers) {
  models::ModelConfig c = testing::TinyModelConfig(Architecture::kLlama);
  c.vocab_size = 64;
  const std::filesystem::path dir = testing::MakeTempDir("tp_error");
  ASSERT_TRUE(testing::WriteRandomCheckpoint(c, dir, 2).ok());
  auto checkpoint = models::Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::vector<TensorParallelCpu::RankGraphs> ranks;
  for (int64_t rank = 0; rank < 2; ++rank) {
    auto g = models::LowerModel(c, models::TensorParallel{2, rank});
    ASSERT_TRUE(g.ok()) << g.status();
    ranks.push_back({*std::move(g), std::nullopt});
  }
  auto tp = TensorParallelCpu::Create(std::move(ranks), **checkpoint, {1, 4, 2});
  ASSERT_TRUE(tp.ok()) << tp.status();
  // Token 99 is outside the vocabulary: both ranks fail in their embedding, before any
  // collective; a position past the cache fails likewise. Neither run hangs.
  auto bad = (*tp)->Run({99}, {0});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("rank "));
  auto past = (*tp)->Run({1}, {4});
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  // The group recovers for the next run.
  EXPECT_TRUE((*tp)->Run({1, 2}, {0, 1}).ok());
}

TEST(InProcessGroup, CombinesEveryRanksDataInRankOrder) {
  InProcessGroup group(3);
  std::vector<std::vector<float>> seen(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      for (int round = 0; round < 20; ++round) {
        auto all = group.Exchange(r, "all_reduce %x", {static_cast<float>(r), 1.0f * round});
        ASSERT_TRUE(all.ok()) << all.status();
        ASSERT_EQ((*all)->size(), 3u);
        for (int q = 0; q < 3; ++q) {
          ASSERT_EQ((**all)[static_cast<size_t>(q)],
                    (std::vector<float>{static_cast<float>(q), 1.0f * round}));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(InProcessGroup, MismatchedCollectivesAbortTheGroup) {
  InProcessGroup group(2);
  absl::StatusOr<InProcessGroup::Contributions> first, second;
  // The ranks reach different collectives: whichever arrives second aborts the group, and
  // both get the same error naming both.
  std::thread a([&] { first = group.Exchange(0, "all_reduce %a", {1, 2}); });
  std::thread b([&] { second = group.Exchange(1, "all_gather %b", {1, 2}); });
  a.join();
  b.join();
  ASSERT_FALSE(first.ok());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(first.status(), second.status());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("all_reduce %a (2 elements)"));
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("all_gather %b (2 elements)"));
  // Later calls fail alike until the group is reset.
  EXPECT_FALSE(group.Exchange(0, "x", {5}).ok());
  group.Reset();
  std::thread again([&] { first = group.Exchange(0, "x", {5}); });
  second = group.Exchange(1, "x", {6});
  again.join();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ((**first)[1], std::vector<float>{6});
}

TEST(InProcessGroup, AbortReleasesAWaitingRank) {
  InProcessGroup group(2);
  absl::StatusOr<InProcessGroup::Contributions> waiting;
  std::thread waiter([&] { waiting = group.Exchange(0, "all_reduce %a", {1}); });
  group.Abort(absl::InternalError("rank 1: out of memory"));
  waiter.join();
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().message(), "rank 1: out of memory");
}

TEST(CpuTensorParallel, ACollectiveOfSeveralRanksNeedsAGroup) {
  auto g = ir::ParseGraph(
      "graph @g {\n"
      "  input %x: f32[B,T,4]\n"
      "  %y: f32[B,T,4] = all_reduce(%x) {ranks = 2}\n"
      "  output %y\n"
      "}\n");
  ASSERT_TRUE(g.ok()) << g.status();
  auto backend = CpuBackend::CreateWithWeights(*g, {}, {1, 1, 1});
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto run = (*backend)->Execute({{"x", HostTensor::Float({1, 1, 4}, {1, 2, 3, 4})}});
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(std::string(run.status().message()),
              HasSubstr("needs a group of 2 ranks; the backend runs alone"));
}

// all_reduce adds the bias once after the sum; all_gather concatenates the last dim in rank
// order; sharded_argmax finds the largest logit over every rank's shard, ties to the lowest.
TEST(CpuTensorParallel, CollectiveKernelsOverTwoRanks) {
  auto g = ir::ParseGraph(
      "graph @g {\n"
      "  input %x: f32[B,T,2]\n"
      "  weight %bias: f32[2] = \"bias\"\n"
      "  %sum: f32[B,T,2] = all_reduce(%x, %bias) {ranks = 2}\n"
      "  %all: f32[B,T,4] = all_gather(%x) {ranks = 2}\n"
      "  %best: i32[B,T] = sharded_argmax(%x) {ranks = 2}\n"
      "  output %sum\n"
      "  output %all\n"
      "  output %best\n"
      "}\n");
  ASSERT_TRUE(g.ok()) << g.status();
  InProcessGroup group(2);
  std::vector<std::unique_ptr<CpuBackend>> backends;
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, HostTensor> weights;
    weights["bias"] = HostTensor::Float({2}, {100, 200});
    CpuBackend::Options options{1, 1, 1, &group, r};
    auto b = CpuBackend::CreateWithWeights(*g, std::move(weights), options);
    ASSERT_TRUE(b.ok()) << b.status();
    backends.push_back(*std::move(b));
  }
  // Rows (T = 2): rank 0 [1, 5] [7, 0]; rank 1 [2, 5] [3, 9].
  const std::vector<std::vector<float>> x = {{1, 5, 7, 0}, {2, 5, 3, 9}};
  std::vector<absl::StatusOr<std::vector<HostTensor>>> out(2, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      out[r] = backends[r]->Execute({{"x", HostTensor::Float({1, 2, 2}, x[r])}});
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(out[r].ok()) << out[r].status();
    EXPECT_EQ((*out[r])[0].f, (std::vector<float>{103, 210, 110, 209}));
    EXPECT_EQ((*out[r])[1].f, (std::vector<float>{1, 5, 2, 5, 7, 0, 3, 9}));
    EXPECT_EQ((*out[r])[2].i, (std::vector<int32_t>{1, 3}));
  }
}

}  // namespace
}  // namespace tileplan::runtime::cpu
