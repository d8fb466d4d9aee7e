// rms_norm: rms_norm and add_rms_norm. `row_threads` threads normalize one row (a warp for
// short rows such as per-head QK-norm), `rows_per_cta` rows share a CTA. A thread keeps its
// elements in registers between the reduction and the scaling, so it may write the result
// over its input. add_rms_norm writes the sum and the normalized sum in one pass.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/rms_norm/rms_norm_params.h"

namespace tileplan::kernels::rms_norm {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::rms_norm

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t vectors_per_thread;  // target work per thread, which sets row_threads
  int64_t cta_threads;         // rows are packed into CTAs of about this size
};
constexpr Row kRows[] = {{"sm_80", 2, 256},
                         {"sm_90", 1, 256},
                         {"sm_100", 1, 256},
                         {"sm_120", 2, 256},
                         {"default", 4, 128}};

absl::StatusOr<TemplateLaunch> LaunchRmsNorm(const BoundRegion& r, const Tactic& t,
                                             const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t row_threads, b.Param("row_threads"));
  TP_ASSIGN_OR_RETURN(const int64_t rows_per_cta, b.Param("rows_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, b.Param("vec"));
  const bool add = r.kind() == "add_rms_norm";
  const int w_index = add ? 2 : 1;
  const ir::DType x_dtype = r.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string x_type, b.TypeName(x_dtype, "the input"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(r.operand_dtype(w_index), "the weight"));
  TP_ASSIGN_OR_RETURN(const Matrix a, b.AsMatrix(r.operand(0), "operand 0", !add));
  Matrix m;
  if (add) {
    TP_ASSIGN_OR_RETURN(m, b.AsMatrix(r.operand(1), "operand 1"));
  }
  for (int i = 0; i < r.num_results(); ++i) {
    TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(i), absl::StrCat("result ", i)));
  }
  if (a.cols % vec != 0 || a.stride % vec != 0 || a.group_stride % vec != 0 ||
      (add && m.stride % vec != 0)) {
    return b.Error("rows of ", a.cols, " (stride ", a.stride, ") do not split into vec ", vec);
  }
  TP_ASSIGN_OR_RETURN(const double eps, r.region().attrs.GetFloat("eps"));
  const int64_t x_bytes = vec * ir::DTypeSize(x_dtype);
  TP_RETURN_IF_ERROR(b.CheckOperands(
      x_bytes, add ? std::initializer_list<int>{0, 1} : std::initializer_list<int>{0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(r.operand_dtype(w_index)), {w_index}));
  TP_RETURN_IF_ERROR(b.CheckResults(
      x_bytes, add ? std::initializer_list<int>{0, 1} : std::initializer_list<int>{0}));
  const std::string name = absl::StrCat("tileplan::", r.kind(), "<", x_type, ", ", w_type, ", ",
                                        row_threads, ", ", rows_per_cta, ", ", vec, ">");
  const std::array<int64_t, 3> grid = {std::max<int64_t>(1, CeilDiv(a.rows, rows_per_cta)), 1, 1};
  const std::array<int64_t, 3> block = {row_threads * rows_per_cta, 1, 1};
  if (add) {
    AddRmsNormParams p{};
    p.a = b.Operand(0);
    p.a_stride = a.stride;
    p.b = b.Operand(1);
    p.b_stride = m.stride;
    p.w = b.Operand(w_index);
    p.sum = b.Result(0);
    p.out = b.Result(1);
    p.rows = static_cast<int>(a.rows);
    p.n = static_cast<int>(a.cols);
    p.eps = static_cast<float>(eps);
    b.Launch("rms_norm.cuh", name, grid, block, 0, p);
  } else {
    RmsNormParams p{};
    p.x = b.Operand(0);
    p.x_stride = a.stride;
    p.x_group = static_cast<int>(a.group);
    p.x_group_stride = a.group_stride;
    p.w = b.Operand(w_index);
    p.out = b.Result(0);
    p.rows = static_cast<int>(a.rows);
    p.n = static_cast<int>(a.cols);
    p.eps = static_cast<float>(eps);
    b.Launch("rms_norm.cuh", name, grid, block, 0, p);
  }
  return std::move(b).Finish();
}

class RmsNormFamily final : public TemplateFamilyBase {
 public:
  RmsNormFamily()
      : TemplateFamilyBase("rms_norm", 1, {"add_rms_norm", "rms_norm"},
                           {"row_threads", "rows_per_cta", "vec"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    LaunchGeometry g;
    const int64_t rows_per_cta = t.params.at("rows_per_cta");
    g.grid = {std::max<int64_t>(1, CeilDiv(Rows(r.operand(0).shape), rows_per_cta)), 1, 1};
    g.block = {t.params.at("row_threads") * rows_per_cta, 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    WorkEstimate w;
    w.bytes = r.io_bytes();
    w.flops = (r.kind() == "add_rms_norm" ? 5 : 4) * r.result(0).NumElements();
    return w;
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    return operand < (r.kind() == "add_rms_norm" ? 2 : 1);  // not the weight
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(rms_norm::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchRmsNorm(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    return RequireInnerContiguous(r, {0, 1});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription&,
                   int64_t) const override {
    Row row = kRows[4];
    for (const Row& candidate : kRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const int64_t vec = Vec(r);
    const int64_t vectors = CeilDiv(N(r), vec);
    const int64_t row_threads =
        std::clamp<int64_t>(CeilDiv(CeilDiv(vectors, row.vectors_per_thread), 32) * 32, 32, 1024);
    const int64_t rows_per_cta = std::max<int64_t>(1, row.cta_threads / row_threads);
    return MakeTactic({{"row_threads", row_threads}, {"rows_per_cta", rows_per_cta}, {"vec", vec}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription&) const override {
    return {{"row_threads", {32, 64, 128, 256, 512, 1024}},
            {"rows_per_cta", {1, 2, 4, 8}},
            {"vec", {Vec(r)}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription&) const override {
    const int64_t row_threads = t.params.at("row_threads");
    const int64_t rows_per_cta = t.params.at("rows_per_cta");
    const int64_t vec = t.params.at("vec");
    if (!IsBlockSize(row_threads)) {
      return BadParam("row_threads", row_threads, "a multiple of 32 in [32, 1024]");
    }
    if (!IsPowerOfTwo(rows_per_cta) || row_threads * rows_per_cta > 1024) {
      return BadParam("rows_per_cta", rows_per_cta,
                      "a power of two with row_threads * rows_per_cta <= 1024");
    }
    if (!IsPowerOfTwo(vec) || vec > Vec(r)) {
      return BadParam("vec", vec, absl::StrCat("a power of two <= ", Vec(r)));
    }
    return absl::OkStatus();
  }

 private:
  static int64_t N(const BoundRegion& r) { return r.operand(0).shape.back(); }
  static int64_t Vec(const BoundRegion& r) {
    std::vector<int64_t> extents = AlignmentExtents(r, {0, 1});
    extents.push_back(N(r));
    return VectorWidth(r.operand_dtype(0), extents);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeRmsNormFamily() { return std::make_unique<RmsNormFamily>(); }

}  // namespace tileplan::kernels::internal
