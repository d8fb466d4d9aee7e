#include "tests/tuner/store_testing.h"

#include <utility>

namespace tileplan::tuner::testing {

Environment TestEnvironment(int32_t driver_version) {
  Environment env;
  env.gpu = "NVIDIA H200";
  env.sm = 90;
  env.sm_count = 132;
  env.l2_bytes = 62914560;
  env.bandwidth_gbps = 4200;
  env.driver_version = driver_version;
  env.cuda_runtime_version = 13000;
  env.nvrtc_version = "13.0";
  env.cublaslt_version = 130000;
  return env;
}

RegionMeasurement TestMeasurement(const Environment& env, const std::string& signature,
                                  int64_t winner_threads) {
  RegionMeasurement m;
  m.environment = env;
  m.key.environment = env.Fingerprint();
  m.key.region_signature = signature;
  m.key.shape_bucket = "B=1,Smax=4096,T=1";
  m.key.phase = ir::Phase::kDecode;
  m.key.family = "gemv";
  m.key.family_version = 1;
  for (int64_t threads : {128, 256, 512}) {
    CandidateMeasurement c;
    c.tactic = kernels::Tactic{"gemv", 1, {{"split_k", 2}, {"threads", threads}}};
    if (threads == 512) {
      c.status = CandidateStatus::kLaunchError;
      c.reason = "too many resources requested for launch\n\"512 threads\"";
    } else {
      c.median_us = threads == winner_threads ? 2.5 : 3.25;
    }
    m.candidates.push_back(std::move(c));
  }
  if (winner_threads != 0) {
    m.winner = kernels::Tactic{"gemv", 1, {{"split_k", 2}, {"threads", winner_threads}}};
    m.winner_us = 2.5;
  }
  m.default_us = 3.25;
  return m;
}

}  // namespace tileplan::tuner::testing
