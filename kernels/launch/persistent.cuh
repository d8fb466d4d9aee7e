// The persistent kernel: the launches of many steps run as one grid that stays resident
// (docs/runtime.md, "Persistent decode"). Each block runs a list of tasks, a task being one
// CTA of one step's launch (a stage), executed by the stage's kernel body (a family's
// `<kernel>_task`, kernels/core/kernel_params.h) on that CTA's index. The planner's schedule
// (planner/plan.proto, PersistentRun) says which block runs which CTA; dependencies are
// counters in global memory, not kernel boundaries.
//
//   for each of the block's tasks, in stage order:
//     entering a new stage: prefetch (weights into L2) for up to `prefetch_tasks` of the
//       block's tasks in that stage, then wait until done[wait] has counted every task of
//       the stage it waits for (thread 0 spins with acquire loads; the block then meets at
//       a barrier, so its threads see every released write)
//     run the body on the task's CTA
//     barrier (the body's shared memory is free, its writes ordered), then thread 0 adds 1
//       to done[stage] with release semantics (released per task: releasing a block's tasks
//       of a stage at once measured slower, docs/PERF.md)
//
// The counters are never reset: replay n (the epoch, counted by the kernel itself) waits
// for done[s] to reach (n + 1) * tasks(s), in wrapping 32-bit arithmetic, and the last
// block to finish advances the epoch for the next replay. The grid must be co-resident
// (a cooperative launch), or a block could wait for one that never starts; since every
// block runs its tasks in stage order and a stage waits only for earlier ones, the
// earliest unfinished stage can always progress.
//
// Bodies read inputs that other blocks wrote in this launch. Their read-only parameters are
// `const __restrict__` in the kernels' own signatures, where the compiler may read them
// through the non-coherent path; here they reach the bodies through a struct in memory,
// which it does not, so every read after the acquire sees the released data.
#pragma once

#include "persistent_params.h"
#include "primitives.cuh"

namespace tileplan {

template <typename... Ops>
__device__ __forceinline__ void persistent_prefetch(int op, const Cta& cta, const char* params) {
  int i = 0;
  ((op == i++ ? Ops::prefetch(cta, params) : void()), ...);
}

template <typename... Ops>
__device__ __forceinline__ void persistent_run(int op, const Cta& cta, const char* params) {
  int i = 0;
  ((op == i++ ? Ops::run(cta, params) : void()), ...);
}

__device__ __forceinline__ Cta persistent_cta(const PersistentStage& stage, unsigned int index) {
  Cta cta;
  cta.nx = stage.grid_x;
  cta.ny = stage.grid_y;
  cta.nz = stage.grid_z;
  cta.x = index % stage.grid_x;
  cta.y = (index / stage.grid_x) % stage.grid_y;
  cta.z = index / (stage.grid_x * stage.grid_y);
  return cta;
}

// stages: the schedule's stages; tasks: every block's tasks, block b's at
// [block_tasks[b], block_tasks[b + 1]); params: the launches' parameter structs; done: one
// counter per stage; epoch, finished: one counter each. All counters zero before the first
// launch of a schedule.
//
// Launch: grid = the schedule's blocks (co-resident: cooperative), block kThreads (every
// stage's block size), dynamic shared memory the largest any stage needs.
template <int kThreads, int kMinBlocks, typename... Ops>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    persistent_kernel(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_PERSISTENT_PARAMS)) {
  grid_dependency_sync();
  // Every block reads the epoch before any block can finish (the last one to finish moves it).
  const unsigned int replay = load_acquire(epoch) + 1u;
  const int begin = block_tasks[blockIdx.x], end = block_tasks[blockIdx.x + 1];
  int current = -1;
  for (int i = begin; i < end; ++i) {
    const PersistentTask task = tasks[i];
    const PersistentStage& stage = stages[task.stage];
    if (task.stage != current) {
      current = task.stage;
      for (int j = i; j < end && j < i + prefetch_tasks && tasks[j].stage == current; ++j) {
        persistent_prefetch<Ops...>(stage.op, persistent_cta(stage, tasks[j].index),
                                    params + stage.params);
      }
      if (stage.wait >= 0) {
        if (threadIdx.x == 0) {
          const unsigned int target = replay * stage.wait_tasks;
          while (static_cast<int>(load_acquire(done + stage.wait) - target) < 0) __nanosleep(32);
        }
        __syncthreads();
      }
    }
    persistent_run<Ops...>(stage.op, persistent_cta(stage, task.index), params + stage.params);
    __syncthreads();
    if (threadIdx.x == 0) add_release(done + task.stage, 1u);
  }
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(finished, 1u) == gridDim.x - 1) {
      *finished = 0u;
      __threadfence();
      atomicAdd(epoch, 1u);
    }
  }
}

}  // namespace tileplan
