// gemv: linear, linear_residual, linear_swiglu, lm_head and moe_router for decode-sized
// inputs (M = rows of x <= 16); lm_head and moe_router (the MoE router's logits) are the same
// bias-free product with float output. A CTA computes `rows_per_cta` output features for all
// M rows over one of `split_k` slices of K, its warps splitting the slice and reducing through
// shared memory; the weight streams once, `vec` elements per 16-byte load. With split_k > 1
// each CTA writes float partials to the workspace and the last CTA of a row tile to finish (a
// counter, reset by that CTA) sums them and runs the epilogue (bias, residual, SwiGLU, float
// logits), so every step is one launch. linear_swiglu computes gate row j and up row F + j
// together. rms_norm_linear(_swiglu) add an RMSNorm prologue: every CTA also sums the squares of
// the whole x rows (reading x at the other split_k - 1 slices too) and scales its sums by
// rsqrt(mean + eps) in the epilogue.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/gemv/gemv_params.h"

namespace tileplan::kernels::gemv {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::gemv

namespace tileplan::kernels::internal {
namespace {

constexpr int64_t kMaxRows = 16;

// A target's default block: `threads` (halved for SwiGLU's two weight rows per feature where
// cta_weight_bytes is set), and either a fixed `rows_per_cta` or, where cta_weight_bytes > 0,
// as many features as make a CTA stream about that many weight bytes.
struct Row {
  absl::string_view arch;
  int64_t threads;
  int64_t rows_per_cta;
  int64_t cta_weight_bytes;
};
// sm_90: one-row decode linears measured with every block shape (the H100's Qwen3-0.6B and
// Qwen3-30B-A3B, the H200's Qwen3-0.6B and Llama-3.2-1B; 22 regions, K 1024 to 8192, 128 to
// 152k features): the fastest CTAs stream 8 to 16 KiB of weight with 128 to 512 threads; this
// row lands within 1.6% of the fastest on every one of them, where 8 features of 128 threads
// (the earlier row) were 6-47% slower (docs/PERF.md, "One-row decode linears").
constexpr Row kRows[] = {{"sm_80", 128, 4, 0},
                         {"sm_90", 256, 0, 8192},
                         {"sm_100", 256, 8, 0},
                         {"sm_120", 128, 4, 0},
                         {"default", 128, 2, 0}};

// Whether the region's kind has the RMSNorm prologue (operands x, norm, w[, bias]).
bool HasNorm(const BoundRegion& r) {
  return r.kind() == "rms_norm_linear" || r.kind() == "rms_norm_linear_swiglu";
}

struct GemvShape {
  int64_t m = 0;      // rows of x
  int64_t k = 0;      // reduction length
  int64_t n_w = 0;    // weight rows
  int64_t n_out = 0;  // output features (n_w / 2 with SwiGLU)
  bool swiglu = false;
  bool norm = false;  // the RMSNorm prologue
};

GemvShape ShapeOf(const BoundRegion& r) {
  GemvShape s;
  s.norm = HasNorm(r);
  s.m = Rows(r.operand(0).shape);
  s.k = r.operand(0).shape.back();
  s.n_w = r.operand(s.norm ? 2 : 1).shape[0];
  s.n_out = r.result(0).shape.back();
  s.swiglu = r.kind() == "linear_swiglu" || r.kind() == "rms_norm_linear_swiglu";
  return s;
}

// Float partial sums of every warp for every (row, output) pair of the CTA, and with the
// norm prologue every warp's sum of squares of every row.
int64_t SharedMemory(const Tactic& t, const GemvShape& s) {
  const int64_t per_warp = t.params.at("rows_per_cta") * (s.swiglu ? 2 : 1) + (s.norm ? 1 : 0);
  return t.params.at("threads") / 32 * per_warp * s.m * 4;
}
// One 16-byte load of the weight, dividing K and the offsets and strides of x (and of the
// norm weight).
int64_t Vec(const BoundRegion& r) {
  const bool norm = HasNorm(r);
  std::vector<int64_t> extents = norm ? AlignmentExtents(r, {0, 1}) : AlignmentExtents(r, {0});
  extents.push_back(r.operand(0).shape.back());
  return VectorWidth(r.operand_dtype(norm ? 2 : 1), extents);
}

// gemv_mma's vectors: 8 elements, 16 bytes.
constexpr int64_t kMmaVec = 8;

// gemv_mma.cuh's dynamic shared memory: the ring of `stages` stages of `stage_k` elements of the
// weight rows and 16 rows of x (rows padded by 64 bytes, gemv_mma_row_bytes), then the partial
// sums of each share of K (warps / feature groups, gemv_mma_groups).
int64_t MmaSharedMemory(const Tactic& t, const GemvShape& s) {
  const int64_t rows = t.params.at("rows_per_cta");
  const int64_t warps = t.params.at("threads") / 32;
  const int64_t groups = std::min(rows / 16, warps);
  const int64_t wrows = s.swiglu ? 2 : 1;
  return t.params.at("stages") * (rows * wrows + 16) * (t.params.at("stage_k") * 2 + 64) +
         warps / groups * (rows * wrows + (s.norm ? 1 : 0)) * s.m * 4;
}

// gemv_mma's stream-K grid: `ctas` CTAs (a tactic parameter, 0 for the grid of a CTA per tile
// and slice of K) sharing the tiles' stages, at most one CTA per stage (gemv_mma.cuh); 0 where
// the tactic has none (every gemv tactic).
int64_t StreamCtas(const Tactic& t, const GemvShape& s) {
  const auto it = t.params.find("ctas");
  if (it == t.params.end() || it->second == 0) return 0;
  const int64_t units =
      CeilDiv(s.n_out, t.params.at("rows_per_cta")) * CeilDiv(s.k, t.params.at("stage_k"));
  return std::min(it->second, units);
}

// The launch of gemv_split_k (vec elements per load) or, with `mma`, of gemv_mma (vectors of
// 8, a ring of `stages` stages of `stage_k`, stream-K over `ctas` CTAs where set): the same
// parameters and epilogues.
absl::StatusOr<TemplateLaunch> LaunchGemv(LaunchBuilder& b, const BoundRegion& r, const Tactic& t,
                                          bool mma) {
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t rows_per_cta, b.Param("rows_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t split_k, b.Param("split_k"));
  int64_t vec = kMmaVec;
  if (!mma) {
    TP_ASSIGN_OR_RETURN(vec, b.Param("vec"));
  }
  const GemvShape s = ShapeOf(r);
  const std::string& kind = r.kind();
  // Operands: x, [norm,] w, then the residual and the bias as the kind has them.
  const bool residual = kind == "linear_residual";
  const int w_index = s.norm ? 2 : 1;
  // lm_head and moe_router: float logits, no bias.
  const bool logits = kind == "lm_head" || kind == "moe_router";
  const int bias_index = logits ? -1 : residual ? 3 : w_index + 1;
  const bool has_bias = bias_index >= 0 && bias_index < r.num_operands();
  TP_ASSIGN_OR_RETURN(const std::string x_type, b.TypeName(r.operand_dtype(0), "x"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(r.operand_dtype(w_index), "the weight"));
  TP_ASSIGN_OR_RETURN(const std::string out_type, b.TypeName(r.result_dtype(0), "the result"));
  std::string norm_type = "void";
  double eps = 0;
  if (s.norm) {
    TP_ASSIGN_OR_RETURN(norm_type, b.TypeName(r.operand_dtype(1), "the norm weight"));
    TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(1), "the norm weight"));
    TP_ASSIGN_OR_RETURN(eps, r.region().attrs.GetFloat("eps"));
  }
  TP_ASSIGN_OR_RETURN(const Matrix x, b.AsMatrix(r.operand(0), "x"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(w_index), "the weight"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  Matrix res;
  if (residual) {
    TP_ASSIGN_OR_RETURN(res, b.AsMatrix(r.operand(2), "the residual"));
  }
  if (has_bias) TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(bias_index), "the bias"));
  const int64_t cols = r.result(0).shape.back();
  if (x.rows < 1 || x.rows > kMaxRows) {
    return b.Error(x.rows, " rows of x are outside [1, ", kMaxRows, "]");
  }
  if (x.cols % vec != 0 || x.stride % vec != 0) {
    return b.Error("x rows of ", x.cols, " (stride ", x.stride, ") do not split into vec ", vec);
  }
  TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(r.operand_dtype(0)), {0}));
  if (s.norm) TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(r.operand_dtype(1)), {1}));
  TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(r.operand_dtype(w_index)), {w_index}));
  if (residual) TP_RETURN_IF_ERROR(b.CheckOperands(ir::DTypeSize(r.operand_dtype(2)), {2}));
  if (has_bias) {
    TP_RETURN_IF_ERROR(b.CheckOperands(ir::DTypeSize(r.operand_dtype(bias_index)), {bias_index}));
  }
  TP_RETURN_IF_ERROR(b.CheckResults(ir::DTypeSize(r.result_dtype(0)), {0}));
  const int64_t stream_ctas = StreamCtas(t, s);
  TP_ASSIGN_OR_RETURN(const LaunchBuilder::SplitPointers split,
                      b.SplitBuffers(stream_ctas > 0 ? 2 : split_k, "split-K"));
  const char* epilogue = residual   ? "tileplan::kGemvResidual"
                         : s.swiglu ? "tileplan::kGemvSwiglu"
                                    : "tileplan::kGemvPlain";
  GemvParams p{};
  p.x = b.Operand(0);
  p.x_stride = x.stride;
  p.norm_w = s.norm ? b.Operand(1) : nullptr;
  p.eps = static_cast<float>(eps);
  p.w = b.Operand(w_index);
  p.bias = has_bias ? b.Operand(bias_index) : nullptr;
  p.residual = residual ? b.Operand(2) : nullptr;
  p.residual_stride = residual ? res.stride : 0;
  p.out = b.Result(0);
  p.workspace = static_cast<float*>(split.workspace);
  p.counters = static_cast<unsigned int*>(split.counters);
  p.rows = static_cast<int>(x.rows);
  p.cols = static_cast<int>(cols);
  p.depth = static_cast<int>(x.cols);
  const std::string types = absl::StrCat(x_type, ", ", w_type, ", ", out_type);
  const std::string tail = absl::StrCat(threads, ", ", rows_per_cta, ", ", split_k);
  if (mma) {
    TP_ASSIGN_OR_RETURN(const int64_t stage_k, b.Param("stage_k"));
    TP_ASSIGN_OR_RETURN(const int64_t stages, b.Param("stages"));
    if (stream_ctas > 0 && (split_k != 1 || s.norm)) {
      return b.Error("stream-K (ctas ", stream_ctas, ") takes split_k 1 and no RMSNorm prologue");
    }
    const std::array<int64_t, 3> grid =
        stream_ctas > 0 ? std::array<int64_t, 3>{stream_ctas, 1, 1}
                        : std::array<int64_t, 3>{CeilDiv(cols, rows_per_cta), split_k, 1};
    b.Launch("gemv_mma.cuh",
             absl::StrCat("tileplan::gemv_mma<", types, ", ", x.rows > 8 ? 2 : 1, ", ", tail, ", ",
                          stage_k, ", ", stages, ", ", epilogue, ", ", norm_type, ", ",
                          stream_ctas > 0 ? "true" : "false", ">"),
             grid, {threads, 1, 1}, MmaSharedMemory(t, s), p);
  } else {
    b.Launch("gemv_split_k.cuh",
             absl::StrCat("tileplan::gemv_split_k<", types, ", ", NextPowerOfTwo(x.rows), ", ",
                          tail, ", ", vec, ", ", epilogue, ", ", norm_type, ">"),
             {CeilDiv(cols, rows_per_cta), split_k, 1}, {threads, 1, 1}, SharedMemory(t, s), p);
  }
  return std::move(b).Finish();
}

// What gemv and gemv_mma share: the grid (a CTA per `rows_per_cta` features and slice of K),
// the split-K workspace and counters, the residual overwritten in place, the templates and the
// launch (LaunchGemv).
class GemvFamilyBase : public TemplateFamilyBase {
 public:
  GemvFamilyBase(std::string name, int32_t version, std::vector<std::string> params, bool mma)
      : TemplateFamilyBase(std::move(name), version,
                           {"linear", "linear_residual", "linear_swiglu", "lm_head", "moe_router",
                            "rms_norm_linear", "rms_norm_linear_swiglu"},
                           std::move(params)),
        mma_(mma) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const GemvShape s = ShapeOf(r);
    LaunchGeometry g;
    const int64_t stream = StreamCtas(t, s);
    g.grid = stream > 0 ? std::array<int64_t, 3>{stream, 1, 1}
                        : std::array<int64_t, 3>{CeilDiv(s.n_out, t.params.at("rows_per_cta")),
                                                 t.params.at("split_k"), 1};
    g.block = {t.params.at("threads"), 1, 1};
    g.dynamic_shared_memory_bytes = mma_ ? MmaSharedMemory(t, s) : SharedMemory(t, s);
    return g;
  }
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const GemvShape s = ShapeOf(r);
    if (const int64_t stream = StreamCtas(t, s); stream > 0) {
      // Two pieces' partials a CTA (gemv_mma.cuh).
      return stream * 2 * s.m * t.params.at("rows_per_cta") * (s.swiglu ? 2 : 1) * 4;
    }
    const int64_t split = t.params.at("split_k");
    if (split == 1) return 0;
    return split * s.m * s.n_w * 4;
  }
  int64_t CounterBytes(const Tactic& t, const BoundRegion& r) const override {
    if (t.params.at("split_k") == 1 && StreamCtas(t, ShapeOf(r)) == 0) return 0;
    return CeilDiv(ShapeOf(r).n_out, t.params.at("rows_per_cta")) * 4;  // one per row tile
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    // The epilogue reads the residual element it then overwrites.
    return r.kind() == "linear_residual" && operand == 2;
  }
  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(gemv::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    LaunchBuilder b(r, t, buffers);
    return LaunchGemv(b, r, t, mma_);
  }

 protected:
  // split_k: a power of two up to 16 that leaves every slice of K a vector.
  absl::Status CheckSplitK(int64_t split, int64_t k, int64_t vec) const {
    if (!IsPowerOfTwo(split) || split > 16 || k / split < vec) {
      return BadParam("split_k", split,
                      absl::StrCat("a power of two <= 16 leaving a vector per slice of K = ", k));
    }
    return absl::OkStatus();
  }

 private:
  bool mma_;
};

class GemvFamily final : public GemvFamilyBase {
 public:
  GemvFamily()
      : GemvFamilyBase("gemv", 3, {"rows_per_cta", "split_k", "threads", "vec"}, /*mma=*/false) {}

  bool persistent_tasks() const override { return true; }
  std::optional<Tactic> WithBlockThreads(const Tactic& t, int64_t threads) const override {
    Tactic out = t;
    out.params["threads"] = threads;
    return out;
  }

  // gemv_split_k_stream's tile: kRowsPerCta rows of each weight part over the CTA's slice of
  // K (the first slice is the longest); none where a row or slice is not whole 16 bytes.
  int64_t StreamTileBytes(const Tactic& t, const BoundRegion& r) const override {
    const GemvShape s = ShapeOf(r);
    const int64_t vec = t.params.at("vec");
    const int64_t size = ir::DTypeSize(r.operand_dtype(s.norm ? 2 : 1));
    if ((vec * size) % 16 != 0 || (s.k * size) % 16 != 0) return 0;
    const int64_t per_split = CeilDiv(s.k / vec, t.params.at("split_k"));
    return (s.swiglu ? 2 : 1) * t.params.at("rows_per_cta") * per_split * vec * size;
  }
  std::optional<Tactic> ForStream(const Tactic& t, const BoundRegion& r, int64_t slot_bytes,
                                  int64_t blocks) const override {
    const GemvShape s = ShapeOf(r);
    // The fewest rounds of tasks a block runs one after another, then the most tasks (every
    // block busy); whole K first on a tie.
    std::optional<Tactic> best;
    int64_t best_rounds = 0, best_tasks = 0;
    for (int64_t split : {1, 2, 4, 8, 16}) {
      for (int64_t rows : {32, 24, 16, 12, 8, 6, 4, 3, 2, 1}) {
        Tactic c = t;
        c.params["rows_per_cta"] = rows;
        c.params["split_k"] = split;
        const int64_t bytes = StreamTileBytes(c, r);
        if (bytes == 0 || bytes > slot_bytes || s.k / split < t.params.at("vec")) continue;
        const int64_t tasks = CeilDiv(s.n_out, rows) * split;
        const int64_t rounds = CeilDiv(tasks, blocks);
        if (!best.has_value() || rounds < best_rounds ||
            (rounds == best_rounds && tasks > best_tasks)) {
          best = c;
          best_rounds = rounds;
          best_tasks = tasks;
        }
      }
    }
    return best;
  }
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    WorkEstimate w;
    w.bytes = r.io_bytes();
    const GemvShape s = ShapeOf(r);
    w.flops = 2 * s.m * s.n_w * s.k;
    // The walk converts every x and weight element to float and reloads x for each pass over
    // the CTA's features, and at 16 rows its accumulators cap a block's occupancy: measured
    // on the H200 at 16 rows, 200 candidates of 10 regions reached a median of 11.5 TFLOP/s
    // (at most 21.8), about a quarter of the 51 TFLOP/s the cost model takes for CUDA cores
    // (targets/h200.calibration.textproto). Without it the uncalibrated model put batch-16
    // decode linears here, 3-4x slower than on cuBLASLt.
    w.core_share = 0.25;
    if (s.norm) {
      // Every CTA also reads x at the other split_k - 1 slices for its sums of squares.
      const int64_t split = t.params.at("split_k");
      const int64_t tiles = CeilDiv(s.n_out, t.params.at("rows_per_cta"));
      w.bytes += tiles * (split - 1) * s.m * s.k / split * ir::DTypeSize(r.operand_dtype(0));
    }
    return w;
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    const GemvShape s = ShapeOf(r);
    if (s.m > kMaxRows) {
      return Refuse(absl::StrCat("M = ", s.m, " rows of ", OperandLabel(r, 0), " exceed ", kMaxRows,
                                 " (gemv serves decode-sized inputs)"));
    }
    return RequireInnerContiguous(r, {0, 1, 2, 3});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t) const override {
    Row row = kRows[4];
    for (const Row& candidate : kRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const GemvShape s = ShapeOf(r);
    const int64_t vec = Vec(r);
    // No idle threads: fewer (down to 64) while the block holds more threads than K has
    // vectors. Features: the row's count or about cta_weight_bytes of weight, fewer while the
    // grid leaves SMs without a CTA; with a fixed count, wide outputs (an LM head) take more
    // features per CTA while the grid keeps more than eight CTAs per SM.
    const int64_t wrows = s.swiglu ? 2 : 1;
    int64_t threads = row.cta_weight_bytes > 0 ? row.threads / wrows : row.threads;
    while (threads > 64 && threads * vec > s.k) threads /= 2;
    int64_t rows = row.rows_per_cta;
    if (row.cta_weight_bytes > 0) {
      const int64_t row_bytes = wrows * s.k * ir::DTypeSize(r.operand_dtype(s.norm ? 2 : 1));
      rows = 1;
      while (rows < 16 && 2 * rows * row_bytes <= row.cta_weight_bytes) rows *= 2;
    }
    while (rows > 1 && CeilDiv(s.n_out, rows) < target.sm_count()) rows /= 2;
    while (row.cta_weight_bytes == 0 && rows < 16 &&
           CeilDiv(s.n_out, 2 * rows) > 8 * target.sm_count()) {
      rows *= 2;
    }
    // Split K until the grid fills the machine, while every thread keeps a vector per slice.
    int64_t split = 1;
    while (split < 16 && CeilDiv(s.n_out, rows) * split < target.sm_count() &&
           s.k / (2 * split) >= threads * vec) {
      split *= 2;
    }
    return MakeTactic(
        {{"rows_per_cta", rows}, {"split_k", split}, {"threads", threads}, {"vec", vec}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription&) const override {
    return {{"rows_per_cta", {1, 2, 4, 8, 16}},
            {"split_k", {1, 2, 4, 8, 16}},
            {"threads", {64, 128, 256, 512}},
            {"vec", {Vec(r)}}};
  }
  // Split-K pays only while the whole-K grid leaves SMs idle, and up to as many slices as it
  // takes to give every SM a CTA: s slices are worth measuring when s / 2 did not fill it.
  bool WorthMeasuring(const Tactic& t, const BoundRegion& r,
                      const TargetDescription& target) const override {
    const int64_t ctas = CeilDiv(ShapeOf(r).n_out, t.params.at("rows_per_cta"));
    return t.params.at("split_k") == 1 || t.params.at("split_k") / 2 * ctas < target.sm_count();
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const GemvShape s = ShapeOf(r);
    const int64_t threads = t.params.at("threads");
    const int64_t rows = t.params.at("rows_per_cta");
    const int64_t split = t.params.at("split_k");
    const int64_t vec = t.params.at("vec");
    if (!IsBlockSize(threads))
      return BadParam("threads", threads, "a multiple of 32 in [32, 1024]");
    // The tuner tries powers of two up to 16; the persistent kernel's weight stream may give
    // a step any count up to 32 (ForStream).
    if (rows < 1 || rows > 32) return BadParam("rows_per_cta", rows, "in [1, 32]");
    if (!IsPowerOfTwo(vec) || vec > Vec(r)) {
      return BadParam("vec", vec, absl::StrCat("a power of two <= ", Vec(r)));
    }
    TP_RETURN_IF_ERROR(CheckSplitK(split, s.k, vec));
    if (SharedMemory(t, s) > target.shared_memory_per_block_bytes()) {
      return BadParam(
          "threads", threads,
          absl::StrCat("a block whose reduction buffer (", SharedMemory(t, s), " bytes) fits ",
                       target.shared_memory_per_block_bytes(), " bytes of shared memory"));
    }
    return absl::OkStatus();
  }
};

// gemv_mma: the same regions of 2 to 16 rows on tensor cores (gemv_mma.cuh): the weight rows
// the M of mma.sync.m16n8k16 (16 features a warp tile), the rows of x its N, so a weight
// element costs the same at 16 rows as at 2, where gemv's CUDA-core walk spends an FMA per
// row on it. The same epilogues, RMSNorm prologue (split_k 1 only) and split-K; vectors of 8.
class GemvMmaFamily final : public GemvFamilyBase {
 public:
  GemvMmaFamily()
      : GemvFamilyBase("gemv_mma", 2,
                       {"ctas", "rows_per_cta", "split_k", "stage_k", "stages", "threads"},
                       /*mma=*/true) {}

  // Its uncalibrated estimate puts it ahead of cuBLASLt on every decode linear of 2 to 16 rows;
  // measured, it wins some (Qwen2-7B's batch-16 SwiGLU and down projections on the H100) and
  // loses others by up to 1.9x at its default tactic (docs/PERF.md): plans take it where the
  // tuner measured it fastest.
  bool chosen_by_measurement_only() const override { return true; }

  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const GemvShape s = ShapeOf(r);
    WorkEstimate w;
    w.bytes = r.io_bytes();
    // Rows of x padded to whole 8-row n-tiles, on tensor cores.
    w.flops = 2 * (s.m > 8 ? 16 : 8) * s.n_w * s.k;
    w.tensor_core = true;
    // Every CTA reads x (its slice of K) from L2.
    const int64_t tiles = CeilDiv(s.n_out, t.params.at("rows_per_cta"));
    w.cache_bytes = w.bytes + tiles * s.m * s.k * ir::DTypeSize(r.operand_dtype(0));
    return w;
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription& target) const override {
    if (target.sm() < 80) {
      return Refuse(
          absl::StrCat("mma.sync.m16n8k16 on bf16 needs sm_80 or later, not sm_", target.sm()));
    }
    const GemvShape s = ShapeOf(r);
    if (s.m < 2 || s.m > kMaxRows) {
      return Refuse(absl::StrCat("M = ", s.m, " rows of ", OperandLabel(r, 0), " are outside [2, ",
                                 kMaxRows, "] (one row: gemv; more: the GEMM families)"));
    }
    const ir::DType dtype = r.operand_dtype(0);
    const int w_index = s.norm ? 2 : 1;
    if ((dtype != ir::DType::kBF16 && dtype != ir::DType::kF16) ||
        r.operand_dtype(w_index) != dtype) {
      return Refuse(absl::StrCat(
          OperandLabel(r, 0), " and ", OperandLabel(r, w_index), " are ", ir::DTypeName(dtype),
          " and ", ir::DTypeName(r.operand_dtype(w_index)), ", not both bf16 or both f16"));
    }
    if (Vec(r) < kMmaVec) {
      return Refuse(absl::StrCat("K = ", s.k, " or a stride or offset of ", OperandLabel(r, 0),
                                 " is not a multiple of ", kMmaVec, " (16-byte vectors)"));
    }
    return RequireInnerContiguous(r, {0, 1, 2, 3});
  }
  // 64 features a CTA of 8 warps (4 feature groups, 2 shares of each stage), so that x crosses
  // from L2 once per 64 features, stages of 256 elements (512 bytes of each weight row) 4
  // deep, fewer stages, then fewer features where the ring does not fit. Without the norm
  // prologue K is split while the grid holds fewer CTAs than SMs and every slice keeps 4
  // stages; with it (no split) the CTAs narrow instead, down to 16 features. Measured on the
  // H100 (docs/PERF.md): 256-wide stages took Qwen2-7B's batch-16 QKV from 31 to 22 us and
  // its down projection from 64 to 52 us against 128-wide ones.
  Tactic RowTactic(absl::string_view, const BoundRegion& r, const TargetDescription& target,
                   int64_t shared_memory) const override {
    const GemvShape s = ShapeOf(r);
    constexpr int64_t kStageK = 256;
    int64_t rows = 64;
    int64_t split = 1;
    if (s.norm) {
      while (rows > 16 && CeilDiv(s.n_out, rows) < target.sm_count()) rows /= 2;
    } else {
      while (split < 8 && CeilDiv(s.n_out, rows) * split < target.sm_count() &&
             s.k / (2 * split) >= 4 * kStageK) {
        split *= 2;
      }
    }
    int64_t stages = 4;
    auto tactic = [&] {
      return MakeTactic({{"ctas", 0},
                         {"rows_per_cta", rows},
                         {"split_k", split},
                         {"stage_k", kStageK},
                         {"stages", stages},
                         {"threads", std::min<int64_t>(256, 32 * kStageK / 32 * rows / 16)}});
    };
    Tactic t = tactic();
    while (MmaSharedMemory(t, s) > shared_memory && (stages > 2 || rows > 16)) {
      if (stages > 2) {
        --stages;
      } else {
        rows /= 2;
      }
      t = tactic();
    }
    return t;
  }
  // ctas: 0 (a CTA per tile and slice of K) or stream-K over 1 to 4 CTAs per SM.
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription& target) const override {
    std::vector<int64_t> ctas = {0};
    if (!HasNorm(r)) {
      for (int64_t n = 1; n <= 4; ++n) ctas.push_back(n * target.sm_count());
    }
    return {{"ctas", ctas},
            {"rows_per_cta", {16, 32, 64, 128}},
            {"split_k", HasNorm(r) ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2, 4, 8}},
            {"stage_k", {128, 256, 512}},
            {"stages", {2, 4}},
            {"threads", {128, 256}}};
  }
  bool WorthMeasuring(const Tactic& t, const BoundRegion& r,
                      const TargetDescription& target) const override {
    const int64_t tiles = CeilDiv(ShapeOf(r).n_out, t.params.at("rows_per_cta"));
    if (t.params.at("ctas") > 0) {
      // Stream-K pays where the tiles do not fill the SMs evenly, and needs its CTAs resident.
      return t.params.at("split_k") == 1 && tiles % target.sm_count() != 0 &&
             t.params.at("ctas") / target.sm_count() * MmaSharedMemory(t, ShapeOf(r)) <=
                 target.shared_memory_per_sm_bytes();
    }
    return t.params.at("split_k") == 1 ||
           t.params.at("split_k") / 2 * tiles < 2 * target.sm_count();
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const GemvShape s = ShapeOf(r);
    const int64_t threads = t.params.at("threads");
    const int64_t rows = t.params.at("rows_per_cta");
    const int64_t split = t.params.at("split_k");
    if (!IsBlockSize(threads) || !IsPowerOfTwo(threads)) {
      return BadParam("threads", threads, "a power of two in [32, 1024]");
    }
    if (rows < 16 || rows > 128 || !IsPowerOfTwo(rows)) {
      return BadParam("rows_per_cta", rows, "16, 32, 64 or 128 (whole 16-feature m-tiles)");
    }
    const int64_t stage_k = t.params.at("stage_k");
    if (stage_k != 128 && stage_k != 256 && stage_k != 512) {
      return BadParam("stage_k", stage_k, "128, 256 or 512");
    }
    if (threads / 32 > stage_k / 32 * rows / 16 || threads % (stage_k / 8) != 0) {
      return BadParam("threads", threads,
                      absl::StrCat("a multiple of ", stage_k / 8, " (a 16-byte copy column of a ",
                                   stage_k, "-wide stage each) and at most ",
                                   32 * stage_k / 32 * rows / 16, " for ", rows,
                                   " features a CTA (a share of K takes a 32-wide block of every "
                                   "stage)"));
    }
    const int64_t stages = t.params.at("stages");
    if (stages < 2 || stages > 8) return BadParam("stages", stages, "in [2, 8]");
    TP_RETURN_IF_ERROR(CheckSplitK(split, s.k, kMmaVec));
    if (s.norm && split != 1) {
      return BadParam("split_k", split, "1 with the RMSNorm prologue (it needs the whole row)");
    }
    const int64_t ctas = t.params.at("ctas");
    if (ctas < 0 || ctas > 65535) return BadParam("ctas", ctas, "in [0, 65535]");
    if (ctas > 0 && (split != 1 || s.norm)) {
      return BadParam("ctas", ctas,
                      "0 with split_k > 1 or the RMSNorm prologue (stream-K shares whole K among "
                      "its CTAs and cannot see a row's whole sum of squares)");
    }
    if (MmaSharedMemory(t, s) > target.shared_memory_per_block_bytes()) {
      return BadParam(
          "stages", stages,
          absl::StrCat("a ring and reduction buffer (", MmaSharedMemory(t, s), " bytes) that fit ",
                       target.shared_memory_per_block_bytes(), " bytes of shared memory"));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeGemvFamily() { return std::make_unique<GemvFamily>(); }
std::unique_ptr<KernelFamily> MakeGemvMmaFamily() { return std::make_unique<GemvMmaFamily>(); }

}  // namespace tileplan::kernels::internal
