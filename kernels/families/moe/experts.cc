// The routed experts: expert_linear, whose expert ids the kernels read from device memory
// (the routing is never known at launch, so a decode CUDA Graph replays with new routing).
//
// expert_gemv (decode-sized inputs, any token count): CTA (s, y) takes selection s =
// token * K + k, reads e = ids[s] and computes `rows_per_cta` rows of W[e] against the
// selection's input row, a warp per `rows_per_cta / (threads / 32)` rows, `vec` elements per
// load (16 bytes for bf16), float accumulation. Bytes count each selected expert's weight once:
// min(E, selections) distinct experts.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/moe/moe_params.h"

namespace tileplan::kernels::moe {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::moe

namespace tileplan::kernels::internal {
namespace {

// The shape of an expert_linear region (operands x, ids, w).
struct ExpertShape {
  int64_t tokens = 0;            // B * T
  int64_t top_k = 0;             // K
  int64_t selections = 0;        // B * T * K
  int64_t experts = 0;           // E
  int64_t cols = 0;              // N, the output features
  int64_t depth = 0;             // H, the reduction length
  bool x_per_selection = false;  // x is [B,T,K,H] (else [B,T,H], shared by the K selections)
};

ExpertShape ShapeOf(const BoundRegion& r) {
  ExpertShape s;
  const std::vector<int64_t>& ids = r.operand(1).shape;
  const std::vector<int64_t>& w = r.operand(2).shape;
  s.tokens = ids[0] * ids[1];
  s.top_k = ids[2];
  s.selections = s.tokens * s.top_k;
  s.experts = w[0];
  s.cols = w[1];
  s.depth = w[2];
  s.x_per_selection = r.operand(0).shape.size() == 4;
  return s;
}

// DRAM bytes of an expert_linear: x, the ids and the output once, and the weights of the
// distinct experts the selections can name, at most min(E, selections) of them.
int64_t ExpertBytes(const BoundRegion& r) {
  const ExpertShape s = ShapeOf(r);
  return r.operand_bytes(0) + r.operand_bytes(1) + r.result_bytes(0) +
         std::min(s.experts, s.selections) * s.cols * s.depth * ir::DTypeSize(r.operand_dtype(2));
}

// Refuses unless x is one matrix of rows (tokens or selections) and x and w have contiguous
// last dims.
absl::Status CheckExpertRegion(const BoundRegion& r) {
  TP_RETURN_IF_ERROR(RequireInnerContiguous(r, {0, 1, 2}));
  if (!IsMatrix(r.operand(0))) {
    return Refuse(absl::StrCat(OperandLabel(r, 0), " with strides [",
                               absl::StrJoin(r.operand(0).strides, ","),
                               "] is not one matrix of rows with a leading dimension"));
  }
  return absl::OkStatus();
}

// The widest access of at most 16 bytes of the weight that divides H and x's offset and row
// strides.
int64_t ExpertVec(const BoundRegion& r) {
  std::vector<int64_t> extents = AlignmentExtents(r, {0});
  extents.push_back(r.operand(2).shape.back());
  return VectorWidth(r.operand_dtype(2), extents);
}

struct GemvRow {
  absl::string_view arch;
  int64_t threads;
  int64_t rows_per_cta;
};
constexpr GemvRow kGemvRows[] = {{"sm_80", 128, 8},
                                 {"sm_90", 128, 8},
                                 {"sm_100", 256, 16},
                                 {"sm_120", 128, 8},
                                 {"default", 128, 4}};

// Rows a warp accumulates at once (registers: one float and one weight vector each).
constexpr int64_t kMaxRowsPerWarp = 8;
// Grid y: ceil(N / rows_per_cta) tiles.
constexpr int64_t kMaxGridY = 65535;

absl::StatusOr<TemplateLaunch> LaunchExpertGemv(const BoundRegion& r, const Tactic& t,
                                                const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t rows_per_cta, b.Param("rows_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, b.Param("vec"));
  const ExpertShape s = ShapeOf(r);
  TP_ASSIGN_OR_RETURN(const std::string x_type, b.TypeName(r.operand_dtype(0), "x"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(r.operand_dtype(2), "the weight"));
  if (r.result_dtype(0) != r.operand_dtype(0)) return b.Error("the result's dtype is not x's");
  TP_ASSIGN_OR_RETURN(const Matrix x, b.AsMatrix(r.operand(0), "x"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(1), "the ids"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(2), "the weight"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  if (x.rows != (s.x_per_selection ? s.selections : s.tokens) || x.cols != s.depth) {
    return b.Error("x is [", x.rows, ", ", x.cols, "], not one row of H = ", s.depth,
                   s.x_per_selection ? " per selection" : " per token");
  }
  if (s.depth % vec != 0 || x.stride % vec != 0) {
    return b.Error("x rows of ", s.depth, " (stride ", x.stride, ") do not split into vec ", vec);
  }
  const int64_t tiles = CeilDiv(s.cols, rows_per_cta);
  if (tiles > kMaxGridY) {
    return b.Error(s.cols, " output features make ", tiles, " row tiles, above ", kMaxGridY);
  }
  TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(r.operand_dtype(0)), {0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {1}));
  TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(r.operand_dtype(2)), {2}));
  TP_RETURN_IF_ERROR(b.CheckResults(ir::DTypeSize(r.result_dtype(0)), {0}));
  ExpertGemvParams p{};
  p.x = b.Operand(0);
  p.x_stride = x.stride;
  p.x_per_selection = s.x_per_selection ? 1 : 0;
  p.ids = static_cast<const int*>(b.Operand(1));
  p.w = b.Operand(2);
  p.out = b.Result(0);
  p.selections = static_cast<int>(s.selections);
  p.top_k = static_cast<int>(s.top_k);
  p.experts = static_cast<int>(s.experts);
  p.cols = static_cast<int>(s.cols);
  p.depth = static_cast<int>(s.depth);
  p.error = b.error();
  b.Launch("expert_gemv.cuh",
           absl::StrCat("tileplan::expert_gemv<", x_type, ", ", w_type, ", ", threads, ", ",
                        rows_per_cta, ", ", vec, ">"),
           {std::max<int64_t>(1, s.selections), tiles, 1}, {threads, 1, 1}, 0, p);
  return std::move(b).Finish();
}

class ExpertGemvFamily final : public TemplateFamilyBase {
 public:
  ExpertGemvFamily()
      : TemplateFamilyBase("expert_gemv", 1, {"expert_linear"},
                           {"rows_per_cta", "threads", "vec"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const ExpertShape s = ShapeOf(r);
    LaunchGeometry g;
    g.grid = {std::max<int64_t>(1, s.selections), CeilDiv(s.cols, t.params.at("rows_per_cta")), 1};
    g.block = {t.params.at("threads"), 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    const ExpertShape s = ShapeOf(r);
    WorkEstimate w;
    w.bytes = ExpertBytes(r);
    w.flops = 2 * s.selections * s.cols * s.depth;
    return w;
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(moe::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchExpertGemv(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    TP_RETURN_IF_ERROR(CheckExpertRegion(r));
    const ExpertShape s = ShapeOf(r);
    if (s.cols > kMaxGridY) {
      return Refuse(absl::StrCat("N = ", s.cols, " output features exceed ", kMaxGridY,
                                 " row tiles of one row"));
    }
    return absl::OkStatus();
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t) const override {
    GemvRow row = kGemvRows[4];
    for (const GemvRow& candidate : kGemvRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const ExpertShape s = ShapeOf(r);
    int64_t threads = row.threads;
    int64_t rows = row.rows_per_cta;
    // No idle warps on a narrow output: fewer rows per CTA, and with them fewer warps (one row
    // each at least), while the rows exceed N.
    while (rows > 1 && rows / 2 >= s.cols) {
      rows /= 2;
      if (threads / 32 > rows) threads /= 2;
    }
    // While the grid leaves SMs idle: fewer rows per CTA, down to one per warp.
    while (rows > threads / 32 && s.selections * CeilDiv(s.cols, rows) < target.sm_count()) {
      rows /= 2;
    }
    while (rows / (threads / 32) > kMaxRowsPerWarp) threads *= 2;
    return MakeTactic({{"rows_per_cta", rows}, {"threads", threads}, {"vec", ExpertVec(r)}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription&) const override {
    return {{"rows_per_cta", {1, 2, 4, 8, 16, 32}},
            {"threads", {32, 64, 128, 256}},
            {"vec", {ExpertVec(r)}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription&) const override {
    const int64_t threads = t.params.at("threads");
    const int64_t rows = t.params.at("rows_per_cta");
    const int64_t vec = t.params.at("vec");
    if (!IsBlockSize(threads))
      return BadParam("threads", threads, "a multiple of 32 in [32, 1024]");
    const int64_t warps = threads / 32;
    if (!IsPowerOfTwo(rows) || rows % warps != 0 || rows / warps > kMaxRowsPerWarp) {
      return BadParam("rows_per_cta", rows,
                      absl::StrCat("a power of two holding 1 to ", kMaxRowsPerWarp,
                                   " rows for each of the ", warps, " warps"));
    }
    if (CeilDiv(ShapeOf(r).cols, rows) > kMaxGridY) {
      return BadParam("rows_per_cta", rows,
                      absl::StrCat("at least N / ", kMaxGridY, " (the grid's y extent)"));
    }
    if (!IsPowerOfTwo(vec) || vec > ExpertVec(r)) {
      return BadParam("vec", vec, absl::StrCat("a power of two <= ", ExpertVec(r)));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeExpertGemvFamily() {
  return std::make_unique<ExpertGemvFamily>();
}

}  // namespace tileplan::kernels::internal
