// Each primitive kind of the CPU reference backend against small hand-computed results,
// run through the interpreter on one- or two-region graphs.
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
