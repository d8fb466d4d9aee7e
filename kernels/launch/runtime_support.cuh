// Kernels of the runtime itself rather than of a region kind: random weights generated on the
// device, the bookkeeping step that chains greedy decode steps inside one CUDA Graph, and a
// kernel that faults on purpose (a testing aid).
#pragma once

#include "runtime_support_params.h"
#include "primitives.cuh"

namespace tileplan {

// A uniform float in [-1, 1) from (seed, index): splitmix64 of the pair, top 24 bits.
__device__ __forceinline__ float hash_uniform(unsigned long long seed, unsigned long long i) {
  unsigned long long z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

// out[i] = offset + scale * u(seed, i), u uniform in [-1, 1), for i < n (grid-stride loop).
// Launch: any grid, any block.
template <typename T>
__global__ void fill_uniform(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_FILL_UNIFORM_PARAMS)) {
  grid_dependency_sync();
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = from_float<T>(offset + scale * hash_uniform(seed, static_cast<unsigned long long>(i)));
  }
}

// out[r, i] += bias[i] for r < rows, i < n, in float, rounded once to T (grid-stride loop):
// the bias of a tensor-parallel all_reduce (kernels/nccl/nccl_launcher.h), added by every
// rank to the same reduced sum. Launch: any grid, any block.
template <typename T, typename B>
__global__ void add_bias_rows(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_ADD_BIAS_ROWS_PARAMS)) {
  grid_dependency_sync();
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * n;
       i += stride) {
    out[i] = from_float<T>(to_float(out[i]) + to_float(bias[i % n]));
  }
}

// Runs after a decode step whose argmax wrote each sequence's next token into `tokens`
// ([batch], the next step's input): records the tokens as generated token number *step
// (history is [capacity, batch]; steps past the capacity are not recorded), advances every
// sequence's position by one and counts the step. Everything it reads and writes lives on
// the device, so a captured graph of [decode step, argmax, decode_advance] replays the whole
// greedy loop with no host work between steps.
// Launch: grid 1, block >= batch (at most 1024).
__global__ void decode_advance(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_DECODE_ADVANCE_PARAMS)) {
  grid_dependency_sync();
  const int s = *step;
  __syncthreads();
  const int b = threadIdx.x;
  if (b < batch) {
    if (s < capacity) history[static_cast<long long>(s) * batch + b] = tokens[b];
    positions[b] += 1;
  }
  if (b == 0) *step = s + 1;
}

// Executes __trap(): the launch fails and the CUDA context is unusable afterwards, as after
// a kernel that faults. A testing aid for the paths that must survive such a kernel (the
// tuner's worker restart, autotune_regions --inject-fault). Launch: grid 1, block 1.
__global__ void trap_fault() { __trap(); }

}  // namespace tileplan
