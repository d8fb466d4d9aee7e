// pack_qkv: the q, k and v projections of an attention become one linear on a packed weight
// followed by a split (docs/planner.md).
//
// Sites are found from each `attention` region: its q operand, and the `x` operand of the
// kv_write producing each cache operand, are traced back through reshape, rms_norm and rope
// (operand 0) to the `linear` that projects them. The projections that read the same input
// are packed in attention's operand order (q, k, v); an already packed projection (a split
// of a linear, as phi3's qkv_proj) is left as it is. Other linears that read one input are
// packed too, in region order, grouped by weight dtype and bias, when their weights are not
// shared; the gate and up projections of a SwiGLU are left to pack_gate_up.
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/linear_packing.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

// Follows `value` back through the per-head reshaping of a projection; returns the index of
// the linear that produced it, or -1 when the chain does not start at a linear.
int TraceProjection(const ir::Graph& g, ir::ValueId value) {
  for (const ir::Region* p = Producer(g, value); p != nullptr; p = Producer(g, value)) {
    if (p->kind == "linear") return g.value(value).producer;
    if (p->kind != "reshape" && p->kind != "rms_norm" && p->kind != "rope") return -1;
    value = p->operands[0];
  }
  return -1;
}

// The projection written into the cache that `cache` is the updated version of.
int TraceCacheProjection(const ir::Graph& g, ir::ValueId cache) {
  if (!IsResultOf(g, cache, "kv_write")) return -1;
  return TraceProjection(g, Producer(g, cache)->operands[1]);
}

// Whether linear `index`'s result is the gate or the up operand of silu(gate) * up, with
// gate and up linears reading the same input.
bool IsSwigluProjection(const ir::Graph& g, const UseMap& uses, int index) {
  const ir::Region& linear = g.regions()[static_cast<size_t>(index)];
  auto linear_on_same_input = [&](ir::ValueId v) {
    const ir::Region* p = Producer(g, v);
    return p != nullptr && p->kind == "linear" && p->operands[0] == linear.operands[0] &&
           p != &linear;
  };
  for (const Use& use : uses.uses(linear.results[0])) {
    const ir::Region& user = g.regions()[static_cast<size_t>(use.region)];
    if (user.kind == "silu") {
      for (const Use& mul_use : uses.uses(user.results[0])) {
        const ir::Region& mul = g.regions()[static_cast<size_t>(mul_use.region)];
        if (mul.kind == "mul" && linear_on_same_input(mul.operands[1 - mul_use.operand])) {
          return true;
        }
      }
    } else if (user.kind == "mul") {
      const ir::ValueId other = user.operands[static_cast<size_t>(1 - use.operand)];
      if (IsResultOf(g, other, "silu") && linear_on_same_input(Producer(g, other)->operands[0])) {
        return true;
      }
    }
  }
  return false;
}

class PackQkvPass : public Pass {
 public:
  absl::string_view name() const override { return "pack_qkv"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    std::set<int> grouped;
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const ir::Region& r = graph.regions()[i];
      if (r.kind != "attention") continue;
      const int roles[] = {TraceProjection(graph, r.operands[0]),
                           TraceCacheProjection(graph, r.operands[1]),
                           TraceCacheProjection(graph, r.operands[2])};
      // Projections by input, each in role order.
      std::map<ir::ValueId, std::vector<int>> by_input;
      std::vector<ir::ValueId> inputs;
      for (int index : roles) {
        if (index < 0 || grouped.count(index)) continue;
        const ir::ValueId x = graph.regions()[static_cast<size_t>(index)].operands[0];
        std::vector<int>& group = by_input[x];
        if (group.empty()) inputs.push_back(x);
        if (std::find(group.begin(), group.end(), index) == group.end()) group.push_back(index);
      }
      for (ir::ValueId x : inputs) {
        const std::vector<int>& group = by_input[x];
        if (group.size() < 2) continue;
        absl::Status s = CheckPackGroup(graph, uses, group);
        if (!s.ok()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "projections of ", RegionLabel(graph, static_cast<int>(i)), ": ", s.message()));
        }
        TP_RETURN_IF_ERROR(PackLinearGroup(group, rewriter));
        grouped.insert(group.begin(), group.end());
      }
    }
    TP_RETURN_IF_ERROR(PackSiblings(graph, uses, grouped, rewriter));
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  // Linears outside attention projections that read one input, in region order, grouped by
  // weight dtype and bias.
  static absl::Status PackSiblings(const ir::Graph& graph, const UseMap& uses,
                                   const std::set<int>& grouped, GraphRewriter& rewriter) {
    std::map<std::tuple<ir::ValueId, ir::DType, bool>, std::vector<int>> groups;
    std::vector<std::tuple<ir::ValueId, ir::DType, bool>> order;
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const int index = static_cast<int>(i);
      const ir::Region& r = graph.regions()[i];
      if (r.kind != "linear" || grouped.count(index) || !CheckPackable(graph, uses, index).ok() ||
          IsSwigluProjection(graph, uses, index)) {
        continue;
      }
      const auto key = std::make_tuple(r.operands[0], graph.value(r.operands[1]).type.dtype,
                                       r.operands.size() > 2);
      std::vector<int>& group = groups[key];
      if (group.empty()) order.push_back(key);
      group.push_back(index);
    }
    for (const auto& key : order) {
      const std::vector<int>& group = groups[key];
      if (group.size() >= 2) TP_RETURN_IF_ERROR(PackLinearGroup(group, rewriter));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Pass> CreatePackQkvPass() { return std::make_unique<PackQkvPass>(); }

}  // namespace tileplan::planner
