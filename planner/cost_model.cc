#include "planner/cost_model.h"

#include <algorithm>

#include "base/status_macros.h"

namespace tileplan::planner {

namespace {

// The achievable rates: GB/s is 1e3 bytes per microsecond; TFLOP/s is 1e6 flops per
// microsecond. CUDA-core work runs at the fp32 peak scaled by the matrix rate's
// achievable/peak ratio.
double BytesPerMicro(const targets::TargetDescription& target) {
  return target.achievable_memory_bandwidth_gbps() * 1e3;
}
// The time of `work`'s memory traffic with the whole machine: its DRAM bytes at the
// bandwidth, or its reads through L2 at the L2's rate where the target knows it.
double MemoryMicros(const kernels::WorkEstimate& work, const targets::TargetDescription& target) {
  const double dram = static_cast<double>(work.bytes) / BytesPerMicro(target);
  if (work.cache_bytes <= 0 || !(target.achievable_l2_bandwidth_gbps() > 0)) return dram;
  return std::max(
      dram, static_cast<double>(work.cache_bytes) / (target.achievable_l2_bandwidth_gbps() * 1e3));
}
// The rate of `work`'s flops: the matrix rate for tensor-core work, else the CUDA-core rate
// times the work's core_share.
double FlopsPerMicro(const kernels::WorkEstimate& work, const targets::TargetDescription& target) {
  const double achievable_share = target.achievable_bf16_tflops() / target.peak_bf16_tflops();
  if (work.tensor_core) return target.achievable_bf16_tflops() * 1e6;
  return target.peak_fp32_tflops() * achievable_share * std::clamp(work.core_share, 1e-3, 1.0) *
         1e6;
}

}  // namespace

double LinkMicros(const kernels::WorkEstimate& work, const targets::TargetDescription& target) {
  if (work.link_bytes <= 0 && work.link_steps <= 0) return 0;
  const double rate = target.achievable_interconnect_bandwidth_gbps() * 1e3;
  const double transfer = rate > 0 ? static_cast<double>(work.link_bytes) / rate : 0;
  return transfer + work.link_steps * target.interconnect_step_latency_us();
}

double LaunchMicros(const targets::TargetDescription& target, LaunchMode mode) {
  return mode == LaunchMode::kGraph ? target.graph_node_overhead_us() : target.launch_overhead_us();
}

double IdealMicros(const kernels::WorkEstimate& work, const targets::TargetDescription& target) {
  return std::max({MemoryMicros(work, target),
                   static_cast<double>(work.flops) / FlopsPerMicro(work, target), 1e-6}) +
         LinkMicros(work, target);
}

CostEstimate EstimateCost(const kernels::WorkEstimate& work, int launches, int64_t ctas,
                          const targets::TargetDescription& target, LaunchMode mode) {
  CostEstimate e;
  e.bytes = work.bytes;
  e.flops = work.flops;
  e.launches = launches;
  if (launches == 0) return e;
  e.launch_us = launches * LaunchMicros(target, mode);
  if (ctas > 0 && ctas < target.sm_count()) {
    e.utilization = static_cast<double>(ctas) / static_cast<double>(target.sm_count());
  }
  e.memory_us = MemoryMicros(work, target) / e.utilization;
  e.compute_us = static_cast<double>(work.flops) / (FlopsPerMicro(work, target) * e.utilization);
  e.link_us = LinkMicros(work, target);
  e.us = e.launch_us + std::max(e.memory_us, e.compute_us) + e.link_us;
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
