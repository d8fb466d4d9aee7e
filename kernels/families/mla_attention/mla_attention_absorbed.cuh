// Multi-head latent attention (docs/ir.md `mla_attention`) with the up-projection absorbed
// into the query and the output, in three kernels launched in this order:
//
//   mla_absorb_q         q_lat[bt, h, :] = W_K,h^T q_nope[bt, h, :]            (C floats)
//   mla_attend_split_kv  per sequence, token tile, head group and split of the cache rows:
//                        s_j = q_lat · latent[j] + q_rope · rope[j] for j <= p (scale folded
//                        into the queries), online softmax, o_lat = Σ_j p_j latent[j]; a
//                        record (o_lat, max, sum) per query and split
//   mla_combine_project  merges the splits' records with log-sum-exp weights into the
//                        normalized o_lat of each (token, head) and writes
//                        out[bt, h, v] = W_V,h[v, :] · o_lat
//
// where W_K,h and W_V,h are the rows h·(Dn+Dv) … +Dn and the next Dv of w_kv_b [Hq·(Dn+Dv), C].
// Since k_j = [W_K,h latent[j] | rope[j]] and v_j = W_V,h latent[j], q·k_j = q_lat·latent[j]
// + q_rope·rope[j] and Σ p_j v_j = W_V,h Σ p_j latent[j]: the un-absorbed definition, with
// every cache row read as C + Dr elements shared by all heads instead of expanded per head.
// Every product accumulates in float32; q_lat and o_lat stay float32 (never rounded to T).
//
// The split-KV kernel's CTA (s, g, b · tiles + tile) serves the queries of kHeads heads (group
// g) for kTokens new tokens (tile) of sequence b, and the cache chunks c = s, s + splits, ...
// of kKvChunk rows, double-buffered in shared memory through cp.async. The heads of a group
// share each row they read, so a row is read once per (split, group, tile) of its sequence.
// Positions come from device memory (one launch shape serves every context under CUDA Graph
// replay): a tile sees rows 0 … hi, hi the largest valid position of its tokens, and a split
// with no chunk at or below hi exits at once, writing nothing; the combine reads the same
// positions and merges only the splits that wrote. A position outside [0, capacity) is an
// error: with `error` non-null its token sees no row (a zero output row) and CTA (0, 0, ·)
// raises *error to at least the flat token index + 1; with `error` null the kernel traps.
//
// Workspace (floats, 16-byte aligned): q_lat [B·T, Hq, C] (already multiplied by
// scale · log2(e): the softmax runs in the log2 domain, exp2f only), then the records
// [B · tiles, groups, splits, kHeads · kTokens, C + 4] (query qi = token-in-tile · kHeads +
// head-in-group).
#pragma once

#include "mla_attention_params.h"
#include "primitives.cuh"
#include "rope_kv_write.cuh"

namespace tileplan {

// mla_absorb_q's plain form: q_rope arrives rotated and the caches are written elsewhere.
struct MlaNoKvWrite {
  static constexpr bool kOn = false;
  using Norm = float;
  static constexpr int kDr = 2, kLatentVec = 1, kVec = 1;
  static constexpr bool kInterleaved = false;
};

// mla_absorb_q's fused form (mla_kv_write_attention): the norm weight's type, the rope dim,
// and the vectors of mla_kv_write_part and of the query's rotation.
template <typename NormT, int Dr, int LatentVec, int Vec, bool Interleaved>
struct MlaRopeKvWrite {
  static constexpr bool kOn = true;
  using Norm = NormT;
  static constexpr int kDr = Dr, kLatentVec = LatentVec, kVec = Vec;
  static constexpr bool kInterleaved = Interleaved;
};

// q_nope: token bt's heads at q_nope + bt · q_nope_token_stride + h · q_nope_head_stride
// (bt = b · T + t over all `tokens` = B · T tokens; each head's nope_dim elements contiguous),
// q_rope likewise (read only with rope_dim > 0); w_kv_b: [heads · (nope_dim + v_dim), kC]
// rows. Writes q_lat [tokens, heads, kC + rope_dim] in Q.
//
// CTA (x, h, z) computes columns [64 x, 64 x + 64) of head h for tokens [16 z, 16 z + 16), four
// tokens at a time: thread (phase, cv) sums rows d = phase, phase + phases, ... of its column
// vector (so a warp instruction reads whole 128-byte row segments), the phases are summed
// over the lanes of the warp by shuffles and over the warps in shared memory. The weight
// never depends on an earlier kernel: before the dependency wait each thread loads its first
// kMlaAbsorbHeld rows into registers and sends the rest on their way into L2. CTAs with x = 0
// also write the scaled q_rope of their head and tokens.
//
// Fused (Fused = MlaRopeKvWrite<...>: mla_kv_write_attention, the query's RoPE and
// mla_kv_write folded in): the CTAs with x = 0 rotate q_rope at the token's position (a warp
// per token and head, as the rope kernel, the result rounded to T as the rope kernel stores
// it) into the queries' tail, or into q_rope_out when it is not null (the CUDA-core path,
// whose split-KV kernel reads it there); and one more column of CTAs, x = ceil(kC / 64), does
// mla_kv_write's work: CTA (x, y, z) takes the tokens 16 z + y, 16 z + y + heads, ..., two
// warps per token (mla_kv_write_part: the normalized latent, the rotated rope key), and
// writes them into the cache rows positions[bt] (an invalid position writes nothing and
// raises *error to at least bt + 1, or traps without an error word). The split-KV kernel
// that follows reads those rows after its dependency wait.
// Launch: grid (ceil(kC / 64) (+ 1 fused), heads, ceil(tokens / 16)), block
// kMlaAbsorbThreads, dynamic shared memory MlaAbsorbSharedBytes(nope_dim).
// REQUIRES: kC % 8 == 0; w_kv_b aligned to 16 bytes; fused, as mla_kv_write_part and the
// rope kernel for q_rope (kDr, kVec).
template <typename T, typename W, typename Q, int kC, typename Fused = MlaNoKvWrite>
__global__ void __launch_bounds__(kMlaAbsorbThreads)
    mla_absorb_q(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MLA_ABSORB_Q_PARAMS)) {
  constexpr int kWVec = 16 / static_cast<int>(sizeof(W));
  constexpr int kColVecs = kMlaAbsorbCols / kWVec;       // column vectors per CTA
  constexpr int kPhases = kMlaAbsorbThreads / kColVecs;  // row phases
  constexpr int kWarps = kMlaAbsorbThreads / 32;
  constexpr int kHeld = kMlaAbsorbHeld;
  static_assert(kC % 8 == 0 && kColVecs <= 32, "latent dim");
  if constexpr (Fused::kOn) {
    if (blockIdx.x == gridDim.x - 1) {  // mla_kv_write's column
      grid_dependency_sync();
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % 2;
      constexpr int kPerPass = kMlaAbsorbThreads / 64;  // tokens per pass, two warps each
      const int bt0 = blockIdx.z * kMlaAbsorbTokens;
      for (int k = blockIdx.y + (warp / 2) * gridDim.y; k < kMlaAbsorbTokens;
           k += kPerPass * gridDim.y) {
        const int bt = bt0 + k;
        if (bt >= tokens) break;
        const int p =
            checked_cache_position(positions[bt], bt, capacity, error, lane == 0 && part == 0);
        if (p < 0) continue;
        const long long row = static_cast<long long>(bt / seq_tokens) * capacity + p;
        mla_kv_write_part<T, typename Fused::Norm, kC, Fused::kDr, Fused::kLatentVec, Fused::kVec,
                          Fused::kInterleaved>(
            kv_a + bt * kv_a_stride, static_cast<const typename Fused::Norm*>(norm), eps, inv_freq,
            attention_factor, p, latent_cache + row * kC, rope_cache + row * Fused::kDr, part,
            lane);
      }
      return;
    }
  }
  const int c0 = blockIdx.x * kMlaAbsorbCols;
  const int h = blockIdx.y;
  const int bt0 = blockIdx.z * kMlaAbsorbTokens;
  const int cv = threadIdx.x % kColVecs, phase = threadIdx.x / kColVecs;
  const int c = c0 + cv * kWVec;
  const bool has_cols = c < kC;
  const long long q_row = kC + rope_dim;  // elements of a q_lat row
  const W* w_k = w_kv_b + static_cast<long long>(h) * (nope_dim + v_dim) * kC;
  RawVec<W, kWVec> held[kHeld];  // rows phase + i · kPhases of the column vector
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const int d = phase + i * kPhases;
    if (has_cols && d < nope_dim)
      held[i] = load_raw<W, kWVec>(w_k + static_cast<long long>(d) * kC + c);
  }
  {
    constexpr int kLines = (kMlaAbsorbCols * static_cast<int>(sizeof(W)) + 127) / 128;
    constexpr int kFirst = kHeld * kPhases;  // rows not held in registers start here
    for (int i = threadIdx.x; i < (nope_dim - kFirst) * kLines; i += kMlaAbsorbThreads) {
      const int col = c0 + (i % kLines) * (128 / static_cast<int>(sizeof(W)));
      if (col < kC) prefetch_l2(w_k + static_cast<long long>(kFirst + i / kLines) * kC + col);
    }
  }
  grid_dependency_sync();
  extern __shared__ __align__(16) float absorb_smem[];
  float* qn_s = absorb_smem;                                 // [kMlaAbsorbTokens][nope_dim]
  float* red_s = absorb_smem + kMlaAbsorbTokens * nope_dim;  // [kWarps][pass][cols]
  for (int i = threadIdx.x; i < kMlaAbsorbTokens * nope_dim; i += kMlaAbsorbThreads) {
    const int k = i / nope_dim, d = i % nope_dim;
    const long long bt = bt0 + k;
    qn_s[i] = bt < tokens ? to_float(q_nope[bt * q_nope_token_stride +
                                            static_cast<long long>(h) * q_nope_head_stride + d])
                          : 0.f;
  }
  if constexpr (Fused::kOn) {
    if (blockIdx.x == 0) {
      constexpr int kDr = Fused::kDr, kVec = Fused::kVec;
      constexpr bool kInterleaved = Fused::kInterleaved;
      const int lane = threadIdx.x % 32;
      for (int k = threadIdx.x / 32; k < kMlaAbsorbTokens; k += kWarps) {
        const long long bt = bt0 + k;
        if (bt >= tokens) break;
        const long long qh = bt * heads + h;
        rope_head_apply<T, T, kDr, kVec, false, kInterleaved>(
            q_rope + bt * q_rope_token_stride + static_cast<long long>(h) * q_rope_head_stride,
            inv_freq, positions[bt], attention_factor, nullptr, 0.f, lane,
            [&](int i, const float(&lo)[kVec], const float(&hi)[kVec]) {
#pragma unroll
              for (int e = 0; e < kVec; ++e) {
                const int first = rope_first<kDr, kInterleaved>(i + e);
                const int second = rope_second<kDr, kInterleaved>(i + e);
                const T lo_t = from_float<T>(lo[e]), hi_t = from_float<T>(hi[e]);
                if (q_rope_out != nullptr) {
                  q_rope_out[qh * kDr + first] = lo_t;
                  q_rope_out[qh * kDr + second] = hi_t;
                } else {
                  Q* dst = q_lat + qh * q_row + kC;
                  dst[first] = from_float<Q>(to_float(lo_t) * log2e_scale);
                  dst[second] = from_float<Q>(to_float(hi_t) * log2e_scale);
                }
              }
            });
      }
    }
  } else if (rope_dim > 0 && blockIdx.x == 0) {
    for (int i = threadIdx.x; i < kMlaAbsorbTokens * rope_dim; i += kMlaAbsorbThreads) {
      const int k = i / rope_dim, d = i % rope_dim;
      const long long bt = bt0 + k;
      if (bt >= tokens) continue;
      const float r = to_float(
          q_rope[bt * q_rope_token_stride + static_cast<long long>(h) * q_rope_head_stride + d]);
      q_lat[(bt * heads + h) * q_row + kC + d] = from_float<Q>(r * log2e_scale);
    }
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int k0 = 0; k0 < kMlaAbsorbTokens && bt0 + k0 < tokens; k0 += kMlaAbsorbPass) {
    float acc[kMlaAbsorbPass][kWVec];
#pragma unroll
    for (int k = 0; k < kMlaAbsorbPass; ++k) {
#pragma unroll
      for (int e = 0; e < kWVec; ++e) acc[k][e] = 0.f;
    }
    // acc[k] += q_nope[token k0 + k][d] · w[d][c ... c + kWVec)
    auto accumulate = [&](int d, const float(&w)[kWVec]) {
#pragma unroll
      for (int k = 0; k < kMlaAbsorbPass; ++k) {
        const float q = qn_s[(k0 + k) * nope_dim + d];
#pragma unroll
        for (int e = 0; e < kWVec; ++e) acc[k][e] += q * w[e];
      }
    };
    if (has_cols) {
#pragma unroll
      for (int i = 0; i < kHeld; ++i) {
        const int d = phase + i * kPhases;
        if (d >= nope_dim) break;
        float w[kWVec];
#pragma unroll
        for (int e = 0; e < kWVec; ++e) w[e] = word_element<W>(held[i].w, e);
        accumulate(d, w);
      }
#pragma unroll 4
      for (int d = phase + kHeld * kPhases; d < nope_dim; d += kPhases) {
        float w[kWVec];
        load_floats<W, kWVec>(w_k + static_cast<long long>(d) * kC + c, w);
        accumulate(d, w);
      }
    }
    // Lanes that share cv differ in the bits above log2(kColVecs).
#pragma unroll
    for (int k = 0; k < kMlaAbsorbPass; ++k) {
#pragma unroll
      for (int e = 0; e < kWVec; ++e) {
#pragma unroll
        for (int o = kColVecs; o < 32; o *= 2) {
          acc[k][e] += __shfl_xor_sync(0xffffffffu, acc[k][e], o);
        }
      }
    }
    if (lane < kColVecs) {
#pragma unroll
      for (int k = 0; k < kMlaAbsorbPass; ++k) {
#pragma unroll
        for (int e = 0; e < kWVec; ++e) {
          red_s[(warp * kMlaAbsorbPass + k) * kMlaAbsorbCols + cv * kWVec + e] = acc[k][e];
        }
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kMlaAbsorbPass * kMlaAbsorbCols; i += kMlaAbsorbThreads) {
      const int k = i / kMlaAbsorbCols, col = i % kMlaAbsorbCols;
      const long long bt = bt0 + k0 + k;
      if (bt >= tokens || c0 + col >= kC) continue;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        sum += red_s[(w * kMlaAbsorbPass + k) * kMlaAbsorbCols + col];
      }
      q_lat[(bt * heads + h) * q_row + c0 + col] = from_float<Q>(sum * log2e_scale);
    }
    __syncthreads();
  }
}

// The position of flat token bt, or -1 when it lies outside [0, capacity): then, with an error
// word, `raise` lifts it to at least bt + 1 (one CTA per token raises it); without one the
// kernel traps.
__device__ __forceinline__ int mla_checked_position(const int* positions, int bt, int capacity,
                                                    int* error, bool raise) {
  const int p = positions[bt];
  if (p >= 0 && p < capacity) return p;
  if (error == nullptr) __trap();
  if (raise) atomicMax(error, bt + 1);
  return -1;
}

// Starts cache rows [first_row, first_row + rows) (rows <= 0: none) of the latent and rope
// caches on their way into L2, the block's kThreads threads taking every kThreads-th 128-byte
// line. The split-KV kernels call it before their dependency wait with rows from a position
// that may be stale (an earlier kernel may still write it), which can only fetch the wrong
// lines: an L2 prefetch returns no data.
template <typename T, int kC, int kDr, int kThreads>
__device__ __forceinline__ void mla_prefetch_cache_rows(const T* latent_cache, const T* rope_cache,
                                                        long long first_row, int rows) {
  constexpr int kLatLines = (kC * static_cast<int>(sizeof(T)) + 127) / 128;
  constexpr int kRopeLines = (kDr * static_cast<int>(sizeof(T)) + 127) / 128;
  constexpr int kLines = kLatLines + kRopeLines;
  constexpr int kLineElems = 128 / static_cast<int>(sizeof(T));
  for (int i = threadIdx.x; i < rows * kLines; i += kThreads) {
    const long long row = first_row + i / kLines;
    const int line = i % kLines;
    if (line < kLatLines) {
      prefetch_l2(latent_cache + row * kC + line * kLineElems);
    } else {
      prefetch_l2(rope_cache + row * kDr + (line - kLatLines) * kLineElems);
    }
  }
}

// The queries of CTA (split, g, b · tiles + tile): q_lat [B·T, heads, kC] (scaled, from
// mla_absorb_q), q_rope: token bt's heads at q_rope + bt · q_rope_token_stride + h ·
// q_rope_head_stride (kDr contiguous elements each). Caches: latent_cache [B, capacity, kC],
// rope_cache [B, capacity, kDr]; positions [B, tokens] (tokens = T here). Writes the records
// of the CTA's queries (see the file comment) unless the split holds no row of the tile.
//
// Inside a chunk: scores with kR = kThreads / kKvChunk lanes per row (each lane a strided
// share of the row's 16-byte vectors, dotted with every query; shuffles sum the lanes), then
// one warp per query updates its running max and sum and turns the chunk's scores into
// probabilities, then every thread accumulates P · latent for kMlaPvVec latent dims of every
// query over a strided share of the chunk's rows (kKh = kThreads / (kC / kMlaPvVec) shares);
// at the end the shares are summed in shared memory.
// Launch: grid (splits, ceil(heads / kHeads), B · ceil(tokens / kTokens)), block kThreads,
// dynamic shared memory MlaAttendLayoutFor(sizeof(T), kC, kDr, kHeads · kTokens, kKvChunk,
// kThreads).total.
// REQUIRES: kC and kDr multiples of 8; kThreads / kKvChunk a power of two <= 32; kC <=
// kMlaPvVec · kThreads; kHeads · kTokens <= kMlaMaxQueries; caches aligned to 16 bytes.
template <typename T, int kC, int kDr, int kHeads, int kTokens, int kKvChunk, int kThreads>
__global__ void __launch_bounds__(kThreads)
    mla_attend_split_kv(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MLA_ATTEND_PARAMS)) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kD = kC + kDr;  // a key: the latent row, then the rope row
  constexpr int kQ = kHeads * kTokens;
  constexpr MlaAttendLayout kLayout =
      MlaAttendLayoutFor(static_cast<int>(sizeof(T)), kC, kDr, kQ, kKvChunk, kThreads);
  constexpr int kQP = kLayout.queries_padded;
  constexpr int kRowVecs = kLayout.row_vecs;
  constexpr int kLatVecs = kC / kVec;
  constexpr int kStride = kLayout.row_stride * kVec;  // elements between shared rows
  constexpr int kR = kThreads / kKvChunk;
  constexpr int kWarps = kThreads / 32;
  constexpr int kPvVecs = kC / kMlaPvVec;
  constexpr int kKh = kThreads / kPvVecs;
  static_assert(kC % 8 == 0 && kDr % 8 == 0, "latent and rope dims: multiples of 8");
  static_assert(kThreads % 32 == 0 && kThreads % kKvChunk == 0 && kR <= 32 && (kR & (kR - 1)) == 0,
                "lanes per row: a power of two <= 32");
  static_assert(kKh >= 1, "at most kMlaPvVec latent dims per thread");
  static_assert(kQ >= 1 && kQ <= kMlaMaxQueries, "queries per CTA");

  const int split = blockIdx.x, group = blockIdx.y;
  const int splits = gridDim.x;
  const int tiles = (tokens + kTokens - 1) / kTokens;
  const int b = blockIdx.z / tiles, tile = blockIdx.z % tiles;
  const int t0 = tile * kTokens;
  const long long seq_row = static_cast<long long>(b) * capacity;  // row 0 of sequence b
  {
    // Before the dependency wait: the rows of this split's first chunk, up to the tile's
    // last token's position, start on their way into L2.
    const int last =
        max(-1, min(capacity - 1, load_cg(positions + b * tokens + min(tokens, t0 + kTokens) - 1)));
    const int first = split * kKvChunk;
    mla_prefetch_cache_rows<T, kC, kDr, kThreads>(latent_cache, rope_cache, seq_row + first,
                                                  min(kKvChunk, last - first + 1));
  }
  grid_dependency_sync();
  extern __shared__ __align__(16) unsigned char attend_smem[];
  T* kv_s = reinterpret_cast<T*>(attend_smem);                            // [2][kKvChunk][kStride]
  float* q_s = reinterpret_cast<float*>(attend_smem + kLayout.q_offset);  // [kQ][kD]
  float* p_s = reinterpret_cast<float*>(attend_smem + kLayout.p_offset);  // [kKvChunk][kQP]
  float* m_s = reinterpret_cast<float*>(attend_smem + kLayout.stats_offset);
  float* l_s = m_s + kQP;
  float* a_s = l_s + kQP;
  __shared__ int s_pos[kTokens];  // the tile's positions, -1 where none is valid

  if (threadIdx.x < kTokens) {
    const int t = t0 + threadIdx.x;
    int p = -1;
    if (t < tokens) {
      p = mla_checked_position(positions, b * tokens + t, capacity, error,
                               split == 0 && group == 0);
    }
    s_pos[threadIdx.x] = p;
  }
  __syncthreads();
  int hi = -1;
#pragma unroll
  for (int k = 0; k < kTokens; ++k) hi = max(hi, s_pos[k]);
  const int chunks = hi < 0 ? 0 : hi / kKvChunk + 1;
  if (split >= chunks) return;  // uniform over the block: no row of this split is seen

  // Rows [c · kKvChunk, ...] up to hi into buffer `buf`; rows past hi are zero-filled.
  auto load_chunk = [&](int c, int buf) {
    const int row0 = c * kKvChunk;
    const int rows = min(kKvChunk, hi - row0 + 1);
    T* dst = kv_s + buf * (kKvChunk * kStride);
    for (int i = threadIdx.x; i < kKvChunk * kRowVecs; i += kThreads) {
      const int k = i / kRowVecs, v = i % kRowVecs;
      const bool valid = k < rows;
      const long long row = seq_row + row0 + (valid ? k : 0);
      const T* src = v < kLatVecs ? latent_cache + row * kC + v * kVec
                                  : rope_cache + row * kDr + (v - kLatVecs) * kVec;
      cp_async_16(dst + k * kStride + v * kVec, src, valid);
    }
    cp_async_commit();
  };
  load_chunk(split, 0);

  // The queries, while the first chunk streams in: q_lat is scaled already, q_rope here.
  for (int i = threadIdx.x; i < kQ * kD; i += kThreads) {
    const int qi = i / kD, e = i % kD;
    const int t = t0 + qi / kHeads, h = group * kHeads + qi % kHeads;
    float v = 0.f;
    if (t < tokens && h < heads) {
      const long long bt = static_cast<long long>(b) * tokens + t;
      v = e < kC ? q_lat[(bt * heads + h) * kC + e]
                 : to_float(q_rope[bt * q_rope_token_stride +
                                   static_cast<long long>(h) * q_rope_head_stride + (e - kC)]) *
                       log2e_scale;
    }
    q_s[i] = v;
  }
  for (int qi = threadIdx.x; qi < kQP; qi += kThreads) {
    m_s[qi] = neg_inf();
    l_s[qi] = 0.f;
    a_s[qi] = 1.f;
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int key = threadIdx.x / kR, r = threadIdx.x % kR;  // the score phase's row and lane
  const int pv_col = (threadIdx.x % kPvVecs) * kMlaPvVec;  // the P · latent phase's dims
  const int pv_phase = threadIdx.x / kPvVecs;              // ... and its share of the rows
  const bool pv_active = pv_phase < kKh;
  float acc[kQ][kMlaPvVec];
#pragma unroll
  for (int qi = 0; qi < kQ; ++qi) {
#pragma unroll
    for (int e = 0; e < kMlaPvVec; ++e) acc[qi][e] = 0.f;
  }

  int buf = 0;
  for (int c = split; c < chunks; c += splits, buf ^= 1) {
    if (c + splits < chunks) {
      load_chunk(c + splits, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // the chunk (and, the first time, the queries and stats) visible
    const T* rows_s = kv_s + buf * (kKvChunk * kStride);
    const int row0 = c * kKvChunk;
    const int rows = min(kKvChunk, hi - row0 + 1);

    // Scores, log2 domain; rows no query of its token may see are -inf.
    {
      float dot[kQ];
#pragma unroll
      for (int qi = 0; qi < kQ; ++qi) dot[qi] = 0.f;
      const T* row = rows_s + key * kStride;
#pragma unroll 2
      for (int v = r; v < kRowVecs; v += kR) {
        float x[kVec];
        load_floats<T, kVec>(row + v * kVec, x);
#pragma unroll
        for (int qi = 0; qi < kQ; ++qi) {
          const float4* qv = reinterpret_cast<const float4*>(q_s + qi * kD + v * kVec);
#pragma unroll
          for (int f = 0; f < kVec / 4; ++f) {
            const float4 q4 = qv[f];
            dot[qi] +=
                q4.x * x[4 * f] + q4.y * x[4 * f + 1] + q4.z * x[4 * f + 2] + q4.w * x[4 * f + 3];
          }
        }
      }
      const int j = row0 + key;
#pragma unroll
      for (int qi = 0; qi < kQ; ++qi) {
        dot[qi] = group_sum<kR>(dot[qi]);
        if (qi % kR == r) {
          const bool visible = key < rows && j <= s_pos[qi / kHeads];
          p_s[key * kQP + qi] = visible ? dot[qi] : neg_inf();
        }
      }
    }
    __syncthreads();

    // Online softmax, one warp per query: the chunk's max, the rescale of what came before,
    // the probabilities in place of the scores.
    for (int qi = warp; qi < kQ; qi += kWarps) {
      float mx = neg_inf();
      for (int k = lane; k < kKvChunk; k += 32) mx = fmaxf(mx, p_s[k * kQP + qi]);
      mx = group_max<32>(mx);
      const float m_old = m_s[qi];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.f;
      for (int k = lane; k < kKvChunk; k += 32) {
        const float p = m_new == neg_inf() ? 0.f : exp2f(p_s[k * kQP + qi] - m_new);
        p_s[k * kQP + qi] = p;
        sum += p;
      }
      sum = group_sum<32>(sum);
      __syncwarp();  // every lane has read m_s[qi] before lane 0 replaces it
      if (lane == 0) {
        const float alpha = m_new == neg_inf() ? 1.f : exp2f(m_old - m_new);
        a_s[qi] = alpha;
        l_s[qi] = l_s[qi] * alpha + sum;
        m_s[qi] = m_new;
      }
    }
    __syncthreads();

    // o_lat += P · latent over this thread's share of the rows.
    if (pv_active) {
#pragma unroll
      for (int qi = 0; qi < kQ; ++qi) {
        const float alpha = a_s[qi];
#pragma unroll
        for (int e = 0; e < kMlaPvVec; ++e) acc[qi][e] *= alpha;
      }
      for (int k = pv_phase; k < rows; k += kKh) {
        float x[kMlaPvVec];
        load_floats<T, kMlaPvVec>(rows_s + k * kStride + pv_col, x);
        const float4* pk = reinterpret_cast<const float4*>(p_s + k * kQP);
#pragma unroll
        for (int f = 0; f < kQP / 4; ++f) {
          const float4 p4 = pk[f];
          const float pf[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (4 * f + u < kQ) {
#pragma unroll
              for (int e = 0; e < kMlaPvVec; ++e) acc[4 * f + u][e] += pf[u] * x[e];
            }
          }
        }
      }
    }
    __syncthreads();  // before the buffer and p_s are written again
  }

  // The shares of the rows summed into o_s (the queries are not read again).
  float* o_s = q_s;  // [kQ][kC]
#pragma unroll 1
  for (int ph = 0; ph < kKh; ++ph) {
    if (pv_active && pv_phase == ph) {
#pragma unroll
      for (int qi = 0; qi < kQ; ++qi) {
#pragma unroll
        for (int e = 0; e < kMlaPvVec; ++e) {
          float* o = o_s + qi * kC + pv_col + e;
          *o = (ph == 0 ? 0.f : *o) + acc[qi][e];
        }
      }
    }
    __syncthreads();
  }
  float* rec =
      partials +
      ((static_cast<long long>(blockIdx.z) * gridDim.y + group) * splits + split) * kQ * (kC + 4);
  for (int i = threadIdx.x; i < kQ * kC; i += kThreads) {
    rec[(i / kC) * (kC + 4) + i % kC] = o_s[i];
  }
  for (int qi = threadIdx.x; qi < kQ; qi += kThreads) {
    rec[qi * (kC + 4) + kC] = m_s[qi];
    rec[qi * (kC + 4) + kC + 1] = l_s[qi];
  }
}

// The split-KV records of query (t, h) of a sequence, as mla_attend_split_kv (packed 0: token
// tiles of tokens_per_cta, head groups of heads_per_cta) or mla_attend_split_kv_mma (packed 1:
// tiles of kMlaMmaRows (token, head) pairs r = t · heads + h) write them: the record of split s
// is `first + s · queries` of the sequence's block, and the tile's tokens are first_token ...
// last_token.
struct MlaRecordSlot {
  long long first = 0;  // record of split 0, counted from the first of sequence 0
  int queries = 0;      // records of one split of the tile
  int first_token = 0, last_token = 0;
};

__device__ __forceinline__ MlaRecordSlot mla_record_slot(int b, int t, int h, int tokens, int heads,
                                                         int heads_per_cta, int tokens_per_cta,
                                                         int packed, int splits) {
  MlaRecordSlot slot;
  int tiles, groups, tile, group, qi;
  if (packed) {
    const int r = t * heads + h;
    tiles = (tokens * heads + kMlaMmaRows - 1) / kMlaMmaRows;
    groups = 1;
    tile = r / kMlaMmaRows;
    group = 0;
    qi = r % kMlaMmaRows;
    slot.queries = kMlaMmaRows;
    slot.first_token = tile * kMlaMmaRows / heads;
    slot.last_token = (min(tokens * heads, (tile + 1) * kMlaMmaRows) - 1) / heads;
  } else {
    tiles = (tokens + tokens_per_cta - 1) / tokens_per_cta;
    groups = (heads + heads_per_cta - 1) / heads_per_cta;
    tile = t / tokens_per_cta;
    group = h / heads_per_cta;
    qi = (t % tokens_per_cta) * heads_per_cta + h % heads_per_cta;
    slot.queries = heads_per_cta * tokens_per_cta;
    slot.first_token = tile * tokens_per_cta;
    slot.last_token = min(tokens, (tile + 1) * tokens_per_cta) - 1;
  }
  slot.first = ((static_cast<long long>(b) * tiles + tile) * groups + group) * splits *
                   static_cast<long long>(slot.queries) +
               qi;
  return slot;
}

// partials: the records of mla_attend_split_kv (packed 0) or mla_attend_split_kv_mma (packed
// 1), written with the same heads_per_cta, tokens_per_cta, kv_chunk and splits; w_kv_b as
// mla_absorb_q's; out: contiguous [batch · tokens, heads, v_dim].
//
// CTA (x, h, z) writes features [rows_per_cta · x, ...) of head h for tokens bt in
// [4 z, 4 z + 4). Before the dependency wait it copies its W_V rows into shared memory (the
// weight never depends on an earlier kernel). Then each thread merges four latent columns of
// one token over the splits that wrote (those with a chunk at or below the tile's largest
// valid position, read from the positions as the attention kernels read them) with
// log-sum-exp weights, every split's (max, sum) and columns loaded together in batches of
// kMlaCombineBatch (the first batch with the positions), into the normalized o_lat in shared
// memory. Each warp then takes every
// (kMlaCombineThreads / 32)-th feature row, lanes across the row, each row against every token.
// Launch: grid (ceil(v_dim / rows_per_cta), heads, ceil(batch · tokens / kMlaCombineTokens)),
// block kMlaCombineThreads, dynamic shared memory MlaCombineSharedBytes(kC, rows_per_cta,
// sizeof(W)).
// REQUIRES: kC % 8 == 0; w_kv_b aligned to 16 bytes; rows_per_cta <= kMlaCombineMaxRows.
template <typename T, typename W, int kC>
__global__ void __launch_bounds__(kMlaCombineThreads)
    mla_combine_project(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MLA_COMBINE_PARAMS)) {
  constexpr int kWVec = 16 / static_cast<int>(sizeof(W));
  constexpr int kWarps = kMlaCombineThreads / 32;
  constexpr int kRowVecs = kC / kWVec;  // 16-byte vectors of a weight row
  constexpr int kQuads = kC / 4;        // four-column items of a token's merge
  constexpr long long kRecord = kC + 4;
  static_assert(kC % 8 == 0, "latent dim");
  const int h = blockIdx.y;
  const int v0 = blockIdx.x * rows_per_cta;
  const int bt0 = blockIdx.z * kMlaCombineTokens;
  const int total = batch * tokens;
  const int rows = min(rows_per_cta, v_dim - v0);
  extern __shared__ __align__(16) unsigned char combine_smem[];
  float* o_s = reinterpret_cast<float*>(combine_smem);  // [kMlaCombineTokens][kC]
  W* w_s = reinterpret_cast<W*>(combine_smem + kMlaCombineTokens * kC * 4);  // [rows][kC]
  {
    const W* w_v = w_kv_b + (static_cast<long long>(h) * (nope_dim + v_dim) + nope_dim + v0) * kC;
    for (int i = threadIdx.x; i < rows * kRowVecs; i += kMlaCombineThreads) {
      cp_async_16(w_s + i * kWVec, w_v + static_cast<long long>(i) * kWVec, true);
    }
    cp_async_commit();
  }
  grid_dependency_sync();
  for (int i = threadIdx.x; i < kMlaCombineTokens * kQuads; i += kMlaCombineThreads) {
    const int k = i / kQuads, c = (i % kQuads) * 4;
    const int bt = bt0 + k;
    float mx = neg_inf(), denom = 0.f;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (bt < total) {
      const int b = bt / tokens, t = bt % tokens;
      const MlaRecordSlot slot =
          mla_record_slot(b, t, h, tokens, heads, heads_per_cta, tokens_per_cta, packed, splits);
      float2 ml[kMlaCombineBatch];
      float4 x[kMlaCombineBatch];
      // Splits s0 ... s0 + kMlaCombineBatch - 1 (clamped to `last`): max, sum and columns.
      auto load_batch = [&](int s0, int last) {
#pragma unroll
        for (int u = 0; u < kMlaCombineBatch; ++u) {
          const float* rec =
              partials +
              (slot.first + static_cast<long long>(min(s0 + u, last)) * slot.queries) * kRecord;
          ml[u] = *reinterpret_cast<const float2*>(rec + kC);
          x[u] = *reinterpret_cast<const float4*>(rec + c);
        }
      };
      // The first batch loads with the positions, before they tell which splits wrote (a
      // record past those holds stale data, which the merge never reads).
      load_batch(0, splits - 1);
      int hi = -1;
      for (int u = slot.first_token; u <= slot.last_token; ++u) {
        const int p = positions[b * tokens + u];
        if (p >= 0 && p < capacity) hi = max(hi, p);
      }
      const int used = hi < 0 ? 0 : min(splits, hi / kv_chunk + 1);
      for (int s0 = 0; s0 < used; s0 += kMlaCombineBatch) {
        if (s0 > 0) load_batch(s0, used - 1);
        float m_new = mx;
#pragma unroll
        for (int u = 0; u < kMlaCombineBatch; ++u) {
          if (s0 + u < used) m_new = fmaxf(m_new, ml[u].x);
        }
        if (m_new == neg_inf()) continue;         // no split so far saw a row of this query
        const float rescale = exp2f(mx - m_new);  // 0 while mx is -inf
        denom *= rescale;
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] *= rescale;
#pragma unroll
        for (int u = 0; u < kMlaCombineBatch; ++u) {
          if (s0 + u >= used) continue;
          const float w = exp2f(ml[u].x - m_new);  // 0 for a split that saw no row of it
          denom += w * ml[u].y;
          acc[0] += w * x[u].x;
          acc[1] += w * x[u].y;
          acc[2] += w * x[u].z;
          acc[3] += w * x[u].w;
        }
        mx = m_new;
      }
    }
    const float inv = denom > 0.f ? 1.f / denom : 0.f;
    *reinterpret_cast<float4*>(o_s + k * kC + c) =
        make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
  }
  cp_async_wait<0>();
  __syncthreads();  // o_lat and the weight rows visible

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll 1
  for (int rr = warp; rr < rows; rr += kWarps) {
    const W* w_row = w_s + rr * kC;
    float dot[kMlaCombineTokens];
#pragma unroll
    for (int k = 0; k < kMlaCombineTokens; ++k) dot[k] = 0.f;
    for (int c = lane * kWVec; c < kC; c += 32 * kWVec) {
      float w[kWVec];
      load_floats<W, kWVec>(w_row + c, w);
#pragma unroll
      for (int k = 0; k < kMlaCombineTokens; ++k) {
        const float4* o4 = reinterpret_cast<const float4*>(o_s + k * kC + c);
#pragma unroll
        for (int f = 0; f < kWVec / 4; ++f) {
          const float4 ov = o4[f];
          dot[k] +=
              w[4 * f] * ov.x + w[4 * f + 1] * ov.y + w[4 * f + 2] * ov.z + w[4 * f + 3] * ov.w;
        }
      }
    }
    float mine = 0.f;
#pragma unroll
    for (int k = 0; k < kMlaCombineTokens; ++k) {
      dot[k] = group_sum<32>(dot[k]);
      if (lane == k) mine = dot[k];
    }
    if (lane < kMlaCombineTokens && bt0 + lane < total) {
      out[(static_cast<long long>(bt0 + lane) * heads + h) * v_dim + v0 + rr] = from_float<T>(mine);
    }
  }
}

}  // namespace tileplan
