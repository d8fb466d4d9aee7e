// The parameters of the embedding_gather kernels: one struct per kernel, the kernel's only
// parameter. Included by the templates (NVRTC) and by the host launcher, so the host
// fills exactly the fields the kernel reads. Plain C++: no headers, no CUDA types;
// pointers to template-typed elements are untyped here and typed by the kernel.
#pragma once

namespace tileplan {

struct EmbeddingGatherParams {
  const int* ids;
  const void* table;
  void* out;
  int num_tokens;
  int vocab;
  int hidden;
  int* error;
};

}  // namespace tileplan
