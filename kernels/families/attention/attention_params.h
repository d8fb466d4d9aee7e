// The parameters of the attention kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct AttentionParams {
  const void* q;
  long long q_stride;
  const void* k_cache;
  const void* v_cache;
  const int* positions;
  void* out;
  float* workspace;
  unsigned int* counters;
  int tokens;
  int q_heads;
  int kv_heads;
  int capacity;
  float scale;
  int window;
};

struct AttentionRopeParams {
  const void* qkv;
  long long qkv_stride;
  const void* q_norm;
  const void* k_norm;
  float eps;
  const int* positions;
  const float* inv_freq;
  void* k_cache;
  void* v_cache;
  void* out;
  float* workspace;
  unsigned int* counters;
  int tokens;
  int q_heads;
  int kv_heads;
  int capacity;
  float scale;
  int window;
  int* error;
};

}  // namespace tileplan
