// The planner's cost model: estimated microseconds of one step, from the target description
// only (docs/plan.md, "Cost model").
//
//   us = launches × per-launch cost
//      + max(bytes / (bandwidth × u), flops / (rate × u))
//      + link_bytes / link bandwidth + link_steps × link latency
//
// The per-launch cost is the target's graph-node cost for phases replayed as CUDA Graphs
// (prefill and decode both are) and its host launch cost otherwise. bandwidth is the
// achievable DRAM bandwidth; rate is the achievable bf16 matrix rate for tensor-core work
// and the fp32 peak scaled by the same achievable/peak ratio for CUDA-core work, times the
// work's core_share where its family reaches only part of that (the GEMV's walk at 16 rows). u =
// min(1, CTAs / SMs) charges a grid too small to occupy every SM: such a kernel reaches only
// that share of the machine. Memory and compute overlap inside a kernel (the roofline), so
// the larger term counts, not their sum; launches do not overlap the work they start. The
// link terms are a collective's (tensor parallelism): the achievable interconnect bandwidth
// and per-step latency of the target, added since a collective waits on the other GPUs.
#ifndef TILEPLAN_PLANNER_COST_MODEL_H_
#define TILEPLAN_PLANNER_COST_MODEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "targets/target.pb.h"

namespace tileplan::planner {

// How a phase issues its kernels.
enum class LaunchMode { kHost, kGraph };

struct CostEstimate {
  double us = 0;           // the total
  double launch_us = 0;    // launches × per-launch cost
  double memory_us = 0;    // max(bytes / bandwidth, cache_bytes / L2 rate) / utilization
  double compute_us = 0;   // flops / (rate × core_share × utilization)
  double link_us = 0;      // a collective's time on the link between GPUs
  double utilization = 1;  // min(1, CTAs / SMs); 1 for a step that launches nothing
  int64_t bytes = 0;
  int64_t flops = 0;
  int launches = 0;
};

// The time of `work`'s link traffic: link_bytes at the target's achievable interconnect
// bandwidth plus link_steps times its step latency (0 for work that uses no link).
double LinkMicros(const kernels::WorkEstimate& work, const targets::TargetDescription& target);

// The per-launch cost of `mode` on `target`.
double LaunchMicros(const targets::TargetDescription& target, LaunchMode mode);

// The time `work` would take at the target's achievable rates with its whole grid busy (u =
// 1): the larger of its memory time (bytes at the bandwidth, or cache_bytes at the L2's rate
// where the target gives one) and flops at the rate of its kind, times its core_share for
// CUDA-core work (at least 1e-6).
double IdealMicros(const kernels::WorkEstimate& work, const targets::TargetDescription& target);

// The formula above for `work` done by `launches` kernels whose main grid has `ctas` CTAs.
CostEstimate EstimateCost(const kernels::WorkEstimate& work, int launches, int64_t ctas,
                          const targets::TargetDescription& target, LaunchMode mode);

// `family` running `region` with `tactic`; the tactic's error when it does not validate.
absl::StatusOr<CostEstimate> EstimateStep(const kernels::KernelFamily& family,
                                          const kernels::Tactic& tactic,
                                          const kernels::BoundRegion& region,
                                          const targets::TargetDescription& target,
                                          LaunchMode mode);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_COST_MODEL_H_
