#include "kernels/cuda_launch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::kernels {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t Pow2Ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// A region operand as rows of `cols` contiguous elements: row r at element
// (r / group) * group_stride + (r % group) * stride. One level (group == rows) is the usual
// strided matrix; two levels cover per-head rows of a view into a packed tensor.
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
  int64_t group = 1;
  int64_t group_stride = 0;
};

// Builds the instance and, with buffers, the launches of one region; errors name it.
class Builder {
 public:
  Builder(const BoundRegion& region, const Tactic& tactic, const RegionBuffers* buffers)
      : r_(region), t_(tactic), buffers_(buffers) {}

  absl::Status Build();

  KernelInstance instance;
  std::vector<PreparedLaunch> launches;

 private:
  template <typename... Args>
  absl::Status Error(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(r_.Label(), ": ", args...));
  }
  absl::StatusOr<int64_t> Param(absl::string_view name) const {
    absl::StatusOr<int64_t> value = t_.Param(name);
    if (!value.ok()) return Error(value.status().message());
    return value;
  }
  absl::StatusOr<std::string> TypeName(ir::DType dtype, absl::string_view what) const {
    switch (dtype) {
      case ir::DType::kF32:
        return std::string("float");
      case ir::DType::kBF16:
        return std::string("tileplan::bf16");
      case ir::DType::kF16:
        return std::string("tileplan::f16");
      case ir::DType::kI32:
        break;
    }
    return Error(what, " has dtype ", ir::DTypeName(dtype), ", which no template takes");
  }
  absl::StatusOr<Matrix> AsMatrix(const Layout& l, absl::string_view what,
                                  bool two_levels = false) const;
  // Token stride of a [B, T, ...] operand whose tokens are evenly spaced and whose trailing
  // dims (from `contiguous_from`) are contiguous.
  absl::StatusOr<int64_t> TokenStride(int operand, int contiguous_from) const;
  absl::Status RequireContiguous(const Layout& l, absl::string_view what) const {
    if (!l.IsContiguous()) return Error(what, " must be contiguous");
    return absl::OkStatus();
  }
  // The largest power of two <= `limit` dividing every extent.
  static int64_t WidestDividing(int64_t limit, std::initializer_list<int64_t> extents) {
    int64_t width = limit;
    for (int64_t e : extents) {
      while (width > 1 && e % width != 0) width /= 2;
    }
    return width;
  }

  void* Operand(int i) const {
    return buffers_ != nullptr && i < static_cast<int>(buffers_->operands.size())
               ? buffers_->operands[static_cast<size_t>(i)]
               : nullptr;
  }
  // The workspace and counters of a launch split `splits` ways: both null when it is not
  // split (or no buffers are given), else checked to be present and aligned to 16 and 4
  // bytes; `what` names the split in errors ("the split-K workspace").
  struct SplitPointers {
    void* workspace = nullptr;
    void* counters = nullptr;
  };
  absl::StatusOr<SplitPointers> SplitBuffers(int64_t splits, absl::string_view what) const {
    SplitPointers p;
    if (splits <= 1 || buffers_ == nullptr) return p;
    TP_RETURN_IF_ERROR(
        CheckPointer(buffers_->workspace, 16, absl::StrCat("the ", what, " workspace")));
    TP_RETURN_IF_ERROR(CheckPointer(buffers_->counters, 4, absl::StrCat("the ", what, " counters")));
    p.workspace = buffers_->workspace;
    p.counters = buffers_->counters;
    return p;
  }
  void* Result(int i) const {
    return buffers_ != nullptr && i < static_cast<int>(buffers_->results.size())
               ? buffers_->results[static_cast<size_t>(i)]
               : nullptr;
  }
  // Buffers must be present and aligned to `bytes`.
  absl::Status CheckPointer(const void* p, int64_t bytes, absl::string_view what) const {
    if (buffers_ == nullptr) return absl::OkStatus();
    if (p == nullptr) return Error("no device buffer for ", what);
    if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) != 0) {
      return Error(what, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(p)), " is not aligned to ",
                   bytes, " bytes");
    }
    return absl::OkStatus();
  }
  absl::Status CheckOperands(int64_t bytes, std::initializer_list<int> operands) const {
    for (int i : operands) {
      TP_RETURN_IF_ERROR(CheckPointer(Operand(i), bytes, absl::StrCat("operand ", i)));
    }
    return absl::OkStatus();
  }
  absl::Status CheckResults(int64_t bytes, std::initializer_list<int> results) const {
    for (int i : results) {
      TP_RETURN_IF_ERROR(CheckPointer(Result(i), bytes, absl::StrCat("result ", i)));
    }
    return absl::OkStatus();
  }
  void Launch(std::string name_expression, std::array<int64_t, 3> grid,
              std::array<int64_t, 3> block, int64_t shared, KernelArgs args) {
    PreparedLaunch launch;
    launch.kernel = static_cast<int>(instance.name_expressions.size());
    launch.config.grid = grid;
    launch.config.block = block;
    launch.config.dynamic_shared_memory_bytes = shared;
    launch.args = std::move(args);
    instance.name_expressions.push_back(std::move(name_expression));
    launches.push_back(std::move(launch));
  }

  absl::Status Embedding();
  absl::Status RmsNorm();
  absl::Status Elementwise();
  absl::Status Gemv();
  absl::Status Attention(bool decode);
  absl::Status AttentionRope();
  absl::Status Rope();
  absl::Status Argmax();

  const BoundRegion& r_;
  const Tactic& t_;
  const RegionBuffers* buffers_;
};

absl::StatusOr<Matrix> Builder::AsMatrix(const Layout& l, absl::string_view what,
                                         bool two_levels) const {
  if (l.shape.empty()) return Error(what, " is a scalar, not rows of a matrix");
  if (!l.InnerContiguous()) return Error(what, " has a strided last dim");
  Matrix m;
  m.cols = l.shape.back();
  m.rows = m.cols == 0 ? 0 : l.NumElements() / m.cols;
  // Runs of leading dims at one stride, innermost first (dims of extent 1 skipped).
  std::vector<std::pair<int64_t, int64_t>> runs;  // (count, stride)
  for (size_t d = l.shape.size() - 1; d-- > 0;) {
    if (l.shape[d] == 1) continue;
    if (!runs.empty() && runs.back().first * runs.back().second == l.strides[d]) {
      runs.back().first *= l.shape[d];
    } else {
      runs.emplace_back(l.shape[d], l.strides[d]);
    }
  }
  if (runs.empty()) {
    m.stride = m.cols;
    m.group = std::max<int64_t>(1, m.rows);
  } else if (runs.size() == 1 || (two_levels && runs.size() == 2)) {
    m.stride = runs[0].second;
    m.group = runs.size() == 1 ? std::max<int64_t>(1, m.rows) : runs[0].first;
    m.group_stride = runs.size() == 1 ? 0 : runs[1].second;
  } else {
    return Error(what, " does not address its rows with ",
                 two_levels ? "two strides" : "one stride");
  }
  return m;
}

absl::StatusOr<int64_t> Builder::TokenStride(int operand, int contiguous_from) const {
  const Layout& l = r_.operand(operand);
  if (l.shape.size() < 3) return Error("operand ", operand, " has rank < 3");
  int64_t inner = 1;
  for (size_t d = l.shape.size(); d-- > static_cast<size_t>(contiguous_from);) {
    if (l.shape[d] != 1 && l.strides[d] != inner) {
      return Error("operand ", operand, " must be contiguous from dim ", contiguous_from);
    }
    inner *= l.shape[d];
  }
  // Token bt = b * T + t sits at bt * stride.
  if (l.shape[1] == 1) return l.shape[0] == 1 ? inner : l.strides[0];
  const int64_t stride = l.strides[1];
  if (l.shape[0] != 1 && l.strides[0] != l.shape[1] * stride) {
    return Error("operand ", operand, " does not space its tokens evenly across the batch");
  }
  return stride;
}

absl::Status Builder::Embedding() {
  TP_ASSIGN_OR_RETURN(const int64_t threads, Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t per_cta, Param("tokens_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, Param("vec"));
  const Layout& table = r_.operand(1);
  const ir::DType dtype = r_.operand_dtype(1);
  TP_ASSIGN_OR_RETURN(const std::string type, TypeName(dtype, "the table"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(0), "the ids"));
  TP_RETURN_IF_ERROR(RequireContiguous(table, "the table"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.result(0), "the result"));
  const int64_t tokens = r_.operand(0).NumElements();
  const int64_t vocab = table.shape[0], hidden = table.shape[1];
  if (hidden % vec != 0) return Error("hidden size ", hidden, " is not a multiple of vec ", vec);
  TP_RETURN_IF_ERROR(CheckOperands(4, {0}));
  TP_RETURN_IF_ERROR(CheckOperands(vec * ir::DTypeSize(dtype), {1}));
  TP_RETURN_IF_ERROR(CheckResults(vec * ir::DTypeSize(dtype), {0}));
  instance.source = "embedding_gather.cuh";
  KernelArgs args;
  args.Add(Operand(0)).Add(Operand(1)).Add(Result(0)).Add(static_cast<int>(tokens));
  args.Add(static_cast<int>(vocab)).Add(static_cast<int>(hidden));
  args.Add(buffers_ != nullptr ? buffers_->error : nullptr);
  Launch(absl::StrCat("tileplan::embedding_gather<", type, ", ", threads, ", ", per_cta, ", ", vec,
                      ">"),
         {std::max<int64_t>(1, CeilDiv(tokens, per_cta)), 1, 1}, {threads, 1, 1}, 0,
         std::move(args));
  return absl::OkStatus();
}

absl::Status Builder::RmsNorm() {
  TP_ASSIGN_OR_RETURN(const int64_t row_threads, Param("row_threads"));
  TP_ASSIGN_OR_RETURN(const int64_t rows_per_cta, Param("rows_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, Param("vec"));
  const bool add = r_.kind() == "add_rms_norm";
  const int w_index = add ? 2 : 1;
  const ir::DType x_dtype = r_.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string x_type, TypeName(x_dtype, "the input"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, TypeName(r_.operand_dtype(w_index), "the weight"));
  TP_ASSIGN_OR_RETURN(const Matrix a, AsMatrix(r_.operand(0), "operand 0", !add));
  Matrix b;
  if (add) {
    TP_ASSIGN_OR_RETURN(b, AsMatrix(r_.operand(1), "operand 1"));
  }
  for (int i = 0; i < r_.num_results(); ++i) {
    TP_RETURN_IF_ERROR(RequireContiguous(r_.result(i), absl::StrCat("result ", i)));
  }
  if (a.cols % vec != 0 || a.stride % vec != 0 || a.group_stride % vec != 0 ||
      (add && b.stride % vec != 0)) {
    return Error("rows of ", a.cols, " (stride ", a.stride, ") do not split into vec ", vec);
  }
  TP_ASSIGN_OR_RETURN(const double eps, r_.region().attrs.GetFloat("eps"));
  const int64_t x_bytes = vec * ir::DTypeSize(x_dtype);
  TP_RETURN_IF_ERROR(CheckOperands(
      x_bytes, add ? std::initializer_list<int>{0, 1} : std::initializer_list<int>{0}));
  TP_RETURN_IF_ERROR(CheckOperands(vec * ir::DTypeSize(r_.operand_dtype(w_index)), {w_index}));
  TP_RETURN_IF_ERROR(CheckResults(
      x_bytes, add ? std::initializer_list<int>{0, 1} : std::initializer_list<int>{0}));
  instance.source = "rms_norm.cuh";
  KernelArgs args;
  args.Add(Operand(0)).Add(static_cast<long long>(a.stride));
  if (add) {
    args.Add(Operand(1)).Add(static_cast<long long>(b.stride));
  } else {
    args.Add(static_cast<int>(a.group)).Add(static_cast<long long>(a.group_stride));
  }
  args.Add(Operand(w_index)).Add(Result(0));
  if (add) args.Add(Result(1));
  args.Add(static_cast<int>(a.rows)).Add(static_cast<int>(a.cols)).Add(static_cast<float>(eps));
  Launch(absl::StrCat("tileplan::", r_.kind(), "<", x_type, ", ", w_type, ", ", row_threads, ", ",
                      rows_per_cta, ", ", vec, ">"),
         {std::max<int64_t>(1, CeilDiv(a.rows, rows_per_cta)), 1, 1},
         {row_threads * rows_per_cta, 1, 1}, 0, std::move(args));
  return absl::OkStatus();
}

absl::Status Builder::Elementwise() {
  TP_ASSIGN_OR_RETURN(const int64_t threads, Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t items, Param("items"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, Param("vec"));
  const std::string& kind = r_.kind();
  const ir::DType dtype = r_.result_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, TypeName(dtype, "the result"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.result(0), "the result"));
  TP_ASSIGN_OR_RETURN(const Matrix out, AsMatrix(r_.result(0), "the result"));
  std::vector<Matrix> in;
  for (int i = 0; i < r_.num_operands(); ++i) {
    TP_ASSIGN_OR_RETURN(Matrix m, AsMatrix(r_.operand(i), absl::StrCat("operand ", i)));
    if (m.stride % vec != 0) return Error("operand ", i, " row stride is not a multiple of vec");
    in.push_back(m);
  }
  if (out.cols % vec != 0) return Error("rows of ", out.cols, " do not split into vec ", vec);
  const int64_t bytes = vec * ir::DTypeSize(dtype);
  TP_RETURN_IF_ERROR(CheckResults(bytes, {0}));
  for (int i = 0; i < r_.num_operands(); ++i) {
    TP_RETURN_IF_ERROR(CheckPointer(Operand(i), bytes, absl::StrCat("operand ", i)));
  }
  instance.source = "elementwise.cuh";
  const std::string kernel = kind == "swiglu" ? "swiglu" : absl::StrCat("elementwise_", kind);
  KernelArgs args;
  for (int i = 0; i < r_.num_operands(); ++i) {
    args.Add(Operand(i)).Add(static_cast<long long>(in[static_cast<size_t>(i)].stride));
  }
  args.Add(Result(0)).Add(static_cast<long long>(out.rows)).Add(static_cast<int>(out.cols));
  Launch(absl::StrCat("tileplan::", kernel, "<", type, ", ", threads, ", ", items, ", ", vec, ">"),
         {std::max<int64_t>(1, CeilDiv(out.rows * out.cols, threads * items * vec)), 1, 1},
         {threads, 1, 1}, 0, std::move(args));
  return absl::OkStatus();
}

absl::Status Builder::Gemv() {
  TP_ASSIGN_OR_RETURN(const int64_t threads, Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t rows_per_cta, Param("rows_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t split_k, Param("split_k"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, Param("vec"));
  const std::string& kind = r_.kind();
  // Operands: x, [norm,] w, then the residual and the bias as the kind has them.
  const bool norm = kind == "rms_norm_linear" || kind == "rms_norm_linear_swiglu";
  const bool residual = kind == "linear_residual";
  const bool swiglu = kind == "linear_swiglu" || kind == "rms_norm_linear_swiglu";
  const int w_index = norm ? 2 : 1;
  const int bias_index = kind == "lm_head" ? -1 : residual ? 3 : w_index + 1;
  const bool has_bias = bias_index >= 0 && bias_index < r_.num_operands();
  TP_ASSIGN_OR_RETURN(const std::string x_type, TypeName(r_.operand_dtype(0), "x"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, TypeName(r_.operand_dtype(w_index), "the weight"));
  TP_ASSIGN_OR_RETURN(const std::string out_type, TypeName(r_.result_dtype(0), "the result"));
  std::string norm_type = "void";
  double eps = 0;
  if (norm) {
    TP_ASSIGN_OR_RETURN(norm_type, TypeName(r_.operand_dtype(1), "the norm weight"));
    TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(1), "the norm weight"));
    TP_ASSIGN_OR_RETURN(eps, r_.region().attrs.GetFloat("eps"));
  }
  TP_ASSIGN_OR_RETURN(const Matrix x, AsMatrix(r_.operand(0), "x"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(w_index), "the weight"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.result(0), "the result"));
  Matrix res;
  if (residual) {
    TP_ASSIGN_OR_RETURN(res, AsMatrix(r_.operand(2), "the residual"));
  }
  if (has_bias) TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(bias_index), "the bias"));
  const int64_t cols = r_.result(0).shape.back();
  if (x.rows < 1 || x.rows > 16) return Error(x.rows, " rows of x are outside [1, 16]");
  if (x.cols % vec != 0 || x.stride % vec != 0) {
    return Error("x rows of ", x.cols, " (stride ", x.stride, ") do not split into vec ", vec);
  }
  TP_RETURN_IF_ERROR(CheckOperands(vec * ir::DTypeSize(r_.operand_dtype(0)), {0}));
  if (norm) TP_RETURN_IF_ERROR(CheckOperands(vec * ir::DTypeSize(r_.operand_dtype(1)), {1}));
  TP_RETURN_IF_ERROR(CheckOperands(vec * ir::DTypeSize(r_.operand_dtype(w_index)), {w_index}));
  if (residual) TP_RETURN_IF_ERROR(CheckOperands(ir::DTypeSize(r_.operand_dtype(2)), {2}));
  if (has_bias)
    TP_RETURN_IF_ERROR(CheckOperands(ir::DTypeSize(r_.operand_dtype(bias_index)), {bias_index}));
  TP_RETURN_IF_ERROR(CheckResults(ir::DTypeSize(r_.result_dtype(0)), {0}));
  TP_ASSIGN_OR_RETURN(const SplitPointers split, SplitBuffers(split_k, "split-K"));
  instance.source = "gemv_split_k.cuh";
  const char* epilogue = residual ? "tileplan::kGemvResidual"
                         : swiglu ? "tileplan::kGemvSwiglu"
                                  : "tileplan::kGemvPlain";
  KernelArgs args;
  args.Add(Operand(0)).Add(static_cast<long long>(x.stride));
  args.Add(norm ? Operand(1) : nullptr).Add(static_cast<float>(eps)).Add(Operand(w_index));
  args.Add(has_bias ? Operand(bias_index) : nullptr);
  args.Add(residual ? Operand(2) : nullptr).Add(static_cast<long long>(residual ? res.stride : 0));
  args.Add(Result(0)).Add(split.workspace).Add(split.counters);
  args.Add(static_cast<int>(x.rows)).Add(static_cast<int>(cols)).Add(static_cast<int>(x.cols));
  Launch(absl::StrCat("tileplan::gemv_split_k<", x_type, ", ", w_type, ", ", out_type, ", ",
                      Pow2Ceil(x.rows), ", ", threads, ", ", rows_per_cta, ", ", split_k, ", ", vec,
                      ", ", epilogue, ", ", norm_type, ">"),
         {CeilDiv(cols, rows_per_cta), split_k, 1}, {threads, 1, 1},
         threads / 32 * (rows_per_cta * (swiglu ? 2 : 1) + (norm ? 1 : 0)) * x.rows * 4,
         std::move(args));
  return absl::OkStatus();
}

absl::Status Builder::Attention(bool decode) {
  const Layout& q = r_.operand(0);
  const Layout& k = r_.operand(1);
  const int64_t batch = q.shape[0], tokens = q.shape[1], q_heads = q.shape[2], dim = q.shape[3];
  const int64_t kv_heads = k.shape[1], capacity = k.shape[2];
  const ir::DType dtype = r_.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, TypeName(dtype, "q"));
  TP_ASSIGN_OR_RETURN(const int64_t q_stride, TokenStride(0, 2));
  TP_RETURN_IF_ERROR(RequireContiguous(k, "k_cache"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(2), "v_cache"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(3), "positions"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.result(0), "the result"));
  if (kv_heads == 0 || q_heads % kv_heads != 0) {
    return Error("query heads ", q_heads, " are not a multiple of kv heads ", kv_heads);
  }
  TP_ASSIGN_OR_RETURN(const double scale, r_.region().attrs.GetFloat("scale"));
  TP_ASSIGN_OR_RETURN(const int64_t window, r_.region().attrs.GetIntOr("sliding_window", 0));
  const int64_t es = ir::DTypeSize(dtype);
  if ((dim * es) % 16 != 0 || (q_stride * es) % 16 != 0) {
    return Error("head dim ", dim, " and token stride ", q_stride,
                 " must be whole 16-byte vectors");
  }
  TP_RETURN_IF_ERROR(CheckOperands(16, {0, 1, 2}));
  TP_RETURN_IF_ERROR(CheckOperands(4, {3}));
  TP_RETURN_IF_ERROR(CheckResults(16, {0}));
  KernelArgs args;
  args.Add(Operand(0)).Add(static_cast<long long>(q_stride)).Add(Operand(1)).Add(Operand(2));
  args.Add(Operand(3)).Add(Result(0));
  if (decode) {
    TP_ASSIGN_OR_RETURN(const int64_t kv_chunk, Param("kv_chunk"));
    TP_ASSIGN_OR_RETURN(const int64_t splits, Param("splits"));
    TP_ASSIGN_OR_RETURN(const int64_t warps, Param("warps"));
    if (tokens > 16) return Error(tokens, " new tokens exceed the 16 of split-KV decode");
    const int64_t queries = tokens * (q_heads / kv_heads);
    TP_ASSIGN_OR_RETURN(const SplitPointers split, SplitBuffers(splits, "split-KV"));
    args.Add(split.workspace).Add(split.counters);
    args.Add(static_cast<int>(tokens)).Add(static_cast<int>(q_heads));
    args.Add(static_cast<int>(kv_heads)).Add(static_cast<int>(capacity));
    args.Add(static_cast<float>(scale)).Add(static_cast<int>(window));
    instance.source = "attention_decode_split_kv.cuh";
    Launch(
        absl::StrCat("tileplan::attention_decode_split_kv<", type, ", ", dim, ", ", kv_chunk, ", ",
                     splits, ", ", warps, ", ", std::min<int64_t>(8, Pow2Ceil(queries)), ">"),
        {splits, kv_heads, batch}, {32 * warps, 1, 1},
        (queries * dim + warps * queries * (dim + 2)) * 4, std::move(args));
    return absl::OkStatus();
  }
  TP_ASSIGN_OR_RETURN(const int64_t tile_q, Param("tile_q"));
  TP_ASSIGN_OR_RETURN(const int64_t tile_kv, Param("tile_kv"));
  TP_ASSIGN_OR_RETURN(const int64_t stages, Param("stages"));
  TP_ASSIGN_OR_RETURN(const int64_t warps, Param("warps"));
  TP_ASSIGN_OR_RETURN(const int64_t pack_gqa, Param("pack_gqa"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, Param("splits"));
  if (dtype != ir::DType::kBF16 && dtype != ir::DType::kF16) {
    return Error("tensor-core attention needs bf16 or f16, got ", ir::DTypeName(dtype));
  }
  if (dim % 16 != 0) return Error("head dim ", dim, " is not a multiple of 16");
  TP_ASSIGN_OR_RETURN(const SplitPointers split, SplitBuffers(splits, "split-KV"));
  args.Add(split.workspace).Add(split.counters);
  args.Add(static_cast<int>(tokens)).Add(static_cast<int>(q_heads));
  args.Add(static_cast<int>(kv_heads)).Add(static_cast<int>(capacity));
  args.Add(static_cast<float>(scale)).Add(static_cast<int>(window));
  instance.source = "attention_prefill_flash.cuh";
  // Packed, a CTA's rows are (token, group member) pairs of one kv head.
  const int64_t rows = pack_gqa != 0 ? tokens * (q_heads / kv_heads) : tokens;
  Launch(
      absl::StrCat("tileplan::attention_prefill_flash<", type, ", ", dim, ", ", tile_q, ", ",
                   tile_kv, ", ", stages, ", ", warps, ", ", pack_gqa != 0 ? "true" : "false",
                   ", ", splits, ">"),
      {CeilDiv(rows, tile_q) * splits, pack_gqa != 0 ? kv_heads : q_heads, batch},
      {32 * warps, 1, 1},
      (tile_q + 2 * stages * tile_kv) * dim * es, std::move(args));
  return absl::OkStatus();
}

// qk_norm_rope_kv_write_attention and rope_kv_write_attention on attention_decode's grid.
absl::Status Builder::AttentionRope() {
  TP_ASSIGN_OR_RETURN(const int64_t kv_chunk, Param("kv_chunk"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, Param("splits"));
  TP_ASSIGN_OR_RETURN(const int64_t warps, Param("warps"));
  const bool norm = r_.kind() == "qk_norm_rope_kv_write_attention";
  const int k_index = norm ? 3 : 1;
  const int positions = k_index + 2;
  const Layout& qkv = r_.operand(0);
  const Layout& k = r_.operand(k_index);
  const int64_t batch = qkv.shape[0], tokens = qkv.shape[1];
  const int64_t dim = k.shape[3], capacity = k.shape[2];
  TP_ASSIGN_OR_RETURN(const int64_t q_heads, r_.region().attrs.GetInt("num_heads"));
  TP_ASSIGN_OR_RETURN(const int64_t kv_heads, r_.region().attrs.GetInt("num_kv_heads"));
  const ir::DType dtype = r_.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, TypeName(dtype, "qkv"));
  TP_ASSIGN_OR_RETURN(const int64_t stride, TokenStride(0, 2));
  TP_RETURN_IF_ERROR(RequireContiguous(k, "k_cache"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(k_index + 1), "v_cache"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.operand(positions), "positions"));
  TP_RETURN_IF_ERROR(RequireContiguous(r_.result(0), "the result"));
  if (kv_heads <= 0 || q_heads % kv_heads != 0) {
    return Error("query heads ", q_heads, " are not a multiple of kv heads ", kv_heads);
  }
  if (tokens > 16) return Error(tokens, " new tokens exceed the 16 of split-KV decode");
  const int64_t es = ir::DTypeSize(dtype);
  if ((dim * es) % 16 != 0 || dim > 256) {
    return Error("head dim ", dim, " must be whole 16-byte vectors, at most 256");
  }
  TP_ASSIGN_OR_RETURN(const double scale, r_.region().attrs.GetFloat("scale"));
  TP_ASSIGN_OR_RETURN(const int64_t window, r_.region().attrs.GetIntOr("sliding_window", 0));
  // rope_kv_write's vector: whole lanes on each half of a head, dividing the row layout.
  const int64_t rope_vec = WidestDividing(
      std::min<int64_t>(16 / es, std::max<int64_t>(1, dim / 64)), {dim / 2, stride, qkv.offset});
  TP_RETURN_IF_ERROR(CheckOperands(rope_vec * es, {0}));
  TP_RETURN_IF_ERROR(CheckOperands(16, {k_index, k_index + 1}));
  TP_RETURN_IF_ERROR(CheckOperands(4, {positions}));
  std::string w_type = type;
  if (norm) {
    TP_ASSIGN_OR_RETURN(w_type, TypeName(r_.operand_dtype(1), "q_norm"));
    TP_RETURN_IF_ERROR(CheckOperands(rope_vec * ir::DTypeSize(r_.operand_dtype(1)), {1, 2}));
  }
  TP_RETURN_IF_ERROR(CheckResults(16, {0, 1, 2}));
  if (buffers_ != nullptr && buffers_->rope_inv_freq == nullptr) {
    return Error("no rope frequencies (RegionBuffers::rope_inv_freq)");
  }
  TP_ASSIGN_OR_RETURN(const SplitPointers split, SplitBuffers(splits, "split-KV"));
  KernelArgs args;
  args.Add(Operand(0)).Add(static_cast<long long>(stride));
  args.Add(norm ? Operand(1) : nullptr).Add(norm ? Operand(2) : nullptr);
  float eps = 0.f;
  if (norm) {
    TP_ASSIGN_OR_RETURN(const double e, r_.region().attrs.GetFloat("eps"));
    eps = static_cast<float>(e);
  }
  args.Add(eps).Add(Operand(positions));
  args.Add(buffers_ != nullptr ? buffers_->rope_inv_freq : nullptr);
  args.Add(Result(1)).Add(Result(2)).Add(Result(0));
  args.Add(split.workspace).Add(split.counters);
  args.Add(static_cast<int>(tokens)).Add(static_cast<int>(q_heads));
  args.Add(static_cast<int>(kv_heads)).Add(static_cast<int>(capacity));
  args.Add(static_cast<float>(scale)).Add(static_cast<int>(window));
  args.Add(buffers_ != nullptr ? buffers_->error : nullptr);
  const int64_t queries = tokens * (q_heads / kv_heads);
  instance.source = "attention_decode_rope.cuh";
  Launch(absl::StrCat("tileplan::attention_decode_rope<", type, ", ", w_type, ", ", dim, ", ",
                      kv_chunk, ", ", splits, ", ", warps, ", ",
                      std::min<int64_t>(8, Pow2Ceil(queries)), ", ", rope_vec, ", ",
                      norm ? "true" : "false", ">"),
         {splits, kv_heads, batch}, {32 * warps, 1, 1},
         (queries * dim + warps * queries * (dim + 2)) * 4, std::move(args));
  return absl::OkStatus();
}

absl::Status Builder::Rope() {
  TP_ASSIGN_OR_RETURN(const int64_t heads_per_cta, Param("heads_per_cta"));
  const std::string& kind = r_.kind();
  const bool fused = kind == "rope_kv_write" || kind == "qk_norm_rope_kv_write";
  const bool norm = kind == "qk_norm_rope_kv_write";
  const int input = kind == "kv_write" ? 1 : 0;  // the operand holding the heads
  const int positions = kind == "rope" ? 1 : kind == "kv_write" ? 2 : norm ? 5 : 3;
  const ir::DType dtype = r_.operand_dtype(input);
  TP_ASSIGN_OR_RETURN(const std::string type, TypeName(dtype, "the heads"));
  const Layout& in = r_.operand(input);
  const int64_t batch = in.shape[0], tokens = in.shape[1];
  int64_t dim = 0, heads = 0, q_heads = 0, kv_heads = 0, capacity = 0;
  if (fused) {
    TP_ASSIGN_OR_RETURN(q_heads, r_.region().attrs.GetInt("num_heads"));
    TP_ASSIGN_OR_RETURN(kv_heads, r_.region().attrs.GetInt("num_kv_heads"));
    dim = r_.result(0).shape[3];
    heads = q_heads + 2 * kv_heads;
    capacity = r_.result(1).shape[2];
  } else {
    heads = in.shape[2];
    dim = in.shape[3];
    if (kind == "kv_write") capacity = r_.operand(0).shape[2];
  }
  TP_ASSIGN_OR_RETURN(const int64_t stride, TokenStride(input, 2));
  for (int i = 0; i < r_.num_results(); ++i) {
    TP_RETURN_IF_ERROR(RequireContiguous(r_.result(i), absl::StrCat("result ", i)));
  }
  if (dim % 2 != 0 || dim > 256) return Error("head dim ", dim, " is odd or above 256");
  const int64_t es = ir::DTypeSize(dtype);
  const int64_t vec = WidestDividing(std::min<int64_t>(16 / es, std::max<int64_t>(1, dim / 64)),
                                     {dim / 2, stride, in.offset});
  TP_RETURN_IF_ERROR(CheckOperands(vec * es, {input}));
  TP_RETURN_IF_ERROR(CheckOperands(4, {positions}));
  if (norm) TP_RETURN_IF_ERROR(CheckOperands(vec * ir::DTypeSize(r_.operand_dtype(1)), {1, 2}));
  TP_RETURN_IF_ERROR(CheckResults(vec * es, kind == "kv_write" ? std::initializer_list<int>{0}
                                            : fused            ? std::initializer_list<int>{0, 1, 2}
                                                               : std::initializer_list<int>{0}));
  if (buffers_ != nullptr && NeedsRopeFrequencies(kind) && buffers_->rope_inv_freq == nullptr) {
    return Error("no rope frequencies (RegionBuffers::rope_inv_freq)");
  }
  const float* inv_freq = buffers_ != nullptr ? buffers_->rope_inv_freq : nullptr;
  int* error = buffers_ != nullptr ? buffers_->error : nullptr;
  KernelArgs args;
  std::string kernel;
  if (kind == "rope") {
    args.Add(Operand(0)).Add(static_cast<long long>(stride)).Add(Operand(1)).Add(inv_freq);
    args.Add(Result(0)).Add(static_cast<int>(heads));
    kernel = absl::StrCat("tileplan::rope<", type, ", ", dim, ", ", heads_per_cta, ", ", vec, ">");
  } else if (kind == "kv_write") {
    args.Add(Result(0)).Add(Operand(1)).Add(static_cast<long long>(stride)).Add(Operand(2));
    args.Add(static_cast<int>(tokens)).Add(static_cast<int>(heads));
    args.Add(static_cast<int>(capacity)).Add(error);
    kernel =
        absl::StrCat("tileplan::kv_write<", type, ", ", dim, ", ", heads_per_cta, ", ", vec, ">");
  } else {
    args.Add(Operand(0)).Add(static_cast<long long>(stride));
    if (norm) {
      TP_ASSIGN_OR_RETURN(const double eps, r_.region().attrs.GetFloat("eps"));
      args.Add(Operand(1)).Add(Operand(2)).Add(static_cast<float>(eps));
      TP_ASSIGN_OR_RETURN(const std::string w_type, TypeName(r_.operand_dtype(1), "q_norm"));
      kernel = absl::StrCat("tileplan::qk_norm_rope_kv_write<", type, ", ", w_type, ", ", dim, ", ",
                            heads_per_cta, ", ", vec, ">");
    } else {
      kernel = absl::StrCat("tileplan::rope_kv_write<", type, ", ", dim, ", ", heads_per_cta, ", ",
                            vec, ">");
    }
    args.Add(Operand(positions)).Add(inv_freq).Add(Result(0)).Add(Result(1)).Add(Result(2));
    args.Add(static_cast<int>(tokens)).Add(static_cast<int>(q_heads));
    args.Add(static_cast<int>(kv_heads)).Add(static_cast<int>(capacity)).Add(error);
  }
  instance.source = "rope_kv_write.cuh";
  Launch(std::move(kernel),
         {CeilDiv(heads, heads_per_cta), std::max<int64_t>(1, batch * tokens), 1},
         {32 * heads_per_cta, 1, 1}, 0, std::move(args));
  return absl::OkStatus();
}

absl::Status Builder::Argmax() {
  TP_ASSIGN_OR_RETURN(const int64_t threads, Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, Param("splits"));
  TP_ASSIGN_OR_RETURN(const Matrix logits, AsMatrix(r_.operand(0), "the logits"));
  if (r_.operand_dtype(0) != ir::DType::kF32) return Error("logits must be f32");
  TP_RETURN_IF_ERROR(RequireContiguous(r_.result(0), "the result"));
  if (logits.cols < 1) return Error("logits have an empty last dim");
  const int64_t vec = WidestDividing(4, {logits.cols, logits.stride, r_.operand(0).offset});
  TP_RETURN_IF_ERROR(CheckOperands(vec * 4, {0}));
  TP_RETURN_IF_ERROR(CheckResults(4, {0}));
  TP_ASSIGN_OR_RETURN(const SplitPointers split, SplitBuffers(splits, "argmax"));
  instance.source = "argmax.cuh";
  KernelArgs args;
  args.Add(Operand(0)).Add(static_cast<long long>(logits.stride)).Add(Result(0));
  args.Add(split.workspace).Add(split.counters);
  args.Add(static_cast<int>(logits.cols));
  Launch(absl::StrCat("tileplan::argmax<", threads, ", ", splits, ", ", vec, ">"),
         {splits, std::max<int64_t>(1, logits.rows), 1}, {threads, 1, 1}, 0, std::move(args));
  return absl::OkStatus();
}

absl::Status Builder::Build() {
  const std::string& family = t_.family;
  if (family == "embedding_gather") return Embedding();
  if (family == "rms_norm") return RmsNorm();
  if (family == "elementwise") return Elementwise();
  if (family == "gemv") return Gemv();
  if (family == "attention_decode") {
    return r_.kind() == "attention" ? Attention(true) : AttentionRope();
  }
  if (family == "attention_prefill") return Attention(false);
  if (family == "rope_kv_write") return Rope();
  if (family == "argmax") return Argmax();
  return Error("family '", family, "' has no CUDA templates (template families: ",
               absl::StrJoin(CudaTemplateFamilies(), ", "), ")");
}

uint16_t FloatToHalfBits(float value, ir::DType dtype) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if (dtype == ir::DType::kBF16) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  // IEEE binary16, round to nearest even.
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {
    // Subnormal (or zero) in half: value * 2^24 rounded to an integer.
    float f;
    const uint32_t a = abs;
    std::memcpy(&f, &a, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(f * 16777216.0f)));
  }
  uint32_t h = ((abs >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfBitsToFloat(uint16_t bits, ir::DType dtype) {
  uint32_t u;
  if (dtype == ir::DType::kBF16) {
    u = static_cast<uint32_t>(bits) << 16;
  } else {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    if (exponent == 0) {
      const float f = std::ldexp(static_cast<float>(mantissa), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    } else if (exponent == 31) {
      u = sign | 0x7f800000u | (mantissa << 13);
    } else {
      u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

const std::vector<std::string>& CudaTemplateFamilies() {
  static const auto* families = new std::vector<std::string>{
      "argmax", "attention_decode", "attention_prefill", "elementwise", "embedding_gather",
      "gemv",   "rms_norm",         "rope_kv_write"};
  return *families;
}

bool IsCudaTemplateFamily(absl::string_view family) {
  const std::vector<std::string>& all = CudaTemplateFamilies();
  return std::binary_search(all.begin(), all.end(), family);
}

void** KernelArgs::pointers() {
  pointers_.clear();
  for (uint64_t& slot : slots_) pointers_.push_back(&slot);
  return pointers_.data();
}

absl::StatusOr<KernelInstance> InstanceFor(const BoundRegion& region, const Tactic& tactic) {
  Builder builder(region, tactic, nullptr);
  TP_RETURN_IF_ERROR(builder.Build());
  return std::move(builder.instance);
}

absl::StatusOr<std::vector<PreparedLaunch>> PrepareLaunches(const KernelFamily& family,
                                                            const BoundRegion& region,
                                                            const Tactic& tactic,
                                                            const RegionBuffers& buffers) {
  Builder builder(region, tactic, &buffers);
  TP_RETURN_IF_ERROR(builder.Build());
  const LaunchGeometry geometry = family.Geometry(tactic, region);
  const device::LaunchConfig& config = builder.launches.front().config;
  if (builder.launches.size() != 1 || geometry.grid != config.grid ||
      geometry.block != config.block ||
      geometry.dynamic_shared_memory_bytes != config.dynamic_shared_memory_bytes) {
    return absl::InternalError(absl::StrCat(
        region.Label(), ": family ", family.name(), " describes grid ",
        absl::StrJoin(geometry.grid, "x"), ", block ", absl::StrJoin(geometry.block, "x"), ", ",
        geometry.dynamic_shared_memory_bytes, " bytes shared memory, but its template ",
        builder.instance.name_expressions.front(), " launches with grid ",
        absl::StrJoin(config.grid, "x"), ", block ", absl::StrJoin(config.block, "x"), ", ",
        config.dynamic_shared_memory_bytes, " bytes"));
  }
  return std::move(builder.launches);
}

std::string EncodeFloats(ir::DType dtype, const std::vector<float>& values) {
  std::string bytes;
  if (dtype == ir::DType::kF32) {
    bytes.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  bytes.resize(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = FloatToHalfBits(values[i], dtype);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
  return bytes;
}

std::vector<float> DecodeFloats(ir::DType dtype, absl::string_view bytes) {
  std::vector<float> values;
  if (dtype == ir::DType::kF32) {
    values.resize(bytes.size() / 4);
    if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * 4);
    return values;
  }
  values.resize(bytes.size() / 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    values[i] = HalfBitsToFloat(h, dtype);
  }
  return values;
}

float RoundToDType(ir::DType dtype, float value) {
  if (dtype == ir::DType::kF32) return value;
  return HalfBitsToFloat(FloatToHalfBits(value, dtype), dtype);
}

bool NeedsRopeFrequencies(absl::string_view kind) {
  return kind == "rope" || kind == "rope_kv_write" || kind == "qk_norm_rope_kv_write" ||
         kind == "rope_kv_write_attention" || kind == "qk_norm_rope_kv_write_attention";
}

KernelInstance FillUniformInstance(ir::DType dtype) {
  const char* type = dtype == ir::DType::kBF16  ? "tileplan::bf16"
                     : dtype == ir::DType::kF16 ? "tileplan::f16"
                                                : "float";
  return {"runtime_support.cuh", {absl::StrCat("tileplan::fill_uniform<", type, ">")}};
}

KernelInstance DecodeAdvanceInstance() {
  return {"runtime_support.cuh", {"tileplan::decode_advance"}};
}

KernelInstance TrapFaultInstance() { return {"runtime_support.cuh", {"tileplan::trap_fault"}}; }

}  // namespace tileplan::kernels
