// Decode attention with the KV range split across CTAs (split-KV), for queries that each
// attend to their own prefix of the cache:
//   out[b, t, h, :] = softmax_j(scale * q . k_j) v_j  over cache rows j of kv head
//   h / (q_heads / kv_heads) with max(0, p - window + 1) <= j <= p, p = positions[b, t]
// (window 0 = unlimited). Positions are read from device memory, so one launch shape (and
// one CUDA Graph) serves every context length.
//
// attention_decode_split_kv: CTA (h, bt, s) takes slice s of kSplitKv equal slices of
// the query's key range. Its warps take keys round-robin; inside a warp, aligned groups of
// kLanes = ceil_pow2(kHeadDim / kVec) lanes each own one key at a time (a lane holds kVec
// dims of q, k, v and the output), so a warp scores 32 / kLanes keys per step. Every lane
// group keeps its own online-softmax state (running max m, sum l, output o), merged at the
// end across groups (shuffles) and warps (shared memory). Scores live in the log2 domain
// (q . k * scale * log2(e)) so exp2f is the only exponential.
//   kSplitKv == 1: writes out directly.
//   kSplitKv > 1: writes the slice's normalized output o / l and its log-sum-exp m + log2(l)
//   (log2 domain; -inf for an empty slice) to partial_out / partial_lse, and
//   attention_decode_split_kv_reduce combines the slices.
#pragma once

#include "primitives.cuh"

namespace tileplan {

// Merges online-softmax state (m2, l2, o2) into (m, l, o).
template <int kVec>
__device__ __forceinline__ void softmax_merge(float& m, float& l, float (&o)[kVec], float m2,
                                              float l2, const float (&o2)[kVec]) {
  const float mx = fmaxf(m, m2);
  if (mx == neg_inf()) return;  // both empty
  const float c1 = exp2f(m - mx), c2 = exp2f(m2 - mx);
  l = l * c1 + l2 * c2;
#pragma unroll
  for (int e = 0; e < kVec; ++e) o[e] = o[e] * c1 + o2[e] * c2;
  m = mx;
}

// q, out: [batch * tokens, q_heads, kHeadDim]; caches: [batch, kv_heads, capacity,
// kHeadDim]; positions: [batch * tokens]. partial_out: [batch * tokens, q_heads, kSplitKv,
// kHeadDim] floats, partial_lse: [batch * tokens, q_heads, kSplitKv] floats (kSplitKv > 1;
// null otherwise). A position outside [0, capacity) gives a zero output.
//
// Launch: grid (q_heads, batch * tokens, kSplitKv), block kThreads, no dynamic shared
// memory. REQUIRES: q_heads % kv_heads == 0; kHeadDim % kVec == 0; kThreads >= kHeadDim;
// pointers aligned to kVec elements.
template <typename T, int kHeadDim, int kThreads, int kSplitKv, int kVec>
__global__ void __launch_bounds__(kThreads) attention_decode_split_kv(
    const T* __restrict__ q, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
    const int* __restrict__ positions, T* __restrict__ out, float* __restrict__ partial_out,
    float* __restrict__ partial_lse, int tokens, int q_heads, int kv_heads, int capacity,
    float scale, int window) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kLanes = ceil_pow2(kHeadDim / kVec);
  constexpr int kKeysPerWarp = 32 / kLanes;
  constexpr int kKeysInFlight = 4;
  static_assert(kHeadDim % kVec == 0 && kLanes <= 32, "head dim / vector width");
  static_assert(kThreads % 32 == 0 && kThreads >= kHeadDim, "threads");
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_o[kWarps][kHeadDim];

  const int h = blockIdx.x;
  const int bt = blockIdx.y;
  const int split = blockIdx.z;
  const int b = bt / tokens;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int slot = lane / kLanes;          // which key of the warp's step
  const int d0 = (lane % kLanes) * kVec;  // this lane's dims
  const bool has_dims = d0 < kHeadDim;

  // Key range [first, p] of the query, and this CTA's slice of it.
  int p = positions[bt];
  if (p < 0 || p >= capacity) p = -1;
  const int first = window > 0 ? max(0, p - window + 1) : 0;
  const int len = p < 0 ? 0 : p - first + 1;
  const int chunk = (len + kSplitKv - 1) / kSplitKv;
  const int j_begin = first + split * chunk;
  const int j_end = min(p + 1, j_begin + chunk);

  const float log2e_scale = scale * 1.4426950408889634f;
  float qv[kVec];
  const long long q_at = (static_cast<long long>(bt) * q_heads + h) * kHeadDim + d0;
  if (has_dims) {
    load_floats<T, kVec>(q + q_at, qv);
#pragma unroll
    for (int e = 0; e < kVec; ++e) qv[e] *= log2e_scale;
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) qv[e] = 0.f;
  }
  const int kvh = h / (q_heads / kv_heads);
  const long long head_base = (static_cast<long long>(b) * kv_heads + kvh) * capacity;

  float m = neg_inf(), l = 0.f, o[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) o[e] = 0.f;
  // Each step a lane group takes kKeysInFlight keys, all their K and V loads issued before
  // the first use. The loop bound is uniform across the warp so the shuffles see every lane.
  constexpr int kStepKeys = kWarps * kKeysPerWarp;
  for (int j0 = j_begin + warp * kKeysPerWarp; j0 < j_end;
       j0 += kStepKeys * kKeysInFlight) {
    RawVec<T, kVec> kr[kKeysInFlight], vr[kKeysInFlight];
    bool valid[kKeysInFlight];
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      const int j = j0 + u * kStepKeys + slot;
      valid[u] = j < j_end;
      if (valid[u] && has_dims) {
        kr[u] = load_raw<T, kVec>(k_cache + (head_base + j) * kHeadDim + d0);
        vr[u] = load_raw<T, kVec>(v_cache + (head_base + j) * kHeadDim + d0);
      }
    }
    float score[kKeysInFlight];
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      float dot = 0.f;
      if (valid[u] && has_dims) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot += qv[e] * word_element<T>(kr[u].w, e);
      }
      score[u] = group_sum<kLanes>(dot);
    }
    float mx = m;
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      if (valid[u]) mx = fmaxf(mx, score[u]);
    }
    if (mx == neg_inf()) continue;  // no valid key for this lane group in this step
    const float corr = exp2f(m - mx);
    l *= corr;
#pragma unroll
    for (int e = 0; e < kVec; ++e) o[e] *= corr;
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      if (!valid[u]) continue;
      const float pj = exp2f(score[u] - mx);
      l += pj;
      if (has_dims) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) o[e] += pj * word_element<T>(vr[u].w, e);
      }
    }
    m = mx;
  }
  // Merge the lane groups of the warp, then the warps.
#pragma unroll
  for (int off = kLanes; off < 32; off *= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
    float o2[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) o2[e] = __shfl_xor_sync(0xffffffffu, o[e], off);
    softmax_merge<kVec>(m, l, o, m2, l2, o2);
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
  if (slot == 0 && has_dims) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) s_o[warp][d0 + e] = o[e];
  }
  __syncthreads();
  const int d = threadIdx.x;
  if (d >= kHeadDim) return;
  float mx = neg_inf();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w]);
  float sum = 0.f, acc = 0.f;
  if (mx != neg_inf()) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = exp2f(s_m[w] - mx);
      sum += s_l[w] * c;
      acc += s_o[w][d] * c;
    }
  }
  const float value = sum > 0.f ? acc / sum : 0.f;
  if constexpr (kSplitKv == 1) {
    out[(static_cast<long long>(bt) * q_heads + h) * kHeadDim + d] = from_float<T>(value);
  } else {
    const long long slice = (static_cast<long long>(bt) * q_heads + h) * kSplitKv + split;
    partial_out[slice * kHeadDim + d] = value;
    if (d == 0) partial_lse[slice] = sum > 0.f ? mx + log2f(sum) : neg_inf();
  }
}

// Combines the kSplitKv slices of attention_decode_split_kv:
// out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M), M = max_s lse_s; all slices empty
// gives zeros. Launch: grid (q_heads, batch * tokens), block kHeadDim threads (rounded up
// to a warp).
template <typename T, int kHeadDim, int kSplitKv>
__global__ void __launch_bounds__((kHeadDim + 31) / 32 * 32) attention_decode_split_kv_reduce(
    const float* __restrict__ partial_out, const float* __restrict__ partial_lse,
    T* __restrict__ out, int q_heads) {
  const int d = threadIdx.x;
  if (d >= kHeadDim) return;
  const long long head = static_cast<long long>(blockIdx.y) * q_heads + blockIdx.x;
  const float* lse = partial_lse + head * kSplitKv;
  float mx = neg_inf();
#pragma unroll
  for (int s = 0; s < kSplitKv; ++s) mx = fmaxf(mx, lse[s]);
  float sum = 0.f, acc = 0.f;
  if (mx != neg_inf()) {
#pragma unroll
    for (int s = 0; s < kSplitKv; ++s) {
      const float c = exp2f(lse[s] - mx);
      sum += c;
      acc += c * partial_out[(head * kSplitKv + s) * kHeadDim + d];
    }
  }
  out[head * kHeadDim + d] = from_float<T>(sum > 0.f ? acc / sum : 0.f);
}

}  // namespace tileplan
