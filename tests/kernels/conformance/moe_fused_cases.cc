// Conformance cases of moe_gemv (kernels/families/moe_fused/), the fused MoE block of a decode
// step (tests/kernels/gpu_harness.h): DeepSeek-V2's form (shared experts, expert groups,
// scaling, the residual) and Qwen3-MoE's (128 experts, top 8, renormalized, no shared
// experts), 1 to 16 tokens (the largest selecting most experts several times), odd widths that
// split only into narrower vectors, f32 activations and weights, x a view of wider rows, the
// result written over the residual, router logits and top-k weights held in bf16, and tactics
// from one-warp CTAs (a router CTA per expert, so the last-CTA top-k runs) to one router CTA
// for every expert, with the down projection unsplit or split over the slots (the last CTA of
// a feature tile summing the splits); and rms_norm_moe, the block with its RMSNorm (the
// residual x itself, as in a decoder layer; a bf16 or an f32 norm weight).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

struct MoeBlock {
  int batch = 1;
  int tokens = 1;  // per sequence (T)
  int experts = 8;
  int top_k = 2;
  int hidden = 64;
  int inter = 32;
  int shared_inter = 0;  // 0: no shared experts
  bool residual = true;
  int groups = 1;
  int topk_groups = 1;
  bool norm = false;
  const char* scaling = "1.0";
  // Routing held in the activation dtype (Qwen3-MoE's bf16 logits and weights) instead of f32.
  bool narrow_routing = false;
  const char* dtype = "bf16";
  int x_pad = 0;  // x a view of rows x_pad elements wider than H
  // rms_norm_moe: the norm weight's dtype (null: moe); the residual, if any, is x itself.
  const char* rms_norm = nullptr;
};

// Widest vector of at most 16 bytes of `bytes`-byte elements dividing every extent.
int VecFor(int bytes, std::vector<int> extents) {
  int vec = 16 / bytes;
  for (int e : extents) {
    while (vec > 1 && e % vec != 0) vec /= 2;
  }
  return vec;
}

// A router and inputs whose top-k no rounding of the logits can change: router row e is c_e ·
// u with c_e = 1.02^((37 e) mod E) (E coprime with 37, so the c_e are distinct) and u_h =
// ±1/(16 P), P the power of two at or above H: the rounding of each element to bf16 rounds c_e
// alone, as u_h is a power of two. Token t's x_h has the sign of u_h times (-1)^t, so that d_t
// = x_t · u sums terms of one sign, and the logits are c_e · d_t: the experts order by c_e (the
// largest first for even tokens, the smallest for odd ones), neighbours more than 1.4% apart,
// more than bf16's rounding of two logits can close (0.4% each), and |d_t| < 0.08 keeps the
// logits small enough that rounding them moves the weights far less than the bf16 tolerance.
void DecisiveRouting(const MoeBlock& m, Case& c) {
  int pow2 = 1;
  while (pow2 < m.hidden) pow2 *= 2;
  const float scale = 1.0f / static_cast<float>(16 * pow2);
  auto u = [scale](int h) { return (h * 5 + h / 3) % 7 < 3 ? -scale : scale; };
  std::vector<float> router, x;
  for (int e = 0; e < m.experts; ++e) {
    const float ce = std::pow(1.02f, static_cast<float>((37 * e) % m.experts));
    for (int h = 0; h < m.hidden; ++h) router.push_back(ce * u(h));
  }
  const int row = m.hidden + m.x_pad;
  for (int t = 0; t < m.batch * m.tokens; ++t) {
    for (int h = 0; h < row; ++h) {
      const float magnitude = 0.25f + static_cast<float>((t * 13 + h * 7) % 29) / 29;
      x.push_back((t % 2 == 0 ? 1.0f : -1.0f) * (u(h % m.hidden) > 0 ? 1.0f : -1.0f) * magnitude);
    }
  }
  c.floats = {{"router", std::move(router)}, {m.x_pad > 0 ? "xx" : "x", std::move(x)}};
  if (m.rms_norm != nullptr) {
    // A positive norm weight keeps every term of d_t of one sign, and so the order.
    std::vector<float> w;
    for (int h = 0; h < m.hidden; ++h) w.push_back(0.5f + static_cast<float>((h * 7) % 13) / 26);
    c.floats["nw"] = std::move(w);
  }
}

Case MoeCase(const MoeBlock& m, const std::vector<Params>& tactics) {
  const std::string d = m.dtype;
  const bool shared = m.shared_inter > 0;
  const std::string rows = absl::StrCat("[", m.batch, ",", m.tokens, ",");
  std::string g = "graph @g {\n";
  if (m.x_pad > 0) {
    absl::StrAppend(&g, "  input %xx: ", d, rows, m.hidden + m.x_pad, "]\n");
  } else {
    absl::StrAppend(&g, "  input %x: ", d, rows, m.hidden, "]\n");
  }
  const bool normed = m.rms_norm != nullptr;
  if (m.residual && !normed) absl::StrAppend(&g, "  input %r: ", d, rows, m.hidden, "]\n");
  if (normed) absl::StrAppend(&g, "  weight %nw: ", m.rms_norm, "[", m.hidden, "] = \"nw\"\n");
  absl::StrAppend(&g, "  weight %router: ", d, "[", m.experts, ",", m.hidden, "] = \"router\"\n",
                  "  weight %gate: ", d, "[", m.experts, ",", m.inter, ",", m.hidden,
                  "] = \"gate\"\n", "  weight %up: ", d, "[", m.experts, ",", m.inter, ",",
                  m.hidden, "] = \"up\"\n", "  weight %down: ", d, "[", m.experts, ",", m.hidden,
                  ",", m.inter, "] = \"down\"\n");
  if (shared) {
    absl::StrAppend(&g, "  weight %sgu: ", d, "[", 2 * m.shared_inter, ",", m.hidden,
                    "] = concat(\"sg\", \"su\")\n", "  weight %sd: ", d, "[", m.hidden, ",",
                    m.shared_inter, "] = \"sd\"\n");
  }
  if (m.x_pad > 0) {
    absl::StrAppend(&g, "  %x: ", d, rows, m.hidden, "] view(%xx), %pad: ", d, rows, m.x_pad,
                    "] view(%xx) = split(%xx) {sizes = [", m.hidden, ", ", m.x_pad, "]}\n");
  }
  const std::string routing = m.narrow_routing ? d : "f32";
  absl::StrAppend(&g, "  %out: ", d, rows, m.hidden, "] = ", normed ? "rms_norm_moe" : "moe",
                  "(%x, ", normed ? "%nw, " : "", "%router, %gate, %up, %down",
                  shared ? ", %sgu, %sd" : "", m.residual ? (normed ? ", %x" : ", %r") : "", ") {",
                  normed ? "eps = 1e-06, " : "", "logits_dtype = \"", routing,
                  "\", norm_topk_prob = ", m.norm ? "true" : "false", ", num_groups = ", m.groups,
                  ", residual = ", m.residual ? "true" : "false", ", scaling = ", m.scaling,
                  ", shared_experts = ", shared ? "true" : "false", ", top_k = ", m.top_k,
                  ", topk_groups = ", m.topk_groups, ", weights_dtype = \"", routing, "\"}\n",
                  "  output %out\n}\n");
  Case c;
  c.graph = std::move(g);
  c.family = "moe_gemv";
  if (m.narrow_routing || normed) DecisiveRouting(m, c);
  // One token selects its top-k in the gate/up CTAs by default (select = 1): every other
  // tactic keeps the router's last-CTA selection instead, so both paths run.
  const bool one_token = m.batch * m.tokens == 1;
  for (size_t i = 0; i < tactics.size(); ++i) {
    Params p = tactics[i];
    p["select"] = one_token && i % 2 == 1 ? 1 : 0;
    c.tactics.push_back(std::move(p));
  }
  return c;
}

// Tactics at vector width `vec`: one-warp CTAs with a router CTA per expert and the down
// projection unsplit; two warps, three down splits (not a power of two); four warps, four
// down rows and 16 down splits (more than most cases have slots: some CTAs own none); four
// warps on one down row, unsplit (the default's shape); eight warps, 16 down rows (passes of
// fewer where 16 tokens fill the registers), one router CTA for 16 experts and two splits.
std::vector<Params> MoeTactics(int vec) {
  auto tactic = [vec](int threads, int router, int gate, int down, int splits) {
    return Params{{"down_rows", down},     {"down_splits", splits}, {"gate_rows", gate},
                  {"router_rows", router}, {"threads", threads},    {"vec", vec}};
  };
  return {tactic(32, 1, 1, 2, 1), tactic(64, 2, 8, 4, 3), tactic(128, 4, 4, 4, 16),
          tactic(128, 1, 4, 1, 1), tactic(256, 16, 32, 16, 2)};
}

std::vector<Case> DeepSeekCases() {
  std::vector<Case> cases;
  // DeepSeek-V2-Lite's routing (64 experts, top 6, no groups, not renormalized) with a shared
  // MLP of two experts' width, one decode token.
  MoeBlock lite{.experts = 64, .top_k = 6, .hidden = 256, .inter = 64, .shared_inter = 128};
  cases.push_back(MoeCase(lite, MoeTactics(8)));
  // deepseek-v2-qlora-tiny's: 8 experts in 4 groups of 2, the best 2 groups, scaling 2.5,
  // 3 sequences.
  MoeBlock grouped{.batch = 3,
                   .experts = 8,
                   .top_k = 2,
                   .shared_inter = 64,
                   .groups = 4,
                   .topk_groups = 2,
                   .scaling = "2.5"};
  cases.push_back(MoeCase(grouped, MoeTactics(8)));
  // DeepSeek-V2's: 160 experts in 8 groups, the best 3, top 6, scaling 16, 2 tokens.
  MoeBlock v2{.tokens = 2,
              .experts = 160,
              .top_k = 6,
              .hidden = 128,
              .inter = 24,
              .shared_inter = 48,
              .groups = 8,
              .topk_groups = 3,
              .scaling = "16.0"};
  cases.push_back(MoeCase(v2, MoeTactics(8)));
  return cases;
}

std::vector<Case> QwenCases() {
  // Qwen3-30B-A3B's routing (128 experts, top 8, renormalized) with bf16 logits and weights,
  // one token, and 16 tokens that select most experts several times.
  MoeBlock qwen{
      .experts = 128, .top_k = 8, .hidden = 256, .inter = 48, .norm = true, .narrow_routing = true};
  MoeBlock batch = qwen;
  batch.batch = 16;
  batch.hidden = 128;
  batch.inter = 40;
  return {MoeCase(qwen, MoeTactics(8)), MoeCase(batch, MoeTactics(8))};
}

std::vector<Case> OddShapeCases() {
  std::vector<Case> cases;
  // H = 100 and I = 36 split into 4-element vectors only; a shared MLP of 20 and no residual;
  // 5 tokens of 6 experts.
  MoeBlock odd{.tokens = 5,
               .experts = 6,
               .top_k = 2,
               .hidden = 100,
               .inter = 36,
               .shared_inter = 20,
               .residual = false};
  cases.push_back(MoeCase(odd, MoeTactics(VecFor(2, {100, 36, 20}))));
  // f32 activations and weights, H = 37 (no vector wider than one element), no shared MLP.
  MoeBlock f32{.tokens = 2,
               .experts = 8,
               .top_k = 3,
               .hidden = 37,
               .inter = 13,
               .residual = false,
               .norm = true,
               .dtype = "f32"};
  cases.push_back(MoeCase(f32, MoeTactics(1)));
  // bf16 routing on 3 sequences of 2 tokens, with groups.
  MoeBlock narrow{.batch = 3,
                  .tokens = 2,
                  .experts = 32,
                  .top_k = 4,
                  .hidden = 64,
                  .inter = 40,
                  .shared_inter = 24,
                  .groups = 4,
                  .topk_groups = 2,
                  .narrow_routing = true};
  cases.push_back(MoeCase(narrow, MoeTactics(8)));
  return cases;
}

std::vector<Case> NormCases() {
  // Qwen3-30B-A3B's block with its norm, one token; the routing decisive (the kernel rounds
  // the normalized row to bf16 as the rms_norm kernel stores it, the CPU backend does not).
  MoeBlock qwen{.experts = 128,
                .top_k = 8,
                .hidden = 256,
                .inter = 48,
                .norm = true,
                .narrow_routing = true,
                .rms_norm = "bf16"};
  // DeepSeek-V2-Lite's with shared experts, 2 tokens, f32 routing and an f32 norm weight.
  MoeBlock lite{.tokens = 2,
                .experts = 64,
                .top_k = 6,
                .hidden = 256,
                .inter = 64,
                .shared_inter = 128,
                .rms_norm = "f32"};
  // H = 100 (4-element vectors), 3 sequences, no residual, a shared MLP of 20.
  MoeBlock odd{.batch = 3,
               .experts = 6,
               .top_k = 2,
               .hidden = 100,
               .inter = 36,
               .shared_inter = 20,
               .residual = false,
               .rms_norm = "bf16"};
  return {MoeCase(qwen, MoeTactics(8)), MoeCase(lite, MoeTactics(8)),
          MoeCase(odd, MoeTactics(VecFor(2, {100, 36, 20})))};
}

std::vector<Case> ViewAndOverwriteCases() {
  // x a view of rows 24 elements wider (its token stride is not H), and the result written
  // over the residual's storage (operand 7), as the memory planner places it.
  MoeBlock view{.tokens = 4,
                .experts = 16,
                .top_k = 4,
                .hidden = 128,
                .inter = 64,
                .shared_inter = 64,
                .x_pad = 24};
  Case over = MoeCase(view, MoeTactics(8));
  over.result_over_operand = 7;
  MoeBlock narrow_view = view;
  narrow_view.shared_inter = 0;
  narrow_view.narrow_routing = true;
  Case narrow_over = MoeCase(narrow_view, MoeTactics(8));
  narrow_over.result_over_operand = 5;
  return {MoeCase(view, MoeTactics(8)), std::move(over), std::move(narrow_over)};
}

}  // namespace

std::vector<CaseGroup> MoeFusedCaseGroups() {
  return {
      {"MoeGemvDeepSeek", DeepSeekCases()},  {"MoeGemvQwen3Moe", QwenCases()},
      {"MoeGemvOddShapes", OddShapeCases()}, {"MoeGemvViewsAndOverwrite", ViewAndOverwriteCases()},
      {"MoeGemvWithNorm", NormCases()},
  };
}

}  // namespace tileplan::kernels::testing
