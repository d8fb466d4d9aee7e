// The launch half of the `collective` family (kernels/families/collective/): its steps run as
// NCCL collectives on one rank's communicator (device/nccl.h), enqueued on the step's stream so
// that they are captured into CUDA Graphs like any other step. Registered with the step
// launcher when it is given a communicator (kernels/step/step_launcher.h).
//
// all_reduce: ncclAllReduce (sum) from x into the result; with a bias operand (lowering adds
// one for checkpoints with o_proj or down_proj biases) every rank then adds the bias to the
// reduced sum (add_bias_rows, kernels/launch/runtime_support.cuh), so it counts once. all_gather:
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
#include "kernels/launch/kernel_loader.h"
#include "kernels/launch/library_launcher.h"

namespace tileplan::kernels {

class NcclLauncher final : public LibraryLauncher {
 public:
  // `communicator` and `loader` (which runs the bias kernel) must outlive the launcher and
  // every step it prepares.
  NcclLauncher(const device::Communicator& communicator, KernelLoader& loader)
      : communicator_(communicator), loader_(loader) {}

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
  KernelLoader& loader_;
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_NCCL_NCCL_LAUNCHER_H_
