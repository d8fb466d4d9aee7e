#include "tools/tool_support.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace tileplan::tools {

absl::StatusOr<int64_t> PositiveInt(absl::string_view flag, absl::string_view text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " needs a positive integer, got '", text, "'"));
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> PositiveList(absl::string_view flag, absl::string_view text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    TP_ASSIGN_OR_RETURN(int64_t v, PositiveInt(flag, part));
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<bool> PrefillLastTokenLogits(absl::string_view flag, absl::string_view text) {
  if (text == "all") return false;
  if (text == "last") return true;
  return absl::InvalidArgumentError(absl::StrCat(flag, " takes 'all' or 'last', got '", text, "'"));
}

planner::PlanOptions BenchmarkPlanOptions(const std::vector<int64_t>& prefill,
                                          const std::vector<int64_t>& decode, int64_t batch,
                                          bool prefill_last_token_logits, int64_t max_context) {
  planner::PlanOptions options;
  options.prefill_tokens = prefill;
  options.prefill_batch = batch;
  options.decode_batches = {batch};
  options.prefill_last_token_logits = prefill_last_token_logits;
  const int64_t longest_decode = *std::max_element(decode.begin(), decode.end());
  int64_t longest = longest_decode;
  for (int64_t t : prefill) longest = std::max(longest, t);
  options.max_context = max_context > 0 ? max_context : longest;
  options.decode_context = longest_decode;
  return options;
}

absl::StatusOr<models::ModelConfig> LoadModelArgument(const std::string& model, std::string* name) {
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) {
    std::filesystem::path path = std::filesystem::path(model).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();
    if (name != nullptr) *name = path.filename().string();
    return models::LoadModelConfig(model);
  }
  if (name != nullptr) *name = model;
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(model);
  if (!config.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "--model ", model,
        " is neither an existing path nor a bundled config: ", config.status().message()));
  }
  return config;
}

}  // namespace tileplan::tools
