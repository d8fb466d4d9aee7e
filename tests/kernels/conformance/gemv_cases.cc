// Conformance cases of gemv (tests/kernels/gpu_harness.h).
#include <string>
#include <utility>
#include <vector>

#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

const std::vector<Params> kGemvTactics = {
    {{"rows_per_cta", 1}, {"split_k", 1}, {"threads", 64}, {"vec", 8}},
    {{"rows_per_cta", 4}, {"split_k", 2}, {"threads", 128}, {"vec", 8}},
    {{"rows_per_cta", 16}, {"split_k", 4}, {"threads", 256}, {"vec", 8}},
    {{"rows_per_cta", 2}, {"split_k", 16}, {"threads", 512}, {"vec", 4}},
};

// The gemv case of `graph`, under kGemvTactics besides the default.
Case GemvCase(std::string graph) {
  return {.graph = std::move(graph), .family = "gemv", .tactics = kGemvTactics};
}

// gemv cases over `graphs` with the rows of %x (or of %xx, the input %x is a view of) scaled
// by `scales`.
std::vector<Case> ScaledRowGemvCases(const std::vector<float>& scales,
                                     const std::vector<std::string>& graphs) {
  std::vector<Case> cases;
  for (const std::string& graph : graphs) {
    Case c = GemvCase(graph);
    c.row_scales = {{"x", scales}, {"xx", scales}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// The RMSNorm prologue (rms_norm_linear, rms_norm_linear_swiglu): one row (batch 1), 2 to 4
// rows and 16 (the kernel's bound), rows whose magnitudes differ by up to 32x, so every
// row's own factor must be used (the results do not depend on a row's scale); with and
// without bias; split_k 1 and above (every CTA sums the squares of the whole row, not just
// its slice, also past the end of a shorter last slice: K = 1000 at vec 4 and split_k 16);
// several feature passes (rows_per_cta 16); a norm weight in bf16 and in f32; x a strided
// view.
std::vector<Case> RmsNormLinearCases() {
  const std::vector<std::string> graphs = {
      R"(graph @g {
  input %x: bf16[1,1,1000]
  weight %norm: bf16[1000] = "norm"
  weight %w: bf16[37,1000] = "w"
  weight %bias: bf16[37] = "bias"
  %y: bf16[1,1,37] = rms_norm_linear(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})",
      R"(graph @g {
  input %x: bf16[3,1,1024]
  weight %norm: f32[1024] = "norm"
  weight %w: bf16[130,1024] = "w"
  %y: bf16[3,1,130] = rms_norm_linear(%x, %norm, %w) {eps = 1e-05} fused(rms_norm, linear)
  output %y
})",
      R"(graph @g {
  input %xx: bf16[2,1,1536]
  weight %norm: bf16[512] = "norm"
  weight %w: bf16[300,512] = "w"
  weight %bias: bf16[300] = "bias"
  %a: bf16[2,1,1024] view(%xx), %x: bf16[2,1,512] view(%xx) = split(%xx) {sizes = [1024, 512]}
  %y: bf16[2,1,300] = rms_norm_linear(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})",
      R"(graph @g {
  input %x: bf16[16,1,256]
  weight %norm: bf16[256] = "norm"
  weight %w: bf16[70,256] = "w"
  %y: bf16[16,1,70] = rms_norm_linear(%x, %norm, %w) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})"};
  return ScaledRowGemvCases({1.0f, 8.0f, 0.25f, 3.0f}, graphs);
}

std::vector<Case> RmsNormLinearSwigluCases() {
  const std::vector<std::string> graphs = {
      R"(graph @g {
  input %x: bf16[1,1,512]
  weight %norm: bf16[512] = "norm"
  weight %w: bf16[600,512] = "w"
  %y: bf16[1,1,300] = rms_norm_linear_swiglu(%x, %norm, %w) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  output %y
})",
      R"(graph @g {
  input %x: bf16[4,1,1000]
  weight %norm: bf16[1000] = "norm"
  weight %w: bf16[250,1000] = "w"
  weight %bias: bf16[250] = "bias"
  %y: bf16[4,1,125] = rms_norm_linear_swiglu(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  output %y
})",
      R"(graph @g {
  input %x: bf16[2,1,768]
  weight %norm: f32[768] = "norm"
  weight %w: bf16[1000,768] = "w"
  %y: bf16[2,1,500] = rms_norm_linear_swiglu(%x, %norm, %w) {eps = 1e-05} fused(rms_norm, linear, split, silu, mul)
  output %y
})"};
  return ScaledRowGemvCases({0.5f, 16.0f, 1.0f, 4.0f}, graphs);
}

// A gemv_mma tactic: stream-K CTAs (0: a CTA per tile and slice), features a CTA, slices of
// K, stage width, ring depth, threads.
Params MmaTactic(int64_t ctas, int64_t rows, int64_t split, int64_t stage_k, int64_t stages,
                 int64_t threads) {
  return {{"ctas", ctas},       {"rows_per_cta", rows}, {"split_k", split},
          {"stage_k", stage_k}, {"stages", stages},     {"threads", threads}};
}

// gemv_mma (tensor cores, 2 to 16 rows): m-tiles of 16 features, one or two 8-row n-tiles,
// stages of 128, 256 and 512 with a shorter last one, rings of 2 to 6 stages (more than a short
// K has), split-K up to 8 slices; warps as several shares of a stage (16 features, 2 to 8
// warps), as feature groups with shares (64 features, 8 warps: 4 groups, 2 shares) and with
// two m-tiles each (128 features, 4 warps).
const std::vector<Params> kGemvMmaTactics = {
    MmaTactic(0, 16, 1, 128, 6, 64),  MmaTactic(0, 32, 2, 256, 3, 128),
    MmaTactic(0, 64, 4, 128, 4, 256), MmaTactic(0, 128, 1, 128, 2, 128),
    MmaTactic(0, 16, 8, 512, 2, 256),
};
// Stream-K (gemv_mma.cuh): one CTA walking every tile whole, runs of a few stages cutting
// tiles into two or three pieces (odd CTA counts), runs inside a single tile, and more CTAs
// than stages (one stage each).
const std::vector<Params> kGemvMmaStreamTactics = {
    MmaTactic(1, 16, 1, 128, 3, 64),     MmaTactic(5, 32, 1, 128, 4, 128),
    MmaTactic(7, 16, 1, 256, 2, 128),    MmaTactic(13, 64, 1, 128, 3, 256),
    MmaTactic(1000, 16, 1, 512, 2, 256),
};
// With the norm prologue (split_k 1 only): the sums of squares from one share, several, and
// from feature groups that all read the same x.
const std::vector<Params> kGemvMmaNormTactics = {
    MmaTactic(0, 16, 1, 128, 2, 32),
    MmaTactic(0, 32, 1, 256, 3, 128),
    MmaTactic(0, 64, 1, 128, 3, 512),
    MmaTactic(0, 128, 1, 128, 2, 256),
};

Case GemvMmaCase(std::string graph, const std::vector<float>& scales = {}) {
  Case c{.graph = std::move(graph), .family = "gemv_mma", .tactics = kGemvMmaTactics};
  if (!scales.empty()) c.row_scales = {{"x", scales}, {"xx", scales}};
  return c;
}
// The cases of both lists on the stream-K tactics.
std::vector<Case> OnStreamK(std::vector<Case> a, const std::vector<Case>& b) {
  a.insert(a.end(), b.begin(), b.end());
  for (Case& c : a) c.tactics = kGemvMmaStreamTactics;
  return a;
}
Case GemvMmaNormCase(std::string graph, const std::vector<float>& scales) {
  Case c = GemvMmaCase(std::move(graph), scales);
  c.tactics = kGemvMmaNormTactics;
  return c;
}

// gemv_mma's linears: odd features and K, 3 to 16 rows, bias, f16.
std::vector<Case> MmaLinearCases() {
  return {GemvMmaCase(R"(graph @g {
  input %x: bf16[3,1,1000]
  weight %w: bf16[37,1000] = "w"
  weight %bias: bf16[37] = "bias"
  %y: bf16[3,1,37] = linear(%x, %w, %bias)
  output %y
})"),
          GemvMmaCase(R"(graph @g {
  input %x: bf16[9,1,256]
  weight %w: bf16[100,256] = "w"
  %y: bf16[9,1,100] = linear(%x, %w)
  output %y
})"),
          GemvMmaCase(R"(graph @g {
  input %x: bf16[16,1,512]
  weight %w: bf16[300,512] = "w"
  %y: bf16[16,1,300] = linear(%x, %w)
  output %y
})"),
          GemvMmaCase(R"(graph @g {
  input %x: f16[8,1,512]
  weight %w: f16[70,512] = "w"
  weight %bias: f16[70] = "bias"
  %y: f16[8,1,70] = linear(%x, %w, %bias)
  output %y
})")};
}

// gemv_mma's epilogues: residual, SwiGLU with bias, float logits.
std::vector<Case> MmaEpilogueCases() {
  return {GemvMmaCase(R"(graph @g {
  input %x: bf16[2,1,768]
  weight %w: bf16[130,768] = "w"
  input %r: bf16[2,1,130]
  %y: bf16[2,1,130] = linear_residual(%x, %w, %r)
  output %y
})"),
          GemvMmaCase(R"(graph @g {
  input %x: bf16[12,1,1024]
  weight %w: bf16[96,1024] = "w"
  weight %bias: bf16[96] = "bias"
  input %r: bf16[12,1,96]
  %y: bf16[12,1,96] = linear_residual(%x, %w, %r, %bias)
  output %y
})"),
          GemvMmaCase(R"(graph @g {
  input %x: bf16[5,1,256]
  weight %w: bf16[2000,256] = "w"
  weight %bias: bf16[2000] = "bias"
  %y: bf16[5,1,1000] = linear_swiglu(%x, %w, %bias)
  output %y
})"),
          GemvMmaCase(R"(graph @g {
  input %x: bf16[4,1,384]
  weight %w: bf16[1001,384] = "w"
  %y: f32[4,1,1001] = lm_head(%x, %w)
  output %y
})")};
}

}  // namespace

std::vector<CaseGroup> GemvCaseGroups() {
  return {
      {"LinearWithBiasOddSizes", {GemvCase(R"(graph @g {
  input %x: bf16[3,1,1000]
  weight %w: bf16[37,1000] = "w"
  weight %bias: bf16[37] = "bias"
  %y: bf16[3,1,37] = linear(%x, %w, %bias)
  output %y
})")}},
      {"LinearSixteenRows", {GemvCase(R"(graph @g {
  input %x: bf16[16,1,512]
  weight %w: bf16[300,512] = "w"
  %y: bf16[16,1,300] = linear(%x, %w)
  output %y
})")}},
      {"LinearResidual", {GemvCase(R"(graph @g {
  input %x: bf16[2,1,768]
  weight %w: bf16[130,768] = "w"
  input %r: bf16[2,1,130]
  %y: bf16[2,1,130] = linear_residual(%x, %w, %r)
  output %y
})")}},
      {"LinearSwigluWithBias", {GemvCase(R"(graph @g {
  input %x: bf16[5,1,256]
  weight %w: bf16[2000,256] = "w"
  weight %bias: bf16[2000] = "bias"
  %y: bf16[5,1,1000] = linear_swiglu(%x, %w, %bias)
  output %y
})")}},
      {"LmHeadFloatLogits", {GemvCase(R"(graph @g {
  input %x: bf16[1,1,384]
  weight %w: bf16[1001,384] = "w"
  %y: f32[1,1,1001] = lm_head(%x, %w)
  output %y
})")}},
      {"MoeRouterFloatLogits",
       {GemvCase(R"(graph @g {
  input %x: bf16[3,1,256]
  weight %w: bf16[160,256] = "w"
  %y: f32[3,1,160] = moe_router(%x, %w)
  output %y
})"),
        GemvCase(R"(graph @g {
  input %x: bf16[1,1,2048]
  weight %w: bf16[6,2048] = "w"
  %y: f32[1,1,6] = moe_router(%x, %w)
  output %y
})")}},
      {"MoeRouterRoundedLogits", {GemvCase(R"(graph @g {
  input %x: bf16[2,1,512]
  weight %w: bf16[128,512] = "w"
  %y: bf16[2,1,128] = moe_router(%x, %w)
  output %y
})")}},
      {"GemvMmaLinearBiasOddSizes", MmaLinearCases()},
      {"GemvMmaResidualSwigluLogits", MmaEpilogueCases()},
      {"GemvMmaStreamK", OnStreamK(MmaLinearCases(), MmaEpilogueCases())},
      {"GemvMmaRmsNormLinear",
       {GemvMmaNormCase(R"(graph @g {
  input %x: bf16[3,1,1000]
  weight %norm: f32[1000] = "norm"
  weight %w: bf16[37,1000] = "w"
  weight %bias: bf16[37] = "bias"
  %y: bf16[3,1,37] = rms_norm_linear(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})",
                        {1.0f, 8.0f, 0.25f}),
        GemvMmaNormCase(R"(graph @g {
  input %xx: bf16[2,1,1536]
  weight %norm: bf16[512] = "norm"
  weight %w: bf16[300,512] = "w"
  %a: bf16[2,1,1024] view(%xx), %x: bf16[2,1,512] view(%xx) = split(%xx) {sizes = [1024, 512]}
  %y: bf16[2,1,300] = rms_norm_linear(%x, %norm, %w) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})",
                        {1.0f, 16.0f}),
        GemvMmaNormCase(R"(graph @g {
  input %x: bf16[16,1,256]
  weight %norm: bf16[256] = "norm"
  weight %w: bf16[70,256] = "w"
  %y: bf16[16,1,70] = rms_norm_linear(%x, %norm, %w) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})",
                        {1.0f, 8.0f, 0.25f, 3.0f}),
        GemvMmaNormCase(R"(graph @g {
  input %x: bf16[4,1,1000]
  weight %norm: bf16[1000] = "norm"
  weight %w: bf16[250,1000] = "w"
  weight %bias: bf16[250] = "bias"
  %y: bf16[4,1,125] = rms_norm_linear_swiglu(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  output %y
})",
                        {0.5f, 16.0f, 1.0f, 4.0f})}},
      {"RmsNormLinear", RmsNormLinearCases()},
      {"RmsNormLinearSwiglu", RmsNormLinearSwigluCases()},
  };
}

}  // namespace tileplan::kernels::testing
