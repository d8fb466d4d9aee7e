// The parameters of the rms_norm kernels, declared once for the templates (NVRTC) and the
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

// rms_norm
#define TILEPLAN_RMS_NORM_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T*, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(int, int, x_group) \
  NEXT(long long, long long, x_group_stride) \
  NEXT(const void*, const W* __restrict__, w) \
  NEXT(void*, T*, out) \
  NEXT(int, int, rows) \
  NEXT(int, int, n) \
  NEXT(float, float, eps)

// add_rms_norm
#define TILEPLAN_ADD_RMS_NORM_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T*, a) \
  NEXT(long long, long long, a_stride) \
  NEXT(const void*, const T*, b) \
  NEXT(long long, long long, b_stride) \
  NEXT(const void*, const W* __restrict__, w) \
  NEXT(void*, T*, sum) \
  NEXT(void*, T*, out) \
  NEXT(int, int, rows) \
  NEXT(int, int, n) \
  NEXT(float, float, eps)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(RmsNormParams, TILEPLAN_RMS_NORM_PARAMS)
TILEPLAN_PARAMS_STRUCT(AddRmsNormParams, TILEPLAN_ADD_RMS_NORM_PARAMS)

}  // namespace tileplan
