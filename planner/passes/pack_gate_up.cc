// pack_gate_up: the gate and up projections of a SwiGLU MLP, silu(linear_g(x)) * linear_u(x),
// become one linear on a packed weight (gate rows first) followed by a split
// (docs/planner.md). The mul may take its operands in either order.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/linear_packing.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

// The linear producing `value`, or -1.
int LinearOf(const ir::Graph& g, ir::ValueId value) {
  return IsResultOf(g, value, "linear") ? g.value(value).producer : -1;
}

class PackGateUpPass : public Pass {
 public:
  absl::string_view name() const override { return "pack_gate_up"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const ir::Region& mul = graph.regions()[i];
      if (mul.kind != "mul") continue;
      for (int gate_side = 0; gate_side < 2; ++gate_side) {
        const ir::ValueId act = mul.operands[static_cast<size_t>(gate_side)];
        if (!IsResultOf(graph, act, "silu")) continue;
        const int gate = LinearOf(graph, Producer(graph, act)->operands[0]);
        const int up = LinearOf(graph, mul.operands[static_cast<size_t>(1 - gate_side)]);
        if (gate < 0 || up < 0 || gate == up ||
            graph.regions()[static_cast<size_t>(gate)].operands[0] !=
                graph.regions()[static_cast<size_t>(up)].operands[0] ||
            rewriter.claimed(gate) || rewriter.claimed(up)) {
          continue;
        }
        absl::Status s = CheckPackGroup(graph, uses, {gate, up});
        if (!s.ok()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "gate and up of ", RegionLabel(graph, static_cast<int>(i)), ": ", s.message()));
        }
        TP_RETURN_IF_ERROR(PackLinearGroup({gate, up}, rewriter));
        break;
      }
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> CreatePackGateUpPass() { return std::make_unique<PackGateUpPass>(); }

}  // namespace tileplan::planner
