// fuse_mla_kv_write_attention: in a decode graph, the RoPE of the query, the mla_kv_write of
// the token's latent and rope key, and the mla_attention that reads both become one region
// (docs/planner.md). The pattern:
//   q_rope = rope(q_pe, p)
//   latent', rope_cache' = mla_kv_write(kv_a, norm, latent_cache, rope_cache, p)
//   out = mla_attention(q_nope, q_rope, latent', rope_cache', w_kv_b, p)
// where the attention is q_rope's only reader and reads exactly the caches the write updated.
// It becomes
//   out, latent', rope_cache' = mla_kv_write_attention(q_nope, q_pe, kv_a, norm, latent_cache,
//                                                      rope_cache, w_kv_b, p)
// whose first kernel rotates the query and writes the cache rows beside the query's
// absorption, so a decode layer loses two launches. The query and the key rotate by one
// frequency table: a site whose two RoPEs differ in any attribute is left alone. Once the
// structure matches, regions reading other positions are an error. Decode only, as the
// factory says: a site already specialized for prefill is an error.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"
#include "regions/shape_rules.h"

namespace tileplan::planner {
namespace {

// Whether the two regions rotate by the same RoPE: every RoPE attribute present in either
// has one value in both.
bool SameRope(const ir::Region& a, const ir::Region& b) {
  for (const ir::AttrSpec& spec : ir::shape::RopeAttrSpecs()) {
    const bool in_a = a.attrs.Has(spec.key), in_b = b.attrs.Has(spec.key);
    if (in_a != in_b) return false;
    if (in_a && !(a.attrs.map().at(spec.key) == b.attrs.map().at(spec.key))) return false;
  }
  return true;
}

class FuseMlaKvWriteAttentionPass : public Pass {
 public:
  absl::string_view name() const override { return "fuse_mla_kv_write_attention"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const ir::Region& rope = graph.regions()[i];
      if (rope.kind != "rope") continue;
      const int attention = uses.SoleUserOfKind(graph, rope.results[0], "mla_attention", 1);
      if (attention < 0) continue;
      const ir::Region& attn = graph.regions()[static_cast<size_t>(attention)];
      const ir::Region* write = Producer(graph, attn.operands[2]);
      if (write == nullptr || write->kind != "mla_kv_write" ||
          write->results[0] != attn.operands[2] || write->results[1] != attn.operands[3] ||
          !SameRope(rope, *write)) {
        continue;
      }
      const int write_index = static_cast<int>(write - graph.regions().data());
      TP_RETURN_IF_ERROR(Fuse(graph, uses, static_cast<int>(i), write_index, attention, rewriter));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  static absl::Status Fuse(const ir::Graph& g, const UseMap& uses, int rope_index, int write_index,
                           int attention_index, GraphRewriter& rewriter) {
    auto region = [&](int index) -> const ir::Region& {
      return g.regions()[static_cast<size_t>(index)];
    };
    const ir::Region& rope = region(rope_index);
    const ir::Region& write = region(write_index);
    const ir::Region& attn = region(attention_index);
    const std::string site = absl::StrCat(RegionLabel(g, attention_index),
                                          ": cannot fuse into mla_kv_write_attention: ");
    for (int index : {rope_index, write_index, attention_index}) {
      if (region(index).phase == ir::Phase::kPrefill) {
        return absl::FailedPreconditionError(
            absl::StrCat(site, RegionLabel(g, index),
                         " is specialized for prefill; the fused kind serves decode steps only"));
      }
    }
    const ir::ValueId positions = attn.operands[5];
    for (int index : {rope_index, write_index}) {
      if (region(index).operands.back() != positions) {
        return absl::FailedPreconditionError(
            absl::StrCat(site, RegionLabel(g, index), " reads other positions than the attention"));
      }
    }
    // The write's attributes (eps and the RoPE's) and the attention's scale.
    ir::Attributes attrs = write.attrs;
    for (const auto& [key, value] : attn.attrs.map()) attrs.Set(key, value);
    std::vector<int> match = {rope_index, write_index, attention_index};
    std::sort(match.begin(), match.end());
    std::vector<std::string> fused_from;
    for (int index : match) {
      const ir::Region& r = region(index);
      fused_from.insert(fused_from.end(), r.fused_from.begin(), r.fused_from.end());
      if (r.fused_from.empty()) fused_from.push_back(r.kind);
    }
    const std::vector<ir::ValueId> operands = {
        attn.operands[0],  rope.operands[0],  write.operands[0], write.operands[1],
        write.operands[2], write.operands[3], attn.operands[4],  positions};
    const std::vector<ir::ValueId> exported = {attn.results[0], write.results[0], write.results[1]};
    const int anchor = FindAnchor(g, uses, match, operands, exported);
    if (anchor < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          site, "no position keeps every operand defined before it and every reader after it"));
    }
    for (int index : match) {
      if (index != anchor) TP_RETURN_IF_ERROR(rewriter.Drop(index));
    }
    // The caches are operands 4 and 5 of the fused region.
    const std::vector<ir::ResultAlias> aliases = {
        ir::ResultAlias{}, {ir::AliasKind::kInPlace, 4}, {ir::AliasKind::kInPlace, 5}};
    return rewriter.Replace(anchor, [=](RegionEmitter& out) {
      return out.EmitFused("mla_kv_write_attention", operands, exported, aliases, attrs,
                           fused_from);
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pass>> CreateFuseMlaKvWriteAttentionPass(
    const PassOptions& options) {
  if (options.phase != ir::Phase::kDecode) {
    return absl::InvalidArgumentError(
        absl::StrCat("fuse_mla_kv_write_attention forms decode kernels; it does not run for the ",
                     ir::PhaseName(options.phase), " phase"));
  }
  return std::make_unique<FuseMlaKvWriteAttentionPass>();
}

}  // namespace tileplan::planner
