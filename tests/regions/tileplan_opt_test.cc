// tileplan-opt end to end: output forms, exit codes and error messages.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "regions/printer.h"
#include "regions/serialization.h"
#include "tests/regions/graph_testing.h"

namespace tileplan::ir {
namespace {

using ::testing::HasSubstr;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string WriteTemp(absl::string_view name, absl::string_view text) {
  // Tests run as parallel processes sharing TempDir(): the pid keeps their files apart.
  const std::string path = absl::StrCat(::testing::TempDir(), "/", getpid(), "_", name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Runs tileplan-opt with `args` (shell words, already quoted where needed).
RunResult RunOpt(absl::string_view args) {
  const std::string out = absl::StrCat(::testing::TempDir(), "/", getpid(), "_opt_stdout");
  const std::string err = absl::StrCat(::testing::TempDir(), "/", getpid(), "_opt_stderr");
  const std::string command =
      absl::StrCat("'", TILEPLAN_OPT, "' ", args, " >'", out, "' 2>'", err, "'");
  const int status = std::system(command.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

const std::string& GoldenPath() {
  static const std::string path =
      absl::StrCat(TILEPLAN_SOURCE_DIR, "/tests/regions/testdata/tiny_llama.tpir");
  return path;
}

TEST(TileplanOptTest, PrintsCanonicalText) {
  const RunResult r = RunOpt(absl::StrCat("'", GoldenPath(), "'"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, testing::ReadTestData("tiny_llama.tpir"));
  EXPECT_EQ(r.err, "");
}

TEST(TileplanOptTest, ReadsStandardInput) {
  const RunResult r = RunOpt(absl::StrCat("- --emit=text < '", GoldenPath(), "'"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, testing::ReadTestData("tiny_llama.tpir"));
}

TEST(TileplanOptTest, EmitsTextproto) {
  const RunResult r = RunOpt(absl::StrCat("--emit=proto '", GoldenPath(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  proto::Graph message;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(r.out, &message));
  absl::StatusOr<Graph> g = GraphFromProto(message);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(*g), testing::ReadTestData("tiny_llama.tpir"));
}

// Fused kinds, packed weights and fused_from lists go through both output forms.
TEST(TileplanOptTest, PlannedGraphRoundTripsThroughBothForms) {
  const std::string path =
      absl::StrCat(TILEPLAN_SOURCE_DIR, "/tests/regions/testdata/tiny_planned.tpir");
  const RunResult text = RunOpt(absl::StrCat("'", path, "'"));
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, testing::ReadTestData("tiny_planned.tpir"));
  const RunResult proto = RunOpt(absl::StrCat("--emit=proto '", path, "'"));
  ASSERT_EQ(proto.exit_code, 0) << proto.err;
  EXPECT_THAT(proto.out, HasSubstr("fused_from: \"rms_norm\""));
  EXPECT_THAT(proto.out, HasSubstr("checkpoint_tensors: \"model.layers.0.mlp.gate_proj.weight\"\n"
                                   "  checkpoint_tensors: \"model.layers.0.mlp.up_proj.weight\""));
  proto::Graph message;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(proto.out, &message));
  absl::StatusOr<Graph> g = GraphFromProto(message);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(*g), text.out);
}

TEST(TileplanOptTest, ParseErrorExitsTwoWithLocation) {
  const std::string path =
      WriteTemp("bad_parse.tpir", "graph @g {\n  input %x: f32[4]\n  %y: f32[4] = silu(%z)\n}\n");
  const RunResult r = RunOpt(absl::StrCat("'", path, "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, absl::StrCat(path, ": 3:21: undefined value %z\n"));
}

TEST(TileplanOptTest, VerifyErrorExitsTwoNamingRegion) {
  const std::string path =
      WriteTemp("bad_verify.tpir", "graph @g {\n  input %x: f32[4]\n  %y: f32[8] = silu(%x)\n}\n");
  const RunResult r = RunOpt(absl::StrCat("'", path, "' --emit=proto"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("region #0 'silu' (%y): result 0 (%y) has type f32[8], expected "
                               "f32[4]"));
}

TEST(TileplanOptTest, UsageAndIoErrorsExitOne) {
  EXPECT_EQ(RunOpt("").exit_code, 1);
  EXPECT_EQ(RunOpt(absl::StrCat("--emit=json '", GoldenPath(), "'")).exit_code, 1);
  EXPECT_EQ(RunOpt(absl::StrCat("'", GoldenPath(), "' '", GoldenPath(), "'")).exit_code, 1);
  const RunResult missing = RunOpt("/nonexistent/graph.tpir");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("cannot open '/nonexistent/graph.tpir'"));
  const RunResult directory = RunOpt(absl::StrCat("'", TILEPLAN_SOURCE_DIR, "'"));
  EXPECT_EQ(directory.exit_code, 1);
  EXPECT_THAT(directory.err, HasSubstr("is a directory"));
}

}  // namespace
}  // namespace tileplan::ir
