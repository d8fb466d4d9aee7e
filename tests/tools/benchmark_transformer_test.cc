// benchmark_transformer end to end: --help, --show-plan for the bundled configs on a machine
// without a GPU, its machine-readable forms, planning with a tactic store (how many lookups
// hit, and why none did), and the documented refusals (exit status 2).
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "models/config.h"
#include "planner/plan.pb.h"
#include "tests/testing/paths.h"
#include "tests/testing/tool_run.h"
#include "tests/tuner/store_testing.h"
#include "tuner/environment.h"
#include "tuner/tactic_store.h"

namespace tileplan {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using Result = testing::ToolResult;

// A scratch directory private to this process and test.
fs::path Scratch() { return testing::ScratchDir("benchmark_transformer_test"); }

// Runs the tool with every GPU hidden (these tests are about planning; a GPU would add a
// benchmark at real size to every run that shows a plan).
Result RunTool(const std::string& args, const std::string& env = "CUDA_VISIBLE_DEVICES=") {
  return testing::RunTool(testing::BuiltBinary(BENCHMARK_TRANSFORMER_PATH).string(), args,
                          Scratch() / "output.txt", env);
}

TEST(BenchmarkTransformerTest, HelpDescribesTheToolItsFlagsAndExitStatus) {
  const Result r = RunTool("--help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("benchmark_transformer: plans a decoder model for a GPU"));
  EXPECT_THAT(r.output, HasSubstr("usage: benchmark_transformer --model DIR|FILE|NAME"));
  EXPECT_THAT(r.output, HasSubstr("Exit status: 0 done; 2 bad arguments"));
  EXPECT_THAT(r.output, HasSubstr("Examples:\n  benchmark_transformer --model qwen3-0.6b"));
  EXPECT_THAT(r.output, HasSubstr("    --show-plan (print the plan"));
  EXPECT_THAT(r.output, HasSubstr("    --max-context (KV-cache rows per sequence"));
  EXPECT_THAT(r.output, HasSubstr("    --cuda-graphs (replay the phases as CUDA Graphs"));
}

// A bare --show-plan or --time-planning takes no value from the next argument.
TEST(BenchmarkTransformerTest, OptionalValuesComeOnlyAfterEquals) {
  const Result r = RunTool(
      "--model qwen3-0.6b --show-plan --time-planning --prefill 16 "
      "--decode 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plan qwen3-0.6b on h200"));
  EXPECT_THAT(r.output, HasSubstr("launches per decode step: "));
  EXPECT_THAT(r.output, HasSubstr("(2 phases), 20 runs: median "));
}

TEST(BenchmarkTransformerTest, PrintAfterShowsThePassOutputOfEveryPhase) {
  const Result r =
      RunTool("--model qwen3-0.6b --show-plan --prefill 128 --print-after=fuse_residual");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("// ===== prefill T=128\n// ----- IR after fuse_residual "
                                  "(pass 6 of 9)\ngraph @qwen3 {"));
  EXPECT_THAT(r.output, HasSubstr("// ===== decode B=1\n// ----- IR after fuse_residual"));
  EXPECT_THAT(r.output, HasSubstr("= linear_residual("));

  const Result bad = RunTool("--model qwen3-0.6b --show-plan --print-after=no_such_pass");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("cannot print after pass 'no_such_pass'"));
}

TEST(BenchmarkTransformerTest, ShowPlanQwen3OnSm90AppliesEveryFusion) {
  const Result r = RunTool("--model qwen3-0.6b --target sm_90 --show-plan");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plan qwen3-0.6b on h200 (NVIDIA H200, sm_90, 132 SMs)"));
  // Packed q/k/v and gate/up weights, and every fused kind with what it replaced.
  EXPECT_THAT(r.output, HasSubstr("packed weights: 56"));
  EXPECT_THAT(r.output, HasSubstr("qk_norm_rope_kv_write  split,reshape*3,rms_norm*2,rope*2,"
                                  "kv_write*2"));
  // Decode also takes the attention into the RoPE + KV-write region.
  EXPECT_THAT(r.output, HasSubstr("qk_norm_rope_kv_write_attention  split,reshape*3,rms_norm*2,"
                                  "rope*2,kv_write*2,attention"));
  EXPECT_THAT(r.output, HasSubstr("linear_swiglu          linear,split,silu,mul"));
  EXPECT_THAT(r.output, HasSubstr("linear_residual        linear,add"));
  // Decode at batch 1 folds both norms of a layer into the GEMVs after them.
  // (The kind column is as wide as the phase's longest kind.)
  EXPECT_THAT(r.output, ::testing::ContainsRegex("rms_norm_linear +rms_norm,linear "));
  EXPECT_THAT(r.output,
              ::testing::ContainsRegex("rms_norm_linear_swiglu +rms_norm,linear,split,silu,mul"));
  EXPECT_THAT(r.output, HasSubstr("prefill T=128 ("));
  EXPECT_THAT(r.output, HasSubstr("prefill T=2048 ("));
  EXPECT_THAT(r.output, HasSubstr("memory: arena "));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("launches per decode step: (\\d+)\n")))
      << r.output;
  // Five per layer, plus the embedding, the final norm and the LM head.
  EXPECT_EQ(std::stoi(m[1]), 5 * 28 + 3);
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr(" kv_write ")));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr(" silu ")));
}

TEST(BenchmarkTransformerTest, EveryBundledConfigShowsAPlan) {
  for (const std::string& name : models::BundledConfigNames()) {
    const Result r =
        RunTool(absl::StrCat("--model ", name, " --prefill 64 --decode 256 --show-plan"));
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("launches per decode step: ")) << name;
  }
}

// Qwen2-72B's 135 GiB of weights leave an H200 (140 GiB) no room for batch 16 at 512 tokens:
// refused with the sizes and the ways out, it plans split over two GPUs, each rank's memory
// half of the weights and its collectives on the link.
TEST(BenchmarkTransformerTest, AModelTooLargeForOneGpuPlansOverTwo) {
  const std::string args = "--model qwen2-72b --batch 16 --prefill 512 --decode 512 --show-plan";
  const Result one = RunTool(args);
  EXPECT_EQ(one.exit_code, 2) << one.output;
  EXPECT_THAT(one.output, HasSubstr("weights 135.43 GiB"));
  EXPECT_THAT(one.output, HasSubstr("or split the model over more GPUs (--tp 2)"));
  const Result two = RunTool(args + " --tp 2");
  EXPECT_EQ(two.exit_code, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("tensor parallel: rank 0 of 2 over NVLink 4"));
  EXPECT_THAT(two.output, HasSubstr("weights 68.87 GiB"));
  EXPECT_THAT(two.output, HasSubstr(" all_reduce "));
  EXPECT_THAT(two.output, HasSubstr(" link "));
  const Result bad = RunTool(args + " --tp 2 --rank 2");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--rank is 2; with --tp 2 it must be in [0, 2)"));
}

// A committed two-layer fixture keeps the machine forms small.
std::string TinyModel() { return testing::SourcePath("tests/data/qwen3-tiny").string(); }

TEST(BenchmarkTransformerTest, MachineFormatsAreDeterministic) {
  for (const char* format : {"textproto", "json"}) {
    const std::string args =
        absl::StrCat("--model ", TinyModel(), " --prefill 16 --decode 16 --show-plan=", format);
    const Result a = RunTool(args);
    const Result b = RunTool(args);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    EXPECT_TRUE(a.output == b.output) << format;
    EXPECT_NE(a.output.find("SOURCE_COST_MODEL"), std::string::npos) << format;
    EXPECT_NE(a.output.find("qk_norm_rope_kv_write"), std::string::npos) << format;
  }
  EXPECT_THAT(
      RunTool(absl::StrCat("--model ", TinyModel(), " --prefill 16 --decode 16 --show-plan=json"))
          .output,
      ::testing::StartsWith("{"));
}

// -o / --output writes the plan whole in the format the name (or --show-plan) asks for, prints
// nothing on stdout, and never benchmarks; a file it cannot write leaves nothing behind.
TEST(BenchmarkTransformerTest, OutputWritesThePlanInTheFormatItsNameAsks) {
  const std::string model = absl::StrCat("--model ", TinyModel(), " --prefill 16 --decode 16");
  const Result text = RunTool(model + " --show-plan=textproto");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  planner::proto::ExecutionPlan expected;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text.output, &expected));

  auto read = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const fs::path binary = Scratch() / "plan.binpb";
  Result r = RunTool(absl::StrCat(model, " -o '", binary.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("wrote the plan to ", binary.string())));
  EXPECT_THAT(r.output, Not(HasSubstr("step  region")));  // no table on stdout
  planner::proto::ExecutionPlan from_binary;
  ASSERT_TRUE(from_binary.ParseFromString(read(binary)));
  EXPECT_EQ(from_binary.DebugString(), expected.DebugString());

  const fs::path json = Scratch() / "plan.json";
  r = RunTool(absl::StrCat(model, " --output '", json.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(read(json), ::testing::StartsWith("{"));
  EXPECT_THAT(read(json), HasSubstr("\"format_version\": 1"));

  // --show-plan names the format whatever the file is called.
  const fs::path named = Scratch() / "plan.out";
  r = RunTool(absl::StrCat(model, " --show-plan=textproto -o '", named.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read(named), text.output);

  // A picture of the phase --svg-phase names; a phase the plan lacks is an error, no file.
  const fs::path svg = Scratch() / "plan.svg";
  r = RunTool(absl::StrCat(model, " --svg-phase 0 -o '", svg.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(read(svg), ::testing::StartsWith("<svg xmlns="));
  EXPECT_THAT(read(svg), HasSubstr(": prefill T=16</text>"));
  const fs::path no_phase = Scratch() / "none.svg";
  r = RunTool(absl::StrCat(model, " --svg-phase 7 -o '", no_phase.string(), "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("phase 7 does not exist (the plan has 2 phases)"));
  EXPECT_FALSE(fs::exists(no_phase));

  const fs::path missing = Scratch() / "no-such-dir" / "plan.json";
  r = RunTool(absl::StrCat(model, " -o '", missing.string(), "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("cannot write"));
  EXPECT_FALSE(fs::exists(missing.parent_path()));
}

// --plan FILE reads a plan written by -o back: rendered and converted it is the plan the
// planner made; running it needs the model it was planned for, contexts its KV cache holds
// and a GPU; planning flags are refused beside it.
TEST(BenchmarkTransformerTest, APlanFileIsRenderedConvertedOrRun) {
  const std::string model = absl::StrCat("--model ", TinyModel(), " --prefill 16 --decode 16");
  const Result json = RunTool(model + " --show-plan=json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const Result table = RunTool(model + " --show-plan=table-all");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  const fs::path binary = Scratch() / "from-file.binpb";
  Result r = RunTool(absl::StrCat(model, " -o '", binary.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string plan = absl::StrCat("--plan '", binary.string(), "'");

  r = RunTool(plan + " --show-plan=json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, json.output);
  r = RunTool(plan + " --show-plan=table-all");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, table.output);
  const fs::path converted = Scratch() / "from-file.textproto";
  r = RunTool(absl::StrCat(plan, " -o '", converted.string(), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunTool(absl::StrCat("--plan '", converted.string(), "' --show-plan=json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, json.output);

  const struct {
    std::string args;
    std::string message;
  } refusals[] = {
      {plan, "needs --model qwen3-tiny (the checkpoint or bundled config it was planned for)"},
      {plan + " --model qwen3-0.6b", "was planned for qwen3-tiny; --model names qwen3-0.6b"},
      {absl::StrCat(plan, " --model ", TinyModel()),
       "--decode 128: " + binary.string() + " holds 16 KV-cache rows per sequence"},
      {absl::StrCat(plan, " --model ", TinyModel(), " --decode 16"),
       "running a plan needs a GPU (--show-plan renders it without one)"},
      {plan + " --show-plan --print-keys", "--plan reads a plan already made"},
      {absl::StrCat("--plan '", (Scratch() / "none.json").string(), "' --show-plan"), "none.json"},
      {absl::StrCat("--plan '", (Scratch() / "output.txt").string(), "' --show-plan"),
       "a plan file is read by its name"},
  };
  for (const auto& [args, message] : refusals) {
    r = RunTool(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_THAT(r.output, HasSubstr(message)) << args;
  }
}

TEST(BenchmarkTransformerTest, ModelDirectoryIsReadAndNamesThePlan) {
  const fs::path dir = Scratch() / "my-qwen3";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << *models::BundledConfigJson("qwen3-0.6b");
  const Result r =
      RunTool(absl::StrCat("--model '", dir.string(), "' --prefill 16 --decode 16 --show-plan"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plan my-qwen3 on h200"));
}

TEST(BenchmarkTransformerTest, RefusalsExitWithTwo) {
  // Hide every GPU: the benchmark alone cannot run, the plan still can.
  Result r = RunTool("--model qwen3-0.6b");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no CUDA device"));
  EXPECT_THAT(r.output, HasSubstr("the benchmark needs a GPU (--show-plan prints the plan"));
  r = RunTool("--model qwen3-0.6b --prefill 16 --decode 16 --show-plan");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plan qwen3-0.6b on h200"));
  EXPECT_THAT(r.output, Not(HasSubstr("benchmark")));  // --show-plan only plans
  r = RunTool(absl::StrCat("--model qwen3-0.6b --show-plan --tactic-cache '",
                           (Scratch() / "missing.db").string(), "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("missing.db does not exist (opened read-only)"));
  // Bad arguments: each refusal names what is wrong.
  const struct {
    const char* args;
    const char* message;
  } refusals[] = {
      {"--model qwen3-0.6b --show-plan --freeze", "--freeze needs --tactic-cache"},
      {"--model qwen3-0.6b --show-plan=xml", "--show-plan: unknown plan format 'xml'"},
      {"--model no-such-model --show-plan", "--model no-such-model is neither an existing path"},
      {"--model qwen3-0.6b --batch 0 --show-plan",
       "--batch: invalid value '0': needs a positive integer"},
      {"--model qwen3-0.6b --prefill 16,x --show-plan",
       "--prefill: invalid value '16,x': needs positive integers separated by commas"},
      {"--model qwen3-0.6b --prefill-logits first --show-plan",
       "--prefill-logits takes all or last, not 'first'"},
      {"--model qwen3-0.6b --pdl sometimes --show-plan",
       "--pdl: programmatic dependent launch 'sometimes'"},
      {"--model qwen3-0.6b --show-plna", "benchmark_transformer: unknown flag --show-plna"},
      {"--model qwen3-0.6b --show-plan extra", "unexpected argument 'extra'"},
      {"--model qwen3-0.6b --target sm_61 --show-plan", "unknown target 'sm_61'"},
      {"--show-plan", "--model is required\nusage: benchmark_transformer"},
  };
  for (const auto& [args, message] : refusals) {
    r = RunTool(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_THAT(r.output, HasSubstr(message)) << args;
  }
  // head_dim 80 has no flash kernel, and 64 new tokens are too many for the split-KV decode
  // kernel.
  std::ifstream in(TinyModel() + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = config.find("\"head_dim\": 32");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, 14, "\"head_dim\": 80");
  const fs::path dir = Scratch() / "head-dim-80";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config;
  r = RunTool(absl::StrCat("--model '", dir.string(), "' --prefill 64 --decode 16 --show-plan"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("attention_prefill: head_dim 80"));
}

TEST(BenchmarkTransformerTest, AForeignTacticStoreWarnsAndPlansWithTheCostModel) {
  const fs::path junk = Scratch() / "junk.db";
  std::ofstream(junk) << std::string(4096, 'x');
  const std::string base = absl::StrCat(
      "--model qwen3-0.6b --prefill 16 --decode 16 --show-plan "
      "--tactic-cache '",
      junk.string(), "'");
  Result r = RunTool(base);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("is treated as empty and will not be written"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "tactic cache .*junk.db: 0 of [0-9]+ lookups hit \\(0 of [0-9]+ "
                            "keys\\): the store cannot be used \\(the warning above says why\\)"));
  EXPECT_THAT(r.output, HasSubstr("cost model"));
  EXPECT_THAT(r.output, Not(HasSubstr(" tuned ")));
  // Without a GPU no measurement matches this machine: --freeze refuses every step.
  r = RunTool(base + " --freeze");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("lookups found no measured tactic"));
}

// The key a step's provenance names: "environment | signature | bucket | phase | family vN".
planner::TacticKey ParseKey(const std::string& text) {
  const std::vector<std::string> fields = absl::StrSplit(text, " | ");
  EXPECT_EQ(fields.size(), 5u) << text;
  planner::TacticKey key;
  if (fields.size() != 5) return key;
  key.environment = fields[0];
  key.region_signature = fields[1];
  key.shape_bucket = fields[2];
  key.phase = *ir::ParsePhase(fields[3]);
  const size_t v = fields[4].rfind(" v");
  key.family = fields[4].substr(0, v);
  EXPECT_TRUE(absl::SimpleAtoi(fields[4].substr(v + 2), &key.family_version)) << text;
  return key;
}

TEST(BenchmarkTransformerTest, TacticCacheSaysHowManyLookupsHitAndWhyNone) {
  const std::string store_path = (Scratch() / "tactics.db").string();
  const std::string args = absl::StrCat(
      "--model qwen3-0.6b --prefill 16 --decode 16 "
      "--tactic-cache '",
      store_path, "'");
  std::unique_ptr<tuner::TacticStore> store = *tuner::TacticStore::Open(store_path);
  Result r = RunTool(args + " --show-plan");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "tactic cache .*tactics.db: 0 of [0-9]+ lookups hit \\(0 of [0-9]+ "
                            "keys\\): the store holds no measured tactics"));

  // Measured on a GPU: no key matches the target description's environment.
  ASSERT_TRUE(store
                  ->Record(tuner::testing::TestMeasurement(tuner::testing::TestEnvironment(),
                                                           "linear(...)"))
                  .ok());
  r = RunTool(args + " --show-plan");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(" keys): no GPU: the lookups are for the target description's "
                                  "environment (NVIDIA H200|sm_90|132sm|l2=62914560|bw=4200|"
                                  "driver=0|"));
  EXPECT_THAT(r.output, HasSubstr("which no measurement matches; the store holds 1 for NVIDIA "
                                  "H200|sm_90|132sm|l2=62914560|bw=4200|driver=13000|"));

  // An entry for one step of the plan, in the plan's own environment, hits.
  r = RunTool(args + " --show-plan=textproto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The plan, without the notes on stderr.
  std::string textproto;
  for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
    if (!absl::StartsWith(line, "tactic cache ")) {
      absl::StrAppend(&textproto, line, "\n");
    }
  }
  planner::proto::ExecutionPlan plan;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(textproto, &plan)) << r.output;
  const planner::proto::Step& step = plan.phases(1).steps(1);
  ASSERT_EQ(step.tactic().family(), "gemv") << step.DebugString();
  tuner::RegionMeasurement m;
  m.key = ParseKey(step.provenance().cache_key());
  m.environment = tuner::FromTarget(plan.target());
  ASSERT_EQ(m.key.environment, m.environment.Fingerprint());
  const kernels::Tactic tactic = *kernels::TacticFromProto(step.tactic());
  m.candidates = {{tactic, tuner::CandidateStatus::kOk, "", 1.25}};
  m.winner = tactic;
  m.winner_us = 1.25;
  m.default_us = 1.5;
  ASSERT_TRUE(store->Record(m).ok());
  r = RunTool(args + " --show-plan=table-all");  // every step's row, no layer folded
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex(" [1-9][0-9]* of [0-9]+ lookups hit \\(1 of "));
  // The step's row: source tuned, the stored median as its measured time.
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(absl::StrCat("\n +1  ", absl::StrReplaceAll(step.name(), {{".", "\\."}}),
                                        " [^\n]* tuned +[0-9.]+ +1\\.25 "))))
      << r.output;
}

TEST(BenchmarkTransformerTest, TimePlanningReportsTheMedian) {
  const Result r = RunTool("--model qwen2.5-0.5b --prefill 64 --decode 64 --time-planning=2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("planning qwen2.5-0.5b for h200 (2 phases), 2 runs: median "));
  EXPECT_THAT(r.output, HasSubstr(" ms CPU\n"));
}

}  // namespace
}  // namespace tileplan
