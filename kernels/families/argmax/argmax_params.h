// The parameters of the argmax kernels, declared once for the templates (NVRTC) and the
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

// argmax
#define TILEPLAN_ARGMAX_PARAMS(FIRST, NEXT) \
  FIRST(const float*, const float* __restrict__, logits) \
  NEXT(long long, long long, logits_stride) \
  NEXT(int*, int* __restrict__, out) \
  NEXT(unsigned long long*, unsigned long long* __restrict__, workspace) \
  NEXT(unsigned int*, unsigned int* __restrict__, counters) \
  NEXT(int, int, vocab)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(ArgmaxParams, TILEPLAN_ARGMAX_PARAMS)

}  // namespace tileplan
