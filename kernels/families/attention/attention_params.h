// The parameters of the attention kernels, declared once for the templates (NVRTC) and the
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

// attention_decode_split_kv, attention_prefill_flash
#define TILEPLAN_ATTENTION_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, q) \
  NEXT(long long, long long, q_stride) \
  NEXT(const void*, const T* __restrict__, k_cache) \
  NEXT(const void*, const T* __restrict__, v_cache) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(float*, float* __restrict__, workspace) \
  NEXT(unsigned int*, unsigned int* __restrict__, counters) \
  NEXT(int, int, tokens) \
  NEXT(int, int, q_heads) \
  NEXT(int, int, kv_heads) \
  NEXT(int, int, capacity) \
  NEXT(float, float, scale) \
  NEXT(int, int, window)

// attention_decode_rope
#define TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, qkv) \
  NEXT(long long, long long, qkv_stride) \
  NEXT(const void*, const W* __restrict__, q_norm) \
  NEXT(const void*, const W* __restrict__, k_norm) \
  NEXT(float, float, eps) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const float*, const float* __restrict__, inv_freq) \
  NEXT(float, float, attention_factor) \
  NEXT(void*, T*, k_cache) \
  NEXT(void*, T*, v_cache) \
  NEXT(void*, T* __restrict__, out) \
  NEXT(float*, float* __restrict__, workspace) \
  NEXT(unsigned int*, unsigned int* __restrict__, counters) \
  NEXT(int, int, tokens) \
  NEXT(int, int, q_heads) \
  NEXT(int, int, kv_heads) \
  NEXT(int, int, capacity) \
  NEXT(float, float, scale) \
  NEXT(int, int, window) \
  NEXT(int*, int*, error)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(AttentionParams, TILEPLAN_ATTENTION_PARAMS)
TILEPLAN_PARAMS_STRUCT(AttentionRopeParams, TILEPLAN_ATTENTION_DECODE_ROPE_PARAMS)

}  // namespace tileplan
