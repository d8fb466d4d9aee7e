// verify_model: checks a backend against a reference fixture (docs/fixtures.md).
//
//   verify_model --model DIR --reference FILE --backend cpu [--threads N] [--no-plan]
//                [--print-after-all] [--print-after=PASS[,PASS...]]
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
#include "runtime/cpu/cpu_backend.h"

namespace tileplan {
namespace {

constexpr int kExitPass = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitBadInput = 2;

// Thresholds of a float32 backend (docs/fixtures.md).
constexpr double kMaxRelativeError = 1e-4;

constexpr const char* kUsage =
    "usage: verify_model --model DIR --reference FILE --backend cpu [--threads N] [--no-plan]\n"
    "                    [--print-after-all] [--print-after=PASS[,PASS...]]";

struct Args {
  std::string model;
  std::string reference;
  std::string backend;
  int threads = 0;   // 0: the backend's default
  bool plan = true;  // false: run the primitive graph
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

// Runs the check; returns the exit status, or an error for bad input.
absl::StatusOr<int> Verify(const Args& args) {
  if (args.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", args.backend, "'; supported backends: cpu"));
  }
  TP_ASSIGN_OR_RETURN(models::ModelConfig config, models::LoadModelConfig(args.model));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> checkpoint,
                      models::Checkpoint::Open(args.model));
  TP_ASSIGN_OR_RETURN(ir::Graph graph, models::LowerModel(config));
  TP_ASSIGN_OR_RETURN(Reference ref, LoadReference(args.reference, config.vocab_size));
  const int64_t prompt_len = static_cast<int64_t>(ref.input_ids.size());
  const int64_t num_greedy = static_cast<int64_t>(ref.greedy.size());
  const int64_t vocab = config.vocab_size;

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
                                     planned.prefill, planned.decode, *checkpoint, options));
    graph_line = absl::StrCat("planned (prefill ", planned.prefill.regions().size(),
                              " regions for T = ", prompt_len, ", decode ",
                              planned.decode.regions().size(), " regions for T = 1)");
  } else {
    TP_ASSIGN_OR_RETURN(backend, runtime::cpu::CpuBackend::Create(graph, *checkpoint, options));
    graph_line = absl::StrCat("primitive (", graph.regions().size(), " regions)");
  }

  std::cout << "model: " << args.model << " (" << models::ArchitectureName(config.arch) << ", "
            << config.num_layers << " layers, hidden " << config.hidden_size << ", heads "
            << config.num_heads << "/" << config.num_kv_heads << ", head_dim " << config.head_dim
            << ", vocab " << vocab << ", " << ir::DTypeName(config.dtype) << ")\n"
            << "backend: " << args.backend << " (" << backend->num_threads()
            << (backend->num_threads() == 1 ? " thread)\n" : " threads)\n")
            << "graph: " << graph_line << "\n"
            << "reference: " << args.reference << " (prompt " << prompt_len << " tokens, greedy "
            << num_greedy << " tokens)\n";

  std::vector<int32_t> positions(static_cast<size_t>(prompt_len));
  for (int64_t t = 0; t < prompt_len; ++t) positions[t] = static_cast<int32_t>(t);
  TP_ASSIGN_OR_RETURN(std::vector<float> logits, backend->Run(ref.input_ids, positions));

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
  const bool logits_ok = relative <= kMaxRelativeError;
  std::cout << absl::StrFormat(
      "logits: max |ours - ref| = %.3g, max |ref| = %.3g, relative %.3g (limit %.0e)%s: %s\n",
      max_diff, max_ref, relative, kMaxRelativeError, finite ? "" : ", non-finite logits",
      logits_ok ? "ok" : "FAIL");

  int64_t agree = 0;
  std::vector<int64_t> disagree;
  for (int64_t t = 0; t < prompt_len; ++t) {
    if (ArgmaxRow(logits, t, vocab) == ArgmaxRow(ref.logits, t, vocab)) {
      ++agree;
    } else {
      disagree.push_back(t);
    }
  }
  const bool argmax_ok = agree == prompt_len;
  std::cout << absl::StrFormat(
      "argmax: %d/%d positions agree (%.1f%%)%s: %s\n", agree, prompt_len,
      100.0 * agree / prompt_len,
      disagree.empty() ? "" : absl::StrCat(", differ at ", absl::StrJoin(disagree, ",")),
      argmax_ok ? "ok" : "FAIL");

  std::vector<int32_t> greedy;
  int32_t next = static_cast<int32_t>(ArgmaxRow(logits, prompt_len - 1, vocab));
  for (int64_t k = 0; k < num_greedy; ++k) {
    greedy.push_back(next);
    if (k + 1 == num_greedy) break;
    TP_ASSIGN_OR_RETURN(std::vector<float> step,
                        backend->Run({next}, {static_cast<int32_t>(prompt_len + k)}));
    next = static_cast<int32_t>(ArgmaxRow(step, 0, vocab));
  }
  int64_t first_mismatch = -1;
  for (int64_t k = 0; k < num_greedy && first_mismatch < 0; ++k) {
    if (greedy[k] != ref.greedy[k]) first_mismatch = k;
  }
  const bool greedy_ok = first_mismatch < 0;
  if (greedy_ok) {
    std::cout << "greedy: " << num_greedy << "/" << num_greedy << " tokens match: ok\n";
  } else {
    std::cout << "greedy: first mismatch at token " << first_mismatch << ": FAIL\n"
              << "  ours:      " << absl::StrJoin(greedy, " ") << "\n"
              << "  reference: " << absl::StrJoin(ref.greedy, " ") << "\n";
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
