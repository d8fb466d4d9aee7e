#include "planner/cost_model.h"

#include <algorithm>

#include "base/status_macros.h"

namespace tileplan::planner {

CostEstimate EstimateCost(const kernels::WorkEstimate& work, int launches, int64_t ctas,
                          const targets::TargetDescription& target, LaunchMode mode) {
  CostEstimate e;
  e.bytes = work.bytes;
  e.flops = work.flops;
  e.launches = launches;
  if (launches == 0) return e;
  e.launch_us = launches * (mode == LaunchMode::kGraph ? target.graph_node_overhead_us()
                                                       : target.launch_overhead_us());
  if (ctas > 0 && ctas < target.sm_count()) {
    e.utilization = static_cast<double>(ctas) / static_cast<double>(target.sm_count());
  }
  // GB/s is 1e3 bytes per microsecond; TFLOP/s is 1e6 flops per microsecond.
  const double bytes_per_us = target.achievable_memory_bandwidth_gbps() * 1e3 * e.utilization;
  const double achievable_share = target.achievable_bf16_tflops() / target.peak_bf16_tflops();
  const double tflops = work.tensor_core ? target.achievable_bf16_tflops()
                                         : target.peak_fp32_tflops() * achievable_share;
  const double flops_per_us = tflops * 1e6 * e.utilization;
  e.memory_us = static_cast<double>(work.bytes) / bytes_per_us;
  e.compute_us = static_cast<double>(work.flops) / flops_per_us;
  e.us = e.launch_us + std::max(e.memory_us, e.compute_us);
  return e;
}

absl::StatusOr<CostEstimate> EstimateStep(const kernels::KernelFamily& family,
                                          const kernels::Tactic& tactic,
                                          const kernels::BoundRegion& region,
                                          const targets::TargetDescription& target,
                                          LaunchMode mode) {
  TP_RETURN_IF_ERROR(family.ValidateTactic(tactic, region, target));
  return EstimateCost(family.Work(tactic, region), family.Launches(tactic, region),
                      family.Geometry(tactic, region).ctas(), target, mode);
}

}  // namespace tileplan::planner
