// The weight layout of the GPU runtime and the checkpoint checks DeviceWeights::Load makes
// before it allocates anything (no GPU needed).
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/lowering.h"
#include "models/safetensors.h"
#include "planner/plan_builder.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "runtime/gpu/device_weights.h"
#include "runtime/gpu/program.h"
#include "targets/target.h"
#include "tests/models/safetensors_builder.h"
#include "tests/testing/random_weights.h"

namespace tileplan::runtime::gpu {
namespace {

using ::testing::HasSubstr;

ir::Graph Parse(absl::string_view text) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : ir::Graph();
}

// A packed q/k/v weight, a norm weight and an embedding table.
constexpr char kGraph[] = R"(graph @g {
  input %tokens: i32[B,T]
  weight %embed: bf16[16,8] = "model.embed.weight"
  weight %norm: bf16[8] = "model.norm.weight"
  weight %qkv: bf16[24,8] = concat("q.weight", "k.weight", "v.weight")
  %x: bf16[B,T,8] = embedding(%tokens, %embed)
  %n: bf16[B,T,8] = rms_norm(%x, %norm) {eps = 1e-06}
  %y: bf16[B,T,24] = linear(%n, %qkv)
  output %y
})";

TEST(WeightLayoutTest, EveryWeightOnceAlignedAndSortedByName) {
  const ir::Graph a = Parse(kGraph);
  const ir::Graph b = Parse(kGraph);
  absl::StatusOr<WeightLayout> layout = WeightLayout::ForGraphs({&a, &b});
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->slots().size(), 3u);
  EXPECT_EQ(layout->slots()[0].name, "embed");
  EXPECT_EQ(layout->slots()[1].name, "norm");
  EXPECT_EQ(layout->slots()[2].name, "qkv");
  EXPECT_EQ(layout->slots()[2].checkpoint_tensors,
            (std::vector<std::string>{"q.weight", "k.weight", "v.weight"}));
  for (const WeightSlot& s : layout->slots()) {
    EXPECT_EQ(s.offset % 256, 0) << s.name;
    EXPECT_EQ(s.bytes, s.name == "embed" ? 16 * 8 * 2 : s.name == "norm" ? 8 * 2 : 24 * 8 * 2);
  }
  EXPECT_EQ(layout->total_bytes(), 256 + 256 + 512);  // 256, 16 and 384 bytes, aligned
  EXPECT_NE(layout->Find("qkv"), nullptr);
  EXPECT_EQ(layout->Find("nope"), nullptr);
}

// Every bundled model's plans lay out: their phase graphs parse and verify, share one
// KV-cache layout (a prefill and a decode phase of one sequence, a decode phase of two) and
// agree on the weights; with the persistent decode kernel and as a rank
// of two tensor-parallel GPUs where the heads divide.
TEST(PlanLayoutTest, EveryBundledModelsPlansLayOut) {
  absl::StatusOr<targets::TargetDescription> target = targets::FindTarget("h200");
  ASSERT_TRUE(target.ok()) << target.status();
  for (const std::string& name : models::BundledConfigNames()) {
    absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(name);
    ASSERT_TRUE(config.ok()) << config.status();
    config->num_layers = 2;
    config->sliding_window.resize(2);
    if (!config->moe.sparse_layers.empty()) config->moe.sparse_layers.resize(2);
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(absl::StrCat(name, " variant ", variant));
      planner::PlanOptions options;
      options.prefill_tokens = {8};
      options.decode_batches = {1, 2};  // one KV cache, laid out for 2 sequences
      options.max_context = 16;
      if (variant == 1)
        options.decode_backend = planner::proto::PlanOptions::DECODE_BACKEND_PERSISTENT;
      if (variant == 2) {
        if (!models::CheckTensorParallel(*config, {.ranks = 2, .rank = 1}).ok()) continue;
        options.tensor_parallel = 2;
        options.rank = 1;
      }
      absl::StatusOr<planner::proto::ExecutionPlan> plan =
          planner::BuildExecutionPlan(*config, *target, options, nullptr);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<PlanLayout> layout = LayOutPlan(*plan);
      ASSERT_TRUE(layout.ok()) << layout.status();
      EXPECT_EQ(layout->graphs.size(), static_cast<size_t>(plan->phases_size()));
      EXPECT_EQ(layout->max_decode_batch, 2);
    }
  }
}

// A plan of a format version this runtime does not read is refused before anything is laid
// out, naming both versions.
TEST(PlanLayoutTest, UnknownFormatVersionIsRefused) {
  planner::PlanOptions options;
  options.prefill_tokens = {8};
  options.max_context = 16;
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig("qwen3-0.6b");
  ASSERT_TRUE(config.ok()) << config.status();
  config->num_layers = 1;
  config->sliding_window.resize(1);
  if (!config->moe.sparse_layers.empty()) config->moe.sparse_layers.resize(1);
  absl::StatusOr<targets::TargetDescription> target = targets::FindTarget("h200");
  ASSERT_TRUE(target.ok()) << target.status();
  absl::StatusOr<planner::proto::ExecutionPlan> plan =
      planner::BuildExecutionPlan(*config, *target, options, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->format_version(), planner::kPlanFormatVersion);
  EXPECT_TRUE(LayOutPlan(*plan).ok());
  plan->set_format_version(planner::kPlanFormatVersion + 1);
  absl::StatusOr<PlanLayout> layout = LayOutPlan(*plan);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(layout.status().message(), HasSubstr("the plan has format_version 2; this runtime "
                                                   "reads version 1"));
}

TEST(WeightLayoutTest, GraphsThatDisagreeOnAWeightAreRefused) {
  const ir::Graph a = Parse(kGraph);
  std::string other(kGraph);
  other.replace(other.find("bf16[8] = \"model.norm.weight\""), 7, "f32[8] ");
  const ir::Graph b = Parse(other);
  absl::StatusOr<WeightLayout> layout = WeightLayout::ForGraphs({&a, &b});
  ASSERT_FALSE(layout.ok());
  EXPECT_THAT(layout.status().message(), HasSubstr("weight %norm is f32[8]"));
}

class DeviceWeightsLoadTest : public ::testing::Test {
 protected:
  // Writes `weights` as a checkpoint and tries to load it for kGraph's layout.
  absl::Status Load(const testing::WeightMap& weights, absl::string_view graph = kGraph) {
    testing::WriteWeights(dir_ / "model.safetensors", weights);
    absl::StatusOr<std::unique_ptr<models::Checkpoint>> checkpoint = models::Checkpoint::Open(dir_);
    if (!checkpoint.ok()) return checkpoint.status();
    const ir::Graph g = Parse(graph);
    absl::StatusOr<WeightLayout> layout = WeightLayout::ForGraphs({&g});
    if (!layout.ok()) return layout.status();
    return DeviceWeights::CheckCheckpoint(*layout, **checkpoint);
  }
  static testing::WeightData Tensor(std::vector<int64_t> shape) {
    testing::WeightData d;
    d.dtype = models::StDType::kBF16;
    d.shape = shape;
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    d.values.assign(static_cast<size_t>(n), 0.5f);
    return d;
  }
  testing::WeightMap Good() {
    return {{"model.embed.weight", Tensor({16, 8})},
            {"model.norm.weight", Tensor({8})},
            {"q.weight", Tensor({8, 8})},
            {"k.weight", Tensor({8, 8})},
            {"v.weight", Tensor({8, 8})}};
  }
  const std::filesystem::path dir_ = testing::MakeTempDir("device_weights_test");
};

TEST_F(DeviceWeightsLoadTest, ACheckpointThatDoesNotFitIsRefusedByName) {
  testing::WeightMap w = Good();
  w.erase("k.weight");
  absl::Status s = Load(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no tensor \"k.weight\" (weight %qkv)"));

  w = Good();
  w["extra.weight"] = Tensor({2});
  s = Load(w);
  EXPECT_THAT(s.message(),
              HasSubstr("checkpoint tensor \"extra.weight\" is not a weight of the plan"));

  w = Good();
  w["v.weight"] = Tensor({8, 4});
  s = Load(w);
  EXPECT_THAT(s.message(),
              HasSubstr("\"v.weight\" has shape [8,4], which does not fit weight %qkv"));

  w = Good();
  w["v.weight"] = Tensor({16, 8});
  s = Load(w);
  EXPECT_THAT(s.message(), HasSubstr("the parts of weight %qkv have 32 rows; the weight has 24"));
}

// A tensor-parallel rank's weights: each slices its tensors (a row-parallel projection by
// columns, q/k/v by rows into one packed weight, a tied head rows of the embedding table the
// embedding reads whole). Slices must lie inside their tensors and fit the weight.
TEST_F(DeviceWeightsLoadTest, RankSlicesAreCheckedAgainstTheirTensors) {
  const ir::Graph g = Parse(R"(graph @g {
  input %tokens: i32[B,T]
  weight %embed: bf16[16,8] = "model.embed.weight"
  weight %head: bf16[8,8] = slice("model.embed.weight", 0, 8, 8)
  weight %qkv: bf16[12,8] = concat(slice("q.weight", 0, 4, 4), slice("k.weight", 0, 4, 4), slice("v.weight", 0, 4, 4))
  weight %o: bf16[8,4] = slice("o.weight", 1, 4, 4)
  %x: bf16[B,T,8] = embedding(%tokens, %embed)
  %y: bf16[B,T,12] = linear(%x, %qkv)
  %l: f32[B,T,8] = lm_head(%x, %head)
  output %y
  output %l
})");
  absl::StatusOr<WeightLayout> layout = WeightLayout::ForGraphs({&g});
  ASSERT_TRUE(layout.ok()) << layout.status();
  const WeightSlot* qkv = layout->Find("qkv");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->slice(1), ir::TensorSlice::Of(0, 4, 4));
  EXPECT_EQ(qkv->bytes, 12 * 8 * 2);
  std::string text = ir::PrintGraph(g);
  testing::WeightMap w = {{"model.embed.weight", Tensor({16, 8})},
                          {"q.weight", Tensor({8, 8})},
                          {"k.weight", Tensor({8, 8})},
                          {"v.weight", Tensor({8, 8})},
                          {"o.weight", Tensor({8, 8})}};
  EXPECT_TRUE(Load(w, text).ok()) << Load(w, text);
  w["o.weight"] = Tensor({8, 6});
  absl::Status s = Load(w, text);
  EXPECT_THAT(s.message(), HasSubstr("weight %o binds elements [4, 8) of dim 1 of checkpoint "
                                     "tensor \"o.weight\", which has shape [8,6]"));
  w["o.weight"] = Tensor({8, 8});
  w["k.weight"] = Tensor({10, 8});
  s = Load(w, text);
  EXPECT_TRUE(s.ok()) << s;  // rows 4..7 of a taller k still fit
  w["k.weight"] = Tensor({8, 6});
  s = Load(w, text);
  EXPECT_THAT(s.message(), HasSubstr("\"k.weight\" has shape [8,6] (sliced: [4,6]), which does "
                                     "not fit weight %qkv"));
}

}  // namespace
}  // namespace tileplan::runtime::gpu
