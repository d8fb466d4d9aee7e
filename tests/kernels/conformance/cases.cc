#include "tests/kernels/conformance/cases.h"

#include <utility>
#include <vector>

namespace tileplan::kernels::testing {

std::vector<CaseGroup> AllCaseGroups() {
  std::vector<CaseGroup> all;
  for (std::vector<CaseGroup> (*family)() :
       {&EmbeddingGatherCaseGroups, &RmsNormCaseGroups, &ElementwiseCaseGroups, &GemvCaseGroups,
        &RopeKvWriteCaseGroups, &AttentionCaseGroups, &MlaAttentionCaseGroups, &ArgmaxCaseGroups,
        &CublasLtGemmCaseGroups, &MoeCaseGroups, &MoeFusedCaseGroups}) {
    for (CaseGroup& group : family()) all.push_back(std::move(group));
  }
  return all;
}

}  // namespace tileplan::kernels::testing
