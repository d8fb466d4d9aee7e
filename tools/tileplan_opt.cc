// tileplan-opt: the IR driver. Reads a graph (an IR text file, or the lowered graph of a
// model config), verifies it, optionally runs planner passes over it, and prints the result
// in canonical text form or as a textproto of regions/ir.proto.
//
//   tileplan-opt FILE|- | --model NAME|DIR
//                [--pass=NAME[,NAME...] | --pipeline=prefill|decode]
//                [--phase=prefill|decode] [--tokens=N] [--batch=N]
//                [--print-after-all] [--print-after=NAME[,NAME...]] [--emit=text|proto]
//   tileplan-opt --list-passes
//
// --model takes a bundled config name (e.g. qwen3-0.6b; it wins over a directory of that
// name) or a checkpoint directory (or its config.json) and starts from models::LowerModel's
// graph. --pass runs the named passes in
// the given order, --pipeline the prefill or decode pipeline (planner/pipelines.h). The
// phase, token count and batch configure specialize_phase: --pipeline=prefill needs
// --tokens (the token bucket T), --pipeline=decode binds T = 1; with --pass the phase is
// decode unless --phase=prefill (which needs --tokens). --batch binds B. The IR printed by
// --print-after-all / --print-after goes to stderr (format in planner/pass.h), the final
// graph to stdout.
//
// Exit status: 0 on success, 1 on a usage or I/O error, 2 when the input does not parse,
// verify or lower, or a pass fails; messages go to stderr, prefixed with the input's name
// ("<stdin>" for -).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "google/protobuf/text_format.h"
#include "models/config.h"
#include "models/lowering.h"
#include "planner/pass.h"
#include "planner/pipelines.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/serialization.h"
#include "regions/verifier.h"
#include "tools/tool_support.h"

namespace {

using tileplan::ir::Graph;
namespace planner = tileplan::planner;
namespace tools = tileplan::tools;

constexpr char kUsage[] =
    "usage: tileplan-opt FILE|- | --model NAME|DIR\n"
    "                    [--pass=NAME[,NAME...] | --pipeline=prefill|decode]\n"
    "                    [--phase=prefill|decode] [--tokens=N] [--batch=N]\n"
    "                    [--print-after-all] [--print-after=NAME[,NAME...]]\n"
    "                    [--emit=text|proto]\n"
    "       tileplan-opt --list-passes\n";

struct Options {
  std::string path;                 // FILE or "-"; empty with --model
  std::string model;                // bundled config name or checkpoint directory
  std::vector<std::string> passes;  // --pass
  std::string pipeline;             // "prefill", "decode" or empty
  std::optional<std::string> phase;
  std::optional<int64_t> tokens;
  std::optional<int64_t> batch;
  bool print_after_all = false;
  std::vector<std::string> print_after;
  bool emit_proto = false;
  bool list_passes = false;
};

std::vector<std::string> NameList(absl::string_view text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

absl::Status CheckCombination(const Options& o) {
  if (o.list_passes) return absl::OkStatus();
  if (o.path.empty() == o.model.empty()) {
    return absl::InvalidArgumentError(o.path.empty() ? "no input: give FILE, - or --model"
                                                     : "give either FILE or --model, not both");
  }
  if (!o.passes.empty() && !o.pipeline.empty()) {
    return absl::InvalidArgumentError("give either --pass or --pipeline, not both");
  }
  const bool runs_passes = !o.passes.empty() || !o.pipeline.empty();
  if ((o.print_after_all || !o.print_after.empty()) && !runs_passes) {
    return absl::InvalidArgumentError(
        "--print-after-all and --print-after need --pass or --pipeline");
  }
  if ((o.phase || o.tokens || o.batch) && !runs_passes) {
    return absl::InvalidArgumentError("--phase, --tokens and --batch need --pass or --pipeline");
  }
  if (!o.pipeline.empty() && o.phase) {
    return absl::InvalidArgumentError("--phase is fixed by --pipeline");
  }
  const bool prefill = o.pipeline == "prefill" || o.phase == "prefill";
  if (prefill && !o.tokens) {
    return absl::InvalidArgumentError("prefill needs --tokens=N (the token bucket)");
  }
  if (!prefill && o.tokens) {
    return absl::InvalidArgumentError("--tokens is the prefill token bucket; decode binds T = 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  bool have_path = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value_of = [&](absl::string_view flag) -> std::optional<std::string> {
      const std::string prefix = absl::StrCat(flag, "=");
      if (absl::StartsWith(arg, prefix)) return arg.substr(prefix.size());
      return std::nullopt;
    };
    if (arg == "--emit=text" || arg == "--emit=proto") {
      o.emit_proto = arg == "--emit=proto";
    } else if (arg == "--list-passes") {
      o.list_passes = true;
    } else if (arg == "--print-after-all") {
      o.print_after_all = true;
    } else if (arg == "--model") {
      if (i + 1 >= argc) return absl::InvalidArgumentError("--model needs a NAME or DIR");
      o.model = argv[++i];
    } else if (auto v = value_of("--model")) {
      o.model = *v;
    } else if (auto v = value_of("--pass")) {
      for (std::string& name : NameList(*v)) o.passes.push_back(std::move(name));
    } else if (auto v = value_of("--pipeline")) {
      if (*v != "prefill" && *v != "decode") {
        return absl::InvalidArgumentError(
            absl::StrCat("--pipeline expects prefill or decode, got '", *v, "'"));
      }
      o.pipeline = *v;
    } else if (auto v = value_of("--phase")) {
      if (*v != "prefill" && *v != "decode") {
        return absl::InvalidArgumentError(
            absl::StrCat("--phase expects prefill or decode, got '", *v, "'"));
      }
      o.phase = *v;
    } else if (auto v = value_of("--tokens")) {
      TP_ASSIGN_OR_RETURN(o.tokens, tools::PositiveInt("--tokens", *v));
    } else if (auto v = value_of("--batch")) {
      TP_ASSIGN_OR_RETURN(o.batch, tools::PositiveInt("--batch", *v));
    } else if (auto v = value_of("--print-after")) {
      for (std::string& name : NameList(*v)) o.print_after.push_back(std::move(name));
    } else if (arg != "-" && absl::StartsWith(arg, "-")) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", arg, "'"));
    } else if (have_path) {
      return absl::InvalidArgumentError(absl::StrCat("more than one input: '", arg, "'"));
    } else {
      o.path = arg;
      have_path = true;
    }
  }
  TP_RETURN_IF_ERROR(CheckCombination(o));
  return o;
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), {});
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  return text.str();
}

// The pipeline the options ask for; empty when they ask for none.
absl::StatusOr<planner::PassPipeline> BuildPipeline(const Options& o) {
  if (!o.pipeline.empty()) {
    planner::PipelineOptions options;
    options.tokens = o.tokens.value_or(0);
    options.batch = o.batch;
    return o.pipeline == "prefill" ? planner::BuildPrefillPipeline(options)
                                   : planner::BuildDecodePipeline(options);
  }
  planner::PassOptions options;
  options.phase =
      o.phase == "prefill" ? tileplan::ir::Phase::kPrefill : tileplan::ir::Phase::kDecode;
  options.tokens = o.tokens.value_or(1);
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

// The lowered graph of a bundled config or of a checkpoint directory's config.json. I/O
// errors come back as they are; a config that does not parse or lower as InvalidArgument.
absl::StatusOr<Graph> LowerNamedModel(const std::string& model) {
  namespace models = tileplan::models;
  bool bundled = false;
  for (const std::string& name : models::BundledConfigNames()) bundled = bundled || name == model;
  TP_ASSIGN_OR_RETURN(const models::ModelConfig config,
                      bundled ? models::BundledModelConfig(model)
                              : models::LoadModelConfig(std::filesystem::path(model)));
  return models::LowerModel(config);
}

void ListPasses() {
  const planner::PassRegistry& registry = planner::GlobalPassRegistry();
  for (const std::string& name : registry.Names()) {
    std::cout << name << "  " << registry.Summary(name) << "\n";
  }
}

// Runs everything after argument parsing; returns the exit status.
int Run(const Options& o) {
  const std::string name = o.model.empty() ? (o.path == "-" ? "<stdin>" : o.path) : o.model;
  absl::StatusOr<planner::PassPipeline> pipeline = BuildPipeline(o);
  if (!pipeline.ok()) {
    std::cerr << "tileplan-opt: " << pipeline.status().message() << "\n";
    return 1;
  }
  const std::vector<std::string> names = pipeline->PassNames();
  for (const std::string& pass : o.print_after) {
    if (std::find(names.begin(), names.end(), pass) == names.end()) {
      std::cerr << "tileplan-opt: --print-after=" << pass << " names a pass that does not run\n";
      return 1;
    }
  }
  absl::StatusOr<Graph> graph;
  if (o.model.empty()) {
    absl::StatusOr<std::string> text = ReadInput(o.path);
    if (!text.ok()) {
      std::cerr << "tileplan-opt: " << text.status().message() << "\n";
      return 1;
    }
    graph = tileplan::ir::ParseGraph(*text);
  } else {
    graph = LowerNamedModel(o.model);
    if (!graph.ok() && graph.status().code() != absl::StatusCode::kInvalidArgument) {
      std::cerr << "tileplan-opt: " << graph.status().message() << "\n";
      return 1;
    }
  }
  absl::Status status = graph.status();
  if (status.ok()) {
    planner::PrintOptions print;
    print.after_all = o.print_after_all;
    print.after = o.print_after;
    print.out = &std::cerr;
    status = pipeline->Run(*graph, print).status();
  }
  absl::StatusOr<std::string> out =
      status.ok() ? Emit(*graph, o.emit_proto) : absl::StatusOr<std::string>(status);
  if (!out.ok()) {
    std::cerr << name << ": " << out.status().message() << "\n";
    return 2;
  }
  std::cout << *out;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<Options> options = ParseArgs(argc, argv);
  if (!options.ok()) {
    std::cerr << "tileplan-opt: " << options.status().message() << "\n" << kUsage;
    return 1;
  }
  if (options->list_passes) {
    ListPasses();
    return 0;
  }
  return Run(*options);
}
