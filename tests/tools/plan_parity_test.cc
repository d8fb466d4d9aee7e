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

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/lowering.h"
#include "models/safetensors.h"
#include "planner/phase_graphs.h"
#include "runtime/cpu/cpu_backend.h"

namespace tileplan {
namespace {

constexpr double kTolerance = 1e-5;

std::vector<std::string> Fixtures() { return absl::StrSplit(TILEPLAN_FIXTURES, ','); }

double RelativeDiff(const std::vector<float>& planned, const std::vector<float>& primitive) {
  EXPECT_EQ(planned.size(), primitive.size());
  double diff = 0, scale = 0;
  for (size_t k = 0; k < std::min(planned.size(), primitive.size()); ++k) {
    diff = std::max(diff, std::fabs(static_cast<double>(planned[k]) - primitive[k]));
    scale = std::max(scale, std::fabs(static_cast<double>(primitive[k])));
  }
  return scale > 0 ? diff / scale : diff;
}

int32_t LastArgmax(const std::vector<float>& logits, int64_t vocab) {
  const auto last = logits.end() - vocab;
  return static_cast<int32_t>(std::max_element(last, logits.end()) - last);
}

class PlanParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanParityTest, PlannedAndPrimitiveLogitsAgree) {
  const std::filesystem::path dir =
      std::filesystem::path(TILEPLAN_SOURCE_DIR) / "tests/data" / GetParam();
  auto config = models::LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  auto checkpoint = models::Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  auto reference = models::SafetensorsFile::Open(dir / "reference.safetensors");
  ASSERT_TRUE(reference.ok()) << reference.status();
  const models::TensorView* ids = (*reference)->Find("input_ids");
  const models::TensorView* greedy = (*reference)->Find("greedy_tokens");
  ASSERT_TRUE(ids != nullptr && greedy != nullptr);
  ASSERT_EQ(ids->dtype, models::StDType::kI32);
  std::vector<int32_t> prompt(static_cast<size_t>(ids->num_elements()));
  std::memcpy(prompt.data(), ids->data, prompt.size() * sizeof(int32_t));
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t steps = greedy->num_elements();
  const int64_t vocab = config->vocab_size;

  auto primitive_graph = models::LowerModel(*config);
  ASSERT_TRUE(primitive_graph.ok()) << primitive_graph.status();
  runtime::cpu::CpuBackend::Options options;
  options.batch = 1;
  options.max_seq = prompt_len + steps;
  options.threads = 2;
  planner::PipelineOptions plan_options;
  plan_options.tokens = prompt_len;
  plan_options.batch = options.batch;
  plan_options.cache_capacity = options.max_seq;
  auto planned = planner::PlanPhases(*primitive_graph, plan_options);
  ASSERT_TRUE(planned.ok()) << planned.status();
  // The planner did rewrite both graphs, so the comparison is not of a graph with itself.
  for (const ir::Graph* g : {&planned->prefill, &planned->decode}) {
    EXPECT_LT(g->regions().size(), primitive_graph->regions().size());
    EXPECT_TRUE(std::any_of(g->regions().begin(), g->regions().end(),
                            [](const ir::Region& r) { return !r.fused_from.empty(); }));
  }

  auto primitive = runtime::cpu::CpuBackend::Create(*primitive_graph, **checkpoint, options);
  ASSERT_TRUE(primitive.ok()) << primitive.status();
  auto plan = runtime::cpu::CpuBackend::CreatePhased(planned->prefill, planned->decode,
                                                     **checkpoint, options);
  ASSERT_TRUE(plan.ok()) << plan.status();

  std::vector<int32_t> positions(prompt.size());
  for (size_t t = 0; t < positions.size(); ++t) positions[t] = static_cast<int32_t>(t);
  auto want = (*primitive)->Run(prompt, positions);
  auto got = (*plan)->Run(prompt, positions);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(RelativeDiff(*got, *want), kTolerance) << "prompt";

  // Decode steps on the caches each backend filled, fed the primitive graph's greedy tokens.
  for (int64_t k = 0; k + 1 < steps; ++k) {
    const int32_t next = LastArgmax(*want, vocab);
    const int32_t position = static_cast<int32_t>(prompt_len + k);
    want = (*primitive)->Run({next}, {position});
    got = (*plan)->Run({next}, {position});
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(RelativeDiff(*got, *want), kTolerance) << "decode step " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PlanParityTest, ::testing::ValuesIn(Fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tileplan
