// The parameters of the rms_norm kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct RmsNormParams {
  const void* x;
  long long x_stride;
  int x_group;
  long long x_group_stride;
  const void* w;
  void* out;
  int rows;
  int n;
  float eps;
};

struct AddRmsNormParams {
  const void* a;
  long long a_stride;
  const void* b;
  long long b_stride;
  const void* w;
  void* sum;
  void* out;
  int rows;
  int n;
  float eps;
};

}  // namespace tileplan
