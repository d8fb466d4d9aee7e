// The parameters of the moe_gemv kernels, declared once for the templates (NVRTC) and the host
// launcher (kernels/core/kernel_params.h): each TILEPLAN_..._PARAMS list is the signature of
// the kernel named above it, entry by entry (host type, kernel type, name), and each struct
// below is what the host fills. The routing table's layout below is read by both sides too.
#pragma once

#ifdef __CUDACC_RTC__
#include "kernel_params.h"
#define TILEPLAN_MOE_FUSED_HOST_DEVICE __host__ __device__
#else
#include "kernels/core/kernel_params.h"
#define TILEPLAN_MOE_FUSED_HOST_DEVICE
#endif

// The top-k selection's parameters (moe_topk_select's), in moe_route's and moe_gate_up's lists.
#define TILEPLAN_MOE_SELECTION_PARAMS(NEXT) \
  NEXT(int, int, experts) \
  NEXT(int, int, top_k) \
  NEXT(int, int, groups) \
  NEXT(int, int, topk_groups) \
  NEXT(int, int, norm_topk_prob) \
  NEXT(float, float, scaling)

// moe_route: the router's logits and the top-k; writes the weights and the routing table (and
// with norm_w, the RMSNorm of x into xn for moe_gate_up).
#define TILEPLAN_MOE_ROUTE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(const void*, const NormW* __restrict__, norm_w) \
  NEXT(float, float, eps) \
  NEXT(void*, T* __restrict__, xn) \
  NEXT(const void*, const W* __restrict__, router) \
  NEXT(float*, float*, logits) \
  NEXT(float*, float* __restrict__, weights) \
  NEXT(int*, int* __restrict__, table) \
  NEXT(unsigned int*, unsigned int* __restrict__, counter) \
  NEXT(int, int, tokens) \
  NEXT(int, int, hidden) \
  TILEPLAN_MOE_SELECTION_PARAMS(NEXT) \
  NEXT(int, int, max_slots)

// moe_gate_up: silu(gate · x) * (up · x) of every routed slot's tokens and of the shared MLP;
// with kSelect (one token) it also selects the top-k from moe_route's logits and writes the
// weights and the routing table.
#define TILEPLAN_MOE_GATE_UP_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(const void*, const W* __restrict__, gate) \
  NEXT(const void*, const W* __restrict__, up) \
  NEXT(const void*, const W* __restrict__, shared_gate) \
  NEXT(const void*, const W* __restrict__, shared_up) \
  NEXT(const int*, const int* __restrict__, table) \
  NEXT(float*, float* __restrict__, act) \
  NEXT(float*, float* __restrict__, shared_act) \
  NEXT(int, int, tokens) \
  NEXT(int, int, hidden) \
  NEXT(int, int, inter) \
  NEXT(int, int, shared_inter) \
  NEXT(int, int, max_slots) \
  NEXT(int, int, routed_tiles) \
  NEXT(int, int, shared_tiles) \
  NEXT(const float*, const float*, logits) \
  NEXT(int*, int*, table_out) \
  NEXT(float*, float*, weights) \
  TILEPLAN_MOE_SELECTION_PARAMS(NEXT)

// moe_down: the down projections weighted and summed per token, the shared MLP's and the
// residual added.
#define TILEPLAN_MOE_DOWN_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const W* __restrict__, down) \
  NEXT(const void*, const W* __restrict__, shared_down) \
  NEXT(const int*, const int* __restrict__, table) \
  NEXT(const float*, const float* __restrict__, weights) \
  NEXT(const float*, const float* __restrict__, act) \
  NEXT(const float*, const float* __restrict__, shared_act) \
  NEXT(const void*, const T*, residual) \
  NEXT(long long, long long, residual_stride) \
  NEXT(void*, T*, out) \
  NEXT(int, int, tokens) \
  NEXT(int, int, inter) \
  NEXT(int, int, shared_inter) \
  NEXT(int, int, cols) \
  NEXT(int, int, max_slots) \
  NEXT(int, int, shared) \
  NEXT(float*, float*, partials) \
  NEXT(unsigned int*, unsigned int* __restrict__, counters)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(MoeRouteParams, TILEPLAN_MOE_ROUTE_PARAMS)
TILEPLAN_PARAMS_STRUCT(MoeGateUpParams, TILEPLAN_MOE_GATE_UP_PARAMS)
TILEPLAN_PARAMS_STRUCT(MoeDownParams, TILEPLAN_MOE_DOWN_PARAMS)

// The tokens (B·T) a step may have: each kernel holds its accumulators for all of them.
constexpr int kMoeMaxTokens = 16;

// The routing table (ints) that moe_route's last CTA writes for the two GEMV kernels: int 0
// the number n of routed slots (the distinct experts the step selected, in the order of their
// first selection), then from int kMoeTableHeader the `max_slots` expert ids (n of them
// written), then `max_slots` rows of `tokens` ints: row j, column t is the selection t * top_k
// + k by which token t chose slot j's expert, or -1 when it did not choose it.
constexpr int kMoeTableHeader = 4;
TILEPLAN_MOE_FUSED_HOST_DEVICE constexpr long long MoeTableInts(long long max_slots, long long tokens) {
  return kMoeTableHeader + max_slots * (1 + tokens);
}

// The dynamic shared memory of moe_down, in bytes: per slot (the routed ones and the shared
// MLP's) its expert id and, per token, the activation row and the weight it is summed with.
TILEPLAN_MOE_FUSED_HOST_DEVICE constexpr long long MoeDownSharedBytes(long long max_slots,
                                                                long long max_tokens) {
  return (max_slots + 1) * (1 + 2 * max_tokens) * 4;
}

}  // namespace tileplan
