// Conformance cases of the MoE families (tests/kernels/gpu_harness.h): moe_routing's moe_topk
// (E = 6, 64, 128, 160; K = 1, 2, 6, 8; with and without expert groups, norm_topk_prob and
// scaling; logits that are a strided view), expert_gemv's expert_linear (a token's one input
// shared by its K selections and an input per selection; 1, 3 and 17 tokens; N = 1, 7, 33 and
// wider; H that splits only into narrower vectors; E from 6 to 160; expert ids repeated across
// tokens and within one), expert_gemm's (the same shapes where H is a multiple of 8, experts
// spanning several row tiles, a skewed routing, a DeepSeek-like step at a small scale) and
// elementwise's moe_combine. The router (moe_router) has
// its cases with gemv's and cuBLASLt's.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

// A float attribute as the IR text writes it (a float always has a point: "16.0").
std::string FloatText(double v) {
  std::string text = absl::StrCat(v);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// moe_topk over `tokens` tokens ([1, tokens, E] logits of `dtype`, or a view of rows padded by
// `pad` elements), scaled by 4 so that neighbouring probabilities are well apart.
Case TopkCase(int tokens, int experts, int top_k, bool norm, double scaling, int groups,
              int topk_groups, int pad = 0, absl::string_view dtype = "f32") {
  const std::string topk =
      absl::StrCat("  %ids: i32[1,", tokens, ",", top_k, "], %weights: ", dtype, "[1,", tokens, ",",
                   top_k, "] = moe_topk(%logits) {norm_topk_prob = ", norm ? "true" : "false",
                   ", num_groups = ", groups, ", scaling = ", FloatText(scaling),
                   ", top_k = ", top_k, ", topk_groups = ", topk_groups, "}\n");
  std::string graph;
  if (pad == 0) {
    graph = absl::StrCat("graph @g {\n  input %logits: ", dtype, "[1,", tokens, ",", experts, "]\n",
                         topk, "  output %ids\n  output %weights\n}\n");
  } else {
    graph = absl::StrCat("graph @g {\n  input %wide: ", dtype, "[1,", tokens, ",", experts + pad,
                         "]\n  %logits: ", dtype, "[1,", tokens, ",", experts,
                         "] view(%wide), %rest: ", dtype, "[1,", tokens, ",", pad,
                         "] view(%wide) = split(%wide) {sizes = [", experts, ", ", pad, "]}\n",
                         topk, "  output %ids\n  output %weights\n}\n");
  }
  Case c;
  c.graph = std::move(graph);
  c.family = "moe_routing";
  c.row_scales = {{"logits", {4.0f}}, {"wide", {4.0f}}};
  c.tactics = {{{"tokens_per_cta", 1}}, {{"tokens_per_cta", 2}}, {{"tokens_per_cta", 16}}};
  return c;
}

// Expert ids for `selections` selections among `experts`: a fixed scramble with repeats
// across tokens (and within a token when K > 1), every value in [0, experts).
std::vector<int32_t> ExpertIds(int selections, int experts) {
  std::vector<int32_t> ids;
  for (int s = 0; s < selections; ++s) ids.push_back((s * 7 + s / 3 + 5) % experts);
  return ids;
}

// expert_linear of x ([1, T, H], or [1, T, K, H] per selection) with w [E, N, H] in `dtype`.
Case ExpertCase(int tokens, int top_k, int experts, int n, int h, bool per_selection,
                const std::vector<Params>& tactics, const char* dtype = "bf16") {
  const std::string x_shape = per_selection ? absl::StrCat("[1,", tokens, ",", top_k, ",", h, "]")
                                            : absl::StrCat("[1,", tokens, ",", h, "]");
  Case c;
  c.graph = absl::StrCat("graph @g {\n  input %x: ", dtype, x_shape, "\n  input %ids: i32[1,",
                         tokens, ",", top_k, "]\n  weight %w: ", dtype, "[", experts, ",", n, ",",
                         h, "] = \"w\"\n  %y: ", dtype, "[1,", tokens, ",", top_k, ",", n,
                         "] = expert_linear(%x, %ids, %w)\n  output %y\n}\n");
  c.family = "expert_gemv";
  c.ints = {{"ids", ExpertIds(tokens * top_k, experts)}};
  c.tactics = tactics;
  return c;
}

// expert_gemv tactics at vector width `vec`: one row per one-warp CTA, several rows per warp,
// and more warps than rows of a narrow output.
std::vector<Params> ExpertTactics(int vec) {
  return {{{"rows_per_cta", 1}, {"threads", 32}, {"vec", vec}},
          {{"rows_per_cta", 8}, {"threads", 64}, {"vec", vec}},
          {{"rows_per_cta", 32}, {"threads", 128}, {"vec", vec}},
          {{"rows_per_cta", 16}, {"threads", 256}, {"vec", vec}}};
}

std::vector<Case> TopkCases() {
  return {
      TopkCase(15, 6, 1, false, 1.0, 1, 1),
      TopkCase(3, 6, 6, true, 1.0, 1, 1),
      TopkCase(5, 6, 2, true, 1.0, 3, 2),
      TopkCase(17, 64, 6, false, 1.0, 1, 1),
      TopkCase(3, 64, 6, false, 16.0, 8, 3, /*pad=*/6),
      TopkCase(17, 128, 8, true, 1.0, 1, 1),
      TopkCase(1, 128, 8, true, 2.5, 1, 1),
      TopkCase(2, 160, 6, false, 16.0, 8, 3),
      TopkCase(7, 160, 2, true, 2.5, 4, 1),
      TopkCase(3, 160, 8, true, 1.0, 32, 4),
      // Logits rounded to bf16 by the router (Qwen3-MoE), so the weights are bf16 too.
      TopkCase(17, 128, 8, true, 1.0, 1, 1, /*pad=*/0, "bf16"),
      TopkCase(3, 64, 6, false, 16.0, 8, 3, /*pad=*/6, "bf16"),
  };
}

std::vector<Case> ExpertLinearSharedInputCases() {
  return {
      // Decode: one token, K = 8 of 128 experts (Qwen3-MoE), N = 33.
      ExpertCase(1, 8, 128, 33, 256, false, ExpertTactics(8)),
      // N = 1 and N = 7; H = 100 splits into 4-element vectors only.
      ExpertCase(3, 2, 6, 1, 100, false, ExpertTactics(4)),
      ExpertCase(3, 2, 6, 7, 100, false, ExpertTactics(2)),
      // 17 tokens of 6 selections among 160 experts, N wider than one CTA's rows.
      ExpertCase(17, 6, 160, 200, 64, false, ExpertTactics(8)),
      // f32 activations and weights, H = 37 (no vector wider than one element).
      ExpertCase(3, 2, 6, 33, 37, false, ExpertTactics(1), "f32"),
  };
}

std::vector<Case> ExpertLinearPerSelectionCases() {
  return {
      // The down projection's shape: each selection's own input.
      ExpertCase(1, 8, 128, 96, 48, true, ExpertTactics(8)),
      ExpertCase(3, 2, 6, 7, 50, true, ExpertTactics(2)),
      ExpertCase(17, 6, 64, 33, 72, true, ExpertTactics(8)),
      ExpertCase(17, 1, 7, 1, 40, true, ExpertTactics(8)),
  };
}

// x a view of wider rows (the per-token input at a token stride above H).
Case ExpertLinearOfAViewCase() {
  Case c;
  c.graph = R"(graph @g {
  input %xx: bf16[1,5,192]
  input %ids: i32[1,5,2]
  weight %w: bf16[9,40,128] = "w"
  %a: bf16[1,5,64] view(%xx), %x: bf16[1,5,128] view(%xx) = split(%xx) {sizes = [64, 128]}
  %y: bf16[1,5,2,40] = expert_linear(%x, %ids, %w)
  output %y
})";
  c.family = "expert_gemv";
  c.ints = {{"ids", ExpertIds(10, 9)}};
  c.tactics = ExpertTactics(8);
  return c;
}

// An expert_gemm tactic.
Params GemmTactic(int stages, int tile_k, int tile_m, int tile_n, int warps_m, int warps_n) {
  return {{"stages", stages}, {"tile_k", tile_k},   {"tile_m", tile_m},
          {"tile_n", tile_n}, {"warps_m", warps_m}, {"warps_n", warps_n}};
}

// expert_gemm tactics: every H slice width (the three swizzles), every warp layout row and
// column count, feature tiles from 32 to 256, 16- to 128-row tiles, 2 to 4 stages: one warp on
// 16-row tiles; 2 x 2 warps of 16 x 32; the sm_90 default's shape; 64 x 64 warp tiles over
// 128-wide slices; 8 warps of 32 x 128; 8 warps along N; 4 warps along M.
const std::vector<Params> kExpertGemmTactics = {
    GemmTactic(2, 32, 16, 32, 1, 1),    GemmTactic(3, 64, 32, 64, 2, 2),
    GemmTactic(4, 64, 64, 128, 1, 4),   GemmTactic(3, 128, 128, 128, 2, 2),
    GemmTactic(2, 128, 128, 256, 4, 2), GemmTactic(4, 32, 64, 256, 1, 8),
    GemmTactic(3, 64, 128, 32, 4, 1),
};

Case GemmCase(Case c) {
  c.family = "expert_gemm";
  c.tactics = kExpertGemmTactics;
  return c;
}

// Expert ids that load one expert heavily: three of every four selections go to the last
// expert, the others cycle over experts 0, 1 and 2, and the experts between get no rows.
std::vector<int32_t> SkewedExpertIds(int selections, int experts) {
  std::vector<int32_t> ids;
  for (int s = 0; s < selections; ++s) ids.push_back(s % 4 == 0 ? (s / 4) % 3 : experts - 1);
  return ids;
}

Case SkewedCase(Case c, int selections, int experts) {
  c.ints = {{"ids", SkewedExpertIds(selections, experts)}};
  return c;
}

// The grouped GEMM on the shapes of expert_gemv's cases (H a multiple of 8, experts without
// rows among 160 and 64), and on enough tokens that experts span several row tiles: 200
// tokens of K = 6 among 6 experts (about 200 rows each at evenly spread ids, so a second or
// later tile of 128 rows leaves rows of warps empty), H = 136 (a slice of 32, 64 or 128
// past its end), N = 33 (odd: single-element stores) and 200 (paired stores, a partial
// feature tile of every width). A skewed routing puts 150 of 200 selections on one expert,
// none on four others; a DeepSeek-like step at a small scale (96 tokens, K = 6 of 16 experts,
// 36 rows each) runs both projections: the token rows shared by the gate and the selections'
// own rows into the down projection.
std::vector<Case> ExpertGemmCases() {
  return {
      GemmCase(ExpertCase(1, 8, 128, 33, 256, false, {})),
      GemmCase(ExpertCase(3, 2, 6, 1, 104, false, {})),
      GemmCase(ExpertCase(3, 2, 6, 7, 96, true, {})),
      GemmCase(ExpertCase(17, 6, 160, 200, 64, false, {})),
      GemmCase(ExpertCase(17, 6, 64, 33, 72, true, {})),
      GemmCase(ExpertCase(200, 6, 6, 33, 136, false, {})),
      GemmCase(ExpertCase(130, 2, 9, 200, 48, true, {}, "f16")),
      GemmCase(SkewedCase(ExpertCase(100, 2, 8, 200, 136, false, {}), 200, 8)),
      GemmCase(SkewedCase(ExpertCase(100, 2, 8, 72, 200, true, {}), 200, 8)),
      GemmCase(ExpertCase(96, 6, 16, 352, 512, false, {})),
      GemmCase(ExpertCase(96, 6, 16, 512, 352, true, {})),
      GemmCase(ExpertLinearOfAViewCase()),
  };
}

Case CombineCase(int tokens, int top_k, int h, const std::vector<Params>& tactics,
                 absl::string_view weights_dtype = "f32") {
  Case c;
  c.graph = absl::StrCat("graph @g {\n  input %y: bf16[1,", tokens, ",", top_k, ",", h,
                         "]\n  input %weights: ", weights_dtype, "[1,", tokens, ",", top_k,
                         "]\n  %out: bf16[1,", tokens, ",", h,
                         "] = moe_combine(%y, %weights)\n  output %out\n}\n");
  c.family = "elementwise";
  c.tactics = tactics;
  return c;
}

}  // namespace

std::vector<CaseGroup> MoeCaseGroups() {
  return {
      {"MoeTopk", TopkCases()},
      {"ExpertLinearSharedInput", ExpertLinearSharedInputCases()},
      {"ExpertLinearPerSelection", ExpertLinearPerSelectionCases()},
      {"ExpertLinearOfAView", {ExpertLinearOfAViewCase()}},
      {"ExpertGemm", ExpertGemmCases()},
      {"MoeCombine",
       {CombineCase(1, 8, 2048, {{{"items", 1}, {"threads", 128}, {"vec", 8}}}),
        CombineCase(17, 6, 200,
                    {{{"items", 4}, {"threads", 128}, {"vec", 8}},
                     {{"items", 2}, {"threads", 256}, {"vec", 2}}}),
        CombineCase(3, 1, 37, {{{"items", 8}, {"threads", 128}, {"vec", 1}}}),
        CombineCase(5, 8, 96, {{{"items", 2}, {"threads", 128}, {"vec", 8}}}, "bf16")}},
  };
}

}  // namespace tileplan::kernels::testing
