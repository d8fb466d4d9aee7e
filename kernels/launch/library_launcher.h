// The launch half of a family whose kernels a library launches (KernelFamily::launch_kind()
// is kLibrary; cuBLASLt's, kernels/cublaslt/cublaslt_runner.h): registered with the step
// launcher (kernels/step/step_launcher.h) under the family's name.
#ifndef TILEPLAN_KERNELS_LAUNCH_LIBRARY_LAUNCHER_H_
#define TILEPLAN_KERNELS_LAUNCH_LIBRARY_LAUNCHER_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"

namespace tileplan::kernels {

// One region under one tactic, prepared by the library (descriptors, algo); lives no longer
// than the launcher that prepared it.
class LibraryStep {
 public:
  virtual ~LibraryStep() = default;
  // Enqueues the step on `stream` only (no synchronization, allocation or copy, so it may be
  // captured into a CUDA Graph). InvalidArgument naming the region for a missing or
  // misaligned buffer.
  virtual absl::Status Launch(const RegionBuffers& buffers, cudaStream_t stream) = 0;
  // What the library resolved, for reports.
  virtual std::string Describe() const = 0;
};

class LibraryLauncher {
 public:
  virtual ~LibraryLauncher() = default;
  // The family whose launch half this is.
  virtual absl::string_view family() const = 0;
  // Everything host-side, once per (region, tactic); errors name the region.
  virtual absl::StatusOr<std::unique_ptr<LibraryStep>> PrepareStep(const BoundRegion& region,
                                                                   const Tactic& tactic) = 0;
  // The configurations the library offers for the region's exact problem, as tactics of the
  // family built on `base`, at most `limit`, in the library's order (its pick first).
  virtual absl::StatusOr<std::vector<Tactic>> Configs(const BoundRegion& region, const Tactic& base,
                                                      int limit) = 0;
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_LAUNCH_LIBRARY_LAUNCHER_H_
