// embedding_gather: out[b,t,:] = table[ids[b,t],:]. Each CTA copies `tokens_per_cta` rows of
// the table with `threads` threads, `vec` elements per access; an out-of-range id traps.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/families.h"
#include "kernels/family_base.h"

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t threads;
};
constexpr Row kRows[] = {
    {"sm_80", 128}, {"sm_90", 256}, {"sm_100", 256}, {"sm_120", 128}, {"default", 128}};

class EmbeddingGatherFamily final : public FamilyBase {
 public:
  EmbeddingGatherFamily()
      : FamilyBase("embedding_gather", 1, {"embedding"}, {"threads", "tokens_per_cta", "vec"}) {}

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
