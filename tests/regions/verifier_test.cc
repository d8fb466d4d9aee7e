// Verifier: one negative case per rule, each checking that the message names the region
// (index, kind, first result) and the offending operand, result or attribute.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "regions/kinds.h"
#include "regions/parser.h"
#include "regions/shape_rules.h"
#include "regions/verifier.h"
#include "tests/regions/graph_testing.h"

namespace tileplan::ir {
namespace {

using ::testing::HasSubstr;
using testing::MustParse;

// A graph header with the declarations most cases use, then `body` lines.
std::string WithDecls(absl::string_view body) {
  return absl::StrCat(R"(graph @g {
  input %positions: i32[B,T]
  input %x: bf16[B,T,64]
  weight %w: bf16[32,64] = "w"
  state %cache: bf16[B,2,Smax,16]
  input %k: bf16[B,T,2,16]
)",
                      body, "}\n");
}

std::string VerifyError(const Graph& g) {
  absl::Status s = Verify(g);
  EXPECT_FALSE(s.ok()) << "expected a verifier error";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

std::string VerifyError(absl::string_view body) { return VerifyError(MustParse(WithDecls(body))); }

TEST(VerifierTest, AcceptsWellFormedGraph) {
  EXPECT_TRUE(Verify(MustParse(testing::ReadTestData("tiny_llama.tpir"))).ok());
  EXPECT_TRUE(Verify(MustParse(WithDecls("  %y: bf16[B,T,32] = linear(%x, %w)\n"))).ok());
}

TEST(VerifierTest, OperandTypeNamesRegionOperandAndExpectation) {
  Graph g = MustParse(R"(graph @g {
  input %x: bf16[B,T,64]
  weight %w: bf16[64,32] = "w"
  %l0.q: bf16[B,T,64] = linear(%x, %w)
}
)");
  EXPECT_EQ(VerifyError(g),
            "region #0 'linear' (%l0.q): operand 1 (%w) has type bf16[64,32], expected [N,K] "
            "with K = 64");
}

TEST(VerifierTest, UnknownKind) {
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,64] = frobnicate(%x)\n"),
            "region #0 'frobnicate' (%y): unknown region kind 'frobnicate'");
}

TEST(VerifierTest, OperandCount) {
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,32] = linear(%x)\n"),
            "region #0 'linear' (%y): expects 2 to 3 operands (x, w[, bias]), got 1");
  EXPECT_THAT(VerifyError("  %y: bf16[B,T,64] = silu(%x, %x)\n"),
              HasSubstr("region #0 'silu' (%y): expects 1 operands (x), got 2"));
}

TEST(VerifierTest, UnknownAttribute) {
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,64] = silu(%x) {alpha = 1.0}\n"),
            "region #0 'silu' (%y): unknown attribute 'alpha' (silu takes no attributes)");
}

TEST(VerifierTest, MissingAttribute) {
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = attention(%k, %cache, %cache, %positions) "
                        "{scale = 0.25}\n"),
            "region #0 'attention' (%y): missing required attribute 'sliding_window' (int)");
}

TEST(VerifierTest, AttributeType) {
  Graph g = MustParse(R"(graph @g {
  input %x: bf16[B,T,64]
  weight %n: bf16[64] = "n"
  %y: bf16[B,T,64] = rms_norm(%x, %n) {eps = 1}
}
)");
  EXPECT_EQ(VerifyError(g),
            "region #0 'rms_norm' (%y): attribute 'eps' has type int, "
            "expected float");
}

TEST(VerifierTest, AttributeValue) {
  EXPECT_EQ(VerifyError("  %a: bf16[B,T,30] view(%x), %b: bf16[B,T,30] view(%x) = split(%x) "
                        "{sizes = [30, 30]}\n"),
            "region #0 'split' (%a): attribute 'sizes' is [30, 30], expected positive sizes "
            "summing to N = 64");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = attention(%k, %cache, %cache, %positions) "
                        "{scale = 0.25, sliding_window = -1}\n"),
            "region #0 'attention' (%y): attribute 'sliding_window' is -1, expected >= 0 "
            "(0 = no window)");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = rope(%k, %positions) {rope_type = \"ntk\", "
                        "theta = 10000.0}\n"),
            "region #0 'rope' (%y): attribute 'rope_type' is \"ntk\", expected \"default\", "
            "\"llama3\" or \"yarn\"");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = rope(%k, %positions) {factor = 8.0, "
                        "rope_type = \"llama3\", theta = 10000.0}\n"),
            "region #0 'rope' (%y): missing attribute 'high_freq_factor', required by "
            "rope_type \"llama3\"");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = rope(%k, %positions) {factor = 8.0, "
                        "rope_type = \"default\", theta = 10000.0}\n"),
            "region #0 'rope' (%y): attribute 'factor' does not apply to rope_type \"default\"");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = rope(%k, %positions) {attention_factor = 1.0, "
                        "beta_fast = 32.0, beta_slow = 1.0, factor = 40.0, "
                        "high_freq_factor = 4.0, original_max_position_embeddings = 4096, "
                        "rope_type = \"yarn\", theta = 10000.0, truncate = true}\n"),
            "region #0 'rope' (%y): attribute 'high_freq_factor' does not apply to rope_type "
            "\"yarn\"");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = rope(%k, %positions) {attention_factor = 1.0, "
                        "beta_fast = 32.0, beta_slow = 1.0, factor = 0.5, "
                        "original_max_position_embeddings = 4096, rope_type = \"yarn\", "
                        "theta = 10000.0, truncate = true}\n"),
            "region #0 'rope' (%y): attribute 'factor' is 0.5, expected a finite float >= 1");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = rope(%k, %positions) {rope_type = \"default\", "
                        "theta = inf}\n"),
            "region #0 'rope' (%y): attribute 'theta' is inf, expected a finite float > 0");
}

TEST(VerifierTest, DeclaredResultType) {
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,64] = linear(%x, %w)\n"),
            "region #0 'linear' (%y): result 0 (%y) has type bf16[B,T,64], expected "
            "bf16[B,T,32]");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,8,4] view(%x) = reshape(%x)\n"),
            "region #0 'reshape' (%y): declared result type bf16[B,T,8,4] is not a reshape of "
            "operand 0 (%x) bf16[B,T,64] (same dtype, static element count and multiset of "
            "symbols)");
}

TEST(VerifierTest, DeclaredResultCount) {
  EXPECT_EQ(VerifyError("  %a: bf16[B,T,64] view(%x) = split(%x) {sizes = [32, 32]}\n"),
            "region #0 'split' (%a): declares 1 results, expected 2");
}

TEST(VerifierTest, InPlaceAliasRequired) {
  EXPECT_EQ(VerifyError("  %c: bf16[B,2,Smax,16] = kv_write(%cache, %k, %positions)\n"),
            "region #0 'kv_write' (%c): result 0 (%c) must declare inplace(%cache), declares "
            "none");
}

TEST(VerifierTest, ViewAliasRequired) {
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,4,16] = reshape(%x)\n"),
            "region #0 'reshape' (%y): result 0 (%y) must declare view(%x), declares none");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,4,16] inplace(%x) = reshape(%x)\n"),
            "region #0 'reshape' (%y): result 0 (%y) must declare view(%x), declares "
            "inplace(%x)");
}

TEST(VerifierTest, OtherKindsMayNotAlias) {
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,64] view(%x) = silu(%x)\n"),
            "region #0 'silu' (%y): result 0 (%y) must declare no aliasing, declares view(%x)");
}

TEST(VerifierTest, TwoInPlaceWritersOfOneValue) {
  const std::string message =
      VerifyError(R"(  %c1: bf16[B,2,Smax,16] inplace(%cache) = kv_write(%cache, %k, %positions)
  %c2: bf16[B,2,Smax,16] inplace(%cache) = kv_write(%cache, %k, %positions)
)");
  EXPECT_EQ(message,
            "region #1 'kv_write' (%c2): operand 0 (%cache) is updated in place a second time "
            "after region #0 'kv_write' updated its storage in place (new version %c1); a "
            "value version may be updated in place once and not read afterwards");
}

TEST(VerifierTest, ReadAfterInPlaceUpdate) {
  EXPECT_THAT(
      VerifyError(R"(  %c1: bf16[B,2,Smax,16] inplace(%cache) = kv_write(%cache, %k, %positions)
  %y: bf16[B,T,2,16] = attention(%k, %cache, %c1, %positions) {scale = 1.0, sliding_window = 0}
)"),
      HasSubstr("region #1 'attention' (%y): operand 1 (%cache) is read after region "
                "#0 'kv_write' updated its storage in place (new version %c1)"));
  // A view of the updated value is stale too.
  EXPECT_THAT(VerifyError(R"(  %v: bf16[B,2,Smax,2,8] view(%cache) = reshape(%cache)
  %c1: bf16[B,2,Smax,16] inplace(%cache) = kv_write(%cache, %k, %positions)
  %y: bf16[B,2,Smax,2,8] = silu(%v)
)"),
              HasSubstr("region #2 'silu' (%y): operand 0 (%v) is read after region #1 "
                        "'kv_write' updated its storage in place (new version %c1)"));
}

TEST(VerifierTest, InPlaceUpdateOfWeightOrView) {
  Graph weight = MustParse(R"(graph @g {
  input %positions: i32[2,3]
  weight %cache: bf16[2,2,8,16] = "c"
  input %k: bf16[2,3,2,16]
  %c: bf16[2,2,8,16] inplace(%cache) = kv_write(%cache, %k, %positions)
}
)");
  EXPECT_EQ(VerifyError(weight),
            "region #0 'kv_write' (%c): result 0 (%c) updates weight "
            "%cache in place; weights are read-only");
  EXPECT_EQ(VerifyError(R"(  %v: bf16[B,2,Smax,16] view(%cache) = reshape(%cache)
  %c: bf16[B,2,Smax,16] inplace(%v) = kv_write(%v, %k, %positions)
)"),
            "region #1 'kv_write' (%c): result 0 (%c) updates %v in place, but it is a "
            "read-only view");
}

TEST(VerifierTest, AliasedOperandListedTwice) {
  Graph g = MustParse(R"(graph @g {
  input %p: i32[2,2]
  state %c: f32[2,2,2,2]
  %u: f32[2,2,2,2] inplace(%c) = kv_write(%c, %c, %p)
}
)");
  EXPECT_EQ(VerifyError(g),
            "region #0 'kv_write' (%u): result 0 (%u) aliases %c, which "
            "appears more than once among the operands");
}

TEST(VerifierTest, UseBeforeDefinition) {
  Graph g = MustParse(WithDecls(R"(  %a: bf16[B,T,64] = silu(%x)
  %b: bf16[B,T,64] = silu(%a)
)"));
  std::swap(g.mutable_regions()[0], g.mutable_regions()[1]);
  EXPECT_EQ(VerifyError(g), "value %a is a region result but no region lists it as a result");
  for (ValueId id : {g.FindValue("a"), g.FindValue("b")}) {
    g.mutable_value(id).producer = 1 - g.value(id).producer;
  }
  EXPECT_EQ(VerifyError(g),
            "region #0 'silu' (%b): operand 0 (%a) is used before it is "
            "defined (by region #1)");
}

TEST(VerifierTest, OperandOutOfRange) {
  Graph g = MustParse(WithDecls("  %a: bf16[B,T,64] = silu(%x)\n"));
  g.mutable_regions()[0].operands[0] = 99;
  EXPECT_EQ(VerifyError(g),
            "region #0 'silu' (%a): operand 0 refers to value id 99, which does not exist");
}

TEST(VerifierTest, RegionStructure) {
  Graph g = MustParse(WithDecls(""));
  ASSERT_TRUE(g.AddRegion("silu", {g.FindValue("x")}, {}).ok());
  EXPECT_EQ(VerifyError(g), "region #0 'silu' (no results): has no results");

  Graph h = MustParse(WithDecls("  %a: bf16[B,T,64] = silu(%x)\n"));
  h.mutable_regions()[0].result_aliases.push_back({});
  EXPECT_EQ(VerifyError(h), "region #0 'silu' (%a): has 1 results but 2 alias entries");
  h.mutable_regions()[0].result_aliases = {{AliasKind::kNone, 0}};
  EXPECT_EQ(VerifyError(h),
            "region #0 'silu' (%a): result 0 (%a) names operand 0 without an alias kind");
  h.mutable_regions()[0].result_aliases = {{AliasKind::kView, 3}};
  EXPECT_EQ(VerifyError(h),
            "region #0 'silu' (%a): result 0 (%a) aliases operand 3, which does not exist");
}

TEST(VerifierTest, Outputs) {
  EXPECT_EQ(VerifyError("  %a: bf16[B,T,64] = silu(%x)\n  output %a\n  output %a\n"),
            "output #1 (%a) is listed twice");
  EXPECT_EQ(VerifyError("  %c1: bf16[B,2,Smax,16] inplace(%cache) = kv_write(%cache, %k, "
                        "%positions)\n  output %cache\n"),
            "output #0 (%cache) was updated in place by region #0 'kv_write'; output its new "
            "version %c1");
}

TEST(VerifierTest, WeightsBindDistinctTensorsWithStaticDims) {
  Graph dup = MustParse(R"(graph @g {
  weight %a: f32[4] = "model.norm.weight"
  weight %b: f32[4] = "model.norm.weight"
}
)");
  EXPECT_EQ(VerifyError(dup),
            "weight %b binds checkpoint tensor \"model.norm.weight\", "
            "already bound by weight %a");
  Graph symbolic = MustParse(R"(graph @g {
  weight %a: f32[B,4] = "a"
}
)");
  EXPECT_EQ(VerifyError(symbolic),
            "weight %a has type f32[B,4] with symbol B; weight dims must be static");
}

TEST(VerifierTest, NamesAndTypesAreWellFormed) {
  Graph g = MustParse(WithDecls(""));
  g.set_name("my graph");
  EXPECT_EQ(VerifyError(g), "graph name 'my graph' is not of the form [A-Za-z0-9_.]+");
  g.set_name("g");
  g.mutable_value(g.FindValue("x")).type.dims[0] = Dim::Symbol("2B");
  EXPECT_EQ(VerifyError(g),
            "value %x has a malformed type: dim 0 symbol '2B' is not an identifier");
  g.mutable_value(g.FindValue("x")).type.dims[0] = Dim::Static(-4);
  EXPECT_EQ(VerifyError(g), "value %x has a malformed type: dim 0 has negative extent -4");
  g.mutable_value(g.FindValue("x")).type.dims[0] = Dim::Symbol("B");
  g.mutable_value(g.FindValue("x")).producer = 0;
  EXPECT_EQ(VerifyError(g), "value %x is a declaration but names producer region #0");
}

TEST(VerifierTest, KindSpecificShapeRules) {
  Graph gqa = MustParse(R"(graph @g {
  input %p: i32[B,T]
  input %q: bf16[B,T,4,16]
  state %c: bf16[B,3,Smax,16]
  %y: bf16[B,T,4,16] = attention(%q, %c, %c, %p) {scale = 1.0, sliding_window = 0}
}
)");
  EXPECT_EQ(VerifyError(gqa),
            "region #0 'attention' (%y): operand 1 (%c) has type "
            "bf16[B,3,Smax,16], expected [B,Hkv,Smax,D] with Hkv dividing "
            "Hq = 4");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,64] = argmax(%x)\n"),
            "region #0 'argmax' (%y): operand 0 (%x) has type bf16[B,T,64], expected "
            "f32[B,T,V]");
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,2,16] = rope(%k, %x) {rope_type = \"default\", "
                        "theta = 1.0}\n"),
            "region #0 'rope' (%y): operand 1 (%x) has type bf16[B,T,64], expected i32[B,T]");
}

TEST(VerifierTest, ExtraKindIsOneMoreRegistryEntry) {
  KindRegistry registry;
  ASSERT_TRUE(RegisterAllKinds(registry).ok());
  ASSERT_TRUE(
      registry
          .Register({.name = "double_silu",
                     .operands = {"x"},
                     .infer = [](const KindArgs& a) -> absl::StatusOr<std::vector<InferredResult>> {
                       if (!shape::IsFloat(a.operands[0].dtype)) {
                         return a.OperandError(0, "a floating-point tensor");
                       }
                       return std::vector<InferredResult>{{a.operands[0], {}}};
                     }})
          .ok());
  Graph g = MustParse(WithDecls("  %y: bf16[B,T,64] = double_silu(%x)\n"));
  EXPECT_TRUE(Verify(g, registry).ok());
  EXPECT_EQ(VerifyError(g), "region #0 'double_silu' (%y): unknown region kind 'double_silu'");
}

TEST(VerifierTest, PackedWeightsBindDistinctNonEmptyTensors) {
  EXPECT_TRUE(Verify(MustParse(R"(graph @g {
  weight %qkv: bf16[8,4] = concat("q", "k", "v")
  weight %n: bf16[4] = "n"
}
)"))
                  .ok());
  Graph across = MustParse(R"(graph @g {
  weight %k: bf16[2,4] = "k"
  weight %qkv: bf16[8,4] = concat("q", "k", "v")
}
)");
  EXPECT_EQ(VerifyError(across),
            "weight %qkv binds checkpoint tensor \"k\", already bound by weight %k");
  Graph within = MustParse(R"(graph @g {
  weight %qkv: bf16[8,4] = concat("q", "k", "q")
}
)");
  EXPECT_EQ(VerifyError(within), "weight %qkv binds checkpoint tensor \"q\" twice");
  Graph empty = MustParse("graph @g {\n  weight %w: bf16[8,4] = concat(\"q\", \"k\")\n}\n");
  empty.mutable_value(empty.FindValue("w")).checkpoint_tensors[1].clear();
  EXPECT_EQ(VerifyError(empty), "weight %w binds an empty checkpoint tensor name (part 1)");
  empty.mutable_value(empty.FindValue("w")).checkpoint_tensors.clear();
  EXPECT_EQ(VerifyError(empty), "weight %w binds no checkpoint tensor");
  Graph scalar = MustParse("graph @g {\n  weight %s: f32[] = concat(\"a\", \"b\")\n}\n");
  EXPECT_EQ(VerifyError(scalar),
            "weight %s has type f32[] but packs several checkpoint tensors; a packed weight "
            "needs a dim 0");
  Graph input = MustParse(WithDecls(""));
  input.mutable_value(input.FindValue("x")).checkpoint_tensors = {"t"};
  EXPECT_EQ(VerifyError(input), "value %x is not a weight but binds checkpoint tensor \"t\"");
}

TEST(VerifierTest, FusedFromNamesPrimitiveKinds) {
  EXPECT_TRUE(
      Verify(MustParse(WithDecls("  %y: bf16[B,T,32] = linear(%x, %w) fused(linear, add)\n")))
          .ok());
  EXPECT_EQ(VerifyError("  %y: bf16[B,T,32] = linear(%x, %w) fused(linear, gelu)\n"),
            "region #0 'linear' (%y): fused_from entry 1 'gelu' is not a registered region "
            "kind");
  Graph g =
      MustParse(WithDecls("  %l: bf16[B,T,32] = linear(%x, %w)\n"
                          "  %y: bf16[B,T,16] = swiglu(%l) fused(linear_swiglu)\n"));
  EXPECT_EQ(VerifyError(g),
            "region #1 'swiglu' (%y): fused_from entry 0 'linear_swiglu' is not a primitive "
            "kind");
}

// The declarations of a decode layer with QK-norm: x, packed qkv, norms, caches.
std::string FusedDecls(absl::string_view body) {
  return absl::StrCat(R"(graph @g {
  input %positions: i32[B,T]
  input %x: bf16[B,T,64]
  input %qkv: bf16[B,T,128]
  weight %w: bf16[64,64] = "w"
  weight %w_gate_up: bf16[96,64] = concat("gate", "up")
  weight %norm: bf16[64] = "norm"
  weight %q_norm: bf16[16] = "q_norm"
  weight %k_norm: bf16[16] = "k_norm"
  state %k_cache: bf16[B,2,Smax,16]
  state %v_cache: bf16[B,2,Smax,16]
)",
                      body, "}\n");
}

TEST(VerifierTest, FusedKindsVerifyLikeAnyKind) {
  EXPECT_TRUE(
      Verify(
          MustParse(FusedDecls(
              R"(  %a: bf16[B,T,48] = linear_swiglu(%x, %w_gate_up) fused(linear, split, silu, mul)
  %r: bf16[B,T,64] = linear_residual(%x, %w, %x) fused(linear, add)
  %s: bf16[B,T,64], %n: bf16[B,T,64] = add_rms_norm(%r, %x, %norm) {eps = 1e-06} fused(add, rms_norm)
  %g: bf16[B,T,32] = swiglu(%n)
  %q: bf16[B,T,4,16], %kc: bf16[B,2,Smax,16] inplace(%k_cache), %vc: bf16[B,2,Smax,16] inplace(%v_cache) = qk_norm_rope_kv_write(%qkv, %q_norm, %k_norm, %k_cache, %v_cache, %positions) {eps = 1e-06, num_heads = 4, num_kv_heads = 2, rope_type = "default", theta = 10000.0}
  %o: bf16[B,T,4,16] = attention(%q, %kc, %vc, %positions) {scale = 0.25, sliding_window = 0}
  output %kc
)")))
          .ok());
  EXPECT_EQ(
      VerifyError(MustParse(FusedDecls("  %a: bf16[B,T,64] = linear_swiglu(%x, %w_gate_up)\n"))),
      "region #0 'linear_swiglu' (%a): result 0 (%a) has type bf16[B,T,64], expected "
      "bf16[B,T,48]");
  EXPECT_EQ(
      VerifyError(MustParse(FusedDecls("  %r: bf16[B,T,64] = linear_residual(%x, %w, %qkv)\n"))),
      "region #0 'linear_residual' (%r): operand 2 (%qkv) has type bf16[B,T,128], "
      "expected bf16[B,T,64] (the type of the linear's result)");
  EXPECT_EQ(VerifyError(MustParse(
                FusedDecls("  %s: bf16[B,T,64] = add_rms_norm(%x, %x, %norm) {eps = 1e-06}\n"))),
            "region #0 'add_rms_norm' (%s): declares 1 results, expected 2");
  // The caches must be declared in place.
  EXPECT_EQ(VerifyError(MustParse(FusedDecls(
                "  %q: bf16[B,T,4,16], %kc: bf16[B,2,Smax,16] inplace(%k_cache), %vc: "
                "bf16[B,2,Smax,16] = rope_kv_write(%qkv, %k_cache, %v_cache, %positions) "
                "{num_heads = 4, num_kv_heads = 2, rope_type = \"default\", theta = 1.0}\n"))),
            "region #0 'rope_kv_write' (%q): result 2 (%vc) must declare inplace(%v_cache), "
            "declares none");
  // The updated caches are stale afterwards, like after kv_write.
  EXPECT_THAT(
      VerifyError(MustParse(FusedDecls(
          "  %q: bf16[B,T,4,16], %kc: bf16[B,2,Smax,16] inplace(%k_cache), %vc: "
          "bf16[B,2,Smax,16] inplace(%v_cache) = rope_kv_write(%qkv, %k_cache, %v_cache, "
          "%positions) {num_heads = 4, num_kv_heads = 2, rope_type = \"default\", theta = 1.0}\n"
          "  %o: bf16[B,T,4,16] = attention(%q, %kc, %v_cache, %positions) {scale = 0.25, "
          "sliding_window = 0}\n"))),
      HasSubstr("region #1 'attention' (%o): operand 2 (%v_cache) is read after region #0 "
                "'rope_kv_write' updated its storage in place (new version %vc)"));
}

}  // namespace
}  // namespace tileplan::ir
