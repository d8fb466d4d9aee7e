// fuse_rope_kv_write_attention: in a decode graph, the RoPE + KV-write region and the
// attention that reads its q become one region (docs/planner.md). The pattern:
//   q, k_cache', v_cache' = (qk_norm_)rope_kv_write(qkv, [q_norm, k_norm,] k_cache, v_cache, p)
//   out = attention(q, k_cache', v_cache', p)
// where the attention is q's only reader. It becomes
//   out, k_cache', v_cache' = (qk_norm_)rope_kv_write_attention(qkv, [...,] k_cache, v_cache, p)
// whose kernel rotates q, writes the new cache rows and attends in one launch. Decode only:
// the fused kind's kernel serves a few new tokens per sequence, so the factory refuses the
// prefill phase and a site already specialized for prefill is an error. A bound batch above
// PassOptions::rope_attention_max_batch is left alone (the attention then stays free to take
// the tensor-core family).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

class FuseRopeKvWriteAttentionPass : public Pass {
 public:
  absl::string_view name() const override { return "fuse_rope_kv_write_attention"; }

  explicit FuseRopeKvWriteAttentionPass(bool enabled) : enabled_(enabled) {}

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    if (!enabled_) return false;
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const ir::Region& write = graph.regions()[i];
      if (write.kind != "rope_kv_write" && write.kind != "qk_norm_rope_kv_write") continue;
      const int attention = uses.SoleUser(write.results[0]);
      if (attention < 0) continue;
      const ir::Region& attn = graph.regions()[static_cast<size_t>(attention)];
      // The attention must read the new q as its query and exactly the caches this region
      // updated; anything else is not the pattern.
      if (attn.kind != "attention" || attn.operands[0] != write.results[0] ||
          attn.operands[1] != write.results[1] || attn.operands[2] != write.results[2]) {
        continue;
      }
      TP_RETURN_IF_ERROR(Fuse(graph, uses, static_cast<int>(i), attention, rewriter));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  bool enabled_;

  static absl::Status Fuse(const ir::Graph& g, const UseMap& uses, int write_index,
                           int attention_index, GraphRewriter& rewriter) {
    const ir::Region& write = g.regions()[static_cast<size_t>(write_index)];
    const ir::Region& attn = g.regions()[static_cast<size_t>(attention_index)];
    const std::string kind = absl::StrCat(write.kind, "_attention");
    const std::string site =
        absl::StrCat(RegionLabel(g, write_index), ": cannot fuse into ", kind, ": ");
    for (int index : {write_index, attention_index}) {
      if (g.regions()[static_cast<size_t>(index)].phase == ir::Phase::kPrefill) {
        return absl::FailedPreconditionError(
            absl::StrCat(site, RegionLabel(g, index),
                         " is specialized for prefill; the fused kind serves "
                         "decode steps only"));
      }
    }
    const ir::ValueId positions = write.operands.back();
    if (attn.operands[3] != positions) {
      return absl::FailedPreconditionError(absl::StrCat(
          site, RegionLabel(g, attention_index), " reads other positions than the cache writes"));
    }
    // The write's attributes and the attention's (scale, sliding_window) are disjoint sets.
    ir::Attributes attrs = write.attrs;
    for (const auto& [key, value] : attn.attrs.map()) attrs.Set(key, value);
    std::vector<std::string> fused_from = write.fused_from;
    fused_from.push_back(attn.kind);

    const std::vector<int> match = {write_index, attention_index};
    const std::vector<ir::ValueId> operands = write.operands;
    const std::vector<ir::ValueId> exported = {attn.results[0], write.results[1], write.results[2]};
    const int anchor = FindAnchor(g, uses, match, operands, exported);
    if (anchor < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          site, "no position keeps every operand defined before it and every reader after it"));
    }
    TP_RETURN_IF_ERROR(rewriter.Drop(anchor == write_index ? attention_index : write_index));
    const std::vector<ir::ResultAlias> aliases = {ir::ResultAlias{}, write.result_aliases[1],
                                                  write.result_aliases[2]};
    return rewriter.Replace(anchor, [=](RegionEmitter& out) {
      return out.EmitFused(kind, operands, exported, aliases, attrs, fused_from);
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pass>> CreateFuseRopeKvWriteAttentionPass(
    const PassOptions& options) {
  if (options.phase != ir::Phase::kDecode) {
    return absl::InvalidArgumentError(
        absl::StrCat("fuse_rope_kv_write_attention forms decode kernels; it does not run for the ",
                     ir::PhaseName(options.phase), " phase"));
  }
  if (options.rope_attention_max_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope_attention_max_batch must be >= 0, got ",
                                                   options.rope_attention_max_batch));
  }
  return std::make_unique<FuseRopeKvWriteAttentionPass>(
      !options.batch.has_value() || *options.batch <= options.rope_attention_max_batch);
}

}  // namespace tileplan::planner
