// Conformance cases of elementwise (tests/kernels/gpu_harness.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

std::vector<Case> MulAndSiluOddWidthCases() {
  std::vector<Case> cases;
  for (const char* op : {"mul", "silu"}) {
    Case c;
    const bool binary = std::string(op) == "mul";
    c.graph = absl::StrCat(R"(graph @g {
  input %a: f32[7,37]
  input %b: f32[7,37]
  %y: f32[7,37] = )",
                           op, binary ? "(%a, %b)" : "(%a)", R"(
  output %y
})");
    c.family = "elementwise";
    c.tactics = {{{"items", 4}, {"threads", 128}, {"vec", 1}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

std::vector<CaseGroup> ElementwiseCaseGroups() {
  return {
      {"AddOfSplitViews",
       {Case{.graph = R"(graph @g {
  input %x: bf16[3,5,96]
  %a: bf16[3,5,48] view(%x), %b: bf16[3,5,48] view(%x) = split(%x) {sizes = [48, 48]}
  %y: bf16[3,5,48] = add(%a, %b)
  output %y
})",
             .family = "elementwise",
             .tactics = {{{"items", 1}, {"threads", 128}, {"vec", 8}},
                         {{"items", 8}, {"threads", 512}, {"vec", 2}}}}}},
      {"MulAndSiluOddWidth", MulAndSiluOddWidthCases()},
      {"Swiglu",
       {Case{.graph = R"(graph @g {
  input %x: bf16[2,3,400]
  %y: bf16[2,3,200] = swiglu(%x)
  output %y
})",
             .family = "elementwise",
             .tactics = {{{"items", 2}, {"threads", 128}, {"vec", 4}}}}}},
  };
}

}  // namespace tileplan::kernels::testing
