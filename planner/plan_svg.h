// A picture of one phase of an ExecutionPlan (docs/plan.md, "--show-plan=svg"): every step on
// the target's roofline, and the arena's buffers over the steps.
#ifndef TILEPLAN_PLANNER_PLAN_SVG_H_
#define TILEPLAN_PLANNER_PLAN_SVG_H_

#include <string>

#include "absl/status/statusor.h"
#include "planner/plan.pb.h"

namespace tileplan::planner {

// The phase `--show-plan=svg` draws when none is named: the first decode phase, else the
// first phase.
int DefaultSvgPhase(const proto::ExecutionPlan& plan);

// A standalone SVG document of phase `phase_index`. Top: each step that executes flops as a
// point at (flops per byte moved, TFLOP/s at its time: measured when tuned, filled; the cost
// model's estimate otherwise, hollow), colored by kind, under the target's achievable memory
// bandwidth and bf16 tensor-core and fp32 ceilings; steps that only move bytes are counted,
// not drawn. Bottom: each arena buffer as a rectangle spanning its live steps (x) and its
// bytes (y, from offset 0 at the top). Every element carries a <title> naming the step or
// buffer. Deterministic. InvalidArgument for a phase the plan does not have.
absl::StatusOr<std::string> PlanSvg(const proto::ExecutionPlan& plan, int phase_index);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PLAN_SVG_H_
