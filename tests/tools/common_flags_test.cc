// The four tools' command lines agree: every common flag (tools/common_flags.h) is described
// alike in the --help of every tool that takes it, from its one definition, and absent from
// the others; every tool answers --help with 0 and a mistyped flag, a missing value or a bad
// value with 2 and a message naming the flag.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/tool_run.h"

namespace tileplan {
namespace {

using ::testing::HasSubstr;

struct Tool {
  std::string name;
  std::string path;
};

const std::vector<Tool>& Tools() {
  static const auto* tools = new std::vector<Tool>{
      {"verify_model", VERIFY_MODEL_PATH},
      {"benchmark_transformer", BENCHMARK_TRANSFORMER_PATH},
      {"tileplan-opt", TILEPLAN_OPT_PATH},
      {"autotune_regions", AUTOTUNE_REGIONS_PATH},
  };
  return *tools;
}

testing::ToolResult RunWith(const Tool& tool, const std::string& args) {
  return testing::RunTool(tool.path, args, testing::ScratchDir("common_flags_test") / "out.txt",
                          "CUDA_VISIBLE_DEVICES=");
}

// A flag's entry in --help: the file it is listed under and its text.
struct Entry {
  std::string file;
  std::string text;
};

// The flags --help lists ("  Flags from FILE:" then "    --name (help); default: ...;",
// continued on lines indented by six).
std::map<std::string, Entry> ListedFlags(const std::string& help) {
  std::map<std::string, Entry> flags;
  std::string file;
  Entry* current = nullptr;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (absl::ConsumePrefix(&line, "  Flags from ")) {
      file = std::string(line.substr(0, line.size() - 1));
      current = nullptr;
    } else if (absl::StartsWith(line, "    --")) {
      const std::string name(line.substr(4, line.find(' ', 4) - 4));
      current = &flags[name];
      *current = {file, std::string(line)};
    } else if (current != nullptr && absl::StartsWith(line, "      ")) {
      absl::StrAppend(&current->text, "\n", line);
    } else {
      current = nullptr;
    }
  }
  return flags;
}

// Every common flag and the tools that take it.
const std::map<std::string, std::set<std::string>>& CommonFlags() {
  const std::set<std::string> all = {"verify_model", "benchmark_transformer", "tileplan-opt",
                                     "autotune_regions"};
  const std::set<std::string> buckets = {"benchmark_transformer", "tileplan-opt",
                                         "autotune_regions"};
  const std::set<std::string> plans = {"benchmark_transformer", "autotune_regions"};
  const std::set<std::string> passes = {"verify_model", "benchmark_transformer", "tileplan-opt"};
  const std::set<std::string> gpu = {"verify_model", "benchmark_transformer"};
  static const auto* flags = new std::map<std::string, std::set<std::string>>{
      {"--model", all},        {"--prefill", buckets},        {"--batch", buckets},
      {"--decode", plans},     {"--max-context", plans},      {"--prefill-logits", plans},
      {"--target", plans},     {"--tactic-cache", plans},     {"--freeze", plans},
      {"--print-keys", plans}, {"--print-after-all", passes}, {"--print-after", passes},
      {"--pdl", gpu},          {"--cuda-graphs", gpu},        {"--tp", all},
      {"--rank", all},
  };
  return *flags;
}

TEST(CommonFlagsTest, EveryToolDescribesACommonFlagAlike) {
  std::map<std::string, std::map<std::string, Entry>> listed;  // tool -> flag -> entry
  for (const Tool& tool : Tools()) {
    const testing::ToolResult r = RunWith(tool, "--help");
    ASSERT_EQ(r.exit_code, 0) << tool.name << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("usage: ", tool.name, " "))) << tool.name;
    EXPECT_THAT(r.output, HasSubstr("Exit status: 0 ")) << tool.name;
    listed[tool.name] = ListedFlags(r.output);
    EXPECT_THAT(listed[tool.name], ::testing::Contains(::testing::Key("--model"))) << r.output;
  }
  for (const auto& [flag, takers] : CommonFlags()) {
    const Entry* first = nullptr;
    for (const Tool& tool : Tools()) {
      SCOPED_TRACE(absl::StrCat(tool.name, " ", flag));
      auto it = listed[tool.name].find(flag);
      if (!takers.contains(tool.name)) {
        EXPECT_EQ(it, listed[tool.name].end()) << it->second.text;
        continue;
      }
      ASSERT_NE(it, listed[tool.name].end());
      EXPECT_TRUE(absl::StartsWith(it->second.file, "tools/common_flags_") ||
                  it->second.file == "tools/gpu_flags.cc")
          << it->second.file;
      if (first == nullptr) {
        first = &it->second;
        continue;
      }
      EXPECT_EQ(it->second.file, first->file);
      EXPECT_EQ(it->second.text, first->text);
    }
  }
  // The shared defaults are the benchmark's.
  EXPECT_THAT(listed["autotune_regions"]["--prefill"].text, HasSubstr("default: 128,512,2048;"));
  EXPECT_THAT(listed["autotune_regions"]["--decode"].text, HasSubstr("default: 128,512,2048;"));
  EXPECT_THAT(listed["autotune_regions"]["--batch"].text, HasSubstr("default: 1;"));
}

TEST(CommonFlagsTest, EveryToolRefusesABadFlagWithTwoNamingIt) {
  for (const Tool& tool : Tools()) {
    SCOPED_TRACE(tool.name);
    testing::ToolResult r = RunWith(tool, "--modle qwen3-0.6b");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, ::testing::StartsWith(absl::StrCat(
                              tool.name, ": unknown flag --modle\nusage: ", tool.name, " ")));
    r = RunWith(tool, "--model");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat(tool.name, ": --model needs a value")));
    // Only a boolean has a negative form.
    r = RunWith(tool, "--no-model");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat(tool.name, ": unknown flag --no-model")));
    // A flagfile Abseil cannot read is a usage error too.
    r = RunWith(tool, "--flagfile=/nonexistent/flags");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("/nonexistent/flags"));
  }
  // The common value types refuse alike.
  for (const char* name : {"benchmark_transformer", "tileplan-opt", "autotune_regions"}) {
    const Tool& tool = *std::find_if(Tools().begin(), Tools().end(),
                                     [&](const Tool& t) { return t.name == name; });
    testing::ToolResult r = RunWith(tool, "--model qwen3-0.6b --batch=two");
    EXPECT_EQ(r.exit_code, 2) << name << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat(
                              name, ": --batch: invalid value 'two': needs a positive integer")));
    r = RunWith(tool, "--model qwen3-0.6b --prefill=128,0");
    EXPECT_EQ(r.exit_code, 2) << name << "\n" << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat(name,
                                       ": --prefill: invalid value '128,0': needs positive "
                                       "integers separated by commas")));
  }
}

}  // namespace
}  // namespace tileplan
