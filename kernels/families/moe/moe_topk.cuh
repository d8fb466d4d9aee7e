// MoE routing (moe_topk, docs/ir.md): per token, p = softmax(logits) over the E experts; with
// G = groups > 1 the experts form G consecutive groups of E / G, each scored by its largest
// p, and only the topk_groups best groups (ties to the lower group) compete; then the top_k
// largest p in descending order (ties to the lower expert) are the token's expert ids, and
// their p (divided by their sum when norm_topk_prob) times scaling its weights.
//
// One warp per token holds the token's logits in registers: expert e is element e / 32 of
// lane e % 32 (kPerLane = ceil(E / 32) per lane). Selection compares the logits, not p:
// softmax is strictly increasing, so the order of p is the order of the logits, and
// comparing the exact inputs gives the reference's order and ties (rounded p of two close
// logits could tie where the exact p do not). A candidate is one 64-bit key, the logit mapped
// to an order-preserving unsigned integer in the high half and ~e in the low half, so a warp
// max of keys is the largest logit with the lowest index; 0 marks an expert that no longer
// competes (taken, outside the kept groups, or past E). Group scores are the group's largest
// key (its largest p), kept by lane g with ~g in the low half, so the best groups come from
// topk_groups warp maxima too. Only the K selected p are formed, in float32, as
// expf(l - max) / sum.
#pragma once

#include "moe_params.h"
#include "primitives.cuh"

namespace tileplan {

// Order-preserving map of a float to an unsigned integer: a larger float has a larger key;
// NaN maps to 0, below -inf. moe_unkey inverts it (0 gives a NaN back).
__device__ __forceinline__ unsigned int moe_order_key(float v) {
  const unsigned int u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float moe_unkey(unsigned int key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The selection of one token's experts by the calling warp (every lane must call it): l[j]
// holds the token's logit of expert j * 32 + lane (ignored at and past `experts`). Lane k <
// top_k receives selection k's expert id and weight (its p, divided by the selected p's sum
// when norm_topk_prob, times scaling; not rounded); the other lanes' outputs are unspecified.
// REQUIRES: as moe_topk's.
template <int kPerLane>
__device__ __forceinline__ void moe_topk_select(const float (&l)[kPerLane], int experts, int top_k,
                                                int groups, int topk_groups, int norm_topk_prob,
                                                float scaling, int& id, float& weight) {
  const int lane = threadIdx.x % 32;
  unsigned long long key[kPerLane];
  float m = neg_inf();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * 32 + lane;
    key[j] = 0ull;
    if (e < experts) {
      key[j] = (static_cast<unsigned long long>(moe_order_key(l[j])) << 32) |
               static_cast<unsigned long long>(~static_cast<unsigned int>(e));
      m = fmaxf(m, l[j]);
    }
  }
  m = group_max(m);
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (j * 32 + lane < experts)
      sum += expf(moe_unkey(static_cast<unsigned int>(key[j] >> 32)) - m);
  }
  sum = group_sum(sum);

  if (groups > 1) {
    const int group_size = experts / groups;
    // Lane g: group g's score (its largest key's high half) with ~g below it.
    unsigned long long group_key = 0ull;
    for (int g = 0; g < groups; ++g) {
      unsigned long long best = 0ull;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int e = j * 32 + lane;
        if (e < experts && e / group_size == g && key[j] > best) best = key[j];
      }
      best = warp_max_u64(best);
      if (lane == g) {
        group_key = (best & 0xffffffff00000000ull) |
                    static_cast<unsigned long long>(~static_cast<unsigned int>(g));
      }
    }
    unsigned int kept = 0u;  // bit g: group g competes
    for (int n = 0; n < topk_groups; ++n) {
      const unsigned long long best = warp_max_u64(group_key);
      const int g = static_cast<int>(~static_cast<unsigned int>(best));
      kept |= 1u << g;
      if (lane == g) group_key = 0ull;
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = j * 32 + lane;
      if (e < experts && ((kept >> (e / group_size)) & 1u) == 0u) key[j] = 0ull;
    }
  }

  // Round r: the best remaining expert; lane r keeps its id and p.
  int my_id = 0;
  float my_p = 0.f;
  float chosen = 0.f;  // sum of the selected p
  for (int r = 0; r < top_k; ++r) {
    unsigned long long best = 0ull;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) best = key[j] > best ? key[j] : best;
    best = warp_max_u64(best);
    const int e = static_cast<int>(~static_cast<unsigned int>(best));
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (j * 32 + lane == e) key[j] = 0ull;
    }
    const float p = expf(moe_unkey(static_cast<unsigned int>(best >> 32)) - m) / sum;
    chosen += p;
    if (lane == r) {
      my_id = e;
      my_p = p;
    }
  }
  id = my_id;
  weight = (norm_topk_prob ? my_p / chosen : my_p) * scaling;
}

// logits: row t (flat token b * T + t) at logits + t * logits_stride, `experts` elements of L
// (float, or the activation dtype when the router rounds its logits to it); ids and weights:
// contiguous [tokens, top_k], the weights in L (rounded once, after the scaling).
// groups = 1 disables the group limit.
//
// Launch: grid ceil(tokens / kTokensPerCta), block 32 * kTokensPerCta.
// REQUIRES: 1 <= experts <= 32 * kPerLane; 1 <= top_k <= 32; 1 <= groups <= 32 dividing
// experts; 1 <= topk_groups <= groups; top_k <= topk_groups * experts / groups.
template <typename L, int kPerLane, int kTokensPerCta>
__global__ void __launch_bounds__(32 * kTokensPerCta)
    moe_topk(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MOE_TOPK_PARAMS)) {
  grid_dependency_sync();
  const int lane = threadIdx.x % 32;
  const int t = blockIdx.x * kTokensPerCta + threadIdx.x / 32;
  if (t >= tokens) return;  // a whole warp: no block-wide synchronization below
  const L* row = logits + static_cast<long long>(t) * logits_stride;
  float l[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * 32 + lane;
    l[j] = e < experts ? to_float(row[e]) : 0.f;
  }
  int id;
  float weight;
  moe_topk_select<kPerLane>(l, experts, top_k, groups, topk_groups, norm_topk_prob, scaling, id,
                            weight);
  if (lane < top_k) {
    ids[static_cast<long long>(t) * top_k + lane] = id;
    weights[static_cast<long long>(t) * top_k + lane] = from_float<L>(weight);
  }
}

}  // namespace tileplan
