// The parameters of the embedding_gather kernels, declared once for the templates (NVRTC) and the
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

// embedding_gather
#define TILEPLAN_EMBEDDING_GATHER_PARAMS(FIRST, NEXT) \
  FIRST(const int*, const int* __restrict__, ids) \
  NEXT(const void*, const T* __restrict__, table) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(int, int, num_tokens) \
  NEXT(int, int, vocab) \
  NEXT(int, int, hidden) \
  NEXT(int*, int*, error)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(EmbeddingGatherParams, TILEPLAN_EMBEDDING_GATHER_PARAMS)

}  // namespace tileplan
