// wgmma_gemm: the linears of prefill-sized inputs on Hopper's warpgroup tensor-core
// instructions (sm_90a: wgmma.mma_async reads both operands from shared memory).
//
//   out[r, c] = epilogue(sum_k x[r, k] * w[c, k])
//
// with x [rows, depth] and w [N, depth] both K-major (the Hugging Face [out, in] layout), the
// sum in float32. CTA (bx, by) computes the kTileM x kTileN tile of rows [by * kTileM, ...) and
// weight rows [bx * kTileN, ...) (swiglu: kTileN / 2 gate rows from bx * kTileN / 2 and the
// same rows of the up half, `up_offset` rows further), one warpgroup (128 threads) per 64 rows.
//
// Main loop: K walks in kTileK = 64 wide slices through a kStages-deep ring of shared-memory
// stages, each slice of x and w filled by every thread's 16-byte cp.async copies (zeros
// past the edges of rows, weight rows and depth), laid out as the wgmma 128-byte swizzle wants
// (chunk c of a 128-byte row r at chunk c ^ (r & 7), the stage 1024-byte aligned). Each slice
// is four wgmma m64nNk16 per warpgroup, issued asynchronously; the loop keeps one group of them
// in flight while the copies kStages - 2 slices ahead are landing:
//
//   iteration k: wait for slice k's copies, fence them to the async proxy, block barrier
//                (after which every warpgroup has retired slice k - 2's wgmma);
//                issue slice k's wgmma, commit; start slice k + kStages - 2's copies into
//                slice k - 2's stage; wait until at most one group is pending.
//
// The weights never depend on an earlier kernel: the first stages' weight copies start before
// the programmatic-dependent-launch wait, x's after it.
//
// Epilogues: kWgmmaPlain (+ bias), kWgmmaResidual (+ bias + residual, in float32, rounded
// once; residual may be `out`), kWgmmaSwiglu (silu(gate + bias) * (up + bias), the gate and up
// of one output column held by the same thread).
//
// REQUIRES: depth, x_stride, w_stride a multiple of 8; x, w 16-byte aligned; cols even, out
// and residual 4-byte aligned with even strides; launch: grid (ceil(cols * (swiglu ? 2 : 1) /
// kTileN), ceil(rows / kTileM)), block kTileM * 2, dynamic shared memory
// wgmma_gemm_shared_bytes(kTileM, kTileN, kStages).
#pragma once

#include "primitives.cuh"
#include "wgmma_gemm_params.h"

namespace tileplan {

constexpr int kWgmmaPlain = 0;
constexpr int kWgmmaResidual = 1;
constexpr int kWgmmaSwiglu = 2;

__host__ __device__ constexpr int wgmma_gemm_shared_bytes(int tile_m, int tile_n, int stages) {
  return stages * (tile_m + tile_n) * 128 + 1024;  // + the alignment of the first stage
}

// The wgmma accumulator fragment of m64nNk16 (PTX ISA "wgmma 64N16 D"): warp w of the
// warpgroup holds rows 16 w .. 16 w + 15; lane L's d[4 j + i] is row 16 w + L / 4 + 8 (i / 2),
// column 8 j + 2 (L % 4) + (i % 2).
#define TILEPLAN_WGMMA_D64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define TILEPLAN_WGMMA_OPS64(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TILEPLAN_WGMMA_D128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define TILEPLAN_WGMMA_OPS128(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define TILEPLAN_WGMMA_D192 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define TILEPLAN_WGMMA_OPS192(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define TILEPLAN_WGMMA_D256 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define TILEPLAN_WGMMA_OPS256(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

#define TILEPLAN_WGMMA_ONE_(N, TYPE, A, B, P)                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " #P ", 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {"           \
               TILEPLAN_WGMMA_D##N "}, " #A ", " #B ", p, 1, 1, 0, 0;\n}\n"                    \
               : TILEPLAN_WGMMA_OPS##N(d)                                                     \
               : "l"(a), "l"(b), "r"(1)                                                       \
               : "memory")
#define TILEPLAN_WGMMA_(N, A, B, P)          \
  if constexpr (is_same<T, bf16>::value) {   \
    TILEPLAN_WGMMA_ONE_(N, "bf16", A, B, P); \
  } else {                                   \
    TILEPLAN_WGMMA_ONE_(N, "f16", A, B, P);  \
  }

// d (64 x kN) += a (64 x 16) * b (kN x 16)ᵀ, both operands in shared memory by descriptor.
template <typename T, int kN>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[kN / 2], unsigned long long a,
                                             unsigned long long b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kN == 64) {
    TILEPLAN_WGMMA_(64, %32, %33, %34)
  } else if constexpr (kN == 128) {
    TILEPLAN_WGMMA_(128, %64, %65, %66)
  } else if constexpr (kN == 192) {
    TILEPLAN_WGMMA_(192, %96, %97, %98)
  } else {
    static_assert(kN == 256, "wgmma tiles of 64, 128, 192 or 256 columns");
    TILEPLAN_WGMMA_(256, %128, %129, %130)
  }
#else
  __trap();  // compiled for sm_90a only (the launcher asks for it)
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving other instructions' accesses of the accumulators across the
// asynchronous wgmma's (which would serialize them).
template <int kN>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The descriptor of a K-major operand tile of 128-byte rows in the 128-byte swizzle at shared
// address `addr`: 8-row groups 1024 bytes apart (the stride byte offset); the leading byte
// offset is unused by this layout. A k16 step inside the 64-wide slice adds 32 bytes to addr.
__device__ __forceinline__ unsigned long long wgmma_descriptor(unsigned int addr) {
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>(1) << 16) |
         (static_cast<unsigned long long>(1024 >> 4) << 32) |
         (static_cast<unsigned long long>(1) << 62);
}

// Stores a warpgroup's accumulators (rows from m0 + 64 * warpgroup, output columns from c0)
// through the epilogue; `tid` is the thread's index among the consumer threads. Only the
// 8-column output groups j with j % parts == part (a split-K cluster's CTAs store a share
// each; the gate and up of a SwiGLU group go together).
template <typename T, int kTileN, int kEpilogue, bool kBias>
__device__ __forceinline__ void wgmma_gemm_store(const float (&acc)[kTileN / 2], int tid, int m0,
                                                 int c0, const T* __restrict__ bias,
                                                 const T* residual, long long residual_stride,
                                                 T* out, long long out_stride, int rows, int cols,
                                                 int up_offset, int part = 0, int parts = 1) {
  constexpr int kOutCols = kEpilogue == kWgmmaSwiglu ? kTileN / 2 : kTileN;
  const int warpgroup = tid / 128;
  const int lane = tid % 32;
  const int row0 = m0 + warpgroup * 64 + ((tid / 32) % 4) * 16 + lane / 4;
  constexpr int kGroups = kOutCols / 8;  // 8-column groups of the output tile
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    const int col = c0 + j * 8 + 2 * (lane % 4);
    if (col >= cols || j % parts != part) continue;
    float b0 = 0.f, b1 = 0.f, ub0 = 0.f, ub1 = 0.f;
    if constexpr (kBias) {
      b0 = to_float(bias[col]);
      b1 = to_float(bias[col + 1]);
      if constexpr (kEpilogue == kWgmmaSwiglu) {
        ub0 = to_float(bias[up_offset + col]);
        ub1 = to_float(bias[up_offset + col + 1]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row >= rows) continue;
      float v0 = acc[4 * j + 2 * h] + b0, v1 = acc[4 * j + 2 * h + 1] + b1;
      if constexpr (kEpilogue == kWgmmaSwiglu) {
        const float u0 = acc[4 * (j + kGroups) + 2 * h] + ub0;
        const float u1 = acc[4 * (j + kGroups) + 2 * h + 1] + ub1;
        v0 = silu(v0) * u0;
        v1 = silu(v1) * u1;
      }
      if constexpr (kEpilogue == kWgmmaResidual) {
        const unsigned int rr = *reinterpret_cast<const unsigned int*>(
            residual + static_cast<long long>(row) * residual_stride + col);
        v0 += word_element<T>(&rr, 0);
        v1 += word_element<T>(&rr, 1);
      }
      *reinterpret_cast<unsigned int*>(out + static_cast<long long>(row) * out_stride + col) =
          pack2<T>(v0, v1);
    }
  }
}

template <typename T, int kTileM, int kTileN, int kStages, int kEpilogue, bool kBias>
__global__ void __launch_bounds__(kTileM * 2, 1)
    wgmma_gemm(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_WGMMA_GEMM_PARAMS)) {
  static_assert(kTileM == 64 || kTileM == 128, "tile_m 64 or 128");
  static_assert(kStages >= 3, "two slices in flight beside the one computed");
  static_assert(kEpilogue != kWgmmaSwiglu || kTileN % 16 == 0, "whole 8-column gate groups");
  constexpr int kThreads = kTileM * 2;
  constexpr int kRowBytes = 128;  // kTileK = 64 16-bit elements
  constexpr int kTileK = kRowBytes / 2;
  constexpr int kABytes = kTileM * kRowBytes;
  constexpr int kStageBytes = (kTileM + kTileN) * kRowBytes;
  extern __shared__ unsigned char wgmma_smem[];
  const unsigned int smem = (shared_address(wgmma_smem) + 1023u) & ~1023u;

  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * kTileM;
  // Output columns of this CTA: [c0, c0 + kOutCols).
  constexpr int kOutCols = kEpilogue == kWgmmaSwiglu ? kTileN / 2 : kTileN;
  const int c0 = blockIdx.x * kOutCols;
  const int slices = (depth + kTileK - 1) / kTileK;

  // This thread's copies of a slice: chunk c = tid % 8 of kACopies rows of x and of kBCopies
  // weight rows, kThreads / 8 rows apart (so every row has the same swizzled chunk), their
  // sources and destinations computed once; a slice adds its K offset.
  constexpr int kACopies = kTileM * 8 / kThreads;
  constexpr int kBCopies = kTileN * 8 / kThreads;
  constexpr int kRowsApart = kThreads / 8;
  const int c = tid % 8;
  const int r0 = tid / 8;
  const unsigned int chunk = static_cast<unsigned int>((c ^ (r0 % 8)) << 4);
  const T* a_src[kACopies];
  bool a_ok[kACopies];
#pragma unroll
  for (int j = 0; j < kACopies; ++j) {
    const int r = r0 + j * kRowsApart;
    a_ok[j] = m0 + r < rows;
    a_src[j] = x + (a_ok[j] ? static_cast<long long>(m0 + r) * x_stride + c * 8 : 0);
  }
  const T* b_src[kBCopies];
  bool b_ok[kBCopies];
#pragma unroll
  for (int j = 0; j < kBCopies; ++j) {
    const int r = r0 + j * kRowsApart;
    int col, wrow;
    if constexpr (kEpilogue == kWgmmaSwiglu) {
      col = c0 + (r < kTileN / 2 ? r : r - kTileN / 2);
      wrow = r < kTileN / 2 ? col : up_offset + col;
    } else {
      col = c0 + r;
      wrow = col;
    }
    b_ok[j] = col < cols;
    b_src[j] = w + (b_ok[j] ? static_cast<long long>(wrow) * w_stride + c * 8 : 0);
  }
  auto load_w = [&](int slice, int stage) {
    const unsigned int base = smem + stage * kStageBytes + kABytes + r0 * kRowBytes + chunk;
    const int k0 = slice * kTileK;
    const bool k_ok = k0 + c * 8 < depth;
#pragma unroll
    for (int j = 0; j < kBCopies; ++j) {
      const bool ok = b_ok[j] && k_ok;
      cp_async_16_shared(base + j * kRowsApart * kRowBytes, ok ? b_src[j] + k0 : w, ok);
    }
  };
  auto load_x = [&](int slice, int stage) {
    const unsigned int base = smem + stage * kStageBytes + r0 * kRowBytes + chunk;
    const int k0 = slice * kTileK;
    const bool k_ok = k0 + c * 8 < depth;
#pragma unroll
    for (int j = 0; j < kACopies; ++j) {
      const bool ok = a_ok[j] && k_ok;
      cp_async_16_shared(base + j * kRowsApart * kRowBytes, ok ? a_src[j] + k0 : x, ok);
    }
  };

  for (int s = 0; s < kStages - 2; ++s) {
    if (s < slices) load_w(s, s);
  }
  grid_dependency_sync();
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < slices) load_x(s, s);
    cp_async_commit();
  }

  const int warpgroup = tid / 128;
  float acc[kTileN / 2];
#pragma unroll
  for (int i = 0; i < kTileN / 2; ++i) acc[i] = 0.f;

  for (int slice = 0; slice < slices; ++slice) {
    cp_async_wait<kStages - 3>();
    fence_proxy_async_shared();
    __syncthreads();
    // The slice's wgmma first, so that the tensor cores have two groups queued while the
    // copies are issued (into the stage of slice - 2, which every warpgroup has retired).
    const unsigned int a = smem + (slice % kStages) * kStageBytes + warpgroup * 64 * kRowBytes;
    const unsigned int b = smem + (slice % kStages) * kStageBytes + kABytes;
    wgmma_fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      wgmma_m64k16<T, kTileN>(acc, wgmma_descriptor(a + kk * 32), wgmma_descriptor(b + kk * 32));
    }
    wgmma_commit();
    const int next = slice + kStages - 2;
    if (next < slices) {
      load_w(next, next % kStages);
      load_x(next, next % kStages);
    }
    cp_async_commit();
    wgmma_wait<1>();
    wgmma_fence_operands(acc);
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);

  wgmma_gemm_store<T, kTileN, kEpilogue, kBias>(acc, tid, m0, c0, bias, residual, residual_stride,
                                                 out, out_stride, rows, cols, up_offset);
}

// The same GEMM with the copies by TMA from one producer thread (`loads` 1): the block is
// the consumer warpgroups and one producer warp after them. Stage s has a barrier `full`
// (one arrival, the producer's, and the stage's bytes) and a barrier `empty` (one arrival per
// consumer thread). The producer fills slice k into stage k % kStages once the consumers have
// released slice k - kStages there, each operand a box of 64 x rows by tensor map (the TMA
// unit writes the 128-byte swizzle itself and fills zeros past the tensor); the consumers wait
// for `full`, issue the slice's wgmma, and release slice k - 1 once at most one group is
// pending, so the copies run kStages - 1 slices ahead. The weights of the first stages are on
// their way before the programmatic-dependent-launch wait.
//
// Split K: launched in clusters of S CTAs along z (grid z = S), CTA rank r of a cluster sums
// the r-th of S equal runs of K slices (none when there are fewer slices than CTAs). After a
// cluster barrier (every ring is free) each CTA pushes the float32 partials of the 8-column
// groups j it does not own (owner j % S) into its owner's ring by distributed-shared-memory
// stores; after a second one each owner adds the others' partials to its own, in rank order,
// and stores its groups through the epilogue. So a tile of few rows and a long K fills S times
// the SMs without a workspace or a second kernel, and the sum is the same on every run.
//
// REQUIRES: as wgmma_gemm, and x, w and their row strides 16-byte aligned. Launch: block
// kTileM * 2 + 32, grid z the cluster size (1 without a cluster), clusters (1, 1, grid z) of
// at most 8, dynamic shared memory wgmma_gemm_tma_shared_bytes(kTileM, kTileN, kStages).
__host__ __device__ constexpr int wgmma_gemm_tma_shared_bytes(int tile_m, int tile_n, int stages) {
  return wgmma_gemm_shared_bytes(tile_m, tile_n, stages) + 16 * stages;  // + the barriers
}

template <typename T, int kTileM, int kTileN, int kStages, int kEpilogue, bool kBias>
__global__ void __launch_bounds__(kTileM * 2 + 32, 1)
    wgmma_gemm_tma(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_WGMMA_GEMM_TMA_PARAMS)) {
  static_assert(kTileM == 64 || kTileM == 128, "tile_m 64 or 128");
  static_assert(kStages >= 2, "a slice in flight beside the one computed");
  static_assert(kEpilogue != kWgmmaSwiglu || kTileN % 16 == 0, "whole 8-column gate groups");
  constexpr int kConsumers = kTileM * 2;
  constexpr int kRowBytes = 128;
  constexpr int kTileK = kRowBytes / 2;
  constexpr int kABytes = kTileM * kRowBytes;
  constexpr int kStageBytes = (kTileM + kTileN) * kRowBytes;
  extern __shared__ unsigned char wgmma_smem[];
  const unsigned int smem = (shared_address(wgmma_smem) + 1023u) & ~1023u;
  const unsigned int full = smem + kStages * kStageBytes;  // kStages barriers, then `empty`'s
  const unsigned int empty = full + 8 * kStages;

  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * kTileM;
  constexpr int kOutCols = kEpilogue == kWgmmaSwiglu ? kTileN / 2 : kTileN;
  const int c0 = blockIdx.x * kOutCols;
  // This CTA's run of K slices: [first, first + slices).
  const int splits = static_cast<int>(cluster_size());
  const int rank = static_cast<int>(cluster_rank());
  const int total = (depth + kTileK - 1) / kTileK;
  const int per = (total + splits - 1) / splits;
  const int first = min(total, rank * per);
  const int slices = min(total, first + per) - first;

  if (tid == kConsumers) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + 8 * s, 1);
      mbarrier_init(empty + 8 * s, kConsumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  float acc[kTileN / 2];
#pragma unroll
  for (int i = 0; i < kTileN / 2; ++i) acc[i] = 0.f;
  if (tid >= kConsumers) {
    if (tid == kConsumers) {
      auto load_w = [&](int slice) {
        const unsigned int b = smem + (slice % kStages) * kStageBytes + kABytes;
        const unsigned int bar = full + 8 * (slice % kStages);
        const int k = (first + slice) * kTileK;
        if constexpr (kEpilogue == kWgmmaSwiglu) {
          tma_load_2d(b, &w_map, k, c0, bar);
          tma_load_2d(b + kTileN / 2 * kRowBytes, &w_map, k, up_offset + c0, bar);
        } else {
          tma_load_2d(b, &w_map, k, c0, bar);
        }
      };
      const int early = slices < kStages ? slices : kStages;
      for (int slice = 0; slice < early; ++slice) {
        mbarrier_arrive_expect_tx(full + 8 * slice, kStageBytes);
        load_w(slice);
      }
      grid_dependency_sync();
      for (int slice = 0; slice < slices; ++slice) {
        const int stage = slice % kStages;
        if (slice >= early) {
          mbarrier_wait(empty + 8 * stage, ((slice / kStages) - 1) & 1);
          mbarrier_arrive_expect_tx(full + 8 * stage, kStageBytes);
          load_w(slice);
        }
        tma_load_2d(smem + stage * kStageBytes, &x_map, (first + slice) * kTileK, m0,
                    full + 8 * stage);
      }
    } else {
      grid_dependency_sync();
    }
    if (splits == 1) return;
  } else {
    grid_dependency_sync();  // the epilogue reads the residual and writes `out`
    const int warpgroup = tid / 128;
    for (int slice = 0; slice < slices; ++slice) {
      const int stage = slice % kStages;
      mbarrier_wait(full + 8 * stage, (slice / kStages) & 1);
      const unsigned int a = smem + stage * kStageBytes + warpgroup * 64 * kRowBytes;
      const unsigned int b = smem + stage * kStageBytes + kABytes;
      wgmma_fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        wgmma_m64k16<T, kTileN>(acc, wgmma_descriptor(a + kk * 32), wgmma_descriptor(b + kk * 32));
      }
      wgmma_commit();
      wgmma_wait<1>();
      wgmma_fence_operands(acc);
      if (slice > 0) mbarrier_arrive(empty + 8 * ((slice - 1) % kStages));
    }
    wgmma_wait<0>();
    wgmma_fence_operands(acc);
  }
  if (splits > 1) {
    // Owner rank j % S of each 8-column group j receives the other CTAs' float4 of the group
    // (two with SwiGLU: gate and up) in slot ((sender * owned + j / S) * halves + half) *
    // kConsumers + thread of its ring, once every CTA of the cluster is done with its ring,
    // and adds them to its own in rank order; a rank owns at most `owned` groups.
    constexpr int kGroups = kOutCols / 8;
    constexpr int kHalves = kEpilogue == kWgmmaSwiglu ? 2 : 1;
    const int owned = (kGroups + splits - 1) / splits;
    if (splits * owned * kHalves * kConsumers * 16 > kStages * kStageBytes) __trap();
    auto slot = [&](int sender, int j, int half) {
      return smem + 16u * (((sender * owned + j / splits) * kHalves + half) * kConsumers + tid);
    };
    cluster_sync();
    if (tid < kConsumers) {
#pragma unroll
      for (int j = 0; j < kGroups; ++j) {
        const int owner = j % splits;
        if (owner == rank) continue;
#pragma unroll
        for (int h = 0; h < kHalves; ++h) {
          const int i = 4 * (j + h * kGroups);
          store_shared_cluster_v4(slot(rank, j, h), owner, acc[i], acc[i + 1], acc[i + 2],
                                  acc[i + 3]);
        }
      }
    }
    cluster_sync();
    if (tid >= kConsumers) return;
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      if (j % splits != rank) continue;
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        const int i = 4 * (j + h * kGroups);
        for (int sender = 0; sender < splits; ++sender) {
          if (sender == rank) continue;
          float4 v;
          asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                       : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                       : "r"(slot(sender, j, h))
                       : "memory");
          acc[i] += v.x;
          acc[i + 1] += v.y;
          acc[i + 2] += v.z;
          acc[i + 3] += v.w;
        }
      }
    }
  }
  wgmma_gemm_store<T, kTileN, kEpilogue, kBias>(acc, tid, m0, c0, bias, residual, residual_stride,
                                                 out, out_stride, rows, cols, up_offset, rank,
                                                 splits);
}

}  // namespace tileplan
