#include "regions/syntax.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tileplan::ir {

bool IsValueName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

bool IsIdentifier(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

absl::Status CheckTypeWellFormed(const TensorType& type) {
  switch (type.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kI32:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype enumerator ", static_cast<int>(type.dtype), " is not a dtype"));
  }
  for (size_t i = 0; i < type.dims.size(); ++i) {
    const Dim& d = type.dims[i];
    if (d.is_static() && d.extent() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim ", i, " has negative extent ", d.extent()));
    }
    if (!d.is_static() && !IsIdentifier(d.symbol())) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim ", i, " symbol '", d.symbol(), "' is not an identifier"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tileplan::ir
