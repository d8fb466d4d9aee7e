#include "tools/gpu_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, pdl, "decode",
          "which phases use programmatic dependent launch, each kernel's launch overlapping the "
          "previous kernel's tail (sm_90+): never, decode or always");
ABSL_FLAG(bool, cuda_graphs, true,
          "replay the phases as CUDA Graphs; --no-cuda-graphs launches every kernel from the "
          "host");
ABSL_FLAG(std::string, decode_backend, "kernels",
          "how decode phases run their steps (docs/plan.md, \"Persistent decode\"): kernels "
          "(one kernel per step), persistent (runs of steps as one persistent kernel wherever "
          "their families allow) or auto (persistent where the cost model prefers it)");
ABSL_FLAG(int, persistent_blocks_per_sm, 0,
          "blocks per SM of the persistent kernel; 0: 256 threads' worth with the weight "
          "stream, else 512");
ABSL_FLAG(int, persistent_stream_slots, tileplan::planner::kDefaultStreamSlots,
          "shared-memory slots through which the persistent kernel streams the next tasks' "
          "weights (0 to 8); 0: every task reads its weights itself");

ABSL_FLAG(bool, persistent_trace, false,
          "persistent decode kernels record every task's timestamps; benchmark_transformer then "
          "prints, after each decode measurement, where a step's time goes stage by stage");

namespace tileplan::tools {

absl::StatusOr<runtime::gpu::GpuOptions> GpuOptionsFromFlags() {
  runtime::gpu::GpuOptions options;
  options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  options.persistent_trace = absl::GetFlag(FLAGS_persistent_trace);
  if (absl::Status s = runtime::gpu::ParseProgrammaticLaunch(absl::GetFlag(FLAGS_pdl), options);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--pdl: ", s.message()));
  }
  return options;
}

absl::Status ApplyDecodeBackendFlags(planner::PlanOptions& options) {
  const std::string backend = absl::GetFlag(FLAGS_decode_backend);
  if (backend == "kernels") {
    options.decode_backend = planner::proto::PlanOptions::DECODE_BACKEND_KERNELS;
  } else if (backend == "persistent") {
    options.decode_backend = planner::proto::PlanOptions::DECODE_BACKEND_PERSISTENT;
  } else if (backend == "auto") {
    options.decode_backend = planner::proto::PlanOptions::DECODE_BACKEND_AUTO;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--decode-backend takes kernels, persistent or auto, not '", backend, "'"));
  }
  const int blocks = absl::GetFlag(FLAGS_persistent_blocks_per_sm);
  if (blocks < 0 || blocks > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("--persistent-blocks-per-sm takes 0 to 32, not ", blocks));
  }
  options.persistent_blocks_per_sm = blocks;
  const int slots = absl::GetFlag(FLAGS_persistent_stream_slots);
  if (slots < 0 || slots > planner::kMaxStreamSlots) {
    return absl::InvalidArgumentError(absl::StrCat("--persistent-stream-slots takes 0 to ",
                                                   planner::kMaxStreamSlots, ", not ", slots));
  }
  options.persistent_stream_slots = slots;
  return absl::OkStatus();
}

}  // namespace tileplan::tools
