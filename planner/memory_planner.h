// Memory planning of one specialized graph (docs/plan.md, "Memory planning").
//
// Steps are the graph's regions in order. Storage follows the graph's aliasing (a view or an
// in-place result lives in its operand's storage, kernels::BoundGraph) plus *reuse*: a fresh
// result may be written over an operand's storage when the kernel allows it
// (KernelFamily::MayOverwriteOperand), the operand is contiguous with the result's shape and
// element size, and nothing reads that storage after the step. Storage lives from the step
// that first writes it to the last step that reads it through any value; graph inputs for
// the whole run (the host, or a device-side loop, writes them before the graph runs, and a
// replay must find them intact), graph outputs to the end.
//
// Three address spaces:
//   arena   one device allocation for graph inputs, intermediates, outputs, step workspaces
//           and step counters; offsets aligned to `alignment`; buffers whose lifetimes do
//           not overlap share bytes (counters live for the whole run, so they never do). Placement
//           is greedy by size (largest first; ties by first step, then creation order), each buffer
//           at the best-fitting gap among the buffers live at the same time, else above them:
//           deterministic.
//   state   the KV cache: every state in declaration order at aligned offsets, live always.
//   weight  weights stay in their own (packed) tensors; a view of a weight is an offset
//           into it.
#ifndef TILEPLAN_PLANNER_MEMORY_PLANNER_H_
#define TILEPLAN_PLANNER_MEMORY_PLANNER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/bound_graph.h"
#include "regions/ir.h"

namespace tileplan::planner {

struct MemoryPlanOptions {
  int64_t alignment = 256;
  // Whether region `region` may write result `result` over operand `operand` (the chosen
  // kernel family's MayOverwriteOperand). Null: storage is shared only where the graph
  // declares aliasing.
  std::function<bool(int region, int result, int operand)> may_overwrite;
  // Workspace bytes per region (empty: no workspaces; else one entry per region).
  std::vector<int64_t> workspace_bytes;
  // Counter bytes per region (KernelFamily::CounterBytes; empty or one entry per region):
  // zeroed once at allocation, so they live for the whole run and share no bytes.
  std::vector<int64_t> counter_bytes;
  // The bytes each state is laid out with, in graph.states() order (empty: its storage in
  // this graph's bindings). The plan builder gives every phase the sizes at the plan's
  // largest batch, so that phases of several batches share one KV-cache layout (docs/plan.md,
  // "Memory planning"); a size below the state's storage is an error.
  std::vector<int64_t> state_bytes;
};

enum class StorageKind { kArena, kInput, kWeight, kState };
// "arena", "input", "weight", "state"
absl::string_view StorageKindName(StorageKind kind);

// Where a value's first element lives. The shape and element strides are the value's
// kernels::Layout (BoundGraph::layout).
struct ValuePlacement {
  StorageKind storage = StorageKind::kArena;
  // Bytes from the start of the arena (kArena, kInput), of the state space (kState), or of
  // the weight tensor `root` (kWeight).
  int64_t offset = 0;
  ir::ValueId root = ir::kNoValue;  // the declaration or fresh result owning the storage
  int32_t buffer = -1;              // index into MemoryPlan::buffers (kArena, kInput)
};

struct ArenaBuffer {
  int64_t offset = 0;
  int64_t bytes = 0;  // aligned
  int first_step = 0;
  int last_step = 0;                // inclusive; the number of steps for graph outputs
  std::vector<ir::ValueId> values;  // values stored here, by id (empty for a workspace)
  int workspace_of = -1;            // the region whose workspace this is, or -1
  int counters_of = -1;             // the region whose counters these are, or -1
  bool input = false;               // holds a graph input
};

struct StateBuffer {
  ir::ValueId state = ir::kNoValue;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// A result written over a dead operand's storage.
struct Reuse {
  int region = 0;
  int result = 0;   // index among the region's results
  int operand = 0;  // index among the region's operands
};

struct MemoryPlan {
  std::vector<ValuePlacement> values;  // indexed by value id
  std::vector<ArenaBuffer> buffers;    // sorted by offset, then first step
  std::vector<int32_t> workspace;      // per region: index into buffers, or -1
  std::vector<int32_t> counters;       // per region: index into buffers, or -1
  std::vector<StateBuffer> states;     // declaration order
  std::vector<Reuse> reuses;           // in region order
  int64_t alignment = 256;
  int64_t arena_bytes = 0;         // the arena's size
  int64_t peak_live_bytes = 0;     // the most aligned arena bytes live at any step
  int64_t intermediate_bytes = 0;  // aligned sum of every arena buffer without any sharing
  int64_t state_bytes = 0;
  int64_t weight_bytes = 0;
};

absl::StatusOr<MemoryPlan> PlanMemory(const kernels::BoundGraph& graph,
                                      const MemoryPlanOptions& options);

// Verifies a plan independently of how it was made: every arena value lies inside its
// aligned buffer and the arena; every reuse is allowed (by options.may_overwrite, layout,
// and liveness); no two values of unrelated storage (not connected by the graph's aliasing
// or the plan's reuses) that are live at the same step share a byte, nor any value and a
// workspace of a step where it is live, nor anything and a step's counters; states are
// disjoint. The error names both values,
// their byte ranges and steps.
absl::Status CheckMemoryPlan(const kernels::BoundGraph& graph, const MemoryPlan& plan,
                             const MemoryPlanOptions& options);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_MEMORY_PLANNER_H_
