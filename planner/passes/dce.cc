// dce: removes regions whose results nothing needs (docs/planner.md).
//
// A region is live when it updates a value in place (a write to state such as the KV cache
// is observable by the next step even when no region reads it in this graph), when one of
// its results is a graph output, or when a live region reads one of its results. Every
// other region is removed. Declarations are kept: weights stay bound to their checkpoint
// tensors, inputs and states keep the graph's interface.
#include <memory>
#include <vector>

#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

class DcePass : public Pass {
 public:
  absl::string_view name() const override { return "dce"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const size_t n = graph.regions().size();
    std::vector<bool> needed(static_cast<size_t>(graph.num_values()), false);
    for (ir::ValueId out : graph.outputs()) needed[out] = true;
    std::vector<bool> live(n, false);
    // Readers come after producers, so one backward sweep settles every region.
    for (size_t i = n; i-- > 0;) {
      const ir::Region& r = graph.regions()[i];
      bool is_live = false;
      for (size_t j = 0; j < r.results.size(); ++j) {
        is_live =
            is_live || needed[r.results[j]] || r.result_aliases[j].kind == ir::AliasKind::kInPlace;
      }
      if (!is_live) continue;
      live[i] = true;
      for (ir::ValueId op : r.operands) needed[op] = true;
    }
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < n; ++i) {
      if (!live[i]) TP_RETURN_IF_ERROR(rewriter.Drop(static_cast<int>(i)));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateDcePass() { return std::make_unique<DcePass>(); }

}  // namespace tileplan::planner
