// Conformance cases of argmax (tests/kernels/gpu_harness.h).
#include <vector>

#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {

std::vector<CaseGroup> ArgmaxCaseGroups() {
  return {
      {"ArgmaxOddVocab",
       {Case{.graph = R"(graph @g {
  input %logits: f32[3,1,1001]
  %next: i32[3,1] = argmax(%logits)
  output %next
})",
             .family = "argmax",
             .tactics = {{{"splits", 1}, {"threads", 256}},
                         {{"splits", 4}, {"threads", 512}},
                         {{"splits", 64}, {"threads", 1024}}}}}},
  };
}

}  // namespace tileplan::kernels::testing
