// Conformance cases of rope_kv_write (tests/kernels/gpu_harness.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

constexpr char kYarnRope[] =
    R"(attention_factor = 1.1, beta_fast = 32.0, beta_slow = 1.0, factor = 40.0, original_max_position_embeddings = 4096, rope_type = "yarn", theta = 10000.0, truncate = true)";

std::vector<Case> RopeDefaultAndLlama3Cases() {
  std::vector<Case> cases;
  for (
      const char* attrs :
      {R"({rope_type = "default", theta = 1000000.0})",
       R"({factor = 8.0, high_freq_factor = 4.0, low_freq_factor = 1.0, original_max_position_embeddings = 8192, rope_type = "llama3", theta = 500000.0})"}) {
    Case c;
    c.graph = absl::StrCat(R"(graph @g {
  input %x: bf16[2,3,4,128]
  input %positions: i32[2,3]
  %y: bf16[2,3,4,128] = rope(%x, %positions) )",
                           attrs, R"(
  output %y
})");
    c.family = "rope_kv_write";
    c.ints["positions"] = {0, 1, 2, 7000, 30000, 131071};
    c.tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 16}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// Interleaved pairs (x[2i], x[2i+1]) and yarn (its blended frequencies and the attention
// factor 1.1 on cos and sin), alone and together, at head dims 4, 8 and 64 (one lane, a few
// lanes, and vectors of pairs per lane), in bf16 and f32; the rope may write over its input.
std::vector<Case> RopeInterleavedAndYarnCases() {
  std::vector<Case> cases;
  const std::string yarn_interleaved = absl::StrCat(kYarnRope, ", interleaved = true");
  const std::string default_interleaved =
      R"(interleaved = true, rope_type = "default", theta = 10000.0)";
  for (int dim : {4, 8, 64}) {
    for (const std::string& attrs :
         {yarn_interleaved, std::string(kYarnRope), default_interleaved}) {
      for (const char* dtype : {"bf16", "f32"}) {
        const std::string x = absl::StrCat(dtype, "[2,3,3,", dim, "]");
        Case c;
        c.graph =
            absl::StrCat("graph @g {\n  input %x: ", x, "\n  input %positions: i32[2,3]\n  %y: ", x,
                         " = rope(%x, %positions) {", attrs, "}\n  output %y\n}\n");
        c.family = "rope_kv_write";
        c.ints["positions"] = {0, 1, 2, 4095, 30000, 131071};
        c.tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 4}}};
        c.result_over_operand = dim == 64 ? 0 : -1;
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

// The RoPE of DeepSeek-V2's latent attention as lowered: yarn, interleaved, on q_pe (the last
// 64 of each head's 192 dims, a view with strided heads at an offset) and on k_pe (the last
// 64 of the 576-wide kv_a row, one head).
std::vector<Case> RopeOfLatentAttentionViewsCases() {
  const std::string attrs = absl::StrCat(kYarnRope, ", interleaved = true");
  return {
      Case{.graph = absl::StrCat(R"(graph @g {
  input %q: bf16[2,3,16,192]
  input %positions: i32[2,3]
  %q_nope: bf16[2,3,16,128] view(%q), %q_pe: bf16[2,3,16,64] view(%q) = split(%q) {sizes = [128, 64]}
  %q_rope: bf16[2,3,16,64] = rope(%q_pe, %positions) {)",
                                 attrs, R"(}
  output %q_rope
})"),
           .family = "rope_kv_write",
           .ints = {{"positions", {0, 1, 2, 500, 501, 4100}}},
           .tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 8}}}},
      Case{.graph = absl::StrCat(R"(graph @g {
  input %kv_a: bf16[2,3,576]
  input %positions: i32[2,3]
  %latent: bf16[2,3,512] view(%kv_a), %k_pe: bf16[2,3,64] view(%kv_a) = split(%kv_a) {sizes = [512, 64]}
  %k_heads: bf16[2,3,1,64] view(%k_pe) = reshape(%k_pe)
  %k_rope: bf16[2,3,1,64] = rope(%k_heads, %positions) {)",
                                 attrs, R"(}
  output %k_rope
})"),
           .family = "rope_kv_write",
           .ints = {{"positions", {7, 8, 9, 0, 63, 20000}}},
           .tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 2}}}},
  };
}

// The fused RoPE + KV-write kinds with interleaved yarn RoPE (rotated q, rotated k rows).
std::vector<Case> FusedRopeKvWriteYarnInterleavedCases() {
  const std::string attrs = absl::StrCat(kYarnRope, ", interleaved = true");
  return {
      Case{.graph = absl::StrCat(R"(graph @g {
  input %qkv: bf16[2,3,512]
  input %k_cache: bf16[2,2,16,64]
  input %v_cache: bf16[2,2,16,64]
  input %positions: i32[2,3]
  %q: bf16[2,3,4,64], %k: bf16[2,2,16,64] inplace(%k_cache), %v: bf16[2,2,16,64] inplace(%v_cache) = rope_kv_write(%qkv, %k_cache, %v_cache, %positions) {num_heads = 4, num_kv_heads = 2, )",
                                 attrs, R"(}
  output %q
  output %k
  output %v
})"),
           .family = "rope_kv_write",
           .ints = {{"positions", {3, 4, 5, 13, 14, 15}}},
           .tactics = {{{"heads_per_cta", 2}}, {{"heads_per_cta", 8}}}},
      Case{.graph = absl::StrCat(R"(graph @g {
  input %qkv: f32[1,2,768]
  weight %q_norm: f32[64] = "q_norm"
  weight %k_norm: f32[64] = "k_norm"
  input %k_cache: f32[1,2,32,64]
  input %v_cache: f32[1,2,32,64]
  input %positions: i32[1,2]
  %q: f32[1,2,8,64], %k: f32[1,2,32,64] inplace(%k_cache), %v: f32[1,2,32,64] inplace(%v_cache) = qk_norm_rope_kv_write(%qkv, %q_norm, %k_norm, %k_cache, %v_cache, %positions) {eps = 1e-06, num_heads = 8, num_kv_heads = 2, )",
                                 attrs, R"(}
  output %q
  output %k
  output %v
})"),
           .family = "rope_kv_write",
           .ints = {{"positions", {30, 31}}},
           .tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 4}}}},
  };
}

// mla_kv_write: DeepSeek-V2's geometry (latent 512, interleaved yarn rope key 64) on a view of
// the packed q / kv_a projection, and an f32 latent of 96 (a lane's last vector past its end)
// with a rotate-half key of 32.
std::vector<Case> MlaKvWriteCases() {
  const std::string attrs = absl::StrCat(kYarnRope, ", interleaved = true");
  return {
      Case{.graph = absl::StrCat(R"(graph @g {
  input %q_kv_a: bf16[2,3,3648]
  weight %norm: bf16[512] = "kv_a_layernorm"
  input %latent_cache: bf16[2,1,40,512]
  input %rope_cache: bf16[2,1,40,64]
  input %positions: i32[2,3]
  %q: bf16[2,3,3072] view(%q_kv_a), %kv_a: bf16[2,3,576] view(%q_kv_a) = split(%q_kv_a) {sizes = [3072, 576]}
  %lc: bf16[2,1,40,512] inplace(%latent_cache), %rc: bf16[2,1,40,64] inplace(%rope_cache) = mla_kv_write(%kv_a, %norm, %latent_cache, %rope_cache, %positions) {eps = 1e-06, )",
                                 attrs, R"(}
  output %lc
  output %rc
})"),
           .family = "rope_kv_write",
           .ints = {{"positions", {5, 6, 7, 0, 39, 20}}},
           .tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 2}}, {{"heads_per_cta", 8}}}},
      Case{.graph = R"(graph @g {
  input %kv_a: f32[1,5,128]
  weight %norm: f32[96] = "kv_a_layernorm"
  input %latent_cache: f32[1,1,8,96]
  input %rope_cache: f32[1,1,8,32]
  input %positions: i32[1,5]
  %lc: f32[1,1,8,96] inplace(%latent_cache), %rc: f32[1,1,8,32] inplace(%rope_cache) = mla_kv_write(%kv_a, %norm, %latent_cache, %rope_cache, %positions) {eps = 1e-05, rope_type = "default", theta = 10000.0}
  output %lc
  output %rc
})",
           .family = "rope_kv_write",
           .ints = {{"positions", {0, 1, 2, 3, 7}}},
           .tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 4}}}},
  };
}

std::vector<Case> QkNormRopeKvWriteCases() {
  std::vector<Case> cases;
  for (int dim : {64, 128}) {
    Case c;
    const int row = (8 + 2 * 2) * dim;
    c.graph = absl::StrCat(
        R"(graph @g {
  input %qkv: bf16[1,2,)",
        row, R"(]
  weight %q_norm: bf16[)",
        dim, R"(] = "q_norm"
  weight %k_norm: bf16[)",
        dim, R"(] = "k_norm"
  input %k_cache: bf16[1,2,32,)",
        dim, R"(]
  input %v_cache: bf16[1,2,32,)",
        dim, R"(]
  input %positions: i32[1,2]
  %q: bf16[1,2,8,)",
        dim, R"(], %k: bf16[1,2,32,)", dim, R"(] inplace(%k_cache), %v: bf16[1,2,32,)", dim,
        R"(] inplace(%v_cache) = qk_norm_rope_kv_write(%qkv, %q_norm, %k_norm, %k_cache, %v_cache, %positions) {eps = 1e-06, num_heads = 8, num_kv_heads = 2, rope_type = "default", theta = 1000000.0}
  output %q
  output %k
  output %v
})");
    c.family = "rope_kv_write";
    c.ints["positions"] = {30, 31};
    c.tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

std::vector<CaseGroup> RopeKvWriteCaseGroups() {
  return {
      {"RopeDefaultAndLlama3", RopeDefaultAndLlama3Cases()},
      {"KvWriteOfAView",
       {Case{.graph = R"(graph @g {
  input %cache: bf16[2,2,40,64]
  input %kv: bf16[2,3,256]
  input %positions: i32[2,3]
  %k: bf16[2,3,128] view(%kv), %v: bf16[2,3,128] view(%kv) = split(%kv) {sizes = [128, 128]}
  %kh: bf16[2,3,2,64] view(%k) = reshape(%k)
  %out: bf16[2,2,40,64] inplace(%cache) = kv_write(%cache, %kh, %positions)
  output %out
})",
             .family = "rope_kv_write",
             .ints = {{"positions", {5, 6, 7, 0, 39, 20}}},
             .tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 4}}}}}},
      {"RopeKvWriteGqa",
       {Case{.graph = R"(graph @g {
  input %qkv: bf16[2,3,512]
  input %k_cache: bf16[2,2,16,64]
  input %v_cache: bf16[2,2,16,64]
  input %positions: i32[2,3]
  %q: bf16[2,3,4,64], %k: bf16[2,2,16,64] inplace(%k_cache), %v: bf16[2,2,16,64] inplace(%v_cache) = rope_kv_write(%qkv, %k_cache, %v_cache, %positions) {num_heads = 4, num_kv_heads = 2, rope_type = "default", theta = 10000.0}
  output %q
  output %k
  output %v
})",
             .family = "rope_kv_write",
             .ints = {{"positions", {3, 4, 5, 13, 14, 15}}},
             .tactics = {{{"heads_per_cta", 2}}, {{"heads_per_cta", 8}}}}}},
      {"QkNormRopeKvWrite", QkNormRopeKvWriteCases()},
      {"RopeInterleavedAndYarn", RopeInterleavedAndYarnCases()},
      {"RopeOfLatentAttentionViews", RopeOfLatentAttentionViewsCases()},
      {"FusedRopeKvWriteYarnInterleaved", FusedRopeKvWriteYarnInterleavedCases()},
      {"MlaKvWrite", MlaKvWriteCases()},
  };
}

}  // namespace tileplan::kernels::testing
