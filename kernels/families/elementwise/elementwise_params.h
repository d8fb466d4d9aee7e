// The parameters of the elementwise kernels, declared once for the templates (NVRTC) and the
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

// elementwise_add, elementwise_mul
#define TILEPLAN_ELEMENTWISE_BINARY_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T*, a) \
  NEXT(long long, long long, a_stride) \
  NEXT(const void*, const T*, b) \
  NEXT(long long, long long, b_stride) \
  NEXT(void*, T*, out) \
  NEXT(long long, long long, rows) \
  NEXT(int, int, cols)

// elementwise_silu
#define TILEPLAN_ELEMENTWISE_SILU_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T*, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(void*, T*, out) \
  NEXT(long long, long long, rows) \
  NEXT(int, int, cols)

// swiglu
#define TILEPLAN_SWIGLU_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(long long, long long, rows) \
  NEXT(int, int, cols)

// moe_combine
#define TILEPLAN_MOE_COMBINE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, y) \
  NEXT(long long, long long, y_stride) \
  NEXT(const void*, const WT* __restrict__, weights) \
  NEXT(long long, long long, weights_stride) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(long long, long long, rows) \
  NEXT(int, int, cols) \
  NEXT(int, int, top_k)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(ElementwiseBinaryParams, TILEPLAN_ELEMENTWISE_BINARY_PARAMS)
TILEPLAN_PARAMS_STRUCT(ElementwiseUnaryParams, TILEPLAN_ELEMENTWISE_SILU_PARAMS)
TILEPLAN_PARAMS_STRUCT(MoeCombineParams, TILEPLAN_MOE_COMBINE_PARAMS)

}  // namespace tileplan
