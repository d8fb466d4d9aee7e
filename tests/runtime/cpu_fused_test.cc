// Fused kinds and packed weights on the CPU backend: each fused region, on random inputs,
// computes what the primitive regions it replaces compute (docs/ir.md, "Fused kinds"), and a
// packed weight loaded from a checkpoint gives what its separate parts give.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/safetensors.h"
#include "regions/kinds.h"
#include "regions/parser.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/models/safetensors_builder.h"
#include "tests/testing/compare.h"
#include "tests/testing/random_weights.h"

namespace tileplan::runtime::cpu {
namespace {

using ::testing::HasSubstr;
using tileplan::testing::MaxRelativeDifference;

ir::Graph Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? std::move(*g) : ir::Graph();
}

class Random {
 public:
  explicit Random(uint32_t seed) : rng_(seed) {}
  HostTensor Float(std::vector<int64_t> shape, double scale = 1.0, double offset = 0.0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(static_cast<size_t>(n));
    std::normal_distribution<double> normal;
    for (float& x : data) x = static_cast<float>(offset + scale * normal(rng_));
    return HostTensor::Float(std::move(shape), std::move(data));
  }

 private:
  std::mt19937 rng_;
};

// Random data for every weight of `graph` (norm weights, named *norm*, near 1).
std::map<std::string, HostTensor> RandomWeightsFor(const ir::Graph& graph, Random& rnd) {
  std::map<std::string, HostTensor> weights;
  for (ir::ValueId id : graph.weights()) {
    const ir::Value& w = graph.value(id);
    std::vector<int64_t> shape;
    for (const ir::Dim& d : w.type.dims) shape.push_back(d.extent());
    const bool norm = w.name.find("norm") != std::string::npos;
    weights[w.name] = rnd.Float(shape, norm ? 0.2 : 0.5, norm ? 1.0 : 0.0);
  }
  return weights;
}

// Runs the fused and the primitive graph (same inputs, weights and outputs by position) on
// the same random data for each input set in turn, with state carried between runs, and
// expects every output to agree within 1e-6 relative. `packed` names the fused graph's packed
// weights and the primitive graph's weights they concatenate, in order.
void ExpectSameOutputs(const std::string& fused_text, const std::string& primitive_text,
                       const std::vector<std::map<std::string, HostTensor>>& runs,
                       int64_t max_seq = 1,
                       const std::map<std::string, std::vector<std::string>>& packed = {}) {
  const ir::Graph fused = Parse(fused_text);
  const ir::Graph primitive = Parse(primitive_text);
  Random rnd(11);
  const std::map<std::string, HostTensor> weights = RandomWeightsFor(primitive, rnd);
  std::map<std::string, HostTensor> fused_weights = weights;
  for (const auto& [name, parts] : packed) {
    std::vector<int64_t> shape = weights.at(parts[0]).shape;
    std::vector<float> data;
    shape[0] = 0;
    for (const std::string& part : parts) {
      const HostTensor& t = weights.at(part);
      shape[0] += t.shape[0];
      data.insert(data.end(), t.f.begin(), t.f.end());
      fused_weights.erase(part);
    }
    fused_weights[name] = HostTensor::Float(std::move(shape), std::move(data));
  }
  CpuBackend::Options options;
  options.max_seq = max_seq;
  options.threads = 2;
  auto a = CpuBackend::CreateWithWeights(fused, fused_weights, options);
  auto b = CpuBackend::CreateWithWeights(primitive, weights, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (size_t run = 0; run < runs.size(); ++run) {
    auto out_a = (*a)->Execute(runs[run]);
    auto out_b = (*b)->Execute(runs[run]);
    ASSERT_TRUE(out_a.ok()) << out_a.status();
    ASSERT_TRUE(out_b.ok()) << out_b.status();
    ASSERT_EQ(out_a->size(), out_b->size());
    for (size_t k = 0; k < out_a->size(); ++k) {
      EXPECT_EQ((*out_a)[k].shape, (*out_b)[k].shape) << "run " << run << ", output " << k;
      EXPECT_LE(MaxRelativeDifference((*out_a)[k].f, (*out_b)[k].f), 1e-6)
          << "run " << run << ", output " << k;
      // A non-trivial output: the comparison would notice a wrong composition.
      EXPECT_GT(*std::max_element((*out_b)[k].f.begin(), (*out_b)[k].f.end()), 0.01f)
          << "run " << run << ", output " << k;
    }
  }
}

TEST(CpuFused, SwigluIsSplitSiluMul) {
  Random rnd(1);
  ExpectSameOutputs(R"(graph @fused {
  input %x: f32[2,3,16]
  %y: f32[2,3,8] = swiglu(%x) fused(split, silu, mul)
  output %y
}
)",
                    R"(graph @primitive {
  input %x: f32[2,3,16]
  %g: f32[2,3,8] view(%x), %u: f32[2,3,8] view(%x) = split(%x) {sizes = [8, 8]}
  %a: f32[2,3,8] = silu(%g)
  %y: f32[2,3,8] = mul(%a, %u)
  output %y
}
)",
                    {{{"x", rnd.Float({2, 3, 16}, 2.0)}}});
}

TEST(CpuFused, LinearSwigluIsLinearSplitSiluMul) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    const std::string b_decl = bias ? "  weight %b: f32[16] = \"b\"\n" : "";
    const std::string b_op = bias ? ", %b" : "";
    Random rnd(2);
    ExpectSameOutputs(absl::StrCat(R"(graph @fused {
  input %x: f32[B,T,6]
  weight %w: f32[16,6] = "w"
)",
                                   b_decl, R"(  %y: f32[B,T,8] = linear_swiglu(%x, %w)", b_op,
                                   R"() fused(linear, split, silu, mul)
  output %y
}
)"),
                      absl::StrCat(R"(graph @primitive {
  input %x: f32[B,T,6]
  weight %w: f32[16,6] = "w"
)",
                                   b_decl, R"(  %gu: f32[B,T,16] = linear(%x, %w)", b_op, R"()
  %g: f32[B,T,8] view(%gu), %u: f32[B,T,8] view(%gu) = split(%gu) {sizes = [8, 8]}
  %a: f32[B,T,8] = silu(%g)
  %y: f32[B,T,8] = mul(%a, %u)
  output %y
}
)"),
                      {{{"x", rnd.Float({1, 5, 6})}}});
  }
}

TEST(CpuFused, LinearResidualIsLinearAdd) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    const std::string b_decl = bias ? "  weight %b: f32[4] = \"b\"\n" : "";
    const std::string b_op = bias ? ", %b" : "";
    Random rnd(3);
    ExpectSameOutputs(absl::StrCat(R"(graph @fused {
  input %x: f32[B,T,12]
  input %h: f32[B,T,4]
  weight %w: f32[4,12] = "w"
)",
                                   b_decl, R"(  %y: f32[B,T,4] = linear_residual(%x, %w, %h)", b_op,
                                   R"() fused(linear, add)
  output %y
}
)"),
                      absl::StrCat(R"(graph @primitive {
  input %x: f32[B,T,12]
  input %h: f32[B,T,4]
  weight %w: f32[4,12] = "w"
)",
                                   b_decl, R"(  %l: f32[B,T,4] = linear(%x, %w)", b_op, R"()
  %y: f32[B,T,4] = add(%h, %l)
  output %y
}
)"),
                      {{{"x", rnd.Float({1, 3, 12})}, {"h", rnd.Float({1, 3, 4}, 3.0)}}});
  }
}

TEST(CpuFused, AddRmsNormIsAddThenRmsNorm) {
  Random rnd(4);
  ExpectSameOutputs(R"(graph @fused {
  input %a: f32[B,T,10]
  input %b: f32[B,T,10]
  weight %norm: f32[10] = "norm"
  %s: f32[B,T,10], %y: f32[B,T,10] = add_rms_norm(%a, %b, %norm) {eps = 1e-05} fused(add, rms_norm)
  output %s
  output %y
}
)",
                    R"(graph @primitive {
  input %a: f32[B,T,10]
  input %b: f32[B,T,10]
  weight %norm: f32[10] = "norm"
  %s: f32[B,T,10] = add(%a, %b)
  %y: f32[B,T,10] = rms_norm(%s, %norm) {eps = 1e-05}
  output %s
  output %y
}
)",
                    {{{"a", rnd.Float({1, 4, 10})}, {"b", rnd.Float({1, 4, 10})}}});
}

TEST(CpuFused, RmsNormLinearIsRmsNormThenLinear) {
  for (bool swiglu : {false, true}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(absl::StrCat(swiglu ? "swiglu" : "plain", bias ? " with bias" : ""));
      const std::string b_decl = bias ? "  weight %b: f32[16] = \"b\"\n" : "";
      const std::string b_op = bias ? ", %b" : "";
      const std::string head = R"(
  input %x: f32[B,T,12]
  weight %norm: f32[12] = "norm"
  weight %w: f32[16,12] = "w"
)";
      const std::string fused =
          swiglu ? absl::StrCat("  %y: f32[B,T,8] = rms_norm_linear_swiglu(%x, %norm, %w", b_op,
                                ") {eps = 1e-05} fused(rms_norm, linear, split, silu, mul)\n")
                 : absl::StrCat("  %y: f32[B,T,16] = rms_norm_linear(%x, %norm, %w", b_op,
                                ") {eps = 1e-05} fused(rms_norm, linear)\n");
      std::string primitive =
          absl::StrCat("  %n: f32[B,T,12] = rms_norm(%x, %norm) {eps = 1e-05}\n", "  %",
                       swiglu ? "gu" : "y", ": f32[B,T,16] = linear(%n, %w", b_op, ")\n");
      if (swiglu) {
        primitive +=
            R"(  %g: f32[B,T,8] view(%gu), %u: f32[B,T,8] view(%gu) = split(%gu) {sizes = [8, 8]}
  %a: f32[B,T,8] = silu(%g)
  %y: f32[B,T,8] = mul(%a, %u)
)";
      }
      Random rnd(6);
      ExpectSameOutputs(
          absl::StrCat("graph @fused {", head, b_decl, fused, "  output %y\n}\n"),
          absl::StrCat("graph @primitive {", head, b_decl, primitive, "  output %y\n}\n"),
          {{{"x", rnd.Float({1, 3, 12}, 3.0)}}, {{"x", rnd.Float({1, 1, 12}, 0.1)}}});
    }
  }
}

// A prefill of 3 tokens at positions 0..2 into a cache of 6, then one decode step at 5 (so
// the cache holds rows written by both runs).
std::vector<std::map<std::string, HostTensor>> QkvRuns(int64_t width) {
  Random rnd(5);
  return {{{"qkv", rnd.Float({1, 3, width})}, {"positions", HostTensor::Int({1, 3}, {0, 1, 2})}},
          {{"qkv", rnd.Float({1, 1, width})}, {"positions", HostTensor::Int({1, 1}, {5})}}};
}

// The primitive regions of one attention block's QKV handling (lowering's order), with
// Hq = 4, Hkv = 2, D = 8 and the given rope attributes; outputs q and the updated caches.
std::string PrimitiveQkv(bool norms, const std::string& rope_attrs) {
  std::string text = R"(graph @primitive {
  input %qkv: f32[B,T,64]
  input %positions: i32[B,T]
)";
  if (norms) {
    text += R"(  weight %q_norm: f32[8] = "q_norm"
  weight %k_norm: f32[8] = "k_norm"
)";
  }
  text += R"(  state %k_cache: f32[B,2,Smax,8]
  state %v_cache: f32[B,2,Smax,8]
  %q: f32[B,T,32] view(%qkv), %k: f32[B,T,16] view(%qkv), %v: f32[B,T,16] view(%qkv) = split(%qkv) {sizes = [32, 16, 16]}
  %q4: f32[B,T,4,8] view(%q) = reshape(%q)
  %k4: f32[B,T,2,8] view(%k) = reshape(%k)
  %v4: f32[B,T,2,8] view(%v) = reshape(%v)
)";
  std::string q = "%q4", k = "%k4";
  if (norms) {
    text += R"(  %qn: f32[B,T,4,8] = rms_norm(%q4, %q_norm) {eps = 1e-06}
  %kn: f32[B,T,2,8] = rms_norm(%k4, %k_norm) {eps = 1e-06}
)";
    q = "%qn";
    k = "%kn";
  }
  absl::StrAppend(&text, "  %qr: f32[B,T,4,8] = rope(", q, ", %positions) {", rope_attrs, "}\n",
                  "  %kr: f32[B,T,2,8] = rope(", k, ", %positions) {", rope_attrs, "}\n",
                  R"(  %kc: f32[B,2,Smax,8] inplace(%k_cache) = kv_write(%k_cache, %kr, %positions)
  %vc: f32[B,2,Smax,8] inplace(%v_cache) = kv_write(%v_cache, %v4, %positions)
  output %qr
  output %kc
  output %vc
}
)");
  return text;
}

constexpr char kDefaultRope[] = R"(rope_type = "default", theta = 10000.0)";
constexpr char kLlama3Rope[] =
    R"(factor = 8.0, high_freq_factor = 4.0, low_freq_factor = 1.0, original_max_position_embeddings = 4, rope_type = "llama3", theta = 500000.0)";
// Interleaved pairs and cos/sin scaled by attention_factor reach the fused kinds' rope steps.
constexpr char kYarnInterleavedRope[] =
    R"(attention_factor = 1.25, beta_fast = 8.0, beta_slow = 1.0, factor = 4.0, interleaved = true, original_max_position_embeddings = 64, rope_type = "yarn", theta = 10000.0, truncate = false)";

TEST(CpuFused, QkNormRopeKvWriteIsSplitReshapeNormRopeKvWrite) {
  for (const char* rope : {kDefaultRope, kLlama3Rope, kYarnInterleavedRope}) {
    SCOPED_TRACE(rope);
    ExpectSameOutputs(absl::StrCat(R"(graph @fused {
  input %qkv: f32[B,T,64]
  input %positions: i32[B,T]
  weight %q_norm: f32[8] = "q_norm"
  weight %k_norm: f32[8] = "k_norm"
  state %k_cache: f32[B,2,Smax,8]
  state %v_cache: f32[B,2,Smax,8]
  %qr: f32[B,T,4,8], %kc: f32[B,2,Smax,8] inplace(%k_cache), %vc: f32[B,2,Smax,8] inplace(%v_cache) = qk_norm_rope_kv_write(%qkv, %q_norm, %k_norm, %k_cache, %v_cache, %positions) {eps = 1e-06, num_heads = 4, num_kv_heads = 2, )",
                                   rope, R"(}
  output %qr
  output %kc
  output %vc
}
)"),
                      PrimitiveQkv(true, rope), QkvRuns(64), /*max_seq=*/6);
  }
}

TEST(CpuFused, RopeKvWriteIsSplitReshapeRopeKvWrite) {
  for (const char* rope : {kDefaultRope, kLlama3Rope, kYarnInterleavedRope}) {
    SCOPED_TRACE(rope);
    ExpectSameOutputs(
        absl::StrCat(
            R"(graph @fused {
  input %qkv: f32[B,T,64]
  input %positions: i32[B,T]
  state %k_cache: f32[B,2,Smax,8]
  state %v_cache: f32[B,2,Smax,8]
  %qr: f32[B,T,4,8], %kc: f32[B,2,Smax,8] inplace(%k_cache), %vc: f32[B,2,Smax,8] inplace(%v_cache) = rope_kv_write(%qkv, %k_cache, %v_cache, %positions) {num_heads = 4, num_kv_heads = 2, )",
            rope,
            R"(} phase(decode) fused(split, reshape, reshape, reshape, rope, rope, kv_write, kv_write)
  output %qr
  output %kc
  output %vc
}
)"),
        PrimitiveQkv(false, rope), QkvRuns(64), /*max_seq=*/6);
  }
}

// PrimitiveQkv followed by the attention of q over the updated caches (scale 0.35, the
// given window); outputs the attention result and the updated caches.
std::string PrimitiveQkvAttention(bool norms, const std::string& rope_attrs, int window) {
  std::string text = PrimitiveQkv(norms, rope_attrs);
  const std::string q_output = "  output %qr\n";
  text.replace(text.find(q_output), q_output.size(),
               absl::StrCat("  %o: f32[B,T,4,8] = attention(%qr, %kc, %vc, %positions) {scale = "
                            "0.35, sliding_window = ",
                            window, "}\n  output %o\n"));
  return text;
}

TEST(CpuFused, RopeKvWriteAttentionIsRopeKvWriteThenAttention) {
  for (bool norms : {true, false}) {
    for (int window : {0, 2}) {
      for (const char* rope : {kDefaultRope, kLlama3Rope, kYarnInterleavedRope}) {
        SCOPED_TRACE(absl::StrCat(norms ? "norms" : "no norms", ", window ", window, ", ", rope));
        const std::string norm_decls = norms ? R"(  weight %q_norm: f32[8] = "q_norm"
  weight %k_norm: f32[8] = "k_norm"
)"
                                             : "";
        ExpectSameOutputs(
            absl::StrCat(R"(graph @fused {
  input %qkv: f32[B,T,64]
  input %positions: i32[B,T]
)",
                         norm_decls, R"(  state %k_cache: f32[B,2,Smax,8]
  state %v_cache: f32[B,2,Smax,8]
  %o: f32[B,T,4,8], %kc: f32[B,2,Smax,8] inplace(%k_cache), %vc: f32[B,2,Smax,8] inplace(%v_cache) = )",
                         norms ? "qk_norm_rope_kv_write_attention(%qkv, %q_norm, %k_norm, "
                               : "rope_kv_write_attention(%qkv, ",
                         "%k_cache, %v_cache, %positions) {", norms ? "eps = 1e-06, " : "",
                         "num_heads = 4, num_kv_heads = 2, ", rope,
                         ", scale = 0.35, sliding_window = ", window, R"(}
  output %o
  output %kc
  output %vc
}
)"),
            PrimitiveQkvAttention(norms, rope, window), QkvRuns(64), /*max_seq=*/6);
      }
    }
  }
}

TEST(CpuFused, RopeKvWriteReportsPositionsOutsideTheCache) {
  const ir::Graph g = Parse(absl::StrCat(R"(graph @fused {
  input %qkv: f32[B,T,64]
  input %positions: i32[B,T]
  state %k_cache: f32[B,2,Smax,8]
  state %v_cache: f32[B,2,Smax,8]
  %qr: f32[B,T,4,8], %kc: f32[B,2,Smax,8] inplace(%k_cache), %vc: f32[B,2,Smax,8] inplace(%v_cache) = rope_kv_write(%qkv, %k_cache, %v_cache, %positions) {num_heads = 4, num_kv_heads = 2, )",
                                         kDefaultRope, R"(}
  output %qr
}
)"));
  CpuBackend::Options options;
  options.max_seq = 2;
  auto backend = CpuBackend::CreateWithWeights(g, {}, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto out = (*backend)->Execute({{"qkv", HostTensor::Float({1, 1, 64}, std::vector<float>(64))},
                                  {"positions", HostTensor::Int({1, 1}, {2})}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "region 0 'rope_kv_write' (%qr) [kv_write of k]: position 2 of token [0,0] is outside "
            "the KV cache [0, 2)");
}

// Three projections of one input: separate weights q, k, v, or one packed weight and a
// split. Both load from the same checkpoint, and the packed one is concatenated at load.
TEST(CpuFused, PackedWeightGivesWhatSeparateLinearsGive) {
  Random rnd(6);
  testing::WeightMap tensors;
  for (const auto& [name, rows] : std::vector<std::pair<std::string, int64_t>>{{"q.weight", 8},
                                                                               {"k.weight", 4},
                                                                               {"v.weight", 4},
                                                                               {"q.bias", 8},
                                                                               {"k.bias", 4},
                                                                               {"v.bias", 4}}) {
    const bool bias = name.find("bias") != std::string::npos;
    const HostTensor t =
        rnd.Float(bias ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, 6});
    tensors[name] = testing::WeightData{models::StDType::kF32, t.shape, t.f, {}};
  }
  const std::filesystem::path dir = testing::MakeTempDir("packed");
  testing::WriteWeights(dir / "model.safetensors", tensors);
  auto checkpoint = models::Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();

  const ir::Graph separate = Parse(R"(graph @separate {
  input %x: f32[B,T,6]
  weight %wq: f32[8,6] = "q.weight"
  weight %wk: f32[4,6] = "k.weight"
  weight %wv: f32[4,6] = "v.weight"
  weight %bq: f32[8] = "q.bias"
  weight %bk: f32[4] = "k.bias"
  weight %bv: f32[4] = "v.bias"
  %q: f32[B,T,8] = linear(%x, %wq, %bq)
  %k: f32[B,T,4] = linear(%x, %wk, %bk)
  %v: f32[B,T,4] = linear(%x, %wv, %bv)
  output %q
  output %k
  output %v
}
)");
  const ir::Graph packed = Parse(R"(graph @packed {
  input %x: f32[B,T,6]
  weight %w: f32[16,6] = concat("q.weight", "k.weight", "v.weight")
  weight %b: f32[16] = concat("q.bias", "k.bias", "v.bias")
  %qkv: f32[B,T,16] = linear(%x, %w, %b) fused(linear, linear, linear)
  %q: f32[B,T,8] view(%qkv), %k: f32[B,T,4] view(%qkv), %v: f32[B,T,4] view(%qkv) = split(%qkv) {sizes = [8, 4, 4]}
  output %q
  output %k
  output %v
}
)");
  CpuBackend::Options options;
  options.max_seq = 1;
  auto a = CpuBackend::Create(separate, **checkpoint, options);
  auto b = CpuBackend::Create(packed, **checkpoint, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const std::map<std::string, HostTensor> in = {{"x", rnd.Float({1, 3, 6})}};
  auto out_a = (*a)->Execute(in);
  auto out_b = (*b)->Execute(in);
  ASSERT_TRUE(out_a.ok()) << out_a.status();
  ASSERT_TRUE(out_b.ok()) << out_b.status();
  ASSERT_EQ(out_a->size(), 3u);
  ASSERT_EQ(out_b->size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    // Each output element is the same dot product in the same order: equal bit for bit.
    EXPECT_EQ((*out_a)[k].f, (*out_b)[k].f) << "output " << k;
  }
}

TEST(CpuFused, PackedWeightPartsMustFit) {
  testing::WeightMap tensors = {
      {"a", testing::WeightData{models::StDType::kF32, {2, 3}, std::vector<float>(6, 1.0f), {}}},
      {"b", testing::WeightData{models::StDType::kF32, {2, 4}, std::vector<float>(8, 1.0f), {}}}};
  const std::filesystem::path dir = testing::MakeTempDir("packed_bad");
  testing::WriteWeights(dir / "model.safetensors", tensors);
  auto checkpoint = models::Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const ir::Graph g = Parse(R"(graph @g {
  input %x: f32[B,T,3]
  weight %w: f32[4,3] = concat("a", "b")
  %y: f32[B,T,4] = linear(%x, %w)
  output %y
}
)");
  CpuBackend::Options options;
  options.max_seq = 1;
  auto backend = CpuBackend::Create(g, **checkpoint, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(std::string(backend.status().message()),
              HasSubstr("checkpoint tensor \"b\" (a part of packed weight '%w') is F32[2,4], "
                        "expected F32[N,3]"));
}

// A MoE block over x [1,3,16]: 6 experts of width 8, top 2 in 3 groups of 2 (the best 2
// groups compete), DeepSeek's scaling; with `shared` a shared MLP of width 12, with
// `residual` the residual %r added last; with `rounded` everything in bf16, the router's logits
// and the weights too (Qwen3-MoE's routing). `fused` gives the moe region, else the primitive
// regions it replaces.
std::string MoeGraph(bool fused, bool shared, bool residual, bool rounded) {
  const std::string d = rounded ? "bf16" : "f32";
  const std::string l = rounded ? "bf16" : "f32";
  std::string g = absl::StrCat("graph @moe {\n  input %x: ", d, "[1,3,16]\n  input %r: ", d,
                               "[1,3,16]\n  weight %router: ", d, "[6,16] = \"router\"\n",
                               "  weight %gate: ", d, "[6,8,16] = \"gate\"\n  weight %up: ", d,
                               "[6,8,16] = \"up\"\n  weight %down: ", d, "[6,16,8] = \"down\"\n");
  // The moe region takes the shared MLP's gate and up packed (gate rows first), as fuse_moe
  // packs them.
  absl::StrAppend(&g,
                  fused ? absl::StrCat("  weight %sgu: ", d, "[24,16] = concat(\"sg\", \"su\")\n")
                        : absl::StrCat("  weight %sg: ", d, "[12,16] = \"sg\"\n  weight %su: ", d,
                                       "[12,16] = \"su\"\n"),
                  "  weight %sd: ", d, "[16,12] = \"sd\"\n");
  const std::string topk =
      "norm_topk_prob = false, num_groups = 3, scaling = 2.5, top_k = 2, topk_groups = 2";
  if (fused) {
    absl::StrAppend(&g, "  %out: ", d, "[1,3,16] = moe(%x, %router, %gate, %up, %down",
                    shared ? ", %sgu, %sd" : "", residual ? ", %r" : "", ") {logits_dtype = \"", l,
                    "\", ", topk, ", residual = ", residual ? "true" : "false",
                    ", shared_experts = ", shared ? "true" : "false", ", weights_dtype = \"", l,
                    "\"}\n");
  } else {
    const std::string combined = shared || residual ? "%c" : "%out";
    absl::StrAppend(&g, "  %l: ", l, "[1,3,6] = moe_router(%x, %router)\n",
                    "  %ids: i32[1,3,2], %w: ", l, "[1,3,2] = moe_topk(%l) {", topk, "}\n",
                    "  %g: ", d, "[1,3,2,8] = expert_linear(%x, %ids, %gate)\n", "  %u: ", d,
                    "[1,3,2,8] = expert_linear(%x, %ids, %up)\n", "  %a: ", d,
                    "[1,3,2,8] = silu(%g)\n", "  %h: ", d, "[1,3,2,8] = mul(%a, %u)\n", "  %y: ", d,
                    "[1,3,2,16] = expert_linear(%h, %ids, %down)\n", "  ", combined, ": ", d,
                    "[1,3,16] = moe_combine(%y, %w)\n");
    if (shared) {
      absl::StrAppend(&g, "  %sgo: ", d, "[1,3,12] = linear(%x, %sg)\n", "  %suo: ", d,
                      "[1,3,12] = linear(%x, %su)\n", "  %sa: ", d, "[1,3,12] = silu(%sgo)\n",
                      "  %sh: ", d, "[1,3,12] = mul(%suo, %sa)\n", "  %s: ", d,
                      "[1,3,16] = linear(%sh, %sd)\n", "  ", residual ? "%m" : "%out", ": ", d,
                      "[1,3,16] = add(%s, %c)\n");
    }
    if (residual) {
      absl::StrAppend(&g, "  %out: ", d, "[1,3,16] = add(%r, ", shared ? "%m" : "%c", ")\n");
    }
  }
  absl::StrAppend(&g, "  output %out\n}\n");
  return g;
}

// Every MoE variant (bf16 routing or not, shared experts or not, residual or not), the graph
// `make(fused, shared, residual, rounded)` fused against the primitive one, on random inputs.
void ExpectEveryMoeVariantAgrees(std::string (*make)(bool, bool, bool, bool), uint32_t seed) {
  for (bool rounded : {false, true}) {
    for (bool shared : {false, true}) {
      for (bool residual : {false, true}) {
        SCOPED_TRACE(absl::StrCat(rounded ? "bf16 routing, " : "", shared ? "shared" : "no shared",
                                  ", ", residual ? "residual" : "no residual"));
        Random rnd(seed);
        ExpectSameOutputs(make(true, shared, residual, rounded),
                          make(false, shared, residual, rounded),
                          {{{"x", rnd.Float({1, 3, 16})}, {"r", rnd.Float({1, 3, 16}, 2.0)}}}, 1,
                          {{"sgu", {"sg", "su"}}});
      }
    }
  }
}

TEST(CpuFused, MoeIsTheRoutedExpertsPlusSharedMlpPlusResidual) {
  ExpectEveryMoeVariantAgrees(&MoeGraph, 5);
}

// MoeGraph with an RMSNorm of x first: fused, one rms_norm_moe region (the residual %r); else
// the rms_norm region and the primitive regions on its result.
std::string NormMoeGraph(bool fused, bool shared, bool residual, bool rounded) {
  std::string g = MoeGraph(fused, shared, residual, rounded);
  const std::string d = rounded ? "bf16" : "f32";
  const std::string weight = absl::StrCat("  weight %nw: ", d, "[16] = \"nw\"\n");
  const size_t body = g.find("  weight %router");
  g.insert(body, weight);
  if (fused) {
    const size_t at = g.find("= moe(%x, ");
    g.replace(at, 10, "= rms_norm_moe(%x, %nw, ");
    const size_t attrs = g.find("{logits_dtype", at);
    g.insert(attrs + 1, "eps = 1e-05, ");
    return g;
  }
  for (size_t at = g.find("(%x, "); at != std::string::npos; at = g.find("(%x, ", at)) {
    g.replace(at, 5, "(%xn, ");
  }
  const size_t first = g.find("  %l: ");
  g.insert(first, absl::StrCat("  %xn: ", d, "[1,3,16] = rms_norm(%x, %nw) {eps = 1e-05}\n"));
  return g;
}

TEST(CpuFused, RmsNormMoeIsRmsNormThenMoe) { ExpectEveryMoeVariantAgrees(&NormMoeGraph, 7); }

TEST(CpuFused, EveryRegisteredKindIsImplemented) {
  EXPECT_EQ(CpuSupportedKinds(), ir::KindNames());
}

}  // namespace
}  // namespace tileplan::runtime::cpu
