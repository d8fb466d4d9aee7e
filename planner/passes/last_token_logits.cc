// last_token_logits: a prefill that only needs each prompt's next token computes the final
// norm and the LM head for the last token of each sequence only (docs/planner.md).
//
//   %n = rms_norm(%h, %w)            %flat = reshape(%h)              [B, T*H]
//   %logits = lm_head(%n, %head)  ->  %rest, %last = split(%flat)     sizes [(T-1)*H, H]
//                                     %h_last = reshape(%last)        [B, 1, H]
//                                     %n = rms_norm(%h_last, %w)      [B, 1, H]
//                                     %logits = lm_head(%n, %head)    [B, 1, V]
//
// The reshapes and the split are views, so the last rows are read in place (rows T*H
// elements apart); the LM head, whose cost grows with the vocabulary, shrinks from B*T rows to
// B. Applies to the graph output produced by lm_head (through an rms_norm read only by it,
// or directly), or by the all_gather of a tensor-parallel rank's lm_head shard (read only by
// it; the all_gather then gathers the last token's shards), when T is static and above 1;
// anything else is left unchanged. Runs after specialize_phase, which makes T static.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

class LastTokenLogitsPass : public Pass {
 public:
  absl::string_view name() const override { return "last_token_logits"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (ir::ValueId output : graph.outputs()) {
      int gather_index = -1;
      if (IsResultOf(graph, output, "all_gather")) {
        const int gather = graph.value(output).producer;
        const ir::ValueId shard = graph.regions()[static_cast<size_t>(gather)].operands[0];
        if (IsResultOf(graph, shard, "lm_head") && uses.SoleUser(shard) == gather) {
          gather_index = gather;
          output = shard;
        }
      }
      if (!IsResultOf(graph, output, "lm_head")) continue;
      const int head_index = graph.value(output).producer;
      const ir::Region& head = graph.regions()[static_cast<size_t>(head_index)];
      // The rows to slice: the final norm's input, or the LM head's own input.
      int norm_index = -1;
      ir::ValueId rows = head.operands[0];
      if (IsResultOf(graph, rows, "rms_norm") && uses.SoleUser(rows) == head_index) {
        norm_index = graph.value(rows).producer;
        rows = graph.regions()[static_cast<size_t>(norm_index)].operands[0];
      }
      const ir::TensorType& type = graph.value(rows).type;
      if (type.dims.size() != 3 || !type.dims[1].is_static() || !type.dims[2].is_static() ||
          type.dims[1].extent() <= 1) {
        continue;
      }
      if (rewriter.claimed(head_index) || (norm_index >= 0 && rewriter.claimed(norm_index)) ||
          (gather_index >= 0 && rewriter.claimed(gather_index))) {
        continue;
      }
      TP_RETURN_IF_ERROR(Rewrite(graph, rows, norm_index, head_index, rewriter));
      if (gather_index >= 0) TP_RETURN_IF_ERROR(RewriteGather(gather_index, rewriter));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  // The all_gather of the rewritten head's shard, over the last token only.
  static absl::Status RewriteGather(int gather_index, GraphRewriter& rewriter) {
    return rewriter.Replace(gather_index, [=](RegionEmitter& out) -> absl::Status {
      const ir::Region& gather = out.source().regions()[static_cast<size_t>(gather_index)];
      TP_ASSIGN_OR_RETURN(ir::ValueId shard, out.Map(gather.operands[0]));
      const ir::Value& logits = out.source().value(gather.results[0]);
      ir::TensorType type = logits.type;
      type.dims[1] = ir::Dim::Static(1);
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> result,
          out.Emit("all_gather", {shard}, {ir::ResultSpec{logits.name, std::move(type), {}}},
                   gather.attrs));
      out.Bind(gather.results[0], result[0]);
      return absl::OkStatus();
    });
  }

  static absl::Status Rewrite(const ir::Graph& graph, ir::ValueId rows, int norm_index,
                              int head_index, GraphRewriter& rewriter) {
    const ir::Value& h = graph.value(rows);
    const ir::Dim batch = h.type.dims[0];
    const int64_t tokens = h.type.dims[1].extent();
    const int64_t width = h.type.dims[2].extent();
    const ir::DType dtype = h.type.dtype;
    const std::string flat_name = rewriter.UniqueName(absl::StrCat(h.name, ".flat"));
    const std::string rest_name = rewriter.UniqueName(absl::StrCat(h.name, ".rest"));
    const std::string last_name = rewriter.UniqueName(absl::StrCat(h.name, ".last"));
    const std::string rows_name = rewriter.UniqueName(absl::StrCat(h.name, ".last_token"));
    if (norm_index >= 0) TP_RETURN_IF_ERROR(rewriter.Drop(norm_index));
    return rewriter.Replace(head_index, [=](RegionEmitter& out) -> absl::Status {
      const ir::Graph& src = out.source();
      TP_ASSIGN_OR_RETURN(ir::ValueId new_rows, out.Map(rows));
      const ir::ResultAlias view{ir::AliasKind::kView, 0};
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> flat,
          out.Emit(
              "reshape", {new_rows},
              {ir::ResultSpec{flat_name,
                              ir::MakeType(dtype, {batch, ir::Dim::Static(tokens * width)}), view}},
              ir::Attributes()));
      ir::Attributes sizes;
      sizes.Set("sizes", std::vector<int64_t>{(tokens - 1) * width, width});
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> parts,
          out.Emit("split", {flat[0]},
                   {ir::ResultSpec{
                        rest_name,
                        ir::MakeType(dtype, {batch, ir::Dim::Static((tokens - 1) * width)}), view},
                    ir::ResultSpec{last_name, ir::MakeType(dtype, {batch, ir::Dim::Static(width)}),
                                   view}},
                   std::move(sizes)));
      const auto one_token = [&](const ir::TensorType& t) {
        ir::TensorType r = t;
        r.dims[1] = ir::Dim::Static(1);
        return r;
      };
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> last,
          out.Emit("reshape", {parts[1]}, {ir::ResultSpec{rows_name, one_token(h.type), view}},
                   ir::Attributes()));
      ir::ValueId head_input = last[0];
      if (norm_index >= 0) {
        const ir::Region& norm = src.regions()[static_cast<size_t>(norm_index)];
        std::vector<ir::ValueId> operands = {last[0]};
        for (size_t i = 1; i < norm.operands.size(); ++i) {
          TP_ASSIGN_OR_RETURN(ir::ValueId v, out.Map(norm.operands[i]));
          operands.push_back(v);
        }
        const ir::Value& n = src.value(norm.results[0]);
        TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> normed,
                            out.Emit("rms_norm", std::move(operands),
                                     {ir::ResultSpec{n.name, one_token(n.type), {}}}, norm.attrs));
        head_input = normed[0];
      }
      const ir::Region& head = src.regions()[static_cast<size_t>(head_index)];
      std::vector<ir::ValueId> operands = {head_input};
      for (size_t i = 1; i < head.operands.size(); ++i) {
        TP_ASSIGN_OR_RETURN(ir::ValueId v, out.Map(head.operands[i]));
        operands.push_back(v);
      }
      const ir::Value& logits = src.value(head.results[0]);
      TP_ASSIGN_OR_RETURN(
          std::vector<ir::ValueId> result,
          out.Emit("lm_head", std::move(operands),
                   {ir::ResultSpec{logits.name, one_token(logits.type), {}}}, head.attrs));
      out.Bind(head.results[0], result[0]);
      return absl::OkStatus();
    });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateLastTokenLogitsPass() {
  return std::make_unique<LastTokenLogitsPass>();
}

}  // namespace tileplan::planner
