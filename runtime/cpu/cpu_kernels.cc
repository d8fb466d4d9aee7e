#include "runtime/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/text.h"

namespace tileplan::runtime::cpu {

int64_t TensorArg::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

template <typename... Args>
absl::Status Error(const KernelContext& ctx, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(ctx.label, ": ", args...));
}

absl::Status ExpectFloat(const KernelContext& ctx, const TensorArg& t, absl::string_view what) {
  if (t.dtype == ir::DType::kI32) {
    return Error(ctx, what, " must be a floating-point tensor, got i32");
  }
  return absl::OkStatus();
}

absl::Status ExpectInt(const KernelContext& ctx, const TensorArg& t, absl::string_view what) {
  if (t.dtype != ir::DType::kI32) {
    return Error(ctx, what, " must be i32, got ", ir::DTypeName(t.dtype));
  }
  return absl::OkStatus();
}

absl::Status ExpectRank(const KernelContext& ctx, const TensorArg& t, int rank,
                        absl::string_view what) {
  if (static_cast<int>(t.shape.size()) != rank) {
    return Error(ctx, what, " must have rank ", rank, ", got shape ", ShapeString(t.shape));
  }
  return absl::OkStatus();
}

absl::Status ExpectMinRank(const KernelContext& ctx, const TensorArg& t, int rank,
                           absl::string_view what) {
  if (static_cast<int>(t.shape.size()) < rank) {
    return Error(ctx, what, " must have rank >= ", rank, ", got shape ", ShapeString(t.shape));
  }
  return absl::OkStatus();
}

absl::Status ExpectShape(const KernelContext& ctx, const TensorArg& t,
                         const std::vector<int64_t>& want, absl::string_view what) {
  if (t.shape != want) {
    return Error(ctx, what, " has shape ", ShapeString(t.shape), ", expected ", ShapeString(want));
  }
  return absl::OkStatus();
}

// `shape` with its last dim replaced by `last`.
std::vector<int64_t> WithLastDim(std::vector<int64_t> shape, int64_t last) {
  shape.back() = last;
  return shape;
}

absl::Status Embedding(KernelContext& ctx) {
  const TensorArg& ids = ctx.operands[0];
  const TensorArg& table = ctx.operands[1];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectInt(ctx, ids, "ids"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, table, "table"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, table, 2, "table"));
  const int64_t vocab = table.shape[0];
  const int64_t hidden = table.shape[1];
  std::vector<int64_t> out_shape = ids.shape;
  out_shape.push_back(hidden);
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, out_shape, "result"));
  const int64_t n = ids.num_elements();
  for (int64_t k = 0; k < n; ++k) {
    if (ids.i[k] < 0 || ids.i[k] >= vocab) {
      return Error(ctx, "token id ", ids.i[k], " at ", IndexString(k, ids.shape),
                   " is outside the vocabulary [0, ", vocab, ")");
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    std::copy_n(table.f + ids.i[k] * hidden, hidden, out.f + k * hidden);
  }
  return absl::OkStatus();
}

absl::Status RmsNorm(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  const TensorArg& w = ctx.operands[1];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, w, "weight"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, x, 1, "x"));
  const int64_t n = x.shape.back();
  TP_RETURN_IF_ERROR(ExpectShape(ctx, w, {n}, "weight"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, x.shape, "result"));
  TP_ASSIGN_OR_RETURN(const double eps, ctx.region->attrs.GetFloat("eps"));
  if (!(eps >= 0) || n == 0) {
    return Error(ctx, "needs eps >= 0 and a non-empty last dim, got eps ", eps, " and shape ",
                 ShapeString(x.shape));
  }
  const int64_t rows = x.num_elements() / n;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.f + r * n;
    double sum_sq = 0;
    for (int64_t k = 0; k < n; ++k) sum_sq += static_cast<double>(xr[k]) * xr[k];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
    for (int64_t k = 0; k < n; ++k) {
      out.f[r * n + k] = static_cast<float>(xr[k] * inv_rms * w.f[k]);
    }
  }
  return absl::OkStatus();
}

// out[r, n] = sum_k x[r, k] · w[n, k] (+ bias[n]), parallel over n.
absl::Status MatMulTransposed(KernelContext& ctx, const float* bias) {
  const TensorArg& x = ctx.operands[0];
  const TensorArg& w = ctx.operands[1];
  TensorArg& out = ctx.results[0];
  const int64_t k_dim = x.shape.back();
  const int64_t n_dim = w.shape[0];
  const int64_t rows = k_dim == 0 ? 0 : x.num_elements() / k_dim;
  ctx.pool->ParallelFor(n_dim, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* wn = w.f + n * k_dim;
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.f + r * k_dim;
        double acc = bias != nullptr ? bias[n] : 0.0;
        for (int64_t k = 0; k < k_dim; ++k) acc += static_cast<double>(xr[k]) * wn[k];
        out.f[r * n_dim + n] = static_cast<float>(acc);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CheckMatMulShapes(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  const TensorArg& w = ctx.operands[1];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, w, "weight"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, ctx.results[0], "result"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, x, 1, "x"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, w, 2, "weight"));
  if (w.shape[1] != x.shape.back()) {
    return Error(ctx, "weight has shape ", ShapeString(w.shape), " but x has shape ",
                 ShapeString(x.shape), " (weight is [out, in])");
  }
  return ExpectShape(ctx, ctx.results[0], WithLastDim(x.shape, w.shape[0]), "result");
}

absl::Status Linear(KernelContext& ctx) {
  TP_RETURN_IF_ERROR(CheckMatMulShapes(ctx));
  const float* bias = nullptr;
  if (ctx.operands.size() == 3) {
    const TensorArg& b = ctx.operands[2];
    TP_RETURN_IF_ERROR(ExpectFloat(ctx, b, "bias"));
    TP_RETURN_IF_ERROR(ExpectShape(ctx, b, {ctx.operands[1].shape[0]}, "bias"));
    bias = b.f;
  }
  return MatMulTransposed(ctx, bias);
}

absl::Status LmHead(KernelContext& ctx) {
  TP_RETURN_IF_ERROR(CheckMatMulShapes(ctx));
  return MatMulTransposed(ctx, nullptr);
}

absl::Status Reshape(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  TensorArg& out = ctx.results[0];
  if ((x.dtype == ir::DType::kI32) != (out.dtype == ir::DType::kI32)) {
    return Error(ctx, "result dtype ", ir::DTypeName(out.dtype), " differs from operand dtype ",
                 ir::DTypeName(x.dtype));
  }
  if (x.num_elements() != out.num_elements()) {
    return Error(ctx, "cannot reshape ", ShapeString(x.shape), " (", x.num_elements(),
                 " elements) to ", ShapeString(out.shape), " (", out.num_elements(), " elements)");
  }
  // A view result shares the operand's storage; otherwise the elements are copied.
  if (x.f != nullptr && out.f != x.f) std::copy_n(x.f, x.num_elements(), out.f);
  if (x.i != nullptr && out.i != x.i) std::copy_n(x.i, x.num_elements(), out.i);
  return absl::OkStatus();
}

absl::Status Split(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, x, 1, "x"));
  TP_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, ctx.region->attrs.GetInts("sizes"));
  if (sizes.size() != ctx.results.size()) {
    return Error(ctx, "sizes has ", sizes.size(), " entries for ", ctx.results.size(), " results");
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return Error(ctx, "sizes has a negative entry ", s);
    total += s;
  }
  const int64_t n = x.shape.back();
  if (total != n) {
    return Error(ctx, "sizes [", absl::StrJoin(sizes, ","), "] sum to ", total,
                 ", but the last dim of x is ", n);
  }
  for (size_t j = 0; j < sizes.size(); ++j) {
    TP_RETURN_IF_ERROR(ExpectFloat(ctx, ctx.results[j], absl::StrCat("result ", j)));
    TP_RETURN_IF_ERROR(ExpectShape(ctx, ctx.results[j], WithLastDim(x.shape, sizes[j]),
                                   absl::StrCat("result ", j)));
  }
  const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
  int64_t offset = 0;
  for (size_t j = 0; j < sizes.size(); ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(x.f + r * n + offset, sizes[j], ctx.results[j].f + r * sizes[j]);
    }
    offset += sizes[j];
  }
  return absl::OkStatus();
}

absl::Status Rope(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  const TensorArg& pos = ctx.operands[1];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, pos, "positions"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, x, 4, "x"));
  const int64_t batch = x.shape[0], tokens = x.shape[1], heads = x.shape[2], dim = x.shape[3];
  TP_RETURN_IF_ERROR(ExpectShape(ctx, pos, {batch, tokens}, "positions"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, x.shape, "result"));
  if (dim % 2 != 0) return Error(ctx, "head dim ", dim, " is odd");
  TP_ASSIGN_OR_RETURN(const ir::RopeParams params, ir::RopeParamsFromAttributes(ctx.region->attrs));
  const std::vector<float> inv_freq = ir::RopeInvFreq(params, dim);
  const int64_t half = dim / 2;
  // Pair i is (x[i], x[i + D/2]), or (x[2i], x[2i + 1]) when interleaved.
  const int64_t first_stride = params.interleaved ? 2 : 1;
  const int64_t second_offset = params.interleaved ? 1 : half;
  // yarn's attention_factor scales cos and sin (1 for the other types), in float32 after
  // they are rounded, as transformers does (`cos = emb.cos() * attention_scaling`).
  const float attention_factor = static_cast<float>(params.attention_factor);
  std::vector<float> cos_a(static_cast<size_t>(half)), sin_a(static_cast<size_t>(half));
  for (int64_t bt = 0; bt < batch * tokens; ++bt) {
    // The angle is formed in float32 (position times inv_freq) like the reference.
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos.i[bt]) * inv_freq[i];
      cos_a[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
      sin_a[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
    }
    for (int64_t h = 0; h < heads; ++h) {
      const float* xv = x.f + (bt * heads + h) * dim;
      float* ov = out.f + (bt * heads + h) * dim;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = i * first_stride, b = a + second_offset;
        const float lo = xv[a], hi = xv[b];
        ov[a] = lo * cos_a[i] - hi * sin_a[i];
        ov[b] = hi * cos_a[i] + lo * sin_a[i];
      }
    }
  }
  return absl::OkStatus();
}

// Checks that every position lies in [0, capacity).
absl::Status CheckPositions(const KernelContext& ctx, const TensorArg& pos, int64_t capacity) {
  const int64_t n = pos.num_elements();
  for (int64_t k = 0; k < n; ++k) {
    if (pos.i[k] < 0 || pos.i[k] >= capacity) {
      return Error(ctx, "position ", pos.i[k], " of token ", IndexString(k, pos.shape),
                   " is outside the KV cache [0, ", capacity, ")");
    }
  }
  return absl::OkStatus();
}

absl::Status KvWrite(KernelContext& ctx) {
  const TensorArg& cache = ctx.operands[0];
  const TensorArg& x = ctx.operands[1];
  const TensorArg& pos = ctx.operands[2];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, cache, "cache"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, pos, "positions"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, cache, 4, "cache"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, x, 4, "x"));
  const int64_t batch = cache.shape[0], heads = cache.shape[1], capacity = cache.shape[2],
                dim = cache.shape[3];
  const int64_t tokens = x.shape[1];
  TP_RETURN_IF_ERROR(ExpectShape(ctx, x, {batch, tokens, heads, dim}, "x"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, pos, {batch, tokens}, "positions"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, cache.shape, "result"));
  if (out.f != cache.f) return Error(ctx, "result must be inplace(cache)");
  TP_RETURN_IF_ERROR(CheckPositions(ctx, pos, capacity));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t p = pos.i[b * tokens + t];
      for (int64_t h = 0; h < heads; ++h) {
        std::copy_n(x.f + ((b * tokens + t) * heads + h) * dim, dim,
                    out.f + ((b * heads + h) * capacity + p) * dim);
      }
    }
  }
  return absl::OkStatus();
}

// One query's causal softmax attention over the cache rows first … last: scores
// dot(j) · scale, softmax and the weighted sum of value(j) ([dim] floats each), all in double,
// written to out[0 … dim). `probs` and `acc` are the caller's scratch.
template <typename Dot, typename Value>
void AttendRows(int64_t first, int64_t last, double scale, int64_t dim, const Dot& dot,
                const Value& value, std::vector<double>& probs, std::vector<double>& acc,
                float* out) {
  probs.assign(static_cast<size_t>(last - first + 1), 0.0);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = first; j <= last; ++j) {
    probs[j - first] = dot(j) * scale;
    max_score = std::max(max_score, probs[j - first]);
  }
  double sum = 0;
  for (double& s : probs) {
    s = std::exp(s - max_score);
    sum += s;
  }
  acc.assign(static_cast<size_t>(dim), 0.0);
  for (int64_t j = first; j <= last; ++j) {
    const float* vj = value(j);
    const double weight = probs[j - first] / sum;
    for (int64_t d = 0; d < dim; ++d) acc[d] += weight * vj[d];
  }
  for (int64_t d = 0; d < dim; ++d) out[d] = static_cast<float>(acc[d]);
}

absl::Status Attention(KernelContext& ctx) {
  const TensorArg& q = ctx.operands[0];
  const TensorArg& k = ctx.operands[1];
  const TensorArg& v = ctx.operands[2];
  const TensorArg& pos = ctx.operands[3];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, q, "q"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, k, "k_cache"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, v, "v_cache"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, pos, "positions"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, q, 4, "q"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, k, 4, "k_cache"));
  const int64_t batch = q.shape[0], tokens = q.shape[1], q_heads = q.shape[2], dim = q.shape[3];
  const int64_t kv_heads = k.shape[1], capacity = k.shape[2];
  TP_RETURN_IF_ERROR(ExpectShape(ctx, k, {batch, kv_heads, capacity, dim}, "k_cache"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, v, k.shape, "v_cache"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, pos, {batch, tokens}, "positions"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, q.shape, "result"));
  if (kv_heads == 0 || q_heads % kv_heads != 0) {
    return Error(ctx, "query heads (", q_heads, ") must be a multiple of kv heads (", kv_heads,
                 ")");
  }
  TP_ASSIGN_OR_RETURN(const double scale, ctx.region->attrs.GetFloat("scale"));
  TP_ASSIGN_OR_RETURN(const int64_t window, ctx.region->attrs.GetIntOr("sliding_window", 0));
  if (window < 0) return Error(ctx, "sliding_window must be >= 0, got ", window);
  TP_RETURN_IF_ERROR(CheckPositions(ctx, pos, capacity));
  const int64_t group = q_heads / kv_heads;
  ctx.pool->ParallelFor(batch * tokens * q_heads, [&](int64_t begin, int64_t end) {
    std::vector<double> probs, acc;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t h = item % q_heads;
      const int64_t bt = item / q_heads;
      const int64_t b = bt / tokens;
      const int64_t p = pos.i[bt];
      const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      const float* qv = q.f + item * dim;
      const int64_t kv_base = (b * kv_heads + h / group) * capacity;
      auto dot = [&](int64_t j) {
        const float* kj = k.f + (kv_base + j) * dim;
        double sum = 0;
        for (int64_t d = 0; d < dim; ++d) sum += static_cast<double>(qv[d]) * kj[d];
        return sum;
      };
      auto value = [&](int64_t j) { return v.f + (kv_base + j) * dim; };
      AttendRows(first, p, scale, dim, dot, value, probs, acc, out.f + item * dim);
    }
  });
  return absl::OkStatus();
}

template <typename F>
absl::Status Elementwise(KernelContext& ctx, F f) {
  for (size_t j = 0; j < ctx.operands.size(); ++j) {
    TP_RETURN_IF_ERROR(ExpectFloat(ctx, ctx.operands[j], absl::StrCat("operand ", j)));
    TP_RETURN_IF_ERROR(
        ExpectShape(ctx, ctx.operands[j], ctx.operands[0].shape, absl::StrCat("operand ", j)));
  }
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, ctx.operands[0].shape, "result"));
  const int64_t n = out.num_elements();
  for (int64_t e = 0; e < n; ++e) out.f[e] = f(e);
  return absl::OkStatus();
}

absl::Status Add(KernelContext& ctx) {
  const float* a = ctx.operands[0].f;
  const float* b = ctx.operands[1].f;
  return Elementwise(ctx, [&](int64_t e) { return a[e] + b[e]; });
}

absl::Status Mul(KernelContext& ctx) {
  const float* a = ctx.operands[0].f;
  const float* b = ctx.operands[1].f;
  return Elementwise(ctx, [&](int64_t e) { return a[e] * b[e]; });
}

absl::Status Silu(KernelContext& ctx) {
  const float* x = ctx.operands[0].f;
  return Elementwise(ctx, [&](int64_t e) {
    const double v = x[e];
    return static_cast<float>(v / (1.0 + std::exp(-v)));
  });
}

absl::Status Argmax(KernelContext& ctx) {
  const TensorArg& logits = ctx.operands[0];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, logits, "logits"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, logits, 1, "logits"));
  const int64_t vocab = logits.shape.back();
  if (vocab == 0) return Error(ctx, "logits have an empty last dim");
  TP_RETURN_IF_ERROR(ExpectShape(
      ctx, out, std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1), "result"));
  const int64_t rows = logits.num_elements() / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.f + r * vocab;
    int64_t best = 0;
    for (int64_t j = 1; j < vocab; ++j) {
      if (row[j] > row[best]) best = j;
    }
    out.i[r] = static_cast<int32_t>(best);
  }
  return absl::OkStatus();
}

// The contributions of every rank of the region's group to a collective (ranks attribute R):
// this rank's `data` alone when R is 1, an error when the backend has no group of R ranks.
absl::StatusOr<InProcessGroup::Contributions> Gather(KernelContext& ctx, const float* data,
                                                     int64_t n) {
  TP_ASSIGN_OR_RETURN(const int64_t ranks, ctx.region->attrs.GetInt("ranks"));
  std::vector<float> mine(data, data + n);
  if (ranks == 1 && ctx.group == nullptr) {
    return std::make_shared<const std::vector<std::vector<float>>>(
        std::vector<std::vector<float>>{std::move(mine)});
  }
  if (ctx.group == nullptr || ctx.group->ranks() != ranks) {
    return Error(ctx, absl::StrCat("needs a group of ", ranks, " ranks; the backend runs ",
                                   ctx.group == nullptr
                                       ? std::string("alone")
                                       : absl::StrCat("in a group of ", ctx.group->ranks())));
  }
  return ctx.group->Exchange(ctx.rank, ctx.label, std::move(mine));
}

// all_reduce: the sum over the ranks of x, in rank order in double, plus the bias.
absl::Status AllReduce(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, x, 1, "x"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, x.shape, "result"));
  const int64_t n = x.num_elements(), width = x.shape.back();
  const float* bias = nullptr;
  if (ctx.operands.size() == 2) {
    TP_RETURN_IF_ERROR(ExpectShape(ctx, ctx.operands[1], {width}, "bias"));
    bias = ctx.operands[1].f;
  }
  TP_ASSIGN_OR_RETURN(const InProcessGroup::Contributions all, Gather(ctx, x.f, n));
  for (int64_t e = 0; e < n; ++e) {
    double sum = 0;
    for (const std::vector<float>& part : *all) sum += part[static_cast<size_t>(e)];
    if (bias != nullptr) sum += bias[e % width];
    out.f[e] = static_cast<float>(sum);
  }
  return absl::OkStatus();
}

// all_gather: the ranks' x concatenated along the last dim, in rank order.
absl::Status AllGather(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, x, 1, "x"));
  TP_ASSIGN_OR_RETURN(const InProcessGroup::Contributions all, Gather(ctx, x.f, x.num_elements()));
  const int64_t ranks = static_cast<int64_t>(all->size()), n = x.shape.back();
  std::vector<int64_t> shape = x.shape;
  shape.back() *= ranks;
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, shape, "result"));
  const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
  for (int64_t r = 0; r < ranks; ++r) {
    const float* part = (*all)[static_cast<size_t>(r)].data();
    for (int64_t row = 0; row < rows; ++row) {
      std::copy(part + row * n, part + (row + 1) * n, out.f + (row * ranks + r) * n);
    }
  }
  return absl::OkStatus();
}

// sharded_argmax: the index of the largest logit over every rank's shard (rank r's shard holds
// the logits r * V ... r * V + V - 1); ties go to the lowest index.
absl::Status ShardedArgmax(KernelContext& ctx) {
  const TensorArg& logits = ctx.operands[0];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, logits, "logits"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, logits, 1, "logits"));
  const int64_t shard = logits.shape.back();
  if (shard == 0) return Error(ctx, "logits have an empty last dim");
  TP_RETURN_IF_ERROR(ExpectShape(
      ctx, out, std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1), "result"));
  TP_ASSIGN_OR_RETURN(const InProcessGroup::Contributions all,
                      Gather(ctx, logits.f, logits.num_elements()));
  const int64_t rows = logits.num_elements() / shard;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t best = 0;
    float best_value = (*all)[0][static_cast<size_t>(row * shard)];
    for (size_t r = 0; r < all->size(); ++r) {
      const float* values = (*all)[r].data() + row * shard;
      for (int64_t j = 0; j < shard; ++j) {
        if (values[j] > best_value) {
          best_value = values[j];
          best = static_cast<int64_t>(r) * shard + j;
        }
      }
    }
    if (best > std::numeric_limits<int32_t>::max()) return Error(ctx, "index past int32");
    out.i[row] = static_cast<int32_t>(best);
  }
  return absl::OkStatus();
}

absl::Status MoeRouter(KernelContext& ctx) {
  TP_RETURN_IF_ERROR(ExpectRank(ctx, ctx.operands[0], 3, "x"));
  TP_RETURN_IF_ERROR(CheckMatMulShapes(ctx));
  return MatMulTransposed(ctx, nullptr);
}

// Per token: p = softmax(logits) in double; with num_groups G > 1 only the experts of the
// topk_groups groups with the largest max p compete; the top_k largest p in descending order
// (every tie to the lower index), weighted by p (normalized over the K if norm_topk_prob)
// times scaling.
absl::Status MoeTopk(KernelContext& ctx) {
  const TensorArg& logits = ctx.operands[0];
  TensorArg& ids = ctx.results[0];
  TensorArg& weights = ctx.results[1];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, logits, "logits"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, ids, "result 0 (ids)"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, weights, "result 1 (weights)"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, logits, 3, "logits"));
  const ir::Attributes& attrs = ctx.region->attrs;
  TP_ASSIGN_OR_RETURN(const int64_t k, attrs.GetInt("top_k"));
  TP_ASSIGN_OR_RETURN(const bool norm, attrs.GetBool("norm_topk_prob"));
  TP_ASSIGN_OR_RETURN(const double scaling, attrs.GetFloat("scaling"));
  TP_ASSIGN_OR_RETURN(const int64_t groups, attrs.GetInt("num_groups"));
  TP_ASSIGN_OR_RETURN(const int64_t topk_groups, attrs.GetInt("topk_groups"));
  const int64_t batch = logits.shape[0], tokens = logits.shape[1], experts = logits.shape[2];
  if (experts < 1 || groups < 1 || experts % groups != 0 || topk_groups < 1 ||
      topk_groups > groups || k < 1 || k > topk_groups * (experts / groups) ||
      !std::isfinite(scaling) || !(scaling > 0)) {
    return Error(ctx, "needs E >= 1, num_groups dividing E, 1 <= topk_groups <= num_groups, ",
                 "1 <= top_k <= topk_groups·E/num_groups and a finite scaling > 0; got E ", experts,
                 ", num_groups ", groups, ", topk_groups ", topk_groups, ", top_k ", k,
                 ", scaling ", scaling);
  }
  TP_RETURN_IF_ERROR(ExpectShape(ctx, ids, {batch, tokens, k}, "result 0 (ids)"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, weights, {batch, tokens, k}, "result 1 (weights)"));
  const int64_t group_size = experts / groups;
  std::vector<double> p(static_cast<size_t>(experts));
  std::vector<bool> eligible(static_cast<size_t>(experts));
  std::vector<bool> taken;
  std::vector<double> group_score(static_cast<size_t>(groups));
  std::vector<double> chosen(static_cast<size_t>(k));
  for (int64_t bt = 0; bt < batch * tokens; ++bt) {
    const float* row = logits.f + bt * experts;
    double max_logit = -std::numeric_limits<double>::infinity();
    for (int64_t e = 0; e < experts; ++e) max_logit = std::max<double>(max_logit, row[e]);
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e) {
      p[e] = std::exp(static_cast<double>(row[e]) - max_logit);
      sum += p[e];
    }
    for (double& v : p) v /= sum;
    std::fill(eligible.begin(), eligible.end(), true);
    if (groups > 1) {
      for (int64_t g = 0; g < groups; ++g) {
        group_score[g] =
            *std::max_element(p.begin() + g * group_size, p.begin() + (g + 1) * group_size);
      }
      // The topk_groups best groups (ties: lower group) stay eligible.
      std::fill(eligible.begin(), eligible.end(), false);
      taken.assign(static_cast<size_t>(groups), false);
      for (int64_t n = 0; n < topk_groups; ++n) {
        int64_t best = -1;
        for (int64_t g = 0; g < groups; ++g) {
          if (!taken[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
        }
        taken[best] = true;
        std::fill(eligible.begin() + best * group_size, eligible.begin() + (best + 1) * group_size,
                  true);
      }
    }
    // Selection: the largest eligible p not yet chosen, K times (ties: lower expert).
    double chosen_sum = 0;
    for (int64_t n = 0; n < k; ++n) {
      int64_t best = -1;
      for (int64_t e = 0; e < experts; ++e) {
        if (eligible[e] && (best < 0 || p[e] > p[best])) best = e;
      }
      eligible[best] = false;
      ids.i[bt * k + n] = static_cast<int32_t>(best);
      chosen[n] = p[best];
      chosen_sum += p[best];
    }
    for (int64_t n = 0; n < k; ++n) {
      const double w = norm ? chosen[n] / chosen_sum : chosen[n];
      weights.f[bt * k + n] = static_cast<float>(w * scaling);
    }
  }
  return absl::OkStatus();
}

// out[b,t,k,:] = x[b,t,(k,):] · w[ids[b,t,k]]ᵀ, parallel over the output elements.
absl::Status ExpertLinear(KernelContext& ctx) {
  const TensorArg& x = ctx.operands[0];
  const TensorArg& ids = ctx.operands[1];
  const TensorArg& w = ctx.operands[2];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, ids, "ids"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, w, "weight"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, ids, 3, "ids"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, w, 3, "weight"));
  const int64_t batch = ids.shape[0], tokens = ids.shape[1], k = ids.shape[2];
  const int64_t experts = w.shape[0], n_dim = w.shape[1], hidden = w.shape[2];
  const bool per_selection = x.shape.size() == 4;
  TP_RETURN_IF_ERROR(
      ExpectShape(ctx, x,
                  per_selection ? std::vector<int64_t>{batch, tokens, k, hidden}
                                : std::vector<int64_t>{batch, tokens, hidden},
                  per_selection ? "x (per selection, [B,T,K,H])" : "x ([B,T,H], or [B,T,K,H])"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, {batch, tokens, k, n_dim}, "result"));
  const int64_t selections = ids.num_elements();
  for (int64_t s = 0; s < selections; ++s) {
    if (ids.i[s] < 0 || ids.i[s] >= experts) {
      return Error(ctx, "expert id ", ids.i[s], " at ", IndexString(s, ids.shape),
                   " is outside the experts [0, ", experts, ")");
    }
  }
  ctx.pool->ParallelFor(selections * n_dim, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / n_dim, n = item % n_dim;
      const float* xr = x.f + (per_selection ? s : s / k) * hidden;
      const float* wn = w.f + (static_cast<int64_t>(ids.i[s]) * n_dim + n) * hidden;
      double acc = 0;
      for (int64_t h = 0; h < hidden; ++h) acc += static_cast<double>(xr[h]) * wn[h];
      out.f[item] = static_cast<float>(acc);
    }
  });
  return absl::OkStatus();
}

// out[b,t,:] = Σₖ weights[b,t,k] · y[b,t,k,:], summed in k order in double.
absl::Status MoeCombine(KernelContext& ctx) {
  const TensorArg& y = ctx.operands[0];
  const TensorArg& weights = ctx.operands[1];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, y, "y"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, weights, "weights"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, y, 4, "y"));
  const int64_t batch = y.shape[0], tokens = y.shape[1], k = y.shape[2], hidden = y.shape[3];
  TP_RETURN_IF_ERROR(ExpectShape(ctx, weights, {batch, tokens, k}, "weights"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, {batch, tokens, hidden}, "result"));
  ctx.pool->ParallelFor(batch * tokens * hidden, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t bt = item / hidden, h = item % hidden;
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) {
        acc += static_cast<double>(weights.f[bt * k + j]) * y.f[(bt * k + j) * hidden + h];
      }
      out.f[item] = static_cast<float>(acc);
    }
  });
  return absl::OkStatus();
}

// Multi-head latent attention, un-absorbed. For each sequence b, the up-projection
// kv[j, :] = w_kv_b · latent[b,0,j,:] (double accumulation, rounded to float32 as a linear
// region would produce it) of every cache row j up to the sequence's largest position: per
// head h, columns h·(Dn+Dv) … +Dn are k_nope and the next Dv are v. Then, as `attention`
// over the key [k_nope | rope[b,0,j,:]], for the query [q_nope | q_rope] of (b, t, h) at
// p = positions[b,t]: scores scale · q·k over j ≤ p, softmax and the weighted sum of v, all in
// double. Both loops are split over the pool, each element computed by one thread.
absl::Status MlaAttention(KernelContext& ctx) {
  const TensorArg& q_nope = ctx.operands[0];
  const TensorArg& q_rope = ctx.operands[1];
  const TensorArg& latent = ctx.operands[2];
  const TensorArg& rope = ctx.operands[3];
  const TensorArg& w = ctx.operands[4];
  const TensorArg& pos = ctx.operands[5];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, q_nope, "q_nope"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, q_rope, "q_rope"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, latent, "latent_cache"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, rope, "rope_cache"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, w, "w_kv_b"));
  TP_RETURN_IF_ERROR(ExpectInt(ctx, pos, "positions"));
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, out, "result"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, q_nope, 4, "q_nope"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, q_rope, 4, "q_rope"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, latent, 4, "latent_cache"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, w, 2, "w_kv_b"));
  const int64_t batch = q_nope.shape[0], tokens = q_nope.shape[1], heads = q_nope.shape[2],
                dn = q_nope.shape[3], dr = q_rope.shape[3];
  const int64_t capacity = latent.shape[2], c_dim = latent.shape[3];
  TP_RETURN_IF_ERROR(ExpectShape(ctx, q_rope, {batch, tokens, heads, dr}, "q_rope"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, latent, {batch, 1, capacity, c_dim}, "latent_cache"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, rope, {batch, 1, capacity, dr}, "rope_cache"));
  TP_RETURN_IF_ERROR(ExpectShape(ctx, pos, {batch, tokens}, "positions"));
  const int64_t rows = w.shape[0];
  if (heads == 0 || w.shape[1] != c_dim || rows % heads != 0 || rows / heads <= dn) {
    return Error(ctx, "w_kv_b has shape ", ShapeString(w.shape),
                 ", expected [Hq·(Dn+Dv), C] with Hq ", heads, ", Dn ", dn, ", Dv > 0 and C ",
                 c_dim);
  }
  const int64_t dv = rows / heads - dn;
  TP_RETURN_IF_ERROR(ExpectShape(ctx, out, {batch, tokens, heads, dv}, "result"));
  TP_ASSIGN_OR_RETURN(const double scale, ctx.region->attrs.GetFloat("scale"));
  TP_RETURN_IF_ERROR(CheckPositions(ctx, pos, capacity));
  // kv[b] holds rows 0 … last[b] of the up-projection, [last[b] + 1, Hq·(Dn+Dv)].
  std::vector<int64_t> last(static_cast<size_t>(batch), -1);
  for (int64_t bt = 0; bt < batch * tokens; ++bt) {
    last[bt / tokens] = std::max<int64_t>(last[bt / tokens], pos.i[bt]);
  }
  std::vector<std::vector<float>> kv(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n_rows = last[b] + 1;
    kv[b].resize(static_cast<size_t>(n_rows * rows));
    float* kvb = kv[b].data();
    const float* lat = latent.f + b * capacity * c_dim;
    ctx.pool->ParallelFor(n_rows * rows, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t j = item / rows, r = item % rows;
        const float* lj = lat + j * c_dim;
        const float* wr = w.f + r * c_dim;
        double acc = 0;
        for (int64_t c = 0; c < c_dim; ++c) acc += static_cast<double>(wr[c]) * lj[c];
        kvb[item] = static_cast<float>(acc);
      }
    });
  }
  ctx.pool->ParallelFor(batch * tokens * heads, [&](int64_t begin, int64_t end) {
    std::vector<double> probs, acc;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t h = item % heads;
      const int64_t bt = item / heads;
      const int64_t b = bt / tokens;
      const float* qn = q_nope.f + item * dn;
      const float* qr = q_rope.f + item * dr;
      const float* kvb = kv[b].data() + h * (dn + dv);
      const float* rope_b = rope.f + b * capacity * dr;
      auto dot = [&](int64_t j) {
        const float* k_nope = kvb + j * rows;
        const float* k_rope = rope_b + j * dr;
        double sum = 0;
        for (int64_t d = 0; d < dn; ++d) sum += static_cast<double>(qn[d]) * k_nope[d];
        for (int64_t d = 0; d < dr; ++d) sum += static_cast<double>(qr[d]) * k_rope[d];
        return sum;
      };
      auto value = [&](int64_t j) { return kvb + j * rows + dn; };
      AttendRows(0, pos.i[bt], scale, dv, dot, value, probs, acc, out.f + item * dv);
    }
  });
  return absl::OkStatus();
}

// Fused kinds (docs/ir.md, "Fused kinds") run the primitive kernels of the regions they
// replace, in the primitive graph's order, on scratch tensors: their float32 arithmetic is
// that of the primitive graph, element for element.
class Composite {
 public:
  explicit Composite(const KernelContext& fused) : fused_(fused) {}

  // A zeroed scratch tensor of `dtype` (a float dtype is held as float32, as every tensor of
  // this backend), alive as long as this object.
  TensorArg Temp(std::vector<int64_t> shape, ir::DType dtype = ir::DType::kF32) {
    TensorArg t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    if (dtype == ir::DType::kI32) {
      int_scratch_.emplace_back(static_cast<size_t>(t.num_elements()), 0);
      t.i = int_scratch_.back().data();
    } else {
      scratch_.emplace_back(static_cast<size_t>(t.num_elements()), 0.0f);
      t.f = scratch_.back().data();
    }
    return t;
  }

  // Runs `kernel` as the step `what` of the fused region; it reads its attributes from
  // `region` (the fused region itself, or a stand-in such as a split's sizes).
  absl::Status Run(Kernel kernel, absl::string_view what, const ir::Region& region,
                   std::vector<TensorArg> operands, std::vector<TensorArg> results) const {
    KernelContext step;
    step.region = &region;
    step.label = absl::StrCat(fused_.label, " [", what, "]");
    step.operands = std::move(operands);
    step.results = std::move(results);
    step.pool = fused_.pool;
    return kernel(step);
  }
  absl::Status Run(Kernel kernel, absl::string_view what, std::vector<TensorArg> operands,
                   std::vector<TensorArg> results) const {
    return Run(kernel, what, *fused_.region, std::move(operands), std::move(results));
  }

 private:
  const KernelContext& fused_;
  std::deque<std::vector<float>> scratch_;  // a deque keeps the buffers' addresses
  std::deque<std::vector<int32_t>> int_scratch_;
};

// A view of `t`'s elements with another shape (what a reshape region computes).
TensorArg Reshaped(TensorArg t, std::vector<int64_t> shape) {
  t.shape = std::move(shape);
  return t;
}

// A split region with these sizes, for the split step of a fused kind.
ir::Region SplitRegion(std::vector<int64_t> sizes) {
  ir::Region split;
  split.kind = "split";
  split.attrs.Set("sizes", std::move(sizes));
  return split;
}

// split (two equal halves) + silu + mul of `x` into `out`.
absl::Status SwigluSteps(Composite& c, const KernelContext& ctx, const TensorArg& x,
                         const TensorArg& out) {
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, x, 1, "x"));
  const int64_t two_f = x.shape.back();
  if (two_f % 2 != 0) return Error(ctx, "x has an odd last dim: ", ShapeString(x.shape));
  const std::vector<int64_t> half = WithLastDim(x.shape, two_f / 2);
  const TensorArg gate = c.Temp(half), up = c.Temp(half), act = c.Temp(half);
  TP_RETURN_IF_ERROR(c.Run(&Split, "split", SplitRegion({two_f / 2, two_f / 2}), {x}, {gate, up}));
  TP_RETURN_IF_ERROR(c.Run(&Silu, "silu", {gate}, {act}));
  return c.Run(&Mul, "mul", {act, up}, {out});
}

absl::Status Swiglu(KernelContext& ctx) {
  Composite c(ctx);
  return SwigluSteps(c, ctx, ctx.operands[0], ctx.results[0]);
}

// The result of a fused region's linear step, x [...,K] · w [N,K]ᵀ: a scratch [...,N].
absl::StatusOr<TensorArg> LinearTemp(Composite& c, const KernelContext& ctx, const TensorArg& x,
                                     const TensorArg& w) {
  TP_RETURN_IF_ERROR(ExpectMinRank(ctx, x, 1, "x"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, w, 2, "weight"));
  return c.Temp(WithLastDim(x.shape, w.shape[0]));
}

absl::Status LinearSwiglu(KernelContext& ctx) {
  Composite c(ctx);
  TP_ASSIGN_OR_RETURN(const TensorArg gate_up,
                      LinearTemp(c, ctx, ctx.operands[0], ctx.operands[1]));
  TP_RETURN_IF_ERROR(c.Run(&Linear, "linear", ctx.operands, {gate_up}));
  return SwigluSteps(c, ctx, gate_up, ctx.results[0]);
}

// rms_norm_linear (`swiglu` false) and rms_norm_linear_swiglu. Operands x, norm, w[, bias]:
// the rms_norm of x into a scratch, then the linear kind's steps on it.
absl::Status RmsNormLinearSteps(KernelContext& ctx, bool swiglu) {
  Composite c(ctx);
  const TensorArg& x = ctx.operands[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  const TensorArg normed = c.Temp(x.shape);
  TP_RETURN_IF_ERROR(c.Run(&RmsNorm, "rms_norm", {x, ctx.operands[1]}, {normed}));
  std::vector<TensorArg> linear_operands = {normed, ctx.operands[2]};
  if (ctx.operands.size() == 4) linear_operands.push_back(ctx.operands[3]);
  if (!swiglu) return c.Run(&Linear, "linear", std::move(linear_operands), {ctx.results[0]});
  TP_ASSIGN_OR_RETURN(const TensorArg gate_up, LinearTemp(c, ctx, x, ctx.operands[2]));
  TP_RETURN_IF_ERROR(c.Run(&Linear, "linear", std::move(linear_operands), {gate_up}));
  return SwigluSteps(c, ctx, gate_up, ctx.results[0]);
}

absl::Status RmsNormLinear(KernelContext& ctx) { return RmsNormLinearSteps(ctx, false); }
absl::Status RmsNormLinearSwiglu(KernelContext& ctx) { return RmsNormLinearSteps(ctx, true); }

// Operands x, w, residual[, bias].
absl::Status LinearResidual(KernelContext& ctx) {
  Composite c(ctx);
  TP_ASSIGN_OR_RETURN(const TensorArg y, LinearTemp(c, ctx, ctx.operands[0], ctx.operands[1]));
  std::vector<TensorArg> linear_operands = {ctx.operands[0], ctx.operands[1]};
  if (ctx.operands.size() == 4) linear_operands.push_back(ctx.operands[3]);
  TP_RETURN_IF_ERROR(c.Run(&Linear, "linear", std::move(linear_operands), {y}));
  return c.Run(&Add, "add", {ctx.operands[2], y}, {ctx.results[0]});
}

// Operands a, b, w; results sum, out.
absl::Status AddRmsNorm(KernelContext& ctx) {
  Composite c(ctx);
  TP_RETURN_IF_ERROR(c.Run(&Add, "add", {ctx.operands[0], ctx.operands[1]}, {ctx.results[0]}));
  return c.Run(&RmsNorm, "rms_norm", {ctx.results[0], ctx.operands[2]}, {ctx.results[1]});
}

// qk_norm_rope_kv_write (`norms`) and rope_kv_write. Operands qkv [B,T,(Hq+2·Hkv)·D],
// [q_norm, k_norm,] k_cache, v_cache, positions; results q, k_cache', v_cache' (in place).
absl::Status RopeKvWriteSteps(KernelContext& ctx, bool norms) {
  const size_t k_index = norms ? 3 : 1;
  const TensorArg& qkv = ctx.operands[0];
  const TensorArg& k_cache = ctx.operands[k_index];
  const TensorArg& v_cache = ctx.operands[k_index + 1];
  const TensorArg& pos = ctx.operands[k_index + 2];
  TP_RETURN_IF_ERROR(ExpectRank(ctx, qkv, 3, "qkv"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, k_cache, 4, "k_cache"));
  TP_ASSIGN_OR_RETURN(const int64_t hq, ctx.region->attrs.GetInt("num_heads"));
  TP_ASSIGN_OR_RETURN(const int64_t hkv, ctx.region->attrs.GetInt("num_kv_heads"));
  const int64_t batch = qkv.shape[0], tokens = qkv.shape[1], dim = k_cache.shape[3];
  if (hq <= 0 || hkv <= 0 || qkv.shape[2] != (hq + 2 * hkv) * dim) {
    return Error(ctx, "qkv has shape ", ShapeString(qkv.shape), ", expected last dim (", hq,
                 " + 2·", hkv, ")·", dim, " for num_heads ", hq, ", num_kv_heads ", hkv,
                 " and head dim ", dim);
  }
  Composite c(ctx);
  const TensorArg q = c.Temp({batch, tokens, hq * dim});
  const TensorArg k = c.Temp({batch, tokens, hkv * dim});
  const TensorArg v = c.Temp({batch, tokens, hkv * dim});
  TP_RETURN_IF_ERROR(
      c.Run(&Split, "split", SplitRegion({hq * dim, hkv * dim, hkv * dim}), {qkv}, {q, k, v}));
  TensorArg q_heads = Reshaped(q, {batch, tokens, hq, dim});
  TensorArg k_heads = Reshaped(k, {batch, tokens, hkv, dim});
  const TensorArg v_heads = Reshaped(v, {batch, tokens, hkv, dim});
  if (norms) {
    const TensorArg q_normed = c.Temp(q_heads.shape), k_normed = c.Temp(k_heads.shape);
    TP_RETURN_IF_ERROR(c.Run(&RmsNorm, "rms_norm of q", {q_heads, ctx.operands[1]}, {q_normed}));
    TP_RETURN_IF_ERROR(c.Run(&RmsNorm, "rms_norm of k", {k_heads, ctx.operands[2]}, {k_normed}));
    q_heads = q_normed;
    k_heads = k_normed;
  }
  const TensorArg k_rope = c.Temp(k_heads.shape);
  TP_RETURN_IF_ERROR(c.Run(&Rope, "rope of q", {q_heads, pos}, {ctx.results[0]}));
  TP_RETURN_IF_ERROR(c.Run(&Rope, "rope of k", {k_heads, pos}, {k_rope}));
  TP_RETURN_IF_ERROR(c.Run(&KvWrite, "kv_write of k", {k_cache, k_rope, pos}, {ctx.results[1]}));
  return c.Run(&KvWrite, "kv_write of v", {v_cache, v_heads, pos}, {ctx.results[2]});
}

absl::Status QkNormRopeKvWrite(KernelContext& ctx) { return RopeKvWriteSteps(ctx, true); }
absl::Status RopeKvWrite(KernelContext& ctx) { return RopeKvWriteSteps(ctx, false); }

// mla_kv_write. Operands kv_a [B,T,C+Dr], norm [C], latent_cache [B,1,Smax,C], rope_cache
// [B,1,Smax,Dr], positions; results latent_cache', rope_cache' (in place): the split of kv_a,
// the rms_norm of the latent into its cache, the rope of the rest into the other.
absl::Status MlaKvWrite(KernelContext& ctx) {
  const TensorArg& kv_a = ctx.operands[0];
  const TensorArg& latent_cache = ctx.operands[2];
  const TensorArg& rope_cache = ctx.operands[3];
  const TensorArg& pos = ctx.operands[4];
  TP_RETURN_IF_ERROR(ExpectRank(ctx, kv_a, 3, "kv_a"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, latent_cache, 4, "latent_cache"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, rope_cache, 4, "rope_cache"));
  const int64_t batch = kv_a.shape[0], tokens = kv_a.shape[1];
  const int64_t c_dim = latent_cache.shape[3], dr = rope_cache.shape[3];
  if (kv_a.shape[2] != c_dim + dr) {
    return Error(ctx, "kv_a has shape ", ShapeString(kv_a.shape), ", expected last dim ", c_dim,
                 " + ", dr, " (the caches' rows)");
  }
  Composite c(ctx);
  const TensorArg latent = c.Temp({batch, tokens, c_dim});
  const TensorArg k_pe = c.Temp({batch, tokens, dr});
  TP_RETURN_IF_ERROR(c.Run(&Split, "split", SplitRegion({c_dim, dr}), {kv_a}, {latent, k_pe}));
  const TensorArg normed = c.Temp({batch, tokens, c_dim});
  TP_RETURN_IF_ERROR(c.Run(&RmsNorm, "rms_norm", {latent, ctx.operands[1]}, {normed}));
  const TensorArg k_rope = c.Temp({batch, tokens, 1, dr});
  TP_RETURN_IF_ERROR(c.Run(&Rope, "rope", {Reshaped(k_pe, {batch, tokens, 1, dr}), pos}, {k_rope}));
  TP_RETURN_IF_ERROR(c.Run(&KvWrite, "kv_write of the latent",
                           {latent_cache, Reshaped(normed, {batch, tokens, 1, c_dim}), pos},
                           {ctx.results[0]}));
  return c.Run(&KvWrite, "kv_write of the rope key", {rope_cache, k_rope, pos}, {ctx.results[1]});
}

// mla_kv_write_attention. Operands q_nope, q_pe, kv_a, norm, latent_cache, rope_cache, w_kv_b,
// positions; results out, latent_cache', rope_cache' (in place): the rope of q_pe into a
// scratch, mla_kv_write, then mla_attention over the updated caches.
absl::Status MlaKvWriteAttention(KernelContext& ctx) {
  const TensorArg& q_pe = ctx.operands[1];
  const TensorArg& pos = ctx.operands[7];
  TP_RETURN_IF_ERROR(ExpectRank(ctx, q_pe, 4, "q_pe"));
  Composite c(ctx);
  const TensorArg q_rope = c.Temp(q_pe.shape);
  TP_RETURN_IF_ERROR(c.Run(&Rope, "rope of q", {q_pe, pos}, {q_rope}));
  TP_RETURN_IF_ERROR(
      c.Run(&MlaKvWrite, "mla_kv_write",
            {ctx.operands[2], ctx.operands[3], ctx.operands[4], ctx.operands[5], pos},
            {ctx.results[1], ctx.results[2]}));
  return c.Run(&MlaAttention, "mla_attention",
               {ctx.operands[0], q_rope, ctx.results[1], ctx.results[2], ctx.operands[6], pos},
               {ctx.results[0]});
}

// qk_norm_rope_kv_write_attention (`norms`) and rope_kv_write_attention: the RoPE + KV-write
// kind into a scratch q, then the attention of that q over the updated caches. Operands as
// the RoPE + KV-write kind; results out, k_cache', v_cache' (in place).
absl::Status RopeKvWriteAttentionSteps(KernelContext& ctx, bool norms) {
  const TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectRank(ctx, out, 4, "result"));
  Composite c(ctx);
  const TensorArg q = c.Temp(out.shape);
  TP_RETURN_IF_ERROR(c.Run(norms ? &QkNormRopeKvWrite : &RopeKvWrite,
                           norms ? "qk_norm_rope_kv_write" : "rope_kv_write", ctx.operands,
                           {q, ctx.results[1], ctx.results[2]}));
  return c.Run(&Attention, "attention", {q, ctx.results[1], ctx.results[2], ctx.operands.back()},
               {out});
}

absl::Status QkNormRopeKvWriteAttention(KernelContext& ctx) {
  return RopeKvWriteAttentionSteps(ctx, true);
}
absl::Status RopeKvWriteAttention(KernelContext& ctx) {
  return RopeKvWriteAttentionSteps(ctx, false);
}

// moe: the routed experts of docs/ir.md's moe row, then the shared MLP and the residual when
// the attributes say so. The logits and the top-k weights are scratch tensors of the dtypes
// the region records, so they are held exactly as the primitive graph holds them.
absl::Status Moe(KernelContext& ctx) {
  const ir::Attributes& attrs = ctx.region->attrs;
  TP_ASSIGN_OR_RETURN(const bool shared, attrs.GetBool("shared_experts"));
  TP_ASSIGN_OR_RETURN(const bool residual, attrs.GetBool("residual"));
  TP_ASSIGN_OR_RETURN(const int64_t k, attrs.GetInt("top_k"));
  TP_ASSIGN_OR_RETURN(const std::string logits_name, attrs.GetString("logits_dtype"));
  TP_ASSIGN_OR_RETURN(const std::string weights_name, attrs.GetString("weights_dtype"));
  TP_ASSIGN_OR_RETURN(const ir::DType logits_dtype, ir::ParseDType(logits_name));
  TP_ASSIGN_OR_RETURN(const ir::DType weights_dtype, ir::ParseDType(weights_name));
  const size_t expected = 5 + (shared ? 2 : 0) + (residual ? 1 : 0);
  if (ctx.operands.size() != expected) {
    return Error(ctx, "has ", ctx.operands.size(), " operands, expected ", expected,
                 " for shared_experts = ", shared ? "true" : "false",
                 " and residual = ", residual ? "true" : "false");
  }
  const TensorArg& x = ctx.operands[0];
  const TensorArg& router = ctx.operands[1];
  const TensorArg& gate = ctx.operands[2];
  const TensorArg& down = ctx.operands[4];
  TensorArg& out = ctx.results[0];
  TP_RETURN_IF_ERROR(ExpectRank(ctx, x, 3, "x"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, router, 2, "router"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, gate, 3, "gate"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, down, 3, "down"));
  TP_RETURN_IF_ERROR(ExpectRank(ctx, out, 3, "result"));
  const std::vector<int64_t> tokens = {x.shape[0], x.shape[1]};
  auto shape = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> s = tokens;
    s.insert(s.end(), tail);
    return s;
  };
  Composite c(ctx);
  const TensorArg logits = c.Temp(shape({router.shape[0]}), logits_dtype);
  TP_RETURN_IF_ERROR(c.Run(&MoeRouter, "moe_router", {x, router}, {logits}));
  const TensorArg ids = c.Temp(shape({k}), ir::DType::kI32);
  const TensorArg weights = c.Temp(shape({k}), weights_dtype);
  TP_RETURN_IF_ERROR(c.Run(&MoeTopk, "moe_topk", {logits}, {ids, weights}));
  const std::vector<int64_t> per_expert = shape({k, gate.shape[1]});
  const TensorArg g = c.Temp(per_expert), u = c.Temp(per_expert), act = c.Temp(per_expert),
                  h = c.Temp(per_expert), y = c.Temp(shape({k, down.shape[1]}));
  TP_RETURN_IF_ERROR(c.Run(&ExpertLinear, "expert_linear", {x, ids, gate}, {g}));
  TP_RETURN_IF_ERROR(c.Run(&ExpertLinear, "expert_linear", {x, ids, ctx.operands[3]}, {u}));
  TP_RETURN_IF_ERROR(c.Run(&Silu, "silu", {g}, {act}));
  TP_RETURN_IF_ERROR(c.Run(&Mul, "mul", {act, u}, {h}));
  TP_RETURN_IF_ERROR(c.Run(&ExpertLinear, "expert_linear", {h, ids, down}, {y}));
  const bool last = !shared && !residual;
  const TensorArg combined = last ? out : c.Temp(out.shape);
  TP_RETURN_IF_ERROR(c.Run(&MoeCombine, "moe_combine", {y, weights}, {combined}));
  TensorArg routed = combined;
  if (shared) {
    // The shared MLP's gate and up are one packed weight: linear_swiglu's steps.
    TP_RETURN_IF_ERROR(ExpectRank(ctx, ctx.operands[5], 2, "shared_gate_up"));
    const TensorArg sh = c.Temp(shape({ctx.operands[5].shape[0] / 2})), s = c.Temp(out.shape);
    TP_RETURN_IF_ERROR(c.Run(&LinearSwiglu, "linear_swiglu", {x, ctx.operands[5]}, {sh}));
    TP_RETURN_IF_ERROR(c.Run(&Linear, "linear", {sh, ctx.operands[6]}, {s}));
    routed = residual ? c.Temp(out.shape) : out;
    TP_RETURN_IF_ERROR(c.Run(&Add, "add", {combined, s}, {routed}));
  }
  if (!residual) return absl::OkStatus();
  return c.Run(&Add, "add", {ctx.operands.back(), routed}, {out});
}

// rms_norm_moe: the rms_norm of x into a scratch, then moe's steps on it (operands x, norm,
// then moe's router, gate, up, down[, shared_gate_up, shared_down][, residual]).
absl::Status RmsNormMoe(KernelContext& ctx) {
  Composite c(ctx);
  const TensorArg& x = ctx.operands[0];
  TP_RETURN_IF_ERROR(ExpectFloat(ctx, x, "x"));
  const TensorArg normed = c.Temp(x.shape);
  TP_RETURN_IF_ERROR(c.Run(&RmsNorm, "rms_norm", {x, ctx.operands[1]}, {normed}));
  std::vector<TensorArg> moe_operands = {normed};
  moe_operands.insert(moe_operands.end(), ctx.operands.begin() + 2, ctx.operands.end());
  return c.Run(&Moe, "moe", std::move(moe_operands), {ctx.results[0]});
}

// Sorted by kind.
constexpr KindInfo kKinds[] = {
    {"add", 2, 2, 1, &Add},
    {"add_rms_norm", 3, 3, 2, &AddRmsNorm},
    {"all_gather", 1, 1, 1, &AllGather},
    {"all_reduce", 1, 2, 1, &AllReduce},
    {"argmax", 1, 1, 1, &Argmax},
    {"attention", 4, 4, 1, &Attention},
    {"embedding", 2, 2, 1, &Embedding},
    {"expert_linear", 3, 3, 1, &ExpertLinear},
    {"kv_write", 3, 3, 1, &KvWrite},
    {"linear", 2, 3, 1, &Linear},
    {"linear_residual", 3, 4, 1, &LinearResidual},
    {"linear_swiglu", 2, 3, 1, &LinearSwiglu},
    {"lm_head", 2, 2, 1, &LmHead},
    {"mla_attention", 6, 6, 1, &MlaAttention},
    {"mla_kv_write", 5, 5, 2, &MlaKvWrite},
    {"mla_kv_write_attention", 8, 8, 3, &MlaKvWriteAttention},
    {"moe", 5, 9, 1, &Moe},
    {"moe_combine", 2, 2, 1, &MoeCombine},
    {"moe_router", 2, 2, 1, &MoeRouter},
    {"moe_topk", 1, 1, 2, &MoeTopk},
    {"mul", 2, 2, 1, &Mul},
    {"qk_norm_rope_kv_write", 6, 6, 3, &QkNormRopeKvWrite},
    {"qk_norm_rope_kv_write_attention", 6, 6, 3, &QkNormRopeKvWriteAttention},
    {"reshape", 1, 1, 1, &Reshape},
    {"rms_norm", 2, 2, 1, &RmsNorm},
    {"rms_norm_linear", 3, 4, 1, &RmsNormLinear},
    {"rms_norm_linear_swiglu", 3, 4, 1, &RmsNormLinearSwiglu},
    {"rms_norm_moe", 6, 10, 1, &RmsNormMoe},
    {"rope", 2, 2, 1, &Rope},
    {"rope_kv_write", 4, 4, 3, &RopeKvWrite},
    {"rope_kv_write_attention", 4, 4, 3, &RopeKvWriteAttention},
    {"sharded_argmax", 1, 1, 1, &ShardedArgmax},
    {"silu", 1, 1, 1, &Silu},
    {"split", 1, 1, -1, &Split},
    {"swiglu", 1, 1, 1, &Swiglu},
};

}  // namespace

const KindInfo* FindKind(absl::string_view kind) {
  for (const KindInfo& info : kKinds) {
    if (kind == info.kind) return &info;
  }
  return nullptr;
}

std::vector<std::string> KindNames() {
  std::vector<std::string> names;
  for (const KindInfo& info : kKinds) names.emplace_back(info.kind);
  return names;
}

}  // namespace tileplan::runtime::cpu
