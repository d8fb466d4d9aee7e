// The text form: golden round trip, random round trips through text and proto, literals.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "regions/kinds.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/serialization.h"
#include "regions/verifier.h"
#include "tests/regions/graph_testing.h"
#include "tests/regions/random_graph.h"
#include "tests/testing/paths.h"

namespace tileplan::ir {
namespace {

using testing::ExpectSameGraph;
using testing::MustParse;

// print(parse(print(g))) == print(g) and parse(print(g)) equals g; the same through proto.
void ExpectRoundTrips(const Graph& g) {
  const std::string text = PrintGraph(g);
  absl::StatusOr<Graph> parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  ExpectSameGraph(g, *parsed);
  EXPECT_EQ(PrintGraph(*parsed), text);

  absl::StatusOr<proto::Graph> message = GraphToProto(g);
  ASSERT_TRUE(message.ok()) << message.status();
  absl::StatusOr<Graph> from_proto = GraphFromProto(*message);
  ASSERT_TRUE(from_proto.ok()) << from_proto.status();
  ExpectSameGraph(g, *from_proto);
  EXPECT_EQ(PrintGraph(*from_proto), text);
  absl::StatusOr<proto::Graph> again = GraphToProto(*from_proto);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SerializeAsString(), message->SerializeAsString());
}

// The dense golden graph, the latent-attention MoE one (stacked expert weights, yarn
// interleaved RoPE) and a tensor-parallel rank's (sliced weights, the collectives; phi3's
// fused projections as concatenated slices) together use every primitive kind.
TEST(TextFormatTest, GoldenGraphsCoverEveryPrimitiveKindAndRoundTrip) {
  std::set<std::string> kinds;
  for (const char* file : {"tiny_llama.tpir", "tiny_moe_mla.tpir", "tiny_phi3_tp.tpir"}) {
    SCOPED_TRACE(file);
    const std::string text = testing::ReadTestData(file);
    Graph g = MustParse(text);
    EXPECT_TRUE(Verify(g).ok()) << Verify(g);
    EXPECT_EQ(PrintGraph(g), text);
    for (const Region& r : g.regions()) kinds.insert(r.kind);
    ExpectRoundTrips(g);
  }
  const std::vector<std::string> primitive = PrimitiveKindNames();
  EXPECT_EQ(kinds, std::set<std::string>(primitive.begin(), primitive.end()));
}

// A planned graph: every fused kind (with and without optional bias), packed weights and
// fused_from lists.
TEST(TextFormatTest, PlannedGoldenGraphCoversEveryFusedKindAndRoundTrips) {
  const std::string text = testing::ReadTestData("tiny_planned.tpir");
  Graph g = MustParse(text);
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
  EXPECT_EQ(PrintGraph(g), text);
  std::set<std::string> kinds;
  for (const Region& r : g.regions()) kinds.insert(r.kind);
  for (const std::string& kind : KindNames()) {
    if (FindKind(kind)->fused) {
      EXPECT_TRUE(kinds.count(kind)) << kind;
    }
  }
  ExpectRoundTrips(g);

  const Value& qkv = g.value(g.FindValue("l0.w_qkv"));
  EXPECT_EQ(qkv.checkpoint_tensors,
            (std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight",
                                      "model.layers.0.self_attn.k_proj.weight",
                                      "model.layers.0.self_attn.v_proj.weight"}));
  const Region& swiglu = g.regions()[g.value(g.FindValue("l1.act")).producer];
  EXPECT_EQ(swiglu.kind, "swiglu");
  EXPECT_EQ(swiglu.phase, Phase::kDecode);
  EXPECT_EQ(swiglu.fused_from, (std::vector<std::string>{"split", "silu", "mul"}));
  const Region& rope = g.regions()[g.value(g.FindValue("l1.q")).producer];
  EXPECT_EQ(rope.result_aliases,
            (std::vector<ResultAlias>{{}, {AliasKind::kInPlace, 1}, {AliasKind::kInPlace, 2}}));
  EXPECT_TRUE(g.regions()[g.value(g.FindValue("l0.h")).producer].fused_from.empty());
}

TEST(TextFormatTest, PackedWeightsAndFusedFromSyntax) {
  // concat with one part is the plain form; fused(...) follows the phase.
  Graph g = MustParse(R"(graph @g {
  weight %a: f32[2] = concat("x")
  weight %b: f32[3,2] = concat( "y" , "z\n" )
  input %i: f32[2]
  %s: f32[2] = add(%i, %a) {} phase(general) fused(add)
  %t: f32[2] = add(%s, %a) fused(add, add)
}
)");
  EXPECT_EQ(PrintGraph(g), R"(graph @g {
  weight %a: f32[2] = "x"
  weight %b: f32[3,2] = concat("y", "z\n")
  input %i: f32[2]
  %s: f32[2] = add(%i, %a) fused(add)
  %t: f32[2] = add(%s, %a) fused(add, add)
}
)");
  EXPECT_EQ(g.value(g.FindValue("b")).checkpoint_tensors, (std::vector<std::string>{"y", "z\n"}));
}

TEST(TextFormatTest, GoldenGraphMatchesBuilderGraph) {
  Graph g = MustParse(testing::ReadTestData("tiny_llama.tpir"));
  const ValueId gu = g.FindValue("l0.gu");
  ASSERT_NE(gu, kNoValue);
  const Region& split = g.regions()[g.value(g.FindValue("l0.gate")).producer];
  EXPECT_EQ(split.kind, "split");
  EXPECT_EQ(split.operands, std::vector<ValueId>{gu});
  EXPECT_EQ(split.result_aliases,
            (std::vector<ResultAlias>{{AliasKind::kView, 0}, {AliasKind::kView, 0}}));
  EXPECT_EQ(split.attrs.GetInts("sizes").value(), (std::vector<int64_t>{128, 128}));
  const Region& argmax = g.regions().back();
  EXPECT_EQ(argmax.phase, Phase::kDecode);
  EXPECT_EQ(g.value(g.weights()[0]).checkpoint_tensors,
            std::vector<std::string>{"model.embed_tokens.weight"});
  EXPECT_EQ(g.value(g.states()[0]).type.ToString(), "bf16[B,2,Smax,16]");
}

// The example in docs/ir.md's "Text format" section parses, verifies and is canonical
// apart from its comment line.
TEST(TextFormatTest, DocumentedExampleIsValid) {
  std::ifstream in(tileplan::testing::SourcePath("docs/ir.md"));
  ASSERT_TRUE(in) << "cannot read docs/ir.md";
  std::string example, canonical;
  bool in_section = false, in_block = false;
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "## ")) in_section = line == "## Text format";
    if (!in_section) continue;
    if (absl::StartsWith(line, "```")) {
      if (in_block) break;
      in_block = true;
      continue;
    }
    if (!in_block) continue;
    example += line + "\n";
    if (!absl::StrContains(line, "//")) canonical += line + "\n";
  }
  ASSERT_FALSE(example.empty());
  Graph g = MustParse(example);
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
  EXPECT_EQ(PrintGraph(g), canonical);
}

TEST(TextFormatTest, RandomValidGraphsVerifyAndRoundTrip) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    SCOPED_TRACE(seed);
    Graph g = testing::RandomValidGraph(seed);
    absl::Status verified = Verify(g);
    ASSERT_TRUE(verified.ok()) << verified << "\n" << PrintGraph(g);
    ExpectRoundTrips(g);
    if (HasFatalFailure()) return;
  }
}

TEST(TextFormatTest, RandomAttributeGraphsRoundTrip) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    SCOPED_TRACE(seed);
    ExpectRoundTrips(testing::RandomAttributeGraph(seed));
    if (HasFatalFailure()) return;
  }
}

TEST(TextFormatTest, FloatsPrintShortestAndReadBackAsFloats) {
  EXPECT_EQ(PrintFloat(1.0), "1.0");
  EXPECT_EQ(PrintFloat(100.0), "100.0");
  EXPECT_EQ(PrintFloat(0.1), "0.1");
  EXPECT_EQ(PrintFloat(1e-6), "1e-06");
  EXPECT_EQ(PrintFloat(1e22), "1e+22");
  EXPECT_EQ(PrintFloat(-0.0), "-0.0");
  EXPECT_EQ(PrintFloat(5e-324), "5e-324");
  EXPECT_EQ(PrintFloat(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(PrintFloat(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(PrintFloat(-std::nan("")), "nan");
}

TEST(TextFormatTest, AttributeLiterals) {
  EXPECT_EQ(PrintAttrValue(int64_t{-3}), "-3");
  EXPECT_EQ(PrintAttrValue(true), "true");
  EXPECT_EQ(PrintAttrValue(std::string("a\"b\\c\n\t\x01\xff")), R"("a\"b\\c\n\t\x01\xff")");
  EXPECT_EQ(PrintAttrValue(std::vector<int64_t>{1, -2}), "[1, -2]");
  EXPECT_EQ(PrintAttrValue(std::vector<double>{0.5, 2.0}), "[0.5, 2.0]");
  EXPECT_EQ(PrintAttrValue(std::vector<int64_t>{}), "ints[]");
  EXPECT_EQ(PrintAttrValue(std::vector<double>{}), "floats[]");

  Graph g = MustParse(R"(graph @g {
  input %x: f32[]
  %y: f32[] = op(%x) {a = ints[], b = floats[], c = ints[1, 2], d = floats[1.5, inf, -inf, nan], e = "\x41\"", f = -0.0, g = false, h = 9223372036854775807, i = -9223372036854775808}
}
)");
  const Attributes& attrs = g.regions()[0].attrs;
  EXPECT_TRUE(attrs.GetInts("a").value().empty());
  EXPECT_TRUE(attrs.GetFloats("b").value().empty());
  EXPECT_EQ(attrs.GetInts("c").value(), (std::vector<int64_t>{1, 2}));
  const std::vector<double> d = attrs.GetFloats("d").value();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_TRUE(std::isinf(d[1]) && d[1] > 0);
  EXPECT_TRUE(std::isinf(d[2]) && d[2] < 0);
  EXPECT_TRUE(std::isnan(d[3]));
  EXPECT_EQ(attrs.GetString("e").value(), "A\"");
  EXPECT_TRUE(std::signbit(attrs.GetFloat("f").value()));
  EXPECT_EQ(attrs.GetBool("g").value(), false);
  EXPECT_EQ(attrs.GetInt("h").value(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(attrs.GetInt("i").value(), std::numeric_limits<int64_t>::min());
}

TEST(TextFormatTest, ParserAcceptsCommentsBlankLinesAndInterleavedItems) {
  Graph g = MustParse(R"(
// A leading comment.
graph @g {   // trailing comment

  input %x: f32[B, 4]
  %y: f32[B,4] = silu(%x) phase(prefill)
  output %y   // outputs may come before later items
  input %z: f32[B,4]
  %w: f32[B,4] = add(%y, %z) {}
}

)");
  EXPECT_EQ(g.regions().size(), 2u);
  EXPECT_EQ(g.regions()[0].phase, Phase::kPrefill);
  EXPECT_EQ(PrintGraph(g), R"(graph @g {
  input %x: f32[B,4]
  input %z: f32[B,4]
  %y: f32[B,4] = silu(%x) phase(prefill)
  %w: f32[B,4] = add(%y, %z)
  output %y
}
)");
}

TEST(TextFormatTest, AliasNamesTheFirstMatchingOperand) {
  Graph g = MustParse(R"(graph @g {
  input %a: f32[2]
  input %b: f32[2]
  %r: f32[2] inplace(%b) = op(%a, %b, %b)
}
)");
  EXPECT_EQ(g.regions()[0].result_aliases[0], (ResultAlias{AliasKind::kInPlace, 1}));
}

}  // namespace
}  // namespace tileplan::ir
