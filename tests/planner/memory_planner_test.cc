#include "planner/memory_planner.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/lowering.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::planner {
namespace {

using kernels::BoundGraph;
using kernels::testing::MustBind;
using kernels::testing::MustParseVerified;
using ::testing::HasSubstr;

MemoryPlanOptions ReuseAnything() {
  MemoryPlanOptions options;
  options.may_overwrite = [](int, int, int) { return true; };
  return options;
}

MemoryPlan MustPlan(const BoundGraph& g, const MemoryPlanOptions& options) {
  absl::StatusOr<MemoryPlan> plan = PlanMemory(g, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return MemoryPlan();
  EXPECT_TRUE(CheckMemoryPlan(g, *plan, options).ok()) << CheckMemoryPlan(g, *plan, options);
  return *std::move(plan);
}

// x (input) -> a -> b -> c; d = c + a. 256 bytes each.
constexpr char kChain[] = R"(graph @chain {
  input %x: f32[64]
  %a: f32[64] = silu(%x)
  %b: f32[64] = silu(%a)
  %c: f32[64] = silu(%b)
  %d: f32[64] = add(%c, %a)
  output %d
})";

TEST(MemoryPlannerTest, ChainWithoutReuseSharesOnlyDeadBuffers) {
  const ir::Graph graph = MustParseVerified(kChain);
  const BoundGraph g = MustBind(graph, {}, 0);
  const MemoryPlan plan = MustPlan(g, MemoryPlanOptions());
  // Lifetimes: x 0..4 (an input lives for the whole run, so a replayed graph finds it
  // intact), a 0..3, b 1..2, c 2..3, d 3..4 (an output outlives the last step).
  EXPECT_EQ(plan.intermediate_bytes, 5 * 256);
  EXPECT_EQ(plan.peak_live_bytes, 4 * 256);
  EXPECT_EQ(plan.arena_bytes, 4 * 256);
  EXPECT_TRUE(plan.reuses.empty());
  // Nothing takes x's bytes; d takes b's (b is dead after step 2).
  for (const char* v : {"a", "b", "c", "d"}) {
    EXPECT_NE(plan.values[graph.FindValue(v)].offset, plan.values[graph.FindValue("x")].offset)
        << v;
  }
  EXPECT_EQ(plan.values[graph.FindValue("d")].offset, plan.values[graph.FindValue("b")].offset);
  EXPECT_EQ(plan.values[graph.FindValue("x")].storage, StorageKind::kInput);
  EXPECT_EQ(plan.values[graph.FindValue("d")].storage, StorageKind::kArena);
}

TEST(MemoryPlannerTest, ChainWithReuseWritesOverDeadOperands) {
  const ir::Graph graph = MustParseVerified(kChain);
  const BoundGraph g = MustBind(graph, {}, 0);
  const MemoryPlan plan = MustPlan(g, ReuseAnything());
  // c over b (b dies at step 2) and d over c (c dies at step 3); x is an input and a lives
  // on, so neither is overwritten.
  ASSERT_EQ(plan.reuses.size(), 2u);
  EXPECT_EQ(plan.reuses[0].region, 2);
  EXPECT_EQ(plan.reuses[1].region, 3);
  EXPECT_EQ(plan.reuses[1].operand, 0);
  EXPECT_EQ(plan.values[graph.FindValue("d")].offset, plan.values[graph.FindValue("b")].offset);
  // x (the whole run), a and the b/c/d chain.
  EXPECT_EQ(plan.arena_bytes, 3 * 256);
  EXPECT_EQ(plan.peak_live_bytes, 3 * 256);
  EXPECT_EQ(plan.intermediate_bytes, 5 * 256);
}

TEST(MemoryPlannerTest, ViewsAndInPlaceResultsShareTheirOperandsStorage) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,64]
  input %positions: i32[B,T]
  weight %w: bf16[192,64] = "w"
  state %k_cache: bf16[B,2,Smax,16]
  state %v_cache: bf16[B,2,Smax,16]
  %qkv: bf16[B,T,192] = linear(%x, %w)
  %q: bf16[B,T,128] view(%qkv), %k: bf16[B,T,32] view(%qkv), %v: bf16[B,T,32] view(%qkv) = split(%qkv) {sizes = [128, 32, 32]}
  %k4: bf16[B,T,2,16] view(%k) = reshape(%k)
  %v4: bf16[B,T,2,16] view(%v) = reshape(%v)
  %kc: bf16[B,2,Smax,16] inplace(%k_cache) = kv_write(%k_cache, %k4, %positions)
  %vc: bf16[B,2,Smax,16] inplace(%v_cache) = kv_write(%v_cache, %v4, %positions)
  %s: bf16[B,T,128] = silu(%q)
  output %s
  output %kc
  output %vc
})");
  const BoundGraph g = MustBind(graph, {{"B", 1}, {"Smax", 8}, {"T", 4}}, 4);
  const MemoryPlan plan = MustPlan(g, ReuseAnything());
  auto at = [&](const char* name) { return plan.values[graph.FindValue(name)]; };
  EXPECT_EQ(at("q").offset, at("qkv").offset);
  EXPECT_EQ(at("k").offset, at("qkv").offset + 128 * 2);
  EXPECT_EQ(at("v").offset, at("qkv").offset + 160 * 2);
  EXPECT_EQ(at("k4").offset, at("k").offset);
  EXPECT_EQ(at("k").buffer, at("qkv").buffer);
  EXPECT_EQ(at("kc").storage, StorageKind::kState);
  EXPECT_EQ(at("kc").offset, at("k_cache").offset);
  EXPECT_EQ(at("vc").offset, at("v_cache").offset);
  EXPECT_EQ(at("k_cache").offset, 0);
  EXPECT_EQ(at("v_cache").offset, 512);  // [1,2,8,16] bf16
  EXPECT_EQ(plan.state_bytes, 2 * 512);
  EXPECT_EQ(at("w").storage, StorageKind::kWeight);
  EXPECT_EQ(plan.weight_bytes, 192 * 64 * 2);
  // %q is a strided view: silu may not write over it, so %s has its own bytes.
  EXPECT_TRUE(plan.reuses.empty());
}

TEST(MemoryPlannerTest, WorkspacesLiveForTheirStepAndCountersForTheRun) {
  const ir::Graph graph = MustParseVerified(kChain);
  const BoundGraph g = MustBind(graph, {}, 0);
  MemoryPlanOptions options;
  options.workspace_bytes = {0, 100, 0, 1000};
  options.counter_bytes = {0, 0, 8, 0};
  const MemoryPlan plan = MustPlan(g, options);
  ASSERT_GE(plan.workspace[1], 0);
  ASSERT_GE(plan.workspace[3], 0);
  ASSERT_GE(plan.counters[2], 0);
  EXPECT_EQ(plan.workspace[0], -1);
  EXPECT_EQ(plan.counters[1], -1);
  const ArenaBuffer& w1 = plan.buffers[plan.workspace[1]];
  const ArenaBuffer& w3 = plan.buffers[plan.workspace[3]];
  const ArenaBuffer& c2 = plan.buffers[plan.counters[2]];
  EXPECT_EQ(w1.bytes, 256);
  EXPECT_EQ(w3.bytes, 1024);
  EXPECT_EQ(w1.workspace_of, 1);
  EXPECT_EQ(c2.counters_of, 2);
  EXPECT_EQ(c2.first_step, 0);
  EXPECT_EQ(c2.last_step, 4);
  // Workspaces of different steps may share bytes; counters share with nothing.
  for (const ArenaBuffer& b : plan.buffers) {
    if (&b == &c2) continue;
    EXPECT_TRUE(b.offset + b.bytes <= c2.offset || c2.offset + c2.bytes <= b.offset);
  }
  EXPECT_EQ(plan.intermediate_bytes, 5 * 256 + 256 + 1024 + 256);
  options.workspace_bytes = {1};
  EXPECT_THAT(PlanMemory(g, options).status().message(), HasSubstr("1 workspace sizes"));
  options.workspace_bytes.clear();
  options.counter_bytes = {0, -4, 0, 0};
  EXPECT_THAT(PlanMemory(g, options).status().message(),
              HasSubstr("region #1 has a negative counter size"));
}

TEST(MemoryPlannerTest, CheckerCatchesOverlapsAndForbiddenReuse) {
  const ir::Graph graph = MustParseVerified(kChain);
  const BoundGraph g = MustBind(graph, {}, 0);
  MemoryPlan plan = MustPlan(g, MemoryPlanOptions());
  // Move c onto a's bytes while both are live at steps 2 and 3.
  const ir::ValueId a = graph.FindValue("a");
  const ir::ValueId c = graph.FindValue("c");
  MemoryPlan broken = plan;
  broken.buffers[broken.values[c].buffer].offset = broken.values[a].offset;
  broken.values[c].offset = broken.values[a].offset;
  absl::Status s = CheckMemoryPlan(g, broken, MemoryPlanOptions());
  EXPECT_THAT(s.message(), HasSubstr("overlaps"));
  EXPECT_THAT(s.message(), HasSubstr("%a"));
  EXPECT_THAT(s.message(), HasSubstr("%c"));
  // A plan made with reuse does not check under options that forbid it.
  const MemoryPlan reused = MustPlan(g, ReuseAnything());
  EXPECT_THAT(CheckMemoryPlan(g, reused, MemoryPlanOptions()).message(),
              HasSubstr("region #2 writes %c over %b"));
  // A buffer moved onto a step's counters (which live for the whole run).
  MemoryPlanOptions with_counters;
  with_counters.counter_bytes = {0, 0, 0, 64};
  broken = MustPlan(g, with_counters);
  const ArenaBuffer& counters = broken.buffers[broken.counters[3]];
  const int32_t b_buffer = broken.values[graph.FindValue("b")].buffer;
  broken.values[graph.FindValue("b")].offset = counters.offset;
  broken.buffers[b_buffer].offset = counters.offset;
  s = CheckMemoryPlan(g, broken, with_counters);
  EXPECT_THAT(s.message(), HasSubstr("the counters of region #3"));
  // A value outside its buffer.
  broken = plan;
  broken.values[c].offset += 128;
  EXPECT_THAT(CheckMemoryPlan(g, broken, MemoryPlanOptions()).message(),
              HasSubstr("outside its buffer"));
}

TEST(MemoryPlannerTest, EveryBundledConfigPlansWithoutOverlapAndReusesMemory) {
  for (const std::string& name : models::BundledConfigNames()) {
    SCOPED_TRACE(name);
    absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(name);
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<ir::Graph> graph = models::LowerModel(*config);
    ASSERT_TRUE(graph.ok()) << graph.status();
    for (int64_t t : {1, 128}) {
      const BoundGraph g = MustBind(*graph, {{"B", 2}, {"Smax", 256}, {"T", t}}, t);
      for (const MemoryPlanOptions& options : {MemoryPlanOptions(), ReuseAnything()}) {
        const MemoryPlan plan = MustPlan(g, options);
        EXPECT_LT(plan.arena_bytes, plan.intermediate_bytes / 2);
        EXPECT_LE(plan.peak_live_bytes, plan.arena_bytes);
        // Per layer and cached position: K and V of every KV head, or for latent attention
        // the latent and the shared rope key; bf16, B = 2, Smax = 256.
        const int64_t per_position = config->is_mla
                                         ? config->mla.kv_lora_rank + config->mla.qk_rope_head_dim
                                         : 2 * config->num_kv_heads * config->head_dim;
        EXPECT_EQ(plan.state_bytes, 2 * config->num_layers * per_position * 256 * 2);
      }
    }
  }
}

}  // namespace
}  // namespace tileplan::planner
