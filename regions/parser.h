// Parses the IR text form (grammar in docs/ir.md, "Text format") into a Graph.
//
// Parsing is syntactic: it resolves every %name to a value defined on an earlier line
// (graph inputs, weights and states, or region results) and rejects duplicates, but it does
// not know region kinds, attribute schemas or typing rules; run Verify (regions/verifier.h)
// on the result for those. Errors are InvalidArgument "line:column: message" naming what
// was expected and what was found. Any input, including arbitrary bytes, yields a graph or
// an error.
#ifndef TILEPLAN_REGIONS_PARSER_H_
#define TILEPLAN_REGIONS_PARSER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::ir {

// Values are created in the order they are defined in the text, so the graph's value ids
// follow the text.
absl::StatusOr<Graph> ParseGraph(absl::string_view text);

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_PARSER_H_
