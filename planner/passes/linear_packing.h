// Packing of linears that read the same input into one linear on a packed weight, shared
// by pack_qkv and pack_gate_up.
//
// A group [L0, L1, ...] of `linear` regions reading the same x becomes
//   %packed = linear(%x, %w_packed[, %b_packed])          at the position of the first L
//   %r0, %r1, ... = split(%packed) {sizes = [N0, N1, ...]} (views; the old result names)
// where %w_packed binds concat(parts of w0, parts of w1, ...) along dim 0 (docs/ir.md,
// "Packed weights") and replaces the group's weights among the declarations; biases alike.
#ifndef TILEPLAN_PLANNER_PASSES_LINEAR_PACKING_H_
#define TILEPLAN_PLANNER_PASSES_LINEAR_PACKING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/rewriter.h"
#include "regions/ir.h"

namespace tileplan::planner {

// OK when region `index` is a linear whose weight (and bias, if any) is a weight
// declaration read by no other region and not a graph output, so that it can be packed;
// otherwise FailedPrecondition saying why, naming the region and the value.
absl::Status CheckPackable(const ir::Graph& graph, const UseMap& uses, int index);

// OK when `group` (two or more region indices, in packed order) can be packed together:
// every member is packable and distinct, all read the same x, their weights share a dtype,
// and either all or none have a bias. Otherwise FailedPrecondition naming the two regions
// that disagree and how.
absl::Status CheckPackGroup(const ir::Graph& graph, const UseMap& uses,
                            const std::vector<int>& group);

// Records in `rewriter` the packing of `group`. REQUIRES: CheckPackGroup(group) is OK and no
// member was claimed in `rewriter` before.
absl::Status PackLinearGroup(const std::vector<int>& group, GraphRewriter& rewriter);

// Declares in `rewriter` the packed weight PackLinearGroup makes for `group` (the members'
// weights concatenated in order, named by PackedName of their names) in place of the members'
// weights, for a pass that fuses the group into another region; returns its key for
// RegionEmitter::NewWeight. REQUIRES: CheckPackGroup(group) is OK.
absl::StatusOr<int> PackGroupWeights(const std::vector<int>& group, GraphRewriter& rewriter);

// The name of a packed value made of values named `names`: their common prefix (cut after
// its last '.' or '_') and common suffix (cut at its first '.' or '_') around the differing
// middles, joined directly when each middle is one character and with '_' otherwise:
//   l0.q, l0.k, l0.v                          -> l0.qkv
//   m.layers.0.mlp.gate_proj.weight, m.layers.0.mlp.up_proj.weight
//                                             -> m.layers.0.mlp.gate_up_proj.weight
// When some middle would be empty the whole names are joined with '_'.
std::string PackedName(const std::vector<std::string>& names);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PASSES_LINEAR_PACKING_H_
