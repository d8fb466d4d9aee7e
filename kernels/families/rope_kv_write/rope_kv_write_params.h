// The parameters of the rope_kv_write kernels, declared once for the templates (NVRTC) and the
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

// rope
#define TILEPLAN_ROPE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T*, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(long long, long long, x_head_stride) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const float*, const float* __restrict__, inv_freq) \
  NEXT(float, float, attention_factor) \
  NEXT(void*, T*, out) \
  NEXT(int, int, heads)

// kv_write
#define TILEPLAN_KV_WRITE_PARAMS(FIRST, NEXT) \
  FIRST(void*, T*, cache) \
  NEXT(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, x_stride) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(int, int, tokens) \
  NEXT(int, int, heads) \
  NEXT(int, int, capacity) \
  NEXT(int*, int*, error)

// rope_kv_write
#define TILEPLAN_ROPE_KV_WRITE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, qkv) \
  NEXT(long long, long long, qkv_stride) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const float*, const float* __restrict__, inv_freq) \
  NEXT(float, float, attention_factor) \
  NEXT(void*, T* __restrict__, q_out) \
  NEXT(void*, T*, k_cache) \
  NEXT(void*, T*, v_cache) \
  NEXT(int, int, tokens) \
  NEXT(int, int, q_heads) \
  NEXT(int, int, kv_heads) \
  NEXT(int, int, capacity) \
  NEXT(int*, int*, error)

// qk_norm_rope_kv_write
#define TILEPLAN_QK_NORM_ROPE_KV_WRITE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, qkv) \
  NEXT(long long, long long, qkv_stride) \
  NEXT(const void*, const W* __restrict__, q_norm) \
  NEXT(const void*, const W* __restrict__, k_norm) \
  NEXT(float, float, eps) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const float*, const float* __restrict__, inv_freq) \
  NEXT(float, float, attention_factor) \
  NEXT(void*, T* __restrict__, q_out) \
  NEXT(void*, T*, k_cache) \
  NEXT(void*, T*, v_cache) \
  NEXT(int, int, tokens) \
  NEXT(int, int, q_heads) \
  NEXT(int, int, kv_heads) \
  NEXT(int, int, capacity) \
  NEXT(int*, int*, error)

// mla_kv_write
#define TILEPLAN_MLA_KV_WRITE_PARAMS(FIRST, NEXT) \
  FIRST(const void*, const T* __restrict__, kv_a) \
  NEXT(long long, long long, kv_a_stride) \
  NEXT(const void*, const W* __restrict__, norm) \
  NEXT(float, float, eps) \
  NEXT(const int*, const int* __restrict__, positions) \
  NEXT(const float*, const float* __restrict__, inv_freq) \
  NEXT(float, float, attention_factor) \
  NEXT(void*, T* __restrict__, latent_cache) \
  NEXT(void*, T* __restrict__, rope_cache) \
  NEXT(int, int, tokens) \
  NEXT(int, int, capacity) \
  NEXT(int*, int*, error)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(RopeParams, TILEPLAN_ROPE_PARAMS)
TILEPLAN_PARAMS_STRUCT(KvWriteParams, TILEPLAN_KV_WRITE_PARAMS)
TILEPLAN_PARAMS_STRUCT(RopeKvWriteParams, TILEPLAN_ROPE_KV_WRITE_PARAMS)
TILEPLAN_PARAMS_STRUCT(QkNormRopeKvWriteParams, TILEPLAN_QK_NORM_ROPE_KV_WRITE_PARAMS)
TILEPLAN_PARAMS_STRUCT(MlaKvWriteParams, TILEPLAN_MLA_KV_WRITE_PARAMS)

}  // namespace tileplan
