// Command-line parsing of the tools over Abseil flags: one parser, one help format and one
// exit status for usage errors in every tool (README.md, "Tools").
//
// Flags are Abseil flags (ABSL_FLAG); those several tools share are defined once, in
// tools/common_flags.h. On the command line a flag's name may be written with '-' or '_'
// (--max-context, --max_context); --help and the error messages write it with '-'.
#ifndef TILEPLAN_TOOLS_FLAGS_H_
#define TILEPLAN_TOOLS_FLAGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tileplan::tools {

// The exit status of every usage error, in every tool.
inline constexpr int kExitUsage = 2;

struct ToolInfo {
  // The program usage message: what the tool does, then a paragraph starting with "usage:"
  // (printed again after every usage error), exit statuses and examples.
  std::string usage;
  // Flags (Abseil names) whose value is optional, with the value a bare --flag stands for.
  // Their value is taken only after '=': "--show-plan" is "--show-plan=table", and in
  // "--show-plan FILE" FILE is an argument of its own.
  std::map<std::string, std::string> implicit_values = {};
  // One-letter names standing for flags (Abseil names): {"o", "output"} makes "-o FILE"
  // "--output FILE".
  std::map<std::string, std::string> short_names = {};
};

// Parses the command line into the binary's flags and returns the positional arguments
// (those not starting with '-', "-" itself, and all after "--"), in order.
//
// Accepted: --name=value and --name value; for a boolean a bare --name (true), --no-name or
// --noname (false), or --name=true|false; for the flags of tool.implicit_values a bare --name.
// A single leading '-' works as two. --help, --helpshort (the flags defined under tools/:
// this tool's and the common ones it uses) and --helpfull (Abseil's own too) print the usage
// message and the generated flag list to stdout and exit 0.
//
// A usage error prints "<tool>: <message naming the flag>" and the usage paragraph to
// stderr and exits with kExitUsage: a flag this binary does not define, a flag without its
// value, a value the flag's type refuses, or a usage error Abseil itself reports (a
// --flagfile that cannot be read).
std::vector<std::string> ParseFlags(int argc, char** argv, const ToolInfo& tool);

// For the usage errors a tool finds after ParseFlags (combinations of flags, values only the
// tool can check): prints "<tool>: <message>" and the usage paragraph to stderr and returns
// kExitUsage.
int UsageFailure(absl::string_view message);

// Whether the flag `name` (its Abseil name, e.g. "max_context") was on the command line.
// REQUIRES: ParseFlags ran.
bool Given(absl::string_view name);

// "--max-context" for the Abseil name "max_context": how help and messages write a flag.
std::string FlagText(absl::string_view name);

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_FLAGS_H_
