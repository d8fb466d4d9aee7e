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
// Norm prologue (kSplitK 1 only): x times the norm weight is rounded to T for the mma (the
// unfused rms_norm rounds x times its factor and the weight), the row's factor applied in
// float in the epilogue; group 0's warps sum the squares from the same reads, which cover the
// whole row once.
//
// Launch: grid (ceil(cols / kRowsPerCta), kSplitK), block kThreads, dynamic shared memory
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

template <typename T, typename W, typename OutT, int kNTiles, int kThreads, int kRowsPerCta,
          int kSplitK, int kStageK, int kStages, int kEpilogue, typename NormW>
__global__ void __launch_bounds__(kThreads)
    gemv_mma(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_GEMV_SPLIT_K_PARAMS)) {
  static_assert(is_same<T, W>::value && (is_same<T, bf16>::value || is_same<T, f16>::value),
                "x and the weight: both bf16 or both f16");
  constexpr bool kNorm = !is_same<NormW, void>::value;
  static_assert(!kNorm || kSplitK == 1, "the norm prologue needs the whole row: split_k 1");
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
  const int col0 = cta.x * kRowsPerCta;
  const int per_split = (depth + kSplitK * kStageK - 1) / (kSplitK * kStageK) *
                        kStageK;
  const int k_begin = cta.y * per_split;
  const int k_end = min(depth, k_begin + per_split);
  const int stages = k_end > k_begin ? (k_end - k_begin + kStageK - 1) / kStageK : 0;

  // This thread's copies: chunk column `chunk` of rows r0, r0 + kThreads / kChunks, ...
  const int chunk = threadIdx.x % kChunks;
  const int r0 = threadIdx.x / kChunks;
  constexpr int kRowStep = kThreads / kChunks;
  auto issue_w = [&](int st, int slot) {
    const int k = k_begin + st * kStageK + chunk * 8;
    const bool k_ok = k < k_end;
    for (int row = r0; row < kWeightRows; row += kRowStep) {
      const int q = row / kRowsPerCta, f = col0 + row % kRowsPerCta;
      const bool ok = k_ok && f < cols;
      const W* src = ok ? w + static_cast<long long>(q * cols + f) * depth + k : w;
      cp_async_16_shared(ring + slot * kStageBytes + row * kRowBytes + chunk * 16, src, ok);
    }
  };
  auto issue_x = [&](int st, int slot) {
    const int k = k_begin + st * kStageK + chunk * 8;
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
  float acc[kMTiles][kWRows][kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int q = 0; q < kWRows; ++q) {
#pragma unroll
      for (int t = 0; t < kNTiles; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][q][t][i] = 0.f;
      }
    }
  }
  float sumsq[kNTiles];
#pragma unroll
  for (int t = 0; t < kNTiles; ++t) sumsq[t] = 0.f;

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
        const int k = min(k_begin + st * kStageK + b * 32 + c * 8, depth - 8);
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
  }
  cp_async_wait<0>();

  // The share's sums: accumulator i of (mt, q, t) is feature 16 (group + kGroups mt) + g +
  // 8 (i / 2) of part q and row 8 t + 2 c + i % 2 of x.
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
        }
      }
    }
  }
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
