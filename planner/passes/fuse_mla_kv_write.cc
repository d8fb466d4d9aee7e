// fuse_mla_kv_write: what multi-head latent attention writes into its two caches becomes one
// region (docs/planner.md). The pattern, from a 2-way split of the compressed kv
// kv_a: X[B,T,C+Dr]:
//   latent -> rms_norm -> reshape [B,T,1,C]          -> kv_write(latent_cache)  (exported)
//   k_pe   -> reshape [B,T,1,Dr] -> rope             -> kv_write(rope_cache)    (exported)
// with every intermediate read only by the next step. It becomes mla_kv_write. Once the
// structure matches, the kv_writes and the rope reading different positions is an error,
// since the fused region has one position input.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

// The regions of one match, in the order of the pattern above.
struct Site {
  int split = -1, norm = -1, latent_reshape = -1, latent_write = -1;
  int pe_reshape = -1, rope = -1, rope_write = -1;
};

// Whether `value` (a reshape's result) is [B,T,1,D] over the split's [B,T,...].
bool OneHead(const ir::Graph& g, ir::ValueId value, const ir::TensorType& kv_a) {
  const ir::TensorType& t = g.value(value).type;
  return t.rank() == 4 && t.dims[0] == kv_a.dims[0] && t.dims[1] == kv_a.dims[1] &&
         t.dims[2].is_static() && t.dims[2].extent() == 1;
}

std::optional<Site> Match(const ir::Graph& g, const UseMap& uses, int split_index) {
  auto result = [&](int index) { return g.regions()[static_cast<size_t>(index)].results[0]; };
  const ir::Region& split = g.regions()[static_cast<size_t>(split_index)];
  if (split.kind != "split" || split.results.size() != 2) return std::nullopt;
  const ir::TensorType& kv_a = g.value(split.operands[0]).type;
  if (kv_a.rank() != 3) return std::nullopt;
  Site s;
  s.split = split_index;
  s.norm = uses.SoleUserOfKind(g, split.results[0], "rms_norm", 0);
  if (s.norm < 0) return std::nullopt;
  s.latent_reshape = uses.SoleUserOfKind(g, result(s.norm), "reshape", 0);
  if (s.latent_reshape < 0 || !OneHead(g, result(s.latent_reshape), kv_a)) return std::nullopt;
  s.latent_write = uses.SoleUserOfKind(g, result(s.latent_reshape), "kv_write", 1);
  if (s.latent_write < 0) return std::nullopt;
  s.pe_reshape = uses.SoleUserOfKind(g, split.results[1], "reshape", 0);
  if (s.pe_reshape < 0 || !OneHead(g, result(s.pe_reshape), kv_a)) return std::nullopt;
  s.rope = uses.SoleUserOfKind(g, result(s.pe_reshape), "rope", 0);
  if (s.rope < 0) return std::nullopt;
  s.rope_write = uses.SoleUserOfKind(g, result(s.rope), "kv_write", 1);
  if (s.rope_write < 0) return std::nullopt;
  // Each cache holds one head: [B,1,Smax,D].
  for (int write : {s.latent_write, s.rope_write}) {
    const ir::TensorType& cache = g.value(result(write)).type;
    if (cache.rank() != 4 || !cache.dims[1].is_static() || cache.dims[1].extent() != 1) {
      return std::nullopt;
    }
  }
  return s;
}

class FuseMlaKvWritePass : public Pass {
 public:
  absl::string_view name() const override { return "fuse_mla_kv_write"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const std::optional<Site> site = Match(graph, uses, static_cast<int>(i));
      if (site) TP_RETURN_IF_ERROR(Fuse(graph, uses, *site, rewriter));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  static absl::Status Fuse(const ir::Graph& g, const UseMap& uses, const Site& s,
                           GraphRewriter& rewriter) {
    auto region = [&](int index) -> const ir::Region& {
      return g.regions()[static_cast<size_t>(index)];
    };
    const std::string site =
        absl::StrCat(RegionLabel(g, s.split), ": cannot fuse into mla_kv_write: ");
    const ir::Region& rope = region(s.rope);
    const ir::ValueId positions = rope.operands[1];
    for (int index : {s.latent_write, s.rope_write}) {
      if (region(index).operands[2] != positions) {
        return absl::FailedPreconditionError(absl::StrCat(
            site, RegionLabel(g, index), " reads other positions than ", RegionLabel(g, s.rope)));
      }
    }
    const ir::Region& norm = region(s.norm);
    ir::Attributes attrs = rope.attrs;
    TP_ASSIGN_OR_RETURN(const double eps, norm.attrs.GetFloat("eps"));
    attrs.Set("eps", eps);
    const std::vector<ir::ValueId> operands = {region(s.split).operands[0], norm.operands[1],
                                               region(s.latent_write).operands[0],
                                               region(s.rope_write).operands[0], positions};
    std::vector<int> match = {s.split,      s.norm, s.latent_reshape, s.latent_write,
                              s.pe_reshape, s.rope, s.rope_write};
    std::sort(match.begin(), match.end());
    const std::vector<ir::ValueId> exported = {region(s.latent_write).results[0],
                                               region(s.rope_write).results[0]};
    const int anchor = FindAnchor(g, uses, match, operands, exported);
    if (anchor < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          site, "no position keeps every operand defined before it and every reader after it"));
    }
    std::vector<std::string> fused_from;
    for (int index : match) {
      fused_from.push_back(region(index).kind);
      if (index != anchor) TP_RETURN_IF_ERROR(rewriter.Drop(index));
    }
    const std::vector<ir::ResultAlias> aliases = {{ir::AliasKind::kInPlace, 2},
                                                  {ir::AliasKind::kInPlace, 3}};
    return rewriter.Replace(anchor, [=](RegionEmitter& out) {
      return out.EmitFused("mla_kv_write", operands, exported, aliases, attrs, fused_from);
    });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseMlaKvWritePass() { return std::make_unique<FuseMlaKvWritePass>(); }

}  // namespace tileplan::planner
