// Conformance cases of cublaslt_gemm (tests/kernels/gpu_harness.h), launched by cuBLASLt under
// the target's default tactic (the heuristic's algo): linear with and without bias for M in
// {1, 7, 128, 300}, odd N and K a multiple of 8, f16, a strided view as x; linear_residual,
// also written over its residual (C == D); linear_swiglu with bias (its [M, 2F] workspace);
// lm_head's and moe_router's float logits, and moe_router's logits rounded to bf16. One case per
// group, so that each is its own test.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

// The group `name` (prefixed with CublasLt: the template families have groups of the same
// kinds) of the one case `graph`.
CaseGroup Group(const std::string& name, std::string graph, int result_over_operand = -1) {
  Case c;
  c.graph = std::move(graph);
  c.family = "cublaslt_gemm";
  c.result_over_operand = result_over_operand;
  return {absl::StrCat("CublasLt", name), {std::move(c)}};
}

}  // namespace

std::vector<CaseGroup> CublasLtGemmCaseGroups() {
  std::vector<CaseGroup> groups;
  for (int m : {1, 7, 128, 300}) {
    for (bool bias : {false, true}) {
      groups.push_back(
          Group(absl::StrCat("Linear", bias ? "Bias" : "", "M", m), LinearGraph(m, 136, 200, bias)));
    }
  }
  groups.push_back(Group("LinearF16", LinearGraph(33, 136, 200, true, "f16")));
  groups.push_back(Group("LinearOfAStridedView", R"(graph @g {
  input %xx: bf16[2,9,200]
  weight %w: bf16[200,136] = "w"
  %a: bf16[2,9,64] view(%xx), %x: bf16[2,9,136] view(%xx) = split(%xx) {sizes = [64, 136]}
  %y: bf16[2,9,200] = linear(%x, %w)
  output %y
})"));
  // The result over its residual (operand 2).
  groups.push_back(Group("LinearResidualInPlace", LinearResidualInPlaceGraph(), 2));
  groups.push_back(Group("LinearResidual", R"(graph @g {
  input %x: bf16[7,136]
  weight %w: bf16[200,136] = "w"
  input %r: bf16[7,200]
  %y: bf16[7,200] = linear_residual(%x, %w, %r)
  output %y
})"));
  groups.push_back(Group("LinearSwigluWithBias", LinearSwigluWithBiasGraph()));
  groups.push_back(Group("LmHeadFloatLogits", R"(graph @g {
  input %x: bf16[1,5,136]
  weight %w: bf16[1001,136] = "w"
  %y: f32[1,5,1001] = lm_head(%x, %w)
  output %y
})"));
  groups.push_back(Group("MoeRouterFloatLogits", R"(graph @g {
  input %x: bf16[1,17,136]
  weight %w: bf16[64,136] = "w"
  %y: f32[1,17,64] = moe_router(%x, %w)
  output %y
})"));
  groups.push_back(Group("MoeRouterRoundedLogits", R"(graph @g {
  input %x: bf16[1,33,256]
  weight %w: bf16[128,256] = "w"
  %y: bf16[1,33,128] = moe_router(%x, %w)
  output %y
})"));
  return groups;
}

}  // namespace tileplan::kernels::testing
