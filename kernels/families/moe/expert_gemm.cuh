// The routed experts' linears for prefill-sized inputs (expert_linear, docs/ir.md) as a
// grouped GEMM on tensor cores: the selections are sorted by expert, and each expert's rows
// form M tiles of one GEMM against that expert's weight [N, H] (the Hugging Face [out, in]
// layout, stacked [E, N, H]). Two kernels, one step:
//
//   expert_route  one CTA counting-sorts the selections by expert id into the step's workspace
//                 (`route`), read from device memory as the GEMM needs them, so a CUDA Graph
//                 replays with whatever routing the step computes;
//   expert_gemm   CTA (x, y) runs tile x of the route's tile table (an expert, its first sorted
//                 row and up to kTileM rows) against output features [y * kTileN, ...): rows of
//                 x gathered by selection, mma.sync m16n8k16 with float32 accumulation, each
//                 result row written to its selection's output row.
//
// Route layout (ints): [0] the tile count; then from int 4 on, max_tiles records of 4 ints
// (expert, first sorted row, rows, 0); then `selections` ints, the selections sorted by
// expert (within an expert in no particular order: every output row is computed by itself, so
// the order changes nothing). max_tiles = ceil(selections / kTileM) + min(experts,
// selections) bounds the tiles sum_e ceil(count_e / kTileM).
//
// An expert id outside [0, experts) is an error, as in expert_gemv: with `error` non-null the
// route kernel leaves the selection out of every tile, writes its output row as zeros and
// raises *error to at least s / top_k + 1; with `error` null it traps.
#pragma once

#include "moe_params.h"
#include "primitives.cuh"

namespace tileplan {

constexpr int kExpertRouteThreads = 1024;
constexpr int kExpertGemmTileK = 32;                 // H per pipeline stage: two mma k-steps
constexpr int kExpertGemmLd = kExpertGemmTileK + 8;  // shared row stride, 80 bytes for 16-bit T

// Warps along M of expert_gemm: half of them (one for one warp), at most one per 16-row tile;
// the rest along N.
__host__ __device__ constexpr int expert_gemm_warps_m(int tile_m, int warps) {
  return warps / 2 < 1 ? 1 : (warps / 2 < tile_m / 16 ? warps / 2 : tile_m / 16);
}

// ids: [selections]; route: the workspace above; out: [selections, cols] (rows of bad ids are
// zeroed here). Launch: grid 1, block kExpertRouteThreads, dynamic shared memory 8 * experts
// bytes (a counter and a cursor per expert). REQUIRES: 1 <= experts <= 4 * kExpertRouteThreads;
// route aligned to 16 bytes.
template <typename T, int kTileM>
__global__ void __launch_bounds__(kExpertRouteThreads)
    expert_route(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_EXPERT_ROUTE_PARAMS)) {
  constexpr int kWarps = kExpertRouteThreads / 32;
  extern __shared__ int route_smem[];
  int* count = route_smem;             // [experts]
  int* cursor = route_smem + experts;  // [experts]: the next sorted row of each expert
  __shared__ int warp_prefix[kWarps][2];
  grid_dependency_sync();
  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  for (int e = tid; e < experts; e += kExpertRouteThreads) count[e] = 0;
  __syncthreads();
  for (int s = tid; s < selections; s += kExpertRouteThreads) {
    const int e = ids[s];
    if (e < 0 || e >= experts) {
      if (error == nullptr) __trap();
      atomicMax(error, s / top_k + 1);
      for (int n = 0; n < cols; ++n) out[static_cast<long long>(s) * cols + n] = from_float<T>(0.f);
      continue;
    }
    atomicAdd(&count[e], 1);
  }
  __syncthreads();

  // Thread t owns experts [t * per, (t + 1) * per): exclusive block scans of their rows and of
  // their tiles give each expert its first sorted row and its first tile.
  const int per = (experts + kExpertRouteThreads - 1) / kExpertRouteThreads;
  const int e_begin = min(experts, tid * per), e_end = min(experts, e_begin + per);
  int rows = 0, tiles = 0;
  for (int e = e_begin; e < e_end; ++e) {
    rows += count[e];
    tiles += (count[e] + kTileM - 1) / kTileM;
  }
  int rows_incl = rows, tiles_incl = tiles;  // inclusive scans within the warp
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const int r = __shfl_up_sync(0xffffffffu, rows_incl, o);
    const int t = __shfl_up_sync(0xffffffffu, tiles_incl, o);
    if (lane >= o) {
      rows_incl += r;
      tiles_incl += t;
    }
  }
  if (lane == 31) {
    warp_prefix[warp][0] = rows_incl;
    warp_prefix[warp][1] = tiles_incl;
  }
  __syncthreads();
  if (warp == 0) {  // the warps' totals, scanned exclusively in place (lane w: warp w)
    const int wr = warp_prefix[lane][0], wt = warp_prefix[lane][1];
    int ri = wr, ti = wt;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int r = __shfl_up_sync(0xffffffffu, ri, o);
      const int t = __shfl_up_sync(0xffffffffu, ti, o);
      if (lane >= o) {
        ri += r;
        ti += t;
      }
    }
    warp_prefix[lane][0] = ri - wr;
    warp_prefix[lane][1] = ti - wt;
    if (lane == 31) route[0] = ti;  // the tile count
  }
  __syncthreads();
  int row = warp_prefix[warp][0] + rows_incl - rows;  // this thread's first sorted row
  int tile = warp_prefix[warp][1] + tiles_incl - tiles;
  int4* table = reinterpret_cast<int4*>(route + 4);
  for (int e = e_begin; e < e_end; ++e) {
    const int c = count[e];
    cursor[e] = row;
    for (int j = 0; j * kTileM < c; ++j) {
      table[tile + j] = make_int4(e, row + j * kTileM, min(kTileM, c - j * kTileM), 0);
    }
    row += c;
    tile += (c + kTileM - 1) / kTileM;
  }
  __syncthreads();
  int* order = route + 4 + 4 * max_tiles;
  for (int s = tid; s < selections; s += kExpertRouteThreads) {
    const int e = ids[s];
    if (e >= 0 && e < experts) order[atomicAdd(&cursor[e], 1)] = s;
  }
}

// x: rows of `depth` at x + r * x_stride, row r = s for an input per selection
// (x_per_selection) and s / top_k otherwise; route: as written by expert_route<T, kTileM>;
// w: [experts, cols, depth] contiguous; out: [selections, cols] contiguous.
// Launch: grid (max_tiles, ceil(cols / kTileN)), block 32 * kWarps, dynamic shared memory
// kStages * (kTileM + kTileN) * kExpertGemmLd * sizeof(T) bytes: kStages stages of an A tile
// [kTileM][kLd] and a B tile [kTileN][kLd] (above 48 KiB the launcher raises the kernel's
// limit). The 80-byte rows put the 8 rows an ldmatrix reads in 8 distinct 16-byte bank groups
// (5 r mod 8), so neither ldmatrix nor cp.async needs a swizzle. The kWarps warps form
// expert_gemm_warps_m(kTileM, kWarps) rows by kWarps / that columns of warp tiles, each a multiple
// of 16 rows and 16 columns. REQUIRES: T is bf16 or f16; depth % 8 == 0; x_stride % 8 == 0; x and w
// aligned to 16 bytes; kStages >= 2.
template <typename T, int kTileM, int kTileN, int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32)
    expert_gemm(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_EXPERT_GEMM_PARAMS)) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kLd = kExpertGemmLd;
  constexpr int kChunks = kExpertGemmTileK / 8;  // 16-byte chunks per staged row
  constexpr int kWarpsM = expert_gemm_warps_m(kTileM, kWarps);
  constexpr int kWarpsN = kWarps / kWarpsM;
  constexpr int kWarpRows = kTileM / kWarpsM;
  constexpr int kWarpCols = kTileN / kWarpsN;
  constexpr int kMTiles = kWarpRows / 16;  // 16-row mma tiles per warp
  constexpr int kNTiles = kWarpCols / 8;   // 8-column mma tiles per warp (even)
  static_assert(kWarpsM * kWarpsN == kWarps && kWarpRows % 16 == 0 && kWarpCols % 16 == 0,
                "warp tiles of 16 x 16 multiples");
  static_assert(kStages >= 2, "a pipeline of at least two stages");

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* a_s = reinterpret_cast<T*>(smem_bytes);  // [kStages][kTileM][kLd]
  T* b_s = a_s + kStages * kTileM * kLd;      // [kStages][kTileN][kLd]
  __shared__ long long s_x[kTileM];           // element offset of each A row in x
  __shared__ int s_sel[kTileM];               // its selection, -1 past the tile's rows

  grid_dependency_sync();
  if (static_cast<int>(blockIdx.x) >= route[0]) return;  // past the tiles this routing has
  const int4 info = reinterpret_cast<const int4*>(route + 4)[blockIdx.x];
  const int expert = info.x, first = info.y, count = info.z;
  const int* order = route + 4 + 4 * max_tiles;
  const int n0 = blockIdx.y * kTileN;
  for (int r = threadIdx.x; r < kTileM; r += kThreads) {
    const int s = r < count ? order[first + r] : -1;
    s_sel[r] = s;
    s_x[r] = s < 0 ? 0 : static_cast<long long>(x_per_selection ? s : s / top_k) * x_stride;
  }
  __syncthreads();
  const T* w_e = w + static_cast<long long>(expert) * cols * depth;
  const int k_tiles = (depth + kExpertGemmTileK - 1) / kExpertGemmTileK;

  // Stages H columns [kt * 32, kt * 32 + 32) of the A rows and the B rows (features); rows past
  // the tile or past `cols`, and columns past `depth`, are zero-filled.
  auto load_stage = [&](int stage, int kt) {
    T* a = a_s + stage * kTileM * kLd;
    T* b = b_s + stage * kTileN * kLd;
    const int k0 = kt * kExpertGemmTileK;
    for (int c = threadIdx.x; c < (kTileM + kTileN) * kChunks; c += kThreads) {
      const int ch = c % kChunks;
      const int k = k0 + ch * 8;
      if (c < kTileM * kChunks) {
        const int r = c / kChunks;
        const bool ok = s_sel[r] >= 0 && k < depth;
        cp_async_16(a + r * kLd + ch * 8, x + (ok ? s_x[r] + k : 0), ok);
      } else {
        const int r = c / kChunks - kTileM;
        const bool ok = n0 + r < cols && k < depth;
        cp_async_16(b + r * kLd + ch * 8,
                    w_e + (ok ? static_cast<long long>(n0 + r) * depth + k : 0), ok);
      }
    }
  };

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_row0 = (warp / kWarpsN) * kWarpRows;
  const int warp_col0 = (warp % kWarpsN) * kWarpCols;
  float acc[kMTiles][kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    }
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // stage kt has landed (this thread's copies)
    __syncthreads();               // everyone's copies; and stage kt - 1 is consumed
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();
    const T* a = a_s + (kt % kStages) * kTileM * kLd;
    const T* b = b_s + (kt % kStages) * kTileN * kLd;
#pragma unroll
    for (int ks = 0; ks < kExpertGemmTileK / 16; ++ks) {
      unsigned int af[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        ldmatrix_x4(af[mt],
                    a + (warp_row0 + mt * 16 + lane % 16) * kLd + ks * 16 + (lane / 16) * 8);
      }
      // Two n-tiles per ldmatrix: lanes 0-15 address tile nt, lanes 16-31 tile nt + 1.
#pragma unroll
      for (int nt = 0; nt < kNTiles; nt += 2) {
        unsigned int bf[4];
        ldmatrix_x4(bf, b + (warp_col0 + (nt + lane / 16) * 8 + lane % 8) * kLd + ks * 16 +
                            ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<T>(acc[mt][nt], af[mt], bf[0], bf[1]);
          mma_m16n8k16<T>(acc[mt][nt + 1], af[mt], bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Accumulator (mt, nt): rows g and g + 8, columns 2 q and 2 q + 1 of the 16 x 8 tile.
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int s = s_sel[warp_row0 + mt * 16 + g + 8 * half];
      if (s < 0) continue;
      T* dst = out + static_cast<long long>(s) * cols;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int col = n0 + warp_col0 + nt * 8 + 2 * q;
        if (col < cols) dst[col] = from_float<T>(acc[mt][nt][2 * half]);
        if (col + 1 < cols) dst[col + 1] = from_float<T>(acc[mt][nt][2 * half + 1]);
      }
    }
  }
}

}  // namespace tileplan
