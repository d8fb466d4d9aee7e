#include "tools/gpu_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, pdl, "decode",
          "which phases use programmatic dependent launch, each kernel's launch overlapping the "
          "previous kernel's tail (sm_90+): never, decode or always");
ABSL_FLAG(bool, cuda_graphs, true,
          "replay the phases as CUDA Graphs; --no-cuda-graphs launches every kernel from the "
          "host");

namespace tileplan::tools {

absl::StatusOr<runtime::gpu::GpuOptions> GpuOptionsFromFlags() {
  runtime::gpu::GpuOptions options;
  options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  if (absl::Status s = runtime::gpu::ParseProgrammaticLaunch(absl::GetFlag(FLAGS_pdl), options);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--pdl: ", s.message()));
  }
  return options;
}

}  // namespace tileplan::tools
