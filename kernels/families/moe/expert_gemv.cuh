// The routed experts' linears for decode-sized inputs (expert_linear, docs/ir.md): selection s
// (flat token s / top_k, its k-th expert) multiplies its input row by the weight of expert
// e = ids[s], out[s, n] = sum_h x[row(s), h] * w[e, n, h], with row(s) = s for an input per
// selection ([B,T,K,H]) and s / top_k for a token's one input shared by its K selections
// ([B,T,H]). Weights are the experts' [N, H] matrices stacked ([E, N, H], the Hugging Face
// [out, in] layout), float32 accumulation, one rounding to T per output.
//
// The ids come from device memory, written by the moe_topk kernel before this one: nothing
// about the routing is known at launch, so a captured CUDA Graph replays with whatever experts
// the step selects. Only the selected experts' rows are read; a CTA whose selection repeats
// another's expert (two tokens of a batch) reads the same rows, mostly from L2.
#pragma once

#include "moe_params.h"
#include "primitives.cuh"

namespace tileplan {

// CTA (s, y) computes rows [y * kRowsPerCta, (y + 1) * kRowsPerCta) of selection s's output;
// warp i of the block owns kRowsPerCta / (kThreads / 32) consecutive rows of them and its lanes
// stride over H in kVec-element vectors, each x vector loaded once for all of the warp's rows
// (16-byte weight loads for bf16 with kVec 8), then one warp sum per row.
//
// An id outside [0, experts) is an error: with `error` non-null the selection's rows are
// written as zeros and *error is raised to at least the flat token index s / top_k + 1; with
// `error` null the kernel traps, failing the launch.
//
// x: rows of `depth` at x + r * x_stride; ids: [selections] (selections = tokens * top_k);
// w: [experts, cols, depth] contiguous; out: [selections, cols] contiguous.
// Launch: grid (selections, ceil(cols / kRowsPerCta)), block kThreads.
// REQUIRES: kRowsPerCta % (kThreads / 32) == 0; depth % kVec == 0; x_stride % kVec == 0; x and
// w aligned to kVec elements.
template <typename T, typename W, int kThreads, int kRowsPerCta, int kVec>
__global__ void __launch_bounds__(kThreads)
    expert_gemv(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_EXPERT_GEMV_PARAMS)) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kRowsPerWarp = kRowsPerCta / kWarps;
  static_assert(kThreads % 32 == 0 && kRowsPerCta % kWarps == 0, "block shape");
  grid_dependency_sync();
  const int s = blockIdx.x;
  const int lane = threadIdx.x % 32;
  const int row0 = blockIdx.y * kRowsPerCta + (threadIdx.x / 32) * kRowsPerWarp;
  T* dst = out + static_cast<long long>(s) * cols;
  const int e = ids[s];
  if (e < 0 || e >= experts) {
    if (error == nullptr) __trap();
    if (threadIdx.x == 0 && blockIdx.y == 0) atomicMax(error, s / top_k + 1);
    for (int i = lane; i < kRowsPerWarp; i += 32) {
      if (row0 + i < cols) dst[row0 + i] = from_float<T>(0.f);
    }
    return;
  }
  const T* xr = x + static_cast<long long>(x_per_selection ? s : s / top_k) * x_stride;
  const W* wr = w + (static_cast<long long>(e) * cols + row0) * depth;
  float acc[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) acc[i] = 0.f;
  const int vecs = depth / kVec;
  for (int v = lane; v < vecs; v += 32) {
    const long long k = static_cast<long long>(v) * kVec;
    float xv[kVec];
    load_floats<T, kVec>(xr + k, xv);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (row0 + i < cols) {
        float wv[kVec];
        load_floats<W, kVec>(wr + static_cast<long long>(i) * depth + k, wv);
#pragma unroll
        for (int q = 0; q < kVec; ++q) acc[i] += wv[q] * xv[q];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const float total = group_sum(acc[i]);
    if (lane == i % 32 && row0 + i < cols) dst[row0 + i] = from_float<T>(total);
  }
}

}  // namespace tileplan
