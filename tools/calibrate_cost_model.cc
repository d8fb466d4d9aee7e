// calibrate_cost_model: fits the cost model's calibration for a target from the tuner's
// measurements (docs/planner.md, "Calibrated cost model"). Reads a tactic store's export
// (autotune_regions --export), plans --model as autotune_regions does, turns every measured
// candidate of the plan's regions into a sample (its bytes, flops, launches, grid and median),
// merges them into the calibration file (replacing the samples of the same --source), fits it,
// and reports what the calibrated plan would have cost in the measured times: against the
// uncalibrated plan, the fastest measured plan, and with this model's own samples held out.
// --from-samples takes the measurements from the file's own samples of a source instead.
// Needs no GPU.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "google/protobuf/text_format.h"
#include "kernels/families/registry.h"
#include "planner/cost_calibration.h"
#include "planner/plan_builder.h"
#include "planner/tactic_selection.h"
#include "targets/target.h"
#include "tools/common_flags.h"
#include "tools/flags.h"
#include "tuner/autotune.h"
#include "tuner/tactic_store_text.h"

ABSL_FLAG(std::string, measurements, "",
          "a tactic store's export (autotune_regions --tactic-cache FILE --export FILE) holding "
          "the measurements of --model's plan");
ABSL_FLAG(std::string, out, "",
          "the calibration file to add the samples to and fit (created when absent; the bundled "
          "one for the H200 is targets/h200.calibration.textproto)");
ABSL_FLAG(std::string, source, "",
          "the name of these samples in the file (default: --model, with the batch when it is "
          "not 1); a later run with the same name replaces them");
ABSL_FLAG(std::string, from_samples, "",
          "take the measurements from --out's own samples of this source instead of an "
          "export (in place of --measurements): with --dry-run, how today's defaults and "
          "calibration pick on a model the file holds, on any machine; without it, the "
          "source's samples are made again (their default flags and work figures as the "
          "families give them now) and the file refitted");
ABSL_FLAG(bool, dry_run, false, "report only: leave --out as it is");
ABSL_FLAG(bool, refit, false,
          "fit --out again from the samples it holds, adding none (after the fitter or a "
          "family's work figures changed), dropping those of stale family versions; takes no "
          "--measurements or --model");
ABSL_FLAG(bool, verbose, false,
          "also list every step whose calibrated or held-out pick measured over 10% slower "
          "than the fastest candidate, with the picks");

namespace tileplan {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitBad = 1;

constexpr char kUsage[] =
    "calibrate_cost_model: adds the tuner's measurements of a model's plan to a cost-model\n"
    "calibration and fits it (docs/planner.md, \"Calibrated cost model\").\n"
    "usage: calibrate_cost_model --measurements EXPORT --model M [--batch B --prefill T,...\n"
    "       --decode C,...] --out CALIBRATION [--target T] [--source NAME] [--dry-run]\n"
    "       calibrate_cost_model --from-samples SOURCE --model M [...] --out CALIBRATION\n"
    "       [--dry-run]\n"
    "       calibrate_cost_model --refit --out CALIBRATION [--dry-run]\n"
    "example:\n"
    "  autotune_regions --model qwen3-0.6b --tactic-cache t.db\n"
    "  autotune_regions --tactic-cache t.db --export t.textproto\n"
    "  calibrate_cost_model --measurements t.textproto --model qwen3-0.6b \\\n"
    "      --out targets/h200.calibration.textproto\n";

using StoredKeyId = std::tuple<std::string, std::string, std::string, std::string, int32_t>;

StoredKeyId IdOf(const tuner::proto::StoredKey& k) {
  return {k.region_signature(), k.shape_bucket(), k.phase(), k.family(), k.family_version()};
}

// The measured time of `tactic` (of `family`) among `key`'s candidates, compared in their
// canonical forms; nullopt when it was not measured.
std::optional<double> MeasuredTime(const tuner::proto::StoredKey& key,
                                   const kernels::KernelFamily& family,
                                   const kernels::Tactic& tactic) {
  const kernels::Tactic wanted = family.Canonical(tactic);
  for (const tuner::proto::StoredCandidate& c : key.candidates()) {
    if (c.status() != "ok") continue;
    absl::StatusOr<kernels::Tactic> t = kernels::TacticFromProto(c.tactic());
    if (t.ok() && family.Canonical(*t) == wanted) return c.median_us();
  }
  return std::nullopt;
}

double BestTime(const tuner::proto::StoredKey& key) {
  double best = 0;
  for (const tuner::proto::StoredCandidate& c : key.candidates()) {
    if (c.status() == "ok" && (best == 0 || c.median_us() < best)) best = c.median_us();
  }
  return best;
}

// The samples of `calibration` without those named `source`.
planner::proto::CostCalibration Without(planner::proto::CostCalibration calibration,
                                        const std::string& source) {
  for (planner::proto::FamilyCalibration& f : *calibration.mutable_families()) {
    auto* samples = f.mutable_samples();
    samples->erase(std::remove_if(samples->begin(), samples->end(),
                                  [&](const planner::proto::CalibrationSample& s) {
                                    return s.source() == source;
                                  }),
                   samples->end());
  }
  return calibration;
}

absl::Status WriteCalibration(const planner::proto::CostCalibration& calibration,
                              const std::string& out) {
  std::string text;
  google::protobuf::TextFormat::Printer printer;
  if (!printer.PrintToString(calibration, &text)) {
    return absl::InternalError("the calibration could not be printed");
  }
  text = absl::StrCat("# proto-file: planner/cost_calibration.proto\n",
                      "# proto-message: tileplan.planner.proto.CostCalibration\n",
                      "# Written by calibrate_cost_model (docs/planner.md, \"Calibrated cost "
                      "model\").\n",
                      text);
  TP_RETURN_IF_ERROR(WriteFileAtomically(out, text));
  std::cout << "wrote " << out << "\n";
  return absl::OkStatus();
}

void PrintFamilies(const planner::proto::CostCalibration& calibration) {
  for (const planner::proto::FamilyCalibration& f : calibration.families()) {
    std::cout << absl::StrFormat("  %-22s v%-2d %5d samples  overhead %5.2f us  fit error %.3f\n",
                                 f.family(), f.family_version(), f.samples_size(), f.overhead_us(),
                                 f.fit_log_error());
  }
}

// --refit: the file's own samples fitted again for its target.
// Drops (and reports) the families of other versions than the registry's: their samples
// measured kernels that no longer exist.
void DropStaleFamilies(planner::proto::CostCalibration& calibration) {
  const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
  auto* all = calibration.mutable_families();
  all->erase(std::remove_if(all->begin(), all->end(),
                            [&](const planner::proto::FamilyCalibration& f) {
                              const kernels::KernelFamily* k = registry.Find(f.family());
                              const bool stale = k == nullptr || k->version() != f.family_version();
                              if (stale) {
                                std::cout << "dropping " << f.samples_size() << " samples of "
                                          << f.family() << " v" << f.family_version()
                                          << " (the family is now "
                                          << (k ? absl::StrCat("v", k->version()) : "gone")
                                          << ")\n";
                              }
                              return stale;
                            }),
             all->end());
}

absl::StatusOr<int> Refit(const std::string& out) {
  if (!absl::GetFlag(FLAGS_measurements).empty()) {
    return absl::InvalidArgumentError("--refit adds no measurements: leave --measurements out");
  }
  TP_ASSIGN_OR_RETURN(planner::CostCalibration existing, planner::CostCalibration::Load(out));
  planner::proto::CostCalibration calibration = existing.proto();
  if (!absl::GetFlag(FLAGS_target).empty() && absl::GetFlag(FLAGS_target) != calibration.target()) {
    return absl::InvalidArgumentError(absl::StrCat(out, " calibrates target ", calibration.target(),
                                                   ", not ", absl::GetFlag(FLAGS_target)));
  }
  TP_ASSIGN_OR_RETURN(const targets::TargetDescription target,
                      targets::FindTarget(calibration.target()));
  DropStaleFamilies(calibration);
  TP_RETURN_IF_ERROR(planner::FitCostCalibration(target, calibration));
  // The refitted file must load as the planner will load it.
  TP_ASSIGN_OR_RETURN(const planner::CostCalibration refitted,
                      planner::CostCalibration::FromProto(calibration, out));
  std::cout << out << ": refitted " << refitted.num_samples() << " samples for target "
            << calibration.target() << "\n";
  PrintFamilies(calibration);
  if (absl::GetFlag(FLAGS_dry_run)) return kExitOk;
  TP_RETURN_IF_ERROR(WriteCalibration(calibration, out));
  return kExitOk;
}

// A tactic store's export holding `source`'s samples of `calibration` (one environment: the
// calibration's, on `target`), as --measurements would: a key per measured region, a
// candidate per sample. NotFound naming the sources the file holds when none is `source`'s.
absl::StatusOr<tuner::proto::TacticStoreFile> StoreFromSamples(
    const planner::proto::CostCalibration& calibration, const std::string& source,
    const targets::TargetDescription& target) {
  tuner::proto::TacticStoreFile file = tuner::NewTacticStoreFile();
  tuner::proto::StoredEnvironment* env = file.add_environments();
  env->set_fingerprint(calibration.environment());
  env->set_gpu(calibration.environment().substr(0, calibration.environment().find('|')));
  env->set_sm(target.sm());
  env->set_sm_count(target.sm_count());
  std::map<StoredKeyId, tuner::proto::StoredKey*> keys;
  std::set<std::string> sources;
  for (const planner::proto::FamilyCalibration& f : calibration.families()) {
    for (const planner::proto::CalibrationSample& s : f.samples()) {
      sources.insert(s.source());
      if (s.source() != source) continue;
      const StoredKeyId id{s.region_signature(), s.shape_bucket(), s.phase(), f.family(),
                           f.family_version()};
      tuner::proto::StoredKey*& key = keys[id];
      if (key == nullptr) {
        key = env->add_keys();
        key->set_region_signature(s.region_signature());
        key->set_shape_bucket(s.shape_bucket());
        key->set_phase(s.phase());
        key->set_family(f.family());
        key->set_family_version(f.family_version());
      }
      TP_ASSIGN_OR_RETURN(auto params, planner::ParseTacticParams(s.tactic()));
      tuner::proto::StoredCandidate* c = key->add_candidates();
      *c->mutable_tactic() =
          kernels::TacticToProto(kernels::Tactic{f.family(), f.family_version(), params});
      c->set_status("ok");
      c->set_median_us(s.median_us());
    }
  }
  if (keys.empty()) {
    return absl::NotFoundError(absl::StrCat("the calibration holds no samples of '", source,
                                            "'; its sources: ",
                                            sources.empty() ? "none" : absl::StrJoin(sources, ", ")));
  }
  return file;
}

absl::StatusOr<int> Run() {
  std::string measurements = absl::GetFlag(FLAGS_measurements);
  const std::string from_samples = absl::GetFlag(FLAGS_from_samples);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("--out is required");
  if (absl::GetFlag(FLAGS_refit)) {
    if (!from_samples.empty()) {
      return absl::InvalidArgumentError("--refit takes no --from-samples: it refits every source");
    }
    return Refit(out);
  }
  if (!from_samples.empty() && !measurements.empty()) {
    return absl::InvalidArgumentError(
        "--from-samples and --measurements both name the measurements: give one");
  }
  if (from_samples.empty() && measurements.empty()) {
    return absl::InvalidArgumentError("--measurements (or --from-samples) is required");
  }
  TP_ASSIGN_OR_RETURN(const tools::ModelArgument model, tools::ModelFromFlags());
  TP_ASSIGN_OR_RETURN(planner::PlanOptions options, tools::PlanOptionsFromFlags());
  // The existing calibration, if any (--from-samples needs one, and takes its target as the
  // default).
  std::optional<planner::CostCalibration> existing;
  std::error_code ec;
  if (!from_samples.empty() || std::filesystem::exists(out, ec)) {
    TP_ASSIGN_OR_RETURN(existing, planner::CostCalibration::Load(out));
  }
  std::string target_name = absl::GetFlag(FLAGS_target);
  if (target_name.empty()) {
    target_name = !from_samples.empty() ? existing->proto().target() : "h200";
  }
  TP_ASSIGN_OR_RETURN(const targets::TargetDescription target, targets::FindTarget(target_name));
  std::string source = absl::GetFlag(FLAGS_source);
  if (source.empty()) source = from_samples;
  if (source.empty()) {
    source = model.name;
    if (absl::GetFlag(FLAGS_batch).value != 1) {
      absl::StrAppend(&source, " B=", absl::GetFlag(FLAGS_batch).value);
    }
  }

  tuner::proto::TacticStoreFile store;
  if (from_samples.empty()) {
    TP_ASSIGN_OR_RETURN(store, tuner::ReadTacticStoreText(measurements));
  } else {
    TP_ASSIGN_OR_RETURN(store, StoreFromSamples(existing->proto(), from_samples, target));
    measurements = absl::StrCat(out, "'s samples of ", from_samples);
  }
  if (store.environments_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(measurements, " holds ", store.environments_size(),
                     " environments; a calibration is fitted from one GPU's (export a store of "
                     "one environment)"));
  }
  const tuner::proto::StoredEnvironment& environment = store.environments(0);
  if (environment.sm() != target.sm() || environment.sm_count() != target.sm_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat(measurements, " was measured on ", environment.gpu(), " (sm_",
                     environment.sm(), ", ", environment.sm_count(), " SMs), not on target ",
                     target.name(), " (sm_", target.sm(), ", ", target.sm_count(), " SMs)"));
  }
  std::map<StoredKeyId, const tuner::proto::StoredKey*> stored;
  for (const tuner::proto::StoredKey& k : environment.keys()) stored[IdOf(k)] = &k;

  planner::proto::CostCalibration calibration;
  if (existing) {
    calibration = existing->proto();
    if (calibration.target() != target.name()) {
      return absl::InvalidArgumentError(
          absl::StrCat(out, " calibrates target ", calibration.target(), ", not ", target.name()));
    }
  }
  calibration.set_schema(std::string(planner::kCostCalibrationSchema));
  calibration.set_schema_version(planner::kCostCalibrationSchemaVersion);
  calibration.set_target(target.name());
  calibration.set_environment(environment.fingerprint());
  calibration = Without(std::move(calibration), source);

  // Plan as autotune_regions does (with the uncalibrated model: the keys do not depend on
  // it), then a sample per measured candidate of every region of the plan.
  options.model_name = model.name;
  options.environment = environment.fingerprint();
  options.calibrate = false;
  TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                      planner::BuildExecutionPlan(model.config, target, options, nullptr));
  TP_ASSIGN_OR_RETURN(const tuner::TuningWork work,
                      tuner::TuningWork::Collect(std::move(plan), target, options.environment));
  const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
  std::map<std::pair<std::string, int32_t>, planner::proto::FamilyCalibration*> families;
  DropStaleFamilies(calibration);
  for (planner::proto::FamilyCalibration& f : *calibration.mutable_families()) {
    families[{f.family(), f.family_version()}] = &f;
  }
  int matched = 0, added = 0;
  std::vector<const tuner::proto::StoredKey*> key_of_item(work.items().size(), nullptr);
  for (size_t i = 0; i < work.items().size(); ++i) {
    const tuner::TuningItem& item = work.items()[i];
    auto it = stored.find(IdOf(tuner::StoredKeyOf(item.key)));
    if (it == stored.end()) continue;
    key_of_item[i] = it->second;
    ++matched;
    const kernels::BoundRegion region = work.Region(item);
    const kernels::KernelFamily& family = *item.family;
    absl::StatusOr<kernels::Tactic> default_tactic = family.DefaultTactic(region, target);
    planner::proto::FamilyCalibration*& f =
        families[{std::string(family.name()), family.version()}];
    if (f == nullptr) {
      f = calibration.add_families();
      f->set_family(std::string(family.name()));
      f->set_family_version(family.version());
    }
    for (const tuner::proto::StoredCandidate& c : it->second->candidates()) {
      if (c.status() != "ok" || !(c.median_us() > 0)) continue;
      absl::StatusOr<kernels::Tactic> tactic = kernels::TacticFromProto(c.tactic());
      if (!tactic.ok() || !family.ValidateTactic(*tactic, region, target).ok()) continue;
      tactic = family.Canonical(*tactic);
      const kernels::WorkEstimate w = family.Work(*tactic, region);
      planner::proto::CalibrationSample* s = f->add_samples();
      s->set_source(source);
      s->set_kind(region.kind());
      s->set_region_signature(item.key.region_signature);
      s->set_shape_bucket(item.key.shape_bucket);
      s->set_phase(it->second->phase());
      s->set_tactic(tactic->ParamsString());
      s->set_default_tactic(default_tactic.ok() && family.Canonical(*default_tactic) == *tactic);
      s->set_bytes(w.bytes);
      s->set_flops(w.flops);
      s->set_tensor_core(w.tensor_core);
      if (w.core_share != 1.0) s->set_core_share(w.core_share);
      s->set_launches(family.Launches(*tactic, region));
      s->set_ctas(family.Geometry(*tactic, region).ctas());
      s->set_median_us(c.median_us());
      ++added;
    }
  }
  if (added == 0 && !from_samples.empty()) {
    std::set<std::string> buckets;
    for (const tuner::proto::StoredKey& k : environment.keys()) buckets.insert(k.shape_bucket());
    return absl::NotFoundError(absl::StrCat(
        "no sample of ", from_samples, " matches a region of this plan: plan it with the --batch, "
        "--prefill, --decode and --prefill-logits it was tuned with (its shape buckets: ",
        absl::StrJoin(buckets, "; "), ")"));
  }
  if (added == 0) {
    return absl::NotFoundError(
        absl::StrCat(measurements, " holds no measurement of ", source,
                     "'s plan: tune it with the same --model, --batch, --prefill, --decode and "
                     "--prefill-logits first"));
  }
  TP_RETURN_IF_ERROR(planner::FitCostCalibration(target, calibration));
  TP_ASSIGN_OR_RETURN(planner::CostCalibration fitted,
                      planner::CostCalibration::FromProto(calibration, out));
  TP_ASSIGN_OR_RETURN(planner::CostCalibration held_out,
                      planner::CostCalibration::FromProto(Without(calibration, source), out));
  std::cout << absl::StrFormat(
      "%s: %d samples from %d of %d regions of %s's plan; the calibration holds %d samples of "
      "%d families\n",
      measurements, added, matched, work.items().size(), source, fitted.num_samples(),
      calibration.families_size());
  PrintFamilies(calibration);

  // What each plan's picks measured: per phase, the sum over steps of the measured time of the
  // tactic each model picks (a pick that was not measured leaves the step out of all sums).
  std::cout << absl::StrFormat("%-18s %6s %14s %14s %14s %12s\n", "phase", "steps", "uncalibrated",
                               "held out", "calibrated", "tuned (best)");
  // One step's figures: the measured times of the three models' picks and the best (0 when
  // a pick or every candidate went unmeasured), and the picks as text.
  struct StepFigures {
    double times[4] = {0, 0, 0, 0};
    std::string picks[3];
    bool measured = false;
  };
  // By the step's first item: identical layers share their items, so each is evaluated once.
  std::map<int, StepFigures> evaluated;
  const planner::CostCalibration* models[3] = {nullptr, &held_out, &fitted};
  auto evaluate = [&](const std::vector<int>& of_step, const planner::SelectionContext& base) {
    StepFigures r;
    planner::SelectionContext context = base;
    const kernels::BoundRegion region = work.Region(work.items()[static_cast<size_t>(of_step[0])]);
    bool ok = true;
    for (int m = 0; m < 3 && ok; ++m) {
      context.calibration = models[m];
      absl::StatusOr<planner::TacticChoice> choice = planner::SelectTactic(region, context);
      ok = choice.ok();
      if (!ok) break;
      std::optional<double> t;
      for (int i : of_step) {
        const tuner::TuningItem& item = work.items()[static_cast<size_t>(i)];
        if (item.family == choice->family && key_of_item[static_cast<size_t>(i)] != nullptr) {
          t = MeasuredTime(*key_of_item[static_cast<size_t>(i)], *choice->family, choice->tactic);
        }
      }
      ok = t.has_value();
      if (ok) r.times[m] = *t;
      r.picks[m] = absl::StrCat(choice->family->name(), " ", choice->tactic.ParamsString(),
                                t ? absl::StrFormat(" %.2f us", *t) : " (not measured)");
    }
    double& best = r.times[3];
    for (int i : of_step) {
      if (const tuner::proto::StoredKey* k = key_of_item[static_cast<size_t>(i)]) {
        const double b = BestTime(*k);
        if (b > 0 && (best == 0 || b < best)) best = b;
      }
    }
    r.measured = ok && best > 0;
    if (absl::GetFlag(FLAGS_verbose) && best > 0 &&
        (!ok || r.times[1] > 1.1 * best || r.times[2] > 1.1 * best)) {
      std::cout << absl::StrFormat(
          "  %s: best %.2f us; uncalibrated %s; held out %s; "
          "calibrated %s\n",
          work.items()[static_cast<size_t>(of_step[0])].label, best, r.picks[0], r.picks[1],
          r.picks[2]);
    }
    return r;
  };
  for (size_t p = 0; p < work.step_items().size(); ++p) {
    const planner::proto::Phase& phase = work.plan().phases(static_cast<int>(p));
    planner::SelectionContext context;
    context.registry = &registry;
    context.target = &target;
    context.phase = phase.kind() == planner::proto::Phase::KIND_PREFILL ? ir::Phase::kPrefill
                                                                        : ir::Phase::kDecode;
    context.environment = options.environment;
    double sums[4] = {0, 0, 0, 0};
    int steps = 0, unmeasured = 0;
    for (const std::vector<int>& of_step : work.step_items()[p]) {
      if (of_step.empty()) continue;
      auto it = evaluated.find(of_step[0]);
      if (it == evaluated.end())
        it = evaluated.emplace(of_step[0], evaluate(of_step, context)).first;
      const StepFigures& r = it->second;
      if (!r.measured) {
        ++unmeasured;
        continue;
      }
      for (int m = 0; m < 4; ++m) sums[m] += r.times[m];
      ++steps;
    }
    std::cout << absl::StrFormat("%-18s %6d %14.1f %14.1f %14.1f %12.1f", phase.name(), steps,
                                 sums[0], sums[1], sums[2], sums[3]);
    if (sums[3] > 0) {
      std::cout << absl::StrFormat("   (%.3fx %.3fx %.3fx of tuned)", sums[0] / sums[3],
                                   sums[1] / sums[3], sums[2] / sums[3]);
    }
    if (unmeasured > 0)
      std::cout << "  " << unmeasured << " steps with an unmeasured pick left out";
    std::cout << "\n";
  }
  std::cout << "(sums of the steps' measured medians, us; \"held out\": calibrated without "
            << source << "'s samples)\n";

  if (absl::GetFlag(FLAGS_dry_run)) return kExitOk;
  TP_RETURN_IF_ERROR(WriteCalibration(calibration, out));
  return kExitOk;
}

}  // namespace
}  // namespace tileplan

int main(int argc, char** argv) {
  namespace tools = tileplan::tools;
  const std::vector<std::string> positional = tools::ParseFlags(argc, argv, {tileplan::kUsage});
  if (!positional.empty()) {
    return tools::UsageFailure(absl::StrCat("unexpected argument '", positional.front(), "'"));
  }
  absl::StatusOr<int> result = tileplan::Run();
  if (!result.ok()) {
    std::cerr << "calibrate_cost_model: " << result.status().message() << "\n";
    return tileplan::kExitBad;
  }
  return *result;
}
