// fuse_qk_norm_rope_kv_write: the per-head preparation of a packed qkv projection becomes
// one region (docs/planner.md). The pattern, from a 3-way split of qkv: X[B,T,N]:
//   q -> reshape [B,T,Hq,D]  [-> rms_norm(q_norm)] -> rope                 (result q, exported)
//   k -> reshape [B,T,Hkv,D] [-> rms_norm(k_norm)] -> rope -> kv_write(k_cache)  (exported)
//   v -> reshape [B,T,Hkv,D]                               -> kv_write(v_cache)  (exported)
// with N = (Hq + 2 Hkv) D and every intermediate read only by the next step. With both norms
// it becomes qk_norm_rope_kv_write, with neither rope_kv_write. Once the structure matches,
// differing RoPE attributes, norm epsilons or position inputs are errors, since no fused
// region can express them.
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

// One head chain: reshape [-> rms_norm] -> rope [-> kv_write], or reshape -> kv_write.
struct Chain {
  int reshape = -1;
  int norm = -1;
  int rope = -1;
  int write = -1;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// Follows split result `value` down its chain; `rope` and `write` say which steps it must
// have. Returns nullopt when the structure does not match.
std::optional<Chain> FollowChain(const ir::Graph& g, const UseMap& uses, ir::ValueId value,
                                 const ir::TensorType& qkv, bool rope, bool write) {
  Chain c;
  c.reshape = uses.SoleUserOfKind(g, value, "reshape", 0);
  if (c.reshape < 0) return std::nullopt;
  ir::ValueId v = g.regions()[static_cast<size_t>(c.reshape)].results[0];
  const ir::TensorType& t = g.value(v).type;
  if (t.rank() != 4 || !(t.dims[0] == qkv.dims[0]) || !(t.dims[1] == qkv.dims[1]) ||
      !t.dims[2].is_static() || !t.dims[3].is_static()) {
    return std::nullopt;
  }
  c.heads = t.dims[2].extent();
  c.head_dim = t.dims[3].extent();
  if (rope) {
    c.norm = uses.SoleUserOfKind(g, v, "rms_norm", 0);
    if (c.norm >= 0) v = g.regions()[static_cast<size_t>(c.norm)].results[0];
    c.rope = uses.SoleUserOfKind(g, v, "rope", 0);
    if (c.rope < 0) return std::nullopt;
    v = g.regions()[static_cast<size_t>(c.rope)].results[0];
  }
  if (write) {
    c.write = uses.SoleUserOfKind(g, v, "kv_write", 1);
    if (c.write < 0) return std::nullopt;
  }
  return c;
}

class FuseQkNormRopeKvWritePass : public Pass {
 public:
  absl::string_view name() const override { return "fuse_qk_norm_rope_kv_write"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const ir::Region& split = graph.regions()[i];
      if (split.kind != "split" || split.results.size() != 3) continue;
      const ir::TensorType& qkv = graph.value(split.operands[0]).type;
      if (qkv.rank() != 3) continue;
      const std::optional<Chain> q = FollowChain(graph, uses, split.results[0], qkv, true, false);
      const std::optional<Chain> k = FollowChain(graph, uses, split.results[1], qkv, true, true);
      const std::optional<Chain> v = FollowChain(graph, uses, split.results[2], qkv, false, true);
      if (!q || !k || !v || (q->norm >= 0) != (k->norm >= 0) || q->head_dim != k->head_dim ||
          k->head_dim != v->head_dim || k->heads != v->heads) {
        continue;
      }
      TP_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, split.attrs.GetInts("sizes"));
      const int64_t d = q->head_dim;
      if (sizes != std::vector<int64_t>{q->heads * d, k->heads * d, v->heads * d}) continue;
      TP_RETURN_IF_ERROR(Fuse(graph, uses, static_cast<int>(i), *q, *k, *v, rewriter));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  static absl::Status Fuse(const ir::Graph& g, const UseMap& uses, int split_index, const Chain& q,
                           const Chain& k, const Chain& v, GraphRewriter& rewriter) {
    auto region = [&](int index) -> const ir::Region& {
      return g.regions()[static_cast<size_t>(index)];
    };
    const bool norms = q.norm >= 0;
    const std::string kind = norms ? "qk_norm_rope_kv_write" : "rope_kv_write";
    const std::string site =
        absl::StrCat(RegionLabel(g, split_index), ": cannot fuse into ", kind, ": ");
    const ir::Region& rope_q = region(q.rope);
    const ir::Region& rope_k = region(k.rope);
    if (!(rope_q.attrs == rope_k.attrs)) {
      return absl::FailedPreconditionError(absl::StrCat(site, RegionLabel(g, q.rope), " and ",
                                                        RegionLabel(g, k.rope),
                                                        " have different RoPE attributes"));
    }
    const ir::ValueId positions = rope_q.operands[1];
    for (int index : {k.rope, k.write, v.write}) {
      const ir::Region& r = region(index);
      if (r.operands[r.kind == "rope" ? 1 : 2] != positions) {
        return absl::FailedPreconditionError(absl::StrCat(
            site, RegionLabel(g, index), " reads other positions than ", RegionLabel(g, q.rope)));
      }
    }
    ir::Attributes attrs = rope_q.attrs;
    attrs.Set("num_heads", q.heads);
    attrs.Set("num_kv_heads", k.heads);
    std::vector<ir::ValueId> operands = {region(split_index).operands[0]};
    if (norms) {
      const ir::Region& norm_q = region(q.norm);
      const ir::Region& norm_k = region(k.norm);
      if (!(norm_q.attrs == norm_k.attrs)) {
        return absl::FailedPreconditionError(absl::StrCat(site, RegionLabel(g, q.norm), " and ",
                                                          RegionLabel(g, k.norm),
                                                          " have different epsilons"));
      }
      TP_ASSIGN_OR_RETURN(const double eps, norm_q.attrs.GetFloat("eps"));
      attrs.Set("eps", eps);
      operands.push_back(norm_q.operands[1]);
      operands.push_back(norm_k.operands[1]);
    }
    const int cache_operand = static_cast<int>(operands.size());
    operands.push_back(region(k.write).operands[0]);
    operands.push_back(region(v.write).operands[0]);
    operands.push_back(positions);

    std::vector<int> match = {split_index, q.reshape, k.reshape, v.reshape,
                              q.rope,      k.rope,    k.write,   v.write};
    if (norms) {
      match.push_back(q.norm);
      match.push_back(k.norm);
    }
    std::sort(match.begin(), match.end());
    const std::vector<ir::ValueId> exported = {rope_q.results[0], region(k.write).results[0],
                                               region(v.write).results[0]};
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
    std::vector<ir::ResultAlias> aliases(exported.size());
    for (size_t j = 1; j < exported.size(); ++j) {
      aliases[j] = {ir::AliasKind::kInPlace, cache_operand + static_cast<int>(j) - 1};
    }
    return rewriter.Replace(anchor, [=](RegionEmitter& out) {
      return out.EmitFused(kind, operands, exported, aliases, attrs, fused_from);
    });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseQkNormRopeKvWritePass() {
  return std::make_unique<FuseQkNormRopeKvWritePass>();
}

}  // namespace tileplan::planner
