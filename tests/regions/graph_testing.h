// Helpers shared by the regions tests: structural graph comparison and test data access.
#ifndef TILEPLAN_TESTS_REGIONS_GRAPH_TESTING_H_
#define TILEPLAN_TESTS_REGIONS_GRAPH_TESTING_H_

#include <string>

#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::ir::testing {

// Adds a gtest failure for every difference between `a` and `b`, comparing values by name
// (so value ids may differ), regions in order, attributes with floats compared bit for bit
// except that any two NaNs are equal.
void ExpectSameGraph(const Graph& a, const Graph& b);

// Bitwise equality of attribute maps, NaNs equal to each other.
bool SameAttributes(const Attributes& a, const Attributes& b);

// Contents of tests/regions/testdata/<name>; a gtest failure and "" when unreadable.
std::string ReadTestData(absl::string_view name);

// ParseGraph that must succeed (gtest failure otherwise; returns an empty graph then).
Graph MustParse(absl::string_view text);

}  // namespace tileplan::ir::testing

#endif  // TILEPLAN_TESTS_REGIONS_GRAPH_TESTING_H_
