// The common flags of the tools that run the GPU runtime (verify_model,
// benchmark_transformer): the gpu group of tools/common_flags.h, in its own library
// (tileplan_tool_gpu_flags) because it links the runtime.
#ifndef TILEPLAN_TOOLS_GPU_FLAGS_H_
#define TILEPLAN_TOOLS_GPU_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "runtime/gpu/gpu_runtime.h"

ABSL_DECLARE_FLAG(std::string, pdl);
ABSL_DECLARE_FLAG(bool, cuda_graphs);

namespace tileplan::tools {

// --pdl and --cuda-graphs as runtime options. InvalidArgument naming --pdl for a value other
// than never, decode or always.
absl::StatusOr<runtime::gpu::GpuOptions> GpuOptionsFromFlags();

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_GPU_FLAGS_H_
