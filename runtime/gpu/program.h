// The phases of an ExecutionPlan made runnable on one device (docs/runtime.md): the plan's
// layout checked before anything is allocated (every phase's graph, one KV-cache layout, the
// arena, the weights), and each phase built into a Program: every step's bindings resolved
// into device memory and prepared by the step launcher (kernels/step/step_launcher.h), and
// for decode phases the greedy argmax and position advance that chain steps in one graph.
// GpuRuntime (gpu_runtime.h) runs the programs.
#ifndef TILEPLAN_RUNTIME_GPU_PROGRAM_H_
#define TILEPLAN_RUNTIME_GPU_PROGRAM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "kernels/core/bound_graph.h"
#include "kernels/step/step_launcher.h"
#include "planner/plan.pb.h"
#include "regions/ir.h"
#include "runtime/gpu/device_weights.h"
#include "runtime/gpu/gpu_runtime.h"

namespace tileplan::runtime::gpu {

// State slots by name: (offset into the state space, bytes).
using StateSlots = std::map<std::string, std::pair<int64_t, int64_t>, std::less<>>;

// What a plan needs of the device.
struct PlanLayout {
  std::vector<std::unique_ptr<ir::Graph>> graphs;  // phase i's graph, parsed
  int64_t arena_bytes = 0;                         // the largest phase's arena
  int64_t state_bytes = 0;                         // the KV cache, which the phases share
  StateSlots state_slots;
  std::optional<WeightLayout> weights;
  int64_t max_decode_batch = 1;
};

// FailedPrecondition for a plan of another format_version than planner::kPlanFormatVersion;
// InvalidArgument for a plan without phases, a phase graph that does not parse, or a phase
// that lays the KV cache out differently from the first; the weight layout's errors.
absl::StatusOr<PlanLayout> LayOutPlan(const planner::proto::ExecutionPlan& plan);

// One phase of the plan, with its graphs once captured.
struct Program {
  const planner::proto::Phase* phase = nullptr;
  bool decode = false;
  int64_t batch = 0, tokens = 0;
  // Prefill only: the logits are each sequence's last token's ([B, 1, V]; the planner's
  // last_token_logits), so prompts are aligned to the end of the bucket.
  bool last_token_logits = false;
  std::unique_ptr<ir::Graph> graph;
  std::unique_ptr<kernels::BoundGraph> bound;
  std::vector<std::unique_ptr<kernels::PreparedStep>> steps;  // each bound once (binding 0)
  // The phase's persistent runs (plan's Phase.persistent), each enqueued in place of its
  // steps [first_step, last_step].
  struct PersistentLaunch {
    int first_step = 0, last_step = 0;
    std::unique_ptr<kernels::PreparedStep> step;
  };
  std::vector<PersistentLaunch> persistent;
  int32_t* tokens_in = nullptr;
  int32_t* positions_in = nullptr;
  float* logits = nullptr;
  std::vector<std::pair<int64_t, int64_t>> counters;  // arena offset, bytes
  kernels::GraphExec exec;
  // Decode only: argmax of the logits into tokens_in, then decode_advance.
  std::unique_ptr<ir::Graph> argmax_graph;
  std::unique_ptr<kernels::BoundGraph> argmax_bound;
  std::unique_ptr<kernels::PreparedStep> argmax;
  std::unique_ptr<kernels::PreparedStep> advance;
  device::DeviceBuffer argmax_scratch;  // workspace and counters of the argmax
  kernels::GraphExec loop_exec;
};

// The device memory a plan's bindings resolve into (the runtime owns it).
struct PlanMemory {
  device::DeviceBuffer* arena = nullptr;
  device::DeviceBuffer* state = nullptr;
  const DeviceWeights* weights = nullptr;
  StateSlots state_slots;
  int* error = nullptr;         // raised by bad token ids and positions
  int* step_counter = nullptr;  // the greedy loop's step
  int32_t* history = nullptr;   // [history_capacity, max decode batch] greedy tokens
  int64_t history_capacity = 0;
};

// Builds the programs of one plan. The device, plan, memory and launcher must outlive the
// builder, and the builder (which owns the RoPE tables the steps read) the programs.
class ProgramBuilder {
 public:
  ProgramBuilder(const device::Device& device, const planner::proto::ExecutionPlan& plan,
                 const PlanMemory& memory, kernels::StepLauncher& launcher,
                 const GpuOptions& options);
  ~ProgramBuilder();
  ProgramBuilder(const ProgramBuilder&) = delete;
  ProgramBuilder& operator=(const ProgramBuilder&) = delete;

  // The program of `phase`, whose parsed graph `graph` is. InvalidArgument naming the step
  // for a binding outside its storage, an unknown region or family, or a phase that does
  // not read %tokens and %positions and write %logits; FailedPrecondition for a tactic of
  // another family version.
  absl::StatusOr<std::unique_ptr<Program>> Build(const planner::proto::Phase& phase,
                                                 std::unique_ptr<ir::Graph> graph);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tileplan::runtime::gpu

#endif  // TILEPLAN_RUNTIME_GPU_PROGRAM_H_
