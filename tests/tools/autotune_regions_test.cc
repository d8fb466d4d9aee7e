// autotune_regions end to end. Without a GPU: --help, the refusals of a bad --inject-fault,
// of tuning without a GPU and of exporting a store that does not exist. On a GPU (skipped without
// one, saying why): a fault injected into one candidate of a tiny fixture model kills the worker
// for real (a kernel that executes
// __trap()); the run restarts it, records the candidate as a fault with the CUDA error,
// tunes every region, exits with 3 and says so in its summary; a second run finds every
// region in the store. Label: gpu.
//
// The tool is $AUTOTUNE_REGIONS, else the autotune_regions next to this test binary (as
// tools/gpu/stage.sh stages them), else the one of this build.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/tool_run.h"
#include "tuner/tactic_store.pb.h"

namespace tileplan {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = testing::ToolResult;

fs::path Scratch() { return testing::ScratchDir("autotune_regions_test"); }

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string ToolPath() {
  if (const char* env = std::getenv("AUTOTUNE_REGIONS"); env != nullptr && *env != '\0') {
    return env;
  }
  return testing::BuiltBinary(AUTOTUNE_REGIONS_PATH).string();
}

fs::path Fixture(const std::string& name) {
  return testing::SourcePath(absl::StrCat("tests/data/", name));
}

Result RunTool(const std::string& args) {
  return testing::RunTool(ToolPath(), args, Scratch() / "output.txt");
}

TEST(AutotuneRegionsTest, HelpDescribesFaultInjectionTheWorkerAndTheExitStatus) {
  const Result r = RunTool("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("usage: autotune_regions --model DIR|FILE|NAME --tactic-cache"));
  EXPECT_THAT(r.output, HasSubstr("--inject-fault REGION:CANDIDATE"));
  EXPECT_THAT(r.output, HasSubstr("a testing aid"));
  EXPECT_THAT(r.output, HasSubstr("__trap()"));
  EXPECT_THAT(r.output, HasSubstr("3 every region tuned, but a candidate faulted the GPU"));
  EXPECT_THAT(r.output, HasSubstr("    --worker (internal: the request of a measuring worker"));
}

TEST(AutotuneRegionsTest, BadInjectFaultIsRefusedWithTwo) {
  const std::string cache = (Scratch() / "tactics.db").string();
  for (const char* bad : {"--inject-fault=rms_norm", "--inject-fault=rms_norm:-1",
                          "--inject-fault=:2", "--inject-fault rms_norm:x"}) {
    const Result r = RunTool(absl::StrCat("--model qwen3-0.6b --tactic-cache '", cache, "' ", bad));
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("--inject-fault takes REGION:CANDIDATE")) << bad;
    EXPECT_THAT(r.output, HasSubstr("usage: autotune_regions")) << bad;
  }
  const Result store_only =
      RunTool(absl::StrCat("--tactic-cache '", cache, "' --export x.textproto --inject-fault=a:1"));
  EXPECT_EQ(store_only.exit_code, 2) << store_only.output;
  EXPECT_THAT(store_only.output, HasSubstr("--inject-fault needs regions to tune"));
}

TEST(AutotuneRegionsTest, RefusalsWithoutAGpuOrAStoreExitWithTwo) {
  const fs::path dir = Scratch();
  const std::string cache = (dir / "tactics.db").string();
  // Measuring needs a GPU; listing the keys does not.
  Result r =
      testing::RunTool(ToolPath(), absl::StrCat("--model qwen3-0.6b --tactic-cache '", cache, "'"),
                       dir / "output.txt", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no CUDA device"));
  EXPECT_THAT(r.output, HasSubstr("autotune_regions measures on a GPU (--print-keys lists the keys "
                                  "without one)"));
  EXPECT_FALSE(fs::exists(cache));
  r = RunTool("--model qwen3-0.6b");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("autotune_regions: --tactic-cache is required"));
  r = RunTool("--tactic-cache t.db --model qwen3-0.6b --batch 1,16");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--batch: invalid value '1,16': needs a positive integer"));
  r = RunTool("--tactic-cache t.db --model qwen3-0.6b --candidate-timeout -1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--candidate-timeout -1: seconds in [0, 1e6] (0 waits for ever)"));
  // --export reads an existing store: a missing one is an error, and nothing is created.
  const fs::path exported = dir / "tactics.textproto";
  r = RunTool(absl::StrCat("--tactic-cache '", cache, "' --export '", exported.string(), "'"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("tactic store ", cache, " does not exist")));
  EXPECT_FALSE(fs::exists(cache));
  EXPECT_FALSE(fs::exists(exported));
  // Nothing beside the tool's log: no store, no -wal or -shm file.
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename(), "output.txt");
  }
}

// Skips, saying why, without a usable GPU.
#define TP_REQUIRE_GPU()                                                               \
  do {                                                                                 \
    absl::StatusOr<std::unique_ptr<device::Device>> device_ = device::Device::Open(0); \
    if (!device_.ok()) GTEST_SKIP() << device_.status().message();                     \
  } while (false)

TEST(AutotuneRegionsGpuTest, InjectedFaultIsRecordedAndTheOtherRegionsAreTuned) {
  TP_REQUIRE_GPU();
  const fs::path dir = Scratch();
  const std::string cache = (dir / "tactics.db").string();
  const std::string tune =
      absl::StrCat("--model '", Fixture("qwen3-tiny").string(), "' --tactic-cache '", cache,
                   "' --prefill 16 --decode 32 --repeats 3 ", "--max-candidates 4");
  const Result r = RunTool(absl::StrCat(tune, " '--inject-fault=/ rms_norm:1'"));
  std::printf("%s\n", r.output.c_str());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("injecting a fault (testing aid) at candidate 1 of "));
  EXPECT_THAT(r.output, HasSubstr(") measuring candidate 1 of "));
  EXPECT_THAT(r.output, HasSubstr("; restarting without it"));
  EXPECT_THAT(r.output, HasSubstr(" without any valid candidate, 1 candidates faulted the GPU)"));
  EXPECT_THAT(r.output, HasSubstr("  faulted: "));
  EXPECT_THAT(r.output, HasSubstr("injected fault: the GPU faulted (cuda"));
  std::smatch tuned;
  ASSERT_TRUE(std::regex_search(r.output, tuned, std::regex("tuned ([0-9]+) regions in")))
      << r.output;
  const int regions = std::stoi(tuned[1].str());
  EXPECT_GT(regions, 5);

  // The store: every region tuned with a winner, the faulted candidate recorded as such.
  const fs::path exported = dir / "tactics.textproto";
  const Result e =
      RunTool(absl::StrCat("--tactic-cache '", cache, "' --export '", exported.string(), "'"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  tuner::proto::TacticStoreFile file;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(ReadFile(exported), &file));
  ASSERT_EQ(file.environments_size(), 1);
  const tuner::proto::StoredEnvironment& env = file.environments(0);
  EXPECT_EQ(env.keys_size(), regions);
  int faults = 0;
  for (const tuner::proto::StoredKey& key : env.keys()) {
    SCOPED_TRACE(
        absl::StrCat(key.region_signature(), " ", key.shape_bucket(), " / ", key.family()));
    EXPECT_TRUE(key.has_winner());
    for (const tuner::proto::StoredCandidate& c : key.candidates()) {
      if (c.status() != "fault") continue;
      ++faults;
      EXPECT_EQ(key.family(), "rms_norm");
      EXPECT_THAT(c.reason(), HasSubstr("faulted the GPU: the worker measuring it died: "));
      EXPECT_THAT(c.reason(), HasSubstr("injected fault: the GPU faulted (cuda"));
      // How the worker ended: its error exit after the fault.
      EXPECT_TRUE(
          std::regex_search(c.reason(), std::regex("\\((exit [0-9]+|signal [0-9]+ .*)\\)$")))
          << c.reason();
      EXPECT_EQ(c.median_us(), 0);
      // The other candidates of the key were measured around it.
      EXPECT_GE(key.candidates_size(), 2);
    }
  }
  EXPECT_EQ(faults, 1);

  // Everything is in the store: a second run tunes nothing and exits 0.
  const Result warm = RunTool(tune);
  EXPECT_EQ(warm.exit_code, 0) << warm.output;
  EXPECT_THAT(warm.output, HasSubstr(absl::StrCat(regions, " already in ")));
  EXPECT_THAT(warm.output, HasSubstr(", 0 to tune"));
}

}  // namespace
}  // namespace tileplan
