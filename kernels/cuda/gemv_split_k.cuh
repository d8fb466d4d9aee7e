// Matrix-vector products for decode-sized linears: out[m, n] = sum_k x[m, k] * w[n, k]
// for m < rows <= kMaxRows (rows = batch * new tokens, at most 16 in decode), weights in
// the Hugging Face [out, in] layout streamed once with kVec-element loads (16 bytes for
// bf16 with kVec 8), float32 accumulation, and a fused epilogue:
//   kGemvPlain     out = acc (+ bias)                     linear, lm_head (OutT float)
//   kGemvResidual  out = acc (+ bias) + residual          linear_residual
//   kGemvSwiglu    out = silu(g) * u with g from weight row n and u from row cols + n of a
//                  packed [gate; up] weight (+ their biases)    linear_swiglu
//
// CTA (x, s) computes the kRowsPerCta output features [x * kRowsPerCta, ...) for every row
// of x over slice s of kSplitK equal slices of K. Its threads stride over the slice in kVec
// vectors, each holding the weight vectors of several features and reusing each against
// X
//
// Split-K (kSplitK > 1): every CTA writes its float32 partials to the workspace; the last
// CTA of a feature tile to finish (counted with an atomic) adds the slices in slice order,
// applies the epilogue and re-arms the counter to zero. One launch, a deterministic
// summation order, and epilogues that need the whole sum (swiglu, narrow outputs) remain
// possible; float atomics into the output would give neither.
#pragma once

#include "primitives.cuh"

namespace tileplan {

enum GemvEpilogue : int { kGemvPlain = 0, kGemvResidual = 1, kGemvSwiglu = 2 };

// Features a thread accumulates at once: the largest power of two (<= kRowsPerCta) whose
// accumulators and weight vectors, kPass * wrows * (max_rows + vec) floats, fit the
// registers a thread has at this block size (65536 / threads, at most 255) less about 40
// for addressing and the x vector.
__host__ __device__ constexpr int gemv_features_per_pass(int threads, int rows_per_cta, int wrows,
                                                         int max_rows, int vec) {
  const int regs = (65536 / threads < 255 ? 65536 / threads : 255) - 40;
  int pass = 1;
  while (pass * 2 <= rows_per_cta && pass * 2 * wrows * (max_rows + vec) <= regs) pass *= 2;
  return pass;
}

// g (and u for swiglu) are full float32 sums for output (r, col).
template <typename T, typename W, typename OutT, int kEpilogue>
__device__ __forceinline__ void gemv_store(float g, float u, int r, int col, int cols,
                                           const W* bias, const T* residual,
                                           long long residual_stride, OutT* out) {
  if (bias != nullptr) {
    g += to_float(bias[col]);
    if constexpr (kEpilogue == kGemvSwiglu) u += to_float(bias[cols + col]);
  }
  if constexpr (kEpilogue == kGemvResidual) g += to_float(residual[r * residual_stride + col]);
  if constexpr (kEpilogue == kGemvSwiglu) g = g / (1.f + expf(-g)) * u;
  out[static_cast<long long>(r) * cols + col] = from_float<OutT>(g);
}

// x: rows of `depth` at x + r * x_stride; w: [weight rows, depth] with weight rows = cols
// (x2 for swiglu); bias: null or [weight rows]; residual: rows of `cols` at
// residual + r * residual_stride (kGemvResidual; may alias out); out: [rows, cols].
// workspace (kSplitK > 1, else null): kSplitK * rows * weight rows floats of partials;
// counters (kSplitK > 1, else null): ceil(cols / kRowsPerCta) unsigned completion counters,
// zero before the first launch and left zero by every launch.
//
// Launch: grid (ceil(cols / kRowsPerCta), kSplitK), block kThreads, dynamic shared memory
// (kThreads / 32) * kRowsPerCta * rows * (swiglu ? 2 : 1) floats.
// REQUIRES: 1 <= rows <= kMaxRows; depth % kVec == 0; x_stride % kVec == 0; x, w aligned
// to kVec elements.
template <typename T, typename W, typename OutT, int kMaxRows, int kThreads, int kRowsPerCta,
          int kSplitK, int kVec, int kEpilogue>
__global__ void __launch_bounds__(kThreads)
    gemv_split_k(const T* __restrict__ x, long long x_stride, const W* __restrict__ w,
                 const W* __restrict__ bias, const T* residual, long long residual_stride,
                 OutT* out, float* __restrict__ workspace, unsigned int* __restrict__ counters,
                 int rows, int cols, int depth) {
  grid_dependency_sync();
  constexpr int kWarps = kThreads / 32;
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  constexpr int kPass = gemv_features_per_pass(kThreads, kRowsPerCta, kWRows, kMaxRows, kVec);
  constexpr int kAcc = kPass * kWRows;
  static_assert(kThreads % 32 == 0 && kRowsPerCta % kPass == 0, "block shape");
  extern __shared__ float reduce_smem[];  // [kWarps][kRowsPerCta][rows][kWRows]

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int col0 = blockIdx.x * kRowsPerCta;
  const int weight_rows = cols * kWRows;
  const int vecs = depth / kVec;
  const int per_split = (vecs + kSplitK - 1) / kSplitK;
  const int v_begin = blockIdx.y * per_split;
  const int v_end = min(vecs, v_begin + per_split);

  for (int p0 = 0; p0 < kRowsPerCta; p0 += kPass) {
    // Accumulator a: feature col0 + p0 + a / kWRows; for swiglu odd a is the up row.
    long long wrow[kAcc];
    bool wvalid[kAcc];
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
      const int c = col0 + p0 + a / kWRows;
      wvalid[a] = c < cols;
      wrow[a] = a % kWRows == 0 ? c : cols + c;
    }
    float acc[kAcc][kMaxRows];
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) acc[a][r] = 0.f;
    }
    for (int v = v_begin + threadIdx.x; v < v_end; v += kThreads) {
      const long long k = static_cast<long long>(v) * kVec;
      float wv[kAcc][kVec];
#pragma unroll
      for (int a = 0; a < kAcc; ++a) {
        if (wvalid[a]) {
          load_floats<W, kVec>(w + wrow[a] * depth + k, wv[a]);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) wv[a][e] = 0.f;
        }
      }
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        if (r < rows) {
          float xv[kVec];
          load_floats<T, kVec>(x + r * x_stride + k, xv);
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
  __syncthreads();

  // Item i = (feature c, row r): its sums over the warps.
  auto warp_total = [&](int c, int r, int wr) {
    float s = 0.f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi)
      s += reduce_smem[((wi * kRowsPerCta + c) * rows + r) * kWRows + wr];
    return s;
  };
  const int items = kRowsPerCta * rows;
  if constexpr (kSplitK == 1) {
    for (int i = threadIdx.x; i < items; i += kThreads) {
      const int c = i / rows, r = i % rows;
      if (col0 + c >= cols) continue;
      const float u = kWRows == 2 ? warp_total(c, r, kWRows - 1) : 0.f;
      gemv_store<T, W, OutT, kEpilogue>(warp_total(c, r, 0), u, r, col0 + c, cols, bias, residual,
                                        residual_stride, out);
    }
  } else {
    __shared__ bool is_last;
    const long long slice_floats = static_cast<long long>(rows) * weight_rows;
    float* part = workspace + blockIdx.y * slice_floats;
    for (int i = threadIdx.x; i < items; i += kThreads) {
      const int c = i / rows, r = i % rows;
      if (col0 + c >= cols) continue;
      part[static_cast<long long>(r) * weight_rows + col0 + c] = warp_total(c, r, 0);
      if constexpr (kWRows == 2) {
        part[static_cast<long long>(r) * weight_rows + cols + col0 + c] = warp_total(c, r, 1);
      }
    }
    // Publish the partials before counting this slice as done.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&counters[blockIdx.x], 1u) == kSplitK - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
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
      gemv_store<T, W, OutT, kEpilogue>(g, u, r, col, cols, bias, residual, residual_stride, out);
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
  }
}

}  // namespace tileplan
