// The conformance cases of the kernel families (tests/kernels/gpu_harness.h, "How to add
// cases"): one table per family, each in conformance/<family>_cases.cc.
#ifndef TILEPLAN_TESTS_KERNELS_CONFORMANCE_CASES_H_
#define TILEPLAN_TESTS_KERNELS_CONFORMANCE_CASES_H_

#include <string>
#include <vector>

#include "tests/kernels/gpu_harness.h"

namespace tileplan::kernels::testing {

std::vector<CaseGroup> EmbeddingGatherCaseGroups();
std::vector<CaseGroup> RmsNormCaseGroups();
std::vector<CaseGroup> ElementwiseCaseGroups();
std::vector<CaseGroup> GemvCaseGroups();
std::vector<CaseGroup> RopeKvWriteCaseGroups();
// attention_decode and attention_prefill (kernels/families/attention/).
std::vector<CaseGroup> AttentionCaseGroups();
std::vector<CaseGroup> MlaAttentionCaseGroups();
std::vector<CaseGroup> ArgmaxCaseGroups();
std::vector<CaseGroup> CublasLtGemmCaseGroups();
// moe_routing and expert_gemv (kernels/families/moe/), and elementwise's moe_combine.
std::vector<CaseGroup> MoeCaseGroups();
// moe_gemv (kernels/families/moe_fused/): the fused moe kind.
std::vector<CaseGroup> MoeFusedCaseGroups();
// wgmma_gemm (sm_90 only: its groups skip on other GPUs).
std::vector<CaseGroup> WgmmaGemmCaseGroups();

// Every family's groups, in the order above.
std::vector<CaseGroup> AllCaseGroups();

// One region of qk_norm_rope_kv_write_attention (`norms`) or rope_kv_write_attention: `batch`
// sequences of `tokens` new tokens, `q_heads` and `kv_heads` heads of `dim`, a cache of
// `capacity` rows. With `pad` > 0 the qkv rows are a view of wider rows (`pad` more
// elements per token), so the token stride differs from the row width. Outputs: the
// attention result and both caches whole (the new rows and every row left alone).
std::string RopeAttentionGraph(bool norms, int batch, int tokens, int q_heads, int kv_heads,
                               int capacity, int dim, const std::string& dtype, int window,
                               const std::string& rope, int pad = 0);

// Graphs the GEMM families share (cublaslt_gemm, wgmma_gemm): linear over x [m, k] and
// w [n, k] (both of `dtype`), with a bias [n] if `bias`; linear_residual with bias over
// [2, 64, 136] x [200, 136], whose result the case writes over the residual (operand 2); and
// linear_swiglu with bias over [3, 50, 136] x [400, 136].
std::string LinearGraph(int m, int k, int n, bool bias, const char* dtype = "bf16");
std::string LinearResidualInPlaceGraph();
std::string LinearSwigluWithBiasGraph();

// The RoPE attributes of Qwen's models (`rope` above).
inline constexpr char kQwenRope[] = R"(rope_type = "default", theta = 1000000.0)";

}  // namespace tileplan::kernels::testing

#endif  // TILEPLAN_TESTS_KERNELS_CONFORMANCE_CASES_H_
