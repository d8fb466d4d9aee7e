// The graphs a runtime runs for one model: its primitive graph planned once per phase.
#ifndef TILEPLAN_PLANNER_PHASE_GRAPHS_H_
#define TILEPLAN_PLANNER_PHASE_GRAPHS_H_

#include "absl/status/statusor.h"
#include "planner/pass.h"
#include "planner/pipelines.h"
#include "regions/ir.h"

namespace tileplan::planner {

struct PhaseGraphs {
  ir::Graph prefill;  // the prompt's graph: T bound to the token bucket
  ir::Graph decode;   // the graph of one token per sequence: T = 1
};

// Runs BuildPrefillPipeline(options) and BuildDecodePipeline(options) on copies of
// `primitive` (a lowered model graph). Both graphs keep the primitive graph's state values
// (names and, with B and Smax bound alike, types), so one KV cache serves both. `print`
// applies to both runs; when it selects anything, a line "// ===== prefill pipeline" or
// "// ===== decode pipeline" precedes each run's output. Errors are prefixed "prefill
// pipeline: " or "decode pipeline: ".
absl::StatusOr<PhaseGraphs> PlanPhases(const ir::Graph& primitive, const PipelineOptions& options,
                                       const PrintOptions& print = {});

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PHASE_GRAPHS_H_
