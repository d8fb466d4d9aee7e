// Matrix-vector products for decode-sized linears: out[m, n] = sum_k x[m, k] * w[n, k]
// for m < rows <= kRows (rows = batch * new tokens, at most 16 in decode), weights in the
// Hugging Face [out, in] layout streamed once with kVec-element (16-byte for bf16 and
// kVec 8) loads, float32 accumulation, and a fused epilogue:
//   kGemvPlain     out = acc (+ bias)                     linear, lm_head (OutT float)
//   kGemvResidual  out = acc (+ bias) + residual          linear_residual
//   kGemvSwiglu    out = silu(g) * u with g = row n, u = row cols + n of a packed
//                  [gate; up] weight (+ their biases)     linear_swiglu
//
// Split-K: the K range is cut into kSplitK slices (grid.y). With kSplitK > 1 every CTA
// writes its float32 partial sums to `workspace` ([kSplitK, rows, weight rows]); the last
// CTA of a column tile to finish (counted with an atomic in tile_counters) adds the slices
// in slice order, applies the epilogue and re-arms the counter to zero. One launch,
// a deterministic summation order, and epilogues that need the whole sum (swiglu, bf16
// output) stay possible; float atomics into the output would give neither.
#pragma once

#include "primitives.cuh"

namespace tileplan {

enum GemvEpilogue : int { kGemvPlain = 0, kGemvResidual = 1, kGemvSwiglu = 2 };

// g (and u for swiglu) are full float32 sums for output (r, col).
template <typename T, typename W, typename OutT, int kEpilogue>
__device__ __forceinline__ void gemv_store(float g, float u, int r, int col, int cols,
                                           const W* bias, const T* residual, OutT* out) {
  if (bias != nullptr) {
    g += to_float(bias[col]);
    if constexpr (kEpilogue == kGemvSwiglu) u += to_float(bias[cols + col]);
  }
  const long long at = static_cast<long long>(r) * cols + col;
  if constexpr (kEpilogue == kGemvResidual) g += to_float(residual[at]);
  if constexpr (kEpilogue == kGemvSwiglu) g = g / (1.f + expf(-g)) * u;
  out[at] = from_float<OutT>(g);
}

// x: [rows, depth] T; w: [cols * (swiglu ? 2 : 1), depth] W; bias: null or [weight rows] W;
// residual: [rows, cols] T (kGemvResidual; may alias out); out: [rows, cols] OutT.
// workspace: kSplitK * rows * weight rows floats and tile_counters: grid.x zeroed
// counters, both only when kSplitK > 1 (null otherwise).
//
// Launch: grid (ceil(cols / (kWarps * kColsPerWarp)), kSplitK), block kWarps * 32. Warp w
// of CTA x owns output columns (x * kWarps + w) * kColsPerWarp + [0, kColsPerWarp); its
// lanes stride over K in kVec vectors, holding kColsPerWarp (x2 for swiglu) weight vectors
// and reusing each against every x row.
// REQUIRES: 1 <= rows <= kRows; depth % kVec == 0; x, w aligned to kVec elements.
template <typename T, typename W, typename OutT, int kRows, int kWarps, int kColsPerWarp,
          int kSplitK, int kVec, int kEpilogue>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_split_k(const T* __restrict__ x, const W* __restrict__ w, const W* __restrict__ bias,
                 const T* residual, OutT* out, float* __restrict__ workspace,
                 unsigned int* __restrict__ tile_counters, int rows, int cols, int depth) {
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  constexpr int kAcc = kColsPerWarp * kWRows;
  constexpr int kTileCols = kWarps * kColsPerWarp;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int tile = blockIdx.x;
  const int col0 = tile * kTileCols + warp * kColsPerWarp;
  const int weight_rows = cols * kWRows;

  // Accumulator a holds column col0 + a / kWRows; for swiglu odd a is the up row.
  long long wrow[kAcc];
  bool wvalid[kAcc];
#pragma unroll
  for (int a = 0; a < kAcc; ++a) {
    const int c = col0 + a / kWRows;
    wvalid[a] = c < cols;
    wrow[a] = a % kWRows == 0 ? c : cols + c;
  }

  const int vecs = depth / kVec;
  const int per_split = (vecs + kSplitK - 1) / kSplitK;
  const int v_begin = blockIdx.y * per_split;
  const int v_end = min(vecs, v_begin + per_split);

  float acc[kAcc][kRows];
#pragma unroll
  for (int a = 0; a < kAcc; ++a) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[a][r] = 0.f;
  }
  for (int v = v_begin + lane; v < v_end; v += 32) {
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
    for (int r = 0; r < kRows; ++r) {
      if (r < rows) {
        float xv[kVec];
        load_floats<T, kVec>(x + static_cast<long long>(r) * depth + k, xv);
#pragma unroll
        for (int a = 0; a < kAcc; ++a) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[a][r] += wv[a][e] * xv[e];
        }
      }
    }
  }
#pragma unroll
  for (int a = 0; a < kAcc; ++a) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[a][r] = group_sum<32>(acc[a][r]);
  }

  if constexpr (kSplitK == 1) {
    // Every lane holds every sum; lane (c * kRows + r) % 32 stores output (r, col0 + c).
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (lane == (c * kRows + r) % 32 && r < rows && wvalid[c * kWRows]) {
          const float u = kWRows == 2 ? acc[c * kWRows + kWRows - 1][r] : 0.f;
          gemv_store<T, W, OutT, kEpilogue>(acc[c * kWRows][r], u, r, col0 + c, cols, bias,
                                            residual, out);
        }
      }
    }
  } else {
    __shared__ bool is_last;
    float* part = workspace + static_cast<long long>(blockIdx.y) * rows * weight_rows;
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (lane == (a * kRows + r) % 32 && r < rows && wvalid[a]) {
          part[static_cast<long long>(r) * weight_rows + wrow[a]] = acc[a][r];
        }
      }
    }
    // Publish the partials before counting this slice as done.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&tile_counters[tile], 1u) == kSplitK - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int i = threadIdx.x; i < rows * kTileCols; i += kWarps * 32) {
      const int r = i / kTileCols;
      const int col = tile * kTileCols + i % kTileCols;
      if (col >= cols) continue;
      float g = 0.f, u = 0.f;
      for (int s = 0; s < kSplitK; ++s) {
        const float* slice = workspace + (static_cast<long long>(s) * rows + r) * weight_rows;
        g += load_cg(slice + col);
        if constexpr (kWRows == 2) u += load_cg(slice + cols + col);
      }
      gemv_store<T, W, OutT, kEpilogue>(g, u, r, col, cols, bias, residual, out);
    }
    if (threadIdx.x == 0) tile_counters[tile] = 0;
  }
}

}  // namespace tileplan
