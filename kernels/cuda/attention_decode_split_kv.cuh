// Decode attention with the KV range split across CTAs (split-KV) and the query heads of a
// kv head processed together (GQA), for up to 16 new tokens per sequence:
//   out[b, t, h, :] = softmax_j(scale * q . k_j) v_j  over cache rows j of kv head
//   h / (q_heads / kv_heads) with max(0, p - window + 1) <= j <= p, p = positions[b, t]
// (window 0 = unlimited). Positions are read from device memory, so one launch shape (and
// one CUDA Graph) serves every context length.
//
// CTA (s, kvh, b) owns the Q = tokens * group queries that read kv head kvh of sequence b
// (group = q_heads / kv_heads) and the cache chunks c = s, s + kSplits, ... of kKvChunk rows
// each, skipping rows no query can see; chunks past the longest context cost nothing. K and
// V rows are read once per pass over up to kQueries queries (more queries take more passes,
// re-reading from L2). Inside a warp, aligned groups of kLanes = ceil_pow2(kHeadDim / kVec)
// lanes each own one key at a time (a lane holds kVec = 16 / sizeof(T) dims), so a warp scores
// 32 / kLanes keys per step, two steps of loads in flight. Every lane group keeps its own
// online-softmax state per query (running max m, sum l, output o), merged across groups
// with shuffles and across warps through shared memory. Scores live in the log2 domain
// (q . k * scale * log2(e)) so exp2f is the only exponential.
//
// With kSplits > 1 each CTA writes (o, m, l) per query to the workspace, and the last CTA of
// (b, kvh) to finish (an atomic counter, re-armed to zero) merges the splits with
// log-sum-exp weights and writes the output: one launch per step.
#pragma once

#include "primitives.cuh"

namespace tileplan {

// The most new tokens per sequence the kernel serves.
constexpr int kDecodeMaxTokens = 16;

// q: token bt's heads at q + bt * q_stride (bt = b * tokens + t, heads contiguous);
// out: contiguous [batch * tokens, q_heads, kHeadDim]; caches: [batch, kv_heads, capacity,
// kHeadDim]; positions: [batch * tokens]. workspace (kSplits > 1, else null):
// batch * kv_heads * kSplits * Q * (kHeadDim + 2) floats; counters (kSplits > 1, else null):
// batch * kv_heads unsigned completion counters, zero before the first launch and left zero
// by every launch. A position outside [0, capacity) gives a zero output row.
//
// Launch: grid (kSplits, kv_heads, batch), block 32 * kWarps, dynamic shared memory
// (Q * kHeadDim + kWarps * Q * (kHeadDim + 2)) * 4 bytes.
// REQUIRES: tokens <= 16; q_heads % kv_heads == 0; kHeadDim % kVec == 0; q_stride % kVec
// == 0; pointers aligned to 16 bytes.
template <typename T, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries>
__global__ void __launch_bounds__(kWarps * 32)
    attention_decode_split_kv(const T* __restrict__ q, long long q_stride,
                              const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                              const int* __restrict__ positions, T* __restrict__ out,
                              float* __restrict__ workspace, unsigned int* __restrict__ counters,
                              int tokens, int q_heads, int kv_heads, int capacity, float scale,
                              int window) {
  grid_dependency_sync();
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kLanes = ceil_pow2(kHeadDim / kVec);
  constexpr int kKeysPerWarp = 32 / kLanes;
  constexpr int kStepKeys = kWarps * kKeysPerWarp;
  constexpr int kInFlight = 2;
  constexpr int kPart = kHeadDim + 2;  // o[kHeadDim], m, l
  static_assert(kHeadDim % kVec == 0 && kLanes <= 32, "head dim: whole 16-byte vectors");
  extern __shared__ float smem[];
  __shared__ int s_first[kDecodeMaxTokens], s_last[kDecodeMaxTokens];

  const int split = blockIdx.x;
  const int kvh = blockIdx.y;
  const int b = blockIdx.z;
  const int group = q_heads / kv_heads;
  const int num_q = tokens * group;
  float* q_s = smem;                        // [num_q][kHeadDim], scaled
  float* part_s = smem + num_q * kHeadDim;  // [kWarps][num_q][kPart]
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int slot = lane / kLanes;
  const int d0 = (lane % kLanes) * kVec;
  const bool has_dims = d0 < kHeadDim;

  // Key range [first, last] of each token (empty when its position is invalid).
  if (threadIdx.x < tokens) {
    const int p = positions[b * tokens + threadIdx.x];
    const bool ok = p >= 0 && p < capacity;
    s_first[threadIdx.x] = ok ? (window > 0 ? max(0, p - window + 1) : 0) : 1;
    s_last[threadIdx.x] = ok ? p : 0;
  }
  const float log2e_scale = scale * 1.4426950408889634f;
  for (int i = threadIdx.x; i < num_q * kHeadDim; i += kWarps * 32) {
    const int qi = i / kHeadDim, d = i % kHeadDim;
    const int t = qi / group, g = qi % group;
    q_s[i] = to_float(q[(static_cast<long long>(b) * tokens + t) * q_stride +
                        (kvh * group + g) * kHeadDim + d]) *
             log2e_scale;
  }
  __syncthreads();
  int lo = 0x7fffffff, hi = -1;
  for (int t = 0; t < tokens; ++t) {
    if (s_first[t] <= s_last[t]) {
      lo = min(lo, s_first[t]);
      hi = max(hi, s_last[t]);
    }
  }
  const long long head_base = (static_cast<long long>(b) * kv_heads + kvh) * capacity;

  for (int q0 = 0; q0 < num_q; q0 += kQueries) {
    float m[kQueries], l[kQueries], o[kQueries][kVec];
#pragma unroll
    for (int qq = 0; qq < kQueries; ++qq) {
      m[qq] = neg_inf();
      l[qq] = 0.f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) o[qq][e] = 0.f;
    }
    for (int c0 = split * kKvChunk; c0 <= hi; c0 += kSplits * kKvChunk) {
      const int jb = max(c0, lo);
      const int je = min(c0 + kKvChunk - 1, hi);
      // The loop bound is uniform across the warp so the shuffles see every lane.
      for (int j0 = jb + warp * kKeysPerWarp; j0 <= je; j0 += kStepKeys * kInFlight) {
        RawVec<T, kVec> kr[kInFlight], vr[kInFlight];
        bool valid[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) {
          const int j = j0 + u * kStepKeys + slot;
          valid[u] = j <= je;
          if (valid[u] && has_dims) {
            kr[u] = load_raw<T, kVec>(k_cache + (head_base + j) * kHeadDim + d0);
            vr[u] = load_raw<T, kVec>(v_cache + (head_base + j) * kHeadDim + d0);
          }
        }
        float score[kInFlight][kQueries];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) {
          const int j = j0 + u * kStepKeys + slot;
#pragma unroll
          for (int qq = 0; qq < kQueries; ++qq) {
            const int qi = q0 + qq;
            float dot = 0.f;
            if (valid[u] && has_dims && qi < num_q) {
              const float* qv = q_s + qi * kHeadDim + d0;
#pragma unroll
              for (int e = 0; e < kVec; ++e) dot += qv[e] * word_element<T>(kr[u].w, e);
            }
            dot = group_sum<kLanes>(dot);
            const int t = qi / group;
            const bool visible = valid[u] && qi < num_q && j >= s_first[t] && j <= s_last[t];
            score[u][qq] = visible ? dot : neg_inf();
          }
        }
#pragma unroll
        for (int qq = 0; qq < kQueries; ++qq) {
          float mx = m[qq];
#pragma unroll
          for (int u = 0; u < kInFlight; ++u) mx = fmaxf(mx, score[u][qq]);
          if (mx == neg_inf()) continue;  // nothing visible yet for this query
          const float corr = exp2f(m[qq] - mx);
          l[qq] *= corr;
#pragma unroll
          for (int e = 0; e < kVec; ++e) o[qq][e] *= corr;
#pragma unroll
          for (int u = 0; u < kInFlight; ++u) {
            const float p = exp2f(score[u][qq] - mx);  // 0 for masked keys
            l[qq] += p;
            if (valid[u] && has_dims) {
#pragma unroll
              for (int e = 0; e < kVec; ++e) o[qq][e] += p * word_element<T>(vr[u].w, e);
            }
          }
          m[qq] = mx;
        }
      }
    }
    // Merge the lane groups of the warp, then publish the warp's state.
#pragma unroll
    for (int qq = 0; qq < kQueries; ++qq) {
#pragma unroll
      for (int off = kLanes; off < 32; off *= 2) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m[qq], off);
        const float l2 = __shfl_xor_sync(0xffffffffu, l[qq], off);
        float o2[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) o2[e] = __shfl_xor_sync(0xffffffffu, o[qq][e], off);
        const float mx = fmaxf(m[qq], m2);
        if (mx != neg_inf()) {
          const float c1 = exp2f(m[qq] - mx), c2 = exp2f(m2 - mx);
          l[qq] = l[qq] * c1 + l2 * c2;
#pragma unroll
          for (int e = 0; e < kVec; ++e) o[qq][e] = o[qq][e] * c1 + o2[e] * c2;
          m[qq] = mx;
        }
      }
      const int qi = q0 + qq;
      if (qi < num_q) {
        float* part = part_s + (warp * num_q + qi) * kPart;
        if (slot == 0 && has_dims) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) part[d0 + e] = o[qq][e];
        }
        if (lane == 0) {
          part[kHeadDim] = m[qq];
          part[kHeadDim + 1] = l[qq];
        }
      }
    }
  }
  __syncthreads();

  // Merge the warps: this CTA's (o, m, l) per query and dim.
  const int pair = b * kv_heads + kvh;
  float* ws =
      kSplits > 1 ? workspace + static_cast<long long>(pair) * kSplits * num_q * kPart : nullptr;
  for (int i = threadIdx.x; i < num_q * kHeadDim; i += kWarps * 32) {
    const int qi = i / kHeadDim, d = i % kHeadDim;
    float mx = neg_inf();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, part_s[(w * num_q + qi) * kPart + kHeadDim]);
    float sum = 0.f, acc = 0.f;
    if (mx != neg_inf()) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float* part = part_s + (w * num_q + qi) * kPart;
        const float c = exp2f(part[kHeadDim] - mx);
        sum += part[kHeadDim + 1] * c;
        acc += part[d] * c;
      }
    }
    if constexpr (kSplits == 1) {
      const int t = qi / group, g = qi % group;
      out[((static_cast<long long>(b) * tokens + t) * q_heads + kvh * group + g) * kHeadDim + d] =
          from_float<T>(sum > 0.f ? acc / sum : 0.f);
    } else {
      float* slot_out = ws + (static_cast<long long>(split) * num_q + qi) * kPart;
      slot_out[d] = acc;
      if (d == 0) {
        slot_out[kHeadDim] = mx;
        slot_out[kHeadDim + 1] = sum;
      }
    }
  }
  if constexpr (kSplits > 1) {
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&counters[pair], 1u) == kSplits - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int i = threadIdx.x; i < num_q * kHeadDim; i += kWarps * 32) {
      const int qi = i / kHeadDim, d = i % kHeadDim;
      float mx = neg_inf();
      for (int s = 0; s < kSplits; ++s) {
        mx = fmaxf(mx, load_cg(ws + (static_cast<long long>(s) * num_q + qi) * kPart + kHeadDim));
      }
      float sum = 0.f, acc = 0.f;
      if (mx != neg_inf()) {
        for (int s = 0; s < kSplits; ++s) {
          const float* part = ws + (static_cast<long long>(s) * num_q + qi) * kPart;
          const float c = exp2f(load_cg(part + kHeadDim) - mx);
          sum += load_cg(part + kHeadDim + 1) * c;
          acc += load_cg(part + d) * c;
        }
      }
      const int t = qi / group, g = qi % group;
      out[((static_cast<long long>(b) * tokens + t) * q_heads + kvh * group + g) * kHeadDim + d] =
          from_float<T>(sum > 0.f ? acc / sum : 0.f);
    }
    if (threadIdx.x == 0) counters[pair] = 0u;
  }
}

}  // namespace tileplan
