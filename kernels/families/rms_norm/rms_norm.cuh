// RMS normalization over the last dim, and the same after a residual add:
//   rms_norm:     out = x / sqrt(mean(x^2) + eps) * w
//   add_rms_norm: sum = a + b (stored), out = rms_norm(sum as stored) * w
// Sums of squares accumulate in float32.
#pragma once

#include "rms_norm_params.h"
#include "primitives.cuh"

namespace tileplan {

// kRowThreads threads (whole warps) normalize one row; kRowsPerCta rows share a CTA.
template <int kRowThreads, int kRowsPerCta>
struct RowGroups {
  static constexpr int kThreads = kRowThreads * kRowsPerCta;
  static constexpr int kWarpsPerRow = kRowThreads / 32;
  static_assert(kRowThreads % 32 == 0 && kThreads <= 1024, "row threads: whole warps");

  // The sum of v over the row's threads, in every thread of the row. Every thread of the
  // CTA must call it (it contains barriers when a row spans several warps).
  static __device__ __forceinline__ float sum(float v, float* scratch) {
    v = group_sum<32>(v);
    if constexpr (kWarpsPerRow == 1) {
      return v;
    } else {
      const int warp = threadIdx.x / 32;
      if (threadIdx.x % 32 == 0) scratch[warp] = v;
      __syncthreads();
      const int first = (warp / kWarpsPerRow) * kWarpsPerRow;
      float total = 0.f;
#pragma unroll
      for (int i = 0; i < kWarpsPerRow; ++i) total += scratch[first + i];
      __syncthreads();
      return total;
    }
  }
};

// A thread keeps up to this many of its vectors in registers between the reduction and
// the scaling; further vectors (long rows on few threads) are read again.
constexpr int kRmsNormCachedVectors = 4;

// Row r of `a` starts at a + (r / a_group) * a_group_stride + (r % a_group) * a_stride
// (two levels, so per-head rows of a view into a packed tensor work), row r of `b` at
// b + r * b_stride; out and sum are contiguous [rows, n]; w is [n].
// Each element is read and written by one thread, reads first, so out may alias x (and
// for add_rms_norm, sum and out may alias a or b).
//
// Launch: grid ceil(rows / kRowsPerCta), block kRowThreads * kRowsPerCta.
// REQUIRES: n % kVec == 0, strides % kVec == 0, pointers aligned to kVec elements,
// groups >= 1.
template <typename T, typename W, int kRowThreads, int kRowsPerCta, int kVec, bool kAdd>
__device__ __forceinline__ void rms_norm_rows(const T* a, long long a_stride, int a_group,
                                              long long a_group_stride, const T* b,
                                              long long b_stride, const W* __restrict__ w, T* sum,
                                              T* out, int rows, int n, float eps) {
  using Groups = RowGroups<kRowThreads, kRowsPerCta>;
  constexpr int kStride = kRowThreads * kVec;
  constexpr int kCached = kRmsNormCachedVectors;
  __shared__ float scratch[Groups::kThreads / 32];
  const int lane = threadIdx.x % kRowThreads;
  const long long row =
      static_cast<long long>(blockIdx.x) * kRowsPerCta + threadIdx.x / kRowThreads;
  const bool active = row < rows;
  const T* ar = a + (row / a_group) * a_group_stride + (row % a_group) * a_stride;
  const T* br = kAdd ? b + row * b_stride : nullptr;
  T* sumr = kAdd ? sum + row * n : nullptr;
  T* outr = out + row * n;

  // The row's value at c: x, or the sum a + b rounded to T as it is stored.
  auto load_row = [&](int c, float(&v)[kVec]) {
    load_floats<T, kVec>(ar + c, v);
    if constexpr (kAdd) {
      float vb[kVec];
      load_floats<T, kVec>(br + c, vb);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = to_float(from_float<T>(v[i] + vb[i]));
      store_floats<T, kVec>(sumr + c, v);
    }
  };

  float cached[kCached][kVec];
  float ss = 0.f;
  if (active) {
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      const int c = lane * kVec + j * kStride;
      if (c < n) {
        load_row(c, cached[j]);
#pragma unroll
        for (int i = 0; i < kVec; ++i) ss += cached[j][i] * cached[j][i];
      }
    }
    for (int c = lane * kVec + kCached * kStride; c < n; c += kStride) {
      float v[kVec];
      load_row(c, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) ss += v[i] * v[i];
    }
  }
  ss = Groups::sum(ss, scratch);
  if (!active) return;
  const float inv_rms = rsqrtf(ss / static_cast<float>(n) + eps);
  auto finish = [&](int c, float(&v)[kVec]) {
    float g[kVec];
    load_floats<W, kVec>(w + c, g);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = v[i] * inv_rms * g[i];
    store_floats<T, kVec>(outr + c, v);
  };
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    const int c = lane * kVec + j * kStride;
    if (c < n) finish(c, cached[j]);
  }
  for (int c = lane * kVec + kCached * kStride; c < n; c += kStride) {
    float v[kVec];
    if constexpr (kAdd) {
      load_floats<T, kVec>(sumr + c, v);  // this thread stored it in the first pass
    } else {
      load_floats<T, kVec>(ar + c, v);
    }
    finish(c, v);
  }
}

// x: row r of n at x + (r / x_group) * x_group_stride + (r % x_group) * x_stride;
// out: [rows, n].
template <typename T, typename W, int kRowThreads, int kRowsPerCta, int kVec>
__global__ void __launch_bounds__(kRowThreads* kRowsPerCta)
    rms_norm(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_RMS_NORM_PARAMS)) {
  grid_dependency_sync();
  rms_norm_rows<T, W, kRowThreads, kRowsPerCta, kVec, false>(
      x, x_stride, x_group, x_group_stride, nullptr, 0, w, nullptr, out, rows, n, eps);
}

// a, b: rows of n at a + r * a_stride, b + r * b_stride; sum, out: [rows, n]. `sum` is
// rounded to T when stored, and the normalization uses the rounded values, exactly as an
// add followed by an rms_norm.
template <typename T, typename W, int kRowThreads, int kRowsPerCta, int kVec>
__global__ void __launch_bounds__(kRowThreads* kRowsPerCta)
    add_rms_norm(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ADD_RMS_NORM_PARAMS)) {
  grid_dependency_sync();
  rms_norm_rows<T, W, kRowThreads, kRowsPerCta, kVec, true>(a, a_stride, rows > 0 ? rows : 1, 0, b,
                                                            b_stride, w, sum, out, rows, n, eps);
}

}  // namespace tileplan
