// Prefill attention in the flash-attention form: causal (by positions), grouped-query,
// optional sliding window, tensor cores through mma.sync.m16n8k16 (bf16 or f16, sm_80+), an
// online softmax in float32, and a kStages-deep cp.async pipeline of K/V tiles:
//   out[b, t, h, :] = softmax_j(scale * q . k_j) v_j over cache rows j of kv head
//   h / (q_heads / kv_heads) with max(0, p - window + 1) <= j <= p, p = positions[b, t]
// The keys of the new tokens must already be in the cache (kv_write runs first).
//
// CTA (m, h, b) owns query rows t in [m * kTileQ, (m + 1) * kTileQ); its kWarps warps take
// kTileQ / (16 * kWarps) row tiles of 16 each and keep the scores S = Q K^T (16 x kTileKv)
// and the output O (16 x kHeadDim) of each in registers. The CTA walks the union of its rows'
// key ranges, [min first, max p], kTileKv keys at a time. Q and the K/V tiles live in shared
// memory (Q loaded once); fragments come from ldmatrix (V transposed); masked scores become
// -inf; the row max and sum update in the log2 domain; P is rounded to T in registers (the
// accumulator layout of S is the A-operand layout of P V). Shared-memory rows are stored
// with their 16-byte chunks XOR-swizzled by the row index, which keeps ldmatrix and cp.async
// free of bank conflicts without padding.
//
// kPackGqa: CTA (m, kvh, b) instead owns rows [m * kTileQ, (m + 1) * kTileQ) of the
// tokens * group rows (t, g) -> query head kvh * group + g of token t (group = q_heads /
// kv_heads) that read kv head kvh, so each K/V tile serves the whole group: decode steps with
// large GQA groups (Qwen2-7B: 7 query heads per kv head) fill the 16-row MMA tiles with the
// group's heads instead of one token's single row.
#pragma once

#include "primitives.cuh"

namespace tileplan {

// XOR mask of the 16-byte chunk swizzle for rows of `chunks` chunks: the largest of 7, 3, 1
// that keeps a chunk inside its row.
__host__ __device__ constexpr int flash_swizzle_mask(int chunks) {
  return chunks % 8 == 0 ? 7 : chunks % 4 == 0 ? 3 : chunks % 2 == 0 ? 1 : 0;
}

// Dynamic shared memory of attention_prefill_flash, in bytes.
__host__ __device__ constexpr int flash_prefill_smem_bytes(int head_dim, int tile_q, int tile_kv,
                                                           int stages, int element_bytes) {
  return (tile_q + 2 * stages * tile_kv) * head_dim * element_bytes;
}

// q: token bt's heads at q + bt * q_stride (bt = b * tokens + t, heads contiguous);
// out: contiguous [batch * tokens, q_heads, kHeadDim]; caches: [batch, kv_heads, capacity,
// kHeadDim]; positions: [batch * tokens]. Rows whose position lies outside [0, capacity)
// get zeros.
//
// Launch: grid (ceil(tokens / kTileQ), q_heads, batch), or with kPackGqa
// (ceil(tokens * group / kTileQ), kv_heads, batch); block 32 * kWarps, dynamic shared
// memory flash_prefill_smem_bytes(kHeadDim, kTileQ, kTileKv, kStages, sizeof(T)) (above
// 48 KiB the launcher raises the kernel's limit).
// REQUIRES: T is bf16 or f16; q_heads % kv_heads == 0; q_stride % 8 == 0; pointers aligned
// to 16 bytes.
template <typename T, int kHeadDim, int kTileQ, int kTileKv, int kStages, int kWarps,
          bool kPackGqa>
__global__ void __launch_bounds__(kWarps * 32)
    attention_prefill_flash(const T* __restrict__ q, long long q_stride,
                            const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                            const int* __restrict__ positions, T* __restrict__ out, int tokens,
                            int q_heads, int kv_heads, int capacity, float scale, int window) {
  grid_dependency_sync();
  constexpr int kThreads = kWarps * 32;
  constexpr int kMTiles = kTileQ / (16 * kWarps);  // 16-row tiles per warp
  constexpr int kKSteps = kHeadDim / 16;           // k-steps of Q K^T
  constexpr int kNTiles = kTileKv / 8;             // n-tiles of S
  constexpr int kDTiles = kHeadDim / 8;            // n-tiles of O
  constexpr int kPSteps = kTileKv / 16;            // k-steps of P V
  constexpr int kChunks = kHeadDim / 8;            // 16-byte chunks per row
  constexpr int kMask = flash_swizzle_mask(kChunks);
  static_assert(kHeadDim % 16 == 0 && kTileKv % 16 == 0, "mma tile multiples");
  static_assert(kMTiles >= 1 && kTileQ % (16 * kWarps) == 0, "16 * kWarps divides kTileQ");
  static_assert(kStages >= 1 && kStages <= 4, "stages");

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* q_s = reinterpret_cast<T*>(smem_bytes);  // [kTileQ][kHeadDim]
  T* kv_s = q_s + kTileQ * kHeadDim;          // [kStages][2][kTileKv][kHeadDim]
  __shared__ int s_range[2];
  // Element (row, col) of a swizzled [rows][kHeadDim] tile.
  auto at = [](T* tile, int row, int col) {
    return tile + row * kHeadDim + ((((col >> 3) ^ (row & kMask)) << 3) | (col & 7));
  };

  const int group = q_heads / kv_heads;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const int kvh = kPackGqa ? blockIdx.y : blockIdx.y / group;
  // Query rows: tokens, or (token, group member) pairs with kPackGqa.
  const int rows = kPackGqa ? tokens * group : tokens;
  // Row r's token and query head.
  auto row_token = [&](int r) { return kPackGqa ? r / group : r; };
  auto row_head = [&](int r) {
    return kPackGqa ? kvh * group + r % group : static_cast<int>(blockIdx.y);
  };
  const long long kv_base = (static_cast<long long>(b) * kv_heads + kvh) * capacity * kHeadDim;
  const int cta_row0 = blockIdx.x * kTileQ;
  const int warp_row0 = warp * kMTiles * 16;  // within the CTA tile

  // The position of query row r, or -1 when there is no such row or it is out of range.
  auto row_position = [&](int r) {
    if (r >= rows) return -1;
    const int p = positions[static_cast<long long>(b) * tokens + row_token(r)];
    return p < 0 || p >= capacity ? -1 : p;
  };
  if (threadIdx.x == 0) {
    s_range[0] = 0x7fffffff;
    s_range[1] = -1;
  }
  __syncthreads();
  for (int r = threadIdx.x; r < kTileQ; r += kThreads) {
    const int p = row_position(cta_row0 + r);
    if (p >= 0) {
      atomicMin(&s_range[0], window > 0 ? max(0, p - window + 1) : 0);
      atomicMax(&s_range[1], p);
    }
  }
  __syncthreads();
  const int kv_begin = s_range[0];
  const int kv_end = s_range[1] + 1;
  const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kTileKv - 1) / kTileKv : 0;

  // Rows g and g + 8 of each of this warp's row tiles.
  int p_row[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    p_row[mt][0] = row_position(cta_row0 + warp_row0 + mt * 16 + g);
    p_row[mt][1] = row_position(cta_row0 + warp_row0 + mt * 16 + g + 8);
  }

  // Q tile (rows past `rows` zero-filled).
  for (int c = threadIdx.x; c < kTileQ * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int row = cta_row0 + r;
    const bool ok = row < rows;
    const int t = ok ? row_token(row) : 0;
    const T* src = q + (static_cast<long long>(b) * tokens + t) * q_stride +
                   (ok ? row_head(row) : 0) * kHeadDim + col;
    cp_async_16(at(q_s, r, col), src, ok);
  }
  // Stages keys [j0, j0 + kTileKv) of K and V; rows at or past kv_end are zero-filled.
  auto load_tile = [&](int stage, int tile) {
    T* kt = kv_s + stage * 2 * kTileKv * kHeadDim;
    T* vt = kt + kTileKv * kHeadDim;
    const int j0 = kv_begin + tile * kTileKv;
    for (int c = threadIdx.x; c < kTileKv * kChunks; c += kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int j = j0 + r;
      const bool ok = j < kv_end;
      const long long src = kv_base + static_cast<long long>(ok ? j : kv_begin) * kHeadDim + col;
      cp_async_16(at(kt, r, col), k_cache + src, ok);
      cp_async_16(at(vt, r, col), v_cache + src, ok);
    }
  };
  if constexpr (kStages == 1) {
    cp_async_commit();  // Q alone
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_tiles) load_tile(s, s);
      cp_async_commit();  // the first group carries Q too
    }
  }

  float o[kMTiles][kDTiles][4];
  float m_row[kMTiles][2], l_row[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    }
    m_row[mt][0] = m_row[mt][1] = neg_inf();
    l_row[mt][0] = l_row[mt][1] = 0.f;
  }
  const float log2e_scale = scale * 1.4426950408889634f;

  for (int it = 0; it < n_tiles; ++it) {
    if constexpr (kStages == 1) {
      load_tile(0, it);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    } else {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      // The stage refilled here was consumed in the previous iteration; the barrier above
      // ordered that.
      const int next = it + kStages - 1;
      if (next < n_tiles) load_tile(next % kStages, next);
      cp_async_commit();
    }
    T* kt = kv_s + (kStages == 1 ? 0 : it % kStages) * 2 * kTileKv * kHeadDim;
    T* vt = kt + kTileKv * kHeadDim;
    const int j0 = kv_begin + it * kTileKv;

    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      unsigned int a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const int row = warp_row0 + mt * 16 + ((lane / 8) % 2) * 8 + lane % 8;
        ldmatrix_x4(a[mt], at(q_s, row, ks * 16 + (lane / 16) * 8));
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        unsigned int kb[2];
        ldmatrix_x2(kb, at(kt, nt * 8 + lane % 8, ks * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) mma_m16n8k16<T>(s[mt][nt], a[mt], kb[0], kb[1]);
      }
    }

#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      // Mask, scale and the running max of rows g (half 0) and g + 8 (half 1).
      float mx[2] = {m_row[mt][0], m_row[mt][1]};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int half = e / 2;
          const int j = j0 + nt * 8 + 2 * qd + (e % 2);
          const int p = p_row[mt][half];
          const bool visible = p >= 0 && j <= p && (window <= 0 || j > p - window);
          s[mt][nt][e] = visible ? s[mt][nt][e] * log2e_scale : neg_inf();
          mx[half] = fmaxf(mx[half], s[mt][nt][e]);
        }
      }
      float base[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        mx[half] = group_max<4>(mx[half]);
        // With every score so far masked the base is 0, so exp2 of -inf entries stays 0.
        base[half] = mx[half] == neg_inf() ? 0.f : mx[half];
        const float corr = exp2f(m_row[mt][half] - base[half]);
        m_row[mt][half] = mx[half];
        l_row[mt][half] *= corr;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          o[mt][dt][2 * half] *= corr;
          o[mt][dt][2 * half + 1] *= corr;
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][nt][e] = exp2f(s[mt][nt][e] - base[e / 2]);
          l_row[mt][e / 2] += s[mt][nt][e];
        }
      }
    }

#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      unsigned int pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        unsigned int vb[2];
        ldmatrix_x2_trans(vb, at(vt, kk * 16 + lane % 16, dt * 8));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) mma_m16n8k16<T>(o[mt][dt], pa[mt], vb[0], vb[1]);
      }
    }
    if constexpr (kStages == 1) __syncthreads();  // before the next load refills the stage
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = group_sum<4>(l_row[mt][half]);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = cta_row0 + warp_row0 + mt * 16 + g + 8 * half;
      if (row >= rows) continue;
      T* dst = out + ((static_cast<long long>(b) * tokens + row_token(row)) * q_heads +
                      row_head(row)) *
                         kHeadDim;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        *reinterpret_cast<unsigned int*>(dst + dt * 8 + 2 * qd) =
            pack2<T>(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
      }
    }
  }
}

}  // namespace tileplan
