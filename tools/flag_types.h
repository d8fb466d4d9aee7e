// Value types of the tools' Abseil flags (absl/flags/marshalling.h): a positive integer and a
// comma-separated list of them. A value its type refuses is a usage error naming the flag
// (tools/flags.h), with the reason AbslParseFlag gives.
#ifndef TILEPLAN_TOOLS_FLAG_TYPES_H_
#define TILEPLAN_TOOLS_FLAG_TYPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tileplan::tools {

// "--batch 16": an integer >= 1.
struct PositiveInt {
  int64_t value = 1;
};
bool AbslParseFlag(absl::string_view text, PositiveInt* out, std::string* error);
std::string AbslUnparseFlag(const PositiveInt& v);

// "--prefill 128,512": one or more integers >= 1, separated by commas, in the order given.
// The one list type of every flag that takes several numbers.
struct PositiveList {
  std::vector<int64_t> values;
};
bool AbslParseFlag(absl::string_view text, PositiveList* out, std::string* error);
std::string AbslUnparseFlag(const PositiveList& list);

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_FLAG_TYPES_H_
