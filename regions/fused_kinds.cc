// The fused region kinds of docs/ir.md ("Fused kinds"): one KindSpec entry and one inference
// function per kind. Each rule accepts exactly the operands for which the primitive regions
// the kind replaces would type-check, and infers the same results. The table in the doc is
// the contract; keep them in step.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "regions/kinds.h"
#include "regions/printer.h"
#include "regions/shape_rules.h"

namespace tileplan::ir {
namespace {

using shape::AttrError;
using shape::CheckRopeAttrs;
using shape::DimsMatch;
using shape::Element;
using shape::ExpectDim;
using shape::ExpectMinRank;
using shape::ExpectPositions;
using shape::ExpectRank;
using shape::ExpectSameDType;
using shape::ExpectSameType;
using shape::FloatAttr;
using shape::One;
using shape::WithLast;
using Results = absl::StatusOr<std::vector<InferredResult>>;

bool IsPositiveEven(const Dim& d) { return d.is_static() && d.extent() > 0 && d.extent() % 2 == 0; }

absl::Status CheckEps(const Attributes& attrs) {
  return FloatAttr(
             attrs, "eps", [](double v) { return v >= 0; }, "a finite float >= 0")
      .status();
}

// The operands of a linear: x: X[...,K] at 0, w: W[<n>,K] at `w_index`, and, when
// present, bias: W[<n>] at `bias_index`. Returns the output features (w's dim 0). `n` names
// dim 0 of w in messages ("N", "2F").
absl::StatusOr<Dim> CheckLinear(const KindArgs& a, int w_index, int bias_index,
                                absl::string_view n) {
  const std::string w_pattern = absl::StrCat("[", n, ",K]");
  const std::string bias_pattern = absl::StrCat("[", n, "]");
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,K]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, w_index, Element::kFloat, 2, w_pattern));
  TP_RETURN_IF_ERROR(ExpectDim(a, w_index, 1, a.operands[0].dims.back(), w_pattern, "K"));
  const Dim& out = a.operands[static_cast<size_t>(w_index)].dims[0];
  if (static_cast<int>(a.operands.size()) > bias_index) {
    TP_RETURN_IF_ERROR(ExpectRank(a, bias_index, Element::kFloat, 1, bias_pattern));
    TP_RETURN_IF_ERROR(ExpectSameDType(a, bias_index, w_index, bias_pattern));
    TP_RETURN_IF_ERROR(ExpectDim(a, bias_index, 0, out, bias_pattern, n));
  }
  return out;
}

// The result of linear_swiglu over a [2F,K] weight at `w_index`: X[...,F].
Results SwigluOfLinear(const KindArgs& a, const Dim& two_f, int w_index) {
  if (!IsPositiveEven(two_f)) {
    return a.OperandError(w_index, "[2F,K] with 2F static, even and > 0");
  }
  const TensorType& x = a.operands[0];
  return One(MakeType(x.dtype, WithLast(x.dims, Dim::Static(two_f.extent() / 2))));
}

// swiglu: split + silu + mul.
Results InferSwiglu(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,2F]"));
  const TensorType& x = a.operands[0];
  if (!IsPositiveEven(x.dims.back())) {
    return a.OperandError(0, "a floating-point tensor [...,2F] with 2F static, even and > 0");
  }
  return One(MakeType(x.dtype, WithLast(x.dims, Dim::Static(x.dims.back().extent() / 2))));
}

// linear_swiglu: linear + split + silu + mul.
Results InferLinearSwiglu(const KindArgs& a) {
  TP_ASSIGN_OR_RETURN(const Dim two_f, CheckLinear(a, 1, 2, "2F"));
  return SwigluOfLinear(a, two_f, 1);
}

// rms_norm_linear (rms_norm + linear) and rms_norm_linear_swiglu (rms_norm + linear + split
// + silu + mul; `swiglu`). Operands x: X[...,K], norm: W[K], w, [bias]; the normalized x
// has x's type, so the linear's rules apply to x itself.
Results InferRmsNormLinear(const KindArgs& a, bool swiglu) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,K]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 1, "[K]"));
  TP_RETURN_IF_ERROR(ExpectDim(a, 1, 0, a.operands[0].dims.back(), "[K]", "K"));
  TP_ASSIGN_OR_RETURN(const Dim out, CheckLinear(a, 2, 3, swiglu ? "2F" : "N"));
  TP_RETURN_IF_ERROR(CheckEps(a.attrs));
  if (swiglu) return SwigluOfLinear(a, out, 2);
  const TensorType& x = a.operands[0];
  return One(MakeType(x.dtype, WithLast(x.dims, out)));
}

// linear_residual: linear + add; the residual has the linear result's type.
Results InferLinearResidual(const KindArgs& a) {
  TP_ASSIGN_OR_RETURN(const Dim n, CheckLinear(a, 1, 3, "N"));
  const TensorType& x = a.operands[0];
  TensorType out = MakeType(x.dtype, WithLast(x.dims, n));
  if (!(a.operands[2] == out)) {
    return a.OperandError(2, absl::StrCat(out.ToString(), " (the type of the linear's result)"));
  }
  return One(std::move(out));
}

// add_rms_norm: add + rms_norm; results sum and out.
Results InferAddRmsNorm(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,N]"));
  TP_RETURN_IF_ERROR(ExpectSameType(a, 1, 0));
  TP_RETURN_IF_ERROR(ExpectRank(a, 2, Element::kFloat, 1, "[N]"));
  TP_RETURN_IF_ERROR(ExpectDim(a, 2, 0, a.operands[0].dims.back(), "[N]", "N"));
  TP_RETURN_IF_ERROR(CheckEps(a.attrs));
  return std::vector<InferredResult>{{a.operands[0], {}}, {a.operands[0], {}}};
}

absl::StatusOr<int64_t> PositiveInt(const Attributes& attrs, absl::string_view key) {
  TP_ASSIGN_OR_RETURN(const int64_t v, attrs.GetInt(key));
  if (v <= 0) return AttrError(key, PrintAttrValue(v), "> 0");
  return v;
}

// qk_norm_rope_kv_write (`norms`) and rope_kv_write: split + reshape ×3 [+ rms_norm ×2] +
// rope ×2 + kv_write ×2. Operands: qkv, [q_norm, k_norm,] k_cache, v_cache, positions.
Results InferRopeKvWrite(const KindArgs& a, bool norms) {
  const int k_cache = norms ? 3 : 1;
  const int v_cache = k_cache + 1;
  const int positions = k_cache + 2;
  TP_ASSIGN_OR_RETURN(const int64_t hq, PositiveInt(a.attrs, "num_heads"));
  TP_ASSIGN_OR_RETURN(const int64_t hkv, PositiveInt(a.attrs, "num_kv_heads"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 3, "[B,T,(Hq+2*Hkv)*D]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, k_cache, Element::kFloat, 4, "[B,Hkv,Smax,D]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, k_cache, 0, "[B,Hkv,Smax,D]"));
  const TensorType& qkv = a.operands[0];
  const TensorType& cache = a.operands[k_cache];
  const Dim& d = cache.dims[3];
  if (!DimsMatch(cache.dims[0], qkv.dims[0]) || !DimsMatch(cache.dims[1], Dim::Static(hkv)) ||
      !IsPositiveEven(d)) {
    return a.OperandError(
        k_cache, absl::StrCat(shape::Pattern("[B,Hkv,Smax,D]",
                                             {{"B", qkv.dims[0]}, {"Hkv", Dim::Static(hkv)}}),
                              ", D static, even and > 0"));
  }
  TP_RETURN_IF_ERROR(ExpectSameType(a, v_cache, k_cache));
  int64_t heads = 0, width = 0;
  if (__builtin_mul_overflow(hkv, 2, &heads) || __builtin_add_overflow(heads, hq, &heads) ||
      __builtin_mul_overflow(heads, d.extent(), &width)) {
    return absl::InvalidArgumentError(absl::StrCat("(num_heads + 2 * num_kv_heads) * D with ",
                                                   "num_heads = ", hq, ", num_kv_heads = ", hkv,
                                                   ", D = ", d.extent(), " overflows int64"));
  }
  if (!DimsMatch(qkv.dims[2], Dim::Static(width))) {
    return a.OperandError(
        0, shape::Pattern("[B,T,(Hq+2*Hkv)*D]",
                          {{"Hq", Dim::Static(hq)}, {"Hkv", Dim::Static(hkv)}, {"D", d}}));
  }
  if (norms) {
    for (int k : {1, 2}) {
      TP_RETURN_IF_ERROR(ExpectRank(a, k, Element::kFloat, 1, "[D]"));
      TP_RETURN_IF_ERROR(ExpectDim(a, k, 0, d, "[D]", "D"));
    }
    TP_RETURN_IF_ERROR(CheckEps(a.attrs));
  }
  TP_RETURN_IF_ERROR(ExpectPositions(a, positions, qkv.dims[0], qkv.dims[1]));
  TP_RETURN_IF_ERROR(CheckRopeAttrs(a.attrs));
  return std::vector<InferredResult>{
      {MakeType(qkv.dtype, {qkv.dims[0], qkv.dims[1], Dim::Static(hq), d}), {}},
      {cache, ResultAlias{AliasKind::kInPlace, k_cache}},
      {cache, ResultAlias{AliasKind::kInPlace, v_cache}},
  };
}

// The attribute schema of the RoPE + KV-write kinds: the head counts, eps when the kind
// normalizes q and k, and rope's attributes.
std::vector<AttrSpec> RopeKvWriteAttrs(bool norms) {
  std::vector<AttrSpec> attrs = {{"num_heads", AttrType::kInt}, {"num_kv_heads", AttrType::kInt}};
  if (norms) attrs.push_back({"eps", AttrType::kFloat});
  for (AttrSpec& spec : shape::RopeAttrSpecs()) attrs.push_back(std::move(spec));
  return attrs;
}

// rms_norm_linear, or rms_norm_linear_swiglu (`swiglu`).
KindSpec RmsNormLinearSpec(bool swiglu) {
  return {.name = swiglu ? "rms_norm_linear_swiglu" : "rms_norm_linear",
          .operands = {"x", "norm", "w", "bias"},
          .optional_operands = 1,
          .attrs = {{"eps", AttrType::kFloat}},
          .infer = [swiglu](const KindArgs& a) { return InferRmsNormLinear(a, swiglu); },
          .fused = true};
}

// qk_norm_rope_kv_write_attention (`norms`) and rope_kv_write_attention: the RoPE + KV-write
// kind above followed by the attention that reads its q and the caches it updated. Operands
// as the RoPE + KV-write kind; results the attention output and the two updated caches.
Results InferRopeKvWriteAttention(const KindArgs& a, bool norms) {
  TP_ASSIGN_OR_RETURN(std::vector<InferredResult> results, InferRopeKvWrite(a, norms));
  TP_ASSIGN_OR_RETURN(const int64_t hq, a.attrs.GetInt("num_heads"));
  TP_ASSIGN_OR_RETURN(const int64_t hkv, a.attrs.GetInt("num_kv_heads"));
  if (hq % hkv != 0) {
    return AttrError("num_heads", PrintAttrValue(hq),
                     absl::StrCat("a multiple of num_kv_heads = ", hkv, " (GQA)"));
  }
  TP_RETURN_IF_ERROR(shape::CheckAttentionAttrs(a.attrs));
  return results;
}

// mla_kv_write: split + rms_norm + reshape ×2 + rope + kv_write ×2 of MLA's compressed kv.
// Operands: kv_a [B,T,C+Dr], norm [C], latent_cache [B,1,Smax,C], rope_cache [B,1,Smax,Dr],
// positions (operands at[0] ... at[4] of `a`: mla_kv_write_attention embeds them); results:
// both caches, in place.
Results InferMlaKvWrite(const KindArgs& a, const std::array<int, 5>& at = {0, 1, 2, 3, 4}) {
  TP_RETURN_IF_ERROR(ExpectRank(a, at[0], Element::kFloat, 3, "[B,T,C+Dr]"));
  const TensorType& kv_a = a.operands[static_cast<size_t>(at[0])];
  TP_RETURN_IF_ERROR(ExpectRank(a, at[2], Element::kFloat, 4, "[B,1,Smax,C]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, at[2], at[0], "[B,1,Smax,C]"));
  const TensorType& latent = a.operands[static_cast<size_t>(at[2])];
  const Dim& c = latent.dims[3];
  if (!DimsMatch(latent.dims[0], kv_a.dims[0]) || !DimsMatch(latent.dims[1], Dim::Static(1)) ||
      !c.is_static() || c.extent() == 0) {
    return a.OperandError(at[2], absl::StrCat(shape::Pattern("[B,1,Smax,C]", {{"B", kv_a.dims[0]}}),
                                              ", C static, > 0"));
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, at[3], Element::kFloat, 4, "[B,1,Smax,Dr]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, at[3], at[0], "[B,1,Smax,Dr]"));
  const TensorType& rope = a.operands[static_cast<size_t>(at[3])];
  const Dim& dr = rope.dims[3];
  if (!DimsMatch(rope.dims[0], kv_a.dims[0]) || !DimsMatch(rope.dims[1], Dim::Static(1)) ||
      !DimsMatch(rope.dims[2], latent.dims[2]) || !IsPositiveEven(dr)) {
    return a.OperandError(
        at[3], absl::StrCat(
                   shape::Pattern("[B,1,Smax,Dr]", {{"B", kv_a.dims[0]}, {"Smax", latent.dims[2]}}),
                   ", Dr static, even and > 0"));
  }
  if (!DimsMatch(kv_a.dims[2], Dim::Static(c.extent() + dr.extent()))) {
    return a.OperandError(at[0], shape::Pattern("[B,T,C+Dr]", {{"C", c}, {"Dr", dr}}));
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, at[1], Element::kFloat, 1, "[C]"));
  TP_RETURN_IF_ERROR(ExpectDim(a, at[1], 0, c, "[C]", "C"));
  TP_RETURN_IF_ERROR(CheckEps(a.attrs));
  TP_RETURN_IF_ERROR(ExpectPositions(a, at[4], kv_a.dims[0], kv_a.dims[1]));
  TP_RETURN_IF_ERROR(CheckRopeAttrs(a.attrs));
  return std::vector<InferredResult>{{latent, ResultAlias{AliasKind::kInPlace, at[2]}},
                                     {rope, ResultAlias{AliasKind::kInPlace, at[3]}}};
}

// mla_kv_write_attention: the query's rope, mla_kv_write and the mla_attention that reads
// both. Operands q_nope [B,T,Hq,Dn], q_pe [B,T,Hq,Dr] (not yet rotated), then mla_kv_write's
// kv_a, norm, latent_cache, rope_cache, then w_kv_b and positions; results the attention
// output [B,T,Hq,Dv] and both caches, in place.
Results InferMlaKvWriteAttention(const KindArgs& a) {
  TP_ASSIGN_OR_RETURN(std::vector<InferredResult> caches, InferMlaKvWrite(a, {2, 3, 4, 5, 7}));
  TP_ASSIGN_OR_RETURN(TensorType out, shape::InferMlaAttention(a, {0, 1, 4, 5, 6, 7}));
  std::vector<InferredResult> results = {{std::move(out), ResultAlias{}}};
  for (InferredResult& cache : caches) results.push_back(std::move(cache));
  return results;
}

std::vector<AttrSpec> MlaKvWriteAttrs() {
  std::vector<AttrSpec> attrs = {{"eps", AttrType::kFloat}};
  for (AttrSpec& spec : shape::RopeAttrSpecs()) attrs.push_back(std::move(spec));
  return attrs;
}

// mla_kv_write's attributes and mla_attention's scale.
std::vector<AttrSpec> MlaKvWriteAttentionAttrs() {
  std::vector<AttrSpec> attrs = MlaKvWriteAttrs();
  attrs.push_back({"scale", AttrType::kFloat});
  return attrs;
}

std::vector<AttrSpec> RopeKvWriteAttentionAttrs(bool norms) {
  std::vector<AttrSpec> attrs = RopeKvWriteAttrs(norms);
  for (AttrSpec& spec : shape::AttentionAttrSpecs()) attrs.push_back(std::move(spec));
  return attrs;
}

// moe's routing dtypes: `logits_dtype`, the dtype of the primitive graph's router logits, "f32"
// or the activation dtype `x` (moe_router's rule), and `weights_dtype`, that of the top-k
// weights, which is the logits' (moe_topk's rule).
absl::Status CheckMoeDTypes(const Attributes& attrs, DType x) {
  TP_ASSIGN_OR_RETURN(const std::string logits, attrs.GetString("logits_dtype"));
  const absl::StatusOr<DType> dtype = ParseDType(logits);
  if (!dtype.ok() || (*dtype != DType::kF32 && *dtype != x)) {
    return AttrError("logits_dtype", PrintAttrValue(logits),
                     absl::StrCat("\"f32\" or \"", DTypeName(x), "\" (the dtype of x)"));
  }
  TP_ASSIGN_OR_RETURN(const std::string weights, attrs.GetString("weights_dtype"));
  if (weights != logits) {
    return AttrError("weights_dtype", PrintAttrValue(weights),
                     absl::StrCat(PrintAttrValue(logits),
                                  " (logits_dtype: the top-k weights take the logits' dtype)"));
  }
  return absl::OkStatus();
}

// moe: moe_router + moe_topk + expert_linear (gate, up) + silu + mul + expert_linear (down) +
// moe_combine [+ the shared MLP's linear x2 + silu + mul + linear + add] [+ add of the
// residual]. Operands x: X[B,T,H], router: W[E,H], gate, up: W[E,I,H], down: W[E,N,I], then
// with shared_experts shared_gate_up: W[2Is,H] (the shared MLP's gate rows, then its up rows:
// linear_swiglu's packed weight) and shared_down: W[N,Is], then with residual residual:
// X[B,T,N]; result X[B,T,N]. rms_norm_moe (`norm`): rms_norm + moe, the norm's weight
// norm: W[H] after x, and the norm's eps.
Results InferMoe(const KindArgs& a, bool norm) {
  // Operand i of moe is operand at(i) here: rms_norm_moe has the norm weight after x.
  const int shift = norm ? 1 : 0;
  auto at = [shift](int i) { return i == 0 ? 0 : i + shift; };
  TP_ASSIGN_OR_RETURN(const bool shared, a.attrs.GetBool("shared_experts"));
  TP_ASSIGN_OR_RETURN(const bool residual, a.attrs.GetBool("residual"));
  const int expected = 5 + shift + (shared ? 2 : 0) + (residual ? 1 : 0);
  if (static_cast<int>(a.operands.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expects ", expected, " operands (x, ", norm ? "norm, " : "", "router, gate, up, down",
        shared ? ", shared_gate_up, shared_down" : "", residual ? ", residual" : "",
        ") with shared_experts = ", shared ? "true" : "false",
        " and residual = ", residual ? "true" : "false", ", got ", a.operands.size()));
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 3, "[B,T,H]"));
  const TensorType& x = a.operands[0];
  const Dim& h = x.dims[2];
  if (norm) {
    TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 1, "[H]"));
    TP_RETURN_IF_ERROR(ExpectDim(a, 1, 0, h, "[H]", "H"));
    TP_RETURN_IF_ERROR(CheckEps(a.attrs));
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, at(1), Element::kFloat, 2, "[E,H]"));
  TP_RETURN_IF_ERROR(ExpectDim(a, at(1), 1, h, "[E,H]", "H"));
  const Dim& e = a.operands[static_cast<size_t>(at(1))].dims[0];
  if (!e.is_static() || e.extent() == 0) return a.OperandError(at(1), "[E,H] with E static, > 0");
  TP_RETURN_IF_ERROR(ExpectRank(a, at(2), Element::kFloat, 3, "[E,I,H]"));
  const Dim& inter = a.operands[static_cast<size_t>(at(2))].dims[1];
  // gate and up: the same [E,I,H] (silu(gate) * up needs one shape).
  for (int w : {at(2), at(3)}) {
    TP_RETURN_IF_ERROR(ExpectRank(a, w, Element::kFloat, 3, "[E,I,H]"));
    const std::vector<Dim>& d = a.operands[static_cast<size_t>(w)].dims;
    if (!DimsMatch(d[0], e) || !DimsMatch(d[1], inter) || !DimsMatch(d[2], h)) {
      return a.OperandError(w, shape::Pattern("[E,I,H]", {{"E", e}, {"I", inter}, {"H", h}}));
    }
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, at(4), Element::kFloat, 3, "[E,N,I]"));
  const std::vector<Dim>& down = a.operands[static_cast<size_t>(at(4))].dims;
  if (!DimsMatch(down[0], e) || !DimsMatch(down[2], inter)) {
    return a.OperandError(at(4), shape::Pattern("[E,N,I]", {{"E", e}, {"I", inter}}));
  }
  const Dim& n = down[1];
  if (shared) {
    TP_RETURN_IF_ERROR(ExpectRank(a, at(5), Element::kFloat, 2, "[2Is,H]"));
    TP_RETURN_IF_ERROR(ExpectDim(a, at(5), 1, h, "[2Is,H]", "H"));
    const Dim& two_is = a.operands[static_cast<size_t>(at(5))].dims[0];
    if (!IsPositiveEven(two_is)) {
      return a.OperandError(at(5), "[2Is,H] with 2Is static, even and > 0");
    }
    const Dim is = Dim::Static(two_is.extent() / 2);
    TP_RETURN_IF_ERROR(ExpectRank(a, at(6), Element::kFloat, 2, "[N,Is]"));
    const std::vector<Dim>& shared_down = a.operands[static_cast<size_t>(at(6))].dims;
    if (!DimsMatch(shared_down[0], n) || !DimsMatch(shared_down[1], is)) {
      return a.OperandError(at(6), shape::Pattern("[N,Is]", {{"N", n}, {"Is", is}}));
    }
  }
  TensorType out = MakeType(x.dtype, {x.dims[0], x.dims[1], n});
  if (residual && !(a.operands.back() == out)) {
    return a.OperandError(expected - 1,
                          absl::StrCat(out.ToString(), " (the type of the combined experts)"));
  }
  TP_RETURN_IF_ERROR(shape::CheckMoeTopkAttrs(a.attrs, e.extent()).status());
  TP_RETURN_IF_ERROR(CheckMoeDTypes(a.attrs, x.dtype));
  return One(std::move(out));
}

// moe's schema: moe_topk's attributes, the two dtypes of the routing and the operand layout.
std::vector<AttrSpec> MoeAttrs(bool norm) {
  std::vector<AttrSpec> attrs = shape::MoeTopkAttrSpecs();
  if (norm) attrs.push_back({"eps", AttrType::kFloat});
  attrs.push_back({"logits_dtype", AttrType::kString});
  attrs.push_back({"weights_dtype", AttrType::kString});
  attrs.push_back({"shared_experts", AttrType::kBool});
  attrs.push_back({"residual", AttrType::kBool});
  return attrs;
}

}  // namespace

absl::Status RegisterFusedKinds(KindRegistry& registry) {
  std::vector<KindSpec> specs = {
      {.name = "swiglu", .operands = {"x"}, .infer = InferSwiglu, .fused = true},
      {.name = "linear_swiglu",
       .operands = {"x", "w", "bias"},
       .optional_operands = 1,
       .infer = InferLinearSwiglu,
       .fused = true},
      {.name = "linear_residual",
       .operands = {"x", "w", "residual", "bias"},
       .optional_operands = 1,
       .infer = InferLinearResidual,
       .fused = true},
      {.name = "add_rms_norm",
       .operands = {"a", "b", "w"},
       .attrs = {{"eps", AttrType::kFloat}},
       .infer = InferAddRmsNorm,
       .fused = true},
      RmsNormLinearSpec(false),
      RmsNormLinearSpec(true),
      {.name = "qk_norm_rope_kv_write",
       .operands = {"qkv", "q_norm", "k_norm", "k_cache", "v_cache", "positions"},
       .attrs = RopeKvWriteAttrs(true),
       .infer = [](const KindArgs& a) { return InferRopeKvWrite(a, true); },
       .fused = true},
      {.name = "rope_kv_write",
       .operands = {"qkv", "k_cache", "v_cache", "positions"},
       .attrs = RopeKvWriteAttrs(false),
       .infer = [](const KindArgs& a) { return InferRopeKvWrite(a, false); },
       .fused = true},
      {.name = "qk_norm_rope_kv_write_attention",
       .operands = {"qkv", "q_norm", "k_norm", "k_cache", "v_cache", "positions"},
       .attrs = RopeKvWriteAttentionAttrs(true),
       .infer = [](const KindArgs& a) { return InferRopeKvWriteAttention(a, true); },
       .fused = true},
      {.name = "mla_kv_write",
       .operands = {"kv_a", "norm", "latent_cache", "rope_cache", "positions"},
       .attrs = MlaKvWriteAttrs(),
       .infer = [](const KindArgs& a) { return InferMlaKvWrite(a); },
       .fused = true},
      {.name = "mla_kv_write_attention",
       .operands = {"q_nope", "q_pe", "kv_a", "norm", "latent_cache", "rope_cache", "w_kv_b",
                    "positions"},
       .attrs = MlaKvWriteAttentionAttrs(),
       .infer = InferMlaKvWriteAttention,
       .fused = true},
      {.name = "rope_kv_write_attention",
       .operands = {"qkv", "k_cache", "v_cache", "positions"},
       .attrs = RopeKvWriteAttentionAttrs(false),
       .infer = [](const KindArgs& a) { return InferRopeKvWriteAttention(a, false); },
       .fused = true},
      {.name = "moe",
       .operands = {"x", "router", "gate", "up", "down", "shared_gate_up", "shared_down",
                    "residual"},
       .optional_operands = 3,
       .attrs = MoeAttrs(false),
       .infer = [](const KindArgs& a) { return InferMoe(a, false); },
       .fused = true},
      {.name = "rms_norm_moe",
       .operands = {"x", "norm", "router", "gate", "up", "down", "shared_gate_up", "shared_down",
                    "residual"},
       .optional_operands = 3,
       .attrs = MoeAttrs(true),
       .infer = [](const KindArgs& a) { return InferMoe(a, true); },
       .fused = true},
  };
  for (KindSpec& spec : specs) TP_RETURN_IF_ERROR(registry.Register(std::move(spec)));
  return absl::OkStatus();
}

}  // namespace tileplan::ir
