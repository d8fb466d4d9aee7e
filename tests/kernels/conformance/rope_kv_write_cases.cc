// Conformance cases of rope_kv_write (tests/kernels/gpu_harness.h).
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

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
  };
}

}  // namespace tileplan::kernels::testing
