// The persistent decode schedule (docs/plan.md, "Persistent decode"): which runs of a decode
// phase's steps execute as one persistent kernel (kernels/launch/persistent.cuh), and how
// their CTAs are dealt to the kernel's blocks.
//
// A run is a maximal sequence of consecutive steps that each launch one kernel of a family
// with persistent tasks (KernelFamily::persistent_tasks) or launch nothing (views), holding
// at least two launching steps. Every stage of a run has the run's block size: the size most
// of its steps' tactics have; a step whose tactic has another is given the family's same
// tactic at the run's size (KernelFamily::WithBlockThreads, re-validated and re-estimated,
// source COST_MODEL), or, if the family cannot, ends the run; so is a step whose tactic runs
// in thread-block clusters given the family's tactic without them (WithoutClusters): a
// block runs its tasks one CTA at a time. Stage s waits for stage s - 1
// (the stream order the steps had as kernels, so buffers the arena shares between steps are
// never read and written at once), and its CTAs are dealt round-robin to the blocks from
// where stage s - 1's ended, spreading every stage over all SMs.
//
// Estimate, from the uncalibrated cost model alike for stages and kernels (the calibration's
// samples are of kernels): a stage costs the larger of its ideal time, the step's estimate
// less one graph node, and kTaskRoundMicros for each round of tasks a block runs one after
// another (ceil(tasks / blocks)), plus kStageSyncMicros, the handover through a counter
// instead of a kernel boundary; the run costs its stages plus one graph node, and
// PersistentRun.kernels_us is the same steps' estimate as kernels. DECODE_BACKEND_AUTO keeps
// a run only where it is the lower.
#ifndef TILEPLAN_PLANNER_PERSISTENT_SCHEDULE_H_
#define TILEPLAN_PLANNER_PERSISTENT_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "planner/plan.pb.h"
#include "planner/tactic_selection.h"
#include "targets/target.pb.h"

namespace tileplan::planner {

// The assumed cost of one stage's handover inside the persistent kernel (a release, an
// acquire spin, a block barrier), in microseconds.
inline constexpr double kStageSyncMicros = 0.5;
// The time of one task in a block, from loading its inputs to releasing its counter: the
// measured Qwen3-0.6B decode step at 4 blocks per SM (docs/PERF.md, "A persistent decode
// kernel": 0.99 ms for 28 layers of 9 rounds) spends about 3.9 us per round of tasks,
// handover included, since a block has one task's loads in flight at a time.
inline constexpr double kTaskRoundMicros = 3.4;
// The same for a task whose weights were streamed into shared memory ahead of it: its loads
// no longer wait on memory, but its inputs from the step before, the block's barriers and the
// release remain. Fitted to the measured Qwen3-0.6B step on the H100 (docs/PERF.md, "The
// persistent kernel's weight stream": 1.10 ms with one round of tasks per stage, 140 stages,
// less the steps around the run).
inline constexpr double kStreamedTaskMicros = 6.8;
// The weight stream's limits, the kernel's (kernels/core/kernel_family.h): at most
// kMaxStreamSlots slots; slots and the ring's start multiples of kStreamAlignment bytes.
using kernels::kMaxStreamSlots;
using kernels::kStreamAlignment;

// The shared memory a run keeps in every block for the bodies' static shared memory and the
// stream's barriers, beside their dynamic shared memory.
inline constexpr int64_t kStaticSharedBytes = 1024;

// The weight stream's slots by default (PersistentOptions::stream_slots).
inline constexpr int kDefaultStreamSlots = 2;
// With the weight stream, the threads of a run's blocks per SM by default: two blocks of 128
// threads measured 3.5-4% faster than one on an H100 and four slower (docs/PERF.md, "The
// persistent kernel at several blocks per SM"); at 256 threads per SM every thread may still
// hold 255 registers, where four blocks of 128 capped them at 128 and slowed the attention.
inline constexpr int kStreamThreadsPerSm = 256;

struct PersistentOptions {
  proto::PlanOptions::DecodeBackend backend = proto::PlanOptions::DECODE_BACKEND_KERNELS;
  int blocks_per_sm = 0;   // 0: the rule (kStreamThreadsPerSm threads' worth with the stream)
  int stream_slots = kDefaultStreamSlots;  // the weight stream's slots; 0: no stream
  int prefetch_tasks = 4;  // PersistentRun.prefetch_tasks
};

// The runs of a decode phase whose region i was given choices[i]; the choices of steps whose
// block size changed are updated. An empty list for DECODE_BACKEND_KERNELS. Errors from
// re-estimating a step name its region.
absl::StatusOr<std::vector<proto::PersistentRun>> PlanPersistentRuns(
    const kernels::BoundGraph& graph, std::vector<TacticChoice>& choices,
    const targets::TargetDescription& target, const PersistentOptions& options);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PERSISTENT_SCHEDULE_H_
