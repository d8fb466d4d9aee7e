// What several command-line tools share: positive-integer flags and the model argument.
#ifndef TILEPLAN_TOOLS_TOOL_SUPPORT_H_
#define TILEPLAN_TOOLS_TOOL_SUPPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/config.h"

namespace tileplan::tools {

// InvalidArgument "<flag> needs a positive integer, got '<text>'" for anything else.
absl::StatusOr<int64_t> PositiveInt(absl::string_view flag, absl::string_view text);
// A comma-separated list of positive integers ("128,512").
absl::StatusOr<std::vector<int64_t>> PositiveList(absl::string_view flag, absl::string_view text);

// --prefill-logits: "all" (every token's logits) is false, "last" (each sequence's last
// token's only, planner::PlanOptions::prefill_last_token_logits) is true; InvalidArgument
// naming the flag otherwise.
absl::StatusOr<bool> PrefillLastTokenLogits(absl::string_view flag, absl::string_view text);

// `model` is a checkpoint directory or config file when the path exists, else a bundled
// config name. `name` (optional) receives the directory's name or the bundled name.
// NotFound naming the argument when it is neither.
absl::StatusOr<models::ModelConfig> LoadModelArgument(const std::string& model,
                                                      std::string* name = nullptr);

}  // namespace tileplan::tools

#endif  // TILEPLAN_TOOLS_TOOL_SUPPORT_H_
