// What several command-line tools share beyond their flags: the model argument and the plan
// options of the benchmark and the tuner.
#ifndef TILEPLAN_TOOLS_TOOL_SUPPORT_H_
#define TILEPLAN_TOOLS_TOOL_SUPPORT_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/config.h"
#include "planner/plan_builder.h"

namespace tileplan::tools {

// The plan options benchmark_transformer plans with and autotune_regions tunes for, one
// function so that the tuner's keys are the ones the benchmark looks up: a prefill phase per
// T of `prefill` (each sequence's last token's logits only with `prefill_last_token_logits`)
// and one decode phase, all at `batch`; the KV cache as long as `max_context` when positive,
// else as the longest prefill or decode length; decode estimates at the longest decode
// context. REQUIRES: `decode` is not empty.
planner::PlanOptions BenchmarkPlanOptions(const std::vector<int64_t>& prefill,
                                          const std::vector<int64_t>& decode, int64_t batch,
                                          bool prefill_last_token_logits, int64_t max_context = 0);

// What --model names.
struct ModelArgument {
  models::ModelConfig config;
  std::string name;  // the directory's name (a config file's directory's), or the bundled name
  // The checkpoint directory (the argument, or the config file's directory); empty for a
  // bundled config, which has no weights.
  std::filesystem::path directory;
  // Whether `directory` holds weights: model.safetensors or model.safetensors.index.json.
  bool has_weights = false;
};

// `model` is a checkpoint directory or its config file when the path exists, else a bundled
// config name. NotFound naming the argument when it is neither; the config's own errors
// (InvalidArgument naming the field) as they are.
absl::StatusOr<ModelArgument> LoadModelArgument(const std::string& model);

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_TOOL_SUPPORT_H_
