#include "kernels/cublaslt/cublaslt_runner.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/families/registry.h"
#include "regions/parser.h"
#include "regions/verifier.h"

namespace tileplan::kernels {
namespace {

// kernels/cublaslt_config.h holds the enums as numbers; they must be this header's.
static_assert(kCublasLtTileEnd == CUBLASLT_MATMUL_TILE_END);
static_assert(kCublasLtStagesEnd == CUBLASLT_MATMUL_STAGES_END);
static_assert(kCublasLtInnerShapeEnd == CUBLASLT_MATMUL_INNER_SHAPE_END);
static_assert(kCublasLtClusterShapeEnd == CUBLASLT_CLUSTER_SHAPE_END);
static_assert(CUBLASLT_MATMUL_TILE_UNDEFINED == 0 && CUBLASLT_MATMUL_STAGES_UNDEFINED == 0);

// cublasStatus_t becomes Status at the boundary, with the expression and its location.
absl::Status CublasStatusToStatus(cublasStatus_t status, absl::string_view expression,
                                  absl::string_view file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string message =
      absl::StrCat(expression, " failed at ", file, ":", line, ": ", cublasLtGetStatusName(status),
                   " (", cublasLtGetStatusString(status), ")");
  switch (status) {
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::InvalidArgumentError(message);
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

#define TP_CUBLAS_STATUS(expr) CublasStatusToStatus((expr), #expr, __FILE__, __LINE__)
#define TP_CUBLAS_RETURN_IF_ERROR(expr) TP_RETURN_IF_ERROR(TP_CUBLAS_STATUS(expr))

// `status` with `prefix` (the region's label) in front of its message, same code.
absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

cudaDataType_t CudaType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kBF16:
      return CUDA_R_16BF;
    case ir::DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// The largest power of two <= 256 dividing `bytes` (256 for 0).
int64_t AlignmentOf(int64_t bytes) {
  if (bytes == 0) return 256;
  return std::min<int64_t>(256, bytes & -bytes);
}

bool Aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// `layout` as rows of contiguous elements at one leading dimension.
absl::StatusOr<GemmMatrix> MatrixOf(const BoundRegion& r, const Layout& l, ir::DType dtype,
                                    absl::string_view what) {
  auto error = [&](auto... args) {
    return absl::InvalidArgumentError(absl::StrCat(r.Label(), ": ", what, args...));
  };
  if (l.shape.empty()) return error(" is a scalar, not a matrix");
  GemmMatrix m;
  m.cols = l.shape.back();
  if (m.cols < 1) return error(" has an empty last dim");
  if (m.cols > 1 && l.strides.back() != 1) return error(" has a strided last dim");
  m.rows = l.NumElements() / m.cols;
  int64_t next = 0;  // the stride the next non-unit leading dim must have
  for (size_t d = l.shape.size() - 1; d-- > 0;) {
    if (l.shape[d] == 1) continue;
    if (m.ld == 0) {
      m.ld = l.strides[d];
    } else if (l.strides[d] != next) {
      return error(" with strides [", absl::StrJoin(l.strides, ","),
                   "] does not address its rows with one stride");
    }
    next = l.strides[d] * l.shape[d];
  }
  if (m.ld == 0) m.ld = m.cols;
  if (m.ld < m.cols) return error(" has rows ", m.ld, " elements apart, fewer than its ", m.cols);
  m.alignment = AlignmentOf(l.offset * ir::DTypeSize(dtype));
  return m;
}

std::string ReductionName(uint32_t scheme) {
  switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE:
      return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE:
      return "in place";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE:
      return "compute type";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE:
      return "output type";
    default:
      return absl::StrCat("scheme ", scheme);
  }
}

// An array-valued capability of `algo` (tile or stage ids), without the UNDEFINED entry.
absl::StatusOr<std::vector<uint32_t>> CapIds(const cublasLtMatmulAlgo_t& algo,
                                             cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  TP_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes));
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (!ids.empty()) {
    TP_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulAlgoCapGetAttribute(&algo, attr, ids.data(), bytes, &bytes));
  }
  ids.erase(std::remove(ids.begin(), ids.end(), 0u), ids.end());  // *_UNDEFINED is 0
  return ids;
}

template <typename T>
absl::StatusOr<T> Cap(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  T value{};
  size_t written = 0;
  TP_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return value;
}

template <typename T>
absl::StatusOr<T> Config(const cublasLtMatmulAlgo_t& algo,
                         cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  TP_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return value;
}

template <typename T>
absl::Status SetConfig(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                       T value) {
  return TP_CUBLAS_STATUS(cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &value, sizeof(value)));
}

template <typename T>
absl::Status SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, T value) {
  return TP_CUBLAS_STATUS(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename T>
absl::Status SetPref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                     T value) {
  return TP_CUBLAS_STATUS(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

std::string IdsString(const std::vector<uint32_t>& ids, std::string (*name)(int64_t)) {
  std::vector<std::string> names;
  for (uint32_t id : ids) names.push_back(name(id));
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// The alignment C has: the residual's, else D's (C is D then).
int64_t CAlignment(const GemmProblem& p) {
  return p.residual.has_value() ? p.residual->alignment : p.d.alignment;
}

// cuBLASLt's (m, n, k) of the problem and what else shapes it, for messages.
std::string ProblemString(const GemmProblem& p) {
  return absl::StrCat("m=", p.n, " n=", p.m, " k=", p.k, " (", ir::DTypeName(p.input_dtype), " -> ",
                      ir::DTypeName(p.output_dtype), ", lda ", p.w.ld, ", ldb ", p.x.ld, ", ldd ",
                      p.d.ld, p.bias_operand >= 0 ? ", bias" : "",
                      p.residual.has_value() ? ", residual" : "", ")");
}

// InvalidArgument naming the first matrix `algo` needs more aligned than the region
// guarantees.
absl::Status CheckAlignments(const cublasLtMatmulAlgo_t& algo, const GemmProblem& p) {
  const std::pair<cublasLtMatmulAlgoCapAttributes_t, int64_t> alignments[] = {
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, p.w.alignment},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES, p.x.alignment},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CAlignment(p)},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES, p.d.alignment}};
  const char* const matrices[] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    TP_ASSIGN_OR_RETURN(const uint32_t need, Cap<uint32_t>(algo, alignments[i].first));
    if (need > alignments[i].second) {
      return absl::InvalidArgumentError(absl::StrCat("the algo needs ", matrices[i], " aligned to ",
                                                     need, " bytes, the region guarantees ",
                                                     alignments[i].second));
    }
  }
  return absl::OkStatus();
}

// The configuration fields of `algo` (workspace_bytes and from_heuristic left unset).
absl::StatusOr<ResolvedAlgo> ReadConfig(const cublasLtMatmulAlgo_t& algo) {
  ResolvedAlgo r;
  TP_ASSIGN_OR_RETURN(r.algo_id, Config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID));
  TP_ASSIGN_OR_RETURN(r.tile_id, Config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID));
  TP_ASSIGN_OR_RETURN(r.stages_id, Config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID));
  TP_ASSIGN_OR_RETURN(r.split_k, Config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
  TP_ASSIGN_OR_RETURN(r.reduction_scheme,
                      Config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  TP_ASSIGN_OR_RETURN(r.swizzle, Config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
  TP_ASSIGN_OR_RETURN(r.custom_option, Config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  TP_ASSIGN_OR_RETURN(r.inner_shape_id,
                      Config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID));
  TP_ASSIGN_OR_RETURN(r.cluster_shape_id,
                      Config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
  return r;
}

}  // namespace

absl::StatusOr<GemmProblem> GemmProblemFor(const BoundRegion& r) {
  GemmProblem p;
  p.kind = r.kind();
  const bool linear = p.kind == "linear", residual = p.kind == "linear_residual";
  p.swiglu = p.kind == "linear_swiglu";
  // lm_head and moe_router (the MoE router's logits): float D (moe_router: or the input's
  // dtype, when the region rounds its logits), no bias.
  const bool lm_head = p.kind == "lm_head" || p.kind == "moe_router";
  auto error = [&](absl::StatusCode code, auto... args) {
    return absl::Status(code, absl::StrCat(r.Label(), ": ", args...));
  };
  if (!linear && !residual && !p.swiglu && !lm_head) {
    return error(absl::StatusCode::kInvalidArgument, "cuBLASLt runs linear, linear_residual, ",
                 "linear_swiglu, lm_head and moe_router, not '", p.kind, "'");
  }
  const int min_operands = residual ? 3 : 2;
  const int max_operands = lm_head ? 2 : min_operands + 1;
  if (r.num_operands() < min_operands || r.num_operands() > max_operands || r.num_results() != 1) {
    return error(absl::StatusCode::kInvalidArgument, r.num_operands(), " operands and ",
                 r.num_results(), " results do not make a ", p.kind);
  }
  p.input_dtype = r.operand_dtype(0);
  p.output_dtype = r.result_dtype(0);
  const ir::DType w_dtype = r.operand_dtype(1);
  if ((p.input_dtype != ir::DType::kBF16 && p.input_dtype != ir::DType::kF16) ||
      w_dtype != p.input_dtype) {
    return error(absl::StatusCode::kFailedPrecondition,
                 "cuBLASLt GEMMs take bf16 or f16 x and weight of one dtype (f32 is not run in "
                 "TF32); got x ",
                 ir::DTypeName(p.input_dtype), " and weight ", ir::DTypeName(w_dtype));
  }
  const ir::DType want_output = p.kind == "moe_router" && p.output_dtype == p.input_dtype
                                    ? p.input_dtype
                                : lm_head ? ir::DType::kF32
                                          : p.input_dtype;
  if (p.output_dtype != want_output) {
    return error(absl::StatusCode::kFailedPrecondition, "the result is ",
                 ir::DTypeName(p.output_dtype), ", expected ", ir::DTypeName(want_output));
  }
  TP_ASSIGN_OR_RETURN(p.x, MatrixOf(r, r.operand(0), p.input_dtype, "x"));
  TP_ASSIGN_OR_RETURN(p.w, MatrixOf(r, r.operand(1), w_dtype, "the weight"));
  if (r.operand(1).shape.size() != 2) {
    return error(absl::StatusCode::kInvalidArgument, "the weight is not [N, K]");
  }
  p.m = p.x.rows;
  p.k = p.x.cols;
  p.n = p.w.rows;
  if (p.w.cols != p.k) {
    return error(absl::StatusCode::kInvalidArgument, "x has K = ", p.k, " but the weight ",
                 p.w.cols);
  }
  const int64_t out_cols = p.swiglu ? p.n / 2 : p.n;
  if (p.swiglu && p.n % 2 != 0) {
    return error(absl::StatusCode::kInvalidArgument, "the weight has an odd row count ", p.n,
                 ", not 2F");
  }
  TP_ASSIGN_OR_RETURN(const GemmMatrix out, MatrixOf(r, r.result(0), p.output_dtype, "the result"));
  if (out.rows != p.m || out.cols != out_cols) {
    return error(absl::StatusCode::kInvalidArgument, "the result is [", out.rows, ", ", out.cols,
                 "], expected [", p.m, ", ", out_cols, "]");
  }
  if (p.swiglu) {
    // The swiglu kernel writes a contiguous result; the GEMM writes the workspace.
    if (!r.result(0).IsContiguous()) {
      return error(absl::StatusCode::kInvalidArgument, "the result must be contiguous");
    }
    p.d = GemmMatrix{p.m, p.n, p.n, 16};
  } else {
    p.d = out;
  }
  if (residual) {
    TP_ASSIGN_OR_RETURN(GemmMatrix c,
                        MatrixOf(r, r.operand(2), r.operand_dtype(2), "the residual"));
    if (r.operand_dtype(2) != p.output_dtype || c.rows != p.m || c.cols != p.n) {
      return error(absl::StatusCode::kInvalidArgument, "the residual is not ",
                   ir::DTypeName(p.output_dtype), "[", p.m, ", ", p.n, "]");
    }
    p.residual = c;
  }
  const int bias = residual ? 3 : 2;
  if (!lm_head && bias < r.num_operands()) {
    const Layout& b = r.operand(bias);
    if (r.operand_dtype(bias) != p.output_dtype || b.NumElements() != p.n || !b.IsContiguous()) {
      return error(absl::StatusCode::kInvalidArgument, "the bias is not a contiguous ",
                   ir::DTypeName(p.output_dtype), "[", p.n, "]");
    }
    p.bias_operand = bias;
    p.bias_alignment = AlignmentOf(b.offset * ir::DTypeSize(p.output_dtype));
  }
  return p;
}

// The swiglu step of linear_swiglu: a one-region graph over the [M, 2F] workspace.
struct PreparedGemm::Swiglu {
  std::unique_ptr<ir::Graph> graph;
  std::optional<BoundGraph> bound;
  const KernelFamily* family = nullptr;
  Tactic tactic;
  LoadedInstance* loaded = nullptr;
  std::string name_expression;
};

PreparedGemm::~PreparedGemm() {
  for (cublasLtMatrixLayout_t layout : {a_, b_, c_, d_}) {
    if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
  }
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

std::string PreparedGemm::Describe() const {
  std::string text = absl::StrCat(
      label_, ": cuBLASLt algo ", algo_.algo_id,
      algo_.from_heuristic ? " (heuristic)" : " (tactic)", ", tile ",
      CublasLtTileName(algo_.tile_id), ", stages ", CublasLtStagesName(algo_.stages_id),
      ", split_k ", algo_.split_k, ", reduction ", ReductionName(algo_.reduction_scheme),
      ", swizzle ", algo_.swizzle, ", custom option ", algo_.custom_option, ", inner shape ",
      algo_.inner_shape_id, ", cluster shape ", algo_.cluster_shape_id, ", workspace ",
      algo_.workspace_bytes, " bytes");
  if (swiglu_ != nullptr) {
    absl::StrAppend(&text, ", then ", swiglu_->name_expression, " (",
                    swiglu_->tactic.ParamsString(), ")");
  }
  return text;
}

Tactic ConfigTactic(const ResolvedAlgo& algo, const Tactic& base) {
  Tactic t = base;
  t.params["algo_id"] = algo.algo_id;
  t.params["tile_id"] = algo.tile_id;
  t.params["stages_id"] = algo.stages_id;
  t.params["split_k"] = algo.split_k;
  t.params["reduction_scheme"] = algo.reduction_scheme;
  t.params["swizzle"] = algo.swizzle;
  t.params["custom_option"] = algo.custom_option;
  t.params["inner_shape_id"] = algo.inner_shape_id;
  t.params["cluster_shape_id"] = algo.cluster_shape_id;
  t.params["stages"] = CublasLtStagesCount(algo.stages_id);
  if (const std::optional<CublasLtTile> tile = CublasLtTileSize(algo.tile_id)) {
    t.params["tile_m"] = tile->cols;  // cuBLASLt's n is x's rows
    t.params["tile_n"] = tile->rows;
  }
  return t;
}

absl::StatusOr<std::unique_ptr<CublasLtRunner>> CublasLtRunner::Create(const device::Device& device,
                                                                       KernelLoader& loader,
                                                                       int64_t workspace_bytes) {
  TP_RETURN_IF_ERROR(device.MakeCurrent());
  TP_ASSIGN_OR_RETURN(device::DeviceBuffer workspace,
                      device::DeviceBuffer::Allocate(device, workspace_bytes));
  cublasLtHandle_t handle = nullptr;
  TP_RETURN_IF_ERROR(Prefixed(device.Label(), TP_CUBLAS_STATUS(cublasLtCreate(&handle))));
  return std::unique_ptr<CublasLtRunner>(
      new CublasLtRunner(device, loader, handle, std::move(workspace)));
}

CublasLtRunner::~CublasLtRunner() {
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

absl::StatusOr<std::unique_ptr<PreparedGemm>> CublasLtRunner::CreateGemm(
    const BoundRegion& region, const Tactic& tactic) const {
  const std::string label = region.Label();
  if (tactic.family != kCublasLtGemmFamily) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": a tactic of family '", tactic.family, "' is not cublaslt_gemm's"));
  }
  TP_RETURN_IF_ERROR(device_->MakeCurrent());
  std::unique_ptr<PreparedGemm> gemm(new PreparedGemm);
  gemm->label_ = label;
  TP_ASSIGN_OR_RETURN(gemm->problem_, GemmProblemFor(region));
  const GemmProblem& p = gemm->problem_;
  const cudaDataType_t in = CudaType(p.input_dtype), out = CudaType(p.output_dtype);

  absl::Status status = [&]() -> absl::Status {
    TP_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescCreate(&gemm->desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TP_RETURN_IF_ERROR(SetDesc<int32_t>(gemm->desc_, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T));
    TP_RETURN_IF_ERROR(SetDesc<int32_t>(gemm->desc_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N));
    if (p.bias_operand >= 0) {
      TP_RETURN_IF_ERROR(
          SetDesc<uint32_t>(gemm->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS));
      TP_RETURN_IF_ERROR(SetDesc<int32_t>(gemm->desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, out));
      // Until Launch sets the real one: a pointer with exactly the alignment assumed, which
      // the algo queries read (they never dereference it).
      TP_RETURN_IF_ERROR(SetDesc<const void*>(
          gemm->desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
          reinterpret_cast<const void*>(static_cast<uintptr_t>(p.bias_alignment))));
    } else {
      TP_RETURN_IF_ERROR(
          SetDesc<uint32_t>(gemm->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT));
    }
    // Column-major: A = w [K, N], B = x [K, M], C and D [N, M].
    TP_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&gemm->a_, in, p.k, p.n, p.w.ld));
    TP_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&gemm->b_, in, p.k, p.m, p.x.ld));
    TP_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&gemm->d_, out, p.n, p.m, p.d.ld));
    const int64_t ldc = p.residual.has_value() ? p.residual->ld : p.d.ld;
    TP_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&gemm->c_, out, p.n, p.m, ldc));
    return absl::OkStatus();
  }();
  TP_RETURN_IF_ERROR(Prefixed(label, status));
  gemm->beta_ = p.residual.has_value() ? 1.0f : 0.0f;
  return gemm;
}

absl::StatusOr<std::unique_ptr<PreparedGemm>> CublasLtRunner::Prepare(const BoundRegion& region,
                                                                      const Tactic& tactic) {
  TP_ASSIGN_OR_RETURN(std::unique_ptr<PreparedGemm> gemm, CreateGemm(region, tactic));
  TP_RETURN_IF_ERROR(ResolveAlgo(tactic, *gemm));
  if (gemm->problem_.swiglu) TP_RETURN_IF_ERROR(PrepareSwiglu(*gemm));
  return gemm;
}

absl::StatusOr<std::vector<Tactic>> CublasLtRunner::Candidates(const BoundRegion& region,
                                                               const Tactic& base, int limit) {
  TP_ASSIGN_OR_RETURN(std::unique_ptr<PreparedGemm> gemm, CreateGemm(region, base));
  TP_ASSIGN_OR_RETURN(const std::vector<cublasLtMatmulHeuristicResult_t> results,
                      Heuristic(*gemm, std::max(1, limit)));
  std::vector<Tactic> out;
  for (const cublasLtMatmulHeuristicResult_t& result : results) {
    absl::StatusOr<ResolvedAlgo> config = ReadConfig(result.algo);
    if (!config.ok()) return Prefixed(gemm->label_, config.status());
    Tactic tactic = ConfigTactic(*config, base);
    if (std::find(out.begin(), out.end(), tactic) == out.end()) out.push_back(std::move(tactic));
  }
  return out;
}

absl::StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> CublasLtRunner::Heuristic(
    const PreparedGemm& gemm, int count) const {
  const GemmProblem& p = gemm.problem_;
  cublasLtMatmulPreference_t pref = nullptr;
  TP_RETURN_IF_ERROR(
      Prefixed(gemm.label_, TP_CUBLAS_STATUS(cublasLtMatmulPreferenceCreate(&pref))));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
  int returned = 0;
  absl::Status status = [&]() -> absl::Status {
    TP_RETURN_IF_ERROR(SetPref<uint64_t>(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         static_cast<uint64_t>(workspace_.size())));
    TP_RETURN_IF_ERROR(SetPref<uint32_t>(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                         static_cast<uint32_t>(p.w.alignment)));
    TP_RETURN_IF_ERROR(SetPref<uint32_t>(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                         static_cast<uint32_t>(p.x.alignment)));
    TP_RETURN_IF_ERROR(SetPref<uint32_t>(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                         static_cast<uint32_t>(CAlignment(p))));
    TP_RETURN_IF_ERROR(SetPref<uint32_t>(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                         static_cast<uint32_t>(p.d.alignment)));
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle_, gemm.desc_, gemm.a_, gemm.b_, gemm.c_, gemm.d_,
                                       pref, count, results.data(), &returned);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) {  // no heuristic for this configuration
      returned = 0;
      return absl::OkStatus();
    }
    return TP_CUBLAS_STATUS(s);
  }();
  cublasLtMatmulPreferenceDestroy(pref);
  TP_RETURN_IF_ERROR(Prefixed(gemm.label_, status));
  results.resize(static_cast<size_t>(std::clamp(returned, 0, count)));
  results.erase(std::remove_if(results.begin(), results.end(),
                               [](const cublasLtMatmulHeuristicResult_t& r) {
                                 return r.state != CUBLAS_STATUS_SUCCESS;
                               }),
                results.end());
  return results;
}

absl::Status CublasLtRunner::ResolveAlgo(const Tactic& tactic, PreparedGemm& gemm) const {
  ResolvedAlgo& resolved = gemm.algo_;
  if (tactic.params.contains("tile_id")) {
    TP_RETURN_IF_ERROR(ResolveRawConfig(tactic, gemm));
  } else if (tactic.params.contains("algo_id")) {
    TP_RETURN_IF_ERROR(ResolveAlgoId(tactic, gemm));
  } else {
    TP_ASSIGN_OR_RETURN(const std::vector<cublasLtMatmulHeuristicResult_t> results,
                        Heuristic(gemm, 1));
    if (results.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          gemm.label_, ": cuBLASLt's heuristic has no algorithm for ", ProblemString(gemm.problem_),
          " within ", workspace_.size(), " bytes of workspace"));
    }
    gemm.cublas_algo_ = results.front().algo;
    resolved.workspace_bytes = static_cast<int64_t>(results.front().workspaceSize);
  }
  // What cuBLASLt will run, read back.
  absl::StatusOr<ResolvedAlgo> config = ReadConfig(gemm.cublas_algo_);
  if (!config.ok()) return Prefixed(gemm.label_, config.status());
  const int64_t workspace_bytes = resolved.workspace_bytes;
  resolved = *config;
  resolved.from_heuristic = !tactic.params.contains("algo_id");
  resolved.workspace_bytes = workspace_bytes;
  return absl::OkStatus();
}

absl::Status CublasLtRunner::ResolveAlgoId(const Tactic& tactic, PreparedGemm& gemm) const {
  const GemmProblem& p = gemm.problem_;
  const cudaDataType_t in = CudaType(p.input_dtype), out = CudaType(p.output_dtype);
  cublasLtMatmulAlgo_t& algo = gemm.cublas_algo_;
  const int64_t algo_id = tactic.params.at("algo_id");
  auto reject = [&](auto... args) {
    return absl::InvalidArgumentError(absl::StrCat(gemm.label_, ": cuBLASLt rejects tactic ",
                                                   tactic.ParamsString(), " for ", ProblemString(p),
                                                   ": ", args...));
  };
  auto param = [&](absl::string_view name) -> absl::StatusOr<int64_t> {
    absl::StatusOr<int64_t> v = tactic.Param(name);
    if (!v.ok()) return Prefixed(gemm.label_, v.status());
    return v;
  };
  TP_ASSIGN_OR_RETURN(const int64_t tile_m, param("tile_m"));
  TP_ASSIGN_OR_RETURN(const int64_t tile_n, param("tile_n"));
  TP_ASSIGN_OR_RETURN(const int64_t stages, param("stages"));
  TP_ASSIGN_OR_RETURN(const int64_t split_k, param("split_k"));
  TP_ASSIGN_OR_RETURN(const int64_t scheme, param("reduction_scheme"));
  TP_ASSIGN_OR_RETURN(const int64_t swizzle, param("swizzle"));
  if (algo_id < 0 || algo_id > INT32_MAX) {
    return reject("algo_id ", algo_id, " is not a cuBLASLt algo id");
  }
  const absl::Status init = TP_CUBLAS_STATUS(cublasLtMatmulAlgoInit(
      handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F, in, in, out, out, static_cast<int>(algo_id), &algo));
  if (!init.ok()) return reject(init.message());
  const std::optional<uint32_t> tile = CublasLtTileFor(tile_m, tile_n);
  if (!tile.has_value()) return reject("no cuBLASLt tile is ", tile_n, "x", tile_m);

  // Capability queries and the configuration of `algo`: any error, cuBLASLt's or a
  // capability the tactic needs and the algo lacks, rejects the tactic.
  auto lacks = [](auto... args) { return absl::InvalidArgumentError(absl::StrCat(args...)); };
  std::vector<uint32_t> stage_candidates;
  absl::Status configured = [&]() -> absl::Status {
    TP_ASSIGN_OR_RETURN(const std::vector<uint32_t> tiles,
                        CapIds(algo, CUBLASLT_ALGO_CAP_TILE_IDS));
    uint32_t tile_id = CUBLASLT_MATMUL_TILE_UNDEFINED;  // the algo has no tile choice
    if (!tiles.empty()) {
      if (std::find(tiles.begin(), tiles.end(), *tile) == tiles.end()) {
        return lacks("algo ", algo_id, " offers tiles ", IdsString(tiles, &CublasLtTileName),
                     ", not ", CublasLtTileName(*tile));
      }
      tile_id = *tile;
    }
    // Stages: the offered ids of `stages` stages, else the library-chosen depths (xAUTO)
    // the algo offers; none offered: the algo has no stage choice. The first candidate
    // cublasLtMatmulAlgoCheck accepts is taken.
    TP_ASSIGN_OR_RETURN(const std::vector<uint32_t> stage_ids,
                        CapIds(algo, CUBLASLT_ALGO_CAP_STAGES_IDS));
    for (uint32_t id : stage_ids) {
      if (CublasLtStagesCount(id) == stages) stage_candidates.push_back(id);
    }
    if (stage_candidates.empty()) {
      for (uint32_t id : stage_ids) {
        if (IsCublasLtAutoStagesId(id)) stage_candidates.push_back(id);
      }
    }
    if (stage_ids.empty()) stage_candidates.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
    if (stage_candidates.empty()) {
      return lacks("algo ", algo_id, " offers stages ", IdsString(stage_ids, &CublasLtStagesName),
                   ", none of ", stages);
    }
    if (split_k > 1) {
      TP_ASSIGN_OR_RETURN(const int32_t split_support,
                          Cap<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT));
      if (split_support == 0) return lacks("algo ", algo_id, " has no split-K");
      TP_ASSIGN_OR_RETURN(const uint32_t schemes,
                          Cap<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK));
      if ((schemes & static_cast<uint32_t>(scheme)) != static_cast<uint32_t>(scheme)) {
        return lacks("algo ", algo_id, " has no reduction scheme ", scheme, " (mask ", schemes,
                     ")");
      }
    }
    if (swizzle != 0) {
      TP_ASSIGN_OR_RETURN(const uint32_t swizzling,
                          Cap<uint32_t>(algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT));
      if (swizzling == 0) return lacks("algo ", algo_id, " has no CTA swizzling");
    }
    TP_RETURN_IF_ERROR(CheckAlignments(algo, p));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile_id));
    TP_RETURN_IF_ERROR(
        SetConfig<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, static_cast<int32_t>(split_k)));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                           static_cast<uint32_t>(scheme)));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                           static_cast<uint32_t>(swizzle)));
    return absl::OkStatus();
  }();
  if (!configured.ok()) return reject(configured.message());
  cublasLtMatmulHeuristicResult_t check = {};
  absl::Status checked;
  for (uint32_t stages_id : stage_candidates) {
    const absl::Status set = SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, stages_id);
    if (!set.ok()) return reject(set.message());
    checked = TP_CUBLAS_STATUS(cublasLtMatmulAlgoCheck(handle_, gemm.desc_, gemm.a_, gemm.b_,
                                                       gemm.c_, gemm.d_, &algo, &check));
    if (checked.ok()) break;
  }
  if (!checked.ok()) {
    return reject("stages ", IdsString(stage_candidates, &CublasLtStagesName), ": ",
                  checked.message());
  }
  if (check.workspaceSize > static_cast<size_t>(workspace_.size())) {
    return reject("the algo needs ", check.workspaceSize, " bytes of workspace, the runner has ",
                  workspace_.size());
  }
  gemm.algo_.workspace_bytes = static_cast<int64_t>(check.workspaceSize);
  return absl::OkStatus();
}

absl::Status CublasLtRunner::ResolveRawConfig(const Tactic& tactic, PreparedGemm& gemm) const {
  const GemmProblem& p = gemm.problem_;
  const cudaDataType_t in = CudaType(p.input_dtype), out = CudaType(p.output_dtype);
  cublasLtMatmulAlgo_t& algo = gemm.cublas_algo_;
  auto reject = [&](auto... args) {
    return absl::FailedPreconditionError(absl::StrCat(gemm.label_, ": cuBLASLt rejects config ",
                                                      tactic.ParamsString(), " for ",
                                                      ProblemString(p), ": ", args...));
  };
  // Every field, range-checked for the type cuBLASLt stores it in.
  struct Field {
    const char* name;
    int64_t max;
    int64_t value = 0;
  };
  Field fields[] = {{"algo_id", INT32_MAX},           {"tile_id", UINT32_MAX},
                    {"stages_id", UINT32_MAX},        {"split_k", INT32_MAX},
                    {"reduction_scheme", UINT32_MAX}, {"swizzle", UINT32_MAX},
                    {"custom_option", UINT32_MAX},    {"inner_shape_id", UINT16_MAX},
                    {"cluster_shape_id", UINT16_MAX}};
  for (Field& f : fields) {
    absl::StatusOr<int64_t> v = tactic.Param(f.name);
    if (!v.ok()) return Prefixed(gemm.label_, v.status());
    if (*v < 0 || *v > f.max) return reject(f.name, " ", *v, " is out of range");
    f.value = *v;
  }
  const int64_t algo_id = fields[0].value;
  const absl::Status init = TP_CUBLAS_STATUS(cublasLtMatmulAlgoInit(
      handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F, in, in, out, out, static_cast<int>(algo_id), &algo));
  if (!init.ok()) return reject(init.message());
  absl::Status configured = [&]() -> absl::Status {
    TP_RETURN_IF_ERROR(CheckAlignments(algo, p));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                           static_cast<uint32_t>(fields[1].value)));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                           static_cast<uint32_t>(fields[2].value)));
    TP_RETURN_IF_ERROR(SetConfig<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                          static_cast<int32_t>(fields[3].value)));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                           static_cast<uint32_t>(fields[4].value)));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                           static_cast<uint32_t>(fields[5].value)));
    TP_RETURN_IF_ERROR(SetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                           static_cast<uint32_t>(fields[6].value)));
    TP_RETURN_IF_ERROR(SetConfig<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
                                           static_cast<uint16_t>(fields[7].value)));
    TP_RETURN_IF_ERROR(SetConfig<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                           static_cast<uint16_t>(fields[8].value)));
    return absl::OkStatus();
  }();
  if (!configured.ok()) return reject(configured.message());
  cublasLtMatmulHeuristicResult_t check = {};
  const absl::Status checked = TP_CUBLAS_STATUS(cublasLtMatmulAlgoCheck(
      handle_, gemm.desc_, gemm.a_, gemm.b_, gemm.c_, gemm.d_, &algo, &check));
  if (!checked.ok()) {
    // What the algo offers, to tell a config of another library or GPU from a typo.
    std::string offers;
    absl::StatusOr<std::vector<uint32_t>> tiles = CapIds(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
    absl::StatusOr<std::vector<uint32_t>> stages = CapIds(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.ok() && stages.ok()) {
      offers =
          absl::StrCat("; algo ", algo_id, " offers tiles ", IdsString(*tiles, &CublasLtTileName),
                       " and stages ", IdsString(*stages, &CublasLtStagesName));
    }
    return reject(checked.message(), offers);
  }
  if (check.workspaceSize > static_cast<size_t>(workspace_.size())) {
    return reject("the algo needs ", check.workspaceSize, " bytes of workspace, the runner has ",
                  workspace_.size());
  }
  // cuBLASLt must run exactly the configuration asked for.
  absl::StatusOr<ResolvedAlgo> set = ReadConfig(algo);
  if (!set.ok()) return Prefixed(gemm.label_, set.status());
  const int64_t read[] = {set->algo_id,       set->tile_id,          set->stages_id,
                          set->split_k,       set->reduction_scheme, set->swizzle,
                          set->custom_option, set->inner_shape_id,   set->cluster_shape_id};
  for (size_t i = 0; i < std::size(fields); ++i) {
    if (read[i] != fields[i].value) {
      return reject("cuBLASLt holds ", fields[i].name, " ", read[i], " after it was set to ",
                    fields[i].value);
    }
  }
  gemm.algo_.workspace_bytes = static_cast<int64_t>(check.workspaceSize);
  return absl::OkStatus();
}

absl::Status CublasLtRunner::PrepareSwiglu(PreparedGemm& gemm) {
  const GemmProblem& p = gemm.problem_;
  auto swiglu = std::make_unique<PreparedGemm::Swiglu>();
  absl::Status status = [&]() -> absl::Status {
    const absl::string_view dtype = ir::DTypeName(p.output_dtype);
    TP_ASSIGN_OR_RETURN(ir::Graph graph, ir::ParseGraph(absl::StrCat(
                                             "graph @g {\n  input %gate_up: ", dtype, "[", p.m, ",",
                                             p.n, "]\n  %y: ", dtype, "[", p.m, ",", p.n / 2,
                                             "] = swiglu(%gate_up)\n  output %y\n}\n")));
    TP_RETURN_IF_ERROR(ir::Verify(graph));
    swiglu->graph = std::make_unique<ir::Graph>(std::move(graph));
    TP_ASSIGN_OR_RETURN(BoundGraph bound, BoundGraph::Create(*swiglu->graph, {}, 1));
    swiglu->bound.emplace(std::move(bound));
    const BoundRegion region(*swiglu->bound, 0);
    // The template family of swiglu regions: it reads the architecture, SM count and shared
    // memory only.
    const device::DeviceProperties& props = device_->properties();
    TargetDescription target;
    target.set_name(props.name);
    target.set_sm(props.sm);
    target.set_sm_count(props.sm_count);
    target.set_shared_memory_per_block_bytes(props.shared_memory_per_block_optin_bytes);
    for (const KernelFamily* f : GlobalKernelRegistry().FamiliesFor(region.kind())) {
      if (f->templates() != nullptr && f->CanImplement(region, target).ok()) {
        swiglu->family = f;
        break;
      }
    }
    if (swiglu->family == nullptr) return absl::InternalError("no template family runs swiglu");
    TP_ASSIGN_OR_RETURN(swiglu->tactic, swiglu->family->DefaultTactic(region, target));
    TP_ASSIGN_OR_RETURN(const KernelInstance instance,
                        InstanceFor(*swiglu->family, region, swiglu->tactic));
    swiglu->name_expression = instance.name_expressions.front();
    TP_ASSIGN_OR_RETURN(swiglu->loaded, loader_->Load(instance));
    return absl::OkStatus();
  }();
  TP_RETURN_IF_ERROR(Prefixed(absl::StrCat(gemm.label_, " [swiglu]"), status));
  gemm.swiglu_ = std::move(swiglu);
  return absl::OkStatus();
}

absl::Status CublasLtRunner::Launch(PreparedGemm& gemm, const RegionBuffers& buffers,
                                    cudaStream_t stream) {
  const GemmProblem& p = gemm.problem_;
  auto error = [&](auto... args) {
    return absl::InvalidArgumentError(absl::StrCat(gemm.label_, ": ", args...));
  };
  auto operand = [&](int i) -> void* {
    return i < static_cast<int>(buffers.operands.size()) ? buffers.operands[static_cast<size_t>(i)]
                                                         : nullptr;
  };
  auto check = [&](const void* ptr, int64_t alignment, absl::string_view what) -> absl::Status {
    if (ptr == nullptr) return error("no device buffer for ", what);
    if (!Aligned(ptr, alignment)) {
      return error(what, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                   " is not aligned to the ", alignment, " bytes Prepare assumed");
    }
    return absl::OkStatus();
  };
  void* result = buffers.results.empty() ? nullptr : buffers.results.front();
  TP_RETURN_IF_ERROR(check(operand(0), p.x.alignment, "x (operand 0)"));
  TP_RETURN_IF_ERROR(check(operand(1), p.w.alignment, "the weight (operand 1)"));
  if (p.residual.has_value()) {
    TP_RETURN_IF_ERROR(check(operand(2), p.residual->alignment, "the residual (operand 2)"));
  }
  if (p.bias_operand >= 0) {
    TP_RETURN_IF_ERROR(check(operand(p.bias_operand), p.bias_alignment,
                             absl::StrCat("the bias (operand ", p.bias_operand, ")")));
  }
  void* d = result;
  if (p.swiglu) {
    TP_RETURN_IF_ERROR(check(buffers.workspace, 16, "the [M, 2F] workspace"));
    TP_RETURN_IF_ERROR(check(result, ir::DTypeSize(p.output_dtype), "the result"));
    d = buffers.workspace;
  } else {
    TP_RETURN_IF_ERROR(check(result, p.d.alignment, "the result"));
  }
  const void* c = p.residual.has_value() ? operand(2) : d;
  if (c == d && p.residual.has_value() && p.residual->ld != p.d.ld) {
    return error("the residual and the result share storage with different leading dims (",
                 p.residual->ld, ", ", p.d.ld, ")");
  }

  TP_RETURN_IF_ERROR(device_->MakeCurrent());
  if (p.bias_operand >= 0) {
    TP_RETURN_IF_ERROR(
        Prefixed(gemm.label_, SetDesc<const void*>(gemm.desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   operand(p.bias_operand))));
  }
  TP_RETURN_IF_ERROR(Prefixed(
      gemm.label_, TP_CUBLAS_STATUS(cublasLtMatmul(
                       handle_, gemm.desc_, &gemm.alpha_, operand(1), gemm.a_, operand(0), gemm.b_,
                       &gemm.beta_, c, gemm.c_, d, gemm.d_, &gemm.cublas_algo_, workspace_.data(),
                       static_cast<size_t>(workspace_.size()), stream))));
  if (!p.swiglu) return absl::OkStatus();

  PreparedGemm::Swiglu& swiglu = *gemm.swiglu_;
  RegionBuffers step;
  step.operands = {buffers.workspace};
  step.results = {result};
  const BoundRegion region(*swiglu.bound, 0);
  absl::StatusOr<std::vector<KernelLaunch>> launches =
      PrepareLaunches(*swiglu.family, region, swiglu.tactic, step);
  if (!launches.ok()) return Prefixed(absl::StrCat(gemm.label_, " [swiglu]"), launches.status());
  for (KernelLaunch& launch : *launches) {
    TP_RETURN_IF_ERROR(Prefixed(absl::StrCat(gemm.label_, " [swiglu]"),
                                loader_->Launch(*swiglu.loaded, launch, {.stream = stream})));
  }
  return absl::OkStatus();
}

namespace {

class CublasLtStep final : public LibraryStep {
 public:
  CublasLtStep(CublasLtRunner& runner, std::unique_ptr<PreparedGemm> gemm)
      : runner_(&runner), gemm_(std::move(gemm)) {}
  absl::Status Launch(const RegionBuffers& buffers, cudaStream_t stream) override {
    return runner_->Launch(*gemm_, buffers, stream);
  }
  std::string Describe() const override { return gemm_->Describe(); }

 private:
  CublasLtRunner* runner_;
  std::unique_ptr<PreparedGemm> gemm_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LibraryStep>> CublasLtRunner::PrepareStep(const BoundRegion& region,
                                                                         const Tactic& tactic) {
  TP_ASSIGN_OR_RETURN(std::unique_ptr<PreparedGemm> gemm, Prepare(region, tactic));
  return std::make_unique<CublasLtStep>(*this, std::move(gemm));
}

}  // namespace tileplan::kernels
