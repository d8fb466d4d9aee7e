// The parameters of the runtime_support kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct FillUniformParams {
  void* out;
  long long n;
  unsigned long long seed;
  float scale;
  float offset;
};

struct DecodeAdvanceParams {
  const int* tokens;
  int* positions;
  int* history;
  int* step;
  int batch;
  int capacity;
};

}  // namespace tileplan
