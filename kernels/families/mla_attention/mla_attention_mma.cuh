// The split-KV attention of mla_attention (mla_attention_absorbed.cuh's file comment) on
// tensor cores: mla_absorb_q (Q = T) writes every (token, head)'s query [q_lat | q_rope] in T,
// scaled by scale · log2(e), then mla_attend_split_kv_mma attends over the latent and rope
// cache rows with mma.sync.m16n8k16, and mla_combine_project merges its records and applies
// W_V. Launched in that order; this file holds the middle kernel and includes the others.
//
// CTA (s, tile, b) serves query rows r = tile · 16 ... + 15 of sequence b, the (token, head)
// pairs r = t · heads + h (zero rows past tokens · heads): exactly the M = 16 of the mma, so
// DeepSeek-V2's 16 heads of one decode token fill one tile, and any head count works. It
// walks the cache chunks c = s, s + splits, ... of kKvChunk rows up to hi, the tile's largest
// valid position (read from device memory: one grid serves every context under CUDA Graph
// replay, and a split with no chunk at or below hi exits at once, writing nothing), through a
// two-stage cp.async pipeline (rows past hi zero-filled). Per chunk, with lane = 4 g + q:
//
//   S = Q · [latent | rope]ᵀ    warp w computes n-tiles [w · kNt, (w + 1) · kNt) of the chunk's
//                               keys over all (C + Dr) / 16 k-steps: Q's A fragments (those of
//                               the first kQHeld k-steps held in registers) and K's B fragments
//                               from ldmatrix, two accumulators per n-tile (even and odd
//                               k-steps) so that consecutive mma do not wait on each other
//   mask, row max               keys past a row's position are -inf; the warps' row maxima meet
//                               in shared memory, and every warp forms the same running max
//   P = exp2(S - max)           rounded to T into shared memory (the S accumulator layout is
//                               the A fragment layout of P · V), each warp keeping its share
//                               of the row sums
//   O = O · alpha + P · latent  warp w owns latent columns [w · C / kWarps, ...): P's A
//                               fragments and the latent's B fragments (ldmatrix .trans) from
//                               shared memory, O in float32 registers
//
// Every row of a chunk is read once for all 16 query rows. Shared-memory rows (cache, queries,
// probabilities) keep their 16-byte chunks XOR-swizzled by the row (primitives.cuh), so
// ldmatrix and cp.async need no padding and, for rows a multiple of 128 bytes (DeepSeek-V2's
// 1152-byte rows), no bank conflicts; those rows hold C + Dr elements rounded up to the k-step
// of 16, the rest zero-filled. At the end the CTA writes one record per query row (the
// unnormalized latent output, the running max and the sum of all warps, mla_combine_project's
// format) to partials [B, tiles, splits, 16, C + 4].
//
// Precision: the queries are rounded to T once (by mla_absorb_q, after the scaling) and the
// probabilities once per chunk, as the flash kernel rounds P; every product accumulates in
// float32, and the sums of the softmax use the unrounded probabilities.
#pragma once

#include "mla_attention_absorbed.cuh"
#include "mla_attention_params.h"
#include "primitives.cuh"

namespace tileplan {

// q: [B · tokens, heads, kC + kDr] from mla_absorb_q (rows r of sequence b at b · tokens ·
// heads + r); caches: latent_cache [B, capacity, kC], rope_cache [B, capacity, kDr];
// positions [B, tokens]. A position outside [0, capacity) is an error: with `error` non-null
// its rows see nothing (m = -inf, l = 0: a zero output row) and split 0 raises *error to at
// least the flat token index + 1; with `error` null the kernel traps.
// Launch: grid (splits, ceil(tokens · heads / 16), B), block 32 · kWarps, dynamic shared
// memory MlaMmaLayoutFor(sizeof(T), kC, kDr, kKvChunk, kWarps).total.
// REQUIRES: T bf16 or f16; kC % (8 · kWarps) == 0 and kDr % 8 == 0; kKvChunk a multiple of 16
// and of 8 · kWarps; q and the caches aligned to 16 bytes.
template <typename T, int kC, int kDr, int kKvChunk, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    mla_attend_split_kv_mma(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MLA_ATTEND_MMA_PARAMS)) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kRows = kMlaMmaRows;
  constexpr int kD = kC + kDr;                  // a key: the latent row, then the rope row
  constexpr int kDP = MlaMmaRowElems(kC, kDr);  // ... in shared memory, zero-padded
  constexpr int kRowChunks = kD / 8;            // 16-byte chunks of a row
  constexpr int kPadChunks = kDP / 8;           // ... in shared memory
  constexpr int kLatChunks = kC / 8;
  constexpr int kMask = chunk_swizzle_mask(kPadChunks);
  constexpr int kPMask = chunk_swizzle_mask(kKvChunk / 8);
  constexpr int kKSteps = kDP / 16;           // k-steps of S
  constexpr int kNt = kKvChunk / 8 / kWarps;  // n-tiles of S per warp
  constexpr int kOCols = kC / kWarps;         // latent columns of O per warp
  constexpr int kOTiles = kOCols / 8;         // n-tiles of O per warp
  constexpr int kPSteps = kKvChunk / 16;      // k-steps of P · V
  // Q's A fragments of the first kQHeld k-steps (an even count) stay in registers for the
  // whole walk, the rest are read from shared memory for every chunk. The block keeps within
  // half the SM's 64K registers (at most 232 a thread), so that under programmatic dependent
  // launch it fits one SM beside a CTA of mla_absorb_q (256 threads of 128 registers) and its
  // first chunk streams into L2 while that runs; about 86 + 4 · kOTiles + 8 · kNt registers go
  // to everything else (ptxas, sm_90), four to each held k-step.
  constexpr int kRegisterCap = 32768 / kThreads < 232 ? 32768 / kThreads : 232;
  constexpr int kQBudget = (kRegisterCap - 86 - 4 * kOTiles - 8 * kNt) / 4;
  constexpr int kQHeld = (kQBudget < 0 ? 0 : kQBudget < kKSteps ? kQBudget : kKSteps) / 2 * 2;
  constexpr long long kRecord = kC + 4;
  constexpr MlaMmaLayout kLayout =
      MlaMmaLayoutFor(static_cast<int>(sizeof(T)), kC, kDr, kKvChunk, kWarps);
  static_assert(is_same<T, bf16>::value || is_same<T, f16>::value, "mma inputs: bf16 or f16");
  static_assert(kC % (8 * kWarps) == 0 && kDr % 8 == 0, "latent and rope dims");
  static_assert(kKvChunk % 16 == 0 && kKvChunk % (8 * kWarps) == 0 && kNt >= 1, "chunk");

  const int split = blockIdx.x, tile = blockIdx.y, b = blockIdx.z;
  const int splits = gridDim.x;
  const int rows_total = tokens * heads;  // query rows of the sequence
  const int r0 = tile * kRows;
  const long long seq_row = static_cast<long long>(b) * capacity;  // cache row 0 of b
  {
    // Before the dependency wait: the rows of this split's first two chunks, up to the tile's
    // last token's position, start on their way into L2.
    const int t_last = (min(rows_total, r0 + kRows) - 1) / heads;
    const int last = max(-1, min(capacity - 1, load_cg(positions + b * tokens + t_last)));
#pragma unroll 1
    for (int k = 0; k < 2; ++k) {
      const int first = (split + k * splits) * kKvChunk;
      mla_prefetch_cache_rows<T, kC, kDr, kThreads>(latent_cache, rope_cache, seq_row + first,
                                                    min(kKvChunk, last - first + 1));
    }
  }
  grid_dependency_sync();
  extern __shared__ __align__(16) unsigned char mla_mma_smem[];
  T* kv_s = reinterpret_cast<T*>(mla_mma_smem);                                // [2][kKvChunk][kDP]
  T* q_s = reinterpret_cast<T*>(mla_mma_smem + kLayout.q_offset);              // [kRows][kDP]
  T* p_s = reinterpret_cast<T*>(mla_mma_smem + kLayout.p_offset);              // [kRows][kKvChunk]
  float* red_s = reinterpret_cast<float*>(mla_mma_smem + kLayout.red_offset);  // [kWarps][kRows]
  __shared__ int s_pos[kRows];  // each query row's position, -1 where none is valid

  // The query rows (the first cp.async group) stream in while the positions load.
  for (int i = threadIdx.x; i < kRows * kPadChunks; i += kThreads) {
    const int r = i / kPadChunks, v = i % kPadChunks;
    const bool valid = r0 + r < rows_total && v < kRowChunks;
    const T* src = q + (static_cast<long long>(b) * rows_total + (valid ? r0 + r : 0)) * kD +
                   (valid ? v * 8 : 0);
    cp_async_16(swizzled<kDP, kMask>(q_s, r, v * 8), src, valid);
  }
  cp_async_commit();
  if (threadIdx.x < kRows) {
    const int r = r0 + threadIdx.x;
    int p = -1;
    if (r < rows_total) {
      p = mla_checked_position(positions, b * tokens + r / heads, capacity, error, split == 0);
    }
    s_pos[threadIdx.x] = p;
  }
  __syncthreads();
  int hi = -1;
#pragma unroll
  for (int k = 0; k < kRows; ++k) hi = max(hi, s_pos[k]);
  const int chunks = hi < 0 ? 0 : hi / kKvChunk + 1;
  if (split >= chunks) {  // uniform over the block: no row of this split is seen
    cp_async_wait<0>();
    return;
  }

  // Rows [c · kKvChunk, ...) of the chunk into stage `stage`; rows past hi and the padding
  // are zero-filled.
  auto load_chunk = [&](int stage, int c) {
    T* dst = kv_s + stage * (kKvChunk * kDP);
    const int row0 = c * kKvChunk;
    for (int i = threadIdx.x; i < kKvChunk * kPadChunks; i += kThreads) {
      const int k = i / kPadChunks, v = i % kPadChunks;
      const bool valid = row0 + k <= hi && v < kRowChunks;
      const long long row = seq_row + (valid ? row0 + k : 0);
      const T* src = !valid || v < kLatChunks ? latent_cache + row * kC + (valid ? v * 8 : 0)
                                              : rope_cache + row * kDr + (v - kLatChunks) * 8;
      cp_async_16(swizzled<kDP, kMask>(dst, k, v * 8), src, valid);
    }
    cp_async_commit();
  };
  load_chunk(0, split);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, qd = lane % 4;
  const int pos[2] = {s_pos[g], s_pos[g + 8]};  // rows g and g + 8 of the accumulators
  const int col0 = warp * kOCols;
  float o[kOTiles][4];
#pragma unroll
  for (int dt = 0; dt < kOTiles; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
  }
  float m_run[2] = {neg_inf(), neg_inf()};
  float l_run[2] = {0.f, 0.f};  // this lane's share of the row sums

  // The held query fragments, once the query rows have landed (their cp.async group is the
  // oldest; the first chunk's may still be in flight).
  unsigned int qh[kQHeld > 0 ? kQHeld : 1][4];
  if constexpr (kQHeld > 0) {
    cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kQHeld; ++ks) {
      ldmatrix_x4(qh[ks], swizzled<kDP, kMask>(q_s, lane % 16, ks * 16 + (lane / 16) * 8));
    }
  }

  int stage = 0;
  for (int c = split; c < chunks; c += splits, stage ^= 1) {
    cp_async_wait<0>();
    // The chunk visible to every warp, and every warp done with the previous chunk: its
    // stage, the probabilities and the row maxima may be written again.
    __syncthreads();
    if (c + splits < chunks) load_chunk(stage ^ 1, c + splits);
    const T* kt = kv_s + stage * (kKvChunk * kDP);
    const int row0 = c * kKvChunk;

    float s[kNt][4];
    {
      float acc[kNt][2][4];
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][0][e] = acc[j][1][e] = 0.f;
      }
      // Two k-steps per pass: one ldmatrix.x4 brings a key n-tile's B fragments of both.
#pragma unroll
      for (int ks = 0; ks + 1 < kKSteps; ks += 2) {
        unsigned int qa0[4], qa1[4];
        if (ks < kQHeld) {  // resolved at compile time: the loop is unrolled
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            qa0[e] = qh[ks < kQHeld ? ks : 0][e];
            qa1[e] = qh[ks < kQHeld ? ks + 1 : 0][e];
          }
        } else {
          ldmatrix_x4(qa0, swizzled<kDP, kMask>(q_s, lane % 16, ks * 16 + (lane / 16) * 8));
          ldmatrix_x4(qa1, swizzled<kDP, kMask>(q_s, lane % 16, (ks + 1) * 16 + (lane / 16) * 8));
        }
#pragma unroll
        for (int j = 0; j < kNt; ++j) {
          unsigned int kb[4];
          ldmatrix_x4(kb, swizzled<kDP, kMask>(kt, (warp * kNt + j) * 8 + lane % 8,
                                               ks * 16 + (lane / 8) * 8));
          mma_m16n8k16<T>(acc[j][0], qa0, kb[0], kb[1]);
          mma_m16n8k16<T>(acc[j][1], qa1, kb[2], kb[3]);
        }
      }
      if constexpr (kKSteps % 2 == 1) {
        constexpr int ks = kKSteps - 1;
        unsigned int qa[4];
        ldmatrix_x4(qa, swizzled<kDP, kMask>(q_s, lane % 16, ks * 16 + (lane / 16) * 8));
#pragma unroll
        for (int j = 0; j < kNt; ++j) {
          unsigned int kb[2];
          ldmatrix_x2(kb, swizzled<kDP, kMask>(kt, (warp * kNt + j) * 8 + lane % 8,
                                               ks * 16 + ((lane / 8) % 2) * 8));
          mma_m16n8k16<T>(acc[j][0], qa, kb[0], kb[1]);
        }
      }
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = acc[j][0][e] + acc[j][1][e];
      }
    }

    // Keys a row may not see are -inf; this warp's maxima of rows g and g + 8.
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = row0 + (warp * kNt + j) * 8 + 2 * qd + (e % 2);
        s[j][e] = key <= pos[e / 2] ? s[j][e] : neg_inf();
        mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      mx[half] = group_max<4>(mx[half]);
      if (qd == 0) red_s[warp * kRows + g + 8 * half] = mx[half];
    }
    __syncthreads();  // every warp's maxima

    float base[2], alpha[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float m_new = m_run[half];
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m_new = fmaxf(m_new, red_s[w * kRows + g + 8 * half]);
      // With every score so far masked the base is 0, so exp2 of the -inf entries stays 0.
      base[half] = m_new == neg_inf() ? 0.f : m_new;
      alpha[half] = exp2f(m_run[half] - base[half]);
      m_run[half] = m_new;
      l_run[half] *= alpha[half];
    }
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
      const int col = (warp * kNt + j) * 8 + 2 * qd;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - base[e / 2]);
        l_run[e / 2] += s[j][e];
      }
      *reinterpret_cast<unsigned int*>(swizzled<kKvChunk, kPMask>(p_s, g, col)) =
          pack2<T>(s[j][0], s[j][1]);
      *reinterpret_cast<unsigned int*>(swizzled<kKvChunk, kPMask>(p_s, g + 8, col)) =
          pack2<T>(s[j][2], s[j][3]);
    }
    __syncthreads();  // the chunk's probabilities

#pragma unroll
    for (int dt = 0; dt < kOTiles; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      unsigned int pa[4];
      ldmatrix_x4(pa, swizzled<kKvChunk, kPMask>(p_s, lane % 16, kk * 16 + (lane / 16) * 8));
      // Two n-tiles of the latent per ldmatrix: lanes 0-15 address tile dt, lanes 16-31 dt + 1.
#pragma unroll
      for (int dt = 0; dt + 1 < kOTiles; dt += 2) {
        unsigned int vb[4];
        ldmatrix_x4_trans(
            vb, swizzled<kDP, kMask>(kt, kk * 16 + lane % 16, col0 + (dt + lane / 16) * 8));
        mma_m16n8k16<T>(o[dt], pa, vb[0], vb[1]);
        mma_m16n8k16<T>(o[dt + 1], pa, vb[2], vb[3]);
      }
      if constexpr (kOTiles % 2 == 1) {  // the last n-tile alone: lanes 0-15 address it
        constexpr int dt = kOTiles - 1;
        unsigned int vb[2];
        ldmatrix_x2_trans(vb, swizzled<kDP, kMask>(kt, kk * 16 + lane % 16, col0 + dt * 8));
        mma_m16n8k16<T>(o[dt], pa, vb[0], vb[1]);
      }
    }
  }

  // The row sums over the warps' keys (the maxima were last read before the final barrier of
  // the loop), then the records.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float l = group_sum<4>(l_run[half]);
    if (qd == 0) red_s[warp * kRows + g + 8 * half] = l;
  }
  __syncthreads();
  float* rec = partials +
               ((static_cast<long long>(b) * gridDim.y + tile) * splits + split) * kRows * kRecord;
#pragma unroll
  for (int dt = 0; dt < kOTiles; ++dt) {
    const int col = col0 + dt * 8 + 2 * qd;
    *reinterpret_cast<float2*>(rec + g * kRecord + col) = make_float2(o[dt][0], o[dt][1]);
    *reinterpret_cast<float2*>(rec + (g + 8) * kRecord + col) = make_float2(o[dt][2], o[dt][3]);
  }
  if (warp == 0 && qd == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = g + 8 * half;
      float l = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) l += red_s[w * kRows + row];
      *reinterpret_cast<float2*>(rec + row * kRecord + kC) = make_float2(m_run[half], l);
    }
  }
}

}  // namespace tileplan
