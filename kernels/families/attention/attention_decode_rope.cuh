// Decode attention fused with the RoPE + KV-cache write that prepares it
// (qk_norm_rope_kv_write_attention, rope_kv_write_attention):
//   q, k, v = the heads of the packed qkv row of each new token
//   cache rows positions[b, t] of kv head h receive rope(norm(k)) and v
//   out = attention(rope(norm(q)), caches, positions)     (norm only with kNorm)
// in one launch with the grid of attention_decode_split_kv.cuh: CTA (s, y, b) already
// serves its part of the query heads of kv head kvh of sequence b, so it builds those queries
// itself (normalized and rotated in float32, never rounded to T), and every CTA whose cache
// chunks contain a new token's row writes that token's k and v rows of kv head kvh before it
// reads its chunks. Only the CTAs of that split read those rows (each row belongs to one
// chunk and each chunk to one split): with head_split > 1 they are the parts of one kv head,
// each writing the same bytes (the same computation on the same inputs), so whichever write a
// read meets it sees the updated row; a __syncthreads makes the block's own writes visible to
// the block, so the attention that follows is exactly the split-KV body.
//
// The prologue is warp work items: the Q = tokens * group queries of the CTA, then one item
// per token (its k and v rows, written only by the owning CTA). Positions and qkv heads are
// loaded by each item first thing, and the positions of the key ranges by the first threads
// before the items, so no load waits on another. RoPE is rope_kv_write.cuh's (host-computed
// inv_freq, sincosf of p * inv_freq[i] in float32, cos and sin times attention_factor; the
// rotate-half pairs, or with kInterleaved the pairs (x[2i], x[2i + 1])).
//
// Positions outside [0, capacity) follow rope_kv_write's contract for the cache writes: with
// `error` non-null the token writes nothing and CTA (0, 0, b) raises *error to at least
// bt + 1; with `error` null the kernel traps. Such a token's output row is zero, as in
// attention_decode_split_kv. Two new tokens of a sequence at one position: the later one's
// rows are written (kv_write's order).
#pragma once

#include "attention_decode_split_kv.cuh"
#include "attention_params.h"
#include "primitives.cuh"
#include "rope_kv_write.cuh"

namespace tileplan {

// qkv: token bt's row of (q_heads + 2 kv_heads) * kHeadDim elements at qkv + bt * qkv_stride
// (q heads, then k heads, then v heads); q_norm, k_norm: [kHeadDim] weights (kNorm; else
// null), eps their epsilon; inv_freq: kHeadDim / 2 floats, attention_factor the factor of cos
// and sin; caches: [batch, kv_heads, capacity, kHeadDim], updated in place; out, workspace,
// counters as attention_decode_split_kv.
//
// Launch: grid (kSplits, kv_heads * head_split, batch), block 32 * kWarps, dynamic shared
// memory as attention_decode_split_kv's (its kStages tiles, and with kCluster its clusters and
// inbox, included), Q = tokens * q_heads /
// kv_heads / head_split (head_split a divisor of the group).
// REQUIRES: tokens <= 16; q_heads % kv_heads == 0; kHeadDim a multiple of 16 / sizeof(T)
// and <= 256; kRopeVec divides kHeadDim / 2, and kRopeVec (2 * kRopeVec with kInterleaved)
// divides qkv_stride and qkv's offset (rope_kv_write's vector); caches and out aligned to 16
// bytes.
template <typename T, typename W, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, int kRopeVec, bool kNorm, bool kInterleaved, bool kMma, bool kCluster>
__device__ __forceinline__ void attention_decode_rope_prefetch(
    const Cta& cta, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS)) {
  prefetch_first_chunk<T, kHeadDim, kKvChunk>(cta, k_cache, v_cache, positions, tokens, kv_heads,
                                              capacity);
}

template <typename T, typename W, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, int kRopeVec, bool kNorm, bool kInterleaved, bool kMma, bool kCluster>
__device__ __forceinline__ void attention_decode_rope_body(
    const Cta& this_cta, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS)) {
  extern __shared__ float smem[];
  __shared__ int s_first[kDecodeMaxTokens], s_last[kDecodeMaxTokens];

  const SplitKvCta cta(this_cta, tokens, q_heads, kv_heads);
  const int split = cta.split, kvh = cta.kvh, b = cta.b, group = cta.group, num_q = cta.num_q;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float* q_s = smem;  // [num_q][kHeadDim], rotated and scaled

  const int p_own = threadIdx.x < tokens ? positions[b * tokens + threadIdx.x] : 0;
  const float log2e_scale = scale * kLog2e;
  for (int item = warp; item < num_q + tokens; item += kWarps) {
    if (item < num_q) {
      const int t = item / group, g = item % group;
      const long long bt = static_cast<long long>(b) * tokens + t;
      float* dst = q_s + item * kHeadDim;
      rope_head_apply<T, W, kHeadDim, kRopeVec, kNorm, kInterleaved>(
          qkv + bt * qkv_stride + (cta.head0 + g) * kHeadDim, inv_freq, positions[bt],
          attention_factor, q_norm, eps, lane,
          [dst, log2e_scale](int i, const float(&lo)[kRopeVec], const float(&hi)[kRopeVec]) {
#pragma unroll
            for (int e = 0; e < kRopeVec; ++e) {
              dst[rope_first<kHeadDim, kInterleaved>(i + e)] = lo[e] * log2e_scale;
              dst[rope_second<kHeadDim, kInterleaved>(i + e)] = hi[e] * log2e_scale;
            }
          });
      continue;
    }
    const int t = item - num_q;
    const int bt = b * tokens + t;
    const int p = checked_cache_position(positions[bt], bt, capacity, error,
                                         lane == 0 && split == 0 && kvh == 0 && cta.part == 0);
    if (p < 0 || (p / kKvChunk) % kSplits != split) continue;
    bool overwritten = false;
    for (int later = t + 1; later < tokens; ++later) {
      overwritten = overwritten || positions[b * tokens + later] == p;
    }
    if (overwritten) continue;
    const T* row = qkv + static_cast<long long>(bt) * qkv_stride;
    const long long cache_row =
        ((static_cast<long long>(b) * kv_heads + kvh) * capacity + p) * kHeadDim;
    rope_head<T, W, kHeadDim, kRopeVec, kNorm, kInterleaved>(row + (q_heads + kvh) * kHeadDim,
                                                             k_cache + cache_row, inv_freq, p,
                                                             attention_factor, k_norm, eps, lane);
    copy_head<T, kHeadDim, kRopeVec>(row + (q_heads + kv_heads + kvh) * kHeadDim,
                                     v_cache + cache_row, lane);
    // The streamed body reads the rows by cp.async, which goes to L2 past this SM's L1:
    // the rows are made visible there before the __syncthreads below.
    if constexpr (kStages > 1 && !kMma) __threadfence();
  }
  if (threadIdx.x < tokens) {
    decode_key_range(p_own, capacity, window, s_first[threadIdx.x], s_last[threadIdx.x]);
  }
  __syncthreads();  // q_s, the key ranges and this block's cache rows are visible
  split_kv_attend<T, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages, kMma, kCluster>(
      q_s, smem + num_q * kHeadDim, s_first, s_last, k_cache, v_cache, out, workspace, counters,
      cta, tokens, q_heads, kv_heads, capacity);
}

template <typename T, typename W, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, int kRopeVec, bool kNorm, bool kInterleaved, bool kMma, bool kCluster>
__global__ void __launch_bounds__(kWarps * 32)
    attention_decode_rope(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS)) {
  const Cta cta = this_cta();
  attention_decode_rope_prefetch<T, W, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages,
                                 kRopeVec, kNorm, kInterleaved, kMma, kCluster>(
      cta, TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS));
  grid_dependency_sync();
  attention_decode_rope_body<T, W, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages, kRopeVec,
                             kNorm, kInterleaved, kMma, kCluster>(
      cta, TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS));
}

// attention_decode_rope as a task of the persistent kernel (which launches no clusters).
template <typename T, typename W, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, int kRopeVec, bool kNorm, bool kInterleaved, bool kMma, bool kCluster>
struct attention_decode_rope_task {
  static_assert(!kCluster, "the persistent kernel's tasks run without clusters");
  TILEPLAN_KERNEL_TASK(
      TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS,
      (attention_decode_rope_prefetch<T, W, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages,
                                      kRopeVec, kNorm, kInterleaved, kMma, kCluster>),
      (attention_decode_rope_body<T, W, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages,
                                  kRopeVec, kNorm, kInterleaved, kMma, kCluster>))
};

}  // namespace tileplan
