// The primitive region kinds of docs/ir.md ("Primitive kinds"): one KindSpec entry and one
// inference function per kind. The table in the doc is the contract; keep them in step.
#include <algorithm>
#include <cmath>
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

Results InferEmbedding(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kI32, 2, "[B,T]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 2, "[V,H]"));
  const TensorType& ids = a.operands[0];
  const TensorType& table = a.operands[1];
  return One(MakeType(table.dtype, {ids.dims[0], ids.dims[1], table.dims[1]}));
}

Results InferRmsNorm(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,N]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 1, "[N]"));
  TP_RETURN_IF_ERROR(ExpectDim(a, 1, 0, a.operands[0].dims.back(), "[N]", "N"));
  TP_RETURN_IF_ERROR(FloatAttr(
                         a.attrs, "eps", [](double v) { return v >= 0; }, "a finite float >= 0")
                         .status());
  return One(a.operands[0]);
}

Results InferLinear(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,K]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 2, "[N,K]"));
  const TensorType& x = a.operands[0];
  TP_RETURN_IF_ERROR(ExpectDim(a, 1, 1, x.dims.back(), "[N,K]", "K"));
  const Dim& n = a.operands[1].dims[0];
  if (a.operands.size() == 3) {
    TP_RETURN_IF_ERROR(ExpectRank(a, 2, Element::kFloat, 1, "[N]"));
    TP_RETURN_IF_ERROR(ExpectSameDType(a, 2, 1, "[N]"));
    TP_RETURN_IF_ERROR(ExpectDim(a, 2, 0, n, "[N]", "N"));
  }
  return One(MakeType(x.dtype, WithLast(x.dims, n)));
}

// Static element count (overflow is an error) and sorted symbols of a type.
absl::Status ElementSignature(const TensorType& t, int64_t* count,
                              std::vector<std::string>* symbols) {
  *count = 1;
  for (const Dim& d : t.dims) {
    if (!d.is_static()) {
      symbols->push_back(d.symbol());
    } else if (__builtin_mul_overflow(*count, d.extent(), count)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the static element count of ", t.ToString(), " overflows int64"));
    }
  }
  std::sort(symbols->begin(), symbols->end());
  return absl::OkStatus();
}

Results InferReshape(const KindArgs& a) {
  if (a.declared_results.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("declares ", a.declared_results.size(), " results, expected 1"));
  }
  const TensorType& x = a.operands[0];
  const TensorType& r = a.declared_results[0];
  int64_t x_count = 0, r_count = 0;
  std::vector<std::string> x_syms, r_syms;
  TP_RETURN_IF_ERROR(ElementSignature(x, &x_count, &x_syms));
  TP_RETURN_IF_ERROR(ElementSignature(r, &r_count, &r_syms));
  if (r.dtype != x.dtype || x_count != r_count || x_syms != r_syms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "declared result type ", r.ToString(), " is not a reshape of ", a.OperandLabel(0), " ",
        x.ToString(), " (same dtype, static element count and multiset of symbols)"));
  }
  return One(r, ResultAlias{AliasKind::kView, 0});
}

Results InferSplit(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kAny, 1, "[...,N]"));
  const TensorType& x = a.operands[0];
  const Dim& n = x.dims.back();
  if (!n.is_static()) return a.OperandError(0, "[...,N] with N static");
  TP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, a.attrs.GetInts("sizes"));
  const std::string printed = PrintAttrValue(sizes);
  if (sizes.empty()) return AttrError("sizes", printed, "at least one size");
  int64_t sum = 0;
  std::vector<InferredResult> results;
  for (int64_t s : sizes) {
    if (s <= 0 || s > n.extent() - sum) {
      return AttrError("sizes", printed,
                       absl::StrCat("positive sizes summing to N = ", n.extent()));
    }
    sum += s;
    results.push_back(
        {MakeType(x.dtype, WithLast(x.dims, Dim::Static(s))), ResultAlias{AliasKind::kView, 0}});
  }
  if (sum != n.extent()) {
    return AttrError("sizes", printed, absl::StrCat("positive sizes summing to N = ", n.extent()));
  }
  return results;
}

Results InferRope(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 4, "[B,T,H,D]"));
  const TensorType& x = a.operands[0];
  const Dim& d = x.dims[3];
  if (!d.is_static() || d.extent() == 0 || d.extent() % 2 != 0) {
    return a.OperandError(0, "a floating-point tensor [B,T,H,D] with D static, even and > 0");
  }
  TP_RETURN_IF_ERROR(ExpectPositions(a, 1, x.dims[0], x.dims[1]));
  TP_RETURN_IF_ERROR(CheckRopeAttrs(a.attrs));
  return One(x);
}

Results InferKvWrite(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 4, "[B,Hkv,Smax,D]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 4, "[B,T,Hkv,D]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, 1, 0, "[B,T,Hkv,D]"));
  const TensorType& cache = a.operands[0];
  const TensorType& x = a.operands[1];
  if (!DimsMatch(x.dims[0], cache.dims[0]) || !DimsMatch(x.dims[2], cache.dims[1]) ||
      !DimsMatch(x.dims[3], cache.dims[3])) {
    return a.OperandError(
        1, shape::Pattern("[B,T,Hkv,D]",
                          {{"B", cache.dims[0]}, {"Hkv", cache.dims[1]}, {"D", cache.dims[3]}}));
  }
  TP_RETURN_IF_ERROR(ExpectPositions(a, 2, x.dims[0], x.dims[1]));
  return One(cache, ResultAlias{AliasKind::kInPlace, 0});
}

Results InferAttention(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 4, "[B,T,Hq,D]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 4, "[B,Hkv,Smax,D]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, 1, 0, "[B,Hkv,Smax,D]"));
  const TensorType& q = a.operands[0];
  const TensorType& k = a.operands[1];
  if (!DimsMatch(k.dims[0], q.dims[0]) || !DimsMatch(k.dims[3], q.dims[3])) {
    return a.OperandError(1,
                          shape::Pattern("[B,Hkv,Smax,D]", {{"B", q.dims[0]}, {"D", q.dims[3]}}));
  }
  const Dim& hq = q.dims[2];
  const Dim& hkv = k.dims[1];
  const bool grouped =
      hq.is_static() && hkv.is_static() && hkv.extent() > 0 && hq.extent() % hkv.extent() == 0;
  if (!DimsMatch(hq, hkv) && !grouped) {
    return a.OperandError(1, absl::StrCat("[B,Hkv,Smax,D] with Hkv dividing Hq = ", hq.ToString()));
  }
  TP_RETURN_IF_ERROR(ExpectSameType(a, 2, 1));
  TP_RETURN_IF_ERROR(ExpectPositions(a, 3, q.dims[0], q.dims[1]));
  TP_RETURN_IF_ERROR(shape::CheckAttentionAttrs(a.attrs));
  return One(q);
}

Results InferElementwiseBinary(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 0, "[...]"));
  TP_RETURN_IF_ERROR(ExpectSameType(a, 1, 0));
  return One(a.operands[0]);
}

Results InferSilu(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 0, "[...]"));
  return One(a.operands[0]);
}

Results InferLmHead(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 3, "[B,T,H]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 2, "[V,H]"));
  const TensorType& x = a.operands[0];
  TP_RETURN_IF_ERROR(ExpectDim(a, 1, 1, x.dims[2], "[V,H]", "H"));
  return One(MakeType(DType::kF32, {x.dims[0], x.dims[1], a.operands[1].dims[0]}));
}

Results InferArgmax(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kF32, 3, "[B,T,V]"));
  const TensorType& logits = a.operands[0];
  if (logits.dims[2].is_static() && logits.dims[2].extent() == 0) {
    return a.OperandError(0, "f32[B,T,V] with V > 0");
  }
  return One(MakeType(DType::kI32, {logits.dims[0], logits.dims[1]}));
}

// The `ranks` attribute of the collective kinds: the size of the tensor-parallel group.
absl::StatusOr<int64_t> RanksAttr(const Attributes& attrs) {
  TP_ASSIGN_OR_RETURN(const int64_t ranks, attrs.GetInt("ranks"));
  if (ranks < 1 || ranks > 1024) {
    return AttrError("ranks", absl::StrCat(ranks), "an int in [1, 1024]");
  }
  return ranks;
}

Results InferAllReduce(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,N]"));
  if (a.operands.size() == 2) {
    TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 1, "[N]"));
    TP_RETURN_IF_ERROR(ExpectDim(a, 1, 0, a.operands[0].dims.back(), "[N]", "N"));
  }
  TP_RETURN_IF_ERROR(RanksAttr(a.attrs).status());
  return One(a.operands[0]);
}

Results InferAllGather(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 1, "[...,n]"));
  TP_ASSIGN_OR_RETURN(const int64_t ranks, RanksAttr(a.attrs));
  const TensorType& x = a.operands[0];
  if (!x.dims.back().is_static()) return a.OperandError(0, "[...,n] with n static");
  return One(MakeType(x.dtype, WithLast(x.dims, Dim::Static(x.dims.back().extent() * ranks))));
}

Results InferShardedArgmax(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kF32, 3, "[B,T,V]"));
  TP_RETURN_IF_ERROR(RanksAttr(a.attrs).status());
  const TensorType& logits = a.operands[0];
  if (!logits.dims[2].is_static() || logits.dims[2].extent() == 0) {
    return a.OperandError(0, "f32[B,T,V] with V static and > 0");
  }
  return One(MakeType(DType::kI32, {logits.dims[0], logits.dims[1]}));
}

Results InferMoeRouter(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 3, "[B,T,H]"));
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 2, "[E,H]"));
  const TensorType& x = a.operands[0];
  TP_RETURN_IF_ERROR(ExpectDim(a, 1, 1, x.dims[2], "[E,H]", "H"));
  // The logits are float32, or rounded to x's dtype when the region declares that dtype (a
  // router that runs as a linear in the activation dtype, as Qwen3-MoE's does).
  DType logits = DType::kF32;
  if (!a.declared_results.empty() && a.declared_results[0].dtype == x.dtype) logits = x.dtype;
  return One(MakeType(logits, {x.dims[0], x.dims[1], a.operands[1].dims[0]}));
}

Results InferMoeTopk(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 3, "[B,T,E]"));
  const TensorType& logits = a.operands[0];
  const Dim& e = logits.dims[2];
  if (!e.is_static() || e.extent() == 0) return a.OperandError(0, "[B,T,E] with E static, > 0");
  TP_ASSIGN_OR_RETURN(const int64_t k, shape::CheckMoeTopkAttrs(a.attrs, e.extent()));
  const std::vector<Dim> dims = {logits.dims[0], logits.dims[1], Dim::Static(k)};
  // The weights take the logits' dtype (rounded to it when that is not float32).
  return std::vector<InferredResult>{{MakeType(DType::kI32, dims), {}},
                                     {MakeType(logits.dtype, dims), {}}};
}

Results InferExpertLinear(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectMinRank(a, 0, Element::kFloat, 3, "[B,T,H] or [B,T,K,H]"));
  const TensorType& x = a.operands[0];
  if (x.dims.size() > 4) return a.OperandError(0, "[B,T,H] or [B,T,K,H]");
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kI32, 3, "[B,T,K]"));
  const TensorType& ids = a.operands[1];
  if (!DimsMatch(ids.dims[0], x.dims[0]) || !DimsMatch(ids.dims[1], x.dims[1]) ||
      (x.dims.size() == 4 && !DimsMatch(ids.dims[2], x.dims[2]))) {
    return a.OperandError(
        1,
        x.dims.size() == 4
            ? shape::Pattern("i32[B,T,K]", {{"B", x.dims[0]}, {"T", x.dims[1]}, {"K", x.dims[2]}})
            : shape::Pattern("i32[B,T,K]", {{"B", x.dims[0]}, {"T", x.dims[1]}}));
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, 2, Element::kFloat, 3, "[E,N,H]"));
  TP_RETURN_IF_ERROR(ExpectDim(a, 2, 2, x.dims.back(), "[E,N,H]", "H"));
  return One(MakeType(x.dtype, {x.dims[0], x.dims[1], ids.dims[2], a.operands[2].dims[1]}));
}

Results InferMoeCombine(const KindArgs& a) {
  TP_RETURN_IF_ERROR(ExpectRank(a, 0, Element::kFloat, 4, "[B,T,K,H]"));
  const TensorType& y = a.operands[0];
  TP_RETURN_IF_ERROR(ExpectRank(a, 1, Element::kFloat, 3, "[B,T,K]"));
  const TensorType& w = a.operands[1];
  for (int d = 0; d < 3; ++d) {
    if (!DimsMatch(w.dims[d], y.dims[d])) {
      return a.OperandError(
          1, shape::Pattern("[B,T,K]", {{"B", y.dims[0]}, {"T", y.dims[1]}, {"K", y.dims[2]}}));
    }
  }
  if (w.dtype != DType::kF32 && w.dtype != y.dtype) {
    return a.OperandError(1,
                          absl::StrCat("f32 or ", DTypeName(y.dtype), " weights (the dtype of y)"));
  }
  return One(MakeType(y.dtype, {y.dims[0], y.dims[1], y.dims[3]}));
}

Results InferMlaAttention(const KindArgs& a) {
  TP_ASSIGN_OR_RETURN(TensorType out, shape::InferMlaAttention(a, {0, 1, 2, 3, 4, 5}));
  return One(std::move(out));
}

}  // namespace

absl::Status RegisterPrimitiveKinds(KindRegistry& registry) {
  std::vector<KindSpec> specs = {
      {.name = "embedding", .operands = {"ids", "table"}, .infer = InferEmbedding},
      {.name = "rms_norm",
       .operands = {"x", "w"},
       .attrs = {{"eps", AttrType::kFloat}},
       .infer = InferRmsNorm},
      {.name = "linear",
       .operands = {"x", "w", "bias"},
       .optional_operands = 1,
       .infer = InferLinear},
      {.name = "reshape", .operands = {"x"}, .infer = InferReshape},
      {.name = "split",
       .operands = {"x"},
       .attrs = {{"sizes", AttrType::kInts}},
       .infer = InferSplit},
      {.name = "rope",
       .operands = {"x", "positions"},
       .attrs = shape::RopeAttrSpecs(),
       .infer = InferRope},
      {.name = "kv_write", .operands = {"cache", "x", "positions"}, .infer = InferKvWrite},
      {.name = "attention",
       .operands = {"q", "k_cache", "v_cache", "positions"},
       .attrs = shape::AttentionAttrSpecs(),
       .infer = InferAttention},
      {.name = "add", .operands = {"a", "b"}, .infer = InferElementwiseBinary},
      {.name = "mul", .operands = {"a", "b"}, .infer = InferElementwiseBinary},
      {.name = "silu", .operands = {"x"}, .infer = InferSilu},
      {.name = "lm_head", .operands = {"x", "w"}, .infer = InferLmHead},
      {.name = "argmax", .operands = {"logits"}, .infer = InferArgmax},
      {.name = "moe_router", .operands = {"x", "w"}, .infer = InferMoeRouter},
      {.name = "moe_topk",
       .operands = {"logits"},
       .attrs = shape::MoeTopkAttrSpecs(),
       .infer = InferMoeTopk},
      {.name = "expert_linear", .operands = {"x", "ids", "w"}, .infer = InferExpertLinear},
      {.name = "moe_combine", .operands = {"y", "weights"}, .infer = InferMoeCombine},
      {.name = "mla_attention",
       .operands = {"q_nope", "q_rope", "latent_cache", "rope_cache", "w_kv_b", "positions"},
       .attrs = {{"scale", AttrType::kFloat}},
       .infer = InferMlaAttention},
      {.name = "all_reduce",
       .operands = {"x", "bias"},
       .optional_operands = 1,
       .attrs = {{"ranks", AttrType::kInt}},
       .infer = InferAllReduce},
      {.name = "all_gather",
       .operands = {"x"},
       .attrs = {{"ranks", AttrType::kInt}},
       .infer = InferAllGather},
      {.name = "sharded_argmax",
       .operands = {"logits"},
       .attrs = {{"ranks", AttrType::kInt}},
       .infer = InferShardedArgmax},
  };
  for (KindSpec& spec : specs) TP_RETURN_IF_ERROR(registry.Register(std::move(spec)));
  return absl::OkStatus();
}

}  // namespace tileplan::ir
