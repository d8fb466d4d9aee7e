// autotune_regions: measures every valid candidate tactic of every region of a model's plan on
// this GPU and keeps the winners in the SQLite tactic store (docs/tuner.md). A main() over
// tuner/autotune.h (the regions to measure, the loop over worker processes) and
// tuner/worker.h (the worker, this binary started with --worker).
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "device/device.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "planner/plan_builder.h"
#include "runtime/gpu/device_target.h"
#include "tools/common_flags.h"
#include "tools/flags.h"
#include "tuner/autotune.h"
#include "tuner/environment.h"
#include "tuner/tactic_store.h"
#include "tuner/tactic_store_text.h"
#include "tuner/worker.h"

ABSL_FLAG(tileplan::tools::PositiveInt, repeats, tileplan::tools::PositiveInt{20},
          "timed runs per candidate");
ABSL_FLAG(tileplan::tools::PositiveInt, max_candidates, tileplan::tools::PositiveInt{256},
          "candidates per region, the default tactic included; cuBLASLt's heuristic is asked "
          "for as many configurations");
ABSL_FLAG(std::string, inject_fault, "",
          "REGION:CANDIDATE, a testing aid: when the worker reaches candidate number CANDIDATE "
          "(0 is the default tactic) of the first region to tune whose label or key contains "
          "REGION, it first runs a kernel that executes __trap(), which kills its CUDA context "
          "as a faulting candidate would; the candidate is recorded as a fault and the worker "
          "restarted");
ABSL_FLAG(double, candidate_timeout, 120,
          "SECONDS a candidate may run without the worker printing a line before the worker is "
          "killed and the candidate recorded as a fault (a kernel that never ends); 0 waits for "
          "ever");
ABSL_FLAG(std::string, only, "",
          "TEXT: measure (or with --print-keys list) only the regions whose progress label "
          "(`prefill T=512 l1.expert_gate expert_linear / expert_gemm`) or key contains "
          "TEXT, e.g. expert_linear; the others are left as the store has them");
ABSL_FLAG(std::string, export, "",
          "write the store --tactic-cache names, which must exist, to this file as sorted "
          "textproto");
ABSL_FLAG(std::string, import, "",
          "add the entries of this exported file to the store --tactic-cache names (created "
          "when missing)");
ABSL_FLAG(std::string, worker, "",
          "internal: the request of a measuring worker (tuner/worker.h); autotune_regions "
          "starts itself with it");

namespace tileplan {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitIncomplete = 1;
constexpr int kExitBad = 2;
constexpr int kExitFaulted = 3;

constexpr char kUsage[] =
    "measures every candidate tactic of every region of a model's plan on this\n"
    "GPU and keeps the winners in a tactic store (docs/tuner.md). The plan is the one\n"
    "benchmark_transformer makes with the same --model, --prefill, --decode, --batch,\n"
    "--max-context, --prefill-logits and --target, so its keys are the ones that benchmark looks\n"
    "up. Regions the store already answers for this GPU are skipped. The measuring runs in a\n"
    "worker process; a candidate that faults the GPU kills only the worker, which is restarted\n"
    "without it (recorded as a fault); so does one that runs --candidate-timeout seconds (120)\n"
    "without ending.\n"
    "\n"
    "usage: autotune_regions --model DIR|FILE|NAME --tactic-cache FILE [--prefill T,...]\n"
    "           [--decode C,...] [--batch B] [--max-context N] [--prefill-logits all|last]\n"
    "           [--target NAME|FILE] [--repeats N] [--max-candidates N] [--freeze]\n"
    "           [--only TEXT] [--candidate-timeout SECONDS] [--inject-fault REGION:CANDIDATE]\n"
    "       autotune_regions --model DIR|FILE|NAME [plan flags] --print-keys\n"
    "       autotune_regions --tactic-cache FILE --export FILE | --import FILE\n"
    "\n"
    "Exit status: 0 done; 1 some region without any valid candidate; 2 bad arguments, no GPU,\n"
    "an unusable store, or an --inject-fault that matched no region or was never reached;\n"
    "3 every region tuned, but a candidate faulted the GPU or hung (recorded, its worker\n"
    "restarted).\n"
    "\n"
    "Examples:\n"
    "  autotune_regions --model qwen3-0.6b --tactic-cache tactics.db\n"
    "  benchmark_transformer --model qwen3-0.6b --tactic-cache tactics.db --show-plan\n"
    "  autotune_regions --model qwen2-7b --batch 16 --prefill 512 --decode 512 "
    "--tactic-cache t.db\n"
    "  autotune_regions --model deepseek-v2-lite --prefill 512 --decode 512 --only "
    "expert_linear --tactic-cache t.db\n"
    "  autotune_regions --tactic-cache tactics.db --export tactics.textproto\n";

// Combinations of flags that make no run.
absl::Status CheckFlags() {
  const bool store_only =
      !absl::GetFlag(FLAGS_export).empty() || !absl::GetFlag(FLAGS_import).empty();
  if (!absl::GetFlag(FLAGS_export).empty() && !absl::GetFlag(FLAGS_import).empty()) {
    return absl::InvalidArgumentError("--export and --import: one at a time");
  }
  if (absl::GetFlag(FLAGS_tactic_cache).empty() && !absl::GetFlag(FLAGS_print_keys)) {
    return absl::InvalidArgumentError("--tactic-cache is required");
  }
  if (store_only) {
    if (!absl::GetFlag(FLAGS_model).empty()) {
      return absl::InvalidArgumentError(
          "--export and --import work on the store alone; no --model");
    }
    if (!absl::GetFlag(FLAGS_inject_fault).empty()) {
      return absl::InvalidArgumentError(
          "--inject-fault needs regions to tune, not --export/--import");
    }
    if (!absl::GetFlag(FLAGS_only).empty()) {
      return absl::InvalidArgumentError("--only selects regions to tune, not --export/--import");
    }
    return absl::OkStatus();
  }
  if (absl::GetFlag(FLAGS_model).empty()) return absl::InvalidArgumentError("--model is required");
  if (const double timeout = absl::GetFlag(FLAGS_candidate_timeout);
      !(timeout >= 0 && timeout <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--candidate-timeout ", timeout, ": seconds in [0, 1e6] (0 waits for ever)"));
  }
  if (const std::string fault = absl::GetFlag(FLAGS_inject_fault); !fault.empty()) {
    TP_RETURN_IF_ERROR(tuner::ParseFaultInjection(fault).status());
  }
  return tools::PlanOptionsFromFlags().status();
}

// --export or --import. An import's file is read and checked before the store is opened, so
// a bad file leaves no new store behind.
absl::StatusOr<int> RunStoreCommand() {
  const std::string path = absl::GetFlag(FLAGS_tactic_cache);
  const std::string exported = absl::GetFlag(FLAGS_export);
  const std::string imported = absl::GetFlag(FLAGS_import);
  std::optional<tuner::proto::TacticStoreFile> file;
  if (exported.empty()) {
    TP_ASSIGN_OR_RETURN(file, tuner::ReadTacticStoreText(imported));
  }
  tuner::TacticStore::Options options;
  options.read_only = !exported.empty();  // an export never creates the store
  TP_ASSIGN_OR_RETURN(std::unique_ptr<tuner::TacticStore> store,
                      tuner::TacticStore::Open(path, options));
  for (const std::string& w : store->warnings()) std::cerr << "warning: " << w << "\n";
  if (!exported.empty()) {
    TP_RETURN_IF_ERROR(store->Export(exported));
    std::cout << "exported " << store->num_winners() << " winners to " << exported << "\n";
  } else {
    TP_RETURN_IF_ERROR(store->Import(*file));
    std::cout << "imported " << imported << ": the store holds " << store->num_winners()
              << " winners\n";
  }
  return kExitOk;
}

// The items --only selects (all without it).
std::vector<int> Selected(const tuner::TuningWork& work) {
  const std::string only = absl::GetFlag(FLAGS_only);
  std::vector<int> selected;
  for (size_t i = 0; i < work.items().size(); ++i) {
    if (only.empty() || tuner::ItemMatches(work.items()[i], only)) {
      selected.push_back(static_cast<int>(i));
    }
  }
  return selected;
}

// The parent: the regions the store does not answer yet, measured in workers that are this
// binary (`self`) started again with the same flags and --worker.
absl::StatusOr<int> Tune(const tuner::TuningWork& work, const tuner::Environment& environment,
                         const device::Device& device, const char* self,
                         const std::vector<std::string>& args) {
  const auto start = std::chrono::steady_clock::now();
  const std::string path = absl::GetFlag(FLAGS_tactic_cache);
  // What the store already answers (a file that does not exist yet answers nothing; the
  // worker creates it).
  std::unique_ptr<tuner::TacticStore> store;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    tuner::TacticStore::Options options;
    options.read_only = true;
    TP_ASSIGN_OR_RETURN(store, tuner::TacticStore::Open(path, options));
    for (const std::string& w : store->warnings()) std::cerr << "warning: " << w << "\n";
  }
  const std::vector<int> selected = Selected(work);
  std::vector<int> todo;
  for (int i : selected) {
    if (store == nullptr || !store->Lookup(work.items()[static_cast<size_t>(i)].key).has_value()) {
      todo.push_back(i);
    }
  }
  std::cout << absl::StrFormat(
      "autotune %s on %s: %d regions (distinct keys)%s, %d already in %s, %d to tune\n",
      absl::GetFlag(FLAGS_model), device.Label(), selected.size(),
      absl::GetFlag(FLAGS_only).empty()
          ? ""
          : absl::StrCat(" of ", work.items().size(), " matching --only ",
                         absl::GetFlag(FLAGS_only)),
      selected.size() - todo.size(), path, todo.size());
  std::cout << "environment: " << environment.Fingerprint() << "\n";
  if (absl::GetFlag(FLAGS_freeze) && !todo.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--freeze: ", todo.size(), " regions have no measured tactic, e.g. ",
                     work.items()[static_cast<size_t>(todo.front())].key.ToString()));
  }
  if (store != nullptr && !store->warnings().empty() && !todo.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tactic store ", path, " cannot be written (see the warnings)"));
  }
  store.reset();  // the workers write

  std::optional<tuner::CandidateRef> inject_at;
  if (const std::string fault = absl::GetFlag(FLAGS_inject_fault); !fault.empty()) {
    TP_ASSIGN_OR_RETURN(const tuner::FaultInjection injection, tuner::ParseFaultInjection(fault));
    TP_ASSIGN_OR_RETURN(inject_at, tuner::FindFaultInjection(work, todo, injection));
    std::cout << "injecting a fault (testing aid) at candidate " << inject_at->candidate << " of "
              << work.items()[static_cast<size_t>(inject_at->item)].label << "\n";
  }
  const tuner::WorkerLauncher launch =
      [&](const tuner::WorkerRequest& request,
          const std::function<void(const tuner::WorkerLine&)>& on_line) {
        std::vector<std::string> argv = {
            args.front(), absl::StrCat("--worker=", tuner::FormatWorkerRequest(request))};
        argv.insert(argv.end(), args.begin() + 1, args.end());
        return tuner::SpawnWorker(self, argv, on_line, absl::GetFlag(FLAGS_candidate_timeout));
      };
  TP_ASSIGN_OR_RETURN(const tuner::AutotuneResult result,
                      tuner::MeasureInWorkers(work, todo, inject_at, launch, std::cout));
  tuner::PrintAutotuneSummary(
      work, result, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      std::cout);
  if (result.injection_not_reached) {
    return absl::InvalidArgumentError(*result.injection_not_reached);
  }
  if (result.without_valid() > 0) return kExitIncomplete;
  return result.faulted.empty() ? kExitOk : kExitFaulted;
}

absl::StatusOr<int> Run(const std::vector<std::string>& args) {
  if (!absl::GetFlag(FLAGS_export).empty() || !absl::GetFlag(FLAGS_import).empty()) {
    return RunStoreCommand();
  }
  const bool print_keys = absl::GetFlag(FLAGS_print_keys);
  TP_ASSIGN_OR_RETURN(const tools::ModelArgument model, tools::ModelFromFlags());
  TP_ASSIGN_OR_RETURN(planner::PlanOptions options, tools::PlanOptionsFromFlags());
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(0);
  if (!device.ok() && !print_keys) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.status().message(),
                     "; autotune_regions measures on a GPU (--print-keys lists the keys without "
                     "one)"));
  }
  TP_ASSIGN_OR_RETURN(const targets::TargetDescription target,
                      runtime::gpu::ChooseTarget(absl::GetFlag(FLAGS_target),
                                                 device.ok() ? device->get() : nullptr));
  // The environment measurements are keyed by; the parent and the workers detect it alike.
  std::unique_ptr<kernels::NvrtcCompiler> compiler;
  tuner::Environment environment = tuner::FromTarget(target);
  if (device.ok()) {
    TP_ASSIGN_OR_RETURN(compiler, kernels::NvrtcCompiler::Create({}));
    TP_ASSIGN_OR_RETURN(environment, tuner::DetectEnvironment(**device, *compiler, target));
  }
  options.model_name = model.name;
  options.environment = environment.Fingerprint();
  TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                      planner::BuildExecutionPlan(model.config, target, options, nullptr));
  TP_ASSIGN_OR_RETURN(const tuner::TuningWork work,
                      tuner::TuningWork::Collect(std::move(plan), target, options.environment));
  if (print_keys) {
    std::set<planner::TacticKey> keys;
    for (int i : Selected(work)) keys.insert(work.items()[static_cast<size_t>(i)].key);
    for (const planner::TacticKey& key : keys) std::cout << key.ToString() << "\n";
    return kExitOk;
  }
  if (const std::string request = absl::GetFlag(FLAGS_worker); !request.empty()) {
    TP_ASSIGN_OR_RETURN(const tuner::WorkerRequest parsed, tuner::ParseWorkerRequest(request));
    tuner::WorkerSetup setup;
    setup.device = device->get();
    setup.target = &target;
    setup.environment = &environment;
    setup.store_path = absl::GetFlag(FLAGS_tactic_cache);
    setup.max_candidates =
        static_cast<int>(std::min<int64_t>(absl::GetFlag(FLAGS_max_candidates).value, 1 << 20));
    setup.repeats =
        static_cast<int>(std::min<int64_t>(absl::GetFlag(FLAGS_repeats).value, 1 << 20));
    TP_RETURN_IF_ERROR(tuner::RunWorker(work, parsed, setup, stdout));
    return kExitOk;
  }
  return Tune(work, environment, **device, "/proc/self/exe", args);
}

}  // namespace
}  // namespace tileplan

int main(int argc, char** argv) {
  namespace tools = tileplan::tools;
  const std::vector<std::string> positional = tools::ParseFlags(argc, argv, {tileplan::kUsage});
  if (!positional.empty()) {
    return tools::UsageFailure(absl::StrCat("unexpected argument '", positional.front(), "'"));
  }
  if (absl::Status s = tileplan::CheckFlags(); !s.ok()) return tools::UsageFailure(s.message());
  if (!absl::GetFlag(FLAGS_worker).empty()) {
    // A worker dies with the autotune_regions that started it, which alone reads its lines:
    // a killed tuner leaves no worker holding the GPU and the store.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) return tileplan::kExitBad;
  }
  absl::StatusOr<int> result = tileplan::Run(std::vector<std::string>(argv, argv + argc));
  if (!result.ok()) {
    std::cerr << "autotune_regions: " << result.status().message() << "\n";
    return tileplan::kExitBad;
  }
  return *result;
}
