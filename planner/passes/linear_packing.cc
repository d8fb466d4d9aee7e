#include "planner/passes/linear_packing.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::planner {
namespace {

bool IsSeparator(char c) { return c == '.' || c == '_'; }

// A weight declaration read only by region `index`, as operand `operand`.
absl::Status CheckOwnedWeight(const ir::Graph& graph, const UseMap& uses, int index, int operand,
                              absl::string_view role) {
  const ir::Region& r = graph.regions()[static_cast<size_t>(index)];
  const ir::ValueId w = r.operands[static_cast<size_t>(operand)];
  const ir::Value& v = graph.value(w);
  if (v.kind != ir::ValueKind::kWeight) {
    return absl::FailedPreconditionError(absl::StrCat(RegionLabel(graph, index), ": its ", role,
                                                      " %", v.name,
                                                      " is computed, not a weight declaration"));
  }
  if (uses.SoleUser(w) != index) {
    return absl::FailedPreconditionError(
        absl::StrCat(RegionLabel(graph, index), ": its ", role, " %", v.name,
                     " is also read elsewhere, so it cannot move into a packed weight"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPackable(const ir::Graph& graph, const UseMap& uses, int index) {
  const ir::Region& r = graph.regions()[static_cast<size_t>(index)];
  if (r.kind != "linear") {
    return absl::FailedPreconditionError(
        absl::StrCat(RegionLabel(graph, index), " is not a linear"));
  }
  TP_RETURN_IF_ERROR(CheckOwnedWeight(graph, uses, index, 1, "weight"));
  if (r.operands.size() > 2) TP_RETURN_IF_ERROR(CheckOwnedWeight(graph, uses, index, 2, "bias"));
  return absl::OkStatus();
}

absl::Status CheckPackGroup(const ir::Graph& graph, const UseMap& uses,
                            const std::vector<int>& group) {
  if (group.size() < 2) {
    return absl::FailedPreconditionError("a packed group needs two or more linears");
  }
  std::set<int> seen;
  const ir::Region& first = graph.regions()[static_cast<size_t>(group[0])];
  for (int index : group) {
    TP_RETURN_IF_ERROR(CheckPackable(graph, uses, index));
    if (!seen.insert(index).second) {
      return absl::FailedPreconditionError(
          absl::StrCat(RegionLabel(graph, index), " appears twice in one packed group"));
    }
    const ir::Region& r = graph.regions()[static_cast<size_t>(index)];
    const std::string pair = absl::StrCat("cannot pack ", RegionLabel(graph, index), " with ",
                                          RegionLabel(graph, group[0]), ": ");
    if (r.operands[0] != first.operands[0]) {
      return absl::FailedPreconditionError(absl::StrCat(pair, "they read different inputs"));
    }
    const ir::DType dtype = graph.value(r.operands[1]).type.dtype;
    const ir::DType first_dtype = graph.value(first.operands[1]).type.dtype;
    if (dtype != first_dtype) {
      return absl::FailedPreconditionError(absl::StrCat(pair, "its weight is ",
                                                        ir::DTypeName(dtype), ", the other's ",
                                                        ir::DTypeName(first_dtype)));
    }
    if ((r.operands.size() > 2) != (first.operands.size() > 2)) {
      return absl::FailedPreconditionError(
          absl::StrCat(pair,
                       r.operands.size() > 2 ? "it has a bias and the other has none"
                                             : "it has no bias and the other has one",
                       " (a packed group is biased all or none)"));
    }
  }
  return absl::OkStatus();
}

std::string PackedName(const std::vector<std::string>& names) {
  size_t prefix = names[0].size();
  size_t suffix = names[0].size();
  for (const std::string& n : names) {
    prefix = std::min(prefix, n.size());
    suffix = std::min(suffix, n.size());
  }
  for (const std::string& n : names) {
    size_t p = 0;
    while (p < prefix && n[p] == names[0][p]) ++p;
    prefix = p;
  }
  while (prefix > 0 && !IsSeparator(names[0][prefix - 1])) --prefix;
  for (const std::string& n : names) {
    size_t s = 0;
    while (s < suffix && s + prefix < n.size() &&
           n[n.size() - 1 - s] == names[0][names[0].size() - 1 - s]) {
      ++s;
    }
    suffix = s;
  }
  while (suffix > 0 && !IsSeparator(names[0][names[0].size() - suffix])) --suffix;
  std::vector<std::string> middles;
  bool single_chars = true;
  for (const std::string& n : names) {
    if (n.size() < prefix + suffix + 1) return absl::StrJoin(names, "_");
    middles.push_back(n.substr(prefix, n.size() - prefix - suffix));
    single_chars = single_chars && middles.back().size() == 1;
  }
  return absl::StrCat(names[0].substr(0, prefix), absl::StrJoin(middles, single_chars ? "" : "_"),
                      names[0].substr(names[0].size() - suffix));
}

// Appends weight `w`'s checkpoint tensors and their slices (docs/ir.md, "Sliced weights") to a
// packed weight's lists.
void AppendParts(const ir::Value& w, std::vector<std::string>& parts,
                 std::vector<ir::TensorSlice>& slices) {
  for (size_t k = 0; k < w.checkpoint_tensors.size(); ++k) {
    parts.push_back(w.checkpoint_tensors[k]);
    slices.push_back(w.slice(k));
  }
}

absl::StatusOr<int> PackGroupWeights(const std::vector<int>& group, GraphRewriter& rewriter) {
  const ir::Graph& g = rewriter.source();
  std::vector<ir::ValueId> weights;
  std::vector<std::string> names, parts;
  std::vector<ir::TensorSlice> slices;
  int64_t rows = 0;
  for (int index : group) {
    const ir::ValueId id = g.regions()[static_cast<size_t>(index)].operands[1];
    const ir::Value& w = g.value(id);
    weights.push_back(id);
    names.push_back(w.name);
    AppendParts(w, parts, slices);
    rows += w.type.dims[0].extent();
  }
  ir::TensorType type = g.value(weights[0]).type;
  type.dims[0] = ir::Dim::Static(rows);
  return rewriter.ReplaceWeights(weights, rewriter.UniqueName(PackedName(names)), type,
                                 std::move(parts), std::move(slices));
}

absl::Status PackLinearGroup(const std::vector<int>& group, GraphRewriter& rewriter) {
  const ir::Graph& g = rewriter.source();
  const ir::Region& first = g.regions()[static_cast<size_t>(group[0])];
  const bool biased = first.operands.size() > 2;

  std::vector<ir::ValueId> biases, results;
  std::vector<std::string> bias_names, result_names, bias_parts;
  std::vector<ir::TensorSlice> bias_slices;
  std::vector<int64_t> sizes;
  int64_t rows = 0;
  for (int index : group) {
    const ir::Region& r = g.regions()[static_cast<size_t>(index)];
    const ir::Value& w = g.value(r.operands[1]);
    if (biased) {
      const ir::Value& b = g.value(r.operands[2]);
      biases.push_back(r.operands[2]);
      bias_names.push_back(b.name);
      AppendParts(b, bias_parts, bias_slices);
    }
    results.push_back(r.results[0]);
    result_names.push_back(g.value(r.results[0]).name);
    sizes.push_back(w.type.dims[0].extent());
    rows += sizes.back();
  }

  TP_ASSIGN_OR_RETURN(const int weight_key, PackGroupWeights(group, rewriter));
  int bias_key = -1;
  if (biased) {
    ir::TensorType bias_type = g.value(first.operands[2]).type;
    bias_type.dims[0] = ir::Dim::Static(rows);
    TP_ASSIGN_OR_RETURN(bias_key, rewriter.ReplaceWeights(
                                      biases, rewriter.UniqueName(PackedName(bias_names)),
                                      bias_type, std::move(bias_parts), std::move(bias_slices)));
  }
  ir::TensorType packed_type = g.value(first.results[0]).type;
  packed_type.dims.back() = ir::Dim::Static(rows);
  const std::string packed_name = rewriter.UniqueName(PackedName(result_names));
  const ir::ValueId x = first.operands[0];

  const int anchor = *std::min_element(group.begin(), group.end());
  for (int index : group) {
    if (index != anchor) TP_RETURN_IF_ERROR(rewriter.Drop(index));
  }
  return rewriter.Replace(anchor, [=](RegionEmitter& out) -> absl::Status {
    TP_ASSIGN_OR_RETURN(ir::ValueId new_x, out.Map(x));
    std::vector<ir::ValueId> operands = {new_x, out.NewWeight(weight_key)};
    if (bias_key >= 0) operands.push_back(out.NewWeight(bias_key));
    TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> packed,
                        out.Emit("linear", std::move(operands),
                                 {ir::ResultSpec{packed_name, packed_type, {}}}, ir::Attributes()));
    std::vector<ir::ResultSpec> parts;
    for (ir::ValueId r : results) {
      const ir::Value& v = out.source().value(r);
      parts.push_back(ir::ResultSpec{v.name, v.type, ir::ResultAlias{ir::AliasKind::kView, 0}});
    }
    ir::Attributes attrs;
    attrs.Set("sizes", sizes);
    TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> views,
                        out.Emit("split", {packed[0]}, std::move(parts), std::move(attrs)));
    for (size_t i = 0; i < results.size(); ++i) out.Bind(results[i], views[i]);
    return absl::OkStatus();
  });
}

}  // namespace tileplan::planner
