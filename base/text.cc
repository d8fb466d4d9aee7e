#include "base/text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tileplan {

std::string QuoteUntrusted(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::StrCat("\"", absl::CHexEscape(text), "\"");
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, max_bytes)), "\"... (", text.size(),
                      " bytes)");
}

std::string QuoteList(const std::vector<std::string>& items, size_t max_items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", QuoteUntrusted(items[i]));
  }
  if (items.size() > max_items) absl::StrAppend(&out, " and ", items.size() - max_items, " more");
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::string IndexString(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return ShapeString(index);
}

}  // namespace tileplan
