// tileplan-opt: the IR driver. Reads a graph (an IR text file, or the lowered graph of a
// model config), verifies it, optionally runs planner passes over it, and prints the result
// in canonical text form or as a textproto of regions/ir.proto. Flags: --help, README.md and
// docs/planner.md.
#include <algorithm>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "google/protobuf/text_format.h"
#include "models/lowering.h"
#include "planner/pass.h"
#include "planner/pipelines.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/serialization.h"
#include "regions/verifier.h"
#include "tools/common_flags.h"
#include "tools/flags.h"

ABSL_FLAG(std::vector<std::string>, pass, {},
          "run these passes (comma-separated, in this order; --list-passes names them)");
ABSL_FLAG(std::string, pipeline, "",
          "run the prefill or the decode pipeline (planner/pipelines.h) instead of --pass");
ABSL_FLAG(std::string, phase, "",
          "with --pass: the phase specialize_phase specializes for, prefill or decode; unset: "
          "decode");
ABSL_FLAG(std::string, emit, "text",
          "the output form: text (the canonical IR) or proto (a textproto of regions/ir.proto)");
ABSL_FLAG(bool, list_passes, false, "list the registered passes with their summaries and stop");
ABSL_FLAG(bool, fuse_moe, true,
          "--pipeline=decode also runs fuse_moe (PipelineOptions::fuse_moe; --nofuse_moe leaves "
          "it out)");
ABSL_FLAG(bool, fuse_norm_moe, true,
          "--pipeline=decode also folds each moe region's norm into it (rms_norm_moe; "
          "PipelineOptions::fuse_norm_moe; --nofuse_norm_moe leaves it out)");

namespace {

using tileplan::ir::Graph;
namespace planner = tileplan::planner;
namespace tools = tileplan::tools;

constexpr char kUsage[] =
    "the IR driver: reads a graph (an IR text file, - for stdin, or the lowered\n"
    "graph of --model), verifies it, optionally runs planner passes over it, and prints the\n"
    "result as canonical IR text or as a textproto of regions/ir.proto. The phase, --prefill and\n"
    "--batch configure specialize_phase: --pipeline=prefill and --phase=prefill specialize for\n"
    "the one token bucket --prefill=T, decode binds T = 1; --batch binds B (default 1). The IR\n"
    "printed by --print-after-all and --print-after goes to stderr (format in planner/pass.h),\n"
    "the final graph to stdout. With --tp N, --model lowers rank --rank of N tensor-parallel\n"
    "ranks (sliced weights, all_reduce and all_gather regions; docs/ir.md).\n"
    "\n"
    "usage: tileplan-opt FILE|- | --model DIR|FILE|NAME [--tp N --rank R]\n"
    "                    [--pass NAME,... | --pipeline prefill|decode]\n"
    "                    [--phase prefill|decode] [--prefill T] [--batch B]\n"
    "                    [--print-after-all] [--print-after NAME,...] [--emit text|proto]\n"
    "       tileplan-opt --list-passes\n"
    "\n"
    "Exit status: 0 done; 2 a usage error, an input that cannot be read, does not parse,\n"
    "verify or lower, or a pass that fails (messages on stderr, prefixed with the input's\n"
    "name, \"<stdin>\" for -).\n"
    "\n"
    "Examples:\n"
    "  tileplan-opt tests/regions/testdata/tiny_llama.tpir --emit=proto\n"
    "  tileplan-opt --model qwen3-0.6b --pipeline=decode --print-after=fuse_swiglu\n"
    "  tileplan-opt --model qwen3-0.6b --pipeline=prefill --prefill=128 --batch=4\n"
    "  tileplan-opt --model qwen2-7b --tp 2 --rank 1 --pipeline=decode\n";

constexpr int kExitError = 2;

// What the flags ask for.
struct Options {
  std::string path;   // FILE or "-"; empty with --model
  std::string model;  // a bundled config name or a checkpoint directory or config file
  std::vector<std::string> passes;
  std::string pipeline;  // "prefill", "decode" or empty
  bool prefill = false;  // specialize for prefill (else decode)
  int64_t tokens = 1;    // T
  int64_t batch = 1;     // B
  bool emit_proto = false;
};

bool OneOf(const std::string& value, const char* a, const char* b) {
  return value == a || value == b;
}

absl::StatusOr<Options> OptionsFromFlags(const std::vector<std::string>& positional) {
  Options o;
  o.model = absl::GetFlag(FLAGS_model);
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("more than one input: '", positional[1], "'"));
  }
  if (!positional.empty()) o.path = positional.front();
  if (o.path.empty() == o.model.empty()) {
    return absl::InvalidArgumentError(o.path.empty() ? "no input: give FILE, - or --model"
                                                     : "give either FILE or --model, not both");
  }
  o.passes = absl::GetFlag(FLAGS_pass);
  o.pipeline = absl::GetFlag(FLAGS_pipeline);
  const std::string phase = absl::GetFlag(FLAGS_phase);
  const std::string emit = absl::GetFlag(FLAGS_emit);
  if (!o.pipeline.empty() && !OneOf(o.pipeline, "prefill", "decode")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pipeline expects prefill or decode, got '", o.pipeline, "'"));
  }
  if (!phase.empty() && !OneOf(phase, "prefill", "decode")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--phase expects prefill or decode, got '", phase, "'"));
  }
  if (!OneOf(emit, "text", "proto")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--emit expects text or proto, got '", emit, "'"));
  }
  o.emit_proto = emit == "proto";
  if (!o.passes.empty() && !o.pipeline.empty()) {
    return absl::InvalidArgumentError("give either --pass or --pipeline, not both");
  }
  const bool runs_passes = !o.passes.empty() || !o.pipeline.empty();
  const planner::PrintOptions print = tools::PrintOptionsFromFlags();
  if ((print.after_all || !print.after.empty()) && !runs_passes) {
    return absl::InvalidArgumentError(
        "--print-after-all and --print-after need --pass or --pipeline");
  }
  if ((tools::Given("phase") || tools::Given("prefill") || tools::Given("batch")) && !runs_passes) {
    return absl::InvalidArgumentError("--phase, --prefill and --batch need --pass or --pipeline");
  }
  if (!o.pipeline.empty() && tools::Given("phase")) {
    return absl::InvalidArgumentError("--phase is fixed by --pipeline");
  }
  o.prefill = o.pipeline == "prefill" || phase == "prefill";
  const std::vector<int64_t>& buckets = absl::GetFlag(FLAGS_prefill).values;
  if (o.prefill && (!tools::Given("prefill") || buckets.size() != 1)) {
    return absl::InvalidArgumentError("prefill specializes for one token bucket: give --prefill=T");
  }
  if (!o.prefill && tools::Given("prefill")) {
    return absl::InvalidArgumentError("--prefill is the prefill token bucket; decode binds T = 1");
  }
  if (o.prefill) o.tokens = buckets.front();
  o.batch = absl::GetFlag(FLAGS_batch).value;
  return o;
}

// IR text of a whole model is a few megabytes; this bounds what a wrong path can make us read.
constexpr uint64_t kMaxInputBytes = uint64_t{64} << 20;

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), {});
  }
  return tileplan::ReadRegularFile(path, kMaxInputBytes);
}

// The pipeline the options ask for; empty when they ask for none.
absl::StatusOr<planner::PassPipeline> BuildPipeline(const Options& o) {
  if (!o.pipeline.empty()) {
    planner::PipelineOptions options;
    options.fuse_moe = absl::GetFlag(FLAGS_fuse_moe);
    options.fuse_norm_moe = absl::GetFlag(FLAGS_fuse_norm_moe);
    options.tokens = o.prefill ? o.tokens : 0;
    options.batch = o.batch;
    return o.prefill ? planner::BuildPrefillPipeline(options)
                     : planner::BuildDecodePipeline(options);
  }
  planner::PassOptions options;
  options.phase = o.prefill ? tileplan::ir::Phase::kPrefill : tileplan::ir::Phase::kDecode;
  options.tokens = o.tokens;
  options.batch = o.batch;
  planner::PassPipeline pipeline;
  for (const std::string& name : o.passes) TP_RETURN_IF_ERROR(pipeline.Add(name, options));
  return pipeline;
}

absl::StatusOr<std::string> Emit(const Graph& graph, bool emit_proto) {
  if (!emit_proto) return tileplan::ir::PrintGraph(graph);
  TP_ASSIGN_OR_RETURN(tileplan::ir::proto::Graph message, tileplan::ir::GraphToProto(graph));
  std::string out;
  if (!google::protobuf::TextFormat::PrintToString(message, &out)) {
    return absl::InternalError("textproto printing failed");
  }
  return out;
}

void ListPasses() {
  const planner::PassRegistry& registry = planner::GlobalPassRegistry();
  for (const std::string& name : registry.Names()) {
    std::cout << name << "  " << registry.Summary(name) << "\n";
  }
}

// Runs everything after argument parsing; returns the exit status. Errors of the request
// (a pass that does not exist or run, an input that cannot be read or found) are prefixed
// "tileplan-opt: ", errors of the input itself with the input's name.
int Run(const Options& o) {
  const std::string name = o.model.empty() ? (o.path == "-" ? "<stdin>" : o.path) : o.model;
  absl::StatusOr<planner::PassPipeline> pipeline = BuildPipeline(o);
  if (!pipeline.ok()) return tools::UsageFailure(pipeline.status().message());
  const planner::PrintOptions print = tools::PrintOptionsFromFlags();
  const std::vector<std::string> names = pipeline->PassNames();
  for (const std::string& pass : print.after) {
    if (std::find(names.begin(), names.end(), pass) == names.end()) {
      return tools::UsageFailure(
          absl::StrCat("--print-after=", pass, " names a pass that does not run"));
    }
  }
  absl::StatusOr<Graph> graph;
  if (o.model.empty()) {
    absl::StatusOr<std::string> text = ReadInput(o.path);
    if (!text.ok()) {
      std::cerr << "tileplan-opt: " << text.status().message() << "\n";
      return kExitError;
    }
    graph = tileplan::ir::ParseGraph(*text);
  } else {
    absl::StatusOr<tools::ModelArgument> model = tools::LoadModelArgument(o.model);
    if (!model.ok() && model.status().code() != absl::StatusCode::kInvalidArgument) {
      std::cerr << "tileplan-opt: " << model.status().message() << "\n";
      return kExitError;
    }
    absl::StatusOr<tileplan::models::TensorParallel> tp = tools::TensorParallelFromFlags();
    if (!tp.ok()) {
      std::cerr << "tileplan-opt: " << tp.status().message() << "\n";
      return kExitError;
    }
    graph = model.ok() ? tileplan::models::LowerModel(model->config, *tp)
                       : absl::StatusOr<Graph>(model.status());
  }
  absl::Status status = graph.status();
  if (status.ok()) status = pipeline->Run(*graph, print).status();
  absl::StatusOr<std::string> out =
      status.ok() ? Emit(*graph, o.emit_proto) : absl::StatusOr<std::string>(status);
  if (!out.ok()) {
    std::cerr << name << ": " << out.status().message() << "\n";
    return kExitError;
  }
  std::cout << *out;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> positional = tools::ParseFlags(argc, argv, {kUsage});
  if (absl::GetFlag(FLAGS_list_passes)) {
    ListPasses();
    return 0;
  }
  absl::StatusOr<Options> options = OptionsFromFlags(positional);
  if (!options.ok()) return tools::UsageFailure(options.status().message());
  return Run(*options);
}
