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
// kSplits > 1 (split-KV): the key tiles of a row tile are divided into kSplits equal runs,
// one CTA each; every CTA writes its rows' unnormalized output with their running max and
// sum (log2 domain) to the workspace, and the last CTA of the row tile to finish (an atomic
// counter, re-armed to zero) merges the runs with log-sum-exp weights and writes the output.
// Short grids (decode steps, few heads) thus fill the GPU, and long causal row tiles no
// longer set the critical path alone.
//
// kPackGqa: CTA (m, kvh, b) instead owns rows [m * kTileQ, (m + 1) * kTileQ) of the
// tokens * group rows (t, g) -> query head kvh * group + g of token t (group = q_heads /
// kv_heads) that read kv head kvh, so each K/V tile serves the whole group: decode steps with
// large GQA groups (Qwen2-7B: 7 query heads per kv head) fill the 16-row MMA tiles with the
// group's heads instead of one token's single row.
#pragma once

#include "attention_params.h"
#include "primitives.cuh"

namespace tileplan {

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
// workspace (kSplits > 1, else null): row tiles * kSplits * kTileQ * (kHeadDim + 4) floats,
// row tiles = the grid's CTAs / kSplits; counters (kSplits > 1, else null): one unsigned per
// row tile, zero before the first launch and left zero by every launch.
//
// Launch: grid (ceil(tokens / kTileQ) * kSplits, q_heads, batch), or with kPackGqa
// (ceil(tokens * group / kTileQ) * kSplits, kv_heads, batch) (CTA x is row tile x / kSplits,
// run x % kSplits); block 32 * kWarps, dynamic shared memory
// flash_prefill_smem_bytes(kHeadDim, kTileQ, kTileKv, kStages, sizeof(T)) (above 48 KiB the
// launcher raises the kernel's limit).
// REQUIRES: T is bf16 or f16; q_heads % kv_heads == 0; q_stride % 8 == 0; pointers aligned
// to 16 bytes.
template <typename T, int kHeadDim, int kTileQ, int kTileKv, int kStages, int kWarps, bool kPackGqa,
          int kSplits>
__global__ void __launch_bounds__(kWarps * 32)
    attention_prefill_flash(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ATTENTION_PARAMS)) {
  grid_dependency_sync();
  constexpr int kThreads = kWarps * 32;
  constexpr int kMTiles = kTileQ / (16 * kWarps);  // 16-row tiles per warp
  constexpr int kKSteps = kHeadDim / 16;           // k-steps of Q K^T
  constexpr int kNTiles = kTileKv / 8;             // n-tiles of S
  constexpr int kDTiles = kHeadDim / 8;            // n-tiles of O
  constexpr int kPSteps = kTileKv / 16;            // k-steps of P V
  constexpr int kChunks = kHeadDim / 8;            // 16-byte chunks per row
  constexpr int kMask = chunk_swizzle_mask(kChunks);
  static_assert(kHeadDim % 16 == 0 && kTileKv % 16 == 0, "mma tile multiples");
  static_assert(kMTiles >= 1 && kTileQ % (16 * kWarps) == 0, "16 * kWarps divides kTileQ");
  static_assert(kStages >= 1 && kStages <= 4, "stages");
  static_assert(kSplits >= 1, "splits");
  // Q's A fragments stay in registers for the whole walk when they fit beside the S and O
  // tiles (one 16-row tile per warp); otherwise they are re-read from shared memory per tile.
  constexpr bool kQInRegisters = kMTiles == 1 && kKSteps * 4 + kDTiles * 4 + kNTiles * 4 <= 160;

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* q_s = reinterpret_cast<T*>(smem_bytes);  // [kTileQ][kHeadDim]
  T* kv_s = q_s + kTileQ * kHeadDim;          // [kStages][2][kTileKv][kHeadDim]
  __shared__ int s_range[2];
  // Element (row, col) of a swizzled [rows][kHeadDim] tile.
  auto at = [](T* tile, int row, int col) { return swizzled<kHeadDim, kMask>(tile, row, col); };

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
  const int row_tile = blockIdx.x / kSplits;
  const int split = blockIdx.x % kSplits;
  const int cta_row0 = row_tile * kTileQ;
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
  const int all_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kTileKv - 1) / kTileKv : 0;
  // This CTA's run of key tiles: [tile0, tile0 + n_tiles).
  const int per_split = (all_tiles + kSplits - 1) / kSplits;
  const int tile0 = min(all_tiles, split * per_split);
  const int n_tiles = min(all_tiles, tile0 + per_split) - tile0;

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
  // Stages keys [j0, j0 + kTileKv) of K and V (tile counts from this CTA's first); rows at
  // or past kv_end are zero-filled.
  auto load_tile = [&](int stage, int tile) {
    T* kt = kv_s + stage * 2 * kTileKv * kHeadDim;
    T* vt = kt + kTileKv * kHeadDim;
    const int j0 = kv_begin + (tile0 + tile) * kTileKv;
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
  // The last key every row of this warp sees and the first key all of them see without the
  // window: a tile inside both needs no mask (warp-uniform, so the branch does not diverge).
  int all_see_to = 0x7fffffff, all_see_from = -1;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int p = p_row[mt][half];
      all_see_to = min(all_see_to, p);  // -1 (no row): every tile needs the mask
      all_see_from = max(all_see_from, window > 0 ? p - window + 1 : 0);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    all_see_to = min(all_see_to, __shfl_xor_sync(0xffffffffu, all_see_to, o));
    all_see_from = max(all_see_from, __shfl_xor_sync(0xffffffffu, all_see_from, o));
  }
  // Q's fragments when they stay in registers: read in the first iteration, after the wait
  // that covers the cp.async group carrying Q.
  [[maybe_unused]] unsigned int qa[kQInRegisters ? kKSteps : 1][4];

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
    const int j0 = kv_begin + (tile0 + it) * kTileKv;
    if constexpr (kQInRegisters) {
      if (it == 0) {
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          const int row = warp_row0 + ((lane / 8) % 2) * 8 + lane % 8;
          ldmatrix_x4(qa[ks], at(q_s, row, ks * 16 + (lane / 16) * 8));
        }
      }
    }

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
        if constexpr (kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = qa[ks][e];
        } else {
          const int row = warp_row0 + mt * 16 + ((lane / 8) % 2) * 8 + lane % 8;
          ldmatrix_x4(a[mt], at(q_s, row, ks * 16 + (lane / 16) * 8));
        }
      }
      // Two n-tiles of K per ldmatrix: lanes 0-15 address tile nt, lanes 16-31 tile nt + 1.
#pragma unroll
      for (int nt = 0; nt < kNTiles; nt += 2) {
        unsigned int kb[4];
        ldmatrix_x4(kb, at(kt, (nt + lane / 16) * 8 + lane % 8, ks * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<T>(s[mt][nt], a[mt], kb[0], kb[1]);
          mma_m16n8k16<T>(s[mt][nt + 1], a[mt], kb[2], kb[3]);
        }
      }
    }

    const bool unmasked = j0 + kTileKv - 1 <= all_see_to && j0 >= all_see_from;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      // Mask, scale and the running max of rows g (half 0) and g + 8 (half 1).
      float mx[2] = {m_row[mt][0], m_row[mt][1]};
      if (unmasked) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mt][nt][e] *= log2e_scale;
            mx[e / 2] = fmaxf(mx[e / 2], s[mt][nt][e]);
          }
        }
      } else {
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
      // Two d-tiles of V per ldmatrix: lanes 0-15 address tile dt, lanes 16-31 tile dt + 1.
#pragma unroll
      for (int dt = 0; dt < kDTiles; dt += 2) {
        unsigned int vb[4];
        ldmatrix_x4_trans(vb, at(vt, kk * 16 + lane % 16, (dt + lane / 16) * 8));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<T>(o[mt][dt], pa[mt], vb[0], vb[1]);
          mma_m16n8k16<T>(o[mt][dt + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    if constexpr (kStages == 1) __syncthreads();  // before the next load refills the stage
  }
  cp_async_wait<0>();

  // Row r of the output: (token, query head) -> its kHeadDim elements.
  auto out_row = [&](int row) {
    return out + ((static_cast<long long>(b) * tokens + row_token(row)) * q_heads + row_head(row)) *
                     kHeadDim;
  };
  if constexpr (kSplits == 1) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float l = group_sum<4>(l_row[mt][half]);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int row = cta_row0 + warp_row0 + mt * 16 + g + 8 * half;
        if (row >= rows) continue;
        T* dst = out_row(row);
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          *reinterpret_cast<unsigned int*>(dst + dt * 8 + 2 * qd) =
              pack2<T>(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
        }
      }
    }
  } else {
    // This run's rows as (o[kHeadDim], m, l, 2 floats of padding) records, 16-byte aligned,
    // then the merge by the last run.
    constexpr int kRecord = kHeadDim + 4;
    const long long tile_index =
        (static_cast<long long>(b) * gridDim.y + blockIdx.y) * (gridDim.x / kSplits) + row_tile;
    float* tile_ws = workspace + tile_index * kSplits * kTileQ * kRecord;
    float* run_ws = tile_ws + static_cast<long long>(split) * kTileQ * kRecord;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float l = group_sum<4>(l_row[mt][half]);
        const int r = warp_row0 + mt * 16 + g + 8 * half;
        float* rec = run_ws + r * kRecord;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          *reinterpret_cast<float2*>(rec + dt * 8 + 2 * qd) =
              make_float2(o[mt][dt][2 * half], o[mt][dt][2 * half + 1]);
        }
        if (qd == 0) *reinterpret_cast<float2*>(rec + kHeadDim) = make_float2(m_row[mt][half], l);
      }
    }
    if (!last_to_arrive(&counters[tile_index], kSplits)) return;
    // Items of four output elements (r, d..d + 3). Every load of a batch of items over all
    // runs is issued before any of them is used, so a thread waits about once per batch for
    // L2 rather than once per item and run.
    constexpr int kQuads = kHeadDim / 4;
    constexpr int kItems = kTileQ * kQuads;
    constexpr int kBatch = kSplits >= 16 ? 1 : 16 / kSplits;
    for (int i0 = threadIdx.x; i0 < kItems; i0 += kThreads * kBatch) {
      float4 acc_in[kBatch][kSplits];
      float2 ml_in[kBatch][kSplits];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = min(i0 + u * kThreads, kItems - 1);
        const int r = i / kQuads, d = (i % kQuads) * 4;
#pragma unroll
        for (int sp = 0; sp < kSplits; ++sp) {
          const float* rec = tile_ws + (static_cast<long long>(sp) * kTileQ + r) * kRecord;
          ml_in[u][sp] = load_cg(reinterpret_cast<const float2*>(rec + kHeadDim));
          acc_in[u][sp] = load_cg(reinterpret_cast<const float4*>(rec + d));
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kThreads;
        const int r = i / kQuads, d = (i % kQuads) * 4;
        if (i >= kItems || cta_row0 + r >= rows) continue;
        float mx = neg_inf();
#pragma unroll
        for (int sp = 0; sp < kSplits; ++sp) mx = fmaxf(mx, ml_in[u][sp].x);
        float sum = 0.f, a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        if (mx != neg_inf()) {
#pragma unroll
          for (int sp = 0; sp < kSplits; ++sp) {
            const float w = exp2f(ml_in[u][sp].x - mx);  // 0 for a run that saw no key
            sum += ml_in[u][sp].y * w;
            a0 += acc_in[u][sp].x * w;
            a1 += acc_in[u][sp].y * w;
            a2 += acc_in[u][sp].z * w;
            a3 += acc_in[u][sp].w * w;
          }
        }
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        *reinterpret_cast<uint2*>(out_row(cta_row0 + r) + d) =
            make_uint2(pack2<T>(a0 * inv, a1 * inv), pack2<T>(a2 * inv, a3 * inv));
      }
    }
    if (threadIdx.x == 0) counters[tile_index] = 0u;
  }
}

}  // namespace tileplan
