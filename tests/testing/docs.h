// The names a doc under docs/ lists, for tests that keep a doc and the code equal.
#ifndef TILEPLAN_TESTS_TESTING_DOCS_H_
#define TILEPLAN_TESTS_TESTING_DOCS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tileplan::testing {

// The names listed in one section of `doc` (a path under the source tree, e.g.
// "docs/ir.md"): on each line of the section that starts with `item_prefix` ("| `" for a
// table's first column, "- `" for a list), the text from there to the next backquote, in the
// doc's order. The section runs from the line equal to `heading` ("## Region kinds") to the
// next heading of its level or above. A gtest failure when the doc cannot be read or has no
// such heading.
std::vector<std::string> DocumentedNames(absl::string_view doc, absl::string_view heading,
                                         absl::string_view item_prefix);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_DOCS_H_
