// The parameters of the argmax kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct ArgmaxParams {
  const float* logits;
  long long logits_stride;
  int* out;
  unsigned long long* workspace;
  unsigned int* counters;
  int vocab;
};

}  // namespace tileplan
