// On every committed fixture (docs/fixtures.md), the planned graphs (planner/phase_graphs.h)
// and the primitive graph give the same logits on the CPU backend, within 1e-5 relative
// (max |planned - primitive| / max |primitive|): for the prompt, run as one prefill, and for
// every greedy decode step after it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/lowering.h"
#include "models/safetensors.h"
#include "planner/phase_graphs.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/tensor_parallel.h"
#include "tests/testing/compare.h"
#include "tests/testing/paths.h"

namespace tileplan {
namespace {

using tileplan::testing::MaxRelativeDifference;

constexpr double kTolerance = 1e-5;

std::vector<std::string> Fixtures() { return absl::StrSplit(TILEPLAN_FIXTURES, ','); }

int32_t LastArgmax(const std::vector<float>& logits, int64_t vocab) {
  const auto last = logits.end() - vocab;
  return static_cast<int32_t>(std::max_element(last, logits.end()) - last);
}

class PlanParityTest : public ::testing::TestWithParam<std::string> {};

// A fixture's model, checkpoint, prompt and greedy length, and the CPU options for them.
struct Fixture {
  models::ModelConfig config;
  std::unique_ptr<models::Checkpoint> checkpoint;
  std::vector<int32_t> prompt;
  int64_t steps = 0;
  runtime::cpu::CpuBackend::Options options;

  int64_t prompt_len() const { return static_cast<int64_t>(prompt.size()); }
};

void LoadFixture(const std::string& name, int64_t extra_context, Fixture& f) {
  const std::filesystem::path dir = testing::SourcePath(absl::StrCat("tests/data/", name));
  auto config = models::LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  f.config = *config;
  auto checkpoint = models::Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  f.checkpoint = std::move(*checkpoint);
  auto reference = models::SafetensorsFile::Open(dir / "reference.safetensors");
  ASSERT_TRUE(reference.ok()) << reference.status();
  const models::TensorView* ids = (*reference)->Find("input_ids");
  const models::TensorView* greedy = (*reference)->Find("greedy_tokens");
  ASSERT_TRUE(ids != nullptr && greedy != nullptr);
  ASSERT_EQ(ids->dtype, models::StDType::kI32);
  f.prompt.resize(static_cast<size_t>(ids->num_elements()));
  std::memcpy(f.prompt.data(), ids->data, f.prompt.size() * sizeof(int32_t));
  f.steps = greedy->num_elements();
  f.options.batch = 1;
  f.options.max_seq = f.prompt_len() + f.steps + extra_context;
  f.options.threads = 2;
}

std::vector<int32_t> Iota(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t t = 0; t < v.size(); ++t) v[t] = static_cast<int32_t>(t);
  return v;
}

// Decode steps on the caches each backend filled, fed the primitive graph's greedy tokens
// (starting from the argmax of `want`, the primitive's last logits).
void ExpectDecodeAgrees(runtime::cpu::CpuBackend& primitive, runtime::cpu::CpuBackend& plan,
                        const Fixture& f, std::vector<float> want) {
  for (int64_t k = 0; k + 1 < f.steps; ++k) {
    const int32_t next = LastArgmax(want, f.config.vocab_size);
    const int32_t position = static_cast<int32_t>(f.prompt_len() + k);
    auto w = primitive.Run({next}, {position});
    auto got = plan.Run({next}, {position});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(MaxRelativeDifference(*got, *w), kTolerance) << "decode step " << k;
    want = *std::move(w);
  }
}

// The planned graphs (with the decode pipeline's opt-in fuse_moe when `fuse_moe`) against the
// primitive graph: the prompt as one prefill, then every decode step.
void ExpectPlannedAgrees(const Fixture& f, bool fuse_moe, bool fuse_norm_moe = false) {
  SCOPED_TRACE(fuse_norm_moe ? "fuse_moe, fuse_norm_moe"
               : fuse_moe    ? "fuse_moe"
                             : "default pipelines");
  auto primitive_graph = models::LowerModel(f.config);
  ASSERT_TRUE(primitive_graph.ok()) << primitive_graph.status();
  planner::PipelineOptions plan_options;
  plan_options.tokens = f.prompt_len();
  plan_options.batch = f.options.batch;
  plan_options.cache_capacity = f.options.max_seq;
  plan_options.fuse_moe = fuse_moe;
  plan_options.fuse_norm_moe = fuse_norm_moe;
  auto planned = planner::PlanPhases(*primitive_graph, plan_options);
  ASSERT_TRUE(planned.ok()) << planned.status();
  // The planner did rewrite both graphs, so the comparison is not of a graph with itself.
  for (const ir::Graph* g : {&planned->prefill, &planned->decode}) {
    EXPECT_LT(g->regions().size(), primitive_graph->regions().size());
    EXPECT_TRUE(std::any_of(g->regions().begin(), g->regions().end(),
                            [](const ir::Region& r) { return !r.fused_from.empty(); }));
  }
  if (fuse_moe) {
    EXPECT_TRUE(std::any_of(planned->decode.regions().begin(), planned->decode.regions().end(),
                            [fuse_norm_moe](const ir::Region& r) {
                              return r.kind == (fuse_norm_moe ? "rms_norm_moe" : "moe");
                            }));
  }

  auto primitive = runtime::cpu::CpuBackend::Create(*primitive_graph, *f.checkpoint, f.options);
  ASSERT_TRUE(primitive.ok()) << primitive.status();
  auto plan = runtime::cpu::CpuBackend::CreatePhased(planned->prefill, planned->decode,
                                                     *f.checkpoint, f.options);
  ASSERT_TRUE(plan.ok()) << plan.status();

  const std::vector<int32_t> positions = Iota(f.prompt_len());
  auto want = (*primitive)->Run(f.prompt, positions);
  auto got = (*plan)->Run(f.prompt, positions);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(MaxRelativeDifference(*got, *want), kTolerance) << "prompt";
  ExpectDecodeAgrees(**primitive, **plan, f, *std::move(want));
}

TEST_P(PlanParityTest, PlannedAndPrimitiveLogitsAgree) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(LoadFixture(GetParam(), 0, f));
  ExpectPlannedAgrees(f, false);
  // A MoE model's decode steps with each MoE block fused into one moe region, too.
  if (f.config.moe.num_experts > 0) {
    ExpectPlannedAgrees(f, true);
    ExpectPlannedAgrees(f, true, true);
  }
}

// The prefill planned with last_token_logits, run as the GPU runtime runs a prompt shorter
// than its bucket (the padding first, at positions after the prompt): its logits are the
// primitive graph's for the prompt's last token, and decoding on the cache it filled agrees.
TEST_P(PlanParityTest, LastTokenLogitsWithThePaddingFirst) {
  constexpr int64_t kPad = 3;
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(LoadFixture(GetParam(), kPad, f));
  const int64_t bucket = f.prompt_len() + kPad;
  auto primitive_graph = models::LowerModel(f.config);
  ASSERT_TRUE(primitive_graph.ok()) << primitive_graph.status();
  planner::PipelineOptions plan_options;
  plan_options.tokens = bucket;
  plan_options.batch = f.options.batch;
  plan_options.cache_capacity = f.options.max_seq;
  plan_options.last_token_logits = true;
  auto planned = planner::PlanPhases(*primitive_graph, plan_options);
  ASSERT_TRUE(planned.ok()) << planned.status();
  const ir::Value& logits = planned->prefill.value(planned->prefill.outputs()[0]);
  ASSERT_EQ(logits.type.dims.size(), 3u);
  EXPECT_EQ(logits.type.dims[1], ir::Dim::Static(1)) << logits.type.ToString();

  auto primitive = runtime::cpu::CpuBackend::Create(*primitive_graph, *f.checkpoint, f.options);
  ASSERT_TRUE(primitive.ok()) << primitive.status();
  auto plan = runtime::cpu::CpuBackend::CreatePhased(planned->prefill, planned->decode,
                                                     *f.checkpoint, f.options);
  ASSERT_TRUE(plan.ok()) << plan.status();

  std::vector<int32_t> tokens(static_cast<size_t>(kPad), 0), positions;
  for (int64_t i = 0; i < kPad; ++i) positions.push_back(static_cast<int32_t>(f.prompt_len() + i));
  tokens.insert(tokens.end(), f.prompt.begin(), f.prompt.end());
  for (int32_t p : Iota(f.prompt_len())) positions.push_back(p);

  auto want = (*primitive)->Run(f.prompt, Iota(f.prompt_len()));
  auto got = (*plan)->Run(tokens, positions);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  const int64_t vocab = f.config.vocab_size;
  ASSERT_EQ(static_cast<int64_t>(got->size()), vocab);
  const std::vector<float> want_last(want->end() - vocab, want->end());
  EXPECT_LE(MaxRelativeDifference(*got, want_last), kTolerance) << "the prompt's last token";
  ExpectDecodeAgrees(**primitive, **plan, f, *std::move(want));
}

// Two tensor-parallel ranks, each planned with last_token_logits (the all_gather then
// gathers only the last token's shards) and run on the CPU backend in-process: the prompt's
// last-token logits and a decode step are the primitive whole model's.
TEST_P(PlanParityTest, TensorParallelRanksWithLastTokenLogits) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(LoadFixture(GetParam(), 0, f));
  if (!models::CheckTensorParallel(f.config, {2, 0}).ok()) {
    GTEST_SKIP() << "the fixture's geometry does not split over 2 ranks: "
                 << models::CheckTensorParallel(f.config, {2, 0});
  }
  planner::PipelineOptions plan_options;
  plan_options.tokens = f.prompt_len();
  plan_options.batch = f.options.batch;
  plan_options.cache_capacity = f.options.max_seq;
  plan_options.last_token_logits = true;
  std::vector<runtime::cpu::TensorParallelCpu::RankGraphs> ranks;
  for (int64_t rank = 0; rank < 2; ++rank) {
    auto graph = models::LowerModel(f.config, {2, rank});
    ASSERT_TRUE(graph.ok()) << graph.status();
    auto planned = planner::PlanPhases(*graph, plan_options);
    ASSERT_TRUE(planned.ok()) << planned.status();
    const ir::Value& logits = planned->prefill.value(planned->prefill.outputs()[0]);
    EXPECT_EQ(logits.type.dims[1], ir::Dim::Static(1)) << logits.type.ToString();
    ranks.push_back({std::move(planned->prefill), std::move(planned->decode)});
  }
  auto tp = runtime::cpu::TensorParallelCpu::Create(std::move(ranks), *f.checkpoint, f.options);
  ASSERT_TRUE(tp.ok()) << tp.status();
  auto primitive_graph = models::LowerModel(f.config);
  ASSERT_TRUE(primitive_graph.ok()) << primitive_graph.status();
  auto primitive = runtime::cpu::CpuBackend::Create(*primitive_graph, *f.checkpoint, f.options);
  ASSERT_TRUE(primitive.ok()) << primitive.status();
  auto want = (*primitive)->Run(f.prompt, Iota(f.prompt_len()));
  auto got = (*tp)->Run(f.prompt, Iota(f.prompt_len()));
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  const int64_t vocab = f.config.vocab_size;
  ASSERT_EQ(static_cast<int64_t>(got->size()), vocab);
  EXPECT_LE(MaxRelativeDifference(*got, std::vector<float>(want->end() - vocab, want->end())), kTolerance);
  const int32_t position = static_cast<int32_t>(f.prompt_len());
  want = (*primitive)->Run({f.prompt[0]}, {position});
  got = (*tp)->Run({f.prompt[0]}, {position});
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(MaxRelativeDifference(*got, *want), kTolerance) << "decode step";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PlanParityTest, ::testing::ValuesIn(Fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tileplan
