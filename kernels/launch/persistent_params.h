// The persistent kernel's parameters and schedule records (kernels/launch/persistent.cuh),
// declared once for the template (NVRTC) and the host (kernels/step/persistent_step.cc).
#pragma once

#ifdef __CUDACC_RTC__
#include "kernel_params.h"
#else
#include "kernels/core/kernel_params.h"
#endif

namespace tileplan {

// One launch of a step, run as `tasks` CTAs of its grid by the persistent kernel's blocks.
struct PersistentStage {
  int op;                   // which task type of the kernel (its template arguments, in order)
  int wait;                 // the stage whose every task must be done first; -1: none
  unsigned int tasks;       // grid_x * grid_y * grid_z
  unsigned int wait_tasks;  // tasks of stage `wait` (0 when none)
  unsigned int grid_x, grid_y, grid_z;
  unsigned int reserved;
  long long params;  // byte offset of the launch's parameter struct in the parameter blob
};

// One CTA of a stage's grid, in the order a block runs them.
struct PersistentTask {
  int stage;
  unsigned int index;  // x + grid_x * (y + grid_y * z)
};

}  // namespace tileplan

// persistent_kernel
#define TILEPLAN_PERSISTENT_PARAMS(FIRST, NEXT)                   \
  FIRST(const void*, const PersistentStage* __restrict__, stages) \
  NEXT(const void*, const PersistentTask* __restrict__, tasks)    \
  NEXT(const int*, const int* __restrict__, block_tasks)          \
  NEXT(const void*, const char* __restrict__, params)             \
  NEXT(unsigned int*, unsigned int*, done)                        \
  NEXT(unsigned int*, unsigned int*, epoch)                       \
  NEXT(unsigned int*, unsigned int*, finished)                    \
  NEXT(int, int, prefetch_tasks)                                  \
  NEXT(int, int, ring_offset)                                     \
  NEXT(unsigned int, unsigned int, slot_bytes)                    \
  NEXT(unsigned long long*, unsigned long long*, trace)

namespace tileplan {

TILEPLAN_PARAMS_STRUCT(PersistentParams, TILEPLAN_PERSISTENT_PARAMS)

}  // namespace tileplan
