// The fused MoE block for decode-sized steps (moe and rms_norm_moe, docs/ir.md) in three
// kernels, launched in this order on one step workspace:
//
//   moe_route    (rms_norm_moe: the RMSNorm of every token's row, stored by the CTAs for
//                moe_gate_up) the router's logits of every token (rounded to LogitT, as the
//                primitive graph holds them), then, in the last CTA to finish, the top-k of
//                each token (moe_topk.cuh's selection; weights rounded to WeightT) and the
//                routing table (moe_fused_params.h): the distinct experts selected, and which
//                token chose each by which selection. With kSelect (a step of one token) it
//                stops after the logits, and every routed moe_gate_up CTA selects the top-k
//                itself: slot j is selection j, so there is no table to build, and no CTA of
//                the router waits for the others
//   moe_gate_up  per routed slot (one distinct expert) and row tile: silu(gate_e · x_t) *
//                (up_e · x_t) for every token t that chose the expert, each weight row read
//                once for all of them; and per row tile of the shared MLP the same for every
//                token; float32 activations into the workspace
//   moe_down     per tile of output features and split of the slots, for every token:
//                Σ_k weight_k · (down_e_k · act_k) over its selections in the split, plus
//                shared_down · shared_act in the last split; the last CTA of a tile sums the
//                splits and the residual; one rounding to T per output element
//
// The expert ids never leave the device: a captured CUDA Graph replays with whatever experts
// each step selects, and no kernel waits on the host. The intermediates (the activations,
// the experts' outputs before the weighted sum) stay float32; only the logits and the top-k
// weights (and, for rms_norm_moe, the normalized rows) are rounded, to the dtypes the region
// records, exactly where the primitive graph stores them. Every weight streams once per step
// in kVec-element loads (16 bytes for bf16), coalesced along its rows; the router's and the
// shared MLP's rows and the norm weight, which never depend on an earlier kernel, are
// prefetched into L2 before each kernel's dependency wait.
//
// Workspace (host layout, 16-byte aligned sections): logits [tokens, experts] floats, weights
// [tokens, top_k] floats, the routing table, act [tokens * top_k, inter] floats (by
// selection), shared_act [tokens, shared_inter] floats, the down splits' partial sums
// [splits, tokens, cols] floats, and the normalized rows xn [tokens, hidden] of T. Counters
// (unsigned, zero between launches): moe_route's arrivals (absent with a single router CTA),
// then moe_down's per feature tile (absent unsplit).
#pragma once

#include "moe_fused_params.h"
#include "moe_topk.cuh"
#include "primitives.cuh"

namespace tileplan {

// Weight rows a warp accumulates at once: the largest power of two (<= rows_per_warp) whose
// `mats` accumulator sets and weight vectors, rows * mats * (max_tokens + vec) floats, fit the
// registers a thread has at this block size (65536 / threads, at most 255) less about 64 for
// addressing, the token offsets and an input vector.
__host__ __device__ constexpr int moe_rows_per_pass(int threads, int rows_per_warp, int mats,
                                                    int max_tokens, int vec) {
  const int regs = (65536 / threads < 255 ? 65536 / threads : 255) - 64;
  int pass = 1;
  while (pass * 2 <= rows_per_warp && pass * 2 * mats * (max_tokens + vec) <= regs) pass *= 2;
  return pass;
}

// A kernel's block shape: kThreads / 32 warps, each owning kRows / warps consecutive rows of
// its tile, kPass of them at a time with `kMats` accumulator sets.
template <int kThreads, int kRows, int kMats, int kMaxTokens, int kVec>
struct MoeBlockShape {
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRowsPerWarp = kRows / kWarps;
  static constexpr int kPass = moe_rows_per_pass(kThreads, kRowsPerWarp, kMats, kMaxTokens, kVec);
  static_assert(kThreads % 32 == 0 && kRows % kWarps == 0 && kRowsPerWarp % kPass == 0,
                "block shape");
};

// Starts rows [row0, row0 + kRows) (those below `rows`) of a [rows, depth] matrix on their way
// into L2, one 128-byte line per thread and step: for weights that never depend on an earlier
// kernel, issued before the dependency wait so that their stream overlaps its tail.
template <typename W, int kRows, int kThreads>
__device__ __forceinline__ void moe_prefetch_rows(const W* w, int row0, int rows, int depth) {
  constexpr int kLine = 128 / static_cast<int>(sizeof(W));
  const int lines = (depth + kLine - 1) / kLine;
  for (int i = threadIdx.x; i < kRows * lines; i += kThreads) {
    const int r = row0 + i / lines;
    if (r >= rows) break;
    prefetch_l2(w + static_cast<long long>(r) * depth + (i % lines) * kLine);
  }
}

// out[a] = row row0 + a of the [rows, depth] matrix w (null at and past `rows`), a < kN.
template <typename W, int kN>
__device__ __forceinline__ void moe_row_pointers(const W* w, int row0, int rows, int depth,
                                                 const W** out) {
#pragma unroll
  for (int a = 0; a < kN; ++a) {
    out[a] = row0 + a < rows ? w + static_cast<long long>(row0 + a) * depth : nullptr;
  }
}

template <int kA, int kM>
__device__ __forceinline__ void moe_zero(float (&acc)[kA][kM]) {
#pragma unroll
  for (int a = 0; a < kA; ++a) {
#pragma unroll
    for (int t = 0; t < kM; ++t) acc[a][t] = 0.f;
  }
}

// The identity input transform of moe_warp_dots.
struct MoeInputAsIs {
  template <int kN>
  __device__ __forceinline__ void operator()(int, long long, float (&)[kN]) const {}
};

// The calling lane's part of a warp's dot products: acc[a][t] += Σ_k w[a][k] · in_t[k] over the
// lane's kVec-element vectors of `depth` (vectors first + lane, first + lane + step, ...), for
// kAcc weight rows (w[a] null: a row past the end, its accumulators left alone) and the
// kMaxTokens input rows in_t = in + index[t] * stride (index[t] < 0: no row), each input vector
// passed through xform(t, k, v) (k its first element) before use. Each weight vector is loaded
// once for every input row. REQUIRES: depth % kVec == 0; w[a], in and stride aligned to kVec
// elements.
template <typename W, typename In, int kAcc, int kMaxTokens, int kVec,
          typename XForm = MoeInputAsIs>
__device__ __forceinline__ void moe_warp_dots(const W* const (&w)[kAcc], const In* in,
                                              long long stride, const int (&index)[kMaxTokens],
                                              int depth, int first, int step,
                                              float (&acc)[kAcc][kMaxTokens],
                                              const XForm& xform = XForm()) {
  const int vecs = depth / kVec;
#pragma unroll 2
  for (int v = first + threadIdx.x % 32; v < vecs; v += step) {
    const long long k = static_cast<long long>(v) * kVec;
    float wv[kAcc][kVec];
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
      if (w[a] != nullptr) {
        load_floats<W, kVec>(w[a] + k, wv[a]);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) wv[a][e] = 0.f;
      }
    }
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) {
      if (index[t] < 0) continue;
      float xv[kVec];
      load_floats<In, kVec>(in + index[t] * stride + k, xv);
      xform(t, k, xv);
#pragma unroll
      for (int a = 0; a < kAcc; ++a) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[a][t] += wv[a][e] * xv[e];
      }
    }
  }
}

// The warp sums of acc[a][t] (every lane must call it), scattered over the lanes
// (warp_reduce_scatter): afterwards sum[j] of the lane is the sum of flat index i = lane * kN
// / 32 + j, (a, t) = (i / kM, i % kM), for j < moe_sums_per_lane(kN); with kN < 32 the lanes
// sharing an index hold the same sum and moe_sum_owner() picks one of them.
__host__ __device__ constexpr int moe_sums_per_lane(int n) { return n >= 32 ? n / 32 : 1; }

template <int kA, int kM>
__device__ __forceinline__ void moe_warp_sums(const float (&acc)[kA][kM],
                                              float (&sum)[moe_sums_per_lane(kA * kM)]) {
  constexpr int kN = kA * kM;
  float flat[kN];
#pragma unroll
  for (int a = 0; a < kA; ++a) {
#pragma unroll
    for (int t = 0; t < kM; ++t) flat[a * kM + t] = acc[a][t];
  }
  warp_reduce_scatter<kN>(flat);
#pragma unroll
  for (int j = 0; j < moe_sums_per_lane(kN); ++j) sum[j] = flat[j];
}

template <int kN>
__device__ __forceinline__ int moe_sum_index(int j) {
  return (threadIdx.x % 32) * kN / 32 + j;
}

template <int kN>
__device__ __forceinline__ bool moe_sum_owner() {
  return kN >= 32 || (threadIdx.x % 32) % (32 / kN) == 0;
}

// Calls f(a, t, sum, j) once for each (a, t), on the lane that owns the warp's sum of
// acc[a][t] (every lane must call it), with j its index among that lane's sums (the index of a
// second set's sums from moe_warp_sums of the same shape).
template <int kA, int kM, typename F>
__device__ __forceinline__ void moe_each_sum(const float (&acc)[kA][kM], F&& f) {
  constexpr int kN = kA * kM;
  float sum[moe_sums_per_lane(kN)];
  moe_warp_sums<kA, kM>(acc, sum);
#pragma unroll
  for (int j = 0; j < moe_sums_per_lane(kN); ++j) {
    const int i = moe_sum_index<kN>(j);
    if (moe_sum_owner<kN>()) f(i / kM, i % kM, sum[j], j);
  }
}

// The routing table of a step from the selections' expert ids (ids_s, `selections` = tokens *
// top_k of them, in shared memory), by the whole block: the first selection of each distinct
// expert opens a slot, numbered in selection order. An id outside [0, experts) (only NaN
// logits give one) opens no slot and its selection contributes nothing.
template <int kThreads>
__device__ __forceinline__ void moe_build_table(const int* ids_s, int* first_s, int* slot_s,
                                                int* table, int tokens, int top_k, int experts,
                                                int max_slots) {
  const int selections = tokens * top_k;
  int* slot_expert = table + kMoeTableHeader;
  int* slot_sel = slot_expert + max_slots;
  for (int s = threadIdx.x; s < selections; s += kThreads) {
    const int e = ids_s[s];
    int first = e >= 0 && e < experts ? s : -1;
    for (int p = 0; first == s && p < s; ++p) {
      if (ids_s[p] == e) first = p;
    }
    first_s[s] = first;
  }
  for (int i = threadIdx.x; i < max_slots * tokens; i += kThreads) slot_sel[i] = -1;
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int count = 0;
    for (int base = 0; base < selections; base += 32) {
      const int s = base + lane;
      const bool opens = s < selections && first_s[s] == s;
      const unsigned int mask = __ballot_sync(0xffffffffu, opens);
      if (opens) {
        const int slot = count + __popc(mask & ((1u << lane) - 1u));
        slot_s[s] = slot;
        slot_expert[slot] = ids_s[s];
      }
      count += __popc(mask);
    }
    if (lane == 0) table[0] = count;
  }
  __syncthreads();
  for (int s = threadIdx.x; s < selections; s += kThreads) {
    const int first = first_s[s];
    if (first >= 0) slot_sel[slot_s[first] * tokens + s / top_k] = s;
  }
}

// The calling warp's selection of one token's top-k (every lane must call it) from its row of
// the router's float logits, read past L1 (another CTA wrote them): lane k < top_k receives
// selection k's expert id and weight, as moe_topk_select returns them.
template <int kPerLane>
__device__ __forceinline__ void moe_select_token(const float* logits_row, int experts, int top_k,
                                                 int groups, int topk_groups, int norm_topk_prob,
                                                 float scaling, int& id, float& weight) {
  const int lane = threadIdx.x % 32;
  float l[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * 32 + lane;
    l[j] = e < experts ? load_cg(logits_row + e) : 0.f;
  }
  moe_topk_select<kPerLane>(l, experts, top_k, groups, topk_groups, norm_topk_prob, scaling, id,
                            weight);
}

// x: `tokens` rows of `hidden` at x + t * x_stride; router: [experts, hidden]. CTA c computes
// the logits of experts [c * kRows, (c + 1) * kRows) for every token, its warps splitting
// hidden (warp i takes vectors i * 32 + lane, then every kThreads-th) and summing through
// shared memory, so that a router of few experts per CTA still has every warp streaming.
// Writes logits [tokens, experts], then (the last CTA) weights [tokens, top_k] and the routing
// table, and re-arms `counter` (null with one CTA); with kSelect only the logits (and xn), and
// `counter` is unused.
// With kNorm (rms_norm_moe) the router reads the RMSNorm of x, xn = x * rsqrt(mean(x²) + eps)
// * norm_w rounded to T exactly as the rms_norm kernel stores it: every CTA first sums the
// squares of each token's row (the row is small and in L2; the norm weight was prefetched
// before the wait), and the CTAs share the store of xn [tokens, hidden] for moe_gate_up.
// Launch: grid ceil(experts / kRows), block kThreads, dynamic shared memory 12 * tokens *
// top_k bytes.
// REQUIRES: tokens <= kMaxTokens; experts <= 32 * kPerLane and the rest of moe_topk's
// requirements; hidden % kVec == 0; x, x_stride, norm_w, xn and router aligned to kVec
// elements.
template <typename T, typename W, typename NormW, typename LogitT, typename WeightT, int kThreads,
          int kRows, int kVec, int kPerLane, int kMaxTokens, bool kNorm, bool kSelect>
__global__ void __launch_bounds__(kThreads)
    moe_route(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MOE_ROUTE_PARAMS)) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kPass = moe_rows_per_pass(kThreads, kRows, 1, kMaxTokens, kVec);
  static_assert(kThreads % 32 == 0 && kRows % kPass == 0, "block shape");
  // Also the warps' sums of squares of the norm (kPass >= 1).
  __shared__ float route_sums[kWarps][kPass * kMaxTokens];
  __shared__ float norm_scale[kMaxTokens];
  moe_prefetch_rows<W, kRows, kThreads>(router, blockIdx.x * kRows, experts, hidden);
  if constexpr (kNorm) moe_prefetch_rows<NormW, 1, kThreads>(norm_w, 0, 1, hidden);
  grid_dependency_sync();
  const int warp = threadIdx.x / 32;
  const int e0 = blockIdx.x * kRows;
  const int vecs = hidden / kVec;
  // xn's vector at k of token t, as the rms_norm kernel rounds it (once norm_scale is set).
  auto normalize = [&](int t, long long k, float(&v)[kVec]) {
    if constexpr (kNorm) {
      float g[kVec];
      load_floats<NormW, kVec>(norm_w + k, g);
      const float scale = norm_scale[t];
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[e] = to_float(from_float<T>(v[e] * scale * g[e]));
    }
  };
  if constexpr (kNorm) {
    // Each token's sum of squares over the whole row, then its scale.
    float ss[kMaxTokens];
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) ss[t] = 0.f;
    for (int v = threadIdx.x; v < vecs; v += kThreads) {
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) {
        if (t >= tokens) continue;
        float xv[kVec];
        load_floats<T, kVec>(x + t * x_stride + static_cast<long long>(v) * kVec, xv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss[t] += xv[e] * xv[e];
      }
    }
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) {
      const float sum = group_sum<32>(ss[t]);
      if (threadIdx.x % 32 == 0) route_sums[warp][t] = sum;
    }
    __syncthreads();
    if (threadIdx.x < kMaxTokens) {
      float sum = 0.f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) sum += route_sums[wi][threadIdx.x];
      norm_scale[threadIdx.x] = rsqrtf(sum / static_cast<float>(hidden) + eps);
    }
    __syncthreads();
  }
  int index[kMaxTokens];
#pragma unroll
  for (int t = 0; t < kMaxTokens; ++t) index[t] = t < tokens ? t : -1;
  for (int p0 = 0; p0 < kRows; p0 += kPass) {
    const W* w[kPass];
    float acc[kPass][kMaxTokens];
    moe_row_pointers<W, kPass>(router, e0 + p0, experts, hidden, w);
    moe_zero(acc);
    moe_warp_dots<W, T, kPass, kMaxTokens, kVec>(w, x, x_stride, index, hidden, warp * 32, kThreads,
                                                 acc, normalize);
    moe_each_sum(acc,
                 [&](int a, int t, float sum, int) { route_sums[warp][a * kMaxTokens + t] = sum; });
    __syncthreads();
    for (int i = threadIdx.x; i < kPass * kMaxTokens; i += kThreads) {
      const int e = e0 + p0 + i / kMaxTokens, t = i % kMaxTokens;
      if (e >= experts || t >= tokens) continue;
      float sum = 0.f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) sum += route_sums[wi][i];
      logits[static_cast<long long>(t) * experts + e] = to_float(from_float<LogitT>(sum));
    }
    __syncthreads();  // route_sums is reused by the next pass
  }
  if constexpr (kNorm) {
    // The CTAs share the store of xn (CTA c the vectors i with i % gridDim.x == c), after the
    // logits: only moe_gate_up reads it, and the router's loads need not wait behind it.
    const int stride = kThreads * gridDim.x;
    for (int i = blockIdx.x + threadIdx.x * gridDim.x; i < tokens * vecs; i += stride) {
      const int t = i / vecs;
      const long long k = static_cast<long long>(i % vecs) * kVec;
      float v[kVec];
      load_floats<T, kVec>(x + t * x_stride + k, v);
      normalize(t, k, v);
      store_floats<T, kVec>(xn + static_cast<long long>(t) * hidden + k, v);
    }
  }
  if constexpr (kSelect) return;  // moe_gate_up selects
  if (gridDim.x > 1) {
    if (!last_to_arrive(counter, gridDim.x)) return;
  }

  extern __shared__ int route_smem[];
  int* ids_s = route_smem;  // [tokens * top_k] each, as the table builder reads them
  int* first_s = ids_s + tokens * top_k;
  int* slot_s = first_s + tokens * top_k;
  const int lane = threadIdx.x % 32;
  for (int t = warp; t < tokens; t += kWarps) {
    int id;
    float weight;
    moe_select_token<kPerLane>(logits + static_cast<long long>(t) * experts, experts, top_k,
                               groups, topk_groups, norm_topk_prob, scaling, id, weight);
    if (lane < top_k) {
      ids_s[t * top_k + lane] = id;
      weights[t * top_k + lane] = to_float(from_float<WeightT>(weight));
    }
  }
  __syncthreads();
  moe_build_table<kThreads>(ids_s, first_s, slot_s, table, tokens, top_k, experts, max_slots);
  if (gridDim.x > 1 && threadIdx.x == 0) *counter = 0u;
}

// x as moe_route's; gate, up: [experts, inter, hidden]; shared_gate, shared_up: [shared_inter,
// hidden] (null without shared experts). CTA b < shared_tiles computes shared rows [b * kRows,
// ...) for every token into shared_act [tokens, shared_inter]; CTA shared_tiles + j *
// routed_tiles + y computes rows [y * kRows, ...) of routed slot j (exiting at once when the
// step has fewer slots) for the tokens that chose its expert, into act [tokens * top_k, inter]
// at their selections' rows. Warp i owns kRows / (kThreads / 32) consecutive rows.
// With kSelect (tokens == 1; moe_route wrote the logits only) each routed CTA's first warp
// selects the token's top-k from `logits` itself (moe_topk_select, as moe_route's last CTA
// would): slot j is selection j, its expert the j-th selected. The CTAs of row tile 0 write
// their slot's table entries (to table_out, the table's address; `table` is not read) and
// weight (rounded to WeightT), and the first routed CTA the slot count, for moe_down. A
// selection whose id is outside [0, experts) (only NaN logits give one) computes nothing and
// is entered as no selection (expert 0, row -1).
// Launch: grid shared_tiles + max_slots * routed_tiles, block kThreads.
// REQUIRES: tokens <= kMaxTokens; kRows % (kThreads / 32) == 0; hidden % kVec == 0; x, x_stride
// and the weights aligned to kVec elements; with kSelect tokens == 1, max_slots == top_k and
// experts <= 32 * kPerLane. The selection is held to the registers of 1536 threads per SM (40
// at 256 threads, where the gate/up GEMV keeps 6 CTAs per SM), at most 32 CTAs (every
// architecture's limit); a minimum of 0 leaves the bound as the plain kernel's.
template <typename T, typename W, typename WeightT, int kThreads, int kRows, int kVec,
          int kMaxTokens, int kPerLane, bool kSelect>
__global__ void __launch_bounds__(kThreads,
                                  kSelect ? (1536 / kThreads < 32 ? 1536 / kThreads : 32) : 0)
    moe_gate_up(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MOE_GATE_UP_PARAMS)) {
  using Shape = MoeBlockShape<kThreads, kRows, 2, kMaxTokens, kVec>;
  constexpr int kRowsPerWarp = Shape::kRowsPerWarp, kPass = Shape::kPass;
  const bool is_shared = static_cast<int>(blockIdx.x) < shared_tiles;
  const int tile = is_shared ? blockIdx.x : (blockIdx.x - shared_tiles) % routed_tiles;
  const int rows = is_shared ? shared_inter : inter;
  if (is_shared) {
    // The routed experts' rows depend on the routing; the shared MLP's do not.
    moe_prefetch_rows<W, kRows, kThreads>(shared_gate, tile * kRows, rows, hidden);
    moe_prefetch_rows<W, kRows, kThreads>(shared_up, tile * kRows, rows, hidden);
  }
  grid_dependency_sync();
  const W* w_gate = shared_gate;
  const W* w_up = shared_up;
  const int* sel = nullptr;  // the slot's row of the routing table
  int selected_row = 0;      // kSelect: the token's selection, its row of act
  int index[kMaxTokens];
#pragma unroll
  for (int t = 0; t < kMaxTokens; ++t) index[t] = t < tokens ? t : -1;
  if (!is_shared) {
    const int slot = (blockIdx.x - shared_tiles) / routed_tiles;
    long long e = 0;
    if constexpr (kSelect) {
      __shared__ int selected;
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int id;
        float weight;
        moe_select_token<kPerLane>(logits, experts, top_k, groups, topk_groups, norm_topk_prob,
                                   scaling, id, weight);
        if (lane == slot) {
          const bool valid = id >= 0 && id < experts;
          selected = valid ? id : -1;
          if (tile == 0) {
            table_out[kMoeTableHeader + slot] = valid ? id : 0;
            table_out[kMoeTableHeader + max_slots + slot] = valid ? slot : -1;
            weights[slot] = to_float(from_float<WeightT>(weight));
          }
        }
        if (static_cast<int>(blockIdx.x) == shared_tiles && lane == 0) table_out[0] = top_k;
      }
      __syncthreads();
      if (selected < 0) return;  // the whole CTA: no block-wide synchronization below
      e = selected;
      selected_row = slot;
    } else {
      if (slot >= table[0]) return;  // the whole CTA: no block-wide synchronization below
      e = table[kMoeTableHeader + slot];
      sel = table + kMoeTableHeader + max_slots + slot * tokens;
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) {
        if (t < tokens && sel[t] < 0) index[t] = -1;
      }
    }
    w_gate = gate + e * inter * hidden;
    w_up = up + e * inter * hidden;
  }
  const int r0 = tile * kRows + (threadIdx.x / 32) * kRowsPerWarp;
  for (int p0 = 0; p0 < kRowsPerWarp; p0 += kPass) {
    // Accumulators a < kPass: gate rows r0 + p0 + a; kPass + a: their up rows.
    const W* w[2 * kPass];
    float acc[2 * kPass][kMaxTokens];
    moe_row_pointers<W, kPass>(w_gate, r0 + p0, rows, hidden, w);
    moe_row_pointers<W, kPass>(w_up, r0 + p0, rows, hidden, w + kPass);
    moe_zero(acc);
    moe_warp_dots<W, T, 2 * kPass, kMaxTokens, kVec>(w, x, x_stride, index, hidden, 0, 32, acc);
    float g_acc[kPass][kMaxTokens], u_acc[kPass][kMaxTokens];
#pragma unroll
    for (int a = 0; a < kPass; ++a) {
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) {
        g_acc[a][t] = acc[a][t];
        u_acc[a][t] = acc[kPass + a][t];
      }
    }
    float u[moe_sums_per_lane(kPass * kMaxTokens)];
    moe_warp_sums<kPass, kMaxTokens>(u_acc, u);
    moe_each_sum(g_acc, [&](int a, int t, float g, int j) {
      const int r = r0 + p0 + a;
      if (r >= rows || t >= tokens) return;
      const float h = silu(g) * u[j];
      if (is_shared) {
        shared_act[static_cast<long long>(t) * shared_inter + r] = h;
      } else if (kSelect) {
        act[static_cast<long long>(selected_row) * inter + r] = h;
      } else if (sel[t] >= 0) {
        act[static_cast<long long>(sel[t]) * inter + r] = h;
      }
    });
  }
}

// down: [experts, cols, inter]; shared_down: [cols, shared_inter] (null when `shared` is 0);
// weights, act, shared_act: moe_route's and moe_gate_up's; residual: null, or `tokens` rows of
// `cols` at residual + t * residual_stride (may alias out); out: [tokens, cols]. CTA (c, y)
// computes features [c * kRows, ...) of every token over its share of the slots: the routed
// slots j with j % splits == y and, in the last split (y = splits - 1), the shared MLP. Each
// down row is read once for all the tokens that chose its expert, and each token's product is
// weighted by its selection's weight before it is summed. The slots' rows are short (I = 768 is
// 96 vectors), so the CTA's threads walk the vectors of all its slots' rows as one sequence,
// every thread holding every one of the CTA's features (kPass of them at a time): a thread
// keeps kPass loads in flight per step of the walk across the slots, and the warps' sums meet
// in shared memory, in warp order. With splits = gridDim.y > 1 each CTA stores its float sums
// to `partials` [splits, tokens, cols] and the last CTA of feature tile c to arrive
// (counters[c], re-armed by it) adds them in split order and the residual; with one split the
// CTA writes the output itself.
// Launch: grid (ceil(cols / kRows), splits), block kThreads, dynamic shared memory
// MoeDownSharedBytes(max_slots, kMaxTokens). kAfterWait: the routing was written by
// moe_gate_up (kSelect) for one token, so it is read after the dependency wait, every slot is
// entered (slot j is selection j, its weight weights[j]) and its loads are independent of
// each other; the kernel is then held to 64 registers, so that a Qwen3-30B-A3B block's 512
// CTAs of 256 threads run in one wave of 132 SMs.
// REQUIRES: tokens <= kMaxTokens; inter and shared_inter multiples of kVec; the weights aligned
// to kVec elements; with kAfterWait tokens == 1 and max_slots == top_k.
template <typename T, typename W, int kThreads, int kRows, int kVec, int kMaxTokens,
          bool kAfterWait>
__global__ void __launch_bounds__(kThreads, kAfterWait ? 1024 / kThreads : 0)
    moe_down(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MOE_DOWN_PARAMS)) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kPass = moe_rows_per_pass(kThreads, kRows, 1, kMaxTokens, kVec);
  // Steps of the walk whose loads are issued together: more for few tokens, whose activation
  // vectors leave the registers for it.
  constexpr int kUnroll = kMaxTokens <= 2 ? 4 : 2;
  static_assert(kThreads % 32 == 0 && kRows % kPass == 0, "block shape");
  __shared__ float down_sums[kWarps][kPass * kMaxTokens];
  const int splits = gridDim.y, split = blockIdx.y;
  const bool has_shared = shared != 0 && split == splits - 1;
  if (has_shared) {
    moe_prefetch_rows<W, kRows, kThreads>(shared_down, blockIdx.x * kRows, cols, shared_inter);
  }
  // The routing (moe_route's table and weights) is read before the dependency wait: this grid
  // begins only once every moe_gate_up CTA has passed its own wait, which returns after
  // moe_route's grid completed, so the routing is final and in memory (read past L1, which
  // is not coherent); only the activations need moe_gate_up. Without programmatic launch
  // the grids run in stream order and the same holds. With kAfterWait (moe_gate_up wrote the
  // routing, kSelect) it is read after the wait.
  // Slot j < slots: routed; slot `slots`: the shared MLP (every token, weight 1).
  if constexpr (kAfterWait) grid_dependency_sync();
  const int slots = kAfterWait ? max_slots : load_cg(table);
  extern __shared__ __align__(16) int down_smem[];
  int* s_expert = down_smem;              // [max_slots + 1]
  int* s_row = s_expert + max_slots + 1;  // [max_slots + 1][kMaxTokens]
  float* s_coef = reinterpret_cast<float*>(s_row + (max_slots + 1) * kMaxTokens);  // same
  for (int i = threadIdx.x; i < (slots + shared) * kMaxTokens; i += kThreads) {
    const int j = i / kMaxTokens, t = i % kMaxTokens;
    const bool routed = j < slots;
    const int s = t >= tokens ? -1
                  : routed    ? load_cg(table + kMoeTableHeader + max_slots + j * tokens + t)
                              : t;
    s_row[i] = s;
    if constexpr (kAfterWait) {
      const float c = routed && t < tokens ? load_cg(weights + j) : 1.f;
      s_coef[i] = s < 0 ? 0.f : c;
    } else {
      s_coef[i] = s < 0 ? 0.f : routed ? load_cg(weights + s) : 1.f;
    }
    if (t == 0) s_expert[j] = routed ? load_cg(table + kMoeTableHeader + j) : 0;
  }
  __syncthreads();
  if constexpr (!kAfterWait) grid_dependency_sync();
  const int warp = threadIdx.x / 32;
  const int routed_vecs = inter / kVec;
  const int own = split < slots ? (slots - 1 - split) / splits + 1 : 0;  // routed slots
  const int total = own * routed_vecs + (has_shared ? shared_inter / kVec : 0);
  const int r_base = blockIdx.x * kRows;
  for (int p0 = 0; p0 < kRows; p0 += kPass) {
    float acc[kPass][kMaxTokens];
    moe_zero(acc);
#pragma unroll kUnroll
    for (int i = threadIdx.x; i < total; i += kThreads) {
      const bool routed = i < own * routed_vecs;
      const int n = routed ? i / routed_vecs : own;  // the CTA's n-th slot
      const int j = routed ? split + n * splits : slots;
      const long long k = static_cast<long long>(i - n * routed_vecs) * kVec;
      const int depth = routed ? inter : shared_inter;
      const W* base =
          routed ? down + static_cast<long long>(s_expert[j]) * cols * inter : shared_down;
      const float* in = routed ? act : shared_act;
      float wv[kPass][kVec];
#pragma unroll
      for (int a = 0; a < kPass; ++a) {
        const int r = r_base + p0 + a;
        if (r < cols) {
          load_floats<W, kVec>(base + static_cast<long long>(r) * depth + k, wv[a]);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) wv[a][e] = 0.f;
        }
      }
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) {
        const int s = s_row[j * kMaxTokens + t];
        if (s < 0) continue;
        float hv[kVec];
        load_floats<float, kVec>(in + static_cast<long long>(s) * depth + k, hv);
        const float c = s_coef[j * kMaxTokens + t];
#pragma unroll
        for (int a = 0; a < kPass; ++a) {
          float dot = 0.f;
#pragma unroll
          for (int e = 0; e < kVec; ++e) dot += wv[a][e] * hv[e];
          acc[a][t] += c * dot;
        }
      }
    }
    moe_each_sum(acc,
                 [&](int a, int t, float sum, int) { down_sums[warp][a * kMaxTokens + t] = sum; });
    __syncthreads();
    for (int i = threadIdx.x; i < kPass * kMaxTokens; i += kThreads) {
      const int a = i / kMaxTokens, t = i % kMaxTokens;
      const int r = r_base + p0 + a;
      if (r >= cols || t >= tokens) continue;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += down_sums[w][i];
      if (splits > 1) {
        partials[(static_cast<long long>(split) * tokens + t) * cols + r] = sum;
        continue;
      }
      if (residual != nullptr) sum += to_float(residual[t * residual_stride + r]);
      out[static_cast<long long>(t) * cols + r] = from_float<T>(sum);
    }
    __syncthreads();  // down_sums is reused by the next pass
  }
  if (splits == 1 || !last_to_arrive(&counters[blockIdx.x], splits)) return;
  for (int i = threadIdx.x; i < kRows * tokens; i += kThreads) {
    const int r = blockIdx.x * kRows + i / tokens, t = i % tokens;
    if (r >= cols) continue;
    float sum = 0.f;
    for (int y = 0; y < splits; ++y) {
      sum += load_cg(partials + (static_cast<long long>(y) * tokens + t) * cols + r);
    }
    if (residual != nullptr) sum += to_float(residual[t * residual_stride + r]);
    out[static_cast<long long>(t) * cols + r] = from_float<T>(sum);
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

}  // namespace tileplan
