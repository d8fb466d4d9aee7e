// Conformance cases of attention_decode and attention_prefill (tests/kernels/gpu_harness.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {

std::string RopeAttentionGraph(bool norms, int batch, int tokens, int q_heads, int kv_heads,
                               int capacity, int dim, const std::string& dtype, int window,
                               const std::string& rope, int pad) {
  const int width = (q_heads + 2 * kv_heads) * dim;
  const std::string cache =
      absl::StrCat(dtype, "[", batch, ",", kv_heads, ",", capacity, ",", dim, "]");
  const std::string bt = absl::StrCat(batch, ",", tokens);
  std::string text = "graph @g {\n";
  if (pad > 0) {
    absl::StrAppend(&text, "  input %rows: ", dtype, "[", bt, ",", width + pad, "]\n");
  } else {
    absl::StrAppend(&text, "  input %qkv: ", dtype, "[", bt, ",", width, "]\n");
  }
  if (norms) {
    absl::StrAppend(&text, "  weight %q_norm: ", dtype, "[", dim, "] = \"q_norm\"\n",
                    "  weight %k_norm: ", dtype, "[", dim, "] = \"k_norm\"\n");
  }
  absl::StrAppend(&text, "  input %k_cache: ", cache, "\n  input %v_cache: ", cache,
                  "\n  input %positions: i32[", bt, "]\n");
  if (pad > 0) {
    absl::StrAppend(&text, "  %qkv: ", dtype, "[", bt, ",", width, "] view(%rows), %pad: ", dtype,
                    "[", bt, ",", pad, "] view(%rows) = split(%rows) {sizes = [", width, ", ", pad,
                    "]}\n");
  }
  absl::StrAppend(&text, "  %o: ", dtype, "[", bt, ",", q_heads, ",", dim, "], %kc: ", cache,
                  " inplace(%k_cache), %vc: ", cache, " inplace(%v_cache) = ",
                  norms ? "qk_norm_rope_kv_write_attention(%qkv, %q_norm, %k_norm, "
                        : "rope_kv_write_attention(%qkv, ",
                  "%k_cache, %v_cache, %positions) {", norms ? "eps = 1e-06, " : "",
                  "num_heads = ", q_heads, ", num_kv_heads = ", kv_heads, ", ", rope,
                  ", scale = ", 1.0 / std::sqrt(static_cast<double>(dim)),
                  ", sliding_window = ", window, "}\n  output %o\n  output %kc\n  output %vc\n}\n");
  return text;
}

namespace {

std::vector<int32_t> Iota(int n, int start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

// Each split-KV decode tactic as given (registers, stages 1) and with each of `stages`:
// streamed through shared memory on CUDA cores, a step of registers ahead with mma 1.
std::vector<Params> WithStages(const std::vector<Params>& tactics, std::vector<int> stages = {3}) {
  std::vector<Params> out;
  stages.insert(stages.begin(), 1);
  for (const Params& t : tactics) {
    for (int n : stages) {
      Params streamed = t;
      streamed["stages"] = n;
      out.push_back(std::move(streamed));
    }
  }
  return out;
}

std::string AttentionGraph(int batch, int tokens, int q_heads, int kv_heads, int capacity, int dim,
                           const std::string& dtype, int window) {
  const std::string q = absl::StrCat(dtype, "[", batch, ",", tokens, ",", q_heads, ",", dim, "]");
  const std::string cache =
      absl::StrCat(dtype, "[", batch, ",", kv_heads, ",", capacity, ",", dim, "]");
  return absl::StrCat(
      "graph @g {\n  input %q: ", q, "\n  input %k: ", cache, "\n  input %v: ", cache,
      "\n  input %positions: i32[", batch, ",", tokens, "]\n  %o: ", q,
      " = attention(%q, %k, %v, %positions) {scale = ", 1.0 / std::sqrt(static_cast<double>(dim)),
      ", sliding_window = ", window, "}\n  output %o\n}\n");
}

std::vector<Case> AttentionDecodeSplitKvCases() {
  std::vector<Case> cases;
  for (int window : {0, 64}) {
    Case c;
    c.graph = AttentionGraph(2, 1, 8, 2, 300, 128, "bf16", window);
    c.family = "attention_decode";
    c.context = 300;
    c.ints["positions"] = {250, 37};
    c.tactics = WithStages({{{"head_split", 1}, {"kv_chunk", 64}, {"splits", 1}, {"warps", 4}},
                            {{"head_split", 1}, {"kv_chunk", 64}, {"splits", 4}, {"warps", 2}},
                            {{"head_split", 1}, {"kv_chunk", 128}, {"splits", 2}, {"warps", 8}},
                            {{"head_split", 2}, {"kv_chunk", 64}, {"splits", 4}, {"warps", 2}},
                            {{"head_split", 4}, {"kv_chunk", 64}, {"splits", 1}, {"warps", 4}}});
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> AttentionDecodeSeveralTokensAndHeadDimsCases() {
  std::vector<Case> cases;
  struct Shape {
    int tokens, q_heads, kv_heads, dim;
    const char* dtype;
  };
  for (const Shape& s : {Shape{4, 4, 1, 64, "bf16"}, Shape{1, 6, 2, 96, "bf16"},
                         Shape{2, 2, 2, 32, "f32"}, Shape{16, 14, 2, 64, "bf16"}}) {
    Case c;
    c.graph = AttentionGraph(1, s.tokens, s.q_heads, s.kv_heads, 200, s.dim, s.dtype, 0);
    c.family = "attention_decode";
    c.context = 180;
    c.ints["positions"] = Iota(s.tokens, 180 - s.tokens);
    c.tactics = WithStages({{{"head_split", 1}, {"kv_chunk", 64}, {"splits", 3}, {"warps", 4}}});
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> AttentionPrefillFlashCases() {
  std::vector<Case> cases;
  struct Shape {
    int tokens, first, dim, window;
    const char* dtype;
  };
  for (const Shape& s :
       {Shape{37, 0, 64, 0, "bf16"}, Shape{37, 20, 128, 0, "bf16"}, Shape{100, 0, 96, 16, "bf16"},
        Shape{64, 5, 128, 0, "f16"}, Shape{24, 0, 16, 6, "bf16"}, Shape{50, 3, 32, 0, "bf16"}}) {
    Case c;
    c.graph = AttentionGraph(2, s.tokens, 4, 2, 160, s.dim, s.dtype, s.window);
    c.family = "attention_prefill";
    c.context = s.first + s.tokens;
    std::vector<int32_t> positions = Iota(s.tokens, s.first);
    const std::vector<int32_t> second = Iota(s.tokens, s.first + 3);
    positions.insert(positions.end(), second.begin(), second.end());
    c.ints["positions"] = positions;
    c.tactics = {{{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 1},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 3},
                  {"tile_kv", 64},
                  {"tile_q", 128},
                  {"warps", 8}},
                 {{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 128},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 64},
                  {"tile_q", 64},
                  {"warps", 4}},
                 // Split-KV: runs of whole key tiles, some of them empty on the first row
                 // tiles, merged by the last CTA of each row tile.
                 {{"pack_gqa", 0},
                  {"splits", 2},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 3},
                  {"stages", 1},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}},
                 // 16 runs: most of them empty here, one item per merge batch.
                 {{"pack_gqa", 0},
                  {"splits", 16},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// The flash kernel with the GQA group packed into the query rows: decode-sized steps of a
// 7-heads-per-kv-head model (Qwen2-7B's grouping) at batch 3 with contexts in different
// tiles, a window, two new tokens, and a prefill of an odd length whose tiles mix tokens.
std::vector<Case> AttentionPrefillPackedGqaCases() {
  std::vector<Case> cases;
  struct Shape {
    int batch, tokens, q_heads, kv_heads, dim, window;
    std::vector<int32_t> positions;
  };
  const std::vector<Shape> shapes = {
      {3, 1, 14, 2, 128, 0, {0, 130, 299}},
      {3, 1, 14, 2, 128, 50, {17, 200, 64}},
      {2, 2, 8, 2, 64, 0, {40, 41, 250, 251}},
      {1, 37, 8, 2, 128, 0, Iota(37, 11)},
  };
  for (const Shape& s : shapes) {
    Case c;
    c.graph =
        AttentionGraph(s.batch, s.tokens, s.q_heads, s.kv_heads, 300, s.dim, "bf16", s.window);
    c.family = "attention_prefill";
    c.context = *std::max_element(s.positions.begin(), s.positions.end()) + 1;
    c.ints["positions"] = s.positions;
    c.tactics = {{{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 1},
                  {"tile_kv", 64},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 3},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 128},
                  {"tile_q", 128},
                  {"warps", 8}},
                 {{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 64},
                  {"tile_q", 16},
                  {"warps", 1}},
                 // Split-KV over the packed group (Qwen2-7B's decode form): runs of uneven
                 // length, empty runs on short contexts, and a split of an unpacked tile.
                 {{"pack_gqa", 1},
                  {"splits", 4},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 3},
                  {"stages", 1},
                  {"tile_kv", 64},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 0},
                  {"splits", 2},
                  {"stages", 3},
                  {"tile_kv", 32},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 8},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 128},
                  {"warps", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// ---- attention_decode: RoPE + KV write + attention ------------------------------------

constexpr char kLlama3Rope[] =
    R"(factor = 8.0, high_freq_factor = 4.0, low_freq_factor = 1.0, original_max_position_embeddings = 8192, rope_type = "llama3", theta = 500000.0)";

// Qwen3-0.6B's attention (head_dim 128, 16 q heads over 8 kv heads, QK-norm) at contexts 1,
// 37 and 600: the new row lands in the first chunk, inside a later one, and past several
// splits' worth of chunks.
std::vector<Case> RopeKvWriteAttentionQwen3ContextsCases() {
  std::vector<Case> cases;
  for (int context : {1, 37, 600}) {
    Case c;
    c.graph = RopeAttentionGraph(true, 1, 1, 16, 8, 640, 128, "bf16", 0, kQwenRope);
    c.family = "attention_decode";
    c.context = context;
    c.ints["positions"] = {context - 1};
    c.tactics = WithStages({{{"head_split", 1}, {"kv_chunk", 32}, {"splits", 16}, {"warps", 4}},
                            {{"head_split", 1}, {"kv_chunk", 64}, {"splits", 4}, {"warps", 2}},
                            {{"head_split", 1}, {"kv_chunk", 128}, {"splits", 1}, {"warps", 8}},
                            {{"head_split", 1}, {"kv_chunk", 256}, {"splits", 3}, {"warps", 4}},
                            {{"head_split", 2}, {"kv_chunk", 32}, {"splits", 16}, {"warps", 4}}});
    cases.push_back(std::move(c));
  }
  return cases;
}

// Two new tokens per sequence whose rows fall in different chunks (63 | 64 with 32-row
// chunks: written by different CTAs, and token 64 attends to row 63), a sliding window, GQA
// groups of 4 and 1, batch 2, with and without norms, head_dim 64 and 128.
std::vector<Case> RopeKvWriteAttentionTwoTokensAcrossChunksCases() {
  std::vector<Case> cases;
  struct Shape {
    bool norms;
    int q_heads, kv_heads, dim, window;
  };
  for (const Shape& s : {Shape{false, 4, 1, 64, 16}, Shape{true, 4, 1, 64, 0},
                         Shape{true, 4, 4, 128, 40}, Shape{false, 6, 3, 128, 0}}) {
    Case c;
    c.graph = RopeAttentionGraph(s.norms, 2, 2, s.q_heads, s.kv_heads, 640, s.dim, "bf16", s.window,
                                 kQwenRope);
    c.family = "attention_decode";
    c.context = 600;
    c.ints["positions"] = {63, 64, 598, 599};
    c.tactics = WithStages({{{"head_split", 1}, {"kv_chunk", 32}, {"splits", 8}, {"warps", 4}},
                            {{"head_split", 1}, {"kv_chunk", 32}, {"splits", 3}, {"warps", 2}},
                            {{"head_split", 1}, {"kv_chunk", 64}, {"splits", 1}, {"warps", 4}},
                            {{"head_split", 1}, {"kv_chunk", 512}, {"splits", 2}, {"warps", 8}}});
    cases.push_back(std::move(c));
  }
  return cases;
}

// Short contexts (rows 0 and 36, one token per sequence), llama3 RoPE, f16 and f32, a qkv
// that is a strided view of wider rows (the rope vector narrows to the stride).
std::vector<Case> RopeKvWriteAttentionDtypesAndViewsCases() {
  std::vector<Case> cases;
  struct Shape {
    bool norms;
    int q_heads, kv_heads, dim, pad;
    const char* dtype;
    const char* rope;
  };
  for (const Shape& s :
       {Shape{true, 8, 4, 128, 0, "f16", kQwenRope},
        Shape{false, 8, 2, 128, 0, "bf16", kLlama3Rope}, Shape{true, 4, 2, 64, 0, "f32", kQwenRope},
        Shape{true, 8, 4, 64, 8, "bf16", kQwenRope},
        Shape{false, 2, 1, 128, 2, "bf16", kLlama3Rope}}) {
    Case c;
    c.graph = RopeAttentionGraph(s.norms, 2, 1, s.q_heads, s.kv_heads, 48, s.dim, s.dtype, 0,
                                 s.rope, s.pad);
    c.family = "attention_decode";
    c.context = 37;
    c.ints["positions"] = {0, 36};
    c.tactics = WithStages({{{"head_split", 1}, {"kv_chunk", 32}, {"splits", 2}, {"warps", 4}},
                            {{"head_split", 1}, {"kv_chunk", 32}, {"splits", 1}, {"warps", 2}}});
    cases.push_back(std::move(c));
  }
  return cases;
}

// The fused decode kinds with DeepSeek's RoPE (yarn with attention factor 1.1, interleaved
// pairs): with and without norms, head dims 64 and 128, two tokens across chunks.
std::vector<Case> RopeKvWriteAttentionYarnInterleavedCases() {
  constexpr char kYarnInterleaved[] =
      R"(attention_factor = 1.1, beta_fast = 32.0, beta_slow = 1.0, factor = 40.0, interleaved = true, original_max_position_embeddings = 4096, rope_type = "yarn", theta = 10000.0, truncate = true)";
  std::vector<Case> cases;
  for (const auto& [norms, dim] : {std::pair{true, 64}, std::pair{false, 128}}) {
    Case c;
    c.graph = RopeAttentionGraph(norms, 2, 2, 4, 2, 160, dim, "bf16", 0, kYarnInterleaved);
    c.family = "attention_decode";
    c.context = 130;
    c.ints["positions"] = {63, 64, 128, 129};
    c.tactics = WithStages({{{"head_split", 1}, {"kv_chunk", 32}, {"splits", 3}, {"warps", 4}},
                            {{"head_split", 1}, {"kv_chunk", 64}, {"splits", 1}, {"warps", 2}}});
    cases.push_back(std::move(c));
  }
  return cases;
}

// A GQA group of 8 over 4 kv heads (Qwen3-30B-A3B's attention: 32 q heads, head_dim 128,
// QK-norm) split among 1, 2, 4 and 8 CTAs per kv head, the plain kind and the fused one; for
// the fused kind also two tokens per sequence across chunks, so the parts of a kv head that
// share a split each write the same new rows before they read them.
std::vector<Case> AttentionDecodeHeadSplitCases() {
  std::vector<Case> cases;
  std::vector<Params> tactics;
  for (int head_split : {1, 2, 4, 8}) {
    tactics.push_back({{"head_split", head_split}, {"kv_chunk", 32}, {"splits", 16}, {"warps", 8}});
    tactics.push_back({{"head_split", head_split}, {"kv_chunk", 64}, {"splits", 3}, {"warps", 2}});
  }
  for (int context : {37, 600}) {
    Case plain;
    plain.graph = AttentionGraph(2, 1, 32, 4, 640, 128, "bf16", 0);
    plain.family = "attention_decode";
    plain.context = context;
    plain.ints["positions"] = {context - 1, context / 2};
    plain.tactics = WithStages(tactics);
    cases.push_back(std::move(plain));
    Case fused;
    fused.graph = RopeAttentionGraph(true, 1, 1, 32, 4, 640, 128, "bf16", 0, kQwenRope);
    fused.family = "attention_decode";
    fused.context = context;
    fused.ints["positions"] = {context - 1};
    fused.tactics = WithStages(tactics);
    cases.push_back(std::move(fused));
  }
  Case across;
  across.graph = RopeAttentionGraph(true, 2, 2, 16, 2, 640, 128, "bf16", 0, kQwenRope);
  across.family = "attention_decode";
  across.context = 600;
  across.ints["positions"] = {63, 64, 598, 599};
  across.tactics = WithStages(tactics);
  cases.push_back(std::move(across));
  return cases;
}

// Long contexts streamed through shared memory: Qwen3-0.6B's heads (16 over 8, head_dim
// 128, bf16; tiles of 32 rows) at context 4100, with and without a 1000-row window, plain
// and fused with two new tokens across a chunk boundary; f32 at head_dim 128 (16-row tiles)
// and f16 at 64 (64-row tiles). Splits walk many tiles, so the pipeline wraps its stages
// many times, and tiles cut by the window or the context are copied in part.
std::vector<Case> AttentionDecodeStreamedCases() {
  std::vector<Case> cases;
  const std::vector<Params> tactics = {
      {{"head_split", 2}, {"kv_chunk", 256}, {"splits", 9}, {"stages", 4}, {"warps", 4}},
      {{"head_split", 1}, {"kv_chunk", 64}, {"splits", 16}, {"stages", 2}, {"warps", 8}},
      {{"head_split", 2}, {"kv_chunk", 32}, {"splits", 64}, {"stages", 4}, {"warps", 4}},
      {{"head_split", 1}, {"kv_chunk", 512}, {"splits", 1}, {"stages", 3}, {"warps", 2}},
      {{"head_split", 1}, {"kv_chunk", 128}, {"splits", 5}, {"stages", 1}, {"warps", 4}}};
  for (int window : {0, 1000}) {
    Case plain;
    plain.graph = AttentionGraph(2, 1, 16, 8, 4160, 128, "bf16", window);
    plain.family = "attention_decode";
    plain.context = 4100;
    plain.ints["positions"] = {4099, 2500};
    plain.tactics = tactics;
    cases.push_back(std::move(plain));
  }
  Case fused;
  fused.graph = RopeAttentionGraph(true, 1, 2, 16, 8, 4160, 128, "bf16", 0, kQwenRope);
  fused.family = "attention_decode";
  fused.context = 4097;
  fused.ints["positions"] = {4095, 4096};
  fused.tactics = tactics;
  cases.push_back(std::move(fused));
  for (const auto& [dim, dtype] : {std::pair{128, "f32"}, std::pair{64, "f16"}}) {
    Case c;
    c.graph = AttentionGraph(1, 2, 4, 2, 3000, dim, dtype, 0);
    c.family = "attention_decode";
    c.context = 2900;
    c.ints["positions"] = {2898, 2899};
    c.tactics = {
        {{"head_split", 1}, {"kv_chunk", 64}, {"splits", 7}, {"stages", 4}, {"warps", 4}},
        {{"head_split", 2}, {"kv_chunk", 256}, {"splits", 3}, {"stages", 2}, {"warps", 8}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// A decode attention case of `s` (`dtype` bf16, f16 or f32) under every one of `tactics` that
// applies: head_split dividing the GQA group, and the tensor-core walk (mma 1) only in 16-bit
// types. The last sequence's new tokens end at the context, the others' in the middle of it.
struct DecodeShape {
  int batch, tokens, q_heads, kv_heads, dim, capacity, context, window;
  const char* dtype;
};
// Qwen3-0.6B's group of 2 at a short context (most splits find no key) and at one that ends
// inside a chunk, Qwen2-7B's group of 7 and Qwen3-30B-A3B's of 8, in bf16 at head_dim 128.
std::vector<DecodeShape> GroupShapes() {
  return {DecodeShape{2, 1, 16, 8, 128, 640, 37, 0, "bf16"},
          DecodeShape{2, 1, 16, 8, 128, 640, 600, 0, "bf16"},
          DecodeShape{2, 1, 28, 4, 128, 640, 517, 0, "bf16"},
          DecodeShape{1, 1, 32, 4, 128, 640, 512, 0, "bf16"}};
}

Case DecodeAttentionCase(const DecodeShape& s, const std::vector<Params>& tactics, int min_sm) {
  Case c;
  c.graph = AttentionGraph(s.batch, s.tokens, s.q_heads, s.kv_heads, s.capacity, s.dim, s.dtype,
                           s.window);
  c.family = "attention_decode";
  c.context = s.context;
  c.min_sm = min_sm;
  std::vector<int32_t> positions;
  for (int b = 0; b < s.batch; ++b) {
    const int end = b + 1 == s.batch ? s.context : s.context / 2 + 5;
    const std::vector<int32_t> p = Iota(s.tokens, end - s.tokens);
    positions.insert(positions.end(), p.begin(), p.end());
  }
  c.ints["positions"] = positions;
  for (const Params& t : tactics) {
    const auto mma = t.find("mma");
    if (mma != t.end() && mma->second != 0 && std::string(s.dtype) == "f32") continue;
    if ((s.q_heads / s.kv_heads) % t.at("head_split") == 0) c.tactics.push_back(t);
  }
  return c;
}

// The fused decode kinds under `tactics`: QK-norm with Qwen3's RoPE (one token; two tokens of
// two sequences across chunks) and DeepSeek's interleaved YaRN RoPE without norms.
void AddFusedDecodeCases(const std::vector<Params>& tactics, int min_sm, std::vector<Case>& cases) {
  constexpr char kYarnInterleaved[] =
      R"(attention_factor = 1.1, beta_fast = 32.0, beta_slow = 1.0, factor = 40.0, interleaved = true, original_max_position_embeddings = 4096, rope_type = "yarn", theta = 10000.0, truncate = true)";
  auto fused = [&](std::string graph, int context, std::vector<int32_t> positions) {
    Case c;
    c.graph = std::move(graph);
    c.family = "attention_decode";
    c.context = context;
    c.min_sm = min_sm;
    c.ints["positions"] = std::move(positions);
    c.tactics = tactics;
    cases.push_back(std::move(c));
  };
  fused(RopeAttentionGraph(true, 1, 1, 32, 4, 640, 128, "bf16", 0, kQwenRope), 600, {599});
  fused(RopeAttentionGraph(true, 2, 2, 16, 8, 640, 128, "bf16", 0, kQwenRope), 600,
        {63, 64, 598, 599});
  fused(RopeAttentionGraph(false, 2, 2, 4, 2, 640, 64, "bf16", 0, kYarnInterleaved), 130,
        {63, 64, 128, 129});
}

// The tensor-core walk (mma 1): a kv head's queries in passes of 16 rows, warps on 16-key
// steps with K and V loaded into the mma's registers. GQA groups of 2 (Qwen3-0.6B), 7
// (Qwen2-7B: rows past the group are zero), 8 (Qwen3-30B-A3B) and 1 (no GQA); 16 tokens of
// a group of 2 (two passes); f16 at head_dim 64; contexts that end inside a step, a chunk
// and a split, long ones with and without a window; the fused kinds with QK-norm, with
// DeepSeek's interleaved YaRN RoPE, and two tokens across chunks. Every tactic also with
// stages 2 (a warp's next step loaded while it scores the current one).
std::vector<Case> AttentionDecodeMmaCases() {
  std::vector<Case> cases;
  const std::vector<Params> tactics =
      WithStages({{{"head_split", 1}, {"kv_chunk", 64}, {"mma", 1}, {"splits", 3}, {"warps", 4}},
                  {{"head_split", 1}, {"kv_chunk", 32}, {"mma", 1}, {"splits", 16}, {"warps", 2}},
                  {{"head_split", 1}, {"kv_chunk", 256}, {"mma", 1}, {"splits", 1}, {"warps", 8}},
                  {{"head_split", 2}, {"kv_chunk", 128}, {"mma", 1}, {"splits", 5}, {"warps", 4}}},
                 {2});
  std::vector<DecodeShape> shapes = GroupShapes();
  shapes.insert(shapes.end(), {DecodeShape{2, 1, 4, 4, 128, 640, 300, 0, "bf16"},
                               DecodeShape{1, 16, 4, 2, 128, 640, 333, 0, "bf16"},
                               DecodeShape{2, 2, 8, 2, 64, 640, 401, 0, "f16"},
                               DecodeShape{2, 1, 16, 8, 128, 4160, 4100, 0, "bf16"},
                               DecodeShape{2, 1, 16, 8, 128, 4160, 4100, 1000, "bf16"}});
  for (const DecodeShape& s : shapes) cases.push_back(DecodeAttentionCase(s, tactics, 0));
  AddFusedDecodeCases(tactics, 0, cases);
  return cases;
}

// The cluster merge (cluster 1: the splits of a (b, kv head, part) merge through distributed
// shared memory, sm_90 and later): 2, 3, 5 and 8 splits (the portable cluster's most), on the
// CUDA-core walk (head_split 1 and 2, rows in registers or streamed) and the tensor-core walk
// (with and without a step loaded ahead); splits that find no key (a short context, the first
// sequence's tokens in the middle of it), several tokens and a window; a group whose 4-dim
// items do not divide among the splits (7 heads of 128 dims: 224 items for 3 and 5 CTAs); f16
// and f32; the fused kinds with QK-norm and with interleaved YaRN RoPE.
std::vector<Case> AttentionDecodeClusterCases() {
  std::vector<Case> cases;
  std::vector<Params> tactics = WithStages(
      {{{"cluster", 1}, {"head_split", 1}, {"kv_chunk", 64}, {"splits", 3}, {"warps", 4}},
       {{"cluster", 1}, {"head_split", 2}, {"kv_chunk", 32}, {"splits", 8}, {"warps", 2}},
       {{"cluster", 1}, {"head_split", 1}, {"kv_chunk", 128}, {"splits", 2}, {"warps", 8}}},
      {2});
  const std::vector<Params> tensor_core = WithStages({{{"cluster", 1},
                                                       {"head_split", 1},
                                                       {"kv_chunk", 64},
                                                       {"mma", 1},
                                                       {"splits", 8},
                                                       {"warps", 4}},
                                                      {{"cluster", 1},
                                                       {"head_split", 1},
                                                       {"kv_chunk", 32},
                                                       {"mma", 1},
                                                       {"splits", 5},
                                                       {"warps", 2}}},
                                                     {2});
  tactics.insert(tactics.end(), tensor_core.begin(), tensor_core.end());
  std::vector<DecodeShape> shapes = GroupShapes();
  shapes.insert(shapes.end(), {DecodeShape{2, 3, 8, 2, 64, 640, 401, 100, "f16"},
                               DecodeShape{1, 1, 4, 4, 128, 640, 300, 0, "f32"}});
  for (const DecodeShape& s : shapes) cases.push_back(DecodeAttentionCase(s, tactics, 90));
  AddFusedDecodeCases(tactics, 90, cases);
  return cases;
}

}  // namespace

std::vector<CaseGroup> AttentionCaseGroups() {
  return {
      {"AttentionDecodeSplitKv", AttentionDecodeSplitKvCases()},
      {"AttentionDecodeSeveralTokensAndHeadDims", AttentionDecodeSeveralTokensAndHeadDimsCases()},
      {"AttentionPrefillFlash", AttentionPrefillFlashCases()},
      {"AttentionPrefillPackedGqa", AttentionPrefillPackedGqaCases()},
      {"RopeKvWriteAttentionQwen3Contexts", RopeKvWriteAttentionQwen3ContextsCases()},
      {"RopeKvWriteAttentionTwoTokensAcrossChunks",
       RopeKvWriteAttentionTwoTokensAcrossChunksCases()},
      {"RopeKvWriteAttentionDtypesAndViews", RopeKvWriteAttentionDtypesAndViewsCases()},
      {"RopeKvWriteAttentionYarnInterleaved", RopeKvWriteAttentionYarnInterleavedCases()},
      {"AttentionDecodeHeadSplit", AttentionDecodeHeadSplitCases()},
      {"AttentionDecodeStreamed", AttentionDecodeStreamedCases()},
      {"AttentionDecodeMma", AttentionDecodeMmaCases()},
      {"AttentionDecodeCluster", AttentionDecodeClusterCases()},
  };
}

}  // namespace tileplan::kernels::testing
