// Lexical rules for IR names and well-formedness of tensor types, shared by the text
// parser and printer, the proto reader and the verifier (docs/ir.md, "Text format").
#ifndef TILEPLAN_REGIONS_SYNTAX_H_
#define TILEPLAN_REGIONS_SYNTAX_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::ir {

// Value and graph names: [A-Za-z0-9_.]+ (written after '%' or '@' in the text form).
bool IsValueName(absl::string_view name);

// Symbols, region kinds and attribute keys: [A-Za-z_][A-Za-z0-9_]*.
bool IsIdentifier(absl::string_view name);

// OK when the dtype is one of the enumerators, every static extent is >= 0 and every
// symbol is an identifier; otherwise InvalidArgument naming the offending dim.
absl::Status CheckTypeWellFormed(const TensorType& type);

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_SYNTAX_H_
