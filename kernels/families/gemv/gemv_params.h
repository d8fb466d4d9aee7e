// The parameters of the gemv kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct GemvParams {
  const void* x;
  long long x_stride;
  const void* norm_w;
  float eps;
  const void* w;
  const void* bias;
  const void* residual;
  long long residual_stride;
  void* out;
  float* workspace;
  unsigned int* counters;
  int rows;
  int cols;
  int depth;
};

}  // namespace tileplan
