#include "tuner/autotune.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/families/registry.h"
#include "regions/serialization.h"
#include "tuner/store_lookups.h"

namespace tileplan::tuner {

absl::StatusOr<TuningWork> TuningWork::Collect(planner::proto::ExecutionPlan plan,
                                               const targets::TargetDescription& target,
                                               absl::string_view environment) {
  const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
  TuningWork work;
  work.plan_ = std::move(plan);
  std::map<planner::TacticKey, int> index_of;
  for (int f = 0; f < work.plan_.phases_size(); ++f) {
    const planner::proto::Phase& phase = work.plan_.phases(f);
    TP_ASSIGN_OR_RETURN(ir::Graph graph, ir::GraphFromProto(phase.graph()));
    work.graphs_.push_back(std::make_unique<ir::Graph>(std::move(graph)));
    kernels::ShapeBindings bindings;
    for (const auto& b : phase.bindings()) bindings[b.symbol()] = b.extent();
    TP_ASSIGN_OR_RETURN(
        kernels::BoundGraph bound,
        kernels::BoundGraph::Create(*work.graphs_.back(), bindings, phase.context()));
    work.bound_.push_back(std::make_unique<kernels::BoundGraph>(std::move(bound)));
    const ir::Phase ir_phase = phase.kind() == planner::proto::Phase::KIND_PREFILL
                                   ? ir::Phase::kPrefill
                                   : ir::Phase::kDecode;
    std::vector<std::vector<int>>& phase_items = work.step_items_.emplace_back();
    for (int s = 0; s < phase.steps_size(); ++s) {
      const planner::proto::Step& step = phase.steps(s);
      const kernels::BoundRegion region(*work.bound_.back(), step.region());
      std::vector<int>& of_step = phase_items.emplace_back();
      std::vector<const kernels::KernelFamily*> families = registry.FamiliesFor(region.kind());
      // The plan's own family (the cost model's pick) first.
      const kernels::KernelFamily* planned = registry.Find(step.tactic().family());
      std::stable_partition(families.begin(), families.end(),
                            [&](const kernels::KernelFamily* k) { return k == planned; });
      for (const kernels::KernelFamily* family : families) {
        if (!HasTacticsToMeasure(*family) || !family->CanImplement(region, target).ok()) continue;
        // A family the plan's options keep every phase off is not measured either.
        const auto& excluded = work.plan_.options().excluded_families();
        if (std::find(excluded.begin(), excluded.end(), family->name()) != excluded.end()) continue;
        planner::TacticKey key =
            planner::TacticKeyFor(region, ir_phase, *family, environment,
                                  std::max<int64_t>(1, work.plan_.options().tensor_parallel_ranks()));
        auto [it, inserted] = index_of.emplace(key, static_cast<int>(work.items_.size()));
        of_step.push_back(it->second);
        if (!inserted) continue;
        work.items_.push_back({f, s, family, std::move(key),
                               absl::StrCat(phase.name(), " ", step.name(), " ", region.kind(),
                                            " / ", family->name())});
      }
    }
  }
  return work;
}

kernels::BoundRegion TuningWork::Region(const TuningItem& item) const {
  return kernels::BoundRegion(*bound_[static_cast<size_t>(item.phase)],
                              plan_.phases(item.phase).steps(item.step).region());
}

bool TuningWork::IsDecode(const TuningItem& item) const {
  return plan_.phases(item.phase).kind() == planner::proto::Phase::KIND_DECODE;
}

bool ItemMatches(const TuningItem& item, absl::string_view text) {
  return absl::StrContains(item.label, text) || absl::StrContains(item.key.ToString(), text);
}

absl::StatusOr<CandidateRef> FindFaultInjection(const TuningWork& work,
                                                const std::vector<int>& todo,
                                                const FaultInjection& injection) {
  for (int index : todo) {
    if (ItemMatches(work.items()[static_cast<size_t>(index)], injection.region)) {
      return CandidateRef{index, injection.candidate};
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--inject-fault: no region to tune has '", injection.region, "' in its label or key",
      todo.empty() ? " (none is left to tune)"
                   : absl::StrCat(" (labels read like '",
                                  work.items()[static_cast<size_t>(todo.front())].label, "')")));
}

int AutotuneResult::without_valid() const {
  int n = 0;
  for (const auto& [item, m] : measured) n += m.valid == 0 ? 1 : 0;
  return n;
}

absl::StatusOr<AutotuneResult> MeasureInWorkers(const TuningWork& work,
                                                const std::vector<int>& todo,
                                                std::optional<CandidateRef> inject_fault,
                                                const WorkerLauncher& launch, std::ostream& out) {
  AutotuneResult result;
  std::map<CandidateRef, std::string> reasons;  // from the workers' fault lines
  std::map<int, int> candidate_counts;          // item -> candidates, from begin lines
  WorkerRequest request;
  request.items = todo;
  request.inject_fault = inject_fault;
  const auto on_line = [&](const WorkerLine& line) {
    switch (line.kind) {
      case WorkerLine::Kind::kBegin:
        candidate_counts[line.item] = line.count;
        break;
      case WorkerLine::Kind::kCandidate:
        break;
      case WorkerLine::Kind::kFault:
        result.faulted_params[{line.item, line.candidate}] = line.params;
        reasons[{line.item, line.candidate}] = line.reason;
        break;
      case WorkerLine::Kind::kDone: {
        result.measured[line.item] = {line.count, line.valid, line.best_us, line.default_us,
                                      line.params};
        const double def = line.default_us, best = line.best_us;
        out << absl::StrFormat(
            "[%3d/%d] %-58s %4d candidates %4d valid  best %9.2f us  cost-model pick %9.2f us"
            "%s  %s\n",
            result.measured.size(), todo.size(), work.items()[static_cast<size_t>(line.item)].label,
            line.count, line.valid, best, def,
            def > 0 && best > 0 ? absl::StrFormat("  (%.2fx)", def / best) : "", line.params);
        break;
      }
      case WorkerLine::Kind::kNote:
        if (!line.text.empty()) out << "  worker: " << line.text << "\n";
        break;
    }
    out.flush();
  };
  while (!request.items.empty()) {
    TP_ASSIGN_OR_RETURN(std::optional<WorkerDeath> died, launch(request, on_line));
    if (!died.has_value()) break;
    const CandidateRef at = died->candidate;
    // The worker's own account (the CUDA error) when it gave one, else how it ended.
    auto reason = reasons.find(at);
    result.faulted[at] =
        reason == reasons.end() ? died->how : absl::StrCat(reason->second, " (", died->how, ")");
    out << "  the worker died (" << died->how << ") measuring candidate " << at.candidate << " of "
        << work.items()[static_cast<size_t>(at.item)].label << "; restarting without it\n";
    request.skip[at] = result.faulted[at];
    if (request.inject_fault == at) request.inject_fault.reset();
    auto from = std::find(request.items.begin(), request.items.end(), at.item);
    request.items.erase(request.items.begin(), from);
  }
  if (request.inject_fault.has_value()) {
    const CandidateRef at = *request.inject_fault;
    auto count = candidate_counts.find(at.item);
    result.injection_not_reached = absl::StrCat(
        "--inject-fault: nothing faulted: ", work.items()[static_cast<size_t>(at.item)].label,
        " has ", count == candidate_counts.end() ? std::string("no") : absl::StrCat(count->second),
        " candidates, no candidate ", at.candidate);
  }
  return result;
}

void PrintAutotuneSummary(const TuningWork& work, const AutotuneResult& result, double seconds,
                          std::ostream& out) {
  out << absl::StrFormat(
      "tuned %d regions in %.1f s (%d without any valid candidate, %d candidates faulted the "
      "GPU)\n",
      result.measured.size(), seconds, result.without_valid(), result.faulted.size());
  for (const auto& [at, reason] : result.faulted) {
    auto params = result.faulted_params.find(at);
    out << absl::StrFormat(
        "  faulted: %s, candidate %d%s: %s\n", work.items()[static_cast<size_t>(at.item)].label,
        at.candidate,
        params == result.faulted_params.end() ? "" : absl::StrCat(" (", params->second, ")"),
        reason);
  }
  if (result.measured.empty()) return;
  // Every step of every phase, from what this run measured: the cost model's family and
  // tactic against the fastest family's winner.
  out << absl::StrFormat("%-26s %6s %18s %14s %8s\n", "phase", "steps", "cost-model plan us",
                         "tuned plan us", "speedup");
  for (size_t f = 0; f < work.step_items().size(); ++f) {
    double cost = 0, tuned = 0;
    int steps = 0;
    bool complete = true;
    for (const std::vector<int>& of_step : work.step_items()[f]) {
      if (of_step.empty()) continue;  // a view
      auto first = result.measured.find(of_step.front());
      if (first == result.measured.end() || first->second.default_us <= 0) {
        complete = false;
        continue;
      }
      double best = first->second.best_us;
      for (int item : of_step) {
        auto it = result.measured.find(item);
        if (it != result.measured.end() && it->second.best_us > 0) {
          best = std::min(best, it->second.best_us);
        }
      }
      cost += first->second.default_us;
      tuned += best;
      ++steps;
    }
    out << absl::StrFormat("%-26s %6d %18.1f %14.1f %7.2fx%s\n",
                           work.plan().phases(static_cast<int>(f)).name(), steps, cost, tuned,
                           tuned > 0 ? cost / tuned : 0.0,
                           complete ? "" : "  (steps measured earlier left out)");
  }
  out << "(sums of the steps' medians measured one region at a time, cold L2; launch gaps not "
         "included)\n";
}

}  // namespace tileplan::tuner
