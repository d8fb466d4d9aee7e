// embedding_gather: out[b,t,:] = table[ids[b,t],:]. Each CTA copies `tokens_per_cta` rows of
// the table with `threads` threads, `vec` elements per access; an out-of-range id traps.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/embedding_gather/embedding_gather_params.h"

namespace tileplan::kernels::embedding_gather {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::embedding_gather

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t threads;
};
constexpr Row kRows[] = {
    {"sm_80", 128}, {"sm_90", 256}, {"sm_100", 256}, {"sm_120", 128}, {"default", 128}};

absl::StatusOr<TemplateLaunch> LaunchEmbeddingGather(const BoundRegion& r, const Tactic& t,
                                                     const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t per_cta, b.Param("tokens_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, b.Param("vec"));
  const Layout& table = r.operand(1);
  const ir::DType dtype = r.operand_dtype(1);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "the table"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(0), "the ids"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(table, "the table"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  const int64_t tokens = r.operand(0).NumElements();
  const int64_t vocab = table.shape[0], hidden = table.shape[1];
  if (hidden % vec != 0) return b.Error("hidden size ", hidden, " is not a multiple of vec ", vec);
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(dtype), {1}));
  TP_RETURN_IF_ERROR(b.CheckResults(vec * ir::DTypeSize(dtype), {0}));
  EmbeddingGatherParams p{};
  p.ids = static_cast<const int*>(b.Operand(0));
  p.table = b.Operand(1);
  p.out = b.Result(0);
  p.num_tokens = static_cast<int>(tokens);
  p.vocab = static_cast<int>(vocab);
  p.hidden = static_cast<int>(hidden);
  p.error = b.error();
  b.Launch("embedding_gather.cuh",
           absl::StrCat("tileplan::embedding_gather<", type, ", ", threads, ", ", per_cta, ", ",
                        vec, ">"),
           {std::max<int64_t>(1, CeilDiv(tokens, per_cta)), 1, 1}, {threads, 1, 1}, 0, p);
  return std::move(b).Finish();
}

class EmbeddingGatherFamily final : public TemplateFamilyBase {
 public:
  EmbeddingGatherFamily()
      : TemplateFamilyBase("embedding_gather", 1, {"embedding"},
                           {"threads", "tokens_per_cta", "vec"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    LaunchGeometry g;
    g.grid = {CeilDiv(Tokens(r), t.params.at("tokens_per_cta")), 1, 1};
    g.block = {t.params.at("threads"), 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    WorkEstimate w;
    w.bytes = r.operand_bytes(0) + 2 * r.result_bytes(0);  // ids, gathered rows, output
    return w;
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(embedding_gather::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchEmbeddingGather(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    return RequireInnerContiguous(r, {1});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription&,
                   int64_t) const override {
    int64_t threads = 128;
    for (const Row& row : kRows) {
      if (row.arch == arch) threads = row.threads;
    }
    const int64_t vec = Vec(r);
    const int64_t needed = CeilDiv(CeilDiv(Hidden(r), vec), 32) * 32;
    return MakeTactic({{"threads", std::clamp<int64_t>(needed, 32, threads)},
                       {"tokens_per_cta", 1},
                       {"vec", vec}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription&) const override {
    return {{"threads", {64, 128, 256, 512}}, {"tokens_per_cta", {1, 2, 4, 8}}, {"vec", {Vec(r)}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription&) const override {
    const int64_t threads = t.params.at("threads");
    const int64_t tokens = t.params.at("tokens_per_cta");
    const int64_t vec = t.params.at("vec");
    if (!IsBlockSize(threads))
      return BadParam("threads", threads, "a multiple of 32 in [32, 1024]");
    if (!IsPowerOfTwo(tokens) || tokens > 64) {
      return BadParam("tokens_per_cta", tokens, "a power of two <= 64");
    }
    if (!IsPowerOfTwo(vec) || vec > Vec(r)) {
      return BadParam("vec", vec, absl::StrCat("a power of two <= ", Vec(r)));
    }
    return absl::OkStatus();
  }

 private:
  static int64_t Tokens(const BoundRegion& r) { return r.operand(0).NumElements(); }
  static int64_t Hidden(const BoundRegion& r) { return r.operand(1).shape.back(); }
  static int64_t Vec(const BoundRegion& r) {
    std::vector<int64_t> extents = {Hidden(r)};
    return VectorWidth(r.operand_dtype(1), extents);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeEmbeddingGatherFamily() {
  return std::make_unique<EmbeddingGatherFamily>();
}

}  // namespace tileplan::kernels::internal
