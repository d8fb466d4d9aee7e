// rope_kv_write: rope, kv_write, rope_kv_write, qk_norm_rope_kv_write and mla_kv_write. One
// warp handles one head of one token and holds it in registers (so head_dim <= 256 for the
// kinds that rotate; kv_write copies heads of any size): per-head RMSNorm, RoPE at the
// token's position (rotate-half or interleaved pairs, cos and sin times yarn's
// attention_factor), then the store of k and v into the cache row `positions[b,t]` and of q
// into the result. mla_kv_write's two "heads" are the latent (normalized over its C <=
// kMaxLatent elements by one warp) and the rope key. `heads_per_cta` warps share a CTA.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/rope_kv_write/rope_kv_write_params.h"
#include "regions/rope.h"

namespace tileplan::kernels::rope_kv_write {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::rope_kv_write

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t heads_per_cta;
};
constexpr Row kRows[] = {{"sm_80", 4}, {"sm_90", 8}, {"sm_100", 8}, {"sm_120", 4}, {"default", 4}};

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxLatent = 2048;  // mla_kv_write: 8 vectors of 8 per lane

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
  } else if (k == "mla_kv_write") {
    // The latent and the rope key, each written into its cache; head_dim the rope key's.
    const auto& x = r.operand(0).shape;
    s = {x[0] * x[1], 2, 1, 1, r.result(1).shape[3]};
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

constexpr absl::string_view kSource = "rope_kv_write.cuh";

// What rope_kv_write and qk_norm_rope_kv_write share: the packed qkv rows, positions and
// frequencies in, the rotated q and both caches out.
struct FusedShape {
  int64_t stride = 0, tokens = 0, q_heads = 0, kv_heads = 0, capacity = 0;
  int positions = 0;  // the operand holding them
};

template <typename P>
P FusedParams(const LaunchBuilder& b, const FusedShape& s) {
  P p{};
  p.qkv = b.Operand(0);
  p.qkv_stride = s.stride;
  p.positions = static_cast<const int*>(b.Operand(s.positions));
  p.inv_freq = b.rope_inv_freq();
  p.q_out = b.Result(0);
  p.k_cache = b.Result(1);
  p.v_cache = b.Result(2);
  p.tokens = static_cast<int>(s.tokens);
  p.q_heads = static_cast<int>(s.q_heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.capacity = static_cast<int>(s.capacity);
  p.error = b.error();
  return p;
}

// mla_kv_write: operands kv_a, norm, latent_cache, rope_cache, positions.
absl::StatusOr<TemplateLaunch> LaunchMlaKvWrite(const BoundRegion& r, const Tactic& t,
                                                const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t heads_per_cta, b.Param("heads_per_cta"));
  const ir::DType dtype = r.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "kv_a"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(r.operand_dtype(1), "the norm"));
  const Layout& in = r.operand(0);
  const int64_t batch = in.shape[0], tokens = in.shape[1];
  const int64_t latent = r.result(0).shape[3], dim = r.result(1).shape[3];
  const int64_t capacity = r.result(0).shape[2];
  TP_ASSIGN_OR_RETURN(const int64_t stride, b.TokenStride(0, 2));
  for (int i = 0; i < r.num_results(); ++i) {
    TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(i), absl::StrCat("result ", i)));
  }
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(1), "the norm"));
  if (dim % 2 != 0 || dim > kMaxHeadDim || latent > kMaxLatent) {
    return b.Error("rope dim ", dim, " is odd or above ", kMaxHeadDim, ", or latent ", latent,
                   " above ", kMaxLatent);
  }
  absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(r.region().attrs);
  if (!rope.ok()) return b.Error(rope.status().message());
  TP_ASSIGN_OR_RETURN(const double eps, r.region().attrs.GetFloat("eps"));
  const int64_t es = ir::DTypeSize(dtype);
  // The rope key starts `latent` elements into the row.
  const int64_t vec = RopeVector(dtype, dim, {stride, in.offset + latent}, rope->interleaved);
  if (vec == 0) {
    return b.Error("interleaved RoPE needs an even token stride and key offset, got ", stride,
                   " and ", in.offset + latent);
  }
  const int64_t latent_vec = VectorWidth(dtype, {latent, stride, in.offset});
  TP_RETURN_IF_ERROR(
      b.CheckOperands(std::min(latent_vec, rope->interleaved ? 2 * vec : vec) * es, {0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(latent_vec * ir::DTypeSize(r.operand_dtype(1)), {1}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {4}));
  TP_RETURN_IF_ERROR(b.CheckResults(latent_vec * es, {0}));
  TP_RETURN_IF_ERROR(b.CheckResults((rope->interleaved ? 2 * vec : vec) * es, {1}));
  TP_RETURN_IF_ERROR(b.RequireRopeTable());
  MlaKvWriteParams p{};
  p.kv_a = b.Operand(0);
  p.kv_a_stride = stride;
  p.norm = b.Operand(1);
  p.eps = static_cast<float>(eps);
  p.positions = static_cast<const int*>(b.Operand(4));
  p.inv_freq = b.rope_inv_freq();
  p.attention_factor = static_cast<float>(rope->attention_factor);
  p.latent_cache = b.Result(0);
  p.rope_cache = b.Result(1);
  p.tokens = static_cast<int>(tokens);
  p.capacity = static_cast<int>(capacity);
  p.error = b.error();
  b.Launch(kSource,
           absl::StrCat("tileplan::mla_kv_write<", type, ", ", w_type, ", ", latent, ", ", dim,
                        ", ", heads_per_cta, ", ", latent_vec, ", ", vec, ", ",
                        rope->interleaved ? "true" : "false", ">"),
           {CeilDiv(2, heads_per_cta), std::max<int64_t>(1, batch * tokens), 1},
           {32 * heads_per_cta, 1, 1}, 0, p);
  return std::move(b).Finish();
}

absl::StatusOr<TemplateLaunch> LaunchRope(const BoundRegion& r, const Tactic& t,
                                          const RegionBuffers* buffers) {
  if (r.kind() == "mla_kv_write") return LaunchMlaKvWrite(r, t, buffers);
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t heads_per_cta, b.Param("heads_per_cta"));
  const std::string& kind = r.kind();
  const bool fused = kind == "rope_kv_write" || kind == "qk_norm_rope_kv_write";
  const bool norm = kind == "qk_norm_rope_kv_write";
  const int input = kind == "kv_write" ? 1 : 0;  // the operand holding the heads
  const int positions = kind == "rope" ? 1 : kind == "kv_write" ? 2 : norm ? 5 : 3;
  const ir::DType dtype = r.operand_dtype(input);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "the heads"));
  const Layout& in = r.operand(input);
  const int64_t batch = in.shape[0], tokens = in.shape[1];
  int64_t dim = 0, heads = 0, q_heads = 0, kv_heads = 0, capacity = 0;
  if (fused) {
    TP_ASSIGN_OR_RETURN(q_heads, r.region().attrs.GetInt("num_heads"));
    TP_ASSIGN_OR_RETURN(kv_heads, r.region().attrs.GetInt("num_kv_heads"));
    dim = r.result(0).shape[3];
    heads = q_heads + 2 * kv_heads;
    capacity = r.result(1).shape[2];
  } else {
    heads = in.shape[2];
    dim = in.shape[3];
    if (kind == "kv_write") capacity = r.operand(0).shape[2];
  }
  // rope addresses its heads with their own stride (a view of wider heads, as MLA's q_pe of
  // q); the other kinds need a token's heads contiguous.
  TP_ASSIGN_OR_RETURN(const int64_t stride, b.TokenStride(input, kind == "rope" ? 3 : 2));
  const int64_t head_stride = kind == "rope" && in.shape[2] > 1 ? in.strides[2] : dim;
  for (int i = 0; i < r.num_results(); ++i) {
    TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(i), absl::StrCat("result ", i)));
  }
  if (kind != "kv_write" && (dim % 2 != 0 || dim > kMaxHeadDim)) {
    return b.Error("head dim ", dim, " is odd or above ", kMaxHeadDim);
  }
  ir::RopeParams rope;  // kv_write rotates nothing
  if (kind != "kv_write") {
    absl::StatusOr<ir::RopeParams> parsed = ir::RopeParamsFromAttributes(r.region().attrs);
    if (!parsed.ok()) return b.Error(parsed.status().message());
    rope = *std::move(parsed);
  }
  const int64_t es = ir::DTypeSize(dtype);
  const int64_t vec = RopeVector(dtype, dim, {stride, head_stride, in.offset}, rope.interleaved);
  if (vec == 0) {
    return b.Error("interleaved RoPE needs even strides and offset, got token stride ", stride,
                   ", head stride ", head_stride, " and offset ", in.offset);
  }
  // A lane's access: vec elements, or 2 * vec consecutive ones (vec pairs) interleaved.
  const int64_t access = rope.interleaved ? 2 * vec : vec;
  TP_RETURN_IF_ERROR(b.CheckOperands(access * es, {input}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {positions}));
  if (norm) {
    TP_RETURN_IF_ERROR(b.CheckOperands(access * ir::DTypeSize(r.operand_dtype(1)), {1, 2}));
  }
  TP_RETURN_IF_ERROR(b.CheckResults(
      access * es, fused ? std::initializer_list<int>{0, 1, 2} : std::initializer_list<int>{0}));
  if (kind != "kv_write") TP_RETURN_IF_ERROR(b.RequireRopeTable());
  const std::array<int64_t, 3> grid = {CeilDiv(heads, heads_per_cta),
                                       std::max<int64_t>(1, batch * tokens), 1};
  const std::array<int64_t, 3> block = {32 * heads_per_cta, 1, 1};
  const std::string args = absl::StrCat(dim, ", ", heads_per_cta, ", ", vec);
  // The rotating kernels' last template argument: the pair layout.
  const std::string rope_args = absl::StrCat(args, ", ", rope.interleaved ? "true" : "false", ">");
  const float attention_factor = static_cast<float>(rope.attention_factor);
  const FusedShape fused_shape{stride, tokens, q_heads, kv_heads, capacity, positions};
  if (kind == "rope") {
    RopeParams p{};
    p.x = b.Operand(0);
    p.x_stride = stride;
    p.x_head_stride = head_stride;
    p.positions = static_cast<const int*>(b.Operand(1));
    p.inv_freq = b.rope_inv_freq();
    p.attention_factor = attention_factor;
    p.out = b.Result(0);
    p.heads = static_cast<int>(heads);
    b.Launch(kSource, absl::StrCat("tileplan::rope<", type, ", ", rope_args), grid, block, 0, p);
  } else if (kind == "kv_write") {
    KvWriteParams p{};
    p.cache = b.Result(0);
    p.x = b.Operand(1);
    p.x_stride = stride;
    p.positions = static_cast<const int*>(b.Operand(2));
    p.tokens = static_cast<int>(tokens);
    p.heads = static_cast<int>(heads);
    p.capacity = static_cast<int>(capacity);
    p.error = b.error();
    b.Launch(kSource, absl::StrCat("tileplan::kv_write<", type, ", ", args, ">"), grid, block, 0,
             p);
  } else if (norm) {
    TP_ASSIGN_OR_RETURN(const double eps, r.region().attrs.GetFloat("eps"));
    TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(r.operand_dtype(1), "q_norm"));
    QkNormRopeKvWriteParams p = FusedParams<QkNormRopeKvWriteParams>(b, fused_shape);
    p.q_norm = b.Operand(1);
    p.k_norm = b.Operand(2);
    p.eps = static_cast<float>(eps);
    p.attention_factor = attention_factor;
    b.Launch(kSource,
             absl::StrCat("tileplan::qk_norm_rope_kv_write<", type, ", ", w_type, ", ", rope_args),
             grid, block, 0, p);
  } else {
    RopeKvWriteParams p = FusedParams<RopeKvWriteParams>(b, fused_shape);
    p.attention_factor = attention_factor;
    b.Launch(kSource, absl::StrCat("tileplan::rope_kv_write<", type, ", ", rope_args), grid, block,
             0, p);
  }
  return std::move(b).Finish();
}

class RopeKvWriteFamily final : public TemplateFamilyBase {
 public:
  RopeKvWriteFamily()
      : TemplateFamilyBase(
            "rope_kv_write", 2,
            {"kv_write", "mla_kv_write", "qk_norm_rope_kv_write", "rope", "rope_kv_write"},
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
    } else if (k == "mla_kv_write") {
      // kv_a and the norm read, one cache row each written per token, positions read.
      w.bytes = 2 * r.operand_bytes(0) + r.operand_bytes(1) + r.operand_bytes(4);
      w.flops = 3 * row + 4 * s.tokens * r.result(0).shape[3];
      return w;
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

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(rope_kv_write::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchRope(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    const HeadShape s = ShapeOf(r);
    if (r.kind() == "kv_write") return RequireInnerContiguous(r, {0, 1});  // a copy: any dim
    if (r.kind() == "mla_kv_write" && r.result(0).shape[3] > kMaxLatent) {
      return Refuse(absl::StrCat("latent dim ", r.result(0).shape[3], " exceeds ", kMaxLatent,
                                 " (one warp normalizes it in registers)"));
    }
    if (s.head_dim > kMaxHeadDim) {
      return Refuse(absl::StrCat("head_dim ", s.head_dim, " exceeds ", kMaxHeadDim,
                                 " (a warp holds one head in registers)"));
    }
    TP_RETURN_IF_ERROR(RequireInnerContiguous(r, {0, 1}));
    // Interleaved pairs are read as 2 * vec consecutive elements.
    return CheckRopeLayout(r, 0);
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
