// gemv_mma: gemv_split_k's products on tensor cores (mma.sync.m16n8k16, sm_80 and later) for
// decode linears of 2 to 16 rows of x, where the CUDA-core walk's FMAs per weight element
// grow with the rows (out[m, n] = epilogue(sum_k x[m, k] * w[n, k]), the same epilogues,
// RMSNorm prologue and split-K as gemv_split_k, whose gemv_finish ends both).
//
// The weight rows are the M of the mma and the rows of x its N: a warp's m-tile is 16
// features (rows g and g + 8 of lane 4 g + c), an n-tile 8 rows of x (row g + 8 t of n-tile
// t). K walks in 32-wide blocks; in each the lane reads one 16-byte vector (8 elements from
// k = 32 b + 8 c) of each of its two weight rows and of its x rows, and the block is two k16
// steps: step s takes the vector's elements 4 s + {0, 1} as logical k {2 c, 2 c + 1} and
// 4 s + {2, 3} as {2 c + 8, 2 c + 9}, for the weights (A) and x (B) alike, so every element
// of the block meets its partner once; a dot product does not care in which order it visits
// K.
//
// CTA (x, s) computes features [x * kRowsPerCta, ...) (the gate and the up rows of each for
// SwiGLU) over slice s of kSplitK equal runs of kStageK-wide stages of K. The stages stream
// through a kStages-deep ring of shared memory by cp.async (16 bytes a copy, zeros past
// `depth`, the slice, `cols` and `rows`), kStages - 1 ahead of the one computed, so a CTA keeps
// tens of kilobytes of weights in flight without holding them in registers, and the first
// stages' weights are on their way before the programmatic-dependent-launch wait. A stage
// holds the CTA's weight rows and 16 rows of x, each row kStageK elements and 64 bytes of
// padding (rows g and g + 1 of a quarter-warp's reads fall in different halves of the banks);
// wider stages read longer runs of each weight row at once. The warps form kGroups feature
// groups times kShares shares of a stage's kStageK / 32 blocks: warp w takes m-tiles
// w % kGroups, + kGroups, ... and blocks w / kGroups, + kShares, ...; the shares' partial sums
// meet in shared memory as gemv_split_k's warps' do.
//
// Stream-K (kStream; kSplitK 1, no norm prologue): the grid's G CTAs share the U = tiles * S
// units of the product (S stages of K a tile, unit u = stage u % S of tile u / S) as G equal
// runs, CTA c taking [c U / G, (c + 1) U / G), so every SM gets the same number of stages
// whatever the tile count, where a grid of tile x slice CTAs leaves some SMs a CTA more than
// others. The ring streams the run's units in order across tile boundaries. Where the run
// covers a tile whole the CTA stores it through the epilogue; a tile cut by run boundaries has
// a piece in each CTA that touches it, each stored as float partials in the workspace (slot 0
// of the CTA for a piece that starts inside the tile, slot 1 for one that starts at its first
// stage), and the last piece to arrive (a counter per tile) adds them in CTA order, a
// deterministic order, and stores.
//
// Norm prologue (kSplitK 1 only): x times the norm weight is rounded to T for the mma (the
// unfused rms_norm rounds x times its factor and the weight), the row's factor applied in
// float in the epilogue; group 0's warps sum the squares from the same reads, which cover the
// whole row once.
//
// Launch: grid (ceil(cols / kRowsPerCta), kSplitK), or with kStream (G, 1) for G <= U CTAs
// (workspace: G * 2 * rows * kRowsPerCta * (2 for SwiGLU) floats; counters: one per tile),
// block kThreads, dynamic shared memory
// kStages stages of (kRowsPerCta * (2 for SwiGLU) + 16) rows of gemv_mma_row_bytes(kStageK),
// then (kThreads / 32 / gemv_mma_groups(...)) * (kRowsPerCta * (2 for SwiGLU) + (norm ? 1 :
// 0)) * rows floats (gemv.cc's MmaSharedMemory). REQUIRES: T and W one of bf16 / f16; 2 <= rows <= 8 * kNTiles
// <= 16; kRowsPerCta / 16 and kThreads / 32 powers of two with kThreads / 32 <= kStageK / 32 *
// kRowsPerCta / 16 (every share has a block of each stage); kStageK a multiple of 64 with
// kStageK / 8 dividing kThreads; depth, x_stride % 8 == 0; x, w and norm_w 16-byte aligned.
#pragma once

#include "gemv_split_k.cuh"

namespace tileplan {

// A row of a stage of kStageK elements, padded by 64 bytes.
__host__ __device__ constexpr int gemv_mma_row_bytes(int stage_k) { return stage_k * 2 + 64; }

// Feature groups of a CTA's warps: one m-tile each where there are as many warps, else all.
__host__ __device__ constexpr int gemv_mma_groups(int threads, int rows_per_cta) {
  return rows_per_cta / 16 < threads / 32 ? rows_per_cta / 16 : threads / 32;
}

// Stream-K: the CTA whose run holds unit u of U shared by G CTAs (the largest c with
// c U / G <= u).
__device__ __forceinline__ int gemv_stream_cta(long long u, long long units, int ctas) {
  return static_cast<int>(((u + 1) * ctas - 1) / units);
}

// Stream-K: stores a piece of tile `tile` (reduce_smem as gemv_finish takes it) that does not
// cover it whole: its float partials go to slot `slot` of CTA `cta` in the workspace; the last
// of the tile's pieces (CTAs first_cta..last_cta: the first one's run holds the tile's first
// stage, so its piece is in slot 1, the others' in slot 0) to arrive adds them in CTA order and
// stores through the epilogue.
template <typename T, typename W, typename OutT, int kThreads, int kSlots, int kRowsPerCta,
          int kEpilogue>
__device__ __forceinline__ void gemv_stream_piece(
    const float* reduce_smem, int tile, int cta, int slot, int first_cta, int last_cta,
    const W* __restrict__ bias, const T* residual, long long residual_stride,
    OutT* out, float* __restrict__ workspace, unsigned int* __restrict__ counters, int rows,
    int cols) {
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  const int col0 = tile * kRowsPerCta;
  const int items = kRowsPerCta * rows;
  const long long slot_floats = static_cast<long long>(items) * kWRows;
  float* mine = workspace + (2 * static_cast<long long>(cta) + slot) * slot_floats;
  for (int i = threadIdx.x; i < items * kWRows; i += kThreads) {
    float v = 0.f;
#pragma unroll
    for (int wi = 0; wi < kSlots; ++wi) v += reduce_smem[wi * items * kWRows + i];
    mine[i] = v;
  }
  if (!last_to_arrive(&counters[tile], static_cast<unsigned int>(last_cta - first_cta + 1))) {
    return;
  }
  for (int i = threadIdx.x; i < items; i += kThreads) {
    const int c = i / rows, r = i % rows;
    if (col0 + c >= cols) continue;
    float g = 0.f, u = 0.f;
    for (int k = first_cta; k <= last_cta; ++k) {
      const float* piece =
          workspace + (2 * static_cast<long long>(k) + (k == first_cta ? 1 : 0)) *
                          slot_floats;
      g += load_cg(piece + i * kWRows);
      if constexpr (kWRows == 2) u += load_cg(piece + i * kWRows + 1);
    }
    gemv_store<T, W, OutT, kEpilogue>(g, u, 1.f, r, col0 + c, cols, bias, residual,
                                      residual_stride, out);
  }
  if (threadIdx.x == 0) counters[tile] = 0u;
}

template <typename T, typename W, typename OutT, int kNTiles, int kThreads, int kRowsPerCta,
          int kSplitK, int kStageK, int kStages, int kEpilogue, typename NormW, bool kStream>
__global__ void __launch_bounds__(kThreads)
    gemv_mma(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  static_assert(is_same<T, W>::value && (is_same<T, bf16>::value || is_same<T, f16>::value),
                "x and the weight: both bf16 or both f16");
  constexpr bool kNorm = !is_same<NormW, void>::value;
  static_assert(!kNorm || kSplitK == 1, "the norm prologue needs the whole row: split_k 1");
  static_assert(!kStream || (kSplitK == 1 && !kNorm), "stream-K: no split-K, no norm prologue");
  static_assert(kRowsPerCta % 16 == 0 && (kNTiles == 1 || kNTiles == 2), "tile shape");
  static_assert(kStages >= 2, "a stage in flight beside the one computed");
  constexpr int kWarps = kThreads / 32;
  constexpr int kWRows = kEpilogue == kGemvSwiglu ? 2 : 1;
  constexpr int kGroups = gemv_mma_groups(kThreads, kRowsPerCta);
  constexpr int kShares = kWarps / kGroups;
  constexpr int kMTiles = kRowsPerCta / 16 / kGroups;  // a warp's m-tiles
  constexpr int kBlocks = kStageK / 32;                 // 32-wide blocks of a stage
  constexpr int kRowBytes = gemv_mma_row_bytes(kStageK);
  static_assert(kWarps % kGroups == 0 && (kRowsPerCta / 16) % kGroups == 0 &&
                    kBlocks % kShares == 0,
                "warp layout");
  constexpr int kWeightRows = kRowsPerCta * kWRows;
  constexpr int kStageBytes = (kWeightRows + 16) * kRowBytes;
  constexpr int kChunks = kStageK / 8;  // 16-byte copies of a row's stage
  static_assert(kStageK % 64 == 0, "stages of whole 32-wide blocks, rows 64 bytes off the banks");
  static_assert(kThreads % kChunks == 0, "a thread copies one chunk column");
  extern __shared__ __align__(16) unsigned char gemv_mma_smem[];
  float* reduce_smem = reinterpret_cast<float*>(gemv_mma_smem + kStages * kStageBytes);
  float* norm_smem = reduce_smem + kShares * kWeightRows * rows;
  const unsigned int ring = shared_address(gemv_mma_smem);

  const Cta cta = this_cta();
  // The CTA's steps: stages [k_begin, k_end) of tile cta.x in kStageK-wide steps, or with
  // kStream the units [u0, u0 + stages) of its run (step st: stage (u0 + st) % S of tile
  // (u0 + st) / S).
  const int tile_stages = (depth + kStageK - 1) / kStageK;  // S
  const long long units = static_cast<long long>((cols + kRowsPerCta - 1) / kRowsPerCta) *
                          tile_stages;
  const long long u0 = kStream ? cta.x * units / cta.nx : 0;
  const int per_split = (depth + kSplitK * kStageK - 1) / (kSplitK * kStageK) * kStageK;
  const int k_begin = kStream ? 0 : cta.y * per_split;
  const int k_end = kStream ? depth : min(depth, k_begin + per_split);
  const int stages = kStream ? static_cast<int>((cta.x + 1) * units / cta.nx - u0)
                     : k_end > k_begin ? (k_end - k_begin + kStageK - 1) / kStageK
                                       : 0;
  auto step_tile = [&](int st) {
    return kStream ? static_cast<int>((u0 + st) / tile_stages) : static_cast<int>(cta.x);
  };
  auto step_k = [&](int st) {
    return kStream ? static_cast<int>((u0 + st) % tile_stages) * kStageK
                   : k_begin + st * kStageK;
  };

  // This thread's copies: chunk column `chunk` of rows r0, r0 + kThreads / kChunks, ...
  const int chunk = threadIdx.x % kChunks;
  const int r0 = threadIdx.x / kChunks;
  constexpr int kRowStep = kThreads / kChunks;
  auto issue_w = [&](int st, int slot) {
    const int k = step_k(st) + chunk * 8;
    const int col0 = step_tile(st) * kRowsPerCta;
    const bool k_ok = k < k_end;
    for (int row = r0; row < kWeightRows; row += kRowStep) {
      const int q = row / kRowsPerCta, f = col0 + row % kRowsPerCta;
      const bool ok = k_ok && f < cols;
      const W* src = ok ? w + static_cast<long long>(q * cols + f) * depth + k : w;
      cp_async_16_shared(ring + slot * kStageBytes + row * kRowBytes + chunk * 16, src, ok);
    }
  };
  auto issue_x = [&](int st, int slot) {
    const int k = step_k(st) + chunk * 8;
    const bool k_ok = k < k_end;
    for (int r = r0; r < rows; r += kRowStep) {
      const T* src = k_ok ? x + r * x_stride + k : x;
      cp_async_16_shared(
          ring + slot * kStageBytes + (kWeightRows + r) * kRowBytes + chunk * 16, src, k_ok);
    }
  };
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < stages) issue_w(st, st);
  }
  grid_dependency_sync();
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < stages) issue_x(st, st);
    cp_async_commit();
  }

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int group = warp % kGroups, share = warp / kGroups;
  float acc[kMTiles][kWRows][kNTiles][4] = {};
  float sumsq[kNTiles];
#pragma unroll
  for (int t = 0; t < kNTiles; ++t) sumsq[t] = 0.f;

  // The share's sums into reduce_smem, the accumulators zeroed: accumulator i of (mt, q, t) is
  // feature 16 (group + kGroups mt) + g + 8 (i / 2) of part q and row 8 t + 2 c + i % 2 of x.
  auto store_sums = [&] {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int q = 0; q < kWRows; ++q) {
#pragma unroll
        for (int t = 0; t < kNTiles; ++t) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int f = 16 * (group + kGroups * mt) + g + 8 * (i / 2);
            const int r = 8 * t + 2 * c + i % 2;
            if (r < rows) {
              reduce_smem[((share * kRowsPerCta + f) * rows + r) * kWRows + q] = acc[mt][q][t][i];
            }
            acc[mt][q][t][i] = 0.f;
          }
        }
      }
    }
  };
  auto read = [](const unsigned char* p) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    return RawVec<T, 8>{{v.x, v.y, v.z, v.w}};
  };
  for (int st = 0; st < stages; ++st) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage st is in; every warp is done with the slot refilled below
    const int next = st + kStages - 1;
    if (next < stages) {
      issue_w(next, next % kStages);
      issue_x(next, next % kStages);
    }
    cp_async_commit();
    const unsigned char* base = gemv_mma_smem + (st % kStages) * kStageBytes;
#pragma unroll
    for (int i = 0; i < kBlocks / kShares; ++i) {
      const int b = share + i * kShares;
      const int at = b * 64 + c * 16;  // byte offset of the lane's vector in a row
      RawVec<T, 8> xv[kNTiles];
#pragma unroll
      for (int t = 0; t < kNTiles; ++t) {
        xv[t] = read(base + (kWeightRows + g + 8 * t) * kRowBytes + at);
      }
      if constexpr (kNorm) {
        const int k = min(step_k(st) + b * 32 + c * 8, depth - 8);
        float nw[8];
        load_floats<NormW, 8>(norm_w + k, nw);
#pragma unroll
        for (int t = 0; t < kNTiles; ++t) {
          float xf[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            xf[e] = word_element<T>(xv[t].w, e);
            if (group == 0) sumsq[t] += xf[e] * xf[e];
            xf[e] *= nw[e];
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) xv[t].w[j] = pack2<T>(xf[2 * j], xf[2 * j + 1]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int q = 0; q < kWRows; ++q) {
          const int row = q * kRowsPerCta + 16 * (group + kGroups * mt) + g;
          const RawVec<T, 8> lo = read(base + row * kRowBytes + at);
          const RawVec<T, 8> hi = read(base + (row + 8) * kRowBytes + at);
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            const unsigned int a[4] = {lo.w[2 * s], hi.w[2 * s], lo.w[2 * s + 1], hi.w[2 * s + 1]};
#pragma unroll
            for (int t = 0; t < kNTiles; ++t) {
              mma_m16n8k16<T>(acc[mt][q][t], a, xv[t].w[2 * s], xv[t].w[2 * s + 1]);
            }
          }
        }
      }
    }
    if constexpr (kStream) {
      // A piece ends with its tile or the run: its sums leave the registers.
      const int tile = step_tile(st);
      const bool tile_ends = (u0 + st + 1) % tile_stages == 0;
      if (tile_ends || st + 1 == stages) {
        store_sums();
        __syncthreads();
        const long long first_unit = static_cast<long long>(tile) * tile_stages;
        const bool starts = u0 <= first_unit;  // the piece starts at the tile's first stage
        if (starts && tile_ends) {
          // The whole tile: the epilogue at once, as gemv_finish's unsplit path.
          gemv_finish<T, W, OutT, kThreads, kShares, kRowsPerCta, 1, kEpilogue, false>(
              Cta{static_cast<unsigned int>(tile), 0, 0, cta.nx, 1, 1}, reduce_smem, norm_smem,
              eps, bias, residual, residual_stride, out, workspace, counters, rows, cols, depth);
        } else {
          const int first_cta = gemv_stream_cta(first_unit, units, cta.nx);
          const int last_cta = gemv_stream_cta(first_unit + tile_stages - 1, units, cta.nx);
          gemv_stream_piece<T, W, OutT, kThreads, kShares, kRowsPerCta, kEpilogue>(
              reduce_smem, tile, cta.x, starts ? 1 : 0, first_cta, last_cta, bias,
              residual, residual_stride, out, workspace, counters, rows, cols);
        }
        __syncthreads();  // reduce_smem is rewritten by the next piece
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (kStream) return;
  store_sums();
  if constexpr (kNorm) {
    // The quad's lanes hold row g + 8 t's squares over their own vectors of the share.
#pragma unroll
    for (int t = 0; t < kNTiles; ++t) {
      sumsq[t] += __shfl_xor_sync(0xffffffffu, sumsq[t], 1);
      sumsq[t] += __shfl_xor_sync(0xffffffffu, sumsq[t], 2);
      const int r = g + 8 * t;
      if (group == 0 && c == 0 && r < rows) norm_smem[share * rows + r] = sumsq[t];
    }
  }
  __syncthreads();
  gemv_finish<T, W, OutT, kThreads, kShares, kRowsPerCta, kSplitK, kEpilogue, kNorm>(
      cta, reduce_smem, norm_smem, eps, bias, residual, residual_stride, out, workspace, counters,
      rows, cols, depth);
}

}  // namespace tileplan
