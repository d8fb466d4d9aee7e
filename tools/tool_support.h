// What several command-line tools share: positive-integer flags and the model argument.
#ifndef TILEPLAN_TOOLS_TOOL_SUPPORT_H_
#define TILEPLAN_TOOLS_TOOL_SUPPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/config.h"
#include "planner/plan_builder.h"

namespace tileplan::tools {

// InvalidArgument "<flag> needs a positive integer, got '<text>'" for anything else.
absl::StatusOr<int64_t> PositiveInt(absl::string_view flag, absl::string_view text);
// A comma-separated list of positive integers ("128,512").
absl::StatusOr<std::vector<int64_t>> PositiveList(absl::string_view flag, absl::string_view text);

// --prefill-logits: "all" (every token's logits) is false, "last" (each sequence's last
// token's only, planner::PlanOptions::prefill_last_token_logits) is true; InvalidArgument
// naming the flag otherwise.
absl::StatusOr<bool> PrefillLastTokenLogits(absl::string_view flag, absl::string_view text);

// The plan options benchmark_transformer plans with and autotune_regions tunes for, one
// function so that the tuner's keys are the ones the benchmark looks up: a prefill phase per
// T of `prefill` (each sequence's last token's logits only with `prefill_last_token_logits`)
// and one decode phase, all at `batch`; the KV cache as long as `max_context` when positive,
// else as the longest prefill or decode length; decode estimates at the longest decode
// context. REQUIRES: `decode` is not empty.
planner::PlanOptions BenchmarkPlanOptions(const std::vector<int64_t>& prefill,
                                          const std::vector<int64_t>& decode, int64_t batch,
                                          bool prefill_last_token_logits, int64_t max_context = 0);

// `model` is a checkpoint directory or config file when the path exists, else a bundled
// config name. `name` (optional) receives the directory's name or the bundled name.
// NotFound naming the argument when it is neither.
absl::StatusOr<models::ModelConfig> LoadModelArgument(const std::string& model,
                                                      std::string* name = nullptr);

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_TOOL_SUPPORT_H_
