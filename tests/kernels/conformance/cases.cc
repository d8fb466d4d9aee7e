#include "tests/kernels/conformance/cases.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tileplan::kernels::testing {

std::string LinearGraph(int m, int k, int n, bool bias, const char* dtype) {
  return absl::StrCat("graph @g {\n  input %x: ", dtype, "[", m, ",", k, "]\n  weight %w: ", dtype,
                      "[", n, ",", k, "] = \"w\"\n",
                      bias ? absl::StrCat("  weight %b: ", dtype, "[", n, "] = \"b\"\n") : "",
                      "  %y: ", dtype, "[", m, ",", n, "] = linear(%x, %w", bias ? ", %b" : "",
                      ")\n  output %y\n}\n");
}

std::string LinearResidualInPlaceGraph() {
  return R"(graph @g {
  input %x: bf16[2,64,136]
  weight %w: bf16[200,136] = "w"
  input %r: bf16[2,64,200]
  weight %b: bf16[200] = "b"
  %y: bf16[2,64,200] = linear_residual(%x, %w, %r, %b)
  output %y
})";
}

std::string LinearSwigluWithBiasGraph() {
  return R"(graph @g {
  input %x: bf16[3,50,136]
  weight %w: bf16[400,136] = "w"
  weight %b: bf16[400] = "b"
  %y: bf16[3,50,200] = linear_swiglu(%x, %w, %b)
  output %y
})";
}

std::vector<CaseGroup> AllCaseGroups() {
  std::vector<CaseGroup> all;
  for (std::vector<CaseGroup> (*family)() :
       {&EmbeddingGatherCaseGroups, &RmsNormCaseGroups, &ElementwiseCaseGroups, &GemvCaseGroups,
        &RopeKvWriteCaseGroups, &AttentionCaseGroups, &MlaAttentionCaseGroups, &ArgmaxCaseGroups,
        &CublasLtGemmCaseGroups, &MoeCaseGroups, &MoeFusedCaseGroups, &WgmmaGemmCaseGroups}) {
    for (CaseGroup& group : family()) all.push_back(std::move(group));
  }
  return all;
}

}  // namespace tileplan::kernels::testing
