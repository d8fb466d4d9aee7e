// The split-KV decode walk on tensor cores (the `mma` engine of attention_decode): a CTA's
// queries of one kv head in passes of 16 rows (the M of mma.sync.m16n8k16; a GQA group and
// its new tokens fill them, zero rows past the CTA's queries), every K and V row read once
// per pass for all of them. Warp w takes the 16-key steps j0 = jb + 16 w, jb + 16 (w +
// kWarps), ... of each chunk of the split, keeps its own online softmax for the 16 rows and
// writes its (o, m, l) record per query to shared memory, where split_kv_attend merges the
// warps as it does for the CUDA-core walk. No shared memory and no barrier inside the walk:
// the lanes load K and V from global memory straight into the mma's operand registers.
//
// That works because a dot product and the output columns do not care in which order they
// are visited. With lane = 4 g + c:
//
//   S = Q K^T   B operand (k = head dims, n = keys): the lane loads key j0 + 8 t + g of n-tile
//               t, its 16-byte chunks c, c + 4, c + 8, ... (so the four lanes of a key read
//               64 contiguous bytes per load); its i-th dim of them is local dim i, and
//               k-step s takes local dims 4 s + {0, 1} as logical k {2c, 2c + 1} and
//               4 s + {2, 3} as {2c + 8, 2c + 9}. Q's A fragments (built once per pass from
//               the float queries) use the same map, so every dim meets its query dim once.
//   O = P V     A = P straight from S's accumulators (n-tiles 0 and 1 = logical keys 0-7 and
//               8-15 of the step); B (k = keys, n = dims): the lane loads chunks g, g + 8 (the
//               eight lanes of a key read 128 contiguous bytes per load) of keys j0 + 2c +
//               {0, 1, 8, 9} and pairs them with byte permutes: n-tile j's column n is dim
//               8 (n + 8 (j / 8)) + j % 8.
//
// With kAhead the warp's next step's K and V are loaded before the current step is scored
// (one step of registers more), so a warp keeps its loads in flight while its tensor cores
// and exponentials run; without, a step's loads are issued when it starts.
//
// Keys past the chunk's visible rows are clamped to its last one for the loads (a written
// row, so finite) and masked to -inf, so they weigh nothing. Scores are in the log2 domain
// (the queries come scaled by scale * log2(e)). Precision: the queries are rounded to T once
// per pass and the probabilities once per step, as the flash prefill kernel rounds them;
// every product accumulates in float32 and the softmax sums use the unrounded
// probabilities.
#pragma once

#include "primitives.cuh"

namespace tileplan {

// q_s: [num_q][kHeadDim] float queries (query qi = t * group + member, of token t), scaled;
// s_first / s_last: token t's visible rows; k_rows / v_rows: the kv head's cache rows (row r at
// r * kHeadDim); [lo, hi]: the union of the tokens' rows; part_s: the records
// [kWarps][num_q][kHeadDim + 2] (o, m, l) that split_kv_attend merges.
// REQUIRES: every thread of the block calls it; T bf16 or f16; kHeadDim 64 or 128.
template <typename T, int kHeadDim, int kKvChunk, int kSplits, int kWarps, bool kAhead>
__device__ __forceinline__ void split_kv_mma_walk(const float* q_s, float* part_s,
                                                  const int* s_first, const int* s_last,
                                                  const T* k_rows, const T* v_rows, int split,
                                                  int lo, int hi, int num_q, int group) {
  static_assert(is_same<T, bf16>::value || is_same<T, f16>::value, "mma inputs: bf16 or f16");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the mma walk serves head_dim 64 and 128");
  constexpr int kKSteps = kHeadDim / 16;   // k-steps of S
  constexpr int kNTiles = kHeadDim / 8;    // n-tiles of O
  constexpr int kKChunks = kHeadDim / 32;  // a lane's 16-byte chunks of a K row
  constexpr int kVChunks = kHeadDim / 64;  // ... of a V row
  constexpr int kPart = kHeadDim + 2;
  constexpr int kStep = 16;  // keys per warp step: the k of P V
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  for (int q0 = 0; q0 < num_q; q0 += 16) {
    const int r0 = q0 + g, r1 = q0 + g + 8;
    const bool has0 = r0 < num_q, has1 = r1 < num_q;
    unsigned int qa[kKSteps][4];
#pragma unroll
    for (int s = 0; s < kKSteps; ++s) {
      const int d = 8 * (4 * (s / 2) + c) + 4 * (s % 2);
      const float* a = q_s + (has0 ? r0 : 0) * kHeadDim + d;
      const float* b = q_s + (has1 ? r1 : 0) * kHeadDim + d;
      qa[s][0] = has0 ? pack2<T>(a[0], a[1]) : 0u;
      qa[s][1] = has1 ? pack2<T>(b[0], b[1]) : 0u;
      qa[s][2] = has0 ? pack2<T>(a[2], a[3]) : 0u;
      qa[s][3] = has1 ? pack2<T>(b[2], b[3]) : 0u;
    }
    // Each row's visible keys (an empty range for rows past the queries).
    const int first0 = has0 ? s_first[r0 / group] : 1, last0 = has0 ? s_last[r0 / group] : 0;
    const int first1 = has1 ? s_first[r1 / group] : 1, last1 = has1 ? s_last[r1 / group] : 0;
    float m0 = neg_inf(), m1 = neg_inf(), l0 = 0.f, l1 = 0.f;
    float o[kNTiles][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    // The lanes' K and V registers of the step at keys j0 .. j0 + 15 (clamped to je).
    auto load_step = [&](int j0, int je, RawVec<T, 8>(&kr)[2][kKChunks],
                         RawVec<T, 8>(&vr)[4][kVChunks]) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const T* row = k_rows + static_cast<long long>(min(j0 + 8 * t + g, je)) * kHeadDim;
#pragma unroll
        for (int v = 0; v < kKChunks; ++v) kr[t][v] = load_raw<T, 8>(row + 8 * (4 * v + c));
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = min(j0 + 2 * c + (i & 1) + 8 * (i >> 1), je);
        const T* row = v_rows + static_cast<long long>(key) * kHeadDim;
#pragma unroll
        for (int u = 0; u < kVChunks; ++u) vr[i][u] = load_raw<T, 8>(row + 8 * (g + 8 * u));
      }
    };
    // Scores the step's keys into the rows' online softmax and output.
    auto score_step = [&](int j0, int je, const RawVec<T, 8>(&kr)[2][kKChunks],
                          const RawVec<T, 8>(&vr)[4][kVChunks]) {
      float sc[2][4];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.f;
#pragma unroll
        for (int s = 0; s < kKSteps; ++s) {
          const RawVec<T, 8>& k = kr[t][s / 2];
          mma_m16n8k16<T>(sc[t], qa[s], k.w[2 * (s % 2)], k.w[2 * (s % 2) + 1]);
        }
      }
      // Mask, then each row's max over the step (its 16 keys sit in the lanes of a quad).
      float mx0 = neg_inf(), mx1 = neg_inf();
#pragma unroll
      for (int t = 0; t < 2; ++t) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = j0 + 8 * t + 2 * c + e;
          const bool in = key <= je;
          sc[t][e] = in && key >= first0 && key <= last0 ? sc[t][e] : neg_inf();
          sc[t][2 + e] = in && key >= first1 && key <= last1 ? sc[t][2 + e] : neg_inf();
          mx0 = fmaxf(mx0, sc[t][e]);
          mx1 = fmaxf(mx1, sc[t][2 + e]);
        }
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
      // A row that has seen nothing visible keeps m = -inf, l = 0 and o = 0: its base is 0,
      // so every exp2 below is of -inf.
      const float base0 = n0 == neg_inf() ? 0.f : n0;
      const float base1 = n1 == neg_inf() ? 0.f : n1;
      const float corr0 = exp2f(m0 - base0), corr1 = exp2f(m1 - base1);
      m0 = n0;
      m1 = n1;
      float p[2][4];
      float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        p[t][0] = exp2f(sc[t][0] - base0);
        p[t][1] = exp2f(sc[t][1] - base0);
        p[t][2] = exp2f(sc[t][2] - base1);
        p[t][3] = exp2f(sc[t][3] - base1);
        sum0 += p[t][0] + p[t][1];
        sum1 += p[t][2] + p[t][3];
      }
      l0 = l0 * corr0 + sum0;
      l1 = l1 * corr1 + sum1;
      if (__any_sync(0xffffffffu, corr0 != 1.f || corr1 != 1.f)) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          o[j][0] *= corr0;
          o[j][1] *= corr0;
          o[j][2] *= corr1;
          o[j][3] *= corr1;
        }
      }
      const unsigned int pa[4] = {pack2<T>(p[0][0], p[0][1]), pack2<T>(p[0][2], p[0][3]),
                                  pack2<T>(p[1][0], p[1][1]), pack2<T>(p[1][2], p[1][3])};
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const unsigned int sel = (j & 1) != 0 ? 0x7632u : 0x5410u;
        const int u = j / 8, w = (j % 8) / 2;
        const unsigned int b0 = __byte_perm(vr[0][u].w[w], vr[1][u].w[w], sel);
        const unsigned int b1 = __byte_perm(vr[2][u].w[w], vr[3][u].w[w], sel);
        mma_m16n8k16<T>(o[j], pa, b0, b1);
      }
    };
    if constexpr (!kAhead) {
      for (int c0 = split * kKvChunk; c0 <= hi; c0 += kSplits * kKvChunk) {
        const int jb = max(c0, lo), je = min(c0 + kKvChunk - 1, hi);
        for (int j0 = jb + kStep * warp; j0 <= je; j0 += kStep * kWarps) {
          RawVec<T, 8> kr[2][kKChunks];
          RawVec<T, 8> vr[4][kVChunks];
          load_step(j0, je, kr, vr);
          score_step(j0, je, kr, vr);
        }
      }
    } else {
      // The same steps in the same order as one sequence: (c0, j0) is a step of chunk c0
      // whose last visible key is je; seek moves to the first step of chunk c0 or a later one.
      auto seek = [&](int& c0, int& j0, int& je) {
        for (; c0 <= hi; c0 += kSplits * kKvChunk) {
          je = min(c0 + kKvChunk - 1, hi);
          j0 = max(c0, lo) + kStep * warp;
          if (j0 <= je) return true;
        }
        return false;
      };
      int c0 = split * kKvChunk, j0 = 0, je = -1;
      bool have = seek(c0, j0, je);
      RawVec<T, 8> kr[2][kKChunks];
      RawVec<T, 8> vr[4][kVChunks];
      if (have) load_step(j0, je, kr, vr);
      while (have) {
        int c1 = c0, j1 = j0 + kStep * kWarps, e1 = je;
        const bool next = j1 <= e1 || (c1 += kSplits * kKvChunk, seek(c1, j1, e1));
        RawVec<T, 8> kn[2][kKChunks];
        RawVec<T, 8> vn[4][kVChunks];
        if (next) load_step(j1, e1, kn, vn);
        score_step(j0, je, kr, vr);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
#pragma unroll
          for (int v = 0; v < kKChunks; ++v) kr[t][v] = kn[t][v];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int u = 0; u < kVChunks; ++u) vr[i][u] = vn[i][u];
        }
        have = next;
        c0 = c1;
        j0 = j1;
        je = e1;
      }
    }
    // The quad's lanes hold a row's sums over their own keys.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    // Output column n of n-tile j: dim 8 (n + 8 (j / 8)) + j % 8, n = 2c and 2c + 1; the
    // accumulators' elements 0 and 1 are row r0's, 2 and 3 row r1's.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h == 0 ? r0 : r1;
      if (r >= num_q) continue;
      float* part = part_s + (warp * num_q + r) * kPart;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const int d = 8 * (2 * c + 8 * (j / 8)) + j % 8;
        part[d] = o[j][2 * h];
        part[d + 8] = o[j][2 * h + 1];
      }
      if (c == 0) {
        part[kHeadDim] = h == 0 ? m0 : m1;
        part[kHeadDim + 1] = h == 0 ? l0 : l1;
      }
    }
  }
}

}  // namespace tileplan
