// Builds an ExecutionPlan (planner/plan.proto, docs/plan.md) for a model on a described
// target: lowers the model, runs the prefill pipeline per token bucket and the decode
// pipeline per batch bucket (planner/pipelines.h; B and T become static, Smax stays a symbol
// bound to max_context), picks a kernel family and tactic for every region (tactic cache,
// then cost model), and plans memory. Needs no GPU.
#ifndef TILEPLAN_PLANNER_PLAN_BUILDER_H_
#define TILEPLAN_PLANNER_PLAN_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "models/config.h"
#include "planner/cost_calibration.h"
#include "planner/pass.h"
#include "planner/persistent_schedule.h"
#include "planner/plan.pb.h"
#include "planner/tactic_cache.h"
#include "regions/ir.h"
#include "targets/target.pb.h"

namespace tileplan::planner {

struct PlanOptions {
  std::string model_name;  // ExecutionPlan.model; empty: the model_type
  std::vector<int64_t> prefill_tokens = {128, 512, 2048};  // one prefill phase per T
  int64_t prefill_batch = 1;                               // B of every prefill phase
  std::vector<int64_t> decode_batches = {1};               // one decode phase per B
  int64_t max_context = 4096;                              // Smax
  int64_t decode_context = 0;  // decode estimates' context; 0: max_context
  // Prefill phases compute the logits of each sequence's last token only ([B, 1, V]), as a
  // generating runtime needs; false keeps every token's ([B, T, V]), as parity checks do.
  bool prefill_last_token_logits = false;
  // Decode phases run fuse_moe (PipelineOptions::fuse_moe).
  bool decode_fuse_moe = true;
  // Decode phases run fuse_rope_kv_write_attention and fuse_mla_kv_write_attention
  // (PipelineOptions::fuse_rope_attention).
  bool decode_fuse_rope_attention = true;
  // ... except in decode phases of a batch above this (PipelineOptions::
  // rope_attention_max_batch).
  int64_t decode_rope_attention_max_batch = PassOptions().rope_attention_max_batch;
  // Decode phases fold an RMSNorm into the linear after it up to this many rows (batch x new
  // tokens; PipelineOptions::norm_linear_max_rows). Only gemv and gemv_mma implement the
  // folded kinds.
  int64_t decode_norm_linear_max_rows = PassOptions().norm_linear_max_rows;
  // Decode phases fold each moe region's norm into it (PipelineOptions::fuse_norm_moe).
  bool decode_fuse_norm_moe = PassOptions().norm_moe;
  // Prefill phases may choose the mla_prefill family (latent attention un-absorbed: a K/V
  // up-projection GEMM, then flash attention); off, they keep the absorbed kernels.
  bool prefill_mla_expanded = true;
  // Families no phase may choose and the tuner does not measure, by registered name (an
  // unknown name is an error): to keep regions off a family, or to compare plans with and
  // without it. By default wgmma_gemm, which beats cuBLASLt on the SwiGLU linear only so far
  // (docs/PERF.md, "Prefill linears on wgmma: TMA loads"); an empty list lets every family
  // compete.
  std::vector<std::string> excluded_families = {"wgmma_gemm"};
  PrintOptions print;  // IR after passes, for every phase's pipeline run
  // The tactic-cache environment of the lookups (tuner::Environment::Fingerprint() of the
  // GPU the plan is for); empty: EnvironmentFingerprint(target), which no measurement
  // matches.
  std::string environment;
  // The cost model's calibration (docs/planner.md, "Calibrated cost model"): null takes the
  // one bundled for the target, if any (CostCalibration::Bundled); `calibrate` false plans
  // with the uncalibrated model.
  const CostCalibration* calibration = nullptr;
  bool calibrate = true;
  // Decode phases: runs of steps as one persistent kernel (persistent_schedule.h).
  proto::PlanOptions::DecodeBackend decode_backend = proto::PlanOptions::DECODE_BACKEND_KERNELS;
  int persistent_blocks_per_sm = 0;  // 0: the rule of persistent_schedule.h
  // Weight-stream slots of the persistent kernel (persistent_schedule.h), 0 to 8; 0: none.
  int persistent_stream_slots = kDefaultStreamSlots;
  // Tensor parallelism: plan rank `rank` of `tensor_parallel` ranks (models::TensorParallel;
  // docs/plan.md, "Tensor parallelism"). More than one rank needs a target that describes
  // its interconnect.
  int64_t tensor_parallel = 1;
  int64_t rank = 0;
};

// The ExecutionPlan.format_version this planner writes and this repository's runtime reads
// (docs/plan.md, "Versioning").
inline constexpr int32_t kPlanFormatVersion = 1;

// InvalidArgument naming the option when a bucket is not positive, a prefill bucket or the
// decode context exceeds max_context, or there is no phase at all; lowering, pipeline and
// selection errors otherwise (they name the region).
absl::StatusOr<proto::ExecutionPlan> BuildExecutionPlan(const models::ModelConfig& config,
                                                        const targets::TargetDescription& target,
                                                        const PlanOptions& options,
                                                        const TacticCache* cache);

// One phase to plan: a specialized graph with its bindings.
struct PhaseSpec {
  proto::Phase::Kind kind = proto::Phase::KIND_DECODE;
  std::string name;
  kernels::ShapeBindings bindings;
  int64_t context = 0;
  std::vector<std::string> pipeline;             // recorded in the plan
  std::string environment;                       // as PlanOptions::environment
  int64_t tensor_parallel = 1;                   // as PlanOptions::tensor_parallel
  std::vector<std::string> excluded_families;    // SelectionContext::excluded_families
  const CostCalibration* calibration = nullptr;  // SelectionContext::calibration
  PersistentOptions persistent;                  // decode phases (persistent_schedule.h)
  // The batch the states (the KV cache) are laid out for, at least the phase's B; 0: the
  // phase's. Every state's outermost dim is the batch, so a phase of B sequences uses the
  // first B sequences' rows of a cache laid out for more: BuildExecutionPlan passes the
  // largest batch of its phases, which then all lay the cache out alike.
  int64_t state_batch = 0;
};

// Plans one phase of `graph` (verified, specialized): tactic per region, memory plan (checked
// with CheckMemoryPlan), steps and bindings.
absl::StatusOr<proto::Phase> PlanPhase(const ir::Graph& graph, const PhaseSpec& spec,
                                       const targets::TargetDescription& target,
                                       const kernels::KernelRegistry& registry,
                                       const TacticCache* cache);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PLAN_BUILDER_H_
