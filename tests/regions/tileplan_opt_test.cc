// tileplan-opt end to end: output forms, passes and pipelines, exit codes and error messages.
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
#include "tests/testing/paths.h"

namespace tileplan::ir {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
      absl::StrCat("'", tileplan::testing::BuiltBinary(TILEPLAN_OPT).string(), "' ", args, " >'",
                   out, "' 2>'", err, "'");
  const int status = std::system(command.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

const std::string& GoldenPath() {
  static const std::string path =
      tileplan::testing::SourcePath("tests/regions/testdata/tiny_llama.tpir").string();
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
      tileplan::testing::SourcePath("tests/regions/testdata/tiny_planned.tpir").string();
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

TEST(TileplanOptTest, UsageAndIoErrorsExitTwo) {
  EXPECT_EQ(RunOpt("").exit_code, 2);
  const RunResult emit = RunOpt(absl::StrCat("--emit=json '", GoldenPath(), "'"));
  EXPECT_EQ(emit.exit_code, 2);
  EXPECT_THAT(emit.err, HasSubstr("--emit expects text or proto, got 'json'"));
  EXPECT_THAT(emit.err, HasSubstr("usage: tileplan-opt"));
  EXPECT_EQ(RunOpt(absl::StrCat("'", GoldenPath(), "' '", GoldenPath(), "'")).exit_code, 2);
  const RunResult missing = RunOpt("/nonexistent/graph.tpir");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/graph.tpir: No such file or directory"));
  const std::string testdata = tileplan::testing::SourcePath("tests/regions/testdata").string();
  const RunResult directory = RunOpt(absl::StrCat("'", testdata, "'"));
  EXPECT_EQ(directory.exit_code, 2);
  EXPECT_THAT(directory.err, HasSubstr(testdata + " is a directory, not a regular file"));
  // A device is refused by its kind before anything is read (/dev/zero would never end).
  const RunResult device = RunOpt("/dev/zero");
  EXPECT_EQ(device.exit_code, 2);
  EXPECT_THAT(device.err, HasSubstr("/dev/zero is a character device, not a regular file"));
  // A mistyped flag names itself.
  const RunResult unknown = RunOpt(absl::StrCat("--pipline=decode '", GoldenPath(), "'"));
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.out, "");
  EXPECT_THAT(unknown.err, ::testing::StartsWith("tileplan-opt: unknown flag --pipline\n"));
}

TEST(TileplanOptTest, HelpDescribesTheToolAndItsFlags) {
  const RunResult r = RunOpt("--help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tileplan-opt: the IR driver"));
  EXPECT_THAT(r.out, HasSubstr("usage: tileplan-opt FILE|- | --model DIR|FILE|NAME"));
  EXPECT_THAT(r.out, HasSubstr("Exit status: 0 done; 2 "));
  EXPECT_THAT(r.out, HasSubstr("    --pipeline (run the prefill or the decode pipeline"));
  EXPECT_THAT(r.out, HasSubstr("    --print-after-all (print the IR"));
  EXPECT_THAT(r.out, HasSubstr("    --list-passes (list the registered passes"));
}

constexpr char kDeadCode[] = R"(graph @g {
  input %x: f32[B,T,4]
  %y: f32[B,T,4] = silu(%x)
  %dead: f32[B,T,4] = mul(%y, %y)
  output %y
}
)";

TEST(TileplanOptTest, RunsNamedPassesInOrder) {
  const std::string path = WriteTemp("dead.tpir", kDeadCode);
  const RunResult r = RunOpt(absl::StrCat("--pass=dce,specialize_phase '", path, "'"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // B is bound to --batch, 1 by default.
  EXPECT_EQ(r.out,
            "graph @g {\n  input %x: f32[1,1,4]\n  %y: f32[1,1,4] = silu(%x) phase(decode)\n"
            "  output %y\n}\n");
  EXPECT_EQ(r.err, "");
  const RunResult prefill = RunOpt(
      absl::StrCat("--pass=specialize_phase --phase=prefill --prefill=8 --batch=2 '", path, "'"));
  EXPECT_EQ(prefill.exit_code, 0) << prefill.err;
  EXPECT_THAT(prefill.out, HasSubstr("%dead: f32[2,8,4] = mul(%y, %y) phase(prefill)"));
}

TEST(TileplanOptTest, PrintsAfterPassesOnStderr) {
  const std::string path = WriteTemp("dead_print.tpir", kDeadCode);
  const RunResult all = RunOpt(absl::StrCat("--pass=dce,dce --print-after-all '", path, "'"));
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.err, absl::StrCat("// ----- IR after dce (pass 1 of 2)\n", all.out,
                                  "// ----- IR after dce (pass 2 of 2): unchanged\n"));
  const RunResult one =
      RunOpt(absl::StrCat("--pipeline=decode --print-after=specialize_phase '", path, "'"));
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.err, absl::StrCat("// ----- IR after specialize_phase (pass 11 of 12)\n", one.out));
}

TEST(TileplanOptTest, PlansABundledModel) {
  const RunResult r = RunOpt("--model qwen3-0.6b --pipeline=decode --batch=4");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("= concat(\"model.layers.0.self_attn.q_proj.weight\", "
                               "\"model.layers.0.self_attn.k_proj.weight\", "
                               "\"model.layers.0.self_attn.v_proj.weight\")"));
  EXPECT_THAT(r.out, HasSubstr("%l0.qkv: bf16[4,1,4096] = rms_norm_linear(%"));
  EXPECT_THAT(r.out, HasSubstr("= qk_norm_rope_kv_write_attention(%l0.qkv, "));
  EXPECT_THAT(r.out, HasSubstr("%l27.out: bf16[4,1,1024] = linear_residual("));
  EXPECT_EQ(r.err, "");
  const RunResult primitive = RunOpt("--model=qwen3-0.6b");
  EXPECT_EQ(primitive.exit_code, 0) << primitive.err;
  EXPECT_THAT(primitive.out, HasSubstr("%l0.q: bf16[B,T,2048] = linear(%l0.attn_norm, "));
}

// The fuse_moe pass (on by default in the decode pipeline) fuses each MoE block (router to
// residual add) into one moe region for batches of at most 2, which fuse_norm_linear extends
// by the block's norm (rms_norm_moe; --nofuse_norm_moe leaves the norm its own region); a
// larger batch, --nofuse_moe and the prefill pipeline keep the primitive regions.
TEST(TileplanOptTest, FusesTheMoeBlocksForDecodeOnly) {
  // By default the block's norm folds in too, its residual being the norm's input.
  const RunResult decode = RunOpt("--model qwen3-30b-a3b --pipeline=decode");
  EXPECT_EQ(decode.exit_code, 0) << decode.err;
  EXPECT_THAT(decode.out, HasSubstr("%l0.out: bf16[1,1,2048] = rms_norm_moe(%l0.attn_residual, "
                                    "%model.layers.0.post_attention_layernorm.weight, "));
  EXPECT_THAT(decode.out, Not(HasSubstr("= rms_norm(%l0.attn_residual")));
  EXPECT_THAT(decode.out, Not(HasSubstr("= moe_router(")));
  const RunResult two = RunOpt("--model qwen3-30b-a3b --pipeline=decode --batch=2");
  EXPECT_EQ(two.exit_code, 0) << two.err;
  EXPECT_THAT(two.out, HasSubstr("%l0.out: bf16[2,1,2048] = rms_norm_moe(%l0.attn_residual, "));
  const RunResult unnormed =
      RunOpt("--model qwen3-30b-a3b --pipeline=decode --nofuse_norm_moe");
  EXPECT_EQ(unnormed.exit_code, 0) << unnormed.err;
  EXPECT_THAT(unnormed.out, HasSubstr("%l0.out: bf16[1,1,2048] = moe(%l0.mlp_norm, "));
  for (const char* flags : {"--batch=4", "--nofuse_moe"}) {
    const RunResult unfused =
        RunOpt(absl::StrCat("--model qwen3-30b-a3b --pipeline=decode ", flags));
    EXPECT_EQ(unfused.exit_code, 0) << unfused.err;
    EXPECT_THAT(unfused.out, HasSubstr("= moe_router(%l0.mlp_norm, ")) << flags;
    EXPECT_THAT(unfused.out, Not(HasSubstr("= moe("))) << flags;
  }
  const RunResult prefill = RunOpt("--model qwen3-30b-a3b --pipeline=prefill --prefill=16");
  EXPECT_EQ(prefill.exit_code, 0) << prefill.err;
  EXPECT_THAT(prefill.out, HasSubstr("= moe_router(%l0.mlp_norm, "));
  EXPECT_THAT(prefill.out, Not(HasSubstr("= moe(")));
}

TEST(TileplanOptTest, PlansACheckpointDirectorysConfig) {
  const std::string model = tileplan::testing::SourcePath("tests/data/phi3-tiny").string();
  const RunResult r = RunOpt(absl::StrCat("--model '", model, "' --pipeline=prefill --prefill=16"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("= rope_kv_write(%l0.qkv, "));
  EXPECT_THAT(r.out, HasSubstr("phase(prefill)"));
  const RunResult missing = RunOpt("--model /nonexistent/model --pipeline=decode");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err,
              HasSubstr("--model /nonexistent/model is neither an existing path nor a bundled"));
}

TEST(TileplanOptTest, PassFailureExitsTwoNamingPassAndRegion) {
  const std::string path = WriteTemp("mixed_phase.tpir", R"(graph @g {
  input %x: f32[B,T,4]
  %y: f32[B,T,4] = silu(%x) phase(prefill)
  output %y
}
)");
  const RunResult r = RunOpt(absl::StrCat("--pipeline=decode '", path, "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, absl::StrCat(path,
                                ": pass 'specialize_phase': region #0 'silu' (%y) is "
                                "already specialized for prefill, cannot specialize it "
                                "for decode\n"));
}

TEST(TileplanOptTest, PassUsageErrorsExitTwo) {
  const std::string g = absl::StrCat(" '", GoldenPath(), "'");
  EXPECT_THAT(RunOpt("--pass=fuse_everything" + g).err,
              HasSubstr("unknown pass 'fuse_everything'"));
  EXPECT_EQ(RunOpt("--pass=fuse_everything" + g).exit_code, 2);
  EXPECT_THAT(RunOpt("--pipeline=prefill" + g).err,
              HasSubstr("prefill specializes for one token bucket: give --prefill=T"));
  EXPECT_EQ(RunOpt("--pipeline=prefill --prefill=16,32" + g).exit_code, 2);
  EXPECT_THAT(RunOpt("--pipeline=decode --prefill=4" + g).err,
              HasSubstr("--prefill is the prefill token bucket; decode binds T = 1"));
  EXPECT_EQ(RunOpt("--pipeline=decode --prefill=4" + g).exit_code, 2);
  EXPECT_EQ(RunOpt("--pipeline=fast" + g).exit_code, 2);
  EXPECT_EQ(RunOpt("--pipeline=decode --pass=dce" + g).exit_code, 2);
  EXPECT_EQ(RunOpt("--pipeline=decode --phase=decode" + g).exit_code, 2);
  const RunResult zero = RunOpt("--pipeline=decode --batch=0" + g);
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--batch: invalid value '0': needs a positive integer"));
  EXPECT_EQ(RunOpt("--print-after-all" + g).exit_code, 2);
  EXPECT_EQ(RunOpt("--prefill=3" + g).exit_code, 2);
  const RunResult not_run = RunOpt("--pass=dce --print-after=pack_qkv" + g);
  EXPECT_EQ(not_run.exit_code, 2);
  EXPECT_THAT(not_run.err, HasSubstr("--print-after=pack_qkv names a pass that does not run"));
  EXPECT_EQ(RunOpt("--model qwen3-0.6b" + g).exit_code, 2);
  const RunResult no_value = RunOpt("--model");
  EXPECT_EQ(no_value.exit_code, 2);
  EXPECT_THAT(no_value.err, HasSubstr("--model needs a value"));
}

TEST(TileplanOptTest, ListsPasses) {
  const RunResult r = RunOpt("--list-passes");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("pack_qkv  packs the q, k and v projections"));
  EXPECT_THAT(r.out, HasSubstr("specialize_phase  "));
}

}  // namespace
}  // namespace tileplan::ir
