// verify_model end to end: a committed fixture passes, and corrupted references, models and
// arguments give the documented exit status (1 numerical mismatch, 2 bad input) with a
// message naming the problem.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/safetensors.h"
#include "tests/models/safetensors_builder.h"
#include "tests/testing/paths.h"
#include "tests/testing/random_weights.h"
#include "tests/testing/tool_run.h"

namespace tileplan {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

fs::path Fixture() { return testing::SourcePath("tests/data/smollm2-tiny"); }

using Result = testing::ToolResult;

Result RunVerifyModel(const std::string& args, const fs::path& scratch,
                      const std::string& env = "") {
  return testing::RunTool(testing::BuiltBinary(VERIFY_MODEL_PATH).string(), args,
                          scratch / "output.txt", env);
}

// The fixture's reference tensors, to be modified and written elsewhere.
testing::WeightMap LoadReference() {
  testing::WeightMap out;
  auto file = models::SafetensorsFile::Open(Fixture() / "reference.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return out;
  for (const auto& [name, view] : (*file)->tensors()) {
    testing::WeightData t;
    t.dtype = view.dtype;
    t.shape = view.shape;
    if (view.dtype == models::StDType::kI32) {
      t.ints.resize(static_cast<size_t>(view.num_elements()));
      std::memcpy(t.ints.data(), view.data, view.nbytes);
    } else {
      auto values = models::ToFloat32(view);
      EXPECT_TRUE(values.ok()) << values.status();
      if (values.ok()) t.values = *values;
    }
    out[name] = std::move(t);
  }
  return out;
}

class VerifyModelTest : public ::testing::Test {
 protected:
  // Runs verify_model on the fixture's model with `reference` written to a temp file.
  Result RunWithReference(const testing::WeightMap& reference) {
    const fs::path path = dir_ / "reference.safetensors";
    testing::WriteWeights(path, reference);
    return RunVerifyModel(absl::StrCat("--model '", Fixture().string(), "' --reference '",
                                       path.string(), "' --backend cpu --threads 2"),
                          dir_);
  }

  const fs::path dir_ = testing::MakeTempDir("verify_model");
};

TEST_F(VerifyModelTest, FixturePasses) {
  const Result r = RunWithReference(LoadReference());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Decode fuses each layer's RoPE + KV write into its attention: two regions fewer.
  EXPECT_THAT(r.output,
              HasSubstr("graph: planned (prefill 21 regions for T = 24, decode 15 regions for "
                        "T = 1)"));
  EXPECT_THAT(r.output, HasSubstr("prompt argmax: 24/24 rows agree (100.0%): ok"));
  EXPECT_THAT(r.output, HasSubstr("decode steps (fed the reference's greedy tokens) argmax: "
                                  "15/15 rows agree (100.0%): ok"));
  EXPECT_THAT(r.output, HasSubstr("greedy: 16/16 tokens match: ok"));
  EXPECT_THAT(r.output, HasSubstr("PASS"));
}

TEST_F(VerifyModelTest, NoPlanRunsThePrimitiveGraph) {
  const std::string reference = (Fixture() / "reference.safetensors").string();
  const Result r = RunVerifyModel(absl::StrCat("--model '", Fixture().string(), "' --reference '",
                                               reference, "' --backend cpu --no-plan"),
                                  dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("graph: primitive (47 regions)"));
  EXPECT_THAT(r.output, HasSubstr("PASS"));
}

TEST_F(VerifyModelTest, PrintsTheIrAfterPlannerPasses) {
  const std::string base =
      absl::StrCat("--model '", Fixture().string(), "' --reference '",
                   (Fixture() / "reference.safetensors").string(), "' --backend cpu");
  Result r = RunVerifyModel(absl::StrCat(base, " --print-after=fuse_swiglu"), dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("// ===== prefill pipeline\n// ----- IR after fuse_swiglu "
                                  "(pass 3 of 9)\ngraph @llama {"));
  EXPECT_THAT(r.output, HasSubstr("// ===== decode pipeline\n// ----- IR after fuse_swiglu"));
  EXPECT_THAT(r.output, HasSubstr("PASS"));

  r = RunVerifyModel(absl::StrCat(base, " --print-after=no_such_pass"), dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("prefill pipeline: "));
  EXPECT_THAT(r.output, HasSubstr("no_such_pass"));

  r = RunVerifyModel(absl::StrCat(base, " --no-plan --print-after-all"), dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--no-plan runs none"));
}

TEST_F(VerifyModelTest, PerturbedLogitsFail) {
  testing::WeightMap ref = LoadReference();
  ref["logits"].values[100] += 0.01f;
  const Result r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(limit 1e-04): FAIL"));
}

TEST_F(VerifyModelTest, PerturbedDecodeStepLogitsFail) {
  testing::WeightMap ref = LoadReference();
  ref["greedy_logits"].values[5 * 384 + 7] += 0.01f;
  Result r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("decode steps (fed the reference's greedy tokens) logits: "));
  EXPECT_THAT(r.output, HasSubstr("(limit 1e-04): FAIL"));

  ref = LoadReference();
  ref["greedy_logits"].shape = {14, 384};
  ref["greedy_logits"].values.resize(14 * 384);
  r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("'greedy_logits' has shape [14,384], expected [15,384]"));
}

TEST_F(VerifyModelTest, DifferentGreedyTokensFail) {
  testing::WeightMap ref = LoadReference();
  ref["greedy_tokens"].ints[3] = (ref["greedy_tokens"].ints[3] + 1) % 384;
  const Result r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("greedy: first mismatch at token 3: FAIL"));
  EXPECT_THAT(r.output, HasSubstr("FAIL"));
}

TEST_F(VerifyModelTest, MalformedReferencesAreBadInput) {
  testing::WeightMap ref = LoadReference();
  ref["logits"].shape = {24, 383};
  ref["logits"].values.resize(24 * 383);
  Result r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("reference tensor 'logits' has shape [24,383], expected [24,384]"));

  ref = LoadReference();
  ref["input_ids"].dtype = models::StDType::kF32;
  ref["input_ids"].values.assign(ref["input_ids"].ints.begin(), ref["input_ids"].ints.end());
  ref["input_ids"].ints.clear();
  r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("reference tensor 'input_ids' is F32[24], expected rank 1 I32"));

  ref = LoadReference();
  ref.erase("greedy_tokens");
  r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("has no tensor 'greedy_tokens'"));

  ref = LoadReference();
  ref["input_ids"].ints[5] = 384;
  r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("token id 384 at [0,5] is outside the vocabulary [0, 384)"));
}

// A reference whose prompt and greedy tokens need more positions than the model's
// max_position_embeddings (256 for the fixture) is refused before anything runs.
TEST_F(VerifyModelTest, ReferencesPastTheModelsPositionsAreBadInput) {
  testing::WeightMap ref = LoadReference();
  const int64_t prompt = 250, vocab = 384;
  ref["input_ids"].shape = {prompt};
  ref["input_ids"].ints.assign(prompt, 1);
  ref["logits"].shape = {prompt, vocab};
  ref["logits"].values.assign(prompt * vocab, 0.0f);
  const Result r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("its prompt (250 tokens) and greedy tokens (16) need 266 "
                                  "positions, past the model's max_position_embeddings 256"));
}

// A reference holding NaN or infinity is refused (a comparison against it passes or fails for
// no reason), naming the tensor and the element.
TEST_F(VerifyModelTest, NonFiniteReferencesAreBadInput) {
  testing::WeightMap ref = LoadReference();
  ref["logits"].values[2 * 384 + 7] = std::numeric_limits<float>::quiet_NaN();
  Result r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("reference tensor 'logits' holds nan at [2,7]: a reference "
                                  "must be finite"));
  EXPECT_THAT(r.output, Not(HasSubstr("PASS")));

  ref = LoadReference();
  ref["greedy_logits"].values[384 + 1] = -std::numeric_limits<float>::infinity();
  r = RunWithReference(ref);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("reference tensor 'greedy_logits' holds -inf at [1,1]"));
}

TEST_F(VerifyModelTest, UnknownBackendAndBadArgumentsAreBadInput) {
  Result r =
      RunVerifyModel(absl::StrCat("--model '", Fixture().string(), "' --reference '",
                                  (Fixture() / "reference.safetensors").string(),
                                  "' --backend tpu"),
                     dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unknown backend 'tpu'; supported backends: cpu, gpu"));

  r = RunVerifyModel("--model x --backend cpu", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--reference"));

  r = RunVerifyModel("--model x --reference y --backend cpu --threads zero", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--threads"));

  r = RunVerifyModel("--model x --reference y --backend gpu --no-plan", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--no-plan is cpu only"));
  r = RunVerifyModel("--model x --reference y --backend cpu --no-cuda-graphs", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--no-cuda-graphs and --pdl apply to --backend gpu"));
}

TEST_F(VerifyModelTest, ModelIsADirectoryOrItsConfigButNotABundledConfig) {
  const std::string reference = (Fixture() / "reference.safetensors").string();
  // The config file names the checkpoint beside it.
  Result r = RunVerifyModel(absl::StrCat("--model '", (Fixture() / "config.json").string(),
                                         "' --reference '", reference, "' --backend cpu"),
                            dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("PASS"));
  // A bundled config has no weights to check.
  r = RunVerifyModel(absl::StrCat("--model qwen3-0.6b --reference '", reference, "' --backend cpu"),
                     dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("verify_model: --model qwen3-0.6b is a bundled config, which has "
                                  "no weights: verify_model needs a checkpoint directory"));
  r = RunVerifyModel(
      absl::StrCat("--model no-such-model --reference '", reference, "' --backend cpu"), dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--model no-such-model is neither an existing path nor a bundled "
                                  "config"));
}

TEST_F(VerifyModelTest, HelpAndMistypedFlags) {
  Result r = RunVerifyModel("--help", dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("verify_model: checks a backend against a reference fixture"));
  EXPECT_THAT(r.output, HasSubstr("Exit status: 0 all checks pass; 1 a numerical check fails; 2 "
                                  "bad arguments"));
  EXPECT_THAT(r.output, HasSubstr("    --backend (the backend to check: cpu or gpu)"));
  EXPECT_THAT(r.output, HasSubstr("    --plan (run the planned graphs; --no-plan runs the "));
  r = RunVerifyModel("--model x --refrence y --backend cpu", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("verify_model: unknown flag --refrence\nusage: verify_model"));
}

TEST_F(VerifyModelTest, GpuBackendWithoutAGpuSaysSo) {
  // Every GPU hidden: the GPU backend stops with the reason, before any numerical check.
  const Result r =
      RunVerifyModel(absl::StrCat("--model '", Fixture().string(), "' --reference '",
                                  (Fixture() / "reference.safetensors").string(),
                                  "' --backend gpu"),
                     dir_, "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no CUDA device"));
}

TEST_F(VerifyModelTest, BadModelsAreBadInput) {
  // The fixture's checkpoint without one tensor.
  const fs::path model = dir_ / "model";
  fs::create_directories(model);
  fs::copy_file(Fixture() / "config.json", model / "config.json");
  {
    auto file = models::SafetensorsFile::Open(Fixture() / "model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    testing::WeightMap tensors;
    for (const auto& [name, view] : (*file)->tensors()) {
      if (name == "model.layers.1.mlp.up_proj.weight") continue;
      auto values = models::ToFloat32(view);
      ASSERT_TRUE(values.ok());
      tensors[name] = testing::WeightData{view.dtype, view.shape, *values, {}};
    }
    testing::WriteWeights(model / "model.safetensors", tensors);
  }
  const std::string reference = (Fixture() / "reference.safetensors").string();
  Result r = RunVerifyModel(
      absl::StrCat("--model '", model.string(), "' --reference '", reference, "' --backend cpu"),
      dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"model.layers.1.mlp.up_proj.weight\""));

  // An architecture tileplan does not implement.
  std::ofstream(model / "config.json") << R"({"model_type": "gpt2", "n_embd": 64})";
  r = RunVerifyModel(
      absl::StrCat("--model '", model.string(), "' --reference '", reference, "' --backend cpu"),
      dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model_type"));
}

}  // namespace
}  // namespace tileplan
