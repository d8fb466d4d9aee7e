// view: reshape and split are zero-copy views of their operand's storage (the memory
// planner gives them the operand's storage at an offset with strides); nothing launches.
#include "kernels/core/family_base.h"

namespace tileplan::kernels::internal {
namespace {

class ViewFamily final : public FamilyBase {
 public:
  ViewFamily() : FamilyBase("view", 1, {"reshape", "split"}, {}) {}

  LaunchGeometry Geometry(const Tactic&, const BoundRegion&) const override { return {}; }
  WorkEstimate Work(const Tactic&, const BoundRegion&) const override { return {}; }
  LaunchKind launch_kind() const override { return LaunchKind::kNothing; }
  int Launches(const Tactic&, const BoundRegion&) const override { return 0; }

 protected:
  absl::Status CheckRegion(const BoundRegion&, const TargetDescription&) const override {
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
};

}  // namespace

std::unique_ptr<KernelFamily> MakeViewFamily() { return std::make_unique<ViewFamily>(); }

}  // namespace tileplan::kernels::internal
