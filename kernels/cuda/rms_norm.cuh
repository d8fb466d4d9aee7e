// RMS normalization over the last dim, and the same after a residual add:
//   rms_norm:     out = x / sqrt(mean(x^2) + eps) * w
//   add_rms_norm: sum = a + b (stored), out = rms_norm(sum as stored) * w
// Sums of squares accumulate in float32.
#pragma once

#include "primitives.cuh"

namespace tileplan {

// The CTA's kThreads threads form kRowsPerCta groups of kThreads / kRowsPerCta threads;
// group g handles row blockIdx.x * kRowsPerCta + g. A group of at most 32 threads reduces
// with shuffles; a larger group (whole warps) adds one shared-memory step.
template <int kThreads, int kRowsPerCta>
struct RowGroups {
  static constexpr int kGroupThreads = kThreads / kRowsPerCta;
  static constexpr int kWarpsPerGroup = kGroupThreads > 32 ? kGroupThreads / 32 : 1;
  static_assert(kThreads % 32 == 0 && kThreads % kRowsPerCta == 0, "threads per row group");
  static_assert(kGroupThreads <= 32 ? (32 % kGroupThreads == 0) : (kGroupThreads % 32 == 0),
                "a row group is a power-of-two part of a warp, or whole warps");

  // Every thread of the CTA must call this (it contains __syncthreads).
  static __device__ __forceinline__ float sum(float v, float* scratch) {
    if constexpr (kGroupThreads <= 32) {
      return group_sum<kGroupThreads>(v);
    } else {
      const int warp = threadIdx.x / 32;
      v = group_sum<32>(v);
      if (threadIdx.x % 32 == 0) scratch[warp] = v;
      __syncthreads();
      const int first = (warp / kWarpsPerGroup) * kWarpsPerGroup;
      float total = 0.f;
#pragma unroll
      for (int i = 0; i < kWarpsPerGroup; ++i) total += scratch[first + i];
      __syncthreads();
      return total;
    }
  }
};

// x, out: [rows, n] in T; w: [n] in W. out may alias x.
// Launch: grid ceil(rows / kRowsPerCta), block kThreads.
// REQUIRES: n % kVec == 0; x, w, out aligned to kVec elements.
template <typename T, typename W, int kThreads, int kRowsPerCta, int kVec>
__global__ void __launch_bounds__(kThreads)
    rms_norm(const T* x, const W* __restrict__ w, T* out, int rows, int n, float eps) {
  using Groups = RowGroups<kThreads, kRowsPerCta>;
  __shared__ float scratch[kThreads / 32];
  const int lane = threadIdx.x % Groups::kGroupThreads;
  const long long row = static_cast<long long>(blockIdx.x) * kRowsPerCta +
                        threadIdx.x / Groups::kGroupThreads;
  const bool active = row < rows;
  const T* xr = x + row * n;
  T* outr = out + row * n;
  constexpr int kStride = Groups::kGroupThreads * kVec;
  float ss = 0.f;
  if (active) {
    for (int c = lane * kVec; c < n; c += kStride) {
      float v[kVec];
      load_floats<T, kVec>(xr + c, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) ss += v[i] * v[i];
    }
  }
  ss = Groups::sum(ss, scratch);
  if (!active) return;
  const float inv_rms = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int c = lane * kVec; c < n; c += kStride) {
    float v[kVec], g[kVec];
    load_floats<T, kVec>(xr + c, v);
    load_floats<W, kVec>(w + c, g);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = v[i] * inv_rms * g[i];
    store_floats<T, kVec>(outr + c, v);
  }
}

// a, b, sum, out: [rows, n] in T; w: [n] in W. `sum` is rounded to T when stored and the
// normalization reads the rounded values, exactly as an add followed by an rms_norm.
// sum may alias a or b, out may alias a or b (each element is read and written by one
// thread, reads first).
// Launch and requirements as rms_norm.
template <typename T, typename W, int kThreads, int kRowsPerCta, int kVec>
__global__ void __launch_bounds__(kThreads)
    add_rms_norm(const T* a, const T* b, const W* __restrict__ w, T* sum, T* out, int rows,
                 int n, float eps) {
  using Groups = RowGroups<kThreads, kRowsPerCta>;
  __shared__ float scratch[kThreads / 32];
  const int lane = threadIdx.x % Groups::kGroupThreads;
  const long long row = static_cast<long long>(blockIdx.x) * kRowsPerCta +
                        threadIdx.x / Groups::kGroupThreads;
  const bool active = row < rows;
  constexpr int kStride = Groups::kGroupThreads * kVec;
  float ss = 0.f;
  if (active) {
    for (int c = lane * kVec; c < n; c += kStride) {
      float va[kVec], vb[kVec];
      load_floats<T, kVec>(a + row * n + c, va);
      load_floats<T, kVec>(b + row * n + c, vb);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        va[i] = to_float(from_float<T>(va[i] + vb[i]));
        ss += va[i] * va[i];
      }
      store_floats<T, kVec>(sum + row * n + c, va);
    }
  }
  ss = Groups::sum(ss, scratch);
  if (!active) return;
  const float inv_rms = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int c = lane * kVec; c < n; c += kStride) {
    float v[kVec], g[kVec];
    load_floats<T, kVec>(sum + row * n + c, v);
    load_floats<W, kVec>(w + c, g);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = v[i] * inv_rms * g[i];
    store_floats<T, kVec>(out + row * n + c, v);
  }
}

}  // namespace tileplan
