// autotune_regions' work (docs/tuner.md, "autotune_regions"): the regions of a plan to
// measure, the parent's loop over measuring worker processes (tuner/worker.h), and its
// report. The tool itself only parses flags, opens the GPU and the store, and plans.
#ifndef TILEPLAN_TUNER_AUTOTUNE_H_
#define TILEPLAN_TUNER_AUTOTUNE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "planner/plan.pb.h"
#include "planner/tactic_cache.h"
#include "regions/ir.h"
#include "targets/target.pb.h"
#include "tuner/region_tuner.h"
#include "tuner/worker.h"

namespace tileplan::tuner {

// One region and family to measure.
struct TuningItem {
  int phase = 0, step = 0;  // in the plan
  const kernels::KernelFamily* family = nullptr;
  planner::TacticKey key;
  std::string label;  // "decode B=1 l0.qkv linear / gemv"
};

// The regions of one plan to measure. Built from the same plan and environment, two
// processes build the same items in the same order (a parent and its workers).
class TuningWork {
 public:
  // For every step of every phase and every family that has tactics to measure
  // (HasTacticsToMeasure) and can implement the step, the plan's own family first: the key
  // planner::TacticKeyFor(region, phase, family, environment), one item per distinct key
  // (identical layers share one). InvalidArgument when a phase's graph does not bind.
  static absl::StatusOr<TuningWork> Collect(planner::proto::ExecutionPlan plan,
                                            const targets::TargetDescription& target,
                                            absl::string_view environment);

  const planner::proto::ExecutionPlan& plan() const { return plan_; }
  const std::vector<TuningItem>& items() const { return items_; }
  // The region of `item`, bound as its phase binds it. Valid while this object lives.
  kernels::BoundRegion Region(const TuningItem& item) const;
  // Whether `item` is of a decode phase (measured as graph replays, as decode runs).
  bool IsDecode(const TuningItem& item) const;
  // [phase][step]: the items of every family that can implement the step, the plan's family
  // first; empty for a view.
  const std::vector<std::vector<std::vector<int>>>& step_items() const { return step_items_; }

 private:
  TuningWork() = default;

  planner::proto::ExecutionPlan plan_;
  std::vector<std::unique_ptr<ir::Graph>> graphs_;  // per phase
  std::vector<std::unique_ptr<kernels::BoundGraph>> bound_;
  std::vector<TuningItem> items_;
  std::vector<std::vector<std::vector<int>>> step_items_;
};

// Whether `item`'s progress label or key contains `text` (autotune_regions' --only and
// --inject-fault name regions so).
bool ItemMatches(const TuningItem& item, absl::string_view text);

// --inject-fault: candidate `injection.candidate` of the first item of `todo` whose label
// or key contains `injection.region`. InvalidArgument when none does.
absl::StatusOr<CandidateRef> FindFaultInjection(const TuningWork& work,
                                                const std::vector<int>& todo,
                                                const FaultInjection& injection);

// Starts a worker on a request, passing its lines on as SpawnWorker does.
using WorkerLauncher = std::function<absl::StatusOr<std::optional<WorkerDeath>>(
    const WorkerRequest&, const std::function<void(const WorkerLine&)>&)>;

// What MeasureInWorkers did.
struct AutotuneResult {
  struct Measured {
    int candidates = 0, valid = 0;
    double best_us = 0, default_us = 0;
    std::string winner;  // parameters, "-" for none
  };
  std::map<int, Measured> measured;  // item -> what its worker recorded
  // Candidates that killed a worker: why (the worker's account of the CUDA error and how it
  // ended), and the tactic's parameters when the worker printed them.
  std::map<CandidateRef, std::string> faulted;
  std::map<CandidateRef, std::string> faulted_params;
  // Set when an injected fault was never reached (the item has fewer candidates): what to
  // tell the user.
  std::optional<std::string> injection_not_reached;

  // Items recorded without any valid candidate.
  int without_valid() const;
};

// Measures the items `todo` (indices into work.items(), in order) in workers that `launch`
// starts: a worker that dies at a candidate is started again from that item on, without
// the candidate, which the new worker records as a fault with how the first died. The items
// before it were recorded already and are not measured again. `inject_fault`: the candidate
// the first worker that reaches it faults at (a testing aid). Prints to `out` a line per
// item recorded and per worker death, and the workers' notes.
absl::StatusOr<AutotuneResult> MeasureInWorkers(const TuningWork& work,
                                                const std::vector<int>& todo,
                                                std::optional<CandidateRef> inject_fault,
                                                const WorkerLauncher& launch, std::ostream& out);

// The summary after MeasureInWorkers: the totals (`seconds` of wall time), a "faulted:" line
// per faulted candidate, and per phase the sum of the cost model's picks against the sum of
// the fastest families' winners, as measured in this run.
void PrintAutotuneSummary(const TuningWork& work, const AutotuneResult& result, double seconds,
                          std::ostream& out);

}  // namespace tileplan::tuner

#endif  // TILEPLAN_TUNER_AUTOTUNE_H_
