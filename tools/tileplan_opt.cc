// tileplan-opt: reads an IR text file (docs/ir.md, "Text format"), verifies it and prints
// it back in canonical text form or as a textproto of regions/ir.proto.
//
//   tileplan-opt FILE|- [--emit=text|proto]
//
// Exit status: 0 on success, 1 on a usage or I/O error, 2 when the input does not parse
// or does not verify; messages go to stderr, prefixed with the file name ("<stdin>" for -).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/text_format.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/serialization.h"
#include "regions/verifier.h"

namespace {

constexpr char kUsage[] = "usage: tileplan-opt FILE|- [--emit=text|proto]\n";

struct Options {
  std::string path;
  bool emit_proto = false;
};

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options options;
  bool have_path = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--emit=text" || arg == "--emit=proto") {
      options.emit_proto = arg == "--emit=proto";
    } else if (arg != "-" && absl::StartsWith(arg, "-")) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", arg, "'"));
    } else if (have_path) {
      return absl::InvalidArgumentError(absl::StrCat("more than one input: '", arg, "'"));
    } else {
      options.path = arg;
      have_path = true;
    }
  }
  if (!have_path) return absl::InvalidArgumentError("no input file");
  return options;
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

// Parses, verifies and prints `text` in the requested form.
absl::StatusOr<std::string> Process(const std::string& text, bool emit_proto) {
  TP_ASSIGN_OR_RETURN(tileplan::ir::Graph graph, tileplan::ir::ParseGraph(text));
  TP_RETURN_IF_ERROR(tileplan::ir::Verify(graph));
  if (!emit_proto) return tileplan::ir::PrintGraph(graph);
  TP_ASSIGN_OR_RETURN(tileplan::ir::proto::Graph message, tileplan::ir::GraphToProto(graph));
  std::string out;
  if (!google::protobuf::TextFormat::PrintToString(message, &out)) {
    return absl::InternalError("textproto printing failed");
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<Options> options = ParseArgs(argc, argv);
  if (!options.ok()) {
    std::cerr << "tileplan-opt: " << options.status().message() << "\n" << kUsage;
    return 1;
  }
  const std::string name = options->path == "-" ? "<stdin>" : options->path;
  absl::StatusOr<std::string> text = ReadInput(options->path);
  if (!text.ok()) {
    std::cerr << "tileplan-opt: " << text.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::string> out = Process(*text, options->emit_proto);
  if (!out.ok()) {
    std::cerr << name << ": " << out.status().message() << "\n";
    return 2;
  }
  std::cout << *out;
  return 0;
}
