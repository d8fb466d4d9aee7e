// Multi-head latent attention over a prompt in the un-absorbed form (family mla_prefill),
// two launches on tensor cores (mma.sync.m16n8k16, bf16 or f16, sm_80+):
//
//   mla_expand_kv      kv[b, j, :] = w_kv_b · latent_cache[b, 0, j, :]   as two T parts,
//                      kv = round(x) and kv_lo = round(x - kv) (x the float32 product),
//                      for every cache row j up to the largest valid position of sequence b:
//                      each head's key part k_nope (its first Dn) and value (the next Dv),
//                      in w_kv_b's row order, a GEMM of [rows, C] by [C, H·(Dn+Dv)].
//   mla_prefill_flash  out[b, t, h, :] = softmax_j(scale · [q_nope | q_rope] · [k_nope | k_rope]_j)
//                      v_j over rows j <= positions[b, t], where k_rope_j = rope_cache[b, 0, j]
//                      is the one rotated key shared by every head: flash attention with a
//                      QK dim of Dn + Dr and a V dim of Dv.
//
// The keys carry both parts: Q · K is contracted over [q_nope | q_rope | q_nope] against
// [k_nope | k_rope | k_nope_lo], so the scores see the expanded keys to about float32
// accuracy (the rope key is stored in T and exact). The values are the rounded part alone.
//
// Both kernels stage 16-byte chunks with cp.async into shared-memory rows whose chunks are
// XOR-swizzled by the row index (conflict-free ldmatrix), as attention_prefill_flash.cuh.
#pragma once

#include "mla_attention_absorbed.cuh"
#include "mla_attention_params.h"
#include "primitives.cuh"

namespace tileplan {

// The largest valid position of sequence b plus one (0 when none): the cache rows its new
// tokens see. Every thread of the block calls it; positions outside [0, capacity) are left
// to the attention kernel, which reports them.
__device__ __forceinline__ int mla_sequence_rows(const int* positions, int b, int tokens,
                                                 int capacity, int* s_rows) {
  if (threadIdx.x == 0) *s_rows = 0;
  __syncthreads();
  int hi = 0;
  for (int t = threadIdx.x; t < tokens; t += blockDim.x) {
    const int p = positions[static_cast<long long>(b) * tokens + t];
    if (p >= 0 && p < capacity) hi = max(hi, p + 1);
  }
  if (hi > 0) atomicMax(s_rows, hi);
  __syncthreads();
  return *s_rows;
}

// latent_cache: [batch, 1, capacity, kC]; w_kv_b: [n, kC] in T; kv, kv_lo: [batch, capacity, n];
// positions: [batch, tokens]. CTA (x, y, b) computes rows [y · kTileM, ...) by features
// [x · kTileN, ...) of sequence b, and exits when its rows all lie past the sequence's rows.
// Rows past them are not written. kC need not divide into slices: the last slice's missing
// columns are zero-filled, as are weight rows past n.
//
// Launch: grid (ceil(n / kTileN), ceil(capacity / kTileM), batch), block 32 · kWarpsM ·
// kWarpsN, dynamic shared memory MlaExpandSharedBytes(kTileM, kTileN, kStages, sizeof(T)).
// REQUIRES: T bf16 or f16; kC % 8 == 0; n % 8 == 0; pointers aligned to 16 bytes; kTileM a
// multiple of 16 · kWarpsM and kTileN of 16 · kWarpsN.
template <typename T, int kC, int kTileM, int kTileN, int kStages, int kWarpsM, int kWarpsN>
__global__ void __launch_bounds__(kWarpsM* kWarpsN * 32)
    mla_expand_kv(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MLA_EXPAND_KV_PARAMS)) {
  grid_dependency_sync();
  constexpr int kThreads = kWarpsM * kWarpsN * 32;
  constexpr int kSlice = kMlaExpandSlice;
  constexpr int kChunks = kSlice / 8;
  constexpr int kMask = chunk_swizzle_mask(kChunks);
  constexpr int kWarpM = kTileM / kWarpsM;  // rows per warp
  constexpr int kWarpN = kTileN / kWarpsN;  // features per warp
  constexpr int kMTiles = kWarpM / 16;
  constexpr int kNTiles = kWarpN / 8;
  constexpr int kSlices = (kC + kSlice - 1) / kSlice;
  static_assert(kC % 8 == 0, "16-byte latent rows");
  static_assert(kMTiles >= 1 && kWarpM % 16 == 0, "16-row tiles per warp");
  static_assert(kNTiles >= 2 && kNTiles % 2 == 0, "pairs of 8-feature tiles per warp");
  static_assert(kStages >= 2 && kStages <= 4, "stages");

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* tiles = reinterpret_cast<T*>(smem_bytes);  // [kStages][kTileM + kTileN][kSlice]
  __shared__ int s_rows;
  auto at = [](T* tile, int row, int col) { return swizzled<kSlice, kMask>(tile, row, col); };

  const int b = blockIdx.z;
  const int m0 = blockIdx.y * kTileM;
  const int n0 = blockIdx.x * kTileN;
  const int rows = mla_sequence_rows(positions, b, tokens, capacity, &s_rows);
  if (m0 >= rows) return;  // uniform over the block

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const int wm = warp / kWarpsN;
  const int wn = warp % kWarpsN;
  const T* latent = latent_cache + static_cast<long long>(b) * capacity * kC;

  auto load_slice = [&](int stage, int slice) {
    T* a = tiles + stage * (kTileM + kTileN) * kSlice;
    T* w = a + kTileM * kSlice;
    const int c0 = slice * kSlice;
    for (int i = threadIdx.x; i < (kTileM + kTileN) * kChunks; i += kThreads) {
      const int r = i / kChunks, col = (i % kChunks) * 8;
      const bool col_ok = c0 + col < kC;
      if (r < kTileM) {
        const int j = m0 + r;
        const bool ok = col_ok && j < rows;
        cp_async_16(at(a, r, col),
                    latent + static_cast<long long>(ok ? j : 0) * kC + (ok ? c0 + col : 0), ok);
      } else {
        const int f = n0 + r - kTileM;
        const bool ok = col_ok && f < n;
        cp_async_16(at(w, r - kTileM, col),
                    w_kv_b + static_cast<long long>(ok ? f : 0) * kC + (ok ? c0 + col : 0), ok);
      }
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kSlices) load_slice(s, s);
    cp_async_commit();
  }

  float acc[kMTiles][kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    }
  }
  for (int it = 0; it < kSlices; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    // The stage refilled here was consumed in the previous iteration; the barrier ordered it.
    const int next = it + kStages - 1;
    if (next < kSlices) load_slice(next % kStages, next);
    cp_async_commit();
    T* a = tiles + (it % kStages) * (kTileM + kTileN) * kSlice;
    T* w = a + kTileM * kSlice;
#pragma unroll
    for (int ks = 0; ks < kSlice / 16; ++ks) {
      unsigned int af[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const int row = wm * kWarpM + mt * 16 + ((lane / 8) % 2) * 8 + lane % 8;
        ldmatrix_x4(af[mt], at(a, row, ks * 16 + (lane / 16) * 8));
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; nt += 2) {
        unsigned int wb[4];
        ldmatrix_x4(wb, at(w, wn * kWarpN + (nt + lane / 16) * 8 + lane % 8,
                           ks * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<T>(acc[mt][nt], af[mt], wb[0], wb[1]);
          mma_m16n8k16<T>(acc[mt][nt + 1], af[mt], wb[2], wb[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  T* dst = kv + static_cast<long long>(b) * capacity * n;
  T* dst_lo = kv_lo + static_cast<long long>(b) * capacity * n;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = m0 + wm * kWarpM + mt * 16 + g + 8 * half;
      if (j >= rows) continue;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int f = n0 + wn * kWarpN + nt * 8 + 2 * qd;
        if (f >= n) continue;
        const float x0 = acc[mt][nt][2 * half], x1 = acc[mt][nt][2 * half + 1];
        const unsigned int hi = pack2<T>(x0, x1);
        *reinterpret_cast<unsigned int*>(dst + static_cast<long long>(j) * n + f) = hi;
        *reinterpret_cast<unsigned int*>(dst_lo + static_cast<long long>(j) * n + f) =
            pack2<T>(x0 - word_element<T>(&hi, 0), x1 - word_element<T>(&hi, 1));
      }
    }
  }
}

// q_nope, q_rope: token bt's head h at bt · *_token_stride + h · *_head_stride; kv, kv_lo:
// [batch, capacity, heads · (kDn + kDv)] from mla_expand_kv; rope_cache: [batch, 1, capacity, kDqk
// - kDn]; out: contiguous [batch · tokens, heads, kDv]. A token whose position lies outside [0,
// capacity) gets a zero row: with `error` non-null the CTAs of head 0 raise *error to at least its
// flat index + 1; with `error` null the kernel traps.
//
// CTA (x, h, b) owns query rows [m · kTileQ, (m + 1) · kTileQ) of head h, m = gridDim.x - 1 -
// x (the longest causal walks start first); its kWarps warps take kTileQ / (16 · kWarps) row
// tiles of 16 each and hold S and O in registers, Q's fragments too with one row tile per
// warp. The walk covers keys [0, the tile's largest position], kTileKv at a time through a
// kStages-deep cp.async pipeline (rows past it zero-filled); the online softmax runs in the
// log2 domain and P is rounded to T for P · V.
//
// Launch: grid (ceil(tokens / kTileQ), heads, batch), block 32 · kWarps, dynamic shared
// memory MlaPrefillSharedBytes(kDqk + kDn, kDv, kTileQ, kTileKv, kStages, sizeof(T)).
// Dims that are no multiple of 16 are zero-padded to one in shared memory (QK k-steps, pairs of
// 8-wide V tiles); the padding never reaches the output.
// REQUIRES: T bf16 or f16; kDn, kDqk - kDn and kDv multiples of 8; q strides multiples
// of 8 elements; pointers aligned to 16 bytes.
template <typename T, int kDqk, int kDn, int kDv, int kTileQ, int kTileKv, int kStages, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    mla_prefill_flash(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_MLA_PREFILL_PARAMS)) {
  grid_dependency_sync();
  constexpr int kDr = kDqk - kDn;
  constexpr int kThreads = kWarps * 32;
  constexpr int kMTiles = kTileQ / (16 * kWarps);
  constexpr int kQkExt = kDqk + kDn;               // [nope | rope | nope] against [hi | rope | lo]
  constexpr int kQkPad = (kQkExt + 15) / 16 * 16;  // the QK dim in shared memory
  constexpr int kVPad = (kDv + 15) / 16 * 16;      // the V dim in shared memory
  constexpr int kKSteps = kQkPad / 16;
  constexpr int kNTiles = kTileKv / 8;
  constexpr int kDTiles = kVPad / 8;
  constexpr int kPSteps = kTileKv / 16;
  constexpr int kQkChunks = kDqk / 8;     // nope and rope
  constexpr int kExtChunks = kQkExt / 8;  // and the second nope part; kQkPad / 8 stored
  constexpr int kQkPadChunks = kQkPad / 8;
  constexpr int kNopeChunks = kDn / 8;
  constexpr int kVChunks = kDv / 8;
  constexpr int kVPadChunks = kVPad / 8;
  constexpr int kQkMask = chunk_swizzle_mask(kQkPadChunks);
  constexpr int kVMask = chunk_swizzle_mask(kVPadChunks);
  constexpr int kRow = kDn + kDv;  // one head's features in a kv row
  static_assert(kDqk % 8 == 0 && kDn % 8 == 0 && kDr > 0 && kDv % 8 == 0, "16-byte chunks");
  static_assert(kTileKv % 16 == 0, "16-key steps");
  static_assert(kMTiles >= 1 && kTileQ % (16 * kWarps) == 0, "16 * kWarps divides kTileQ");
  static_assert(kStages >= 1 && kStages <= 4, "stages");
  constexpr bool kQInRegisters = kMTiles == 1 && kKSteps * 4 + kDTiles * 4 + kNTiles * 4 <= 160;

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* q_s = reinterpret_cast<T*>(smem_bytes);  // [kTileQ][kQkPad]
  T* kv_s = q_s + kTileQ * kQkPad;  // [kStages]: K [kTileKv][kQkPad], then V [kTileKv][kVPad]
  __shared__ int s_last;
  auto at_qk = [](T* tile, int row, int col) { return swizzled<kQkPad, kQkMask>(tile, row, col); };
  auto at_v = [](T* tile, int row, int col) { return swizzled<kVPad, kVMask>(tile, row, col); };

  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const int row0 = (gridDim.x - 1 - blockIdx.x) * kTileQ;
  const int warp_row0 = warp * kMTiles * 16;
  const long long n = static_cast<long long>(heads) * kRow;

  // The position of query row r of this tile, -1 when there is none or it is out of range.
  auto row_position = [&](int r, bool raise) {
    const int t = row0 + r;
    if (t >= tokens) return -1;
    return mla_checked_position(positions, b * tokens + t, capacity, error, raise && h == 0);
  };
  if (threadIdx.x == 0) s_last = -1;
  __syncthreads();
  for (int r = threadIdx.x; r < kTileQ; r += kThreads) {
    const int p = row_position(r, true);
    if (p >= 0) atomicMax(&s_last, p);
  }
  __syncthreads();
  const int kv_end = s_last + 1;
  const int n_tiles = (kv_end + kTileKv - 1) / kTileKv;

  int p_row[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    p_row[mt][0] = row_position(warp_row0 + mt * 16 + g, false);
    p_row[mt][1] = row_position(warp_row0 + mt * 16 + g + 8, false);
  }

  // Q: the nope chunks, the rope chunks, the nope chunks again (rows past the tokens and the
  // padding zero-filled).
  for (int c = threadIdx.x; c < kTileQ * kQkPadChunks; c += kThreads) {
    const int r = c / kQkPadChunks, chunk = c % kQkPadChunks;
    const int t = row0 + r;
    const bool ok = t < tokens && chunk < kExtChunks;
    const long long bt = static_cast<long long>(b) * tokens + (ok ? t : 0);
    const T* nope = q_nope + bt * q_nope_token_stride + h * q_nope_head_stride;
    const T* src = chunk < kNopeChunks ? nope + chunk * 8
                   : chunk < kQkChunks ? q_rope + bt * q_rope_token_stride +
                                             h * q_rope_head_stride + (chunk - kNopeChunks) * 8
                                       : nope + (ok ? chunk - kQkChunks : 0) * 8;
    cp_async_16(at_qk(q_s, r, chunk * 8), src, ok);
  }
  const T* kv_b = kv + static_cast<long long>(b) * capacity * n + static_cast<long long>(h) * kRow;
  const T* kv_lo_b =
      kv_lo + static_cast<long long>(b) * capacity * n + static_cast<long long>(h) * kRow;
  const T* rope_b = rope_cache + static_cast<long long>(b) * capacity * kDr;
  auto load_tile = [&](int stage, int tile) {
    T* kt = kv_s + stage * kTileKv * (kQkPad + kVPad);
    T* vt = kt + kTileKv * kQkPad;
    const int j0 = tile * kTileKv;
    for (int c = threadIdx.x; c < kTileKv * (kQkPadChunks + kVPadChunks); c += kThreads) {
      const int r = c / (kQkPadChunks + kVPadChunks), chunk = c % (kQkPadChunks + kVPadChunks);
      const int j = j0 + r;
      const bool ok = j < kv_end;
      const long long row = ok ? j : 0;
      if (chunk < kNopeChunks) {
        cp_async_16(at_qk(kt, r, chunk * 8), kv_b + row * n + chunk * 8, ok);
      } else if (chunk < kQkChunks) {
        cp_async_16(at_qk(kt, r, chunk * 8), rope_b + row * kDr + (chunk - kNopeChunks) * 8, ok);
      } else if (chunk < kQkPadChunks) {
        const bool lo_ok = ok && chunk < kExtChunks;
        cp_async_16(at_qk(kt, r, chunk * 8),
                    kv_lo_b + row * n + (lo_ok ? chunk - kQkChunks : 0) * 8, lo_ok);
      } else {
        const int vc = chunk - kQkPadChunks;
        const bool v_ok = ok && vc < kVChunks;
        cp_async_16(at_v(vt, r, vc * 8), kv_b + row * n + kDn + (v_ok ? vc : 0) * 8, v_ok);
      }
    }
  };
  if constexpr (kStages == 1) {
    cp_async_commit();  // Q alone
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_tiles) load_tile(s, s);
      cp_async_commit();  // the first group carries Q too
    }
  }

  float o[kMTiles][kDTiles][4];
  float m_row[kMTiles][2], l_row[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    }
    m_row[mt][0] = m_row[mt][1] = neg_inf();
    l_row[mt][0] = l_row[mt][1] = 0.f;
  }
  // The last key every row of this warp sees: tiles up to it need no mask (warp-uniform).
  int all_see_to = 0x7fffffff;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    all_see_to = min(all_see_to, min(p_row[mt][0], p_row[mt][1]));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    all_see_to = min(all_see_to, __shfl_xor_sync(0xffffffffu, all_see_to, off));
  }
  [[maybe_unused]] unsigned int qa[kQInRegisters ? kKSteps : 1][4];

  for (int it = 0; it < n_tiles; ++it) {
    if constexpr (kStages == 1) {
      load_tile(0, it);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    } else {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      const int next = it + kStages - 1;
      if (next < n_tiles) load_tile(next % kStages, next);
      cp_async_commit();
    }
    T* kt = kv_s + (kStages == 1 ? 0 : it % kStages) * kTileKv * (kQkPad + kVPad);
    T* vt = kt + kTileKv * kQkPad;
    const int j0 = it * kTileKv;
    if constexpr (kQInRegisters) {
      if (it == 0) {
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          const int row = warp_row0 + ((lane / 8) % 2) * 8 + lane % 8;
          ldmatrix_x4(qa[ks], at_qk(q_s, row, ks * 16 + (lane / 16) * 8));
        }
      }
    }

    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      unsigned int a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = qa[ks][e];
        } else {
          const int row = warp_row0 + mt * 16 + ((lane / 8) % 2) * 8 + lane % 8;
          ldmatrix_x4(a[mt], at_qk(q_s, row, ks * 16 + (lane / 16) * 8));
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; nt += 2) {
        unsigned int kb[4];
        ldmatrix_x4(kb, at_qk(kt, (nt + lane / 16) * 8 + lane % 8, ks * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<T>(s[mt][nt], a[mt], kb[0], kb[1]);
          mma_m16n8k16<T>(s[mt][nt + 1], a[mt], kb[2], kb[3]);
        }
      }
    }

    const bool unmasked = j0 + kTileKv - 1 <= all_see_to;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      float mx[2] = {m_row[mt][0], m_row[mt][1]};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int half = e / 2;
          const int j = j0 + nt * 8 + 2 * qd + (e % 2);
          const bool visible = unmasked || j <= p_row[mt][half];  // p = -1: nothing visible
          s[mt][nt][e] = visible ? s[mt][nt][e] * log2e_scale : neg_inf();
          mx[half] = fmaxf(mx[half], s[mt][nt][e]);
        }
      }
      float base[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        mx[half] = group_max<4>(mx[half]);
        base[half] = mx[half] == neg_inf() ? 0.f : mx[half];
        const float corr = exp2f(m_row[mt][half] - base[half]);
        m_row[mt][half] = mx[half];
        l_row[mt][half] *= corr;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          o[mt][dt][2 * half] *= corr;
          o[mt][dt][2 * half + 1] *= corr;
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][nt][e] = exp2f(s[mt][nt][e] - base[e / 2]);
          l_row[mt][e / 2] += s[mt][nt][e];
        }
      }
    }

#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      unsigned int pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dt = 0; dt < kDTiles; dt += 2) {
        unsigned int vb[4];
        ldmatrix_x4_trans(vb, at_v(vt, kk * 16 + lane % 16, (dt + lane / 16) * 8));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<T>(o[mt][dt], pa[mt], vb[0], vb[1]);
          mma_m16n8k16<T>(o[mt][dt + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    if constexpr (kStages == 1) __syncthreads();  // before the next load refills the stage
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = group_sum<4>(l_row[mt][half]);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int t = row0 + warp_row0 + mt * 16 + g + 8 * half;
      if (t >= tokens) continue;
      T* dst = out + ((static_cast<long long>(b) * tokens + t) * heads + h) * kDv;
#pragma unroll
      for (int dt = 0; dt < kDv / 8; ++dt) {  // the padding's tiles are not stored
        *reinterpret_cast<unsigned int*>(dst + dt * 8 + 2 * qd) =
            pack2<T>(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
      }
    }
  }
}

}  // namespace tileplan
