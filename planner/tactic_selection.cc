#include "planner/tactic_selection.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::planner {

absl::string_view TacticSourceName(TacticSource source) {
  switch (source) {
    case TacticSource::kTuned:
      return "tuned";
    case TacticSource::kCalibrated:
      return "calibrated";
    case TacticSource::kCostModel:
      break;
  }
  return "cost model";
}

namespace {

// Whether the tuner would measure `tactic` for the region `table` is of: one of its rows, or
// every parameter one of the values its tunables offer.
bool InTable(const kernels::CandidateTable& table, const kernels::Tactic& tactic) {
  for (const kernels::ByTargetRow& row : table.rows) {
    if (row.tactic.params == tactic.params) return true;
  }
  for (const auto& param : tactic.params) {
    auto it = std::find_if(table.tunables.begin(), table.tunables.end(),
                           [&](const kernels::TunableParam& p) { return p.name == param.first; });
    if (it == table.tunables.end() ||
        std::find(it->values.begin(), it->values.end(), param.second) == it->values.end()) {
      return false;
    }
  }
  return true;
}

// The calibrated pick of `family` for `region`, starting from its default (the uncalibrated
// estimate): the default's prediction where there is one, then every sampled tactic the tuner
// would try that is predicted faster.
SelectionContext::CalibratedPick PickCalibrated(const kernels::KernelFamily& family,
                                                SelectionContext::CalibratedPick pick,
                                                const kernels::BoundRegion& region,
                                                const SelectionContext& context) {
  const CostCalibration& calibration = *context.calibration;
  const targets::TargetDescription& target = *context.target;
  if (std::optional<double> us =
          calibration.Predict(family, pick.tactic, true, region, target, context.mode)) {
    pick.estimate.us = *us;
    pick.source = TacticSource::kCalibrated;
  }
  const std::vector<kernels::Tactic>& sampled = calibration.SampledTactics(family, region.kind());
  if (sampled.empty()) return pick;
  absl::StatusOr<kernels::CandidateTable> table = family.Candidates(region, target);
  if (!table.ok()) return pick;
  for (const kernels::Tactic& t : sampled) {
    if (family.Canonical(t) == family.Canonical(pick.tactic) || !InTable(*table, t)) continue;
    absl::StatusOr<CostEstimate> e = EstimateStep(family, t, region, target, context.mode);
    if (!e.ok() || !family.WorthMeasuring(t, region, target)) continue;
    std::optional<double> us = calibration.Predict(family, t, false, region, target, context.mode);
    if (us && *us < pick.estimate.us) {
      pick.tactic = t;
      pick.estimate = *e;
      pick.estimate.us = *us;
      pick.source = TacticSource::kCalibrated;
    }
  }
  return pick;
}

}  // namespace

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
    TacticKey key =
        TacticKeyFor(region, context.phase, *family, context.environment, context.tensor_parallel);
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
    if (family->chosen_by_measurement_only()) {
      considered.push_back(absl::StrCat(name, ": not measured (taken only as tuned)"));
      refusals.push_back(absl::StrCat(name, ": not measured (taken only as tuned)"));
      continue;
    }
    TP_ASSIGN_OR_RETURN(kernels::Tactic tactic, family->DefaultTactic(region, target));
    TP_ASSIGN_OR_RETURN(CostEstimate estimate,
                        EstimateStep(*family, tactic, region, target, context.mode));
    TacticSource source = TacticSource::kCostModel;
    if (context.calibration != nullptr) {
      std::map<TacticKey, SelectionContext::CalibratedPick>* memo = context.calibrated_picks;
      const SelectionContext::CalibratedPick* known = nullptr;
      if (memo != nullptr) {
        if (auto it = memo->find(key); it != memo->end()) known = &it->second;
      }
      SelectionContext::CalibratedPick pick =
          known != nullptr
              ? *known
              : PickCalibrated(*family, {std::move(tactic), estimate, source}, region, context);
      if (memo != nullptr && known == nullptr) memo->emplace(key, pick);
      tactic = std::move(pick.tactic);
      estimate = pick.estimate;
      source = pick.source;
    }
    if (source == TacticSource::kCalibrated) {
      considered.push_back(absl::StrFormat("%s: %.2f us (calibrated: %s)", name, estimate.us,
                                           tactic.ParamsString()));
    } else {
      considered.push_back(absl::StrFormat("%s: %.2f us (cost model)", name, estimate.us));
    }
    if (!modeled || estimate.us < modeled->estimate.us ||
        (estimate.us == modeled->estimate.us && estimate.flops < modeled->estimate.flops)) {
      modeled = TacticChoice{family, std::move(tactic), source, estimate, std::nullopt, key, {}};
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
