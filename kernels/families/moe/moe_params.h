// The parameters of the moe kernels, declared once for the templates (NVRTC) and the host
// launcher (kernels/core/kernel_params.h): each TILEPLAN_..._PARAMS list is the signature of
// the kernels named above it, entry by entry (host type, kernel type, name), and each struct
// below is what the host fills; the launch passes a struct's fields as the kernel's
// parameters, so the host cannot drift from the kernel. The constants and the shared-memory
// size of expert_gemm at the end are read by both sides too.
#pragma once

#ifdef __CUDACC_RTC__
#include "kernel_params.h"
#define TILEPLAN_MOE_HOST_DEVICE __host__ __device__
#else
#include "kernels/core/kernel_params.h"
#define TILEPLAN_MOE_HOST_DEVICE
#endif

// moe_topk
#define TILEPLAN_MOE_TOPK_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const L* __restrict__, logits) \
  NEXT(long long, long long, logits_stride) \
  NEXT(int*, int* __restrict__, ids) \
  NEXT(void*, L* __restrict__, weights) \
  NEXT(int, int, tokens) \
  NEXT(int, int, experts) \
  NEXT(int, int, top_k) \
  NEXT(int, int, groups) \
  NEXT(int, int, topk_groups) \
  NEXT(int, int, norm_topk_prob) \
  NEXT(float, float, scaling)

// expert_gemv
#define TILEPLAN_EXPERT_GEMV_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(int, int, x_per_selection) \
  NEXT(const int*, const int* __restrict__, ids) \
  NEXT(const void*, const W* __restrict__, w) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(int, int, selections) \
  NEXT(int, int, top_k) \
  NEXT(int, int, experts) \
  NEXT(int, int, cols) \
  NEXT(int, int, depth) \
  NEXT(int*, int*, error)

// expert_route
#define TILEPLAN_EXPERT_ROUTE_PARAMS(FIRST, NEXT) \
  FIRST(const int*, const int* __restrict__, ids) \
  NEXT(int*, int* __restrict__, route) \
  NEXT(int, int, max_tiles) \
  NEXT(void*, T*, out) \
  NEXT(int, int, selections) \
  NEXT(int, int, top_k) \
  NEXT(int, int, experts) \
  NEXT(int, int, cols) \
  NEXT(int*, int*, error)

// expert_gemm
#define TILEPLAN_EXPERT_GEMM_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(int, int, x_per_selection) \
  NEXT(const int*, const int*, route) \
  NEXT(int, int, max_tiles) \
  NEXT(const void*, const T* __restrict__, w) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(int, int, top_k) \
  NEXT(int, int, cols) \
  NEXT(int, int, depth)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(MoeTopkParams, TILEPLAN_MOE_TOPK_PARAMS)
TILEPLAN_PARAMS_STRUCT(ExpertGemvParams, TILEPLAN_EXPERT_GEMV_PARAMS)
TILEPLAN_PARAMS_STRUCT(ExpertRouteParams, TILEPLAN_EXPERT_ROUTE_PARAMS)
TILEPLAN_PARAMS_STRUCT(ExpertGemmParams, TILEPLAN_EXPERT_GEMM_PARAMS)

// expert_route: one CTA of kExpertRouteThreads sorts every selection; its shared memory holds
// a counter and a cursor per expert, so at most kExpertRouteMaxExperts.
constexpr int kExpertRouteThreads = 1024;
constexpr int kExpertRouteMaxExperts = 4096;

// expert_gemm's dynamic shared memory: `stages` buffers of an A tile [tile_m][tile_k] and a B
// tile [tile_n][tile_k] of 16-bit elements, unpadded (the 16-byte chunks are swizzled).
TILEPLAN_MOE_HOST_DEVICE constexpr long long ExpertGemmSharedBytes(int tile_m, int tile_n,
                                                                  int tile_k, int stages) {
  return static_cast<long long>(stages) * (tile_m + tile_n) * tile_k * 2;
}

}  // namespace tileplan
