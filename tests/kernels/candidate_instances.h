// Candidate tactics of the CUDA-template families for the typical regions
// (testdata/typical_regions.tpir) at a few shape buckets on the bundled targets of each
// architecture row. Shared by the NVRTC compile test and the launch-preparation test.
#ifndef TILEPLAN_TESTS_KERNELS_CANDIDATE_INSTANCES_H_
#define TILEPLAN_TESTS_KERNELS_CANDIDATE_INSTANCES_H_

#include <memory>
#include <string>
#include <vector>

#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "regions/ir.h"

namespace tileplan::kernels::testing {

// One candidate: a region of a bound graph, its family and tactic, and the target whose
// table listed it.
struct Candidate {
  int bound_graph = 0;  // index into CandidateSet::bound_graphs
  int region = 0;
  const KernelFamily* family = nullptr;
  Tactic tactic;
  std::string target;
};

struct CandidateSet {
  std::unique_ptr<ir::Graph> graph;
  std::vector<BoundGraph> bound_graphs;
  std::vector<Candidate> candidates;
};

enum class Coverage {
  // Every row default and every combination of the tunables the family validates: the
  // tuner's whole search space.
  kFullProduct,
  // Every row default of every target for every region, and every value of every tunable
  // varied alone from the sm_90 (h200) default of the family's first region in each shape
  // bucket (when the family validates it), and likewise of its first norm-prologue region
  // (rms_norm_linear, rms_norm_linear_swiglu: gemv's other code path): each template,
  // dtype, epilogue and parameter value at least once, without the product.
  kEachValue,
};

// The shape buckets: decode with B = 1 and B = 16 (the gemv row bounds 1 and 16), and a
// 128-token prefill, all with Smax = 4096.
CandidateSet TypicalCandidates(Coverage coverage);

// Bundled targets, one per architecture row: a100 (sm_80), h200 (sm_90), b200 (sm_100),
// rtx-pro-6000 (sm_120).
std::vector<std::string> RowTargets();

}  // namespace tileplan::kernels::testing

#endif  // TILEPLAN_TESTS_KERNELS_CANDIDATE_INSTANCES_H_
