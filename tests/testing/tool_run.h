// Running a command-line tool from a test: its exit status and everything it printed.
#ifndef TILEPLAN_TESTS_TESTING_TOOL_RUN_H_
#define TILEPLAN_TESTS_TESTING_TOOL_RUN_H_

#include <filesystem>
#include <string>

#include "absl/strings/string_view.h"

namespace tileplan::testing {

struct ToolResult {
  int exit_code = -1;  // -1 when the tool did not exit normally
  std::string output;  // stdout and stderr
};

// Runs `tool` with `args` (shell words, quoted where needed) through the shell, `env`
// (assignments such as "CUDA_VISIBLE_DEVICES=") before it; stdout and stderr go to `log`,
// which is read back.
ToolResult RunTool(const std::string& tool, const std::string& args,
                   const std::filesystem::path& log, const std::string& env = "");

// A scratch directory private to this process and the running test, created:
// TempDir()/<prefix>.<pid>.<test name>.
std::filesystem::path ScratchDir(absl::string_view prefix);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_TOOL_RUN_H_
