// wgmma_gemm: linear, linear_residual and linear_swiglu for prefill-sized inputs on Hopper's
// warpgroup tensor-core instructions (wgmma, sm_90a; docs/kernels.md). A CTA computes a
// tile_m x tile_n output tile (one warpgroup per 64 rows) over K in 64-wide slices through a
// `stages`-deep ring of shared memory; the epilogue adds the bias and the residual or applies
// SwiGLU (gate and up rows in one tile) in registers, so linear_swiglu is one launch (the
// cuBLASLt family's is a GEMM and a SwiGLU kernel).
//
// Refused: targets other than sm_90 (the instructions exist on sm_90a only), inputs of fewer
// than 64 rows (one warpgroup's tile; gemv and cuBLASLt serve decode-sized inputs), operands
// other than bf16 or f16 with x, w, bias, residual and result of one dtype, a K or a row
// stride of x not a multiple of 8 (16-byte copies), an odd output width.
#include <algorithm>
#include <array>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/wgmma_gemm/wgmma_gemm_params.h"

namespace tileplan::kernels::wgmma_gemm {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::wgmma_gemm

namespace tileplan::kernels::internal {
namespace {

constexpr int64_t kMinRows = 64;
constexpr int64_t kSliceBytes = 128;  // a 64-wide K slice of one row

struct GemmShape {
  int64_t m = 0, k = 0, n_w = 0, n_out = 0;
  bool swiglu = false;
  bool residual = false;
  int bias = -1;  // the bias operand, -1 without one
};

GemmShape ShapeOf(const BoundRegion& r) {
  GemmShape s;
  s.m = Rows(r.operand(0).shape);
  s.k = r.operand(0).shape.back();
  s.n_w = r.operand(1).shape[0];
  s.n_out = r.result(0).shape.back();
  s.swiglu = r.kind() == "linear_swiglu";
  s.residual = r.kind() == "linear_residual";
  const int bias = s.residual ? 3 : 2;
  if (bias < r.num_operands()) s.bias = bias;
  return s;
}

// wgmma_gemm_shared_bytes, and wgmma_gemm_tma_shared_bytes with the TMA loads (`loads` 1).
int64_t SharedBytes(int64_t tile_m, int64_t tile_n, int64_t stages, int64_t loads) {
  return stages * (tile_m + tile_n) * kSliceBytes + 1024 + (loads == 1 ? 16 * stages : 0);
}
// The bytes of the partial tiles a split-K owner receives in its ring: a float4 per consumer
// thread, 8-column output group it owns (two with SwiGLU) and CTA of the cluster.
int64_t SplitReceiveBytes(int64_t tile_m, int64_t tile_n, int64_t split_k, bool swiglu) {
  const int64_t groups = (swiglu ? tile_n / 2 : tile_n) / 8;
  return split_k * CeilDiv(groups, split_k) * (swiglu ? 2 : 1) * tile_m * 2 * 16;
}
// The consumer warpgroups, and with the TMA loads the producer warp.
int64_t BlockThreads(int64_t tile_m, int64_t loads) { return tile_m * 2 + (loads == 1 ? 32 : 0); }

// Relative throughput of one SM on a tile shape (the wgmma's N and the warpgroups that share
// the copies), for the default tactic's choice only; the tuner measures.
double TileEfficiency(int64_t tile_m, int64_t tile_n) {
  const double n = tile_n == 256 ? 1.0 : tile_n == 192 ? 0.97 : tile_n == 128 ? 0.9 : 0.7;
  return tile_m == 128 ? n : 0.8 * n;
}

class WgmmaGemmFamily final : public TemplateFamilyBase {
 public:
  WgmmaGemmFamily()
      : TemplateFamilyBase("wgmma_gemm", 2, {"linear", "linear_residual", "linear_swiglu"},
                           {"loads", "split_k", "stages", "tile_m", "tile_n"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const GemmShape s = ShapeOf(r);
    const int64_t tile_m = t.params.at("tile_m"), tile_n = t.params.at("tile_n");
    LaunchGeometry g;
    g.grid = {CeilDiv(s.n_w, tile_n), CeilDiv(s.m, tile_m), t.params.at("split_k")};
    g.block = {BlockThreads(tile_m, t.params.at("loads")), 1, 1};
    g.dynamic_shared_memory_bytes =
        SharedBytes(tile_m, tile_n, t.params.at("stages"), t.params.at("loads"));
    // The TMA kernel's split-K slices of a tile form one cluster (they meet in shared memory).
    if (t.params.at("loads") == 1) g.cluster = {1, 1, t.params.at("split_k")};
    return g;
  }
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const GemmShape s = ShapeOf(r);
    WorkEstimate w;
    w.bytes = r.io_bytes();
    const int64_t tile_m = t.params.at("tile_m"), tile_n = t.params.at("tile_n");
    const int64_t m_tiles = CeilDiv(s.m, tile_m), n_tiles = CeilDiv(s.n_w, tile_n);
    w.flops = 2 * m_tiles * tile_m * n_tiles * tile_n * s.k;
    w.tensor_core = true;
    // Each column tile reads x again, each row tile the weight: from L2 after the first.
    w.cache_bytes = n_tiles * r.operand_bytes(0) + m_tiles * r.operand_bytes(1);
    return w;
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    // The thread that writes an output element has read its residual element just before.
    return r.kind() == "linear_residual" && operand == 2;
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(wgmma_gemm::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    LaunchBuilder b(r, t, buffers);
    TP_ASSIGN_OR_RETURN(const int64_t tile_m, b.Param("tile_m"));
    TP_ASSIGN_OR_RETURN(const int64_t tile_n, b.Param("tile_n"));
    TP_ASSIGN_OR_RETURN(const int64_t stages, b.Param("stages"));
    TP_ASSIGN_OR_RETURN(const int64_t loads, b.Param("loads"));
    const GemmShape s = ShapeOf(r);
    TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(r.operand_dtype(0), "x"));
    TP_ASSIGN_OR_RETURN(const Matrix x, b.AsMatrix(r.operand(0), "x"));
    TP_ASSIGN_OR_RETURN(const Matrix w, b.AsMatrix(r.operand(1), "the weight"));
    TP_ASSIGN_OR_RETURN(const Matrix out, b.AsMatrix(r.result(0), "the result"));
    Matrix res;
    if (s.residual) {
      TP_ASSIGN_OR_RETURN(res, b.AsMatrix(r.operand(2), "the residual"));
    }
    if (s.bias >= 0) TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(s.bias), "the bias"));
    if (x.stride % 8 != 0 || w.stride % 8 != 0 || s.k % 8 != 0) {
      return b.Error("rows of x (stride ", x.stride, ") and the weight (stride ", w.stride,
                     ") of K = ", s.k, " are not whole 16-byte chunks");
    }
    if (s.n_out % 2 != 0 || out.stride % 2 != 0 || (s.residual && res.stride % 2 != 0)) {
      return b.Error("output rows of ", s.n_out, " (stride ", out.stride,
                     ") are not pairs of elements");
    }
    TP_RETURN_IF_ERROR(b.CheckOperands(16, {0, 1}));
    if (s.residual) TP_RETURN_IF_ERROR(b.CheckOperands(4, {2}));
    if (s.bias >= 0) TP_RETURN_IF_ERROR(b.CheckOperands(2, {s.bias}));
    TP_RETURN_IF_ERROR(b.CheckResults(4, {0}));
    const char* epilogue = s.residual ? "tileplan::kWgmmaResidual"
                           : s.swiglu ? "tileplan::kWgmmaSwiglu"
                                      : "tileplan::kWgmmaPlain";
    const std::string name =
        absl::StrCat(loads == 1 ? "tileplan::wgmma_gemm_tma<" : "tileplan::wgmma_gemm<", type, ", ",
                     tile_m, ", ", tile_n, ", ", stages, ", ", epilogue, ", ",
                     s.bias >= 0 ? "true" : "false", ">");
    b.RequireArchSpecific();
    const LaunchGeometry g = Geometry(t, r);
    // The fields both kernels share: the epilogue's operands and the shape.
    auto epilogue_fields = [&](auto& p) {
      p.bias = s.bias >= 0 ? b.Operand(s.bias) : nullptr;
      p.residual = s.residual ? b.Operand(2) : nullptr;
      p.residual_stride = s.residual ? res.stride : 0;
      p.out = b.Result(0);
      p.out_stride = out.stride;
      p.rows = static_cast<int>(s.m);
      p.cols = static_cast<int>(s.n_out);
      p.depth = static_cast<int>(s.k);
      p.up_offset = static_cast<int>(s.swiglu ? s.n_out : 0);
    };
    if (loads == 1) {
      WgmmaGemmTmaParams p{};
      epilogue_fields(p);
      b.Launch("wgmma_gemm.cuh", name, g.grid, g.block, g.dynamic_shared_memory_bytes, p);
      b.SetCluster({1, 1, g.grid[2]});
      // Operand i (x or the weight) as a K-major map in boxes of one 64-wide slice x box_rows.
      auto add_map = [&](int i, int64_t rows, const Matrix& m, int64_t box_rows) {
        b.AddTensorMap({.param = i,
                        .address = b.Operand(i),
                        .f16 = r.operand_dtype(0) == ir::DType::kF16,
                        .inner = s.k,
                        .rows = rows,
                        .row_stride_bytes = m.stride * 2,
                        .box_inner = static_cast<int>(kSliceBytes / 2),
                        .box_rows = static_cast<int>(box_rows)});
      };
      add_map(0, s.m, x, tile_m);
      add_map(1, s.n_w, w, s.swiglu ? tile_n / 2 : tile_n);
    } else {
      WgmmaGemmParams p{};
      p.x = b.Operand(0);
      p.x_stride = x.stride;
      p.w = b.Operand(1);
      p.w_stride = w.stride;
      epilogue_fields(p);
      b.Launch("wgmma_gemm.cuh", name, g.grid, g.block, g.dynamic_shared_memory_bytes, p);
    }
    return std::move(b).Finish();
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription& target) const override {
    if (target.sm() != 90) {
      return Refuse(absl::StrCat("wgmma runs on sm_90 (sm_90a) only, not sm_", target.sm()));
    }
    const GemmShape s = ShapeOf(r);
    if (s.m < kMinRows) {
      return Refuse(absl::StrCat("M = ", s.m, " rows of ", OperandLabel(r, 0), " are fewer than ",
                                 kMinRows,
                                 " (one warpgroup's tile; gemv and cuBLASLt serve them)"));
    }
    const ir::DType dtype = r.operand_dtype(0);
    if (dtype != ir::DType::kBF16 && dtype != ir::DType::kF16) {
      return Refuse(
          absl::StrCat(OperandLabel(r, 0), " is ", ir::DTypeName(dtype), ", not bf16 or f16"));
    }
    for (int i = 1; i < r.num_operands(); ++i) {
      if (r.operand_dtype(i) != dtype) {
        return Refuse(absl::StrCat(OperandLabel(r, i), " is ", ir::DTypeName(r.operand_dtype(i)),
                                   ", not x's ", ir::DTypeName(dtype)));
      }
    }
    if (r.result_dtype(0) != dtype) {
      return Refuse(absl::StrCat(ResultLabel(r, 0), " is ", ir::DTypeName(r.result_dtype(0)),
                                 ", not x's ", ir::DTypeName(dtype)));
    }
    for (int i = 0; i < r.num_operands(); ++i) {
      if (i != s.bias && !IsMatrix(r.operand(i))) {
        return Refuse(
            absl::StrCat(OperandLabel(r, i), " is not one matrix with a leading dimension"));
      }
    }
    if (!IsMatrix(r.result(0))) {
      return Refuse(absl::StrCat(ResultLabel(r, 0), " is not one matrix with a leading dimension"));
    }
    if (s.k % 8 != 0) return Refuse(absl::StrCat("K = ", s.k, " is not a multiple of 8"));
    for (int64_t e : AlignmentExtents(r, {0, 1})) {
      if (e % 8 != 0) {
        return Refuse(absl::StrCat("x or the weight has an offset or row stride (", e,
                                   ") that is not whole 16-byte chunks"));
      }
    }
    if (s.n_out % 2 != 0) return Refuse(absl::StrCat("N = ", s.n_out, " is odd"));
    return absl::OkStatus();
  }
  Tactic RowTactic(absl::string_view, const BoundRegion& r, const TargetDescription& target,
                   int64_t shared_memory) const override {
    const GemmShape s = ShapeOf(r);
    // The tile whose waves of CTAs, each at its shape's throughput, take the least time.
    int64_t best_m = 128, best_n = 128;
    double best = 0;
    for (int64_t tile_m : {128, 64}) {
      for (int64_t tile_n : {256, 192, 128, 64}) {
        const int64_t ctas = CeilDiv(s.m, tile_m) * CeilDiv(s.n_w, tile_n);
        const double waves = static_cast<double>(CeilDiv(ctas, target.sm_count()));
        const double time = waves * tile_m * tile_n / TileEfficiency(tile_m, tile_n);
        if (best == 0 || time < best)
          std::tie(best, best_m, best_n) = std::tie(time, tile_m, tile_n);
      }
    }
    int64_t stages = 4;
    while (stages > 3 && SharedBytes(best_m, best_n, stages, 1) > shared_memory) --stages;
    return MakeTactic({{"loads", 1},
                       {"split_k", 1},
                       {"stages", stages},
                       {"tile_m", best_m},
                       {"tile_n", best_n}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"loads", {0, 1}},
            {"split_k", {1, 2, 4}},
            {"stages", {3, 4, 5, 6}},
            {"tile_m", {64, 128}},
            {"tile_n", {64, 128, 192, 256}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const int64_t tile_m = t.params.at("tile_m"), tile_n = t.params.at("tile_n");
    const int64_t stages = t.params.at("stages");
    const int64_t loads = t.params.at("loads");
    if (loads != 0 && loads != 1) return BadParam("loads", loads, "0 (cp.async) or 1 (TMA)");
    const int64_t split_k = t.params.at("split_k");
    if (split_k != 1 && split_k != 2 && split_k != 4 && split_k != 8) {
      return BadParam("split_k", split_k, "1, 2, 4 or 8 (a cluster's CTAs)");
    }
    if (split_k > 1 && loads != 1) return BadParam("split_k", split_k, "1 without the TMA loads");
    const int64_t receive = SplitReceiveBytes(tile_m, tile_n, split_k, ShapeOf(r).swiglu);
    if (split_k > 1 && receive > stages * (tile_m + tile_n) * kSliceBytes) {
      return BadParam("split_k", split_k,
                      absl::StrCat("partial tiles (", receive, " bytes) that fit the ring of ",
                                   stages * (tile_m + tile_n) * kSliceBytes, " bytes"));
    }
    if (tile_m != 64 && tile_m != 128) return BadParam("tile_m", tile_m, "64 or 128");
    if (tile_n != 64 && tile_n != 128 && tile_n != 192 && tile_n != 256) {
      return BadParam("tile_n", tile_n, "64, 128, 192 or 256");
    }
    if (stages < 3 || stages > 8) return BadParam("stages", stages, "in [3, 8]");
    if (SharedBytes(tile_m, tile_n, stages, loads) > target.shared_memory_per_block_bytes()) {
      return BadParam(
          "stages", stages,
          absl::StrCat("a ring (", SharedBytes(tile_m, tile_n, stages, loads), " bytes) that fits ",
                       target.shared_memory_per_block_bytes(), " bytes of shared memory"));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeWgmmaGemmFamily() { return std::make_unique<WgmmaGemmFamily>(); }

}  // namespace tileplan::kernels::internal
