// Elementwise kernels over flat tensors: add, mul, silu, and swiglu over a packed
// [gate | up] last dim. Arithmetic in float32, one rounding to T per stored element.
#pragma once

#include "primitives.cuh"

namespace tileplan {

__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

// A grid-stride loop over n elements, kVec per thread per step, with a scalar tail when
// n % kVec != 0. `op(e, lanes)` handles kVec elements at e when `lanes` == kVec, else one.
// Launch (all flat kernels): grid any >= 1 (the launcher caps it at a few waves of the
// GPU), block kThreads. REQUIRES: every pointer aligned to kVec * sizeof(T) bytes.
template <int kThreads, int kVec, typename Op>
__device__ __forceinline__ void for_each_vector(long long n, Op op) {
  const long long vectors = n / kVec;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  const long long first = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  for (long long v = first; v < vectors; v += stride) op(v * kVec, kVec);
  const long long tail = vectors * kVec + first;
  if (tail < n) op(tail, 1);
}

// out = a + b; out may alias a or b.
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    elementwise_add(const T* a, const T* b, T* out, long long n) {
  for_each_vector<kThreads, kVec>(n, [&](long long e, int lanes) {
    if (lanes == kVec) {
      float x[kVec], y[kVec];
      load_floats<T, kVec>(a + e, x);
      load_floats<T, kVec>(b + e, y);
#pragma unroll
      for (int i = 0; i < kVec; ++i) x[i] += y[i];
      store_floats<T, kVec>(out + e, x);
    } else {
      out[e] = from_float<T>(to_float(a[e]) + to_float(b[e]));
    }
  });
}

// out = a * b; out may alias a or b.
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    elementwise_mul(const T* a, const T* b, T* out, long long n) {
  for_each_vector<kThreads, kVec>(n, [&](long long e, int lanes) {
    if (lanes == kVec) {
      float x[kVec], y[kVec];
      load_floats<T, kVec>(a + e, x);
      load_floats<T, kVec>(b + e, y);
#pragma unroll
      for (int i = 0; i < kVec; ++i) x[i] *= y[i];
      store_floats<T, kVec>(out + e, x);
    } else {
      out[e] = from_float<T>(to_float(a[e]) * to_float(b[e]));
    }
  });
}

// out = x * sigmoid(x); out may alias x.
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads) elementwise_silu(const T* x, T* out, long long n) {
  for_each_vector<kThreads, kVec>(n, [&](long long e, int lanes) {
    if (lanes == kVec) {
      float v[kVec];
      load_floats<T, kVec>(x + e, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = silu(v[i]);
      store_floats<T, kVec>(out + e, v);
    } else {
      out[e] = from_float<T>(silu(to_float(x[e])));
    }
  });
}

// x: [rows, 2f] (gate in columns [0, f), up in [f, 2f)), out: [rows, f];
// out[r, j] = silu(x[r, j]) * x[r, f + j], in float32 with one rounding.
// Launch: grid any >= 1, block kThreads. REQUIRES: f % kVec == 0; pointers aligned to
// kVec * sizeof(T) bytes.
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    swiglu(const T* __restrict__ x, T* __restrict__ out, long long rows, int f) {
  const long long vectors = rows * f / kVec;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  for (long long v = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; v < vectors;
       v += stride) {
    const long long e = v * kVec;
    const long long r = e / f;
    const long long j = e - r * f;
    float g[kVec], u[kVec];
    load_floats<T, kVec>(x + r * 2 * f + j, g);
    load_floats<T, kVec>(x + r * 2 * f + f + j, u);
#pragma unroll
    for (int i = 0; i < kVec; ++i) g[i] = silu(g[i]) * u[i];
    store_floats<T, kVec>(out + e, g);
  }
}

}  // namespace tileplan
