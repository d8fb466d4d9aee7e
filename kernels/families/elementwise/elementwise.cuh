// Elementwise kernels over [rows, cols] operands with row strides (views of packed
// tensors included): add, mul, silu, swiglu over a packed [gate | up] last dim, and the MoE
// combine (a weighted sum of each token's top_k expert rows).
// Arithmetic in float32, one rounding to T per stored element.
#pragma once

#include "elementwise_params.h"
#include "primitives.cuh"

namespace tileplan {

// The kItems output vectors of this thread: item k is vector (x * kItems + k) * kThreads + i
// for thread i of CTA x (consecutive threads on consecutive vectors, kVec elements each).
// Kernels load every item's operands before computing any, so kItems loads per operand
// are in flight per thread.
//
// Launch (every kernel here): grid ceil(rows * cols / (kThreads * kItems * kVec)), block
// kThreads. REQUIRES: cols % kVec == 0, row strides % kVec == 0, pointers aligned to kVec
// elements. Outputs are contiguous [rows, cols]; add, mul and silu may write over an
// operand (each element is read and written by one thread, reads first).
template <int kThreads, int kItems, int kVec>
struct ItemVectors {
  bool valid[kItems];
  long long row[kItems];
  int col[kItems];

  __device__ __forceinline__ ItemVectors(long long rows, int cols) {
    const long long vectors = rows * (cols / kVec);
    const long long first = static_cast<long long>(blockIdx.x) * kItems * kThreads + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const long long v = first + static_cast<long long>(k) * kThreads;
      valid[k] = v < vectors;
      const long long e = v * kVec;
      row[k] = e / cols;
      col[k] = static_cast<int>(e - row[k] * cols);
    }
  }
};

// out = a + b (kOp 0) or a * b (kOp 1).
template <typename T, int kThreads, int kItems, int kVec, int kOp>
__device__ __forceinline__ void elementwise_binary(const T* a, long long a_stride, const T* b,
                                                   long long b_stride, T* out, long long rows,
                                                   int cols) {
  const ItemVectors<kThreads, kItems, kVec> it(rows, cols);
  float x[kItems][kVec], y[kItems][kVec];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (it.valid[k]) {
      load_floats<T, kVec>(a + it.row[k] * a_stride + it.col[k], x[k]);
      load_floats<T, kVec>(b + it.row[k] * b_stride + it.col[k], y[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (!it.valid[k]) continue;
#pragma unroll
    for (int i = 0; i < kVec; ++i) x[k][i] = kOp == 0 ? x[k][i] + y[k][i] : x[k][i] * y[k][i];
    store_floats<T, kVec>(out + it.row[k] * cols + it.col[k], x[k]);
  }
}

template <typename T, int kThreads, int kItems, int kVec>
__global__ void __launch_bounds__(kThreads)
    elementwise_add(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ELEMENTWISE_BINARY_PARAMS)) {
  grid_dependency_sync();
  elementwise_binary<T, kThreads, kItems, kVec, 0>(a, a_stride, b, b_stride, out, rows, cols);
}

template <typename T, int kThreads, int kItems, int kVec>
__global__ void __launch_bounds__(kThreads)
    elementwise_mul(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ELEMENTWISE_BINARY_PARAMS)) {
  grid_dependency_sync();
  elementwise_binary<T, kThreads, kItems, kVec, 1>(a, a_stride, b, b_stride, out, rows, cols);
}

// out = silu(x) = x * sigmoid(x).
template <typename T, int kThreads, int kItems, int kVec>
__global__ void __launch_bounds__(kThreads)
    elementwise_silu(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ELEMENTWISE_SILU_PARAMS)) {
  grid_dependency_sync();
  const ItemVectors<kThreads, kItems, kVec> it(rows, cols);
  float v[kItems][kVec];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (it.valid[k]) load_floats<T, kVec>(x + it.row[k] * x_stride + it.col[k], v[k]);
  }
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (!it.valid[k]) continue;
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[k][i] = silu(v[k][i]);
    store_floats<T, kVec>(out + it.row[k] * cols + it.col[k], v[k]);
  }
}

// x: rows of 2 * cols at x + r * x_stride, gate in [0, cols), up in [cols, 2 cols);
// out[r, j] = silu(gate[j]) * up[j], contiguous [rows, cols].
template <typename T, int kThreads, int kItems, int kVec>
__global__ void __launch_bounds__(kThreads) swiglu(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_SWIGLU_PARAMS)) {
  grid_dependency_sync();
  const ItemVectors<kThreads, kItems, kVec> it(rows, cols);
  float g[kItems][kVec], u[kItems][kVec];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (it.valid[k]) {
      load_floats<T, kVec>(x + it.row[k] * x_stride + it.col[k], g[k]);
      load_floats<T, kVec>(x + it.row[k] * x_stride + cols + it.col[k], u[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (!it.valid[k]) continue;
#pragma unroll
    for (int i = 0; i < kVec; ++i) g[k][i] = silu(g[k][i]) * u[k][i];
    store_floats<T, kVec>(out + it.row[k] * cols + it.col[k], g[k]);
  }
}

// y: the top_k selection rows of token r at y + (r * top_k + k) * y_stride; weights: token r's
// top_k weights (float, or T) at weights + r * weights_stride; out[r, j] = sum_k weights[r, k]
// * y[r, k, j], summed in k order in float32, contiguous [rows, cols].
template <typename T, typename WT, int kThreads, int kItems, int kVec>
__global__ void __launch_bounds__(kThreads)
    moe_combine(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MOE_COMBINE_PARAMS)) {
  grid_dependency_sync();
  const ItemVectors<kThreads, kItems, kVec> it(rows, cols);
  float acc[kItems][kVec];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[k][i] = 0.f;
  }
  for (int s = 0; s < top_k; ++s) {
    float v[kItems][kVec];
    float wk[kItems];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (it.valid[k]) {
        wk[k] = to_float(weights[it.row[k] * weights_stride + s]);
        load_floats<T, kVec>(y + (it.row[k] * top_k + s) * y_stride + it.col[k], v[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (!it.valid[k]) continue;
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[k][i] += wk[k] * v[k][i];
    }
  }
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (it.valid[k]) store_floats<T, kVec>(out + it.row[k] * cols + it.col[k], acc[k]);
  }
}

}  // namespace tileplan
