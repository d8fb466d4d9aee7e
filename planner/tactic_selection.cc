#include "planner/tactic_selection.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::planner {

absl::string_view TacticSourceName(TacticSource source) {
  return source == TacticSource::kTuned ? "tuned" : "cost model";
}

absl::StatusOr<TacticChoice> SelectTactic(const kernels::BoundRegion& region,
                                          const SelectionContext& context) {
  const targets::TargetDescription& target = *context.target;
  const std::vector<const kernels::KernelFamily*> families =
      context.registry->FamiliesFor(region.kind());

  std::optional<TacticChoice> tuned, modeled;
  std::vector<std::string> considered, refusals;
  for (const kernels::KernelFamily* family : families) {
    const std::string name(family->name());
    if (std::find(context.excluded_families.begin(), context.excluded_families.end(), name) !=
        context.excluded_families.end()) {
      considered.push_back(absl::StrCat(name, ": left off by the plan options"));
      refusals.push_back(absl::StrCat(name, ": left off by the plan options"));
      continue;
    }
    if (absl::Status s = family->CanImplement(region, target); !s.ok()) {
      considered.push_back(absl::StrCat(name, ": cannot implement: ", s.message()));
      refusals.push_back(absl::StrCat(name, ": ", s.message()));
      continue;
    }
    TacticKey key = TacticKeyFor(region, context.phase, *family, context.environment);
    if (context.cache != nullptr) {
      if (std::optional<MeasuredTactic> hit = context.cache->Lookup(key)) {
        absl::StatusOr<CostEstimate> estimate =
            EstimateStep(*family, hit->tactic, region, target, context.mode);
        if (estimate.ok()) {
          considered.push_back(absl::StrFormat("%s: %.2f us (tuned)", name, hit->measured_us));
          if (!tuned || hit->measured_us < *tuned->measured_us) {
            tuned = TacticChoice{
                family, hit->tactic, TacticSource::kTuned, *estimate, hit->measured_us, key, {}};
          }
          continue;
        }
        considered.push_back(
            absl::StrCat(name, ": cached tactic rejected: ", estimate.status().message()));
      }
    }
    TP_ASSIGN_OR_RETURN(kernels::Tactic tactic, family->DefaultTactic(region, target));
    TP_ASSIGN_OR_RETURN(CostEstimate estimate,
                        EstimateStep(*family, tactic, region, target, context.mode));
    considered.push_back(absl::StrFormat("%s: %.2f us (cost model)", name, estimate.us));
    if (!modeled || estimate.us < modeled->estimate.us ||
        (estimate.us == modeled->estimate.us && estimate.flops < modeled->estimate.flops)) {
      modeled = TacticChoice{
          family, std::move(tactic), TacticSource::kCostModel, estimate, std::nullopt, key, {}};
    }
  }
  std::optional<TacticChoice>& chosen = tuned ? tuned : modeled;
  if (!chosen) {
    return absl::FailedPreconditionError(
        absl::StrCat(region.Label(), ": no kernel family can implement it",
                     refusals.empty() ? " (none is registered for this kind)" : ": ",
                     absl::StrJoin(refusals, "; ")));
  }
  chosen->considered = std::move(considered);
  return std::move(*chosen);
}

}  // namespace tileplan::planner
