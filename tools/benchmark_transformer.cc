// benchmark_transformer: plans a decoder model for a described GPU and shows the plan; the
// GPU benchmark itself needs the runtime, which this build does not have yet.
//
//   benchmark_transformer --model DIR|NAME [--target NAME|ALIAS|FILE] [--batch N]
//       [--prefill T,T,...] [--decode C,C,...] [--max-context N]
//       [--show-plan[=table|textproto|json]] [--time-planning[=RUNS]] [--tactic-cache FILE]
//       [--print-after-all] [--print-after=PASS[,PASS...]]
//
// --model      a checkpoint directory (its config.json) or a bundled config name
// --target     a bundled target (h200, sm_90, ...) or a .textproto file; default h200
// --batch      batch size of every phase (default 1)
// --prefill    prompt lengths, one prefill phase each (default 128,512,2048)
// --decode     context lengths of the decode benchmark (default 128,512,2048); the plan has
//              one decode phase per batch, estimated at the largest of them
// --max-context  KV-cache rows per sequence (default: the largest prefill or decode length)
// --show-plan  prints the plan (docs/plan.md): a table by default, or textproto / json
// --time-planning  plans RUNS times (default 20) and prints the median and fastest wall time
//              and the median CPU time per plan
// --tactic-cache   the SQLite tactic store, which this build does not have yet
// --print-after-all, --print-after=PASS  print the IR to stderr after the planner's passes,
//              for every phase (docs/planner.md)
//
// Exit status: 0 the plan was shown or timed; 2 bad arguments, an unplannable model, or a
// request this build cannot serve (a GPU benchmark, a tactic store).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "models/config.h"
#include "planner/plan_builder.h"
#include "planner/plan_text.h"
#include "planner/target.h"

namespace tileplan {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitBad = 2;

constexpr const char* kUsage =
    "usage: benchmark_transformer --model DIR|NAME [--target NAME|FILE] [--batch N]\n"
    "           [--prefill T,...] [--decode C,...] [--max-context N]\n"
    "           [--show-plan[=table|textproto|json]] [--time-planning[=RUNS]]\n"
    "           [--tactic-cache FILE] [--print-after-all] [--print-after=PASS[,PASS...]]";

struct Args {
  std::string model;
  std::string target = "h200";
  int64_t batch = 1;
  std::vector<int64_t> prefill = {128, 512, 2048};
  std::vector<int64_t> decode = {128, 512, 2048};
  int64_t max_context = 0;
  std::optional<planner::PlanFormat> show_plan;
  int time_planning_runs = 0;
  std::string tactic_cache;
  bool print_after_all = false;
  std::vector<std::string> print_after;
};

absl::StatusOr<int64_t> PositiveInt(absl::string_view flag, absl::string_view text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " needs a positive integer, got '", text, "'"));
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> PositiveList(absl::string_view flag, absl::string_view text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    TP_ASSIGN_OR_RETURN(int64_t v, PositiveInt(flag, part));
    out.push_back(v);
  }
  return out;
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
    // Flags whose value is optional take it only after '='.
    if (flag == "--show-plan") {
      TP_ASSIGN_OR_RETURN(args.show_plan, planner::ParsePlanFormat(value.value_or("table")));
      continue;
    }
    if (flag == "--print-after-all") {
      if (value) return absl::InvalidArgumentError("--print-after-all takes no value");
      args.print_after_all = true;
      continue;
    }
    if (flag == "--time-planning") {
      int64_t runs = 20;
      if (value) {
        TP_ASSIGN_OR_RETURN(runs, PositiveInt(flag, *value));
      }
      args.time_planning_runs = static_cast<int>(std::min<int64_t>(runs, 10000));
      continue;
    }
    if (!value) {
      if (k + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("flag ", flag, " needs a value"));
      value = argv[++k];
    }
    if (flag == "--model") {
      args.model = *value;
    } else if (flag == "--target") {
      args.target = *value;
    } else if (flag == "--batch") {
      TP_ASSIGN_OR_RETURN(args.batch, PositiveInt(flag, *value));
    } else if (flag == "--prefill") {
      TP_ASSIGN_OR_RETURN(args.prefill, PositiveList(flag, *value));
    } else if (flag == "--decode") {
      TP_ASSIGN_OR_RETURN(args.decode, PositiveList(flag, *value));
    } else if (flag == "--max-context") {
      TP_ASSIGN_OR_RETURN(args.max_context, PositiveInt(flag, *value));
    } else if (flag == "--print-after") {
      args.print_after = absl::StrSplit(*value, ',', absl::SkipEmpty());
      if (args.print_after.empty()) {
        return absl::InvalidArgumentError("--print-after needs a pass name");
      }
    } else if (flag == "--tactic-cache") {
      args.tactic_cache = *value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
  }
  if (args.model.empty()) return absl::InvalidArgumentError("--model is required");
  return args;
}

// A checkpoint directory or config file when the path exists, else a bundled config.
absl::StatusOr<models::ModelConfig> LoadConfig(const std::string& model, std::string* name) {
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) {
    std::filesystem::path path = std::filesystem::path(model).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();
    *name = path.filename().string();
    return models::LoadModelConfig(model);
  }
  *name = model;
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(model);
  if (!config.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "--model ", model,
        " is neither an existing path nor a bundled config: ", config.status().message()));
  }
  return config;
}

absl::StatusOr<int> Run(const Args& args) {
  if (!args.tactic_cache.empty()) {
    return absl::UnimplementedError(
        "--tactic-cache: the SQLite tactic store is not available in this build yet; plans use "
        "the cost model (source 'cost model')");
  }
  if (!args.show_plan && args.time_planning_runs == 0) {
    return absl::UnimplementedError(
        "this build has no GPU runtime yet, so it cannot run the benchmark; --show-plan prints "
        "the plan and --time-planning times the planner");
  }
  std::string name;
  TP_ASSIGN_OR_RETURN(models::ModelConfig config, LoadConfig(args.model, &name));
  TP_ASSIGN_OR_RETURN(planner::TargetDescription target, planner::FindTarget(args.target));
  planner::PlanOptions options;
  options.model_name = name;
  options.prefill_tokens = args.prefill;
  options.prefill_batch = args.batch;
  options.decode_batches = {args.batch};
  int64_t longest = 0;
  for (int64_t t : args.prefill) longest = std::max(longest, t);
  for (int64_t c : args.decode) longest = std::max(longest, c);
  options.max_context = args.max_context > 0 ? args.max_context : longest;
  options.decode_context = *std::max_element(args.decode.begin(), args.decode.end());
  options.print.after_all = args.print_after_all;
  options.print.after = args.print_after;
  options.print.out = &std::cerr;

  TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                      planner::BuildExecutionPlan(config, target, options, nullptr));
  if (args.show_plan) {
    TP_ASSIGN_OR_RETURN(std::string text, planner::FormatPlan(plan, *args.show_plan));
    std::cout << text;
  }
  if (args.time_planning_runs > 0) {
    // Wall time, and the process's CPU time (planning is single-threaded), which stays
    // meaningful on a machine busy with other work.
    std::vector<double> wall_ms, cpu_ms;
    options.print = {};  // the IR was printed once, by the plan above
    for (int run = 0; run < args.time_planning_runs; ++run) {
      const auto start = std::chrono::steady_clock::now();
      const std::clock_t cpu_start = std::clock();
      TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan again,
                          planner::BuildExecutionPlan(config, target, options, nullptr));
      const std::clock_t cpu_end = std::clock();
      const auto end = std::chrono::steady_clock::now();
      wall_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
      cpu_ms.push_back(1000.0 * static_cast<double>(cpu_end - cpu_start) / CLOCKS_PER_SEC);
    }
    std::sort(wall_ms.begin(), wall_ms.end());
    std::sort(cpu_ms.begin(), cpu_ms.end());
    std::cout << absl::StrFormat(
        "planning %s for %s (%d phases), %d runs: median %.2f ms wall (fastest %.2f), median "
        "%.2f ms CPU\n",
        name, target.name(), plan.phases_size(), wall_ms.size(), wall_ms[wall_ms.size() / 2],
        wall_ms.front(), cpu_ms[cpu_ms.size() / 2]);
  }
  return kExitOk;
}

}  // namespace
}  // namespace tileplan

int main(int argc, char** argv) {
  absl::StatusOr<tileplan::Args> args = tileplan::ParseArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "benchmark_transformer: " << args.status().message() << "\n"
              << tileplan::kUsage << "\n";
    return tileplan::kExitBad;
  }
  absl::StatusOr<int> status = tileplan::Run(*args);
  if (!status.ok()) {
    std::cerr << "benchmark_transformer: " << status.status().message() << "\n";
    return tileplan::kExitBad;
  }
  return *status;
}
