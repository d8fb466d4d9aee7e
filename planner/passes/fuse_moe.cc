// fuse_moe: in a decode graph, the primitive regions of a mixture-of-experts block become one
// `moe` region (docs/planner.md). The pattern, from a moe_combine:
//   l = moe_router(x, router)              ids, w = moe_topk(l)
//   g = expert_linear(x, ids, gate)        u = expert_linear(x, ids, up)
//   h = mul(silu(g), u)                    y = expert_linear(h, ids, down)
//   c = moe_combine(y, w)
// then optionally the shared MLP on the same x joined by an add,
//   s = linear(mul(silu(linear(x, shared_gate)), linear(x, shared_up)), shared_down)
//   c = add(c, s)
// whose gate and up weights the moe region takes packed, as pack_gate_up packs them (one
// weight of the same name and tensors, so a prefill plan and a decode plan bind the same),
// and optionally one more add of c and any value r (the residual stream). Every intermediate
// must be read only by the next step of the pattern (ids by the three expert linears) and not
// be a graph output; either operand order of each mul and add matches. Decode only: the
// factory refuses other phases, a site already specialized for prefill is an error, and a
// graph whose bound batch exceeds PassOptions::moe_max_batch is left alone.
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "planner/passes/linear_packing.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

// mul(silu(g), u) or mul(u, silu(g)) at region `mul`, where g and u are results of two
// different regions of `kind` reading the same operand 0 (x), g read only by the silu, the
// silu's result and u only by the mul.
struct GatedPair {
  int gate = -1;
  int up = -1;
  int silu = -1;
};

std::optional<GatedPair> MatchGatedPair(const ir::Graph& g, const UseMap& uses, int mul,
                                        absl::string_view kind) {
  const ir::Region& m = g.regions()[static_cast<size_t>(mul)];
  if (m.kind != "mul") return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const ir::ValueId act = m.operands[static_cast<size_t>(side)];
    const ir::ValueId up = m.operands[static_cast<size_t>(1 - side)];
    if (!IsResultOf(g, act, "silu") || uses.SoleUser(act) != mul) continue;
    GatedPair pair;
    pair.silu = g.value(act).producer;
    const ir::ValueId gate = Producer(g, act)->operands[0];
    if (!IsResultOf(g, gate, kind) || !IsResultOf(g, up, kind) ||
        uses.SoleUser(gate) != pair.silu || uses.SoleUser(up) != mul) {
      continue;
    }
    pair.gate = g.value(gate).producer;
    pair.up = g.value(up).producer;
    if (pair.gate == pair.up || Producer(g, gate)->operands[0] != Producer(g, up)->operands[0]) {
      continue;
    }
    return pair;
  }
  return std::nullopt;
}

// The add reading `value` as one operand, when it is `value`'s only reader and no earlier site
// claimed it, with its other operand.
struct AddOf {
  int index = -1;
  ir::ValueId other = ir::kNoValue;
};

std::optional<AddOf> SoleAdd(const ir::Graph& g, const UseMap& uses, const GraphRewriter& rewriter,
                             ir::ValueId value) {
  const int add = uses.SoleUser(value);
  if (add < 0 || rewriter.claimed(add)) return std::nullopt;
  const ir::Region& r = g.regions()[static_cast<size_t>(add)];
  if (r.kind != "add") return std::nullopt;
  return AddOf{add, r.operands[0] == value ? r.operands[1] : r.operands[0]};
}

struct Site {
  std::vector<int> regions;  // every matched region, in graph order
  // The moe region's operands, in its operand order; with shared experts operand 5 (the
  // packed gate/up weight) is kNoValue here and declared by the rewrite.
  std::vector<ir::ValueId> operands;
  std::vector<int> shared_gate_up;    // the shared MLP's gate and up linears
  ir::ValueId result = ir::kNoValue;  // the value the moe region replaces
  int combine = -1;
  bool shared = false;
  bool residual = false;
  ir::DType logits_dtype = ir::DType::kF32;
  ir::DType weights_dtype = ir::DType::kF32;
  ir::Attributes topk_attrs;
};

// The routed experts ending in the moe_combine at `combine`, then the shared MLP and the
// residual add when they follow; nullopt when the regions are not the pattern.
std::optional<Site> Match(const ir::Graph& g, const UseMap& uses, const GraphRewriter& rewriter,
                          int combine) {
  const ir::Region& comb = g.regions()[static_cast<size_t>(combine)];
  const ir::ValueId y = comb.operands[0];
  const ir::ValueId weights = comb.operands[1];
  if (!IsResultOf(g, y, "expert_linear") || uses.SoleUser(y) != combine ||
      !IsResultOf(g, weights, "moe_topk", 1) || uses.SoleUser(weights) != combine) {
    return std::nullopt;
  }
  const int down = g.value(y).producer;
  const ir::Region& down_r = g.regions()[static_cast<size_t>(down)];
  const ir::ValueId h = down_r.operands[0];
  if (!IsResultOf(g, h, "mul") || uses.SoleUser(h) != down) return std::nullopt;
  const std::optional<GatedPair> experts =
      MatchGatedPair(g, uses, g.value(h).producer, "expert_linear");
  if (!experts) return std::nullopt;
  const ir::Region& gate_r = g.regions()[static_cast<size_t>(experts->gate)];
  const ir::Region& up_r = g.regions()[static_cast<size_t>(experts->up)];
  const ir::ValueId x = gate_r.operands[0];
  const ir::ValueId ids = gate_r.operands[1];
  const int topk = g.value(weights).producer;
  const ir::Region& topk_r = g.regions()[static_cast<size_t>(topk)];
  // One routing: the ids of the same top-k feed the three expert linears and nothing else,
  // and the experts' input is the token's row (not one per selection).
  if (g.value(x).type.rank() != 3 || ids != topk_r.results[0] || up_r.operands[1] != ids ||
      down_r.operands[1] != ids || !uses.UsedOnlyBy(ids, {experts->gate, experts->up, down})) {
    return std::nullopt;
  }
  const ir::ValueId logits = topk_r.operands[0];
  if (!IsResultOf(g, logits, "moe_router") || uses.SoleUser(logits) != topk) return std::nullopt;
  const int router = g.value(logits).producer;
  const ir::Region& router_r = g.regions()[static_cast<size_t>(router)];
  if (router_r.operands[0] != x) return std::nullopt;

  Site site;
  site.combine = combine;
  site.regions = {router, topk,   experts->gate, experts->up, experts->silu, g.value(h).producer,
                  down,   combine};
  site.operands = {x, router_r.operands[1], gate_r.operands[2], up_r.operands[2],
                   down_r.operands[2]};
  site.logits_dtype = g.value(logits).type.dtype;
  site.weights_dtype = g.value(weights).type.dtype;
  site.topk_attrs = topk_r.attrs;
  site.result = comb.results[0];

  // The shared MLP: add(c, s) with s = linear(mul(silu(linear(x, ·)), linear(x, ·)), ·), the
  // linears without a bias and their gate and up weights packable.
  auto plain_linear = [&](int index) {
    const ir::Region& r = g.regions()[static_cast<size_t>(index)];
    return r.kind == "linear" && r.operands.size() == 2;
  };
  std::optional<AddOf> add = SoleAdd(g, uses, rewriter, site.result);
  if (add && IsResultOf(g, add->other, "linear") && uses.SoleUser(add->other) == add->index) {
    const int s_down = g.value(add->other).producer;
    const ir::ValueId sh = g.regions()[static_cast<size_t>(s_down)].operands[0];
    if (plain_linear(s_down) && IsResultOf(g, sh, "mul") && uses.SoleUser(sh) == s_down) {
      const std::optional<GatedPair> mlp = MatchGatedPair(g, uses, g.value(sh).producer, "linear");
      if (mlp && plain_linear(mlp->gate) && plain_linear(mlp->up) &&
          g.regions()[static_cast<size_t>(mlp->gate)].operands[0] == x &&
          CheckPackGroup(g, uses, {mlp->gate, mlp->up}).ok()) {
        site.shared = true;
        site.shared_gate_up = {mlp->gate, mlp->up};
        site.regions.insert(site.regions.end(), {mlp->gate, mlp->up, mlp->silu,
                                                 g.value(sh).producer, s_down, add->index});
        site.operands.push_back(ir::kNoValue);
        site.operands.push_back(g.regions()[static_cast<size_t>(s_down)].operands[1]);
        site.result = g.regions()[static_cast<size_t>(add->index)].results[0];
        add = SoleAdd(g, uses, rewriter, site.result);
      }
    }
  }
  // The residual: one more add, of any value.
  if (add) {
    site.residual = true;
    site.regions.push_back(add->index);
    site.operands.push_back(add->other);
    site.result = g.regions()[static_cast<size_t>(add->index)].results[0];
  }
  std::sort(site.regions.begin(), site.regions.end());
  return site;
}

class FuseMoePass : public Pass {
 public:
  explicit FuseMoePass(bool enabled) : enabled_(enabled) {}

  absl::string_view name() const override { return "fuse_moe"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    if (!enabled_) return false;
    const UseMap uses(graph);
    GraphRewriter rewriter(graph);
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      if (graph.regions()[i].kind != "moe_combine") continue;
      const std::optional<Site> site = Match(graph, uses, rewriter, static_cast<int>(i));
      if (site) TP_RETURN_IF_ERROR(Fuse(graph, uses, *site, rewriter));
    }
    if (rewriter.empty()) return false;
    TP_ASSIGN_OR_RETURN(graph, rewriter.Rebuild());
    return true;
  }

 private:
  bool enabled_;

  static absl::Status Fuse(const ir::Graph& g, const UseMap& uses, const Site& site,
                           GraphRewriter& rewriter) {
    const std::string prefix =
        absl::StrCat(RegionLabel(g, site.combine), ": cannot fuse into moe: ");
    for (int index : site.regions) {
      if (g.regions()[static_cast<size_t>(index)].phase == ir::Phase::kPrefill) {
        return absl::FailedPreconditionError(
            absl::StrCat(prefix, RegionLabel(g, index),
                         " is specialized for prefill; the fused kind serves decode steps only"));
      }
    }
    // The router's and the three expert weights' expert counts: the primitive regions type
    // check with different ones, the fused kind has one E.
    const ir::Dim& experts = g.value(site.operands[1]).type.dims[0];
    for (int w = 2; w <= 4; ++w) {
      const ir::Dim& e = g.value(site.operands[static_cast<size_t>(w)]).type.dims[0];
      if (!(e == experts)) {
        return absl::FailedPreconditionError(absl::StrCat(
            prefix, "the router scores ", experts.ToString(), " experts, but %",
            g.value(site.operands[static_cast<size_t>(w)]).name, " stacks ", e.ToString()));
      }
    }
    std::vector<ir::ValueId> anchored;  // the operands that exist in the source graph
    for (ir::ValueId v : site.operands) {
      if (v != ir::kNoValue) anchored.push_back(v);
    }
    const int anchor = FindAnchor(g, uses, site.regions, anchored, {site.result});
    if (anchor < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          prefix, "no position keeps every operand defined before it and every reader after it"));
    }
    ir::Attributes attrs = site.topk_attrs;
    attrs.Set("logits_dtype", std::string(ir::DTypeName(site.logits_dtype)));
    attrs.Set("weights_dtype", std::string(ir::DTypeName(site.weights_dtype)));
    attrs.Set("shared_experts", site.shared);
    attrs.Set("residual", site.residual);
    std::vector<std::string> fused_from;
    for (int index : site.regions) {
      fused_from.push_back(g.regions()[static_cast<size_t>(index)].kind);
      if (index != anchor) TP_RETURN_IF_ERROR(rewriter.Drop(index));
    }
    int packed = -1;
    if (site.shared) {
      TP_ASSIGN_OR_RETURN(packed, PackGroupWeights(site.shared_gate_up, rewriter));
    }
    const std::vector<ir::ValueId> operands = site.operands;
    const ir::ValueId result = site.result;
    return rewriter.Replace(anchor, [=](RegionEmitter& out) -> absl::Status {
      std::vector<ir::ValueId> mapped;
      for (ir::ValueId v : operands) {
        if (v == ir::kNoValue) {
          mapped.push_back(out.NewWeight(packed));
        } else {
          TP_ASSIGN_OR_RETURN(const ir::ValueId m, out.Map(v));
          mapped.push_back(m);
        }
      }
      const ir::Value& r = out.source().value(result);
      TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> ids,
                          out.Emit("moe", std::move(mapped), {ir::ResultSpec{r.name, r.type, {}}},
                                   attrs, fused_from));
      out.Bind(result, ids[0]);
      return absl::OkStatus();
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pass>> CreateFuseMoePass(const PassOptions& options) {
  if (options.phase != ir::Phase::kDecode) {
    return absl::InvalidArgumentError(
        absl::StrCat("fuse_moe forms decode kernels; it does not run for the ",
                     ir::PhaseName(options.phase), " phase"));
  }
  if (options.moe_max_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe_max_batch must be >= 0, got ", options.moe_max_batch));
  }
  return std::make_unique<FuseMoePass>(!options.batch.has_value() ||
                                       *options.batch <= options.moe_max_batch);
}

}  // namespace tileplan::planner
