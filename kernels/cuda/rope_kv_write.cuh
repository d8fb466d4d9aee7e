// Rotary position embedding (rotate-half form) and KV-cache writes, alone and fused:
//   rope                   x -> out, per head
//   kv_write               x -> cache[b, h, positions[b, t], :]
//   rope_kv_write          packed qkv -> rope(q) out, rope(k) and v into the caches
//   qk_norm_rope_kv_write  the same with a per-head RMS norm of q and k before the rope
//
// Frequencies: inv_freq[i] (i < dim / 2) is computed once on the host, by the same float32
// function the CPU reference uses (runtime/cpu RopeInvFreq, llama3 band rescaling
// included), and passed as a device array; the kernels form the angle p * inv_freq[i] in
// float32 and take sincosf of it (full range reduction, no fast-math intrinsics), so the
// device and the reference differ only by sincosf's rounding.
//
// Positions are read from device memory (a CUDA Graph replays with new positions). Rows
// are [tokens, heads, dim] with tokens = batch * new tokens; caches are
// [batch, kv_heads, capacity, dim]. A position outside [0, capacity) writes nothing to the
// caches and raises *error (when not null) to at least token + 1.
#pragma once

#include "primitives.cuh"

namespace tileplan {

// The largest head dim the shared cos/sin table holds.
constexpr int kRopeMaxHeadDim = 512;

// cos/sin of p * inv_freq[i] for i < half, written by the whole CTA (no barrier inside).
__device__ __forceinline__ void fill_rope_table(int p, const float* __restrict__ inv_freq,
                                                int half, float* cos_t, float* sin_t) {
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(static_cast<float>(p) * inv_freq[i], &s, &c);
    cos_t[i] = c;
    sin_t[i] = s;
  }
}

// One warp rotates one head of 2 * half elements from src to dst (which may be equal),
// lane-strided over kVec-element vectors of each half. With kNorm the head is first RMS
// normalized (float32, not rounded in between) and scaled by `norm`.
template <typename T, typename W, int kVec, bool kNorm>
__device__ __forceinline__ void rope_head(const T* src, T* dst, const float* cos_t,
                                          const float* sin_t, int half, const W* norm,
                                          float eps, int lane) {
  float inv_rms = 1.f;
  if constexpr (kNorm) {
    float ss = 0.f;
    for (int i = lane * kVec; i < half; i += 32 * kVec) {
      float lo[kVec], hi[kVec];
      load_floats<T, kVec>(src + i, lo);
      load_floats<T, kVec>(src + half + i, hi);
#pragma unroll
      for (int e = 0; e < kVec; ++e) ss += lo[e] * lo[e] + hi[e] * hi[e];
    }
    ss = group_sum<32>(ss);
    inv_rms = rsqrtf(ss / static_cast<float>(2 * half) + eps);
  }
  for (int i = lane * kVec; i < half; i += 32 * kVec) {
    float lo[kVec], hi[kVec];
    load_floats<T, kVec>(src + i, lo);
    load_floats<T, kVec>(src + half + i, hi);
    if constexpr (kNorm) {
      float wl[kVec], wh[kVec];
      load_floats<W, kVec>(norm + i, wl);
      load_floats<W, kVec>(norm + half + i, wh);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        lo[e] *= inv_rms * wl[e];
        hi[e] *= inv_rms * wh[e];
      }
    }
    float out_lo[kVec], out_hi[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float c = cos_t[i + e], s = sin_t[i + e];
      out_lo[e] = lo[e] * c - hi[e] * s;
      out_hi[e] = hi[e] * c + lo[e] * s;
    }
    store_floats<T, kVec>(dst + i, out_lo);
    store_floats<T, kVec>(dst + half + i, out_hi);
  }
}

// x, out: [num_tokens, heads, dim]; positions: [num_tokens]. out may alias x.
// Launch: grid num_tokens, block kThreads (warps loop over heads).
// REQUIRES: dim even, dim <= kRopeMaxHeadDim, (dim / 2) % kVec == 0, pointers aligned to
// kVec elements.
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    rope(const T* x, const int* __restrict__ positions, const float* __restrict__ inv_freq,
         T* out, int num_tokens, int heads, int dim) {
  __shared__ float cos_t[kRopeMaxHeadDim / 2], sin_t[kRopeMaxHeadDim / 2];
  const int t = blockIdx.x;
  const int half = dim / 2;
  fill_rope_table(positions[t], inv_freq, half, cos_t, sin_t);
  __syncthreads();
  const long long base = static_cast<long long>(t) * heads * dim;
  for (int h = threadIdx.x / 32; h < heads; h += kThreads / 32) {
    rope_head<T, T, kVec, false>(x + base + h * dim, out + base + h * dim, cos_t, sin_t, half,
                                 nullptr, 0.f, threadIdx.x % 32);
  }
}

// x: [batch * tokens, heads, dim]; cache: [batch, heads, capacity, dim];
// cache[b, h, positions[b, t], :] = x[b, t, h, :].
// Launch: grid batch * tokens, block kThreads.
// REQUIRES: dim % kVec == 0, pointers aligned to kVec elements.
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    kv_write(const T* __restrict__ x, const int* __restrict__ positions, T* cache, int tokens,
             int heads, int dim, int capacity, int* error) {
  const int bt = blockIdx.x;
  const int b = bt / tokens;
  const int p = positions[bt];
  if (p < 0 || p >= capacity) {
    if (error != nullptr && threadIdx.x == 0) atomicMax(error, bt + 1);
    return;
  }
  const int row = heads * dim;
  for (int e = threadIdx.x * kVec; e < row; e += kThreads * kVec) {
    const int h = e / dim;
    const int d = e - h * dim;
    copy_vec<T, kVec>(cache + ((static_cast<long long>(b) * heads + h) * capacity + p) * dim + d,
                      x + static_cast<long long>(bt) * row + e);
  }
}

// Shared body of rope_kv_write and qk_norm_rope_kv_write for token blockIdx.x.
template <typename T, typename W, int kThreads, int kVec, bool kNorm>
__device__ __forceinline__ void rope_kv_write_token(
    const T* __restrict__ qkv, const int* __restrict__ positions,
    const float* __restrict__ inv_freq, const W* q_norm, const W* k_norm, float eps,
    T* __restrict__ q_out, T* k_cache, T* v_cache, int tokens, int q_heads, int kv_heads,
    int dim, int capacity, int* error) {
  __shared__ float cos_t[kRopeMaxHeadDim / 2], sin_t[kRopeMaxHeadDim / 2];
  const int bt = blockIdx.x;
  const long long b = bt / tokens;
  const int p = positions[bt];
  const bool valid = p >= 0 && p < capacity;
  if (!valid && error != nullptr && threadIdx.x == 0) atomicMax(error, bt + 1);
  const int half = dim / 2;
  fill_rope_table(p, inv_freq, half, cos_t, sin_t);
  __syncthreads();
  const T* row = qkv + static_cast<long long>(bt) * (q_heads + 2 * kv_heads) * dim;
  const int lane = threadIdx.x % 32;
  for (int h = threadIdx.x / 32; h < q_heads + kv_heads; h += kThreads / 32) {
    if (h < q_heads) {
      rope_head<T, W, kVec, kNorm>(row + h * dim,
                                   q_out + (static_cast<long long>(bt) * q_heads + h) * dim,
                                   cos_t, sin_t, half, q_norm, eps, lane);
    } else if (valid) {
      const int kh = h - q_heads;
      rope_head<T, W, kVec, kNorm>(row + h * dim,
                                   k_cache + ((b * kv_heads + kh) * capacity + p) * dim, cos_t,
                                   sin_t, half, k_norm, eps, lane);
    }
  }
  if (!valid) return;
  const T* v = row + (q_heads + kv_heads) * dim;
  for (int e = threadIdx.x * kVec; e < kv_heads * dim; e += kThreads * kVec) {
    const int h = e / dim;
    const int d = e - h * dim;
    copy_vec<T, kVec>(v_cache + ((b * kv_heads + h) * capacity + p) * dim + d, v + e);
  }
}

// qkv: [batch * tokens, (q_heads + 2 * kv_heads) * dim] holding q, k, v heads in order;
// q_out: [batch * tokens, q_heads, dim] = rope(q); k_cache/v_cache at each token's
// position receive rope(k) and v.
// Launch: grid batch * tokens, block kThreads.
// REQUIRES: as rope, and dim % kVec == 0 (implied).
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    rope_kv_write(const T* __restrict__ qkv, const int* __restrict__ positions,
                  const float* __restrict__ inv_freq, T* __restrict__ q_out, T* k_cache,
                  T* v_cache, int tokens, int q_heads, int kv_heads, int dim, int capacity,
                  int* error) {
  rope_kv_write_token<T, T, kThreads, kVec, false>(qkv, positions, inv_freq, nullptr, nullptr,
                                                   0.f, q_out, k_cache, v_cache, tokens,
                                                   q_heads, kv_heads, dim, capacity, error);
}

// As rope_kv_write, with q and k heads RMS normalized over dim (weights q_norm, k_norm: [dim])
// before the rope.
template <typename T, typename W, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    qk_norm_rope_kv_write(const T* __restrict__ qkv, const W* __restrict__ q_norm,
                          const W* __restrict__ k_norm, const int* __restrict__ positions,
                          const float* __restrict__ inv_freq, T* __restrict__ q_out,
                          T* k_cache, T* v_cache, int tokens, int q_heads, int kv_heads,
                          int dim, int capacity, float eps, int* error) {
  rope_kv_write_token<T, W, kThreads, kVec, true>(qkv, positions, inv_freq, q_norm, k_norm, eps,
                                                  q_out, k_cache, v_cache, tokens, q_heads,
                                                  kv_heads, dim, capacity, error);
}

}  // namespace tileplan
