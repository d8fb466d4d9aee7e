// The routed experts: expert_linear, whose expert ids the kernels read from device memory
// (the routing is never known at launch, so a decode CUDA Graph replays with new routing).
//
// expert_gemv (decode-sized inputs, any token count): CTA (s, y) takes selection s =
// token * K + k, reads e = ids[s] and computes `rows_per_cta` rows of W[e] against the
// selection's input row, a warp per `rows_per_cta / (threads / 32)` rows, `vec` elements per
// load (16 bytes for bf16), float accumulation.
//
// expert_gemm (prefill-sized inputs): a grouped GEMM on tensor cores in two launches. A
// one-CTA counting sort groups the selections by expert in the step's workspace (a tile table
// of up to `tile_m` rows of one expert each, and the sorted selections); then CTA (x, y) runs
// tile y against `tile_n` output features x of its expert's weight, `warps_m` x `warps_n`
// warps of mma.sync m16n8k16 over a `stages`-deep cp.async pipeline of `tile_k`-wide H slices.
// The cost model picks it over expert_gemv when the GEMV's reads through L2 (below) outweigh
// the second launch (prompts of a few dozen tokens and more).
//
// Both count each selected expert's weight once in DRAM bytes: min(E, selections) distinct
// experts. expert_gemv also counts what its CTAs read through L2, once per selection, which
// the cost model bounds by the target's L2 rate: at prefill sizes that, not DRAM, is its cost.
#include <algorithm>
#include <iterator>
#include <utility>

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
// A grid's y extent: expert_gemv's ceil(N / rows_per_cta) row tiles, expert_gemm's route tiles.
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
  // Reads: every CTA streams its rows of its selection's expert and its selection's input
  // row, so an expert chosen by n selections is read n times, from L2 after the first (the
  // selections of one row tile run side by side): cache_bytes, which bounds prefill-sized
  // steps.
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const ExpertShape s = ShapeOf(r);
    WorkEstimate w;
    w.bytes = ExpertBytes(r);
    w.flops = 2 * s.selections * s.cols * s.depth;
    w.cache_bytes =
        s.selections * s.depth *
        (s.cols * ir::DTypeSize(r.operand_dtype(2)) +
         CeilDiv(s.cols, t.params.at("rows_per_cta")) * ir::DTypeSize(r.operand_dtype(0)));
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

// ---- expert_gemm ---------------------------------------------------------------------------

// The architecture rows: the tallest M tile the derivation starts from, the feature and H
// tiles and the pipeline depth.
struct GemmRow {
  absl::string_view arch;
  int64_t tile_m, tile_n, tile_k, stages;
};
constexpr GemmRow kGemmRows[] = {{"sm_80", 128, 128, 64, 3},
                                 {"sm_90", 128, 128, 64, 4},
                                 {"sm_100", 128, 128, 64, 4},
                                 {"sm_120", 128, 64, 64, 3},
                                 {"default", 64, 64, 32, 2}};

// Accumulator floats a thread holds (warp tile rows x columns / 32).
constexpr int64_t kMaxAccumulators = 128;
constexpr int64_t kMaxWarps = 8;
// The warp layouts the tuner explores: warps_m rows by warps_n columns of warp tiles.
constexpr int64_t kWarpsMChoices[] = {1, 2, 4};
constexpr int64_t kWarpsNChoices[] = {1, 2, 4, 8};
// A tunable M tile is measured while an evenly routed expert's rows fill more than a quarter
// of it and need at most this many of its tiles.
constexpr int64_t kMaxMeasuredMTiles = 4;

// The tiles a routing can have: sum_e ceil(count_e / tile_m) <= this.
int64_t MaxTiles(const ExpertShape& s, int64_t tile_m) {
  return CeilDiv(s.selections, tile_m) + std::min(s.experts, s.selections);
}
// Route workspace ints: the tile count (padded to 4), 4 per tile, one per selection.
int64_t RouteBytes(const ExpertShape& s, int64_t tile_m) {
  return CeilDiv((4 + 4 * MaxTiles(s, tile_m) + s.selections) * 4, 16) * 16;
}
int64_t GemmSharedMemory(const Tactic& t) {
  return ExpertGemmSharedBytes(
      static_cast<int>(t.params.at("tile_m")), static_cast<int>(t.params.at("tile_n")),
      static_cast<int>(t.params.at("tile_k")), static_cast<int>(t.params.at("stages")));
}
// Experts an evenly spread routing uses, and the rows each of them gets.
int64_t UsedExperts(const ExpertShape& s) {
  return std::max<int64_t>(1, std::min(s.experts, s.selections));
}
int64_t EvenRows(const ExpertShape& s) { return CeilDiv(s.selections, UsedExperts(s)); }

// Whether warps_m x warps_n warps tile a tile_m x tile_n tile with warp tiles of 16 x 16
// multiples whose accumulators fit.
bool GemmLayoutFits(int64_t tile_m, int64_t tile_n, int64_t warps_m, int64_t warps_n) {
  if (warps_m < 1 || warps_n < 1 || warps_m * warps_n > kMaxWarps) return false;
  if (tile_m % (16 * warps_m) != 0 || tile_n % (16 * warps_n) != 0) return false;
  return (tile_m / warps_m) * (tile_n / warps_n) / 32 <= kMaxAccumulators;
}
// The most warps of a layout of the tunables (warps_m 1, 2, 4; warps_n 1, 2, 4, 8) that fits.
int64_t MaxGemmWarps(int64_t tile_m, int64_t tile_n) {
  int64_t most = 0;
  for (int64_t warps_m : kWarpsMChoices) {
    for (int64_t warps_n : kWarpsNChoices) {
      if (GemmLayoutFits(tile_m, tile_n, warps_m, warps_n)) {
        most = std::max(most, warps_m * warps_n);
      }
    }
  }
  return most;
}
// The derived warp layout: one row of four warps over the features for tiles of up to 64 rows
// (every warp then holds all of the tile's rows, so rows an expert leaves empty idle no warp
// alone), two by two warps of 64 x 64 for 128 rows; fewer columns where the tile is narrow.
std::pair<int64_t, int64_t> GemmWarps(int64_t tile_m, int64_t tile_n) {
  const int64_t warps_m = tile_m > 64 ? 2 : 1;
  return {warps_m, std::min(4 / warps_m, tile_n / 16)};
}

absl::StatusOr<TemplateLaunch> LaunchExpertGemm(const BoundRegion& r, const Tactic& t,
                                                const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t tile_m, b.Param("tile_m"));
  TP_ASSIGN_OR_RETURN(const int64_t tile_n, b.Param("tile_n"));
  TP_ASSIGN_OR_RETURN(const int64_t tile_k, b.Param("tile_k"));
  TP_ASSIGN_OR_RETURN(const int64_t warps_m, b.Param("warps_m"));
  TP_ASSIGN_OR_RETURN(const int64_t warps_n, b.Param("warps_n"));
  TP_ASSIGN_OR_RETURN(const int64_t stages, b.Param("stages"));
  const ExpertShape s = ShapeOf(r);
  const ir::DType dtype = r.operand_dtype(0);
  if ((dtype != ir::DType::kBF16 && dtype != ir::DType::kF16) || r.operand_dtype(2) != dtype ||
      r.result_dtype(0) != dtype) {
    return b.Error("x, the weight and the result must be one dtype, bf16 or f16");
  }
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "x"));
  TP_ASSIGN_OR_RETURN(const Matrix x, b.AsMatrix(r.operand(0), "x"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(1), "the ids"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(2), "the weight"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  if (x.rows != (s.x_per_selection ? s.selections : s.tokens) || x.cols != s.depth) {
    return b.Error("x is [", x.rows, ", ", x.cols, "], not one row of H = ", s.depth,
                   s.x_per_selection ? " per selection" : " per token");
  }
  if (s.depth % 8 != 0 || x.stride % 8 != 0) {
    return b.Error("x rows of ", s.depth, " (stride ", x.stride, ") are not 16-byte chunks");
  }
  if (!GemmLayoutFits(tile_m, tile_n, warps_m, warps_n) || stages < 2 ||
      (tile_k != 32 && tile_k != 64 && tile_k != 128)) {
    return b.Error("tile ", tile_m, "x", tile_n, "x", tile_k, " with ", warps_m, "x", warps_n,
                   " warps and ", stages, " stages is not an instantiable layout");
  }
  const int64_t max_tiles = MaxTiles(s, tile_m);
  if (max_tiles > kMaxGridY) {
    return b.Error(max_tiles, " row tiles exceed the grid's y extent ", kMaxGridY);
  }
  TP_RETURN_IF_ERROR(b.CheckOperands(16, {0, 2}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {1}));
  TP_RETURN_IF_ERROR(b.CheckResults(4, {0}));  // pairs of 16-bit results as one store
  void* route = nullptr;
  if (buffers != nullptr) {
    if (buffers->workspace == nullptr) return b.Error("no device buffer for the route workspace");
    if (reinterpret_cast<uintptr_t>(buffers->workspace) % 16 != 0) {
      return b.Error("the route workspace is not aligned to 16 bytes");
    }
    route = buffers->workspace;
  }
  ExpertRouteParams rp{};
  rp.ids = static_cast<const int*>(b.Operand(1));
  rp.route = static_cast<int*>(route);
  rp.max_tiles = static_cast<int>(max_tiles);
  rp.out = b.Result(0);
  rp.selections = static_cast<int>(s.selections);
  rp.top_k = static_cast<int>(s.top_k);
  rp.experts = static_cast<int>(s.experts);
  rp.cols = static_cast<int>(s.cols);
  rp.error = b.error();
  b.Launch("expert_gemm.cuh", absl::StrCat("tileplan::expert_route<", type, ", ", tile_m, ">"),
           {1, 1, 1}, {kExpertRouteThreads, 1, 1}, 8 * s.experts, rp);
  ExpertGemmParams gp{};
  gp.x = b.Operand(0);
  gp.x_stride = x.stride;
  gp.x_per_selection = s.x_per_selection ? 1 : 0;
  gp.route = static_cast<const int*>(route);
  gp.max_tiles = static_cast<int>(max_tiles);
  gp.w = b.Operand(2);
  gp.out = b.Result(0);
  gp.top_k = static_cast<int>(s.top_k);
  gp.cols = static_cast<int>(s.cols);
  gp.depth = static_cast<int>(s.depth);
  b.Launch("expert_gemm.cuh",
           absl::StrCat("tileplan::expert_gemm<", type, ", ", tile_m, ", ", tile_n, ", ", tile_k,
                        ", ", warps_m, ", ", warps_n, ", ", stages, ">"),
           {CeilDiv(s.cols, tile_n), std::max<int64_t>(1, max_tiles), 1},
           {32 * warps_m * warps_n, 1, 1}, GemmSharedMemory(t), gp);
  b.MarkMainLaunch();  // Geometry describes the GEMM, not the routing kernel before it
  return std::move(b).Finish();
}

class ExpertGemmFamily final : public TemplateFamilyBase {
 public:
  ExpertGemmFamily()
      : TemplateFamilyBase("expert_gemm", 2, {"expert_linear"},
                           {"stages", "tile_k", "tile_m", "tile_n", "warps_m", "warps_n"}) {}

  // The GEMM's launch (the route kernel before it is one CTA).
  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const ExpertShape s = ShapeOf(r);
    LaunchGeometry g;
    g.grid = {CeilDiv(s.cols, t.params.at("tile_n")),
              std::max<int64_t>(1, MaxTiles(s, t.params.at("tile_m"))), 1};
    g.block = {32 * t.params.at("warps_m") * t.params.at("warps_n"), 1, 1};
    g.dynamic_shared_memory_bytes = GemmSharedMemory(t);
    return g;
  }
  // Executed flops: each of the experts an even routing uses multiplies its rows rounded up to
  // the 16-row MMA tile (a warp skips the 16-row tiles past its tile's rows) by whole feature
  // and H tiles.
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const ExpertShape s = ShapeOf(r);
    const int64_t tile_n = t.params.at("tile_n"), tile_k = t.params.at("tile_k");
    const int64_t rows = std::min(s.experts, s.selections) * CeilDiv(EvenRows(s), 16) * 16;
    WorkEstimate w;
    w.bytes = ExpertBytes(r);
    w.flops = 2 * rows * CeilDiv(s.cols, tile_n) * tile_n * CeilDiv(s.depth, tile_k) * tile_k;
    w.tensor_core = true;
    return w;
  }
  int Launches(const Tactic&, const BoundRegion&) const override { return 2; }
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    return RouteBytes(ShapeOf(r), t.params.at("tile_m"));
  }
  // What cannot pay on this region and target (docs/kernels.md, expert_gemm), judged for an
  // evenly routed expert's rows:
  //  - a pipeline deeper than the H slices it streams, or of two stages where three fit;
  //  - an M tile the rows fill to a quarter or less, or that takes more than
  //    kMaxMeasuredMTiles of them (each re-streams the expert's weight tiles);
  //  - a feature tile twice N or wider, or narrower than the tile's rows (each CTA then reads
  //    more activation bytes than weight bytes) while half as many feature tiles would still
  //    give every SM a CTA;
  //  - rows of warps the first tile of the expert leaves without rows, and CTAs of fewer than
  //    four warps (one per scheduler of an SM; the tile's shared memory, not its warps, bounds
  //    the CTAs per SM) where the tile has a layout of four.
  bool WorthMeasuring(const Tactic& t, const BoundRegion& r,
                      const TargetDescription& target) const override {
    const ExpertShape s = ShapeOf(r);
    const int64_t tile_m = t.params.at("tile_m"), tile_n = t.params.at("tile_n");
    const int64_t tile_k = t.params.at("tile_k"), stages = t.params.at("stages");
    const int64_t warps_m = t.params.at("warps_m"), warps_n = t.params.at("warps_n");
    const int64_t even = EvenRows(s);
    if (stages > 2 && stages - 1 > CeilDiv(s.depth, tile_k)) return false;
    if (stages == 2 && ExpertGemmSharedBytes(static_cast<int>(tile_m), static_cast<int>(tile_n),
                                             static_cast<int>(tile_k),
                                             3) <= target.shared_memory_per_block_bytes()) {
      return false;
    }
    if (tile_m > 16 && tile_m / 4 >= even) return false;
    if (CeilDiv(even, tile_m) > kMaxMeasuredMTiles) return false;
    if (tile_n > 32 && tile_n / 2 >= s.cols) return false;
    if (tile_n < std::min(even, tile_m) &&
        UsedExperts(s) * CeilDiv(s.cols, 2 * tile_n) >= target.sm_count()) {
      return false;
    }
    if (CeilDiv(std::min(even, tile_m), tile_m / warps_m) < warps_m) return false;
    return warps_m * warps_n >= std::min<int64_t>(4, MaxGemmWarps(tile_m, tile_n));
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(moe::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchExpertGemm(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    TP_RETURN_IF_ERROR(CheckExpertRegion(r));
    const ir::DType dtype = r.operand_dtype(0);
    if (dtype != ir::DType::kBF16 && dtype != ir::DType::kF16) {
      return Refuse(absl::StrCat("dtype ", ir::DTypeName(dtype), " has no tensor-core path"));
    }
    if (r.operand_dtype(2) != dtype) {
      return Refuse(absl::StrCat("the weight is ", ir::DTypeName(r.operand_dtype(2)), ", x is ",
                                 ir::DTypeName(dtype), ": the MMA takes one dtype"));
    }
    const ExpertShape s = ShapeOf(r);
    for (int64_t e : AlignmentExtents(r, {0})) {
      if (s.depth % 8 != 0 || e % 8 != 0) {
        return Refuse(absl::StrCat("H = ", s.depth, " or x's strides and offset are not ",
                                   "multiples of 8 (16-byte cp.async chunks)"));
      }
    }
    if (s.experts > kExpertRouteMaxExperts) {
      return Refuse(absl::StrCat("E = ", s.experts, " experts exceed ", kExpertRouteMaxExperts,
                                 " (the sort counts them in shared memory)"));
    }
    if (MaxTiles(s, 128) > kMaxGridY) {
      return Refuse(absl::StrCat(s.selections, " selections make more than ", kMaxGridY,
                                 " row tiles even of 128 rows (the grid's y extent)"));
    }
    return absl::OkStatus();
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t shared_memory) const override {
    GemmRow row = kGemmRows[4];
    for (const GemmRow& candidate : kGemmRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const ExpertShape s = ShapeOf(r);
    // The shortest M tile (16 at least, the row's at most) that holds an evenly routed expert's
    // rows with a quarter to spare, so that most experts of an uneven routing still fit one
    // tile and read each weight tile once.
    const int64_t want = CeilDiv(EvenRows(s) * 5, 4);
    int64_t tile_m = 16;
    while (tile_m < row.tile_m && tile_m < want) tile_m *= 2;
    // Narrower feature tiles (down to 32) while the used experts' tiles leave SMs idle.
    int64_t tile_n = row.tile_n;
    while (tile_n > 32 && UsedExperts(s) * CeilDiv(s.cols, tile_n) < target.sm_count()) {
      tile_n /= 2;
    }
    int64_t tile_k = row.tile_k, stages = row.stages;
    // Two CTAs per SM: fewer stages (down to 3) while two of them exceed the row's shared
    // memory; then, for any CTA that does not fit at all, fewer stages down to 2, narrower
    // feature tiles down to 32 and narrower H slices down to 32.
    auto bytes = [&] {
      return ExpertGemmSharedBytes(static_cast<int>(tile_m), static_cast<int>(tile_n),
                                   static_cast<int>(tile_k), static_cast<int>(stages));
    };
    while (stages > 3 && 2 * bytes() > shared_memory) --stages;
    while (bytes() > shared_memory) {
      if (stages > 2) {
        --stages;
      } else if (tile_n > 32) {
        tile_n /= 2;
      } else if (tile_k > 32) {
        tile_k /= 2;
      } else {
        break;
      }
    }
    const auto [warps_m, warps_n] = GemmWarps(tile_m, tile_n);
    return MakeTactic({{"stages", stages},
                       {"tile_k", tile_k},
                       {"tile_m", tile_m},
                       {"tile_n", tile_n},
                       {"warps_m", warps_m},
                       {"warps_n", warps_n}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"stages", {2, 3, 4}},
            {"tile_k", {32, 64, 128}},
            {"tile_m", {16, 32, 64, 128}},
            {"tile_n", {32, 64, 128, 256}},
            {"warps_m", {std::begin(kWarpsMChoices), std::end(kWarpsMChoices)}},
            {"warps_n", {std::begin(kWarpsNChoices), std::end(kWarpsNChoices)}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const int64_t tile_m = t.params.at("tile_m"), tile_n = t.params.at("tile_n");
    const int64_t tile_k = t.params.at("tile_k"), stages = t.params.at("stages");
    const int64_t warps_m = t.params.at("warps_m"), warps_n = t.params.at("warps_n");
    if (tile_m != 16 && tile_m != 32 && tile_m != 64 && tile_m != 128) {
      return BadParam("tile_m", tile_m, "16, 32, 64 or 128");
    }
    if (tile_n != 32 && tile_n != 64 && tile_n != 128 && tile_n != 256) {
      return BadParam("tile_n", tile_n, "32, 64, 128 or 256");
    }
    if (tile_k != 32 && tile_k != 64 && tile_k != 128) {
      return BadParam("tile_k", tile_k, "32, 64 or 128");
    }
    if (std::find(std::begin(kWarpsMChoices), std::end(kWarpsMChoices), warps_m) ==
        std::end(kWarpsMChoices)) {
      return BadParam("warps_m", warps_m, "1, 2 or 4");
    }
    if (std::find(std::begin(kWarpsNChoices), std::end(kWarpsNChoices), warps_n) ==
        std::end(kWarpsNChoices)) {
      return BadParam("warps_n", warps_n, "1, 2, 4 or 8");
    }
    if (!GemmLayoutFits(tile_m, tile_n, warps_m, warps_n)) {
      return BadParam("warps_n", warps_n,
                      absl::StrCat("a count that with warps_m = ", warps_m, " makes at most ",
                                   kMaxWarps, " warps whose tiles of the ", tile_m, "x", tile_n,
                                   " tile are 16 x 16 multiples holding at most ", kMaxAccumulators,
                                   " accumulators per thread"));
    }
    if (stages < 2 || stages > 4) return BadParam("stages", stages, "2, 3 or 4");
    if (GemmSharedMemory(t) > target.shared_memory_per_block_bytes()) {
      return BadParam(
          "stages", stages,
          absl::StrCat("a pipeline whose tiles (", GemmSharedMemory(t), " bytes) fit ",
                       target.shared_memory_per_block_bytes(), " bytes of shared memory"));
    }
    if (MaxTiles(ShapeOf(r), tile_m) > kMaxGridY) {
      return BadParam("tile_m", tile_m,
                      absl::StrCat("a tile tall enough for at most ", kMaxGridY,
                                   " row tiles (the grid's y extent)"));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeExpertGemmFamily() {
  return std::make_unique<ExpertGemmFamily>();
}

std::unique_ptr<KernelFamily> MakeExpertGemvFamily() {
  return std::make_unique<ExpertGemvFamily>();
}

}  // namespace tileplan::kernels::internal
