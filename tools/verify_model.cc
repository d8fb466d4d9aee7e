// verify_model: checks a backend against a reference fixture (docs/fixtures.md). Flags:
// --help, README.md.
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
// bf16 thresholds (docs/fixtures.md): relative logit error at most twice what transformers
// itself reaches in bf16 (the reference's bf16_relative; at least 1e-2, and 5e-2 when the
// reference does not record it), for the prompt and for the decode steps fed the reference's
// greedy tokens (greedy_logits); argmax agrees everywhere except near-ties (a reference gap
// within twice the measured deviation); greedy tokens match up to the first near-tie.
// --no-cuda-graphs launches every kernel from the host instead of replaying graphs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "device/device.h"
#include "models/config.h"
#include "models/lowering.h"
#include "models/safetensors.h"
#include "planner/phase_graphs.h"
#include "planner/plan_builder.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/tensor_parallel.h"
#include "runtime/gpu/device_target.h"
#include "runtime/gpu/gpu_runtime.h"
#include "runtime/gpu/tensor_parallel.h"
#include "tools/common_flags.h"
#include "tools/flags.h"
#include "tools/gpu_flags.h"

ABSL_FLAG(std::string, reference, "",
          "the reference fixture to compare with (docs/fixtures.md): reference.safetensors");
ABSL_FLAG(std::string, backend, "", "the backend to check: cpu or gpu");
ABSL_FLAG(std::optional<tileplan::tools::PositiveInt>, threads, std::nullopt,
          "threads of the cpu backend; unset: the backend's default");
ABSL_FLAG(bool, plan, true,
          "run the planned graphs; --no-plan runs the primitive graph (cpu backend only)");
ABSL_FLAG(bool, fuse_moe, true,
          "the decode phase fuses each MoE block into one moe step (fuse_moe; on the gpu "
          "backend the moe_gemv family), on either backend; --nofuse_moe keeps the primitive "
          "expert steps");
ABSL_FLAG(bool, fuse_norm_moe, true,
          "the decode phase also folds each fused MoE block's RMSNorm into it (rms_norm_moe), "
          "on either backend; --nofuse_norm_moe keeps the norm its own step");

ABSL_FLAG(bool, mla_prefill, true,
          "the prefill phase may run latent attention un-absorbed (the mla_prefill family; gpu "
          "backend); --nomla_prefill keeps the absorbed kernels for prompts too");

ABSL_FLAG(std::string, logits_out, "",
          "also write the prompt's logits, float32 [T, V], to this .npy file (numpy's format), "
          "for comparisons with other runs of the same plan");

namespace tileplan {
namespace {

// `values` [rows, cols] as a version-1.0 .npy file (little-endian float32, C order).
std::string Npy(const std::vector<float>& values, int64_t rows, int64_t cols) {
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", rows, ", ", cols, "), }");
  // Magic (6) + version (2) + length (2) + header + '\n', padded to a multiple of 64.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return out;
}

constexpr int kExitPass = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitBadInput = 2;

// Thresholds (docs/fixtures.md): a float32 backend, and a bf16 GPU backend whose logits
// carry the rounding of every bf16 activation between layers.
constexpr double kMaxRelativeErrorF32 = 1e-4;
// A bf16 backend may land at most this many times as far from the float32 reference as
// transformers itself does in bf16 (the reference's bf16_relative), and never needs to be
// closer than kMinRelativeErrorBf16; without bf16_relative the limit is
// kMaxRelativeErrorBf16.
constexpr double kBf16SpreadFactor = 2.0;
constexpr double kMinRelativeErrorBf16 = 1e-2;
constexpr double kMaxRelativeErrorBf16 = 5e-2;

constexpr char kUsage[] =
    "checks a backend against a reference fixture (docs/fixtures.md): the prompt's\n"
    "logits and argmax, the decode steps' logits fed the reference's greedy tokens, and the\n"
    "greedy continuation. --model must be a checkpoint directory (config.json and safetensors): a\n"
    "bundled config has no weights. The cpu backend is float32 (limit 1e-4 relative); the gpu\n"
    "backend plans for the device and runs the plan in bf16 (limits from the reference's\n"
    "bf16_relative). --tp N runs the model as N tensor-parallel ranks, each on its slices of\n"
    "the weights: on the cpu backend meeting in-process at every collective, on the gpu\n"
    "backend one GPU per rank (devices 0..N-1) over NCCL; the limits are the same.\n"
    "\n"
    "usage: verify_model --model DIR --reference FILE --backend cpu|gpu [--threads N] [--tp N]\n"
    "                    [--no-plan] [--fuse-moe] [--no-cuda-graphs] [--pdl never|decode|always]\n"
    "                    [--print-after-all] [--print-after PASS,...]\n"
    "\n"
    "Exit status: 0 all checks pass; 1 a numerical check fails; 2 bad arguments, unreadable or\n"
    "malformed input, or an unsupported model (the message names the field or tensor).\n"
    "\n"
    "Examples:\n"
    "  verify_model --model tests/data/qwen3-tiny \\\n"
    "      --reference tests/data/qwen3-tiny/reference.safetensors --backend cpu\n"
    "  verify_model --model DIR --reference DIR/reference.safetensors --backend gpu --pdl always\n";

// Combinations and values that make no run.
absl::Status CheckFlags() {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (absl::GetFlag(FLAGS_model).empty() || absl::GetFlag(FLAGS_reference).empty() ||
      backend.empty()) {
    return absl::InvalidArgumentError("--model, --reference and --backend are required");
  }
  if (backend != "cpu" && backend != "gpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", backend, "'; supported backends: cpu, gpu"));
  }
  const bool plan = absl::GetFlag(FLAGS_plan);
  if (backend == "gpu" && !plan) {
    return absl::InvalidArgumentError("--backend gpu runs planned graphs; --no-plan is cpu only");
  }
  if (tools::Given("rank")) {
    return absl::InvalidArgumentError(
        "--rank selects a rank to show; verify_model --tp N runs every rank");
  }
  if (backend == "cpu" && (tools::Given("cuda_graphs") || tools::Given("pdl"))) {
    return absl::InvalidArgumentError("--no-cuda-graphs and --pdl apply to --backend gpu");
  }
  if (!plan && tools::Given("fuse_moe") && absl::GetFlag(FLAGS_fuse_moe)) {
    return absl::InvalidArgumentError("--fuse-moe is a planner pass; --no-plan runs none");
  }
  if (!plan && tools::Given("fuse_norm_moe") && absl::GetFlag(FLAGS_fuse_norm_moe)) {
    return absl::InvalidArgumentError("--fuse-norm-moe is a planner option; --no-plan runs none");
  }
  if (!plan &&
      (absl::GetFlag(FLAGS_print_after_all) || !absl::GetFlag(FLAGS_print_after).empty())) {
    return absl::InvalidArgumentError(
        "--print-after-all and --print-after show the planner's passes; --no-plan runs none");
  }
  return tools::GpuOptionsFromFlags().status();
}

// The reference of docs/fixtures.md.
struct Reference {
  std::vector<int32_t> input_ids;    // [T]
  std::vector<float> logits;         // [T, V]
  std::vector<int32_t> greedy;       // [N]
  std::vector<float> greedy_logits;  // [N - 1, V] when the reference has them, else empty
  // How far transformers in bf16 lands from the reference (prompt, decode steps), when the
  // reference records it.
  std::vector<float> bf16_relative;
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

// InvalidArgument naming the first element of reference tensor `name` (of `shape`) that is
// not finite: a comparison against NaN or infinity passes or fails for no reason.
absl::Status CheckFinite(const char* name, const std::vector<float>& values,
                         const std::vector<int64_t>& shape) {
  for (size_t k = 0; k < values.size(); ++k) {
    if (std::isfinite(values[k])) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "reference tensor '", name, "' holds ", values[k], " at ",
        IndexString(static_cast<int64_t>(k), shape),
        ": a reference must be finite (remake it with tools/reference/make_fixtures.py)"));
  }
  return absl::OkStatus();
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
  TP_RETURN_IF_ERROR(CheckFinite("logits", ref.logits, logits->shape));
  ref.greedy = Int32Data(*greedy);
  if (file->Find("greedy_logits") != nullptr) {
    TP_ASSIGN_OR_RETURN(const models::TensorView* steps,
                        FindTensor(*file, "greedy_logits", models::StDType::kF32, 2));
    const int64_t rows = static_cast<int64_t>(ref.greedy.size()) - 1;
    if (steps->shape != std::vector<int64_t>{rows, vocab_size}) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reference tensor 'greedy_logits' has shape ", ShapeString(steps->shape), ", expected [",
          rows, ",", vocab_size, "] (greedy tokens - 1, config vocab_size)"));
    }
    TP_ASSIGN_OR_RETURN(ref.greedy_logits, models::ToFloat32(*steps));
    TP_RETURN_IF_ERROR(CheckFinite("greedy_logits", ref.greedy_logits, steps->shape));
  }
  if (file->Find("bf16_relative") != nullptr) {
    TP_ASSIGN_OR_RETURN(const models::TensorView* spread,
                        FindTensor(*file, "bf16_relative", models::StDType::kF32, 1));
    if (spread->shape[0] != 2) {
      return absl::InvalidArgumentError(absl::StrCat("reference tensor 'bf16_relative' has shape ",
                                                     ShapeString(spread->shape),
                                                     ", expected [2] (prompt, decode steps)"));
    }
    TP_ASSIGN_OR_RETURN(ref.bf16_relative, models::ToFloat32(*spread));
    TP_RETURN_IF_ERROR(CheckFinite("bf16_relative", ref.bf16_relative, spread->shape));
    for (float v : ref.bf16_relative) {
      if (v < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reference tensor 'bf16_relative' holds ", v, ": a relative error is >= 0"));
      }
    }
  }
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

// The comparison of rows of logits with the reference's.
struct RowCheck {
  bool relative_ok = false;
  std::vector<int64_t> near_ties, differ;
  bool argmax_ok() const { return differ.empty(); }
  bool ok() const { return relative_ok && argmax_ok(); }
};

// Compares `rows` rows of V logits and prints two lines: the largest absolute difference
// relative to the largest reference magnitude (limit `max_relative`), and where the argmax
// agrees. With `near_ties`, a row whose argmax differs is a near-tie when the reference's
// logit of its own top token exceeds its logit of ours by at most twice the largest
// deviation the comparison measured (and accepted): within that error any backend may pick
// either token. Every other difference is printed with its gap.
RowCheck CompareRows(absl::string_view what, const std::vector<float>& ours,
                     const std::vector<float>& ref, int64_t vocab, double max_relative,
                     bool near_ties) {
  RowCheck check;
  const int64_t rows = static_cast<int64_t>(ref.size()) / vocab;
  double max_diff = 0, max_ref = 0;
  bool finite = ours.size() == ref.size();
  for (size_t k = 0; finite && k < ours.size(); ++k) {
    if (!std::isfinite(ours[k])) finite = false;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[k]) - ref[k]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[k])));
  }
  const double relative = !finite         ? NAN
                          : max_ref > 0   ? max_diff / max_ref
                          : max_diff == 0 ? 0.0
                                          : INFINITY;
  check.relative_ok = relative <= max_relative;
  std::cout << absl::StrFormat(
      "%s logits: max |ours - ref| = %.3g, max |ref| = %.3g, relative %.3g (limit %.0e)%s: %s\n",
      what, max_diff, max_ref, relative, max_relative, finite ? "" : ", non-finite or missing",
      check.relative_ok ? "ok" : "FAIL");
  if (!finite) {
    check.differ.push_back(0);
    return check;
  }
  int64_t agree = 0;
  std::vector<std::string> details;
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t mine = ArgmaxRow(ours, t, vocab);
    const int64_t theirs = ArgmaxRow(ref, t, vocab);
    if (mine == theirs) {
      ++agree;
      continue;
    }
    const float* row = ref.data() + t * vocab;
    double row_max = 0;
    for (int64_t j = 0; j < vocab; ++j) row_max = std::max(row_max, std::fabs(double{row[j]}));
    const double gap = double{row[theirs]} - double{row[mine]};
    if (near_ties && gap <= 2 * max_diff) {
      check.near_ties.push_back(t);
    } else {
      check.differ.push_back(t);
      details.push_back(absl::StrFormat(
          "  row %d: ours %d, reference %d; reference gap %.4g = %.2f%% of the row's largest "
          "magnitude; our error there %.3g and %.3g",
          t, mine, theirs, gap, 100 * gap / row_max,
          std::fabs(double{ours[t * vocab + theirs]} - row[theirs]),
          std::fabs(double{ours[t * vocab + mine]} - row[mine])));
    }
  }
  std::cout << absl::StrFormat(
      "%s argmax: %d/%d rows agree (%.1f%%)%s%s: %s\n", what, agree, rows,
      100.0 * agree / std::max<int64_t>(1, rows),
      check.near_ties.empty()
          ? ""
          : absl::StrCat(", near-ties at ", absl::StrJoin(check.near_ties, ",")),
      check.differ.empty() ? "" : absl::StrCat(", differ at ", absl::StrJoin(check.differ, ",")),
      check.argmax_ok() ? "ok" : "FAIL");
  for (const std::string& line : details) std::cout << line << "\n";
  return check;
}

// One decode step of one sequence: the logits [V] after `token` at `position`.
using DecodeStep =
    std::function<absl::StatusOr<std::vector<float>>(int32_t token, int32_t position)>;

// The greedy continuation after the prompt (as many tokens as the reference holds), from the
// prompt's logits [T, V] and one decode step per further token.
absl::StatusOr<std::vector<int32_t>> GreedySteps(const std::vector<float>& prompt_logits,
                                                 const Reference& ref, int64_t vocab,
                                                 const DecodeStep& step) {
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  std::vector<int32_t> greedy;
  int32_t next = static_cast<int32_t>(ArgmaxRow(prompt_logits, prompt_len - 1, vocab));
  for (int64_t k = 0; k < num_greedy; ++k) {
    greedy.push_back(next);
    if (k + 1 == num_greedy) break;
    TP_ASSIGN_OR_RETURN(std::vector<float> logits,
                        step(next, static_cast<int32_t>(prompt_len + k)));
    next = static_cast<int32_t>(ArgmaxRow(logits, 0, vocab));
  }
  return greedy;
}

// The logits [N - 1, V] of the decode steps fed the reference's greedy tokens, after the
// caller ran the prompt.
absl::StatusOr<std::vector<float>> ForcedSteps(const Reference& ref, const DecodeStep& step) {
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  std::vector<float> forced;
  for (size_t j = 0; j + 1 < ref.greedy.size(); ++j) {
    TP_ASSIGN_OR_RETURN(
        std::vector<float> logits,
        step(ref.greedy[j], static_cast<int32_t>(prompt_len + static_cast<int64_t>(j))));
    forced.insert(forced.end(), logits.begin(), logits.end());
  }
  return forced;
}

// What a backend computed for the reference prompt.
struct Outputs {
  std::vector<float> logits;                 // [T, V]
  std::vector<std::vector<int32_t>> greedy;  // one continuation per way of decoding
  std::vector<std::string> greedy_names;
  // With the reference's greedy_logits: the logits of each decode step fed the reference's
  // greedy token j at position T + j, [N - 1, V].
  std::vector<float> forced;
};

// The cpu backend of one rank graph, or of every rank's under --tp (TensorParallelCpu).
struct CpuRunner {
  std::function<absl::StatusOr<std::vector<float>>(const std::vector<int32_t>&,
                                                   const std::vector<int32_t>&)>
      run;
  std::function<void()> reset;
};

absl::StatusOr<Outputs> RunCpu(const models::ModelConfig& config,
                               const models::Checkpoint& checkpoint, const Reference& ref,
                               int64_t vocab) {
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  TP_ASSIGN_OR_RETURN(const models::TensorParallel tp, tools::TensorParallelFromFlags());
  runtime::cpu::CpuBackend::Options options;
  options.batch = 1;
  options.max_seq = prompt_len + num_greedy;
  if (const auto threads = absl::GetFlag(FLAGS_threads)) {
    options.threads = static_cast<int>(std::min<int64_t>(threads->value, 1 << 16));
  }
  const bool plan = absl::GetFlag(FLAGS_plan);
  planner::PipelineOptions plan_options;
  plan_options.tokens = prompt_len;
  plan_options.batch = options.batch;
  plan_options.cache_capacity = options.max_seq;
  plan_options.fuse_moe = absl::GetFlag(FLAGS_fuse_moe);
  plan_options.fuse_norm_moe = absl::GetFlag(FLAGS_fuse_norm_moe);
  // Every rank's graphs (one rank without --tp): planned per phase, or primitive.
  std::vector<runtime::cpu::TensorParallelCpu::RankGraphs> ranks;
  std::string graph_line;
  for (int64_t rank = 0; rank < tp.ranks; ++rank) {
    TP_ASSIGN_OR_RETURN(ir::Graph graph,
                        models::LowerModel(config, models::TensorParallel{tp.ranks, rank}));
    if (plan) {
      // The IR after the passes is printed for the first rank only.
      TP_ASSIGN_OR_RETURN(
          planner::PhaseGraphs planned,
          planner::PlanPhases(graph, plan_options,
                              rank == 0 ? tools::PrintOptionsFromFlags() : planner::PrintOptions{}));
      graph_line = absl::StrCat("planned (prefill ", planned.prefill.regions().size(),
                                " regions for T = ", prompt_len, ", decode ",
                                planned.decode.regions().size(), " regions for T = 1)");
      ranks.push_back({std::move(planned.prefill), std::move(planned.decode)});
    } else {
      graph_line = absl::StrCat("primitive (", graph.regions().size(), " regions)");
      ranks.push_back({std::move(graph), std::nullopt});
    }
  }
  CpuRunner runner;
  int threads = 0;
  if (tp.ranks == 1) {
    std::shared_ptr<runtime::cpu::CpuBackend> backend;
    if (plan) {
      TP_ASSIGN_OR_RETURN(backend, runtime::cpu::CpuBackend::CreatePhased(
                                       ranks[0].prefill, *ranks[0].decode, checkpoint, options));
    } else {
      TP_ASSIGN_OR_RETURN(backend,
                          runtime::cpu::CpuBackend::Create(ranks[0].prefill, checkpoint, options));
    }
    threads = backend->num_threads();
    runner.run = [backend](const std::vector<int32_t>& t, const std::vector<int32_t>& p) {
      return backend->Run(t, p);
    };
    runner.reset = [backend] { backend->Reset(); };
  } else {
    TP_ASSIGN_OR_RETURN(std::shared_ptr<runtime::cpu::TensorParallelCpu> group,
                        runtime::cpu::TensorParallelCpu::Create(std::move(ranks), checkpoint,
                                                                options));
    threads = group->threads_per_rank();
    runner.run = [group](const std::vector<int32_t>& t, const std::vector<int32_t>& p) {
      return group->Run(t, p);
    };
    runner.reset = [group] { group->Reset(); };
  }
  std::cout << "backend: cpu (" << threads << (threads == 1 ? " thread" : " threads")
            << (tp.ranks > 1 ? absl::StrCat(" per rank; tensor parallel: ", tp.ranks,
                                            " ranks, each on its slices of the weights, meeting "
                                            "in-process at every all_reduce and all_gather")
                             : std::string())
            << ")\n"
            << "graph: " << graph_line << (tp.ranks > 1 ? " per rank" : "") << "\n";
  std::vector<int32_t> positions(static_cast<size_t>(prompt_len));
  for (int64_t t = 0; t < prompt_len; ++t) positions[t] = static_cast<int32_t>(t);
  Outputs out;
  TP_ASSIGN_OR_RETURN(out.logits, runner.run(ref.input_ids, positions));
  const DecodeStep step = [&](int32_t token, int32_t position) {
    return runner.run({token}, {position});
  };
  TP_ASSIGN_OR_RETURN(std::vector<int32_t> greedy, GreedySteps(out.logits, ref, vocab, step));
  out.greedy.push_back(std::move(greedy));
  out.greedy_names.push_back("greedy");
  if (!ref.greedy_logits.empty()) {
    runner.reset();
    TP_RETURN_IF_ERROR(runner.run(ref.input_ids, positions).status());
    TP_ASSIGN_OR_RETURN(out.forced, ForcedSteps(ref, step));
  }
  return out;
}

absl::StatusOr<Outputs> RunGpu(const models::ModelConfig& config,
                               const models::Checkpoint& checkpoint, const Reference& ref,
                               int64_t vocab) {
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  TP_ASSIGN_OR_RETURN(const models::TensorParallel tp, tools::TensorParallelFromFlags());
  TP_ASSIGN_OR_RETURN(std::unique_ptr<device::Device> device, device::Device::Open(0));
  TP_ASSIGN_OR_RETURN(targets::TargetDescription target, runtime::gpu::TargetForDevice(*device));
  planner::PlanOptions plan_options;
  plan_options.prefill_tokens = {prompt_len};
  plan_options.prefill_batch = 1;
  plan_options.decode_batches = {1};
  plan_options.max_context = prompt_len + num_greedy;
  plan_options.decode_fuse_moe = absl::GetFlag(FLAGS_fuse_moe);
  plan_options.decode_fuse_norm_moe = absl::GetFlag(FLAGS_fuse_norm_moe);
  plan_options.prefill_mla_expanded = absl::GetFlag(FLAGS_mla_prefill);
  plan_options.print = tools::PrintOptionsFromFlags();
  plan_options.tensor_parallel = tp.ranks;
  TP_RETURN_IF_ERROR(tools::ApplyDecodeBackendFlags(plan_options));
  // One plan per rank (the IR after the passes is printed for rank 0 only).
  std::vector<planner::proto::ExecutionPlan> plans;
  for (int64_t rank = 0; rank < tp.ranks; ++rank) {
    plan_options.rank = rank;
    if (rank > 0) plan_options.print = {};
    TP_ASSIGN_OR_RETURN(planner::proto::ExecutionPlan plan,
                        planner::BuildExecutionPlan(config, target, plan_options, nullptr));
    plans.push_back(std::move(plan));
  }
  TP_ASSIGN_OR_RETURN(const runtime::gpu::GpuOptions options, tools::GpuOptionsFromFlags());
  // The runtime calls, on one GPU or on every rank's.
  std::function<absl::StatusOr<std::vector<float>>(const std::vector<int32_t>&)> prefill;
  std::function<absl::StatusOr<std::vector<int32_t>>(const std::vector<int32_t>&, int)> generate;
  DecodeStep step;
  std::unique_ptr<runtime::gpu::GpuRuntime> rt;
  std::unique_ptr<runtime::gpu::TensorParallelGpu> ranks;
  const runtime::gpu::GpuRuntimeInfo* info = nullptr;
  if (tp.ranks == 1) {
    TP_ASSIGN_OR_RETURN(rt, runtime::gpu::GpuRuntime::Create(*device, plans[0], &checkpoint,
                                                             options));
    info = &rt->info();
    prefill = [&](const std::vector<int32_t>& t) { return rt->Prefill(t, 1); };
    generate = [&](const std::vector<int32_t>& t, int n) { return rt->Generate(t, 1, n); };
    step = [&](int32_t token, int32_t position) { return rt->Decode({token}, {position}); };
  } else {
    device.reset();  // the ranks open their own devices
    TP_ASSIGN_OR_RETURN(ranks,
                        runtime::gpu::TensorParallelGpu::Create(plans, &checkpoint, options));
    info = &ranks->runtime(0).info();
    prefill = [&](const std::vector<int32_t>& t) { return ranks->Prefill(t, 1); };
    generate = [&](const std::vector<int32_t>& t, int n) { return ranks->Generate(t, 1, n); };
    step = [&](int32_t token, int32_t position) { return ranks->Decode({token}, {position}); };
  }
  const std::string label =
      tp.ranks == 1 ? device->Label()
                    : absl::StrCat(tp.ranks, " tensor-parallel ranks on ",
                                   ranks->device(0).Label(), " and others");
  std::cout << "backend: gpu (" << label << ", target " << target.name() << ", "
            << (options.cuda_graphs ? "CUDA graphs" : "host launches")
            << ", programmatic dependent launch: " << absl::GetFlag(FLAGS_pdl) << "; setup "
            << absl::StrFormat("%.2f s: %d kernels in %.2f s, weights in %.2f s",
                               info->setup_seconds, info->kernels_compiled, info->compile_seconds,
                               info->weights_seconds)
            << (tp.ranks > 1 ? " (rank 0)" : "") << ")\n"
            << "graph: planned (" << plans[0].phases(0).steps_size()
            << " prefill steps for T = " << prompt_len << ", " << plans[0].phases(1).steps_size()
            << " decode steps for B = 1" << (tp.ranks > 1 ? ", per rank" : "") << ")\n";
  Outputs out;
  TP_ASSIGN_OR_RETURN(out.logits, prefill(ref.input_ids));
  TP_ASSIGN_OR_RETURN(std::vector<int32_t> loop,
                      generate(ref.input_ids, static_cast<int>(num_greedy)));
  out.greedy.push_back(std::move(loop));
  out.greedy_names.push_back("greedy (device loop)");
  TP_ASSIGN_OR_RETURN(std::vector<float> again, prefill(ref.input_ids));
  TP_ASSIGN_OR_RETURN(std::vector<int32_t> stepped, GreedySteps(again, ref, vocab, step));
  out.greedy.push_back(std::move(stepped));
  out.greedy_names.push_back("greedy (host steps)");
  if (!ref.greedy_logits.empty()) {
    TP_RETURN_IF_ERROR(prefill(ref.input_ids).status());
    TP_ASSIGN_OR_RETURN(out.forced, ForcedSteps(ref, step));
  }
  return out;
}

// Runs the check; returns the exit status, or an error for bad input.
absl::StatusOr<int> Verify() {
  TP_ASSIGN_OR_RETURN(const tools::ModelArgument model, tools::ModelFromFlags());
  if (model.directory.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model ", model.name,
                     " is a bundled config, which has no weights: verify_model "
                     "needs a checkpoint directory (config.json and safetensors)"));
  }
  const models::ModelConfig& config = model.config;
  TP_ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> checkpoint,
                      models::Checkpoint::Open(model.directory));
  const std::string reference = absl::GetFlag(FLAGS_reference);
  TP_ASSIGN_OR_RETURN(const models::TensorParallel tp, tools::TensorParallelFromFlags());
  // A model tensor parallelism cannot split is refused before any run.
  TP_RETURN_IF_ERROR(models::CheckTensorParallel(config, tp));
  TP_ASSIGN_OR_RETURN(Reference ref, LoadReference(reference, config.vocab_size));
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  if (config.max_position_embeddings > 0 &&
      prompt_len + num_greedy > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference ", reference, ": its prompt (", prompt_len, " tokens) and greedy tokens (",
        num_greedy, ") need ", prompt_len + num_greedy,
        " positions, past the model's max_position_embeddings ", config.max_position_embeddings));
  }
  const int64_t vocab = config.vocab_size;
  const bool gpu = absl::GetFlag(FLAGS_backend) == "gpu";
  // Limits of the prompt and the decode-step comparisons.
  double prompt_limit = kMaxRelativeErrorF32, decode_limit = kMaxRelativeErrorF32;
  if (gpu) {
    prompt_limit = decode_limit = kMaxRelativeErrorBf16;
    if (!ref.bf16_relative.empty()) {
      prompt_limit = std::max(kMinRelativeErrorBf16, kBf16SpreadFactor * ref.bf16_relative[0]);
      decode_limit = std::max(kMinRelativeErrorBf16, kBf16SpreadFactor * ref.bf16_relative[1]);
    }
  }

  std::cout << "model: " << absl::GetFlag(FLAGS_model) << " ("
            << models::ArchitectureName(config.arch) << ", " << config.num_layers
            << " layers, hidden " << config.hidden_size << ", heads " << config.num_heads << "/"
            << config.num_kv_heads << ", head_dim " << config.head_dim << ", vocab " << vocab
            << ", " << ir::DTypeName(config.dtype) << ")\n"
            << "reference: " << reference << " (prompt " << prompt_len << " tokens, greedy "
            << num_greedy << " tokens)\n";
  Outputs outputs;
  if (gpu) {
    TP_ASSIGN_OR_RETURN(outputs, RunGpu(config, *checkpoint, ref, vocab));
  } else {
    TP_ASSIGN_OR_RETURN(outputs, RunCpu(config, *checkpoint, ref, vocab));
  }
  const std::vector<float>& logits = outputs.logits;
  if (const std::string path = absl::GetFlag(FLAGS_logits_out); !path.empty()) {
    TP_RETURN_IF_ERROR(
        WriteFileAtomically(path, Npy(logits, static_cast<int64_t>(logits.size()) / vocab, vocab)));
  }

  if (gpu && !ref.bf16_relative.empty()) {
    std::cout << absl::StrFormat(
        "transformers in bf16 lands at relative %.3g (prompt) and %.3g (decode steps) from the "
        "reference; limits %.3g and %.3g\n",
        ref.bf16_relative[0], ref.bf16_relative[1], prompt_limit, decode_limit);
  }
  const RowCheck prompt_check = CompareRows("prompt", logits, ref.logits, vocab, prompt_limit, gpu);
  bool forced_ok = true;
  std::vector<int64_t> forced_near_ties;
  if (!ref.greedy_logits.empty()) {
    const RowCheck forced =
        CompareRows("decode steps (fed the reference's greedy tokens)", outputs.forced,
                    ref.greedy_logits, vocab, decode_limit, gpu);
    forced_ok = forced.ok();
    forced_near_ties = forced.near_ties;
  }

  // Greedy continuations: token k must match unless the step that chose it, or an earlier
  // one, was a near-tie (prompt position T - 1 chooses token 0; decode step j chooses token
  // j + 1): after a near-tie a bf16 backend may legitimately continue differently.
  int64_t first_tie = num_greedy;
  if (std::find(prompt_check.near_ties.begin(), prompt_check.near_ties.end(), prompt_len - 1) !=
      prompt_check.near_ties.end()) {
    first_tie = 0;
  } else if (!forced_near_ties.empty()) {
    first_tie = forced_near_ties.front() + 1;
  }
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
      continue;
    }
    const bool explained = first_mismatch >= first_tie;
    greedy_ok = greedy_ok && explained;
    std::cout << outputs.greedy_names[g] << ": first mismatch at token " << first_mismatch
              << (explained
                      ? absl::StrCat(", after the near-tie that chose token ", first_tie, ": ok")
                      : ": FAIL")
              << "\n"
              << "  ours:      " << absl::StrJoin(greedy, " ") << "\n"
              << "  reference: " << absl::StrJoin(ref.greedy, " ") << "\n";
  }
  const bool logits_ok = prompt_check.relative_ok && forced_ok;
  const bool argmax_ok = prompt_check.argmax_ok();
  const bool pass = logits_ok && argmax_ok && greedy_ok;
  std::cout << (pass ? "PASS" : "FAIL") << "\n";
  return pass ? kExitPass : kExitMismatch;
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
  absl::StatusOr<int> result = tileplan::Verify();
  if (!result.ok()) {
    std::cerr << "verify_model: " << result.status().message() << "\n";
    return tileplan::kExitBadInput;
  }
  return *result;
}
