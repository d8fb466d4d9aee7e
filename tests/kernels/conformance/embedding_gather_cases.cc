// Conformance cases of embedding_gather (tests/kernels/gpu_harness.h).
#include <vector>

#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {

std::vector<CaseGroup> EmbeddingGatherCaseGroups() {
  return {
      {"EmbeddingGather",
       {Case{.graph = R"(graph @g {
  input %ids: i32[3,5]
  weight %table: bf16[1000,72] = "table"
  %out: bf16[3,5,72] = embedding(%ids, %table)
  output %out
})",
             .family = "embedding_gather",
             .ints = {{"ids", {0, 999, 5, 17, 17, 300, 1, 2, 998, 41, 512, 7, 0, 64, 3}}},
             .tactics = {{{"threads", 64}, {"tokens_per_cta", 4}, {"vec", 8}},
                         {{"threads", 32}, {"tokens_per_cta", 8}, {"vec", 2}}}}}},
  };
}

}  // namespace tileplan::kernels::testing
