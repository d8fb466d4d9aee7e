// The parameters of the runtime_support kernels, declared once for the templates (NVRTC) and the
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

// fill_uniform
#define TILEPLAN_FILL_UNIFORM_PARAMS(FIRST, NEXT) \
  FIRST(void*, T* __restrict__, out) \
  NEXT(long long, long long, n) \
  NEXT(unsigned long long, unsigned long long, seed) \
  NEXT(float, float, scale) \
  NEXT(float, float, offset)

// decode_advance
#define TILEPLAN_DECODE_ADVANCE_PARAMS(FIRST, NEXT) \
  FIRST(const int*, const int* __restrict__, tokens) \
  NEXT(int*, int* __restrict__, positions) \
  NEXT(int*, int* __restrict__, history) \
  NEXT(int*, int* __restrict__, step) \
  NEXT(int, int, batch) \
  NEXT(int, int, capacity)

// add_bias_rows
#define TILEPLAN_ADD_BIAS_ROWS_PARAMS(FIRST, NEXT) \
  FIRST(void*, T* __restrict__, out) \
  NEXT(const void*, const B* __restrict__, bias) \
  NEXT(long long, long long, rows) \
  NEXT(long long, long long, n)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(AddBiasRowsParams, TILEPLAN_ADD_BIAS_ROWS_PARAMS)
TILEPLAN_PARAMS_STRUCT(FillUniformParams, TILEPLAN_FILL_UNIFORM_PARAMS)
TILEPLAN_PARAMS_STRUCT(DecodeAdvanceParams, TILEPLAN_DECODE_ADVANCE_PARAMS)

}  // namespace tileplan
