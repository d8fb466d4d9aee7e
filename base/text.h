// Text for messages: names from files (a tensor name or a config key can hold terminal escape
// codes or run to megabytes, so every message shows it escaped and cut), shapes and indices.
#ifndef TILEPLAN_BASE_TEXT_H_
#define TILEPLAN_BASE_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tileplan {

// `text` in double quotes, every byte outside printable ASCII (and '"', '\'', '\\') escaped as C
// does ("\x1b", "\n"), and, when longer than `max_bytes`, cut to its first `max_bytes` bytes
// followed by "... (N bytes)".
std::string QuoteUntrusted(absl::string_view text, size_t max_bytes = 120);

// The first `max_items` of `items`, each QuoteUntrusted, joined by ", ", then "and N more"
// when some were left out.
std::string QuoteList(const std::vector<std::string>& items, size_t max_items = 8);

// "[2,3,4]".
std::string ShapeString(const std::vector<int64_t>& shape);

// The multi-index of row-major element `flat` in `shape`, e.g. "[0,3]".
std::string IndexString(int64_t flat, const std::vector<int64_t>& shape);

}  // namespace tileplan

#endif  // TILEPLAN_BASE_TEXT_H_
