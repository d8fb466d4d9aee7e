// collective: the collective regions of tensor parallelism (all_reduce, all_gather,
// sharded_argmax) as NCCL runs them between the GPUs of one host: a library family whose
// one configuration is NCCL's own choice of algorithm and protocol. Its cost is link time:
// a ring all-reduce sends 2 (R - 1) / R of the tensor from every GPU in 2 (R - 1) steps, an
// all-gather (R - 1) / R of the gathered tensor in R - 1 steps; sharded_argmax gathers each
// rank's (value, index) per row, 8 bytes. The DRAM traffic of the copies overlaps the
// link's and is not charged separately.
#include "kernels/core/family_base.h"

namespace tileplan::kernels::internal {
namespace {

class CollectiveFamily final : public FamilyBase {
 public:
  CollectiveFamily()
      : FamilyBase("collective", 1, {"all_gather", "all_reduce", "sharded_argmax"}, {}) {}

  LaunchKind launch_kind() const override { return LaunchKind::kLibrary; }
  bool spans_devices() const override { return true; }
  LaunchGeometry Geometry(const Tactic&, const BoundRegion&) const override {
    // NCCL picks its own channels; one CTA stands for the launch.
    LaunchGeometry g;
    g.grid = {1, 1, 1};
    g.block = {512, 1, 1};
    return g;
  }
  int Launches(const Tactic&, const BoundRegion&) const override { return 1; }
  // An all_gather of several rows gathers the ranks' rows stacked, then places them side by
  // side in the result: the stacked copy, the result's size.
  int64_t WorkspaceBytes(const Tactic&, const BoundRegion& r) const override {
    if (r.kind() != "all_gather" || Ranks(r) <= 1) return 0;
    const Layout& x = r.operand(0);
    const int64_t n = x.shape.empty() ? 0 : x.shape.back();
    return n > 0 && x.NumElements() / n > 1 ? r.result_bytes(0) : 0;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    WorkEstimate w;
    const int64_t ranks = Ranks(r);
    if (ranks <= 1) return w;
    if (r.kind() == "all_reduce") {
      w.link_bytes = 2 * (ranks - 1) * r.result_bytes(0) / ranks;
      w.link_steps = static_cast<int>(2 * (ranks - 1));
    } else if (r.kind() == "all_gather") {
      w.link_bytes = (ranks - 1) * r.result_bytes(0) / ranks;
      w.link_steps = static_cast<int>(ranks - 1);
    } else {  // sharded_argmax: (value, index) per row from every other rank
      w.link_bytes = (ranks - 1) * r.result_bytes(0) * 2;
      w.link_steps = static_cast<int>(ranks - 1);
    }
    return w;
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription& target) const override {
    if (Ranks(r) > 1 && !(target.achievable_interconnect_bandwidth_gbps() > 0)) {
      return Refuse(
          absl::StrCat("target ", target.name(), " describes no interconnect between its GPUs"));
    }
    return absl::OkStatus();
  }
  Tactic RowTactic(absl::string_view, const BoundRegion&, const TargetDescription&,
                   int64_t) const override {
    return MakeTactic({});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {};
  }
  absl::Status CheckTactic(const Tactic&, const BoundRegion&,
                           const TargetDescription&) const override {
    return absl::OkStatus();
  }

 private:
  static int64_t Ranks(const BoundRegion& r) {
    return r.region().attrs.GetIntOr("ranks", 1).value_or(1);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeCollectiveFamily() {
  return std::make_unique<CollectiveFamily>();
}

}  // namespace tileplan::kernels::internal
