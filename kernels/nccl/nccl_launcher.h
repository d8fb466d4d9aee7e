// The launch half of the `collective` family (kernels/families/collective/): its steps run as
// NCCL collectives on one rank's communicator (device/nccl.h), enqueued on the step's stream so
// that they are captured into CUDA Graphs like any other step. Registered with the step
// launcher when it is given a communicator (kernels/step/step_launcher.h).
//
// all_reduce: ncclAllReduce (sum) from x into the result; a bias operand is not supported yet
// (lowering adds one only for checkpoints with o_proj or down_proj biases). all_gather:
// ncclAllGather, which stacks the ranks' buffers; with more than one row the stacked [R, rows, n]
// goes to the family's workspace and R strided copies put rank r's rows at columns r·n of the
// result [rows, R·n]. sharded_argmax is not supported yet.
#ifndef TILEPLAN_KERNELS_NCCL_NCCL_LAUNCHER_H_
#define TILEPLAN_KERNELS_NCCL_NCCL_LAUNCHER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/nccl.h"
#include "kernels/launch/library_launcher.h"

namespace tileplan::kernels {

class NcclLauncher final : public LibraryLauncher {
 public:
  // `communicator` must outlive the launcher and every step it prepares.
  explicit NcclLauncher(const device::Communicator& communicator) : communicator_(communicator) {}

  absl::string_view family() const override { return "collective"; }
  // InvalidArgument naming the region for a kind or operand this launcher does not run, a
  // `ranks` attribute other than the communicator's, a dtype NCCL has no type for, or a
  // strided operand or result.
  absl::StatusOr<std::unique_ptr<LibraryStep>> PrepareStep(const BoundRegion& region,
                                                           const Tactic& tactic) override;
  // NCCL chooses its algorithm and protocol itself: `base` is the only configuration.
  absl::StatusOr<std::vector<Tactic>> Configs(const BoundRegion& region, const Tactic& base,
                                              int limit) override;

 private:
  const device::Communicator& communicator_;
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_NCCL_NCCL_LAUNCHER_H_
