#include "tools/flags.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <utility>

#include "absl/base/config.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace tileplan::tools {
namespace {

// What UsageFailure prints: set by ParseFlags.
std::string& ToolName() {
  static std::string* name = new std::string("tool");
  return *name;
}
std::string& UsageParagraph() {
  static std::string* usage = new std::string;
  return *usage;
}

// The paragraph of `usage` that starts with "usage:" (up to the next empty line).
std::string FindUsageParagraph(absl::string_view usage) {
  std::string out;
  bool in = false;
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    if (!in && !absl::StartsWith(line, "usage:")) continue;
    if (in && absl::StripAsciiWhitespace(line).empty()) break;
    in = true;
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

void PrintUsageParagraph() {
  std::cerr << UsageParagraph() << "(" << ToolName() << " --help describes every flag)\n";
}

[[noreturn]] void ExitWithUsageError(absl::string_view message) {
  UsageFailure(message);
  std::exit(kExitUsage);
}

// Abseil's usage flags (absl/flags/internal/usage.h, DeduceUsageFlags): not flags in its
// registry, handled after parsing.
bool IsUsageFlag(absl::string_view name) {
  for (absl::string_view usage : {"help", "helpfull", "helpshort", "helppackage", "helpon",
                                  "helpmatch", "version", "only_check_args"}) {
    if (name == usage) return true;
  }
  return false;
}

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// `text` with every "--name" of a registered flag written as FlagText(name).
std::string HyphenateFlagNames(absl::string_view text) {
  const auto flags = absl::GetAllFlags();
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text.substr(i, 2) != "--") {
      out += text[i++];
      continue;
    }
    size_t end = i + 2;
    while (end < text.size() && IsNameChar(text[end])) ++end;
    const absl::string_view name = text.substr(i + 2, end - i - 2);
    out += flags.contains(name) ? FlagText(name) : absl::StrCat("--", name);
    i = end;
  }
  return out;
}

// Flags are listed with their file relative to the source tree ("tools/common_flags_plan.cc"),
// and --help lists those of tools/: the tool's own and the common ones it links. A file name
// is __FILE__ of the definition: absolute, or relative to the build directory (Ninja).
void ConfigureHelp() {
  absl::FlagsUsageConfig config;
  config.normalize_filename = [](absl::string_view file) {
    namespace fs = std::filesystem;
    fs::path path{std::string(file)};
    if (path.is_relative()) path = fs::path(TILEPLAN_BINARY_DIR) / path;
    const std::string relative =
        path.lexically_normal().lexically_relative(TILEPLAN_SOURCE_DIR).string();
    return relative.empty() || absl::StartsWith(relative, "..") ? std::string(file) : relative;
  };
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StartsWith(file, "tools/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(std::move(config));
}

}  // namespace

std::string FlagText(absl::string_view name) {
  return absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}));
}

std::vector<std::string> ParseFlags(int argc, char** argv, const ToolInfo& tool) {
  ToolName() = std::filesystem::path(argv[0]).filename().string();
  UsageParagraph() = FindUsageParagraph(tool.usage);
  absl::SetProgramUsageMessage(tool.usage);
  ConfigureHelp();

  // Every flag is checked here, so that each error names the flag as it was written, and
  // handed to Abseil as --name=value.
  std::vector<std::string> positional;
  std::vector<std::string> canonical = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") {
      positional.insert(positional.end(), argv + i + 1, argv + argc);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional.emplace_back(arg);
      continue;
    }
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const bool has_value = eq != absl::string_view::npos;
    const std::string written = absl::StrCat("--", body.substr(0, eq));
    std::string value = has_value ? std::string(body.substr(eq + 1)) : std::string();
    std::string name = absl::StrReplaceAll(body.substr(0, eq), {{"-", "_"}});
    if (auto it = tool.short_names.find(name); it != tool.short_names.end()) name = it->second;
    if (IsUsageFlag(name)) {
      canonical.push_back(absl::StrCat("--", body));
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negative = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::string_view positive = absl::string_view(name).substr(2);
      absl::ConsumePrefix(&positive, "_");
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(positive);
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        negative = true;
      }
    }
    if (flag == nullptr || flag->IsRetired()) {
      ExitWithUsageError(absl::StrCat("unknown flag ", written));
    }
    name = std::string(flag->Name());
    const std::string text = FlagText(name);
    if (flag->IsOfType<bool>()) {
      if (negative && has_value) ExitWithUsageError(absl::StrCat(written, " takes no value"));
      if (!has_value) value = negative ? "false" : "true";
    } else if (!has_value) {
      if (auto it = tool.implicit_values.find(name); it != tool.implicit_values.end()) {
        value = it->second;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        ExitWithUsageError(absl::StrCat(text, " needs a value"));
      }
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      // Abseil's error is "Illegal value '...' specified for flag '...'[; <the type's reason>]".
      const size_t reason = error.find("; ");
      ExitWithUsageError(absl::StrCat(
          text, ": invalid value '", value, "'",
          reason == std::string::npos ? "" : absl::StrCat(": ", error.substr(reason + 2))));
    }
    canonical.push_back(absl::StrCat("--", name, "=", value));
  }

  std::vector<char*> pointers;
  for (std::string& s : canonical) pointers.push_back(s.data());
  absl::flags_internal::ParseCommandLineImpl(
      static_cast<int>(pointers.size()), pointers.data(),
      absl::flags_internal::ArgvListAction::kRemoveParsedArgs,
      absl::flags_internal::UsageFlagsAction::kIgnoreUsage,
      absl::flags_internal::OnUndefinedFlag::kAbortIfUndefined);
  std::ostringstream help;
  if (absl::flags_internal::HandleUsageFlags(help, absl::ProgramUsageMessage()) != -1) {
    std::cout << HyphenateFlagNames(help.str());
    std::exit(0);
  }
  return positional;
}

int UsageFailure(absl::string_view message) {
  std::cerr << ToolName() << ": " << message << "\n";
  PrintUsageParagraph();
  return kExitUsage;
}

bool Given(absl::string_view name) { return absl::flags_internal::WasPresentOnCommandLine(name); }

}  // namespace tileplan::tools

// Abseil calls this after printing a usage error it found itself ("ERROR: ..."), for
// instance in a --flagfile; its own handling would exit with 1.
extern "C" void ABSL_INTERNAL_C_SYMBOL(AbslInternalReportFatalUsageError)(absl::string_view) {
  tileplan::tools::PrintUsageParagraph();
  std::exit(tileplan::tools::kExitUsage);
}
