#include "base/text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

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

}  // namespace tileplan
