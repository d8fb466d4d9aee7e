// fuse_norm_linear: in the decode phase, an rms_norm read only by a decode-sized GEMV becomes
// that GEMV's prologue (docs/planner.md):
//   rms_norm(x, norm) {eps} -> linear(., w[, b])          => rms_norm_linear(x, norm, w[, b])
//   rms_norm(x, norm) {eps} -> linear_swiglu(., w[, b])   => rms_norm_linear_swiglu(x, norm, w[,
//   b])
//   rms_norm(x, norm) {eps} -> moe(., router, ...) {a}    => rms_norm_moe(x, norm, router, ...)
//                                                            {a, eps}
// The norm's result must be read only by the linear (or moe), as its x. Both regions must be
// decode regions (the pass runs after specialize_phase). A linear's rows, the product of x's
// leading dims, must be static and at most PassOptions::norm_linear_max_rows: beyond that the
// planner sends decode linears to cuBLASLt, which has no norm prologue, so a fused region
// there would have no kernel. With PassOptions::norm_moe a moe region (fuse_moe made it for a
// small bound batch, and its kernels serve it at any size they accept) takes its norm whatever
// its rows. Prefill graphs keep their norms.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

// The product of all dims but the last, when they are all static.
std::optional<int64_t> StaticRows(const ir::TensorType& type) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < type.dims.size(); ++d) {
    if (!type.dims[d].is_static()) return std::nullopt;
    rows *= type.dims[d].extent();
  }
  return rows;
}

class FuseNormLinearPass : public Pass {
 public:
  FuseNormLinearPass(int64_t max_rows, bool norm_moe) : max_rows_(max_rows), norm_moe_(norm_moe) {}

  absl::string_view name() const override { return "fuse_norm_linear"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const int norm_index = static_cast<int>(i);
      const ir::Region& norm = graph.regions()[i];
      if (norm.kind != "rms_norm" || norm.phase != ir::Phase::kDecode) continue;
      const ir::ValueId normed = norm.results[0];
      const int linear_index = uses.SoleUser(normed);
      if (linear_index < 0 || uses.uses(normed).front().operand != 0) continue;
      const ir::Region& linear = graph.regions()[static_cast<size_t>(linear_index)];
      const bool moe = linear.kind == "moe" && norm_moe_;
      if ((linear.kind != "linear" && linear.kind != "linear_swiglu" && !moe) ||
          linear.phase != ir::Phase::kDecode) {
        continue;
      }
      const std::optional<int64_t> rows = StaticRows(graph.value(normed).type);
      if (!moe && (!rows.has_value() || *rows > max_rows_)) continue;
      TP_RETURN_IF_ERROR(Fuse(graph, uses, norm_index, linear_index, rewriter));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  static absl::Status Fuse(const ir::Graph& graph, const UseMap& uses, int norm_index,
                           int linear_index, GraphRewriter& rewriter) {
    const ir::Region& norm = graph.regions()[static_cast<size_t>(norm_index)];
    const ir::Region& linear = graph.regions()[static_cast<size_t>(linear_index)];
    const std::string kind = linear.kind == "linear"          ? "rms_norm_linear"
                             : linear.kind == "linear_swiglu" ? "rms_norm_linear_swiglu"
                                                              : "rms_norm_moe";
    // x, norm, then the linear's w[, bias] (or moe's router, experts, ...).
    std::vector<ir::ValueId> operands = {norm.operands[0], norm.operands[1]};
    operands.insert(operands.end(), linear.operands.begin() + 1, linear.operands.end());
    const ir::ValueId result = linear.results[0];
    const std::vector<int> match = {norm_index, linear_index};
    const int anchor = FindAnchor(graph, uses, match, operands, {result});
    if (anchor < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(RegionLabel(graph, norm_index), ": no position for ", kind, " with ",
                       RegionLabel(graph, linear_index),
                       " keeps every operand defined before it and every reader after it"));
    }
    // The primitive kinds replaced, in order: the norm, then the linear's own list.
    std::vector<std::string> fused_from = {norm.kind};
    if (linear.fused_from.empty()) {
      fused_from.push_back(linear.kind);
    } else {
      fused_from.insert(fused_from.end(), linear.fused_from.begin(), linear.fused_from.end());
    }
    for (int index : match) {
      if (index != anchor) TP_RETURN_IF_ERROR(rewriter.Drop(index));
    }
    // The norm's eps, and for moe the routing attributes first.
    ir::Attributes attrs = norm.attrs;
    if (kind == "rms_norm_moe") {
      attrs = linear.attrs;
      TP_ASSIGN_OR_RETURN(const double eps, norm.attrs.GetFloat("eps"));
      attrs.Set("eps", eps);
    }
    return rewriter.Replace(anchor, [=](RegionEmitter& out) -> absl::Status {
      TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> new_operands, out.MapAll(operands));
      const ir::Value& r = out.source().value(result);
      TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> ids,
                          out.Emit(kind, std::move(new_operands),
                                   {ir::ResultSpec{r.name, r.type, {}}}, attrs, fused_from));
      out.Bind(result, ids[0]);
      return absl::OkStatus();
    });
  }

  int64_t max_rows_;
  bool norm_moe_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pass>> CreateFuseNormLinearPass(const PassOptions& options) {
  if (options.norm_linear_max_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("norm_linear_max_rows must be >= 0, got ", options.norm_linear_max_rows));
  }
  return std::make_unique<FuseNormLinearPass>(options.norm_linear_max_rows, options.norm_moe);
}

}  // namespace tileplan::planner
