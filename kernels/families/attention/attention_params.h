// The parameters of the attention kernels, declared once for the templates (NVRTC) and the
// host launcher (kernels/core/kernel_params.h): each TILEPLAN_..._PARAMS list is the signature
// of the kernels named above it, entry by entry (host type, kernel type, name), and each
// struct below is what the host fills; the launch passes a struct's fields as the kernel's
// parameters, so the host cannot drift from the kernel.
#pragma once

#ifdef __CUDACC_RTC__
#include "kernel_params.h"
#else
#include "kernels/core/kernel_params.h"
#endif

// attention_decode_split_kv, attention_prefill_flash
#define TILEPLAN_ATTENTION_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, q) \
  NEXT(long long, long long, q_stride) \
  NEXT(const void*, const T* __restrict__, k_cache) \
  NEXT(const void*, const T* __restrict__, v_cache) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(float*, float* __restrict__, workspace) \
  NEXT(unsigned int*, unsigned int* __restrict__, counters) \
  NEXT(int, int, tokens) \
  NEXT(int, int, q_heads) \
  NEXT(int, int, kv_heads) \
  NEXT(int, int, capacity) \
  NEXT(float, float, scale) \
  NEXT(int, int, window)

// attention_decode_rope
#define TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, qkv) \
  NEXT(long long, long long, qkv_stride) \
  NEXT(const void*, const W* __restrict__, q_norm) \
  NEXT(const void*, const W* __restrict__, k_norm) \
  NEXT(float, float, eps) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const float*, const float* __restrict__, inv_freq) \
  NEXT(float, float, attention_factor) \
  NEXT(void*, T*, k_cache) \
  NEXT(void*, T*, v_cache) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(float*, float* __restrict__, workspace) \
  NEXT(unsigned int*, unsigned int* __restrict__, counters) \
  NEXT(int, int, tokens) \
  NEXT(int, int, q_heads) \
  NEXT(int, int, kv_heads) \
  NEXT(int, int, capacity) \
  NEXT(float, float, scale) \
  NEXT(int, int, window) \
  NEXT(int*, int*, error)

#ifdef __CUDACC_RTC__
#define TILEPLAN_ATTENTION_SHARED_ __host__ __device__
#else
#define TILEPLAN_ATTENTION_SHARED_
#endif

namespace tileplan {

// The streamed split-KV body's shared-memory layout (attention_decode_split_kv, kStages >= 2),
// computed here once for the kernel and for the host that sizes its dynamic shared memory.
// Rows per tile: 8 KiB of K (and as much of V) rounded down to a power of two, at most a chunk.
TILEPLAN_ATTENTION_SHARED_ constexpr int SplitKvTileRows(int head_dim, int element_bytes,
                                                         int kv_chunk) {
  int rows = 1;
  while (2 * rows * head_dim * element_bytes <= 8192 && 2 * rows <= kv_chunk) rows *= 2;
  return rows;
}

// Bytes of every split-KV body's shared memory: a CTA's num_q queries in float and each
// warp's (accumulator, max, sum) per query.
TILEPLAN_ATTENTION_SHARED_ constexpr int SplitKvPartialsBytes(int num_q, int head_dim,
                                                              int warps) {
  return (num_q * head_dim + warps * num_q * (head_dim + 2)) * 4;
}

// Where the streamed tiles start: after the partials, rounded up to 16 bytes for cp.async.
TILEPLAN_ATTENTION_SHARED_ constexpr int SplitKvTilesOffset(int num_q, int head_dim, int warps) {
  return (SplitKvPartialsBytes(num_q, head_dim, warps) + 15) / 16 * 16;
}

// Bytes of the body's shared memory before the cluster merge's inbox: the partials, and with
// `streamed_stages` >= 2 (the CUDA-core walk's streamed rows) the tiles after them.
TILEPLAN_ATTENTION_SHARED_ constexpr int SplitKvBodyBytes(int num_q, int head_dim, int warps,
                                                          int streamed_stages, int element_bytes,
                                                          int kv_chunk) {
  return streamed_stages < 2
             ? SplitKvPartialsBytes(num_q, head_dim, warps)
             : SplitKvTilesOffset(num_q, head_dim, warps) +
                   streamed_stages * 2 * SplitKvTileRows(head_dim, element_bytes, kv_chunk) *
                       head_dim * element_bytes;
}

// The cluster merge's inbox (a split-KV grid whose `splits` CTAs of a (b, kv head, part) form
// one thread-block cluster): the output's 4-dim items (num_q * head_dim / 4) are dealt to the
// CTAs in turn, and each CTA receives, from every split, the float4 of each of its items, then
// every query's (max, sum) as a float4. It starts at SplitKvInboxOffset: the body's bytes
// rounded up to 16.
TILEPLAN_ATTENTION_SHARED_ constexpr int SplitKvInboxOffset(int num_q, int head_dim, int warps,
                                                            int streamed_stages, int element_bytes,
                                                            int kv_chunk) {
  return (SplitKvBodyBytes(num_q, head_dim, warps, streamed_stages, element_bytes, kv_chunk) +
          15) / 16 * 16;
}
TILEPLAN_ATTENTION_SHARED_ constexpr int SplitKvInboxItems(int num_q, int head_dim, int splits) {
  return (num_q * (head_dim / 4) + splits - 1) / splits;
}
TILEPLAN_ATTENTION_SHARED_ constexpr int SplitKvInboxBytes(int num_q, int head_dim, int splits) {
  return splits * (SplitKvInboxItems(num_q, head_dim, splits) + num_q) * 16;
}

TILEPLAN_PARAMS_STRUCT(AttentionParams, TILEPLAN_ATTENTION_PARAMS)
TILEPLAN_PARAMS_STRUCT(AttentionRopeParams, TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS)

}  // namespace tileplan

#undef TILEPLAN_ATTENTION_SHARED_
