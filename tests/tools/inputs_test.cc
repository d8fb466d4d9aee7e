// Every file a tool reads is opened the same safe way (base/files.h ReadRegularFile,
// CheckRegularFileOrAbsent): a FIFO, a device or a directory where a config, a target, a
// tactic store, an import or an IR file belongs is refused by its kind at once (exit 2, the
// file named), where it used to block forever or read without bound; a read error is a message
// with the OS's reason, where it used to end in an uncaught exception (exit 134); and a bad
// import file leaves no new store behind. Each tool runs under `timeout`, so that a regression
// to blocking fails the test instead of hanging it.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/tool_run.h"

namespace tileplan {
namespace {

using ::testing::HasSubstr;

class ToolInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ScratchDir("inputs_test");
    fifo_ = (dir_ / "fifo").string();
    std::filesystem::remove(fifo_);
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0);
  }

  testing::ToolResult Run(const std::string& tool, const std::string& args) {
    return testing::RunTool(tool, args, dir_ / "out.txt", "CUDA_VISIBLE_DEVICES= timeout 60");
  }

  // Exit 2 with `message` in the output.
  void ExpectRefused(const testing::ToolResult& r, const std::string& message) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(message));
  }

  std::filesystem::path dir_;
  std::string fifo_;
};

TEST_F(ToolInputsTest, TargetsAndStoresThatAreNoRegularFilesAreRefusedByKind) {
  const std::string plan = "--model qwen3-0.6b --prefill 128 --decode 128 --show-plan";
  ExpectRefused(Run(BENCHMARK_TRANSFORMER_PATH, absl::StrCat(plan, " --target '", fifo_, "'")),
                fifo_ + " is a named pipe (FIFO), not a regular file");
  ExpectRefused(Run(BENCHMARK_TRANSFORMER_PATH, plan + " --target /dev/zero"),
                "/dev/zero is a character device, not a regular file");
  ExpectRefused(
      Run(BENCHMARK_TRANSFORMER_PATH, absl::StrCat(plan, " --tactic-cache '", fifo_, "'")),
      fifo_ + " is a named pipe (FIFO), not a regular file");
  ExpectRefused(
      Run(BENCHMARK_TRANSFORMER_PATH, absl::StrCat(plan, " --tactic-cache '", dir_.string(), "'")),
      dir_.string() + " is a directory, not a regular file");
  ExpectRefused(Run(TILEPLAN_OPT_PATH, absl::StrCat("'", fifo_, "'")),
                fifo_ + " is a named pipe (FIFO), not a regular file");
}

TEST_F(ToolInputsTest, ABadImportFileLeavesNoStoreBehind) {
  const std::string store = (dir_ / "new.db").string();
  ExpectRefused(Run(AUTOTUNE_REGIONS_PATH, absl::StrCat("--tactic-cache '", store,
                                                        "' --import '", fifo_, "'")),
                fifo_ + " is a named pipe (FIFO), not a regular file");
  EXPECT_FALSE(std::filesystem::exists(store));
  ExpectRefused(Run(AUTOTUNE_REGIONS_PATH,
                    absl::StrCat("--tactic-cache '", store, "' --import /dev/zero")),
                "/dev/zero is a character device, not a regular file");
  EXPECT_FALSE(std::filesystem::exists(store));
}

// A model directory whose config.json is a FIFO, or a link to a file whose read fails with
// EIO (/proc/self/mem), for the tools that load a checkpoint's config.
TEST_F(ToolInputsTest, AConfigThatCannotBeReadIsAMessageNotACrash) {
  const std::filesystem::path fifo_model = dir_ / "fifo_model";
  const std::filesystem::path eio_model = dir_ / "eio_model";
  std::filesystem::create_directories(fifo_model);
  std::filesystem::create_directories(eio_model);
  const std::string config = (fifo_model / "config.json").string();
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
  std::filesystem::create_symlink("/proc/self/mem", eio_model / "config.json");
  ExpectRefused(Run(BENCHMARK_TRANSFORMER_PATH,
                    absl::StrCat("--model '", fifo_model.string(), "' --show-plan")),
                config + " is a named pipe (FIFO), not a regular file");
  if (!std::filesystem::exists("/proc/self/mem")) GTEST_SKIP() << "no /proc/self/mem here";
  const std::string eio_config = (eio_model / "config.json").string();
  ExpectRefused(Run(BENCHMARK_TRANSFORMER_PATH,
                    absl::StrCat("--model '", eio_model.string(), "' --show-plan")),
                "cannot read " + eio_config + ": ");
  ExpectRefused(Run(VERIFY_MODEL_PATH, absl::StrCat("--model '", eio_model.string(),
                                                    "' --reference '", eio_model.string(),
                                                    "/r.safetensors' --backend cpu")),
                "cannot read " + eio_config + ": ");
}

}  // namespace
}  // namespace tileplan
