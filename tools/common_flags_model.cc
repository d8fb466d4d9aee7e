// The model group of tools/common_flags.h.
#include "absl/flags/flag.h"
#include "tools/common_flags.h"

ABSL_FLAG(std::string, model, "",
          "the model: a checkpoint directory (config.json and safetensors), its config.json, or "
          "a bundled config name such as qwen3-0.6b (models/configs/); a path that exists wins "
          "over a bundled name");

namespace tileplan::tools {

absl::StatusOr<ModelArgument> ModelFromFlags() {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  return LoadModelArgument(model);
}

}  // namespace tileplan::tools
