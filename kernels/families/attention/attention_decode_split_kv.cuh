// Decode attention with the KV range split across CTAs (split-KV) and the query heads of a
// kv head processed together (GQA), for up to 16 new tokens per sequence:
//   out[b, t, h, :] = softmax_j(scale * q . k_j) v_j  over cache rows j of kv head
//   h / (q_heads / kv_heads) with max(0, p - window + 1) <= j <= p, p = positions[b, t]
// (window 0 = unlimited). Positions are read from device memory, so one launch shape (and
// one CUDA Graph) serves every context length.
//
// CTA (s, y, b) owns the Q = tokens * group / head_split queries that read kv head kvh =
// y / head_split of sequence b (group = q_heads / kv_heads; part y % head_split of the group,
// head_split = gridDim.y / kv_heads, a divisor of the group: more CTAs per kv head when the
// group is large and the kv heads few) and the cache chunks c = s, s + kSplits, ... of
// kKvChunk rows each, skipping rows no query can see; chunks past the longest context cost
// nothing. The parts of a kv head read its rows independently (the second from L2). K and
// V rows are read once per pass over up to kQueries queries (more queries take more passes,
// re-reading from L2). Inside a warp, aligned groups of kLanes = ceil_pow2(kHeadDim / kVec)
// lanes each own one key at a time (a lane holds kVec = 16 / sizeof(T) dims), so a warp scores
// 32 / kLanes keys per step, two steps at a time. With kStages == 1 the lanes load their K and
// V vectors from global memory straight into registers (two steps of loads in flight per
// warp); with kStages >= 2 the CTA streams its rows through shared memory instead: tiles of
// kTile rows (SplitKvTileRows: at most 8 KiB of K and 8 KiB of V, within a chunk) copied
// by cp.async, kStages - 1 tiles in flight while the warps score the current one, so a CTA
// keeps up to 48 KiB of the cache on its way (a warp of the register path keeps 2 KiB at
// head_dim 128 in bf16). Every lane group keeps its own online-softmax state per query
// (running max m, sum l, output o), merged across groups with shuffles and across warps
// through shared memory. Scores live in the log2 domain (q . k * scale * log2(e)) so exp2f is
// the only exponential.
//
// With kSplits > 1 each CTA writes (o, m, l) per query to the workspace, and the last CTA of
// (b, kvh, part) to finish (an atomic counter, re-armed to zero) merges the splits with
// log-sum-exp weights in one pass over them (a running max, rescaling the sums as it rises)
// and writes the output: one launch per step. Workspace and counters are per (b, kvh, part).
//
// With kMma the keys are walked on tensor cores instead (split_kv_mma_walk,
// attention_decode_mma.cuh: the CTA's queries in passes of 16 rows, K and V loaded into the
// mma's registers), writing the same per-warp records, merged the same way.
//
// The body after the queries are staged (split_kv_attend) is shared with
// attention_decode_rope.cuh, whose CTAs stage RoPE-rotated queries and write the new cache
// rows themselves.
#pragma once

#include "attention_decode_mma.cuh"
#include "attention_params.h"
#include "primitives.cuh"

namespace tileplan {

// The most new tokens per sequence the kernel serves.
constexpr int kDecodeMaxTokens = 16;

constexpr float kLog2e = 1.4426950408889634f;

// Folds the online-softmax state (m2, l2, acc2) into (m, l, acc), log2 domain: m the running
// max score, l the sum of exp2(score - m), acc the matching weighted sums of N output dims.
// A state that has seen no visible key has m = -inf, l = 0 and acc = 0.
template <int N>
__device__ __forceinline__ void merge_softmax_state(float& m, float& l, float (&acc)[N], float m2,
                                                    float l2, const float (&acc2)[N]) {
  const float mx = fmaxf(m, m2);
  if (mx == neg_inf()) return;
  const float c1 = exp2f(m - mx), c2 = exp2f(m2 - mx);
  l = l * c1 + l2 * c2;
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = acc[i] * c1 + acc2[i] * c2;
  m = mx;
}

// ... of one output dim.
__device__ __forceinline__ void merge_softmax_state(float& m, float& l, float& acc, float m2,
                                                    float l2, float acc2) {
  float a[1] = {acc};
  const float a2[1] = {acc2};
  merge_softmax_state<1>(m, l, a, m2, l2, a2);
  acc = a[0];
}

// The cache rows [first, last] a token at position p sees (window 0: no window); an empty
// range (first > last) when p addresses no cache row.
__device__ __forceinline__ void decode_key_range(int p, int capacity, int window, int& first,
                                                 int& last) {
  const bool ok = p >= 0 && p < capacity;
  first = ok ? (window > 0 ? max(0, p - window + 1) : 0) : 1;
  last = ok ? p : 0;
}

// Before the dependency wait: starts the K and V rows of this CTA's first chunk (split *
// kKvChunk, ...) on their way into L2, up to the last new token's position, so the cache
// stream overlaps the previous kernel's tail. The position is read before the wait and may
// be stale (an earlier kernel of the step could still be writing it), which is harmless: an
// L2 prefetch returns nothing to the SM and L2 is coherent, so it can only bring the wrong
// lines, never wrong data. The read bypasses L1 so that no stale line stays there for the
// kernel's own read of the positions after the wait.
template <typename T, int kHeadDim, int kKvChunk>
__device__ __forceinline__ void prefetch_first_chunk(const Cta& cta, const T* k_cache,
                                                     const T* v_cache,
                                                     const int* positions, int tokens,
                                                     int kv_heads, int capacity) {
  constexpr int kRowLines = (kHeadDim * static_cast<int>(sizeof(T)) + 127) / 128;
  const int first = cta.x * kKvChunk;
  const int p = load_cg(positions + cta.z * tokens + tokens - 1);
  const int rows = min(kKvChunk, min(capacity - 1, p) - first + 1);
  if (rows <= 0) return;
  const int kvh = cta.y / (cta.ny / kv_heads);
  const long long base =
      ((static_cast<long long>(cta.z) * kv_heads + kvh) * capacity + first) * kHeadDim;
  for (int i = threadIdx.x; i < 2 * rows * kRowLines; i += blockDim.x) {
    const int line = i % (rows * kRowLines);
    const T* cache = i < rows * kRowLines ? k_cache : v_cache;
    prefetch_l2(cache + base + static_cast<long long>(line) * (128 / static_cast<int>(sizeof(T))));
  }
}

// CTA (split, y, b) of the split-KV grid and the queries it serves: part y % head_split of
// the group of q heads that read kv head kvh = y / head_split, for every new token of
// sequence b (head_split = gridDim.y / kv_heads).
struct SplitKvCta {
  int split, kvh, b;
  int part;   // which head_split-th of the group
  int group;  // q heads per CTA: q_heads / kv_heads / head_split
  int head0;  // the first of them
  int num_q;  // tokens * group
  int pair;   // this CTA's (b, kvh, part): its workspace slice and counter
  __device__ SplitKvCta(const Cta& cta, int tokens, int q_heads, int kv_heads)
      : split(cta.x),
        kvh(cta.y / (cta.ny / kv_heads)),
        b(cta.z),
        part(cta.y % (cta.ny / kv_heads)),
        group(q_heads / static_cast<int>(cta.ny)),
        head0(kvh * (q_heads / kv_heads) + part * (q_heads / static_cast<int>(cta.ny))),
        num_q(tokens * (q_heads / static_cast<int>(cta.ny))),
        pair(cta.z * cta.ny + cta.y) {}
};

// One step of a lane group's online softmax over the kInFlight keys key[u] (valid[u]) whose K
// and V vectors (dims d0 ...) the lane holds: scores against queries q0 ... q0 + kQueries - 1
// (those < num_q), masked by each query's token's key range.
template <typename T, int kHeadDim, int kQueries, int kInFlight, int kLanes, int kVec>
__device__ __forceinline__ void split_kv_step(const RawVec<T, kVec> (&kr)[kInFlight],
                                              const RawVec<T, kVec> (&vr)[kInFlight],
                                              const bool (&valid)[kInFlight],
                                              const int (&key)[kInFlight], const float* q_s,
                                              int q0, int num_q, int group, const int* s_first,
                                              const int* s_last, int d0, bool has_dims,
                                              float (&m)[kQueries], float (&l)[kQueries],
                                              float (&o)[kQueries][kVec]) {
  float score[kInFlight][kQueries];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) {
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
      const bool visible = valid[u] && qi < num_q && key[u] >= s_first[t] && key[u] <= s_last[t];
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

// A warp's share of rows [jb, je] of one pass over the keys: row r's K and V vectors lie at
// k_rows and v_rows + (r - row0) * kHeadDim, in global memory (row0 0, the head's first row)
// or in a streamed shared-memory tile (row0 its first row). kInFlight keys per lane group
// are loaded before the step that scores them; the loop bound is uniform across the warp so
// the shuffles see every lane.
template <typename T, int kHeadDim, int kQueries, int kWarps>
__device__ __forceinline__ void split_kv_walk(const T* k_rows, const T* v_rows, int row0, int jb,
                                              int je, const float* q_s, int q0, int num_q,
                                              int group, const int* s_first, const int* s_last,
                                              float (&m)[kQueries], float (&l)[kQueries],
                                              float (&o)[kQueries][16 / sizeof(T)]) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kLanes = ceil_pow2(kHeadDim / kVec);
  constexpr int kKeysPerWarp = 32 / kLanes;
  constexpr int kStepKeys = kWarps * kKeysPerWarp;
  constexpr int kInFlight = 2;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int slot = lane / kLanes;
  const int d0 = (lane % kLanes) * kVec;
  const bool has_dims = d0 < kHeadDim;
  for (int j0 = jb + warp * kKeysPerWarp; j0 <= je; j0 += kStepKeys * kInFlight) {
    RawVec<T, kVec> kr[kInFlight], vr[kInFlight];
    bool valid[kInFlight];
    int key[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      key[u] = j0 + u * kStepKeys + slot;
      valid[u] = key[u] <= je;
      if (valid[u] && has_dims) {
        const long long at = static_cast<long long>(key[u] - row0) * kHeadDim + d0;
        kr[u] = load_raw<T, kVec>(k_rows + at);
        vr[u] = load_raw<T, kVec>(v_rows + at);
      }
    }
    split_kv_step<T, kHeadDim, kQueries, kInFlight, kLanes, kVec>(
        kr, vr, valid, key, q_s, q0, num_q, group, s_first, s_last, d0, has_dims, m, l, o);
  }
}

// The cluster merge (kCluster): the kSplits CTAs of a (b, kvh, part) form one thread-block
// cluster, CTA `split` its rank. Each CTA merges its warps' records per 4-dim item of the
// output and pushes the item's float4 into the inbox of the CTA that owns it (item i: CTA
// i % kSplits, slot i / kSplits), and each query's (max, sum) into every CTA's; after one
// cluster barrier every CTA merges its own items over the splits from its shared memory and
// writes them. No workspace, counter or fence, and no CTA waits for a last one to arrive.
// inbox: SplitKvInboxBytes(num_q, kHeadDim, kSplits) of this CTA's shared memory.
// REQUIRES: every thread of every CTA of the cluster calls it, after cluster_arrive_relaxed
// and a __syncthreads that follows the last write of part_s.
template <typename T, int kHeadDim, int kSplits, int kWarps>
__device__ __forceinline__ void split_kv_cluster_merge(const float* part_s, float* inbox,
                                                       T* __restrict__ out, const SplitKvCta& cta,
                                                       int tokens, int q_heads) {
  constexpr int kPart = kHeadDim + 2;
  constexpr int kItemsPerQuery = kHeadDim / 4;
  static_assert(kHeadDim % 4 == 0, "head dim: whole 4-dim items");
  const int num_q = cta.num_q, split = cta.split;
  const int items = num_q * kItemsPerQuery;
  const int per_cta = SplitKvInboxItems(num_q, kHeadDim, kSplits);
  const unsigned int items_at = shared_address(inbox);              // [kSplits][per_cta]
  const unsigned int stats_at = items_at + kSplits * per_cta * 16;  // [kSplits][num_q]
  cluster_wait();  // every CTA of the cluster has started: its shared memory may be written
  for (int i = threadIdx.x; i < items; i += kWarps * 32) {
    const int qi = i / kItemsPerQuery, d = (i % kItemsPerQuery) * 4;
    float mx = neg_inf(), sum = 0.f;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* part = part_s + (w * num_q + qi) * kPart;
      const float v[4] = {part[d], part[d + 1], part[d + 2], part[d + 3]};
      merge_softmax_state(mx, sum, acc, part[kHeadDim], part[kHeadDim + 1], v);
    }
    store_shared_cluster_v4(items_at + (split * per_cta + i / kSplits) * 16, i % kSplits, acc[0],
                            acc[1], acc[2], acc[3]);
    if (d == 0) {
      for (int c = 0; c < kSplits; ++c) {
        store_shared_cluster_v4(stats_at + (split * num_q + qi) * 16, c, mx, sum, 0.f, 0.f);
      }
    }
  }
  cluster_sync();  // every CTA's pushes have landed (released by the senders, acquired here)
  const float4* items_in = reinterpret_cast<const float4*>(inbox);
  const float4* stats_in = items_in + kSplits * per_cta;
  for (int slot = threadIdx.x; slot < per_cta; slot += kWarps * 32) {
    const int i = slot * kSplits + split;
    if (i >= items) break;
    const int qi = i / kItemsPerQuery, d = (i % kItemsPerQuery) * 4;
    float mx = neg_inf(), sum = 0.f;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < kSplits; ++s) {
      const float4 st = stats_in[s * num_q + qi];
      const float4 v = items_in[s * per_cta + slot];
      const float v4[4] = {v.x, v.y, v.z, v.w};
      merge_softmax_state(mx, sum, acc, st.x, st.y, v4);
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] *= inv;
    const int t = qi / cta.group, g = qi % cta.group;
    store_floats<T, 4>(
        out + ((static_cast<long long>(cta.b) * tokens + t) * q_heads + cta.head0 + g) * kHeadDim +
            d,
        acc);
  }
}

// The split-KV attention of CTA (split, y, b) once its queries are staged: q_s holds the
// num_q = tokens * group queries of its part of kv head kvh (query qi = t * group + g is q
// head head0 + g of token t), in float32 and scaled by scale * log2(e); s_first[t] and
// s_last[t] the key range of token t (decode_key_range). part_s is the shared memory after
// q_s, and with kStages >= 2 (not kMma) the streamed tiles start at SplitKvTilesOffset.
// With kSplits == 1 it writes out; otherwise this CTA's partials go to the workspace and the last
// CTA of (b, kvh, part) merges them into out, or with kCluster the cluster's CTAs merge them
// through their shared memory (split_kv_cluster_merge; its inbox after the body's shared memory,
// at SplitKvInboxOffset). The caches are plain pointers: a kernel may
// have written rows of them earlier in the launch (visible to its own block after a
// __syncthreads, and to its cp.async copies once a __threadfence followed the writes), so
// their loads must not take the read-only data path.
// REQUIRES: every thread of the block calls it, after a __syncthreads that follows the last
// write of q_s, s_first and s_last.
template <typename T, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, bool kMma, bool kCluster>
__device__ __forceinline__ void split_kv_attend(const float* q_s, float* part_s, const int* s_first,
                                                const int* s_last, const T* k_cache,
                                                const T* v_cache, T* __restrict__ out,
                                                float* __restrict__ workspace,
                                                unsigned int* __restrict__ counters,
                                                const SplitKvCta& cta, int tokens, int q_heads,
                                                int kv_heads, int capacity) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kLanes = ceil_pow2(kHeadDim / kVec);
  constexpr int kPart = kHeadDim + 2;  // o[kHeadDim], m, l
  constexpr int kWsPart = kHeadDim + 4;  // ... in the workspace, 16-byte aligned records
  static_assert(kHeadDim % kVec == 0 && kLanes <= 32, "head dim: whole 16-byte vectors");
  static_assert(kStages >= 1 && kStages <= 4, "stages");
  static_assert((kKvChunk & (kKvChunk - 1)) == 0, "kv_chunk: a power of two");
  static_assert(!kCluster || kSplits > 1, "the cluster merge merges splits");
  if constexpr (kCluster) cluster_arrive_relaxed();
  const int split = cta.split, kvh = cta.kvh, b = cta.b, group = cta.group, num_q = cta.num_q;
  const int head0 = cta.head0;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int slot = lane / kLanes;
  const int d0 = (lane % kLanes) * kVec;
  const bool has_dims = d0 < kHeadDim;

  int lo = 0x7fffffff, hi = -1;
  for (int t = 0; t < tokens; ++t) {
    if (s_first[t] <= s_last[t]) {
      lo = min(lo, s_first[t]);
      hi = max(hi, s_last[t]);
    }
  }
  const long long head_base = (static_cast<long long>(b) * kv_heads + kvh) * capacity;

  if constexpr (kMma) {
    // The tensor-core walk loads into registers: kStages 2 keeps one step more of them.
    static_assert(kStages <= 2, "the tensor-core walk loads into registers: stages 1 or 2");
    split_kv_mma_walk<T, kHeadDim, kKvChunk, kSplits, kWarps, kStages == 2>(
        q_s, part_s, s_first, s_last, k_cache + head_base * kHeadDim,
        v_cache + head_base * kHeadDim, split, lo, hi, num_q, group);
  }
  // The CUDA-core walk (no passes with kMma).
  for (int q0 = 0; !kMma && q0 < num_q; q0 += kQueries) {
    float m[kQueries], l[kQueries], o[kQueries][kVec];
#pragma unroll
    for (int qq = 0; qq < kQueries; ++qq) {
      m[qq] = neg_inf();
      l[qq] = 0.f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) o[qq][e] = 0.f;
    }
    if constexpr (kStages == 1) {
      for (int c0 = split * kKvChunk; c0 <= hi; c0 += kSplits * kKvChunk) {
        const int jb = max(c0, lo);
        const int je = min(c0 + kKvChunk - 1, hi);
        split_kv_walk<T, kHeadDim, kQueries, kWarps>(
            k_cache + head_base * kHeadDim, v_cache + head_base * kHeadDim, 0, jb, je, q_s, q0,
            num_q, group, s_first, s_last, m, l, o);
      }
    } else {
      // The CTA's tiles in order: chunk n of the split (rows (split + n * kSplits) * kKvChunk
      // ...), kTilesPerChunk tiles of kTile rows each, from the first chunk that reaches lo
      // to the last that starts at or before hi; a tile's rows outside [lo, hi] are neither
      // copied nor scored.
      constexpr int kTile = SplitKvTileRows(kHeadDim, static_cast<int>(sizeof(T)), kKvChunk);
      constexpr int kTilesPerChunk = kKvChunk / kTile;
      constexpr int kHeadVecs = kHeadDim / kVec;
      constexpr int kStride = kSplits * kKvChunk;
      const int first_row = split * kKvChunk;
      const int n_first = lo > first_row + kKvChunk - 1
                              ? (lo - first_row - kKvChunk + 1 + kStride - 1) / kStride
                              : 0;
      const int n_end = hi >= first_row ? (hi - first_row) / kStride + 1 : 0;
      const int n_tiles = max(0, n_end - n_first) * kTilesPerChunk;
      // q_s starts the dynamic shared memory; part_s follows its num_q rows.
      T* tiles = reinterpret_cast<T*>(reinterpret_cast<char*>(part_s - num_q * kHeadDim) +
                                      SplitKvTilesOffset(num_q, kHeadDim, kWarps));
      auto tile_start = [&](int i) {
        return first_row + (n_first + i / kTilesPerChunk) * kStride + (i % kTilesPerChunk) * kTile;
      };
      // Copies tile i (when it exists) into its stage and commits a group either way, so every
      // thread counts the same groups.
      auto issue = [&](int i) {
        if (i < n_tiles) {
          const int r0 = tile_start(i);
          const int jb = max(r0, lo), je = min(r0 + kTile - 1, hi);
          const int vecs = max(0, je - jb + 1) * kHeadVecs;
          T* ks = tiles + (i % kStages) * 2 * kTile * kHeadDim;
          for (int e = threadIdx.x; e < 2 * vecs; e += kWarps * 32) {
            const bool is_v = e >= vecs;
            const int f = is_v ? e - vecs : e;
            const int row = jb + f / kHeadVecs, d = (f % kHeadVecs) * kVec;
            cp_async_16(ks + (is_v ? kTile * kHeadDim : 0) + (row - r0) * kHeadDim + d,
                        (is_v ? v_cache : k_cache) + (head_base + row) * kHeadDim + d, true);
          }
        }
        cp_async_commit();
      };
#pragma unroll
      for (int i = 0; i < kStages - 1; ++i) issue(i);
      for (int i = 0; i < n_tiles; ++i) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // tile i is in; every warp is done with the stage issue() refills
        issue(i + kStages - 1);
        const int r0 = tile_start(i);
        const int jb = max(r0, lo), je = min(r0 + kTile - 1, hi);
        const T* ks = tiles + (i % kStages) * 2 * kTile * kHeadDim;
        split_kv_walk<T, kHeadDim, kQueries, kWarps>(ks, ks + kTile * kHeadDim, r0, jb, je, q_s,
                                                     q0, num_q, group, s_first, s_last, m, l, o);
      }
      cp_async_wait<0>();
      __syncthreads();  // the stages are free for the next pass over the queries
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

  if constexpr (kCluster) {
    // q_s, before part_s, starts the dynamic shared memory.
    char* base = reinterpret_cast<char*>(part_s - num_q * kHeadDim);
    const int inbox = SplitKvInboxOffset(num_q, kHeadDim, kWarps, kMma ? 1 : kStages,
                                         static_cast<int>(sizeof(T)), kKvChunk);
    split_kv_cluster_merge<T, kHeadDim, kSplits, kWarps>(
        part_s, reinterpret_cast<float*>(base + inbox), out, cta, tokens, q_heads);
    return;
  }

  // Merge the warps: this CTA's (o, m, l) per query and dim.
  const int pair = cta.pair;
  float* ws =
      kSplits > 1 ? workspace + static_cast<long long>(pair) * kSplits * num_q * kWsPart : nullptr;
  for (int i = threadIdx.x; i < num_q * kHeadDim; i += kWarps * 32) {
    const int qi = i / kHeadDim, d = i % kHeadDim;
    float mx = neg_inf(), sum = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* part = part_s + (w * num_q + qi) * kPart;
      merge_softmax_state(mx, sum, acc, part[kHeadDim], part[kHeadDim + 1], part[d]);
    }
    if constexpr (kSplits == 1) {
      const int t = qi / group, g = qi % group;
      out[((static_cast<long long>(b) * tokens + t) * q_heads + head0 + g) * kHeadDim + d] =
          from_float<T>(sum > 0.f ? acc / sum : 0.f);
    } else {
      float* slot_out = ws + (static_cast<long long>(split) * num_q + qi) * kWsPart;
      slot_out[d] = acc;
      if (d == 0) {
        slot_out[kHeadDim] = mx;
        slot_out[kHeadDim + 1] = sum;
      }
    }
  }
  if constexpr (kSplits > 1) {
    if (!last_to_arrive(&counters[pair], kSplits)) return;
    // One pass over the splits, four dims of a query per thread: every load is independent
    // of the merge before it, so the unrolled loop keeps several splits' loads in flight;
    // the lanes of a query read its splits' (m, l) from the same addresses (one request a
    // warp), and the rescaling factors serve the four dims.
    for (int i = threadIdx.x; i < num_q * (kHeadDim / 4); i += kWarps * 32) {
      const int qi = i / (kHeadDim / 4), d = (i % (kHeadDim / 4)) * 4;
      float mx = neg_inf(), sum = 0.f;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
      for (int s = 0; s < kSplits; ++s) {
        const float* rec = ws + (static_cast<long long>(s) * num_q + qi) * kWsPart;
        const float2 ml = load_cg(reinterpret_cast<const float2*>(rec + kHeadDim));
        const float4 v = load_cg(reinterpret_cast<const float4*>(rec + d));
        const float v4[4] = {v.x, v.y, v.z, v.w};
        merge_softmax_state(mx, sum, acc, ml.x, ml.y, v4);
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] *= inv;
      const int t = qi / group, g = qi % group;
      store_floats<T, 4>(
          out + ((static_cast<long long>(b) * tokens + t) * q_heads + head0 + g) * kHeadDim + d,
          acc);
    }
    if (threadIdx.x == 0) counters[pair] = 0u;
  }
}

// q: token bt's heads at q + bt * q_stride (bt = b * tokens + t, heads contiguous);
// out: contiguous [batch * tokens, q_heads, kHeadDim]; caches: [batch, kv_heads, capacity,
// kHeadDim]; positions: [batch * tokens]. workspace (kSplits > 1, else null):
// batch * kv_heads * head_split * kSplits * Q * (kHeadDim + 4) floats; counters (kSplits > 1,
// else null): batch * kv_heads * head_split unsigned completion counters, zero before the first launch and left zero
// by every launch. A position outside [0, capacity) gives a zero output row.
//
// Launch: grid (kSplits, kv_heads * head_split, batch), block 32 * kWarps, dynamic shared
// memory (Q * kHeadDim + kWarps * Q * (kHeadDim + 2)) * 4 bytes, Q = tokens * q_heads /
// kv_heads / head_split, and with kStages >= 2 (not kMma) that rounded up to 16 plus kStages *
// 2 * kTile * kHeadDim * sizeof(T) (kTile = SplitKvTileRows). REQUIRES: tokens <= 16;
// head_split divides q_heads / kv_heads; kHeadDim % kVec == 0; q_stride % kVec == 0; kKvChunk
// a power of two; 1 <= kStages <= 4, at most 2 with kMma; pointers aligned to 16 bytes.
// With kCluster (sm_90 and later; 2 <= kSplits <= 8): clusters of (kSplits, 1, 1) CTAs, the
// dynamic shared memory rounded up to 16 bytes plus SplitKvInboxBytes(Q, kHeadDim, kSplits),
// and neither workspace nor counters (null).
template <typename T, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, bool kMma, bool kCluster>
__device__ __forceinline__ void attention_decode_split_kv_prefetch(
    const Cta& cta, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ATTENTION_PARAMS)) {
  prefetch_first_chunk<T, kHeadDim, kKvChunk>(cta, k_cache, v_cache, positions, tokens, kv_heads,
                                              capacity);
}

template <typename T, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, bool kMma, bool kCluster>
__device__ __forceinline__ void attention_decode_split_kv_body(
    const Cta& this_cta, TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ATTENTION_PARAMS)) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kHeadVecs = kHeadDim / kVec;
  extern __shared__ float smem[];
  __shared__ int s_first[kDecodeMaxTokens], s_last[kDecodeMaxTokens];

  const SplitKvCta cta(this_cta, tokens, q_heads, kv_heads);
  const int b = cta.b, group = cta.group, num_q = cta.num_q;
  float* q_s = smem;  // [num_q][kHeadDim], scaled

  // The position loads go out first and the q loads right after, before anything waits.
  const int p = threadIdx.x < tokens ? positions[b * tokens + threadIdx.x] : 0;
  const float log2e_scale = scale * kLog2e;
#pragma unroll 4
  for (int i = threadIdx.x; i < num_q * kHeadVecs; i += kWarps * 32) {
    const int qi = i / kHeadVecs, d = (i % kHeadVecs) * kVec;
    const int t = qi / group, g = qi % group;
    float v[kVec];
    load_floats<T, kVec>(
        q + (static_cast<long long>(b) * tokens + t) * q_stride + (cta.head0 + g) * kHeadDim + d,
        v);
#pragma unroll
    for (int e = 0; e < kVec; ++e) q_s[qi * kHeadDim + d + e] = v[e] * log2e_scale;
  }
  if (threadIdx.x < tokens) {
    decode_key_range(p, capacity, window, s_first[threadIdx.x], s_last[threadIdx.x]);
  }
  __syncthreads();
  split_kv_attend<T, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages, kMma, kCluster>(
      q_s, smem + num_q * kHeadDim, s_first, s_last, k_cache, v_cache, out, workspace, counters,
      cta, tokens, q_heads, kv_heads, capacity);
}

template <typename T, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, bool kMma, bool kCluster>
__global__ void __launch_bounds__(kWarps * 32)
    attention_decode_split_kv(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ATTENTION_PARAMS)) {
  const Cta cta = this_cta();
  attention_decode_split_kv_prefetch<T, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages,
                                     kMma, kCluster>(
      cta, TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_ATTENTION_PARAMS));
  grid_dependency_sync();
  attention_decode_split_kv_body<T, kHeadDim, kKvChunk, kSplits, kWarps, kQueries, kStages, kMma,
                                 kCluster>(cta,
                                           TILEPLAN_KERNEL_ARGUMENTS(TILEPLAN_ATTENTION_PARAMS));
}

// attention_decode_split_kv as a task of the persistent kernel (which launches no clusters).
template <typename T, int kHeadDim, int kKvChunk, int kSplits, int kWarps, int kQueries,
          int kStages, bool kMma, bool kCluster>
struct attention_decode_split_kv_task {
  static_assert(!kCluster, "the persistent kernel's tasks run without clusters");
  TILEPLAN_KERNEL_TASK(TILEPLAN_ATTENTION_PARAMS,
                       (attention_decode_split_kv_prefetch<T, kHeadDim, kKvChunk, kSplits, kWarps,
                                                           kQueries, kStages, kMma, kCluster>),
                       (attention_decode_split_kv_body<T, kHeadDim, kKvChunk, kSplits, kWarps,
                                                       kQueries, kStages, kMma, kCluster>))
};

}  // namespace tileplan
