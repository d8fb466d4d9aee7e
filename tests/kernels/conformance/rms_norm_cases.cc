// Conformance cases of rms_norm: rms_norm and add_rms_norm (tests/kernels/gpu_harness.h).
#include <vector>

#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {

std::vector<CaseGroup> RmsNormCaseGroups() {
  return {
      {"RmsNormOddRows",
       {Case{.graph = R"(graph @g {
  input %x: bf16[5,3,200]
  weight %w: bf16[200] = "w"
  %y: bf16[5,3,200] = rms_norm(%x, %w) {eps = 1e-06}
  output %y
})",
             .family = "rms_norm",
             .tactics = {{{"row_threads", 32}, {"rows_per_cta", 4}, {"vec", 8}},
                         {{"row_threads", 256}, {"rows_per_cta", 1}, {"vec", 4}},
                         {{"row_threads", 64}, {"rows_per_cta", 2}, {"vec", 1}}}}}},
      {"RmsNormLongRowsReadAgain",
       {Case{.graph = R"(graph @g {
  input %x: f32[3,4096]
  weight %w: f32[4096] = "w"
  %y: f32[3,4096] = rms_norm(%x, %w) {eps = 1e-05}
  output %y
})",
             .family = "rms_norm",
             .tactics = {{{"row_threads", 32}, {"rows_per_cta", 2}, {"vec", 4}},
                         {{"row_threads", 1024}, {"rows_per_cta", 1}, {"vec", 4}}}}}},
      {"RmsNormPerHeadOfAPackedView",
       {Case{.graph = R"(graph @g {
  input %qkv: bf16[2,3,256]
  weight %w: bf16[64] = "w"
  %q: bf16[2,3,128] view(%qkv), %kv: bf16[2,3,128] view(%qkv) = split(%qkv) {sizes = [128, 128]}
  %heads: bf16[2,3,2,64] view(%q) = reshape(%q)
  %y: bf16[2,3,2,64] = rms_norm(%heads, %w) {eps = 1e-06}
  output %y
})",
             .family = "rms_norm",
             .tactics = {{{"row_threads", 32}, {"rows_per_cta", 8}, {"vec", 8}}}}}},
      {"AddRmsNorm",
       {Case{.graph = R"(graph @g {
  input %a: bf16[4,200]
  input %b: bf16[4,200]
  weight %w: bf16[200] = "w"
  %sum: bf16[4,200], %y: bf16[4,200] = add_rms_norm(%a, %b, %w) {eps = 1e-06}
  output %sum
  output %y
})",
             .family = "rms_norm",
             .tactics = {{{"row_threads", 32}, {"rows_per_cta", 4}, {"vec", 8}},
                         {{"row_threads", 128}, {"rows_per_cta", 1}, {"vec", 2}}}}}},
  };
}

}  // namespace tileplan::kernels::testing
