// Proto form: round trips, id renumbering, and rejection of malformed messages.
#include <functional>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "regions/printer.h"
#include "regions/serialization.h"
#include "tests/regions/graph_testing.h"

namespace tileplan::ir {
namespace {

using testing::MustParse;

proto::Graph GoldenProto() {
  absl::StatusOr<proto::Graph> message =
      GraphToProto(MustParse(testing::ReadTestData("tiny_llama.tpir")));
  EXPECT_TRUE(message.ok()) << message.status();
  return message.ok() ? *message : proto::Graph();
}

TEST(SerializationTest, GoldenRoundTripsThroughBytes) {
  const std::string golden = testing::ReadTestData("tiny_llama.tpir");
  proto::Graph parsed;
  ASSERT_TRUE(parsed.ParseFromString(GoldenProto().SerializeAsString()));
  absl::StatusOr<Graph> g = GraphFromProto(parsed);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(*g), golden);
  testing::ExpectSameGraph(*g, MustParse(golden));
}

TEST(SerializationTest, ValueIdsAreRenumberedDeclarationsFirst) {
  Graph g("g");
  const ValueId x = g.AddInput("x", MakeType(DType::kF32, {Dim::Static(4)})).value();
  const ValueId y =
      g.AddRegion("silu", {x}, {{"y", MakeType(DType::kF32, {Dim::Static(4)}), {}}}).value()[0];
  const ValueId z = g.AddInput("z", MakeType(DType::kF32, {Dim::Static(4)})).value();
  ASSERT_TRUE(
      g.AddRegion("add", {y, z}, {{"w", MakeType(DType::kF32, {Dim::Static(4)}), {}}}).ok());
  ASSERT_TRUE(g.AddOutput(y).ok());
  absl::StatusOr<proto::Graph> message = GraphToProto(g);
  ASSERT_TRUE(message.ok()) << message.status();
  ASSERT_EQ(message->declarations_size(), 2);
  EXPECT_EQ(message->declarations(1).name(), "z");
  EXPECT_THAT(message->regions(1).operands(), ::testing::ElementsAre(2, 1));
  EXPECT_THAT(message->outputs(), ::testing::ElementsAre(2));
  absl::StatusOr<Graph> back = GraphFromProto(*message);
  ASSERT_TRUE(back.ok()) << back.status();
  testing::ExpectSameGraph(g, *back);
}

TEST(SerializationTest, ToProtoRejectsDanglingIds) {
  Graph g = MustParse("graph @g {\n  input %x: f32[4]\n  %y: f32[4] = silu(%x)\n}\n");
  g.mutable_regions()[0].operands[0] = 42;
  EXPECT_EQ(GraphToProto(g).status().message(),
            "region #0 operand refers to value id 42, which is not defined");
}

struct MalformedCase {
  const char* name;
  std::function<void(proto::Graph&)> corrupt;
  const char* message;
};

TEST(SerializationTest, FromProtoRejectsMalformedMessages) {
  // Golden value ids: 0 tokens, 1 positions, 2 embed, ..., 15 v_cache.0, 16 %x (region 0).
  const MalformedCase cases[] = {
      {"graph name", [](proto::Graph& m) { m.set_name("a b"); },
       "name: name 'a b' is not of the form [A-Za-z0-9_.]+"},
      {"dtype unset",
       [](proto::Graph& m) {
         m.mutable_declarations(0)->mutable_type()->set_dtype(proto::DTYPE_UNSPECIFIED);
       },
       "declarations[0].type: dtype 0 is unspecified or unknown"},
      {"dtype unknown",
       [](proto::Graph& m) {
         m.mutable_declarations(0)->mutable_type()->set_dtype(static_cast<proto::DType>(77));
       },
       "declarations[0].type: dtype 77 is unspecified or unknown"},
      {"dim unset",
       [](proto::Graph& m) { m.mutable_declarations(0)->mutable_type()->mutable_dims(1)->Clear(); },
       "declarations[0].type.dims[1]: neither extent nor symbol is set"},
      {"negative extent",
       [](proto::Graph& m) {
         m.mutable_declarations(2)->mutable_type()->mutable_dims(0)->set_extent(-5);
       },
       "declarations[2].type.dims[0]: extent is negative"},
      {"bad symbol",
       [](proto::Graph& m) {
         m.mutable_declarations(0)->mutable_type()->mutable_dims(0)->set_symbol("1B");
       },
       "declarations[0].type.dims[0]: symbol '1B' is not an identifier"},
      {"declaration kind",
       [](proto::Graph& m) {
         m.mutable_declarations(1)->set_kind(proto::Declaration::KIND_UNSPECIFIED);
       },
       "declarations[1]: kind 0 is unspecified or unknown"},
      {"duplicate name", [](proto::Graph& m) { m.mutable_declarations(1)->set_name("tokens"); },
       "declarations[1]: value '%tokens' is defined twice"},
      {"bad value name", [](proto::Graph& m) { m.mutable_declarations(1)->set_name("%p"); },
       "declarations[1].name: name '%p' is not of the form [A-Za-z0-9_.]+"},
      {"checkpoint on input",
       [](proto::Graph& m) { m.mutable_declarations(0)->add_checkpoint_tensors("t"); },
       "declarations[0]: checkpoint_tensors is set on a declaration that is not a weight"},
      {"weight without tensor",
       [](proto::Graph& m) { m.mutable_declarations(2)->clear_checkpoint_tensors(); },
       "declarations[2]: weight '%embed' names no checkpoint tensor"},
      {"empty packed part",
       [](proto::Graph& m) { m.mutable_declarations(2)->add_checkpoint_tensors(""); },
       "declarations[2]: weight '%embed' names an empty checkpoint tensor (part 1)"},
      {"bad kind", [](proto::Graph& m) { m.mutable_regions(0)->set_kind(""); },
       "regions[0].kind: '' is not an identifier"},
      {"operand out of range", [](proto::Graph& m) { m.mutable_regions(0)->set_operands(1, 9999); },
       "regions[0].operands[1]: value id 9999 is not defined before this region"},
      {"forward reference", [](proto::Graph& m) { m.mutable_regions(0)->set_operands(0, 16); },
       "regions[0].operands[0]: value id 16 is not defined before this region"},
      {"negative operand", [](proto::Graph& m) { m.mutable_regions(0)->set_operands(0, -1); },
       "regions[0].operands[0]: value id -1 is not defined before this region"},
      {"result name",
       [](proto::Graph& m) { m.mutable_regions(0)->mutable_results(0)->set_name(""); },
       "regions[0].results[0].name: name '' is not of the form [A-Za-z0-9_.]+"},
      {"duplicate result",
       [](proto::Graph& m) { m.mutable_regions(1)->mutable_results(0)->set_name("x"); },
       "regions[1]: result '%x' of region 'rms_norm' is empty or defined twice"},
      {"alias operand",
       [](proto::Graph& m) {
         m.mutable_regions(5)->mutable_results(0)->mutable_alias()->set_operand(3);
       },
       "regions[5].results[0].alias: operand 3 is not an operand index"},
      {"alias without kind",
       [](proto::Graph& m) {
         m.mutable_regions(0)->mutable_results(0)->mutable_alias()->set_operand(1);
       },
       "regions[0].results[0].alias: operand is set without an alias kind"},
      {"alias kind",
       [](proto::Graph& m) {
         m.mutable_regions(0)->mutable_results(0)->mutable_alias()->set_kind(
             static_cast<proto::Alias::Kind>(9));
       },
       "regions[0].results[0].alias: kind 9 is unknown"},
      {"result dtype",
       [](proto::Graph& m) {
         m.mutable_regions(0)->mutable_results(0)->mutable_type()->clear_dtype();
       },
       "regions[0].results[0].type: dtype 0 is unspecified or unknown"},
      {"attribute unset",
       [](proto::Graph& m) { m.mutable_regions(1)->mutable_attributes(0)->clear_value(); },
       "regions[1].attributes[0]: no value is set"},
      {"attribute key",
       [](proto::Graph& m) { m.mutable_regions(1)->mutable_attributes(0)->set_key("1eps"); },
       "regions[1].attributes[0]: key '1eps' is not an identifier"},
      {"duplicate attribute",
       [](proto::Graph& m) {
         *m.mutable_regions(1)->add_attributes() = m.regions(1).attributes(0);
       },
       "regions[1].attributes[1]: key 'eps' is given twice"},
      {"phase",
       [](proto::Graph& m) { m.mutable_regions(0)->set_phase(static_cast<proto::Phase>(7)); },
       "regions[0].phase: 7 is not a phase"},
      {"fused_from entry",
       [](proto::Graph& m) {
         m.mutable_regions(2)->add_fused_from("linear");
         m.mutable_regions(2)->add_fused_from("not a kind");
       },
       "regions[2].fused_from[1]: 'not a kind' is not an identifier"},
      {"output", [](proto::Graph& m) { m.set_outputs(1, 1000); },
       "outputs[1]: value id 1000 does not exist"},
  };
  for (const MalformedCase& c : cases) {
    SCOPED_TRACE(c.name);
    proto::Graph message = GoldenProto();
    c.corrupt(message);
    absl::StatusOr<Graph> g = GraphFromProto(message);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(g.status().message(), c.message);
  }
}

TEST(SerializationTest, MutatedBytesNeverCrash) {
  const std::string bytes = GoldenProto().SerializeAsString();
  std::mt19937_64 rng(99);
  int decoded = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string edited = bytes;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % edited.size();
      if (rng() % 3 == 0) {
        edited.erase(pos, 1 + rng() % 8);
      } else {
        edited[pos] = static_cast<char>(rng());
      }
    }
    proto::Graph message;
    if (!message.ParseFromString(edited)) continue;
    absl::StatusOr<Graph> g = GraphFromProto(message);
    if (!g.ok()) continue;
    ++decoded;
    EXPECT_TRUE(GraphToProto(*g).ok());
  }
  EXPECT_GT(decoded, 100);
}

}  // namespace
}  // namespace tileplan::ir
