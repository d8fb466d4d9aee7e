// The parameters of the wgmma_gemm kernel, declared once for the template (NVRTC) and the
// host launcher (kernels/core/kernel_params.h): TILEPLAN_WGMMA_GEMM_PARAMS is the kernel's
// signature, entry by entry (host type, kernel type, name), and the struct below is what the
// host fills; the launch passes its fields as the kernel's parameters.
#pragma once

#ifdef __CUDACC_RTC__
#include "kernel_params.h"
#else
#include "kernels/core/kernel_params.h"
#endif

// What both kernels take after their operands: the epilogue's operands and the shape.
#define TILEPLAN_WGMMA_GEMM_EPILOGUE_PARAMS(NEXT) \
  NEXT(const void*, const T* __restrict__, bias) \
  NEXT(const void*, const T*, residual) \
  NEXT(long long, long long, residual_stride) \
  NEXT(void*, T*, out) \
  NEXT(long long, long long, out_stride) \
  NEXT(int, int, rows) \
  NEXT(int, int, cols) \
  NEXT(int, int, depth) \
  NEXT(int, int, up_offset)

// wgmma_gemm
#define TILEPLAN_WGMMA_GEMM_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(const void*, const T* __restrict__, w) \
  NEXT(long long, long long, w_stride) \
  TILEPLAN_WGMMA_GEMM_EPILOGUE_PARAMS(NEXT)

// wgmma_gemm_tma: x and w as TMA tensor maps (2-D, 128-byte swizzle, boxes of 64 x tile
// rows), which the launch layer encodes.
#define TILEPLAN_WGMMA_GEMM_TMA_PARAMS(FIRST, NEXT) \
  FIRST(TmaDescriptor, const __grid_constant__ TmaDescriptor, x_map) \
  NEXT(TmaDescriptor, const __grid_constant__ TmaDescriptor, w_map) \
  TILEPLAN_WGMMA_GEMM_EPILOGUE_PARAMS(NEXT)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(WgmmaGemmParams, TILEPLAN_WGMMA_GEMM_PARAMS)
TILEPLAN_PARAMS_STRUCT(WgmmaGemmTmaParams, TILEPLAN_WGMMA_GEMM_TMA_PARAMS)

}  // namespace tileplan
