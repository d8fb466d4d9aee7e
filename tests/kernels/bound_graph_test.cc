#include "kernels/core/bound_graph.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::kernels {
namespace {

using ::testing::HasSubstr;
using testing::MustBind;
using testing::MustParseVerified;
using testing::RegionNamed;
using testing::TestGraph;

std::vector<int64_t> V(std::initializer_list<int64_t> v) { return v; }

TEST(BoundGraphTest, BindsSymbolsAndDerivesViewLayouts) {
  ir::Graph graph = TestGraph("typical_regions.tpir");
  BoundGraph g = MustBind(graph, {{"B", 2}, {"Smax", 512}, {"T", 3}}, 3);
  const ir::ValueId qkv = graph.FindValue("qkv");
  const ir::ValueId k = graph.FindValue("k");
  const ir::ValueId k_heads = graph.FindValue("k_heads");
  EXPECT_EQ(g.shape(qkv), V({2, 3, 256}));
  EXPECT_EQ(g.bytes(qkv), 2 * 3 * 256 * 2);
  // %k is the second slice of %qkv's last dim: offset 128, rows 256 apart.
  EXPECT_EQ(g.layout(k).root, qkv);
  EXPECT_EQ(g.layout(k).offset, 128);
  EXPECT_EQ(g.layout(k).strides, V({768, 256, 1}));
  EXPECT_FALSE(g.layout(k).IsContiguous());
  EXPECT_TRUE(g.layout(k).InnerContiguous());
  // Reshaping the slice to heads keeps the row stride and splits the last dim.
  EXPECT_EQ(g.layout(k_heads).root, qkv);
  EXPECT_EQ(g.layout(k_heads).shape, V({2, 3, 1, 64}));
  EXPECT_EQ(g.layout(k_heads).strides, V({768, 256, 64, 1}));
  EXPECT_EQ(g.layout(k_heads).offset, 128);
  // kv_write's result is the cache's own storage.
  const ir::ValueId k_new = graph.FindValue("k_new");
  EXPECT_EQ(g.layout(k_new).root, graph.FindValue("k_cache"));
  EXPECT_EQ(g.storage_bytes(graph.FindValue("k_cache")), 2 * 1 * 512 * 64 * 2);
  // A fresh result is its own contiguous root.
  const ir::ValueId attn = graph.FindValue("attn");
  EXPECT_EQ(g.layout(attn).root, attn);
  EXPECT_TRUE(g.layout(attn).IsContiguous());
  EXPECT_EQ(g.layout(graph.FindValue("attn_flat")).strides, V({384, 128, 1}));
  EXPECT_EQ(BoundRegion(g, RegionNamed(graph, "attn")).Label(), "region #12 'attention' (%attn)");
}

TEST(BoundGraphTest, UnboundSymbolIsAnErrorNamingTheValue) {
  ir::Graph graph = TestGraph("typical_regions.tpir");
  absl::StatusOr<BoundGraph> g = BoundGraph::Create(graph, {{"B", 1}, {"T", 1}}, 1);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("%k_cache"));
  EXPECT_THAT(g.status().message(), HasSubstr("symbol Smax is not bound"));
}

TEST(BoundGraphTest, NegativeExtentAndContextAreErrors) {
  ir::Graph graph = TestGraph("typical_regions.tpir");
  EXPECT_FALSE(BoundGraph::Create(graph, {{"B", -1}, {"Smax", 8}, {"T", 1}}, 1).ok());
  EXPECT_FALSE(BoundGraph::Create(graph, {{"B", 1}, {"Smax", 8}, {"T", 1}}, -1).ok());
}

TEST(BoundGraphTest, ReshapeThatNeedsACopyIsAnError) {
  ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[2,128]
  %a: bf16[2,64] view(%x), %b: bf16[2,64] view(%x) = split(%x) {sizes = [64, 64]}
  %flat: bf16[128] view(%a) = reshape(%a)
  output %flat
})");
  absl::StatusOr<BoundGraph> g = BoundGraph::Create(graph, {}, 0);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("region #1 'reshape' (%flat)"));
  EXPECT_THAT(g.status().message(), HasSubstr("without a copy"));
}

TEST(BoundGraphTest, ReshapeOfStridedViewMergesOnlyContiguousRuns) {
  ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[4,6,8]
  %a: bf16[4,6,4] view(%x), %b: bf16[4,6,4] view(%x) = split(%x) {sizes = [4, 4]}
  %r: bf16[24,2,2] view(%b) = reshape(%b)
  output %r
})");
  BoundGraph g = MustBind(graph, {}, 0);
  const Layout& r = g.layout(graph.FindValue("r"));
  EXPECT_EQ(r.offset, 4);
  EXPECT_EQ(r.strides, V({8, 2, 1}));
  EXPECT_EQ(r.SpanElements(), 23 * 8 + 2 + 1 + 1);
}

}  // namespace
}  // namespace tileplan::kernels
