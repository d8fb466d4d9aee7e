// Embedding lookup as a row gather: out[t, :] = table[ids[t], :].
#pragma once

#include "primitives.cuh"

namespace tileplan {

// Copies row ids[t] of `table` ([vocab, hidden]) to row t of `out` ([num_tokens, hidden]),
// kVec elements per thread per access, without conversion (table and out share T).
// An id outside [0, vocab) writes a zero row and, when `error` is not null, raises *error
// to at least t + 1 (the host zeroes it before and reads it after).
//
// Launch: grid (num_tokens, ceil(hidden / (kThreads * kVec))), block kThreads.
// REQUIRES: hidden % kVec == 0; table and out aligned to kVec * sizeof(T) bytes.
template <typename T, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    embedding_gather(const int* __restrict__ ids, const T* __restrict__ table,
                     T* __restrict__ out, int num_tokens, int vocab, int hidden, int* error) {
  const int t = blockIdx.x;
  const long long col = (static_cast<long long>(blockIdx.y) * kThreads + threadIdx.x) * kVec;
  if (t >= num_tokens || col >= hidden) return;
  const int id = ids[t];
  T* dst = out + static_cast<long long>(t) * hidden + col;
  if (id < 0 || id >= vocab) {
    zero_vec<T, kVec>(dst);
    if (error != nullptr && col == 0) atomicMax(error, t + 1);
    return;
  }
  copy_vec<T, kVec>(dst, table + static_cast<long long>(id) * hidden + col);
}

}  // namespace tileplan
