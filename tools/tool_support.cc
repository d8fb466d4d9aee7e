#include "tools/tool_support.h"

#include <algorithm>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan::tools {

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

absl::StatusOr<ModelArgument> LoadModelArgument(const std::string& model) {
  namespace fs = std::filesystem;
  ModelArgument out;
  std::error_code ec;
  if (fs::exists(model, ec)) {
    TP_ASSIGN_OR_RETURN(out.config, models::LoadModelConfig(model));
    fs::path path = fs::absolute(model, ec).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();  // "DIR/"
    out.directory = fs::is_directory(path, ec) ? path : path.parent_path();
    out.name = out.directory.filename().string();
    out.has_weights = fs::exists(out.directory / "model.safetensors", ec) ||
                      fs::exists(out.directory / "model.safetensors.index.json", ec);
    return out;
  }
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(model);
  if (!config.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "--model ", model,
        " is neither an existing path nor a bundled config: ", config.status().message()));
  }
  out.config = *std::move(config);
  out.name = model;
  return out;
}

}  // namespace tileplan::tools
