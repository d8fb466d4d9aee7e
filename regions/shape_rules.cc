#include "regions/shape_rules.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "regions/printer.h"

namespace tileplan::ir::shape {
namespace {

constexpr absl::string_view kRopeLlama3Keys[] = {"factor", "high_freq_factor", "low_freq_factor",
                                                 "original_max_position_embeddings"};

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
          {"original_max_position_embeddings", AttrType::kInt, false}};
}

absl::Status CheckRopeAttrs(const Attributes& attrs) {
  TP_RETURN_IF_ERROR(FloatAttr(
                         attrs, "theta", [](double v) { return v > 0; }, "a finite float > 0")
                         .status());
  TP_ASSIGN_OR_RETURN(std::string type, attrs.GetString("rope_type"));
  if (type == "default") {
    for (absl::string_view key : kRopeLlama3Keys) {
      if (attrs.Has(key)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attribute '", key, "' applies only to rope_type \"llama3\", not \"default\""));
      }
    }
    return absl::OkStatus();
  }
  if (type != "llama3") {
    return AttrError("rope_type", PrintAttrValue(type), "\"default\" or \"llama3\"");
  }
  for (absl::string_view key : kRopeLlama3Keys) {
    if (!attrs.Has(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing attribute '", key, "', required by rope_type \"llama3\""));
    }
  }
  auto positive = [](double v) { return v > 0; };
  TP_RETURN_IF_ERROR(FloatAttr(attrs, "factor", positive, "a finite float > 0").status());
  TP_ASSIGN_OR_RETURN(double low,
                      FloatAttr(attrs, "low_freq_factor", positive, "a finite float > 0"));
  TP_RETURN_IF_ERROR(FloatAttr(
                         attrs, "high_freq_factor", [low](double v) { return v > low; },
                         absl::StrCat("a finite float > low_freq_factor = ", PrintAttrValue(low)))
                         .status());
  TP_ASSIGN_OR_RETURN(int64_t original, attrs.GetInt("original_max_position_embeddings"));
  if (original <= 0) {
    return AttrError("original_max_position_embeddings", PrintAttrValue(original), "> 0");
  }
  return absl::OkStatus();
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

}  // namespace tileplan::ir::shape
