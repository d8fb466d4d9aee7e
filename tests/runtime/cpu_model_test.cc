// Whole lowered models on the CPU backend, from random checkpoints written to disk: the KV
// cache makes incremental decode agree with one prefill, batching and threading do not
// change results (also for MoE and MLA models), and bad runs are reported, not crashed on.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/lowering.h"
#include "models/safetensors.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/models/safetensors_builder.h"
#include "tests/testing/tiny_models.h"

namespace tileplan::runtime::cpu {
namespace {

using models::Architecture;
using ::testing::HasSubstr;

// A tiny model of one architecture with random weights on disk.
class TinyModel {
 public:
  explicit TinyModel(const models::ModelConfig& config, uint32_t seed = 7) : config_(config) {
    const std::filesystem::path dir = testing::MakeTempDir("model");
    absl::Status written = testing::WriteRandomCheckpoint(config, dir, seed);
    EXPECT_TRUE(written.ok()) << written;
    auto checkpoint = models::Checkpoint::Open(dir);
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    if (checkpoint.ok()) checkpoint_ = std::move(*checkpoint);
    auto graph = models::LowerModel(config);
    EXPECT_TRUE(graph.ok()) << graph.status();
    if (graph.ok()) graph_ = std::move(*graph);
  }

  std::unique_ptr<CpuBackend> Backend(int64_t batch, int64_t max_seq, int threads = 2) const {
    if (checkpoint_ == nullptr) return nullptr;
    auto backend = CpuBackend::Create(graph_, *checkpoint_, {batch, max_seq, threads});
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? std::move(*backend) : nullptr;
  }

  absl::StatusOr<std::unique_ptr<CpuBackend>> Phased(const ir::Graph& prefill,
                                                     const ir::Graph& decode,
                                                     int64_t max_seq) const {
    return CpuBackend::CreatePhased(prefill, decode, *checkpoint_, {1, max_seq, 2});
  }

  const models::ModelConfig& config() const { return config_; }
  const ir::Graph& graph() const { return graph_; }

 private:
  models::ModelConfig config_;
  std::unique_ptr<models::Checkpoint> checkpoint_;
  ir::Graph graph_;
};

std::vector<int32_t> Iota(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) v[k] = start + k;
  return v;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

const std::vector<int32_t> kPrompt = {3, 17, 60, 0, 42, 5, 9, 33, 21};

class CpuModelTest : public ::testing::TestWithParam<Architecture> {};

TEST_P(CpuModelTest, PrefillMatchesTokenByTokenDecode) {
  TinyModel model(testing::TinyModelConfig(GetParam()));
  const int64_t vocab = model.config().vocab_size;
  auto backend = model.Backend(1, 16);
  ASSERT_NE(backend, nullptr);
  const int32_t n = static_cast<int32_t>(kPrompt.size());
  auto prefill = backend->Run(kPrompt, Iota(n));
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  ASSERT_EQ(prefill->size(), static_cast<size_t>(n * vocab));
  const double scale = MaxAbs(*prefill);
  ASSERT_GT(scale, 0.1);
  // The logits of different positions differ: the test would notice a broken cache.
  EXPECT_NE(std::vector<float>(prefill->begin(), prefill->begin() + vocab),
            std::vector<float>(prefill->end() - vocab, prefill->end()));

  backend->Reset();
  for (int32_t t = 0; t < n; ++t) {
    auto step = backend->Run({kPrompt[t]}, {t});
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_EQ(step->size(), static_cast<size_t>(vocab));
    double max_diff = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      max_diff = std::max(max_diff,
                          std::fabs(static_cast<double>((*step)[j]) - (*prefill)[t * vocab + j]));
    }
    EXPECT_LE(max_diff / scale, 1e-5) << "position " << t;
  }
}

// A phased backend runs the prompt's first tokens with its prefill graph and continues
// with its decode graph on the same KV cache (here both are the primitive graph, the decode
// one renamed so the test can tell them apart).
TEST_P(CpuModelTest, PhasedBackendContinuesWithTheDecodeGraphOnTheSameCache) {
  TinyModel model(testing::TinyModelConfig(GetParam()));
  const int64_t vocab = model.config().vocab_size;
  auto single = model.Backend(1, 16);
  ASSERT_NE(single, nullptr);
  const int32_t n = static_cast<int32_t>(kPrompt.size());
  auto whole = single->Run(kPrompt, Iota(n));
  ASSERT_TRUE(whole.ok()) << whole.status();

  ir::Graph decode = model.graph();
  decode.set_name("decode");
  auto phased = model.Phased(model.graph(), decode, 16);
  ASSERT_TRUE(phased.ok()) << phased.status();
  EXPECT_TRUE((*phased)->phased());
  EXPECT_EQ((*phased)->graph(ir::Phase::kDecode).name(), "decode");
  EXPECT_EQ((*phased)->graph(ir::Phase::kPrefill).name(), model.graph().name());
  const int32_t prefix = 4;
  auto first =
      (*phased)->Run(std::vector<int32_t>(kPrompt.begin(), kPrompt.begin() + prefix), Iota(prefix));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, std::vector<float>(whole->begin(), whole->begin() + prefix * vocab));
  const double scale = MaxAbs(*whole);
  for (int32_t t = prefix; t < n; ++t) {
    auto step = (*phased)->Run({kPrompt[t]}, {t});
    ASSERT_TRUE(step.ok()) << step.status();
    double max_diff = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      max_diff =
          std::max(max_diff, std::fabs(static_cast<double>((*step)[j]) - (*whole)[t * vocab + j]));
    }
    EXPECT_LE(max_diff / scale, 1e-5) << "position " << t;
  }
}

TEST_P(CpuModelTest, BatchRowsAreIndependentAndThreadCountDoesNotMatter) {
  TinyModel model(testing::TinyModelConfig(GetParam()));
  const std::vector<int32_t> a = {5, 6, 7, 8, 9}, b = {50, 1, 22, 13, 4};
  auto single = model.Backend(1, 8, 1);
  ASSERT_NE(single, nullptr);
  auto run_a = single->Run(a, Iota(5));
  single->Reset();
  auto run_b = single->Run(b, Iota(5));
  ASSERT_TRUE(run_a.ok() && run_b.ok());

  auto batched = model.Backend(2, 8, 4);
  ASSERT_NE(batched, nullptr);
  std::vector<int32_t> tokens = a;
  tokens.insert(tokens.end(), b.begin(), b.end());
  std::vector<int32_t> positions = Iota(5);
  positions.insert(positions.end(), positions.begin(), positions.end());
  auto run_ab = batched->Run(tokens, positions);
  ASSERT_TRUE(run_ab.ok()) << run_ab.status();
  std::vector<float> want = *run_a;
  want.insert(want.end(), run_b->begin(), run_b->end());
  // Same per-element computation order, so equal bit for bit.
  EXPECT_EQ(*run_ab, want);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, CpuModelTest,
                         ::testing::ValuesIn(testing::EveryArchitecture()),
                         [](const ::testing::TestParamInfo<Architecture>& info) {
                           return std::string(models::ArchitectureName(info.param));
                         });

TEST(CpuModel, SlidingWindowChangesLaterPositionsOnly) {
  models::ModelConfig windowed = testing::TinyModelConfig(Architecture::kMistral);
  models::ModelConfig full = windowed;
  full.sliding_window = {0, 0};
  TinyModel a(windowed), b(full);
  auto ba = a.Backend(1, 16), bb = b.Backend(1, 16);
  ASSERT_TRUE(ba != nullptr && bb != nullptr);
  auto la = ba->Run(kPrompt, Iota(9));
  auto lb = bb->Run(kPrompt, Iota(9));
  ASSERT_TRUE(la.ok() && lb.ok());
  const int64_t vocab = windowed.vocab_size;
  // The window is 3: positions 0..2 see every earlier row either way.
  EXPECT_EQ(std::vector<float>(la->begin(), la->begin() + 3 * vocab),
            std::vector<float>(lb->begin(), lb->begin() + 3 * vocab));
  EXPECT_NE(std::vector<float>(la->end() - vocab, la->end()),
            std::vector<float>(lb->end() - vocab, lb->end()));
}

TEST(CpuModel, PhasedGraphsMustDeclareTheSameState) {
  TinyModel model(testing::TinyModelConfig(Architecture::kQwen3));
  const ir::TensorType two =
      ir::MakeType(ir::DType::kF32, {ir::Dim::Symbol("B"), ir::Dim::Static(2)});
  const ir::TensorType three =
      ir::MakeType(ir::DType::kF32, {ir::Dim::Symbol("B"), ir::Dim::Static(3)});
  ir::Graph with_two = model.graph();
  ASSERT_TRUE(with_two.AddState("extra", two).ok());
  ir::Graph with_three = model.graph();
  ASSERT_TRUE(with_three.AddState("extra", three).ok());

  auto backend = model.Phased(model.graph(), with_two, 8);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().message(),
            "decode graph: declares state %extra, which the prefill graph does not declare; the "
            "two graphs must share their state");
  backend = model.Phased(with_two, model.graph(), 8);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().message(),
            "decode graph: has no state %extra, which the prefill graph declares; the two graphs "
            "must share their state");
  backend = model.Phased(with_two, with_three, 8);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().message(),
            "decode graph: state %extra is f32[1,3], but f32[1,2] in the prefill graph");
  backend = model.Phased(with_two, with_two, 8);
  EXPECT_TRUE(backend.ok()) << backend.status();
}

TEST(CpuModel, BadRunsAreErrors) {
  TinyModel model(testing::TinyModelConfig(Architecture::kQwen2));
  auto backend = model.Backend(1, 4);
  ASSERT_NE(backend, nullptr);

  auto bad_id = backend->Run({1, 61}, {0, 1});
  ASSERT_FALSE(bad_id.ok());
  EXPECT_THAT(std::string(bad_id.status().message()),
              HasSubstr("token id 61 at [0,1] is outside the vocabulary [0, 61)"));

  auto too_long = backend->Run({1, 2}, {3, 4});
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(too_long.status().message()),
              HasSubstr("position 4 of token 1 is outside the KV cache [0, 4)"));

  auto mismatched = backend->Run({1, 2}, {0});
  ASSERT_FALSE(mismatched.ok());
  EXPECT_THAT(std::string(mismatched.status().message()), HasSubstr("2 tokens but 1 positions"));

  auto empty = backend->Run({}, {});
  ASSERT_FALSE(empty.ok());

  auto batched = model.Backend(2, 4);
  ASSERT_NE(batched, nullptr);
  auto ragged = batched->Run({1, 2, 3}, {0, 1, 2});
  ASSERT_FALSE(ragged.ok());
  EXPECT_THAT(std::string(ragged.status().message()), HasSubstr("multiple of the batch size"));
}

}  // namespace
}  // namespace tileplan::runtime::cpu
