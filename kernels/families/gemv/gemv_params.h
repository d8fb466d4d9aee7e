// The parameters of the gemv kernels, declared once for the templates (NVRTC) and the
// host launcher (kernels/core/kernel_params.h): each TILEPLAN_..._PARAMS list is the signature
// of the kernels named above it, entry by entry (host type, kernel type, name), and each
// struct below is what the host fills; the launch passes a struct's fields as the kernel's
// parameters, so the host cannot drift from the kernel.
#pragma once

#ifdef __CUDACC_RTC__
#include "kernel_params.h"
#else
#include "kernels/core/kernel_params.h"
#endif

// gemv_split_k
#define TILEPLAN_GEMV_SPLIT_K_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(const void*, const NormW* __restrict__, norm_w) \
  NEXT(float, float, eps) \
  NEXT(const void*, const W* __restrict__, w) \
  NEXT(const void*, const W* __restrict__, bias) \
  NEXT(const void*, const T*, residual) \
  NEXT(long long, long long, residual_stride) \
  NEXT(void*, OutT*, out) \
  NEXT(float*, float* __restrict__, workspace) \
  NEXT(unsigned int*, unsigned int* __restrict__, counters) \
  NEXT(int, int, rows) \
  NEXT(int, int, cols) \
  NEXT(int, int, depth)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(GemvParams, TILEPLAN_GEMV_SPLIT_K_PARAMS)

}  // namespace tileplan
