// fuse_swiglu: silu(h0) * h1, where h0 and h1 are the two halves of one split, becomes
// `swiglu` over the split's input, or `linear_swiglu` when that input is a linear read only
// by the split (docs/planner.md). Every intermediate (the split's views, the silu) must have
// no other reader; the mul may take its operands in either order.
#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

class FuseSwigluPass : public Pass {
 public:
  absl::string_view name() const override { return "fuse_swiglu"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const int mul_index = static_cast<int>(i);
      const ir::Region& mul = graph.regions()[i];
      if (mul.kind != "mul") continue;
      for (int gate_side = 0; gate_side < 2; ++gate_side) {
        const ir::ValueId act = mul.operands[static_cast<size_t>(gate_side)];
        const ir::ValueId up = mul.operands[static_cast<size_t>(1 - gate_side)];
        if (!IsResultOf(graph, act, "silu") || uses.SoleUser(act) != mul_index) continue;
        const int silu_index = graph.value(act).producer;
        const ir::ValueId gate = Producer(graph, act)->operands[0];
        if (!IsResultOf(graph, gate, "split", 0) || !IsResultOf(graph, up, "split", 1) ||
            graph.value(gate).producer != graph.value(up).producer ||
            uses.SoleUser(gate) != silu_index || uses.SoleUser(up) != mul_index) {
          continue;
        }
        const int split_index = graph.value(gate).producer;
        const ir::Region& split = graph.regions()[static_cast<size_t>(split_index)];
        if (split.results.size() != 2) continue;
        TP_RETURN_IF_ERROR(Fuse(graph, uses, split_index, silu_index, mul_index, rewriter));
        break;
      }
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  static absl::Status Fuse(const ir::Graph& graph, const UseMap& uses, int split_index,
                           int silu_index, int mul_index, GraphRewriter& rewriter) {
    const ir::Region& split = graph.regions()[static_cast<size_t>(split_index)];
    const ir::Region& mul = graph.regions()[static_cast<size_t>(mul_index)];
    std::vector<int> match = {split_index, silu_index, mul_index};
    std::vector<ir::ValueId> operands = {split.operands[0]};
    std::string kind = "swiglu";
    const ir::ValueId input = split.operands[0];
    if (IsResultOf(graph, input, "linear") && uses.SoleUser(input) == split_index) {
      const int linear_index = graph.value(input).producer;
      match.push_back(linear_index);
      operands = graph.regions()[static_cast<size_t>(linear_index)].operands;
      kind = "linear_swiglu";
    }
    std::sort(match.begin(), match.end());
    const int anchor = FindAnchor(graph, uses, match, operands, {mul.results[0]});
    if (anchor < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(RegionLabel(graph, mul_index), ": no position for the fused ", kind,
                       " keeps every operand defined before it and every reader after it"));
    }
    std::vector<std::string> fused_from;
    for (int index : match) {
      fused_from.push_back(graph.regions()[static_cast<size_t>(index)].kind);
      if (index != anchor) TP_RETURN_IF_ERROR(rewriter.Drop(index));
    }
    const ir::ValueId result = mul.results[0];
    return rewriter.Replace(anchor, [=](RegionEmitter& out) -> absl::Status {
      TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> new_operands, out.MapAll(operands));
      const ir::Value& r = out.source().value(result);
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> ids,
          out.Emit(kind, std::move(new_operands), {ir::ResultSpec{r.name, r.type, {}}},
                   ir::Attributes(), fused_from));
      out.Bind(result, ids[0]);
      return absl::OkStatus();
    });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseSwigluPass() { return std::make_unique<FuseSwigluPass>(); }

}  // namespace tileplan::planner
