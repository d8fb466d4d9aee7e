// benchmark_transformer: plans a decoder model for a GPU, shows the plan, and on a GPU runs
// it with the GPU runtime and reports prefill and decode latencies (medians of CUDA-event
// timings of replayed CUDA Graphs) beside the physical floors.
//
//   benchmark_transformer --model DIR|NAME [--target NAME|ALIAS|FILE] [--batch N]
//       [--prefill T,T,...] [--decode C,C,...] [--max-context N] [--random-weights]
//       [--iters N] [--warmup N] [--no-cuda-graphs] [--json FILE] [--profile]
//       [--show-plan[=table|textproto|json]] [--time-planning[=RUNS]] [--tactic-cache FILE]
//       [--freeze] [--prefill-logits all|last]
//       [--print-after-all] [--print-after=PASS[,PASS...]]
//
// --model      a checkpoint directory (its config.json and weights) or a bundled config
//              name (random weights of the real size)
// --random-weights  random weights even when DIR has a checkpoint
// --target     a bundled target (h200, sm_90, ...) or a .textproto file; default: the GPU's
//              own (runtime/gpu/device_target.h), or h200 when there is no GPU
// --iters, --warmup  timed and untimed replays per measurement (default 100 and 10)
// --no-cuda-graphs   launch every kernel from the host (to see what graphs save)
// --pdl        never|decode|always: which phases use programmatic dependent launch, each
//              kernel's launch overlapping the previous kernel's tail (sm_90+; default decode)
// --json       also write the measurements as JSON
// --profile    after each measurement, time every step on its own (host launches between
//              CUDA events) and print where the time goes, by kind and family
// --batch      batch size of every phase (default 1)
// --prefill    prompt lengths, one prefill phase each (default 128,512,2048)
// --decode     context lengths of the decode benchmark (default 128,512,2048); the plan has
//              one decode phase per batch, estimated at the largest of them
// --max-context  KV-cache rows per sequence (default: the largest prefill or decode length)
// --show-plan  prints the plan (docs/plan.md): a table by default, or textproto / json
// --time-planning  plans RUNS times (default 20) and prints the median and fastest wall time
//              and the median CPU time per plan
// --tactic-cache   the SQLite tactic store autotune_regions fills (docs/tuner.md): steps
//              whose region it measured on this GPU (same environment) take the measured
//              tactic (source 'tuned'); --freeze makes any step without one an error
// --prefill-logits  all (default): prefill phases compute every token's logits, as the
//              PyTorch references' forward does; last: each sequence's last token's only
//              (what generation needs; the planner's last_token_logits pass)
// --print-after-all, --print-after=PASS  print the IR to stderr after the planner's passes,
//              for every phase (docs/planner.md)
//
// Without --show-plan or --time-planning the benchmark runs, and needs a GPU. With either of
// them the benchmark also runs when a GPU is present; without one it is skipped with a note.
// Decode at context C times one decode step whose caches hold C - 1 tokens of a random
// prompt (put there by a prefill when a bucket holds C - 1 tokens, else by decode steps).
//
// Exit status: 0 done; 2 bad arguments, an unplannable model, no GPU for a benchmark-only
// run, a runtime error, or a request this build cannot serve (a tactic store).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
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
#include "device/device.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "models/config.h"
#include "planner/plan_builder.h"
#include "planner/plan_text.h"
#include "runtime/gpu/device_target.h"
#include "runtime/gpu/gpu_runtime.h"
#include "targets/target.h"
#include "tools/tool_support.h"
#include "tuner/environment.h"
#include "tuner/tactic_store.h"

namespace tileplan {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitBad = 2;

constexpr const char* kUsage =
    "usage: benchmark_transformer --model DIR|NAME [--target NAME|FILE] [--batch N]\n"
    "           [--prefill T,...] [--decode C,...] [--max-context N] [--random-weights]\n"
    "           [--iters N] [--warmup N] [--no-cuda-graphs] [--pdl=never|decode|always] [--json "
    "FILE]\n"
    "           [--profile] [--prefill-logits all|last]\n"
    "           [--show-plan[=table|textproto|json]] [--time-planning[=RUNS]]\n"
    "           [--tactic-cache FILE [--freeze]] [--print-after-all]\n"
    "           [--print-after=PASS[,PASS...]]";

struct Args {
  std::string model;
  std::string target;  // empty: the GPU's own, else h200
  bool random_weights = false;
  int iters = 100;
  int warmup = 10;
  bool cuda_graphs = true;
  std::string json;
  bool profile = false;
  std::string pdl = "decode";
  int64_t batch = 1;
  std::vector<int64_t> prefill = {128, 512, 2048};
  std::vector<int64_t> decode = {128, 512, 2048};
  int64_t max_context = 0;
  std::optional<planner::PlanFormat> show_plan;
  int time_planning_runs = 0;
  std::string tactic_cache;
  bool freeze = false;
  bool prefill_last_logits = false;
  bool print_after_all = false;
  std::vector<std::string> print_after;
};

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
    if (flag == "--freeze") {
      if (value) return absl::InvalidArgumentError("--freeze takes no value");
      args.freeze = true;
      continue;
    }
    if (flag == "--profile") {
      if (value) return absl::InvalidArgumentError("--profile takes no value");
      args.profile = true;
      continue;
    }
    if (flag == "--random-weights" || flag == "--no-cuda-graphs") {
      if (value) return absl::InvalidArgumentError(absl::StrCat(flag, " takes no value"));
      (flag == "--random-weights" ? args.random_weights : args.cuda_graphs) =
          flag == "--random-weights";
      continue;
    }
    if (flag == "--time-planning") {
      int64_t runs = 20;
      if (value) {
        TP_ASSIGN_OR_RETURN(runs, tools::PositiveInt(flag, *value));
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
      TP_ASSIGN_OR_RETURN(args.batch, tools::PositiveInt(flag, *value));
    } else if (flag == "--prefill") {
      TP_ASSIGN_OR_RETURN(args.prefill, tools::PositiveList(flag, *value));
    } else if (flag == "--decode") {
      TP_ASSIGN_OR_RETURN(args.decode, tools::PositiveList(flag, *value));
    } else if (flag == "--max-context") {
      TP_ASSIGN_OR_RETURN(args.max_context, tools::PositiveInt(flag, *value));
    } else if (flag == "--print-after") {
      args.print_after = absl::StrSplit(*value, ',', absl::SkipEmpty());
      if (args.print_after.empty()) {
        return absl::InvalidArgumentError("--print-after needs a pass name");
      }
    } else if (flag == "--iters" || flag == "--warmup") {
      TP_ASSIGN_OR_RETURN(const int64_t n, tools::PositiveInt(flag, *value));
      (flag == "--iters" ? args.iters : args.warmup) =
          static_cast<int>(std::min<int64_t>(n, 100000));
    } else if (flag == "--pdl") {
      args.pdl = *value;
      runtime::gpu::GpuOptions check;
      TP_RETURN_IF_ERROR(runtime::gpu::ParseProgrammaticLaunch(args.pdl, check));
    } else if (flag == "--json") {
      args.json = *value;
    } else if (flag == "--tactic-cache") {
      args.tactic_cache = *value;
    } else if (flag == "--prefill-logits") {
      TP_ASSIGN_OR_RETURN(args.prefill_last_logits, tools::PrefillLastTokenLogits(flag, *value));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
  }
  if (args.model.empty()) return absl::InvalidArgumentError("--model is required");
  return args;
}

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
};

Stats Summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  Stats s;
  s.median = n % 2 == 1 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  s.p10 = ms[n / 10];
  s.p90 = ms[std::min(n - 1, n * 9 / 10)];
  return s;
}

// Token ids spread over the vocabulary (a fixed LCG: the same prompts every run).
std::vector<int32_t> Prompt(int64_t count, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  uint32_t x = seed * 2654435761u + 12345u;
  for (int32_t& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  return ids;
}

bool HasCheckpoint(const std::string& model) {
  std::error_code ec;
  const std::filesystem::path dir(model);
  return std::filesystem::is_directory(dir, ec) &&
         (std::filesystem::exists(dir / "model.safetensors", ec) ||
          std::filesystem::exists(dir / "model.safetensors.index.json", ec));
}

// Prints the steps' time grouped by kind and family, largest first, and the slowest steps.
void PrintProfile(const std::string& title,
                  const std::vector<runtime::gpu::GpuRuntime::StepTime>& steps) {
  std::map<std::string, std::pair<double, int>> groups;
  double total = 0;
  for (const auto& s : steps) {
    auto& g = groups[absl::StrCat(s.kind, " / ", s.family)];
    g.first += s.median_ms;
    ++g.second;
    total += s.median_ms;
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [key, g] : groups) {
    order.emplace_back(g.first, absl::StrFormat("  %-44s %4d steps %9.4f ms %5.1f%%", key, g.second,
                                                g.first, 100 * g.first / total));
  }
  std::sort(order.rbegin(), order.rend());
  std::cout << absl::StrFormat("profile %s: %d steps, %.4f ms summed\n", title, steps.size(),
                               total);
  for (const auto& [ms, line] : order) std::cout << line << "\n";
  std::vector<runtime::gpu::GpuRuntime::StepTime> slowest = steps;
  std::sort(slowest.begin(), slowest.end(),
            [](const auto& a, const auto& b) { return a.median_ms > b.median_ms; });
  for (size_t i = 0; i < std::min<size_t>(5, slowest.size()); ++i) {
    std::cout << absl::StrFormat("    step %3d %-20s %-22s %-18s %9.4f ms\n", slowest[i].step,
                                 slowest[i].name, slowest[i].kind, slowest[i].family,
                                 slowest[i].median_ms);
  }
}

struct Row {
  std::string phase;
  int64_t size = 0;
  Stats stats;
  double floor_ms = 0;
};

absl::StatusOr<int> Benchmark(const Args& args, const std::string& name,
                              const targets::TargetDescription& target,
                              const planner::proto::ExecutionPlan& plan,
                              const device::Device& device) {
  std::unique_ptr<models::Checkpoint> checkpoint;
  if (!args.random_weights && HasCheckpoint(args.model)) {
    TP_ASSIGN_OR_RETURN(checkpoint, models::Checkpoint::Open(args.model));
  }
  runtime::gpu::GpuOptions options;
  options.cuda_graphs = args.cuda_graphs;
  TP_RETURN_IF_ERROR(runtime::gpu::ParseProgrammaticLaunch(args.pdl, options));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::gpu::GpuRuntime> rt,
                      runtime::gpu::GpuRuntime::Create(device, plan, checkpoint.get(), options));
  const runtime::gpu::GpuRuntimeInfo& info = rt->info();
  const int64_t batch = args.batch;
  const int64_t vocab = rt->vocab_size();
  std::cout << absl::StrFormat(
      "benchmark %s on %s (target %s), batch %d, %s, %s weights\n"
      "setup %.2f s: %d kernels compiled or loaded in %.2f s, weights in %.2f s; device memory: "
      "weights %.1f MiB, KV cache %.1f MiB, arena %.1f MiB\n",
      name, device.Label(), target.name(), batch,
      absl::StrCat(args.cuda_graphs ? "CUDA graphs" : "host launches",
                   ", programmatic dependent launch: ", args.pdl),
      checkpoint ? "checkpoint" : "random", info.setup_seconds, info.kernels_compiled,
      info.compile_seconds, info.weights_seconds, info.weight_bytes / 1048576.0,
      info.state_bytes / 1048576.0, info.arena_bytes / 1048576.0);
  if (args.profile) {
    for (const std::string& line : info.gemm_algos) std::cout << "  cuBLASLt " << line << "\n";
  }

  // Floors: every weight byte and the KV rows read once at the achievable copy bandwidth
  // (decode); two flops per weight element per token at the achievable bf16 rate (prefill,
  // attention's own flops left out).
  const double bandwidth = target.achievable_memory_bandwidth_gbps() * 1e9;  // bytes/s
  const double flop_rate = target.achievable_bf16_tflops() * 1e12;
  const double weight_elements = static_cast<double>(info.weight_bytes) / 2.0;
  std::vector<Row> rows;
  for (int64_t t : args.prefill) {
    const std::vector<int32_t> ids = Prompt(batch * t, vocab, static_cast<uint32_t>(t));
    TP_ASSIGN_OR_RETURN(std::vector<double> ms,
                        rt->TimePrefill(ids, batch, args.warmup, args.iters));
    rows.push_back({"prefill", t, Summarize(ms),
                    1e3 * 2.0 * weight_elements * static_cast<double>(batch * t) / flop_rate});
    if (args.profile) {
      TP_ASSIGN_OR_RETURN(auto steps, rt->ProfilePrefill(batch, t, 20));
      PrintProfile(absl::StrCat("prefill T=", t), steps);
    }
  }
  for (int64_t c : args.decode) {
    // Fill the caches with c - 1 tokens of a prompt.
    if (c > 1) {
      const std::vector<int32_t> ids = Prompt(batch * (c - 1), vocab, static_cast<uint32_t>(c));
      absl::StatusOr<std::vector<float>> filled = rt->Prefill(ids, batch);
      if (!filled.ok()) {  // no bucket holds c - 1 tokens: decode them one by one
        TP_RETURN_IF_ERROR(rt->Reset());
        for (int64_t pos = 0; pos < c - 1; ++pos) {
          std::vector<int32_t> step(static_cast<size_t>(batch)), at(static_cast<size_t>(batch));
          for (int64_t b = 0; b < batch; ++b) {
            step[static_cast<size_t>(b)] = ids[static_cast<size_t>(b * (c - 1) + pos)];
            at[static_cast<size_t>(b)] = static_cast<int32_t>(pos);
          }
          TP_RETURN_IF_ERROR(rt->Decode(step, at).status());
        }
      }
    }
    TP_ASSIGN_OR_RETURN(std::vector<double> ms, rt->TimeDecode(batch, c, args.warmup, args.iters));
    const double kv_bytes = static_cast<double>(info.state_bytes) * static_cast<double>(c) /
                            static_cast<double>(rt->max_context());
    rows.push_back({"decode", c, Summarize(ms),
                    1e3 * (static_cast<double>(info.weight_bytes) + kv_bytes) / bandwidth});
    if (args.profile) {
      TP_ASSIGN_OR_RETURN(auto steps, rt->ProfileDecode(batch, 20));
      PrintProfile(absl::StrCat("decode context ", c), steps);
    }
  }

  std::cout << absl::StrFormat("%-8s %8s %10s %10s %10s %10s %8s\n", "phase", "T or ctx",
                               "median ms", "p10 ms", "p90 ms", "floor ms", "% floor");
  for (const Row& r : rows) {
    std::cout << absl::StrFormat("%-8s %8d %10.4f %10.4f %10.4f %10.4f %7.1f%%\n", r.phase, r.size,
                                 r.stats.median, r.stats.p10, r.stats.p90, r.floor_ms,
                                 100.0 * r.floor_ms / r.stats.median);
  }
  std::cout << absl::StrFormat(
      "(%d timed replays after %d warm-up ones each; floors at %.0f GB/s "
      "and %.0f TFLOP/s, the target's achievable figures)\n",
      args.iters, args.warmup, bandwidth / 1e9, flop_rate / 1e12);
  if (!args.json.empty()) {
    std::string json = absl::StrFormat(
        "{\n  \"model\": \"%s\",\n  \"device\": \"%s\",\n  \"target\": \"%s\",\n"
        "  \"batch\": %d,\n  \"cuda_graphs\": %s,\n  \"weights\": \"%s\",\n"
        "  \"iters\": %d,\n  \"prefill_logits\": \"%s\",\n  \"setup_seconds\": %.3f,\n"
        "  \"results\": [",
        name, device.properties().name, target.name(), batch, args.cuda_graphs ? "true" : "false",
        checkpoint ? "checkpoint" : "random", args.iters, args.prefill_last_logits ? "last" : "all",
        info.setup_seconds);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      json += absl::StrFormat(
          "%s\n    {\"phase\": \"%s\", \"size\": %d, \"median_ms\": %.6f, \"p10_ms\": %.6f, "
          "\"p90_ms\": %.6f, \"floor_ms\": %.6f}",
          i == 0 ? "" : ",", r.phase, r.size, r.stats.median, r.stats.p10, r.stats.p90, r.floor_ms);
    }
    json += "\n  ]\n}\n";
    std::ofstream out(args.json);
    out << json;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", args.json));
  }
  return kExitOk;
}

absl::StatusOr<int> Run(const Args& args) {
  if (args.freeze && args.tactic_cache.empty()) {
    return absl::InvalidArgumentError("--freeze needs --tactic-cache");
  }
  const bool plan_only = args.show_plan || args.time_planning_runs > 0;
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(0);
  if (!device.ok() && !plan_only) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.status().message(),
                     "; the benchmark needs a GPU (--show-plan prints the plan without one)"));
  }
  std::string name;
  TP_ASSIGN_OR_RETURN(models::ModelConfig config, tools::LoadModelArgument(args.model, &name));
  TP_ASSIGN_OR_RETURN(
      targets::TargetDescription target,
      runtime::gpu::ChooseTarget(args.target, device.ok() ? device->get() : nullptr));
  planner::PlanOptions options = tools::BenchmarkPlanOptions(
      args.prefill, args.decode, args.batch, args.prefill_last_logits, args.max_context);
  options.model_name = name;
  options.print.after_all = args.print_after_all;
  options.print.after = args.print_after;
  options.print.out = &std::cerr;

  // The tactic store answers for the environment it was measured in: this GPU's (without a
  // GPU nothing matches, and every step keeps the cost model's pick).
  std::unique_ptr<tuner::TacticStore> store;
  if (!args.tactic_cache.empty()) {
    tuner::TacticStore::Options store_options;
    store_options.read_only = true;
    store_options.freeze = args.freeze;
    TP_ASSIGN_OR_RETURN(store, tuner::TacticStore::Open(args.tactic_cache, store_options));
    for (const std::string& w : store->warnings()) std::cerr << "warning: " << w << "\n";
    tuner::Environment environment = tuner::FromTarget(target);
    if (device.ok()) {
      TP_ASSIGN_OR_RETURN(std::unique_ptr<kernels::NvrtcCompiler> compiler,
                          kernels::NvrtcCompiler::Create({}));
      TP_ASSIGN_OR_RETURN(environment, tuner::DetectEnvironment(**device, *compiler, target));
    }
    options.environment = environment.Fingerprint();
  }

  TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                      planner::BuildExecutionPlan(config, target, options, store.get()));
  if (store != nullptr && args.freeze && !store->misses().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--freeze: ", store->misses().size(), " lookups found no measured tactic in ",
                     args.tactic_cache, ", e.g. ", store->misses().front().ToString()));
  }
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
                          planner::BuildExecutionPlan(config, target, options, store.get()));
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
  if (!device.ok()) {
    std::cerr << "benchmark skipped: " << device.status().message() << "\n";
    return kExitOk;
  }
  return Benchmark(args, name, target, plan, **device);
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
