// Structural and type checking of a Graph (rules listed in docs/ir.md, "Verification").
//
// Verify checks what the parser and the proto reader do not: SSA order, known kinds,
// operand counts and attribute schemas, declared result types and aliasing against the
// kind's inference (regions/kinds.h), in-place hazards, graph outputs, and the bindings
// of weights. The first violation is returned as InvalidArgument naming the offending
// item; a region is named by index, kind and first result, e.g.
//   region #12 'linear' (%l0.q): operand 1 (%w) has type bf16[64,32], expected [N,K]
//   with K = 64
#ifndef TILEPLAN_REGIONS_VERIFIER_H_
#define TILEPLAN_REGIONS_VERIFIER_H_

#include "absl/status/status.h"
#include "regions/ir.h"
#include "regions/kinds.h"

namespace tileplan::ir {

// Verifies against the process-wide kind registry (FindKind).
absl::Status Verify(const Graph& graph);
// Verifies against the given registry.
absl::Status Verify(const Graph& graph, const KindRegistry& kinds);

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_VERIFIER_H_
