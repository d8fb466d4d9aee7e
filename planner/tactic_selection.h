// Backend and tactic selection for one region (docs/plan.md, "Tactic selection").
//
// Every family registered for the region's kind is asked CanImplement. For each that can, the
// tactic cache is consulted with the family's key; a hit whose tactic still validates is a
// measured candidate. When any family has a measured candidate, the fastest measured one
// wins (source TUNED). Otherwise each family's default tactic for the target (its ByTarget
// row) is estimated by the cost model and the cheapest wins (source COST_MODEL); on equal
// estimates the family executing fewer flops wins (a memory-bound GEMV over a padded GEMM
// tile), then the family whose name sorts first. With a calibration (cost_calibration.h),
// a family's estimate is the calibrated prediction where there is one, and the tactics
// sampled for the family and kind that the tuner would measure for the region (a row of its
// candidate table, or values its tunables offer; valid and worth measuring) are predicted
// beside its default; the family's cheapest predicted tactic stands for it
// (source CALIBRATED). The choice records what was considered.
#ifndef TILEPLAN_PLANNER_TACTIC_SELECTION_H_
#define TILEPLAN_PLANNER_TACTIC_SELECTION_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "planner/cost_calibration.h"
#include "planner/cost_model.h"
#include "planner/tactic_cache.h"
#include "targets/target.pb.h"

namespace tileplan::planner {

enum class TacticSource { kTuned, kCostModel, kCalibrated };
// "tuned", "cost model", "calibrated"
absl::string_view TacticSourceName(TacticSource source);

struct TacticChoice {
  const kernels::KernelFamily* family = nullptr;
  kernels::Tactic tactic;
  TacticSource source = TacticSource::kCostModel;
  CostEstimate estimate;              // the cost model's estimate of the chosen tactic
  std::optional<double> measured_us;  // set when source is kTuned
  TacticKey key;                      // the cache key of the chosen family
  // One line per family registered for the kind, sorted by family name:
  // "gemv: 3.21 us (cost model)", "gemv: 2.90 us (tuned)",
  // "gemv: 2.95 us (calibrated: rows_per_cta=4,split_k=1,threads=128,vec=8)",
  // "attention_prefill: cannot implement: head_dim 32 is not one of ...",
  // "cublaslt_gemm: cached tactic rejected: ...".
  std::vector<std::string> considered;
};

// REQUIRES: registry and target are set and outlive the call.
struct SelectionContext {
  const kernels::KernelRegistry* registry = nullptr;
  const targets::TargetDescription* target = nullptr;
  ir::Phase phase = ir::Phase::kGeneral;
  LaunchMode mode = LaunchMode::kGraph;
  const TacticCache* cache = nullptr;  // may be null: every lookup misses
  std::string environment;             // EnvironmentFingerprint(*target)
  int64_t tensor_parallel = 1;         // the plan's ranks (TacticKeyFor)
  // Families never chosen here (opt-in ones the plan options leave off), by name.
  std::vector<std::string> excluded_families;
  const CostCalibration* calibration = nullptr;  // may be null: the uncalibrated model
  // The calibrated pick of each family's key seen so far (identical layers are predicted
  // once); may be null. Owned by the caller, for one calibration, target and launch mode.
  struct CalibratedPick {
    kernels::Tactic tactic;
    CostEstimate estimate;
    TacticSource source;
  };
  std::map<TacticKey, CalibratedPick>* calibrated_picks = nullptr;
};

// FailedPrecondition naming the region and every family's reason when no family can
// implement it.
absl::StatusOr<TacticChoice> SelectTactic(const kernels::BoundRegion& region,
                                          const SelectionContext& context);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_TACTIC_SELECTION_H_
