// Helpers shared by the kernel-description tests.
#ifndef TILEPLAN_TESTS_KERNELS_KERNELS_TESTING_H_
#define TILEPLAN_TESTS_KERNELS_KERNELS_TESTING_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "regions/ir.h"

namespace tileplan::kernels::testing {

// Parses and verifies IR text; a gtest failure and an empty graph when it does not.
ir::Graph MustParseVerified(absl::string_view text);
// tests/kernels/testdata/<name>, parsed and verified.
ir::Graph TestGraph(absl::string_view name);
// BoundGraph::Create that must succeed.
BoundGraph MustBind(const ir::Graph& graph, ShapeBindings bindings, int64_t context);
// The index of the first region whose first result is %name (-1 and a gtest failure when
// there is none).
int RegionNamed(const ir::Graph& graph, absl::string_view name);
// A bundled target that must exist.
TargetDescription MustTarget(absl::string_view name);
// Appends every combination of `tunables` (odometer order, the first fastest) to `out`, as
// tactics of `family` at `version`.
void TunableProduct(const std::string& family, int32_t version,
                    const std::vector<TunableParam>& tunables, std::vector<Tactic>& out);

}  // namespace tileplan::kernels::testing

#endif  // TILEPLAN_TESTS_KERNELS_KERNELS_TESTING_H_
