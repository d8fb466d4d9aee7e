#include "regions/shape_rules.h"

#include "absl/strings/str_cat.h"

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

absl::Status AttrError(absl::string_view key, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", key, "' is ", value, ", expected ", expected));
}

}  // namespace tileplan::ir::shape
