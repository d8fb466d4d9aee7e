#include "tools/flag_types.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tileplan::tools {

bool AbslParseFlag(absl::string_view text, PositiveInt* out, std::string* error) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v <= 0) {
    *error = "needs a positive integer";
    return false;
  }
  out->value = v;
  return true;
}

std::string AbslUnparseFlag(const PositiveInt& v) { return absl::StrCat(v.value); }

bool AbslParseFlag(absl::string_view text, PositiveList* out, std::string* error) {
  PositiveList list;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    PositiveInt v;
    if (!AbslParseFlag(part, &v, error)) {
      *error = "needs positive integers separated by commas";
      return false;
    }
    list.values.push_back(v.value);
  }
  *out = std::move(list);
  return true;
}

std::string AbslUnparseFlag(const PositiveList& list) { return absl::StrJoin(list.values, ","); }

}  // namespace tileplan::tools
