#include "tuner/environment.h"

#include <charconv>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace tileplan::tuner {
namespace {

// The shortest decimal that reads back as `value` ("4200", "3350.5").
std::string ShortestDecimal(double value) {
  char buffer[64];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, r.ptr);
}

}  // namespace

std::string Environment::Fingerprint() const {
  return absl::StrCat(gpu, "|sm_", sm, "|", sm_count, "sm|l2=", l2_bytes,
                      "|bw=", ShortestDecimal(bandwidth_gbps), "|driver=", driver_version,
                      "|cudart=", cuda_runtime_version, "|nvrtc=", nvrtc_version,
                      "|cublaslt=", cublaslt_version, "|schema=", schema_version);
}

Environment FromTarget(const targets::TargetDescription& target) {
  Environment env;
  env.gpu = target.gpu();
  env.sm = target.sm();
  env.sm_count = target.sm_count();
  env.l2_bytes = target.l2_bytes();
  env.bandwidth_gbps = target.achievable_memory_bandwidth_gbps();
  return env;
}

}  // namespace tileplan::tuner
