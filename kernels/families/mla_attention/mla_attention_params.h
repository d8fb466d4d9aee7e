// The parameters of the mla_attention kernels, declared once for the templates (NVRTC) and
// the host launcher (kernels/core/kernel_params.h): each TILEPLAN_..._PARAMS list is the
// signature of the kernel named above it, entry by entry (host type, kernel type, name), and
// each struct below is what the host fills. The constants and the shared-memory layout of
// mla_attend_split_kv below are read by both sides too, so the launch sizes exactly what the
// kernel addresses.
#pragma once

#ifdef __CUDACC_RTC__
#include "kernel_params.h"
#define TILEPLAN_MLA_HOST_DEVICE __host__ __device__
#else
#include "kernels/core/kernel_params.h"
#define TILEPLAN_MLA_HOST_DEVICE
#endif

// mla_absorb_q: q_lat[bt, h, c] = log2e_scale · Σ_d q_nope[bt, h, d] · w_kv_b[h·(Dn+Dv) + d, c]
// in Q (float for mla_attend_split_kv, T for mla_attend_split_kv_mma); rows of kC + rope_dim
// elements, the last rope_dim being log2e_scale · q_rope[bt, h, :] (rope_dim 0: rows of kC,
// q_rope unread). The entries from `positions` on serve the fused form (mla_kv_write_attention,
// see mla_absorb_q) and are unread, null or zero, otherwise: q_rope is then rotated at
// positions[bt] by inv_freq and attention_factor (into q_rope_out, [tokens, heads, Dr] in T,
// when not null), and the token's kv_a row (latent, then rope key) is normalized by `norm`
// (of the fusion's norm type) and rotated into row positions[bt] of both caches (seq_tokens
// new tokens per sequence).
#define TILEPLAN_MLA_ABSORB_Q_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, q_nope) \
  NEXT(long long, long long, q_nope_token_stride) \
  NEXT(long long, long long, q_nope_head_stride) \
  NEXT(const void*, const T* __restrict__, q_rope) \
  NEXT(long long, long long, q_rope_token_stride) \
  NEXT(long long, long long, q_rope_head_stride) \
  NEXT(const void*, const W* __restrict__, w_kv_b) \
  NEXT(void*, Q* __restrict__, q_lat) \
  NEXT(int, int, tokens) \
  NEXT(int, int, heads) \
  NEXT(int, int, nope_dim) \
  NEXT(int, int, v_dim) \
  NEXT(int, int, rope_dim) \
  NEXT(float, float, log2e_scale) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const float*, const float* __restrict__, inv_freq) \
  NEXT(float, float, attention_factor) \
  NEXT(void*, T* __restrict__, q_rope_out) \
  NEXT(const void*, const T* __restrict__, kv_a) \
  NEXT(long long, long long, kv_a_stride) \
  NEXT(const void*, const void* __restrict__, norm) \
  NEXT(float, float, eps) \
  NEXT(void*, T* __restrict__, latent_cache) \
  NEXT(void*, T* __restrict__, rope_cache) \
  NEXT(int, int, seq_tokens) \
  NEXT(int, int, capacity) \
  NEXT(int*, int*, error)

// mla_attend_split_kv
#define TILEPLAN_MLA_ATTEND_PARAMS(FIRST, NEXT) \
  FIRST(const float*, const float* __restrict__, q_lat) \
  NEXT(const void*, const T* __restrict__, q_rope) \
  NEXT(long long, long long, q_rope_token_stride) \
  NEXT(long long, long long, q_rope_head_stride) \
  NEXT(const void*, const T* __restrict__, latent_cache) \
  NEXT(const void*, const T* __restrict__, rope_cache) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(float*, float* __restrict__, partials) \
  NEXT(int, int, tokens) \
  NEXT(int, int, heads) \
  NEXT(int, int, capacity) \
  NEXT(float, float, log2e_scale) \
  NEXT(int*, int*, error)

// mla_attend_split_kv_mma: the queries q [B·T, heads, kC + kDr] from mla_absorb_q (Q = T)
#define TILEPLAN_MLA_ATTEND_MMA_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, q) \
  NEXT(const void*, const T* __restrict__, latent_cache) \
  NEXT(const void*, const T* __restrict__, rope_cache) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(float*, float* __restrict__, partials) \
  NEXT(int, int, tokens) \
  NEXT(int, int, heads) \
  NEXT(int, int, capacity) \
  NEXT(int*, int*, error)

// mla_combine_project: `packed` 1 for the records of mla_attend_split_kv_mma (16-row tiles of
// (token, head) pairs; heads_per_cta and tokens_per_cta unused), 0 for those of
// mla_attend_split_kv.
#define TILEPLAN_MLA_COMBINE_PARAMS(FIRST, NEXT) \
  FIRST(const float*, const float* __restrict__, partials) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const void*, const W* __restrict__, w_kv_b) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(int, int, batch) \
  NEXT(int, int, tokens) \
  NEXT(int, int, heads) \
  NEXT(int, int, nope_dim) \
  NEXT(int, int, v_dim) \
  NEXT(int, int, capacity) \
  NEXT(int, int, heads_per_cta) \
  NEXT(int, int, tokens_per_cta) \
  NEXT(int, int, packed) \
  NEXT(int, int, kv_chunk) \
  NEXT(int, int, splits) \
  NEXT(int, int, rows_per_cta)

// mla_expand_kv (mla_attention_prefill.cuh): x[b, j, f] = Σ_c latent_cache[b, 0, j, c] ·
// w_kv_b[f, c] for f < n = heads · (Dn + Dv), every row j up to sequence b's largest valid
// position, stored as kv = round(x) and kv_lo = round(x - kv)
#define TILEPLAN_MLA_EXPAND_KV_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, latent_cache) \
  NEXT(const void*, const T* __restrict__, w_kv_b) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(void*, T* __restrict__, kv) \
  NEXT(void*, T* __restrict__, kv_lo) \
  NEXT(int, int, tokens) \
  NEXT(int, int, capacity) \
  NEXT(int, int, n)

// mla_prefill_flash (mla_attention_prefill.cuh): attention of [q_nope | q_rope] over the
// expanded keys [kv nope part | rope_cache] and values (kv's value part)
#define TILEPLAN_MLA_PREFILL_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, q_nope) \
  NEXT(long long, long long, q_nope_token_stride) \
  NEXT(long long, long long, q_nope_head_stride) \
  NEXT(const void*, const T* __restrict__, q_rope) \
  NEXT(long long, long long, q_rope_token_stride) \
  NEXT(long long, long long, q_rope_head_stride) \
  NEXT(const void*, const T* __restrict__, kv) \
  NEXT(const void*, const T* __restrict__, kv_lo) \
  NEXT(const void*, const T* __restrict__, rope_cache) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(int, int, tokens) \
  NEXT(int, int, heads) \
  NEXT(int, int, capacity) \
  NEXT(float, float, log2e_scale) \
  NEXT(int*, int*, error)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(MlaAbsorbQParams, TILEPLAN_MLA_ABSORB_Q_PARAMS)
TILEPLAN_PARAMS_STRUCT(MlaAttendParams, TILEPLAN_MLA_ATTEND_PARAMS)
TILEPLAN_PARAMS_STRUCT(MlaAttendMmaParams, TILEPLAN_MLA_ATTEND_MMA_PARAMS)
TILEPLAN_PARAMS_STRUCT(MlaCombineParams, TILEPLAN_MLA_COMBINE_PARAMS)
TILEPLAN_PARAMS_STRUCT(MlaExpandKvParams, TILEPLAN_MLA_EXPAND_KV_PARAMS)
TILEPLAN_PARAMS_STRUCT(MlaPrefillParams, TILEPLAN_MLA_PREFILL_PARAMS)

// mla_expand_kv stages the latent and weight rows kMlaExpandSlice elements (128 bytes in
// bf16) of C at a time; its dynamic shared memory is `stages` slices of tile_m latent rows and
// tile_n weight rows.
constexpr int kMlaExpandSlice = 64;
TILEPLAN_MLA_HOST_DEVICE constexpr long long MlaExpandSharedBytes(int tile_m, int tile_n,
                                                                  int stages, int element_bytes) {
  return static_cast<long long>(stages) * (tile_m + tile_n) * kMlaExpandSlice * element_bytes;
}
// mla_prefill_flash's dynamic shared memory: the query tile [tile_q][QK] and `stages` key
// tiles [tile_kv][QK] and value tiles [tile_kv][Dv], each dim padded to 16 (QK = 2 · Dn + Dr:
// the nope part twice, for the keys' two parts).
TILEPLAN_MLA_HOST_DEVICE constexpr long long MlaPrefillSharedBytes(int qk_dim, int v_dim,
                                                                   int tile_q, int tile_kv,
                                                                   int stages, int element_bytes) {
  const long long qk = (qk_dim + 15) / 16 * 16, v = (v_dim + 15) / 16 * 16;
  return (tile_q * qk + static_cast<long long>(stages) * tile_kv * (qk + v)) * element_bytes;
}

// mla_absorb_q: a CTA of kMlaAbsorbThreads computes kMlaAbsorbCols latent columns of one head
// for kMlaAbsorbTokens tokens, kMlaAbsorbPass tokens at a time; each thread holds its first
// kMlaAbsorbHeld weight rows in registers.
constexpr int kMlaAbsorbThreads = 256;
constexpr int kMlaAbsorbCols = 64;
constexpr int kMlaAbsorbTokens = 16;
constexpr int kMlaAbsorbPass = 4;
constexpr int kMlaAbsorbHeld = 4;
// Its dynamic shared memory: the tokens' q_nope rows and the per-warp column sums, in floats.
TILEPLAN_MLA_HOST_DEVICE constexpr long long MlaAbsorbSharedBytes(int nope_dim) {
  return (static_cast<long long>(kMlaAbsorbTokens) * nope_dim +
          (kMlaAbsorbThreads / 32) * kMlaAbsorbPass * kMlaAbsorbCols) *
         4;
}

// mla_attend_split_kv: at most kMlaMaxQueries (token, head) queries per CTA, at most
// kMlaMaxSplits splits of the keys; a record of partial results is kC + 4 floats (the
// unnormalized latent output, the running max and sum, padding to 16 bytes).
constexpr int kMlaMaxQueries = 16;
constexpr int kMlaMaxSplits = 128;
constexpr int kMlaPvVec = 4;  // latent dims per thread in the P·latent product

// mla_combine_project: a CTA of kMlaCombineThreads writes rows_per_cta (a multiple of its
// warps, at most kMlaCombineMaxRows) output features of one head for kMlaCombineTokens tokens.
// Its dynamic shared memory: the tokens' merged latent outputs [kMlaCombineTokens][C] in
// float32, then the CTA's W_V rows [rows][C] in the weight's type.
constexpr int kMlaCombineThreads = 256;
constexpr int kMlaCombineTokens = 4;
constexpr int kMlaCombineMinRows = kMlaCombineThreads / 32;
constexpr int kMlaCombineMaxRows = 64;
constexpr int kMlaCombineBatch = 8;  // splits merged with their loads in flight together
TILEPLAN_MLA_HOST_DEVICE constexpr long long MlaCombineSharedBytes(int latent_dim, int rows,
                                                                   int weight_bytes) {
  return static_cast<long long>(kMlaCombineTokens) * latent_dim * 4 +
         static_cast<long long>(rows) * latent_dim * weight_bytes;
}

// mla_attend_split_kv_mma: a CTA's kMlaMmaRows query rows are the M of mma.sync.m16n8k16:
// (token, head) pairs r = t · heads + h of one sequence, 16 consecutive ones per tile.
constexpr int kMlaMmaRows = 16;

// The dynamic shared memory of mla_attend_split_kv_mma, in bytes from its start: two stages
// of kv_chunk cache rows [latent | rope] and the kMlaMmaRows query rows (all in T, rows of
// MlaMmaRowElems elements, 16-byte chunks XOR-swizzled by the row), the chunk's probabilities [kMlaMmaRows][kv_chunk] in T
// (swizzled too), and one float per warp and query row (the warps' row maxima, at the end
// their row sums).
// Its cache and query rows in shared memory: C + Dr elements rounded up to the mma k-step.
TILEPLAN_MLA_HOST_DEVICE constexpr int MlaMmaRowElems(int latent_dim, int rope_dim) {
  return (latent_dim + rope_dim + 15) / 16 * 16;
}

struct MlaMmaLayout {
  long long q_offset = 0, p_offset = 0, red_offset = 0, total = 0;
};

TILEPLAN_MLA_HOST_DEVICE constexpr MlaMmaLayout MlaMmaLayoutFor(int element_bytes, int latent_dim,
                                                                int rope_dim, int kv_chunk,
                                                                int warps) {
  MlaMmaLayout l;
  const long long row_bytes =
      static_cast<long long>(MlaMmaRowElems(latent_dim, rope_dim)) * element_bytes;
  l.q_offset = 2LL * kv_chunk * row_bytes;
  l.p_offset = l.q_offset + kMlaMmaRows * row_bytes;
  l.red_offset = l.p_offset + static_cast<long long>(kMlaMmaRows) * kv_chunk * element_bytes;
  l.total = l.red_offset + static_cast<long long>(warps) * kMlaMmaRows * 4;
  return l;
}

// The dynamic shared memory of mla_attend_split_kv, in bytes from its start: two buffers of
// kv_chunk cache rows ([latent | rope] in the cache's element type, rows padded to
// `row_stride` 16-byte vectors so that the score reads are free of bank conflicts), the
// queries in float32 ([queries][C + Dr]; later the CTA's latent outputs [queries][C]), the
// chunk's scores and probabilities ([kv_chunk][queries_padded]) and the running max, sum and
// rescale factor of every query.
struct MlaAttendLayout {
  int row_vecs = 0;    // 16-byte vectors of a cache row: (C + Dr) · element size / 16
  int row_stride = 0;  // 16-byte vectors from one row to the next in shared memory
  int queries = 0;
  int queries_padded = 0;  // a multiple of 4
  long long q_offset = 0, p_offset = 0, stats_offset = 0, total = 0;
};

// REQUIRES: (latent_dim + rope_dim) · element_bytes a multiple of 16; threads / kv_chunk a
// power of two (the lanes that share a row in the score phase).
TILEPLAN_MLA_HOST_DEVICE constexpr MlaAttendLayout MlaAttendLayoutFor(int element_bytes,
                                                                      int latent_dim, int rope_dim,
                                                                      int queries, int kv_chunk,
                                                                      int threads) {
  MlaAttendLayout l;
  l.row_vecs = (latent_dim + rope_dim) * element_bytes / 16;
  // kR lanes read consecutive vectors of one row and the next kR lanes the next row: a row
  // stride of min(kR, 8) (mod 8) vectors puts the 8 lanes of a quarter warp on 8 distinct
  // 16-byte bank groups.
  const int lanes = threads / kv_chunk;
  const int target = (lanes < 8 ? lanes : 8) % 8;
  l.row_stride = l.row_vecs + ((target - l.row_vecs % 8) % 8 + 8) % 8;
  l.queries = queries;
  l.queries_padded = (queries + 3) / 4 * 4;
  const long long kv_bytes = 2LL * kv_chunk * l.row_stride * 16;
  l.q_offset = kv_bytes;
  l.p_offset = l.q_offset + static_cast<long long>(queries) * (latent_dim + rope_dim) * 4;
  l.stats_offset = l.p_offset + static_cast<long long>(kv_chunk) * l.queries_padded * 4;
  l.total = l.stats_offset + 3LL * l.queries_padded * 4;
  return l;
}

}  // namespace tileplan
