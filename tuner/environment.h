// The environment a tactic measurement is valid for (docs/tuner.md, "Environment
// fingerprint"): the GPU, the software that compiled and launched the kernels, and the
// store's schema version. Its one-line fingerprint is planner::TacticKey::environment for
// every key the tactic store holds; a measurement is never reused in an environment whose
// fingerprint differs in any field.
#ifndef TILEPLAN_TUNER_ENVIRONMENT_H_
#define TILEPLAN_TUNER_ENVIRONMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "targets/target.pb.h"

namespace tileplan {
namespace device {
class Device;
}  // namespace device
namespace kernels {
class NvrtcCompiler;
}  // namespace kernels
}  // namespace tileplan

namespace tileplan::tuner {

// The version of the tactic store's schema (tables and export format, docs/tuner.md). Bump
// it whenever either changes; stores of another version are read as empty and never written.
inline constexpr int32_t kTacticStoreSchemaVersion = 1;

struct Environment {
  std::string gpu;  // the device's name, "NVIDIA H200"
  int32_t sm = 0;   // compute capability, major * 10 + minor
  int32_t sm_count = 0;
  int64_t l2_bytes = 0;
  double bandwidth_gbps = 0;         // the target description's achievable DRAM bandwidth
  int32_t driver_version = 0;        // cudaDriverGetVersion, e.g. 13000; 0 when unknown
  int32_t cuda_runtime_version = 0;  // cudaRuntimeGetVersion, e.g. 13000; 0 when unknown
  std::string nvrtc_version;         // "13.0"; empty when unknown
  int64_t cublaslt_version = 0;      // cublasLtGetVersion, e.g. 130000; 0 when unknown
  int32_t schema_version = kTacticStoreSchemaVersion;

  // Every field on one line, in this order, separated by '|':
  //   "NVIDIA H200|sm_90|132sm|l2=62914560|bw=4200|driver=13000|cudart=13000|nvrtc=13.0|
  //    cublaslt=130000|schema=1"   (one line; wrapped here)
  // The bandwidth is the shortest decimal that reads back as the same double. Fields are
  // not escaped: a GPU name never contains '|' or a line break.
  std::string Fingerprint() const;

  friend bool operator==(const Environment& a, const Environment& b) = default;
};

// The environment a target description implies, with no GPU: the driver, runtime, NVRTC
// and cuBLASLt versions are unknown (0 and ""), so it never equals a measured environment.
Environment FromTarget(const targets::TargetDescription& target);

// The environment of the opened device: its name, sm, SM count and L2, the target's
// achievable bandwidth, the driver and runtime versions the device reported, the compiler's
// NVRTC version and cublasLtGetVersion(). InvalidArgument when the target describes another
// sm than the device's.
//
// Defined in the library tileplan_tuner_environment (CUDA runtime and cuBLASLt), so that
// tileplan_tactic_store, which holds everything else here, needs no CUDA.
absl::StatusOr<Environment> DetectEnvironment(const device::Device& device,
                                              const kernels::NvrtcCompiler& compiler,
                                              const targets::TargetDescription& target);

// The environment a plan's tactic-cache lookups are for (PlanOptions::environment): the
// device's (DetectEnvironment, with a default NVRTC compiler) when there is one, else
// FromTarget's, which no measurement matches. In tileplan_tuner_environment too.
absl::StatusOr<Environment> PlanningEnvironment(const targets::TargetDescription& target,
                                                const device::Device* device);

}  // namespace tileplan::tuner

#endif  // TILEPLAN_TUNER_ENVIRONMENT_H_
