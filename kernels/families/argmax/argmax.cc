// argmax: the index of the largest logit per row (ties to the lowest index). `splits` CTAs
// share a row; each writes its (value, index) to the workspace and the last CTA of the row
// to finish (a per-row counter, reset by that CTA) reduces them, so a step is one launch.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/argmax/argmax_params.h"

namespace tileplan::kernels::argmax {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::argmax

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t threads;
};
constexpr Row kRows[] = {
    {"sm_80", 512}, {"sm_90", 1024}, {"sm_100", 1024}, {"sm_120", 512}, {"default", 256}};

absl::StatusOr<TemplateLaunch> LaunchArgmax(const BoundRegion& r, const Tactic& t,
                                            const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, b.Param("splits"));
  TP_ASSIGN_OR_RETURN(const Matrix logits, b.AsMatrix(r.operand(0), "the logits"));
  if (r.operand_dtype(0) != ir::DType::kF32) return b.Error("logits must be f32");
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  if (logits.cols < 1) return b.Error("logits have an empty last dim");
  const int64_t vec =
      LaunchBuilder::WidestDividing(4, {logits.cols, logits.stride, r.operand(0).offset});
  TP_RETURN_IF_ERROR(b.CheckOperands(vec * 4, {0}));
  TP_RETURN_IF_ERROR(b.CheckResults(4, {0}));
  TP_ASSIGN_OR_RETURN(const LaunchBuilder::SplitPointers split, b.SplitBuffers(splits, "argmax"));
  ArgmaxParams p{};
  p.logits = static_cast<const float*>(b.Operand(0));
  p.logits_stride = logits.stride;
  p.out = static_cast<int*>(b.Result(0));
  p.workspace = static_cast<unsigned long long*>(split.workspace);
  p.counters = static_cast<unsigned int*>(split.counters);
  p.vocab = static_cast<int>(logits.cols);
  b.Launch("argmax.cuh", absl::StrCat("tileplan::argmax<", threads, ", ", splits, ", ", vec, ">"),
           {splits, std::max<int64_t>(1, logits.rows), 1}, {threads, 1, 1}, 0, p);
  return std::move(b).Finish();
}

class ArgmaxFamily final : public TemplateFamilyBase {
 public:
  ArgmaxFamily() : TemplateFamilyBase("argmax", 1, {"argmax"}, {"splits", "threads"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    LaunchGeometry g;
    g.grid = {t.params.at("splits"), std::max<int64_t>(1, RowCount(r)), 1};
    g.block = {t.params.at("threads"), 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    WorkEstimate w;
    w.bytes = r.operand_bytes(0) + r.result_bytes(0);
    return w;
  }
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const int64_t splits = t.params.at("splits");
    return splits == 1 ? 0 : RowCount(r) * splits * 8;  // (value, index) per split and row
  }
  int64_t CounterBytes(const Tactic& t, const BoundRegion& r) const override {
    return t.params.at("splits") == 1 ? 0 : RowCount(r) * 4;
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(argmax::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchArgmax(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    return RequireInnerContiguous(r, {0});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t) const override {
    int64_t threads = 256;
    for (const Row& row : kRows) {
      if (row.arch == arch) threads = row.threads;
    }
    // Split rows until the grid fills the machine, keeping >= 4 elements per thread.
    int64_t splits = 1;
    const int64_t v = Vocab(r);
    while (splits < 64 && RowCount(r) * splits < target.sm_count() &&
           v / (2 * splits) >= 4 * threads) {
      splits *= 2;
    }
    return MakeTactic({{"splits", splits}, {"threads", threads}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"splits", {1, 2, 4, 8, 16, 32, 64}}, {"threads", {256, 512, 1024}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription&) const override {
    const int64_t threads = t.params.at("threads");
    const int64_t splits = t.params.at("splits");
    if (!IsBlockSize(threads))
      return BadParam("threads", threads, "a multiple of 32 in [32, 1024]");
    if (!IsPowerOfTwo(splits) || splits > 64 || (splits > 1 && splits > Vocab(r))) {
      return BadParam("splits", splits, "a power of two <= 64 and <= the row length");
    }
    return absl::OkStatus();
  }

 private:
  static int64_t RowCount(const BoundRegion& r) { return Rows(r.operand(0).shape); }
  static int64_t Vocab(const BoundRegion& r) { return r.operand(0).shape.back(); }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeArgmaxFamily() { return std::make_unique<ArgmaxFamily>(); }

}  // namespace tileplan::kernels::internal
