// elementwise: add, mul, silu, swiglu over rows of the last dim. Operands are addressed with
// their full strides (views of packed tensors are fine) but each needs a contiguous last dim.
// A thread handles `items` vectors of `vec` elements; the grid covers the output once.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/families.h"
#include "kernels/family_base.h"

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

class ElementwiseFamily final : public FamilyBase {
 public:
  ElementwiseFamily()
      : FamilyBase("elementwise", 1, {"add", "mul", "silu", "swiglu"},
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
    w.bytes = r.result_bytes(0);
    for (int i = 0; i < r.num_operands(); ++i) w.bytes += r.operand_bytes(i);
    const std::string& k = r.kind();
    w.flops = k == "silu" ? 4 * n : k == "swiglu" ? 5 * n : n;
    return w;
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    // Each thread reads its elements before writing the same positions; swiglu's result is
    // half its operand's width, so positions differ.
    return r.kind() != "swiglu";
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
  // The widest access that divides the last dims and keeps every operand's rows aligned.
  static int64_t Vec(const BoundRegion& r) {
    std::vector<int64_t> extents = AlignmentExtents(r, {0, 1});
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
