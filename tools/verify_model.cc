// verify_model: checks a backend against a reference fixture (docs/fixtures.md).
//
//   verify_model --model DIR --reference FILE --backend cpu|gpu [--threads N] [--no-plan]
//                [--no-cuda-graphs] [--print-after-all] [--print-after=PASS[,PASS...]]
//
// Loads DIR's config.json and checkpoint and lowers the model. By default it then plans the
// primitive graph for both phases (planner/phase_graphs.h: the prefill pipeline with the
// token bucket T = prompt length, the decode pipeline with T = 1; B = 1 and Smax = prompt +
// greedy length) and runs the planned graphs, sharing one KV cache; with --no-plan it runs
// the primitive graph. It runs the reference prompt as one prefill (positions 0..T-1) and
// compares the logits with the reference: the largest absolute difference relative to the
// largest reference magnitude, and the share of positions whose argmax agrees. Then it
// continues greedily with the KV cache, one token per step, for as many tokens as the
// reference holds, and compares them token for token. --print-after-all / --print-after
// write the IR after the planner's passes to stderr (format in planner/pass.h).
//
// --backend gpu builds an ExecutionPlan for the device's target (prefill bucket T = prompt
// length, decode batch 1, KV cache of prompt + greedy length) and runs it with the GPU
// runtime (runtime/gpu): the prompt's logits from the prefill graph; the greedy tokens twice,
// once by the device-side loop (the decode-and-argmax CUDA Graph replayed with no host work
// between tokens) and once step by step from the host, and both must match the reference.
// bf16 thresholds (docs/fixtures.md): argmax agrees at every prompt position except near-ties
// (the reference's top two logits closer than 1% of the row's largest magnitude), relative
// logit error at most 5e-2, and the same greedy tokens. --no-cuda-graphs launches every
// kernel from the host instead of replaying graphs.
//
// Exit status: 0 all checks pass; 1 a numerical check fails; 2 bad arguments, unreadable or
// malformed input, or an unsupported model (the message names the field or tensor).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "models/config.h"
#include "models/lowering.h"
#include "models/safetensors.h"
#include "planner/phase_graphs.h"
#include "planner/plan_builder.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/device/device.h"
#include "runtime/gpu/device_target.h"
#include "runtime/gpu/gpu_runtime.h"

namespace tileplan {
namespace {

constexpr int kExitPass = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitBadInput = 2;

// Thresholds (docs/fixtures.md): a float32 backend, and a bf16 GPU backend whose logits
// carry the rounding of every bf16 activation between layers.
constexpr double kMaxRelativeErrorF32 = 1e-4;
constexpr double kMaxRelativeErrorBf16 = 5e-2;
// A prompt position whose reference top-two logits are closer than this share of the row's
// largest magnitude is a near-tie: a bf16 backend may pick either.
constexpr double kNearTieShare = 1e-2;

constexpr const char* kUsage =
    "usage: verify_model --model DIR --reference FILE --backend cpu|gpu [--threads N]\n"
    "                    [--no-plan] [--no-cuda-graphs] [--print-after-all]\n"
    "                    [--print-after=PASS[,PASS...]]";

struct Args {
  std::string model;
  std::string reference;
  std::string backend;
  int threads = 0;   // 0: the backend's default
  bool plan = true;  // false: run the primitive graph
  bool cuda_graphs = true;
  bool print_after_all = false;
  std::vector<std::string> print_after;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int k = 1; k < argc; ++k) {
    std::string flag = argv[k];
    std::string value;
    if (flag == "--no-plan") {
      args.plan = false;
      continue;
    }
    if (flag == "--print-after-all") {
      args.print_after_all = true;
      continue;
    }
    if (flag == "--no-cuda-graphs") {
      args.cuda_graphs = false;
      continue;
    }
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (k + 1 < argc) {
      value = argv[++k];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag ", flag, " needs a value"));
    }
    if (flag == "--model") {
      args.model = value;
    } else if (flag == "--reference") {
      args.reference = value;
    } else if (flag == "--backend") {
      args.backend = value;
    } else if (flag == "--threads") {
      if (!absl::SimpleAtoi(value, &args.threads) || args.threads < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--threads needs a positive integer, got '", value, "'"));
      }
    } else if (flag == "--print-after") {
      for (absl::string_view pass : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        args.print_after.emplace_back(pass);
      }
      if (args.print_after.empty()) {
        return absl::InvalidArgumentError("--print-after needs a pass name");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
  }
  if (args.model.empty() || args.reference.empty() || args.backend.empty()) {
    return absl::InvalidArgumentError("--model, --reference and --backend are required");
  }
  if (args.backend != "cpu" && args.backend != "gpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", args.backend, "'; supported backends: cpu, gpu"));
  }
  if (args.backend == "gpu" && !args.plan) {
    return absl::InvalidArgumentError("--backend gpu runs planned graphs; --no-plan is cpu only");
  }
  if (args.backend == "cpu" && !args.cuda_graphs) {
    return absl::InvalidArgumentError("--no-cuda-graphs applies to --backend gpu");
  }
  if (!args.plan && (args.print_after_all || !args.print_after.empty())) {
    return absl::InvalidArgumentError(
        "--print-after-all and --print-after show the planner's passes; --no-plan runs none");
  }
  return args;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// The reference of docs/fixtures.md.
struct Reference {
  std::vector<int32_t> input_ids;  // [T]
  std::vector<float> logits;       // [T, V]
  std::vector<int32_t> greedy;     // [N]
};

absl::StatusOr<const models::TensorView*> FindTensor(const models::SafetensorsFile& file,
                                                     const char* name, models::StDType dtype,
                                                     int rank) {
  const models::TensorView* t = file.Find(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference ", file.label(), " has no tensor '", name, "'"));
  }
  if (t->dtype != dtype || static_cast<int>(t->shape.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference tensor '", name, "' is ", models::StDTypeName(t->dtype), ShapeString(t->shape),
        ", expected rank ", rank, " ", models::StDTypeName(dtype)));
  }
  return t;
}

std::vector<int32_t> Int32Data(const models::TensorView& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.num_elements()));
  std::memcpy(out.data(), t.data, out.size() * sizeof(int32_t));
  return out;
}

absl::StatusOr<Reference> LoadReference(const std::string& path, int64_t vocab_size) {
  TP_ASSIGN_OR_RETURN(std::unique_ptr<models::SafetensorsFile> file,
                      models::SafetensorsFile::Open(path));
  TP_ASSIGN_OR_RETURN(const models::TensorView* ids,
                      FindTensor(*file, "input_ids", models::StDType::kI32, 1));
  TP_ASSIGN_OR_RETURN(const models::TensorView* logits,
                      FindTensor(*file, "logits", models::StDType::kF32, 2));
  TP_ASSIGN_OR_RETURN(const models::TensorView* greedy,
                      FindTensor(*file, "greedy_tokens", models::StDType::kI32, 1));
  const int64_t prompt_len = ids->shape[0];
  if (prompt_len < 1) {
    return absl::InvalidArgumentError("reference tensor 'input_ids' is empty");
  }
  if (logits->shape != std::vector<int64_t>{prompt_len, vocab_size}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference tensor 'logits' has shape ", ShapeString(logits->shape), ", expected [",
        prompt_len, ",", vocab_size, "] (prompt length, config vocab_size)"));
  }
  Reference ref;
  ref.input_ids = Int32Data(*ids);
  TP_ASSIGN_OR_RETURN(ref.logits, models::ToFloat32(*logits));
  ref.greedy = Int32Data(*greedy);
  return ref;
}

int64_t ArgmaxRow(const std::vector<float>& logits, int64_t row, int64_t vocab) {
  const float* r = logits.data() + row * vocab;
  int64_t best = 0;
  for (int64_t j = 1; j < vocab; ++j) {
    if (r[j] > r[best]) best = j;
  }
  return best;
}

// What a backend computed for the reference prompt.
struct Outputs {
  std::vector<float> logits;                // [T, V]
  std::vector<std::vector<int32_t>> greedy;  // one continuation per way of decoding
  std::vector<std::string> greedy_names;
};

absl::StatusOr<Outputs> RunCpu(const Args& args, const ir::Graph& graph,
                               const models::Checkpoint& checkpoint, const Reference& ref,
                               int64_t vocab) {
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  runtime::cpu::CpuBackend::Options options;
  options.batch = 1;
  options.max_seq = prompt_len + num_greedy;
  options.threads = args.threads;
  std::unique_ptr<runtime::cpu::CpuBackend> backend;
  std::string graph_line;
  if (args.plan) {
    planner::PipelineOptions plan_options;
    plan_options.tokens = prompt_len;
    plan_options.batch = options.batch;
    plan_options.cache_capacity = options.max_seq;
    planner::PrintOptions print;
    print.after_all = args.print_after_all;
    print.after = args.print_after;
    print.out = &std::cerr;
    TP_ASSIGN_OR_RETURN(planner::PhaseGraphs planned,
                        planner::PlanPhases(graph, plan_options, print));
    TP_ASSIGN_OR_RETURN(backend, runtime::cpu::CpuBackend::CreatePhased(
                                     planned.prefill, planned.decode, checkpoint, options));
    graph_line = absl::StrCat("planned (prefill ", planned.prefill.regions().size(),
                              " regions for T = ", prompt_len, ", decode ",
                              planned.decode.regions().size(), " regions for T = 1)");
  } else {
    TP_ASSIGN_OR_RETURN(backend, runtime::cpu::CpuBackend::Create(graph, checkpoint, options));
    graph_line = absl::StrCat("primitive (", graph.regions().size(), " regions)");
  }
  std::cout << "backend: cpu (" << backend->num_threads()
            << (backend->num_threads() == 1 ? " thread)\n" : " threads)\n")
            << "graph: " << graph_line << "\n";
  std::vector<int32_t> positions(static_cast<size_t>(prompt_len));
  for (int64_t t = 0; t < prompt_len; ++t) positions[t] = static_cast<int32_t>(t);
  Outputs out;
  TP_ASSIGN_OR_RETURN(out.logits, backend->Run(ref.input_ids, positions));
  std::vector<int32_t> greedy;
  int32_t next = static_cast<int32_t>(ArgmaxRow(out.logits, prompt_len - 1, vocab));
  for (int64_t k = 0; k < num_greedy; ++k) {
    greedy.push_back(next);
    if (k + 1 == num_greedy) break;
    TP_ASSIGN_OR_RETURN(std::vector<float> step,
                        backend->Run({next}, {static_cast<int32_t>(prompt_len + k)}));
    next = static_cast<int32_t>(ArgmaxRow(step, 0, vocab));
  }
  out.greedy.push_back(std::move(greedy));
  out.greedy_names.push_back("greedy");
  return out;
}

absl::StatusOr<Outputs> RunGpu(const Args& args, const models::ModelConfig& config,
                               const models::Checkpoint& checkpoint, const Reference& ref,
                               int64_t vocab) {
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  TP_ASSIGN_OR_RETURN(std::unique_ptr<device::Device> device, device::Device::Open(0));
  TP_ASSIGN_OR_RETURN(planner::TargetDescription target, runtime::gpu::TargetForDevice(*device));
  planner::PlanOptions plan_options;
  plan_options.prefill_tokens = {prompt_len};
  plan_options.prefill_batch = 1;
  plan_options.decode_batches = {1};
  plan_options.max_context = prompt_len + num_greedy;
  plan_options.print.after_all = args.print_after_all;
  plan_options.print.after = args.print_after;
  plan_options.print.out = &std::cerr;
  TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                      planner::BuildExecutionPlan(config, target, plan_options, nullptr));
  runtime::gpu::GpuOptions options;
  options.cuda_graphs = args.cuda_graphs;
  TP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::gpu::GpuRuntime> rt,
                      runtime::gpu::GpuRuntime::Create(*device, plan, &checkpoint, options));
  const runtime::gpu::GpuRuntimeInfo& info = rt->info();
  std::cout << "backend: gpu (" << device->Label() << ", target " << target.name() << ", "
            << (args.cuda_graphs ? "CUDA graphs" : "host launches") << "; setup "
            << absl::StrFormat("%.2f s: %d kernels in %.2f s, weights in %.2f s",
                               info.setup_seconds, info.kernels_compiled, info.compile_seconds,
                               info.weights_seconds)
            << ")\n"
            << "graph: planned (" << plan.phases(0).steps_size() << " prefill steps for T = "
            << prompt_len << ", " << plan.phases(1).steps_size() << " decode steps for B = 1)\n";
  Outputs out;
  TP_ASSIGN_OR_RETURN(out.logits, rt->Prefill(ref.input_ids, 1));
  TP_ASSIGN_OR_RETURN(std::vector<int32_t> loop,
                      rt->Generate(ref.input_ids, 1, static_cast<int>(num_greedy)));
  out.greedy.push_back(std::move(loop));
  out.greedy_names.push_back("greedy (device loop)");
  TP_ASSIGN_OR_RETURN(std::vector<float> again, rt->Prefill(ref.input_ids, 1));
  std::vector<int32_t> stepped;
  int32_t next = static_cast<int32_t>(ArgmaxRow(again, prompt_len - 1, vocab));
  for (int64_t k = 0; k < num_greedy; ++k) {
    stepped.push_back(next);
    if (k + 1 == num_greedy) break;
    TP_ASSIGN_OR_RETURN(std::vector<float> step,
                        rt->Decode({next}, {static_cast<int32_t>(prompt_len + k)}));
    next = static_cast<int32_t>(ArgmaxRow(step, 0, vocab));
  }
  out.greedy.push_back(std::move(stepped));
  out.greedy_names.push_back("greedy (host steps)");
  return out;
}

// Runs the check; returns the exit status, or an error for bad input.
absl::StatusOr<int> Verify(const Args& args) {
  TP_ASSIGN_OR_RETURN(models::ModelConfig config, models::LoadModelConfig(args.model));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> checkpoint,
                      models::Checkpoint::Open(args.model));
  TP_ASSIGN_OR_RETURN(ir::Graph graph, models::LowerModel(config));
  TP_ASSIGN_OR_RETURN(Reference ref, LoadReference(args.reference, config.vocab_size));
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  const int64_t vocab = config.vocab_size;
  const bool gpu = args.backend == "gpu";
  const double max_relative = gpu ? kMaxRelativeErrorBf16 : kMaxRelativeErrorF32;

  std::cout << "model: " << args.model << " (" << models::ArchitectureName(config.arch) << ", "
            << config.num_layers << " layers, hidden " << config.hidden_size << ", heads "
            << config.num_heads << "/" << config.num_kv_heads << ", head_dim " << config.head_dim
            << ", vocab " << vocab << ", " << ir::DTypeName(config.dtype) << ")\n"
            << "reference: " << args.reference << " (prompt " << prompt_len << " tokens, greedy "
            << num_greedy << " tokens)\n";
  Outputs outputs;
  if (gpu) {
    TP_ASSIGN_OR_RETURN(outputs, RunGpu(args, config, *checkpoint, ref, vocab));
  } else {
    TP_ASSIGN_OR_RETURN(outputs, RunCpu(args, graph, *checkpoint, ref, vocab));
  }
  const std::vector<float>& logits = outputs.logits;

  double max_diff = 0, max_ref = 0;
  bool finite = true;
  for (size_t k = 0; k < logits.size(); ++k) {
    if (!std::isfinite(logits[k])) finite = false;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits[k]) - ref.logits[k]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref.logits[k])));
  }
  const double relative = !finite         ? NAN
                          : max_ref > 0   ? max_diff / max_ref
                          : max_diff == 0 ? 0.0
                                          : INFINITY;
  const bool logits_ok = relative <= max_relative;
  std::cout << absl::StrFormat(
      "logits: max |ours - ref| = %.3g, max |ref| = %.3g, relative %.3g (limit %.0e)%s: %s\n",
      max_diff, max_ref, relative, max_relative, finite ? "" : ", non-finite logits",
      logits_ok ? "ok" : "FAIL");

  int64_t agree = 0;
  std::vector<int64_t> disagree, near_ties;
  for (int64_t t = 0; t < prompt_len; ++t) {
    const int64_t ours = ArgmaxRow(logits, t, vocab);
    const int64_t theirs = ArgmaxRow(ref.logits, t, vocab);
    if (ours == theirs) {
      ++agree;
      continue;
    }
    const float* row = ref.logits.data() + t * vocab;
    double row_max = 0;
    for (int64_t j = 0; j < vocab; ++j) row_max = std::max(row_max, std::fabs(double{row[j]}));
    const double gap = double{row[theirs]} - double{row[ours]};
    if (gpu && gap <= kNearTieShare * row_max) {
      near_ties.push_back(t);
    } else {
      disagree.push_back(t);
    }
  }
  const bool argmax_ok = disagree.empty();
  std::cout << absl::StrFormat(
      "argmax: %d/%d positions agree (%.1f%%)%s%s: %s\n", agree, prompt_len,
      100.0 * agree / prompt_len,
      near_ties.empty() ? "" : absl::StrCat(", near-ties at ", absl::StrJoin(near_ties, ",")),
      disagree.empty() ? "" : absl::StrCat(", differ at ", absl::StrJoin(disagree, ",")),
      argmax_ok ? "ok" : "FAIL");

  bool greedy_ok = true;
  for (size_t g = 0; g < outputs.greedy.size(); ++g) {
    const std::vector<int32_t>& greedy = outputs.greedy[g];
    int64_t first_mismatch = -1;
    for (int64_t k = 0; k < num_greedy && first_mismatch < 0; ++k) {
      if (k >= static_cast<int64_t>(greedy.size()) || greedy[k] != ref.greedy[k]) {
        first_mismatch = k;
      }
    }
    if (first_mismatch < 0) {
      std::cout << outputs.greedy_names[g] << ": " << num_greedy << "/" << num_greedy
                << " tokens match: ok\n";
    } else {
      greedy_ok = false;
      std::cout << outputs.greedy_names[g] << ": first mismatch at token " << first_mismatch
                << ": FAIL\n"
                << "  ours:      " << absl::StrJoin(greedy, " ") << "\n"
                << "  reference: " << absl::StrJoin(ref.greedy, " ") << "\n";
    }
  }
  const bool pass = logits_ok && argmax_ok && greedy_ok;
  std::cout << (pass ? "PASS" : "FAIL") << "\n";
  return pass ? kExitPass : kExitMismatch;
}

}  // namespace
}  // namespace tileplan

int main(int argc, char** argv) {
  absl::StatusOr<tileplan::Args> args = tileplan::ParseArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "verify_model: " << args.status().message() << "\n" << tileplan::kUsage << "\n";
    return tileplan::kExitBadInput;
  }
  absl::StatusOr<int> result = tileplan::Verify(*args);
  if (!result.ok()) {
    std::cerr << "verify_model: " << result.status().message() << "\n";
    return tileplan::kExitBadInput;
  }
  return *result;
}
