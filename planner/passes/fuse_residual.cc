// fuse_residual: residual adds move into a neighbouring kernel (docs/planner.md).
//   add(linear(x, w[, b]), r), the linear read only by the add (either add operand)
//       -> linear_residual(x, w, r[, b])                      (the GEMM epilogue adds r)
//   any other add whose sum feeds an rms_norm (as x)
//       -> add_rms_norm(a, b, w) {eps} with results sum and the normalized sum
// An add whose both operands qualify for linear_residual takes the later linear, so the
// earlier result is the one read as the residual.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

class FuseResidualPass : public Pass {
 public:
  absl::string_view name() const override { return "fuse_residual"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const int add_index = static_cast<int>(i);
      const ir::Region& add = graph.regions()[i];
      if (add.kind != "add") continue;
      int linear_side = -1;
      int linear_index = -1;
      for (int side = 0; side < 2; ++side) {
        const ir::ValueId v = add.operands[static_cast<size_t>(side)];
        if (IsResultOf(graph, v, "linear") && uses.SoleUser(v) == add_index &&
            graph.value(v).producer > linear_index) {
          linear_side = side;
          linear_index = graph.value(v).producer;
        }
      }
      if (linear_index >= 0) {
        TP_RETURN_IF_ERROR(FuseLinearResidual(graph, uses, linear_index, add_index,
                                              add.operands[static_cast<size_t>(1 - linear_side)],
                                              rewriter));
        continue;
      }
      for (const Use& use : uses.uses(add.results[0])) {
        const ir::Region& user = graph.regions()[static_cast<size_t>(use.region)];
        if (user.kind == "rms_norm" && use.operand == 0 && !rewriter.claimed(use.region)) {
          TP_RETURN_IF_ERROR(FuseAddRmsNorm(graph, uses, add_index, use.region, rewriter));
          break;
        }
      }
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  // Drops every region of `match` except `anchor` and returns the fused_from list.
  static absl::StatusOr<std::vector<std::string>> DropAllBut(const ir::Graph& graph,
                                                             const std::vector<int>& match,
                                                             int anchor, GraphRewriter& rewriter) {
    std::vector<std::string> fused_from;
    for (int index : match) {
      fused_from.push_back(graph.regions()[static_cast<size_t>(index)].kind);
      if (index != anchor) TP_RETURN_IF_ERROR(rewriter.Drop(index));
    }
    return fused_from;
  }

  static absl::Status FuseLinearResidual(const ir::Graph& graph, const UseMap& uses,
                                         int linear_index, int add_index, ir::ValueId residual,
                                         GraphRewriter& rewriter) {
    const ir::Region& linear = graph.regions()[static_cast<size_t>(linear_index)];
    std::vector<ir::ValueId> operands = {linear.operands[0], linear.operands[1], residual};
    if (linear.operands.size() > 2) operands.push_back(linear.operands[2]);
    const ir::ValueId sum = graph.regions()[static_cast<size_t>(add_index)].results[0];
    const std::vector<int> match = {linear_index, add_index};
    const int anchor = FindAnchor(graph, uses, match, operands, {sum});
    if (anchor < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(RegionLabel(graph, add_index),
                       ": no position for linear_residual keeps every operand defined before it "
                       "and every reader after it"));
    }
    TP_ASSIGN_OR_RETURN(std::vector<std::string> fused_from,
                        DropAllBut(graph, match, anchor, rewriter));
    return rewriter.Replace(anchor, [=](RegionEmitter& out) -> absl::Status {
      TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> new_operands, out.MapAll(operands));
      const ir::Value& r = out.source().value(sum);
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> ids,
          out.Emit("linear_residual", std::move(new_operands), {ir::ResultSpec{r.name, r.type, {}}},
                   ir::Attributes(), fused_from));
      out.Bind(sum, ids[0]);
      return absl::OkStatus();
    });
  }

  static absl::Status FuseAddRmsNorm(const ir::Graph& graph, const UseMap& uses, int add_index,
                                     int norm_index, GraphRewriter& rewriter) {
    const ir::Region& add = graph.regions()[static_cast<size_t>(add_index)];
    const ir::Region& norm = graph.regions()[static_cast<size_t>(norm_index)];
    const std::vector<ir::ValueId> operands = {add.operands[0], add.operands[1], norm.operands[1]};
    const std::vector<ir::ValueId> exported = {add.results[0], norm.results[0]};
    const std::vector<int> match = {add_index, norm_index};
    const int anchor = FindAnchor(graph, uses, match, operands, exported);
    if (anchor < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(RegionLabel(graph, add_index), ": no position for add_rms_norm with ",
                       RegionLabel(graph, norm_index),
                       " keeps every operand defined before it and every reader after it"));
    }
    TP_ASSIGN_OR_RETURN(std::vector<std::string> fused_from,
                        DropAllBut(graph, match, anchor, rewriter));
    const ir::Attributes attrs = norm.attrs;
    return rewriter.Replace(anchor, [=](RegionEmitter& out) -> absl::Status {
      TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> new_operands, out.MapAll(operands));
      std::vector<ir::ResultSpec> results;
      for (ir::ValueId v : exported) {
        results.push_back(
            ir::ResultSpec{out.source().value(v).name, out.source().value(v).type, {}});
      }
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> ids,
          out.Emit("add_rms_norm", std::move(new_operands), std::move(results), attrs, fused_from));
      for (size_t j = 0; j < exported.size(); ++j) out.Bind(exported[j], ids[j]);
      return absl::OkStatus();
    });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseResidualPass() { return std::make_unique<FuseResidualPass>(); }

}  // namespace tileplan::planner
