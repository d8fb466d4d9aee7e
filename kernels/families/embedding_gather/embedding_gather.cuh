// Embedding lookup as a row gather: out[t, :] = table[ids[t], :].
#pragma once

#include "embedding_gather_params.h"
#include "primitives.cuh"

namespace tileplan {

// CTA x copies rows for tokens [x * kTokensPerCta, (x + 1) * kTokensPerCta): every thread
// reads its tokens' ids first, then copies kVec elements per token per step, so
// kTokensPerCta independent loads are in flight per thread. No conversion (table and out
// share T).
//
// An id outside [0, vocab) is an error: with `error` non-null the kernel writes a zero row
// and raises *error to at least t + 1 (the host zeroes it before and reads it after);
// with `error` null it traps, failing the launch, so a bad id never passes silently.
//
// Launch: grid ceil(num_tokens / kTokensPerCta), block kThreads.
// REQUIRES: hidden % kVec == 0; table and out aligned to kVec * sizeof(T) bytes.
template <typename T, int kThreads, int kTokensPerCta, int kVec>
__global__ void __launch_bounds__(kThreads)
    embedding_gather(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_EMBEDDING_GATHER_PARAMS)) {
  grid_dependency_sync();
  const int t0 = blockIdx.x * kTokensPerCta;
  int id[kTokensPerCta];
#pragma unroll
  for (int i = 0; i < kTokensPerCta; ++i) {
    const int t = t0 + i;
    id[i] = t < num_tokens ? ids[t] : 0;
    if (t < num_tokens && (id[i] < 0 || id[i] >= vocab)) {
      if (error == nullptr) __trap();
      if (threadIdx.x == 0) atomicMax(error, t + 1);
      id[i] = -1;
    }
  }
  for (int c = threadIdx.x * kVec; c < hidden; c += kThreads * kVec) {
#pragma unroll
    for (int i = 0; i < kTokensPerCta; ++i) {
      const int t = t0 + i;
      if (t >= num_tokens) break;
      T* dst = out + static_cast<long long>(t) * hidden + c;
      if (id[i] < 0) {
        zero_vec<T, kVec>(dst);
      } else {
        copy_vec<T, kVec>(dst, table + static_cast<long long>(id[i]) * hidden + c);
      }
    }
  }
}

}  // namespace tileplan
