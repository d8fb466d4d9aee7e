// autotune_regions: measures every valid candidate tactic of every region of a model's plan on
// this GPU and keeps the winners in the SQLite tactic store (docs/tuner.md).
//
//   autotune_regions --model DIR|NAME --cache FILE [--prefill T,...] [--decode C,...]
//       [--batch B,...] [--target NAME|FILE] [--repeats N] [--max-candidates N] [--freeze]
//       [--prefill-logits all|last] [--inject-fault REGION:CANDIDATE]
//   autotune_regions --cache FILE --export FILE
//   autotune_regions --cache FILE --import FILE
//   autotune_regions --help
//
// For each batch it plans the model with the cost model (prefill phases per T, one decode
// phase at the largest context), then collects the regions to tune: per step and per kernel
// family that can implement it, one key (environment, region signature, shape bucket, phase,
// family and version); identical layers share a key. Keys the store already answers are
// skipped, so a second run on a warm cache only plans. The measuring runs in a worker
// process (this binary with --worker): a candidate that faults the GPU kills only the worker,
// which is restarted without that candidate (recorded as a fault, with why the worker died).
// One progress line per region, then a summary. --freeze turns any key still to tune into an
// error. --inject-fault (a testing aid) makes the worker run a kernel that executes __trap()
// when it reaches the given candidate of the first region to tune whose label or key
// contains REGION, so that the restart path runs on a real fault.
// --prefill-logits plans the prefill phases as benchmark_transformer does with the same flag
// (last: the LM head of each sequence's last token only), so their keys match its plans.
//
// Exit status: 0 done; 1 some region could not be tuned at all; 2 bad arguments, no GPU, an
// unusable store, or an --inject-fault that matched no region or was never reached; 3 every
// region tuned, but a candidate faulted the GPU (recorded as a fault, its worker restarted).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "device/device.h"
#include "kernels/core/kernel_family.h"
#include "kernels/families/registry.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "kernels/step/step_launcher.h"
#include "models/config.h"
#include "planner/plan_builder.h"
#include "planner/tactic_cache.h"
#include "regions/serialization.h"
#include "runtime/gpu/device_target.h"
#include "targets/target.h"
#include "tools/tool_support.h"
#include "tuner/environment.h"
#include "tuner/region_tuner.h"
#include "tuner/tactic_store.h"

extern char** environ;

namespace tileplan {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitIncomplete = 1;
constexpr int kExitBad = 2;
constexpr int kExitFaulted = 3;

constexpr const char* kUsage =
    "usage: autotune_regions --model DIR|NAME --cache FILE [--prefill T,...] [--decode C,...]\n"
    "           [--batch B,...] [--target NAME|FILE] [--repeats N] [--max-candidates N]\n"
    "           [--freeze] [--prefill-logits all|last] [--inject-fault REGION:CANDIDATE]\n"
    "       autotune_regions --cache FILE --export FILE | --import FILE\n"
    "       autotune_regions --help";

constexpr const char* kHelp =
    "Measures every candidate tactic of every region of a model's plans on this GPU and keeps\n"
    "the winners in a tactic store (docs/tuner.md).\n"
    "\n"
    "  --model DIR|NAME        a checkpoint directory or a bundled config name\n"
    "  --cache FILE            the SQLite tactic store (created when missing)\n"
    "  --prefill T,...         prefill token counts to plan (default 128,512)\n"
    "  --decode C,...          decode contexts; the largest is planned (default 128,512)\n"
    "  --batch B,...           batch sizes (default 1)\n"
    "  --target NAME|FILE      the target description (default: this GPU's)\n"
    "  --repeats N             timed runs per candidate (default 20)\n"
    "  --max-candidates N      candidates per region, the default tactic included (default\n"
    "                          256); cuBLASLt's heuristic is asked for as many configurations\n"
    "  --freeze                fail when any region still has to be tuned\n"
    "  --prefill-logits all|last\n"
    "                          plan the prefill phases with every token's logits (default)\n"
    "                          or each sequence's last token's, as benchmark_transformer\n"
    "                          --prefill-logits does, so the keys match its plans\n"
    "  --inject-fault REGION:CANDIDATE\n"
    "                          a testing aid: when the worker reaches candidate number\n"
    "                          CANDIDATE (0 is the default tactic) of the first region to tune\n"
    "                          whose label or key contains REGION, it first runs a kernel that\n"
    "                          executes __trap(), which kills its CUDA context as a faulting\n"
    "                          candidate would; the candidate is recorded as a fault and the\n"
    "                          worker restarted\n"
    "  --export FILE           write the store as sorted textproto\n"
    "  --import FILE           add the entries of an exported file\n"
    "\n"
    "Exit status: 0 done; 1 some region without any valid candidate; 2 bad arguments, no GPU,\n"
    "an unusable store, or an --inject-fault that matched no region or was never reached;\n"
    "3 every region tuned, but a candidate faulted the GPU (recorded, its worker restarted).\n";

// A (work item, candidate index) pair.
using Candidate = std::pair<int, int>;

struct Args {
  bool help = false;
  std::string model;
  std::string cache;
  std::vector<int64_t> prefill = {128, 512};
  std::vector<int64_t> decode = {128, 512};
  std::vector<int64_t> batch = {1};
  std::string target;
  int repeats = 20;
  int max_candidates = 256;
  bool freeze = false;
  bool prefill_last_logits = false;
  std::optional<tuner::FaultInjection> inject_fault;
  std::string export_path, import_path;
  // Worker mode: the items to measure, the candidates to skip with why they faulted
  // (--skip ITEM:CANDIDATE:REASON, once per candidate) and where to inject a fault
  // (--inject-fault-at ITEM:CANDIDATE).
  bool worker = false;
  std::vector<int> items;
  std::map<Candidate, std::string> skip;
  std::optional<Candidate> inject_at;
  std::vector<std::string> raw;  // the arguments other than the worker's, for restarts
};

// "ITEM:CANDIDATE[:REST]" of the worker's flags; REST is empty when absent.
absl::StatusOr<std::pair<Candidate, std::string>> ParseCandidate(absl::string_view flag,
                                                                 absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits(':', 2));
  int item = 0, candidate = 0;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &item) ||
      !absl::SimpleAtoi(parts[1], &candidate)) {
    return absl::InvalidArgumentError(absl::StrCat("bad ", flag, " '", text, "'"));
  }
  return std::make_pair(Candidate{item, candidate},
                        parts.size() > 2 ? std::string(parts[2]) : std::string());
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int k = 1; k < argc; ++k) {
    std::string flag = argv[k];
    std::optional<std::string> value;
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "--freeze" || flag == "--worker" || flag == "--help") {
      if (value) return absl::InvalidArgumentError(absl::StrCat(flag, " takes no value"));
      (flag == "--freeze" ? args.freeze : flag == "--worker" ? args.worker : args.help) = true;
      if (flag == "--freeze") args.raw.push_back(flag);
      continue;
    }
    if (!value) {
      if (k + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      value = argv[++k];
    }
    // What a worker is given anew at each start, or only the parent acts on.
    if (flag != "--items" && flag != "--skip" && flag != "--inject-fault" &&
        flag != "--inject-fault-at") {
      args.raw.push_back(flag);
      args.raw.push_back(*value);
    }
    if (flag == "--model") {
      args.model = *value;
    } else if (flag == "--cache") {
      args.cache = *value;
    } else if (flag == "--prefill") {
      TP_ASSIGN_OR_RETURN(args.prefill, tools::PositiveList(flag, *value));
    } else if (flag == "--decode") {
      TP_ASSIGN_OR_RETURN(args.decode, tools::PositiveList(flag, *value));
    } else if (flag == "--batch") {
      TP_ASSIGN_OR_RETURN(args.batch, tools::PositiveList(flag, *value));
    } else if (flag == "--target") {
      args.target = *value;
    } else if (flag == "--repeats" || flag == "--max-candidates") {
      TP_ASSIGN_OR_RETURN(const int64_t v, tools::PositiveInt(flag, *value));
      (flag == "--repeats" ? args.repeats : args.max_candidates) =
          static_cast<int>(std::min<int64_t>(v, 1 << 20));
    } else if (flag == "--prefill-logits") {
      TP_ASSIGN_OR_RETURN(args.prefill_last_logits, tools::PrefillLastTokenLogits(flag, *value));
    } else if (flag == "--export") {
      args.export_path = *value;
    } else if (flag == "--import") {
      args.import_path = *value;
    } else if (flag == "--items") {
      for (absl::string_view part : absl::StrSplit(*value, ',', absl::SkipEmpty())) {
        int v = 0;
        if (!absl::SimpleAtoi(part, &v)) return absl::InvalidArgumentError("bad --items");
        args.items.push_back(v);
      }
    } else if (flag == "--skip") {
      TP_ASSIGN_OR_RETURN(auto skipped, ParseCandidate(flag, *value));
      args.skip[skipped.first] = skipped.second;
    } else if (flag == "--inject-fault-at") {
      TP_ASSIGN_OR_RETURN(auto at, ParseCandidate(flag, *value));
      args.inject_at = at.first;
    } else if (flag == "--inject-fault") {
      TP_ASSIGN_OR_RETURN(args.inject_fault, tuner::ParseFaultInjection(*value));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
  }
  if (args.help) return args;
  if (args.cache.empty()) return absl::InvalidArgumentError("--cache is required");
  const bool store_only = !args.export_path.empty() || !args.import_path.empty();
  if (store_only && !args.model.empty()) {
    return absl::InvalidArgumentError("--export and --import work on the store alone; no --model");
  }
  if (!args.export_path.empty() && !args.import_path.empty()) {
    return absl::InvalidArgumentError("--export and --import: one at a time");
  }
  if (!store_only && args.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (store_only && args.inject_fault) {
    return absl::InvalidArgumentError(
        "--inject-fault needs regions to tune, not --export/--import");
  }
  return args;
}

// One region and family to measure.
struct Item {
  int plan = 0, phase = 0, step = 0;
  std::string family;
  planner::TacticKey key;
  std::string label;  // "decode B=1 l0.qkv linear / gemv"
};

// The plans and the regions to tune, in a deterministic order (parent and worker agree).
struct Work {
  std::vector<planner::proto::ExecutionPlan> plans;
  std::vector<std::vector<std::unique_ptr<ir::Graph>>> graphs;  // [plan][phase]
  std::vector<std::vector<std::unique_ptr<kernels::BoundGraph>>> bound;
  std::vector<Item> items;  // one per distinct key
  // [plan][phase][step]: the index of the item of each family that can implement the step
  // (the cost model's family first).
  std::vector<std::vector<std::vector<std::vector<int>>>> step_items;
};

absl::StatusOr<Work> Collect(const Args& args, const targets::TargetDescription& target,
                             const std::string& environment) {
  TP_ASSIGN_OR_RETURN(models::ModelConfig config, tools::LoadModelArgument(args.model));
  const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
  Work work;
  std::set<planner::TacticKey> seen;
  for (int64_t batch : args.batch) {
    planner::PlanOptions options =
        tools::BenchmarkPlanOptions(args.prefill, args.decode, batch, args.prefill_last_logits);
    options.environment = environment;
    TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                        planner::BuildExecutionPlan(config, target, options, nullptr));
    const int p = static_cast<int>(work.plans.size());
    work.plans.push_back(std::move(plan));
    work.graphs.emplace_back();
    work.bound.emplace_back();
    work.step_items.emplace_back();
    const planner::proto::ExecutionPlan& stored = work.plans.back();
    for (int f = 0; f < stored.phases_size(); ++f) {
      const planner::proto::Phase& phase = stored.phases(f);
      TP_ASSIGN_OR_RETURN(ir::Graph g, ir::GraphFromProto(phase.graph()));
      work.graphs[p].push_back(std::make_unique<ir::Graph>(std::move(g)));
      kernels::ShapeBindings bindings;
      for (const auto& b : phase.bindings()) bindings[b.symbol()] = b.extent();
      TP_ASSIGN_OR_RETURN(
          kernels::BoundGraph bound,
          kernels::BoundGraph::Create(*work.graphs[p].back(), bindings, phase.context()));
      work.bound[p].push_back(std::make_unique<kernels::BoundGraph>(std::move(bound)));
      const kernels::BoundGraph& bg = *work.bound[p].back();
      const ir::Phase ir_phase = phase.kind() == planner::proto::Phase::KIND_PREFILL
                                     ? ir::Phase::kPrefill
                                     : ir::Phase::kDecode;
      std::map<planner::TacticKey, int> index_of;
      for (size_t i = 0; i < work.items.size(); ++i)
        index_of[work.items[i].key] = static_cast<int>(i);
      work.step_items[p].emplace_back();
      for (int s = 0; s < phase.steps_size(); ++s) {
        const kernels::BoundRegion region(bg, phase.steps(s).region());
        std::vector<int>& of_step = work.step_items[p].back().emplace_back();
        std::vector<const kernels::KernelFamily*> families = registry.FamiliesFor(region.kind());
        std::stable_partition(families.begin(), families.end(),
                              [&](const kernels::KernelFamily* f) {
                                return f->name() == phase.steps(s).tactic().family();
                              });
        for (const kernels::KernelFamily* family : families) {
          if (family->launch_kind() == kernels::LaunchKind::kNothing ||
              !family->CanImplement(region, target).ok()) {
            continue;
          }
          planner::TacticKey key;
          key.environment = environment;
          key.region_signature = planner::RegionSignature(region);
          key.shape_bucket = kernels::BindingsString(bg.bindings());
          key.phase = ir_phase;
          key.family = std::string(family->name());
          key.family_version = family->version();
          if (!seen.insert(key).second) {
            of_step.push_back(index_of.at(key));
            continue;
          }
          index_of[key] = static_cast<int>(work.items.size());
          of_step.push_back(static_cast<int>(work.items.size()));
          work.items.push_back({p, f, s, key.family, key,
                                absl::StrCat(phase.name(), " ", phase.steps(s).name(), " ",
                                             region.kind(), " / ", family->name())});
        }
      }
    }
  }
  return work;
}

// The device, its target, the compiler and the environment measurements are keyed by; the
// parent and the worker open them alike, so both compute the same keys.
struct Gpu {
  std::unique_ptr<device::Device> device;
  targets::TargetDescription target;
  std::unique_ptr<kernels::NvrtcCompiler> compiler;
  tuner::Environment environment;
};

absl::StatusOr<Gpu> OpenGpu(const Args& args) {
  Gpu gpu;
  TP_ASSIGN_OR_RETURN(gpu.device, device::Device::Open(0));
  TP_ASSIGN_OR_RETURN(gpu.target, runtime::gpu::ChooseTarget(args.target, gpu.device.get()));
  TP_ASSIGN_OR_RETURN(gpu.compiler, kernels::NvrtcCompiler::Create({}));
  TP_ASSIGN_OR_RETURN(gpu.environment,
                      tuner::DetectEnvironment(*gpu.device, *gpu.compiler, gpu.target));
  return gpu;
}

// One line of text: a reason as the worker protocol carries it.
std::string OneLine(absl::string_view text) {
  std::string line(text);
  std::replace(line.begin(), line.end(), '\n', ' ');
  return line;
}

// The worker: measures the given items and records each in the store. Protocol on stdout,
// one line each: "begin ITEM COUNT", "candidate ITEM C" before candidate C runs, "fault
// ITEM C PARAMS REASON" when it faulted the GPU (the worker then exits with status 2), "done
// ITEM CANDIDATES VALID BEST_US DEFAULT_US WINNER"; any other line is a note for the user.
absl::StatusOr<int> RunWorker(const Args& args) {
  TP_ASSIGN_OR_RETURN(Gpu gpu, OpenGpu(args));
  const device::Device* const device = gpu.device.get();
  const targets::TargetDescription& target = gpu.target;
  const tuner::Environment& environment = gpu.environment;
  TP_ASSIGN_OR_RETURN(Work work, Collect(args, target, environment.Fingerprint()));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<kernels::StepLauncher> launcher,
                      kernels::StepLauncher::Create(*device, {}));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<tuner::TacticStore> store,
                      tuner::TacticStore::Open(args.cache, {}));
  tuner::RegionTuner region_tuner(*launcher, target);
  const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
  for (int index : args.items) {
    if (index < 0 || index >= static_cast<int>(work.items.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no item ", index));
    }
    const Item& item = work.items[static_cast<size_t>(index)];
    const planner::proto::Phase& phase = work.plans[item.plan].phases(item.phase);
    const kernels::BoundRegion region(*work.bound[item.plan][item.phase],
                                      phase.steps(item.step).region());
    const kernels::KernelFamily& family = *registry.Find(item.family);
    absl::StatusOr<std::vector<kernels::Tactic>> listed =
        region_tuner.Candidates(family, region, args.max_candidates);
    if (!listed.ok()) {
      std::printf("%s: no library configurations (%s); measuring the family's own candidates\n",
                  item.label.c_str(), OneLine(listed.status().message()).c_str());
      listed = tuner::EnumerateCandidates(family, region, target, args.max_candidates);
    }
    const std::vector<kernels::Tactic>& all = *listed;
    std::printf("begin %d %zu\n", index, all.size());
    std::fflush(stdout);
    // Candidates that faulted an earlier worker are recorded, not run again.
    std::vector<kernels::Tactic> run;
    std::vector<int> run_index;
    std::vector<tuner::CandidateMeasurement> faulted;
    tuner::TuneOptions options;
    for (size_t c = 0; c < all.size(); ++c) {
      const Candidate candidate{index, static_cast<int>(c)};
      if (auto it = args.skip.find(candidate); it != args.skip.end()) {
        faulted.push_back(
            {all[c], tuner::CandidateStatus::kFault,
             absl::StrCat("faulted the GPU: the worker measuring it died: ", it->second), 0});
        continue;
      }
      if (args.inject_at == candidate) options.inject_fault = static_cast<int>(run.size());
      run.push_back(all[c]);
      run_index.push_back(static_cast<int>(c));
    }
    region_tuner.Precompile(family, region, run);
    options.repeats = args.repeats;
    options.rotate_bytes = 2 * device->properties().l2_bytes;
    options.graph_replay = phase.kind() == planner::proto::Phase::KIND_DECODE;
    int current = -1;  // the candidate running, an index into `all`
    absl::StatusOr<std::vector<tuner::CandidateMeasurement>> measured =
        region_tuner.Tune(region, family, run, options, [&](int i) {
          current = run_index[static_cast<size_t>(i)];
          std::printf("candidate %d %d\n", index, current);
          std::fflush(stdout);
        });
    if (!measured.ok()) {
      if (current >= 0) {
        std::printf("fault %d %d %s %s\n", index, current,
                    all[static_cast<size_t>(current)].ParamsString().c_str(),
                    OneLine(measured.status().message()).c_str());
        std::fflush(stdout);
      }
      return measured.status();
    }
    tuner::RegionMeasurement m;
    m.key = item.key;
    m.environment = environment;
    m.candidates = *std::move(measured);
    m.candidates.insert(m.candidates.end(), faulted.begin(), faulted.end());
    tuner::ChooseWinner(m, !run.empty() && run_index[0] == 0);
    int valid = 0;
    for (const tuner::CandidateMeasurement& c : m.candidates) {
      if (c.status == tuner::CandidateStatus::kOk) ++valid;
    }
    TP_RETURN_IF_ERROR(store->Record(m));
    std::printf("done %d %zu %d %.4f %.4f %s\n", index, m.candidates.size(), valid, m.winner_us,
                m.default_us, m.winner ? m.winner->ParamsString().c_str() : "-");
    std::fflush(stdout);
  }
  return kExitOk;
}

// The candidate a worker was measuring when it died, and how it ended: "exit 2" or "signal
// 11 (Segmentation fault)".
struct Death {
  Candidate candidate;
  std::string how;
};

// Runs a worker over `items`, without the candidates of `skip` (each recorded as a fault
// with its reason), injecting a fault at `inject_at` when set; returns where it died, or
// nullopt when it finished. Progress lines go to `on_line`.
absl::StatusOr<std::optional<Death>> SpawnWorker(
    const char* self, const Args& args, const std::vector<int>& items,
    const std::map<Candidate, std::string>& skip, const std::optional<Candidate>& inject_at,
    const std::function<void(const std::string&)>& on_line) {
  std::vector<std::string> argv_s = {self, "--worker"};
  argv_s.insert(argv_s.end(), args.raw.begin(), args.raw.end());
  argv_s.push_back("--items");
  argv_s.push_back(absl::StrJoin(items, ","));
  for (const auto& [candidate, reason] : skip) {
    argv_s.push_back("--skip");
    argv_s.push_back(absl::StrCat(candidate.first, ":", candidate.second, ":", reason));
  }
  if (inject_at.has_value()) {
    argv_s.push_back("--inject-fault-at");
    argv_s.push_back(absl::StrCat(inject_at->first, ":", inject_at->second));
  }
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, self, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("cannot start the worker ", self));
  }
  FILE* in = fdopen(fds[0], "r");
  std::optional<Candidate> current;
  char line[4096];
  while (std::fgets(line, sizeof(line), in) != nullptr) {
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    std::vector<std::string> words = absl::StrSplit(text, ' ');
    int a = 0, b = 0;
    if (words.size() >= 3 && words[0] == "candidate" && absl::SimpleAtoi(words[1], &a) &&
        absl::SimpleAtoi(words[2], &b)) {
      current = Candidate{a, b};
    } else if (words.size() >= 2 && words[0] == "done") {
      current.reset();
    }
    on_line(text);
  }
  fclose(in);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::optional<Death>();
  const std::string how = WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                            : absl::StrCat("signal ", WTERMSIG(status), " (",
                                                           strsignal(WTERMSIG(status)), ")");
  if (!current.has_value()) {
    return absl::InternalError(absl::StrCat("the worker stopped (", how, ") outside a candidate"));
  }
  return Death{*current, how};
}

absl::StatusOr<int> Run(const Args& args, const char* self) {
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (!args.export_path.empty() || !args.import_path.empty()) {
    TP_ASSIGN_OR_RETURN(std::unique_ptr<tuner::TacticStore> store,
                        tuner::TacticStore::Open(args.cache, {}));
    for (const std::string& w : store->warnings()) std::cerr << "warning: " << w << "\n";
    if (!args.export_path.empty()) {
      TP_RETURN_IF_ERROR(store->Export(args.export_path));
      std::cout << "exported " << store->num_winners() << " winners to " << args.export_path
                << "\n";
    } else {
      TP_RETURN_IF_ERROR(store->Import(args.import_path));
      std::cout << "imported " << args.import_path << ": the store holds " << store->num_winners()
                << " winners\n";
    }
    return kExitOk;
  }
  TP_ASSIGN_OR_RETURN(Gpu gpu, OpenGpu(args));
  const device::Device* const device = gpu.device.get();
  const targets::TargetDescription& target = gpu.target;
  const tuner::Environment& environment = gpu.environment;
  // What the store already answers (a file that does not exist yet answers nothing; the
  // worker creates it).
  std::unique_ptr<tuner::TacticStore> store;
  std::error_code ec;
  if (std::filesystem::exists(args.cache, ec)) {
    tuner::TacticStore::Options store_options;
    store_options.read_only = true;
    TP_ASSIGN_OR_RETURN(store, tuner::TacticStore::Open(args.cache, store_options));
    for (const std::string& w : store->warnings()) std::cerr << "warning: " << w << "\n";
  }
  TP_ASSIGN_OR_RETURN(Work work, Collect(args, target, environment.Fingerprint()));
  std::vector<int> todo;
  for (size_t i = 0; i < work.items.size(); ++i) {
    if (store == nullptr || !store->Lookup(work.items[i].key).has_value()) {
      todo.push_back(static_cast<int>(i));
    }
  }
  std::cout << absl::StrFormat(
      "autotune %s on %s: %d plans, %d regions (distinct keys), %d already in %s, %d to tune\n",
      args.model, device->Label(), work.plans.size(), work.items.size(),
      work.items.size() - todo.size(), args.cache, todo.size());
  std::cout << "environment: " << environment.Fingerprint() << "\n";
  if (args.freeze && !todo.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--freeze: ", todo.size(), " regions have no measured tactic, e.g. ",
                     work.items[static_cast<size_t>(todo.front())].key.ToString()));
  }
  if (store != nullptr && !store->warnings().empty() && !todo.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tactic store ", args.cache, " cannot be written (see the warnings)"));
  }
  store.reset();  // the worker writes

  // --inject-fault: the first region to tune that matches.
  std::optional<Candidate> inject_at;
  if (args.inject_fault.has_value()) {
    for (int index : todo) {
      const Item& item = work.items[static_cast<size_t>(index)];
      if (absl::StrContains(item.label, args.inject_fault->region) ||
          absl::StrContains(item.key.ToString(), args.inject_fault->region)) {
        inject_at = Candidate{index, args.inject_fault->candidate};
        break;
      }
    }
    if (!inject_at.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--inject-fault: no region to tune has '", args.inject_fault->region,
          "' in its label or key",
          todo.empty() ? " (none is left to tune)"
                       : absl::StrCat(" (labels read like '",
                                      work.items[static_cast<size_t>(todo.front())].label, "')")));
    }
    std::cout << "injecting a fault (testing aid) at candidate " << inject_at->second << " of "
              << work.items[static_cast<size_t>(inject_at->first)].label << "\n";
  }

  // Measure, restarting the worker without a candidate that killed it.
  std::map<Candidate, std::string> skip;         // faulted candidates and why
  std::map<Candidate, std::string> fault_notes;  // "PARAMS REASON" from the worker's fault lines
  std::map<int, int> candidate_counts;           // item -> candidates, from "begin" lines
  std::vector<int> remaining = todo;
  int done = 0, incomplete = 0;
  std::map<int, std::pair<double, double>> measured;  // item -> (best, cost-model pick) us
  while (!remaining.empty()) {
    auto on_line = [&](const std::string& line) {
      std::vector<std::string> w = absl::StrSplit(line, ' ');
      if (w.size() >= 7 && w[0] == "done") {
        int index = 0, candidates = 0, valid = 0;
        double best = 0, def = 0;
        (void)absl::SimpleAtoi(w[1], &index);
        (void)absl::SimpleAtoi(w[2], &candidates);
        (void)absl::SimpleAtoi(w[3], &valid);
        (void)absl::SimpleAtod(w[4], &best);
        (void)absl::SimpleAtod(w[5], &def);
        ++done;
        if (valid == 0) ++incomplete;
        measured[index] = {best, def};
        const Item& item = work.items[static_cast<size_t>(index)];
        std::cout << absl::StrFormat(
            "[%3d/%d] %-58s %4d candidates %4d valid  best %9.2f us  cost-model pick %9.2f us"
            "%s  %s\n",
            done, todo.size(), item.label, candidates, valid, best, def,
            def > 0 && best > 0 ? absl::StrFormat("  (%.2fx)", def / best) : "", w[6]);
      } else if (w.size() >= 3 && w[0] == "begin") {
        int index = 0, count = 0;
        if (absl::SimpleAtoi(w[1], &index) && absl::SimpleAtoi(w[2], &count)) {
          candidate_counts[index] = count;
        }
      } else if (w.size() >= 4 && w[0] == "fault") {
        int index = 0, candidate = 0;
        if (absl::SimpleAtoi(w[1], &index) && absl::SimpleAtoi(w[2], &candidate)) {
          fault_notes[{index, candidate}] = absl::StrJoin(w.begin() + 3, w.end(), " ");
        }
      } else if (!line.empty() && w[0] != "begin" && w[0] != "candidate") {
        std::cout << "  worker: " << line << "\n";
      }
    };
    TP_ASSIGN_OR_RETURN(std::optional<Death> died,
                        SpawnWorker(self, args, remaining, skip, inject_at, on_line));
    if (!died.has_value()) break;
    const Candidate at = died->candidate;
    const std::string& label = work.items[static_cast<size_t>(at.first)].label;
    // The worker's own account (the CUDA error) when it gave one, else how it ended.
    std::string reason = died->how;
    if (auto it = fault_notes.find(at); it != fault_notes.end()) {
      const size_t space = it->second.find(' ');
      reason = absl::StrCat(space == std::string::npos ? "" : it->second.substr(space + 1), " (",
                            died->how, ")");
    }
    std::cout << "  the worker died (" << died->how << ") measuring candidate " << at.second
              << " of " << label << "; restarting without it\n";
    skip[at] = reason;
    if (inject_at == at) inject_at.reset();
    auto it = std::find(remaining.begin(), remaining.end(), at.first);
    remaining.erase(remaining.begin(), it);
  }
  std::cout << absl::StrFormat(
      "tuned %d regions in %.1f s (%d without any valid candidate, %d candidates faulted the "
      "GPU)\n",
      done, seconds(), incomplete, skip.size());
  for (const auto& [at, reason] : skip) {
    auto note = fault_notes.find(at);
    std::cout << absl::StrFormat(
        "  faulted: %s, candidate %d%s: %s\n", work.items[static_cast<size_t>(at.first)].label,
        at.second,
        note == fault_notes.end()
            ? ""
            : absl::StrCat(" (", note->second.substr(0, note->second.find(' ')), ")"),
        reason);
  }
  // Every step of every phase, from what this run measured: the cost model's family and
  // tactic against the fastest family's winner.
  if (!measured.empty()) {
    std::cout << absl::StrFormat("%-26s %6s %18s %14s %8s\n", "phase", "steps",
                                 "cost-model plan us", "tuned plan us", "speedup");
    for (size_t p = 0; p < work.plans.size(); ++p) {
      for (int f = 0; f < work.plans[p].phases_size(); ++f) {
        double cost = 0, tuned = 0;
        int steps = 0;
        bool complete = true;
        for (const std::vector<int>& of_step : work.step_items[p][static_cast<size_t>(f)]) {
          if (of_step.empty()) continue;  // a view
          auto first = measured.find(of_step.front());
          if (first == measured.end() || first->second.second <= 0) {
            complete = false;
            continue;
          }
          double best = first->second.first;
          for (int item : of_step) {
            auto it = measured.find(item);
            if (it != measured.end() && it->second.first > 0)
              best = std::min(best, it->second.first);
          }
          cost += first->second.second;
          tuned += best;
          ++steps;
        }
        std::cout << absl::StrFormat("%-26s %6d %18.1f %14.1f %7.2fx%s\n",
                                     work.plans[p].phases(f).name(), steps, cost, tuned,
                                     tuned > 0 ? cost / tuned : 0.0,
                                     complete ? "" : "  (steps measured earlier left out)");
      }
    }
    std::cout << "(sums of the steps' medians measured one region at a time, cold L2; launch "
                 "gaps not included)\n";
  }
  if (inject_at.has_value()) {
    const Item& item = work.items[static_cast<size_t>(inject_at->first)];
    auto count = candidate_counts.find(inject_at->first);
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject-fault: nothing faulted: ", item.label, " has ",
        count == candidate_counts.end() ? std::string("no") : absl::StrCat(count->second),
        " candidates, no candidate ", inject_at->second));
  }
  if (incomplete > 0) return kExitIncomplete;
  return skip.empty() ? kExitOk : kExitFaulted;
}

}  // namespace
}  // namespace tileplan

int main(int argc, char** argv) {
  absl::StatusOr<tileplan::Args> args = tileplan::ParseArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "autotune_regions: " << args.status().message() << "\n"
              << tileplan::kUsage << "\n";
    return tileplan::kExitBad;
  }
  if (args->help) {
    std::cout << tileplan::kUsage << "\n\n" << tileplan::kHelp;
    return tileplan::kExitOk;
  }
  absl::StatusOr<int> result =
      args->worker ? tileplan::RunWorker(*args) : tileplan::Run(*args, "/proc/self/exe");
  if (!result.ok()) {
    std::cerr << "autotune_regions: " << result.status().message() << "\n";
    return tileplan::kExitBad;
  }
  return *result;
}
