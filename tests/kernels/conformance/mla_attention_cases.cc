// Conformance cases of mla_attention (tests/kernels/gpu_harness.h): the absorbed kernels
// (family mla_attention) and the prompt's expanded form (family mla_prefill) against the CPU
// reference's un-absorbed definition (docs/ir.md `mla_attention`), and the decode form with
// the query's RoPE and the cache write folded in (mla_kv_write_attention).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

struct MlaDims {
  int heads, nope, rope, latent, v_dim;
};
// DeepSeek-V2-Lite's attention; small odd dims (3 heads, no power of two but the 8s; on
// tensor cores C + Dr = 40 padded to 48, three k-steps, and one 8-column n-tile per warp);
// small dims with (64 + 16) / 16 = 5 k-steps; and 20 heads (a token's heads in two tiles) with
// 9 k-steps.
constexpr MlaDims kV2Lite = {16, 128, 64, 512, 128};
constexpr MlaDims kSmall = {3, 16, 8, 32, 24};
constexpr MlaDims kSmallMma = {3, 16, 16, 64, 24};
constexpr MlaDims kWideMma = {20, 16, 16, 128, 16};

// One mla_attention region over `batch` sequences of `tokens` new tokens and a cache of
// `capacity` rows. q_nope and q_rope are the two views of one [B,T,Hq,Dn+Dr] input, as the
// lowering splits the q projection (strided tokens and heads); the weight's dtype may differ
// from the activations'.
std::string MlaGraph(int batch, int tokens, const MlaDims& d, int capacity,
                     const std::string& dtype, const std::string& w_dtype = "") {
  const std::string bt = absl::StrCat(batch, ",", tokens, ",", d.heads);
  const std::string w = w_dtype.empty() ? dtype : w_dtype;
  return absl::StrCat(
      "graph @g {\n  input %q: ", dtype, "[", bt, ",", d.nope + d.rope, "]\n",
      "  input %latent: ", dtype, "[", batch, ",1,", capacity, ",", d.latent, "]\n",
      "  input %rope: ", dtype, "[", batch, ",1,", capacity, ",", d.rope, "]\n",
      "  weight %w_kv_b: ", w, "[", d.heads * (d.nope + d.v_dim), ",", d.latent, "] = \"kv_b\"\n",
      "  input %positions: i32[", batch, ",", tokens, "]\n", "  %q_nope: ", dtype, "[", bt, ",",
      d.nope, "] view(%q), %q_rope: ", dtype, "[", bt, ",", d.rope,
      "] view(%q) = split(%q) {sizes = [", d.nope, ", ", d.rope, "]}\n", "  %o: ", dtype, "[", bt,
      ",", d.v_dim,
      "] = mla_attention(%q_nope, %q_rope, %latent, %rope, %w_kv_b, %positions) {scale = ",
      1.0 / std::sqrt(static_cast<double>(d.nope + d.rope)), "}\n  output %o\n}\n");
}

std::vector<int32_t> Iota(int n, int start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

int32_t MaxOf(const std::vector<int32_t>& v) { return *std::max_element(v.begin(), v.end()); }

// The positions of one sequence per start, each a run of `tokens` new tokens.
std::vector<int32_t> Runs(int tokens, std::initializer_list<int> starts) {
  std::vector<int32_t> positions;
  for (int start : starts) {
    const std::vector<int32_t> run = Iota(tokens, start);
    positions.insert(positions.end(), run.begin(), run.end());
  }
  return positions;
}

// The CUDA-core split-KV kernel (mma 0), and the combine's W_V rows per CTA.
Params Tactic(int heads_per_cta, int kv_chunk, int splits, int threads, int combine_rows = 32) {
  return {{"combine_rows", combine_rows},
          {"heads_per_cta", heads_per_cta},
          {"kv_chunk", kv_chunk},
          {"mma", 0},
          {"splits", splits},
          {"threads", threads}};
}

// The tensor-core split-KV kernel (mma 1: 16 query rows per CTA).
Params MmaTactic(int kv_chunk, int splits, int threads, int combine_rows) {
  return {{"combine_rows", combine_rows},
          {"heads_per_cta", 16},
          {"kv_chunk", kv_chunk},
          {"mma", 1},
          {"splits", splits},
          {"threads", threads}};
}

// DeepSeek-V2-Lite decode at positions 0, 5, 100 and 1000 of a 1024-row cache: the first
// row only, a part of the first chunk, several chunks (none a multiple of the chunk), and
// many chunks over many splits (most splits empty at the short contexts: of 128 splits of 8
// rows, or 32 splits of 32 rows on tensor cores, one or four hold a row at positions 5 and
// 100). All 16 heads in one CTA or split in groups on CUDA cores; on tensor cores one or two
// key n-tiles per warp (256 threads and 64-row chunks, 128 threads and 64 or 32), one split
// to 32, the combine with 8 to 64 W_V rows per CTA.
std::vector<Case> MlaDecodeV2LiteContextsCases() {
  std::vector<Case> cases;
  for (int position : {0, 5, 100, 1000}) {
    Case c;
    c.graph = MlaGraph(1, 1, kV2Lite, 1024, "bf16");
    c.family = "mla_attention";
    c.context = position + 1;
    c.ints["positions"] = {position};
    c.tactics = {Tactic(16, 64, 1, 256),     Tactic(16, 8, 128, 256, 8), Tactic(16, 32, 7, 512),
                 Tactic(4, 16, 16, 128, 64), Tactic(1, 64, 3, 256, 16),  MmaTactic(64, 1, 256, 8),
                 MmaTactic(64, 8, 256, 16),  MmaTactic(64, 3, 128, 32),  MmaTactic(32, 16, 128, 64),
                 MmaTactic(32, 32, 128, 8)};
    cases.push_back(std::move(c));
  }
  return cases;
}

// Three sequences at different positions (their own cache rows, their own splits in use),
// DeepSeek-V2-Lite dims in bf16 and f16, and with f32 weights under bf16 activations.
std::vector<Case> MlaDecodeBatchOfThreeCases() {
  std::vector<Case> cases;
  for (const auto& [dtype, w_dtype] :
       {std::pair<std::string, std::string>{"bf16", ""}, {"f16", ""}, {"bf16", "f32"}}) {
    Case c;
    c.graph = MlaGraph(3, 1, kV2Lite, 300, dtype, w_dtype);
    c.family = "mla_attention";
    c.ints["positions"] = {3, 257, 130};
    c.context = 258;
    c.tactics = {Tactic(16, 32, 4, 256),   Tactic(8, 16, 9, 256, 16), Tactic(2, 64, 2, 128, 64),
                 MmaTactic(64, 4, 256, 8), MmaTactic(32, 9, 128, 16), MmaTactic(64, 1, 128, 64)};
    cases.push_back(std::move(c));
  }
  return cases;
}

// DeepSeek-V2-Lite decode at batch 16, every sequence at its own position (31 to 286): the
// default splits the 16 sequences' rows for the machine, and the 16 tokens fill four combine
// token groups.
std::vector<Case> MlaDecodeBatchOfSixteenCases() {
  Case c;
  c.graph = MlaGraph(16, 1, kV2Lite, 320, "bf16");
  c.family = "mla_attention";
  std::vector<int32_t> positions;
  for (int b = 0; b < 16; ++b) positions.push_back(31 + 17 * ((b * 7) % 16));
  c.context = MaxOf(positions) + 1;
  c.ints["positions"] = positions;
  c.tactics = {MmaTactic(64, 2, 256, 32), MmaTactic(32, 5, 128, 8), Tactic(16, 32, 8, 256, 64)};
  return {c};
}

// Prefill chunks of 7 and 33 tokens: causal within the chunk and over the rows of earlier
// chunks (a sequence starting at row 0 and one starting at row 20); token tiles of one or
// several tokens, split or not; on tensor cores (DeepSeek-V2-Lite dims) 16-row tiles of one
// token's heads, each tile with its own causal range.
std::vector<Case> MlaPrefillCases() {
  std::vector<Case> cases;
  for (int tokens : {7, 33}) {
    for (const MlaDims& d : {kV2Lite, kSmall}) {
      Case c;
      c.graph = MlaGraph(2, tokens, d, 64, "bf16");
      c.family = "mla_attention";
      const std::vector<int32_t> positions = Runs(tokens, {0, 20});
      c.context = MaxOf(positions) + 1;
      c.ints["positions"] = positions;
      c.tactics = {Tactic(16, 16, 1, 256), Tactic(1, 8, 2, 128, 8), Tactic(2, 32, 2, 256, 16),
                   Tactic(4, 64, 1, 512, 64)};
      // No tensor-core tactics: mma serves decode steps (T = 1) only.
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// The small odd dims in every dtype, decode (batch 3) and a short prefill, under every
// heads_per_cta (4 and more exceed the 3 heads: one partial group), the smallest and
// largest chunks, 64 to 512 threads (up to 32 lanes per row); on tensor cores (bf16, f16)
// one and two chunks of 32 or 64 rows per split.
std::vector<Case> MlaSmallOddDimsCases() {
  std::vector<Case> cases;
  for (const char* dtype : {"bf16", "f16", "f32"}) {
    for (int tokens : {1, 5}) {
      Case c;
      c.graph = MlaGraph(3, tokens, kSmall, 80, dtype);
      c.family = "mla_attention";
      const std::vector<int32_t> positions = Runs(tokens, {0, 41, 74});
      c.context = MaxOf(positions) + 1;
      c.ints["positions"] = positions;
      c.tactics = {Tactic(1, 8, 1, 64),       Tactic(2, 8, 10, 256, 8), Tactic(4, 16, 5, 128, 16),
                   Tactic(8, 64, 2, 512, 64), Tactic(16, 32, 3, 64),    Tactic(16, 8, 8, 256)};
      if (std::string(dtype) != "f32" && tokens == 1) {
        c.tactics.push_back(MmaTactic(32, 1, 128, 8));
        c.tactics.push_back(MmaTactic(64, 2, 128, 16));
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// The tensor cores (decode steps only) with heads that are no multiple of 16: 3 heads (bf16
// and f16; batch 3, a tile of 3 rows), contexts 1 to 80 of an 80-row cache that no chunk
// divides, and 20 heads (two tiles per sequence, the second of 4 rows) for batch 2.
std::vector<Case> MlaMmaOddHeadsCases() {
  std::vector<Case> cases;
  for (const char* dtype : {"bf16", "f16"}) {
    for (int tokens : {1}) {
      Case c;
      c.graph = MlaGraph(3, tokens, kSmallMma, 80, dtype);
      c.family = "mla_attention";
      const std::vector<int32_t> positions = Runs(tokens, {0, 41, 75});
      c.context = MaxOf(positions) + 1;
      c.ints["positions"] = positions;
      c.tactics = {MmaTactic(32, 1, 128, 8), MmaTactic(32, 3, 128, 16), MmaTactic(64, 2, 128, 64)};
      cases.push_back(std::move(c));
    }
  }
  Case c;
  c.graph = MlaGraph(2, 1, kWideMma, 200, "bf16");
  c.family = "mla_attention";
  c.ints["positions"] = {62, 152};
  c.context = 153;
  c.tactics = {MmaTactic(64, 1, 256, 8), MmaTactic(32, 2, 128, 16), MmaTactic(64, 4, 128, 8)};
  cases.push_back(std::move(c));
  return cases;
}

// One mla_kv_write_attention region (the query's RoPE and mla_kv_write folded into the
// absorbed attention) as the lowering and the planner leave it: q and kv_a are views of one
// packed [B,T,Hq·(Dn+Dr) + C+Dr] projection, q_nope and q_pe views of the reshaped q; the
// norm's dtype may differ from the activations'. `rope` holds the RoPE attributes.
std::string MlaKvWriteAttentionGraph(int batch, int tokens, const MlaDims& d, int capacity,
                                     const std::string& dtype, const std::string& norm_dtype,
                                     const std::string& rope) {
  const std::string bt = absl::StrCat(batch, ",", tokens);
  const int q_width = d.heads * (d.nope + d.rope);
  const std::string cache = absl::StrCat("[", batch, ",1,", capacity, ",");
  const std::string heads = absl::StrCat(bt, ",", d.heads, ",");
  return absl::StrCat(
      "graph @g {\n  input %q_kv_a: ", dtype, "[", bt, ",", q_width + d.latent + d.rope, "]\n",
      "  weight %norm: ", norm_dtype, "[", d.latent, "] = \"kv_a_layernorm\"\n",
      "  input %latent_cache: ", dtype, cache, d.latent, "]\n", "  input %rope_cache: ", dtype,
      cache, d.rope, "]\n", "  weight %w_kv_b: ", dtype, "[", d.heads * (d.nope + d.v_dim), ",",
      d.latent, "] = \"kv_b\"\n", "  input %positions: i32[", bt, "]\n", "  %q: ", dtype, "[", bt,
      ",", q_width, "] view(%q_kv_a), %kv_a: ", dtype, "[", bt, ",", d.latent + d.rope,
      "] view(%q_kv_a) = split(%q_kv_a) {sizes = [", q_width, ", ", d.latent + d.rope, "]}\n",
      "  %q_heads: ", dtype, "[", heads, d.nope + d.rope, "] view(%q) = reshape(%q)\n",
      "  %q_nope: ", dtype, "[", heads, d.nope, "] view(%q_heads), %q_pe: ", dtype, "[", heads,
      d.rope, "] view(%q_heads) = split(%q_heads) {sizes = [", d.nope, ", ", d.rope, "]}\n",
      "  %o: ", dtype, "[", heads, d.v_dim, "], %lc: ", dtype, cache, d.latent,
      "] inplace(%latent_cache), %rc: ", dtype, cache, d.rope,
      "] inplace(%rope_cache) = mla_kv_write_attention(%q_nope, %q_pe, %kv_a, %norm, "
      "%latent_cache, %rope_cache, %w_kv_b, %positions) {eps = 1e-06, ",
      rope, ", scale = ", 1.0 / std::sqrt(static_cast<double>(d.nope + d.rope)),
      "}\n  output %o\n  output %lc\n  output %rc\n}\n");
}

constexpr char kInterleavedYarn[] =
    R"(attention_factor = 1.1, beta_fast = 32.0, beta_slow = 1.0, factor = 40.0, interleaved = true, original_max_position_embeddings = 4096, rope_type = "yarn", theta = 10000.0, truncate = true)";
constexpr char kDefaultRope[] = R"(rope_type = "default", theta = 10000.0)";

// DeepSeek-V2-Lite decode with the query's RoPE (interleaved yarn) and the cache write folded
// in: batch 1 at positions 0 and 700 of a 1024-row cache, and three sequences at their own
// positions (one at the cache's last row) with a bf16 and an f32 norm weight; on tensor
// cores (the rotated query in the queries' tail) and CUDA cores (in the workspace copy).
std::vector<Case> MlaKvWriteAttentionV2LiteCases() {
  std::vector<Case> cases;
  for (int position : {0, 700}) {
    Case c;
    c.graph = MlaKvWriteAttentionGraph(1, 1, kV2Lite, 1024, "bf16", "bf16", kInterleavedYarn);
    c.family = "mla_attention";
    c.context = position + 1;
    c.ints["positions"] = {position};
    c.tactics = {MmaTactic(64, 16, 128, 8), MmaTactic(32, 32, 128, 16), Tactic(16, 64, 11, 256),
                 Tactic(4, 16, 16, 128, 64)};
    cases.push_back(std::move(c));
  }
  for (const char* norm_dtype : {"bf16", "f32"}) {
    Case c;
    c.graph = MlaKvWriteAttentionGraph(3, 1, kV2Lite, 300, "bf16", norm_dtype, kInterleavedYarn);
    c.family = "mla_attention";
    c.ints["positions"] = {3, 299, 130};
    c.context = 300;
    c.tactics = {MmaTactic(64, 4, 128, 8), MmaTactic(32, 9, 128, 16), Tactic(16, 32, 4, 256),
                 Tactic(2, 64, 2, 128, 64)};
    cases.push_back(std::move(c));
  }
  return cases;
}

// The small odd dims (3 heads, Dr 8, C 32) in every dtype with default (rotate-half) and
// interleaved yarn RoPE, one token and five (a prompt-sized tile: the cache-write column's
// CTAs take several tokens each), three sequences of an 80-row cache; tensor cores where
// they serve (bf16, f16, one token).
std::vector<Case> MlaKvWriteAttentionSmallCases() {
  std::vector<Case> cases;
  for (const char* dtype : {"bf16", "f16", "f32"}) {
    for (const char* rope : {kDefaultRope, kInterleavedYarn}) {
      for (int tokens : {1, 5}) {
        Case c;
        c.graph = MlaKvWriteAttentionGraph(3, tokens, kSmallMma, 80, dtype, dtype, rope);
        c.family = "mla_attention";
        const std::vector<int32_t> positions = Runs(tokens, {0, 41, 74});
        c.context = MaxOf(positions) + 1;
        c.ints["positions"] = positions;
        c.tactics = {Tactic(1, 8, 1, 64), Tactic(4, 16, 5, 128, 16), Tactic(16, 8, 8, 256)};
        if (std::string(dtype) != "f32" && tokens == 1) {
          c.tactics.push_back(MmaTactic(32, 1, 128, 8));
          c.tactics.push_back(MmaTactic(64, 2, 128, 16));
        }
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

// mla_prefill (the un-absorbed prompt form): the expansion tile's rows and the flash tiles.
Params PrefillTactic(int expand_tile_m, int stages, int tile_kv, int tile_q, int warps) {
  return {{"expand_tile_m", expand_tile_m},
          {"stages", stages},
          {"tile_kv", tile_kv},
          {"tile_q", tile_q},
          {"warps", warps}};
}

// DeepSeek-V2-Lite dims over prompts of 16, 33 and 130 tokens for two sequences, one from
// row 0 and one after 20 rows of earlier context (their rows expanded too), in a 200-row
// cache: partial query tiles, key tiles cut by the causal edge, the longest walks first;
// one to three stages, 16 to 128 query rows per CTA (two 16-row tiles per warp at 128 and
// 4 warps), both expansion tiles.
std::vector<Case> MlaPrefillExpandedCases() {
  std::vector<Case> cases;
  for (int tokens : {16, 33, 130}) {
    Case c;
    c.graph = MlaGraph(2, tokens, kV2Lite, 200, "bf16");
    c.family = "mla_prefill";
    const std::vector<int32_t> positions = Runs(tokens, {0, 20});
    c.context = MaxOf(positions) + 1;
    c.ints["positions"] = positions;
    c.tactics = {PrefillTactic(128, 2, 64, 64, 4), PrefillTactic(64, 1, 32, 16, 1),
                 PrefillTactic(64, 3, 32, 128, 4), PrefillTactic(128, 2, 64, 32, 2)};
    cases.push_back(std::move(c));
  }
  return cases;
}

// Odd dims for the expanded form: 3 heads, Dn 32 + Dr 16 (three QK k-steps), Dv 48 (six
// d-tiles), C = 72 (the second 64-wide expansion slice mostly zero-filled, 240 features: the
// second 128-feature tile partial); and the small dims, Dn 16 + Dr 8 and Dv 24 (both padded to
// 32 in shared memory) with C = 32; in bf16 and f16, three sequences at rows 0, 9 and 30 of an
// 80-row cache, 17 and 40 tokens.
std::vector<Case> MlaPrefillExpandedOddDimsCases() {
  constexpr MlaDims kOdd = {3, 32, 16, 72, 48};
  std::vector<Case> cases;
  for (const MlaDims& d : {kOdd, kSmall}) {
    for (const char* dtype : {"bf16", "f16"}) {
      for (int tokens : {17, 40}) {
        Case c;
        c.graph = MlaGraph(3, tokens, d, 80, dtype);
        c.family = "mla_prefill";
        const std::vector<int32_t> positions = Runs(tokens, {0, 9, 30});
        c.context = MaxOf(positions) + 1;
        c.ints["positions"] = positions;
        c.tactics = {PrefillTactic(128, 2, 64, 64, 4), PrefillTactic(64, 1, 32, 32, 1),
                     PrefillTactic(64, 3, 64, 16, 1)};
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

}  // namespace

std::vector<CaseGroup> MlaAttentionCaseGroups() {
  return {
      {"MlaDecodeV2LiteContexts", MlaDecodeV2LiteContextsCases()},
      {"MlaDecodeBatchOfThree", MlaDecodeBatchOfThreeCases()},
      {"MlaDecodeBatchOfSixteen", MlaDecodeBatchOfSixteenCases()},
      {"MlaPrefill", MlaPrefillCases()},
      {"MlaSmallOddDims", MlaSmallOddDimsCases()},
      {"MlaMmaOddHeads", MlaMmaOddHeadsCases()},
      {"MlaKvWriteAttentionV2Lite", MlaKvWriteAttentionV2LiteCases()},
      {"MlaKvWriteAttentionSmall", MlaKvWriteAttentionSmallCases()},
      {"MlaPrefillExpanded", MlaPrefillExpandedCases()},
      {"MlaPrefillExpandedOddDims", MlaPrefillExpandedOddDimsCases()},
  };
}

}  // namespace tileplan::kernels::testing
