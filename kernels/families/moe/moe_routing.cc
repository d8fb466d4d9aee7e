// moe_routing: moe_topk. One warp per token holds the token's E router logits in registers
// (ceil(E / 32) per lane), forms the softmax's maximum and sum with warp reductions, keeps the
// topk_groups best of num_groups expert groups, and selects the top_k experts by K rounds of
// a warp argmax (ties to the lower group and the lower expert); lane k writes selection k's
// id and weight. `tokens_per_cta` warps share a CTA.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/moe/moe_params.h"

namespace tileplan::kernels::moe {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::moe

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t tokens_per_cta;
};
constexpr Row kRows[] = {{"sm_80", 4}, {"sm_90", 8}, {"sm_100", 8}, {"sm_120", 4}, {"default", 4}};

// A warp holds a token's logits, at most 32 per lane; a lane holds one selection; the kept
// groups are bits of one word.
constexpr int64_t kMaxExperts = 32 * 32;
constexpr int64_t kMaxTopK = 32;
constexpr int64_t kMaxGroups = 32;

struct TopkShape {
  int64_t tokens = 0;   // B * T
  int64_t experts = 0;  // E
  int64_t top_k = 0;    // K
  int64_t groups = 1;
  int64_t topk_groups = 1;
};

TopkShape ShapeOf(const BoundRegion& r) {
  TopkShape s;
  s.tokens = Rows(r.operand(0).shape);
  s.experts = r.operand(0).shape.back();
  s.top_k = r.result(0).shape.back();
  // The verifier checked the attributes; an absent one leaves the defaults.
  s.groups = r.region().attrs.GetInt("num_groups").value_or(1);
  s.topk_groups = r.region().attrs.GetInt("topk_groups").value_or(1);
  return s;
}

absl::StatusOr<TemplateLaunch> LaunchMoeTopk(const BoundRegion& r, const Tactic& t,
                                             const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t per_cta, b.Param("tokens_per_cta"));
  const TopkShape s = ShapeOf(r);
  const ir::Attributes& attrs = r.region().attrs;
  TP_ASSIGN_OR_RETURN(const bool norm, attrs.GetBool("norm_topk_prob"));
  TP_ASSIGN_OR_RETURN(const double scaling, attrs.GetFloat("scaling"));
  const ir::DType logits_dtype = r.operand_dtype(0);
  if (r.result_dtype(1) != logits_dtype) {
    return b.Error("the weights are ", ir::DTypeName(r.result_dtype(1)), ", not the logits' ",
                   ir::DTypeName(logits_dtype));
  }
  TP_ASSIGN_OR_RETURN(const std::string logits_type, b.TypeName(logits_dtype, "the logits"));
  TP_ASSIGN_OR_RETURN(const Matrix logits, b.AsMatrix(r.operand(0), "the logits"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the ids"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(1), "the weights"));
  if (s.experts < 1 || s.experts > kMaxExperts || s.top_k < 1 || s.top_k > kMaxTopK ||
      s.groups < 1 || s.groups > kMaxGroups || s.experts % s.groups != 0) {
    return b.Error("E = ", s.experts, ", top_k ", s.top_k, " and num_groups ", s.groups,
                   " are outside the kernel's bounds");
  }
  const int64_t logits_bytes = ir::DTypeSize(logits_dtype);
  TP_RETURN_IF_ERROR(b.CheckOperands(logits_bytes, {0}));
  TP_RETURN_IF_ERROR(b.CheckResults(4, {0}));
  TP_RETURN_IF_ERROR(b.CheckResults(logits_bytes, {1}));
  MoeTopkParams p{};
  p.logits = b.Operand(0);
  p.logits_stride = logits.stride;
  p.ids = static_cast<int*>(b.Result(0));
  p.weights = b.Result(1);
  p.tokens = static_cast<int>(s.tokens);
  p.experts = static_cast<int>(s.experts);
  p.top_k = static_cast<int>(s.top_k);
  p.groups = static_cast<int>(s.groups);
  p.topk_groups = static_cast<int>(s.topk_groups);
  p.norm_topk_prob = norm ? 1 : 0;
  p.scaling = static_cast<float>(scaling);
  b.Launch("moe_topk.cuh",
           absl::StrCat("tileplan::moe_topk<", logits_type, ", ", CeilDiv(s.experts, 32), ", ",
                        per_cta, ">"),
           {std::max<int64_t>(1, CeilDiv(s.tokens, per_cta)), 1, 1}, {32 * per_cta, 1, 1}, 0, p);
  return std::move(b).Finish();
}

class MoeRoutingFamily final : public TemplateFamilyBase {
 public:
  MoeRoutingFamily() : TemplateFamilyBase("moe_routing", 2, {"moe_topk"}, {"tokens_per_cta"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const int64_t per_cta = t.params.at("tokens_per_cta");
    LaunchGeometry g;
    g.grid = {std::max<int64_t>(1, CeilDiv(ShapeOf(r).tokens, per_cta)), 1, 1};
    g.block = {32 * per_cta, 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    const TopkShape s = ShapeOf(r);
    WorkEstimate w;
    w.bytes = r.operand_bytes(0) + r.result_bytes(0) + r.result_bytes(1);
    // Per logit: the maximum, the exponential and the sum, a compare per group pass (G > 1)
    // and one per selection round.
    w.flops = s.tokens * s.experts * (3 + (s.groups > 1 ? s.groups : 0) + s.top_k);
    return w;
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(moe::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchMoeTopk(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    const TopkShape s = ShapeOf(r);
    if (s.experts > kMaxExperts) {
      return Refuse(absl::StrCat("E = ", s.experts, " experts exceed ", kMaxExperts,
                                 " (a warp holds a token's logits, 32 per lane)"));
    }
    if (s.top_k > kMaxTopK) {
      return Refuse(
          absl::StrCat("top_k ", s.top_k, " exceeds ", kMaxTopK, " (a lane holds each selection)"));
    }
    if (s.groups > kMaxGroups) {
      return Refuse(absl::StrCat("num_groups ", s.groups, " exceeds ", kMaxGroups));
    }
    return RequireInnerContiguous(r, {0});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t) const override {
    int64_t per_cta = 4;
    for (const Row& row : kRows) {
      if (row.arch == arch) per_cta = row.tokens_per_cta;
    }
    // Fewer tokens per CTA while the grid leaves SMs idle.
    const int64_t tokens = ShapeOf(r).tokens;
    while (per_cta > 1 && CeilDiv(tokens, per_cta) < target.sm_count()) per_cta /= 2;
    return MakeTactic({{"tokens_per_cta", per_cta}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"tokens_per_cta", {1, 2, 4, 8, 16}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion&,
                           const TargetDescription&) const override {
    const int64_t per_cta = t.params.at("tokens_per_cta");
    if (!IsPowerOfTwo(per_cta) || per_cta > 32) {
      return BadParam("tokens_per_cta", per_cta, "a power of two <= 32");
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeMoeRoutingFamily() {
  return std::make_unique<MoeRoutingFamily>();
}

}  // namespace tileplan::kernels::internal
