// The persistent kernel: the launches of many steps run as one grid that stays resident
// (docs/runtime.md, "Persistent decode"). Each block runs a list of tasks, a task being one
// CTA of one step's launch (a stage), executed by the stage's kernel body (a family's
// `<kernel>_task`, kernels/core/kernel_params.h) on that CTA's index. The planner's schedule
// (planner/plan.proto, PersistentRun) says which block runs which CTA; dependencies are
// counters in global memory, not kernel boundaries.
//
//   (with the weight stream: one thread starts copying the first kSlots tiles into shared
//   memory, below)
//   for each of the block's tasks, in stage order:
//     entering a new stage: prefetch (weights into L2) for up to `prefetch_tasks` of the
//       block's tasks in that stage unless they stream, then wait until done[wait] has
//       counted every task of the stage it waits for (thread 0 spins with acquire loads; the
//       block then meets at a barrier, so its threads see every released write)
//     run the body on the task's CTA (a streamed task: once its tile has landed, from it)
//     barrier (the body's shared memory is free, its writes ordered), then thread 0 adds 1
//       to done[stage] with release semantics (released per task: releasing a block's tasks
//       of a stage at once measured slower, docs/PERF.md), and starts the next tile into the
//       slot a streamed task has just freed
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

template <typename... Ops>
__device__ __forceinline__ void persistent_run_streamed(int op, const Cta& cta,
                                                        const char* params, const char* tile) {
  int i = 0;
  ((op == i++ ? Ops::run_streamed(cta, params, tile) : void()), ...);
}

// The bytes of the task's tile in the ring (0: it streams nothing, or its tile does not fit
// a slot of `slot_bytes` and it reads its weights itself); with `issue` the copies start.
template <typename... Ops>
__device__ __forceinline__ unsigned int persistent_stream(int op, const Cta& cta,
                                                          const char* params, bool issue,
                                                          unsigned int dst, unsigned int bar,
                                                          unsigned int slot_bytes) {
  unsigned int bytes = 0;
  int i = 0;
  ((op == i++ ? (bytes = Ops::stream(cta, params, false, 0u, 0u)) : 0u), ...);
  if (bytes == 0 || bytes > slot_bytes) return 0u;
  if (issue) {
    i = 0;
    ((op == i++ ? Ops::stream(cta, params, true, dst, bar) : 0u), ...);
  }
  return bytes;
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
// The weight stream (kSlots > 0): dynamic shared memory holds, from byte `ring_offset`,
// kSlots slots of `slot_bytes`. The tasks whose tiles fit a slot (persistent_stream) take
// slots in the block's task order, the n-th in slot n % kSlots. One thread (of warp 1, while
// thread 0 releases the counters) starts the copies of the first kSlots at once, before the
// kernel's own dependency wait (weights depend on no step), and the copies of tile
// n + kSlots as soon as task n has finished reading slot n % kSlots, so the next tasks'
// weights, across stages, arrive while the block waits for and runs the current ones. A task
// waits for its tile on its slot's barrier (phase n / kSlots), and reads it from shared
// memory; the others run as without the stream.
//
// The trace (`trace` not null; a diagnostic, docs/runtime.md): for task i of `tasks`, thread 0
// writes four global_timer() readings to trace[4i ...]: when the block reaches the task, when
// its wait for the earlier stage is over, when its tile has landed, and when it has released
// the task.
//
// Launch: grid = the schedule's blocks (co-resident: cooperative), block kThreads (every
// stage's block size), dynamic shared memory ring_offset + kSlots * slot_bytes (ring_offset
// at least the largest any stage needs).
template <int kThreads, int kMinBlocks, int kSlots, typename... Ops>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    persistent_kernel(TILEPLAN_KERNEL_PARAMETERS(TILEPLAN_PERSISTENT_PARAMS)) {
  constexpr int kBars = kSlots > 0 ? kSlots : 1;
  // The thread that issues the copies: another warp's than thread 0, which releases the
  // counters, so that a release never waits behind the issue of copies.
  constexpr int kIssuer = kThreads > 32 ? 32 : 0;
  __shared__ alignas(8) unsigned long long slot_bars[kBars];
  extern __shared__ __align__(128) char persistent_smem[];
  const int begin = block_tasks[blockIdx.x], end = block_tasks[blockIdx.x + 1];
  // The issuer's cursor: the next task to look at for a tile, and the tiles issued so far.
  int scan = begin;
  unsigned int issued = 0;
  [[maybe_unused]] auto issue_next = [&]() {
    for (; scan < end; ++scan) {
      const PersistentTask task = tasks[scan];
      const PersistentStage& stage = stages[task.stage];
      const unsigned int slot = issued % kBars;
      const unsigned int bar = shared_address(&slot_bars[slot]);
      const unsigned int dst = shared_address(persistent_smem + ring_offset) + slot * slot_bytes;
      if (persistent_stream<Ops...>(stage.op, persistent_cta(stage, task.index),
                                    params + stage.params, true, dst, bar, slot_bytes) > 0) {
        ++scan;
        ++issued;
        return;
      }
    }
  };
  if constexpr (kSlots > 0) {
    if (threadIdx.x == kIssuer) {
      for (int s = 0; s < kSlots; ++s) mbarrier_init(shared_address(&slot_bars[s]), 1u);
      mbarrier_init_fence();
      for (int s = 0; s < kSlots; ++s) issue_next();
    }
  }
  grid_dependency_sync();
  // Every block reads the epoch before any block can finish (the last one to finish moves it).
  const unsigned int replay = load_acquire(epoch) + 1u;
  if constexpr (kSlots > 0) __syncthreads();  // the barriers' initialization
  unsigned int consumed = 0;
  int current = -1;
  for (int i = begin; i < end; ++i) {
    const PersistentTask task = tasks[i];
    const PersistentStage& stage = stages[task.stage];
    const Cta cta = persistent_cta(stage, task.index);
    const char* task_params = params + stage.params;
    unsigned long long reached = 0, ready = 0, landed = 0;
    if (trace != nullptr && threadIdx.x == 0) reached = global_timer();
    unsigned int tile_bytes = 0;
    if constexpr (kSlots > 0) {
      tile_bytes = persistent_stream<Ops...>(stage.op, cta, task_params, false, 0u, 0u, slot_bytes);
    }
    if (task.stage != current) {
      current = task.stage;
      for (int j = i; j < end && j < i + prefetch_tasks && tasks[j].stage == current; ++j) {
        // Tasks with a tile have their weights on the way already.
        if (kSlots > 0 && tile_bytes > 0) break;
        persistent_prefetch<Ops...>(stage.op, persistent_cta(stage, tasks[j].index), task_params);
      }
      if (stage.wait >= 0) {
        if (threadIdx.x == 0) {
          const unsigned int target = replay * stage.wait_tasks;
          while (static_cast<int>(load_acquire(done + stage.wait) - target) < 0) __nanosleep(32);
        }
        __syncthreads();
      }
    }
    if (trace != nullptr && threadIdx.x == 0) ready = global_timer();
    if (kSlots > 0 && tile_bytes > 0) {
      const unsigned int slot = consumed % kBars;
      mbarrier_wait(shared_address(&slot_bars[slot]), (consumed / kBars) & 1u);
      if (trace != nullptr && threadIdx.x == 0) landed = global_timer();
      persistent_run_streamed<Ops...>(stage.op, cta, task_params,
                                      persistent_smem + ring_offset + slot * slot_bytes);
    } else {
      persistent_run<Ops...>(stage.op, cta, task_params);
    }
    __syncthreads();
    if (tile_bytes > 0) ++consumed;
    if (threadIdx.x == 0) {
      add_release(done + task.stage, 1u);
      if (trace != nullptr) {
        unsigned long long* t = trace + 4ll * i;
        t[0] = reached;
        t[1] = ready;
        t[2] = landed != 0 ? landed : ready;
        t[3] = global_timer();
      }
    }
    if constexpr (kSlots > 0) {
      if (threadIdx.x == kIssuer && tile_bytes > 0) {
        // The block has finished reading the slot: refill it with the next tile.
        fence_proxy_async_shared();
        issue_next();
      }
    }
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
