// The shared rewriting machinery: use lists, anchors, GraphRewriter and packed names.
#include "planner/rewriter.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/passes/linear_packing.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/verifier.h"

namespace tileplan::planner {
namespace {

using ::testing::HasSubstr;

ir::Graph Parse(const char* text) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g.ok() && ir::Verify(*g).ok());
  return g.ok() ? *std::move(g) : ir::Graph();
}

constexpr char kChain[] = R"(graph @g {
  input %x: f32[4]
  weight %w1: f32[4] = "w1"
  weight %w2: f32[4] = "w2"
  %a: f32[4] = mul(%x, %w1)
  %b: f32[4] = silu(%a)
  %c: f32[4] = mul(%b, %w2)
  %d: f32[4] = add(%c, %a)
  output %d
}
)";

TEST(UseMapTest, ListsReadersAndSoleUsers) {
  const ir::Graph g = Parse(kChain);
  const UseMap uses(g);
  const ir::ValueId a = g.FindValue("a");
  ASSERT_EQ(uses.uses(a).size(), 2u);
  EXPECT_EQ(uses.uses(a)[0].region, 1);
  EXPECT_EQ(uses.uses(a)[1].region, 3);
  EXPECT_EQ(uses.uses(a)[1].operand, 1);
  EXPECT_EQ(uses.SoleUser(a), -1);
  EXPECT_EQ(uses.SoleUser(g.FindValue("b")), 2);
  EXPECT_EQ(uses.SoleUser(g.FindValue("d")), -1);
  EXPECT_TRUE(uses.is_output(g.FindValue("d")));
  EXPECT_TRUE(uses.UsedOnlyBy(a, {1, 3}));
  EXPECT_FALSE(uses.UsedOnlyBy(a, {1}));
}

TEST(FindAnchorTest, PicksTheLastPositionThatKeepsOrder) {
  const ir::Graph g = Parse(kChain);
  const UseMap uses(g);
  // silu + mul(b, w2): operands a and w2, exported c: the mul's position works.
  EXPECT_EQ(FindAnchor(g, uses, {1, 2}, {g.FindValue("a"), g.FindValue("w2")}, {g.FindValue("c")}),
            2);
  // Exporting b, which region #2 (outside the match) reads, forces the silu's position.
  EXPECT_EQ(FindAnchor(g, uses, {1, 3}, {g.FindValue("a"), g.FindValue("c")},
                       {g.FindValue("b"), g.FindValue("d")}),
            -1);
  // An operand produced inside the match is never available.
  EXPECT_EQ(FindAnchor(g, uses, {0, 1}, {g.FindValue("a")}, {g.FindValue("b")}), -1);
}

TEST(GraphRewriterTest, CopiesWhatIsNotRewritten) {
  const ir::Graph g = Parse(kChain);
  GraphRewriter rewriter(g);
  EXPECT_TRUE(rewriter.empty());
  absl::StatusOr<ir::Graph> copy = rewriter.Rebuild();
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(ir::PrintGraph(*copy), kChain);
}

TEST(GraphRewriterTest, ReplacesRegionsAndRebindsValues) {
  const ir::Graph g = Parse(kChain);
  GraphRewriter rewriter(g);
  const ir::ValueId a = g.FindValue("a");
  const ir::ValueId b = g.FindValue("b");
  // silu(a) becomes mul(a, a), recorded as fused from silu.
  ASSERT_TRUE(rewriter
                  .Replace(1,
                           [a, b](RegionEmitter& out) -> absl::Status {
                             absl::StatusOr<ir::ValueId> new_a = out.Map(a);
                             if (!new_a.ok()) return new_a.status();
                             absl::StatusOr<std::vector<ir::ValueId>> ids =
                                 out.Emit("mul", {*new_a, *new_a},
                                          {ir::ResultSpec{"b", out.source().value(b).type, {}}},
                                          ir::Attributes(), {"silu"});
                             if (!ids.ok()) return ids.status();
                             out.Bind(b, (*ids)[0]);
                             return absl::OkStatus();
                           })
                  .ok());
  EXPECT_TRUE(rewriter.claimed(1));
  EXPECT_FALSE(rewriter.Drop(1).ok());
  absl::StatusOr<ir::Graph> rebuilt = rewriter.Rebuild();
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_TRUE(ir::Verify(*rebuilt).ok());
  EXPECT_THAT(ir::PrintGraph(*rebuilt), HasSubstr("  %b: f32[4] = mul(%a, %a) fused(silu)\n"
                                                  "  %c: f32[4] = mul(%b, %w2)\n"));
}

TEST(GraphRewriterTest, ReadingARemovedValueIsAnInternalError) {
  const ir::Graph g = Parse(kChain);
  GraphRewriter rewriter(g);
  ASSERT_TRUE(rewriter.Drop(1).ok());
  absl::StatusOr<ir::Graph> rebuilt = rewriter.Rebuild();
  EXPECT_EQ(rebuilt.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(rebuilt.status().message(),
              HasSubstr("region #2 'mul' (%c) reads %b, which the rewrite removed"));

  GraphRewriter drop_output(g);
  ASSERT_TRUE(drop_output.Drop(3).ok());
  EXPECT_THAT(drop_output.Rebuild().status().message(),
              HasSubstr("graph output %d was removed by the rewrite"));
}

TEST(GraphRewriterTest, ReplacedWeightsTakeTheFirstPartsPlace) {
  const ir::Graph g = Parse(R"(graph @g {
  input %x: f32[4]
  weight %w1: f32[2] = "w1"
  input %y: f32[4]
  weight %w2: f32[2] = "w2"
  %z: f32[4] = add(%x, %y)
  output %z
}
)");
  GraphRewriter rewriter(g);
  const ir::ValueId w1 = g.FindValue("w1");
  const ir::ValueId w2 = g.FindValue("w2");
  const ir::TensorType packed = ir::MakeType(ir::DType::kF32, {ir::Dim::Static(4)});
  EXPECT_FALSE(rewriter.ReplaceWeights({g.FindValue("x")}, "bad", packed, {"t"}).ok());
  absl::StatusOr<int> key =
      rewriter.ReplaceWeights({w1, w2}, rewriter.UniqueName("w12"), packed, {"w1", "w2"});
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_FALSE(rewriter.ReplaceWeights({w2}, "again", packed, {"w2"}).ok());
  EXPECT_FALSE(rewriter.empty());
  absl::StatusOr<ir::Graph> rebuilt = rewriter.Rebuild();
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_TRUE(ir::Verify(*rebuilt).ok());
  EXPECT_EQ(ir::PrintGraph(*rebuilt), R"(graph @g {
  input %x: f32[4]
  weight %w12: f32[4] = concat("w1", "w2")
  input %y: f32[4]
  %z: f32[4] = add(%x, %y)
  output %z
}
)");
}

TEST(GraphRewriterTest, UniqueNamesAvoidSourceAndClaimedNames) {
  const ir::Graph g = Parse(kChain);
  GraphRewriter rewriter(g);
  EXPECT_EQ(rewriter.UniqueName("e"), "e");
  EXPECT_EQ(rewriter.UniqueName("e"), "e.1");
  EXPECT_EQ(rewriter.UniqueName("a"), "a.1");
  EXPECT_EQ(rewriter.UniqueName("a"), "a.2");
}

TEST(PackedNameTest, KeepsCommonPrefixAndSuffixAtSeparators) {
  EXPECT_EQ(PackedName({"l0.q", "l0.k", "l0.v"}), "l0.qkv");
  EXPECT_EQ(PackedName({"l0.gate", "l0.up"}), "l0.gate_up");
  EXPECT_EQ(PackedName({"model.layers.0.self_attn.q_proj.weight",
                        "model.layers.0.self_attn.k_proj.weight",
                        "model.layers.0.self_attn.v_proj.weight"}),
            "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(PackedName({"model.layers.3.mlp.gate_proj.bias", "model.layers.3.mlp.up_proj.bias"}),
            "model.layers.3.mlp.gate_up_proj.bias");
  // The prefix is cut back to a separator: no "l0.g" + "ate".
  EXPECT_EQ(PackedName({"l0.gate", "l0.gx"}), "l0.gate_gx");
  EXPECT_EQ(PackedName({"wq", "wk", "wv"}), "wq_wk_wv");
  EXPECT_EQ(PackedName({"a.b", "a.x.b"}), "a.b_x.b");
  // A name that is all prefix leaves no middle: the names are joined.
  EXPECT_EQ(PackedName({"a_", "a_b"}), "a__a_b");
}

}  // namespace
}  // namespace tileplan::planner
