// Seeded random graphs for the round-trip and mutation tests.
#ifndef TILEPLAN_TESTS_REGIONS_RANDOM_GRAPH_H_
#define TILEPLAN_TESTS_REGIONS_RANDOM_GRAPH_H_

#include <cstdint>

#include "regions/ir.h"

namespace tileplan::ir::testing {

// A graph that passes Verify: 1 to 30 random primitive and fused regions over random valid
// shapes (static and symbolic dims), operands reused from earlier regions where their types
// fit, KV-cache updates that respect the in-place rules, attributes drawn from tricky finite
// floats, random fused_from lists, weights (some packed) bound to checkpoint names full of
// quotes, escapes and non-ASCII bytes.
Graph RandomValidGraph(uint64_t seed);

// A graph of regions of made-up kinds with random operands, results, aliases, phases,
// fused_from lists (identifiers that are keywords elsewhere), weights bound to one or more
// checkpoint tensors, and attributes of every type (inf, nan, -0.0, subnormals, random bit
// patterns, int64 extremes, arbitrary bytes in strings, empty lists). It prints and parses
// but does not verify.
Graph RandomAttributeGraph(uint64_t seed);

}  // namespace tileplan::ir::testing

#endif  // TILEPLAN_TESTS_REGIONS_RANDOM_GRAPH_H_
