// elementwise: add, mul, silu, swiglu and moe_combine over rows of the last dim. Operands are
// addressed with their full strides (views of packed tensors are fine) but each needs a
// contiguous last dim. A thread handles `items` vectors of `vec` elements; the grid covers the
// output once (moe_combine: each output vector sums its token's top_k expert vectors).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/elementwise/elementwise_params.h"

namespace tileplan::kernels::elementwise {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::elementwise

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t threads;
  int64_t items;
};
constexpr Row kRows[] = {{"sm_80", 256, 2},
                         {"sm_90", 256, 4},
                         {"sm_100", 256, 4},
                         {"sm_120", 256, 2},
                         {"default", 256, 1}};

// moe_combine: y [B,T,K,H] as rows of H (token r's selection k at row r * K + k), the weights
// [B,T,K] (f32 or y's dtype) as rows of K.
absl::StatusOr<TemplateLaunch> LaunchMoeCombine(const BoundRegion& r, const Tactic& t,
                                                const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t items, b.Param("items"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, b.Param("vec"));
  const ir::DType dtype = r.result_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "the result"));
  const ir::DType weights_dtype = r.operand_dtype(1);
  if (r.operand_dtype(0) != dtype || (weights_dtype != ir::DType::kF32 && weights_dtype != dtype)) {
    return b.Error("y must have the result's dtype and the weights f32 or that dtype");
  }
  TP_ASSIGN_OR_RETURN(const std::string weights_type, b.TypeName(weights_dtype, "the weights"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  TP_ASSIGN_OR_RETURN(const Matrix out, b.AsMatrix(r.result(0), "the result"));
  TP_ASSIGN_OR_RETURN(const Matrix y, b.AsMatrix(r.operand(0), "y"));
  TP_ASSIGN_OR_RETURN(const Matrix weights, b.AsMatrix(r.operand(1), "the weights"));
  const int64_t top_k = weights.cols;
  if (y.rows != out.rows * top_k || weights.rows != out.rows || y.cols != out.cols) {
    return b.Error("y [", y.rows, ", ", y.cols, "] and weights [", weights.rows, ", ", top_k,
                   "] do not make [", out.rows, ", ", out.cols, "]");
  }
  if (out.cols % vec != 0 || y.stride % vec != 0) {
    return b.Error("y rows of ", y.cols, " (stride ", y.stride, ") do not split into vec ", vec);
  }
  const int64_t bytes = vec * ir::DTypeSize(dtype);
  TP_RETURN_IF_ERROR(b.CheckResults(bytes, {0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(bytes, {0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(ir::DTypeSize(weights_dtype), {1}));
  MoeCombineParams p{};
  p.y = b.Operand(0);
  p.y_stride = y.stride;
  p.weights = b.Operand(1);
  p.weights_stride = weights.stride;
  p.out = b.Result(0);
  p.rows = out.rows;
  p.cols = static_cast<int>(out.cols);
  p.top_k = static_cast<int>(top_k);
  b.Launch("elementwise.cuh",
           absl::StrCat("tileplan::moe_combine<", type, ", ", weights_type, ", ", threads, ", ",
                        items, ", ", vec, ">"),
           {std::max<int64_t>(1, CeilDiv(out.rows * out.cols, threads * items * vec)), 1, 1},
           {threads, 1, 1}, 0, p);
  return std::move(b).Finish();
}

absl::StatusOr<TemplateLaunch> LaunchElementwise(const BoundRegion& r, const Tactic& t,
                                                 const RegionBuffers* buffers) {
  if (r.kind() == "moe_combine") return LaunchMoeCombine(r, t, buffers);
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t items, b.Param("items"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, b.Param("vec"));
  const std::string& kind = r.kind();
  const ir::DType dtype = r.result_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "the result"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  TP_ASSIGN_OR_RETURN(const Matrix out, b.AsMatrix(r.result(0), "the result"));
  std::vector<Matrix> in;
  for (int i = 0; i < r.num_operands(); ++i) {
    TP_ASSIGN_OR_RETURN(Matrix m, b.AsMatrix(r.operand(i), absl::StrCat("operand ", i)));
    if (m.stride % vec != 0) return b.Error("operand ", i, " row stride is not a multiple of vec");
    in.push_back(m);
  }
  if (out.cols % vec != 0) return b.Error("rows of ", out.cols, " do not split into vec ", vec);
  const int64_t bytes = vec * ir::DTypeSize(dtype);
  TP_RETURN_IF_ERROR(b.CheckResults(bytes, {0}));
  for (int i = 0; i < r.num_operands(); ++i) TP_RETURN_IF_ERROR(b.CheckOperands(bytes, {i}));
  const std::string kernel = kind == "swiglu" ? "swiglu" : absl::StrCat("elementwise_", kind);
  const std::string name =
      absl::StrCat("tileplan::", kernel, "<", type, ", ", threads, ", ", items, ", ", vec, ">");
  const std::array<int64_t, 3> grid = {
      std::max<int64_t>(1, CeilDiv(out.rows * out.cols, threads * items * vec)), 1, 1};
  if (r.num_operands() == 2) {
    ElementwiseBinaryParams p{};
    p.a = b.Operand(0);
    p.a_stride = in[0].stride;
    p.b = b.Operand(1);
    p.b_stride = in[1].stride;
    p.out = b.Result(0);
    p.rows = out.rows;
    p.cols = static_cast<int>(out.cols);
    b.Launch("elementwise.cuh", name, grid, {threads, 1, 1}, 0, p);
  } else {
    ElementwiseUnaryParams p{};
    p.x = b.Operand(0);
    p.x_stride = in[0].stride;
    p.out = b.Result(0);
    p.rows = out.rows;
    p.cols = static_cast<int>(out.cols);
    b.Launch("elementwise.cuh", name, grid, {threads, 1, 1}, 0, p);
  }
  return std::move(b).Finish();
}

class ElementwiseFamily final : public TemplateFamilyBase {
 public:
  ElementwiseFamily()
      : TemplateFamilyBase("elementwise", 2, {"add", "moe_combine", "mul", "silu", "swiglu"},
                           {"items", "threads", "vec"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const int64_t per_cta = t.params.at("threads") * t.params.at("vec") * t.params.at("items");
    LaunchGeometry g;
    g.grid = {std::max<int64_t>(1, CeilDiv(r.result(0).NumElements(), per_cta)), 1, 1};
    g.block = {t.params.at("threads"), 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    WorkEstimate w;
    const int64_t n = r.result(0).NumElements();
    w.bytes = r.io_bytes();
    const std::string& k = r.kind();
    if (k == "moe_combine") {
      w.flops = 2 * r.operand(1).shape.back() * n;  // a multiply-add per selection
    } else {
      w.flops = k == "silu" ? 4 * n : k == "swiglu" ? 5 * n : n;
    }
    return w;
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    // Each thread reads its elements before writing the same positions; swiglu's result is
    // half its operand's width and moe_combine's a K-th of its y, so positions differ.
    return r.kind() != "swiglu" && r.kind() != "moe_combine";
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(elementwise::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchElementwise(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    return RequireInnerContiguous(r, {0, 1});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t) const override {
    Row row = kRows[4];
    for (const Row& candidate : kRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const int64_t vec = Vec(r);
    // Fewer items per thread while that still leaves CTAs idle.
    int64_t items = row.items;
    const int64_t n = r.result(0).NumElements();
    while (items > 1 && CeilDiv(n, row.threads * vec * items) < target.sm_count()) items /= 2;
    return MakeTactic({{"items", items}, {"threads", row.threads}, {"vec", vec}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription&) const override {
    return {{"items", {1, 2, 4, 8}}, {"threads", {128, 256, 512}}, {"vec", {Vec(r)}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription&) const override {
    const int64_t threads = t.params.at("threads");
    const int64_t items = t.params.at("items");
    const int64_t vec = t.params.at("vec");
    if (!IsBlockSize(threads))
      return BadParam("threads", threads, "a multiple of 32 in [32, 1024]");
    if (!IsPowerOfTwo(items) || items > 16) return BadParam("items", items, "a power of two <= 16");
    if (!IsPowerOfTwo(vec) || vec > Vec(r)) {
      return BadParam("vec", vec, absl::StrCat("a power of two <= ", Vec(r)));
    }
    return absl::OkStatus();
  }

 private:
  // The widest access that divides the last dims and keeps every operand's rows aligned
  // (moe_combine's weights are read one at a time).
  static int64_t Vec(const BoundRegion& r) {
    std::vector<int64_t> extents =
        r.kind() == "moe_combine" ? AlignmentExtents(r, {0}) : AlignmentExtents(r, {0, 1});
    extents.push_back(r.result(0).shape.empty() ? 1 : r.result(0).shape.back());
    extents.push_back(r.operand(0).shape.empty() ? 1 : r.operand(0).shape.back());
    return VectorWidth(r.result_dtype(0), extents);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeElementwiseFamily() {
  return std::make_unique<ElementwiseFamily>();
}

}  // namespace tileplan::kernels::internal
