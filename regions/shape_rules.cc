#include "regions/shape_rules.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "regions/printer.h"

namespace tileplan::ir::shape {
namespace {

absl::string_view ElementPrefix(Element element) {
  switch (element) {
    case Element::kFloat:
      return "a floating-point tensor ";
    case Element::kI32:
      return "i32";
    case Element::kF32:
      return "f32";
    case Element::kAny:
      return "";
  }
  return "";
}

bool ElementMatches(Element element, DType dtype) {
  switch (element) {
    case Element::kFloat:
      return IsFloat(dtype);
    case Element::kI32:
      return dtype == DType::kI32;
    case Element::kF32:
      return dtype == DType::kF32;
    case Element::kAny:
      return true;
  }
  return false;
}

}  // namespace

std::vector<InferredResult> One(TensorType type, ResultAlias alias) {
  return {InferredResult{std::move(type), alias}};
}

std::vector<Dim> WithLast(std::vector<Dim> dims, const Dim& last) {
  dims.back() = last;
  return dims;
}

bool DimsMatch(const Dim& a, const Dim& b) {
  if (a.is_static() != b.is_static()) return false;
  return a.is_static() ? a.extent() == b.extent() : a.symbol() == b.symbol();
}

bool IsFloat(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

std::string Pattern(absl::string_view dims,
                    std::initializer_list<std::pair<absl::string_view, Dim>> bindings) {
  std::string out(dims);
  const char* sep = " with ";
  for (const auto& [name, dim] : bindings) {
    absl::StrAppend(&out, sep, name, " = ", dim.ToString());
    sep = ", ";
  }
  return out;
}

absl::Status ExpectRank(const KindArgs& args, int index, Element element, int rank,
                        absl::string_view pattern) {
  const TensorType& t = args.operands[index];
  if (!ElementMatches(element, t.dtype) || t.rank() != rank) {
    return args.OperandError(index, absl::StrCat(ElementPrefix(element), pattern));
  }
  return absl::OkStatus();
}

absl::Status ExpectMinRank(const KindArgs& args, int index, Element element, int min_rank,
                           absl::string_view pattern) {
  const TensorType& t = args.operands[index];
  if (!ElementMatches(element, t.dtype) || t.rank() < min_rank) {
    return args.OperandError(index, absl::StrCat(ElementPrefix(element), pattern));
  }
  return absl::OkStatus();
}

absl::Status ExpectSameDType(const KindArgs& args, int index, int other,
                             absl::string_view pattern) {
  const DType want = args.operands[other].dtype;
  if (args.operands[index].dtype != want) {
    return args.OperandError(index, absl::StrCat(DTypeName(want), pattern, " (the dtype of ",
                                                 args.OperandLabel(other), ")"));
  }
  return absl::OkStatus();
}

absl::Status ExpectDim(const KindArgs& args, int index, int axis, const Dim& want,
                       absl::string_view pattern, absl::string_view name) {
  if (!DimsMatch(args.operands[index].dims[axis], want)) {
    return args.OperandError(index, Pattern(pattern, {{name, want}}));
  }
  return absl::OkStatus();
}

absl::Status ExpectSameType(const KindArgs& args, int index, int other) {
  if (!(args.operands[index] == args.operands[other])) {
    return args.OperandError(index, absl::StrCat(args.operands[other].ToString(), " (the type of ",
                                                 args.OperandLabel(other), ")"));
  }
  return absl::OkStatus();
}

absl::Status ExpectPositions(const KindArgs& args, int index, const Dim& b, const Dim& t) {
  TP_RETURN_IF_ERROR(ExpectRank(args, index, Element::kI32, 2, "[B,T]"));
  if (!DimsMatch(args.operands[index].dims[0], b) || !DimsMatch(args.operands[index].dims[1], t)) {
    return args.OperandError(index, Pattern("i32[B,T]", {{"B", b}, {"T", t}}));
  }
  return absl::OkStatus();
}

absl::Status AttrError(absl::string_view key, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", key, "' is ", value, ", expected ", expected));
}

absl::StatusOr<double> FloatAttr(const Attributes& attrs, absl::string_view key,
                                 const std::function<bool(double)>& ok,
                                 absl::string_view expected) {
  TP_ASSIGN_OR_RETURN(double v, attrs.GetFloat(key));
  if (!std::isfinite(v) || !ok(v)) return AttrError(key, PrintAttrValue(v), expected);
  return v;
}

std::vector<AttrSpec> RopeAttrSpecs() {
  return {{"theta", AttrType::kFloat},
          {"rope_type", AttrType::kString},
          {"factor", AttrType::kFloat, false},
          {"low_freq_factor", AttrType::kFloat, false},
          {"high_freq_factor", AttrType::kFloat, false},
          {"original_max_position_embeddings", AttrType::kInt, false},
          {"beta_fast", AttrType::kFloat, false},
          {"beta_slow", AttrType::kFloat, false},
          {"attention_factor", AttrType::kFloat, false},
          {"truncate", AttrType::kBool, false},
          {"interleaved", AttrType::kBool, false}};
}

absl::Status CheckRopeAttrs(const Attributes& attrs) {
  TP_RETURN_IF_ERROR(FloatAttr(
                         attrs, "theta", [](double v) { return v > 0; }, "a finite float > 0")
                         .status());
  TP_ASSIGN_OR_RETURN(std::string type, attrs.GetString("rope_type"));
  // The keys each rope_type requires; every other optional key but `interleaved` is refused.
  const std::vector<absl::string_view>* required = nullptr;
  static const std::vector<absl::string_view> kNone;
  static const std::vector<absl::string_view> kLlama3 = {
      "factor", "high_freq_factor", "low_freq_factor", "original_max_position_embeddings"};
  static const std::vector<absl::string_view> kYarn = {
      "attention_factor", "beta_fast", "beta_slow", "factor", "original_max_position_embeddings",
      "truncate"};
  if (type == "default") {
    required = &kNone;
  } else if (type == "llama3") {
    required = &kLlama3;
  } else if (type == "yarn") {
    required = &kYarn;
  } else {
    return AttrError("rope_type", PrintAttrValue(type), "\"default\", \"llama3\" or \"yarn\"");
  }
  for (absl::string_view key : *required) {
    if (!attrs.Has(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing attribute '", key, "', required by rope_type \"", type, "\""));
    }
  }
  for (const AttrSpec& spec : RopeAttrSpecs()) {
    if (spec.required || spec.key == "interleaved" || !attrs.Has(spec.key)) continue;
    if (std::find(required->begin(), required->end(), spec.key) == required->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", spec.key, "' does not apply to rope_type \"", type, "\""));
    }
  }
  if (type == "default") return absl::OkStatus();
  auto positive = [](double v) { return v > 0; };
  TP_ASSIGN_OR_RETURN(int64_t original, attrs.GetInt("original_max_position_embeddings"));
  if (original <= 0) {
    return AttrError("original_max_position_embeddings", PrintAttrValue(original), "> 0");
  }
  if (type == "yarn") {
    TP_RETURN_IF_ERROR(FloatAttr(
                           attrs, "factor", [](double v) { return v >= 1; }, "a finite float >= 1")
                           .status());
    TP_RETURN_IF_ERROR(FloatAttr(attrs, "beta_fast", positive, "a finite float > 0").status());
    TP_RETURN_IF_ERROR(FloatAttr(attrs, "beta_slow", positive, "a finite float > 0").status());
    return FloatAttr(attrs, "attention_factor", positive, "a finite float > 0").status();
  }
  TP_RETURN_IF_ERROR(FloatAttr(attrs, "factor", positive, "a finite float > 0").status());
  TP_ASSIGN_OR_RETURN(double low,
                      FloatAttr(attrs, "low_freq_factor", positive, "a finite float > 0"));
  return FloatAttr(
             attrs, "high_freq_factor", [low](double v) { return v > low; },
             absl::StrCat("a finite float > low_freq_factor = ", PrintAttrValue(low)))
      .status();
}

std::vector<AttrSpec> AttentionAttrSpecs() {
  return {{"scale", AttrType::kFloat}, {"sliding_window", AttrType::kInt}};
}

absl::Status CheckAttentionAttrs(const Attributes& attrs) {
  TP_RETURN_IF_ERROR(FloatAttr(
                         attrs, "scale", [](double) { return true; }, "a finite float")
                         .status());
  TP_ASSIGN_OR_RETURN(int64_t window, attrs.GetInt("sliding_window"));
  if (window < 0) {
    return AttrError("sliding_window", PrintAttrValue(window), ">= 0 (0 = no window)");
  }
  return absl::OkStatus();
}

std::vector<AttrSpec> MoeTopkAttrSpecs() {
  return {{"top_k", AttrType::kInt},
          {"norm_topk_prob", AttrType::kBool},
          {"scaling", AttrType::kFloat},
          {"num_groups", AttrType::kInt},
          {"topk_groups", AttrType::kInt}};
}

absl::StatusOr<int64_t> CheckMoeTopkAttrs(const Attributes& attrs, int64_t experts) {
  TP_ASSIGN_OR_RETURN(int64_t groups, attrs.GetInt("num_groups"));
  if (groups < 1 || experts % groups != 0) {
    return AttrError("num_groups", PrintAttrValue(groups),
                     absl::StrCat("a divisor of E = ", experts));
  }
  TP_ASSIGN_OR_RETURN(int64_t topk_groups, attrs.GetInt("topk_groups"));
  if (topk_groups < 1 || topk_groups > groups) {
    return AttrError("topk_groups", PrintAttrValue(topk_groups),
                     absl::StrCat("1 ... num_groups = ", groups));
  }
  TP_ASSIGN_OR_RETURN(int64_t k, attrs.GetInt("top_k"));
  const int64_t candidates = topk_groups * (experts / groups);
  if (k < 1 || k > candidates) {
    return AttrError("top_k", PrintAttrValue(k),
                     absl::StrCat("1 ... ", candidates,
                                  " (the experts of the topk_groups best "
                                  "groups)"));
  }
  TP_RETURN_IF_ERROR(FloatAttr(
                         attrs, "scaling", [](double v) { return v > 0; }, "a finite float > 0")
                         .status());
  TP_RETURN_IF_ERROR(attrs.GetBool("norm_topk_prob").status());
  return k;
}

absl::StatusOr<TensorType> InferMlaAttention(const KindArgs& a, const std::array<int, 6>& at) {
  TP_RETURN_IF_ERROR(ExpectRank(a, at[0], Element::kFloat, 4, "[B,T,Hq,Dn]"));
  const TensorType& q_nope = a.operands[static_cast<size_t>(at[0])];
  const Dim& b = q_nope.dims[0];
  const Dim& t = q_nope.dims[1];
  const Dim& hq = q_nope.dims[2];
  const Dim& dn = q_nope.dims[3];
  if (!hq.is_static() || hq.extent() == 0 || !dn.is_static()) {
    return a.OperandError(at[0], "a floating-point tensor [B,T,Hq,Dn] with Hq, Dn static, Hq > 0");
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, at[1], Element::kFloat, 4, "[B,T,Hq,Dr]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, at[1], at[0], "[B,T,Hq,Dr]"));
  const TensorType& q_rope = a.operands[static_cast<size_t>(at[1])];
  if (!DimsMatch(q_rope.dims[0], b) || !DimsMatch(q_rope.dims[1], t) ||
      !DimsMatch(q_rope.dims[2], hq)) {
    return a.OperandError(at[1], shape::Pattern("[B,T,Hq,Dr]", {{"B", b}, {"T", t}, {"Hq", hq}}));
  }
  const Dim& dr = q_rope.dims[3];
  TP_RETURN_IF_ERROR(ExpectRank(a, at[2], Element::kFloat, 4, "[B,1,Smax,C]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, at[2], at[0], "[B,1,Smax,C]"));
  const TensorType& latent = a.operands[static_cast<size_t>(at[2])];
  if (!DimsMatch(latent.dims[0], b) || !DimsMatch(latent.dims[1], Dim::Static(1))) {
    return a.OperandError(at[2], shape::Pattern("[B,1,Smax,C]", {{"B", b}}));
  }
  const Dim& smax = latent.dims[2];
  const Dim& c = latent.dims[3];
  TP_RETURN_IF_ERROR(ExpectRank(a, at[3], Element::kFloat, 4, "[B,1,Smax,Dr]"));
  TP_RETURN_IF_ERROR(ExpectSameDType(a, at[3], at[0], "[B,1,Smax,Dr]"));
  const TensorType& rope = a.operands[static_cast<size_t>(at[3])];
  if (!DimsMatch(rope.dims[0], b) || !DimsMatch(rope.dims[1], Dim::Static(1)) ||
      !DimsMatch(rope.dims[2], smax) || !DimsMatch(rope.dims[3], dr)) {
    return a.OperandError(at[3],
                          shape::Pattern("[B,1,Smax,Dr]", {{"B", b}, {"Smax", smax}, {"Dr", dr}}));
  }
  TP_RETURN_IF_ERROR(ExpectRank(a, at[4], Element::kFloat, 2, "[Hq*(Dn+Dv),C]"));
  TP_RETURN_IF_ERROR(ExpectDim(a, at[4], 1, c, "[Hq*(Dn+Dv),C]", "C"));
  const Dim& rows = a.operands[static_cast<size_t>(at[4])].dims[0];
  const int64_t heads = hq.extent();
  if (!rows.is_static() || rows.extent() % heads != 0 || rows.extent() / heads <= dn.extent()) {
    return a.OperandError(at[4], absl::StrCat("[Hq*(Dn+Dv),C] with Hq = ", heads,
                                              ", Dn = ", dn.extent(), " and Dv > 0"));
  }
  const int64_t dv = rows.extent() / heads - dn.extent();
  TP_RETURN_IF_ERROR(ExpectPositions(a, at[5], b, t));
  TP_RETURN_IF_ERROR(FloatAttr(
                         a.attrs, "scale", [](double) { return true; }, "a finite float")
                         .status());
  return MakeType(q_nope.dtype, {b, t, hq, Dim::Static(dv)});
}

}  // namespace tileplan::ir::shape
