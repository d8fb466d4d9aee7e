// DetectEnvironment and PlanningEnvironment (tuner/environment.h): the half of the
// environment that needs the CUDA runtime and cuBLASLt, in its own library
// (tileplan_tuner_environment).
#include <cublasLt.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "tuner/environment.h"

namespace tileplan::tuner {

absl::StatusOr<Environment> DetectEnvironment(const device::Device& device,
                                              const kernels::NvrtcCompiler& compiler,
                                              const targets::TargetDescription& target) {
  const device::DeviceProperties& p = device.properties();
  if (target.sm() != p.sm) {
    return absl::InvalidArgumentError(absl::StrCat("target ", target.name(), " describes sm_",
                                                   target.sm(), " but ", device.Label(), " is sm_",
                                                   p.sm));
  }
  Environment env;
  env.gpu = p.name;
  env.sm = p.sm;
  env.sm_count = p.sm_count;
  env.l2_bytes = p.l2_bytes;
  env.bandwidth_gbps = target.achievable_memory_bandwidth_gbps();
  env.driver_version = p.driver_version;
  env.cuda_runtime_version = p.runtime_version;
  env.nvrtc_version = compiler.nvrtc_version();
  env.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  return env;
}

absl::StatusOr<Environment> PlanningEnvironment(const targets::TargetDescription& target,
                                                const device::Device* device) {
  if (device == nullptr) return FromTarget(target);
  absl::StatusOr<std::unique_ptr<kernels::NvrtcCompiler>> compiler =
      kernels::NvrtcCompiler::Create({});
  if (!compiler.ok()) return compiler.status();
  return DetectEnvironment(*device, **compiler, target);
}

}  // namespace tileplan::tuner
