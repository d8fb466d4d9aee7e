// Prints the IR in its text form (grammar in docs/ir.md, "Text format").
//
// The output is deterministic: declarations in value-id order, then regions in execution
// order, then outputs; attributes sorted by key; floats in shortest round-trip form. For a
// graph that passes Verify, ParseGraph(PrintGraph(g)) rebuilds g (regions/parser.h) and
// printing that again gives the same text. Printing never fails: an id out of range (only
// possible in a graph that does not verify) prints as a marker the parser rejects.
#ifndef TILEPLAN_REGIONS_PRINTER_H_
#define TILEPLAN_REGIONS_PRINTER_H_

#include <string>

#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::ir {

// The whole graph, one item per line, ending with a newline.
std::string PrintGraph(const Graph& graph);

// One region as its line in PrintGraph, without indentation or newline, e.g.
// "%y: f32[B,T,256] = lm_head(%x, %embed) phase(decode)".
std::string PrintRegion(const Graph& graph, const Region& region);

// An attribute literal: 3, -2.5, 1e-06, inf, nan, true, "a\"b", [1, 2], [0.5], ints[],
// floats[]. NaN prints as "nan" whatever its sign and payload.
std::string PrintAttrValue(const AttrValue& value);

// A double in shortest round-trip form that always reads back as a float: it contains a
// '.' or an exponent, or is one of inf, -inf, nan.
std::string PrintFloat(double value);

// A double-quoted string literal: printable ASCII other than '"' and '\' as is, \" \\ \n
// \t for those, \xHH (two lower-case hex digits) for every other byte.
std::string QuoteString(absl::string_view s);

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_PRINTER_H_
