// The parameters of the elementwise kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct ElementwiseBinaryParams {
  const void* a;
  long long a_stride;
  const void* b;
  long long b_stride;
  void* out;
  long long rows;
  int cols;
};

struct ElementwiseUnaryParams {
  const void* x;
  long long x_stride;
  void* out;
  long long rows;
  int cols;
};

}  // namespace tileplan
