// Rotary position embedding and KV-cache writes, alone and fused:
//   rope                   x -> out, per head
//   kv_write               x -> cache[b, h, positions[b, t], :]
//   rope_kv_write          packed qkv -> rope(q) out, rope(k) and v into the caches
//   qk_norm_rope_kv_write  the same with a per-head RMS norm of q and k before the rope
//   mla_kv_write           MLA's compressed kv -> rms_norm(latent) and rope(key) into their
//                          two caches
//
// One warp handles one head of one token and holds it in registers; CTA (x, bt) takes
// heads [x * kHeadsPerCta, (x + 1) * kHeadsPerCta) of token bt (b * tokens + t). For the
// fused kinds the heads of a token are the q heads, then the k heads, then the v heads.
//
// Pairs: rotation pair i (i < kHeadDim / 2) is (x[i], x[i + kHeadDim / 2]) in the rotate-half
// form, or (x[2i], x[2i + 1]) with kInterleaved (DeepSeek's layout); a lane owns kVec
// consecutive pairs per step, so interleaved it reads 2 * kVec consecutive elements.
//
// Frequencies: inv_freq[i] (i < kHeadDim / 2) is computed once on the host by the same
// float32 function as the CPU reference (ir::RopeInvFreq: llama3 band rescaling and yarn's
// blend included) and passed as a device array; kernels form the angle p * inv_freq[i] in
// float32 and take sincosf of it (full range reduction, no fast-math intrinsics), then
// multiply cos and sin by attention_factor (yarn's attention scaling; 1 for the other
// types), as the reference does, so the device and the reference differ only by sincosf's
// rounding. Fused stages keep their intermediates (the normalized head) in float32; only
// stored results are rounded to T.
//
// Positions come from device memory (CUDA Graph replays see new ones). A position outside
// [0, capacity) is an error for the cache writes: with `error` non-null nothing is written
// to the caches for that token and *error is raised to at least bt + 1 (the host zeroes it
// before and reads it after); with `error` null the kernel traps.
//
// Layouts: token bt of an input starts at x + bt * x_stride (heads contiguous within it, so
// views of a packed qkv work; rope's heads at their own stride); q/rope outputs are
// contiguous [tokens, heads, kHeadDim];
// caches are [batch, kv_heads, capacity, kHeadDim].
// REQUIRES (all kernels): kHeadDim even and <= 256; (kHeadDim / 2) % kVec == 0; strides and
// pointers aligned to kVec elements (2 * kVec with kInterleaved).
#pragma once

#include "primitives.cuh"
#include "rope_kv_write_params.h"

namespace tileplan {

// The element index of the first and the second member of rotation pair i.
template <int kHeadDim, bool kInterleaved>
__device__ __forceinline__ int rope_first(int i) {
  return kInterleaved ? 2 * i : i;
}
template <int kHeadDim, bool kInterleaved>
__device__ __forceinline__ int rope_second(int i) {
  return kInterleaved ? 2 * i + 1 : kHeadDim / 2 + i;
}

// The members of pairs i .. i + kVec - 1 of the head at src: lo[e] the first of pair i + e,
// hi[e] the second.
template <typename T, int kHeadDim, int kVec, bool kInterleaved>
__device__ __forceinline__ void load_rope_pairs(const T* src, int i, float (&lo)[kVec],
                                                float (&hi)[kVec]) {
  if constexpr (kInterleaved) {
    float v[2 * kVec];
    load_floats<T, 2 * kVec>(src + 2 * i, v);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      lo[e] = v[2 * e];
      hi[e] = v[2 * e + 1];
    }
  } else {
    load_floats<T, kVec>(src + i, lo);
    load_floats<T, kVec>(src + kHeadDim / 2 + i, hi);
  }
}

// The inverse of load_rope_pairs: stores the pairs into the head at dst, rounded to T.
template <typename T, int kHeadDim, int kVec, bool kInterleaved>
__device__ __forceinline__ void store_rope_pairs(T* dst, int i, const float (&lo)[kVec],
                                                 const float (&hi)[kVec]) {
  if constexpr (kInterleaved) {
    float v[2 * kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      v[2 * e] = lo[e];
      v[2 * e + 1] = hi[e];
    }
    store_floats<T, 2 * kVec>(dst + 2 * i, v);
  } else {
    store_floats<T, kVec>(dst + i, lo);
    store_floats<T, kVec>(dst + kHeadDim / 2 + i, hi);
  }
}

// One warp rotates one head of src, kVec pairs per lane and step, and hands the rotated
// pairs to store(i, lo, hi): lo[e] and hi[e] are the first and second member of pair i + e
// (rope_first / rope_second give their element indices), for every i the lane owns. With
// kNorm the head is first RMS normalized over kHeadDim and scaled by `norm` (float32
// throughout). cos and sin are multiplied by attention_factor.
template <typename T, typename W, int kHeadDim, int kVec, bool kNorm, bool kInterleaved,
          typename Store>
__device__ __forceinline__ void rope_head_apply(const T* src, const float* __restrict__ inv_freq,
                                                int p, float attention_factor,
                                                const W* __restrict__ norm, float eps, int lane,
                                                Store store) {
  constexpr int kHalf = kHeadDim / 2;
  constexpr int kSteps = (kHalf + 32 * kVec - 1) / (32 * kVec);
  static_assert(kHeadDim % 2 == 0 && kHeadDim <= 256 && kHalf % kVec == 0, "head dim");
  float lo[kSteps][kVec], hi[kSteps][kVec];
  float ss = 0.f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = (s * 32 + lane) * kVec;
    if (i < kHalf) {
      load_rope_pairs<T, kHeadDim, kVec, kInterleaved>(src, i, lo[s], hi[s]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) ss += lo[s][e] * lo[s][e] + hi[s][e] * hi[s][e];
    }
  }
  float inv_rms = 1.f;
  if constexpr (kNorm) {
    ss = group_sum<32>(ss);
    inv_rms = rsqrtf(ss / static_cast<float>(kHeadDim) + eps);
  }
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = (s * 32 + lane) * kVec;
    if (i >= kHalf) continue;
    if constexpr (kNorm) {
      float wl[kVec], wh[kVec];
      load_rope_pairs<W, kHeadDim, kVec, kInterleaved>(norm, i, wl, wh);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        lo[s][e] *= inv_rms * wl[e];
        hi[s][e] *= inv_rms * wh[e];
      }
    }
    float out_lo[kVec], out_hi[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      float sn, cs;
      sincosf(static_cast<float>(p) * inv_freq[i + e], &sn, &cs);
      cs *= attention_factor;
      sn *= attention_factor;
      out_lo[e] = lo[s][e] * cs - hi[s][e] * sn;
      out_hi[e] = hi[s][e] * cs + lo[s][e] * sn;
    }
    store(i, out_lo, out_hi);
  }
}

// rope_head_apply storing the rotated head to dst (which may equal src) in T.
template <typename T, typename W, int kHeadDim, int kVec, bool kNorm, bool kInterleaved>
__device__ __forceinline__ void rope_head(const T* src, T* dst, const float* __restrict__ inv_freq,
                                          int p, float attention_factor, const W* __restrict__ norm,
                                          float eps, int lane) {
  rope_head_apply<T, W, kHeadDim, kVec, kNorm, kInterleaved>(
      src, inv_freq, p, attention_factor, norm, eps, lane,
      [dst](int i, const float(&lo)[kVec], const float(&hi)[kVec]) {
        store_rope_pairs<T, kHeadDim, kVec, kInterleaved>(dst, i, lo, hi);
      });
}

template <typename T, int kHeadDim, int kVec>
__device__ __forceinline__ void copy_head(const T* src, T* dst, int lane) {
  for (int c = lane * kVec; c < kHeadDim; c += 32 * kVec) copy_vec<T, kVec>(dst + c, src + c);
}

// Position p of token bt when it addresses a cache row; otherwise -1, after raising *error to
// at least bt + 1 when `report` (one thread per report), or trapping without an error word.
__device__ __forceinline__ int checked_cache_position(int p, int bt, int capacity, int* error,
                                                      bool report) {
  if (p >= 0 && p < capacity) return p;
  if (error == nullptr) __trap();
  if (report) atomicMax(error, bt + 1);
  return -1;
}

// The token's position when it addresses a cache row; otherwise reports it and returns -1.
__device__ __forceinline__ int cache_position(const int* __restrict__ positions, int bt,
                                              int capacity, int* error) {
  return checked_cache_position(positions[bt], bt, capacity, error, threadIdx.x == 0);
}

// x: [tokens, heads, kHeadDim], head h of token bt at x + bt * x_stride + h * x_head_stride
// -> out (contiguous; may alias x when x is contiguous). Launch: grid (ceil(heads /
// kHeadsPerCta), batch * tokens), block 32 * kHeadsPerCta.
template <typename T, int kHeadDim, int kHeadsPerCta, int kVec, bool kInterleaved>
__global__ void __launch_bounds__(32 * kHeadsPerCta)
    rope(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ROPE_PARAMS)) {
  grid_dependency_sync();
  const int h = blockIdx.x * kHeadsPerCta + threadIdx.x / 32;
  if (h >= heads) return;
  const long long bt = blockIdx.y;
  rope_head<T, T, kHeadDim, kVec, false, kInterleaved>(
      x + bt * x_stride + h * x_head_stride, out + (bt * heads + h) * kHeadDim, inv_freq,
      positions[bt], attention_factor, nullptr, 0.f, threadIdx.x % 32);
}

// cache[b, h, positions[bt], :] = x[bt, h, :] for bt = b * tokens + t.
// Launch: grid (ceil(heads / kHeadsPerCta), batch * tokens), block 32 * kHeadsPerCta.
template <typename T, int kHeadDim, int kHeadsPerCta, int kVec>
__global__ void __launch_bounds__(32 * kHeadsPerCta)
    kv_write(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_KV_WRITE_PARAMS)) {
  grid_dependency_sync();
  const int bt = blockIdx.y;
  const int p = cache_position(positions, bt, capacity, error);
  const int h = blockIdx.x * kHeadsPerCta + threadIdx.x / 32;
  if (p < 0 || h >= heads) return;
  const long long b = bt / tokens;
  copy_head<T, kHeadDim, kVec>(x + bt * x_stride + h * kHeadDim,
                               cache + ((b * heads + h) * capacity + p) * kHeadDim,
                               threadIdx.x % 32);
}

// Shared body of the fused kinds: head h of token blockIdx.y.
template <typename T, typename W, int kHeadDim, int kHeadsPerCta, int kVec, bool kNorm,
          bool kInterleaved>
__device__ __forceinline__ void rope_kv_write_head(const T* __restrict__ qkv, long long qkv_stride,
                                                   const W* q_norm, const W* k_norm, float eps,
                                                   const int* __restrict__ positions,
                                                   const float* __restrict__ inv_freq,
                                                   float attention_factor, T* __restrict__ q_out,
                                                   T* k_cache, T* v_cache, int tokens, int q_heads,
                                                   int kv_heads, int capacity, int* error) {
  const int bt = blockIdx.y;
  const int h = blockIdx.x * kHeadsPerCta + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int p = cache_position(positions, bt, capacity, error);
  if (h >= q_heads + 2 * kv_heads) return;
  const T* src = qkv + bt * qkv_stride + h * kHeadDim;
  if (h < q_heads) {
    // q is defined for any position; with an invalid one it is still rotated.
    rope_head<T, W, kHeadDim, kVec, kNorm, kInterleaved>(
        src, q_out + (static_cast<long long>(bt) * q_heads + h) * kHeadDim, inv_freq, positions[bt],
        attention_factor, q_norm, eps, lane);
    return;
  }
  if (p < 0) return;
  const long long b = bt / tokens;
  if (h < q_heads + kv_heads) {
    const int kh = h - q_heads;
    rope_head<T, W, kHeadDim, kVec, kNorm, kInterleaved>(
        src, k_cache + ((b * kv_heads + kh) * capacity + p) * kHeadDim, inv_freq, p,
        attention_factor, k_norm, eps, lane);
  } else {
    const int vh = h - q_heads - kv_heads;
    copy_head<T, kHeadDim, kVec>(src, v_cache + ((b * kv_heads + vh) * capacity + p) * kHeadDim,
                                 lane);
  }
}

// qkv: rows of (q_heads + 2 kv_heads) * kHeadDim at qkv + bt * qkv_stride holding the q, k
// and v heads in order. q_out = rope(q); the caches at each token's position receive
// rope(k) and v. Launch: grid (ceil((q_heads + 2 kv_heads) / kHeadsPerCta), batch * tokens),
// block 32 * kHeadsPerCta.
template <typename T, int kHeadDim, int kHeadsPerCta, int kVec, bool kInterleaved>
__global__ void __launch_bounds__(32 * kHeadsPerCta)
    rope_kv_write(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ROPE_KV_WRITE_PARAMS)) {
  grid_dependency_sync();
  rope_kv_write_head<T, T, kHeadDim, kHeadsPerCta, kVec, false, kInterleaved>(
      qkv, qkv_stride, nullptr, nullptr, 0.f, positions, inv_freq, attention_factor, q_out, k_cache,
      v_cache, tokens, q_heads, kv_heads, capacity, error);
}

// As rope_kv_write, with q and k heads RMS normalized over kHeadDim (weights q_norm,
// k_norm: [kHeadDim], epsilon eps) before the rope.
template <typename T, typename W, int kHeadDim, int kHeadsPerCta, int kVec, bool kInterleaved>
__global__ void __launch_bounds__(32 * kHeadsPerCta)
    qk_norm_rope_kv_write(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_QK_NORM_ROPE_KV_WRITE_PARAMS)) {
  grid_dependency_sync();
  rope_kv_write_head<T, W, kHeadDim, kHeadsPerCta, kVec, true, kInterleaved>(
      qkv, qkv_stride, q_norm, k_norm, eps, positions, inv_freq, attention_factor, q_out, k_cache,
      v_cache, tokens, q_heads, kv_heads, capacity, error);
}

// One part of mla_kv_write's work for the token whose row (the latent, kC elements, then the
// rope key, kDr) is at `row`, done by one warp: part 0 RMS normalizes the latent over kC
// (float32, weight norm: [kC]) into latent_dst, part 1 rotates the rope key as one head at
// position p into rope_dst. mla_attention's fused mla_kv_write_attention calls it too.
// REQUIRES: kC % kLatentVec == 0; the latent and key rows aligned to kLatentVec and the rope
// vector; kDr as rope's kHeadDim.
template <typename T, typename W, int kC, int kDr, int kLatentVec, int kVec, bool kInterleaved>
__device__ __forceinline__ void mla_kv_write_part(const T* row, const W* __restrict__ norm,
                                                  float eps, const float* __restrict__ inv_freq,
                                                  float attention_factor, int p, T* latent_dst,
                                                  T* rope_dst, int part, int lane) {
  if (part == 1) {
    rope_head<T, T, kDr, kVec, false, kInterleaved>(row + kC, rope_dst, inv_freq, p,
                                                    attention_factor, nullptr, 0.f, lane);
    return;
  }
  constexpr int kSteps = (kC + 32 * kLatentVec - 1) / (32 * kLatentVec);
  static_assert(kC % kLatentVec == 0, "latent vectors");
  float x[kSteps][kLatentVec];
  float ss = 0.f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int c = (s * 32 + lane) * kLatentVec;
    if (c < kC) {
      load_floats<T, kLatentVec>(row + c, x[s]);
#pragma unroll
      for (int e = 0; e < kLatentVec; ++e) ss += x[s][e] * x[s][e];
    }
  }
  ss = group_sum<32>(ss);
  const float inv_rms = rsqrtf(ss / static_cast<float>(kC) + eps);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int c = (s * 32 + lane) * kLatentVec;
    if (c >= kC) continue;
    float w[kLatentVec];
    load_floats<W, kLatentVec>(norm + c, w);
#pragma unroll
    for (int e = 0; e < kLatentVec; ++e) x[s][e] *= inv_rms * w[e];
    store_floats<T, kLatentVec>(latent_dst + c, x[s]);
  }
}

// kv_a: token bt's row at kv_a + bt * kv_a_stride, the latent (kC elements) then the rope key
// (kDr). Two warps per token (mla_kv_write_part): warp 0 RMS normalizes the latent into
// latent_cache[b, 0, p, :], warp 1 rotates the rope key into rope_cache[b, 0, p, :], p =
// positions[bt] (an invalid one writes nothing and is reported as for kv_write). CTA (x, bt)
// takes warps [x * kHeadsPerCta, (x + 1) * kHeadsPerCta) of the two. Launch: grid (ceil(2 /
// kHeadsPerCta), batch * tokens), block 32 * kHeadsPerCta.
// REQUIRES: as mla_kv_write_part.
template <typename T, typename W, int kC, int kDr, int kHeadsPerCta, int kLatentVec, int kVec,
          bool kInterleaved>
__global__ void __launch_bounds__(32 * kHeadsPerCta)
    mla_kv_write(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MLA_KV_WRITE_PARAMS)) {
  grid_dependency_sync();
  const int bt = blockIdx.y;
  const int part = blockIdx.x * kHeadsPerCta + threadIdx.x / 32;
  const int p = checked_cache_position(positions[bt], bt, capacity, error,
                                       threadIdx.x == 0 && blockIdx.x == 0);
  if (p < 0 || part >= 2) return;
  const long long b = bt / tokens;
  mla_kv_write_part<T, W, kC, kDr, kLatentVec, kVec, kInterleaved>(
      kv_a + bt * kv_a_stride, norm, eps, inv_freq, attention_factor, p,
      latent_cache + (b * capacity + p) * kC, rope_cache + (b * capacity + p) * kDr, part,
      threadIdx.x % 32);
}

}  // namespace tileplan
