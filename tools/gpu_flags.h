// The common flags of the tools that run the GPU runtime (verify_model,
// benchmark_transformer): the gpu group of tools/common_flags.h, in its own library
// (tileplan_tool_gpu_flags) because it links the runtime.
#ifndef TILEPLAN_TOOLS_GPU_FLAGS_H_
#define TILEPLAN_TOOLS_GPU_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "planner/plan_builder.h"
#include "runtime/gpu/gpu_runtime.h"

ABSL_DECLARE_FLAG(std::string, pdl);
ABSL_DECLARE_FLAG(bool, cuda_graphs);
ABSL_DECLARE_FLAG(std::string, decode_backend);
ABSL_DECLARE_FLAG(int, persistent_blocks_per_sm);
ABSL_DECLARE_FLAG(int, persistent_stream_slots);
ABSL_DECLARE_FLAG(bool, persistent_trace);

namespace tileplan::tools {

// --pdl and --cuda-graphs as runtime options. InvalidArgument naming --pdl for a value other
// than never, decode or always.
absl::StatusOr<runtime::gpu::GpuOptions> GpuOptionsFromFlags();

// --decode-backend and --persistent-blocks-per-sm into `options`. InvalidArgument naming the
// flag for a value it does not take.
absl::Status ApplyDecodeBackendFlags(planner::PlanOptions& options);

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_GPU_FLAGS_H_
