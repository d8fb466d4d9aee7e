// The flags several tools share, each defined once so that its name, type, default and help
// cannot differ between tools (README.md, "Tools"; tests/tools/common_flags_test.cc checks
// every tool's --help).
//
// The definitions are grouped into one source file per group, in the static library
// tileplan_tool_flags: a tool that reads a flag links its group's object, and only the
// groups it links are its flags (a tool never accepts a common flag it does not use).
//
//   common_flags_model.cc    --model: every tool
//   common_flags_buckets.cc  --prefill, --batch: tileplan-opt, benchmark_transformer,
//                            autotune_regions
//   common_flags_plan.cc     --decode, --max-context, --prefill-logits, --target,
//                            --calibration (and the fusion switches):
//                            benchmark_transformer, autotune_regions
//   common_flags_store.cc    --tactic-cache, --freeze, --print-keys: benchmark_transformer,
//                            autotune_regions
//   common_flags_passes.cc   --print-after-all, --print-after: verify_model,
//                            benchmark_transformer, tileplan-opt
//   gpu_flags.cc             --pdl, --cuda-graphs (tools/gpu_flags.h, its own library
//                            because it links the GPU runtime): verify_model,
//                            benchmark_transformer
#ifndef TILEPLAN_TOOLS_COMMON_FLAGS_H_
#define TILEPLAN_TOOLS_COMMON_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "models/lowering.h"
#include "planner/pass.h"
#include "planner/plan_builder.h"
#include "tools/flag_types.h"
#include "tools/tool_support.h"

// model: a checkpoint directory, its config.json, or a bundled config name; tensor
// parallelism's ranks and which rank a tool shows.
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(tileplan::tools::PositiveInt, tp);
ABSL_DECLARE_FLAG(int64_t, rank);

// buckets: the prefill token buckets T and the batch B.
ABSL_DECLARE_FLAG(tileplan::tools::PositiveList, prefill);
ABSL_DECLARE_FLAG(tileplan::tools::PositiveInt, batch);

// plan: the decode contexts, the KV-cache length, the prefill phases' logits, the target.
ABSL_DECLARE_FLAG(tileplan::tools::PositiveList, decode);
ABSL_DECLARE_FLAG(std::optional<tileplan::tools::PositiveInt>, max_context);
ABSL_DECLARE_FLAG(std::string, prefill_logits);
ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, calibration);

// store: the SQLite tactic store, freezing it, and listing the plan's keys.
ABSL_DECLARE_FLAG(std::string, tactic_cache);
ABSL_DECLARE_FLAG(bool, freeze);
ABSL_DECLARE_FLAG(bool, print_keys);

// passes: printing the IR after the planner's passes.
ABSL_DECLARE_FLAG(bool, print_after_all);
ABSL_DECLARE_FLAG(std::vector<std::string>, print_after);

namespace tileplan::tools {

// model: LoadModelArgument(--model). InvalidArgument "--model is required" when it is empty.
absl::StatusOr<ModelArgument> ModelFromFlags();
// model: --tp and --rank as models::TensorParallel; InvalidArgument naming --rank when it is
// not in [0, --tp).
absl::StatusOr<models::TensorParallel> TensorParallelFromFlags();

// plan (and buckets): BenchmarkPlanOptions of --prefill, --decode, --batch, --prefill-logits
// and --max-context, the plans benchmark_transformer runs and autotune_regions tunes for.
// InvalidArgument naming --prefill-logits for a value other than all or last.
absl::StatusOr<planner::PlanOptions> PlanOptionsFromFlags();

// passes: what --print-after-all and --print-after ask to print, to stderr.
planner::PrintOptions PrintOptionsFromFlags();

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_COMMON_FLAGS_H_
