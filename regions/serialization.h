// Conversion between the in-memory IR (regions/ir.h) and its proto form (regions/ir.proto).
#ifndef TILEPLAN_REGIONS_SERIALIZATION_H_
#define TILEPLAN_REGIONS_SERIALIZATION_H_

#include "absl/status/statusor.h"
#include "regions/ir.h"
#include "regions/ir.pb.h"

namespace tileplan::ir {

// Declarations are written in value-id order, so value ids are renumbered to the proto's
// numbering (declarations first, then region results); for a graph whose declarations come
// before its regions (what the parser and GraphFromProto build) the numbering is the same.
// InvalidArgument when the graph refers to a value or operand that does not exist.
absl::StatusOr<proto::Graph> GraphToProto(const Graph& graph);

// Rebuilds a graph, checking structure only: enums and oneofs set to known values, dims
// well formed, names well formed and unique, value ids in range and defined before use,
// alias operands in range, attribute keys unique identifiers. Kinds, attribute schemas
// and types are the verifier's business. Never crashes on a malformed message; errors
// name the offending field (e.g. "regions[3].operands[1]").
absl::StatusOr<Graph> GraphFromProto(const proto::Graph& message);

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_SERIALIZATION_H_
