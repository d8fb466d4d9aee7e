// The parameters of the rope_kv_write kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct RopeParams {
  const void* x;
  long long x_stride;
  const int* positions;
  const float* inv_freq;
  void* out;
  int heads;
};

struct KvWriteParams {
  void* cache;
  const void* x;
  long long x_stride;
  const int* positions;
  int tokens;
  int heads;
  int capacity;
  int* error;
};

struct RopeKvWriteParams {
  const void* qkv;
  long long qkv_stride;
  const int* positions;
  const float* inv_freq;
  void* q_out;
  void* k_cache;
  void* v_cache;
  int tokens;
  int q_heads;
  int kv_heads;
  int capacity;
  int* error;
};

struct QkNormRopeKvWriteParams {
  const void* qkv;
  long long qkv_stride;
  const void* q_norm;
  const void* k_norm;
  float eps;
  const int* positions;
  const float* inv_freq;
  void* q_out;
  void* k_cache;
  void* v_cache;
  int tokens;
  int q_heads;
  int kv_heads;
  int capacity;
  int* error;
};

}  // namespace tileplan
