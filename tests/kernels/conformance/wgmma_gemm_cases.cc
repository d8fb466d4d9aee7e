// Conformance cases of wgmma_gemm (tests/kernels/gpu_harness.h), sm_90 only: linear with and
// without bias at M 64 and 300 (a partial row tile), N 200 and K 136 (partial column tiles and
// a partial last K slice), f16, x a strided view; a deeper K (1024: the ring of stages wraps
// many times) at M 512; linear_residual with bias and written over its residual (C == D);
// linear_swiglu with bias (gate and up rows of one tile, a partial tile of F = 200). Every case
// runs under tactics covering both loads (cp.async by every thread, TMA by a producer warp),
// both tile heights, every tile width, 3 to 6 stages, and K split among clusters of 2 to 8
// CTAs (with K 136, CTAs of a cluster of 4 or 8 that have no slice of K to sum).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/kernels/conformance/cases.h"

namespace tileplan::kernels::testing {
namespace {

const std::vector<Params> kWgmmaTactics = {
    {{"loads", 0}, {"split_k", 1}, {"stages", 3}, {"tile_m", 64}, {"tile_n", 64}},
    {{"loads", 0}, {"split_k", 1}, {"stages", 4}, {"tile_m", 128}, {"tile_n", 128}},
    {{"loads", 0}, {"split_k", 1}, {"stages", 5}, {"tile_m", 128}, {"tile_n", 192}},
    {{"loads", 0}, {"split_k", 1}, {"stages", 3}, {"tile_m", 64}, {"tile_n", 256}},
    {{"loads", 0}, {"split_k", 1}, {"stages", 4}, {"tile_m", 128}, {"tile_n", 256}},
    {{"loads", 0}, {"split_k", 1}, {"stages", 6}, {"tile_m", 128}, {"tile_n", 64}},
    {{"loads", 1}, {"split_k", 1}, {"stages", 3}, {"tile_m", 64}, {"tile_n", 64}},
    {{"loads", 1}, {"split_k", 1}, {"stages", 4}, {"tile_m", 128}, {"tile_n", 128}},
    {{"loads", 1}, {"split_k", 1}, {"stages", 5}, {"tile_m", 128}, {"tile_n", 192}},
    {{"loads", 1}, {"split_k", 1}, {"stages", 3}, {"tile_m", 64}, {"tile_n", 256}},
    {{"loads", 1}, {"split_k", 1}, {"stages", 4}, {"tile_m", 128}, {"tile_n", 256}},
    {{"loads", 1}, {"split_k", 1}, {"stages", 6}, {"tile_m", 128}, {"tile_n", 64}},
    {{"loads", 1}, {"split_k", 2}, {"stages", 4}, {"tile_m", 128}, {"tile_n", 128}},
    {{"loads", 1}, {"split_k", 4}, {"stages", 3}, {"tile_m", 64}, {"tile_n", 256}},
    {{"loads", 1}, {"split_k", 4}, {"stages", 4}, {"tile_m", 128}, {"tile_n", 256}},
    {{"loads", 1}, {"split_k", 8}, {"stages", 3}, {"tile_m", 64}, {"tile_n", 64}},
};

CaseGroup Group(const std::string& name, std::string graph, int result_over_operand = -1) {
  Case c;
  c.graph = std::move(graph);
  c.family = "wgmma_gemm";
  c.tactics = kWgmmaTactics;
  c.result_over_operand = result_over_operand;
  c.sm = 90;
  return {absl::StrCat("Wgmma", name), {std::move(c)}};
}

}  // namespace

std::vector<CaseGroup> WgmmaGemmCaseGroups() {
  std::vector<CaseGroup> groups;
  for (int m : {64, 300}) {
    for (bool bias : {false, true}) {
      groups.push_back(Group(absl::StrCat("Linear", bias ? "Bias" : "", "M", m),
                             LinearGraph(m, 136, 200, bias)));
    }
  }
  groups.push_back(Group("LinearDeepK", LinearGraph(512, 1024, 384, false)));
  groups.push_back(Group("LinearF16", LinearGraph(130, 136, 200, true, "f16")));
  groups.push_back(Group("LinearOfAStridedView", R"(graph @g {
  input %xx: bf16[2,40,200]
  weight %w: bf16[200,136] = "w"
  %a: bf16[2,40,64] view(%xx), %x: bf16[2,40,136] view(%xx) = split(%xx) {sizes = [64, 136]}
  %y: bf16[2,40,200] = linear(%x, %w)
  output %y
})"));
  groups.push_back(Group("LinearResidualInPlace", LinearResidualInPlaceGraph(), 2));
  groups.push_back(Group("LinearResidual", R"(graph @g {
  input %x: bf16[100,264]
  weight %w: bf16[200,264] = "w"
  input %r: bf16[100,200]
  %y: bf16[100,200] = linear_residual(%x, %w, %r)
  output %y
})"));
  groups.push_back(Group("LinearSwigluWithBias", LinearSwigluWithBiasGraph()));
  groups.push_back(Group("LinearSwigluDeepK", R"(graph @g {
  input %x: bf16[256,1024]
  weight %w: bf16[768,1024] = "w"
  %y: bf16[256,384] = linear_swiglu(%x, %w)
  output %y
})"));
  return groups;
}

}  // namespace tileplan::kernels::testing
