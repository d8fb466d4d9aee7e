// gemv: linear, linear_residual, linear_swiglu and lm_head for decode-sized inputs
// (M = rows of x <= 16). A CTA computes `rows_per_cta` output features for all M rows over
// one of `split_k` slices of K, its warps splitting the slice and reducing through shared
// memory; the weight streams once, `vec` elements per 16-byte load. With split_k > 1 each CTA
// writes float partials to the workspace and the last CTA of a row tile to finish (a counter,
// reset by that CTA) sums them and runs the epilogue (bias, residual, SwiGLU, float logits),
// so every step is one launch. linear_swiglu computes gate row j and up row F + j together.
// rms_norm_linear(_swiglu) add an RMSNorm prologue: every CTA also sums the squares of the
// whole x rows (reading x at the other split_k - 1 slices too) and scales its sums by
// rsqrt(mean + eps) in the epilogue.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/families.h"
#include "kernels/family_base.h"

namespace tileplan::kernels::internal {
namespace {

constexpr int64_t kMaxRows = 16;

struct Row {
  absl::string_view arch;
  int64_t threads;
  int64_t rows_per_cta;
};
constexpr Row kRows[] = {{"sm_80", 128, 4},
                         {"sm_90", 128, 8},
                         {"sm_100", 256, 8},
                         {"sm_120", 128, 4},
                         {"default", 128, 2}};

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

class GemvFamily final : public FamilyBase {
 public:
  GemvFamily()
      : FamilyBase("gemv", 3,
                   {"linear", "linear_residual", "linear_swiglu", "lm_head", "rms_norm_linear",
                    "rms_norm_linear_swiglu"},
                   {"rows_per_cta", "split_k", "threads", "vec"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const GemvShape s = ShapeOf(r);
    LaunchGeometry g;
    g.grid = {CeilDiv(s.n_out, t.params.at("rows_per_cta")), t.params.at("split_k"), 1};
    g.block = {t.params.at("threads"), 1, 1};
    g.dynamic_shared_memory_bytes = SharedMemory(t, s);
    return g;
  }
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    WorkEstimate w;
    for (int i = 0; i < r.num_operands(); ++i) w.bytes += r.operand_bytes(i);
    w.bytes += r.result_bytes(0);
    const GemvShape s = ShapeOf(r);
    w.flops = 2 * s.m * s.n_w * s.k;
    if (s.norm) {
      // Every CTA also reads x at the other split_k - 1 slices for its sums of squares.
      const int64_t split = t.params.at("split_k");
      const int64_t tiles = CeilDiv(s.n_out, t.params.at("rows_per_cta"));
      w.bytes += tiles * (split - 1) * s.m * s.k / split * ir::DTypeSize(r.operand_dtype(0));
    }
    return w;
  }
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const int64_t split = t.params.at("split_k");
    if (split == 1) return 0;
    const GemvShape s = ShapeOf(r);
    return split * s.m * s.n_w * 4;
  }
  int64_t CounterBytes(const Tactic& t, const BoundRegion& r) const override {
    if (t.params.at("split_k") == 1) return 0;
    return CeilDiv(ShapeOf(r).n_out, t.params.at("rows_per_cta")) * 4;  // one per row tile
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    // The epilogue reads the residual element it then overwrites.
    return r.kind() == "linear_residual" && operand == 2;
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
    // vectors. Wide outputs (an LM head) take more features per CTA while the grid keeps
    // more than eight CTAs per SM.
    int64_t threads = row.threads;
    while (threads > 64 && threads * vec > s.k) threads /= 2;
    int64_t rows = row.rows_per_cta;
    while (rows > 1 && CeilDiv(s.n_out, rows) < target.sm_count()) rows /= 2;
    while (rows < 16 && CeilDiv(s.n_out, 2 * rows) > 8 * target.sm_count()) rows *= 2;
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
    if (!IsPowerOfTwo(rows) || rows > 16)
      return BadParam("rows_per_cta", rows, "a power of two <= 16");
    if (!IsPowerOfTwo(vec) || vec > Vec(r)) {
      return BadParam("vec", vec, absl::StrCat("a power of two <= ", Vec(r)));
    }
    if (!IsPowerOfTwo(split) || split > 16 || s.k / split < vec) {
      return BadParam("split_k", split,
                      absl::StrCat("a power of two <= 16 leaving a vector per slice of K = ", s.k));
    }
    if (SharedMemory(t, s) > target.shared_memory_per_block_bytes()) {
      return BadParam(
          "threads", threads,
          absl::StrCat("a block whose reduction buffer (", SharedMemory(t, s), " bytes) fits ",
                       target.shared_memory_per_block_bytes(), " bytes of shared memory"));
    }
    return absl::OkStatus();
  }

 private:
  // Float partial sums of every warp for every (row, output) pair of the CTA, and with the
  // norm prologue every warp's sum of squares of every row.
  static int64_t SharedMemory(const Tactic& t, const GemvShape& s) {
    const int64_t per_warp = t.params.at("rows_per_cta") * (s.swiglu ? 2 : 1) + (s.norm ? 1 : 0);
    return t.params.at("threads") / 32 * per_warp * s.m * 4;
  }
  // One 16-byte load of the weight, dividing K and the offsets and strides of x (and of the
  // norm weight).
  static int64_t Vec(const BoundRegion& r) {
    const bool norm = HasNorm(r);
    std::vector<int64_t> extents = norm ? AlignmentExtents(r, {0, 1}) : AlignmentExtents(r, {0});
    extents.push_back(r.operand(0).shape.back());
    return VectorWidth(r.operand_dtype(norm ? 2 : 1), extents);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeGemvFamily() { return std::make_unique<GemvFamily>(); }

}  // namespace tileplan::kernels::internal
