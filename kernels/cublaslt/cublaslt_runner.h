// The launch half of the cublaslt_gemm family (docs/kernels.md, `cublaslt_gemm`): linear,
// linear_residual, linear_swiglu, lm_head and moe_router through cuBLASLt (linked
// dynamically, libcublasLt.so.13; never the driver library).
//
// Row-major x [M, K] (leading dim from its layout, so x may be a strided view) and w [N, K]
// become cuBLASLt's column-major Dᵀ = W · xᵀ: A = w (column-major [K, N], transa = T),
// B = x (column-major [K, M]), C and D column-major [N, M]; cuBLASLt's (m, n, k) is
// (N, M, K). Compute type and scale type are 32F; x and w are bf16 or f16 of one dtype.
//   linear           D = x · wᵀ (+ bias through CUBLASLT_EPILOGUE_BIAS)
//   linear_residual  D = x · wᵀ (+ bias) + residual: the residual is C with β = 1; C and D
//                    may be one buffer
//   linear_swiglu    the GEMM writes [M, 2F] into RegionBuffers::workspace (gate columns
//                    [0, F), up columns [F, 2F): the packed weight's gate rows then up rows),
//                    then the elementwise family's swiglu kernel writes the result
//   lm_head          float32 D from 16-bit x and w
//   moe_router       the MoE router's logits: as lm_head
//
// Algo resolution (Prepare), by the tactic's form (kernels/cublaslt_gemm.cc):
//   raw config  (tile_id and the other raw fields): cublasLtMatmulAlgoInit of algo_id, then
//               every configuration field set exactly as the tactic has it (tile, stages,
//               split-K, reduction scheme, CTA swizzling, custom option, inner shape and
//               cluster shape ids); cublasLtMatmulAlgoCheck must accept it, else
//               FailedPrecondition naming the region, the config and the problem. Never a
//               fallback to the heuristic;
//   algo_id     that algo configured with the tactic's tile, split-K, reduction scheme and
//               CTA swizzling and the first of its stage ids of `stages` stages (else of its
//               xAUTO depths) that cublasLtMatmulAlgoCheck accepts, else InvalidArgument;
//   default     cuBLASLt's top heuristic answer for the exact problem (shapes, leading dims,
//               dtypes, epilogue, alignments) within the runner's workspace; the tactic's
//               other parameters are then only the cost model's assumption.
// Candidates lists the heuristic's answers as raw configs, which is how the tuner measures
// more than its top pick.
#ifndef TILEPLAN_KERNELS_CUBLASLT_CUBLASLT_RUNNER_H_
#define TILEPLAN_KERNELS_CUBLASLT_CUBLASLT_RUNNER_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/families/cublaslt_gemm/cublaslt_config.h"
#include "kernels/launch/kernel_loader.h"
#include "kernels/launch/library_launcher.h"

namespace tileplan::kernels {

// One operand of the GEMM in row-major terms: `rows` rows of `cols` contiguous elements,
// `ld` elements apart.
struct GemmMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  // The alignment in bytes the GEMM may assume for the operand's first element: the
  // largest power of two <= 256 dividing its byte offset in its root (roots are 256-byte
  // aligned), 16 for the workspace (RegionBuffers' contract). Launch checks it.
  int64_t alignment = 0;
};

// What cuBLASLt is asked for a region, derived from the bound region alone (no device).
struct GemmProblem {
  std::string kind;
  int64_t m = 0;  // rows of x
  int64_t n = 0;  // rows of w: the GEMM's output columns (2F for linear_swiglu)
  int64_t k = 0;
  ir::DType input_dtype = ir::DType::kBF16;   // x and w
  ir::DType output_dtype = ir::DType::kBF16;  // D (f32 for lm_head and moe_router)
  GemmMatrix x, w, d;
  std::optional<GemmMatrix> residual;  // linear_residual: C, with β = 1
  int bias_operand = -1;               // the bias operand's index, -1 when there is none
  int64_t bias_alignment = 0;
  // linear_swiglu: D is the workspace ([m, n], ld n) and the result is [m, n / 2].
  bool swiglu = false;
};

// The problem of a linear, linear_residual, linear_swiglu, lm_head or moe_router region.
// Errors name the region: InvalidArgument for another kind or an operand that is not one
// matrix with a leading dimension and a contiguous last dim; FailedPrecondition for dtypes
// cuBLASLt is not asked to run here (x and w must be bf16 or f16 of one dtype; f32
// activations are refused rather than run in TF32).
absl::StatusOr<GemmProblem> GemmProblemFor(const BoundRegion& region);

// The algo a PreparedGemm runs, as read back from cuBLASLt: its id and every configuration
// field (kernels/cublaslt_config.h names the ids).
struct ResolvedAlgo {
  bool from_heuristic = false;
  int32_t algo_id = -1;
  uint32_t tile_id = 0;    // cublasLtMatmulTile_t
  uint32_t stages_id = 0;  // cublasLtMatmulStages_t
  int32_t split_k = 1;
  uint32_t reduction_scheme = 0;  // cublasLtReductionScheme_t
  uint32_t swizzle = 0;
  uint32_t custom_option = 0;
  uint16_t inner_shape_id = 0;    // cublasLtMatmulInnerShape_t
  uint16_t cluster_shape_id = 0;  // cublasLtClusterShape_t
  int64_t workspace_bytes = 0;    // cuBLASLt's own workspace need (within the runner's)
};

// `base` (a cublaslt_gemm tactic, normally the region's default) as the raw config of
// `algo`: algo_id and every configuration field, stages the stage count of its stages id,
// and tile_m / tile_n the tile's size in row-major terms (kept from `base` when the algo
// has no tile id).
Tactic ConfigTactic(const ResolvedAlgo& algo, const Tactic& base);

// Everything host-side about one region under one tactic: the matmul descriptor, the
// layouts, the epilogue, the resolved algo and, for linear_swiglu, the loaded swiglu
// kernel. Lives no longer than the runner that prepared it; not thread-safe (Launch
// writes the bias pointer into the descriptor).
class PreparedGemm {
 public:
  ~PreparedGemm();
  PreparedGemm(const PreparedGemm&) = delete;
  PreparedGemm& operator=(const PreparedGemm&) = delete;

  const GemmProblem& problem() const { return problem_; }
  const ResolvedAlgo& algo() const { return algo_; }
  // "region #3 'linear' (%y): cuBLASLt algo 66 (heuristic), tile 128x256, stages 64x4,
  // split_k 1, reduction none, swizzle 0, custom option 0, inner shape 0, cluster shape 2,
  // workspace 0 bytes[, then <swiglu instance> (<its tactic>)]".
  std::string Describe() const;

 private:
  friend class CublasLtRunner;
  PreparedGemm() = default;

  std::string label_;
  GemmProblem problem_;
  ResolvedAlgo algo_;
  cublasLtMatmulAlgo_t cublas_algo_ = {};
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;
  float alpha_ = 1.0f;
  float beta_ = 0.0f;
  // linear_swiglu: a one-region graph `swiglu` over the [M, 2F] workspace, its elementwise
  // tactic and loaded kernel.
  struct Swiglu;
  std::unique_ptr<Swiglu> swiglu_;
};

class CublasLtRunner final : public LibraryLauncher {
 public:
  // Creates the cuBLASLt handle and a runner-owned workspace of `workspace_bytes` on
  // `device`. `device` and `loader` (which compiles the swiglu kernel of linear_swiglu)
  // must outlive the runner.
  static absl::StatusOr<std::unique_ptr<CublasLtRunner>> Create(const device::Device& device,
                                                                KernelLoader& loader,
                                                                int64_t workspace_bytes = 32 << 20);
  ~CublasLtRunner();
  CublasLtRunner(const CublasLtRunner&) = delete;
  CublasLtRunner& operator=(const CublasLtRunner&) = delete;

  // Everything host-side, done once per (region, tactic): the problem, descriptor, layouts,
  // epilogue, algo resolution (the header comment) and, for linear_swiglu, compiling and
  // loading the swiglu kernel. Errors name the region: InvalidArgument for a tactic of
  // another family or an algo_id tactic cuBLASLt rejects (naming the tactic),
  // FailedPrecondition for a raw config it rejects (naming the config), dtypes it does not
  // run or a problem the heuristic has no algo for.
  absl::StatusOr<std::unique_ptr<PreparedGemm>> Prepare(const BoundRegion& region,
                                                        const Tactic& tactic);

  // The configurations cuBLASLt's heuristic offers for the region's exact problem (as
  // Prepare asks it: shapes, leading dims, dtypes, epilogue, alignments) within the
  // runner's workspace, `limit` answers asked for: each as ConfigTactic(answer, base), in
  // the heuristic's order (its top pick first), without duplicates. Empty when it has none;
  // errors as Prepare's.
  static constexpr int kCandidateLimit = 64;
  absl::StatusOr<std::vector<Tactic>> Candidates(const BoundRegion& region, const Tactic& base,
                                                 int limit = kCandidateLimit);

  // Enqueues the GEMM (and the swiglu kernel) on `stream` only: no synchronization, no
  // device allocation, no host-device copy, so it may be captured into a CUDA Graph.
  // Buffers as RegionBuffers: operands and result at their elements 0, and for
  // linear_swiglu a workspace of at least M · 2F elements of the result dtype. REQUIRES:
  // every launch through this runner is ordered on one stream (they share the runner's
  // cuBLASLt workspace; a captured graph refers to that workspace and to `gemm`'s swiglu
  // kernel, so the runner and the loader must outlive it). InvalidArgument naming the
  // region for a missing buffer or one less aligned than Prepare assumed
  // (GemmMatrix::alignment).
  absl::Status Launch(PreparedGemm& gemm, const RegionBuffers& buffers, cudaStream_t stream);

  int64_t workspace_bytes() const { return workspace_.size(); }

  // LibraryLauncher: cublaslt_gemm's launch half (Prepare, Launch and Candidates above).
  absl::string_view family() const override { return kCublasLtGemmFamily; }
  absl::StatusOr<std::unique_ptr<LibraryStep>> PrepareStep(const BoundRegion& region,
                                                           const Tactic& tactic) override;
  absl::StatusOr<std::vector<Tactic>> Configs(const BoundRegion& region, const Tactic& base,
                                              int limit) override {
    return Candidates(region, base, limit);
  }

 private:
  CublasLtRunner(const device::Device& device, KernelLoader& loader, cublasLtHandle_t handle,
                 device::DeviceBuffer workspace)
      : device_(&device), loader_(&loader), handle_(handle), workspace_(std::move(workspace)) {}

  // The problem, descriptor and layouts of `region`; `tactic` must be cublaslt_gemm's.
  absl::StatusOr<std::unique_ptr<PreparedGemm>> CreateGemm(const BoundRegion& region,
                                                           const Tactic& tactic) const;
  // The heuristic's successful answers among the first `count`, in its order.
  absl::StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> Heuristic(const PreparedGemm& gemm,
                                                                         int count) const;
  // Sets gemm's cuBLASLt algo and ResolvedAlgo (read back) from the tactic's form.
  absl::Status ResolveAlgo(const Tactic& tactic, PreparedGemm& gemm) const;
  absl::Status ResolveAlgoId(const Tactic& tactic, PreparedGemm& gemm) const;
  absl::Status ResolveRawConfig(const Tactic& tactic, PreparedGemm& gemm) const;
  absl::Status PrepareSwiglu(PreparedGemm& gemm);

  const device::Device* device_;
  KernelLoader* loader_;
  cublasLtHandle_t handle_;
  device::DeviceBuffer workspace_;
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_CUBLASLT_CUBLASLT_RUNNER_H_
