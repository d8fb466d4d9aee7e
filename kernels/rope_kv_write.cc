// rope_kv_write: rope, kv_write, rope_kv_write and qk_norm_rope_kv_write. One warp handles
// one head of one token and holds it in registers (so head_dim <= 256): per-head RMSNorm,
// rotate-half RoPE at the token's position, then the store of k and v into the cache row
// `positions[b,t]` and of q into the result. `heads_per_cta` warps share a CTA.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/families.h"
#include "kernels/family_base.h"

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t heads_per_cta;
};
constexpr Row kRows[] = {{"sm_80", 4}, {"sm_90", 8}, {"sm_100", 8}, {"sm_120", 4}, {"default", 4}};

constexpr int64_t kMaxHeadDim = 256;

// Shapes of a region of one of the four kinds.
struct HeadShape {
  int64_t tokens = 0;    // B * T
  int64_t heads = 0;     // heads processed per token (q, k and v heads for the fused kinds)
  int64_t rotated = 0;   // heads rotated per token
  int64_t kv_heads = 0;  // heads written into each cache
  int64_t head_dim = 0;
};

HeadShape ShapeOf(const BoundRegion& r) {
  HeadShape s;
  const std::string& k = r.kind();
  if (k == "rope") {
    const auto& x = r.operand(0).shape;
    s = {x[0] * x[1], x[2], x[2], 0, x[3]};
  } else if (k == "kv_write") {
    const auto& x = r.operand(1).shape;
    s = {x[0] * x[1], x[2], 0, x[2], x[3]};
  } else {
    const auto& q = r.result(0).shape;
    const int64_t kv = r.result(1).shape[1];
    s = {q[0] * q[1], q[2] + 2 * kv, q[2] + kv, kv, q[3]};
  }
  return s;
}

class RopeKvWriteFamily final : public FamilyBase {
 public:
  RopeKvWriteFamily()
      : FamilyBase("rope_kv_write", 1,
                   {"kv_write", "qk_norm_rope_kv_write", "rope", "rope_kv_write"},
                   {"heads_per_cta"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const HeadShape s = ShapeOf(r);
    const int64_t per_cta = t.params.at("heads_per_cta");
    LaunchGeometry g;
    g.grid = {CeilDiv(s.heads, per_cta), std::max<int64_t>(1, s.tokens), 1};
    g.block = {32 * per_cta, 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    const HeadShape s = ShapeOf(r);
    const std::string& k = r.kind();
    const int64_t es = ir::DTypeSize(r.result_dtype(0));
    const int64_t row = s.tokens * s.head_dim;  // elements of one head across all tokens
    WorkEstimate w;
    if (k == "rope") {
      w.bytes = r.operand_bytes(0) + r.result_bytes(0) + r.operand_bytes(1);
    } else if (k == "kv_write") {
      w.bytes = 2 * r.operand_bytes(1) + r.operand_bytes(2);
    } else {
      // qkv read; q written; k and v rows written into the caches; norms and positions read.
      w.bytes = r.operand_bytes(0) + r.result_bytes(0) + 2 * s.kv_heads * row * es +
                r.operand_bytes(r.num_operands() - 1);
      if (k == "qk_norm_rope_kv_write") w.bytes += r.operand_bytes(1) + r.operand_bytes(2);
    }
    w.flops = 3 * s.rotated * row + (k == "qk_norm_rope_kv_write" ? 4 * s.rotated * row : 0);
    return w;
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    return r.kind() == "rope" && operand == 0;  // a warp reads its head before rotating it
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    const HeadShape s = ShapeOf(r);
    if (s.head_dim > kMaxHeadDim) {
      return Refuse(absl::StrCat("head_dim ", s.head_dim, " exceeds ", kMaxHeadDim,
                                 " (a warp holds one head in registers)"));
    }
    return RequireInnerContiguous(r, {0, 1});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription&,
                   int64_t) const override {
    int64_t per_cta = 4;
    for (const Row& row : kRows) {
      if (row.arch == arch) per_cta = row.heads_per_cta;
    }
    return MakeTactic({{"heads_per_cta", std::min(per_cta, NextPowerOfTwo(ShapeOf(r).heads))}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"heads_per_cta", {1, 2, 4, 8, 16}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion&,
                           const TargetDescription&) const override {
    const int64_t per_cta = t.params.at("heads_per_cta");
    if (!IsPowerOfTwo(per_cta) || per_cta > 32) {
      return BadParam("heads_per_cta", per_cta, "a power of two <= 32");
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeRopeKvWriteFamily() {
  return std::make_unique<RopeKvWriteFamily>();
}

}  // namespace tileplan::kernels::internal
