// benchmark_transformer: plans a decoder model for a GPU, shows the plan, and on a GPU runs
// it with the GPU runtime and reports prefill and decode latencies (medians of CUDA-event
// timings of replayed CUDA Graphs) beside the physical floors. Flags: --help, README.md.
//
// Decode at context C times one decode step whose caches hold C - 1 tokens of a random
// prompt (put there by a prefill when a bucket holds C - 1 tokens, else by decode steps).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "device/device.h"
#include "models/config.h"
#include "models/safetensors.h"
#include "planner/plan_builder.h"
#include "planner/plan_text.h"
#include "planner/tactic_cache.h"
#include "runtime/gpu/device_target.h"
#include "runtime/gpu/gpu_runtime.h"
#include "runtime/gpu/tensor_parallel.h"
#include "targets/target.h"
#include "tools/common_flags.h"
#include "tools/flags.h"
#include "tools/gpu_flags.h"
#include "tuner/environment.h"
#include "tuner/store_lookups.h"
#include "tuner/tactic_store.h"

ABSL_FLAG(bool, random_weights, false, "random weights even when --model has a checkpoint");
ABSL_FLAG(tileplan::tools::PositiveInt, iters, tileplan::tools::PositiveInt{100},
          "timed replays per measurement");
ABSL_FLAG(tileplan::tools::PositiveInt, warmup, tileplan::tools::PositiveInt{10},
          "untimed replays before them");
ABSL_FLAG(std::string, json, "", "also write the measurements to this file as JSON");
ABSL_FLAG(bool, profile, false,
          "after each measurement, time every step on its own (host launches between CUDA "
          "events) and print where the time goes, by kind and family");
ABSL_FLAG(std::string, show_plan, "",
          "print the plan (docs/plan.md) and stop: table (identical layers folded), table-all, "
          "memory (the arena's buffers), svg (one phase's steps on the roofline and its arena; "
          "--svg-phase), textproto, json or binary; a bare --show-plan is --show-plan=table");
ABSL_FLAG(int, svg_phase, -1,
          "the phase --show-plan=svg draws, by its index in the plan (prefill phases in bucket "
          "order, then decode phases); -1: the first decode phase");
ABSL_FLAG(std::string, output, "",
          "write the plan to this file and stop (never benchmarks): in --show-plan's format "
          "when given, else by the name (.json json; .textproto, .txtpb, .pbtxt textproto; "
          ".binpb, .pb the binary wire format; .svg the picture; anything else the table); "
          "written whole or not at all; -o is short for it");
ABSL_FLAG(std::string, plan, "",
          "read the plan from this file (.json; .textproto, .txtpb, .pbtxt; .binpb, .pb) instead "
          "of planning: --show-plan and -o render or convert it; otherwise it runs on the GPU, "
          "--model naming the model it was planned for (its weights and the floors' geometry), "
          "the prefill buckets and batch the plan's");
ABSL_FLAG(std::optional<tileplan::tools::PositiveInt>, time_planning, std::nullopt,
          "plan this many times and print the median and fastest wall time and the median CPU "
          "time per plan; a bare --time-planning plans 20 times");

namespace tileplan {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitBad = 2;

constexpr char kUsage[] =
    "plans a decoder model for a GPU and prints the plan; on a GPU runs it\n"
    "and reports prefill and decode latencies (medians of replayed CUDA Graphs) beside the\n"
    "physical floors. Without --show-plan, --output, --time-planning or --print-keys the\n"
    "benchmark runs, and needs a GPU; with one of them the tool only plans (GPU or not), so\n"
    "the plan on stdout or in the file is never mixed with benchmark output. --plan FILE reads\n"
    "a plan written by -o instead of planning, to render, convert or run it. With\n"
    "--tactic-cache the steps whose key the store holds for this GPU take the measured tactic\n"
    "(source 'tuned'), and a line on stderr says how many lookups hit and, when none did, why.\n"
    "\n"
    "usage: benchmark_transformer --model DIR|FILE|NAME [--target NAME|FILE] [--batch B]\n"
    "           [--prefill T,...] [--decode C,...] [--max-context N] [--prefill-logits all|last]\n"
    "           [--random-weights] [--iters N] [--warmup N] [--no-cuda-graphs]\n"
    "           [--pdl never|decode|always] [--json FILE] [--profile]\n"
    "           [--show-plan[=table|table-all|memory|svg|textproto|json|binary]]\n"
    "           [--svg-phase N] [-o FILE]\n"
    "           [--time-planning[=RUNS]] [--print-keys]\n"
    "           [--tactic-cache FILE [--freeze]] [--print-after-all] [--print-after PASS,...]\n"
    "       benchmark_transformer --plan FILE [--show-plan[=FORMAT]] [-o FILE]\n"
    "           [--model DIR|FILE|NAME] [--decode C,...] [--iters N] [--warmup N] ...\n"
    "\n"
    "Exit status: 0 done; 2 bad arguments, an unplannable model, no GPU for a benchmark-only\n"
    "run, a runtime error, or a --freeze lookup the store cannot answer.\n"
    "\n"
    "Examples:\n"
    "  benchmark_transformer --model qwen3-0.6b --target sm_90 --show-plan\n"
    "  benchmark_transformer --model qwen2-7b --time-planning=30\n"
    "  benchmark_transformer --model deepseek-v2-lite --prefill 512 --decode 512 -o plan.json\n"
    "  benchmark_transformer --model qwen3-0.6b --prefill 128,512 --decode 512 --json b.json\n"
    "  benchmark_transformer --model qwen3-0.6b --tactic-cache tactics.db --freeze --show-plan\n"
    "  benchmark_transformer --plan plan.json --show-plan=table-all\n"
    "  benchmark_transformer --plan plan.binpb --model qwen3-0.6b --decode 512\n";

// --iters and --warmup, at most 100000.
int Replays(const absl::Flag<tools::PositiveInt>& flag) {
  return static_cast<int>(std::min<int64_t>(absl::GetFlag(flag).value, 100000));
}

// Combinations and values that make no run.
absl::Status CheckFlags() {
  const bool from_file = !absl::GetFlag(FLAGS_plan).empty();
  if (absl::GetFlag(FLAGS_model).empty() && !from_file) {
    return absl::InvalidArgumentError("--model is required");
  }
  if (from_file &&
      (!absl::GetFlag(FLAGS_tactic_cache).empty() ||
       absl::GetFlag(FLAGS_time_planning).has_value() || absl::GetFlag(FLAGS_print_keys))) {
    return absl::InvalidArgumentError(
        "--plan reads a plan already made: --tactic-cache, --time-planning and --print-keys "
        "belong to planning");
  }
  if (absl::GetFlag(FLAGS_freeze) && absl::GetFlag(FLAGS_tactic_cache).empty()) {
    return absl::InvalidArgumentError("--freeze needs --tactic-cache");
  }
  if (const std::string format = absl::GetFlag(FLAGS_show_plan); !format.empty()) {
    if (absl::Status s = planner::ParsePlanFormat(format).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--show-plan: ", s.message()));
    }
  }
  TP_RETURN_IF_ERROR(tools::GpuOptionsFromFlags().status());
  TP_ASSIGN_OR_RETURN(planner::PlanOptions options, tools::PlanOptionsFromFlags());
  return tools::ApplyDecodeBackendFlags(options);
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

// The benchmark of `plan` on `device`: the checkpoint's weights unless --random-weights or
// the model has none, every --prefill and --decode length timed.
// The persistent kernel's stages of one decode step, grouped by the step name less its layer
// ("l0-27.qkv" and "l3.qkv" are "qkv"), in first-seen order: means per stage.
void PrintPersistentTrace(const std::string& title,
                          const std::vector<runtime::gpu::GpuRuntime::StageTrace>& stages) {
  struct Group {
    int count = 0;
    int64_t tasks = 0;
    double span = 0, handover = 0, tile_wait = 0, run = 0, last_ready = 0, last_run = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Group> groups;
  double total = 0;
  for (const auto& s : stages) {
    const size_t dot = s.name.find('.');
    const std::string key =
        absl::StrCat(dot == std::string::npos ? s.name : s.name.substr(dot + 1), " (", s.kind, ")");
    if (!groups.count(key)) order.push_back(key);
    Group& g = groups[key];
    ++g.count;
    g.tasks += s.tasks;
    g.span += s.span_us;
    g.handover += s.handover_us;
    g.tile_wait += s.tile_wait_us;
    g.run += s.run_us;
    g.last_ready += s.last_ready_us;
    g.last_run += s.last_run_us;
    total += s.span_us;
  }
  std::cout << absl::StrFormat(
      "persistent kernel, %s: %d stages, %.1f us from the first task to the last release\n"
      "  (means over a stage's repeats; tile wait and run: medians over its tasks; last: the\n"
      "  task released last, from the stage before's end to its wait's end, and its run)\n"
      "  %-40s %6s %8s %10s %12s %12s %10s %10s %10s\n",
      title, stages.size(), total, "stage", "count", "tasks", "span us", "handover us",
      "tile wait us", "run us", "last ready", "last run");
  for (const std::string& key : order) {
    const Group& g = groups[key];
    const double n = g.count;
    std::cout << absl::StrFormat("  %-40s %6d %8.0f %10.2f %12.2f %12.2f %10.2f %10.2f %10.2f\n",
                                 key, g.count, static_cast<double>(g.tasks) / n, g.span / n,
                                 g.handover / n, g.tile_wait / n, g.run / n, g.last_ready / n,
                                 g.last_run / n);
  }
}

absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// plans: one plan, or every rank's of a tensor-parallel model (rank r on device r; each call
// then runs on all ranks at once and reports rank 0's result, every rank's step waiting for
// the others' collectives).
absl::StatusOr<int> Benchmark(const tools::ModelArgument& model,
                              const targets::TargetDescription& target,
                              const std::vector<planner::proto::ExecutionPlan>& plans,
                              const device::Device& device) {
  std::unique_ptr<models::Checkpoint> checkpoint;
  if (!absl::GetFlag(FLAGS_random_weights) && model.has_weights) {
    TP_ASSIGN_OR_RETURN(checkpoint, models::Checkpoint::Open(model.directory));
  }
  TP_ASSIGN_OR_RETURN(const runtime::gpu::GpuOptions options, tools::GpuOptionsFromFlags());
  std::unique_ptr<runtime::gpu::GpuRuntime> single;
  std::unique_ptr<runtime::gpu::TensorParallelGpu> ranks;
  if (plans.size() == 1) {
    TP_ASSIGN_OR_RETURN(
        single, runtime::gpu::GpuRuntime::Create(device, plans[0], checkpoint.get(), options));
  } else {
    TP_ASSIGN_OR_RETURN(ranks,
                        runtime::gpu::TensorParallelGpu::Create(plans, checkpoint.get(), options));
  }
  runtime::gpu::GpuRuntime* rt = single != nullptr ? single.get() : &ranks->runtime(0);
  // f(runtime) on the one runtime, or on every rank at once: rank 0's result.
  auto on_ranks = [&](auto f) -> decltype(f(*rt)) {
    if (ranks == nullptr) return f(*rt);
    std::vector<std::optional<decltype(f(*rt))>> results(static_cast<size_t>(ranks->ranks()));
    TP_RETURN_IF_ERROR(ranks->ForEachRank([&](int r, runtime::gpu::GpuRuntime& each) {
      results[static_cast<size_t>(r)].emplace(f(each));
      return StatusOf(*results[static_cast<size_t>(r)]);
    }));
    return *std::move(results[0]);
  };
  const runtime::gpu::GpuRuntimeInfo& info = rt->info();
  const std::string& name = model.name;
  const int64_t batch = absl::GetFlag(FLAGS_batch).value;
  const int iters = Replays(FLAGS_iters), warmup = Replays(FLAGS_warmup);
  const bool profile = absl::GetFlag(FLAGS_profile);
  const bool cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  const std::string json_path = absl::GetFlag(FLAGS_json);
  const int64_t vocab = rt->vocab_size();
  std::cout << absl::StrFormat(
      "benchmark %s on %s (target %s)%s, batch %d, %s, %s weights\n"
      "setup %.2f s: %d kernels compiled or loaded in %.2f s, weights in %.2f s; device memory: "
      "weights %.1f MiB, KV cache %.1f MiB, arena %.1f MiB\n",
      name, device.Label(), target.name(),
      ranks == nullptr ? std::string()
                       : absl::StrCat(", tensor parallel over ", ranks->ranks(),
                                      " GPUs (rank 0's timings and memory)"),
      batch,
      absl::StrCat(cuda_graphs ? "CUDA graphs" : "host launches",
                   ", programmatic dependent launch: ", absl::GetFlag(FLAGS_pdl)),
      checkpoint ? "checkpoint" : "random", info.setup_seconds, info.kernels_compiled,
      info.compile_seconds, info.weights_seconds, info.weight_bytes / 1048576.0,
      info.state_bytes / 1048576.0, info.arena_bytes / 1048576.0);
  if (profile) {
    for (const std::string& line : info.gemm_algos) std::cout << "  cuBLASLt " << line << "\n";
  }

  // Floors: every weight byte a step touches and the KV rows read once at the achievable copy
  // bandwidth (decode); two flops per weight element a token multiplies by at the achievable
  // bf16 rate (prefill, attention's own flops left out). For routed experts a step touches
  // only the experts it selects: E * (1 - (1 - K/E)^tokens) of each MoE layer's E, the
  // expected count when every token picks its K experts uniformly and independently; a token
  // multiplies by K of them.
  const double bandwidth = target.achievable_memory_bandwidth_gbps() * 1e9;  // bytes/s
  const double flop_rate = target.achievable_bf16_tflops() * 1e12;
  const models::MoeConfig& moe = model.config.moe;
  const double sparse_layers =
      static_cast<double>(std::count(moe.sparse_layers.begin(), moe.sparse_layers.end(), true));
  const double experts = static_cast<double>(moe.num_experts);
  // A tensor-parallel rank holds 1/R of every expert's width.
  const double expert_bytes = sparse_layers * experts * 3.0 / static_cast<double>(plans.size()) *
                              static_cast<double>(moe.moe_intermediate_size) *
                              static_cast<double>(model.config.hidden_size) *
                              static_cast<double>(ir::DTypeSize(model.config.dtype));
  const double dense_bytes = static_cast<double>(info.weight_bytes) - expert_bytes;
  auto touched_bytes = [&](double tokens) {
    if (expert_bytes <= 0) return static_cast<double>(info.weight_bytes);
    const double k = static_cast<double>(moe.top_k);
    return dense_bytes + expert_bytes * (1.0 - std::pow(1.0 - k / experts, tokens));
  };
  const double weight_elements =
      (expert_bytes > 0 ? dense_bytes + expert_bytes * static_cast<double>(moe.top_k) / experts
                        : static_cast<double>(info.weight_bytes)) /
      2.0;
  std::vector<Row> rows;
  for (int64_t t : absl::GetFlag(FLAGS_prefill).values) {
    const std::vector<int32_t> ids = Prompt(batch * t, vocab, static_cast<uint32_t>(t));
    TP_ASSIGN_OR_RETURN(std::vector<double> ms, on_ranks([&](runtime::gpu::GpuRuntime& r) {
                          return r.TimePrefill(ids, batch, warmup, iters);
                        }));
    rows.push_back({"prefill", t, Summarize(ms),
                    1e3 * 2.0 * weight_elements * static_cast<double>(batch * t) / flop_rate});
    if (profile) {
      TP_ASSIGN_OR_RETURN(auto steps, on_ranks([&](runtime::gpu::GpuRuntime& r) {
                            return r.ProfilePrefill(batch, t, 20);
                          }));
      PrintProfile(absl::StrCat("prefill T=", t), steps);
    }
  }
  for (int64_t c : absl::GetFlag(FLAGS_decode).values) {
    // Fill the caches with c - 1 tokens of a prompt.
    if (c > 1) {
      const std::vector<int32_t> ids = Prompt(batch * (c - 1), vocab, static_cast<uint32_t>(c));
      absl::StatusOr<std::vector<float>> filled =
          on_ranks([&](runtime::gpu::GpuRuntime& r) { return r.Prefill(ids, batch); });
      if (!filled.ok()) {  // no bucket holds c - 1 tokens: decode them one by one
        TP_RETURN_IF_ERROR(on_ranks([](runtime::gpu::GpuRuntime& r) { return r.Reset(); }));
        for (int64_t pos = 0; pos < c - 1; ++pos) {
          std::vector<int32_t> step(static_cast<size_t>(batch)), at(static_cast<size_t>(batch));
          for (int64_t b = 0; b < batch; ++b) {
            step[static_cast<size_t>(b)] = ids[static_cast<size_t>(b * (c - 1) + pos)];
            at[static_cast<size_t>(b)] = static_cast<int32_t>(pos);
          }
          TP_RETURN_IF_ERROR(
              on_ranks([&](runtime::gpu::GpuRuntime& r) { return r.Decode(step, at); }).status());
        }
      }
    }
    TP_ASSIGN_OR_RETURN(std::vector<double> ms, on_ranks([&](runtime::gpu::GpuRuntime& r) {
                          return r.TimeDecode(batch, c, warmup, iters);
                        }));
    const double kv_bytes = static_cast<double>(info.state_bytes) * static_cast<double>(c) /
                            static_cast<double>(rt->max_context());
    rows.push_back({"decode", c, Summarize(ms),
                    1e3 * (touched_bytes(static_cast<double>(batch)) + kv_bytes) / bandwidth});
    if (profile) {
      TP_ASSIGN_OR_RETURN(auto steps, on_ranks([&](runtime::gpu::GpuRuntime& r) {
                            return r.ProfileDecode(batch, 20);
                          }));
      PrintProfile(absl::StrCat("decode context ", c), steps);
    }
    if (absl::GetFlag(FLAGS_persistent_trace)) {
      TP_ASSIGN_OR_RETURN(auto stages, rt->PersistentDecodeTrace(batch));
      PrintPersistentTrace(absl::StrCat("decode context ", c), stages);
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
      iters, warmup, bandwidth / 1e9, flop_rate / 1e12);
  if (!json_path.empty()) {
    std::string json = absl::StrFormat(
        "{\n  \"model\": \"%s\",\n  \"device\": \"%s\",\n  \"target\": \"%s\",\n"
        "  \"batch\": %d,\n  \"cuda_graphs\": %s,\n  \"weights\": \"%s\",\n"
        "  \"iters\": %d,\n  \"prefill_logits\": \"%s\",\n  \"setup_seconds\": %.3f,\n"
        "  \"results\": [",
        name, device.properties().name, target.name(), batch, cuda_graphs ? "true" : "false",
        checkpoint ? "checkpoint" : "random", iters, absl::GetFlag(FLAGS_prefill_logits),
        info.setup_seconds);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      json += absl::StrFormat(
          "%s\n    {\"phase\": \"%s\", \"size\": %d, \"median_ms\": %.6f, \"p10_ms\": %.6f, "
          "\"p90_ms\": %.6f, \"floor_ms\": %.6f}",
          i == 0 ? "" : ",", r.phase, r.size, r.stats.median, r.stats.p10, r.stats.p90, r.floor_ms);
    }
    json += "\n  ]\n}\n";
    std::ofstream out(json_path);
    out << json;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", json_path));
  }
  return kExitOk;
}

// Plans RUNS times and prints the median and fastest wall time and the median CPU time (which
// stays meaningful on a machine busy with other work: planning is single-threaded).
absl::Status TimePlanning(const models::ModelConfig& config, const std::string& name,
                          const targets::TargetDescription& target,
                          const planner::PlanOptions& options, const planner::TacticCache* cache,
                          int phases, int runs) {
  std::vector<double> wall_ms, cpu_ms;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    TP_RETURN_IF_ERROR(planner::BuildExecutionPlan(config, target, options, cache).status());
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
      name, target.name(), phases, wall_ms.size(), wall_ms[wall_ms.size() / 2], wall_ms.front(),
      cpu_ms[cpu_ms.size() / 2]);
  return absl::OkStatus();
}

// Writes the plan to --output, or prints it in --show-plan's format; neither: nothing.
absl::Status EmitPlan(const planner::proto::ExecutionPlan& plan) {
  const std::string show_plan = absl::GetFlag(FLAGS_show_plan);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (!output.empty()) {
    TP_ASSIGN_OR_RETURN(const planner::PlanFormat format,
                        show_plan.empty() ? planner::PlanFormatForPath(output)
                                          : planner::ParsePlanFormat(show_plan));
    TP_ASSIGN_OR_RETURN(std::string bytes,
                        planner::FormatPlan(plan, format, absl::GetFlag(FLAGS_svg_phase)));
    TP_RETURN_IF_ERROR(WriteFileAtomically(output, bytes));
    std::cerr << "wrote the plan to " << output << " (" << bytes.size() << " bytes)\n";
  } else if (!show_plan.empty()) {
    TP_ASSIGN_OR_RETURN(const planner::PlanFormat format, planner::ParsePlanFormat(show_plan));
    TP_ASSIGN_OR_RETURN(std::string text,
                        planner::FormatPlan(plan, format, absl::GetFlag(FLAGS_svg_phase)));
    std::cout << text;
  }
  return absl::OkStatus();
}

// --plan FILE: renders or converts the plan read from FILE, or runs it.
absl::StatusOr<int> RunPlanFile(const std::string& path) {
  TP_ASSIGN_OR_RETURN(const planner::proto::ExecutionPlan plan, planner::ReadPlanFile(path));
  if (!absl::GetFlag(FLAGS_show_plan).empty() || !absl::GetFlag(FLAGS_output).empty()) {
    TP_RETURN_IF_ERROR(EmitPlan(plan));
    return kExitOk;
  }
  if (plan.options().tensor_parallel_ranks() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is rank ", plan.options().tensor_parallel_rank(), " of ",
                     plan.options().tensor_parallel_ranks(),
                     " tensor-parallel GPUs; the benchmark runs every rank (plan them with --tp)"));
  }
  if (absl::GetFlag(FLAGS_model).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("running ", path, " needs --model ", plan.model(),
                     " (the checkpoint or bundled config it was planned for)"));
  }
  TP_ASSIGN_OR_RETURN(const tools::ModelArgument model, tools::ModelFromFlags());
  if (model.name != plan.model()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " was planned for ", plan.model(), "; --model names ", model.name));
  }
  for (int64_t c : absl::GetFlag(FLAGS_decode).values) {
    if (c > plan.options().max_context()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--decode ", c, ": ", path, " holds ", plan.options().max_context(),
                       " KV-cache rows per sequence (pass --decode with contexts up to that)"));
    }
  }
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(0);
  if (!device.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.status().message(),
                     "; running a plan needs a GPU (--show-plan renders it without one)"));
  }
  // The buckets the plan has, not the flags'.
  absl::SetFlag(&FLAGS_prefill, tools::PositiveList{{plan.options().prefill_tokens().begin(),
                                                     plan.options().prefill_tokens().end()}});
  absl::SetFlag(&FLAGS_batch,
                tools::PositiveInt{std::max<int64_t>(plan.options().prefill_batch(), 1)});
  return Benchmark(model, plan.target(), {plan}, **device);
}

absl::StatusOr<int> Run() {
  if (const std::string path = absl::GetFlag(FLAGS_plan); !path.empty()) return RunPlanFile(path);
  const std::string show_plan = absl::GetFlag(FLAGS_show_plan);
  const std::optional<tools::PositiveInt> time_planning = absl::GetFlag(FLAGS_time_planning);
  const bool print_keys = absl::GetFlag(FLAGS_print_keys);
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string tactic_cache = absl::GetFlag(FLAGS_tactic_cache);
  const bool plan_only =
      !show_plan.empty() || !output.empty() || time_planning.has_value() || print_keys;
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(0);
  if (!device.ok() && !plan_only) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.status().message(),
                     "; the benchmark needs a GPU (--show-plan prints the plan without one)"));
  }
  TP_ASSIGN_OR_RETURN(const tools::ModelArgument model, tools::ModelFromFlags());
  TP_ASSIGN_OR_RETURN(const targets::TargetDescription target,
                      runtime::gpu::ChooseTarget(absl::GetFlag(FLAGS_target),
                                                 device.ok() ? device->get() : nullptr));
  TP_ASSIGN_OR_RETURN(planner::PlanOptions options, tools::PlanOptionsFromFlags());
  TP_RETURN_IF_ERROR(tools::ApplyDecodeBackendFlags(options));
  options.model_name = model.name;
  options.print = tools::PrintOptionsFromFlags();

  // The tactic store answers for the environment it was measured in: this GPU's (without a
  // GPU nothing matches, and every step keeps the cost model's pick).
  std::unique_ptr<tuner::TacticStore> store;
  if (!tactic_cache.empty()) {
    tuner::TacticStore::Options store_options;
    store_options.read_only = true;
    store_options.freeze = absl::GetFlag(FLAGS_freeze);
    TP_ASSIGN_OR_RETURN(store, tuner::TacticStore::Open(tactic_cache, store_options));
    for (const std::string& w : store->warnings()) std::cerr << "warning: " << w << "\n";
  }
  if (store != nullptr || print_keys) {
    TP_ASSIGN_OR_RETURN(const tuner::Environment environment,
                        tuner::PlanningEnvironment(target, device.ok() ? device->get() : nullptr));
    options.environment = environment.Fingerprint();
  }

  const planner::RecordingTacticCache lookups(store.get());
  TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                      planner::BuildExecutionPlan(model.config, target, options, &lookups));
  if (print_keys) {
    for (const planner::TacticKey& key : tuner::MeasurableKeys(lookups.records())) {
      std::cout << key.ToString() << "\n";
    }
    return kExitOk;
  }
  if (store != nullptr) {
    std::cerr << "tactic cache " << tactic_cache << ": "
              << tuner::DescribeLookups(lookups.records(), *store, device.ok()) << "\n";
    TP_RETURN_IF_ERROR(store->CheckFrozen());
  }
  TP_RETURN_IF_ERROR(EmitPlan(plan));
  if (time_planning.has_value()) {
    options.print = {};  // the IR was printed once, by the plan above
    TP_RETURN_IF_ERROR(
        TimePlanning(model.config, model.name, target, options, store.get(), plan.phases_size(),
                     static_cast<int>(std::min<int64_t>(time_planning->value, 10000))));
  }
  if (plan_only) return kExitOk;
  // A tensor-parallel benchmark runs every rank, each on its own GPU.
  std::vector<planner::proto::ExecutionPlan> plans;
  if (options.tensor_parallel > 1) {
    for (int64_t r = 0; r < options.tensor_parallel; ++r) {
      options.rank = r;
      TP_ASSIGN_OR_RETURN(plans.emplace_back(),
                          planner::BuildExecutionPlan(model.config, target, options, &lookups));
    }
  } else {
    plans.push_back(std::move(plan));
  }
  return Benchmark(model, target, plans, **device);
}

}  // namespace
}  // namespace tileplan

int main(int argc, char** argv) {
  namespace tools = tileplan::tools;
  const std::vector<std::string> positional = tools::ParseFlags(
      argc, argv,
      {tileplan::kUsage, {{"show_plan", "table"}, {"time_planning", "20"}}, {{"o", "output"}}});
  if (!positional.empty()) {
    return tools::UsageFailure(absl::StrCat("unexpected argument '", positional.front(), "'"));
  }
  if (absl::Status s = tileplan::CheckFlags(); !s.ok()) return tools::UsageFailure(s.message());
  absl::StatusOr<int> status = tileplan::Run();
  if (!status.ok()) {
    std::cerr << "benchmark_transformer: " << status.status().message() << "\n";
    return tileplan::kExitBad;
  }
  return *status;
}
