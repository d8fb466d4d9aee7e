// Each primitive kind of the CPU reference backend against small hand-computed results,
// run through the interpreter on one- or two-region graphs.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"

namespace tileplan::runtime::cpu {
namespace {

using ir::AliasKind;
using ir::Attributes;
using ir::DType;
using ir::ResultAlias;
using ir::ValueId;
using ::testing::HasSubstr;

ir::TensorType Type(DType dtype, const std::vector<int64_t>& dims) {
  std::vector<ir::Dim> d;
  for (int64_t e : dims) d.push_back(ir::Dim::Static(e));
  return ir::MakeType(dtype, std::move(d));
}
ir::TensorType F32(const std::vector<int64_t>& dims) { return Type(DType::kF32, dims); }
ir::TensorType I32(const std::vector<int64_t>& dims) { return Type(DType::kI32, dims); }

ValueId Input(ir::Graph& g, const std::string& name, ir::TensorType type) {
  auto id = g.AddInput(name, std::move(type));
  EXPECT_TRUE(id.ok()) << id.status();
  return *id;
}

ValueId Weight(ir::Graph& g, const std::string& name, ir::TensorType type) {
  auto id = g.AddWeight(name, std::move(type), name);
  EXPECT_TRUE(id.ok()) << id.status();
  return *id;
}

// Appends a one-result region and returns the result.
ValueId Op(ir::Graph& g, const std::string& kind, std::vector<ValueId> operands,
           const std::string& name, ir::TensorType type, Attributes attrs = {},
           ResultAlias alias = {}) {
  auto ids = g.AddRegion(kind, std::move(operands), {ir::ResultSpec{name, std::move(type), alias}},
                         std::move(attrs));
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? (*ids)[0] : ir::kNoValue;
}

std::unique_ptr<CpuBackend> MakeBackend(const ir::Graph& g,
                                        std::map<std::string, HostTensor> weights = {},
                                        int threads = 1, int64_t batch = 1, int64_t max_seq = 1) {
  CpuBackend::Options options;
  options.batch = batch;
  options.max_seq = max_seq;
  options.threads = threads;
  auto backend = CpuBackend::CreateWithWeights(g, std::move(weights), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

// Runs a graph whose only output is float and returns that output's data.
std::vector<float> RunFloat(CpuBackend& backend, const std::map<std::string, HostTensor>& in) {
  auto out = backend.Execute(in);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok() || out->empty()) return {};
  return (*out)[0].f;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], tol) << "element " << k;
  }
}

TEST(CpuKernels, RmsNormNormalizesRowsAndScales) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({2, 4}));
  ValueId w = Weight(g, "w", F32({4}));
  Attributes attrs;
  attrs.Set("eps", 0.0);
  ASSERT_TRUE(g.AddOutput(Op(g, "rms_norm", {x, w}, "y", F32({2, 4}), attrs)).ok());
  auto backend = MakeBackend(g, {{"w", HostTensor::Float({4}, {1, 2, 3, 0.5})}});
  ASSERT_NE(backend, nullptr);
  // Row 0: rms 2. Row 1: mean of squares 25/4, rms 2.5.
  ExpectNear(RunFloat(*backend, {{"x", HostTensor::Float({2, 4}, {2, 2, 2, 2, 3, -4, 0, 0})}}),
             {1, 2, 3, 0.5, 1.2f, -3.2f, 0, 0}, 1e-6);
}

TEST(CpuKernels, RmsNormAddsEpsInsideTheRoot) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({1, 1, 4}));
  ValueId w = Weight(g, "w", F32({4}));
  Attributes attrs;
  attrs.Set("eps", 3.0);
  ASSERT_TRUE(g.AddOutput(Op(g, "rms_norm", {x, w}, "y", F32({1, 1, 4}), attrs)).ok());
  auto backend = MakeBackend(g, {{"w", HostTensor::Float({4}, {1, 1, 2, -1})}});
  ASSERT_NE(backend, nullptr);
  // mean(x²) + eps = 4: everything is halved.
  ExpectNear(RunFloat(*backend, {{"x", HostTensor::Float({1, 1, 4}, {1, 1, 1, 1})}}),
             {0.5, 0.5, 1, -0.5}, 1e-7);
}

TEST(CpuKernels, LinearUsesOutInLayoutAndBias) {
  for (int threads : {1, 3}) {
    ir::Graph g;
    ValueId x = Input(g, "x", F32({2, 3}));
    ValueId w = Weight(g, "w", F32({2, 3}));
    ValueId b = Weight(g, "b", F32({2}));
    ASSERT_TRUE(g.AddOutput(Op(g, "linear", {x, w, b}, "y", F32({2, 2}))).ok());
    ASSERT_TRUE(g.AddOutput(Op(g, "linear", {x, w}, "y_nobias", F32({2, 2}))).ok());
    auto backend = MakeBackend(g,
                               {{"w", HostTensor::Float({2, 3}, {1, 0, 0, 1, 1, 1})},
                                {"b", HostTensor::Float({2}, {10, 20})}},
                               threads);
    ASSERT_NE(backend, nullptr);
    auto out = backend->Execute({{"x", HostTensor::Float({2, 3}, {1, 2, 3, 0, -1, 1})}});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].f, (std::vector<float>{11, 26, 10, 20}));
    EXPECT_EQ((*out)[1].f, (std::vector<float>{1, 6, 0, 0}));
    EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{2, 2}));
  }
}

TEST(CpuKernels, LmHeadIsLinearWithoutBias) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({1, 1, 2}));
  ValueId w = Weight(g, "w", F32({3, 2}));
  ASSERT_TRUE(g.AddOutput(Op(g, "lm_head", {x, w}, "logits", F32({1, 1, 3}))).ok());
  auto backend = MakeBackend(g, {{"w", HostTensor::Float({3, 2}, {1, 0, 0, 1, 1, -1})}});
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(RunFloat(*backend, {{"x", HostTensor::Float({1, 1, 2}, {2, 5})}}),
            (std::vector<float>{2, 5, -3}));
}

TEST(CpuKernels, EmbeddingGathersRowsAndRejectsOutOfRangeIds) {
  ir::Graph g;
  ValueId ids = Input(g, "ids", I32({1, 2}));
  ValueId table = Weight(g, "table", F32({3, 2}));
  ASSERT_TRUE(g.AddOutput(Op(g, "embedding", {ids, table}, "h", F32({1, 2, 2}))).ok());
  auto backend = MakeBackend(g, {{"table", HostTensor::Float({3, 2}, {0, 1, 2, 3, 4, 5})}});
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(RunFloat(*backend, {{"ids", HostTensor::Int({1, 2}, {2, 0})}}),
            (std::vector<float>{4, 5, 0, 1}));
  for (int32_t bad : {3, -1}) {
    auto out = backend->Execute({{"ids", HostTensor::Int({1, 2}, {0, bad})}});
    ASSERT_FALSE(out.ok());
    EXPECT_THAT(std::string(out.status().message()),
                HasSubstr(absl::StrCat("token id ", bad,
                                       " at [0,1] is outside the vocabulary "
                                       "[0, 3)")));
  }
}

TEST(CpuKernels, RopeDefaultInvFreq) {
  ir::RopeParams p;
  p.theta = 10000.0;
  const std::vector<float> inv = ir::RopeInvFreq(p, 8);
  ExpectNear(inv, {1.0f, 0.1f, 0.01f, 0.001f}, 1e-9);
  p.theta = 100.0;
  ExpectNear(ir::RopeInvFreq(p, 4), {1.0f, 0.1f}, 1e-9);
}

TEST(CpuKernels, RopeLlama3InvFreqRescalesEachBand) {
  ir::RopeParams p;
  p.theta = 10000.0;
  p.type = "llama3";
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 128;
  // Base inv_freq 1, 0.1, 0.01, 0.001 have wavelengths 2π·(1, 10, 100, 1000). High band
  // (wavelength < 128/4 = 32): kept. Low band (wavelength > 128): divided by 8. Between:
  // s = (128 / (20π) − 1) / 3 = 0.345727, (1 − s)·0.1/8 + s·0.1 = 0.0427511.
  ExpectNear(ir::RopeInvFreq(p, 8), {1.0f, 0.0427511f, 0.00125f, 0.000125f}, 2e-7);
}

TEST(CpuKernels, RopeRotatesHalvesByPosition) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({1, 2, 1, 4}));
  ValueId pos = Input(g, "pos", I32({1, 2}));
  Attributes attrs;
  attrs.Set("theta", 100.0);
  attrs.Set("rope_type", std::string("default"));
  ASSERT_TRUE(g.AddOutput(Op(g, "rope", {x, pos}, "y", F32({1, 2, 1, 4}), attrs)).ok());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  // inv_freq = (1, 0.1). Token 0 at position 0 is unchanged; token 1 at position 1 rotates
  // pairs (x0, x2) by 1 radian and (x1, x3) by 0.1 radian.
  const std::vector<float> got =
      RunFloat(*backend, {{"x", HostTensor::Float({1, 2, 1, 4}, {1, 2, 3, 4, 1, 2, 3, 4})},
                          {"pos", HostTensor::Int({1, 2}, {0, 1})}});
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.1), s2 = std::sin(0.1);
  ExpectNear(got,
             {1, 2, 3, 4, static_cast<float>(1 * c1 - 3 * s1), static_cast<float>(2 * c2 - 4 * s2),
              static_cast<float>(3 * c1 + 1 * s1), static_cast<float>(4 * c2 + 2 * s2)},
             1e-6);
}

// Largest |got − want| / |want| must stay within `rel` (elementwise).
void ExpectNearRelative(const std::vector<float>& got, const std::vector<float>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], rel * std::fabs(want[k])) << "element " << k;
  }
}

ir::RopeParams Yarn(double factor, int64_t original, double beta_fast, double beta_slow,
                    bool truncate) {
  ir::RopeParams p;
  p.theta = 10000.0;
  p.type = "yarn";
  p.factor = factor;
  p.original_max_position_embeddings = original;
  p.beta_fast = beta_fast;
  p.beta_slow = beta_slow;
  p.truncate = truncate;
  return p;
}

// Expected values: transformers 5.17 (torch 2.11) `_compute_yarn_parameters`, i.e.
// ROPE_INIT_FUNCTIONS["yarn"](LlamaConfig(head_dim=D, rope_parameters={"rope_type": "yarn",
// "rope_theta": 1e4, "factor": ..., "original_max_position_embeddings": ..., "beta_fast": ...,
// "beta_slow": ..., "truncate": ...}), "cpu")[0], printed with "%.9g". They agree to about
// 2e-7 relative (torch's vectorised pow differs from std::pow by an ulp here and there).
TEST(CpuKernels, RopeYarnInvFreqMatchesTransformers) {
  // Correction range [0, 1] (truncated from [-2.3, 0.41]): dims 1.. are all interpolated.
  ExpectNearRelative(ir::RopeInvFreq(Yarn(4.0, 16, 32.0, 1.0, true), 8),
                     {1.0f, 0.0250000004f, 0.00249999994f, 0.000250000012f}, 1e-6);
  // DeepSeek-V2-Lite: D 64, factor 40, original 4096, beta 32/1 (range [10, 23]).
  ExpectNearRelative(ir::RopeInvFreq(Yarn(40.0, 4096, 32.0, 1.0, true), 64),
                     {1.0f,
                      0.749894202f,
                      0.562341332f,
                      0.421696514f,
                      0.316227764f,
                      0.237137362f,
                      0.177827939f,
                      0.133352146f,
                      0.100000001f,
                      0.0749894157f,
                      0.0562341288f,
                      0.0390069261f,
                      0.0268793609f,
                      0.0183781441f,
                      0.012447956f,
                      0.0083345091f,
                      0.00550000044f,
                      0.00356199732f,
                      0.00224936521f,
                      0.00137051346f,
                      0.000790569407f,
                      0.000414990413f,
                      0.00017782794f,
                      3.3338034e-05f,
                      2.49999994e-05f,
                      1.87473543e-05f,
                      1.40585325e-05f,
                      1.05424124e-05f,
                      7.90569447e-06f,
                      5.92843435e-06f,
                      4.44569832e-06f,
                      3.33380353e-06f},
                     1e-6);
  // Not truncated: the range [0.21, 2.02] is fractional, so dims 1 and 2 are blended.
  ExpectNearRelative(ir::RopeInvFreq(Yarn(4.0, 64, 8.0, 1.0, false), 16),
                     {1.0f, 0.212468684f, 0.0256643984f, 0.00790569466f, 0.00249999994f,
                      0.000790569466f, 0.000250000012f, 7.90569466e-05f},
                     1e-6);
  // beta_fast == beta_slow: low == high, and the ramp's singularity guard (high += 0.001).
  ExpectNearRelative(ir::RopeInvFreq(Yarn(2.0, 1024, 4.0, 4.0, false), 8),
                     {1.0f, 0.100000001f, 0.00499999989f, 0.000500000024f}, 1e-6);
}

TEST(CpuKernels, RopeParamsFromAttributesReadsYarnAndInterleaved) {
  Attributes attrs;
  attrs.Set("theta", 10000.0);
  attrs.Set("rope_type", std::string("default"));
  auto p = ir::RopeParamsFromAttributes(attrs);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->interleaved);
  EXPECT_EQ(p->attention_factor, 1.0);
  attrs.Set("interleaved", true);
  attrs.Set("rope_type", std::string("yarn"));
  attrs.Set("factor", 40.0);
  attrs.Set("original_max_position_embeddings", int64_t{4096});
  attrs.Set("beta_fast", 32.0);
  attrs.Set("beta_slow", 1.0);
  attrs.Set("attention_factor", 0.707);
  attrs.Set("truncate", false);
  p = ir::RopeParamsFromAttributes(attrs);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->type, "yarn");
  EXPECT_TRUE(p->interleaved);
  EXPECT_EQ(p->factor, 40.0);
  EXPECT_EQ(p->original_max_position_embeddings, 4096);
  EXPECT_EQ(p->beta_fast, 32.0);
  EXPECT_EQ(p->beta_slow, 1.0);
  EXPECT_EQ(p->attention_factor, 0.707);
  EXPECT_FALSE(p->truncate);
  attrs.Set("attention_factor", 0.0);
  EXPECT_THAT(std::string(ir::RopeParamsFromAttributes(attrs).status().message()),
              HasSubstr("attention_factor > 0"));
  attrs.Erase("attention_factor");
  EXPECT_FALSE(ir::RopeParamsFromAttributes(attrs).ok());
}

// Attributes of a yarn rope with factor 1 (so inv_freq is theta's) and this attention_factor.
Attributes YarnAttrs(double theta, double attention_factor, bool interleaved) {
  Attributes attrs;
  attrs.Set("theta", theta);
  attrs.Set("rope_type", std::string("yarn"));
  attrs.Set("factor", 1.0);
  attrs.Set("original_max_position_embeddings", int64_t{16});
  attrs.Set("beta_fast", 32.0);
  attrs.Set("beta_slow", 1.0);
  attrs.Set("attention_factor", attention_factor);
  attrs.Set("truncate", true);
  if (interleaved) attrs.Set("interleaved", true);
  return attrs;
}

TEST(CpuKernels, RopeRotatesInterleavedPairsAndScalesByAttentionFactor) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({1, 2, 1, 4}));
  ValueId pos = Input(g, "pos", I32({1, 2}));
  Attributes interleaved;
  interleaved.Set("theta", 100.0);
  interleaved.Set("rope_type", std::string("default"));
  interleaved.Set("interleaved", true);
  ASSERT_TRUE(g.AddOutput(Op(g, "rope", {x, pos}, "pairs", F32({1, 2, 1, 4}), interleaved)).ok());
  ASSERT_TRUE(g.AddOutput(Op(g, "rope", {x, pos}, "halves_scaled", F32({1, 2, 1, 4}),
                             YarnAttrs(100.0, 1.5, false)))
                  .ok());
  ASSERT_TRUE(g.AddOutput(Op(g, "rope", {x, pos}, "pairs_scaled", F32({1, 2, 1, 4}),
                             YarnAttrs(100.0, 0.5, true)))
                  .ok());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  auto out = backend->Execute({{"x", HostTensor::Float({1, 2, 1, 4}, {1, 2, 3, 4, 1, 2, 3, 4})},
                               {"pos", HostTensor::Int({1, 2}, {0, 1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  // inv_freq = (1, 0.1). Interleaved, token 1 at position 1 rotates (x0, x1) by 1 radian and
  // (x2, x3) by 0.1 radian; token 0 at position 0 is unchanged (times attention_factor).
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.1), s2 = std::sin(0.1);
  const std::vector<double> pairs = {
      1, 2, 3, 4, 1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3 * c2 - 4 * s2, 4 * c2 + 3 * s2};
  const std::vector<double> halves = {
      1, 2, 3, 4, 1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2};
  auto scaled = [](const std::vector<double>& v, double s) {
    std::vector<float> r;
    for (double e : v) r.push_back(static_cast<float>(e * s));
    return r;
  };
  ExpectNear((*out)[0].f, scaled(pairs, 1.0), 1e-6);
  ExpectNear((*out)[1].f, scaled(halves, 1.5), 2e-6);
  ExpectNear((*out)[2].f, scaled(pairs, 0.5), 1e-6);
}

// Expected values: transformers 5.17 deepseek_v2 (torch 2.11), DeepseekV2RotaryEmbedding of a
// DeepseekV2Config(qk_rope_head_dim=8, rope_parameters={"rope_type": "yarn", "rope_theta": 1e4,
// "factor": 4.0, "original_max_position_embeddings": 256, "beta_fast": 8.0, "beta_slow": 1.0,
// "truncate": False, "attention_factor": 1.25}) at positions (0, 3, 100), then its
// apply_rotary_emb (complex multiplication of the interleaved pairs) of x[b,t,h,d] =
// 0.1·(n+1)·(−1)^n for the flat index n (inv_freq 1, 0.0756644, 0.0025, 0.00025: dim 1 blended).
TEST(CpuKernels, RopeYarnInterleavedMatchesDeepseekV2) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({1, 3, 2, 8}));
  ValueId pos = Input(g, "pos", I32({1, 3}));
  Attributes attrs;
  attrs.Set("theta", 10000.0);
  attrs.Set("rope_type", std::string("yarn"));
  attrs.Set("factor", 4.0);
  attrs.Set("original_max_position_embeddings", int64_t{256});
  attrs.Set("beta_fast", 8.0);
  attrs.Set("beta_slow", 1.0);
  attrs.Set("attention_factor", 1.25);
  attrs.Set("truncate", false);
  attrs.Set("interleaved", true);
  ASSERT_TRUE(g.AddOutput(Op(g, "rope", {x, pos}, "y", F32({1, 3, 2, 8}), attrs)).ok());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  std::vector<float> xs;
  for (int n = 0; n < 48; ++n) xs.push_back(static_cast<float>(0.1 * (n + 1) * (n % 2 ? -1 : 1)));
  const std::vector<float> want = {
      0.125f,       -0.25f,       0.375f,      -0.5f,        0.625f,       -0.75f,
      0.875f,       -1.0f,        1.125f,      -1.25f,       1.375f,       -1.5f,
      1.625f,       -1.75f,       1.875f,      -2.0f,        -1.78621423f, 2.52736306f,
      2.87669754f,  -1.90137768f, 2.64555073f, -2.73023534f, 2.877249f,    -2.99784303f,
      -2.63508654f, 3.65847564f,  4.07609367f, -2.65067601f, 3.65302277f,  -3.72270727f,
      3.87799883f,  -3.99709249f, 1.40501106f, -5.75361395f, 5.5559783f,   2.91919971f,
      5.65638876f,  -3.45809078f, 4.99846363f, -4.87657499f, 1.76096463f,  -7.12229824f,
      6.79851818f,  3.59454823f,  6.87270498f, -4.17959881f, 6.02314806f,  -5.85126543f};
  ExpectNear(RunFloat(*backend, {{"x", HostTensor::Float({1, 3, 2, 8}, xs)},
                                 {"pos", HostTensor::Int({1, 3}, {0, 3, 100})}}),
             want, 1e-5);
}

// A graph writing x into a state cache of capacity 4 at `positions`, outputting the cache.
ir::Graph KvWriteGraph() {
  ir::Graph g;
  const ir::TensorType cache_type = ir::MakeType(
      DType::kF32,
      {ir::Dim::Symbol("B"), ir::Dim::Static(2), ir::Dim::Symbol("Smax"), ir::Dim::Static(2)});
  ValueId cache = *g.AddState("cache", cache_type);
  ValueId x =
      *g.AddInput("x", ir::MakeType(DType::kF32, {ir::Dim::Symbol("B"), ir::Dim::Symbol("T"),
                                                  ir::Dim::Static(2), ir::Dim::Static(2)}));
  ValueId pos =
      *g.AddInput("pos", ir::MakeType(DType::kI32, {ir::Dim::Symbol("B"), ir::Dim::Symbol("T")}));
  ValueId updated = Op(g, "kv_write", {cache, x, pos}, "cache_updated", cache_type, {},
                       ResultAlias{AliasKind::kInPlace, 0});
  EXPECT_TRUE(g.AddOutput(updated).ok());
  return g;
}

TEST(CpuKernels, KvWriteStoresRowsAtPositionsAndPersists) {
  auto backend = MakeBackend(KvWriteGraph(), {}, 1, /*batch=*/1, /*max_seq=*/4);
  ASSERT_NE(backend, nullptr);
  // x[b=0, t, h, d]: t=0 → (1,2 | 3,4) at position 1; t=1 → (5,6 | 7,8) at position 3.
  auto out = backend->Execute({{"x", HostTensor::Float({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
                               {"pos", HostTensor::Int({1, 2}, {1, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  // cache[b, h, s, d]
  const std::vector<float> after_first = {0, 0, 1, 2, 0, 0, 5, 6, 0, 0, 3, 4, 0, 0, 7, 8};
  EXPECT_EQ((*out)[0].f, after_first);
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{1, 2, 4, 2}));

  // A second run writes position 0 and keeps the rows of the first.
  out = backend->Execute({{"x", HostTensor::Float({1, 1, 2, 2}, {9, 9, 8, 8})},
                          {"pos", HostTensor::Int({1, 1}, {0})}});
  ASSERT_TRUE(out.ok()) << out.status();
  auto state = backend->ReadState("cache");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->f, (std::vector<float>{9, 9, 1, 2, 0, 0, 5, 6, 8, 8, 3, 4, 0, 0, 7, 8}));

  backend->Reset();
  state = backend->ReadState("cache");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->f, std::vector<float>(16, 0.0f));
}

TEST(CpuKernels, KvWriteRejectsPositionsOutsideTheCache) {
  auto backend = MakeBackend(KvWriteGraph(), {}, 1, 1, 4);
  ASSERT_NE(backend, nullptr);
  auto out = backend->Execute({{"x", HostTensor::Float({1, 1, 2, 2}, {1, 2, 3, 4})},
                               {"pos", HostTensor::Int({1, 1}, {4})}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("position 4 of token [0,0] is outside the KV cache [0, 4)"));
}

// q [1,T,Hq,D] attending over caches given as inputs [1,Hkv,S,D].
ir::Graph AttentionGraph(int64_t t, int64_t hq, int64_t hkv, int64_t s, int64_t d, double scale,
                         int64_t window) {
  ir::Graph g;
  ValueId q = Input(g, "q", F32({1, t, hq, d}));
  ValueId k = Input(g, "k", F32({1, hkv, s, d}));
  ValueId v = Input(g, "v", F32({1, hkv, s, d}));
  ValueId pos = Input(g, "pos", I32({1, t}));
  Attributes attrs;
  attrs.Set("scale", scale);
  attrs.Set("sliding_window", window);
  EXPECT_TRUE(g.AddOutput(Op(g, "attention", {q, k, v, pos}, "o", F32({1, t, hq, d}), attrs)).ok());
  return g;
}

TEST(CpuKernels, AttentionSoftmaxOverCausalRows) {
  auto backend = MakeBackend(AttentionGraph(1, 1, 1, 3, 2, 1.0, 0));
  ASSERT_NE(backend, nullptr);
  // Query at position 1 sees rows 0 and 1 (row 2 is in the future): scores 0 and 1.
  const std::map<std::string, HostTensor> in = {
      {"q", HostTensor::Float({1, 1, 1, 2}, {1, 0})},
      {"k", HostTensor::Float({1, 1, 3, 2}, {0, 0, 1, 0, 100, 0})},
      {"v", HostTensor::Float({1, 1, 3, 2}, {1, 0, 0, 1, 50, 50})},
      {"pos", HostTensor::Int({1, 1}, {1})}};
  const double e = std::exp(1.0);
  ExpectNear(RunFloat(*backend, in),
             {static_cast<float>(1 / (1 + e)), static_cast<float>(e / (1 + e))}, 1e-7);

  // A window of 1 leaves only the query's own row.
  auto windowed = MakeBackend(AttentionGraph(1, 1, 1, 3, 2, 1.0, 1));
  ASSERT_NE(windowed, nullptr);
  ExpectNear(RunFloat(*windowed, in), {0, 1}, 0);
}

TEST(CpuKernels, AttentionGroupsQueryHeadsAndSlidesTheWindow) {
  // Zero queries give uniform weights over the visible rows, so each output is the mean of
  // the visible v rows of the head's kv group (heads 0,1 → kv 0; heads 2,3 → kv 1).
  auto backend = MakeBackend(AttentionGraph(2, 4, 2, 5, 1, 0.5, 2));
  ASSERT_NE(backend, nullptr);
  const std::vector<float> got = RunFloat(
      *backend, {{"q", HostTensor::Float({1, 2, 4, 1}, std::vector<float>(8, 0))},
                 {"k", HostTensor::Float({1, 2, 5, 1}, std::vector<float>(10, 0))},
                 {"v", HostTensor::Float({1, 2, 5, 1}, {1, 2, 4, 8, 16, 10, 20, 40, 80, 160})},
                 {"pos", HostTensor::Int({1, 2}, {0, 3})}});
  // Position 0 sees row 0; position 3 with window 2 sees rows 2 and 3.
  ExpectNear(got, {1, 1, 10, 10, 6, 6, 60, 60}, 1e-6);
}

TEST(CpuKernels, AttentionMatchesNaiveFormula) {
  const int64_t t = 3, hq = 6, hkv = 2, s = 7, d = 4, window = 3;
  const double scale = 0.35;
  std::vector<float> q(t * hq * d), k(hkv * s * d), v(hkv * s * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.7 * i + 0.1);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(1.3 * i);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * i * i);
  const std::vector<int32_t> pos = {2, 4, 6};
  for (int64_t w : {int64_t{0}, window}) {
    auto backend = MakeBackend(AttentionGraph(t, hq, hkv, s, d, scale, w), {}, 2);
    ASSERT_NE(backend, nullptr);
    const std::vector<float> got = RunFloat(*backend, {{"q", HostTensor::Float({1, t, hq, d}, q)},
                                                       {"k", HostTensor::Float({1, hkv, s, d}, k)},
                                                       {"v", HostTensor::Float({1, hkv, s, d}, v)},
                                                       {"pos", HostTensor::Int({1, t}, pos)}});
    ASSERT_EQ(got.size(), q.size());
    for (int64_t ti = 0; ti < t; ++ti) {
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv);
        const int64_t p = pos[ti];
        std::vector<double> weights;
        double total = 0;
        for (int64_t j = 0; j < s; ++j) {
          const bool visible = j <= p && (w == 0 || j > p - w);
          double score = 0;
          for (int64_t dd = 0; dd < d; ++dd)
            score += q[(ti * hq + h) * d + dd] * k[(g * s + j) * d + dd];
          weights.push_back(visible ? std::exp(score * scale) : 0.0);
          total += weights.back();
        }
        for (int64_t dd = 0; dd < d; ++dd) {
          double want = 0;
          for (int64_t j = 0; j < s; ++j) want += weights[j] / total * v[(g * s + j) * d + dd];
          EXPECT_NEAR(got[(ti * hq + h) * d + dd], want, 1e-6)
              << "window " << w << " t " << ti << " head " << h << " d " << dd;
        }
      }
    }
  }
}

TEST(CpuKernels, ElementwiseKinds) {
  ir::Graph g;
  ValueId a = Input(g, "a", F32({3}));
  ValueId b = Input(g, "b", F32({3}));
  ASSERT_TRUE(g.AddOutput(Op(g, "add", {a, b}, "sum", F32({3}))).ok());
  ASSERT_TRUE(g.AddOutput(Op(g, "mul", {a, b}, "prod", F32({3}))).ok());
  ASSERT_TRUE(g.AddOutput(Op(g, "silu", {a}, "act", F32({3}))).ok());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  auto out = backend->Execute(
      {{"a", HostTensor::Float({3}, {0, 1, -2})}, {"b", HostTensor::Float({3}, {4, 5, 6})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].f, (std::vector<float>{4, 6, 4}));
  EXPECT_EQ((*out)[1].f, (std::vector<float>{0, 5, -12}));
  // silu(x) = x / (1 + e^-x)
  ExpectNear((*out)[2].f, {0, 0.7310586f, -0.2384058f}, 1e-7);
}

TEST(CpuKernels, ArgmaxBreaksTiesTowardsTheLowestIndex) {
  ir::Graph g;
  ValueId logits = Input(g, "logits", F32({1, 2, 4}));
  ASSERT_TRUE(g.AddOutput(Op(g, "argmax", {logits}, "ids", I32({1, 2}))).ok());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  auto out =
      backend->Execute({{"logits", HostTensor::Float({1, 2, 4}, {1, 3, 3, 0, 5, -1, 5, 5})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype, DType::kI32);
  EXPECT_EQ((*out)[0].i, (std::vector<int32_t>{1, 0}));
}

TEST(CpuKernels, MoeRouterIsXTimesWTransposed) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({1, 2, 2}));
  ValueId w = Weight(g, "w", F32({3, 2}));
  ASSERT_TRUE(g.AddOutput(Op(g, "moe_router", {x, w}, "logits", F32({1, 2, 3}))).ok());
  auto backend = MakeBackend(g, {{"w", HostTensor::Float({3, 2}, {1, 0, 0, 1, 1, -1})}}, 2);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(RunFloat(*backend, {{"x", HostTensor::Float({1, 2, 2}, {2, 5, -1, 0.5})}}),
            (std::vector<float>{2, 5, -3, -1, 0.5, -1.5}));
}

Attributes TopkAttrs(int64_t k, bool norm, double scaling, int64_t groups = 1,
                     int64_t topk_groups = 1) {
  Attributes attrs;
  attrs.Set("top_k", k);
  attrs.Set("norm_topk_prob", norm);
  attrs.Set("scaling", scaling);
  attrs.Set("num_groups", groups);
  attrs.Set("topk_groups", topk_groups);
  return attrs;
}

// Runs moe_topk on logits [1, T, E] = log(probs) (so softmax gives back probs) and returns
// the ids and weights.
struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
Routed RunTopk(const std::vector<std::vector<double>>& probs, const Attributes& attrs) {
  const int64_t t = static_cast<int64_t>(probs.size());
  const int64_t e = static_cast<int64_t>(probs[0].size());
  const int64_t k = *attrs.GetInt("top_k");
  ir::Graph g;
  ValueId logits = Input(g, "logits", F32({1, t, e}));
  auto ids = g.AddRegion(
      "moe_topk", {logits},
      {ir::ResultSpec{"ids", I32({1, t, k}), {}}, ir::ResultSpec{"weights", F32({1, t, k}), {}}},
      attrs);
  EXPECT_TRUE(ids.ok()) << ids.status();
  if (!ids.ok()) return {};
  EXPECT_TRUE(g.AddOutput((*ids)[0]).ok());
  EXPECT_TRUE(g.AddOutput((*ids)[1]).ok());
  auto backend = MakeBackend(g);
  if (backend == nullptr) return {};
  std::vector<float> data;
  for (const auto& row : probs) {
    for (double p : row) data.push_back(static_cast<float>(std::log(p)));
  }
  auto out = backend->Execute({{"logits", HostTensor::Float({1, t, e}, data)}});
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  EXPECT_EQ((*out)[0].dtype, DType::kI32);
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{1, t, k}));
  EXPECT_EQ((*out)[1].shape, (std::vector<int64_t>{1, t, k}));
  return {(*out)[0].i, (*out)[1].f};
}

TEST(CpuKernels, MoeTopkPicksTheLargestProbabilitiesInOrder) {
  // Token 0: distinct. Token 1: experts 1 and 3 tie (lower first), and 0 and 4 tie for the
  // last place (0 wins).
  const std::vector<std::vector<double>> probs = {{0.1, 0.4, 0.2, 0.25, 0.05},
                                                  {0.15, 0.3, 0.1, 0.3, 0.15}};
  Routed r = RunTopk(probs, TopkAttrs(3, false, 1.0));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 2, 1, 3, 0}));
  ExpectNear(r.weights, {0.4f, 0.25f, 0.2f, 0.3f, 0.3f, 0.15f}, 1e-6);
  // Renormalized over the three, then scaled.
  r = RunTopk(probs, TopkAttrs(3, true, 2.5));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 2, 1, 3, 0}));
  ExpectNear(r.weights,
             {static_cast<float>(2.5 * 0.4 / 0.85), static_cast<float>(2.5 * 0.25 / 0.85),
              static_cast<float>(2.5 * 0.2 / 0.85), static_cast<float>(2.5 * 0.3 / 0.75),
              static_cast<float>(2.5 * 0.3 / 0.75), static_cast<float>(2.5 * 0.15 / 0.75)},
             1e-6);
  // Scaling without renormalization; K = E.
  r = RunTopk({{0.5, 0.2, 0.3}}, TopkAttrs(3, false, 16.0));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2, 1}));
  ExpectNear(r.weights, {8.0f, 4.8f, 3.2f}, 1e-5);
}

TEST(CpuKernels, MoeTopkLimitsTheChoiceToTheBestGroups) {
  // Six experts in three groups {0,1}, {2,3}, {4,5}.
  // Token 0: group maxima 0.30, 0.25, 0.24, so groups 0 and 1 compete: expert 4 (0.24) is
  // out, and the third pick is expert 3 (0.03).
  // Token 1: group maxima 0.2, 0.2, 0.25: group 2 and, of the tied groups, group 0; then
  // experts 0 and 4 tie at 0.2 (0 first).
  const std::vector<std::vector<double>> probs = {{0.30, 0.02, 0.25, 0.03, 0.24, 0.16},
                                                  {0.2, 0.1, 0.05, 0.2, 0.2, 0.25}};
  Routed r = RunTopk(probs, TopkAttrs(3, false, 1.0, 3, 2));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2, 3, 5, 0, 4}));
  ExpectNear(r.weights, {0.30f, 0.25f, 0.03f, 0.25f, 0.2f, 0.2f}, 1e-6);
  // Without groups, token 0 would take expert 4 and token 1 experts 5, 0, 3.
  r = RunTopk(probs, TopkAttrs(3, false, 1.0));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2, 4, 5, 0, 3}));
  // One group: only its two experts, renormalized and scaled.
  r = RunTopk(probs, TopkAttrs(2, true, 2.0, 3, 1));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 5, 4}));
  ExpectNear(r.weights,
             {static_cast<float>(2 * 0.30 / 0.32), static_cast<float>(2 * 0.02 / 0.32),
              static_cast<float>(2 * 0.25 / 0.45), static_cast<float>(2 * 0.2 / 0.45)},
             1e-6);
}

// expert_linear over w [E=3, N=2, H=2] with ids [1, 2, K=2], x shared per token ([1,2,H]) or
// one per selection ([1,2,K,H]).
ir::Graph ExpertLinearGraph(bool per_selection) {
  ir::Graph g;
  ValueId x = Input(g, "x", per_selection ? F32({1, 2, 2, 2}) : F32({1, 2, 2}));
  ValueId ids = Input(g, "ids", I32({1, 2, 2}));
  ValueId w = Weight(g, "w", F32({3, 2, 2}));
  EXPECT_TRUE(g.AddOutput(Op(g, "expert_linear", {x, ids, w}, "y", F32({1, 2, 2, 2}))).ok());
  return g;
}

HostTensor ExpertWeights() {
  return HostTensor::Float({3, 2, 2}, {1, 0, 0, 1,     // e0: the identity
                                       1, 1, 2, 0,     // e1
                                       0, -1, 3, 1});  // e2
}

TEST(CpuKernels, ExpertLinearAppliesEachSelectedExpert) {
  for (int threads : {1, 3}) {
    auto shared = MakeBackend(ExpertLinearGraph(false), {{"w", ExpertWeights()}}, threads);
    ASSERT_NE(shared, nullptr);
    const HostTensor ids = HostTensor::Int({1, 2, 2}, {2, 0, 1, 1});
    // Token 0 x = (1, 2): e2 → (−2, 5), e0 → (1, 2). Token 1 x = (3, −1): e1 twice → (2, 6).
    EXPECT_EQ(RunFloat(*shared, {{"x", HostTensor::Float({1, 2, 2}, {1, 2, 3, -1})}, {"ids", ids}}),
              (std::vector<float>{-2, 5, 1, 2, 2, 6, 2, 6}));
    auto per_selection = MakeBackend(ExpertLinearGraph(true), {{"w", ExpertWeights()}}, threads);
    ASSERT_NE(per_selection, nullptr);
    // x per selection: (1, 0) → e2 (0, 3); (0, 1) → e0 (0, 1); (2, 2) → e1 (4, 4);
    // (1, −1) → e1 (0, 2).
    EXPECT_EQ(
        RunFloat(*per_selection,
                 {{"x", HostTensor::Float({1, 2, 2, 2}, {1, 0, 0, 1, 2, 2, 1, -1})}, {"ids", ids}}),
        (std::vector<float>{0, 3, 0, 1, 4, 4, 0, 2}));
  }
}

TEST(CpuKernels, ExpertLinearRejectsOutOfRangeIds) {
  auto backend = MakeBackend(ExpertLinearGraph(false), {{"w", ExpertWeights()}});
  ASSERT_NE(backend, nullptr);
  for (int32_t bad : {3, -1}) {
    auto out = backend->Execute({{"x", HostTensor::Float({1, 2, 2}, {1, 2, 3, 4})},
                                 {"ids", HostTensor::Int({1, 2, 2}, {0, 1, bad, 2})}});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().message(), absl::StrCat("region 0 'expert_linear' (%y): expert id ", bad,
                                                   " at [0,1,0] is outside the experts [0, 3)"));
  }
}

TEST(CpuKernels, MoeCombineSumsTheWeightedSelections) {
  ir::Graph g;
  ValueId y = Input(g, "y", F32({1, 2, 2, 3}));
  ValueId w = Input(g, "w", F32({1, 2, 2}));
  ASSERT_TRUE(g.AddOutput(Op(g, "moe_combine", {y, w}, "out", F32({1, 2, 3}))).ok());
  auto backend = MakeBackend(g, {}, 2);
  ASSERT_NE(backend, nullptr);
  // Token 0: 0.5·(1, 2, 3) + 2·(10, 20, 30). Token 1: −1·(1, 1, 1) + 0.25·(4, 8, −4).
  ExpectNear(
      RunFloat(*backend,
               {{"y", HostTensor::Float({1, 2, 2, 3}, {1, 2, 3, 10, 20, 30, 1, 1, 1, 4, 8, -4})},
                {"w", HostTensor::Float({1, 2, 2}, {0.5, 2, -1, 0.25})}}),
      {20.5f, 41, 61.5f, 0, 1, -2}, 1e-6);
}

// A routed-experts block as lowering emits it (router, top-k, gate/up/down expert_linear,
// SwiGLU, combine) against the same computed directly from its definition.
TEST(CpuKernels, MoeBlockMatchesADirectComputation) {
  const int64_t t = 3, h = 4, e = 4, k = 2, f = 3;
  ir::Graph g;
  ValueId x = Input(g, "x", F32({1, t, h}));
  ValueId router = Weight(g, "router", F32({e, h}));
  ValueId gate_w = Weight(g, "gate", F32({e, f, h}));
  ValueId up_w = Weight(g, "up", F32({e, f, h}));
  ValueId down_w = Weight(g, "down", F32({e, h, f}));
  ValueId logits = Op(g, "moe_router", {x, router}, "logits", F32({1, t, e}));
  auto route = g.AddRegion(
      "moe_topk", {logits},
      {ir::ResultSpec{"ids", I32({1, t, k}), {}}, ir::ResultSpec{"weights", F32({1, t, k}), {}}},
      TopkAttrs(k, true, 1.5));
  ASSERT_TRUE(route.ok()) << route.status();
  const ValueId ids = (*route)[0];
  ValueId gate = Op(g, "expert_linear", {x, ids, gate_w}, "g", F32({1, t, k, f}));
  ValueId up = Op(g, "expert_linear", {x, ids, up_w}, "u", F32({1, t, k, f}));
  ValueId act = Op(g, "silu", {gate}, "a", F32({1, t, k, f}));
  ValueId prod = Op(g, "mul", {act, up}, "p", F32({1, t, k, f}));
  ValueId down = Op(g, "expert_linear", {prod, ids, down_w}, "d", F32({1, t, k, h}));
  ASSERT_TRUE(g.AddOutput(Op(g, "moe_combine", {down, (*route)[1]}, "out", F32({1, t, h}))).ok());
  ASSERT_TRUE(g.AddOutput(ids).ok());

  auto values = [](int64_t n, double a, double b) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(a * i + b));
    return v;
  };
  const std::vector<float> xs = values(t * h, 0.9, 0.3), rw = values(e * h, 1.7, 0.1),
                           gw = values(e * f * h, 0.61, 0.2), uw = values(e * f * h, 0.43, 1.0),
                           dw = values(e * h * f, 0.29, 2.0);
  auto backend = MakeBackend(g,
                             {{"router", HostTensor::Float({e, h}, rw)},
                              {"gate", HostTensor::Float({e, f, h}, gw)},
                              {"up", HostTensor::Float({e, f, h}, uw)},
                              {"down", HostTensor::Float({e, h, f}, dw)}},
                             2);
  ASSERT_NE(backend, nullptr);
  auto out = backend->Execute({{"x", HostTensor::Float({1, t, h}, xs)}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<float> want;
  std::vector<int32_t> want_ids;
  for (int64_t ti = 0; ti < t; ++ti) {
    // Softmax over the router logits, then the two largest by sorting.
    std::vector<double> p(e);
    double total = 0;
    for (int64_t ei = 0; ei < e; ++ei) {
      double logit = 0;
      for (int64_t hi = 0; hi < h; ++hi) logit += xs[ti * h + hi] * rw[ei * h + hi];
      p[ei] = std::exp(logit);
      total += p[ei];
    }
    std::vector<int32_t> order = {0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    const double norm = p[order[0]] + p[order[1]];
    std::vector<double> y(h, 0.0);
    for (int64_t ki = 0; ki < k; ++ki) {
      const int32_t ex = order[ki];
      want_ids.push_back(ex);
      const double weight = 1.5 * p[ex] / norm;
      for (int64_t hi = 0; hi < h; ++hi) {
        double acc = 0;
        for (int64_t fi = 0; fi < f; ++fi) {
          double gv = 0, uv = 0;
          for (int64_t c = 0; c < h; ++c) {
            gv += xs[ti * h + c] * gw[(ex * f + fi) * h + c];
            uv += xs[ti * h + c] * uw[(ex * f + fi) * h + c];
          }
          acc += gv / (1 + std::exp(-gv)) * uv * dw[(ex * h + hi) * f + fi];
        }
        y[hi] += weight * acc;
      }
    }
    for (double v : y) want.push_back(static_cast<float>(v));
  }
  EXPECT_EQ((*out)[1].i, want_ids);
  ExpectNear((*out)[0].f, want, 1e-5);
}

// mla_attention with Hq heads of Dn + Dr query dims and Dv value dims over a latent of C
// and caches of S rows, all inputs but the weight w_kv_b.
ir::Graph MlaGraph(int64_t b, int64_t t, int64_t hq, int64_t dn, int64_t dr, int64_t dv, int64_t c,
                   int64_t s, double scale) {
  ir::Graph g;
  ValueId q_nope = Input(g, "q_nope", F32({b, t, hq, dn}));
  ValueId q_rope = Input(g, "q_rope", F32({b, t, hq, dr}));
  ValueId latent = Input(g, "latent", F32({b, 1, s, c}));
  ValueId rope = Input(g, "rope", F32({b, 1, s, dr}));
  ValueId w = Weight(g, "w_kv_b", F32({hq * (dn + dv), c}));
  ValueId pos = Input(g, "pos", I32({b, t}));
  Attributes attrs;
  attrs.Set("scale", scale);
  EXPECT_TRUE(g.AddOutput(Op(g, "mla_attention", {q_nope, q_rope, latent, rope, w, pos}, "o",
                             F32({b, t, hq, dv}), attrs))
                  .ok());
  return g;
}

TEST(CpuKernels, MlaAttentionUpProjectsTheLatent) {
  // One head, Dn = Dr = Dv = 1, C = 2: w_kv_b is the identity, so k_nope = latent[0] and
  // v = latent[1].
  auto backend = MakeBackend(MlaGraph(1, 1, 1, 1, 1, 1, 2, 3, 0.5),
                             {{"w_kv_b", HostTensor::Float({2, 2}, {1, 0, 0, 1})}});
  ASSERT_NE(backend, nullptr);
  // The query at position 1 sees rows 0 and 1: scores 0.5·(0 + 0) and 0.5·(1 + 1); row 2 is in
  // the future.
  const std::map<std::string, HostTensor> in = {
      {"q_nope", HostTensor::Float({1, 1, 1, 1}, {1})},
      {"q_rope", HostTensor::Float({1, 1, 1, 1}, {1})},
      {"latent", HostTensor::Float({1, 1, 3, 2}, {0, 10, 1, 20, 100, 30})},
      {"rope", HostTensor::Float({1, 1, 3, 1}, {0, 1, 5})},
      {"pos", HostTensor::Int({1, 1}, {1})}};
  const double e = std::exp(1.0);
  ExpectNear(RunFloat(*backend, in), {static_cast<float>((10 + 20 * e) / (1 + e))}, 1e-6);

  auto bad = in;
  bad["pos"] = HostTensor::Int({1, 1}, {3});
  auto out = backend->Execute(bad);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "region 0 'mla_attention' (%o): position 3 of token [0,0] is outside the KV cache "
            "[0, 3)");
}

// mla_attention against `attention` fed the up-projected caches: K [B,Hq,S,Dn+Dr] =
// [W_K,h · latent | rope] per head, V = W_V,h · latent zero-padded to Dn+Dr dims (attention
// needs equal head dims), whose first Dv outputs are then mla_attention's.
TEST(CpuKernels, MlaAttentionIsAttentionOverTheUpProjectedCaches) {
  const int64_t b = 2, t = 2, hq = 3, dn = 3, dr = 2, dv = 2, c = 4, s = 6, d = dn + dr;
  const double scale = 0.4;
  auto values = [](int64_t n, double a, double o) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(a * i + o));
    return v;
  };
  const std::vector<float> q_nope = values(b * t * hq * dn, 0.7, 0.1),
                           q_rope = values(b * t * hq * dr, 1.1, 0.5),
                           latent = values(b * s * c, 0.37, 0.2),
                           rope = values(b * s * dr, 1.9, 0.3),
                           w = values(hq * (dn + dv) * c, 0.53, 1.3);
  const std::vector<int32_t> pos = {1, 5, 0, 3};  // sequence 0 at 1 and 5, sequence 1 at 0 and 3

  std::vector<float> q(b * t * hq * d), k(b * hq * s * d), v(b * hq * s * d, 0.0f);
  for (int64_t n = 0; n < b * t * hq; ++n) {
    for (int64_t i = 0; i < dn; ++i) q[n * d + i] = q_nope[n * dn + i];
    for (int64_t i = 0; i < dr; ++i) q[n * d + dn + i] = q_rope[n * dr + i];
  }
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t j = 0; j < s; ++j) {
        const float* lat = latent.data() + (bi * s + j) * c;
        float* kj = k.data() + ((bi * hq + h) * s + j) * d;
        float* vj = v.data() + ((bi * hq + h) * s + j) * d;
        auto up = [&](int64_t row) {
          double acc = 0;
          for (int64_t ci = 0; ci < c; ++ci) acc += static_cast<double>(w[row * c + ci]) * lat[ci];
          return static_cast<float>(acc);
        };
        for (int64_t i = 0; i < dn; ++i) kj[i] = up(h * (dn + dv) + i);
        for (int64_t i = 0; i < dr; ++i) kj[dn + i] = rope[(bi * s + j) * dr + i];
        for (int64_t i = 0; i < dv; ++i) vj[i] = up(h * (dn + dv) + dn + i);
      }
    }
  }
  ir::Graph ag;
  {
    ValueId aq = Input(ag, "q", F32({b, t, hq, d}));
    ValueId ak = Input(ag, "k", F32({b, hq, s, d}));
    ValueId av = Input(ag, "v", F32({b, hq, s, d}));
    ValueId apos = Input(ag, "pos", I32({b, t}));
    Attributes attrs;
    attrs.Set("scale", scale);
    attrs.Set("sliding_window", int64_t{0});
    ASSERT_TRUE(
        ag.AddOutput(Op(ag, "attention", {aq, ak, av, apos}, "o", F32({b, t, hq, d}), attrs)).ok());
  }
  auto attention = MakeBackend(ag, {}, 1, b);
  ASSERT_NE(attention, nullptr);
  const std::vector<float> padded =
      RunFloat(*attention, {{"q", HostTensor::Float({b, t, hq, d}, q)},
                            {"k", HostTensor::Float({b, hq, s, d}, k)},
                            {"v", HostTensor::Float({b, hq, s, d}, v)},
                            {"pos", HostTensor::Int({b, t}, pos)}});
  ASSERT_EQ(padded.size(), q.size());
  std::vector<float> want;
  for (int64_t n = 0; n < b * t * hq; ++n) {
    for (int64_t i = 0; i < dv; ++i) want.push_back(padded[n * d + i]);
  }
  for (int threads : {1, 3}) {
    auto mla = MakeBackend(MlaGraph(b, t, hq, dn, dr, dv, c, s, scale),
                           {{"w_kv_b", HostTensor::Float({hq * (dn + dv), c}, w)}}, threads, b);
    ASSERT_NE(mla, nullptr);
    const std::vector<float> got =
        RunFloat(*mla, {{"q_nope", HostTensor::Float({b, t, hq, dn}, q_nope)},
                        {"q_rope", HostTensor::Float({b, t, hq, dr}, q_rope)},
                        {"latent", HostTensor::Float({b, 1, s, c}, latent)},
                        {"rope", HostTensor::Float({b, 1, s, dr}, rope)},
                        {"pos", HostTensor::Int({b, t}, pos)}});
    ExpectNear(got, want, 1e-6);
  }
}

TEST(CpuKernels, SplitAndReshapeViews) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({2, 6}));
  Attributes attrs;
  attrs.Set("sizes", std::vector<int64_t>{1, 2, 3});
  const ResultAlias view{AliasKind::kView, 0};
  auto parts =
      g.AddRegion("split", {x},
                  {ir::ResultSpec{"a", F32({2, 1}), view}, ir::ResultSpec{"b", F32({2, 2}), view},
                   ir::ResultSpec{"c", F32({2, 3}), view}},
                  attrs);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ValueId c3 = Op(g, "reshape", {(*parts)[2]}, "c_t", F32({3, 2}), {}, view);
  ValueId b_flat = Op(g, "reshape", {(*parts)[1]}, "b_flat", F32({4}), {}, view);
  ValueId sum = Op(g, "add", {b_flat, b_flat}, "b_twice", F32({4}));
  for (ValueId out : {(*parts)[0], c3, sum}) ASSERT_TRUE(g.AddOutput(out).ok());
  auto backend = MakeBackend(g);
  ASSERT_NE(backend, nullptr);
  auto out = backend->Execute(
      {{"x", HostTensor::Float({2, 6}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].f, (std::vector<float>{0, 10}));
  EXPECT_EQ((*out)[1].f, (std::vector<float>{3, 4, 5, 13, 14, 15}));
  EXPECT_EQ((*out)[1].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ((*out)[2].f, (std::vector<float>{2, 4, 22, 24}));
}

TEST(CpuBackendGraphs, GraphsAreVerifiedAtCreation) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({2, 3}));
  ASSERT_TRUE(g.AddOutput(Op(g, "reshape", {x}, "y", F32({4}), {}, {AliasKind::kView, 0})).ok());
  CpuBackend::Options options;
  options.max_seq = 1;
  auto backend = CpuBackend::CreateWithWeights(g, {}, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(std::string(backend.status().message()), HasSubstr("is not a reshape of"));
}

TEST(CpuBackendGraphs, UnknownKindIsRefusedAtCreation) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({2}));
  ASSERT_TRUE(g.AddOutput(Op(g, "gelu", {x}, "y", F32({2}))).ok());
  CpuBackend::Options options;
  options.max_seq = 1;
  auto backend = CpuBackend::CreateWithWeights(g, {}, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(std::string(backend.status().message()), HasSubstr("unknown region kind 'gelu'"));
}

TEST(CpuBackendGraphs, ReadingACacheAfterItsInPlaceUpdateIsRefused) {
  ir::Graph g = KvWriteGraph();
  // Attends over the stale state instead of the updated cache.
  ValueId cache = g.FindValue("cache");
  ValueId pos = g.FindValue("pos");
  ValueId x = g.FindValue("x");
  Attributes attrs;
  attrs.Set("scale", 1.0);
  Op(g, "attention", {x, cache, cache, pos}, "o",
     ir::MakeType(DType::kF32, {ir::Dim::Symbol("B"), ir::Dim::Symbol("T"), ir::Dim::Static(2),
                                ir::Dim::Static(2)}),
     attrs);
  CpuBackend::Options options;
  options.max_seq = 4;
  auto backend = CpuBackend::CreateWithWeights(g, {}, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(std::string(backend.status().message()), HasSubstr("%cache"));
  EXPECT_THAT(std::string(backend.status().message()),
              HasSubstr("after region #0 'kv_write' updated its storage in place"));
}

TEST(CpuBackendGraphs, InPlaceUpdatesOfViewsAndWeightsAreRefused) {
  for (bool through_view : {true, false}) {
    ir::Graph g;
    const ir::TensorType cache_type = F32({1, 1, 2, 2});
    ValueId base = through_view ? Input(g, "flat", F32({4})) : Weight(g, "w", cache_type);
    ValueId cache = base;
    if (through_view)
      cache = Op(g, "reshape", {base}, "cache", cache_type, {}, {AliasKind::kView, 0});
    ValueId x = Input(g, "x", F32({1, 1, 1, 2}));
    ValueId pos = Input(g, "pos", I32({1, 1}));
    Op(g, "kv_write", {cache, x, pos}, "updated", cache_type, {}, {AliasKind::kInPlace, 0});
    CpuBackend::Options options;
    options.max_seq = 2;
    std::map<std::string, HostTensor> weights;
    if (!through_view) weights["w"] = HostTensor::Float({1, 1, 2, 2}, std::vector<float>(4, 0));
    auto backend = CpuBackend::CreateWithWeights(g, weights, options);
    ASSERT_FALSE(backend.ok());
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr(through_view ? "is a read-only view" : "weights are read-only"));
  }
}

TEST(CpuBackendGraphs, InputsAndWeightsAreChecked) {
  ir::Graph g;
  ValueId x = Input(g, "x", F32({2, 3}));
  ValueId w = Weight(g, "w", F32({2, 3}));
  ASSERT_TRUE(g.AddOutput(Op(g, "linear", {x, w}, "y", F32({2, 2}))).ok());
  CpuBackend::Options options;
  options.max_seq = 1;
  auto missing = CpuBackend::CreateWithWeights(g, {}, options);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no data for weight %w"));
  auto extra = CpuBackend::CreateWithWeights(
      g,
      {{"w", HostTensor::Float({2, 3}, std::vector<float>(6))}, {"v", HostTensor::Float({1}, {0})}},
      options);
  ASSERT_FALSE(extra.ok());
  EXPECT_THAT(std::string(extra.status().message()), HasSubstr("'v'"));
  auto wrong = CpuBackend::CreateWithWeights(
      g, {{"w", HostTensor::Float({3, 2}, std::vector<float>(6))}}, options);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("weight %w is declared f32[2,3]"));

  auto backend = MakeBackend(g, {{"w", HostTensor::Float({2, 3}, std::vector<float>(6))}});
  ASSERT_NE(backend, nullptr);
  auto no_input = backend->Execute({});
  ASSERT_FALSE(no_input.ok());
  EXPECT_THAT(std::string(no_input.status().message()), HasSubstr("missing input %x"));
  auto bad_shape = backend->Execute({{"x", HostTensor::Float({3, 2}, std::vector<float>(6))}});
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_THAT(std::string(bad_shape.status().message()), HasSubstr("input %x has shape [3,2]"));
  auto bad_size = backend->Execute({{"x", HostTensor::Float({2, 3}, std::vector<float>(5))}});
  ASSERT_FALSE(bad_size.ok());
  EXPECT_THAT(std::string(bad_size.status().message()), HasSubstr("data size does not match"));
}

}  // namespace
}  // namespace tileplan::runtime::cpu
