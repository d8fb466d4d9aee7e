// Row-wise argmax of float32 logits: out[r] = the index of the largest logits[r, :], ties
// to the lowest index. NaN ranks below every number (a row of NaNs gives 0).
//
// Each candidate is one 64-bit key: the float mapped to an order-preserving unsigned
// integer in the high half, ~index in the low half, so the largest key is the largest
// value with the lowest index and every reduction is a plain unsigned max.
//
// With kSplits > 1, CTA (s, r) scans slice s of row r and writes its best key to the
// workspace; the last CTA of the row to finish (an atomic counter, re-armed to zero) writes
// out[r]. One launch, and the large vocabularies of decode (one row) are read by many SMs.
#pragma once

#include "argmax_params.h"
#include "primitives.cuh"

namespace tileplan {

__device__ __forceinline__ unsigned long long argmax_key(float v, unsigned int index) {
  unsigned int u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = 0u;  // NaN: below -inf
  } else {
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
  return (static_cast<unsigned long long>(u) << 32) | (~index);
}

__device__ __forceinline__ int argmax_index(unsigned long long key) {
  return static_cast<int>(~static_cast<unsigned int>(key));
}

// Max of the key over the CTA; valid in thread 0. Every thread must call it.
template <int kThreads>
__device__ __forceinline__ unsigned long long block_max_key(unsigned long long key) {
  __shared__ unsigned long long s_keys[kThreads / 32];
  key = warp_max_u64(key);
  if (threadIdx.x % 32 == 0) s_keys[threadIdx.x / 32] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) key = s_keys[w] > key ? s_keys[w] : key;
  }
  return key;
}

// logits: row r at logits + r * logits_stride; out: [rows] int. workspace (kSplits > 1, else
// null): rows * kSplits keys (8 bytes each); counters (kSplits > 1, else null): rows unsigned
// completion counters, zero before the first launch and left zero by every launch.
// Launch: grid (kSplits, rows), block kThreads.
// REQUIRES: vocab >= 1, vocab % kVec == 0, logits_stride % kVec == 0, logits aligned to kVec
// floats.
template <int kThreads, int kSplits, int kVec>
__global__ void __launch_bounds__(kThreads)
    argmax(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ARGMAX_PARAMS)) {
  grid_dependency_sync();
  const int r = blockIdx.y;
  const int split = blockIdx.x;
  const int vecs = vocab / kVec;
  const int per_split = (vecs + kSplits - 1) / kSplits;
  const int v_begin = split * per_split;
  const int v_end = min(vecs, v_begin + per_split);
  const float* row = logits + static_cast<long long>(r) * logits_stride;
  unsigned long long best = 0ull;
  for (int v = v_begin + threadIdx.x; v < v_end; v += kThreads) {
    float x[kVec];
    load_floats<float, kVec>(row + static_cast<long long>(v) * kVec, x);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const unsigned long long key = argmax_key(x[e], static_cast<unsigned int>(v * kVec + e));
      best = key > best ? key : best;
    }
  }
  best = block_max_key<kThreads>(best);
  if constexpr (kSplits == 1) {
    if (threadIdx.x == 0) out[r] = argmax_index(best);
  } else {
    if (threadIdx.x != 0) return;
    unsigned long long* keys = workspace + static_cast<long long>(r) * kSplits;
    keys[split] = best;
    __threadfence();
    if (atomicAdd(&counters[r], 1u) != kSplits - 1) return;
    __threadfence();
    unsigned long long all = 0ull;
    for (int s = 0; s < kSplits; ++s) {
      const unsigned long long key = load_cg(keys + s);
      all = key > all ? key : all;
    }
    out[r] = argmax_index(all);
    counters[r] = 0u;
  }
}

}  // namespace tileplan
