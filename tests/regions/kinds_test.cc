// Kind registry and the typing rule of every primitive kind.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "regions/kinds.h"
#include "regions/shape_rules.h"
#include "tests/testing/docs.h"

namespace tileplan::ir {
namespace {

using ::testing::HasSubstr;

// "bf16[B,T,64]" -> TensorType (test input is trusted).
TensorType T(absl::string_view text) {
  const size_t open = text.find('[');
  TensorType type;
  type.dtype = ParseDType(text.substr(0, open)).value();
  const absl::string_view dims = text.substr(open + 1, text.size() - open - 2);
  if (dims.empty()) return type;
  for (absl::string_view d : absl::StrSplit(dims, ',')) {
    int64_t extent;
    type.dims.push_back(absl::SimpleAtoi(d, &extent) ? Dim::Static(extent)
                                                     : Dim::Symbol(std::string(d)));
  }
  return type;
}

absl::StatusOr<std::vector<InferredResult>> Infer(absl::string_view kind,
                                                  std::vector<std::string> operand_types,
                                                  const Attributes& attrs = {},
                                                  std::vector<std::string> declared = {}) {
  const KindSpec* spec = FindKind(kind);
  if (spec == nullptr) return absl::NotFoundError(absl::StrCat("no kind ", kind));
  std::vector<TensorType> operands, results;
  for (const std::string& t : operand_types) operands.push_back(T(t));
  for (const std::string& t : declared) results.push_back(T(t));
  const std::vector<std::string> names;
  return InferResults(*spec, KindArgs{operands, names, attrs, results});
}

// The single result's type, or the error message.
std::string InferOne(absl::string_view kind, std::vector<std::string> operand_types,
                     const Attributes& attrs = {}, std::vector<std::string> declared = {}) {
  auto r = Infer(kind, std::move(operand_types), attrs, std::move(declared));
  if (!r.ok()) return std::string(r.status().message());
  if (r->size() != 1) return absl::StrCat(r->size(), " results");
  return (*r)[0].type.ToString();
}

Attributes Attrs(std::vector<std::pair<std::string, AttrValue>> entries) {
  Attributes attrs;
  for (auto& [k, v] : entries) attrs.Set(k, v);
  return attrs;
}

TEST(KindsTest, RegistryHoldsThePrimitiveAndFusedKindsSorted) {
  EXPECT_EQ(PrimitiveKindNames(),
            (std::vector<std::string>{
                "add",           "all_gather",    "all_reduce", "argmax",         "attention",
                "embedding",     "expert_linear", "kv_write",   "linear",         "lm_head",
                "mla_attention", "moe_combine",   "moe_router", "moe_topk",       "mul",
                "reshape",       "rms_norm",      "rope",       "sharded_argmax", "silu",
                "split"}));
  EXPECT_EQ(KindNames(), (std::vector<std::string>{"add",
                                                   "add_rms_norm",
                                                   "all_gather",
                                                   "all_reduce",
                                                   "argmax",
                                                   "attention",
                                                   "embedding",
                                                   "expert_linear",
                                                   "kv_write",
                                                   "linear",
                                                   "linear_residual",
                                                   "linear_swiglu",
                                                   "lm_head",
                                                   "mla_attention",
                                                   "mla_kv_write",
                                                   "mla_kv_write_attention",
                                                   "moe",
                                                   "moe_combine",
                                                   "moe_router",
                                                   "moe_topk",
                                                   "mul",
                                                   "qk_norm_rope_kv_write",
                                                   "qk_norm_rope_kv_write_attention",
                                                   "reshape",
                                                   "rms_norm",
                                                   "rms_norm_linear",
                                                   "rms_norm_linear_swiglu",
                                                   "rms_norm_moe",
                                                   "rope",
                                                   "rope_kv_write",
                                                   "rope_kv_write_attention",
                                                   "sharded_argmax",
                                                   "silu",
                                                   "split",
                                                   "swiglu"}));
  const std::vector<std::string> primitive = PrimitiveKindNames();
  for (const std::string& name : KindNames()) {
    const bool is_primitive =
        std::find(primitive.begin(), primitive.end(), name) != primitive.end();
    EXPECT_EQ(FindKind(name)->fused, !is_primitive) << name;
  }
  EXPECT_EQ(FindKind("fused_everything"), nullptr);
  ASSERT_NE(FindKind("linear"), nullptr);
  EXPECT_EQ(FindKind("linear")->OperandSignature(), "x, w[, bias]");
  EXPECT_EQ(FindKind("linear")->min_operands(), 2);
  EXPECT_EQ(FindKind("linear")->max_operands(), 3);
}

// docs/ir.md's kind tables are the contract: every kind they list is registered and
// every registered kind is listed.
TEST(KindsTest, DocumentedKindsMatchRegistry) {
  std::vector<std::string> documented =
      tileplan::testing::DocumentedNames("docs/ir.md", "## Region kinds", "| `");
  std::sort(documented.begin(), documented.end());
  EXPECT_EQ(documented, KindNames());
}

TEST(KindsTest, RegistryRejectsMalformedSpecs) {
  KindRegistry registry;
  ASSERT_TRUE(RegisterAllKinds(registry).ok());
  EXPECT_EQ(registry.Names(), KindNames());
  auto infer = [](const KindArgs& a) -> absl::StatusOr<std::vector<InferredResult>> {
    return std::vector<InferredResult>{{a.operands[0], {}}};
  };
  EXPECT_EQ(registry.Register({.name = "silu", .operands = {"x"}, .infer = infer}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register({.name = "bad name", .operands = {"x"}, .infer = infer}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register({.name = "no_infer", .operands = {"x"}, .infer = nullptr}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry
                .Register({.name = "dup_keys",
                           .operands = {"x"},
                           .attrs = {{"a", AttrType::kInt}, {"a", AttrType::kFloat}},
                           .infer = infer})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      registry.Register({.name = "opt", .operands = {"x"}, .optional_operands = 2, .infer = infer})
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.Register({.name = "fused_new", .operands = {"x"}, .infer = infer}).ok());
  EXPECT_NE(registry.Find("fused_new"), nullptr);
  EXPECT_EQ(FindKind("fused_new"), nullptr);
}

TEST(KindsTest, DimsMatchWhenStaticEqualOrSameSymbol) {
  EXPECT_TRUE(shape::DimsMatch(Dim::Static(4), Dim::Static(4)));
  EXPECT_FALSE(shape::DimsMatch(Dim::Static(4), Dim::Static(5)));
  EXPECT_TRUE(shape::DimsMatch(Dim::Symbol("B"), Dim::Symbol("B")));
  EXPECT_FALSE(shape::DimsMatch(Dim::Symbol("B"), Dim::Symbol("T")));
  EXPECT_FALSE(shape::DimsMatch(Dim::Symbol("B"), Dim::Static(4)));
}

TEST(KindsTest, AttributeSchema) {
  const KindSpec& rope = *FindKind("rope");
  EXPECT_TRUE(
      CheckAttributes(rope, Attrs({{"theta", 1.0}, {"rope_type", std::string("default")}})).ok());
  EXPECT_EQ(CheckAttributes(rope, Attrs({{"theta", 1.0}})).message(),
            "missing required attribute 'rope_type' (string)");
  EXPECT_EQ(
      CheckAttributes(rope, Attrs({{"theta", int64_t{1}}, {"rope_type", std::string("default")}}))
          .message(),
      "attribute 'theta' has type int, expected float");
  EXPECT_THAT(
      CheckAttributes(
          rope, Attrs({{"theta", 1.0}, {"rope_type", std::string("default")}, {"scaling", 2.0}}))
          .message(),
      HasSubstr("unknown attribute 'scaling' (rope takes theta, rope_type, factor"));
}

TEST(KindsTest, Embedding) {
  EXPECT_EQ(InferOne("embedding", {"i32[B,T]", "bf16[256,64]"}), "bf16[B,T,64]");
  EXPECT_EQ(InferOne("embedding", {"f32[B,T]", "bf16[256,64]"}),
            "operand 0 has type f32[B,T], expected i32[B,T]");
}

TEST(KindsTest, RmsNorm) {
  const Attributes eps = Attrs({{"eps", 1e-6}});
  EXPECT_EQ(InferOne("rms_norm", {"bf16[B,T,64]", "f32[64]"}, eps), "bf16[B,T,64]");
  EXPECT_EQ(InferOne("rms_norm", {"bf16[B,T,64]", "f32[32]"}, eps),
            "operand 1 has type f32[32], expected [N] with N = 64");
  EXPECT_EQ(InferOne("rms_norm", {"bf16[B,T,64]", "f32[64]"}, Attrs({{"eps", -1.0}})),
            "attribute 'eps' is -1.0, expected a finite float >= 0");
}

TEST(KindsTest, Linear) {
  EXPECT_EQ(InferOne("linear", {"bf16[B,T,64]", "bf16[32,64]"}), "bf16[B,T,32]");
  EXPECT_EQ(InferOne("linear", {"f32[7]", "bf16[32,7]", "bf16[32]"}), "f32[32]");
  EXPECT_EQ(InferOne("linear", {"bf16[B,T,64]", "bf16[32,64]", "f32[32]"}),
            "operand 2 has type f32[32], expected bf16[N] (the dtype of operand 1)");
  EXPECT_EQ(InferOne("linear", {"bf16[B,T,64]", "bf16[32,64]", "bf16[16]"}),
            "operand 2 has type bf16[16], expected [N] with N = 32");
  EXPECT_EQ(InferOne("linear", {"bf16[B,T,K]", "bf16[32,64]"}),
            "operand 1 has type bf16[32,64], expected [N,K] with K = K");
  EXPECT_EQ(InferOne("linear", {"bf16[]", "bf16[32,64]"}),
            "operand 0 has type bf16[], expected a floating-point tensor [...,K]");
}

TEST(KindsTest, Reshape) {
  auto r = Infer("reshape", {"bf16[B,T,64]"}, {}, {"bf16[T,4,B,16]"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].alias, (ResultAlias{AliasKind::kView, 0}));
  EXPECT_EQ(InferOne("reshape", {"bf16[B,T,64]"}, {}, {"bf16[B,64]"}),
            "declared result type bf16[B,64] is not a reshape of operand 0 bf16[B,T,64] (same "
            "dtype, static element count and multiset of symbols)");
  EXPECT_EQ(InferOne("reshape", {"bf16[4]"}, {}, {"f16[4]"}).substr(0, 36),
            "declared result type f16[4] is not a");
  EXPECT_EQ(InferOne("reshape", {"bf16[4]"}), "declares 0 results, expected 1");
  EXPECT_EQ(InferOne("reshape", {"bf16[4611686018427387904,4]"}, {}, {"bf16[4]"}),
            "the static element count of bf16[4611686018427387904,4] overflows int64");
}

TEST(KindsTest, Split) {
  auto r = Infer("split", {"bf16[B,T,96]"}, Attrs({{"sizes", std::vector<int64_t>{64, 16, 16}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].type.ToString(), "bf16[B,T,64]");
  EXPECT_EQ((*r)[2].type.ToString(), "bf16[B,T,16]");
  for (const InferredResult& x : *r) EXPECT_EQ(x.alias, (ResultAlias{AliasKind::kView, 0}));
  EXPECT_EQ(InferOne("split", {"bf16[B,T,N]"}, Attrs({{"sizes", std::vector<int64_t>{1}}})),
            "operand 0 has type bf16[B,T,N], expected [...,N] with N static");
  EXPECT_EQ(InferOne("split", {"bf16[8]"}, Attrs({{"sizes", std::vector<int64_t>{}}})),
            "attribute 'sizes' is ints[], expected at least one size");
  EXPECT_EQ(InferOne("split", {"bf16[8]"}, Attrs({{"sizes", std::vector<int64_t>{9, -1}}})),
            "attribute 'sizes' is [9, -1], expected positive sizes summing to N = 8");
}

TEST(KindsTest, Rope) {
  const Attributes plain = Attrs({{"theta", 1e4}, {"rope_type", std::string("default")}});
  EXPECT_EQ(InferOne("rope", {"bf16[B,T,4,16]", "i32[B,T]"}, plain), "bf16[B,T,4,16]");
  EXPECT_EQ(InferOne("rope", {"bf16[B,T,4,15]", "i32[B,T]"}, plain),
            "operand 0 has type bf16[B,T,4,15], expected a floating-point tensor [B,T,H,D] with "
            "D static, even and > 0");
  EXPECT_EQ(InferOne("rope", {"bf16[B,T,4,16]", "i32[B,S]"}, plain),
            "operand 1 has type i32[B,S], expected i32[B,T] with B = B, T = T");
  Attributes llama3 = Attrs({{"theta", 5e5},
                             {"rope_type", std::string("llama3")},
                             {"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", int64_t{8192}}});
  EXPECT_EQ(InferOne("rope", {"bf16[B,T,4,16]", "i32[B,T]"}, llama3), "bf16[B,T,4,16]");
  llama3.Set("high_freq_factor", 1.0);
  EXPECT_EQ(InferOne("rope", {"bf16[B,T,4,16]", "i32[B,T]"}, llama3),
            "attribute 'high_freq_factor' is 1.0, expected a finite float > low_freq_factor = "
            "1.0");
  llama3.Set("high_freq_factor", 4.0);
  llama3.Set("original_max_position_embeddings", int64_t{0});
  EXPECT_EQ(InferOne("rope", {"bf16[B,T,4,16]", "i32[B,T]"}, llama3),
            "attribute 'original_max_position_embeddings' is 0, expected > 0");
}

TEST(KindsTest, KvWrite) {
  auto r = Infer("kv_write", {"bf16[B,2,Smax,16]", "bf16[B,T,2,16]", "i32[B,T]"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].type.ToString(), "bf16[B,2,Smax,16]");
  EXPECT_EQ((*r)[0].alias, (ResultAlias{AliasKind::kInPlace, 0}));
  EXPECT_EQ(InferOne("kv_write", {"bf16[B,2,Smax,16]", "bf16[B,T,4,16]", "i32[B,T]"}),
            "operand 1 has type bf16[B,T,4,16], expected [B,T,Hkv,D] with B = B, Hkv = 2, D = 16");
  EXPECT_EQ(InferOne("kv_write", {"bf16[B,2,Smax,16]", "f32[B,T,2,16]", "i32[B,T]"}),
            "operand 1 has type f32[B,T,2,16], expected bf16[B,T,Hkv,D] (the dtype of operand "
            "0)");
}

TEST(KindsTest, Attention) {
  const Attributes attrs = Attrs({{"scale", 0.25}, {"sliding_window", int64_t{0}}});
  EXPECT_EQ(
      InferOne("attention",
               {"bf16[B,T,8,16]", "bf16[B,2,Smax,16]", "bf16[B,2,Smax,16]", "i32[B,T]"}, attrs),
      "bf16[B,T,8,16]");
  EXPECT_EQ(
      InferOne("attention",
               {"bf16[B,T,H,16]", "bf16[B,H,Smax,16]", "bf16[B,H,Smax,16]", "i32[B,T]"}, attrs),
      "bf16[B,T,H,16]");
  EXPECT_EQ(InferOne("attention",
                     {"bf16[B,T,8,16]", "bf16[B,2,Smax,16]", "bf16[B,2,S,16]", "i32[B,T]"}, attrs),
            "operand 2 has type bf16[B,2,S,16], expected bf16[B,2,Smax,16] (the type of operand "
            "1)");
  EXPECT_EQ(InferOne("attention",
                     {"bf16[B,T,8,16]", "bf16[B,2,Smax,8]", "bf16[B,2,Smax,8]", "i32[B,T]"}, attrs),
            "operand 1 has type bf16[B,2,Smax,8], expected [B,Hkv,Smax,D] with B = B, D = 16");
  EXPECT_EQ(InferOne("attention",
                     {"bf16[B,T,8,16]", "bf16[B,2,Smax,16]", "bf16[B,2,Smax,16]", "i32[B,T]"},
                     Attrs({{"scale", std::nan("")}, {"sliding_window", int64_t{0}}})),
            "attribute 'scale' is nan, expected a finite float");
}

TEST(KindsTest, ElementwiseAndHeads) {
  EXPECT_EQ(InferOne("add", {"f16[B,T,64]", "f16[B,T,64]"}), "f16[B,T,64]");
  EXPECT_EQ(InferOne("mul", {"f32[]", "f32[]"}), "f32[]");
  EXPECT_EQ(InferOne("add", {"f16[B,T,64]", "bf16[B,T,64]"}),
            "operand 1 has type bf16[B,T,64], expected f16[B,T,64] (the type of operand 0)");
  EXPECT_EQ(InferOne("silu", {"bf16[B,T,128]"}), "bf16[B,T,128]");
  EXPECT_EQ(InferOne("silu", {"i32[4]"}),
            "operand 0 has type i32[4], expected a floating-point tensor [...]");
  EXPECT_EQ(InferOne("lm_head", {"bf16[B,T,64]", "bf16[256,64]"}), "f32[B,T,256]");
  EXPECT_EQ(InferOne("lm_head", {"bf16[B,T,64]", "bf16[256,32]"}),
            "operand 1 has type bf16[256,32], expected [V,H] with H = 64");
  EXPECT_EQ(InferOne("argmax", {"f32[B,T,256]"}), "i32[B,T]");
  EXPECT_EQ(InferOne("argmax", {"f32[B,T,0]"}),
            "operand 0 has type f32[B,T,0], expected f32[B,T,V] with V > 0");
}

TEST(KindsTest, OperandCountIsCheckedBeforeInference) {
  EXPECT_EQ(InferOne("attention", {"bf16[B,T,8,16]"}),
            "expects 4 operands (q, k_cache, v_cache, positions), got 1");
  EXPECT_EQ(InferOne("linear", {"bf16[4]", "bf16[4,4]", "bf16[4]", "bf16[4]"}),
            "expects 2 to 3 operands (x, w[, bias]), got 4");
}

// ---- Fused kinds: each accepts what its primitive regions accept and infers the same.

TEST(KindsTest, Swiglu) {
  EXPECT_EQ(InferOne("swiglu", {"bf16[B,T,256]"}), "bf16[B,T,128]");
  EXPECT_EQ(InferOne("swiglu", {"f32[2]"}), "f32[1]");
  EXPECT_EQ(InferOne("swiglu", {"bf16[B,T,7]"}),
            "operand 0 has type bf16[B,T,7], expected a floating-point tensor [...,2F] with 2F "
            "static, even and > 0");
  EXPECT_EQ(InferOne("swiglu", {"bf16[B,T,F]"}).substr(0, 40),
            "operand 0 has type bf16[B,T,F], expected");
  EXPECT_EQ(InferOne("swiglu", {"i32[4]"}),
            "operand 0 has type i32[4], expected a floating-point tensor [...,2F]");
}

TEST(KindsTest, LinearSwiglu) {
  EXPECT_EQ(InferOne("linear_swiglu", {"bf16[B,T,64]", "bf16[256,64]"}), "bf16[B,T,128]");
  EXPECT_EQ(InferOne("linear_swiglu", {"f32[B,T,64]", "bf16[256,64]", "bf16[256]"}),
            "f32[B,T,128]");
  EXPECT_EQ(InferOne("linear_swiglu", {"bf16[B,T,64]", "bf16[255,64]"}),
            "operand 1 has type bf16[255,64], expected [2F,K] with 2F static, even and > 0");
  EXPECT_EQ(InferOne("linear_swiglu", {"bf16[B,T,64]", "bf16[256,32]"}),
            "operand 1 has type bf16[256,32], expected [2F,K] with K = 64");
  EXPECT_EQ(InferOne("linear_swiglu", {"bf16[B,T,64]", "bf16[256,64]", "bf16[128]"}),
            "operand 2 has type bf16[128], expected [2F] with 2F = 256");
  EXPECT_EQ(InferOne("linear_swiglu", {"bf16[B,T,64]", "bf16[256,64]", "f32[256]"}),
            "operand 2 has type f32[256], expected bf16[2F] (the dtype of operand 1)");
}

TEST(KindsTest, LinearResidual) {
  EXPECT_EQ(InferOne("linear_residual", {"bf16[B,T,128]", "bf16[64,128]", "bf16[B,T,64]"}),
            "bf16[B,T,64]");
  EXPECT_EQ(
      InferOne("linear_residual", {"bf16[B,T,128]", "f32[64,128]", "bf16[B,T,64]", "f32[64]"}),
      "bf16[B,T,64]");
  EXPECT_EQ(InferOne("linear_residual", {"bf16[B,T,128]", "bf16[64,128]", "f32[B,T,64]"}),
            "operand 2 has type f32[B,T,64], expected bf16[B,T,64] (the type of the linear's "
            "result)");
  EXPECT_EQ(InferOne("linear_residual", {"bf16[B,T,128]", "bf16[64,128]", "bf16[B,1,64]"}),
            "operand 2 has type bf16[B,1,64], expected bf16[B,T,64] (the type of the linear's "
            "result)");
  EXPECT_EQ(
      InferOne("linear_residual", {"bf16[B,T,128]", "bf16[64,128]", "bf16[B,T,64]", "bf16[32]"}),
      "operand 3 has type bf16[32], expected [N] with N = 64");
  EXPECT_EQ(InferOne("linear_residual", {"bf16[B,T,128]", "bf16[64,128]"}),
            "expects 3 to 4 operands (x, w, residual[, bias]), got 2");
}

TEST(KindsTest, AddRmsNorm) {
  const Attributes eps = Attrs({{"eps", 1e-6}});
  auto r = Infer("add_rms_norm", {"bf16[B,T,64]", "bf16[B,T,64]", "f32[64]"}, eps);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  for (const InferredResult& x : *r) {
    EXPECT_EQ(x.type.ToString(), "bf16[B,T,64]");
    EXPECT_EQ(x.alias, ResultAlias{});
  }
  EXPECT_EQ(InferOne("add_rms_norm", {"bf16[B,T,64]", "bf16[B,T,32]", "f32[64]"}, eps),
            "operand 1 has type bf16[B,T,32], expected bf16[B,T,64] (the type of operand 0)");
  EXPECT_EQ(InferOne("add_rms_norm", {"bf16[B,T,64]", "bf16[B,T,64]", "f32[32]"}, eps),
            "operand 2 has type f32[32], expected [N] with N = 64");
  EXPECT_EQ(
      InferOne("add_rms_norm", {"bf16[B,T,64]", "bf16[B,T,64]", "f32[64]"}, Attrs({{"eps", -1.0}})),
      "attribute 'eps' is -1.0, expected a finite float >= 0");
  EXPECT_EQ(InferOne("add_rms_norm", {"bf16[B,T,64]", "bf16[B,T,64]", "f32[64]"}),
            "missing required attribute 'eps' (float)");
}

TEST(KindsTest, RmsNormLinear) {
  const Attributes eps = Attrs({{"eps", 1e-6}});
  EXPECT_EQ(InferOne("rms_norm_linear", {"bf16[B,T,64]", "f32[64]", "bf16[96,64]"}, eps),
            "bf16[B,T,96]");
  EXPECT_EQ(
      InferOne("rms_norm_linear", {"bf16[B,T,64]", "bf16[64]", "bf16[96,64]", "bf16[96]"}, eps),
      "bf16[B,T,96]");
  EXPECT_EQ(InferOne("rms_norm_linear", {"bf16[B,T,64]", "bf16[32]", "bf16[96,64]"}, eps),
            "operand 1 has type bf16[32], expected [K] with K = 64");
  EXPECT_EQ(InferOne("rms_norm_linear", {"bf16[B,T,64]", "bf16[64]", "bf16[96,32]"}, eps),
            "operand 2 has type bf16[96,32], expected [N,K] with K = 64");
  EXPECT_EQ(
      InferOne("rms_norm_linear", {"bf16[B,T,64]", "bf16[64]", "bf16[96,64]", "f32[96]"}, eps),
      "operand 3 has type f32[96], expected bf16[N] (the dtype of operand 2)");
  EXPECT_EQ(InferOne("rms_norm_linear", {"bf16[B,T,64]", "bf16[64]", "bf16[96,64]"},
                     Attrs({{"eps", -1.0}})),
            "attribute 'eps' is -1.0, expected a finite float >= 0");
  EXPECT_EQ(InferOne("rms_norm_linear", {"bf16[B,T,64]", "bf16[64]", "bf16[96,64]"}),
            "missing required attribute 'eps' (float)");
  EXPECT_EQ(InferOne("rms_norm_linear", {"bf16[B,T,64]", "bf16[96,64]"}, eps),
            "expects 3 to 4 operands (x, norm, w[, bias]), got 2");
}

TEST(KindsTest, RmsNormLinearSwiglu) {
  const Attributes eps = Attrs({{"eps", 1e-6}});
  EXPECT_EQ(InferOne("rms_norm_linear_swiglu", {"bf16[B,T,64]", "bf16[64]", "bf16[256,64]"}, eps),
            "bf16[B,T,128]");
  EXPECT_EQ(InferOne("rms_norm_linear_swiglu",
                     {"f32[B,T,64]", "f32[64]", "bf16[256,64]", "bf16[256]"}, eps),
            "f32[B,T,128]");
  EXPECT_EQ(InferOne("rms_norm_linear_swiglu", {"bf16[B,T,64]", "bf16[64]", "bf16[255,64]"}, eps),
            "operand 2 has type bf16[255,64], expected [2F,K] with 2F static, even and > 0");
  EXPECT_EQ(InferOne("rms_norm_linear_swiglu",
                     {"bf16[B,T,64]", "bf16[64]", "bf16[256,64]", "bf16[128]"}, eps),
            "operand 3 has type bf16[128], expected [2F] with 2F = 256");
  EXPECT_EQ(InferOne("rms_norm_linear_swiglu", {"bf16[B,T,64]", "i32[64]", "bf16[256,64]"}, eps),
            "operand 1 has type i32[64], expected a floating-point tensor [K]");
}

Attributes RopeKvAttrs(bool eps, int64_t hq = 4, int64_t hkv = 2) {
  Attributes attrs = Attrs({{"num_heads", hq},
                            {"num_kv_heads", hkv},
                            {"rope_type", std::string("default")},
                            {"theta", 1e6}});
  if (eps) attrs.Set("eps", 1e-6);
  return attrs;
}

// The results of qk_norm_rope_kv_write (or its _attention form) over the operands of the
// tests below: q (or the attention's output) as [B,T,4,16], the caches updated in place.
void ExpectQkNormRopeKvWriteResults(const absl::StatusOr<std::vector<InferredResult>>& r) {
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].type.ToString(), "bf16[B,T,4,16]");
  EXPECT_EQ((*r)[0].alias, ResultAlias{});
  EXPECT_EQ((*r)[1].type.ToString(), "bf16[B,2,Smax,16]");
  EXPECT_EQ((*r)[1].alias, (ResultAlias{AliasKind::kInPlace, 3}));
  EXPECT_EQ((*r)[2].alias, (ResultAlias{AliasKind::kInPlace, 4}));
}

TEST(KindsTest, QkNormRopeKvWrite) {
  const std::vector<std::string> ok = {"bf16[B,T,128]",     "bf16[16]",          "f32[16]",
                                       "bf16[B,2,Smax,16]", "bf16[B,2,Smax,16]", "i32[B,T]"};
  auto r = Infer("qk_norm_rope_kv_write", ok, RopeKvAttrs(true));
  ExpectQkNormRopeKvWriteResults(r);

  auto with = [&ok](int index, std::string type) {
    std::vector<std::string> operands = ok;
    operands[static_cast<size_t>(index)] = std::move(type);
    return operands;
  };
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", with(0, "bf16[B,T,96]"), RopeKvAttrs(true)),
            "operand 0 has type bf16[B,T,96], expected [B,T,(Hq+2*Hkv)*D] with Hq = 4, Hkv = 2, "
            "D = 16");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", with(1, "bf16[8]"), RopeKvAttrs(true)),
            "operand 1 has type bf16[8], expected [D] with D = 16");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", with(3, "f32[B,2,Smax,16]"), RopeKvAttrs(true)),
            "operand 3 has type f32[B,2,Smax,16], expected bf16[B,Hkv,Smax,D] (the dtype of "
            "operand 0)");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", ok, RopeKvAttrs(true, 2, 3)),
            "operand 3 has type bf16[B,2,Smax,16], expected [B,Hkv,Smax,D] with B = B, Hkv = 3, "
            "D static, even and > 0");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", with(4, "bf16[B,2,S,16]"), RopeKvAttrs(true)),
            "operand 4 has type bf16[B,2,S,16], expected bf16[B,2,Smax,16] (the type of "
            "operand 3)");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", with(5, "i32[B,1]"), RopeKvAttrs(true)),
            "operand 5 has type i32[B,1], expected i32[B,T] with B = B, T = T");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", ok, RopeKvAttrs(true, 0)),
            "attribute 'num_heads' is 0, expected > 0");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", ok, RopeKvAttrs(false)),
            "missing required attribute 'eps' (float)");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", ok, RopeKvAttrs(true, int64_t{1} << 62, 2)),
            "(num_heads + 2 * num_kv_heads) * D with num_heads = 4611686018427387904, "
            "num_kv_heads = 2, D = 16 overflows int64");
  Attributes llama3 = RopeKvAttrs(true);
  llama3.Set("rope_type", std::string("llama3"));
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write", ok, llama3),
            "missing attribute 'factor', required by rope_type \"llama3\"");
}

TEST(KindsTest, RopeKvWrite) {
  const std::vector<std::string> ok = {"f16[2,T,64]", "f16[2,1,Smax,16]", "f16[2,1,Smax,16]",
                                       "i32[2,T]"};
  auto r = Infer("rope_kv_write", ok, RopeKvAttrs(false, 2, 1));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].type.ToString(), "f16[2,T,2,16]");
  EXPECT_EQ((*r)[1].alias, (ResultAlias{AliasKind::kInPlace, 1}));
  EXPECT_EQ((*r)[2].alias, (ResultAlias{AliasKind::kInPlace, 2}));
  EXPECT_EQ(InferOne("rope_kv_write", ok, RopeKvAttrs(true, 2, 1)),
            "unknown attribute 'eps' (rope_kv_write takes num_heads, num_kv_heads, theta, "
            "rope_type, factor, low_freq_factor, high_freq_factor, "
            "original_max_position_embeddings, beta_fast, beta_slow, attention_factor, truncate, "
            "interleaved)");
  EXPECT_EQ(InferOne("rope_kv_write", ok, RopeKvAttrs(false, 4, 1)),
            "operand 0 has type f16[2,T,64], expected [B,T,(Hq+2*Hkv)*D] with Hq = 4, Hkv = 1, "
            "D = 16");
  EXPECT_EQ(
      InferOne("rope_kv_write", {"f16[2,T,60]", "f16[2,1,Smax,15]", "f16[2,1,Smax,15]", "i32[2,T]"},
               RopeKvAttrs(false, 2, 1)),
      "operand 1 has type f16[2,1,Smax,15], expected [B,Hkv,Smax,D] with B = 2, Hkv = 1, "
      "D static, even and > 0");
  EXPECT_EQ(
      InferOne("rope_kv_write", {"f16[2,T,64]", "f16[2,1,Smax,16]"}, RopeKvAttrs(false, 2, 1)),
      "expects 4 operands (qkv, k_cache, v_cache, positions), got 2");
}

Attributes RopeKvAttentionAttrs(bool eps, int64_t hq = 4, int64_t hkv = 2) {
  Attributes attrs = RopeKvAttrs(eps, hq, hkv);
  attrs.Set("scale", 0.25);
  attrs.Set("sliding_window", int64_t{0});
  return attrs;
}

TEST(KindsTest, QkNormRopeKvWriteAttention) {
  const std::vector<std::string> ok = {"bf16[B,T,128]",     "bf16[16]",          "f32[16]",
                                       "bf16[B,2,Smax,16]", "bf16[B,2,Smax,16]", "i32[B,T]"};
  auto r = Infer("qk_norm_rope_kv_write_attention", ok, RopeKvAttentionAttrs(true));
  ExpectQkNormRopeKvWriteResults(r);
  // The RoPE + KV-write rules hold, and the attention's.
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write_attention", ok, RopeKvAttrs(true)),
            "missing required attribute 'scale' (float)");
  Attributes window = RopeKvAttentionAttrs(true);
  window.Set("sliding_window", int64_t{-1});
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write_attention", ok, window),
            "attribute 'sliding_window' is -1, expected >= 0 (0 = no window)");
  Attributes scale = RopeKvAttentionAttrs(true);
  scale.Set("scale", std::numeric_limits<double>::infinity());
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write_attention", ok, scale),
            "attribute 'scale' is inf, expected a finite float");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write_attention", ok, RopeKvAttentionAttrs(false)),
            "missing required attribute 'eps' (float)");
  EXPECT_EQ(InferOne("qk_norm_rope_kv_write_attention",
                     {"bf16[B,T,112]", "bf16[16]", "f32[16]", "bf16[B,2,Smax,16]",
                      "bf16[B,2,Smax,16]", "i32[B,T]"},
                     RopeKvAttentionAttrs(true, 3, 2)),
            "attribute 'num_heads' is 3, expected a multiple of num_kv_heads = 2 (GQA)");
}

TEST(KindsTest, RopeKvWriteAttention) {
  const std::vector<std::string> ok = {"f16[2,T,64]", "f16[2,1,Smax,16]", "f16[2,1,Smax,16]",
                                       "i32[2,T]"};
  auto r = Infer("rope_kv_write_attention", ok, RopeKvAttentionAttrs(false, 2, 1));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].type.ToString(), "f16[2,T,2,16]");
  EXPECT_EQ((*r)[1].alias, (ResultAlias{AliasKind::kInPlace, 1}));
  EXPECT_EQ((*r)[2].alias, (ResultAlias{AliasKind::kInPlace, 2}));
  EXPECT_EQ(InferOne("rope_kv_write_attention", ok, RopeKvAttentionAttrs(false, 4, 1)),
            "operand 0 has type f16[2,T,64], expected [B,T,(Hq+2*Hkv)*D] with Hq = 4, Hkv = 1, "
            "D = 16");
  EXPECT_EQ(InferOne("rope_kv_write_attention", {"f16[2,T,64]", "f16[2,1,Smax,16]"},
                     RopeKvAttentionAttrs(false, 2, 1)),
            "expects 4 operands (qkv, k_cache, v_cache, positions), got 2");
}

TEST(KindsTest, MoeRouterLogitsAreFloatOrRoundedToTheInputDtype) {
  EXPECT_EQ(InferOne("moe_router", {"bf16[B,T,64]", "bf16[8,64]"}), "f32[B,T,8]");
  EXPECT_EQ(InferOne("moe_router", {"bf16[B,T,64]", "bf16[8,64]"}, {}, {"f32[B,T,8]"}),
            "f32[B,T,8]");
  EXPECT_EQ(InferOne("moe_router", {"bf16[B,T,64]", "bf16[8,64]"}, {}, {"bf16[B,T,8]"}),
            "bf16[B,T,8]");
  // Any other declared dtype infers float32, which the verifier then finds differs.
  EXPECT_EQ(InferOne("moe_router", {"bf16[B,T,64]", "bf16[8,64]"}, {}, {"f16[B,T,8]"}),
            "f32[B,T,8]");
}

TEST(KindsTest, MoeTopkWeightsTakeTheLogitsDtype) {
  const Attributes attrs = Attrs({{"top_k", int64_t{2}},
                                  {"norm_topk_prob", true},
                                  {"scaling", 1.0},
                                  {"num_groups", int64_t{1}},
                                  {"topk_groups", int64_t{1}}});
  for (const std::string dtype : {"f32", "bf16"}) {
    auto r = Infer("moe_topk", {dtype + "[B,T,8]"}, attrs);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[0].type.ToString(), "i32[B,T,2]");
    EXPECT_EQ((*r)[1].type.ToString(), dtype + "[B,T,2]");
  }
  EXPECT_EQ(InferOne("moe_combine", {"bf16[B,T,2,64]", "bf16[B,T,2]"}), "bf16[B,T,64]");
  EXPECT_EQ(InferOne("moe_combine", {"bf16[B,T,2,64]", "f32[B,T,2]"}), "bf16[B,T,64]");
  EXPECT_EQ(InferOne("moe_combine", {"bf16[B,T,2,64]", "f16[B,T,2]"}),
            "operand 1 has type f16[B,T,2], expected f32 or bf16 weights (the dtype of y)");
}

// The attributes of a moe region: routing as DeepSeek-V2-Lite's (no groups) or grouped.
Attributes MoeAttrs(bool shared, bool residual, const std::string& logits = "f32",
                    const std::string& weights = "f32", int64_t groups = 1) {
  return Attrs({{"top_k", int64_t{2}},
                {"norm_topk_prob", false},
                {"scaling", 1.0},
                {"num_groups", groups},
                {"topk_groups", int64_t{1}},
                {"logits_dtype", logits},
                {"weights_dtype", weights},
                {"shared_experts", shared},
                {"residual", residual}});
}

TEST(KindsTest, Moe) {
  const std::vector<std::string> routed = {"bf16[B,T,32]", "bf16[8,32]", "bf16[8,16,32]",
                                           "bf16[8,16,32]", "bf16[8,32,16]"};
  // The shared MLP: its gate and up packed (gate rows first), its down projection.
  const std::vector<std::string> shared = {"bf16[48,32]", "bf16[32,24]"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  EXPECT_EQ(InferOne("moe", routed, MoeAttrs(false, false)), "bf16[B,T,32]");
  EXPECT_EQ(InferOne("moe", with(routed, shared), MoeAttrs(true, false)), "bf16[B,T,32]");
  EXPECT_EQ(InferOne("moe", with(routed, {"bf16[B,T,32]"}), MoeAttrs(false, true, "bf16", "bf16")),
            "bf16[B,T,32]");
  EXPECT_EQ(InferOne("moe", with(with(routed, shared), {"bf16[B,T,32]"}), MoeAttrs(true, true)),
            "bf16[B,T,32]");
  // Without a residual or shared experts the combined width N may differ from H, as for
  // the primitive regions.
  EXPECT_EQ(
      InferOne("moe", {"f32[2,T,32]", "f32[8,32]", "f32[8,16,32]", "bf16[8,16,32]", "f32[8,40,16]"},
               MoeAttrs(false, false)),
      "f32[2,T,40]");
  // The attributes decide the operand layout.
  EXPECT_EQ(InferOne("moe", routed, MoeAttrs(true, false)),
            "expects 7 operands (x, router, gate, up, down, shared_gate_up, shared_down) with "
            "shared_experts = true and residual = false, got 5");
  EXPECT_EQ(InferOne("moe", with(routed, shared), MoeAttrs(false, true)),
            "expects 6 operands (x, router, gate, up, down, residual) with shared_experts = "
            "false and residual = true, got 7");
  EXPECT_EQ(InferOne("moe", with(routed, {"bf16[B,T,16]"}), MoeAttrs(false, true)),
            "operand 5 has type bf16[B,T,16], expected bf16[B,T,32] (the type of the combined "
            "experts)");
  // One E, gate and up of one shape, down reading I.
  EXPECT_EQ(
      InferOne("moe",
               {"bf16[B,T,32]", "bf16[8,32]", "bf16[6,16,32]", "bf16[8,16,32]", "bf16[8,32,16]"},
               MoeAttrs(false, false)),
      "operand 2 has type bf16[6,16,32], expected [E,I,H] with E = 8, I = 16, H = 32");
  EXPECT_EQ(
      InferOne("moe",
               {"bf16[B,T,32]", "bf16[8,32]", "bf16[8,16,32]", "bf16[8,12,32]", "bf16[8,32,16]"},
               MoeAttrs(false, false)),
      "operand 3 has type bf16[8,12,32], expected [E,I,H] with E = 8, I = 16, H = 32");
  EXPECT_EQ(
      InferOne("moe",
               {"bf16[B,T,32]", "bf16[8,32]", "bf16[8,16,32]", "bf16[8,16,32]", "bf16[8,32,12]"},
               MoeAttrs(false, false)),
      "operand 4 has type bf16[8,32,12], expected [E,N,I] with E = 8, I = 16");
  EXPECT_EQ(InferOne("moe", with(routed, {"bf16[48,32]", "bf16[32,20]"}), MoeAttrs(true, false)),
            "operand 6 has type bf16[32,20], expected [N,Is] with N = 32, Is = 24");
  EXPECT_EQ(InferOne("moe", with(routed, {"bf16[47,32]", "bf16[32,20]"}), MoeAttrs(true, false)),
            "operand 5 has type bf16[47,32], expected [2Is,H] with 2Is static, even and > 0");
  EXPECT_EQ(
      InferOne("moe",
               {"bf16[B,T,32]", "bf16[E,32]", "bf16[E,16,32]", "bf16[E,16,32]", "bf16[E,32,16]"},
               MoeAttrs(false, false)),
      "operand 1 has type bf16[E,32], expected [E,H] with E static, > 0");
  // moe_topk's rules for that E, and the dtypes of the routing: f32 or x's, the weights the
  // logits'.
  EXPECT_EQ(InferOne("moe", routed, MoeAttrs(false, false, "f32", "f32", 3)),
            "attribute 'num_groups' is 3, expected a divisor of E = 8");
  EXPECT_EQ(InferOne("moe", routed, MoeAttrs(false, false, "f16")),
            "attribute 'logits_dtype' is \"f16\", expected \"f32\" or \"bf16\" (the dtype of x)");
  EXPECT_EQ(InferOne("moe", routed, MoeAttrs(false, false, "f32", "bf16")),
            "attribute 'weights_dtype' is \"bf16\", expected \"f32\" (logits_dtype: the top-k "
            "weights take the logits' dtype)");
}

// rms_norm_moe: moe with the norm's weight [H] after x and the norm's eps; the operands after
// the norm are moe's, one place later in the messages.
TEST(KindsTest, RmsNormMoe) {
  const std::vector<std::string> routed = {"bf16[B,T,32]",  "bf16[32]",      "bf16[8,32]",
                                           "bf16[8,16,32]", "bf16[8,16,32]", "bf16[8,32,16]"};
  auto attrs = [](bool shared, bool residual) {
    Attributes a = MoeAttrs(shared, residual);
    a.Set("eps", 1e-6);
    return a;
  };
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  EXPECT_EQ(InferOne("rms_norm_moe", routed, attrs(false, false)), "bf16[B,T,32]");
  EXPECT_EQ(InferOne("rms_norm_moe", with(routed, {"bf16[48,32]", "bf16[32,24]", "bf16[B,T,32]"}),
                     attrs(true, true)),
            "bf16[B,T,32]");
  EXPECT_EQ(InferOne("rms_norm_moe", with(routed, {"bf16[B,T,32]"}), attrs(true, false)),
            "expects 8 operands (x, norm, router, gate, up, down, shared_gate_up, shared_down) "
            "with shared_experts = true and residual = false, got 7");
  std::vector<std::string> bad_norm = routed;
  bad_norm[1] = "bf16[16]";
  EXPECT_EQ(InferOne("rms_norm_moe", bad_norm, attrs(false, false)),
            "operand 1 has type bf16[16], expected [H] with H = 32");
  std::vector<std::string> bad_down = routed;
  bad_down[5] = "bf16[8,32,12]";
  EXPECT_EQ(InferOne("rms_norm_moe", bad_down, attrs(false, false)),
            "operand 5 has type bf16[8,32,12], expected [E,N,I] with E = 8, I = 16");
  EXPECT_EQ(InferOne("rms_norm_moe", routed, MoeAttrs(false, false)),
            "missing required attribute 'eps' (float)");
}

}  // namespace
}  // namespace tileplan::ir
