// The model group of tools/common_flags.h.
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "models/lowering.h"
#include "tools/common_flags.h"

ABSL_FLAG(std::string, model, "",
          "the model: a checkpoint directory (config.json and safetensors), its config.json, or "
          "a bundled config name such as qwen3-0.6b (models/configs/); a path that exists wins "
          "over a bundled name");

ABSL_FLAG(tileplan::tools::PositiveInt, tp, tileplan::tools::PositiveInt{1},
          "tensor-parallel ranks: plan (and, on the cpu backend, run) the model split over this "
          "many GPUs of one host (docs/plan.md, \"Tensor parallelism\"); heads, KV heads, "
          "widths and vocabulary must divide by it");
ABSL_FLAG(int64_t, rank, 0, "with --tp N: the rank, in [0, N), whose plan or graph a tool shows");

namespace tileplan::tools {

absl::StatusOr<models::TensorParallel> TensorParallelFromFlags() {
  const int64_t ranks = absl::GetFlag(FLAGS_tp).value;
  const int64_t rank = absl::GetFlag(FLAGS_rank);
  if (ranks > models::kMaxTensorParallelRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp is ", ranks, "; at most ", models::kMaxTensorParallelRanks, " ranks"));
  }
  if (rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank is ", rank, "; with --tp ", ranks, " it must be in [0, ", ranks, ")"));
  }
  return models::TensorParallel{ranks, rank};
}

absl::StatusOr<ModelArgument> ModelFromFlags() {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  return LoadModelArgument(model);
}

}  // namespace tileplan::tools
