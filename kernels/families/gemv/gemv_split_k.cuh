// Matrix-vector products for decode-sized linears: out[m, n] = sum_k x[m, k] * w[n, k]
// for m < rows <= kMaxRows (rows = batch * new tokens, at most 16 in decode), weights in
// the Hugging Face [out, in] layout streamed once with kVec-element loads (16 bytes for
// bf16 with kVec 8), float32 accumulation, and a fused epilogue:
//   kGemvPlain     out = acc (+ bias)                     linear, lm_head (OutT float)
//   kGemvResidual  out = acc (+ bias) + residual          linear_residual
//   kGemvSwiglu    out = silu(g) * u with g from weight row n and u from row cols + n of a
//                  packed [gate; up] weight (+ their biases)    linear_swiglu
// and, with NormW not void, an RMSNorm prologue over x (rms_norm_linear,
// rms_norm_linear_swiglu): the sums are those of the normalized rows,
//   acc = rsqrt(mean_k(x[m, k]^2) + eps) * sum_k (x[m, k] * norm_w[k]) * w[n, k],
// scaled in the epilogue before bias, residual and SwiGLU. All of it is float32: the
// normalized row is never rounded to T (the unfused rms_norm stores it rounded).
//
// CTA (x, s) computes the kRowsPerCta output features [x * kRowsPerCta, ...) for every row
// of x over slice s of kSplitK equal slices of K. Its threads stride over the slice in kVec
// vectors, each holding the weight vectors of several features and reusing each against
// every row of x.
//
// Norm prologue: the scale needs the sum of squares of the WHOLE row, not just the slice,
// and every CTA forms it itself (the row is small and stays in L2): at each offset of its
// walk over a slice, a thread also loads x at that offset in every other slice, so those
// loads issue alongside the weight's and their sums are needed only in the epilogue. Every
// CTA thus ends with the full sums, including the last CTA of a split-K tile.
//
// Split-K (kSplitK > 1): every CTA writes its float32 partials to the workspace; the last
// CTA of a feature tile to finish (counted with an atomic) adds the slices in slice order,
// applies the epilogue and re-arms the counter to zero. One launch, a deterministic
// summation order, and epilogues that need the whole sum (swiglu, narrow outputs) remain
// possible; float atomics into the output would give neither.
#pragma once

#include "gemv_params.h"
#include "primitives.cuh"

namespace tileplan {

enum GemvEpilogue : int { kGemvPlain = 0, kGemvResidual = 1, kGemvSwiglu = 2 };

// Features a thread accumulates at once: the largest power of two dividing kRowsPerCta whose
// accumulators and weight vectors, kPass * wrows * (max_rows + vec) floats, fit the
// registers a thread has at this block size (65536 / threads, at most 255) less about 40
// for addressing and the x vector, and with the norm prologue less its sums of squares and
// norm weight vector (max_rows + vec).
__host__ __device__ constexpr int gemv_features_per_pass(int threads, int rows_per_cta, int wrows,
                                                         int max_rows, int vec, bool norm) {
  const int regs =
      (65536 / threads < 255 ? 65536 / threads : 255) - 40 - (norm ? max_rows + vec : 0);
  int pass = 1;
  while (pass * 2 <= rows_per_cta && rows_per_cta % (pass * 2) == 0 &&
         pass * 2 * wrows * (max_rows + vec) <= regs) {
    pass *= 2;
  }
  return pass;
}

// g (and u for swiglu) are full float32 sums for output (r, col); `scale` is row r's RMSNorm
// factor (1 without the norm prologue).
template <typename T, typename W, typename OutT, int kEpilogue>
__device__ __forceinline__ void gemv_store(float g, float u, float scale, int r, int col, int cols,
                                           const W* bias, const T* residual,
                                           long long residual_stride, OutT* out) {
  g *= scale;
  u *= scale;
  if (bias != nullptr) {
    g += to_float(bias[col]);
    if constexpr (kEpilogue == kGemvSwiglu) u += to_float(bias[cols + col]);
  }
  if constexpr (kEpilogue == kGemvResidual) g += to_float(residual[r * residual_stride + col]);
  if constexpr (kEpilogue == kGemvSwiglu) g = silu(g) * u;
  out[static_cast<long long>(r) * cols + col] = from_float<OutT>(g);
}

// The end of a gemv CTA's product, shared by the CUDA-core and tensor-core walks: after a
// __syncthreads, reduce_smem holds kSlots partial sums of every output [kSlots][kRowsPerCta]
// [rows][kWRows] (one per warp, or per share of K) and, with the norm prologue, norm_smem
// kSlots partial sums of squares [kSlots][rows] of the whole x rows. Stores the CTA's features
// through the epilogue, or with kSplitK > 1 its float partials to the workspace, the last CTA
// of the feature tile adding the slices in slice order and storing.
template <typename T, typename W, typename OutT, int kThreads, int kSlots, int kRowsPerCta,
          int kSplitK, int kEpilogue, bool kNorm>
__device__ __forceinline__ void gemv_finish(const Cta& cta, const float* reduce_smem,
                                            const float* norm_smem, float eps,
                                            const W* __restrict__ bias, const T* residual,
                                            long long residual_stride, OutT* out,
                                            float* __restrict__ workspace,
                                            unsigned int* __restrict__ counters, int rows,
                                            int cols, int depth) {
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  const int col0 = cta.x * kRowsPerCta;
  const int weight_rows = cols * kWRows;
  // Row r's RMSNorm factor from the slots' sums of squares; 1 without the prologue.
  auto row_scale = [&](int r) {
    if constexpr (kNorm) {
      float s = 0.f;
#pragma unroll
      for (int wi = 0; wi < kSlots; ++wi) s += norm_smem[wi * rows + r];
      return rsqrtf(s / static_cast<float>(depth) + eps);
    } else {
      return 1.f;
    }
  };

  // Item i = (feature c, row r): its sums over the slots.
  auto warp_total = [&](int c, int r, int wr) {
    float s = 0.f;
#pragma unroll
    for (int wi = 0; wi < kSlots; ++wi)
      s += reduce_smem[((wi * kRowsPerCta + c) * rows + r) * kWRows + wr];
    return s;
  };
  const int items = kRowsPerCta * rows;
  if constexpr (kSplitK == 1) {
    for (int i = threadIdx.x; i < items; i += kThreads) {
      const int c = i / rows, r = i % rows;
      if (col0 + c >= cols) continue;
      const float u = kWRows == 2 ? warp_total(c, r, kWRows - 1) : 0.f;
      gemv_store<T, W, OutT, kEpilogue>(warp_total(c, r, 0), u, row_scale(r), r, col0 + c, cols,
                                        bias, residual, residual_stride, out);
    }
  } else {
    const long long slice_floats = static_cast<long long>(rows) * weight_rows;
    float* part = workspace + cta.y * slice_floats;
    for (int i = threadIdx.x; i < items; i += kThreads) {
      const int c = i / rows, r = i % rows;
      if (col0 + c >= cols) continue;
      part[static_cast<long long>(r) * weight_rows + col0 + c] = warp_total(c, r, 0);
      if constexpr (kWRows == 2) {
        part[static_cast<long long>(r) * weight_rows + cols + col0 + c] = warp_total(c, r, 1);
      }
    }
    if (!last_to_arrive(&counters[cta.x], kSplitK)) return;
    for (int i = threadIdx.x; i < items; i += kThreads) {
      const int c = i / rows, r = i % rows;
      const int col = col0 + c;
      if (col >= cols) continue;
      float g = 0.f, u = 0.f;
      for (int s = 0; s < kSplitK; ++s) {
        const float* slice = workspace + s * slice_floats + static_cast<long long>(r) * weight_rows;
        g += load_cg(slice + col);
        if constexpr (kWRows == 2) u += load_cg(slice + cols + col);
      }
      gemv_store<T, W, OutT, kEpilogue>(g, u, row_scale(r), r, col, cols, bias, residual,
                                        residual_stride, out);
    }
    if (threadIdx.x == 0) counters[cta.x] = 0u;
  }
}

// x: rows of `depth` at x + r * x_stride; norm_w: null, or [depth] (NormW not void); eps:
// the RMSNorm epsilon (read with the prologue only); w: [weight rows, depth] with weight
// rows = cols (x2 for swiglu); bias: null or [weight rows]; residual: rows of `cols` at
// residual + r * residual_stride (kGemvResidual; may alias out); out: [rows, cols].
// workspace (kSplitK > 1, else null): kSplitK * rows * weight rows floats of partials;
// counters (kSplitK > 1, else null): ceil(cols / kRowsPerCta) unsigned completion counters,
// zero before the first launch and left zero by every launch.
//
// Launch: grid (ceil(cols / kRowsPerCta), kSplitK), block kThreads, dynamic shared memory
// (kThreads / 32) * (kRowsPerCta * (swiglu ? 2 : 1) + (norm ? 1 : 0)) * rows floats.
// REQUIRES: 1 <= rows <= kMaxRows; depth % kVec == 0; x_stride % kVec == 0; x, w and norm_w
// aligned to kVec elements.
// The weights never depend on an earlier kernel: CTA `cta` starts its rows of them on their
// way into L2 before waiting for that kernel. Under programmatic dependent launch the CTA
// runs while its predecessor finishes, so the weight stream overlaps the predecessor's tail
// (in the persistent kernel, the wait for the step before).
template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue, typename NormW>
__device__ __forceinline__ void gemv_split_k_prefetch(
    const Cta& cta, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  constexpr int kLine = 128 / static_cast<int>(sizeof(W));  // elements per 128-byte line
  const int col0 = cta.x * kRowsPerCta;
  const int vecs = depth / kVec;
  const int per_split = (vecs + kSplitK - 1) / kSplitK;
  const int v_begin = cta.y * per_split;
  const int v_end = min(vecs, v_begin + per_split);
  const long long k_begin = static_cast<long long>(v_begin) * kVec;
  const int lines =
      static_cast<int>((static_cast<long long>(v_end) * kVec - k_begin + kLine - 1) / kLine);
  for (int i = threadIdx.x; i < kRowsPerCta * kWRows * lines; i += kThreads) {
    const int c = col0 + i / (kWRows * lines);
    if (c >= cols) break;
    const int part = (i / lines) % kWRows;
    const long long wrow = part == 0 ? c : cols + c;
    prefetch_l2(w + wrow * depth + k_begin + static_cast<long long>(i % lines) * kLine);
  }
}

// The tile of CTA `cta` in shared memory (the persistent kernel's weight stream): for each
// weight part (the gate rows, then for swiglu the up rows) kRowsPerCta rows of the CTA's
// slice of K, row i of part q at element (q * kRowsPerCta + i) * slice, where slice is the
// length of the CTA's slice. Returns the bytes that layout spans, 0 where the CTA has no rows
// or its rows cannot be bulk-copied (a row or a slice start off 16 bytes); with `issue`, one
// thread announces the bytes to barrier `bar` and starts the copies to shared address `dst`.
template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue, typename NormW>
__device__ __forceinline__ unsigned int gemv_split_k_stream(
    const Cta& cta, bool issue, unsigned int dst, unsigned int bar,
    TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  constexpr int kSize = static_cast<int>(sizeof(W));
  if constexpr ((kVec * kSize) % 16 != 0) {
    return 0u;
  } else {
    const int col0 = cta.x * kRowsPerCta;
    const int n = min(kRowsPerCta, cols - col0);
    const int vecs = depth / kVec;
    const int per_split = (vecs + kSplitK - 1) / kSplitK;
    const int v_begin = cta.y * per_split;
    const int v_end = min(vecs, v_begin + per_split);
    if (n <= 0 || v_end <= v_begin || (static_cast<long long>(depth) * kSize) % 16 != 0 ||
        reinterpret_cast<unsigned long long>(w) % 16 != 0) {
      return 0u;
    }
    const unsigned int row_bytes = static_cast<unsigned int>((v_end - v_begin) * kVec * kSize);
    if (issue) {
      mbarrier_arrive_expect_tx(bar, static_cast<unsigned int>(kWRows * n) * row_bytes);
      const long long k_begin = static_cast<long long>(v_begin) * kVec;
#pragma unroll
      for (int q = 0; q < kWRows; ++q) {
        const W* rows0 = w + (static_cast<long long>(q) * cols + col0) * depth + k_begin;
        const unsigned int at = dst + static_cast<unsigned int>(q * kRowsPerCta) * row_bytes;
        if (kSplitK == 1) {
          bulk_copy_to_shared(at, rows0, static_cast<unsigned int>(n) * row_bytes, bar);
        } else {
          for (int i = 0; i < n; ++i) {
            bulk_copy_to_shared(at + static_cast<unsigned int>(i) * row_bytes,
                                rows0 + static_cast<long long>(i) * depth, row_bytes, bar);
          }
        }
      }
    }
    return static_cast<unsigned int>(kWRows * kRowsPerCta) * row_bytes;
  }
}

// CTA `cta`'s share of the product, once its inputs are ready; with kTiled its weights come
// from `tile` (gemv_split_k_stream's layout, in shared memory), else from `w`.
template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue, typename NormW, bool kTiled>
__device__ __forceinline__ void gemv_split_k_compute(
    const Cta& cta, const W* tile, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  constexpr bool kNorm = !is_same<NormW, void>::value;
  constexpr int kWarps = kThreads / 32;
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  constexpr int kPass =
      gemv_features_per_pass(kThreads, kRowsPerCta, kWRows, kMaxRows, kVec, kNorm);
  constexpr int kAcc = kPass * kWRows;
  static_assert(kThreads % 32 == 0 && kRowsPerCta % kPass == 0, "block shape");
  // [kWarps][kRowsPerCta][rows][kWRows] partial sums, then (norm) [kWarps][rows] sums of
  // squares.
  extern __shared__ float reduce_smem[];
  float* norm_smem = reduce_smem + kWarps * kRowsPerCta * rows * kWRows;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int col0 = cta.x * kRowsPerCta;
  const int vecs = depth / kVec;
  const int per_split = (vecs + kSplitK - 1) / kSplitK;
  const int v_begin = cta.y * per_split;
  const int v_end = min(vecs, v_begin + per_split);
  // Offsets into the slice a thread visits: with the norm prologue all of a slice's, even
  // past the end of this CTA's own (shorter last slice), because the same offsets of the
  // other slices complete the sums of squares.
  const int walk = kNorm ? per_split : v_end - v_begin;
  float sumsq[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) sumsq[r] = 0.f;

  for (int p0 = 0; p0 < kRowsPerCta; p0 += kPass) {
    // Accumulator a: feature col0 + p0 + a / kWRows; for swiglu odd a is the up row.
    long long wrow[kAcc];
    bool wvalid[kAcc];
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
      const int c = col0 + p0 + a / kWRows;
      wvalid[a] = c < cols;
      if constexpr (kTiled) {
        // The element offset of the row in the tile, less the slice's first k.
        wrow[a] = static_cast<long long>((a % kWRows) * kRowsPerCta + p0 + a / kWRows) *
                      ((v_end - v_begin) * kVec) -
                  static_cast<long long>(v_begin) * kVec;
      } else {
        wrow[a] = a % kWRows == 0 ? c : cols + c;
      }
    }
    float acc[kAcc][kMaxRows];
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) acc[a][r] = 0.f;
    }
    for (int off = threadIdx.x; off < walk; off += kThreads) {
      const int v = v_begin + off;
      const long long k = static_cast<long long>(v) * kVec;
      if constexpr (kNorm) {
        // The first pass sums the squares of x at this offset of every other slice (its own
        // slice's x is squared below, where it is loaded anyway).
        if (kSplitK > 1 && p0 == 0) {
#pragma unroll
          for (int s = 0; s < kSplitK; ++s) {
            const int vs = s * per_split + off;
            if (s == static_cast<int>(cta.y) || vs >= vecs) continue;
#pragma unroll
            for (int r = 0; r < kMaxRows; ++r) {
              if (r < rows) {
                float xv[kVec];
                load_floats<T, kVec>(x + r * x_stride + static_cast<long long>(vs) * kVec, xv);
#pragma unroll
                for (int e = 0; e < kVec; ++e) sumsq[r] += xv[e] * xv[e];
              }
            }
          }
        }
        if (v >= v_end) continue;
      }
      float wv[kAcc][kVec];
#pragma unroll
      for (int a = 0; a < kAcc; ++a) {
        if (wvalid[a]) {
          if constexpr (kTiled) {
            load_floats<W, kVec>(tile + wrow[a] + k, wv[a]);
          } else {
            load_floats<W, kVec>(w + wrow[a] * depth + k, wv[a]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) wv[a][e] = 0.f;
        }
      }
      [[maybe_unused]] float nw[kVec];
      if constexpr (kNorm) load_floats<NormW, kVec>(norm_w + k, nw);
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        if (r < rows) {
          float xv[kVec];
          load_floats<T, kVec>(x + r * x_stride + k, xv);
          if constexpr (kNorm) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              if (p0 == 0) sumsq[r] += xv[e] * xv[e];
              xv[e] *= nw[e];
            }
          }
#pragma unroll
          for (int a = 0; a < kAcc; ++a) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[a][r] += wv[a][e] * xv[e];
          }
        }
      }
    }
    // Warp sums, scattered over the lanes; each lane publishes the sums it holds.
    constexpr int kN = kAcc * kMaxRows;
    constexpr int kOut = kN >= 32 ? kN / 32 : 1;
    float flat[kN];
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) flat[a * kMaxRows + r] = acc[a][r];
    }
    warp_reduce_scatter<kN>(flat);
    if (kN >= 32 || lane % (32 / kN) == 0) {
#pragma unroll
      for (int j = 0; j < kOut; ++j) {
        const int index = lane * kN / 32 + j;
        const int a = index / kMaxRows, r = index % kMaxRows;
        const int c = p0 + a / kWRows;
        if (r < rows && col0 + c < cols) {
          reduce_smem[((warp * kRowsPerCta + c) * rows + r) * kWRows + a % kWRows] = flat[j];
        }
      }
    }
  }
  if constexpr (kNorm) {
    // Warp sums of the squares, scattered as above: lane L holds row L * kMaxRows / 32.
    warp_reduce_scatter<kMaxRows>(sumsq);
    const int r = lane * kMaxRows / 32;
    if (lane % (32 / kMaxRows) == 0 && r < rows) norm_smem[warp * rows + r] = sumsq[0];
  }
  __syncthreads();
  gemv_finish<T, W, OutT, kThreads, kWarps, kRowsPerCta, kSplitK, kEpilogue, kNorm>(
      cta, reduce_smem, norm_smem, eps, bias, residual, residual_stride, out, workspace, counters,
      rows, cols, depth);
}

template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue, typename NormW>
__device__ __forceinline__ void gemv_split_k_body(
    const Cta& cta, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  gemv_split_k_compute<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec, kEpilogue,
                       NormW, false>(cta, nullptr,
                                     TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_GEMV_SPLIT_K_PARAMS));
}

template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue, typename NormW>
__device__ __forceinline__ void gemv_split_k_streamed(
    const Cta& cta, const char* tile, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  gemv_split_k_compute<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec, kEpilogue,
                       NormW, true>(cta, reinterpret_cast<const W*>(tile),
                                    TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_GEMV_SPLIT_K_PARAMS));
}

template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue, typename NormW>
__global__ void __launch_bounds__(kThreads)
    gemv_split_k(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  const Cta cta = this_cta();
  gemv_split_k_prefetch<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec, kEpilogue,
                        NormW>(cta, TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_GEMV_SPLIT_K_PARAMS));
  grid_dependency_sync();
  gemv_split_k_body<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec, kEpilogue, NormW>(
      cta, TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_GEMV_SPLIT_K_PARAMS));
}

// gemv_split_k as a task of the persistent kernel.
template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue, typename NormW>
struct gemv_split_k_task {
  TILEPLAN_KERNEL_TASK_STREAMED(
      TILEPLAN_GEMV_SPLIT_K_PARAMS,
      (gemv_split_k_prefetch<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec,
                             kEpilogue, NormW>),
      (gemv_split_k_body<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec, kEpilogue,
                         NormW>),
      (gemv_split_k_stream<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec, kEpilogue,
                           NormW>),
      (gemv_split_k_streamed<T, W, OutT, kMaxRows, kThreads, kRowsPerCta, kSplitK, kVec,
                             kEpilogue, NormW>))
};

}  // namespace tileplan
