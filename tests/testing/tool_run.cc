#include "tests/testing/tool_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tileplan::testing {

ToolResult RunTool(const std::string& tool, const std::string& args,
                   const std::filesystem::path& log, const std::string& env) {
  const std::string command =
      absl::StrCat(env, " '", tool, "' ", args, " > '", log.string(), "' 2>&1");
  const int status = std::system(command.c_str());
  ToolResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  r.output = ss.str();
  return r;
}

std::filesystem::path ScratchDir(absl::string_view prefix) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              absl::StrCat(prefix, ".", getpid(), ".", info->name());
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tileplan::testing
