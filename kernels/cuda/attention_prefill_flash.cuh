// Prefill attention in the flash-attention form: causal (by positions), grouped-query,
// optional sliding window, bf16 tensor cores through mma.sync.m16n8k16 (sm_80+), an online
// softmax in float32, and K/V tiles staged in shared memory with cp.async.
//   out[b, t, h, :] = softmax_j(scale * q . k_j) v_j over cache rows j of kv head
//   h / (q_heads / kv_heads) with max(0, p - window + 1) <= j <= p, p = positions[b, t]
// The keys of the new tokens must already be in the cache (kv_write runs first).
//
// CTA (m, h, b) owns query rows t in [m * kBlockM, (m + 1) * kBlockM), kBlockM = 16 * kWarps;
// warp w owns 16 of them and keeps its Q fragments, scores S = Q K^T (16 x kBlockN) and
// output O (16 x kHeadDim) in registers. The CTA walks the union of its rows' key ranges,
// [min first, max p], kBlockN keys at a time: K and V tiles land in shared memory
// (kStages = 2: the next tile loads while this one computes), S comes from mma with K read
// as 32-bit pairs, masked entries become -inf, the row max / sum update in the log2
// domain, P is rounded to bf16 in registers (the accumulator layout of S is the A-operand
// layout of P V), and V is read transposed with ldmatrix.trans. Rows of K/V tiles are
// padded by 16 bytes so both access patterns are free of bank conflicts.
#pragma once

#include "primitives.cuh"

namespace tileplan {

// Dynamic shared memory (bytes) of attention_prefill_flash for these parameters.
template <int kHeadDim, int kBlockN, int kStages>
struct FlashPrefillSmem {
  static constexpr int kStride = kHeadDim + 8;  // elements per padded K/V row
  static constexpr int kTile = kBlockN * kStride;
  static constexpr int kBytes = kStages * 2 * kTile * 2;
};

__device__ __forceinline__ unsigned int load_u32(const bf16* p) {
  return *reinterpret_cast<const unsigned int*>(p);
}

// q, out: [batch * tokens, q_heads, kHeadDim] bf16; caches: [batch, kv_heads, capacity,
// kHeadDim] bf16; positions: [batch * tokens]. Rows whose position lies outside
// [0, capacity) get zeros.
//
// Launch: grid (ceil(tokens / (16 * kWarps)), q_heads, batch), block kWarps * 32, dynamic
// shared memory FlashPrefillSmem<kHeadDim, kBlockN, kStages>::kBytes (above 48 KiB the
// launcher raises the kernel's limit). REQUIRES: q_heads % kv_heads == 0; pointers
// 16-byte aligned.
template <int kHeadDim, int kWarps, int kBlockN, int kStages>
__global__ void __launch_bounds__(kWarps * 32) attention_prefill_flash(
    const bf16* __restrict__ q, const bf16* __restrict__ k_cache,
    const bf16* __restrict__ v_cache, const int* __restrict__ positions, bf16* __restrict__ out,
    int tokens, int q_heads, int kv_heads, int capacity, float scale, int window) {
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0, "mma tile multiples");
  static_assert(kStages == 1 || kStages == 2, "stages");
  constexpr int kThreads = kWarps * 32;
  constexpr int kBlockM = 16 * kWarps;
  constexpr int kStride = FlashPrefillSmem<kHeadDim, kBlockN, kStages>::kStride;
  constexpr int kTile = FlashPrefillSmem<kHeadDim, kBlockN, kStages>::kTile;
  constexpr int kKSteps = kHeadDim / 16;  // k-steps of Q K^T
  constexpr int kNTiles = kBlockN / 8;    // n-tiles of S
  constexpr int kDTiles = kHeadDim / 8;   // n-tiles of O
  constexpr int kPSteps = kBlockN / 16;   // k-steps of P V
  constexpr int kRowChunks = kHeadDim / 8;

  extern __shared__ __align__(16) unsigned char smem[];
  bf16* k_s = reinterpret_cast<bf16*>(smem);  // [kStages][kBlockN][kStride]
  bf16* v_s = k_s + kStages * kTile;
  __shared__ int s_range[2];

  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const int kvh = h / (q_heads / kv_heads);
  const long long kv_base = (static_cast<long long>(b) * kv_heads + kvh) * capacity * kHeadDim;
  const int cta_row0 = blockIdx.x * kBlockM;
  const int row0 = cta_row0 + warp * 16;

  // The position of query row t, or -1 when there is no such row or it is out of range.
  auto row_position = [&](int t) {
    if (t >= tokens) return -1;
    const int p = positions[static_cast<long long>(b) * tokens + t];
    return p < 0 || p >= capacity ? -1 : p;
  };
  const int p_lo = row_position(row0 + g);
  const int p_hi = row_position(row0 + g + 8);

  if (threadIdx.x == 0) {
    s_range[0] = 0x7fffffff;
    s_range[1] = -1;
  }
  __syncthreads();
  if (threadIdx.x < kBlockM) {
    const int p = row_position(cta_row0 + threadIdx.x);
    if (p >= 0) {
      atomicMin(&s_range[0], window > 0 ? max(0, p - window + 1) : 0);
      atomicMax(&s_range[1], p);
    }
  }
  __syncthreads();
  const int kv_begin = s_range[0];
  const int kv_end = s_range[1] + 1;
  const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kBlockN - 1) / kBlockN : 0;

  // Q as A fragments (rows g and g + 8 of the warp's 16, all of kHeadDim).
  unsigned int qa[kKSteps][4];
  {
    const bool lo = row0 + g < tokens, hi = row0 + g + 8 < tokens;
    const bf16* q_lo = q + ((static_cast<long long>(b) * tokens + row0 + g) * q_heads + h) * kHeadDim;
    const bf16* q_hi = q_lo + 8LL * q_heads * kHeadDim;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const int c = ks * 16 + 2 * qd;
      qa[ks][0] = lo ? load_u32(q_lo + c) : 0u;
      qa[ks][1] = hi ? load_u32(q_hi + c) : 0u;
      qa[ks][2] = lo ? load_u32(q_lo + c + 8) : 0u;
      qa[ks][3] = hi ? load_u32(q_hi + c + 8) : 0u;
    }
  }

  // Stages keys [j0, j0 + kBlockN) of K and V; rows at or past kv_end are zero-filled.
  auto load_tile = [&](int stage, int j0) {
    bf16* kt = k_s + stage * kTile;
    bf16* vt = v_s + stage * kTile;
    for (int c = threadIdx.x; c < kBlockN * kRowChunks; c += kThreads) {
      const int r = c / kRowChunks;
      const int col = (c % kRowChunks) * 8;
      const int j = j0 + r;
      const bool ok = j < kv_end;
      const long long src = kv_base + static_cast<long long>(ok ? j : kv_begin) * kHeadDim + col;
      cp_async_16(kt + r * kStride + col, k_cache + src, ok);
      cp_async_16(vt + r * kStride + col, v_cache + src, ok);
    }
    cp_async_commit();
  };

  float o[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
  }
  float m_lo = neg_inf(), m_hi = neg_inf(), l_lo = 0.f, l_hi = 0.f;
  const float log2e_scale = scale * 1.4426950408889634f;
  auto visible = [&](int j, int p) {
    return p >= 0 && j <= p && (window <= 0 || j > p - window);
  };

  if (n_tiles > 0) load_tile(0, kv_begin);
  for (int it = 0; it < n_tiles; ++it) {
    const int stage = kStages == 1 ? 0 : it % 2;
    if constexpr (kStages == 2) {
      if (it + 1 < n_tiles) {
        load_tile((it + 1) % 2, kv_begin + (it + 1) * kBlockN);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* kt = k_s + stage * kTile;
    const bf16* vt = v_s + stage * kTile;
    const int j0 = kv_begin + it * kBlockN;

    float s[kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
    }
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const bf16* kr = kt + (nt * 8 + g) * kStride + ks * 16 + 2 * qd;
        mma_m16n8k16_bf16(s[nt], qa[ks], load_u32(kr), load_u32(kr + 8));
      }
    }

    float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + nt * 8 + 2 * qd + e;
        s[nt][e] = visible(j, p_lo) ? s[nt][e] * log2e_scale : neg_inf();
        s[nt][2 + e] = visible(j, p_hi) ? s[nt][2 + e] * log2e_scale : neg_inf();
        mx_lo = fmaxf(mx_lo, s[nt][e]);
        mx_hi = fmaxf(mx_hi, s[nt][2 + e]);
      }
    }
    mx_lo = group_max<4>(mx_lo);
    mx_hi = group_max<4>(mx_hi);
    // With every score so far masked the base is 0, so exp2 of -inf entries stays 0.
    const float base_lo = mx_lo == neg_inf() ? 0.f : mx_lo;
    const float base_hi = mx_hi == neg_inf() ? 0.f : mx_hi;
    const float corr_lo = exp2f(m_lo - base_lo), corr_hi = exp2f(m_hi - base_hi);
    m_lo = mx_lo;
    m_hi = mx_hi;
    l_lo *= corr_lo;
    l_hi *= corr_hi;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      o[dt][0] *= corr_lo;
      o[dt][1] *= corr_lo;
      o[dt][2] *= corr_hi;
      o[dt][3] *= corr_hi;
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - base_lo);
      s[nt][1] = exp2f(s[nt][1] - base_lo);
      s[nt][2] = exp2f(s[nt][2] - base_hi);
      s[nt][3] = exp2f(s[nt][3] - base_hi);
      l_lo += s[nt][0] + s[nt][1];
      l_hi += s[nt][2] + s[nt][3];
    }

#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      const unsigned int pa[4] = {
          pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
          pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
          pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        unsigned int vb[2];
        ldmatrix_x2_trans(vb, vt + (kk * 16 + lane % 16) * kStride + dt * 8);
        mma_m16n8k16_bf16(o[dt], pa, vb[0], vb[1]);
      }
    }
    __syncthreads();
    if constexpr (kStages == 1) {
      if (it + 1 < n_tiles) load_tile(0, kv_begin + (it + 1) * kBlockN);
    }
  }

  l_lo = group_sum<4>(l_lo);
  l_hi = group_sum<4>(l_hi);
  const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f;
  const float inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
  bf16* out_lo = out + ((static_cast<long long>(b) * tokens + row0 + g) * q_heads + h) * kHeadDim;
  bf16* out_hi = out_lo + 8LL * q_heads * kHeadDim;
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
    const int c = dt * 8 + 2 * qd;
    if (row0 + g < tokens) {
      *reinterpret_cast<unsigned int*>(out_lo + c) =
          pack_bf16x2(o[dt][0] * inv_lo, o[dt][1] * inv_lo);
    }
    if (row0 + g + 8 < tokens) {
      *reinterpret_cast<unsigned int*>(out_hi + c) =
          pack_bf16x2(o[dt][2] * inv_hi, o[dt][3] * inv_hi);
    }
  }
}

}  // namespace tileplan
