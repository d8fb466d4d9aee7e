#include "planner/persistent_schedule.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/align.h"
#include "base/status_macros.h"
#include "planner/cost_model.h"

namespace tileplan::planner {
namespace {

using kernels::BoundRegion;

// What a step can be in a run: nothing to launch, one launch of a family with persistent
// tasks (and its block size), or a step that ends runs.
struct StepRole {
  enum Kind { kView, kTask, kOther } kind = kOther;
  int64_t threads = 0;
  // Set for a task whose tactic runs in thread-block clusters: the family's tactic without
  // them (KernelFamily::WithoutClusters), which the task takes in a run.
  std::optional<kernels::Tactic> unclustered;
};

constexpr std::array<int64_t, 3> kNoCluster = {1, 1, 1};

StepRole RoleOf(const TacticChoice& c, const BoundRegion& region) {
  if (c.estimate.launches == 0) return {StepRole::kView, 0};
  if (c.estimate.launches != 1 || !c.family->persistent_tasks() ||
      c.family->launch_kind() != kernels::LaunchKind::kTemplates) {
    return {};
  }
  const kernels::LaunchGeometry g = c.family->Geometry(c.tactic, region);
  if (g.block[1] != 1 || g.block[2] != 1 || g.block[0] <= 0) return {};
  // The persistent kernel's blocks run tasks one CTA at a time, never as clusters.
  if (g.cluster == kNoCluster) return {StepRole::kTask, g.block[0]};
  std::optional<kernels::Tactic> unclustered = c.family->WithoutClusters(c.tactic);
  if (!unclustered.has_value()) return {};
  return {StepRole::kTask, g.block[0], std::move(unclustered)};
}

// The block size most of the steps' launches have (the smaller on a tie).
int64_t CommonThreads(const std::vector<StepRole>& roles, int first, int last) {
  std::map<int64_t, int> count;
  for (int i = first; i <= last; ++i) {
    if (roles[static_cast<size_t>(i)].kind == StepRole::kTask)
      ++count[roles[static_cast<size_t>(i)].threads];
  }
  int64_t best = 0;
  int most = 0;
  for (const auto& [threads, n] : count) {
    if (n > most) best = threads, most = n;
  }
  return best;
}

// `choice` under `tactic` (validated by the caller), estimated again by the cost model, with a
// `considered` line beginning "persistent kernel: " and ending with the estimate.
absl::Status Retactic(TacticChoice& choice, kernels::Tactic tactic, const BoundRegion& region,
                      const targets::TargetDescription& target, absl::string_view why) {
  choice.tactic = std::move(tactic);
  TP_ASSIGN_OR_RETURN(choice.estimate, EstimateStep(*choice.family, choice.tactic, region, target,
                                                    LaunchMode::kGraph));
  choice.source = TacticSource::kCostModel;
  choice.measured_us.reset();
  choice.considered.push_back(absl::StrCat("persistent kernel: ", choice.family->name(), " ", why,
                                           ": ", choice.estimate.us, " us"));
  return absl::OkStatus();
}

// `choice` (of role `role`) as a task of a run of `threads` threads per block: the family's
// tactic without thread-block clusters where it has them, and changed in its block size where
// that differs, validated and estimated; nullopt when the family has none that validates.
absl::StatusOr<std::optional<TacticChoice>> AsTask(const TacticChoice& choice,
                                                   const StepRole& role, const BoundRegion& region,
                                                   int64_t threads,
                                                   const targets::TargetDescription& target) {
  std::optional<kernels::Tactic> tactic = choice.tactic;
  std::vector<std::string> why;
  if (role.unclustered.has_value()) {
    tactic = role.unclustered;
    why.push_back("without thread-block clusters");
  }
  if (tactic.has_value() && choice.family->Geometry(*tactic, region).block[0] != threads) {
    tactic = choice.family->WithBlockThreads(*tactic, threads);
    why.push_back(absl::StrCat("at ", threads, " threads per block, as every stage of its run"));
  }
  if (!tactic.has_value() || !choice.family->ValidateTactic(*tactic, region, target).ok()) {
    return std::nullopt;
  }
  const kernels::LaunchGeometry g = choice.family->Geometry(*tactic, region);
  if (g.block[0] != threads || g.cluster != kNoCluster) return std::nullopt;
  TacticChoice out = choice;
  TP_RETURN_IF_ERROR(
      Retactic(out, *std::move(tactic), region, target, absl::StrJoin(why, ", ")));
  return std::optional<TacticChoice>(std::move(out));
}

// A stage's estimate in a kernel of `blocks` blocks (persistent_schedule.h), from the
// uncalibrated cost model for every tactic alike (the calibration's samples are of kernels).
absl::StatusOr<double> StageMicros(const TacticChoice& c, const BoundRegion& region, int64_t blocks,
                                   bool streamed, const targets::TargetDescription& target) {
  TP_ASSIGN_OR_RETURN(const CostEstimate kernel,
                      EstimateStep(*c.family, c.tactic, region, target, LaunchMode::kGraph));
  const double ideal = IdealMicros(c.family->Work(c.tactic, region), target);
  const int64_t tasks = c.family->Geometry(c.tactic, region).ctas();
  const double rounds = static_cast<double>((tasks + blocks - 1) / blocks);
  return std::max({ideal, kernel.us - LaunchMicros(target, LaunchMode::kGraph),
                   rounds * (streamed ? kStreamedTaskMicros : kTaskRoundMicros)}) +
         kStageSyncMicros;
}

}  // namespace

absl::StatusOr<std::vector<proto::PersistentRun>> PlanPersistentRuns(
    const kernels::BoundGraph& graph, std::vector<TacticChoice>& choices,
    const targets::TargetDescription& target, const PersistentOptions& options) {
  std::vector<proto::PersistentRun> runs;
  if (options.backend == proto::PlanOptions::DECODE_BACKEND_KERNELS) return runs;
  const int n = static_cast<int>(choices.size());
  std::vector<StepRole> roles;
  for (int i = 0; i < n; ++i)
    roles.push_back(RoleOf(choices[static_cast<size_t>(i)], BoundRegion(graph, i)));

  int i = 0;
  while (i < n) {
    // A candidate run: steps [first, last] of tasks and views.
    if (roles[static_cast<size_t>(i)].kind != StepRole::kTask) {
      ++i;
      continue;
    }
    const int first = i;
    int last = i;
    while (last + 1 < n && roles[static_cast<size_t>(last + 1)].kind != StepRole::kOther) ++last;
    const int64_t threads = CommonThreads(roles, first, last);
    // The choices as they were, for the steps as kernels and for a run given up.
    const std::vector<TacticChoice> before(choices.begin() + first, choices.begin() + last + 1);
    auto give_up = [&] { std::copy(before.begin(), before.end(), choices.begin() + first); };
    // Steps at another block size, or in thread-block clusters, become the run's tasks, or
    // end it.
    int end = first;
    for (; end <= last; ++end) {
      StepRole& role = roles[static_cast<size_t>(end)];
      if (role.kind != StepRole::kTask || (role.threads == threads && !role.unclustered)) {
        continue;
      }
      const BoundRegion region(graph, end);
      TP_ASSIGN_OR_RETURN(
          std::optional<TacticChoice> moved,
          AsTask(choices[static_cast<size_t>(end)], role, region, threads, target));
      if (!moved.has_value()) break;
      choices[static_cast<size_t>(end)] = *std::move(moved);
      role.threads = threads;
      role.unclustered.reset();
    }
    if (end == first) {
      // The first step itself cannot take the block size the others have: it stays a kernel,
      // and a run may start after it.
      i = first + 1;
      continue;
    }
    // Trailing views do not belong to the run.
    int run_last = end - 1;
    while (run_last > first && roles[static_cast<size_t>(run_last)].kind == StepRole::kView)
      --run_last;
    i = end;

    // Blocks per SM: the option, else kStreamThreadsPerSm threads' worth with the weight
    // stream (the blocks share the ring's shared memory), 512 threads' worth without.
    const bool stream = options.stream_slots > 0;
    int per_sm =
        options.blocks_per_sm > 0
            ? options.blocks_per_sm
            : std::max<int>(1, static_cast<int>((stream ? kStreamThreadsPerSm : 512) / threads));
    // Every block is resident at once (a cooperative launch): no more threads than an SM holds
    // (none, and the run is given up, for a block larger than that).
    if (target.max_threads_per_sm() > 0) {
      per_sm = std::min<int>(per_sm, static_cast<int>(target.max_threads_per_sm() / threads));
    }
    auto run_shared = [&] {
      int64_t shared = 0;
      for (int s = first; s <= run_last; ++s) {
        if (roles[static_cast<size_t>(s)].kind != StepRole::kTask) continue;
        const TacticChoice& c = choices[static_cast<size_t>(s)];
        shared = std::max(shared,
                          c.family->Geometry(c.tactic, BoundRegion(graph, s)).dynamic_shared_memory_bytes);
      }
      return shared;
    };
    int64_t shared = run_shared();
    // A block's share of the SM: 1 KiB kept for the bodies' static shared memory and the slots'
    // barriers, beside the shared memory the driver reserves for every resident block (what
    // the SM has beyond a block's opt-in limit).
    const int64_t reserved =
        target.shared_memory_per_sm_bytes() - target.shared_memory_per_block_bytes();
    while (per_sm > 0 && per_sm * (shared + kStaticSharedBytes + reserved) >
                             target.shared_memory_per_sm_bytes()) {
      --per_sm;
    }
    if (per_sm == 0) {
      give_up();
      continue;
    }
    const int64_t blocks = int64_t{target.sm_count()} * per_sm;
    // The weight stream's slots: what a block's shared memory has left after the stages' own.
    auto slot_bytes_for = [&](int64_t stage_shared) -> int64_t {
      // A block's dynamic and static shared memory together stay within the opt-in limit and
      // its share of the SM.
      const int64_t block =
          std::min<int64_t>(target.shared_memory_per_block_bytes(),
                            target.shared_memory_per_sm_bytes() / per_sm - reserved) -
          kStaticSharedBytes;
      const int64_t ring = block - AlignUp(stage_shared, kStreamAlignment);
      return ring <= 0 ? 0 : ring / options.stream_slots / kStreamAlignment * kStreamAlignment;
    };
    int64_t slot_bytes = stream ? slot_bytes_for(shared) : 0;
    if (slot_bytes > 0) {
      // Steps whose family streams its tiles take the tactic that fits the slots.
      for (int s = first; s <= run_last; ++s) {
        if (roles[static_cast<size_t>(s)].kind != StepRole::kTask) continue;
        const BoundRegion region(graph, s);
        TacticChoice& c = choices[static_cast<size_t>(s)];
        std::optional<kernels::Tactic> tiled =
            c.family->ForStream(c.tactic, region, slot_bytes, blocks);
        if (!tiled.has_value() || *tiled == c.tactic ||
            !c.family->ValidateTactic(*tiled, region, target).ok() ||
            c.family->Geometry(*tiled, region).block[0] != threads) {
          continue;
        }
        const int64_t tile = c.family->StreamTileBytes(*tiled, region);
        TP_RETURN_IF_ERROR(Retactic(c, *std::move(tiled), region, target,
                                    absl::StrCat("with tiles of ", tile,
                                                 " bytes, streamed through slots of ", slot_bytes)));
      }
      shared = run_shared();
      slot_bytes = slot_bytes_for(shared);
    }

    proto::PersistentRun run;
    run.set_first_step(first);
    run.set_last_step(run_last);
    run.set_threads(static_cast<int32_t>(threads));
    double kernels_us = 0, stages_us = 0;
    for (int s = first; s <= run_last; ++s) {
      {
        // The steps as kernels in the same frame as the stages: the uncalibrated model.
        const TacticChoice& k = before[static_cast<size_t>(s - first)];
        TP_ASSIGN_OR_RETURN(
            const CostEstimate e,
            EstimateStep(*k.family, k.tactic, BoundRegion(graph, s), target, LaunchMode::kGraph));
        kernels_us += e.us;
      }
      if (roles[static_cast<size_t>(s)].kind != StepRole::kTask) continue;
      const TacticChoice& c = choices[static_cast<size_t>(s)];
      proto::PersistentStage* stage = run.add_stages();
      stage->set_step(s);
      stage->set_tasks(c.family->Geometry(c.tactic, BoundRegion(graph, s)).ctas());
      stage->set_wait(run.stages_size() - 2);
    }
    if (run.stages_size() < 2) {
      give_up();
      continue;
    }
    int64_t streamed_stages = 0;
    for (proto::PersistentStage& stage : *run.mutable_stages()) {
      const TacticChoice& c = choices[static_cast<size_t>(stage.step())];
      const BoundRegion region(graph, stage.step());
      const int64_t tile = c.family->StreamTileBytes(c.tactic, region);
      const bool streamed = slot_bytes > 0 && tile > 0 && tile <= slot_bytes;
      streamed_stages += streamed ? 1 : 0;
      TP_ASSIGN_OR_RETURN(const double stage_us, StageMicros(c, region, blocks, streamed, target));
      stage.set_estimated_us(stage_us);
      stages_us += stage_us;
    }
    if (slot_bytes > 0) {
      run.set_stream_slots(options.stream_slots);
      run.set_stream_slot_bytes(slot_bytes);
      run.set_streamed_stages(streamed_stages);
    }
    run.set_blocks_per_sm(per_sm);
    run.set_blocks(blocks);
    run.set_dynamic_shared_memory_bytes(shared);
    run.set_prefetch_tasks(options.prefetch_tasks);
    run.set_kernels_us(kernels_us);
    run.set_estimated_us(stages_us + LaunchMicros(target, LaunchMode::kGraph));
    if (options.backend == proto::PlanOptions::DECODE_BACKEND_AUTO &&
        run.estimated_us() >= run.kernels_us()) {
      give_up();
      continue;
    }
    // Deal the tasks: stage s starts at the block after stage s - 1's last task. Block b runs
    // on SM b % sm_count (blocks are placed round-robin), so per-SM figures sum its blocks.
    std::vector<int64_t> sm_tasks(static_cast<size_t>(target.sm_count()), 0);
    std::vector<double> sm_bytes(static_cast<size_t>(target.sm_count()), 0);
    int64_t next = 0;
    for (proto::PersistentStage& stage : *run.mutable_stages()) {
      stage.set_first_block(next);
      const TacticChoice& c = choices[static_cast<size_t>(stage.step())];
      const double per_task =
          static_cast<double>(c.estimate.bytes) / static_cast<double>(stage.tasks());
      for (int64_t t = 0; t < stage.tasks(); ++t) {
        const size_t sm = static_cast<size_t>((next + t) % run.blocks() % target.sm_count());
        ++sm_tasks[sm];
        sm_bytes[sm] += per_task;
      }
      next = (next + stage.tasks()) % run.blocks();
    }
    const auto [min_t, max_t] = std::minmax_element(sm_tasks.begin(), sm_tasks.end());
    const auto [min_b, max_b] = std::minmax_element(sm_bytes.begin(), sm_bytes.end());
    run.set_min_sm_tasks(*min_t);
    run.set_max_sm_tasks(*max_t);
    run.set_min_sm_bytes(static_cast<int64_t>(*min_b));
    run.set_max_sm_bytes(static_cast<int64_t>(*max_b));
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace tileplan::planner
