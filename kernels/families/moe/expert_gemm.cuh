// The routed experts' linears for prefill-sized inputs (expert_linear, docs/ir.md) as a
// grouped GEMM on tensor cores: the selections are sorted by expert, and each expert's rows
// form M tiles of one GEMM against that expert's weight [N, H] (the Hugging Face [out, in]
// layout, stacked [E, N, H]). Two kernels, one step:
//
//   expert_route  one CTA counting-sorts the selections by expert id into the step's workspace
//                 (`route`), read from device memory as the GEMM needs them, so a CUDA Graph
//                 replays with whatever routing the step computes;
//   expert_gemm   CTA (x, y) runs tile y of the route's tile table (an expert, its first sorted
//                 row and up to kTileM rows) against output features [x * kTileN, ...): rows of
//                 x gathered by selection, weight rows streamed through a kStages-deep cp.async
//                 pipeline of kTileK-wide H slices, mma.sync m16n8k16 with float32
//                 accumulation, each result row written to its selection's output row.
//
// The grid's x (fastest in launch order) walks the feature tiles of one M tile, so the CTAs
// that share an M tile's gathered rows run together and read them from L2, and each weight
// tile of an expert with one M tile is read from DRAM exactly once; the M tiles of one expert
// are consecutive in y, so an expert's further M tiles re-read its weight tiles shortly after
// the first (from L2).
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

// The XOR applied to the 16-byte chunk index of row `row` of a shared [rows][kChunks * 8] tile
// of 16-bit elements (kChunks 4, 8 or 16), so that no padding is needed: an ldmatrix phase
// reads one logical chunk of 8 consecutive rows (the first a multiple of 8), and a
// quarter-warp of cp.async copies writes 8 chunks of one row (kChunks 8 or 16) or 4 chunks of
// each of two rows (kChunks 4); both then touch 8 distinct 16-byte bank groups. With 8 or 16
// chunks a row spans whole 128-byte bank lines and the XOR is the row's low 3 bits; with 4
// chunks two rows share a line (even rows its first half, odd rows its second) and the XOR
// is bits 1-2 of the row, distinct for the four pairs of 8 consecutive rows.
template <int kChunks>
__device__ __forceinline__ int expert_gemm_swizzle(int row) {
  static_assert(kChunks == 4 || kChunks == 8 || kChunks == 16, "tile_k 32, 64 or 128");
  return kChunks == 4 ? (row >> 1) & 3 : row & 7;
}

// ids: [selections]; route: the workspace above; out: [selections, cols] (rows of bad ids are
// zeroed here). Launch: grid 1, block kExpertRouteThreads, dynamic shared memory 8 * experts
// bytes (a counter and a cursor per expert). REQUIRES: 1 <= experts <= kExpertRouteMaxExperts;
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

// This thread's share of the copies of a [kRows][kTileK] slice buffer of a kThreads-thread
// block, planned once per tile and issued once per H slice: thread t copies chunk t % (kTileK
// / 8) of rows t / (kTileK / 8) + i * kThreads / (kTileK / 8), so each quarter-warp fills 128
// consecutive bytes of one or two rows and reads them from global memory as whole segments.
// Plan computes the rows' source pointers, their swizzled shared-memory offsets and which rows
// are copied and which of those hold data, outside the loop over H; a slice's copy then costs
// an add and a predicate (the main loop issues instructions, not bytes, at its limit).
template <typename T, int kRows, int kTileK, int kThreads>
struct ExpertGemmSliceCopies {
  static constexpr int kChunks = kTileK / 8;
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kCopies = (kRows + kRowStep - 1) / kRowStep;
  static_assert(kThreads % kChunks == 0, "every thread copies one chunk column");
  static_assert(kCopies <= 32, "a bit per copy");

  const T* src[kCopies];    // row r_i at this thread's chunk of H slice 0 (see Plan)
  unsigned int dst[kCopies];  // its byte offset in a slice buffer
  unsigned int issued = 0;  // bit i: row r_i is below `rows`, so it is copied
  unsigned int filled = 0;  // bit i: row r_i has data (else it is zero-filled)
  int chunk_k = 0;          // the chunk's first element within a slice

  // Rows [0, rows) of the buffer, row r from base + offset(r) (offset(r) < 0: zeros), rows of
  // `depth` elements. Every address a copy names lies inside a row: a row without data names
  // the base's first row, and a chunk that starts past `depth` (only rows shorter than a
  // slice have one) names its row's first element.
  template <typename Offset>
  __device__ __forceinline__ void Plan(const T* base, int rows, int depth, Offset offset) {
    const int chunk = threadIdx.x % kChunks;
    chunk_k = chunk * 8;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int r = threadIdx.x / kChunks + i * kRowStep;
      const long long o = r < rows ? offset(r) : -1ll;
      src[i] = o >= 0 ? base + o + (chunk_k < depth ? chunk_k : 0) : base;
      dst[i] = static_cast<unsigned int>(
          (r * kTileK + ((chunk ^ expert_gemm_swizzle<kChunks>(r)) << 3)) * sizeof(T));
      if (r < rows) issued |= 1u << i;
      if (o >= 0) filled |= 1u << i;
    }
    // Opaque to the compiler from here on, so that it keeps the plan in registers rather than
    // recomputing it (offset() and all) for every slice inside the loop.
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      asm volatile("" : "+l"(src[i]));
      asm volatile("" : "+r"(dst[i]));
    }
    asm volatile("" : "+r"(issued), "+r"(filled), "+r"(chunk_k));
  }

  // H slice [k0, k0 + kTileK) into `buffer`; chunks past `depth` are zero-filled, naming the
  // slice-0 address Plan made (inside the row) so that no address leaves the tensor.
  __device__ __forceinline__ void Issue(T* buffer, int k0, int depth) const {
    const bool inside = k0 + chunk_k < depth;
    const int k = inside ? k0 : 0;
    const unsigned int at = shared_address_folded(buffer);
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      if ((issued >> i) & 1u) {
        cp_async_16_shared(at + dst[i], src[i] + k, inside && ((filled >> i) & 1u));
      }
    }
  }
};

// x: rows of `depth` at x + r * x_stride, row r = s for an input per selection
// (x_per_selection) and s / top_k otherwise; route: as written by expert_route<T, kTileM>;
// w: [experts, cols, depth] contiguous; out: [selections, cols] contiguous.
// Launch: grid (ceil(cols / kTileN), max_tiles), block 32 * kWarpsM * kWarpsN, dynamic shared
// memory ExpertGemmSharedBytes(kTileM, kTileN, kTileK, kStages) (above 48 KiB the launcher
// raises the kernel's limit): kStages buffers of an A tile [kTileM][kTileK] and a B tile
// [kTileN][kTileK], 16-byte chunks swizzled by expert_gemm_swizzle. The warps form kWarpsM rows
// by kWarpsN columns of warp tiles of (kTileM / kWarpsM) x (kTileN / kWarpsN), multiples of 16
// both ways.
//
// The pipeline: the first kStages - 1 weight slices are requested before the tile's rows are
// even looked up (the weights depend only on the expert), then the rows' slices; each
// iteration waits for slice kt, requests slice kt + kStages - 1 into the buffer slice kt - 1
// left (one barrier per slice) and multiplies slice kt. Only the tile's rows rounded up to 16
// are copied (zeros from its row count on); a warp multiplies only its 16-row tiles that hold
// rows, so a tile taller than its expert's rows costs shared memory but neither copies nor
// MMAs. H past `depth` is zero-filled in both operands; weight rows past `cols` are
// zero-filled and never stored.
// REQUIRES: T is bf16 or f16; depth % 8 == 0; x_stride % 8 == 0; x and w aligned to 16 bytes,
// out to 4; kStages >= 2.
template <typename T, int kTileM, int kTileN, int kTileK, int kWarpsM, int kWarpsN, int kStages>
__global__ void __launch_bounds__(32 * kWarpsM * kWarpsN)
    expert_gemm(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_EXPERT_GEMM_PARAMS)) {
  constexpr int kThreads = kWarpsM * kWarpsN * 32;
  constexpr int kChunks = kTileK / 8;  // 16-byte chunks per staged row
  constexpr int kWarpRows = kTileM / kWarpsM;
  constexpr int kWarpCols = kTileN / kWarpsN;
  constexpr int kMTiles = kWarpRows / 16;  // 16-row mma tiles per warp
  constexpr int kNPairs = kWarpCols / 16;  // pairs of 8-column mma tiles per warp
  constexpr int kKSteps = kTileK / 16;
  constexpr int kAStage = kTileM * kTileK;  // elements of one buffer
  constexpr int kBStage = kTileN * kTileK;
  static_assert(kTileM % (16 * kWarpsM) == 0 && kTileN % (16 * kWarpsN) == 0,
                "warp tiles of 16 x 16 multiples");
  static_assert(kStages >= 2, "a pipeline of at least two stages");

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* a_s = reinterpret_cast<T*>(smem_bytes);  // [kStages][kTileM][kTileK]
  T* b_s = a_s + kStages * kAStage;           // [kStages][kTileN][kTileK]
  __shared__ long long s_x[kTileM];           // element offset of A row r in x; -1 past the rows
  __shared__ int s_sel[kTileM];               // its selection

  grid_dependency_sync();
  if (static_cast<int>(blockIdx.y) >= route[0]) return;  // past the tiles this routing has
  const int4 info = reinterpret_cast<const int4*>(route + 4)[blockIdx.y];
  const int expert = info.x, first = info.y, count = info.z;
  const int* order = route + 4 + 4 * max_tiles;
  const int n0 = blockIdx.x * kTileN;
  const T* w_e = w + static_cast<long long>(expert) * cols * depth;
  const int k_tiles = (depth + kTileK - 1) / kTileK;
  // Rows of A that are copied: the tile's rows rounded up to the 16-row mma tile.
  const int a_rows = min(kTileM, (count + 15) / 16 * 16);

  // A buffer's rows: weight rows n0 + r while inside `cols`, the rows' x rows as s_x holds them.
  ExpertGemmSliceCopies<T, kTileN, kTileK, kThreads> b_copies;
  ExpertGemmSliceCopies<T, kTileM, kTileK, kThreads> a_copies;
  b_copies.Plan(w_e, kTileN, depth, [&](int r) {
    return n0 + r < cols ? static_cast<long long>(n0 + r) * depth : -1ll;
  });
  auto load_b = [&](int stage, int kt) {
    b_copies.Issue(b_s + stage * kBStage, kt * kTileK, depth);
  };
  auto load_a = [&](int stage, int kt) {
    a_copies.Issue(a_s + stage * kAStage, kt * kTileK, depth);
  };

  // The weight slices of the prologue first, then the rows, then their slices: commit group s
  // holds A slice s (group 0 also every prologue B slice), so waiting for group kt still
  // means slice kt has landed.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_b(s, s);
  }
  for (int r = threadIdx.x; r < kTileM; r += kThreads) {
    const int s = r < count ? order[first + r] : -1;
    s_sel[r] = s;
    s_x[r] = s < 0 ? -1 : static_cast<long long>(x_per_selection ? s : s / top_k) * x_stride;
  }
  __syncthreads();
  a_copies.Plan(x, a_rows, depth, [&](int r) { return s_x[r]; });
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_a(s, s);
    cp_async_commit();
  }

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_row0 = (warp / kWarpsN) * kWarpRows;
  const int warp_col0 = (warp % kWarpsN) * kWarpCols;
  // This warp's 16-row tiles that hold rows of the tile (warp-uniform).
  const int live_m = max(0, min(kMTiles, (count - warp_row0 + 15) / 16));
  // ldmatrix addresses. A (x4): lanes 0-15 rows 0-15 of a 16-row tile at the k-step's first
  // chunk, lanes 16-31 the same rows at its second. B (x4, two 8-feature tiles): lanes 0-7 and
  // 8-15 rows 0-7 of the first tile at the k-step's first and second chunks, lanes 16-31 the
  // same for the second tile. Tiles lie 16 or 8 rows apart, which leaves the swizzle alone.
  const int a_row = warp_row0 + lane % 16;
  const int a_half = lane / 16;
  const int a_swizzle = expert_gemm_swizzle<kChunks>(a_row);
  const int b_row = warp_col0 + (lane / 16) * 8 + lane % 8;
  const int b_half = (lane / 8) % 2;
  const int b_swizzle = expert_gemm_swizzle<kChunks>(b_row);

  float acc[kMTiles][2 * kNPairs][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 2 * kNPairs; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    }
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // slice kt has landed (this thread's copies)
    __syncthreads();               // everyone's copies; and slice kt - 1 is consumed
    const int next = kt + kStages - 1;
    if (next < k_tiles) {
      load_b(next % kStages, next);
      load_a(next % kStages, next);
    }
    cp_async_commit();
    if (live_m == 0) continue;
    const T* a = a_s + (kt % kStages) * kAStage;
    const T* b = b_s + (kt % kStages) * kBStage;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      unsigned int af[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if (mt < live_m) {
          ldmatrix_x4_at(af[mt], shared_address_folded(a + (a_row + mt * 16) * kTileK +
                                                       (((2 * ks + a_half) ^ a_swizzle) << 3)));
        }
      }
#pragma unroll
      for (int p = 0; p < kNPairs; ++p) {
        unsigned int bf[4];
        ldmatrix_x4_at(bf, shared_address_folded(b + (b_row + p * 16) * kTileK +
                                                 (((2 * ks + b_half) ^ b_swizzle) << 3)));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          if (mt < live_m) {
            mma_m16n8k16<T>(acc[mt][2 * p], af[mt], bf[0], bf[1]);
            mma_m16n8k16<T>(acc[mt][2 * p + 1], af[mt], bf[2], bf[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // Accumulator (mt, nt): rows g and g + 8, columns 2 q and 2 q + 1 of the 16 x 8 tile; an even
  // `cols` keeps every pair 4-byte aligned in the output and inside the row.
  const int g = lane / 4, q = lane % 4;
  const bool pairs = cols % 2 == 0;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    if (mt >= live_m) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_row0 + mt * 16 + g + 8 * half;
      if (r >= count) continue;
      T* dst = out + static_cast<long long>(s_sel[r]) * cols;
#pragma unroll
      for (int nt = 0; nt < 2 * kNPairs; ++nt) {
        const int col = n0 + warp_col0 + nt * 8 + 2 * q;
        const float lo = acc[mt][nt][2 * half], hi = acc[mt][nt][2 * half + 1];
        if (pairs) {
          if (col < cols) *reinterpret_cast<unsigned int*>(dst + col) = pack2<T>(lo, hi);
        } else {
          if (col < cols) dst[col] = from_float<T>(lo);
          if (col + 1 < cols) dst[col + 1] = from_float<T>(hi);
        }
      }
    }
  }
}

}  // namespace tileplan
